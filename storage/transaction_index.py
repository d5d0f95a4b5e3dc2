"""A segment's aborted-transaction index (`.txnindex`), in Kafka's format.

Kafka's TransactionIndex and AbortedTxn: one 34-byte entry per transaction aborted by a
marker in the segment, big-endian: version i16 (0), producer id i64, first offset i64 (the
transaction's first batch, possibly in an earlier segment), last offset i64 (the ABORT
marker's offset) and last stable offset i64 (the LSO once the transaction was closed: where
a read_committed reader may stop looking for more aborted transactions). Entries are in
marker order, so last offsets increase.

Kafka's rules kept: the file is created on the first entry (a segment without aborted
transactions has none), entries are written through at once, truncation drops the entries
whose last offset is at or past the new end, recovery of a segment rebuilds its index while
it replays the producer state, and a read_committed fetch collects the entries whose range
overlaps what it read (:meth:`TransactionIndex.collect`). Entries are also held in memory:
a segment has few, and a fetch must not read a file to find none.
"""

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


class TransactionIndex:
    """The `.txnindex` of one segment; ``path`` follows the segment's renames."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] = []

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def load(self) -> None:
        """Read the file if there is one; a torn last entry (a crash mid-write) is cut.
        ValueError for an entry of an unknown version (the segment must be recovered)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._entries = []
            return
        whole = len(data) - len(data) % ENTRY_SIZE
        entries = []
        for position in range(0, whole, ENTRY_SIZE):
            version, *fields = _ENTRY.unpack_from(data, position)
            if version != _VERSION:
                raise ValueError(f"{self.path}: entry version {version} at byte {position}")
            entries.append(AbortedTxn(*fields))
        self._entries = entries
        if whole != len(data):
            os.truncate(self.path, whole)

    def append(self, aborted: AbortedTxn) -> None:
        """Add an entry (written through); last offsets must increase, as Kafka asserts."""
        if self._entries and self._entries[-1].last_offset >= aborted.last_offset:
            raise ValueError(
                f"{self.path}: last offset {aborted.last_offset} does not follow "
                f"{self._entries[-1].last_offset}"
            )
        with open(self.path, "ab") as file:
            file.write(aborted.encode())
        self._entries.append(aborted)

    def append_all(self, entries: Iterable[AbortedTxn]) -> None:
        for entry in entries:
            self.append(entry)

    def reset(self) -> None:
        """Empty the index (recovery rebuilds it); the file goes as Kafka truncates it."""
        self._entries = []
        self.path.unlink(missing_ok=True)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or past ``offset``."""
        keep = sum(1 for entry in self._entries if entry.last_offset < offset)
        if keep == len(self._entries):
            return
        self._entries = self._entries[:keep]
        if keep:
            os.truncate(self.path, keep * ENTRY_SIZE)
        else:
            self.path.unlink(missing_ok=True)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Kafka's collectAbortedTxns: the entries overlapping [fetch_offset,
        upper_bound_offset), and whether the search is complete (an entry's LSO reached the
        upper bound, so no later segment can hold an overlapping one)."""
        found = []
        for entry in self._entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def flush(self) -> None:
        if not self._entries:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self) -> None:
        self._entries = []
        self.path.unlink(missing_ok=True)

    def forget(self) -> None:
        """Drop the entries held in memory, leaving the file (renamed by the caller)."""
        self._entries = []
