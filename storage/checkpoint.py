"""Kafka's small metadata files: offset checkpoints, the leader epoch cache, partition.metadata.

Formats, as Kafka writes them:

- offset checkpoints (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
  `replication-offset-checkpoint`): line 1 the version `0`, line 2 the number of entries, then
  one `topic partition offset` line per partition (we write them sorted, for stable files);
- `leader-epoch-checkpoint` (one per partition directory): `0`, the count, then
  `epoch startOffset` lines in epoch order;
- `partition.metadata`: `version: 0` and `topic_id: <id>`, the topic id being the 16 bytes of
  the UUID in base64url without padding (22 characters), as Kafka prints Uuid values.

Every file is replaced atomically: written to `<name>.tmp`, fsynced, renamed over the old one,
and the directory fsynced so that the rename itself survives a crash.

None of this imports trio, but the broker calls some of it from worker threads (issue 40: an
fsync on the event loop stalls every client): the leader epoch cache's file may be written by
a thread flushing the log while the loop changes the cache, so its writes are serialized by
a lock and versioned (see LeaderEpochCache).
"""

import base64
import os
import threading
import uuid
from bisect import bisect_left, bisect_right
from pathlib import Path

from minibroker.storage.errors import CorruptCheckpointError

CHECKPOINT_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
PARTITION_METADATA_VERSION = 0

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomically(path: Path, data: bytes, *, sync_directory: bool = True) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file.

    The file's fsync comes before the rename that publishes it, and the directory's fsync
    after it. With ``sync_directory=False`` the caller fsyncs the directory itself (once for
    many files) and must do so before relying on the new file surviving a crash."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk: give back what the partial copy took
        raise
    os.replace(tmp, path)
    if sync_directory:
        fsync_directory(path.parent)


def _read_lines(path: Path) -> list[str] | None:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None


def _entry_lines(path: Path, lines: list[str], fields: int) -> list[list[str]]:
    """Check the version and count lines and return each entry split into its fields."""
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{path}: expected a version and a count line")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CorruptCheckpointError(f"{path}: unrecognized version {lines[0].strip()!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CorruptCheckpointError(f"{path}: malformed entry count {lines[1]!r}") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries but found {len(entries)}")
    for number, entry in enumerate(entries, start=3):
        if len(entry) != fields:
            raise CorruptCheckpointError(f"{path}: malformed line {number}: {' '.join(entry)!r}")
    return entries


def _parse_int(path: Path, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise CorruptCheckpointError(f"{path}: {text!r} is not a number") from None


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """(topic, partition) -> offset; {} if the file does not exist."""
    lines = _read_lines(path)
    if lines is None:
        return {}
    return {
        (topic, _parse_int(path, partition)): _parse_int(path, offset)
        for topic, partition, offset in _entry_lines(path, lines, 3)
    }


def write_offset_checkpoint(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [
        f"{topic} {partition} {offsets[topic, partition]}" for topic, partition in sorted(offsets)
    ]
    write_file_atomically(path, ("\n".join(lines) + "\n").encode())


def read_leader_epoch_checkpoint(path: Path) -> list[tuple[int, int]]:
    """[(epoch, start offset)] in file order; [] if the file does not exist."""
    lines = _read_lines(path)
    if lines is None:
        return []
    return [
        (_parse_int(path, epoch), _parse_int(path, start_offset))
        for epoch, start_offset in _entry_lines(path, lines, 2)
    ]


def write_leader_epoch_checkpoint(path: Path, entries: list[tuple[int, int]]) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{epoch} {start_offset}" for epoch, start_offset in entries]
    write_file_atomically(path, ("\n".join(lines) + "\n").encode())


class LeaderEpochCache:
    """Which leader epoch started at which offset in this partition (Kafka's LeaderEpochFileCache).

    Followers use it to find where their log diverges from the leader's after a leadership
    change (OffsetForLeaderEpoch, or DivergingEpoch in Fetch). Epochs and start offsets both
    increase strictly from entry to entry.

    Every change is written to the checkpoint file (atomically, fsynced) at once, except an
    entry learnt from an appended batch (`assign(..., durable=False)`): that one is written
    with the data it describes, when the log flushes (`flush`), before the recovery point
    passes it. Until then the batch itself carries the entry, and recovery after a crash
    reads the epochs of the batches again. Writing it at once cost a file creation and two fsyncs
    per partition on the append path, at every first append of a new epoch (Kafka fsyncs
    there; a follower of a fresh 64-partition topic spent most of its first second on it).

    The deferred write may happen in a worker thread (the log's flush, issue 40) while the
    event loop goes on changing the entries: `unsaved_snapshot` (on the loop) takes the
    entries with their version, `write_snapshot` (any thread) writes them unless a newer
    version is already in the file. Every write holds one lock, so the file has one writer at
    a time and an older snapshot never replaces a newer one. Kafka's LeaderEpochFileCache
    guards its checkpoint with a read-write lock for the same reason.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._epochs: list[int] = []
        self._start_offsets: list[int] = []
        # Every change bumps the version; the file holds `_saved_version` (a change that
        # was written at once, or the last snapshot a flush wrote).
        self._version = 0
        self._saved_version = 0
        self._file_lock = threading.Lock()
        for epoch, start_offset in read_leader_epoch_checkpoint(path):
            self._epochs.append(epoch)
            self._start_offsets.append(start_offset)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._start_offsets, strict=True))

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    @property
    def _unsaved(self) -> bool:
        return self._saved_version < self._version

    def _changed(self, durable: bool) -> None:
        self._version += 1
        if durable:
            self._save()

    def _save(self) -> None:
        self.write_snapshot(self.entries(), self._version)

    def flush(self) -> None:
        """Write the entries that `assign(..., durable=False)` left unsaved, if any."""
        if self._unsaved:
            self._save()

    def unsaved_snapshot(self) -> tuple[list[tuple[int, int]], int] | None:
        """The entries and their version if the file lacks them, for `write_snapshot` in
        another thread; None when the file is up to date. Call it on the cache's owner."""
        if not self._unsaved:
            return None
        return self.entries(), self._version

    def write_snapshot(self, entries: list[tuple[int, int]], version: int) -> None:
        """Write `entries` (taken at `version`) unless the file already holds that version
        or a newer one; safe from any thread."""
        with self._file_lock:
            if self._saved_version >= version:
                return
            write_leader_epoch_checkpoint(self.path, entries)
            self._saved_version = version

    def assign(self, epoch: int, start_offset: int, *, durable: bool = True) -> None:
        """Record that `epoch` starts at `start_offset` (a no-op for the current epoch).

        A new entry removes every entry that would break monotonicity (an epoch >= it or a
        start offset >= its start offset), as Kafka does when a follower's history is
        rewritten by a new leader. With `durable=False` the file is written at the next
        `flush` (or the next change that writes it) instead of now.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry: epoch {epoch} at {start_offset}")
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._start_offsets[-1]:
            return
        while self._epochs and (
            self._epochs[-1] >= epoch or self._start_offsets[-1] >= start_offset
        ):
            self._epochs.pop()
            self._start_offsets.pop()
        self._epochs.append(epoch)
        self._start_offsets.append(start_offset)
        self._changed(durable)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers for a requested epoch.

        The end offset of an epoch is the start offset of the next larger one; the current
        epoch ends at the log end offset. An epoch older than all known ones answers with
        itself and the first known start offset; an unknown epoch in between answers with
        the largest epoch below it; (-1, -1) when nothing is known.
        """
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self._start_offsets[0]
        return self._epochs[higher - 1], self._start_offsets[higher]

    def truncate_from_end(self, end_offset: int, *, durable: bool = True) -> None:
        """Forget epochs starting at or after `end_offset` (the log was truncated there).
        With `durable=False` the file is written at the next `flush`, as for `assign`."""
        keep = bisect_left(self._start_offsets, end_offset)
        if keep < len(self._epochs):
            del self._epochs[keep:]
            del self._start_offsets[keep:]
            self._changed(durable)

    def truncate_from_start(self, start_offset: int, *, durable: bool = True) -> None:
        """Drop epochs wholly before the new log start; the one containing it now starts there.
        With `durable=False` the file is written at the next `flush` (Kafka's
        truncateFromStartAsyncFlush): until then it names an older start, which loading the
        log cuts again from the log start offset, so the deferred write changes no answer."""
        containing = bisect_right(self._start_offsets, start_offset) - 1
        if containing < 0 or (containing == 0 and self._start_offsets[0] == start_offset):
            return
        del self._epochs[:containing]
        del self._start_offsets[:containing]
        self._start_offsets[0] = start_offset
        self._changed(durable)

    def clear(self) -> None:
        self._epochs.clear()
        self._start_offsets.clear()
        self._changed(durable=True)


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: base64url of its 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def topic_id_from_str(text: str) -> uuid.UUID:
    if len(text) != 22:
        raise ValueError(f"{text!r} is not a 22-character base64url topic id")
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def write_partition_metadata(directory: Path, topic_id: uuid.UUID) -> None:
    text = f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {topic_id_to_str(topic_id)}"
    write_file_atomically(directory / PARTITION_METADATA, text.encode())


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    """The topic id stored with a partition, or None if it has no partition.metadata."""
    path = directory / PARTITION_METADATA
    lines = _read_lines(path)
    if lines is None:
        return None
    fields = dict(line.split(": ", 1) for line in lines if ": " in line)
    if fields.get("version") != str(PARTITION_METADATA_VERSION) or "topic_id" not in fields:
        raise CorruptCheckpointError(f"{path}: expected 'version: 0' and a 'topic_id: ' line")
    try:
        return topic_id_from_str(fields["topic_id"].strip())
    except ValueError as error:
        raise CorruptCheckpointError(f"{path}: {error}") from None
