"""Kafka's sparse segment indexes: the offset index (.index) and the time index (.timeindex).

Both map into one segment and store offsets relative to the segment's base offset:

- `.index`: 8-byte entries, relative offset i32 then file position i32 (big-endian). An entry
  (offset, position) says the batch whose last offset is `offset` starts at `position`.
- `.timeindex`: 12-byte entries, timestamp i64 then relative offset i32. An entry says the
  largest timestamp seen so far in the segment is `timestamp`, reached by the batch whose last
  offset is `offset`. Timestamps strictly increase from entry to entry.

Entries are held in memory (compact arrays, searched by bisection) and appended to the file
without preallocation, so a file is always exactly entries * entry size bytes: the files stay
byte-comparable and no trimming is needed when a segment is rolled or the broker stops. The
file lags memory until `write_pending()`/`flush()` (a growing segment calls it every
INDEX_WRITE_ENTRIES entries, so that a roll has few left to write): like Kafka's
memory-mapped indexes, an index is only trusted on disk after a flush or a clean shutdown,
and otherwise rebuilt from the log by recovery.
"""

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from minibroker.protocol.record_batch import NO_TIMESTAMP

OFFSET_INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_BIG_ENDIAN_HOST = sys.byteorder == "big"


class CorruptIndexError(Exception):
    """An index file is malformed or inconsistent with its log; it must be rebuilt."""


class _IndexFile:
    """What both indexes share: a path, a capacity, and how much of memory is on disk."""

    entry_size: int

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_index_size // self.entry_size
        self._relative_offsets = array("i")
        self._entries_on_disk = 0

    @property
    def entries(self) -> int:
        return len(self._relative_offsets)

    @property
    def pending(self) -> int:
        """Entries only in memory so far."""
        return len(self._relative_offsets) - self._entries_on_disk

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _read_file(self) -> bytes:
        data = self.path.read_bytes()
        if len(data) % self.entry_size:
            raise CorruptIndexError(
                f"{self.path} is {len(data)} bytes, not a multiple of {self.entry_size}"
            )
        return data

    def _pack(self, start: int, stop: int) -> bytes:
        raise NotImplementedError

    def _truncate_entries(self, keep: int) -> None:
        raise NotImplementedError

    def create_empty(self) -> None:
        """Start a fresh, empty index file (replacing any previous one)."""
        self._truncate_entries(0)
        self.path.write_bytes(b"")
        self._entries_on_disk = 0

    def truncate_to(self, offset: int) -> None:
        """Drop the entries for offsets >= `offset`."""
        keep = bisect_left(self._relative_offsets, offset - self.base_offset)
        self._truncate_entries(keep)
        if keep < self._entries_on_disk:
            os.truncate(self.path, keep * self.entry_size)
            self._entries_on_disk = keep

    def write_pending(self) -> None:
        """Append the entries that are so far only in memory to the file."""
        if self._entries_on_disk < self.entries:
            with open(self.path, "ab") as file:
                file.write(self._pack(self._entries_on_disk, self.entries))
            self._entries_on_disk = self.entries

    def flush(self) -> None:
        self.write_pending()
        with open(self.path, "ab") as file:
            os.fsync(file.fileno())

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


class OffsetIndex(_IndexFile):
    """Maps offsets to file positions in a segment's .log, sparsely."""

    entry_size = _OFFSET_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._positions = array("i")

    def load(self, log_size: int) -> None:
        """Read the file, or raise CorruptIndexError (FileNotFoundError if it is missing)."""
        pairs = array("i", self._read_file())
        if not _BIG_ENDIAN_HOST:
            pairs.byteswap()
        relative_offsets, positions = pairs[0::2], pairs[1::2]
        ordered = all(a < b for a, b in zip(relative_offsets, relative_offsets[1:], strict=False))
        positions_ordered = all(a < b for a, b in zip(positions, positions[1:], strict=False))
        if not (ordered and positions_ordered):
            raise CorruptIndexError(f"{self.path} has entries out of order")
        if relative_offsets and (relative_offsets[0] < 0 or positions[0] < 0):
            raise CorruptIndexError(f"{self.path} has an entry below the segment's start")
        if positions and positions[-1] >= log_size:
            raise CorruptIndexError(
                f"{self.path} points at position {positions[-1]}, past the end of its log "
                f"({log_size} bytes)"
            )
        self._relative_offsets = relative_offsets
        self._positions = positions
        self._entries_on_disk = len(relative_offsets)

    @property
    def last_position(self) -> int:
        """File position of the newest entry's batch; 0 (the segment start) if there is none."""
        return self._positions[-1] if self._positions else 0

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self._relative_offsets and relative <= self._relative_offsets[-1]:
            raise ValueError(
                f"offset {offset} is not above the last entry of {self.path} "
                f"({self.base_offset + self._relative_offsets[-1]})"
            )
        self._relative_offsets.append(relative)
        self._positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry <= `offset`; the segment start if none."""
        slot = bisect_right(self._relative_offsets, offset - self.base_offset) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative_offsets[slot], self._positions[slot]

    def position_at_or_below(self, position: int) -> int:
        """The largest indexed batch position <= `position`; 0 (the segment start) if none.
        Positions grow with offsets, so the entries are ordered by either."""
        slot = bisect_right(self._positions, position) - 1
        return self._positions[slot] if slot >= 0 else 0

    def _pack(self, start: int, stop: int) -> bytes:
        # In C, not one struct.pack per entry: a roll writes every entry of the segment not
        # yet on disk at once (tens of thousands; 7 ms held on the loop in a soak).
        packed = array("i", bytes(2 * 4 * (stop - start)))
        packed[0::2] = self._relative_offsets[start:stop]
        packed[1::2] = self._positions[start:stop]
        if not _BIG_ENDIAN_HOST:
            packed.byteswap()
        return packed.tobytes()

    def _truncate_entries(self, keep: int) -> None:
        del self._relative_offsets[keep:]
        del self._positions[keep:]


class TimeIndex(_IndexFile):
    """Maps timestamps to offsets in a segment, sparsely; timestamps strictly increase."""

    entry_size = _TIME_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._timestamps = array("q")

    def load(self) -> None:
        """Read the file, or raise CorruptIndexError (FileNotFoundError if it is missing)."""
        timestamps = array("q")
        relative_offsets = array("i")
        for timestamp, relative in _TIME_ENTRY.iter_unpack(self._read_file()):
            if timestamps and (timestamp <= timestamps[-1] or relative < relative_offsets[-1]):
                raise CorruptIndexError(f"{self.path} has entries out of order")
            if relative < 0:
                raise CorruptIndexError(f"{self.path} has an entry below the segment's start")
            timestamps.append(timestamp)
            relative_offsets.append(relative)
        self._timestamps = timestamps
        self._relative_offsets = relative_offsets
        self._entries_on_disk = len(timestamps)

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the newest entry."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._relative_offsets[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry if `timestamp` is above the last one (entries stay monotonic).

        An empty index compares against NO_TIMESTAMP (-1), as Kafka's does, so batches
        without timestamps never produce entries.
        """
        last_timestamp = self._timestamps[-1] if self._timestamps else NO_TIMESTAMP
        if timestamp <= last_timestamp:
            return
        self._timestamps.append(timestamp)
        self._relative_offsets.append(offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """Offset to start searching for `timestamp` from, as Kafka's TimeIndex.lookup.

        That is the offset of the largest entry with a timestamp <= `timestamp` (every batch
        before it has smaller timestamps), or the segment's base offset when there is none.
        """
        slot = bisect_right(self._timestamps, timestamp) - 1
        if slot < 0:
            return self.base_offset
        return self.base_offset + self._relative_offsets[slot]

    def _pack(self, start: int, stop: int) -> bytes:
        # As OffsetIndex._pack, in C; the 12-byte entries mix widths, so each field's
        # big-endian bytes are laid into place with strided slices.
        timestamps = self._timestamps[start:stop]
        relative = self._relative_offsets[start:stop]
        if not _BIG_ENDIAN_HOST:
            timestamps.byteswap()
            relative.byteswap()
        wide, narrow = timestamps.tobytes(), relative.tobytes()
        packed = bytearray(_TIME_ENTRY.size * (stop - start))
        for byte in range(8):
            packed[byte::12] = wide[byte::8]
        for byte in range(4):
            packed[8 + byte :: 12] = narrow[byte::4]
        return bytes(packed)

    def _truncate_entries(self, keep: int) -> None:
        del self._timestamps[keep:]
        del self._relative_offsets[keep:]
