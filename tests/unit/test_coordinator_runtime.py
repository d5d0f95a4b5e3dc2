"""The coordinator runtime (coordinator/runtime.py, coordinator/runtime_state.py).

The pure part first: Kafka's CoordinatorRuntime rules on epochs and states, and the timers'
bookkeeping, as plain data. Then the trio service under MockClock on a real log manager and
replica manager in tmp_path (made leader of an internal topic by a LeaderAndIsr the
controller's pure core builds, as the group coordinator's tests do): loading, writing as the
coordinator, refusing writes while loading and after unload, dropping a stale load, timers.
"""

import logging
from types import SimpleNamespace

import pytest
import trio
import trio.testing

from minibroker.common.config import BrokerConfig
from minibroker.common.metrics import BrokerMetrics
from minibroker.common.names import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    SHARE_GROUP_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
)
from minibroker.controller import broker_requests
from minibroker.controller import state as transitions
from minibroker.controller.state import ControllerState
from minibroker.coordinator.runtime import CoordinatorRuntime, InternalTopic
from minibroker.coordinator.runtime_state import (
    CoordinatorState,
    IllegalStateTransition,
    Load,
    Ownership,
    PartitionContext,
    partition_for,
)
from minibroker.protocol.errors import Error
from minibroker.protocol.records import decode_records
from minibroker.replication import log_io
from minibroker.replication.replica_manager import ReplicaManager
from minibroker.storage.log import LogConfig
from minibroker.storage.log_manager import LogManager
from tests.unit.replication_harness import StubController, trio_ms

# -- the pure part ---------------------------------------------------------------------------


def test_the_internal_topics_are_kafkas_three():
    assert {
        "__consumer_offsets",
        "__transaction_state",
        "__share_group_state",
    } == INTERNAL_TOPICS
    assert {OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC} == INTERNAL_TOPICS
    # The Spark source's copy (it may not import the broker) is the same set.
    from minibroker.spark.kafka import INTERNAL_TOPICS as SPARK_INTERNAL_TOPICS

    assert SPARK_INTERNAL_TOPICS == INTERNAL_TOPICS


def test_states_move_as_kafkas_coordinator_state_allows():
    s = CoordinatorState
    assert not s.INITIAL.can_transition_from(s.INITIAL)
    assert s.LOADING.can_transition_from(s.INITIAL) and s.LOADING.can_transition_from(s.FAILED)
    assert not s.LOADING.can_transition_from(s.ACTIVE)
    assert s.ACTIVE.can_transition_from(s.LOADING) and not s.ACTIVE.can_transition_from(s.FAILED)
    assert s.FAILED.can_transition_from(s.LOADING) and not s.FAILED.can_transition_from(s.INITIAL)
    assert all(s.CLOSED.can_transition_from(state) for state in s)
    context = PartitionContext(0)
    with pytest.raises(IllegalStateTransition):
        context.transition_to(s.ACTIVE)


def test_a_load_then_a_stale_unload_is_ignored():
    owned = Ownership()
    assert owned.load(0, 5) is Load.START
    assert owned.check(0) == Error.COORDINATOR_LOAD_IN_PROGRESS
    assert owned.complete_load(0, 5)
    assert owned.check(0) == Error.NONE
    # An unload at epoch 4 is older than the leadership loaded at 5.
    assert owned.unload(0, 4) is None
    assert owned.state(0) is CoordinatorState.ACTIVE and owned.check(0) == Error.NONE
    # One at 6 (another broker leads now) closes it.
    closed = owned.unload(0, 6)
    assert closed is not None and closed.state is CoordinatorState.CLOSED
    assert owned.state(0) is None and owned.check(0) == Error.NOT_COORDINATOR


def test_an_unload_at_the_loaded_epoch_or_without_one_applies():
    """Departure from Kafka's strict '<': a StopReplica keeps the leader epoch."""
    owned = Ownership()
    owned.load(0, 5)
    owned.complete_load(0, 5)
    assert owned.unload(0, 5) is not None
    owned.load(1, 3)
    assert owned.unload(1, None) is not None  # a deleted topic
    assert owned.unload(2, 9) is None  # never loaded
    assert owned.contexts == {}


def test_a_stale_or_repeated_load_is_ignored():
    owned = Ownership()
    assert owned.load(0, 5) is Load.START
    assert owned.load(0, 5) is Load.IGNORED
    assert owned.load(0, 4) is Load.IGNORED
    assert owned.loading(0, 5)
    owned.complete_load(0, 5)
    assert owned.load(0, 5) is Load.IGNORED
    assert owned.load(0, 3) is Load.IGNORED
    assert owned.active_epoch(0) == 5


def test_a_newer_epoch_keeps_an_active_partition_and_its_coordinator_epoch():
    """An ISR change bumps the leader epoch: the state in memory stays, and the epoch it was
    loaded at (the transaction coordinator's coordinator epoch) with it."""
    owned = Ownership()
    owned.load(0, 5)
    owned.complete_load(0, 5)
    assert owned.load(0, 7) is Load.IGNORED
    assert owned.state(0) is CoordinatorState.ACTIVE
    assert owned.active_epoch(0) == 5
    assert owned.contexts[0].epoch == 7
    assert owned.unload(0, 6) is None  # older than the newest epoch seen


def test_a_newer_epoch_while_loading_restarts_the_load_and_drops_the_stale_one():
    owned = Ownership()
    owned.load(0, 5)
    assert owned.load(0, 6) is Load.START
    assert not owned.loading(0, 5)
    assert not owned.complete_load(0, 5)  # what the read at 5 found is dropped
    assert owned.check(0) == Error.COORDINATOR_LOAD_IN_PROGRESS
    assert owned.complete_load(0, 6)
    assert owned.active_epoch(0) == 6


def test_a_failed_load_answers_not_coordinator_until_a_newer_epoch_loads_it():
    owned = Ownership()
    owned.load(0, 5)
    assert owned.fail_load(0, 5)
    assert owned.state(0) is CoordinatorState.FAILED
    assert owned.check(0) == Error.NOT_COORDINATOR
    assert owned.load(0, 5) is Load.IGNORED
    assert owned.load(0, 6) is Load.START
    assert owned.check(0) == Error.COORDINATOR_LOAD_IN_PROGRESS
    assert not owned.fail_load(0, 5)  # stale


def test_only_an_active_partition_arms_timers_and_an_unload_cancels_them():
    owned = Ownership()
    owned.load(0, 5)
    assert not owned.schedule(0, "session-g", 10.0)  # still loading
    owned.complete_load(0, 5)
    owned.load(1, 1)
    owned.complete_load(1, 1)
    assert owned.schedule(0, "session-g", 10.0)
    assert owned.schedule(0, "session-h", 12.0)
    assert owned.schedule(1, "expire", 11.0)
    assert owned.schedule(0, "session-g", 15.0)  # re-armed: replaces
    assert owned.next_deadline() == 11.0
    assert owned.due(10.5) == []
    assert owned.due(12.0) == [(1, "expire"), (0, "session-h")]
    assert owned.due(12.0) == []  # each fires once
    owned.cancel(0, "session-g")
    assert owned.next_deadline() is None
    owned.schedule(0, "session-g", 20.0)
    owned.unload(0, 6)
    assert owned.next_deadline() is None and owned.due(100.0) == []
    assert not owned.schedule(0, "session-g", 30.0)  # not coordinated here any more


def test_partition_for_is_kafkas():
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # hashCode MIN_VALUE


# -- the service under MockClock --------------------------------------------------------------

NODE_ID = 1
CONTROLLER_ID = 0
TOPIC = SHARE_GROUP_STATE_TOPIC


class Keeper:
    """A coordinator as small as can be: its state is the values of its partition's records,
    loaded by the runtime; ``gate`` (when set) holds a load until it is opened."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.values: dict[int, list[bytes]] = {}
        self.unloaded: list[int] = []
        self.loads: list[int] = []
        self.gate: trio.Event | None = None
        self.runtime = CoordinatorRuntime(
            TOPIC,
            replicas,
            loader=self.load,
            unloader=self.unload,
            default_partitions=lambda: 1,
            topic_spec=lambda: InternalTopic(1, 1, {}),
            log=logging.getLogger("test-runtime"),
        )

    async def load(self, partition, epoch):
        self.loads.append(epoch)
        read = []
        async for _header, batch in self.runtime.read_batches(partition, epoch):
            read += [r.value for r in decode_records(batch)]
        if self.gate is not None:
            await self.gate.wait()

        def install() -> None:
            self.values[partition.index] = read

        return install

    def unload(self, index: int) -> None:
        self.unloaded.append(index)
        self.values.pop(index, None)


def cluster_state() -> ControllerState:
    state = ControllerState()
    transitions.register_broker(state, NODE_ID, "127.0.0.1", 9092, "incarnation", 0)
    transitions.create_topic(state, TOPIC, -1, -1, {}, {0: [NODE_ID]})
    return state


class Node:
    def __init__(self, directory) -> None:
        self.config = BrokerConfig(node_id=NODE_ID, log_dirs=(directory,))
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
        self.keeper = Keeper(self.replicas)

    async def start(self, nursery, state: ControllerState | None = None) -> None:
        state = state or cluster_state()
        await nursery.start(self.replicas.run)
        await nursery.start(self.keeper.runtime.run)
        self.replicas.announced_topic_configs[TOPIC] = {}
        self.replicas.apply_update_metadata(
            broker_requests.update_metadata(state, CONTROLLER_ID)(NODE_ID)
        )
        changes = broker_requests.all_partitions(state)
        results = await self.replicas.apply_leader_and_isr(
            broker_requests.leader_and_isr(state, CONTROLLER_ID, NODE_ID, changes)
        )
        assert set(results.values()) == {Error.NONE}
        await trio.testing.wait_all_tasks_blocked()

    def partition(self):
        (partition,) = [p for p in self.replicas.partitions() if p.topic == TOPIC]
        return partition

    def stop(self) -> None:
        self.replicas.close()
        self.logs.close()


async def write(runtime: CoordinatorRuntime, value: bytes) -> tuple[Error, int]:
    return await runtime.write("k", [(b"k", value)], timeout_s=5, now_ms=trio_ms())


async def test_writes_are_committed_and_a_new_leader_reads_them_back(autojump_clock, tmp_path):
    node = Node(tmp_path)
    state = cluster_state()
    async with trio.open_nursery() as nursery:
        await node.start(nursery, state)
        runtime = node.keeper.runtime
        assert runtime.check("k") == Error.NONE and node.keeper.values == {0: []}
        assert await write(runtime, b"one") == (Error.NONE, 0)
        assert await write(runtime, b"two") == (Error.NONE, 1)
        partition = node.partition()
        assert partition.high_watermark == 2  # answered once committed (acks=-1)
        assert runtime.leader_for("k") == NODE_ID
        nursery.cancel_scope.cancel()
    node.stop()
    again = Node(tmp_path)
    async with trio.open_nursery() as nursery:
        await again.start(nursery, state)
        assert again.keeper.values == {0: [b"one", b"two"]}
        nursery.cancel_scope.cancel()
    again.stop()


async def test_a_write_while_loading_and_after_unload_is_refused(autojump_clock, tmp_path):
    node = Node(tmp_path)
    node.keeper.gate = trio.Event()
    async with trio.open_nursery() as nursery:
        await node.start(nursery)
        runtime = node.keeper.runtime
        assert runtime.check("k") == Error.COORDINATOR_LOAD_IN_PROGRESS
        assert await write(runtime, b"early") == (Error.COORDINATOR_LOAD_IN_PROGRESS, -1)
        assert node.partition().log.log_end_offset == 0  # nothing appended
        node.keeper.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert runtime.check("k") == Error.NONE
        assert await write(runtime, b"served") == (Error.NONE, 0)
        epoch = node.partition().leader_epoch
        assert not runtime.unload(0, epoch - 1)  # stale: ignored
        assert runtime.check("k") == Error.NONE
        assert runtime.unload(0, epoch)
        assert node.keeper.unloaded == [0, 0] and node.keeper.values == {}
        assert await write(runtime, b"late") == (Error.NOT_COORDINATOR, -1)
        assert node.partition().log.log_end_offset == 1
        nursery.cancel_scope.cancel()
    node.stop()


async def test_a_stale_load_is_not_installed(autojump_clock, tmp_path):
    """The role listener hears of leadership at a newer epoch while the first load is still
    reading: only the newer load's state is installed."""
    node = Node(tmp_path)
    node.keeper.gate = trio.Event()
    async with trio.open_nursery() as nursery:
        await node.start(nursery)
        runtime = node.keeper.runtime
        epoch = node.partition().leader_epoch
        newer = SimpleNamespace(
            topic=TOPIC,
            index=0,
            leader_epoch=epoch + 1,
            is_leader=True,
            log=node.partition().log,
        )
        runtime.on_role_change(newer)  # type: ignore[arg-type]
        runtime.on_role_change(node.partition())  # the older epoch again: ignored
        await trio.testing.wait_all_tasks_blocked()
        assert node.keeper.loads == [epoch, epoch + 1]
        node.keeper.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert runtime.active_epoch("k") == epoch + 1
        assert runtime.check("k") == Error.NONE
        # A follower's role change at the newer epoch unloads.
        runtime.on_role_change(
            SimpleNamespace(topic=TOPIC, index=0, leader_epoch=epoch + 2, is_leader=False)  # type: ignore[arg-type]
        )
        assert runtime.check("k") == Error.NOT_COORDINATOR
        nursery.cancel_scope.cancel()
    node.stop()


async def test_timers_fire_on_time_and_an_unload_cancels_them(autojump_clock, tmp_path):
    node = Node(tmp_path)
    fired: list[tuple[str, float]] = []

    def operation(name: str):
        async def run() -> None:
            fired.append((name, trio.current_time() - start))

        return run

    async with trio.open_nursery() as nursery:
        await node.start(nursery)
        runtime = node.keeper.runtime
        start = trio.current_time()
        assert runtime.schedule("k", "a", 5.0, operation("a"))
        assert runtime.schedule("k", "b", 3.0, operation("b"))
        assert runtime.schedule("k", "c", 4.0, operation("c"))
        runtime.cancel("k", "c")
        assert runtime.schedule("k", "b", 2.0, operation("b2"))  # re-armed: replaces
        await trio.sleep(1.9)
        assert fired == []
        await trio.sleep(4.0)
        assert fired == [("b2", 2.0), ("a", 5.0)]
        # Armed, then the partition unloaded before the deadline: never runs.
        assert runtime.schedule("k", "d", 1.0, operation("d"))
        assert runtime.unload(0, None)
        assert not runtime.schedule("k", "e", 1.0, operation("e"))
        await trio.sleep(10)
        assert [name for name, _ in fired] == ["b2", "a"]
        nursery.cancel_scope.cancel()
    node.stop()
