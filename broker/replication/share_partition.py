"""The share partition of a share group (KIP-932): which records of one topic partition are
in flight for the group, in which state, held by whom and until when.

Kafka's ``kafka.server.share.SharePartition`` (core, package ``kafka.server.share``, beside the
``ReplicaManager`` and run by the ``SharePartitionManager`` on the partition's leader: it reads
through the replica manager and is not a coordinator). Here it lives in replication/ for the
same reason: the ShareFetch handler (apis/) will call it with what the replica manager read,
and the share coordinator (coordinator/share/) only persists what it returns. Pure state with
time passed in (milliseconds), no I/O (tests/unit/test_share_partition.py).

The rules, Kafka's:

- the in-flight window runs from the start offset (every record below it is done for the
  group) to the end offset; a record in it is AVAILABLE, ACQUIRED (by one member, until its
  acquisition lock of ``share.record.lock.duration.ms`` expires), ACKNOWLEDGED, ARCHIVING
  (its dead-letter queue write pending) or ARCHIVED
  (``RecordState`` with Kafka's bytes, which are also the persisted DeliveryState);
- ``acquire`` offers the AVAILABLE records of the window first, then new records past the end,
  and each acquisition increments the record's delivery count; the window holds at most
  ``share.partition.max.record.locks`` records (Kafka's ``maxInFlightRecords``: new records
  are not acquired past it, AVAILABLE records in it still are);
- a record released (RELEASE, its lock expiring, its member leaving) becomes AVAILABLE again,
  unless its delivery count has reached ``share.delivery.count.limit``: then it is ARCHIVED
  (``InFlightState.tryUpdateState``);
- ``acknowledge`` takes ranges with ACCEPT (ACKNOWLEDGED), RELEASE (AVAILABLE), REJECT
  (ARCHIVED), RENEW (KIP-1222: the lock starts again, the delivery count unchanged) and GAP
  (the offsets are not records: ARCHIVED); every offset must be ACQUIRED by that member, or
  the whole request is INVALID_RECORD_STATE and nothing changes (Kafka rolls back);
- the start offset advances past ACKNOWLEDGED and ARCHIVED records
  (``maybeUpdateCachedStateAndOffsets``), and past the log start offset if retention moved it;
- a new share partition starts at the log end offset (``share.auto.offset.reset=latest``) or
  the log start offset (``earliest``);
- what is persisted (ShareSnapshot/ShareUpdate's start offset, state epoch and state batches
  of first offset, last offset, delivery state 0/2/4, delivery count) and the failover rule:
  rebuilt from it, no record whose acceptance was persisted is delivered again (ACKNOWLEDGED
  and ARCHIVED stay so) and every other record from the start offset on is delivered again.

Departures, and why:

- records are kept one per offset, not per fetched batch split on demand (Kafka's
  ``cachedState`` of ``InFlightBatch``es with an offset map once a batch is split): the
  states are the same, and ``state_batches`` coalesces contiguous offsets of equal state and
  delivery count, so the persisted batches are as compact as Kafka's. The window is bounded
  by ``share.partition.max.record.locks``, so the dict is too.
- ``acquire`` counts records (the ``record_limit`` acquire mode of KIP-1206); the
  ``batch_optimized`` mode, which acquires whole batches past ``max_records``, is the caller's
  choice of ``max_records`` (left for ShareFetch).
- an ACQUIRED record is persisted as AVAILABLE with its delivery count (Kafka writes only
  acknowledged, released and expired records): after failover it is delivered again, as the
  rule wants, and a poison record that crashes its consumers still reaches the limit.
- the records archived by the delivery limit or rejected are kept in ``dead_letters`` until
  taken, for the dead-letter queue of KIP-1191 (share.version=2), which writes them. While
  the group has a DLQ (``ShareSettings.dead_letter_queue``) they are ARCHIVING, as Kafka
  4.4's recordStateWithDlq makes them: not done (the start offset stops at them, they are not
  in the delivery complete count), persisted as DeliveryState 3, until
  ``dead_letters_written``; rebuilt ARCHIVING from the persisted state they are dead letters
  again (maybeResumeDlqArchiving), their cause taken from the delivery count (the state does
  not keep it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum, IntEnum

from minibroker.protocol.errors import Error, KafkaError


class RecordState(IntEnum):
    """Kafka's ``RecordState``; the byte is ShareSnapshot/ShareUpdate's DeliveryState."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    """The AcknowledgeTypes of ShareFetch/ShareAcknowledge (0 GAP, KIP-1222's 4 RENEW)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class AutoOffsetReset(Enum):
    LATEST = "latest"
    EARLIEST = "earliest"


class DeadLetterReason(Enum):
    REJECTED = "rejected"
    DELIVERY_COUNT_LIMIT = "delivery_count_limit"


@dataclass(frozen=True)
class ShareSettings:
    """The group's share.* configs (Kafka 4.4's defaults)."""

    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    max_record_locks: int = 2_000
    auto_offset_reset: AutoOffsetReset = AutoOffsetReset.LATEST
    # The group has a dead-letter queue (KIP-1191): records to archive go through ARCHIVING.
    dead_letter_queue: bool = False


@dataclass(frozen=True)
class StateBatch:
    """One persisted state batch: ShareSnapshotValue/ShareUpdateValue's StateBatches."""

    first_offset: int
    last_offset: int
    delivery_state: RecordState
    delivery_count: int


@dataclass(frozen=True)
class PersistedState:
    """What the share coordinator keeps for a share partition (ReadShareGroupState's answer).
    ``start_offset`` -1: never initialized (the auto offset reset decides)."""

    start_offset: int
    state_epoch: int = 0
    batches: tuple[StateBatch, ...] = ()


@dataclass(frozen=True)
class AcquiredRange:
    """ShareFetch's AcquiredRecords: contiguous offsets acquired with one delivery count."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True)
class Acknowledgement:
    first_offset: int
    last_offset: int
    type: AcknowledgeType


@dataclass(frozen=True)
class DeadLetter:
    offset: int
    reason: DeadLetterReason
    delivery_count: int


class InvalidRecordState(KafkaError):
    error = Error.INVALID_RECORD_STATE


@dataclass
class _InFlight:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_deadline_ms: int | None = None


@dataclass
class SharePartition:
    """One topic partition's in-flight records for one share group."""

    settings: ShareSettings
    start_offset: int
    state_epoch: int = 0
    # The window is [start_offset, end_offset); offsets in it absent from _records are not
    # records (transaction markers, compacted away): they count as done.
    end_offset: int = -1
    _records: dict[int, _InFlight] = field(default_factory=dict)
    dead_letters: list[DeadLetter] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.end_offset < self.start_offset:
            self.end_offset = self.start_offset

    # -- initialization -----------------------------------------------------------------

    @classmethod
    def initialize(
        cls,
        settings: ShareSettings,
        persisted: PersistedState | None,
        log_start_offset: int,
        log_end_offset: int,
    ) -> SharePartition:
        """Kafka's ``maybeInitialize``: from the persisted state, or (none yet) at the log end
        (latest) or start (earliest)."""
        if persisted is None or persisted.start_offset < 0:
            start = (
                log_end_offset
                if settings.auto_offset_reset is AutoOffsetReset.LATEST
                else log_start_offset
            )
            return cls(settings, start_offset=start)
        start = max(persisted.start_offset, log_start_offset)
        partition = cls(settings, start_offset=start, state_epoch=persisted.state_epoch)
        end = start
        for batch in persisted.batches:
            for offset in range(max(batch.first_offset, start), batch.last_offset + 1):
                state = batch.delivery_state
                count = batch.delivery_count
                if state is RecordState.ACQUIRED:  # never written, but be safe
                    state = RecordState.AVAILABLE
                if state is RecordState.ARCHIVING:
                    # Its DLQ write was not known done under the old leader: written again
                    # (Kafka's maybeResumeDlqArchiving), at least once into the DLQ.
                    reason = (
                        DeadLetterReason.DELIVERY_COUNT_LIMIT
                        if count >= settings.delivery_count_limit
                        else DeadLetterReason.REJECTED
                    )
                    partition.dead_letters.append(DeadLetter(offset, reason, count))
                elif state is RecordState.AVAILABLE and count >= settings.delivery_count_limit:
                    # Its last delivery's lock died with the old leader: released at the limit.
                    state = partition._archive_state()
                    partition.dead_letters.append(
                        DeadLetter(offset, DeadLetterReason.DELIVERY_COUNT_LIMIT, count)
                    )
                partition._records[offset] = _InFlight(state, count)
            end = max(end, batch.last_offset + 1)
        # Offsets of the window no batch names: not yet delivered as far as anyone knows.
        for offset in range(start, end):
            partition._records.setdefault(offset, _InFlight(RecordState.AVAILABLE, 0))
        partition.end_offset = end
        partition._advance_start()
        return partition

    # -- reading the state --------------------------------------------------------------

    def state_of(self, offset: int) -> RecordState | None:
        """The record's state; None if it is not in the window (or not a record)."""
        record = self._records.get(offset)
        return record.state if record else None

    def delivery_count(self, offset: int) -> int:
        record = self._records.get(offset)
        return record.delivery_count if record else 0

    def holder(self, offset: int) -> str | None:
        record = self._records.get(offset)
        return record.member_id if record else None

    @property
    def delivery_complete_count(self) -> int:
        """KIP-1226's DeliveryCompleteCount: the records at or after the start offset whose
        delivery is complete (acknowledged or archived), persisted with each write so that
        DescribeShareGroupOffsets can answer the lag."""
        done = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
        return sum(
            1
            for offset, record in self._records.items()
            if offset >= self.start_offset and record.state in done
        )

    @property
    def in_flight(self) -> int:
        """Kafka's numInFlightRecords: the window's size."""
        return self.end_offset - self.start_offset

    def next_fetch_offset(self) -> int:
        """Where the next fetch for this share partition reads from: the first AVAILABLE
        record of the window, else the end offset (Kafka's ``nextFetchOffset``)."""
        for offset in range(self.start_offset, self.end_offset):
            record = self._records.get(offset)
            if record is not None and record.state is RecordState.AVAILABLE:
                return offset
        return self.end_offset

    def can_acquire(self) -> bool:
        """Kafka's ``canAcquireRecords``: AVAILABLE records in the window, or room for more."""
        return (
            self.next_fetch_offset() < self.end_offset
            or self.in_flight < self.settings.max_record_locks
        )

    def next_deadline(self) -> int | None:
        """The earliest acquisition lock deadline, for the caller's timer."""
        deadlines = [
            r.lock_deadline_ms for r in self._records.values() if r.lock_deadline_ms is not None
        ]
        return min(deadlines) if deadlines else None

    def state_batches(self) -> list[StateBatch]:
        """The window as persisted (ShareSnapshot's StateBatches), ACQUIRED written as
        AVAILABLE with its delivery count."""
        return _coalesce(self._records, range(self.start_offset, self.end_offset))

    def snapshot(self) -> PersistedState:
        return PersistedState(self.start_offset, self.state_epoch, tuple(self.state_batches()))

    def clone(self) -> SharePartition:
        """An independent copy: what a change the persister refused is undone to (Kafka's
        SharePartition rolls its in-flight state back on a failed write)."""
        return SharePartition(
            self.settings,
            self.start_offset,
            self.state_epoch,
            self.end_offset,
            {
                o: _InFlight(r.state, r.delivery_count, r.member_id, r.lock_deadline_ms)
                for o, r in self._records.items()
            },
            list(self.dead_letters),
        )

    def batches_of(self, offsets: Iterable[int]) -> list[StateBatch]:
        """The state batches of ``offsets`` (those still in the window), as persisted: what
        a lock expiry or a release changed (ShareUpdate's StateBatches)."""
        return _coalesce(self._records, sorted(set(offsets)))

    def take_dead_letters(self) -> list[DeadLetter]:
        taken, self.dead_letters = self.dead_letters, []
        return taken

    def dead_letters_written(self, offsets: Iterable[int]) -> list[StateBatch]:
        """The DLQ write of ``offsets`` is done (or given up for good): those still ARCHIVING
        become ARCHIVED and the start offset may move past them (Kafka's
        initiateDLQAndArchive completion: ARCHIVED persisted, the delivery complete count
        grown, maybeUpdateCachedStateAndOffsets). Returns the changed state batches, to
        persist."""
        changed = []
        for offset in sorted(set(offsets)):
            record = self._records.get(offset)
            if record is not None and record.state is RecordState.ARCHIVING:
                record.state = RecordState.ARCHIVED
                changed.append(offset)
        batches = _coalesce(self._records, changed)
        self._advance_start()
        return batches

    # -- transitions --------------------------------------------------------------------

    def acquire(
        self,
        member_id: str,
        max_records: int,
        fetched: Sequence[tuple[int, int]],
        now_ms: int,
    ) -> list[AcquiredRange]:
        """Acquire up to ``max_records`` records for ``member_id`` among ``fetched``: the
        (first, last) offsets of the batches the log returned reading from
        ``next_fetch_offset()``. Offsets of the window between them that the log did not
        return are not records (Kafka acknowledges those as GAP)."""
        self.expire(now_ms)
        fetch_from = self.next_fetch_offset()
        present: set[int] = set()
        for first, last in fetched:
            present.update(range(first, last + 1))
        if present:
            top = max(present)
            for offset in range(fetch_from, min(top + 1, self.end_offset)):
                record = self._records.get(offset)
                if (
                    offset not in present
                    and record is not None
                    and record.state is RecordState.AVAILABLE
                ):
                    del self._records[offset]
        acquired: list[int] = []
        deadline = now_ms + self.settings.record_lock_duration_ms
        for offset in sorted(present):
            if len(acquired) >= max_records:
                break
            if offset < max(self.start_offset, fetch_from):
                continue
            if offset >= self.end_offset:
                if offset - self.start_offset >= self.settings.max_record_locks:
                    break
                self.end_offset = offset + 1
                self._records[offset] = _InFlight(RecordState.AVAILABLE, 0)
            record = self._records.get(offset)
            if record is None or record.state is not RecordState.AVAILABLE:
                continue
            record.state = RecordState.ACQUIRED
            record.delivery_count += 1
            record.member_id = member_id
            record.lock_deadline_ms = deadline
            acquired.append(offset)
        self._advance_start()
        return self._ranges(acquired)

    def acknowledge(
        self, member_id: str, acknowledgements: Iterable[Acknowledgement], now_ms: int
    ) -> list[StateBatch]:
        """Apply a member's acknowledgements, all or none. Returns the changed state batches
        (ShareUpdate's StateBatches). Raises InvalidRecordState if an offset is not ACQUIRED
        by ``member_id`` (or its lock has expired)."""
        self.expire(now_ms)
        acks = list(acknowledgements)
        for ack in acks:
            if ack.first_offset > ack.last_offset:
                raise InvalidRecordState(f"empty range {ack.first_offset}-{ack.last_offset}")
            for offset in range(ack.first_offset, ack.last_offset + 1):
                record = self._records.get(offset)
                if (
                    ack.type is AcknowledgeType.GAP
                    and record is None
                    and self.start_offset <= offset < self.end_offset
                ):
                    continue
                if (
                    record is None
                    or record.state is not RecordState.ACQUIRED
                    or record.member_id != member_id
                ):
                    raise InvalidRecordState(f"offset {offset} is not acquired by {member_id}")
        touched: list[int] = []
        for ack in acks:
            for offset in range(ack.first_offset, ack.last_offset + 1):
                record = self._records.get(offset)
                if record is None:
                    continue
                touched.append(offset)
                if ack.type is AcknowledgeType.ACCEPT:
                    self._settle(record, RecordState.ACKNOWLEDGED)
                elif ack.type is AcknowledgeType.RELEASE:
                    self._release(offset, record)
                elif ack.type is AcknowledgeType.REJECT:
                    self._settle(record, self._archive_state())
                    self.dead_letters.append(
                        DeadLetter(offset, DeadLetterReason.REJECTED, record.delivery_count)
                    )
                elif ack.type is AcknowledgeType.GAP:
                    self._settle(record, RecordState.ARCHIVED)
                else:  # RENEW
                    record.lock_deadline_ms = now_ms + self.settings.record_lock_duration_ms
        changed = _coalesce(self._records, sorted(set(touched)))
        self._advance_start()
        return changed

    def expire(self, now_ms: int) -> list[int]:
        """Release the records whose acquisition lock has expired; their offsets."""
        expired = [
            offset
            for offset, record in sorted(self._records.items())
            if record.lock_deadline_ms is not None and record.lock_deadline_ms <= now_ms
        ]
        for offset in expired:
            self._release(offset, self._records[offset])
        self._advance_start()
        return expired

    def release_member(self, member_id: str) -> list[int]:
        """Release every record ``member_id`` holds (it left, or its share session closed:
        Kafka's ``releaseAcquiredRecords``)."""
        held = [o for o, r in sorted(self._records.items()) if r.member_id == member_id]
        for offset in held:
            self._release(offset, self._records[offset])
        self._advance_start()
        return held

    def update_log_start_offset(self, log_start_offset: int) -> None:
        """Retention moved the log start past part of the window: those records are gone."""
        if log_start_offset <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start_offset, self.end_offset)):
            self._records.pop(offset, None)
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset)

    # -- helpers ------------------------------------------------------------------------

    def _settle(self, record: _InFlight, state: RecordState) -> None:
        record.state = state
        record.member_id = None
        record.lock_deadline_ms = None

    def _archive_state(self) -> RecordState:
        """Where a rejected record, or one released at the delivery limit, goes: ARCHIVING
        while the group has a DLQ (until its DLQ write is done), else ARCHIVED (Kafka's
        recordStateWithDlq)."""
        return RecordState.ARCHIVING if self.settings.dead_letter_queue else RecordState.ARCHIVED

    def _release(self, offset: int, record: _InFlight) -> None:
        if record.delivery_count >= self.settings.delivery_count_limit:
            self._settle(record, self._archive_state())
            self.dead_letters.append(
                DeadLetter(offset, DeadLetterReason.DELIVERY_COUNT_LIMIT, record.delivery_count)
            )
        else:
            self._settle(record, RecordState.AVAILABLE)

    def _advance_start(self) -> None:
        while self.start_offset < self.end_offset:
            record = self._records.get(self.start_offset)
            if record is not None and record.state not in (
                RecordState.ACKNOWLEDGED,
                RecordState.ARCHIVED,
            ):
                return
            self._records.pop(self.start_offset, None)
            self.start_offset += 1

    def _ranges(self, offsets: list[int]) -> list[AcquiredRange]:
        ranges: list[AcquiredRange] = []
        for offset in offsets:
            count = self._records[offset].delivery_count
            last = ranges[-1] if ranges else None
            if last and last.last_offset == offset - 1 and last.delivery_count == count:
                ranges[-1] = AcquiredRange(last.first_offset, offset, count)
            else:
                ranges.append(AcquiredRange(offset, offset, count))
        return ranges


def _coalesce(records: dict[int, _InFlight], offsets: Iterable[int]) -> list[StateBatch]:
    batches: list[StateBatch] = []
    for offset in offsets:
        record = records.get(offset)
        if record is None:
            continue
        state = RecordState.AVAILABLE if record.state is RecordState.ACQUIRED else record.state
        last = batches[-1] if batches else None
        if (
            last
            and last.last_offset == offset - 1
            and last.delivery_state is state
            and last.delivery_count == record.delivery_count
        ):
            batches[-1] = StateBatch(last.first_offset, offset, state, record.delivery_count)
        else:
            batches.append(StateBatch(offset, offset, state, record.delivery_count))
    return batches
