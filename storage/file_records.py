"""A slice of segment files, sent to a socket without passing through Python (Kafka's
FileRecords.slice and its writeTo, which is FileChannel.transferTo: sendfile).

A read for a plaintext Fetch returns one of these instead of bytes when it is large
(PartitionLog.read with ``zero_copy``): the segment's batches are found by their headers as
before, but the records themselves stay in the page cache until the connection's writer hands
them to ``os.sendfile``. Each part holds its own duplicate of the segment's descriptor, so a
segment deleted by retention, replaced by the cleaner or closed before the response leaves
keeps its inode, and the bytes sent are the bytes read. Kafka keeps the FileChannel open the
same way and defers the deletion itself (``file.delete.delay.ms``); a descriptor is enough
here.

A segment truncated in place (a leader that becomes a follower cuts its log back) can lose
bytes a slice announced. Kafka's FileRecords.writeTo then throws ("Size of FileRecords has been
truncated during write") and the connection is closed; the writer here does the same
(``TruncatedRecordsError``): a response never goes out shorter than its length prefix said.
"""

import os

from minibroker.protocol.buffers import Buffer


class TruncatedRecordsError(OSError):
    """A slice's file was cut back below the slice's end before it was sent."""


class FileRecords:
    """``parts``: (descriptor, position, length) in order, each descriptor owned here."""

    __slots__ = ("parts", "length")

    def __init__(self) -> None:
        self.parts: list[tuple[int, int, int]] = []
        self.length = 0

    def add(self, fd: int, position: int, length: int) -> None:
        """Take a slice of the file open as ``fd`` (duplicated: the caller keeps its own)."""
        self.parts.append((os.dup(fd), position, length))
        self.length += length

    def __len__(self) -> int:
        return self.length

    def __bool__(self) -> bool:
        return self.length > 0

    def read(self) -> bytes:
        """The slice's bytes (for a path that needs them: TLS, kio, read_committed)."""
        chunks = []
        for fd, position, length in self.parts:
            data = os.pread(fd, length, position)
            if len(data) < length:
                raise TruncatedRecordsError(
                    f"segment file cut to {position + len(data)} bytes below a read's end"
                    f" ({position + length})"
                )
            chunks.append(data)
        return b"".join(chunks)

    def take(self) -> bytes:
        """``read``, then ``close``: the slices become bytes."""
        try:
            return self.read()
        finally:
            self.close()

    def close(self) -> None:
        parts, self.parts = self.parts, []
        for fd, _position, _length in parts:
            os.close(fd)

    def __del__(self) -> None:
        # A response dropped unsent (a parked fetch that reads again, an error answered
        # instead) releases its descriptors when it is collected.
        self.close()

    def __repr__(self) -> str:
        return f"FileRecords({self.length} bytes in {len(self.parts)} parts)"


def materialize(records: Buffer | FileRecords | None) -> Buffer | None:
    """``records`` as a bytes-like object: a FileRecords is read (and closed)."""
    return records.take() if isinstance(records, FileRecords) else records
