"""The share coordinator's shard: the durable state of each share partition, as plain data.

Kafka's share-coordinator ``ShareCoordinatorShard`` (org.apache.kafka.coordinator.share),
one per partition of `__share_group_state`. It keeps, per SharePartitionKey (group, topic id,
partition), the state the partition leader's SharePartition persisted: the state epoch, the
last writer's leader epoch, the start offset, the state batches (offset ranges with their
delivery state and count) and KIP-1226's delivery complete count. Each operation decides
here, with no I/O and the time passed in; it answers Kafka's error or the records to append
(ShareSnapshot and ShareUpdate, coordinator/share/log_format.py), which the service writes
through the coordinator runtime and then replays into this shard, as Kafka's runtime replays
a shard's records once written. A load replays the partition's records the same way, so the
state after a load is the state before it.

The rules, Kafka's:

- InitializeShareGroupState: a state epoch below the stored one is FENCED_STATE_EPOCH;
  otherwise a new ShareSnapshot (snapshot epoch bumped, leader epoch -1, no batches, the
  given start offset and state epoch) replaces whatever was there, except as below.
- WriteShareGroupState: an unknown key is UNKNOWN_TOPIC_OR_PARTITION (Kafka 4.x: a share
  partition is initialized before it is written); a leader epoch below the stored one is
  FENCED_LEADER_EPOCH, a state epoch below the stored one FENCED_STATE_EPOCH (in that
  order, as maybeGetWriteStateError checks). Then generateShareStateRecord: a ShareSnapshot
  of the merged state (snapshot epoch + 1) once ``updates_per_snapshot`` ShareUpdates have
  been written since the last snapshot (``share.coordinator.snapshot.update.records.per.
  snapshot``, default 500), else a ShareUpdate with the write's batches and the snapshot
  epoch of the last snapshot.
- ReadShareGroupState: an unknown key is UNKNOWN_TOPIC_OR_PARTITION, a leader epoch below
  the stored one FENCED_LEADER_EPOCH; a newer leader epoch is recorded with a ShareUpdate of
  no batches (readStateAndMaybeUpdateLeaderEpoch), so a leader fenced by a read stays fenced
  after a coordinator failover.
- ReadShareGroupStateSummary (readStateSummary, what DescribeShareGroupOffsets asks): no
  leader epoch check and nothing recorded; an unknown key is answered NONE with the start
  offset -1, leader epoch -1 and state epoch 0 (UNINITIALIZED_START_OFFSET,
  DEFAULT_LEADER_EPOCH, DEFAULT_STATE_EPOCH), else the state epoch, leader epoch, start
  offset and delivery complete count.
- DeleteShareGroupState: tombstones of the key's ShareSnapshot and ShareUpdate records; an
  unknown key is NONE with nothing written.
- replay: a ShareSnapshot replaces the state and restarts the update count; a ShareUpdate is
  merged over it (the newer batch wins where they overlap, nothing below the start offset is
  kept: log_format.merge, Kafka's PersisterStateBatchCombiner) and counts one more update;
  a tombstone of the ShareSnapshot key removes the key.

Departures, and why: an InitializeShareGroupState with the start offset -1 (Kafka's
UNINITIALIZED_START_OFFSET: the group coordinator's initialization of a subscribed share
partition, whose leader then starts it at share.auto.offset.reset) of a key that has state
already is answered NONE and writes nothing, where Kafka's initializeState replaces the
state. The group coordinator initializes a partition again when it could not record it as
initialized (its ShareGroupStatePartitionMetadata write failed: the partition stays
*initializing* and is retried after group.share.initialize.retry.interval.ms) or when the
persister's answer was an error (a timeout, the write committed all the same); replacing
the state then wiped what the partition's leader had persisted since (acknowledged
acceptances included) and, at the group's higher epoch, fenced that leader, whose next read
started the partition again at share.auto.offset.reset: accepted and acknowledged records
were delivered again (issue 35's first fault campaign, docs/faults.md). A reset meant as
one names its start offset (AlterShareGroupOffsets, a leader starting a partition at
share.auto.offset.reset) and still replaces; a deleted state (DeleteShareGroupState) is
gone, so initializing it afterwards creates it.

Kafka's shard keeps its maps in timeline data structures so that a read
sees only committed offsets; here the service applies records only once the runtime's acks=-1
write has committed them, so the maps hold only committed state. Kafka checks the topic and
partition against its metadata image (UNKNOWN_TOPIC_OR_PARTITION); the service does that with
the replica manager's metadata before calling the shard. Kafka's pruning of the topic
(DeleteRecords below the oldest snapshot still needed) is not done: `__share_group_state`
keeps its records (retention.ms -1).
"""

import base64
import uuid
from dataclasses import dataclass, field, replace

from minibroker.coordinator.share import log_format
from minibroker.coordinator.share.log_format import ShareSnapshotValue, ShareUpdateValue
from minibroker.protocol.errors import Error
from minibroker.replication.share_partition import StateBatch

DEFAULT_UPDATES_PER_SNAPSHOT = 500
# Kafka's PartitionFactory.UNINITIALIZED_START_OFFSET.
UNINITIALIZED_START_OFFSET = -1

Record = tuple[bytes, bytes | None]


_URL_SAFE_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: the 16 bytes in URL-safe base64, no padding (22 characters)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def parse_kafka_uuid(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString; ValueError unless ``text`` is 22 base64 characters of 16
    bytes."""
    if len(text) != 22 or not set(text) <= _URL_SAFE_BASE64:
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    try:
        data = base64.b64decode(text + "==", altchars=b"-_", validate=True)
    except (ValueError, TypeError):
        raise ValueError(f"not a Kafka Uuid: {text!r}") from None
    if len(data) != 16:
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    return uuid.UUID(bytes=data)


@dataclass(frozen=True)
class SharePartitionKey:
    """Kafka's SharePartitionKey: a share partition of a group."""

    group: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """FindCoordinator's key of type 2 (asCoordinatorKey), also what picks the partition
        of `__share_group_state` (partitionFor): the topic id as Kafka's Uuid.toString
        writes it (URL-safe base64 without padding), so the key hashes as Kafka's does."""
        return f"{self.group}:{kafka_uuid(self.topic_id)}:{self.partition}"

    def record_key(self, kind: int) -> bytes:
        return log_format.encode_key(
            log_format.ShareStateKey(kind, self.group, self.topic_id, self.partition)
        )


@dataclass(frozen=True)
class Summary:
    """ReadShareGroupStateSummary's answer for one share partition."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int


@dataclass(frozen=True)
class Decision:
    """What an operation decided: its error, the records to append (applied by
    :meth:`ShareCoordinatorShard.replay` once written) and, for a read, the state."""

    error: Error
    records: tuple[Record, ...] = ()
    state: ShareSnapshotValue | None = None
    summary: Summary | None = None


@dataclass
class ShareCoordinatorShard:
    """The share partitions of one `__share_group_state` partition."""

    updates_per_snapshot: int = DEFAULT_UPDATES_PER_SNAPSHOT
    states: dict[SharePartitionKey, ShareSnapshotValue] = field(default_factory=dict)
    # ShareUpdates replayed since the key's last ShareSnapshot (snapshotUpdateCount).
    update_counts: dict[SharePartitionKey, int] = field(default_factory=dict)

    # -- the operations ---------------------------------------------------------------------

    def initialize(
        self, key: SharePartitionKey, state_epoch: int, start_offset: int, now_ms: int
    ) -> Decision:
        current = self.states.get(key)
        if current is not None and state_epoch < current.state_epoch:
            return Decision(Error.FENCED_STATE_EPOCH)
        if current is not None and start_offset == UNINITIALIZED_START_OFFSET:
            # The group coordinator's "create it if it is not there" found it there: kept
            # (see the module: a departure, so that a retried initialization does not wipe
            # the acknowledgements its leader has persisted since).
            return Decision(Error.NONE)
        snapshot = ShareSnapshotValue(
            snapshot_epoch=0 if current is None else current.snapshot_epoch + 1,
            state_epoch=state_epoch,
            leader_epoch=-1,
            start_offset=start_offset,
            create_timestamp=now_ms,
            write_timestamp=now_ms,
            batches=(),
        )
        return Decision(Error.NONE, (self._snapshot_record(key, snapshot),))

    def write(
        self,
        key: SharePartitionKey,
        *,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: tuple[StateBatch, ...],
        delivery_complete_count: int = -1,
        now_ms: int,
    ) -> Decision:
        current = self.states.get(key)
        if current is None:
            return Decision(Error.UNKNOWN_TOPIC_OR_PARTITION)
        if leader_epoch < current.leader_epoch:
            return Decision(Error.FENCED_LEADER_EPOCH)
        if state_epoch < current.state_epoch:
            return Decision(Error.FENCED_STATE_EPOCH)
        update = ShareUpdateValue(
            snapshot_epoch=current.snapshot_epoch,
            leader_epoch=leader_epoch,
            start_offset=start_offset,
            batches=batches,
            delivery_complete_count=delivery_complete_count,
        )
        if self.update_counts.get(key, 0) >= self.updates_per_snapshot:
            merged = _apply(current, update)
            snapshot = replace(
                merged,
                snapshot_epoch=current.snapshot_epoch + 1,
                state_epoch=state_epoch if state_epoch != -1 else current.state_epoch,
                write_timestamp=now_ms,
            )
            return Decision(Error.NONE, (self._snapshot_record(key, snapshot),))
        return Decision(Error.NONE, (self._update_record(key, update),))

    def read(self, key: SharePartitionKey, leader_epoch: int) -> Decision:
        current = self.states.get(key)
        if current is None:
            return Decision(Error.UNKNOWN_TOPIC_OR_PARTITION)
        if leader_epoch < current.leader_epoch:
            return Decision(Error.FENCED_LEADER_EPOCH)
        records: tuple[Record, ...] = ()
        if leader_epoch > current.leader_epoch:
            update = ShareUpdateValue(
                snapshot_epoch=current.snapshot_epoch,
                leader_epoch=leader_epoch,
                start_offset=-1,
                batches=(),
            )
            records = (self._update_record(key, update),)
        return Decision(Error.NONE, records, state=replace(current, leader_epoch=leader_epoch))

    def read_summary(self, key: SharePartitionKey, leader_epoch: int) -> Decision:
        current = self.states.get(key)
        if current is None:
            return Decision(Error.NONE, summary=Summary(0, -1, -1, -1))
        summary = Summary(
            current.state_epoch,
            current.leader_epoch,
            current.start_offset,
            current.delivery_complete_count,
        )
        return Decision(Error.NONE, state=current, summary=summary)

    def delete(self, key: SharePartitionKey) -> Decision:
        if key not in self.states:
            return Decision(Error.NONE)
        return Decision(
            Error.NONE,
            (
                (key.record_key(log_format.SNAPSHOT), None),
                (key.record_key(log_format.UPDATE), None),
            ),
        )

    # -- replay (after a write, and on load) --------------------------------------------------

    def replay(self, record_key: bytes, record_value: bytes | None) -> None:
        """Apply one record of `__share_group_state` (raises ShareRecordFormatError for a
        record minibroker cannot read; the loader logs and skips it)."""
        decoded = log_format.read_key(record_key)
        key = SharePartitionKey(decoded.group, decoded.topic_id, decoded.partition)
        if record_value is None:
            if decoded.kind == log_format.SNAPSHOT:
                self.states.pop(key, None)
                self.update_counts.pop(key, None)
            return
        value = log_format.read_value(decoded.kind, record_value)
        if isinstance(value, ShareSnapshotValue):
            self.states[key] = value
            self.update_counts[key] = 0
            return
        current = self.states.get(key)
        if current is None:
            return  # an update without its snapshot (deleted before): nothing to apply to
        self.states[key] = _apply(current, value)
        self.update_counts[key] = self.update_counts.get(key, 0) + 1

    def replay_all(self, records: tuple[Record, ...]) -> None:
        for record_key, record_value in records:
            self.replay(record_key, record_value)

    # -- records ------------------------------------------------------------------------------

    @staticmethod
    def _snapshot_record(key: SharePartitionKey, value: ShareSnapshotValue) -> Record:
        return key.record_key(log_format.SNAPSHOT), log_format.encode_value(value)

    @staticmethod
    def _update_record(key: SharePartitionKey, value: ShareUpdateValue) -> Record:
        return key.record_key(log_format.UPDATE), log_format.encode_value(value)


def _apply(current: ShareSnapshotValue, update: ShareUpdateValue) -> ShareSnapshotValue:
    """Kafka's ShareCoordinatorShard.merge: log_format.merge, with a leader epoch or a
    delivery complete count of -1 meaning unchanged."""
    merged = log_format.merge(current, update)
    return replace(
        merged,
        leader_epoch=current.leader_epoch if update.leader_epoch == -1 else update.leader_epoch,
        delivery_complete_count=(
            current.delivery_complete_count
            if update.delivery_complete_count == -1
            else update.delivery_complete_count
        ),
    )
