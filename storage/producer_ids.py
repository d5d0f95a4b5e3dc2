"""Durable allocation of idempotent producer ids.

A producer id must never be handed out twice, even across restarts: the partition logs keep
each producer's last sequence numbers, and a new producer reusing an old id would be rejected
as out of order. Like Kafka's controller, which hands brokers blocks of ids, this reserves a
block on disk before giving out any id in it, so a crash only wastes the rest of a block.
"""

from pathlib import Path

from minibroker.storage.checkpoint import write_file_atomically

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"


class ProducerIdAllocator:
    """Hands out blocks of increasing producer ids, each reserved on disk before use."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / FILE_NAME
        self._next = self._read_reserved_end()

    def _read_reserved_end(self) -> int:
        try:
            text = self._path.read_text().strip()
        except FileNotFoundError:
            return 0
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{self._path} does not hold a producer id: {text!r}") from None

    def _reserve(self, end: int) -> None:
        write_file_atomically(self._path, f"{end}\n".encode())

    def allocate_block(self) -> tuple[int, int]:
        """Reserve a whole block for a broker (Kafka's AllocateProducerIds): (first id, count)."""
        start, end = self.next_block()
        self.reserve(end)
        return self.take_block(start, end)

    # allocate_block in three steps, for an owner that writes the file in a worker thread:
    # the block (on the owner), its reservation on disk (any thread, one at a time), then
    # the block handed out (on the owner, only once reserved).

    def next_block(self) -> tuple[int, int]:
        """The next block's [start, end), not yet reserved."""
        return self._next, self._next + BLOCK_SIZE

    def reserve(self, end: int) -> None:
        """Make ``end`` the reserved end on disk, durably."""
        self._reserve(end)

    def take_block(self, start: int, end: int) -> tuple[int, int]:
        """Hand out the block [start, end) once ``reserve(end)`` returned: (first id, count)."""
        self._next = end
        return start, end - start
