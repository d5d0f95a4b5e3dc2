"""The group coordinator service in-process, under trio's MockClock: a real log manager and
replica manager in tmp_path, made leader of `__consumer_offsets` by a LeaderAndIsr that the
controller's pure core and request builders make (no controller process, no sockets).
Sessions expire on the mock clock; offsets survive a restart because the coordinator reads
its partition back."""

import dataclasses

import trio
import trio.testing

from minibroker.common.config import BrokerConfig
from minibroker.common.metrics import BrokerMetrics
from minibroker.controller import broker_requests
from minibroker.controller import state as transitions
from minibroker.controller.state import ControllerState
from minibroker.coordinator.group.service import OFFSETS_TOPIC, CommitRequest, GroupCoordinator
from minibroker.coordinator.group.state import GroupState, JoinRequest
from minibroker.protocol.errors import Error
from minibroker.replication import log_io
from minibroker.replication.replica_manager import ReplicaManager
from minibroker.storage.log import LogConfig
from minibroker.storage.log_manager import LogManager
from tests.unit.replication_harness import StubController, trio_ms

NODE_ID = 1
CONTROLLER_ID = 0
SESSION_MS = 10_000


def cluster_state() -> ControllerState:
    """The controller's picture: broker 1 alone, leading `__consumer_offsets` and `t`."""
    state = ControllerState()
    transitions.register_broker(state, NODE_ID, "127.0.0.1", 9092, "incarnation", 0)
    for name in (OFFSETS_TOPIC, "t"):
        transitions.create_topic(state, name, -1, -1, {}, {0: [NODE_ID]})
    return state


class Broker:
    """The parts of a broker the group coordinator needs, on the logs in ``directory``."""

    def __init__(self, directory) -> None:
        self.config = BrokerConfig(
            node_id=NODE_ID,
            log_dirs=(directory,),
            offsets_topic_num_partitions=1,
            offsets_topic_replication_factor=1,
            group_initial_rebalance_delay_ms=0,
        )
        self.logs = LogManager([directory], LogConfig(), node_id=NODE_ID, cluster_id="mock")
        self.logs.open(trio_ms())
        self.replicas = ReplicaManager(
            self.config,
            self.logs,
            StubController(),
            BrokerMetrics(),
            clock_ms=trio_ms,
            run_blocking=log_io.inline,  # MockClock: no worker threads (replication/log_io.py)
        )
        self.coordinator = GroupCoordinator(self.config, self.replicas)

    async def start(self, nursery, state: ControllerState) -> None:
        await nursery.start(self.replicas.run)
        await nursery.start(self.coordinator.run)
        changes = broker_requests.all_partitions(state)
        for topic in (OFFSETS_TOPIC, "t"):
            self.replicas.announced_topic_configs[topic] = {}
        self.replicas.apply_update_metadata(
            broker_requests.update_metadata(state, CONTROLLER_ID)(NODE_ID)
        )
        results = await self.replicas.apply_leader_and_isr(
            broker_requests.leader_and_isr(state, CONTROLLER_ID, NODE_ID, changes)
        )
        assert set(results.values()) == {Error.NONE}
        await trio.testing.wait_all_tasks_blocked()
        assert self.coordinator.check("g") == Error.NONE  # loaded

    def stop(self) -> None:
        self.replicas.close()
        self.logs.close()


def join_request(member_id: str = "") -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        group_instance_id=None,
        client_id="client",
        client_host="/127.0.0.1",
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=SESSION_MS,
        protocol_type="consumer",
        protocols=[("range", b"subscription")],
        require_known_member_id=False,
    )


async def join_and_sync(coordinator: GroupCoordinator) -> tuple[str, int]:
    joined = await coordinator.join("g", join_request())
    assert joined.error == Error.NONE, joined
    assert joined.leader == joined.member_id
    synced = await coordinator.sync(
        "g", joined.member_id, None, joined.generation, {joined.member_id: b"assignment"}
    )
    assert synced.error == Error.NONE
    assert synced.assignment == b"assignment"
    return joined.member_id, joined.generation


async def test_heartbeats_keep_a_member_and_a_missed_session_removes_it(autojump_clock, tmp_path):
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        member_id, generation = await join_and_sync(coordinator)
        group = coordinator.groups["g"]
        assert group.state == GroupState.STABLE
        # Heartbeats within the session keep it, for far longer than one session.
        for _ in range(5):
            await trio.sleep(SESSION_MS / 1000 * 0.8)
            assert coordinator.heartbeat("g", member_id, None, generation) == Error.NONE
        assert group.state == GroupState.STABLE
        # Silence: the member is gone once its session ran out, not before.
        last = trio.current_time()
        await trio.sleep(SESSION_MS / 1000 * 0.9)
        assert member_id in group.members
        await trio.sleep(SESSION_MS / 1000 * 0.2)
        assert member_id not in group.members, trio.current_time() - last
        assert group.state == GroupState.EMPTY
        assert coordinator.heartbeat("g", member_id, None, generation) == Error.UNKNOWN_MEMBER_ID
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_a_new_groups_first_join_does_not_wait_for_an_id_never_used(autojump_clock, tmp_path):
    """At group.initial.rebalance.delay.ms=0 the first join ends at once with the members that
    joined, as Kafka's InitialDelayedJoin does: a client that took a member id
    (MEMBER_ID_REQUIRED) and never came back with it does not hold the generation for that
    id's session timeout (it did before: the join waited on the mock clock for SESSION_MS)."""
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        request = dataclasses.replace(join_request(), require_known_member_id=True)
        abandoned = await coordinator.join("g", request)
        assert abandoned.error == Error.MEMBER_ID_REQUIRED
        given = await coordinator.join("g", request)
        assert given.error == Error.MEMBER_ID_REQUIRED
        started = trio.current_time()
        joined = await coordinator.join(
            "g", dataclasses.replace(request, member_id=given.member_id)
        )
        assert joined.error == Error.NONE
        assert (joined.generation, joined.leader) == (1, given.member_id)
        assert trio.current_time() == started, "the join waited for the id never used"
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_committed_offsets_are_read_back_after_the_coordinator_reloads(
    autojump_clock, tmp_path
):
    state = cluster_state()
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        member_id, generation = await join_and_sync(broker.coordinator)
        errors = await broker.coordinator.commit(
            CommitRequest("g", generation, member_id, None, {("t", 0): (42, 0, "meta")})
        )
        assert errors == {("t", 0): Error.NONE}
        error, offsets = broker.coordinator.fetch_offsets("g", [("t", 0)])
        assert error == Error.NONE and offsets[("t", 0)].offset == 42
        nursery.cancel_scope.cancel()
    broker.stop()

    # A new broker process on the same logs: the coordinator reads the partition back.
    restarted = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await restarted.start(nursery, state)
        error, offsets = restarted.coordinator.fetch_offsets("g", [("t", 0), ("t", 1)])
        assert error == Error.NONE
        assert offsets[("t", 0)].offset == 42
        assert offsets[("t", 0)].metadata == "meta"
        assert offsets[("t", 1)] is None
        # The group's membership came back too, at the generation it had.
        group = restarted.coordinator.groups["g"]
        assert group.generation == generation
        nursery.cancel_scope.cancel()
    restarted.stop()
