"""The share coordinator: share partitions' durable state on `__share_group_state`, on trio.

Kafka's ShareCoordinatorService (share-coordinator module), on the coordinator runtime shared
by every coordinator (coordinator/runtime.py, Kafka's CoordinatorRuntime). The coordinator of
a share partition's state is the leader of partition ``partitionFor("group:topicId:partition")``
of `__share_group_state`; FindCoordinator key type 2 names it. The rules are the pure
``state.ShareCoordinatorShard``, one per partition this broker leads; this shell adds:

- leadership and loading (the runtime's): a partition led here is read from its start and its
  records replayed into a new shard, installed when the load is still the wanted one; a
  partition no longer led is dropped;
- each operation: the key's partition must be ACTIVE here (NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS otherwise); the topic id and partition must exist in this
  broker's metadata (UNKNOWN_TOPIC_OR_PARTITION, as Kafka checks its metadata image); the
  shard decides; its records are written through the runtime (the replica manager's one
  append path, acks=-1) and replayed into the shard only once committed. The operations of
  one partition run one at a time (a lock per partition), as Kafka's runtime runs a shard's
  write operations in order, so a snapshot is always computed from the state before it;
- the topic's creation (the runtime's ensure_topic, from FindCoordinator): Kafka's
  configs: ``share.coordinator.state.topic.num.partitions`` (50),
  ``share.coordinator.state.topic.replication.factor`` (3) capped at the live brokers as
  the other internal topics are, cleanup.policy delete with retention.ms -1 (Kafka prunes
  the topic with DeleteRecords below the oldest snapshot still needed; minibroker does not
  prune yet, so nothing is deleted), min.insync.replicas
  ``share.coordinator.state.topic.min.isr`` (2) capped at the replication factor.

A failed write answers COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR as Kafka's runtime maps
append errors, and the shard is left as it was (nothing replayed).
"""

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import trio

from minibroker.common.config import BrokerConfig
from minibroker.common.names import SHARE_GROUP_STATE_TOPIC
from minibroker.coordinator.runtime import CoordinatorRuntime, InternalTopic
from minibroker.coordinator.share.log_format import ShareRecordFormatError, ShareSnapshotValue
from minibroker.coordinator.share.state import (
    Decision,
    Record,
    ShareCoordinatorShard,
    SharePartitionKey,
    Summary,
)
from minibroker.protocol.errors import Error
from minibroker.protocol.records import decode_records
from minibroker.replication.partition import Partition
from minibroker.replication.replica_manager import ReplicaManager
from minibroker.replication.share_partition import StateBatch

log = logging.getLogger("share-coordinator")

# Kafka's share coordinator writes time out at share.coordinator.write.timeout.ms (5 s).
WRITE_TIMEOUT_S = 5.0

# Kafka's CoordinatorRuntime: what a failed append answers.
_APPEND_ERRORS = {
    Error.UNKNOWN_TOPIC_OR_PARTITION: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_ENOUGH_REPLICAS: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_ENOUGH_REPLICAS_AFTER_APPEND: Error.COORDINATOR_NOT_AVAILABLE,
    Error.REQUEST_TIMED_OUT: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_LEADER_OR_FOLLOWER: Error.NOT_COORDINATOR,
    Error.FENCED_LEADER_EPOCH: Error.NOT_COORDINATOR,
    Error.KAFKA_STORAGE_ERROR: Error.NOT_COORDINATOR,
    Error.MESSAGE_TOO_LARGE: Error.UNKNOWN_SERVER_ERROR,
    Error.RECORD_LIST_TOO_LARGE: Error.UNKNOWN_SERVER_ERROR,
}


@dataclass(frozen=True)
class ReadAnswer:
    error: Error
    state: ShareSnapshotValue | None = None
    summary: Summary | None = None


class ShareCoordinator:
    """The share partitions' state of the `__share_group_state` partitions led here."""

    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self.replicas = replicas
        self.clock_ms = clock_ms or replicas.clock_ms
        self.shards: dict[int, ShareCoordinatorShard] = {}
        self._locks: dict[int, trio.Lock] = {}
        self.runtime = CoordinatorRuntime(
            SHARE_GROUP_STATE_TOPIC,
            replicas,
            loader=self._load,
            unloader=self._unload,
            default_partitions=lambda: self.config.share_coordinator_state_topic_num_partitions,
            topic_spec=self._topic_spec,
            log=log,
        )
        replicas.topic_deletion_listeners.append(self._on_topics_deleted)
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.runtime.run)
            task_status.started()

    def _new_shard(self) -> ShareCoordinatorShard:
        per_snapshot = self.config.share_coordinator_snapshot_update_records_per_snapshot
        return ShareCoordinatorShard(per_snapshot)

    # -- which keys are served here ---------------------------------------------------------------

    def check(self, key: SharePartitionKey) -> Error:
        return self.runtime.check(key.coordinator_key())

    # -- loading ----------------------------------------------------------------------------------

    def _unload(self, index: int) -> None:
        shard = self.shards.pop(index, None)
        if shard is not None and shard.states:
            log.info(
                "unloaded %d share partitions (no longer leader of %s-%d)",
                len(shard.states),
                SHARE_GROUP_STATE_TOPIC,
                index,
            )

    async def _load(self, partition: Partition, epoch: int) -> Callable[[], None]:
        started = time.monotonic()
        shard = self._new_shard()
        async for header, batch in self.runtime.read_batches(partition, epoch):
            if header.is_control:
                continue
            for record in decode_records(batch):
                if record.key is None:
                    continue
                try:
                    shard.replay(record.key, record.value)
                except ShareRecordFormatError as error:
                    log.warning(
                        "skipping offset %d of %s-%d: %s",
                        record.offset,
                        SHARE_GROUP_STATE_TOPIC,
                        partition.index,
                        error,
                    )

        def install() -> None:
            self.shards[partition.index] = shard
            log.log(
                logging.INFO if shard.states else logging.DEBUG,
                "loaded %d share partitions of %s-%d in %.0f ms",
                len(shard.states),
                SHARE_GROUP_STATE_TOPIC,
                partition.index,
                (time.monotonic() - started) * 1000,
            )

        return install

    # -- the operations ---------------------------------------------------------------------------

    def _known(self, key: SharePartitionKey) -> bool:
        topic = self.replicas.metadata.topic_by_id(key.topic_id)
        return topic is not None and key.partition in topic.partitions

    async def _run(
        self,
        key: SharePartitionKey,
        decide: Callable[[ShareCoordinatorShard], Decision],
        *,
        needs_topic: bool = True,
    ) -> Decision:
        """One operation on ``key``: checks, the shard's decision, its records written and
        replayed once committed."""
        if key.topic_id == uuid.UUID(int=0) or key.partition < 0 or not key.group:
            return Decision(Error.INVALID_REQUEST)
        coordinator_key = key.coordinator_key()
        if (error := self.runtime.check(coordinator_key)) != Error.NONE:
            return Decision(error)
        if needs_topic and not self._known(key):
            return Decision(Error.UNKNOWN_TOPIC_OR_PARTITION)
        index = self.runtime.partition_for(coordinator_key)
        lock = self._locks.setdefault(index, trio.Lock())
        async with lock:
            shard = self.shards.get(index)
            if shard is None or self.runtime.check(coordinator_key) != Error.NONE:
                return Decision(Error.NOT_COORDINATOR)
            decision = decide(shard)
            if decision.error != Error.NONE or not decision.records:
                return decision
            error = await self._append(coordinator_key, decision.records)
            if error != Error.NONE:
                return Decision(error)
            if self.shards.get(index) is not shard:
                return Decision(Error.NOT_COORDINATOR)  # unloaded (or reloaded) meanwhile
            shard.replay_all(decision.records)
            return decision

    async def _append(self, coordinator_key: str, records: tuple[Record, ...]) -> Error:
        error, _ = await self.runtime.write(
            coordinator_key, records, timeout_s=WRITE_TIMEOUT_S, now_ms=self.clock_ms()
        )
        return _APPEND_ERRORS.get(error, error)

    async def initialize(
        self, key: SharePartitionKey, state_epoch: int, start_offset: int
    ) -> Error:
        now = self.clock_ms()
        decision = await self._run(
            key, lambda shard: shard.initialize(key, state_epoch, start_offset, now)
        )
        return decision.error

    async def write(
        self,
        key: SharePartitionKey,
        *,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: tuple[StateBatch, ...],
        delivery_complete_count: int = -1,
    ) -> Error:
        now = self.clock_ms()
        decision = await self._run(
            key,
            lambda shard: shard.write(
                key,
                state_epoch=state_epoch,
                leader_epoch=leader_epoch,
                start_offset=start_offset,
                batches=batches,
                delivery_complete_count=delivery_complete_count,
                now_ms=now,
            ),
        )
        return decision.error

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> ReadAnswer:
        decision = await self._run(key, lambda shard: shard.read(key, leader_epoch))
        return ReadAnswer(decision.error, decision.state)

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int) -> ReadAnswer:
        decision = await self._run(key, lambda shard: shard.read_summary(key, leader_epoch))
        return ReadAnswer(decision.error, decision.state, decision.summary)

    async def delete(self, key: SharePartitionKey) -> Error:
        # A deleted topic's state is deleted too: no metadata check.
        decision = await self._run(key, lambda shard: shard.delete(key), needs_topic=False)
        return decision.error

    # -- deleted topics ---------------------------------------------------------------------------

    def _on_topics_deleted(self, topic_ids: set[uuid.UUID]) -> None:
        """A topic's deletion (the replica manager's topic_deletion_listeners, Kafka's
        ShareCoordinatorService.onMetadataUpdate with TopicsDelta.deletedTopicIds)."""
        if self._nursery is not None:
            self._nursery.start_soon(self.cleanup_deleted_topics, topic_ids)

    async def cleanup_deleted_topics(self, topic_ids: set[uuid.UUID]) -> int:
        """Kafka's ShareCoordinatorShard.maybeCleanupShareState on every shard led here: the
        state of every share partition of a deleted topic is tombstoned (as
        DeleteShareGroupState tombstones it), so nothing of it is read again. A topic the
        metadata has again by then (never in Kafka: ids are not reused) is left alone. How
        many share partitions' state was deleted."""
        deleted = 0
        for shard in list(self.shards.values()):
            for key in [k for k in shard.states if k.topic_id in topic_ids]:
                if self.replicas.metadata.topic_by_id(key.topic_id) is not None:
                    continue
                error = await self.delete(key)
                if error != Error.NONE:
                    log.warning("state of deleted %s not deleted: %s", key, error.name)
                    continue
                deleted += 1
        if deleted:
            log.info("deleted the state of %d share partitions of deleted topics", deleted)
        return deleted

    # -- the topic --------------------------------------------------------------------------------

    def _topic_spec(self) -> InternalTopic:
        live = max(len(self.replicas.metadata.brokers), 1)
        replication = min(self.config.share_coordinator_state_topic_replication_factor, live)
        min_isr = min(self.config.share_coordinator_state_topic_min_isr, replication)
        return InternalTopic(
            self.config.share_coordinator_state_topic_num_partitions,
            replication,
            {
                "cleanup.policy": "delete",
                "retention.ms": "-1",
                "min.insync.replicas": str(min_isr),
                "unclean.leader.election.enable": "false",
                "compression.type": "uncompressed",
                "segment.bytes": str(self.config.share_coordinator_state_topic_segment_bytes),
            },
        )
