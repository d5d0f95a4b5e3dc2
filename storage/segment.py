"""One log segment: a `.log` file of record batches with its `.index`, `.timeindex` and
(when a transaction was aborted in it) `.txnindex`.

Files are named by the segment's base offset zero-padded to 20 digits, as in Kafka, and the
`.log` holds stamped v2 batches back to back. The segment only ever reads batch headers (61
bytes) to find its way; record bytes go to and from the file untouched.

Index entries are made per batch: a batch gets an offset-index entry (its last offset, its
position) once more than `index_interval_bytes` have been written since the last indexed
batch, and the time index gets (largest timestamp so far, its batch's last offset) at the same
moment. That is exactly Kafka's recovery rule, so an index rebuilt by recovery is identical to
the one built by appends (Kafka indexes per append on the live path, which is the same thing
when every produce carries one batch per partition, as Produce v3+ requires).

The `.txnindex` (storage/transaction_index.py) is written by the partition log, which knows
the producer state an ABORT marker closes; recovery empties it and marks the segment
(`txn_index_rebuilding`) for the log to refill while it replays the batches.
"""

import ctypes
import itertools
import mmap
import os
import queue
import re
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, NamedTuple

from minibroker.protocol.buffers import Buffer
from minibroker.protocol.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    BatchHeader,
    read_header,
    scan_valid_batches,
)
from minibroker.storage.file_records import FileRecords
from minibroker.storage.index import (
    OFFSET_INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
)
from minibroker.storage.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
# Kafka's suffix for a segment's files waiting to be unlinked (LogFileUtils.DELETED_FILE_SUFFIX).
DELETED_SUFFIX = ".deleted"
SEGMENT_LOG_NAME = re.compile(r"(\d{20})\.log")
INT32_MAX = 2**31 - 1
_OFFSET_AND_LENGTH = struct.Struct(">qi")

# How much to read at once when walking many batch headers (loading, replaying producers).
_WALK_READ_AHEAD = 1 << 20
# When looking for one offset from an index entry, the target is usually within one index
# interval (4 KiB by default) plus a batch.
_FIND_READ_AHEAD = 16 << 10


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class SegmentRead(NamedTuple):
    data: bytes
    # True when the read took everything from its start to the segment's end, so a caller
    # may carry on in the next segment without leaving a gap.
    reached_end: bool


# Blocks reserved ahead of a growing `.log` (issue 40). An append that extends a file on ext4
# with delayed allocation reserves its blocks in the write system call (ext4_da_get_block_prep),
# and waits there while the kernel's writeback holds the file's block map to allocate the
# blocks of earlier appends: 5-22 ms now and then at 10 MB/s on this machine, with the one
# thread that serves every client held meanwhile. Blocks reserved beforehand with
# fallocate(FALLOC_FL_KEEP_SIZE) leave the write nothing to reserve (same command: 6-7 writes
# over 5 ms in 100 s against none). KEEP_SIZE leaves the file's size alone, so the file still
# holds only its batches (readers, recovery and O_APPEND see no difference); the blocks past
# the end are given back (ftruncate to the size) when the segment is sealed: rolled or closed.
# Reserved: as much again as the segment holds, at most PREALLOCATE_MAX_BYTES (the broker's
# `log.segment.reserve.max.bytes`, 0 for none), and only once it holds PREALLOCATE_FROM_BYTES
# (a quiet partition reserves nothing); asked for again once half of it is used, so that it
# is there before the appends reach it. The fallocate itself can wait too (reading a block
# group's bitmap: ext4_wait_block_bitmap, 5-8 ms twice in 6 minutes at 10 MB/s), so it runs
# on the RESERVER thread, never on the event loop. Kafka's `preallocate` (the whole segment,
# trimmed at roll) stays accepted and changes nothing here.
PREALLOCATE_FROM_BYTES = 1 << 20
PREALLOCATE_MAX_BYTES = 8 << 20

# A growing segment's index entries go to their files this many at a time (every 4 MiB of
# appends at the default index.interval.bytes), not all at the roll: a 1 GiB segment's
# 262,144 entries, packed and written at once, held the loop for 200 ms (issue 40).
INDEX_WRITE_ENTRIES = 1024


def set_reserve_max_bytes(limit: int) -> None:
    """The process's PREALLOCATE_MAX_BYTES (a node sets it once from its config at start)."""
    global PREALLOCATE_MAX_BYTES
    PREALLOCATE_MAX_BYTES = limit


_FALLOC_FL_KEEP_SIZE = 1


def _load_fallocate() -> Callable[[int, int, int, int], int] | None:
    try:
        # ctypes.CDLL releases the GIL for the call: the loop runs on while it waits.
        function = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):  # not Linux's libc
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    function.restype = ctypes.c_int
    return function


_fallocate = _load_fallocate()


def _reserve(fd: int, start: int, length: int) -> bool:
    """Reserve the file's blocks in [start, start + length) without changing its size; False
    when the system cannot (no fallocate, a filesystem without it, a full disk: the write
    then reserves its blocks itself, as before)."""
    return _fallocate is not None and _fallocate(fd, _FALLOC_FL_KEEP_SIZE, start, length) == 0


class Reserver:
    """One daemon thread that runs every segment's block reservations, in the order asked.

    Each request carries a descriptor of its own (os.dup), closed by the thread, so a
    segment closed, renamed or deleted meanwhile is never confused with a file that reuses
    its descriptor number; a reservation that lands after the file was deleted is freed with
    the file. A reservation only adds blocks past the end (KEEP_SIZE), so one that lands
    late is harmless, except that a seal or truncation must free what it reserved: they wait
    for the segment's last request first (`Segment._settle_reservation`), which is done long
    before in all but a roll right after a burst."""

    def __init__(self) -> None:
        self._requests: queue.Queue[tuple[int, int, int, threading.Event]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def request(self, fd: int, start: int, length: int) -> threading.Event:
        done = threading.Event()
        self._requests.put((os.dup(fd), start, length, done))
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="segment-reserver", daemon=True
                    )
                    self._thread.start()
        return done

    def wait_idle(self) -> None:
        """Until every request made so far is done (for tests)."""
        self._requests.join()

    def _run(self) -> None:
        while True:
            fd, start, length, done = self._requests.get()
            try:
                _reserve(fd, start, length)
            finally:
                os.close(fd)
                done.set()
                self._requests.task_done()


RESERVER = Reserver()


def _write_all(fd: int, data: Buffer) -> None:
    with memoryview(data) as view:
        written = 0
        while written < len(view):
            written += os.write(fd, view[written:])


def _whole_batches_length(data: bytes, max_offset: int | None) -> int:
    """Length of the prefix of `data` made of complete batches with base offsets < max_offset."""
    end = 0
    while end + LOG_OVERHEAD <= len(data):
        base_offset, batch_length = _OFFSET_AND_LENGTH.unpack_from(data, end)
        if batch_length < MIN_BATCH_LENGTH or end + LOG_OVERHEAD + batch_length > len(data):
            break
        if max_offset is not None and base_offset >= max_offset:
            break
        end += LOG_OVERHEAD + batch_length
    return end


class LogSegment:
    """A segment's files and what is known about its batches.

    Opening an existing segment trusts its `.log` and loads its indexes; if an index is
    missing or fails its sanity check, `needs_index_rebuild` is set and the owner must call
    `recover()` before using the segment (the log decides, because recovery may truncate).
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        suffix: str = "",
    ) -> None:
        """`suffix` follows every file name: the log cleaner writes a segment as
        `.log.cleaned` (and `.index.cleaned`, `.timeindex.cleaned`) and renames it later."""
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.suffix = suffix
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX + suffix)
        self.offset_index = OffsetIndex(
            directory / segment_file_name(base_offset, OFFSET_INDEX_SUFFIX + suffix),
            base_offset,
            max_index_size,
        )
        self.time_index = TimeIndex(
            directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX + suffix),
            base_offset,
            max_index_size,
        )
        self.txn_index = TransactionIndex(
            directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX + suffix)
        )
        # Set by recover(): the log refills the emptied `.txnindex` while replaying.
        self.txn_index_rebuilding = False
        existed = self.log_path.exists()
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        stat = os.fstat(self._fd)
        self.size = stat.st_size
        # Blocks are asked for up to here: past `size` once a segment reserves (no further
        # than `size` says nothing); `_reserving` is set when the last request is done. A
        # segment that holds a reserve of a megabyte or more past its end was not sealed (a
        # crash, a kill): its seal frees it.
        allocated = stat.st_blocks * 512
        self.reserved_to = allocated if allocated >= self.size + (1 << 20) else self.size
        self._reserving: threading.Event | None = None
        self.needs_index_rebuild = False
        self._reset_batch_state()
        if not existed:
            self.offset_index.create_empty()
            self.time_index.create_empty()
            self._rolling_base_ms: int | None = None
            return
        # segment.ms counts from the first append; after a restart the file's modification
        # time is the best estimate left of when this segment was written.
        self._rolling_base_ms = self._modified_ms() if self.size else None
        try:
            self.offset_index.load(self.size)
            self.time_index.load()
            self.txn_index.load()
        except (FileNotFoundError, CorruptIndexError, ValueError):
            self.needs_index_rebuild = True
            return
        self._load_tail_state()

    def _reset_batch_state(self) -> None:
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.next_offset = self.base_offset
        self._bytes_since_last_index_entry = 0

    def _modified_ms(self) -> int:
        return os.fstat(self._fd).st_mtime_ns // 1_000_000

    def _load_tail_state(self) -> None:
        """Largest timestamp and next offset from the indexes plus a scan of the tail only.

        Every batch before the time index's last entry has a smaller timestamp, and every
        batch before the offset index's last entry is below the next offset, so only the
        batches from the earlier of those two positions onwards need reading (Kafka's
        loadLargestTimestamp and readNextOffset).
        """
        self._reset_batch_state()
        scan_from = self.offset_index.last_position
        last_time_entry = self.time_index.last_entry
        if last_time_entry is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last_time_entry
            scan_from = min(scan_from, self.offset_index.lookup(last_time_entry[1])[1])
        for _, header in self.batches(scan_from):
            self._note_timestamp(header)
            self.next_offset = header.last_offset + 1
        self._bytes_since_last_index_entry = self.size - self.offset_index.last_position

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    @property
    def rolling_base_ms(self) -> int | None:
        """When the first batch was appended (file mtime after a restart); None if empty."""
        return self._rolling_base_ms

    def can_hold_offset(self, offset: int) -> bool:
        """Whether `offset` fits the indexes' i32 offsets relative to the base offset."""
        return 0 <= offset - self.base_offset <= INT32_MAX

    @property
    def indexes_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def largest_timestamp(self) -> int:
        """The segment's age for retention: its largest record timestamp, else its mtime."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self._modified_ms()

    def _note_timestamp(self, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        self._note_timestamp(header)
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += header.size
        self.next_offset = header.last_offset + 1

    def append(self, data: Buffer, headers: list[BatchHeader], now_ms: int) -> None:
        """Write already-stamped batches with one write; `headers` describe them in order.

        If the write fails (a full disk), the file is cut back so that no partial batch is
        left behind, and the OSError propagates.
        """
        position = self.size
        end = position + len(data)
        if end >= PREALLOCATE_FROM_BYTES and PREALLOCATE_MAX_BYTES and _fallocate is not None:
            ahead = min(end, PREALLOCATE_MAX_BYTES)
            if end + ahead // 2 > self.reserved_to:
                start = max(position, self.reserved_to)
                self._reserving = RESERVER.request(self._fd, start, end + ahead - start)
                self.reserved_to = end + ahead
        try:
            _write_all(self._fd, data)
        except OSError:
            self._settle_reservation()
            os.ftruncate(self._fd, position)
            self.reserved_to = position
            raise
        if position == 0:
            self._rolling_base_ms = now_ms
        for header in headers:
            self._index_batch(position, header)
            position += header.size
        self.size = position
        if self.offset_index.pending >= INDEX_WRITE_ENTRIES:
            self.offset_index.write_pending()
            self.time_index.write_pending()

    def batches(
        self, start_position: int = 0, *, read_ahead: int = _WALK_READ_AHEAD
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from `start_position`, reading headers only.

        The files are trusted here (no CRC check); the walk stops at anything that cannot be
        a batch so that a damaged file never sends it in circles.
        """
        read_ahead = max(read_ahead, HEADER_SIZE)
        position = start_position
        chunk = b""
        chunk_start = position
        while position + HEADER_SIZE <= self.size:
            if position + HEADER_SIZE > chunk_start + len(chunk):
                chunk = os.pread(self._fd, min(read_ahead, self.size - position), position)
                chunk_start = position
            header = read_header(chunk, position - chunk_start)
            if header.batch_length < MIN_BATCH_LENGTH or position + header.size > self.size:
                return
            yield position, header
            position += header.size

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= `offset`."""
        _, position = self.offset_index.lookup(offset)
        for batch_position, header in self.batches(position, read_ahead=_FIND_READ_AHEAD):
            if header.last_offset >= offset:
                return batch_position, header
        return None

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_batch: bool = False,
    ) -> SegmentRead | None:
        """Whole batches from the one containing `start_offset`; None if it is not here.

        At most `max_bytes` are returned, except that with `min_one_batch` the first batch
        comes whole even if it is larger; batches whose base offset is >= `max_offset` are
        left out.
        """
        found = self.find_batch(start_offset)
        if found is None:
            return None
        position, first = found
        if max_offset is not None and first.base_offset >= max_offset:
            return SegmentRead(b"", reached_end=False)
        limit = max(max_bytes, first.size) if min_one_batch else max_bytes
        remaining_in_segment = self.size - position
        data = os.pread(self._fd, max(min(limit, remaining_in_segment), 0), position)
        end = _whole_batches_length(data, max_offset)
        if end < len(data):
            data = data[:end]
        return SegmentRead(data, reached_end=end == remaining_in_segment)

    def locate(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_batch: bool = False,
    ) -> tuple[int, int, bool] | None:
        """Where ``read`` with the same arguments would read: (position, length,
        reached_end), found from batch headers and the offset index without reading the
        records; None if `start_offset` is not here. For a zero-copy read (FileRecords).

        The end is the last whole batch within the byte limit whose base offset is below
        `max_offset`. When the limit passes the segment's end and every batch is below
        `max_offset`, that is the segment's end; otherwise the walk starts from the last
        index entry that is below both bounds, so it covers about one index interval.
        """
        # find_batch, keeping the walk: a small limit ends within the chunk it has read.
        walk = self.batches(self.offset_index.lookup(start_offset)[1], read_ahead=_FIND_READ_AHEAD)
        found = next(((at, batch) for at, batch in walk if batch.last_offset >= start_offset), None)
        if found is None:
            return None
        position, first = found
        if max_offset is not None and first.base_offset >= max_offset:
            return position, 0, False
        limit = max(max_bytes, first.size) if min_one_batch else max_bytes
        limit_end = min(position + max(limit, 0), self.size)
        if limit_end == self.size and (max_offset is None or self.next_offset <= max_offset):
            return position, self.size - position, True
        # Every batch before an index entry below both bounds is in the read.
        walk_from = min(
            self.offset_index.position_at_or_below(limit_end),
            self.offset_index.lookup(max_offset - 1)[1] if max_offset is not None else limit_end,
        )
        if walk_from > position:
            walk = self.batches(walk_from, read_ahead=_FIND_READ_AHEAD)
        else:
            walk_from = position
            walk = itertools.chain([(position, first)], walk)
        end = walk_from
        for batch_position, header in walk:
            batch_end = batch_position + header.size
            if batch_end > limit_end or (
                max_offset is not None and header.base_offset >= max_offset
            ):
                break
            end = batch_end
        return position, end - position, end == self.size

    def read_at(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def slice_into(self, records: FileRecords, position: int, length: int) -> None:
        """Add this segment's bytes [position, position + length) to ``records`` (which
        holds its own descriptor, so the slice outlives this segment's deletion)."""
        records.add(self._fd, position, length)

    def batches_reaching(
        self, timestamp: int, starting_offset: int
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Batches with a max timestamp >= `timestamp` and a last offset >= starting_offset.

        The scan starts from the time index's hint, so batches before it are never read.
        """
        indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, starting_offset))
        for batch_position, header in self.batches(position):
            if header.max_timestamp >= timestamp and header.last_offset >= starting_offset:
                yield batch_position, header

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= `offset`; returns the bytes removed.

        Batches are indivisible, so a batch that straddles `offset` goes too.
        """
        found = self.find_batch(offset)
        if found is None:
            return 0
        position, _ = found
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.size - position
        self._settle_reservation()
        os.ftruncate(self._fd, position)  # frees the reserved blocks past it too
        self.size = self.reserved_to = position
        if position == 0:
            self._rolling_base_ms = None
        self._load_tail_state()
        return removed

    def recover(self) -> int:
        """Re-read every batch with its CRC, rebuild both indexes, cut the invalid tail.

        Returns how many bytes were cut. Besides framing and CRC, a batch is only valid if
        its offsets move forward and fit the segment's relative offsets; anything else means
        the rest of the file cannot be trusted either.
        """
        self.offset_index.create_empty()
        self.time_index.create_empty()
        self.txn_index.reset()
        self.txn_index_rebuilding = True
        self._reset_batch_state()
        file_size = os.fstat(self._fd).st_size
        valid_end = 0
        if file_size:
            with mmap.mmap(self._fd, file_size, access=mmap.ACCESS_READ) as mapped:
                scan = scan_valid_batches(mapped)
                try:
                    for position, header in scan:
                        if header.base_offset < self.next_offset or not self.can_hold_offset(
                            header.last_offset
                        ):
                            break
                        self._index_batch(position, header)
                        valid_end = position + header.size
                finally:
                    scan.close()
        if valid_end < file_size:
            self._settle_reservation()
            os.ftruncate(self._fd, valid_end)
        self.size = self.reserved_to = valid_end
        if valid_end == 0:
            self._rolling_base_ms = None
        self.offset_index.write_pending()
        self.time_index.write_pending()
        self.needs_index_rebuild = False
        return file_size - valid_end

    def seal_indexes(self) -> None:
        """Write the final time-index entry (the segment's largest timestamp) and all
        pending index entries, as Kafka does when a segment is rolled or closed; give back
        the blocks reserved past the end (see PREALLOCATE_FROM_BYTES)."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.write_pending()
        self.time_index.write_pending()
        self.release_reserved()

    def release_reserved(self) -> None:
        """Free the blocks reserved past the segment's end. ftruncate to the same size does
        it, and sets the file's modification time, which retention and segment.ms read after
        a restart: it is put back."""
        if self.reserved_to <= self.size or self._fd < 0:
            return
        self._settle_reservation()
        modified = os.fstat(self._fd)
        os.ftruncate(self._fd, self.size)
        os.utime(self._fd, ns=(modified.st_atime_ns, modified.st_mtime_ns))
        self.reserved_to = self.size

    def _settle_reservation(self) -> None:
        """Wait for this segment's last reservation (see Reserver), so that a truncation
        or seal after it frees what it reserved."""
        if self._reserving is not None:
            self._reserving.wait()
            self._reserving = None

    def flush(self) -> None:
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def descriptors_to_sync(self) -> list[int]:
        """What `flush` fsyncs, as descriptors of their own for a worker thread to fsync and
        close (PartitionLog.begin_flush): the `.log`'s (a duplicate) and the indexes', after
        their pending entries are written. They stay valid if the segment is closed,
        deleted or renamed meanwhile, so the thread never touches a path the owner changes
        (an index opened by name after a deletion would be created again)."""
        self.offset_index.write_pending()
        self.time_index.write_pending()
        fds = [os.dup(self._fd)]
        try:
            for path in (self.offset_index.path, self.time_index.path, self.txn_index.path):
                if path is self.txn_index.path and not self.txn_index.entries:
                    continue
                try:
                    fds.append(os.open(path, os.O_RDONLY))
                except FileNotFoundError:
                    if path is not self.txn_index.path:
                        raise
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def close(self) -> None:
        if self._fd < 0:
            return
        self.seal_indexes()
        os.close(self._fd)
        self._fd = -1

    def close_descriptor(self) -> None:
        """Close the `.log` without writing anything (its files are about to be deleted)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def change_suffix(self, new_suffix: str, *, log_first: bool) -> None:
        """Rename the segment's files from the current suffix to `new_suffix` (the open
        descriptor stays valid). The order matters to crash recovery (see PartitionLog's
        `replace_segments`): `log_first` renames the .log before the indexes."""
        order: list[OffsetIndex | TimeIndex | TransactionIndex | Literal["log"]] = (
            ["log", self.offset_index, self.time_index, self.txn_index]
            if log_first
            else [self.offset_index, self.time_index, self.txn_index, "log"]
        )
        for item in order:
            path = self.log_path if item == "log" else item.path
            renamed = path.with_name(path.name.removesuffix(self.suffix) + new_suffix)
            if path.exists():
                os.replace(path, renamed)
            if item == "log":
                self.log_path = renamed
            else:
                item.path = renamed
        self.suffix = new_suffix

    def set_modified_ms(self, modified_ms: int) -> None:
        """Give the .log file this modification time (the cleaner keeps the old one's)."""
        os.utime(self.log_path, ns=(modified_ms * 1_000_000, modified_ms * 1_000_000))

    def delete(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def delete_later(self) -> list[Path]:
        """Kafka's asynchronous segment deletion (LogSegment's files renamed with the
        `.deleted` suffix, removed later by another thread): close the segment and rename
        its files to `<name>.deleted`; returns the new paths for the caller to unlink, which
        may happen in a worker thread since no segment ever has those names. Unlinking a
        large file frees its blocks and can take milliseconds; a rename does not. After a
        crash, loading removes `.deleted` files (`_remove_leftovers` in log.py)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        doomed = []
        paths = (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path)
        for path in paths:
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.replace(path, target)
            except FileNotFoundError:
                continue
            doomed.append(target)
        self.txn_index.forget()
        return doomed
