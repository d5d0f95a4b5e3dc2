"""The log cleaner: compaction of `cleanup.policy=compact` logs, with Kafka's semantics.

What a cleaning of one log does, as Kafka's LogCleaner (Cleaner.doClean):

- The log is cleanable below its first uncleanable offset: the base offset of the segment
  holding the smallest of the active segment's base offset, the upper bound the caller
  passes (the high watermark) and the base of the first dirty segment younger than
  `min.compaction.lag.ms`. The active segment is never cleaned, so appends go on meanwhile.
- The dirty section starts at the log's first dirty offset (the `cleaner-offset-checkpoint`
  entry; the log start offset at first). A log is picked when its dirty bytes are more than
  `min.cleanable.dirty.ratio` of its cleanable bytes, or when a dirty segment is older than
  `max.compaction.lag.ms`; the dirtiest such log goes first.
- A map key -> latest offset is built over the dirty section, bounded by
  `log.cleaner.dedupe.buffer.size` filled to 90%, as Kafka's; if it fills, the cleaning stops
  where the map stopped and the rest waits for the next round. Kafka's map holds a 16-byte
  MD5 and an offset, 24 bytes a key; this one is a dict of the keys themselves, which costs
  about 134 bytes a key measured with 24-byte keys, so a key is counted as 128 bytes (the
  default 128 MiB maps ~0.94M keys a round where Kafka maps ~5M).
- Every segment below the end of the map (clean part included) is rewritten, in groups whose
  sizes add up to at most `segment.bytes` (and whose indexes fit `segment.index.bytes`), each
  group into one new segment with the base offset of its first segment. A record stays if it
  is past the end of the map, or it is the latest record of its key; a tombstone (null value)
  stays until its batch's delete horizon passes. Records without a key are dropped.
- Delete horizon (KIP-534, Kafka 3.1+): the first time a batch with a tombstone is cleaned,
  it gets attribute bit 6 and `now + delete.retention.ms` in its baseTimestamp (record
  timestamp deltas are rewritten so that every record keeps its timestamp); a later cleaning
  after that time drops its tombstones.
- Offsets are kept (the log gets gaps); a rewritten batch keeps its base offset, last offset
  delta, producer id, epoch and base sequence, partition leader epoch, timestamp type and
  codec (records are decompressed, filtered and compressed again with the same codec); a
  batch whose records all stay and that needs no delete horizon is copied as it was. A
  batch left with no record is dropped, except the last batch of each producer the
  partition has state for and the batch ending at the first uncleanable offset, which stay
  as header-only batches (so that producer state and the log's last offset survive).
- Each group's new segment is written as `<base>.log.cleaned` (with its indexes), flushed,
  and swapped in by `PartitionLog.replace_segments` (`.swap`, delete, rename; completed on
  open after a crash). The segment keeps the last old segment's modification time.

Transactions, as Kafka's Cleaner with CleanedTransactionMetadata:

- Nothing at or past the last stable offset is cleaned (the caller passes the LSO as the
  upper bound), so an open transaction is never touched.
- The records of aborted transactions (known from the `.txnindex` of every segment) are
  never put in the offset map, and their batches are removed (a producer's last batch and
  the batch ending at the first uncleanable offset stay header-only, as for any batch).
- An ABORT marker stays, with its `.txnindex` entry in the cleaned segment, while the same
  cleaning still saw batches of its transaction; a COMMIT marker while it saw batches of
  its transaction. Once none are left, the marker gets a delete horizon (attribute bit 6,
  now + delete.retention.ms in its baseTimestamp) the first time, and is removed by a
  cleaning after the horizon, like a tombstone.

Departures from Kafka: the produce path does not
refuse keyless records for compacted topics (Kafka answers INVALID_RECORD): it never decodes
records; the cleaner drops them instead.

Threading: `Cleaning` is made on the thread that owns the log (it snapshots the segments),
`build_offset_map` and `clean_group` only read the old segments' files (through their own
descriptors) and write new files, so they may run in a worker thread while the owner keeps
appending and reading; `PartitionLog.replace_segments` must run on the owner thread again.
A worker stops with CleaningAborted as soon as the log is truncated, closed or deleted.
"""

import logging
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from minibroker.protocol.control_batch import read_control_marker
from minibroker.protocol.record_batch import (
    CONTROL_FLAG_MASK,
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    read_header,
)
from minibroker.protocol.records import (
    DELETE_HORIZON_FLAG,
    RawRecord,
    RecordError,
    encode_raw_batch,
    iter_raw_records,
    iter_record_keys,
)
from minibroker.storage.log import CLEANED_SUFFIX, INT_MAX, LONG_MAX, PartitionLog
from minibroker.storage.segment import LogSegment, segment_file_name
from minibroker.storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex

log = logging.getLogger("storage.cleaner")


DEFAULT_DEDUPE_BUFFER_SIZE = 134217728
# What a key -> offset dict entry costs in CPython, roughly (see the module notes).
_BYTES_PER_MAP_ENTRY = 128
_MAP_LOAD_FACTOR = 0.9
_READ_SIZE = 1 << 20
# About a millisecond of decoding between two chances for the loop thread to run.
_RECORDS_BETWEEN_YIELDS = 256
_WRITE_SIZE = 1 << 20


def map_capacity(dedupe_buffer_size: int) -> int:
    """Keys one cleaning may map within `log.cleaner.dedupe.buffer.size` bytes."""
    return max(int(dedupe_buffer_size / _BYTES_PER_MAP_ENTRY * _MAP_LOAD_FACTOR), 1)


class CleaningAborted(Exception):
    """The log changed under the cleaning (truncated, closed, deleted); nothing was swapped
    for the group in progress."""


@dataclass
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    records_without_key: int = 0
    segments_replaced: int = 0

    @property
    def bytes_reclaimed(self) -> int:
        return self.bytes_read - self.bytes_written


T = TypeVar("T")


def _yielding(items: Iterable[T], every: int = _RECORDS_BETWEEN_YIELDS) -> Iterator[T]:
    """`items`, releasing the GIL every so many (a batch may hold thousands of records; see
    Cleaning.check_done)."""
    for count, item in enumerate(items, 1):
        if count % every == 0:
            time.sleep(0)
        yield item


# -- choosing what to clean --------------------------------------------------------------


def _segment_end(segments: list[LogSegment], position: int, log_end: int) -> int:
    following = segments[position + 1] if position + 1 < len(segments) else None
    return following.base_offset if following is not None else log_end


def _overlapping(
    segments: list[LogSegment], start: int, end: int, log_end: int
) -> list[LogSegment]:
    """Segments holding any offset of [start, end), as Kafka's logSegments(from, to)."""
    return [
        segment
        for position, segment in enumerate(segments)
        if segment.base_offset < end and _segment_end(segments, position, log_end) > start
    ]


def _first_batch_max_timestamp(segment: LogSegment) -> int:
    for _, header in segment.batches(read_ahead=HEADER_SIZE):
        return header.max_timestamp
    return -1


@dataclass
class LogToClean:
    """A compacted log and the range the cleaner could clean now (LogCleanerManager)."""

    log: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def should_clean(self) -> bool:
        return (self.needs_compaction_now and self.cleanable_bytes > 0) or (
            self.cleanable_ratio > self.log.config.min_cleanable_dirty_ratio
        )


def log_to_clean(partition_log: PartitionLog, upper_bound: int, now_ms: int) -> LogToClean:
    """Where `partition_log` stands for the cleaner, with nothing cleaned past `upper_bound`
    (the high watermark); resets a first dirty offset outside the log to its start."""
    config = partition_log.config
    segments = partition_log.segments
    log_start = partition_log.log_start_offset
    log_end = partition_log.log_end_offset
    first_dirty = partition_log.first_dirty_offset
    if first_dirty is None or first_dirty < log_start or first_dirty > log_end:
        if first_dirty is not None and not config.deletes_old_segments:
            log.warning(
                "%s: resetting the first dirty offset %d to the log start offset %d",
                partition_log.name,
                first_dirty,
                log_start,
            )
        first_dirty = log_start
        partition_log.first_dirty_offset = first_dirty
    active = segments[-1]
    non_active_dirty = [
        segment
        for position, segment in enumerate(segments[:-1])
        if _segment_end(segments, position, log_end) > first_dirty
    ]
    candidates = [upper_bound, active.base_offset]
    if config.min_compaction_lag_ms > 0:
        young = next(
            (
                segment
                for segment in non_active_dirty
                if segment.largest_timestamp() > now_ms - config.min_compaction_lag_ms
            ),
            None,
        )
        if young is not None:
            candidates.append(young.base_offset)
    uncleanable = max(first_dirty, min(candidates))
    # The cleanable range ends at the base of the segment holding that offset.
    if uncleanable >= active.base_offset:
        first_uncleanable = active.base_offset
    else:
        first_uncleanable = max(
            (s.base_offset for s in segments[:-1] if s.base_offset <= uncleanable),
            default=segments[0].base_offset,
        )
    clean_bytes = sum(s.size for s in _overlapping(segments, -1, first_dirty, log_end))
    cleanable_bytes = sum(
        s.size
        for s in _overlapping(
            segments, min(first_dirty, first_uncleanable), first_uncleanable, log_end
        )
    )
    needs_now = False
    if config.max_compaction_lag_ms < LONG_MAX:
        earliest = min(
            (t for s in non_active_dirty if (t := _first_batch_max_timestamp(s)) > 0),
            default=LONG_MAX,
        )
        needs_now = earliest < now_ms - config.max_compaction_lag_ms
    return LogToClean(
        partition_log, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, needs_now
    )


def compacted_logs(candidates: Iterable[tuple[PartitionLog, int]], now_ms: int) -> list[LogToClean]:
    """Where every compacted, open, non-empty log among (log, upper bound) pairs stands."""
    found = []
    for partition_log, upper_bound in candidates:
        if not partition_log.config.compacts or partition_log.closed:
            continue
        to_clean = log_to_clean(partition_log, upper_bound, now_ms)
        if to_clean.total_bytes > 0:
            found.append(to_clean)
    return found


def filthiest(logs: Iterable[LogToClean]) -> LogToClean | None:
    """The log to clean next: the highest cleanable ratio among those due (see
    LogToClean.should_clean); None if none is."""
    due = [to_clean for to_clean in logs if to_clean.should_clean]
    return max(due, key=lambda item: item.cleanable_ratio, default=None)


def grab_filthiest(
    candidates: Iterable[tuple[PartitionLog, int]], now_ms: int
) -> LogToClean | None:
    """The compacted log to clean next among (log, upper bound) pairs, None if none is due
    (Kafka's grabFilthiestCompactedLog)."""
    return filthiest(compacted_logs(candidates, now_ms))


# -- cleaning --------------------------------------------------------------------------------


def _read_batches(path: Path, start: int, size: int) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, batch bytes) of every whole batch of a segment file from `start`, with its
    own descriptor and reads of about a megabyte; stops at anything that is not a batch."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise CleaningAborted(f"{path.name} was deleted (retention)") from None
    try:
        position = start
        chunk = b""
        chunk_start = position
        while position + HEADER_SIZE <= size:
            offset_in_chunk = position - chunk_start
            if offset_in_chunk + HEADER_SIZE > len(chunk):
                chunk = os.pread(fd, min(_READ_SIZE, size - position), position)
                chunk_start, offset_in_chunk = position, 0
            header = read_header(chunk, offset_in_chunk)
            if header.batch_length < MIN_BATCH_LENGTH or position + header.size > size:
                return
            if offset_in_chunk + header.size > len(chunk):
                chunk = os.pread(fd, max(min(_READ_SIZE, size - position), header.size), position)
                chunk_start, offset_in_chunk = position, 0
            yield header, chunk[offset_in_chunk : offset_in_chunk + header.size]
            position += header.size
    finally:
        os.close(fd)


class CleanedTransactions:
    """Kafka's CleanedTransactionMetadata: while batches are read in offset order, which
    belong to aborted transactions, and which markers may go.

    ``aborted`` are the `.txnindex` entries that may overlap what is read, by first offset;
    ``cleaned_index`` (if given) receives the entries of ABORT markers that stay.
    """

    def __init__(
        self, aborted: list[AbortedTxn], cleaned_index: TransactionIndex | None = None
    ) -> None:
        self._aborted = sorted(aborted, key=lambda txn: txn.first_offset)
        self._next = 0
        # producer id -> [the index entry, last offset of a batch of it seen here or None]
        self._ongoing_aborted: dict[int, list[Any]] = {}
        self._ongoing_committed: set[int] = set()
        self._cleaned_index = cleaned_index

    def _consume_up_to(self, offset: int) -> None:
        while self._next < len(self._aborted) and self._aborted[self._next].first_offset <= offset:
            txn = self._aborted[self._next]
            self._next += 1
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, None])

    def on_batch_read(self, header: BatchHeader) -> bool:
        """Whether a data batch belongs to an aborted transaction (to be removed)."""
        self._consume_up_to(header.last_offset)
        if not header.attributes & TRANSACTIONAL_FLAG_MASK:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing[1] = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch_read(self, header: BatchHeader, batch: bytes) -> bool:
        """Whether a marker may be discarded (once its delete horizon passed): no batch of
        its transaction was seen in this read."""
        self._consume_up_to(header.last_offset)
        try:
            commit, _ = read_control_marker(batch)
        except (RecordError, IndexError):
            return False
        producer_id = header.producer_id
        if not commit:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing[1] is not None:
                if self._cleaned_index is not None:
                    self._cleaned_index.append(ongoing[0])
                return False
            return True
        if producer_id in self._ongoing_committed:
            self._ongoing_committed.discard(producer_id)
            return False
        return True


class Cleaning:
    """One cleaning of one log. Make it on the log's thread; then `build_offset_map()` and
    `clean_group(group)` (for each of `groups()`) may run in another thread, and each
    group's result goes to `log.replace_segments` on the log's thread; `finish()` last."""

    def __init__(self, to_clean: LogToClean, now_ms: int, *, max_map_entries: int) -> None:
        self.log = to_clean.log
        self.to_clean = to_clean
        self.now_ms = now_ms
        self.config = self.log.config
        self.max_map_entries = max_map_entries
        self.stats = CleanerStats()
        self._version = self.log.structure_version
        self._log_end = self.log.log_end_offset
        segments = self.log.segments
        # (segment, end offset, size, path) of every segment that may be read, as now; never
        # the active one.
        self._segments = [
            (
                segment,
                _segment_end(segments, position, self._log_end),
                segment.size,
                segment.log_path,
            )
            for position, segment in enumerate(segments[:-1])
        ]
        start = to_clean.first_dirty_offset
        self._dirty = [
            (segment, end, size, path, segment.offset_index.lookup(start)[1])
            for segment, end, size, path in self._segments
            if segment.base_offset < to_clean.first_uncleanable_offset and end > start
        ]
        self._producer_last_offsets = self.log.producer_state.last_data_offsets()
        # Every aborted transaction that may reach into the cleanable range (its marker may
        # lie in a later segment, even the active one).
        self._aborted = [
            entry
            for segment in segments
            for entry in segment.txn_index.entries
            if entry.first_offset < to_clean.first_uncleanable_offset
        ]
        # Recovery after a crash relearns unsaved leader-epoch entries from the batches'
        # epochs; the cleaning may remove the batch that started an epoch, so the entries are
        # written first (usually nothing to do: they are written at every flush).
        self.log.leader_epoch_cache.flush()
        self.offset_map: dict[bytes, int] = {}
        self.latest_offset = -1

    def check_done(self) -> None:
        """Called between batches: stop if the log changed, and let other threads run.

        In a worker thread, the cleaner holds the GIL while it decodes; a thread waiting for
        it (the broker's event loop) would get it only after the interpreter's switch
        interval (5 ms) each time. Releasing it here, once a batch, lets the loop in within
        one batch's work instead."""
        time.sleep(0)
        if self.log.closed or self.log.structure_version != self._version:
            raise CleaningAborted(f"{self.log.name} changed during cleaning")

    # -- the offset map ------------------------------------------------------------------

    def build_offset_map(self) -> None:
        """Key -> latest offset over the dirty section (Cleaner.buildOffsetMap)."""
        start = self.to_clean.first_dirty_offset
        offset_map = self.offset_map
        transactions = CleanedTransactions(self._aborted)
        for segment, end, size, path, position in self._dirty:
            upper = min(end, self.to_clean.first_uncleanable_offset)
            for header, batch in _read_batches(path, position, size):
                self.check_done()
                if header.base_offset >= upper:
                    break
                if header.attributes & CONTROL_FLAG_MASK:
                    transactions.on_control_batch_read(header, batch)
                    continue
                if transactions.on_batch_read(header):  # aborted: its keys are not mapped
                    if header.last_offset >= start:
                        self.latest_offset = max(self.latest_offset, header.last_offset)
                    continue
                for offset, key in _yielding(iter_record_keys(batch)):
                    if key is None or offset < start:
                        continue
                    if len(offset_map) >= self.max_map_entries and key not in offset_map:
                        log.debug(
                            "%s: offset map full in segment %d",
                            self.log.name,
                            segment.base_offset,
                        )
                        return
                    offset_map[key] = offset
                if header.last_offset >= start:
                    self.latest_offset = max(self.latest_offset, header.last_offset)
            # A gap at the end of the segment is mapped too.
            self.latest_offset = max(self.latest_offset, upper - 1)

    @property
    def end_offset(self) -> int:
        """The first offset this cleaning leaves dirty (the next first dirty offset)."""
        return self.latest_offset + 1

    # -- grouping ------------------------------------------------------------------------

    def groups(self) -> list[list[LogSegment]]:
        """Segments below `end_offset` in groups of at most segment.bytes (and indexes of
        at most segment.index.bytes), as Kafka's groupSegmentsBySize."""
        max_size = self.config.segment_bytes
        max_index_size = self.config.segment_index_bytes
        remaining = [item for item in self._segments if item[0].base_offset < self.end_offset]
        groups = []
        while remaining:
            head = remaining.pop(0)
            group = [head]
            log_size = head[2]
            index_size = head[0].offset_index.entries * 8
            time_index_size = head[0].time_index.entries * 12
            while remaining:
                segment, _, size, _ = remaining[0]
                last_offset = (
                    remaining[1][0].base_offset - 1
                    if len(remaining) > 1
                    else self.to_clean.first_uncleanable_offset - 1
                )
                if not (
                    log_size + size <= max_size
                    and index_size + segment.offset_index.entries * 8 <= max_index_size
                    and time_index_size + segment.time_index.entries * 12 <= max_index_size
                    and (size == 0 or last_offset - group[0][0].base_offset <= INT_MAX)
                ):
                    break
                group.append(remaining.pop(0))
                log_size += size
                index_size += segment.offset_index.entries * 8
                time_index_size += segment.time_index.entries * 12
            groups.append(group)
        self._groups = {id(group[0][0]): group for group in groups}
        return [[item[0] for item in group] for group in groups]

    # -- rewriting -----------------------------------------------------------------------

    def _keeps(self, record: RawRecord, horizon: int | None) -> bool:
        if record.offset > self.latest_offset:
            return True
        if record.key is None:
            self.stats.records_without_key += 1
            return False
        if record.offset < self.offset_map.get(record.key, -1):
            return False
        return record.has_value or horizon is None or self.now_ms < horizon

    def _filter(
        self, header: BatchHeader, batch: bytes, transactions: CleanedTransactions
    ) -> bytes | None:
        """The batch as it leaves the cleaner: unchanged, rewritten, header-only, or None."""
        has_horizon = bool(header.attributes & DELETE_HORIZON_FLAG)
        horizon = header.base_timestamp if has_horizon else None
        if header.attributes & CONTROL_FLAG_MASK:
            if not transactions.on_control_batch_read(header, batch):
                return batch
            if horizon is None:  # first seen discardable: it gets its delete horizon
                return self._with_horizon(header, batch)
            if self.now_ms < horizon:
                return batch
            return self._emptied(header)
        aborted = transactions.on_batch_read(header)
        kept = []
        read = 0
        tombstones = False
        for record in _yielding(iter_raw_records(batch)):
            read += 1
            if not aborted and self._keeps(record, horizon):
                kept.append(record)
                tombstones = tombstones or not record.has_value
        self.stats.records_read += read
        self.stats.records_written += len(kept)
        if kept:
            needs_horizon = tombstones and not has_horizon
            if len(kept) == read and not needs_horizon:
                return batch
            if needs_horizon:
                horizon = self.now_ms + self.config.delete_retention_ms
            attributes = header.attributes | (DELETE_HORIZON_FLAG if horizon is not None else 0)
            if header.attributes & TIMESTAMP_TYPE_MASK:  # LogAppendTime
                max_timestamp = header.max_timestamp
            else:
                max_timestamp = max(record.timestamp for record in kept)
            return encode_raw_batch(
                kept,
                base_offset=header.base_offset,
                last_offset_delta=header.last_offset_delta,
                attributes=attributes,
                base_timestamp=horizon if horizon is not None else kept[0].timestamp,
                max_timestamp=max_timestamp,
                partition_leader_epoch=header.partition_leader_epoch,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
            )
        return self._emptied(header)

    def _with_horizon(self, header: BatchHeader, batch: bytes) -> bytes:
        """A marker batch, records kept, with its delete horizon set (KIP-534)."""
        records = list(iter_raw_records(batch))
        return encode_raw_batch(
            records,
            base_offset=header.base_offset,
            last_offset_delta=header.last_offset_delta,
            attributes=header.attributes | DELETE_HORIZON_FLAG,
            base_timestamp=self.now_ms + self.config.delete_retention_ms,
            max_timestamp=header.max_timestamp,
            partition_leader_epoch=header.partition_leader_epoch,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
        )

    def _emptied(self, header: BatchHeader) -> bytes | None:
        """A batch left with no record: header-only when it must stay, else None."""
        last_of_producer = (
            header.producer_id >= 0
            and self._producer_last_offsets.get(header.producer_id) == header.last_offset
        )
        if last_of_producer or header.last_offset + 1 == self.to_clean.first_uncleanable_offset:
            return encode_raw_batch(
                [],
                base_offset=header.base_offset,
                last_offset_delta=header.last_offset_delta,
                attributes=header.attributes
                & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK),
                base_timestamp=header.max_timestamp,
                max_timestamp=header.max_timestamp,
                partition_leader_epoch=header.partition_leader_epoch,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
            )
        return None

    def clean_group(self, group: list[LogSegment]) -> LogSegment:
        """Write the cleaned copy of `group` as `<base>.log.cleaned` (with its indexes),
        flushed; CleaningAborted (and nothing left behind) if the log changed."""
        items = self._groups[id(group[0])]
        base_offset = group[0].base_offset
        directory = self.log.directory
        for suffix in (".log", ".index", ".timeindex", TXN_INDEX_SUFFIX):
            (directory / segment_file_name(base_offset, suffix + CLEANED_SUFFIX)).unlink(
                missing_ok=True
            )
        cleaned = LogSegment(
            directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            suffix=CLEANED_SUFFIX,
        )
        group_base = base_offset
        transactions = CleanedTransactions(
            [txn for txn in self._aborted if txn.last_offset >= group_base], cleaned.txn_index
        )
        try:
            pending: list[bytes] = []
            headers: list[BatchHeader] = []
            pending_size = 0
            for _, _, size, path in items:
                for header, batch in _read_batches(path, 0, size):
                    self.check_done()
                    self.stats.bytes_read += len(batch)
                    out = self._filter(header, batch, transactions)
                    if out is None:
                        continue
                    pending.append(out)
                    headers.append(read_header(out))
                    pending_size += len(out)
                    if pending_size >= _WRITE_SIZE:
                        cleaned.append(b"".join(pending), headers, self.now_ms)
                        self.stats.bytes_written += pending_size
                        pending, headers, pending_size = [], [], 0
            if pending:
                cleaned.append(b"".join(pending), headers, self.now_ms)
                self.stats.bytes_written += pending_size
            cleaned.seal_indexes()
            cleaned.flush()
            cleaned.set_modified_ms(os.stat(items[-1][3]).st_mtime_ns // 1_000_000)
        except BaseException:
            cleaned.delete()
            raise
        return cleaned

    def finish(self) -> None:
        """Record how far the log is now clean (its next first dirty offset)."""
        self.check_done()
        self.log.first_dirty_offset = max(self.end_offset, self.to_clean.first_dirty_offset)


def clean_log(
    to_clean: LogToClean, now_ms: int, *, max_map_entries: int | None = None
) -> CleanerStats:
    """Clean one log in the calling thread, start to finish (tests, tools); the broker runs
    the same steps with the heavy ones in a worker thread (broker/log_cleaner.py)."""
    if max_map_entries is None:
        max_map_entries = map_capacity(DEFAULT_DEDUPE_BUFFER_SIZE)
    cleaning = Cleaning(to_clean, now_ms, max_map_entries=max_map_entries)
    cleaning.build_offset_map()
    for group in cleaning.groups():
        cleaned = cleaning.clean_group(group)
        if not to_clean.log.replace_segments(cleaned, group):
            raise CleaningAborted(f"{to_clean.log.name} changed during cleaning")
        cleaning.stats.segments_replaced += len(group)
    cleaning.finish()
    return cleaning.stats
