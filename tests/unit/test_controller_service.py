"""The controller service in-process, under trio's MockClock: its real store in tmp_path, its
decisions delivered over fake broker connections (the channel manager's connection factory)
instead of sockets. Time is the mock clock's, so a session expiry is exact and instant."""

import datetime
import uuid

import trio
import trio.testing

from minibroker.cluster.controller_client import build_request
from minibroker.common.config import BrokerConfig
from minibroker.common.metrics import BrokerMetrics
from minibroker.controller.service import ControllerService
from minibroker.controller.store import STATE_FILE, ControllerStore, LocalStore
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.replication import log_io
from tests.unit.replication_harness import trio_ms

CLUSTER_ID = "mock-cluster"
HEARTBEAT_MS = 500
SESSION_MS = 3000


class FakeBroker:
    """A broker as the controller's channel sees it: it records every request and answers
    without an error code (as an AlterConfigs answer has none)."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.requests: list = []

    async def request(self, request):
        await trio.lowlevel.checkpoint()
        self.requests.append(request)
        return None

    async def aclose(self) -> None:
        pass

    def of_type(self, api_key: int) -> list:
        return [r for r in self.requests if r.__api_key__ == api_key]

    def leaders(self) -> dict[tuple[str, int], int]:
        """The leader of each partition, as the newest LeaderAndIsr told this broker."""
        seen: dict[tuple[str, int], int] = {}
        for request in self.of_type(ApiKey.LEADER_AND_ISR):
            for topic in request.topic_states:
                for state in topic.partition_states:
                    seen[(topic.topic_name, state.partition_index)] = state.leader
        return seen


class Cluster:
    """A controller service and the fake brokers its channels reach."""

    def __init__(self, tmp_path, **settings) -> None:
        self.brokers = {node_id: FakeBroker(node_id) for node_id in (1, 2, 3)}
        config = BrokerConfig(
            node_id=0,
            process_roles=frozenset({"controller"}),
            log_dirs=(tmp_path,),
            broker_heartbeat_interval_ms=HEARTBEAT_MS,
            broker_session_timeout_ms=SESSION_MS,
            auto_leader_rebalance_enable=False,
            **settings,
        )
        self.service = ControllerService(
            config,
            CLUSTER_ID,
            clock_ms=trio_ms,
            metrics=BrokerMetrics(),
            connect=self._connect,
            # The state file written on the loop: a worker thread's real time would let the
            # autojumping clock expire the brokers' sessions meanwhile.
            store=LocalStore(tmp_path, run_blocking=log_io.inline),
        )
        self.epochs: dict[int, int] = {}
        self.incarnations: dict[int, uuid.UUID] = {}

    async def _connect(self, broker_info):
        broker = self.brokers[broker_info.node_id]
        return broker

    async def register(self, node_id: int, same_process: bool = False) -> None:
        """Register a new process of the broker, or again the same one (a lost session)."""
        if not same_process or node_id not in self.incarnations:
            self.incarnations[node_id] = uuid.uuid4()
        answer = await self.service.broker_registration(
            build_request(
                ApiKey.BROKER_REGISTRATION,
                {
                    "broker_id": node_id,
                    "cluster_id": CLUSTER_ID,
                    "incarnation_id": self.incarnations[node_id],
                    "listeners": [
                        {
                            "name": "PLAINTEXT",
                            "host": "127.0.0.1",
                            "port": 9000 + node_id,
                            "security_protocol": 0,
                        }
                    ],
                    "features": (),
                    "rack": None,
                },
            )
        )
        assert answer["error_code"] == Error.NONE
        self.epochs[node_id] = answer["broker_epoch"]

    async def heartbeat(self, node_id: int, want_shut_down: bool = False) -> dict:
        return await self.service.broker_heartbeat(
            build_request(
                ApiKey.BROKER_HEARTBEAT,
                {
                    "broker_id": node_id,
                    "broker_epoch": self.epochs[node_id],
                    "current_metadata_offset": 0,
                    "want_fence": False,
                    "want_shut_down": want_shut_down,
                },
            )
        )

    async def keep_alive(self, node_ids, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            for node_id in sorted(node_ids):
                answer = await self.heartbeat(node_id)
                assert answer["error_code"] == Error.NONE
            await trio.sleep(HEARTBEAT_MS / 1000)

    async def create_topic(self, name: str, replicas: list[int]) -> dict:
        return await self.service.create_topics(
            build_request(
                ApiKey.CREATE_TOPICS,
                {
                    "topics": [
                        {
                            "name": name,
                            "num_partitions": -1,
                            "replication_factor": -1,
                            "assignments": [{"partition_index": 0, "broker_ids": replicas}],
                            "configs": (),
                        }
                    ],
                    "timeout_ms": 5000,
                    "validate_only": False,
                },
            )
        )

    def leader(self, topic: str, index: int = 0) -> int:
        return self.service.state.topics[topic].partitions[index].leader


async def started(nursery, tmp_path, **settings) -> Cluster:
    cluster = Cluster(tmp_path, **settings)
    await nursery.start(cluster.service.run)
    for node_id in cluster.brokers:
        await cluster.register(node_id)
    return cluster


async def test_a_created_topic_reaches_its_replicas_as_leader_and_isr(autojump_clock, tmp_path):
    async with trio.open_nursery() as nursery:
        cluster = await started(nursery, tmp_path)
        answer = await cluster.create_topic("orders", [2, 3])
        assert answer["topics"][0]["error_code"] == Error.NONE
        # The answer waited for the brokers: the replicas have their LeaderAndIsr now.
        for node_id in (2, 3):
            assert cluster.brokers[node_id].leaders() == {("orders", 0): 2}
        assert cluster.brokers[1].leaders() == {}
        # Every live broker hears of the topic by UpdateMetadata, the newest picture last.
        for broker in cluster.brokers.values():
            newest = broker.of_type(ApiKey.UPDATE_METADATA)[-1]
            assert [t.topic_name for t in newest.topic_states] == ["orders"]
            assert sorted(b.id_ for b in newest.live_brokers) == [1, 2, 3]
        # The decision was saved before it was sent.
        saved = ControllerStore(tmp_path / STATE_FILE).load()
        assert saved.topics["orders"].partitions[0].replicas == [2, 3]
        nursery.cancel_scope.cancel()


async def test_a_broker_that_misses_its_session_is_fenced_and_its_leadership_moves(
    autojump_clock, tmp_path
):
    async with trio.open_nursery() as nursery:
        cluster = await started(nursery, tmp_path)
        alive = {1, 2, 3}
        await nursery.start(cluster.keep_alive, alive)
        await cluster.create_topic("orders", [3, 1, 2])
        assert cluster.leader("orders") == 3
        await trio.sleep(SESSION_MS / 1000 * 2)
        assert not cluster.service.state.brokers[3].fenced  # heartbeats keep it in
        # Broker 3 stops heartbeating; 1 and 2 go on.
        alive.discard(3)
        stopped_at = trio.current_time()
        while not cluster.service.state.brokers[3].fenced:
            await trio.sleep(0.1)
        waited = trio.current_time() - stopped_at
        # Fenced once its session ran out, not before, and within one check after.
        assert SESSION_MS / 1000 - HEARTBEAT_MS / 1000 <= waited <= SESSION_MS / 1000 + 1
        assert not cluster.service.state.brokers[1].fenced
        assert cluster.leader("orders") == 1
        assert cluster.service.state.topics["orders"].partitions[0].isr == [1, 2]
        await trio.testing.wait_all_tasks_blocked()
        assert cluster.brokers[1].leaders()[("orders", 0)] == 1
        assert cluster.brokers[2].leaders()[("orders", 0)] == 1
        # The fenced broker is not told anything more.
        assert cluster.brokers[3].leaders()[("orders", 0)] == 3
        # A fenced broker's heartbeat is refused: it must register again.
        assert (await cluster.heartbeat(3))["error_code"] == Error.STALE_BROKER_EPOCH
        nursery.cancel_scope.cancel()


async def test_a_held_up_controller_reads_the_waiting_heartbeats_before_it_fences(
    autojump_clock, tmp_path
):
    """The controller's loop held up for longer than a session (the clock jumps while every
    task waits): the heartbeats that come right after are read before any broker is fenced,
    and a broker that stays silent is fenced one check later. On main the first check after
    the stall fenced all three."""
    async with trio.open_nursery() as nursery:
        cluster = await started(nursery, tmp_path)
        await cluster.create_topic("orders", [3, 1, 2])
        for _ in range(4):
            for node_id in (1, 2, 3):
                assert (await cluster.heartbeat(node_id))["error_code"] == Error.NONE
            await trio.sleep(HEARTBEAT_MS / 1000)
        autojump_clock.jump(SESSION_MS / 1000 + 1)
        await trio.sleep(0.05)  # the heartbeats that were waiting, read now
        for node_id in (1, 2):
            assert (await cluster.heartbeat(node_id))["error_code"] == Error.NONE
        assert [n for n, b in cluster.service.state.brokers.items() if b.fenced] == []
        # Broker 3 stays silent after the stall: fenced at the next check.
        await trio.sleep(HEARTBEAT_MS / 1000 * 1.5)
        assert cluster.service.state.brokers[3].fenced
        assert not cluster.service.state.brokers[1].fenced
        assert cluster.leader("orders") == 1
        nursery.cancel_scope.cancel()


async def test_a_controlled_shutdown_moves_leadership_and_tells_the_leaving_broker(
    autojump_clock, tmp_path
):
    async with trio.open_nursery() as nursery:
        cluster = await started(nursery, tmp_path)
        await cluster.create_topic("orders", [2, 3])
        before = trio.current_time()
        answer = await cluster.heartbeat(2, want_shut_down=True)
        assert answer["should_shut_down"] is True
        assert answer["error_code"] == Error.NONE
        # No session timeout was waited for: the brokers had it at once.
        assert trio.current_time() - before < 1
        assert cluster.leader("orders") == 3
        assert cluster.service.state.brokers[2].fenced
        # The leaving broker was told (even though fenced) that it leads nothing now.
        assert cluster.brokers[2].leaders()[("orders", 0)] == 3
        assert cluster.brokers[3].leaders()[("orders", 0)] == 3
        newest = cluster.brokers[1].of_type(ApiKey.UPDATE_METADATA)[-1]
        assert sorted(b.id_ for b in newest.live_brokers) == [1, 3]
        nursery.cancel_scope.cancel()


async def test_only_the_newest_update_metadata_is_sent_after_a_burst(autojump_clock, tmp_path):
    async with trio.open_nursery() as nursery:
        cluster = await started(nursery, tmp_path)
        await trio.testing.wait_all_tasks_blocked()
        sent_before = len(cluster.brokers[1].of_type(ApiKey.UPDATE_METADATA))
        # Ten decisions queued before any channel runs: one UpdateMetadata each, not ten.
        for _ in range(10):
            cluster.service.propagate([])
        await trio.testing.wait_all_tasks_blocked()
        assert len(cluster.brokers[1].of_type(ApiKey.UPDATE_METADATA)) == sent_before + 1
        nursery.cancel_scope.cancel()


def told_elr(broker: FakeBroker, topic: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ELR and last-known ELR of the topic's partition 0 in the newest UpdateMetadata."""
    newest = broker.of_type(ApiKey.UPDATE_METADATA)[-1]
    (state,) = next(t for t in newest.topic_states if t.topic_name == topic).partition_states
    return tuple(state.eligible_leader_replicas), tuple(state.last_known_elr)


async def test_a_min_insync_replicas_change_clears_the_elr_at_once(autojump_clock, tmp_path):
    """Kafka 4.4's ConfigurationControlManager.createClearElrRecordsAsNeeded: changing a
    topic's min.insync.replicas clears its partitions' ELR in the same step (a ClearElrRecord),
    saved and told to the brokers, not at the partition's next ISR change."""
    async with trio.open_nursery() as nursery:
        cluster = await started(nursery, tmp_path, min_insync_replicas=2)
        alive = {1, 2, 3}
        await nursery.start(cluster.keep_alive, alive)
        await cluster.create_topic("orders", [1, 2, 3])
        state = cluster.service.state
        partition = lambda: state.topics["orders"].partitions[0]  # noqa: E731
        for node_id in (2, 3):
            alive.discard(node_id)
            while not state.brokers[node_id].fenced:
                await trio.sleep(0.1)
        assert (partition().isr, partition().eligible_leader_replicas) == ([1], [3])
        epoch = partition().partition_epoch
        answer = await cluster.service.alter_configs(
            codec.build(
                codec.request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1),
                {
                    "resources": [
                        {
                            "resource_type": 2,  # TOPIC
                            "resource_name": "orders",
                            "configs": [
                                {"name": "min.insync.replicas", "config_operation": 0, "value": "1"}
                            ],
                        }
                    ],
                    "validate_only": False,
                },
            ),
            incremental=True,
        )
        assert answer["responses"][0]["error_code"] == Error.NONE
        assert (partition().isr, partition().eligible_leader_replicas) == ([1], [])
        assert partition().partition_epoch == epoch + 1
        saved = ControllerStore(tmp_path / STATE_FILE).load().topics["orders"].partitions[0]
        assert saved.eligible_leader_replicas == []
        await trio.testing.wait_all_tasks_blocked()
        assert told_elr(cluster.brokers[1], "orders") == ((), ())
        nursery.cancel_scope.cancel()


async def test_eligible_leader_replicas_follow_sessions_and_go_with_the_feature(
    autojump_clock, tmp_path
):
    """KIP-966 through the service: the controller's own min.insync.replicas (2), sessions
    expiring one by one, the ELR saved and told to brokers, a leader elected from it when an
    eligible broker's same process registers again, and the ELR dropped when
    ``kafka-features`` turns the feature off."""
    async with trio.open_nursery() as nursery:
        cluster = await started(nursery, tmp_path, min_insync_replicas=2)
        alive = {1, 2, 3}
        await nursery.start(cluster.keep_alive, alive)
        await cluster.create_topic("orders", [1, 2, 3])
        state = cluster.service.state

        def view():
            p = state.topics["orders"].partitions[0]
            return p.leader, p.isr, p.eligible_leader_replicas, p.last_known_elr

        for node_id, expected in [
            (2, (1, [1, 3], [], [])),
            (3, (1, [1], [3], [])),
            (1, (-1, [], [1, 3], [1])),
        ]:
            alive.discard(node_id)
            while not state.brokers[node_id].fenced:
                await trio.sleep(0.1)
            assert view() == expected
        saved = ControllerStore(tmp_path / STATE_FILE).load().topics["orders"].partitions[0]
        assert (saved.eligible_leader_replicas, saved.last_known_elr) == ([1, 3], [1])
        await cluster.register(2, same_process=True)  # not eligible: no leader
        assert view() == (-1, [], [1, 3], [1])
        await cluster.register(3, same_process=True)  # eligible: elected
        assert view() == (3, [3], [1], [])
        await trio.testing.wait_all_tasks_blocked()
        assert cluster.brokers[3].leaders()[("orders", 0)] == 3
        assert told_elr(cluster.brokers[2], "orders") == ((1,), ())

        answer = await cluster.service.update_features(
            codec.build(
                codec.request_class(ApiKey.UPDATE_FEATURES, 1),
                {
                    "timeout": datetime.timedelta(seconds=5),
                    "feature_updates": [
                        {
                            "feature": "eligible.leader.replicas.version",
                            "max_version_level": 0,
                            "upgrade_type": 2,  # SAFE_DOWNGRADE
                        }
                    ],
                    "validate_only": False,
                },
            )
        )
        assert answer["error_code"] == Error.NONE
        assert view() == (3, [3], [], [])
        await trio.testing.wait_all_tasks_blocked()
        assert told_elr(cluster.brokers[2], "orders") == ((), ())
        nursery.cancel_scope.cancel()


async def _alter_partition(cluster: Cluster, version: int, isr: list[tuple[int, int]]) -> int:
    """Broker 1, leader of "orders", asks for ``isr`` ((broker id, broker epoch) pairs; v2
    sends the ids only); returns the partition's error code."""
    partition = cluster.service.state.topics["orders"].partitions[0]
    request = build_request(
        ApiKey.ALTER_PARTITION,
        {
            "broker_id": 1,
            "broker_epoch": cluster.epochs[1],
            "topics": [
                {
                    "topic_id": cluster.service.state.topics["orders"].topic_id,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "leader_epoch": partition.leader_epoch,
                            "new_isr": [broker for broker, _ in isr],
                            "new_isr_with_epochs": [
                                {"broker_id": broker, "broker_epoch": epoch}
                                for broker, epoch in isr
                            ],
                            "leader_recovery_state": 0,
                            "partition_epoch": partition.partition_epoch,
                        }
                    ],
                }
            ],
        },
        version,
    )
    answer = await cluster.service.alter_partition(request)
    return int(answer["topics"][0]["partitions"][0]["error_code"])


async def test_alter_partition_v3_refuses_a_follower_that_restarted_since(autojump_clock, tmp_path):
    """KIP-903 through the service: AlterPartition v3 naming a follower with the broker epoch
    of its previous process is refused with INELIGIBLE_REPLICA and changes nothing; with its
    current epoch it is accepted. v2, which carries no epochs, cannot tell (Kafka's
    newIsrToSimpleNewIsrWithBrokerEpochs gives each member -1)."""
    async with trio.open_nursery() as nursery:
        cluster = await started(nursery, tmp_path)
        await cluster.create_topic("orders", [1, 2, 3])
        state = cluster.service.state
        e1, e2 = cluster.epochs[1], cluster.epochs[2]
        assert await _alter_partition(cluster, 3, [(1, e1), (2, e2)]) == Error.NONE
        old3 = cluster.epochs[3]
        await cluster.register(3)  # a new process of broker 3: a new broker epoch
        assert cluster.epochs[3] != old3
        before = state.topics["orders"].partitions[0]
        stale = [(1, e1), (2, e2), (3, old3)]
        assert await _alter_partition(cluster, 3, stale) == Error.INELIGIBLE_REPLICA
        assert state.topics["orders"].partitions[0] == before
        assert await _alter_partition(cluster, 2, stale) == Error.NONE  # v2: no epochs
        assert state.topics["orders"].partitions[0].isr == [1, 2, 3]
        assert await _alter_partition(cluster, 3, [(1, e1), (2, e2)]) == Error.NONE
        current = [(1, e1), (2, e2), (3, cluster.epochs[3])]
        assert await _alter_partition(cluster, 3, current) == Error.NONE
        assert state.topics["orders"].partitions[0].isr == [1, 2, 3]
        nursery.cancel_scope.cancel()
