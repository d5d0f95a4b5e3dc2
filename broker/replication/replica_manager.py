"""The replicas this broker holds, and everything that changes them.

The controller decides roles (LeaderAndIsr) and the cluster picture (UpdateMetadata); the
replica manager applies them: it creates partition logs on first sight, turns replicas into
leaders or followers, hands followers to the fetchers, asks the controller for ISR changes
(AlterPartition), wakes parked requests when a log or a high watermark moves, and checkpoints
high watermarks. Handlers never touch storage directly; they go through here.
"""

import enum
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

import trio

from minibroker.cluster.controller_client import (
    ControllerClient,
    ControllerUnavailable,
    Described,
    build_request,
)
from minibroker.cluster.node_connection import NodeConnection
from minibroker.common.client_metrics import ClientMetricsManager
from minibroker.common.config import UNKNOWN_CONTROLLER_ID, BrokerConfig
from minibroker.common.config_model import (
    DYNAMIC_TOPIC_CONFIG,
    TOPIC_RESOURCE,
    DynamicBrokerConfigs,
)
from minibroker.common.features import FinalizedFeatures, initial_levels
from minibroker.common.metrics import BrokerMetrics
from minibroker.common.names import INTERNAL_TOPICS
from minibroker.protocol.errors import Error
from minibroker.protocol.offsets import (
    EARLIEST,
    EARLIEST_LOCAL,
    EARLIEST_PENDING_UPLOAD,
    LATEST,
    LATEST_TIERED,
    MAX_TIMESTAMP,
)
from minibroker.protocol.record_batch import HEADER_SIZE, read_header
from minibroker.protocol.versions import ApiKey
from minibroker.replication.fetch_session import FetchManager, FetchSessionCache
from minibroker.replication.fetcher import FetcherManager
from minibroker.replication.log_dir_mover import LogDirMover
from minibroker.replication.log_io import (
    IN_THREAD,
    RunSync,
    create_logs,
    delete_logs,
    must_wait,
    ready_to_append,
    unlink_deleted_files,
    write_offset_checkpoints,
)
from minibroker.replication.metadata_cache import BrokerEndpoint, MetadataCache
from minibroker.replication.partition import Partition
from minibroker.replication.purgatory import Watchers, readers_first
from minibroker.replication.replica_selector import (
    FollowerState,
    find_preferred_read_replica,
    replica_selector_for,
)
from minibroker.replication.replication_quota import (
    ALTER_LOG_DIRS_RATE,
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    UNBOUNDED,
    ReplicationQuotaManager,
    rate_of,
)
from minibroker.storage.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from minibroker.storage.errors import OffsetOutOfRangeError, StorageError
from minibroker.storage.file_records import FileRecords
from minibroker.storage.log import PartitionLog
from minibroker.storage.log_manager import LogManager, LogRequest
from minibroker.storage.producer_state import ProducerSnapshot

log = logging.getLogger("replicas")

HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
# At least a transaction marker's batch (61 bytes of header and one control record): the
# size its append is checked with before it may roll the segment.
MARKER_SIZE = 128


def wall_clock_ms() -> int:
    """The time of day: record timestamps, segment rolls, retention and offsets' commit
    times, which Kafka defines by the wall clock."""
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    """A clock for measuring intervals (sessions, replica lag): it never jumps when the time
    of day is stepped (NTP, an operator's `date -s`), so a jump forward cannot make every
    session or follower look expired at once, nor a jump back keep a dead one alive."""
    return int(time.monotonic() * 1000)


# The coordinators' topics: only AppendOrigin.COORDINATOR appends to them.


class AppendOrigin(enum.Enum):
    """Kafka's AppendOrigin: who appends as leader. Clients may not write the internal
    topics (Kafka's internalTopicsAllowed is false for them); the coordinator may."""

    CLIENT = "client"
    COORDINATOR = "coordinator"


class RecordsToAppend(Protocol):
    """One partition's record set, as the hand-written Produce decoder gives it: whole v2
    batches in a writable view of the request frame (stamped in place, never decoded)."""

    index: int
    records: memoryview | None


def append_result(index: int, error: Error, error_message: str | None = None) -> dict:
    """A Produce response partition (Kafka's PartitionResponse) without offsets."""
    return {
        "index": index,
        "error_code": error,
        "base_offset": -1,
        "log_append_time": -1,
        "log_start_offset": -1,
        "error_message": error_message,
    }


def _end_of_batches(records: bytes) -> int:
    """The offset after the last whole batch of a read (Kafka's fetch upper bound for the
    aborted transactions), from the batch headers' lengths alone."""
    position = 0
    last = -1
    while position + HEADER_SIZE <= len(records):
        header = read_header(records, position)
        last = header.last_offset
        position += header.size
    return last + 1


def fetch_result(
    index: int, error: Error, partition=None, records: bytes | FileRecords | None = b""
) -> dict:
    """A Fetch response partition (Kafka's FetchPartitionData) with every field the encoders
    read; ``partition`` (when hosted here) supplies the offsets."""
    entry = {
        "partition_index": index,
        "error_code": error,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": records,
    }
    if partition is not None:
        entry["high_watermark"] = partition.high_watermark
        entry["last_stable_offset"] = partition.last_stable_offset
        entry["log_start_offset"] = partition.log.log_start_offset
    return entry


class PendingAck:
    """A partition appended under acks=-1, waiting for the high watermark (Kafka's
    DelayedProduce keeps one ProducePartitionStatus each). A failure replaces the outcome
    fields of ``result``, the partition's response entry."""

    __slots__ = ("partition", "required_offset", "result")

    def __init__(self, partition: Partition, required_offset: int, result: dict) -> None:
        self.partition = partition
        self.required_offset = required_offset
        self.result = result

    def fail(self, error: Error) -> None:
        result = self.result
        result["error_code"] = error
        result["base_offset"] = result["log_append_time"] = result["log_start_offset"] = -1
        result["error_message"] = None


class ReplicaManager:
    """Partitions hosted here, their roles, and the cluster as the controller described it."""

    def __init__(
        self,
        config: BrokerConfig,
        log_manager: LogManager,
        controller: ControllerClient,
        metrics: BrokerMetrics,
        clock_ms: Callable[[], int] = wall_clock_ms,
        *,
        elapsed_ms: Callable[[], int] = monotonic_ms,
        connect: Callable[..., Awaitable[NodeConnection]] = NodeConnection.connect,
        run_blocking: RunSync = IN_THREAD,
    ) -> None:
        """``elapsed_ms``, ``connect`` (how fetchers reach a leader) and ``run_blocking``
        (how the log manager's blocking file-system steps run: in worker threads,
        replication/log_io.py) are seams for the in-process tests
        (tests/unit/test_replica_manager.py, test_fetcher.py, test_log_io.py)."""
        self.run_blocking = run_blocking
        self.config = config
        self.metrics = metrics
        self.log_manager = log_manager
        self.controller = controller
        self.clock_ms = clock_ms
        # Followers' progress for the ISR is measured in intervals, not times of day.
        self.elapsed_ms = elapsed_ms
        self.connect = connect
        self.metadata = MetadataCache()
        # Dynamic broker configs, as the controller pushes them (AlterConfigs).
        self.dynamic_configs = DynamicBrokerConfigs(config.node_id, log_manager.default_config)
        # Replication throttles (KIP-73): the leader's and the follower's quota, their rates
        # from the dynamic broker configs, their partitions from the topics' replica lists.
        self.leader_quota = ReplicationQuotaManager(
            "LeaderReplication",
            config.node_id,
            config.replication_quota_window_num,
            config.replication_quota_window_size_seconds,
        )
        self.follower_quota = ReplicationQuotaManager(
            "FollowerReplication",
            config.node_id,
            config.replication_quota_window_num,
            config.replication_quota_window_size_seconds,
        )
        # The copy of replicas moving between log dirs (replica.alter.log.dirs.io.max.bytes
        # .per.second, Kafka's ReplicaAlterLogDirsThread quota), its static value until a
        # dynamic one comes.
        self.alter_log_dirs_quota = ReplicationQuotaManager(
            "AlterLogDirsReplication",
            config.node_id,
            config.alter_log_dirs_replication_quota_window_num,
            config.alter_log_dirs_replication_quota_window_size_seconds,
        )
        self.alter_log_dirs_quota.update_quota(
            config.replica_alter_log_dirs_io_max_bytes_per_second
        )
        # Configs of topics not hosted here yet, pushed by the controller before the
        # LeaderAndIsr that creates their replicas here.
        self.announced_topic_configs: dict[str, dict[str, str]] = {}
        # Each group's configs (KIP-848's GROUP resources), as the controller pushes them:
        # what DescribeConfigs shows here and the group coordinator applies (Kafka's
        # GroupConfigManager, fed by the broker's metadata).
        self.group_configs: dict[str, dict[str, str]] = {}
        # Client telemetry (KIP-714): the client-metrics subscriptions the controller pushes,
        # the client instances and their pushed metrics (apis/telemetry.py, node/metrics.py).
        self.client_metrics_configs: dict[str, dict[str, str]] = {}
        self.client_metrics = ClientMetricsManager(telemetry_max_bytes=config.telemetry_max_bytes)
        # The cluster's finalized features (KIP-584), as the controller pushes them
        # (UpdateFeatures, apis/features.py); until then a new cluster's, at epoch 0.
        self.finalized_features = FinalizedFeatures(initial_levels(config.transaction_version))
        # Woken on append and on high-watermark moves: parked fetches and acks=-1 produces.
        self.watchers = Watchers()
        self.fetchers = FetcherManager(self)
        # Replicas moving between this broker's log dirs (AlterReplicaLogDirs).
        self.log_dir_mover = LogDirMover(
            self, self.alter_log_dirs_quota, config.replica_fetch_backoff_ms / 1000
        )
        # Follower fetching (KIP-392): replica.selector.class, None when unset.
        self.replica_selector = replica_selector_for(config.replica_selector_class)
        # Incremental fetch sessions (KIP-227), consulted by every Fetch.
        self.fetch_sessions = FetchManager(
            FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        )
        self.controller_epoch = -1
        # The controller's node id, when controller.quorum.bootstrap.servers left it unsaid.
        self.learned_controller_id: int | None = None
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._producer_ids: list[int] = []
        self._first_leader_and_isr = trio.Event()
        # Set by the first UpdateMetadata, which the controller sends once this broker has
        # registered: until then client requests wait, as a KRaft broker keeps its client
        # listeners closed until it is unfenced.
        self.ready = trio.Event()
        self._state_change_lock = trio.Lock()
        # ISR changes waiting for the next AlterPartition (see _request_isr_change).
        self._pending_isr_changes: dict[tuple[str, int], tuple[Partition, list[int]]] = {}
        self._isr_changes_queued = trio.Event()
        # Told of every partition whose role changed here (the group coordinator loads and
        # unloads the groups of `__consumer_offsets` partitions this way).
        self.role_listeners: list[Callable[[Partition], None]] = []
        # Told of each partition hosted here that a StopReplica deleted (a deleted topic),
        # after its files are gone: the Iceberg writer drops the topic's tables.
        self.deletion_listeners: list[Callable[[Partition], None]] = []
        # Told of the ids of the topics an UpdateMetadata took away (deleted), on every broker
        # whether it hosts them or not, as Kafka's coordinators see TopicsDelta.deletedTopicIds
        # (the group and share coordinators clean the share groups' state of them).
        self.topic_deletion_listeners: list[Callable[[set[uuid.UUID]], None]] = []
        # Told of every transaction marker written here as leader, once it is replicated:
        # listener(topic, partition index, producer id, commit?) (the group coordinator
        # completes its pending transactional offset commits on `__consumer_offsets` so, as
        # Kafka's handleWriteTxnMarkersRequest calls onTransactionCompleted).
        self.marker_listeners: list[Callable[[str, int, int, bool], None]] = []
        self._nursery: trio.Nursery | None = None
        checkpointed = self._read_high_watermarks()
        for partition_log in log_manager.logs():
            key = (partition_log.topic, partition_log.partition)
            info = log_manager.topics()[partition_log.topic]
            partition = Partition(
                partition_log.topic,
                info.topic_id,
                partition_log.partition,
                partition_log,
                config.node_id,
                high_watermark=checkpointed.get(key, 0),
            )
            partition.clamp_high_watermark()
            self._partitions[key] = partition

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.fetchers.run)
            await nursery.start(self.log_dir_mover.run)
            nursery.start_soon(self._maintain_isr)
            nursery.start_soon(self._send_isr_changes)
            nursery.start_soon(self._checkpoint_high_watermarks)
            task_status.started()

    def close(self) -> None:
        """Write the high-watermark checkpoint one last time (clean shutdown); if the disk
        refuses, the last checkpoint written stands and the next start recovers from it."""
        if self._first_leader_and_isr.is_set():
            try:
                self.write_high_watermarks()
            except StorageError as error:
                log.error("cannot write %s at shutdown: %s", HIGH_WATERMARK_CHECKPOINT, error)

    # -- lookups --------------------------------------------------------------------------------

    def leader_partition(
        self, topic: str | None, index: int, current_leader_epoch: int = -1
    ) -> tuple[Partition | None, Error]:
        """The partition if this broker leads it at the epoch the client knows, else why not.

        UNKNOWN_TOPIC_OR_PARTITION when the cluster has no such partition,
        NOT_LEADER_OR_FOLLOWER when another broker leads it, FENCED_LEADER_EPOCH or
        UNKNOWN_LEADER_EPOCH when the client's epoch is older or newer than ours. The partition
        is returned with the error when it is hosted here, for the offsets a response carries.
        """
        partition = self._partitions.get((topic, index)) if topic else None
        if (
            partition is not None
            and partition.leader == partition.local_id
            and (current_leader_epoch == -1 or current_leader_epoch == partition.leader_epoch)
            and not self.log_manager.failures.any_offline
        ):
            # The common case, first and in one test (every partition of every produce and
            # fetch): led here at the client's epoch, no log dir offline.
            return partition, Error.NONE
        if partition is not None and self.is_offline(partition):
            return partition, Error.KAFKA_STORAGE_ERROR
        if partition is None or not partition.is_leader:
            known = self.metadata.topic(topic) if topic else None
            if partition is not None or (known is not None and index in known.partitions):
                return partition, Error.NOT_LEADER_OR_FOLLOWER
            return None, Error.UNKNOWN_TOPIC_OR_PARTITION
        return partition, partition.leader_epoch_error(current_leader_epoch)

    def readable_partition(
        self, topic: str | None, index: int, current_leader_epoch: int = -1
    ) -> tuple[Partition | None, Error]:
        """A consumer's fetch with follower fetching on (KIP-392): the partition if this
        broker holds a replica of it, leader or follower, at the epoch the client knows
        (Kafka's Partition.localLogWithEpochOrThrow with fetchOnlyFromLeader false); else
        the errors of ``leader_partition``. A follower serves up to its own high watermark
        (``read_records``). A replica loaded from disk whose role the controller has not
        given yet (no leader epoch) is not served: NOT_LEADER_OR_FOLLOWER, as Kafka's
        partitions are not online before their first LeaderAndIsr."""
        partition = self._partitions.get((topic, index)) if topic else None
        if partition is None or partition.leader_epoch < 0 or self.is_offline(partition):
            return self.leader_partition(topic, index, current_leader_epoch)
        return partition, partition.leader_epoch_error(current_leader_epoch)

    def preferred_read_replica(
        self, partition: Partition, client_rack: str, fetch_offset: int, listener_name: str
    ) -> int | None:
        """Kafka's ReplicaManager.findPreferredReadReplica for a consumer's fetch of a
        partition led here (replication/replica_selector.py has the rule): the replica the
        client in ``client_rack`` should read from instead, None when this leader serves it
        (or no selector is configured). Racks are those of the replicas' brokers on the
        client's listener, from the metadata of live brokers only, as Kafka's
        getPartitionReplicaEndpoints: a stopped or fenced follower is never chosen."""
        selector = self.replica_selector
        if selector is None or not partition.is_leader:
            return None
        racks: dict[int, str | None] = {}
        listeners = self.metadata.listeners
        for node_id in partition.replicas:
            endpoint = listeners.get(node_id, {}).get(listener_name)
            if endpoint is not None:
                racks[node_id] = endpoint.rack
        isr = partition.isr
        return find_preferred_read_replica(
            selector,
            client_rack=client_rack,
            fetch_offset=fetch_offset,
            now_ms=self.elapsed_ms(),
            leader_id=partition.local_id,
            leader_log_end_offset=partition.log.log_end_offset,
            followers=[
                FollowerState(
                    node_id,
                    node_id in isr,
                    progress.log_start_offset,
                    progress.log_end_offset,
                    progress.last_caught_up_ms,
                )
                for node_id, progress in partition.followers.items()
            ],
            racks=racks,
        )

    def local_partition(self, key: tuple[str, int]) -> Partition | None:
        """The partition if this broker holds a replica of it."""
        return self._partitions.get(key)

    def is_offline(self, partition: Partition) -> bool:
        """Whether the partition's log is in a failed log dir (Kafka's HostedPartition
        .Offline): nothing is read or written there until a restart recovers it."""
        failures = self.log_manager.failures
        # any_offline first: this runs for every partition of every produce and fetch, and a
        # Path's parent and hash cost microseconds each (the latency row's p50 1.4x slower).
        return failures.any_offline and failures.is_offline(partition.log.directory.parent)

    def handle_log_dir_failure(self, directory: Path) -> list[tuple[str, int]]:
        """Kafka's ReplicaManager.handleLogDirFailure for one failed dir among several: its
        partitions stop being fetched, and every request parked on them (an acks=-1 produce,
        a fetch) wakes up to find them offline (KAFKA_STORAGE_ERROR, as Kafka's
        getPartitionOrError answers for an Offline partition). Their logs refuse every
        operation already (storage/log_dir_failure.py); the broker tells the controller,
        which moves their leadership away. Returns the partitions taken offline."""
        offline = [
            key
            for key, partition in self._partitions.items()
            if partition.log.directory.parent == directory
        ]
        for key in offline:
            self.fetchers.remove(key)
            self.notify(self._partitions[key])
        log.error(
            "log dir %s failed: %d partition(s) offline on this broker (%s)",
            directory,
            len(offline),
            ", ".join(f"{topic}-{index}" for topic, index in offline[:5])
            + (" ..." if len(offline) > 5 else ""),
        )
        return offline

    async def alter_replica_log_dirs(
        self, moves: dict[tuple[str, int], str]
    ) -> dict[tuple[str, int], Error]:
        """Kafka's ReplicaManager.alterReplicaLogDirs (replication/log_dir_mover.py), under
        the state-change lock as Kafka's is under replicaStateChangeLock."""
        async with self._state_change_lock:
            return self.log_dir_mover.alter(moves)

    def hosted_partition(self, topic: str | None, index: int) -> tuple[Partition | None, Error]:
        """Kafka's ReplicaManager.getPartitionOrError: the partition if this broker holds a
        replica of it, leader or follower; else NOT_LEADER_OR_FOLLOWER when the cluster has
        the partition elsewhere, UNKNOWN_TOPIC_OR_PARTITION when it has no such partition."""
        partition = self._partitions.get((topic, index)) if topic else None
        if partition is not None:
            if self.is_offline(partition):
                return partition, Error.KAFKA_STORAGE_ERROR
            return partition, Error.NONE
        known = self.metadata.topic(topic) if topic else None
        if known is not None and index in known.partitions:
            return None, Error.NOT_LEADER_OR_FOLLOWER
        return None, Error.UNKNOWN_TOPIC_OR_PARTITION

    def schema_validation(self, topic: str, indexes) -> tuple[bool, bool]:
        """The topic's (key, value) schema validation flags on produce (Confluent Server's
        confluent.key/value.schema.validation), from a partition of it hosted here; both
        False when none is. One dict lookup: the produce path of every topic pays it."""
        for index in indexes:
            partition = self._partitions.get((topic, index))
            if partition is not None:
                config = partition.log.config
                return config.key_schema_validation, config.value_schema_validation
        return False, False

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    @property
    def applying_controller_request(self) -> bool:
        """Whether a LeaderAndIsr or StopReplica is being applied (it yields between
        partitions, so other requests see some of its partitions done and some not yet)."""
        return self._state_change_lock.locked()

    async def controller_requests_applied(self) -> None:
        """Return once no LeaderAndIsr or StopReplica is being applied."""
        async with self._state_change_lock:
            pass

    @property
    def broker_epoch(self) -> int:
        """This broker's epoch as the controller registered it (-1 until registered): what
        its fetchers send as Fetch v15+'s ReplicaState.ReplicaEpoch (KIP-903)."""
        return self.controller.broker_epoch

    def notify(self, partition: Partition) -> None:
        self.watchers.notify(partition.key)

    # -- the append path: every write of a partition as leader -----------------------------

    async def append_records(
        self,
        entries: Iterable[tuple[str, Sequence[RecordsToAppend]]],
        *,
        acks: int,
        timeout_s: float,
        origin: AppendOrigin,
    ) -> list[list[dict]]:
        """Kafka's ReplicaManager.appendRecords: the one way records are written as leader.

        Clients' Produce and the group coordinator's writes (origin COORDINATOR) come here;
        for each topic's partitions, in order, one response entry (Kafka's PartitionResponse,
        with ``index``). Kafka's rule, per partition: the internal topics are refused to
        clients (INVALID_TOPIC_EXCEPTION); a partition not led here at its current epoch is
        refused (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION); with acks=-1 an ISR
        smaller than min.insync.replicas refuses it before anything is appended
        (NOT_ENOUGH_REPLICAS); otherwise the log validates the batches and appends them in
        one write, the high watermark advances (an ISR of this broker alone needs nobody),
        the purgatory's watchers of the partition wake (parked fetches, parked acks=-1
        appends), and BytesIn/MessagesIn count what was appended. With acks=-1 the call then
        waits, as Kafka's DelayedProduce, until every appended partition's outcome is known
        (see ``wait_for_replication``); with acks 0 and 1 it returns at once.

        The data path stays as lean as it was in the handler: records are never decoded
        here, a writable view is stamped in place, and per partition there is the response
        entry, the log's AppendResult and, under acks=-1, one PendingAck. Departure: Kafka
        counts the coordinator's appends in BytesIn/MessagesIn too, and so do we now.
        """
        pending: list[PendingAck] | None = [] if acks == -1 else None
        now_ms = self.clock_ms()
        listed = [(topic, list(partitions)) for topic, partitions in entries]
        await self._ready_to_append(listed, now_ms)
        woken = self.watchers.woken
        # No await from here to the last append: no roll can begin in between.
        results = [
            [self._append_to_leader(topic, data, now_ms, origin, pending) for data in partitions]
            for topic, partitions in listed
        ]
        if pending:
            await self.wait_for_replication(pending, timeout_s)
        elif self.watchers.woken != woken:
            await readers_first()
        return results

    async def _ready_to_append(
        self, entries: list[tuple[str, list[RecordsToAppend]]], now_ms: int
    ) -> None:
        """Wait until no log the request appends to has a roll in flight or due, rolling
        those due with their files made in a worker thread (log_io.ready_to_append); a pass
        that waited for nothing ends it. A failed roll is left for the append to report
        (its log dir is offline by then)."""
        failed: set[int] = set()
        while True:
            waited = False
            for topic, partitions in entries:
                for data in partitions:
                    partition = self._partitions.get((topic, data.index))
                    if partition is None or not data.records or id(partition.log) in failed:
                        continue
                    size = len(data.records)
                    if must_wait(partition.log, size, now_ms):
                        waited = True
                        try:
                            await ready_to_append(partition.log, size, now_ms, self.run_blocking)
                        except StorageError:
                            failed.add(id(partition.log))
            if not waited:
                return

    def _append_to_leader(
        self,
        topic: str,
        data: RecordsToAppend,
        now_ms: int,
        origin: AppendOrigin,
        pending: list[PendingAck] | None,
    ) -> dict:
        """One partition of ``append_records`` (Kafka's appendToLocalLog and
        Partition.appendRecordsToLeader); ``pending`` is None unless acks=-1."""
        index = data.index
        if topic in INTERNAL_TOPICS and origin is not AppendOrigin.COORDINATOR:
            # A record the coordinator cannot read would cost the partition's groups or
            # transactional ids.
            return append_result(
                index,
                Error.INVALID_TOPIC_EXCEPTION,
                f"{topic} is internal: clients cannot produce to it",
            )
        partition, error = self.leader_partition(topic, index)
        if error != Error.NONE:
            return append_result(index, error)
        assert partition is not None  # leader_partition answers Error.NONE with the partition
        records = data.records
        if not records:
            return append_result(index, Error.CORRUPT_MESSAGE, "no record batches")
        partition_log = partition.log
        if pending is not None:
            min_insync = partition_log.config.min_insync_replicas
            if (error := partition.acks_all_error(min_insync)) != Error.NONE:
                return append_result(
                    index,
                    error,
                    f"ISR {partition.isr} is smaller than min.insync.replicas={min_insync}",
                )
        try:
            appended = partition_log.append_as_leader(
                records,
                leader_epoch=partition.leader_epoch,
                now_ms=now_ms,
                client=origin is AppendOrigin.CLIENT,
            )
        except StorageError as failure:
            log.log(
                logging.WARNING if origin is AppendOrigin.COORDINATOR else logging.INFO,
                "refused %s append to %s-%d: %s",
                origin.value,
                topic,
                index,
                failure,
            )
            return append_result(index, failure.error, str(failure))
        if not appended.duplicate:
            partition.maybe_advance_high_watermark()
            self.watchers.notify(partition.key)
            metrics = self.metrics
            metrics.child(metrics.messages_in, topic).inc(appended.record_count)
            metrics.child(metrics.bytes_in, topic).inc(len(records))
        result = {
            "index": index,
            "error_code": Error.NONE,
            "base_offset": appended.first_offset,
            "log_append_time": appended.log_append_time_ms,
            "log_start_offset": appended.log_start_offset,
            "error_message": None,
        }
        if pending is not None:
            pending.append(PendingAck(partition, appended.last_offset + 1, result))
        return result

    async def wait_for_replication(self, pending: list[PendingAck], timeout_s: float) -> None:
        """Kafka's DelayedProduce: park until every pending partition has its outcome (the
        HW passed its offset, or leadership or the ISR was lost:
        NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND); time out the rest with
        REQUEST_TIMED_OUT."""
        deadline = trio.current_time() + timeout_s
        while pending:
            still_waiting = []
            for ack in pending:
                if self.is_offline(ack.partition):
                    ack.fail(Error.KAFKA_STORAGE_ERROR)
                    continue
                min_insync = ack.partition.log.config.min_insync_replicas
                outcome = ack.partition.acks_all_outcome(ack.required_offset, min_insync)
                if outcome is None:
                    still_waiting.append(ack)
                elif outcome != Error.NONE:
                    ack.fail(outcome)
            pending = still_waiting
            if not pending:
                return
            if trio.current_time() >= deadline:
                for ack in pending:
                    ack.fail(Error.REQUEST_TIMED_OUT)
                return
            await self.watchers.wait_any(
                [ack.partition.key for ack in pending], deadline, "Produce"
            )

    # -- replication throttles (KIP-73, replication/replication_quota.py) ---------------------

    def update_replication_throttle_rates(self) -> None:
        """Take the throttle rates of the dynamic broker configs (this broker's, else the
        cluster default's), as Kafka's BrokerConfigHandler does on each change."""
        by_resource = self.dynamic_configs.by_resource
        own = by_resource.get(str(self.config.node_id), {})
        cluster = by_resource.get("", {})
        static = self.config.replica_alter_log_dirs_io_max_bytes_per_second
        for quota, name, default in (
            (self.leader_quota, LEADER_RATE, None),
            (self.follower_quota, FOLLOWER_RATE, None),
            (self.alter_log_dirs_quota, ALTER_LOG_DIRS_RATE, static),
        ):
            bound = rate_of(name, own, cluster, default)
            if bound != quota.bound:
                shown = "unbounded" if bound >= UNBOUNDED else f"{bound} bytes/s"
                log.info("%s now %s", name, shown)
            quota.update_quota(bound)

    def leader_throttled(self, partition: Partition) -> bool:
        """Whether ``partition``'s follower traffic counts against the leader quota here."""
        replicas = self.log_manager.topic_overrides(partition.topic).get(LEADER_REPLICAS, "")
        return self.leader_quota.is_throttled(partition.index, replicas)

    def should_leader_throttle(self, partition: Partition, replica_id: int) -> bool:
        """Kafka's shouldLeaderThrottle: a follower not in the ISR, of a partition throttled
        here, while the leader quota is exceeded, gets no records."""
        quota = self.leader_quota
        if not quota.bounded or replica_id in partition.isr:
            return False
        replicas = self.log_manager.topic_overrides(partition.topic).get(LEADER_REPLICAS, "")
        return quota.should_throttle(False, partition.index, replicas, self.elapsed_ms())

    def record_leader_throttled_bytes(self, size: int) -> None:
        self.leader_quota.record(size, self.elapsed_ms())

    def follower_throttled(self, partition: Partition) -> bool:
        replicas = self.log_manager.topic_overrides(partition.topic).get(FOLLOWER_REPLICAS, "")
        return self.follower_quota.is_throttled(partition.index, replicas)

    def should_follower_throttle(self, partition: Partition) -> bool:
        """Kafka's shouldFollowerThrottle: a partition this follower is not in sync with
        (its last fetch left it behind the leader's high watermark, or it has not fetched
        yet), throttled here, while the follower quota is exceeded, is left out of the next
        fetch."""
        quota = self.follower_quota
        if not quota.bounded:
            return False
        in_sync = partition.fetch_lag is not None and partition.fetch_lag <= 0
        replicas = self.log_manager.topic_overrides(partition.topic).get(FOLLOWER_REPLICAS, "")
        return quota.should_throttle(in_sync, partition.index, replicas, self.elapsed_ms())

    def record_follower_throttled_bytes(self, partition: Partition, size: int) -> None:
        """Count a fetched partition's bytes against the follower quota if it is throttled
        (in-sync or not, as Kafka's ReplicaFetcherThread)."""
        if size and self.follower_throttled(partition):
            self.follower_quota.record(size, self.elapsed_ms())

    # -- the read paths: what handlers read of a partition's log -----------------------------

    def read_at_end(
        self, partition: Partition, fetch_offset: int, isolation_level: int
    ) -> dict | None:
        """A consumer's read of a partition it has read to its end (``fetch_offset`` at the
        high watermark; read_committed: the last stable offset): the entry ``read_records``
        would answer, without the log's checks and read; None for any other read. Most
        partitions of a keeping-up consumer's fetch of many are such (librdkafka has no fetch
        sessions: its every fetch names all 64 partitions of the latency row's topic, issue
        40). The read would find nothing, and every condition that makes it answer otherwise
        (an offset before the log start, an offline log dir) takes the full read."""
        high_watermark = partition.high_watermark
        # (A property, so read once, and only where it decides or is answered.)
        last_stable_offset = partition.last_stable_offset if isolation_level == 1 else None
        if fetch_offset != (high_watermark if last_stable_offset is None else last_stable_offset):
            return None
        log_start_offset = partition.log.log_start_offset
        if fetch_offset >= log_start_offset and not self.log_manager.failures.any_offline:
            if last_stable_offset is None:
                last_stable_offset = partition.last_stable_offset
            return {
                "partition_index": partition.index,
                "error_code": Error.NONE,
                "high_watermark": high_watermark,
                "last_stable_offset": last_stable_offset,
                "log_start_offset": log_start_offset,
                "aborted_transactions": [] if isolation_level == 1 else None,
                "preferred_read_replica": -1,
                "records": b"",
            }
        return None

    def read_records(
        self,
        partition: Partition,
        fetch_offset: int,
        *,
        replica_id: int,
        last_fetched_epoch: int,
        max_bytes: int,
        min_one_batch: bool,
        record_progress: bool,
        isolation_level: int = 0,
        zero_copy: bool = False,
        log_start_offset: int = -1,
        replica_epoch: int = -1,
    ) -> dict:
        """Kafka's ReplicaManager.readFromLog for one partition hosted here: its Fetch
        response entry (``fetch_result``). The partition is led here, or (a consumer's fetch
        with follower fetching on, KIP-392, see ``readable_partition``) followed here: then
        the consumer reads up to this follower's own high watermark (read_committed: its last
        stable offset), as Kafka's follower serves it; an offset past it but within the log
        gets an empty answer, one past the log end OFFSET_OUT_OF_RANGE with this replica's
        high watermark, which tells librdkafka to go back to the leader.

        A consumer with ``isolation_level`` 1 (read_committed) reads up to the last stable
        offset instead of the HW, and its entry lists the aborted transactions overlapping
        what it read (``{"producer_id", "first_offset"}``, from the `.txnindex`; an empty
        list when there are none, null for read_uncommitted, as Kafka answers), so that the
        client drops their records. Neither needs a record decoded: the LSO comes from the
        producer state, the range's end from the last batch header read.

        Only a replica the leader knows reads past the HW (up to the log end); any other
        replica id is served as a consumer, so a client cannot see unreplicated records by
        claiming one. A follower whose last fetched epoch ends before its fetch offset here
        gets the diverging epoch and no records (Fetch v12); otherwise its fetch offset is its
        log end, which moves the HW and may grow the ISR (``record_progress`` is false when
        a parked fetch reads again), and ``log_start_offset`` its log start, which follower
        fetching consults (``preferred_read_replica``), and ``replica_epoch`` its broker
        epoch (Fetch v15+, KIP-903; -1 before), which the next AlterPartition carries. Reads
        return whole stored batches, as bytes, or with ``zero_copy`` (a plaintext
        connection) a large read as FileRecords, slices of the segment files that the
        connection sends with sendfile (PartitionLog.read). A follower out of the ISR
        reading a partition under this leader's replication throttle gets no records while
        the throttle is exceeded (``should_leader_throttle``, KIP-73; the caller counts the
        bytes it sends).
        """
        index = partition.index
        partition_log = partition.log
        follower = replica_id in partition.followers
        if not follower and (entry := self.read_at_end(partition, fetch_offset, isolation_level)):
            return entry
        if follower and last_fetched_epoch >= 0:
            epoch, end_offset = partition_log.end_offset_for_epoch(last_fetched_epoch)
            if epoch < last_fetched_epoch or end_offset < fetch_offset:
                entry = fetch_result(index, Error.NONE, partition)
                entry["diverging_epoch"] = {"epoch": epoch, "end_offset": end_offset}
                return entry
        if follower and record_progress and fetch_offset <= partition_log.log_end_offset:
            self.record_follower_fetch(
                partition, replica_id, fetch_offset, log_start_offset, replica_epoch
            )
        read_committed = isolation_level == 1 and not follower
        if follower:
            max_offset = None
        elif read_committed:
            max_offset = partition.last_stable_offset
        else:
            max_offset = partition.high_watermark
        try:
            read = partition_log.read_file_records if zero_copy else partition_log.read
            records = read(
                fetch_offset,
                max_bytes=max_bytes,
                max_offset=max_offset,
                min_one_batch=min_one_batch,
            )
        except StorageError as failure:
            return fetch_result(index, failure.error, partition)
        if follower and records and self.should_leader_throttle(partition, replica_id):
            # KIP-73 (Kafka's readFromLocalLog): an out-of-sync follower of a throttled
            # partition gets no records while the leader quota is exceeded.
            if isinstance(records, FileRecords):
                records.close()
            records = b""
        entry = fetch_result(index, Error.NONE, partition, records)
        if read_committed:
            aborted = []
            # Most logs have no aborted transaction past the fetch offset: then the batch
            # headers of the read need not be walked for the range's exact end.
            if records and partition_log.collect_aborted_transactions(
                fetch_offset, partition_log.log_end_offset
            ):
                # The range's end is read from the batch headers: this rare read takes bytes.
                if isinstance(records, FileRecords):
                    records = entry["records"] = records.take()
                aborted = partition_log.collect_aborted_transactions(
                    fetch_offset, _end_of_batches(records)
                )
            entry["aborted_transactions"] = [
                {"producer_id": producer_id, "first_offset": first_offset}
                for producer_id, first_offset in aborted
            ]
        return entry

    # -- transaction markers -----------------------------------------------------------------

    async def append_txn_markers(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[tuple[str, int]],
        timeout_s: float,
        transaction_version: int = 0,
    ) -> dict[tuple[str, int], Error]:
        """Write a transaction's COMMIT or ABORT marker to each partition led here (Kafka's
        handleWriteTxnMarkersRequest: appendRecords with requiredAcks -1, origin
        COORDINATOR, internal topics allowed); the answer per partition, once each is
        replicated as acks=-1 waits (see ``wait_for_replication``).

        Per partition, Kafka's errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
        NOT_ENOUGH_REPLICAS (ISR below min.insync.replicas), INVALID_PRODUCER_EPOCH and
        TRANSACTION_COORDINATOR_FENCED (PartitionLog.append_control_marker), then those of
        the wait. A marker wakes the partition's watchers like any append (a read_committed
        fetch parked on it reads again), and ``marker_listeners`` hear of each one written
        and replicated.
        """
        now_ms = self.clock_ms()
        results: dict[tuple[str, int], Error] = {}
        pending: list[PendingAck] = []
        for key in partitions:
            partition, error = self.leader_partition(*key)
            if error != Error.NONE or partition is None:
                results[key] = error
                continue
            min_insync = partition.log.config.min_insync_replicas
            if (error := partition.acks_all_error(min_insync)) != Error.NONE:
                results[key] = error
                continue
            try:
                if must_wait(partition.log, MARKER_SIZE, now_ms):
                    await ready_to_append(partition.log, MARKER_SIZE, now_ms, self.run_blocking)
                    partition, error = self.leader_partition(*key)  # it may have moved
                    if error != Error.NONE or partition is None:
                        results[key] = error
                        continue
                appended = partition.append_control_marker(
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    coordinator_epoch=coordinator_epoch,
                    commit=commit,
                    now_ms=now_ms,
                    transaction_version=transaction_version,
                )
            except StorageError as failure:
                log.info(
                    "refused %s marker of producer %d for %s-%d: %s",
                    "COMMIT" if commit else "ABORT",
                    producer_id,
                    *key,
                    failure,
                )
                results[key] = failure.error
                continue
            partition.maybe_advance_high_watermark()
            self.watchers.notify(partition.key)
            result = {"error_code": Error.NONE}
            results[key] = Error.NONE
            pending.append(PendingAck(partition, appended.last_offset + 1, result))
        if pending:
            await self.wait_for_replication(list(pending), timeout_s)
        for ack in pending:
            key = ack.partition.key
            results[key] = ack.result["error_code"]
            if results[key] == Error.NONE:
                for listener in self.marker_listeners:
                    try:
                        listener(key[0], key[1], producer_id, commit)
                    except Exception:  # the marker is written: its answer stands
                        log.exception("marker listener failed for %s-%d", *key)
        return results

    def maybe_start_transaction_verification(
        self,
        partition: Partition,
        producer_id: int,
        producer_epoch: int,
        sequence: int,
        *,
        supports_epoch_bump: bool,
    ) -> bool:
        """Kafka's UnifiedLog.maybeStartTransactionVerification (KIP-890): False when the
        producer has a transaction open on the partition at this epoch (its transactional
        produce needs no verification with the coordinator); else the partition starts (or
        updates) the producer's verification state, with the batch's first sequence, and
        True. ``supports_epoch_bump``: transaction protocol v2 (Produce v12)."""
        producers = partition.log.producer_state
        entry = producers.entry(producer_id)
        if (
            entry is not None
            and entry.epoch == producer_epoch
            and producers.ongoing_transaction(producer_id) is not None
        ):
            return False
        producers.start_verification(
            producer_id,
            sequence,
            producer_epoch,
            self.clock_ms(),
            supports_epoch_bump=supports_epoch_bump,
        )
        return True

    def active_producers(self, partition: Partition) -> list[ProducerSnapshot]:
        """Kafka's ReplicaManager.activeProducerState (DescribeProducers)."""
        return partition.log.producer_state.active_producers()

    def fetch_offset_for_timestamp(
        self, partition: Partition, timestamp: int, isolation_level: int, replica_id: int
    ) -> tuple[int, int]:
        """Kafka's ReplicaManager.fetchOffsetForTimestamp (ListOffsets): (timestamp, offset),
        (-1, -1) when no record qualifies. Consumers never see past the HW (read_committed:
        the last stable offset), for LATEST as for timestamp lookups; a follower asking
        LATEST (after OFFSET_OUT_OF_RANGE) gets the log end.

        Without tiered storage (Kafka's UnifiedLog with remoteLogEnabled() false), the earliest
        local offset (KIP-405) is the log start offset, and there is no latest tiered offset
        (KIP-1005) nor earliest pending upload offset (KIP-1023): (-1, -1)."""
        partition_log = partition.log
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            return -1, partition_log.log_start_offset
        if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
            return -1, -1
        if timestamp == LATEST and replica_id >= 0:
            return -1, partition_log.log_end_offset
        # Kafka's lastFetchableOffset: what a consumer of this isolation level may read.
        end = partition.last_stable_offset if isolation_level == 1 else partition.high_watermark
        if timestamp == LATEST:
            return -1, end
        if timestamp == MAX_TIMESTAMP:
            found = partition_log.max_timestamp()
            if found is None or found[0] >= end:
                return -1, -1
            offset, max_ts = found
            return max_ts, offset
        found = partition_log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= end:
            return -1, -1
        offset, record_ts = found
        return record_ts, offset

    def last_offset_for_leader_epoch(
        self, partition: Partition, leader_epoch: int
    ) -> tuple[int, int]:
        """Kafka's ReplicaManager.lastOffsetForLeaderEpoch: (the largest epoch at or below
        ``leader_epoch``, where it ends) from the leader epoch cache; the current epoch ends
        at the log end offset."""
        return partition.log.end_offset_for_epoch(leader_epoch)

    def delete_records(self, partition: Partition, offset: int) -> tuple[Error, int]:
        """Kafka's ReplicaManager.deleteRecords on the leader: move the log start offset to
        ``offset`` (-1: the high watermark); (error, the new low watermark). Never past the
        HW (OFFSET_OUT_OF_RANGE). Kafka answers once every replica moved
        (DelayedDeleteRecords); here the leader's move is the answer (apis/admin.py)."""
        high_watermark = partition.high_watermark
        if offset == -1:
            offset = high_watermark
        if not 0 <= offset <= high_watermark:
            return Error.OFFSET_OUT_OF_RANGE, -1
        try:
            partition.log.maybe_increment_log_start_offset(offset)
        except OffsetOutOfRangeError:
            return Error.OFFSET_OUT_OF_RANGE, -1
        return Error.NONE, partition.log.log_start_offset

    def log_dir_of(self, partition: Partition) -> tuple[Path, int, int]:
        """For Kafka's describeLogDirs: (the log dir holding the partition, its size in
        bytes, its offset lag: HW minus log end, never below zero)."""
        partition_log = partition.log
        lag = max(partition.high_watermark - partition_log.log_end_offset, 0)
        return partition_log.directory.parent, partition_log.size_bytes, lag

    # -- controller requests ---------------------------------------------------------------

    def check_controller(self, request) -> Error:
        """Kafka's checks on controller requests: the sender and its epoch. In ZooKeeper mode
        any broker may be elected, so the epoch alone tells the current controller."""
        zookeeper_mode = self.config.zookeeper_mode
        expected = self.config.controller.node_id
        if expected == UNKNOWN_CONTROLLER_ID and not zookeeper_mode:
            # Named by controller.quorum.bootstrap.servers: the first controller request on
            # the inter-node channel (already checked by the inter-node rules) names it.
            expected = self.learned_controller_id = (
                self.learned_controller_id
                if self.learned_controller_id is not None
                else request.controller_id
            )
        if not zookeeper_mode and request.controller_id != expected:
            return Error.CLUSTER_AUTHORIZATION_FAILED
        if request.controller_epoch < self.controller_epoch:
            return Error.STALE_CONTROLLER_EPOCH
        self.controller_epoch = request.controller_epoch
        return Error.NONE

    async def apply_leader_and_isr(self, request) -> dict[tuple[str, int], Error]:
        """Make this broker leader or follower of each partition the request names.

        Requests are applied one at a time (Kafka's replicaStateChangeLock): fetching a new
        topic's configs awaits the controller, and a retried or newer request must not
        interleave with it. Only a newer leader epoch changes a partition's role; at the same
        leader epoch a newer partition epoch updates the ISR alone (an ISR change the
        controller made, or one whose AlterPartition answer this leader missed). Anything
        older is refused with STALE_CONTROLLER_EPOCH, as Kafka does.
        """
        async with self._state_change_lock:
            for leader in request.live_leaders:
                self.metadata.remember_broker(
                    BrokerEndpoint(leader.broker_id, leader.host_name, leader.port)
                )
            results: dict[tuple[str, int], Error] = {}
            # Followers start fetching together once the whole request is applied, as Kafka
            # adds fetchers once per LeaderAndIsr: added one by one while partitions are being
            # created, the first fetch would carry the first few and park at the leader for up
            # to replica.fetch.wait.max.ms before the next one could carry the rest. Those
            # applied before a failure part-way (a full disk, say) still get their fetchers.
            to_follow: list[Partition] = []
            try:
                await self._apply_topic_states(request.topic_states, results, to_follow)
            finally:
                for partition in to_follow:
                    self.fetchers.add(partition)
            if self.log_manager.unfinished_moves:
                self.log_dir_mover.resume_unfinished()
            self._first_leader_and_isr.set()
            self._log_role_summary(results)
            return results

    def _log_role_summary(self, results: dict[tuple[str, int], Error]) -> None:
        """One line per LeaderAndIsr, however many partitions it names (the details are at
        DEBUG): a thousand-partition topic must not write thousands of lines."""
        applied = [key for key, error in results.items() if error == Error.NONE]
        if not applied:
            return
        leading = [key for key in applied if self._partitions[key].is_leader]
        following = [key for key in applied if not self._partitions[key].is_leader]

        def named(keys: list[tuple[str, int]]) -> str:
            shown = ", ".join(f"{topic}-{index}" for topic, index in keys[:3])
            return shown + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")

        parts = []
        if leading:
            parts.append(f"leader of {named(leading)}")
        if following:
            parts.append(f"follower of {named(following)}")
        log.info("controller epoch %d: %s", self.controller_epoch, "; ".join(parts))

    async def _apply_topic_states(
        self,
        topic_states,
        results: dict[tuple[str, int], Error],
        to_follow: list[Partition],
    ) -> None:
        new_topics = [
            topic_state.topic_name
            for topic_state in topic_states
            if any(
                self.config.node_id in state.replicas
                and self._is_new_replica(topic_state, state.partition_index)
                for state in topic_state.partition_states
            )
        ]
        # Configs the controller pushed before this request; one DescribeConfigs for every
        # other new topic of the request, not one per topic.
        announced = {
            name: self.announced_topic_configs.pop(name)
            for name in new_topics
            if name in self.announced_topic_configs
        }
        missing = [name for name in new_topics if name not in announced]
        configs = await self._topic_configs(missing) if missing else {}
        configs.update(announced)
        # The new replicas' logs are made first, all of them in a worker thread with one
        # fsync per log dir (replication/log_io.py): making a partition's directory and
        # files takes milliseconds of blocking file-system calls, up to a hundred for a
        # directory fsync, which on the event loop stalled every client. Then the states
        # are applied in the request's order, as before; a failure part-way (a full disk)
        # leaves the partitions before it created and applied, and raises.
        wanted = [
            (topic_state, state)
            for topic_state in topic_states
            for state in topic_state.partition_states
        ]
        new = [
            (topic_state, state)
            for topic_state, state in wanted
            if self.config.node_id in state.replicas
            and self._is_new_replica(topic_state, state.partition_index)
        ]
        hosted_by_topic = self._hosted_by_topic({topic_state.topic_name for topic_state, _ in new})
        for topic_state, state in new:
            self._drop_stale_replicas(topic_state, state.partition_index, hosted_by_topic)
        failure: Exception | None = None
        created: list[PartitionLog] = []
        if new:
            created, failure = await create_logs(
                self.log_manager,
                [
                    LogRequest(
                        topic_state.topic_name,
                        topic_state.topic_id,
                        state.partition_index,
                        configs[topic_state.topic_name],
                    )
                    for topic_state, state in new
                ],
                self.clock_ms(),
                self.run_blocking,
            )
        made = {(log_.topic, log_.partition): log_ for log_ in created}
        for count, (topic_state, state) in enumerate(wanted):
            key = (topic_state.topic_name, state.partition_index)
            if self.config.node_id not in state.replicas:
                results[key] = Error.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if self._is_new_replica(topic_state, state.partition_index):
                partition_log = made.get(key)
                if partition_log is None:
                    break  # the failure's partition: it and those after it are not applied
                partition = Partition(
                    key[0], topic_state.topic_id, key[1], partition_log, self.config.node_id
                )
                self._partitions[key] = partition
            else:
                partition = self._partitions[key]  # _is_new_replica: it is hosted here
                if self.is_offline(partition):
                    # Kafka's becomeLeaderOrFollower for an Offline partition: this tells
                    # the controller the replica is in a failed log dir.
                    results[key] = Error.KAFKA_STORAGE_ERROR
                    continue
            results[key] = self._apply_partition_state(partition, state, to_follow)
            if count % 100 == 99:
                await trio.lowlevel.checkpoint()  # other clients' turn in a big request
        if failure is not None:
            raise failure

    def _is_new_replica(self, topic_state, index: int) -> bool:
        partition = self._partitions.get((topic_state.topic_name, index))
        return partition is None or partition.topic_id != topic_state.topic_id

    def _apply_partition_state(
        self, partition: Partition, state, to_follow: list[Partition]
    ) -> Error:
        """Apply one partition's state; a partition that now follows a live leader is
        appended to `to_follow` for the caller to hand to the fetchers."""
        key = partition.key
        if state.leader_epoch < partition.leader_epoch or (
            state.leader_epoch == partition.leader_epoch
            and state.partition_epoch <= partition.partition_epoch
        ):
            return Error.STALE_CONTROLLER_EPOCH
        isr, replicas = list(state.isr), list(state.replicas)
        if state.leader_epoch == partition.leader_epoch and state.leader == partition.leader:
            partition.isr = isr
            partition.partition_epoch = state.partition_epoch
            if replicas != partition.replicas:  # a reassignment adds replicas
                partition.change_replicas(replicas, self.clock_ms())
            partition.maybe_advance_high_watermark()
        elif state.leader == self.config.node_id:
            self.fetchers.remove(key)
            partition.become_leader(
                state.leader_epoch, state.partition_epoch, isr, replicas, self.elapsed_ms()
            )
            partition.maybe_advance_high_watermark()
            log.debug("leader of %s-%d at epoch %d, ISR %s", *key, state.leader_epoch, isr)
        else:
            partition.become_follower(
                state.leader, state.leader_epoch, state.partition_epoch, isr, replicas
            )
            self.fetchers.remove(key)
            if state.leader >= 0:
                to_follow.append(partition)
            log.debug(
                "follower of %s-%d at epoch %d (leader %d)", *key, state.leader_epoch, state.leader
            )
        self.notify(partition)
        self._tell_role_listeners(partition)
        return Error.NONE

    def _tell_role_listeners(self, partition: Partition) -> None:
        for listener in self.role_listeners:
            listener(partition)

    def _hosted_by_topic(self, names: set[str]) -> dict[str, list[tuple[str, int]]]:
        """The hosted partitions' keys of these topics, by topic: one pass over every hosted
        partition for a whole LeaderAndIsr."""
        found: dict[str, list[tuple[str, int]]] = {}
        for key in self._partitions:
            if key[0] in names:
                found.setdefault(key[0], []).append(key)
        return found

    def _drop_stale_replicas(
        self, topic_state, index: int, hosted_by_topic: dict[str, list[tuple[str, int]]]
    ) -> None:
        """Before a new replica's log is made: a topic recreated under a new id first loses
        every old partition (the log manager deletes their logs). ``hosted_by_topic`` is
        :meth:`_hosted_by_topic` for the request's topics: the keys of this topic are looked
        at, not every hosted partition (issue 39: a scan of all of them for each new replica
        made creating N partitions cost N x N)."""
        name = topic_state.topic_name
        stale = [
            key
            for key in hosted_by_topic.get(name, ())
            if (partition := self._partitions.get(key)) is not None
            and (key[1] == index or partition.topic_id != topic_state.topic_id)
        ]
        for key in stale:
            old = self._partitions.pop(key)
            old.leader = -1  # parked requests on it now answer NOT_LEADER_OR_FOLLOWER
            self.fetchers.remove(key)
            self.notify(old)

    async def _topic_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        """New replicas' topic configs, from the controller (one DescribeConfigs for them
        all); the cached or default ones for a topic the controller cannot answer for."""
        request = build_request(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": TOPIC_RESOURCE,
                        "resource_name": topic,
                        "configuration_keys": None,
                    }
                    for topic in topics
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
        found: dict[str, dict[str, str]] = {}
        for _attempt in range(5):
            try:
                response = await self.controller.request(request, timeout_s=5.0)
            except ControllerUnavailable as error:
                log.warning("cannot read the configs of %d topic(s) yet: %s", len(topics), error)
                await trio.sleep(0.2)
                continue
            for result in response.results:
                if result.error_code.value == Error.NONE:
                    found[result.resource_name] = {
                        c.name: c.value
                        for c in result.configs
                        if c.config_source == DYNAMIC_TOPIC_CONFIG
                    }
            break
        known = self.log_manager.topics()
        for topic in topics:
            if topic not in found:
                cached = known.get(topic)
                log.warning("using %s configs of %s", "cached" if cached else "default", topic)
                found[topic] = dict(cached.configs) if cached else {}
        return found

    def apply_update_metadata(self, request) -> None:
        before = self.metadata.topic_ids()
        self.metadata.update(request)
        self.ready.set()
        deleted = before - self.metadata.topic_ids()
        if deleted:
            log.info("topics deleted: %s", sorted(str(topic_id) for topic_id in deleted))
            for listener in self.topic_deletion_listeners:
                listener(deleted)

    async def apply_stop_replica(self, request) -> list[tuple[str, int, Error]]:
        """Stop hosting (and with delete_partition, delete) each partition the request names.

        Under the same lock as LeaderAndIsr. The deleted partitions' directories are
        removed together in a worker thread, with one fsync per log dir, before the answer
        (replication/log_io.py): removing a partition's files blocks for milliseconds.
        Departure: a partition stopped without deletion is still flushed on the loop.
        """
        results = []
        async with self._state_change_lock:
            doomed: list[tuple[str, int]] = []
            deleted: list[Partition] = []
            for topic_state in request.topic_states:
                for state in topic_state.partition_states:
                    key = (topic_state.topic_name, state.partition_index)
                    partition = self._partitions.pop(key, None)
                    if partition is not None:
                        self.fetchers.remove(key)
                        partition.leader = -1
                        self.notify(partition)
                        self._tell_role_listeners(partition)
                        log.debug("stopped replica %s-%d", *key)
                    if state.delete_partition:
                        doomed.append(key)
                        if partition is not None:
                            deleted.append(partition)
                    else:
                        self.log_manager.remove_log(*key, delete=False)
                        await trio.lowlevel.checkpoint()
                    results.append((*key, Error.NONE))
            if doomed:
                await delete_logs(self.log_manager, doomed, self.run_blocking)
            for partition in deleted:
                for listener in self.deletion_listeners:
                    listener(partition)
        if results:
            log.info("stopped %d replica(s), first %s-%d", len(results), *results[0][:2])
        return results

    def log_start_offset(self, partition: Partition) -> int:
        """The partition's log start offset now, as read_records answers it (a woken fetch's
        kept entries take it again without reading the log)."""
        return partition.log.log_start_offset

    # -- leaders: followers' progress and the ISR ------------------------------------------------

    def idle_follower_fetch(
        self,
        partition: Partition,
        replica_id: int,
        fetch_offset: int,
        log_start_offset: int,
        replica_epoch: int,
        *,
        record_progress: bool,
    ) -> bool:
        """A follower's fetch of a partition its session's note says is idle (apis/fetch.py's
        notes): True when the follower is in the ISR, its fetch offset is this log's end now,
        and its progress here is what the fetch says (offset, log start, broker epoch), so
        that read_records would find nothing and only record the fetch; that record is made
        here (``record_progress``: the request's first read), through the same
        record_follower_fetch. False: read it in full."""
        progress = partition.followers.get(replica_id)
        if (
            progress is None
            or replica_id not in partition.isr
            or fetch_offset != partition.log.log_end_offset
            or progress.log_end_offset != fetch_offset
            or progress.log_start_offset != log_start_offset
            or progress.broker_epoch != replica_epoch
        ):
            return False
        if record_progress:
            self.record_follower_fetch(
                partition, replica_id, fetch_offset, log_start_offset, replica_epoch
            )
        return True

    def record_follower_fetch(
        self,
        partition: Partition,
        replica_id: int,
        fetch_offset: int,
        log_start_offset: int = -1,
        replica_epoch: int = -1,
    ) -> None:
        """Note a follower's position; move the HW and grow the ISR as Kafka's leader does."""
        if partition.record_follower_fetch(
            replica_id, fetch_offset, self.elapsed_ms(), log_start_offset, replica_epoch
        ):
            self.notify(partition)
        joining = (
            replica_id not in partition.isr  # nearly always: skip the epoch and follower walk
            and replica_id in partition.followers_ready_to_join()
            and self._is_live(replica_id)
        )
        if joining and self._request_isr_change(partition, sorted({*partition.isr, replica_id})):
            # Kafka's "maximal ISR": the HW waits for a joining replica from now on, so that
            # nothing it lacks is acknowledged while the expansion is in flight.
            partition.joining = replica_id

    async def _maintain_isr(self) -> None:
        """Shrink the ISR of followers that stopped catching up (replica.lag.time.max.ms)."""
        lag_ms = self.config.replica_lag_time_max_ms
        while True:
            await trio.sleep(lag_ms / 2000)
            now_ms = self.elapsed_ms()
            for partition in self.partitions():
                if not partition.is_leader or self.is_offline(partition):
                    continue  # an offline one's leadership is the controller's to move
                lagging = partition.lagging_isr_members(now_ms, lag_ms)
                if lagging:
                    log.warning(
                        "shrinking ISR of %s-%d: %s not caught up in %d ms",
                        *partition.key,
                        lagging,
                        lag_ms,
                    )
                    self._request_isr_change(
                        partition, [r for r in partition.isr if r not in lagging]
                    )

    def _is_live(self, node_id: int) -> bool:
        """Whether the controller's last word lists the broker as live (not fenced)."""
        return node_id in self.metadata.brokers

    def _request_isr_change(self, partition: Partition, new_isr: list[int]) -> bool:
        """Queue an AlterPartition for the partition unless one is pending or in flight; True
        when one was queued. The queue goes to the controller in one request at a time, as
        Kafka's AlterPartitionManager sends it: after a restart a leader has hundreds of
        followers to take back into the ISR, and one request (with one state save on the
        controller) per partition took minutes."""
        if partition.isr_change_in_flight or new_isr == partition.isr or self._nursery is None:
            return False
        partition.isr_change_in_flight = True
        self._pending_isr_changes[partition.key] = (partition, list(new_isr))
        self._isr_changes_queued.set()
        return True

    async def _send_isr_changes(self) -> None:
        """Send the queued ISR changes, all of them in one AlterPartition, one request at a
        time; what is queued meanwhile goes in the next."""
        while True:
            await self._isr_changes_queued.wait()
            self._isr_changes_queued = trio.Event()
            batch = list(self._pending_isr_changes.values())
            self._pending_isr_changes.clear()
            await self._alter_partition(batch)

    async def _alter_partition(self, batch: list[tuple[Partition, list[int]]]) -> None:
        nursery = self._nursery
        assert nursery is not None  # this runs in run()'s nursery (_send_isr_changes)
        by_topic: dict[object, list[dict]] = {}
        sent: dict[tuple[object, int], tuple[Partition, list[int]]] = {}
        for partition, new_isr in batch:
            sent[(partition.topic_id, partition.index)] = (partition, new_isr)
            by_topic.setdefault(partition.topic_id, []).append(
                {
                    "partition_index": partition.index,
                    "leader_epoch": partition.leader_epoch,
                    # v2's NewIsr, or v3's NewIsrWithEpochs (KIP-903): build_request keeps
                    # the one the version sent has.
                    "new_isr": tuple(new_isr),
                    "new_isr_with_epochs": partition.isr_with_broker_epochs(
                        new_isr, self.controller.broker_epoch
                    ),
                    "leader_recovery_state": 0,
                    "partition_epoch": partition.partition_epoch,
                }
            )
        # v3 where the controller serves it, else v2 (Described: the channel chooses).
        request = Described(
            ApiKey.ALTER_PARTITION,
            {
                "broker_id": self.config.node_id,
                "broker_epoch": self.controller.broker_epoch,
                "topics": [
                    {"topic_id": topic_id, "partitions": partitions}
                    for topic_id, partitions in by_topic.items()
                ],
            },
        )
        try:
            response = await self.controller.request(request)
        except ControllerUnavailable as error:
            log.warning("AlterPartition for %d partition(s) failed: %s", len(batch), error)
            nursery.start_soon(self._retry_isr_changes_later, [p for p, _ in batch])
            return
        if response.error_code.value != Error.NONE:
            # NOT_CONTROLLER: a broker that just lost a ZooKeeper-mode election; the next
            # attempt goes to the one elected since.
            log.warning("AlterPartition refused: %s; retrying", response.error_code.name)
            nursery.start_soon(self._retry_isr_changes_later, [p for p, _ in batch])
            return
        refused: list[Partition] = []
        changed: list[Partition] = []
        for topic in response.topics:
            for result in topic.partitions:
                entry = sent.get((topic.topic_id, result.partition_index))
                if entry is None:
                    continue
                partition, new_isr = entry
                if result.error_code.value != Error.NONE:
                    log.warning(
                        "controller refused ISR %s for %s-%d: %s",
                        new_isr,
                        *partition.key,
                        result.error_code.name,
                    )
                    refused.append(partition)
                    continue
                partition.isr_change_in_flight = False
                partition.joining = None
                if partition.is_leader and partition.leader_epoch == result.leader_epoch:
                    if set(result.isr) < set(partition.isr):
                        self.metrics.isr_shrinks.inc()
                    elif set(result.isr) > set(partition.isr):
                        self.metrics.isr_expands.inc()
                    partition.isr = list(result.isr)
                    partition.partition_epoch = result.partition_epoch
                    log.debug("ISR of %s-%d is now %s", *partition.key, partition.isr)
                    changed.append(partition)
                    partition.maybe_advance_high_watermark()
                    self.notify(partition)
        if changed:
            shown = ", ".join(f"{p.topic}-{p.index} {p.isr}" for p in changed[:3])
            more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
            log.info("ISR changed for %d partition(s): %s%s", len(changed), shown, more)
        if refused:
            nursery.start_soon(self._retry_isr_changes_later, refused)

    async def run_retention(self, now_ms: int) -> int:
        """Retention over the hosted logs, never past a partition's high watermark; the
        deleted segments' files are renamed on the loop and unlinked in a worker thread
        (replication/log_io.py)."""
        deleted = self.log_manager.run_retention(
            now_ms,
            {partition.key: partition.high_watermark for partition in self.partitions()},
            defer_unlink=True,
        )
        await unlink_deleted_files(self.log_manager, self.run_blocking)
        return deleted

    async def _retry_isr_changes_later(self, partitions: list[Partition]) -> None:
        """Back off before the next AlterPartition for these partitions, so a refusal (a stale
        partition epoch until the controller's LeaderAndIsr arrives) is not retried in a loop."""
        await trio.sleep(self.config.replica_fetch_backoff_ms / 1000)
        for partition in partitions:
            partition.isr_change_in_flight = False
            partition.joining = None

    # -- high watermark checkpoint -------------------------------------------------------

    def _read_high_watermarks(self) -> dict[tuple[str, int], int]:
        found: dict[tuple[str, int], int] = {}
        for directory in self.log_manager.log_dirs:
            found.update(read_offset_checkpoint(Path(directory) / HIGH_WATERMARK_CHECKPOINT))
        return found

    def write_high_watermarks(self) -> None:
        """Kafka's replication-offset-checkpoint, one per log dir, written atomically."""
        for directory, offsets in self._high_watermarks_by_dir().items():
            if self.log_manager.failures.is_offline(directory):
                continue
            # A failed write takes the dir offline, as Kafka's ReplicaManager
            # .checkpointHighWatermarks reports it to the LogDirFailureChannel.
            with self.log_manager.directory_io(directory, f"writing {HIGH_WATERMARK_CHECKPOINT}"):
                write_offset_checkpoint(directory / HIGH_WATERMARK_CHECKPOINT, offsets)

    def _high_watermarks_by_dir(self) -> dict[Path, dict[tuple[str, int], int]]:
        per_dir: dict[Path, dict[tuple[str, int], int]] = {
            Path(directory): {} for directory in self.log_manager.log_dirs
        }
        for partition in self.partitions():
            per_dir[partition.log.directory.parent][partition.key] = partition.high_watermark
        return per_dir

    async def _checkpoint_high_watermarks(self) -> None:
        """Started by the first LeaderAndIsr, as in Kafka, then every interval. A failed
        write (a full disk) takes its log dir offline (see write_high_watermarks): the
        previous checkpoint stays valid, as writes are atomic."""
        await self._first_leader_and_isr.wait()
        interval = self.config.replica_high_watermark_checkpoint_interval_ms / 1000
        while True:
            try:
                # Taken now on the loop, written in a worker thread (replication/log_io.py).
                await write_offset_checkpoints(
                    self.log_manager,
                    HIGH_WATERMARK_CHECKPOINT,
                    self._high_watermarks_by_dir(),
                    self.run_blocking,
                )
            except StorageError as error:
                log.error("cannot write %s: %s", HIGH_WATERMARK_CHECKPOINT, error)
            await trio.sleep(interval)

    # -- producer ids ------------------------------------------------------------------------

    async def next_producer_id(self) -> int:
        """An id from the block the controller allocated to this broker, fetching a new block
        when it runs out; ids are unique across the cluster and across restarts."""
        if not self._producer_ids:
            response = await self.controller.request(
                build_request(
                    ApiKey.ALLOCATE_PRODUCER_IDS,
                    {
                        "broker_id": self.config.node_id,
                        "broker_epoch": self.controller.broker_epoch,
                    },
                )
            )
            if response.error_code.value != Error.NONE:
                raise ControllerUnavailable(f"no producer ids: {response.error_code.name}")
            start = response.producer_id_start
            self._producer_ids = list(range(start + response.producer_id_len - 1, start - 1, -1))
        return self._producer_ids.pop()
