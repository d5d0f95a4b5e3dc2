"""The coordinator runtime: what every coordinator of an internal topic does, once, on trio.

Kafka's coordinator-common ``CoordinatorRuntime`` (with its PartitionWriter, CoordinatorLoader
and CoordinatorTimer), serving one coordinator's internal topic (`__consumer_offsets` for the
group coordinator, `__transaction_state` for the transaction coordinator, `__share_group_state`
for the share coordinator to come). The rules are the pure ``runtime_state.Ownership``; this
shell adds the I/O:

- leadership: the replica manager's role listeners call :meth:`on_role_change`; a partition
  of the topic led here is loaded (scheduleLoadOperation), one no longer led is unloaded
  (scheduleUnloadOperation), both keyed by the leader epoch so a stale one is ignored;
- loading (CoordinatorLoader): the partition is read from its log start to its log end in
  chunks (:meth:`read_batches`), handed to the coordinator's loader, whose result is installed
  only if the load is still the wanted one when it ends (ACTIVE), else dropped;
- writing (PartitionWriter, scheduleWriteOperation): :meth:`write` appends a batch through
  ``ReplicaManager.append_records``, the one append path, with origin COORDINATOR and
  acks=-1, and returns once the ISR has it (committed) or with the error; only an ACTIVE
  partition is written to (COORDINATOR_LOAD_IN_PROGRESS while loading, NOT_COORDINATOR
  otherwise);
- partitionFor: :meth:`partition_for` (Utils.abs(hashCode) % the topic's partition count) and
  :meth:`leader_for` (the broker that leads that partition, as metadata has it);
- the internal topic: :meth:`ensure_topic` creates it through the controller on first use
  with the coordinator's configs, one creation at a time;
- timers (CoordinatorTimer): :meth:`schedule` and :meth:`cancel` by key per partition; an
  unload cancels the partition's timers. One task sleeps until the earliest deadline.

Departures from Kafka, and why: Kafka runs each coordinator's operations on an event
processor with threads, a deferred queue of writes waiting for the high watermark and an
in-memory snapshot per offset so that a failed write reverts the state. minibroker's
coordinators run on one trio event loop: an operation awaits its own acks=-1 append (the
purgatory answers it when the ISR has it), and a coordinator keeps its state machine's
changes on a failed write as before (see each service). The coordinator's state itself (its
groups, its transactional ids) stays in the coordinator: the runtime holds only ownership,
epochs and timers, and calls the coordinator back to drop a partition's state.
"""

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import trio

from minibroker.cluster.controller_client import build_request
from minibroker.coordinator.runtime_state import Load, Ownership, partition_for
from minibroker.protocol.errors import Error
from minibroker.protocol.produce_request import PartitionProduceData
from minibroker.protocol.record_batch import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    scan_valid_batches,
)
from minibroker.protocol.records import NO_PRODUCER_ID, Record, RecordError, encode_batch
from minibroker.protocol.versions import ApiKey
from minibroker.replication.partition import Partition
from minibroker.replication.replica_manager import AppendOrigin, ReplicaManager
from minibroker.storage.errors import StorageError

LOAD_READ_BYTES = 1024 * 1024


@dataclass(frozen=True)
class InternalTopic:
    """How a coordinator's internal topic is created (Kafka's offsetsTopicConfigs,
    transactionTopicConfigs, ...): always compacted, with the coordinator's own configs."""

    partitions: int
    replication_factor: int
    configs: dict[str, str]


async def create_internal_topic(
    create_topics, name: str, partitions: int, replication: int, configs: dict[str, str]
) -> Error:
    """A coordinator's internal topic, compacted, created through the controller on first
    use; COORDINATOR_NOT_AVAILABLE if that fails. ``create_topics`` sends the CreateTopics
    request and returns the topic's error."""
    request = build_request(
        ApiKey.CREATE_TOPICS,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": replication,
                    "assignments": (),
                    "configs": [
                        {"name": key, "value": value}
                        for key, value in {"cleanup.policy": "compact", **configs}.items()
                    ],
                }
            ],
            "timeout": 30_000,
            "validate_only": False,
        },
    )
    error = await create_topics(request)
    if error not in (Error.NONE, Error.TOPIC_ALREADY_EXISTS):
        logging.getLogger("coordinator").warning("cannot create %s: %s", name, error.name)
        return Error.COORDINATOR_NOT_AVAILABLE
    return Error.NONE


# What a coordinator's loader returns: the state it read, installed (called) only if the
# load is still the wanted one when it ends.
Install = Callable[[], None]
Loader = Callable[[Partition, int], Awaitable[Install]]


class CoordinatorRuntime:
    """One coordinator's internal partitions led by this broker (Kafka's CoordinatorRuntime).

    ``loader(partition, epoch)`` reads a partition (through :meth:`read_batches`) and returns
    the callable that installs what it read; ``unloader(index)`` drops a partition's state;
    ``default_partitions()`` is the partition count to hash with before the topic exists;
    ``topic_spec()`` how to create it.
    """

    def __init__(
        self,
        topic: str,
        replicas: ReplicaManager,
        *,
        loader: Loader,
        unloader: Callable[[int], None],
        default_partitions: Callable[[], int],
        topic_spec: Callable[[], InternalTopic],
        log: logging.Logger,
    ) -> None:
        self.topic = topic
        self.replicas = replicas
        self.ownership = Ownership()
        self._loader = loader
        self._unloader = unloader
        self._default_partitions = default_partitions
        self._topic_spec = topic_spec
        self.log = log
        self._nursery: trio.Nursery | None = None
        self._topic_creation: trio.Event | None = None
        self._timer_operations: dict[tuple[int, str], Callable[[], Awaitable[None]]] = {}
        self._timers_changed = trio.Event()
        replicas.role_listeners.append(self.on_role_change)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled: the timer task and the loads run in this nursery."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._run_timers)
            task_status.started()
            # Partitions this broker already led before the coordinator started.
            for partition in self.replicas.partitions():
                self.on_role_change(partition)

    # -- which partition, which broker ------------------------------------------------------------

    def partition_count(self) -> int:
        topic = self.replicas.metadata.topic(self.topic)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        return self._default_partitions()

    def partition_for(self, key: str) -> int:
        """Kafka's partitionFor: the partition of the internal topic that serves ``key``."""
        return partition_for(key, self.partition_count())

    def leader_for(self, key: str) -> int | None:
        """The broker that leads ``key``'s partition as this broker's metadata has it (the
        coordinator FindCoordinator answers), None while it has no leader."""
        topic = self.replicas.metadata.topic(self.topic)
        partition = topic.partitions.get(self.partition_for(key)) if topic else None
        if partition is None or partition.leader < 0:
            return None
        return partition.leader

    def check(self, key: str) -> Error:
        """Whether this broker serves ``key`` now: NONE, or the error to answer."""
        return self.ownership.check(self.partition_for(key))

    def active_epoch(self, key: str) -> int | None:
        return self.ownership.active_epoch(self.partition_for(key))

    def is_loading(self) -> bool:
        return self.ownership.any_loading()

    # -- leadership: load and unload --------------------------------------------------------------

    def on_role_change(self, partition: Partition) -> None:
        if partition.topic != self.topic or self._nursery is None:
            return
        index, epoch = partition.index, partition.leader_epoch
        if partition.is_leader:
            if self.ownership.load(index, epoch) is Load.START:
                self._drop(index)
                self._nursery.start_soon(self._load, partition, epoch)
        else:
            self.unload(index, epoch)

    def unload(self, index: int, epoch: int | None) -> bool:
        """scheduleUnloadOperation; True when it applied (state dropped, timers cancelled)."""
        context = self.ownership.unload(index, epoch)
        if context is None:
            return False
        self._drop(index)
        return True

    def _drop(self, index: int) -> None:
        for key in [k for k in self._timer_operations if k[0] == index]:
            del self._timer_operations[key]
        self._timers_changed.set()
        self._unloader(index)

    async def _load(self, partition: Partition, epoch: int) -> None:
        started = time.monotonic()
        try:
            install = await self._loader(partition, epoch)
        except Exception:
            if self.ownership.fail_load(partition.index, epoch):
                self.log.exception(
                    "cannot load %s-%d at epoch %d", self.topic, partition.index, epoch
                )
            return
        if not self.ownership.complete_load(partition.index, epoch):
            return
        install()
        self.log.debug(
            "loaded %s-%d at epoch %d in %.0f ms",
            self.topic,
            partition.index,
            epoch,
            (time.monotonic() - started) * 1000,
        )

    async def read_batches(
        self, partition: Partition, epoch: int
    ) -> AsyncIterator[tuple[BatchHeader, memoryview]]:
        """The partition's valid batches from its log start to its log end (Kafka's
        CoordinatorLoaderImpl reads to the log end too: as leader, this log is the one the
        followers will match), as (header, bytes). Stops early when the
        load is no longer wanted. As Kafka does, a read error ends the load with what was
        read (logged): the partition's keys answering NOT_COORDINATOR for ever would send
        clients round in a loop."""
        position = partition.log.log_start_offset
        try:
            while position < partition.log.log_end_offset:
                data = partition.log.read(position, max_bytes=LOAD_READ_BYTES)
                if not data:
                    break
                for start, header in scan_valid_batches(data):
                    position = header.last_offset + 1
                    yield header, memoryview(data)[start : start + header.size]
                await trio.lowlevel.checkpoint()
                if not self.ownership.loading(partition.index, epoch):
                    return
        except (StorageError, RecordError) as error:
            self.log.error(
                "cannot read %s-%d past offset %d: %s; serving what was read",
                self.topic,
                partition.index,
                position,
                error,
            )

    # -- writing as the coordinator ---------------------------------------------------------------

    async def write(
        self,
        key: str,
        records: Sequence[tuple[bytes, bytes | None]],
        *,
        timeout_s: float,
        now_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> tuple[Error, int]:
        """Kafka's PartitionWriter.append through scheduleWriteOperation: ``records`` to
        ``key``'s partition as one batch through the replica manager's append_records
        (AppendOrigin.COORDINATOR, acks=-1), answered once the ISR has it (committed), or
        with the append's error; (error, the batch's base offset). Refused before any I/O
        unless the partition is ACTIVE here.

        With a producer id the batch is a transactional one of that producer (a
        TxnOffsetCommit), with base sequence 0 as Kafka's CoordinatorRuntime builds it (the
        log checks only its epoch: sequences are the client's, not the coordinator's)."""
        index = self.partition_for(key)
        if (error := self.ownership.check(index)) != Error.NONE:
            return error, -1
        transactional = producer_id != NO_PRODUCER_ID
        batch = encode_batch(
            [Record(offset, now_ms, k, v) for offset, (k, v) in enumerate(records)],
            attributes=TRANSACTIONAL_FLAG_MASK if transactional else 0,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=0 if transactional else NO_SEQUENCE,
        )
        ((result,),) = await self.replicas.append_records(
            [(self.topic, (PartitionProduceData(index, memoryview(batch)),))],
            acks=-1,
            timeout_s=timeout_s,
            origin=AppendOrigin.COORDINATOR,
        )
        return Error(result["error_code"]), result["base_offset"]

    # -- the internal topic -----------------------------------------------------------------------

    async def ensure_topic(self, create_topics) -> Error:
        """Create the internal topic on first use with the coordinator's configs (one
        creation at a time: concurrent callers wait for it). ``create_topics`` sends a
        CreateTopics request to the controller and returns the topic's error."""
        if self.replicas.metadata.topic(self.topic) is not None:
            return Error.NONE
        if self._topic_creation is not None:
            await self._topic_creation.wait()
            return (
                Error.NONE
                if self.replicas.metadata.topic(self.topic)
                else Error.COORDINATOR_NOT_AVAILABLE
            )
        self._topic_creation = trio.Event()
        try:
            spec = self._topic_spec()
            return await create_internal_topic(
                create_topics, self.topic, spec.partitions, spec.replication_factor, spec.configs
            )
        finally:
            self._topic_creation.set()
            self._topic_creation = None

    # -- timers -----------------------------------------------------------------------------------

    def schedule(
        self, key: str, name: str, delay_s: float, operation: Callable[[], Awaitable[None]]
    ) -> bool:
        """CoordinatorTimer.schedule: run ``operation`` in ``delay_s`` seconds (trio's clock)
        unless cancelled, re-armed or the partition of ``key`` unloaded first; a timer keyed
        ``name`` already armed is replaced. False when the partition is not ACTIVE here. An
        operation already running is not cancelled by a re-arm (as Kafka's runs as a write
        event): it ends on its own, its writes refused once the partition is unloaded."""
        index = self.partition_for(key)
        if not self.ownership.schedule(index, name, trio.current_time() + delay_s):
            return False
        self._timer_operations[(index, name)] = operation
        self._timers_changed.set()
        return True

    def cancel(self, key: str, name: str) -> None:
        """CoordinatorTimer.cancel."""
        index = self.partition_for(key)
        self.ownership.cancel(index, name)
        if self._timer_operations.pop((index, name), None) is not None:
            self._timers_changed.set()

    async def _run_timers(self) -> None:
        while True:
            self._timers_changed = trio.Event()
            deadline = self.ownership.next_deadline()
            with trio.move_on_at(float("inf") if deadline is None else deadline):
                await self._timers_changed.wait()
            assert self._nursery is not None
            for fired in self.ownership.due(trio.current_time()):
                operation = self._timer_operations.pop(fired, None)
                if operation is not None:
                    self._nursery.start_soon(operation)
