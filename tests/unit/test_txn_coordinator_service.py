"""The transaction coordinator service in-process, under trio's MockClock: a real log manager
and replica manager in tmp_path, made leader of `__transaction_state` by a LeaderAndIsr that the
controller's pure core and request builders make. The markers go through the real marker
channel to a fake leader connection that records them and answers as the test says. Timeouts
expire on the mock clock; a restarted coordinator finishes a decided transaction from the log."""

import dataclasses
import logging
from types import SimpleNamespace

import pytest
import trio
import trio.testing

from minibroker.cluster.node_connection import NodeConnection
from minibroker.common.config import BrokerConfig
from minibroker.common.metrics import BrokerMetrics
from minibroker.common.names import TRANSACTION_STATE_TOPIC
from minibroker.controller import broker_requests
from minibroker.controller import state as transitions
from minibroker.controller.state import ControllerState
from minibroker.coordinator.transaction.markers import REQUEST_TIMEOUT_S, MarkerChannel
from minibroker.coordinator.transaction.service import TransactionCoordinator
from minibroker.coordinator.transaction.state import SHORT_MAX, TV_2, TxnState
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.replication import log_io
from minibroker.replication.replica_manager import ReplicaManager
from minibroker.storage.log import LogConfig
from minibroker.storage.log_manager import LogManager
from tests.unit.replication_harness import StubController, trio_ms

NODE_ID = 1
CONTROLLER_ID = 0
TOPIC = "t"


def cluster_state() -> ControllerState:
    state = ControllerState()
    transitions.register_broker(state, NODE_ID, "127.0.0.1", 9092, "incarnation", 0)
    for name, partitions in ((TRANSACTION_STATE_TOPIC, 1), (TOPIC, 2)):
        transitions.create_topic(state, name, -1, -1, {}, {i: [NODE_ID] for i in range(partitions)})
    return state


class FakeLeader:
    """A partition leader's connection: records each WriteTxnMarkers and answers each
    partition with the next code of ``answers`` (NONE once they run out); its ApiVersions
    lists WriteTxnMarkers up to ``markers_max_version``."""

    def __init__(self, answers: list[Error] | None = None, markers_max_version: int = 2) -> None:
        self.answers = list(answers or [])
        self.markers: list[tuple[int, int, int, bool, list[tuple[str, int]]]] = []
        self.verified: list = []
        self.markers_max_version = markers_max_version
        # (request version, the markers' transaction versions; None when v1 has none)
        self.marker_versions: list[tuple[int, list[int | None]]] = []

    async def connect(self, host, port, client_id, security):
        return self

    async def request(self, request):
        await trio.lowlevel.checkpoint()
        if request.__api_key__ == 24:  # KIP-890's verify-only AddPartitionsToTxn
            self.verified.append(request)
            (transaction,) = request.transactions
            assert transaction.verify_only
            return SimpleNamespace(
                error_code=SimpleNamespace(value=Error.NONE),
                results_by_transaction=[
                    SimpleNamespace(
                        topic_results=[
                            SimpleNamespace(
                                name=topic.name,
                                results_by_partition=[
                                    SimpleNamespace(
                                        partition_index=p,
                                        partition_error_code=SimpleNamespace(
                                            value=Error.TRANSACTION_ABORTABLE
                                        ),
                                    )
                                    for p in topic.partitions
                                ],
                            )
                            for topic in transaction.topics
                        ]
                    )
                ],
            )
        if request.__api_key__ == 18:
            return SimpleNamespace(
                error_code=SimpleNamespace(value=Error.NONE),
                api_keys=[
                    SimpleNamespace(api_key=27, min_version=0, max_version=self.markers_max_version)
                ],
            )
        encoded = codec.encode_entity(request)  # what goes on the wire must encode
        assert encoded
        self.marker_versions.append(
            (
                int(request.__version__),
                [getattr(m, "transaction_version", None) for m in request.markers],
            )
        )
        results = []
        for marker in request.markers:
            partitions = [(t.name, int(p)) for t in marker.topics for p in t.partition_indexes]
            self.markers.append(
                (
                    int(marker.producer_id),
                    int(marker.producer_epoch),
                    int(marker.coordinator_epoch),
                    bool(marker.transaction_result),
                    sorted(partitions),
                )
            )
            topics = {}
            for topic, index in partitions:
                code = self.answers.pop(0) if self.answers else Error.NONE
                topics.setdefault(topic, []).append(
                    SimpleNamespace(partition_index=index, error_code=SimpleNamespace(value=code))
                )
            results.append(
                SimpleNamespace(
                    producer_id=marker.producer_id,
                    topics=[SimpleNamespace(name=t, partitions=p) for t, p in topics.items()],
                )
            )
        return SimpleNamespace(markers=results)

    async def aclose(self):
        pass


class Broker:
    def __init__(self, directory, leader: FakeLeader, **config) -> None:
        self.config = BrokerConfig(
            node_id=NODE_ID,
            log_dirs=(directory,),
            transaction_state_log_num_partitions=1,
            transaction_abort_timed_out_transaction_cleanup_interval_ms=100,
            **config,
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
        self.next_id = 1000

        async def next_producer_id() -> int:
            self.next_id += 1
            return self.next_id

        self.replicas.next_producer_id = next_producer_id  # type: ignore[method-assign]
        self.markers = MarkerChannel(self.config, self.replicas, connect=leader.connect)
        self.coordinator = TransactionCoordinator(self.config, self.replicas, markers=self.markers)

    async def start(self, nursery, state: ControllerState) -> None:
        await nursery.start(self.replicas.run)
        await nursery.start(self.coordinator.run)
        for topic in (TRANSACTION_STATE_TOPIC, TOPIC):
            self.replicas.announced_topic_configs[topic] = {}
        self.replicas.apply_update_metadata(
            broker_requests.update_metadata(state, CONTROLLER_ID)(NODE_ID)
        )
        results = await self.replicas.apply_leader_and_isr(
            broker_requests.leader_and_isr(
                state, CONTROLLER_ID, NODE_ID, broker_requests.all_partitions(state)
            )
        )
        assert set(results.values()) == {Error.NONE}
        await trio.testing.wait_all_tasks_blocked()
        assert self.coordinator.check("tx") == Error.NONE  # loaded

    def stop(self) -> None:
        self.replicas.close()
        self.logs.close()


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def test_commit_writes_markers_then_completes(tmp_path, autojump_clock):
    leader = FakeLeader()
    broker = Broker(tmp_path, leader)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        error, producer_id, epoch = await coordinator.init_producer_id("tx", 60_000, None)
        assert (error, producer_id, epoch) == (Error.NONE, 1001, 0)
        parts = {(TOPIC, 0), (TOPIC, 1)}
        assert await coordinator.add_partitions("tx", producer_id, epoch, parts) == Error.NONE
        assert coordinator.verify("tx", producer_id, epoch, [(TOPIC, 0)]) == {
            (TOPIC, 0): Error.NONE
        }
        assert coordinator.ongoing_count() == 1
        assert (await coordinator.end_transaction("tx", producer_id, epoch, True))[0] == Error.NONE
        await trio.sleep(1)
        meta = coordinator.transactions["tx"]
        assert meta.state == TxnState.COMPLETE_COMMIT and meta.pending is None
        coordinator_epoch = coordinator.coordinator_epoch("tx")
        assert leader.markers == [(producer_id, epoch, coordinator_epoch, True, sorted(parts))]
        assert coordinator.transactions_committed == 1 and coordinator.ongoing_count() == 0
        nursery.cancel_scope.cancel()
    broker.stop()


@pytest.mark.parametrize(
    ("markers_max_version", "client_version", "sent"),
    [(2, 1, (2, [1])), (2, 2, (2, [2])), (1, 2, (1, [None]))],
)
async def test_markers_carry_the_transaction_version_to_a_leader_serving_v2(
    tmp_path, autojump_clock, markers_max_version, client_version, sent
):
    """Kafka's TransactionMarkerChannelManager: the marker carries the transaction's
    clientTransactionVersion in WriteTxnMarkers v2 (KIP-1228) to a leader whose ApiVersions
    lists v2; a leader serving up to v1 gets v1, without it."""
    leader = FakeLeader(markers_max_version=markers_max_version)
    broker = Broker(tmp_path, leader)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        _, producer_id, epoch = await coordinator.init_producer_id("tx", 60_000, None)
        parts = {(TOPIC, 0)}
        assert (
            await coordinator.add_partitions("tx", producer_id, epoch, parts, client_version)
            == Error.NONE
        )
        answer = await coordinator.end_transaction("tx", producer_id, epoch, True, client_version)
        assert answer[0] == Error.NONE
        await trio.sleep(1)
        assert coordinator.transactions["tx"].state == TxnState.COMPLETE_COMMIT
        assert leader.marker_versions == [sent]
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_markers_are_retried_until_the_leader_takes_them(tmp_path, autojump_clock):
    leader = FakeLeader([Error.NOT_LEADER_OR_FOLLOWER, Error.NOT_ENOUGH_REPLICAS])
    broker = Broker(tmp_path, leader)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        _, producer_id, epoch = await coordinator.init_producer_id("tx", 60_000, None)
        await coordinator.add_partitions("tx", producer_id, epoch, {(TOPIC, 0)})
        assert (await coordinator.end_transaction("tx", producer_id, epoch, False))[0] == Error.NONE
        # Until the markers are written, a retry waits and a new producer too.
        assert (await coordinator.end_transaction("tx", producer_id, epoch, False))[0] == (
            Error.CONCURRENT_TRANSACTIONS
        )
        await trio.sleep(5)
        assert len(leader.markers) == 3
        assert coordinator.transactions["tx"].state == TxnState.COMPLETE_ABORT
        assert (await coordinator.end_transaction("tx", producer_id, epoch, False))[0] == Error.NONE
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_a_deleted_topics_partition_is_dropped(tmp_path, autojump_clock):
    leader = FakeLeader()
    broker = Broker(tmp_path, leader)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        _, producer_id, epoch = await coordinator.init_producer_id("tx", 60_000, None)
        await coordinator.add_partitions("tx", producer_id, epoch, {(TOPIC, 0)})
        del broker.replicas.metadata.topics[TOPIC]  # as an UpdateMetadata after deletion
        assert (await coordinator.end_transaction("tx", producer_id, epoch, True))[0] == Error.NONE
        await trio.sleep(1)
        assert leader.markers == []
        assert coordinator.transactions["tx"].state == TxnState.COMPLETE_COMMIT
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_an_expired_transaction_is_aborted_with_a_bumped_epoch(tmp_path, autojump_clock):
    leader = FakeLeader()
    broker = Broker(tmp_path, leader)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        _, producer_id, epoch = await coordinator.init_producer_id("tx", 1_000, None)
        await coordinator.add_partitions("tx", producer_id, epoch, {(TOPIC, 1)})
        await trio.sleep(0.9)
        assert coordinator.transactions["tx"].state == TxnState.ONGOING
        await trio.sleep(1.5)
        meta = coordinator.transactions["tx"]
        assert meta.state == TxnState.COMPLETE_ABORT and meta.producer_epoch == epoch + 1
        assert leader.markers == [
            (producer_id, epoch + 1, coordinator.coordinator_epoch("tx"), False, [(TOPIC, 1)])
        ]
        # The zombie is fenced.
        assert (await coordinator.end_transaction("tx", producer_id, epoch, True))[0] == (
            Error.PRODUCER_FENCED
        )
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_init_of_an_ongoing_transaction_aborts_it_first(tmp_path, autojump_clock):
    leader = FakeLeader()
    broker = Broker(tmp_path, leader)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        _, producer_id, epoch = await coordinator.init_producer_id("tx", 60_000, None)
        await coordinator.add_partitions("tx", producer_id, epoch, {(TOPIC, 0)})
        error, _, _ = await coordinator.init_producer_id("tx", 60_000, None)
        assert error == Error.CONCURRENT_TRANSACTIONS
        await trio.sleep(1)
        assert leader.markers[0][1:4] == (epoch + 1, coordinator.coordinator_epoch("tx"), False)
        error, same_id, new_epoch = await coordinator.init_producer_id("tx", 60_000, None)
        assert (error, same_id, new_epoch) == (Error.NONE, producer_id, epoch + 2)
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_a_restarted_coordinator_completes_a_decided_commit(tmp_path, autojump_clock):
    """The failover rule: PrepareCommit is in the log, the markers never got through; the
    coordinator that loads the partition sends them and writes CompleteCommit."""
    state = cluster_state()  # one cluster: the same topic ids across the restart
    stuck = FakeLeader([Error.NOT_LEADER_OR_FOLLOWER] * 1000)
    broker = Broker(tmp_path, stuck)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        coordinator = broker.coordinator
        _, producer_id, epoch = await coordinator.init_producer_id("tx", 60_000, None)
        await coordinator.add_partitions("tx", producer_id, epoch, {(TOPIC, 0)})
        assert (await coordinator.end_transaction("tx", producer_id, epoch, True))[0] == Error.NONE
        await trio.sleep(1)
        assert coordinator.transactions["tx"].state == TxnState.PREPARE_COMMIT
        nursery.cancel_scope.cancel()
    broker.stop()

    leader = FakeLeader()
    again = Broker(tmp_path, leader)
    async with trio.open_nursery() as nursery:
        await again.start(nursery, state)
        await trio.sleep(1)
        meta = again.coordinator.transactions["tx"]
        assert meta.state == TxnState.COMPLETE_COMMIT
        assert [m[3:] for m in leader.markers] == [(True, [(TOPIC, 0)])]
        assert leader.markers[0][:2] == (producer_id, epoch)
        nursery.cancel_scope.cancel()
    again.stop()


async def test_state_survives_a_restart(tmp_path, autojump_clock):
    state = cluster_state()  # one cluster: the same topic ids across the restart
    broker = Broker(tmp_path, FakeLeader())
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        for _ in range(3):
            _, producer_id, epoch = await broker.coordinator.init_producer_id("tx", 5_000, None)
        await broker.coordinator.add_partitions("tx", producer_id, epoch, {(TOPIC, 1)})
        nursery.cancel_scope.cancel()
    broker.stop()
    again = Broker(tmp_path, FakeLeader())
    async with trio.open_nursery() as nursery:
        await again.start(nursery, state)
        meta = again.coordinator.transactions["tx"]
        assert (meta.producer_id, meta.producer_epoch, meta.state) == (
            producer_id,
            2,
            TxnState.ONGOING,
        )
        assert meta.partitions == {(TOPIC, 1)} and meta.timeout_ms == 5_000
        nursery.cancel_scope.cancel()
    again.stop()


async def test_idle_transactional_ids_expire(tmp_path, autojump_clock):
    state = cluster_state()  # one cluster: the same topic ids across the restart
    broker = Broker(
        tmp_path,
        FakeLeader(),
        transactional_id_expiration_ms=10_000,
        transaction_remove_expired_transaction_cleanup_interval_ms=1_000,
    )
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        await broker.coordinator.init_producer_id("tx", 5_000, None)
        await trio.sleep(5)
        assert "tx" in broker.coordinator.transactions
        await trio.sleep(10)
        assert "tx" not in broker.coordinator.transactions
        assert broker.coordinator.describe("tx")[0] == Error.TRANSACTIONAL_ID_NOT_FOUND
        nursery.cancel_scope.cancel()
    broker.stop()
    again = Broker(tmp_path, FakeLeader())
    async with trio.open_nursery() as nursery:
        await again.start(nursery, state)
        assert "tx" not in again.coordinator.transactions  # the tombstone is read back
        nursery.cancel_scope.cancel()
    again.stop()


@pytest.mark.parametrize("timeout_ms", [0, 900_001])
async def test_timeouts_outside_the_bounds(tmp_path, autojump_clock, timeout_ms):
    broker = Broker(tmp_path, FakeLeader())
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        error, _, _ = await broker.coordinator.init_producer_id("tx", timeout_ms, None)
        assert error == Error.INVALID_TRANSACTION_TIMEOUT
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_verification_is_local_here_and_asked_of_another_coordinator(
    tmp_path, autojump_clock
):
    leader = FakeLeader()
    broker = Broker(tmp_path, leader)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        _, producer_id, epoch = await coordinator.init_producer_id("tx", 60_000, None)
        await coordinator.add_partitions("tx", producer_id, epoch, {(TOPIC, 0)})
        local = await coordinator.verify_transaction("tx", producer_id, epoch, [(TOPIC, 0)])
        assert local == {(TOPIC, 0): Error.NONE} and leader.verified == []
        assert await coordinator.verify_transaction("tx", producer_id, epoch + 1, [(TOPIC, 0)]) == {
            (TOPIC, 0): Error.PRODUCER_FENCED
        }
        # Another broker leads the id's partition now: it is asked over the network.
        topic = broker.replicas.metadata.topic(TRANSACTION_STATE_TOPIC)
        broker.replicas.metadata.brokers[2] = broker.replicas.metadata.brokers[NODE_ID]
        topic.partitions[0] = dataclasses.replace(topic.partitions[0], leader=2)
        remote = await coordinator.verify_transaction("tx", producer_id, epoch, [(TOPIC, 1)])
        assert remote == {(TOPIC, 1): Error.TRANSACTION_ABORTABLE}
        (sent,) = leader.verified
        assert sent.transactions[0].transactional_id == "tx"
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_ongoing_transactions_in_the_metrics(tmp_path, autojump_clock):
    from minibroker.node.metrics import StateCollector

    broker = Broker(tmp_path, FakeLeader())
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        _, producer_id, epoch = await coordinator.init_producer_id("tx", 60_000, None)
        await coordinator.add_partitions("tx", producer_id, epoch, {(TOPIC, 0)})
        collector = StateCollector(None, lambda: None, None, coordinator)
        samples = {
            (sample.name, tuple(sample.labels.items())): sample.value
            for family in collector.collect()
            for sample in family.samples
        }
        assert samples[("minibroker_transaction_coordinator_ongoing_transactions", ())] == 1
        key = ("minibroker_transaction_coordinator_transactional_ids", (("state", "Ongoing"),))
        assert samples[key] == 1
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_tv2_end_txn_bumps_and_a_restart_completes_to_the_next_producer_id(
    tmp_path, autojump_clock
):
    """EndTxn v5 (TV2): the markers carry the bumped epoch; with the last usable epoch a next
    producer id is allocated and written with the decision, so a coordinator that loads the
    decision from the log completes it to the same id the first one answered."""
    state = cluster_state()  # one cluster: the same topic ids across the restart
    stuck = FakeLeader([Error.NOT_LEADER_OR_FOLLOWER] * 1000)
    broker = Broker(tmp_path, stuck)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        coordinator = broker.coordinator
        _, producer_id, epoch = await coordinator.init_producer_id("tx", 60_000, None)
        await coordinator.add_partitions("tx", producer_id, epoch, {(TOPIC, 0)}, TV_2)
        # (as after 32766 transactions)
        coordinator.transactions["tx"].producer_epoch = SHORT_MAX - 1
        answer = await coordinator.end_transaction("tx", producer_id, SHORT_MAX - 1, True, TV_2)
        error, next_id, next_epoch = answer
        assert error == Error.NONE and next_id != producer_id and next_epoch == 0
        await trio.sleep(1)
        assert coordinator.transactions["tx"].state == TxnState.PREPARE_COMMIT
        # The markers are of the old producer id at the bumped epoch, WriteTxnMarkers v2
        # with the transaction's version (KIP-1228).
        assert stuck.markers[0][:2] == (producer_id, SHORT_MAX)
        assert stuck.marker_versions[0] == (2, [2])
        nursery.cancel_scope.cancel()
    broker.stop()

    again = Broker(tmp_path, FakeLeader())
    async with trio.open_nursery() as nursery:
        await again.start(nursery, state)
        await trio.sleep(1)
        meta = again.coordinator.transactions["tx"]
        assert meta.state == TxnState.COMPLETE_COMMIT
        assert (meta.producer_id, meta.producer_epoch) == (next_id, 0)
        # A retry of the EndTxn with the old id and epoch is answered as the first.
        retried = await again.coordinator.end_transaction(
            "tx", producer_id, SHORT_MAX - 1, True, TV_2
        )
        assert retried == (Error.NONE, next_id, 0)
        # The next transaction bumps the new id's epoch.
        await again.coordinator.add_partitions("tx", next_id, 0, {(TOPIC, 1)}, TV_2)
        assert await again.coordinator.end_transaction("tx", next_id, 0, False, TV_2) == (
            Error.NONE,
            next_id,
            1,
        )
        nursery.cancel_scope.cancel()
    again.stop()


class StalledLeader:
    """A leader that takes WriteTxnMarkers and never answers, over real NodeConnections on
    in-memory streams; counts the connections opened."""

    def __init__(self) -> None:
        self.opened = 0
        self.server_ends: list = []

    async def connect(self, host, port, client_id, security):
        self.opened += 1
        client, server = trio.testing.memory_stream_pair()
        self.server_ends.append(server)
        return NodeConnection(client, client_id)


async def test_a_marker_send_on_a_connection_another_send_closed_is_a_connection_error(
    tmp_path, autojump_clock, caplog
):
    """Two transactions' markers share the connection to a leader that does not answer: the
    first request times out and closes it, the second then finds it closed (trio's
    ClosedResourceError). That is a connection error (retried on a new connection, logged at
    debug), not "an answer that does not decode" logged as a warning."""
    leader = StalledLeader()
    broker = Broker(tmp_path, leader)  # type: ignore[arg-type]
    caplog.set_level(logging.DEBUG, logger="txn-markers")
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())

        async def write(producer_id: int, index: int) -> None:
            await broker.markers.write(
                producer_id=producer_id,
                producer_epoch=0,
                coordinator_epoch=0,
                commit=True,
                partitions={(TOPIC, index)},
                still_valid=lambda: True,
            )

        nursery.start_soon(write, 7, 0)
        await trio.sleep(10)
        nursery.start_soon(write, 8, 1)
        await trio.sleep(REQUEST_TIMEOUT_S + 5)
        nursery.cancel_scope.cancel()
    broker.stop()
    failures = [r for r in caplog.records if r.name == "txn-markers" and "failed" in r.message]
    assert any("ClosedResourceError" in r.message for r in failures), failures
    assert [r.message for r in failures if r.levelno >= logging.WARNING] == []
    assert leader.opened >= 2  # the closed connection was replaced
