"""The share partition of a share group (KIP-932): which records of one topic partition are
in flight for the group, in which state, held by whom and until when.

Kafka's ``kafka.server.share.SharePartition`` (core, package ``kafka.server.share``, beside the
``ReplicaManager`` and run by the ``SharePartitionManager`` on the partition's leader: it reads
through the replica manager and is not a coordinator). Here it lives in replication/ for the
same reason: the ShareFetch handler (apis/) will call it with what the replica manager read,
and the share coordinator (coordinator/share/) only persists what it returns. Pure state with
time passed in (milliseconds), no I/O (tests/unit/test_share_partition.py).

The rules, Kafka 4.4's:

- the in-flight window runs from the start offset (every record below it is done for the
  group) to the end offset; a record in it is AVAILABLE, ACQUIRED (by one member, until its
  acquisition lock of ``share.record.lock.duration.ms`` expires), ACKNOWLEDGED, ARCHIVING
  (its dead-letter queue write pending) or ARCHIVED
  (``RecordState`` with Kafka's bytes, which are also the persisted DeliveryState);
- ``acquire`` offers the AVAILABLE records of the window first, then new records past the end,
  and each acquisition increments the record's delivery count;
- the in-flight limit ``share.partition.max.record.locks`` (default 2,000; Kafka's
  ``maxInFlightRecords``) bounds what one acquisition *asks for*, not what it takes
  (``lastOffsetAndMaxRecordsToAcquire``): an acquisition asks for
  ``min(max_records, limit - in_flight)`` records, where ``in_flight`` is the window's span
  (``numInFlightRecords``: end offset - start offset, whatever the records' states); with no
  room left it may still take AVAILABLE records inside the window, never new ones
  (``canAcquireRecords``). In the ``batch_optimized`` acquire mode (KIP-1206, the default)
  the count is rounded up to the end of the log batch it ends in
  (``acquireNewBatchRecords``/``lastOffsetFromBatchWithRequestOffset``), so one acquisition
  takes whole produced batches and may carry the window past the limit by up to a batch;
  in ``record_limit`` mode it takes exactly that many. The next acquisition then finds no
  room until acknowledgements move the start offset;
- a record released (RELEASE, its lock expiring, its member leaving) becomes AVAILABLE again,
  unless its delivery count has reached ``share.delivery.count.limit``: then it is ARCHIVED
  (``InFlightState.tryUpdateState``);
- ``acknowledge`` takes ranges with ACCEPT (ACKNOWLEDGED), RELEASE (AVAILABLE), REJECT
  (ARCHIVED), RENEW (KIP-1222: the lock starts again, the delivery count unchanged; refused
  with INVALID_RECORD_STATE while ``share.renew.acknowledge.enable`` is false) and GAP
  (the offsets are not records: ARCHIVED); every offset must be ACQUIRED by that member, or
  the whole request is INVALID_RECORD_STATE and nothing changes (Kafka rolls back);
- the start offset advances past ACKNOWLEDGED and ARCHIVED records
  (``maybeUpdateCachedStateAndOffsets``), and past the log start offset if retention moved it;
- a new share partition starts at the log end offset (``share.auto.offset.reset=latest``),
  the log start offset (``earliest``) or the first record at or after now minus a duration
  (``by_duration:<ISO-8601 duration>``, found by timestamp by the manager);
- what is persisted (ShareSnapshot/ShareUpdate's start offset, state epoch and state batches
  of first offset, last offset, delivery state 0/2/4, delivery count) and the failover rule:
  rebuilt from it, no record whose acceptance was persisted is delivered again (ACKNOWLEDGED
  and ARCHIVED stay so) and every other record from the start offset on is delivered again.

How the window is kept: as Kafka's ``cachedState``, by offset range, not by record. Kafka
keeps a map of ``InFlightBatch``es (one per acquired range, one state for the whole batch
until a change covers only part of it; then ``maybeInitializeOffsetStateUpdate`` gives the
batch a per-offset map of ``InFlightState``). Here the window is a sorted list of *runs*:
immutable tuples (first, last, state, delivery count, member, lock deadline), one per range
of offsets that share all of them. A change to part of a run splits it into the pieces it
needs (the per-offset state of Kafka, but only as fine as the changes were), and equal
neighbours are merged again, so a batch acquired, acknowledged and done in one range stays
one tuple from acquisition to the start offset passing it. Offsets of the window no run
covers are not records (transaction markers, aborted records, compacted away). Every
operation costs per run it touches, not per record; copying the state for a rollback
(``clone``) copies the list of references to immutable runs, not the records.

Departures, and why:

- an ACQUIRED record is persisted as AVAILABLE with its delivery count at acquisition (Kafka
  writes only acknowledged, released and expired records: ``acquire`` writes nothing, so a
  leader's crash forgets the deliveries in flight): after failover it is delivered again, as
  the rule wants, and a poison record that crashes its consumers or their leader still
  reaches the delivery limit. The write is done by the manager; the state machine only says
  what changed.
- ``acquire`` rounds to the log batches the read returned, not to Kafka's in-flight batches
  when it acquires AVAILABLE records again (Kafka takes a whole AVAILABLE in-flight batch,
  or all the AVAILABLE offsets of a split one, in the range read); the count differs only
  when records are delivered again, and never past a log batch. Kafka also splits what one
  acquisition returns into AcquiredRecords of about the request's BatchSize at batch
  boundaries (``createBatches``); here one range per contiguous run of one delivery count.
  In ``record_limit`` mode Kafka puts the whole log batch read into the window (the records
  past the count AVAILABLE, per offset) and moves the end offset to its end; here the window
  ends after the last record acquired, so the next fetch reads the rest of the batch again.
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

from bisect import bisect_left, bisect_right
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
    """Kafka's ShareGroupAutoOffsetResetStrategy.StrategyType."""

    LATEST = "latest"
    EARLIEST = "earliest"
    # by_duration:<ISO-8601 duration> (KIP-1106): the first record at or after now minus
    # the duration (ShareSettings.reset_duration_ms), found by the manager.
    BY_DURATION = "by_duration"


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
    # by_duration's duration in milliseconds (0 for the other strategies).
    reset_duration_ms: int = 0
    # The group has a dead-letter queue (KIP-1191): records to archive go through ARCHIVING.
    dead_letter_queue: bool = False
    # share.renew.acknowledge.enable (KIP-1222): RENEW is refused when false.
    renew_acknowledge_enabled: bool = True


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


# A run of the window: (first offset, last offset, state, delivery count, member holding it,
# lock deadline in ms), the last two None unless ACQUIRED. Immutable: a change replaces it.
_Run = tuple[int, int, RecordState, int, "str | None", "int | None"]

_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


def _first(run: _Run) -> int:
    return run[0]


@dataclass
class SharePartition:
    """One topic partition's in-flight records for one share group."""

    settings: ShareSettings
    start_offset: int
    state_epoch: int = 0
    # The window is [start_offset, end_offset); offsets in it that no run covers are not
    # records (transaction markers, compacted away): they count as done.
    end_offset: int = -1
    _runs: list[_Run] = field(default_factory=list)
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
        reset_offset: int | None = None,
    ) -> SharePartition:
        """Kafka's ``maybeInitialize``: from the persisted state, or (none yet) at the log end
        (latest) or start (earliest), or at ``reset_offset`` (by_duration: the offset the
        manager found by timestamp, Kafka's ``startOffsetDuringInitialization``)."""
        if persisted is None or persisted.start_offset < 0:
            if reset_offset is not None:
                start = reset_offset
            elif settings.auto_offset_reset is AutoOffsetReset.EARLIEST:
                start = log_start_offset
            else:
                start = log_end_offset
            return cls(settings, start_offset=start)
        start = max(persisted.start_offset, log_start_offset)
        partition = cls(settings, start_offset=start, state_epoch=persisted.state_epoch)
        end = start
        limit = settings.delivery_count_limit
        for batch in persisted.batches:
            first = max(batch.first_offset, start)
            if first > batch.last_offset:
                continue
            state = batch.delivery_state
            count = batch.delivery_count
            if state is RecordState.ACQUIRED:  # never written, but be safe
                state = RecordState.AVAILABLE
            if state is RecordState.ARCHIVING:
                # Its DLQ write was not known done under the old leader: written again
                # (Kafka's maybeResumeDlqArchiving), at least once into the DLQ.
                reason = (
                    DeadLetterReason.DELIVERY_COUNT_LIMIT
                    if count >= limit
                    else DeadLetterReason.REJECTED
                )
                partition._letters(first, batch.last_offset, reason, count)
            elif state is RecordState.AVAILABLE and count >= limit:
                # Its last delivery's lock died with the old leader: released at the limit.
                state = partition._archive_state()
                partition._letters(
                    first, batch.last_offset, DeadLetterReason.DELIVERY_COUNT_LIMIT, count
                )
            partition._set(first, batch.last_offset, state, count)
            end = max(end, batch.last_offset + 1)
        # Offsets of the window no batch names: not yet delivered as far as anyone knows.
        filled: list[_Run] = []
        at = start
        for run in partition._runs:
            if run[0] > at:
                filled.append((at, run[0] - 1, RecordState.AVAILABLE, 0, None, None))
            filled.append(run)
            at = run[1] + 1
        if at < end:
            filled.append((at, end - 1, RecordState.AVAILABLE, 0, None, None))
        partition._runs = filled
        partition._merge(0, len(filled))
        partition.end_offset = end
        partition._advance_start()
        return partition

    # -- reading the state --------------------------------------------------------------

    def _run_at(self, offset: int) -> _Run | None:
        runs = self._runs
        index = bisect_right(runs, offset, key=_first) - 1
        if index >= 0 and runs[index][1] >= offset:
            return runs[index]
        return None

    def state_of(self, offset: int) -> RecordState | None:
        """The record's state; None if it is not in the window (or not a record)."""
        run = self._run_at(offset)
        return run[2] if run else None

    def delivery_count(self, offset: int) -> int:
        run = self._run_at(offset)
        return run[3] if run else 0

    def holder(self, offset: int) -> str | None:
        run = self._run_at(offset)
        return run[4] if run else None

    @property
    def delivery_complete_count(self) -> int:
        """KIP-1226's DeliveryCompleteCount: the records at or after the start offset whose
        delivery is complete (acknowledged or archived), persisted with each write so that
        DescribeShareGroupOffsets can answer the lag."""
        return sum(run[1] - run[0] + 1 for run in self._runs if run[2] in _DONE)

    @property
    def in_flight(self) -> int:
        """Kafka's numInFlightRecords: the window's span."""
        return self.end_offset - self.start_offset

    def next_fetch_offset(self) -> int:
        """Where the next fetch for this share partition reads from: the first AVAILABLE
        record of the window, else the end offset (Kafka's ``nextFetchOffset``)."""
        for run in self._runs:
            if run[2] is RecordState.AVAILABLE:
                return run[0]
        return self.end_offset

    def can_acquire(self) -> bool:
        """Kafka's ``canAcquireRecords``: AVAILABLE records in the window, or room for more."""
        return (
            self.next_fetch_offset() < self.end_offset
            or self.in_flight < self.settings.max_record_locks
        )

    def next_deadline(self) -> int | None:
        """The earliest acquisition lock deadline, for the caller's timer."""
        deadlines = [run[5] for run in self._runs if run[5] is not None]
        return min(deadlines) if deadlines else None

    def state_batches(self) -> list[StateBatch]:
        """The window as persisted (ShareSnapshot's StateBatches), ACQUIRED written as
        AVAILABLE with its delivery count."""
        return _coalesce(self._runs)

    def snapshot(self) -> PersistedState:
        return PersistedState(self.start_offset, self.state_epoch, tuple(self.state_batches()))

    def clone(self) -> SharePartition:
        """An independent copy: what a change the persister refused is undone to (Kafka's
        SharePartition rolls its in-flight state back on a failed write). The runs are
        immutable, so this copies references, one per run."""
        return SharePartition(
            self.settings,
            self.start_offset,
            self.state_epoch,
            self.end_offset,
            list(self._runs),
            list(self.dead_letters),
        )

    def batches_of(self, offsets: Iterable[int]) -> list[StateBatch]:
        """The state batches of ``offsets`` (those still in the window), as persisted: what
        a lock expiry or a release changed (ShareUpdate's StateBatches)."""
        return self.batches_in(_to_ranges(offsets))

    def batches_in(self, ranges: Iterable[tuple[int, int]]) -> list[StateBatch]:
        """``batches_of`` for inclusive offset ranges."""
        pieces: list[_Run] = []
        for first, last in _merged(ranges):
            pieces.extend(self._clipped(first, last))
        return _coalesce(pieces)

    def take_dead_letters(self) -> list[DeadLetter]:
        taken, self.dead_letters = self.dead_letters, []
        return taken

    def dead_letters_written(self, offsets: Iterable[int]) -> list[StateBatch]:
        """The DLQ write of ``offsets`` is done (or given up for good): those still ARCHIVING
        become ARCHIVED and the start offset may move past them (Kafka's
        initiateDLQAndArchive completion: ARCHIVED persisted, the delivery complete count
        grown, maybeUpdateCachedStateAndOffsets). Returns the changed state batches, to
        persist."""
        changed: list[tuple[int, int]] = []
        for first, last in _to_ranges(offsets):
            for run in self._clipped(first, last):
                if run[2] is RecordState.ARCHIVING:
                    self._set(run[0], run[1], RecordState.ARCHIVED, run[3])
                    changed.append((run[0], run[1]))
        batches = self.batches_in(changed)
        self._advance_start()
        return batches

    # -- transitions --------------------------------------------------------------------

    def acquire(
        self,
        member_id: str,
        max_records: int,
        fetched: Sequence[tuple[int, int]],
        now_ms: int,
        *,
        batch_optimized: bool = False,
    ) -> list[AcquiredRange]:
        """Acquire records for ``member_id`` among ``fetched``: the (first, last) offsets of
        the batches the log returned reading from ``next_fetch_offset()``. Offsets of the
        window between them that the log did not return are not records (Kafka acknowledges
        those as GAP). How many: ``min(max_records, max_record_locks - in_flight)`` (see the
        module), exactly (``record_limit``) or rounded up to the end of a log batch
        (``batch_optimized``)."""
        self._expire(now_ms)
        if max_records <= 0 or not fetched:
            return []
        fetch_from = self.next_fetch_offset()
        batches = sorted(fetched)
        top = max(last for _, last in batches)
        self._drop_unreturned(fetch_from, min(top, self.end_offset - 1), batches)
        # Kafka's lastOffsetAndMaxRecordsToAcquire.
        wanted = min(max_records, self.settings.max_record_locks - self.in_flight)
        if wanted <= 0:
            if fetch_from >= self.end_offset:
                return []
            wanted = min(max_records, self.end_offset - fetch_from)
            top = min(top, self.end_offset - 1)
        deadline = now_ms + self.settings.record_lock_duration_ms
        acquired: list[AcquiredRange] = []
        taken = 0
        floor = max(self.start_offset, fetch_from)
        for first, last in batches:
            if taken >= wanted:
                break
            low, high = max(first, floor), min(last, top)
            if low > high:
                continue
            # AVAILABLE records of the window, then new records past its end.
            inside = min(high, self.end_offset - 1)
            if low <= inside:
                for run in self._clipped(low, inside):
                    if run[2] is not RecordState.AVAILABLE:
                        continue
                    stop = run[1]
                    if not batch_optimized:
                        stop = min(stop, run[0] + wanted - taken - 1)
                    count = run[3] + 1
                    self._set(run[0], stop, RecordState.ACQUIRED, count, member_id, deadline)
                    _add_range(acquired, run[0], stop, count)
                    taken += stop - run[0] + 1
                    if not batch_optimized and taken >= wanted:
                        break
            new_from = max(low, self.end_offset)
            if new_from <= high and (batch_optimized or taken < wanted):
                stop = high if batch_optimized else min(high, new_from + wanted - taken - 1)
                self._runs.append((new_from, stop, RecordState.ACQUIRED, 1, member_id, deadline))
                self._merge(len(self._runs) - 2, len(self._runs))
                self.end_offset = stop + 1
                _add_range(acquired, new_from, stop, 1)
                taken += stop - new_from + 1
        self._advance_start()
        return acquired

    def acknowledge(
        self, member_id: str, acknowledgements: Iterable[Acknowledgement], now_ms: int
    ) -> list[StateBatch]:
        """Apply a member's acknowledgements, all or none. Returns the changed state batches
        (ShareUpdate's StateBatches). Raises InvalidRecordState if an offset is not ACQUIRED
        by ``member_id`` (or its lock has expired)."""
        self._expire(now_ms)
        acks = list(acknowledgements)
        if not self.settings.renew_acknowledge_enabled and any(
            ack.type is AcknowledgeType.RENEW for ack in acks
        ):
            # Kafka 4.4's acknowledgeCompleteBatch / acknowledgePerOffsetBatchRecords.
            raise InvalidRecordState("Renewing acquisition locks is not enabled for the group.")
        for ack in acks:
            self._check(member_id, ack)
        touched: list[tuple[int, int]] = []
        lock_ms = self.settings.record_lock_duration_ms
        for ack in acks:
            kind = ack.type
            for run in self._clipped(ack.first_offset, ack.last_offset):
                first, last, state, count, member, _ = run
                if state is not RecordState.ACQUIRED or member != member_id:
                    continue  # an offset named twice in one request: the first ack holds
                touched.append((first, last))
                if kind is AcknowledgeType.ACCEPT:
                    self._set(first, last, RecordState.ACKNOWLEDGED, count)
                elif kind is AcknowledgeType.RELEASE:
                    self._release(first, last, count)
                elif kind is AcknowledgeType.REJECT:
                    self._set(first, last, self._archive_state(), count)
                    self._letters(first, last, DeadLetterReason.REJECTED, count)
                elif kind is AcknowledgeType.GAP:
                    self._set(first, last, RecordState.ARCHIVED, count)
                else:  # RENEW
                    self._set(first, last, state, count, member, now_ms + lock_ms)
        changed = self.batches_in(touched)
        self._advance_start()
        return changed

    def expire(self, now_ms: int) -> list[int]:
        """Release the records whose acquisition lock has expired; their offsets."""
        return _offsets(self._expire(now_ms))

    def expire_ranges(self, now_ms: int) -> list[tuple[int, int]]:
        """``expire``, the released records as inclusive offset ranges."""
        return self._expire(now_ms)

    def release_member(self, member_id: str) -> list[int]:
        """Release every record ``member_id`` holds (it left, or its share session closed:
        Kafka's ``releaseAcquiredRecords``); their offsets."""
        return _offsets(self.release_member_ranges(member_id))

    def release_member_ranges(self, member_id: str) -> list[tuple[int, int]]:
        """``release_member``, the released records as inclusive offset ranges."""
        held = [run for run in self._runs if run[4] == member_id]
        for run in held:
            self._release(run[0], run[1], run[3])
        self._advance_start()
        return [(run[0], run[1]) for run in held]

    def update_log_start_offset(self, log_start_offset: int) -> None:
        """Retention moved the log start past part of the window: those records are gone."""
        if log_start_offset <= self.start_offset:
            return
        keep = self._split(min(log_start_offset, self.end_offset))
        del self._runs[:keep]
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset)

    # -- helpers ------------------------------------------------------------------------

    def _expire(self, now_ms: int) -> list[tuple[int, int]]:
        expired = [run for run in self._runs if run[5] is not None and run[5] <= now_ms]
        for run in expired:
            self._release(run[0], run[1], run[3])
        if expired:
            self._advance_start()
        return [(run[0], run[1]) for run in expired]

    def _check(self, member_id: str, ack: Acknowledgement) -> None:
        """Every offset of ``ack`` ACQUIRED by ``member_id`` (a GAP may also name offsets of
        the window that are not records), else InvalidRecordState."""
        first, last = ack.first_offset, ack.last_offset
        if first > last:
            raise InvalidRecordState(f"empty range {first}-{last}")
        gap = ack.type is AcknowledgeType.GAP
        at = first
        for run in self._clipped(first, last):
            # Offsets before the run that no run covers are not records: only a GAP names them.
            if run[0] > at and not (gap and self.start_offset <= at):
                raise InvalidRecordState(f"offset {at} is not acquired by {member_id}")
            if run[2] is not RecordState.ACQUIRED or run[4] != member_id:
                raise InvalidRecordState(f"offset {run[0]} is not acquired by {member_id}")
            at = run[1] + 1
        if at <= last and not (gap and self.start_offset <= at and last < self.end_offset):
            raise InvalidRecordState(f"offset {at} is not acquired by {member_id}")

    def _clipped(self, first: int, last: int) -> list[_Run]:
        """The runs overlapping [first, last], cut to it (copies: the window is unchanged)."""
        runs = self._runs
        index = max(bisect_right(runs, first, key=_first) - 1, 0)
        found: list[_Run] = []
        while index < len(runs):
            run = runs[index]
            if run[0] > last:
                break
            if run[1] >= first:
                if run[0] < first or run[1] > last:
                    run = (max(run[0], first), min(run[1], last), *run[2:])
                found.append(run)
            index += 1
        return found

    def _split(self, offset: int) -> int:
        """Make ``offset`` the start of a run if a run holds it; the index of the first run
        at or after ``offset``."""
        runs = self._runs
        index = bisect_left(runs, offset, key=_first)
        if index > 0:
            before = runs[index - 1]
            if before[1] >= offset:
                runs[index - 1] = (before[0], offset - 1, *before[2:])
                runs.insert(index, (offset, *before[1:]))
        return index

    def _set(
        self,
        first: int,
        last: int,
        state: RecordState,
        count: int,
        member: str | None = None,
        deadline: int | None = None,
    ) -> None:
        """Offsets [first, last] become one run (a record of each offset, whatever was
        there), merged with equal neighbours."""
        low = self._split(first)
        high = self._split(last + 1)
        self._runs[low:high] = [(first, last, state, count, member, deadline)]
        self._merge(low - 1, low + 2)

    def _merge(self, low: int, high: int) -> None:
        """Merge adjacent runs of equal state, count, member and deadline among
        runs[low:high]."""
        runs = self._runs
        low, high = max(low, 0), min(high, len(runs))
        if high - low < 2:
            return
        merged: list[_Run] = [runs[low]]
        for run in runs[low + 1 : high]:
            last = merged[-1]
            if last[1] + 1 == run[0] and last[2:] == run[2:]:
                merged[-1] = (last[0], run[1], *run[2:])
            else:
                merged.append(run)
        runs[low:high] = merged

    def _drop_unreturned(
        self, fetch_from: int, top: int, batches: Sequence[tuple[int, int]]
    ) -> None:
        """AVAILABLE offsets of the window in [fetch_from, top] the log did not return are
        not records (markers, aborted or compacted records): they leave the window's runs."""
        holes: list[tuple[int, int]] = []
        at = fetch_from
        for first, last in batches:
            if first > at:
                holes.append((at, min(first - 1, top)))
            at = max(at, last + 1)
            if at > top:
                break
        for low, high in holes:
            if low > high:
                continue
            for run in self._clipped(low, high):
                if run[2] is RecordState.AVAILABLE:
                    start = self._split(run[0])
                    stop = self._split(run[1] + 1)
                    del self._runs[start:stop]

    def _letters(self, first: int, last: int, reason: DeadLetterReason, count: int) -> None:
        self.dead_letters.extend(
            DeadLetter(offset, reason, count) for offset in range(first, last + 1)
        )

    def _archive_state(self) -> RecordState:
        """Where a rejected record, or one released at the delivery limit, goes: ARCHIVING
        while the group has a DLQ (until its DLQ write is done), else ARCHIVED (Kafka's
        recordStateWithDlq)."""
        return RecordState.ARCHIVING if self.settings.dead_letter_queue else RecordState.ARCHIVED

    def _release(self, first: int, last: int, count: int) -> None:
        if count >= self.settings.delivery_count_limit:
            self._set(first, last, self._archive_state(), count)
            self._letters(first, last, DeadLetterReason.DELIVERY_COUNT_LIMIT, count)
        else:
            self._set(first, last, RecordState.AVAILABLE, count)

    def _advance_start(self) -> None:
        runs = self._runs
        done = 0
        start = self.start_offset
        while start < self.end_offset:
            if done < len(runs) and runs[done][0] == start:
                if runs[done][2] not in _DONE:
                    break
                start = runs[done][1] + 1
                done += 1
            else:  # not records up to the next run
                start = runs[done][0] if done < len(runs) else self.end_offset
        if done:
            del runs[:done]
        self.start_offset = start


def _add_range(ranges: list[AcquiredRange], first: int, last: int, count: int) -> None:
    """Append [first, last] acquired with ``count`` to ShareFetch's AcquiredRecords, joined to
    the last range when contiguous with the same count."""
    if ranges and ranges[-1].last_offset == first - 1 and ranges[-1].delivery_count == count:
        ranges[-1] = AcquiredRange(ranges[-1].first_offset, last, count)
    else:
        ranges.append(AcquiredRange(first, last, count))


def _coalesce(runs: Iterable[_Run]) -> list[StateBatch]:
    """Runs as persisted state batches (ACQUIRED as AVAILABLE), contiguous ones of one state
    and delivery count joined."""
    batches: list[StateBatch] = []
    for first, last, state, count, _, _ in runs:
        if state is RecordState.ACQUIRED:
            state = RecordState.AVAILABLE
        previous = batches[-1] if batches else None
        if (
            previous is not None
            and previous.last_offset == first - 1
            and previous.delivery_state is state
            and previous.delivery_count == count
        ):
            batches[-1] = StateBatch(previous.first_offset, last, state, count)
        else:
            batches.append(StateBatch(first, last, state, count))
    return batches


def _to_ranges(offsets: Iterable[int]) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for offset in sorted(set(offsets)):
        if ranges and ranges[-1][1] == offset - 1:
            ranges[-1] = (ranges[-1][0], offset)
        else:
            ranges.append((offset, offset))
    return ranges


def _merged(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive ranges sorted, overlapping or touching ones joined."""
    merged: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def _offsets(ranges: Iterable[tuple[int, int]]) -> list[int]:
    offsets: list[int] = []
    for first, last in sorted(ranges):
        offsets.extend(range(first, last + 1))
    return offsets
