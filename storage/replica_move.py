"""Moving a replica between the log directories of one broker (AlterReplicaLogDirs, KIP-113).

Kafka's rule (ReplicaManager.alterReplicaLogDirs, Partition.maybeCreateFutureReplica,
ReplicaAlterLogDirsThread, Partition.maybeReplaceCurrentWithFutureReplica): a "future"
log is made in the target directory; a fetcher copies the current log's batches into it,
as they are on disk (no record is decoded), while the partition keeps serving produce and
fetch from the current log; once the future log has caught up, under the partition's lock
(no append can come between the last copy and the swap) the current log is renamed for
deletion and the future one takes its place; the old files are deleted afterwards.

This module is the part without I/O scheduling: the move's steps as a pure state machine
(:class:`ReplicaMove`, time- and thread-free, tested with plain numbers), and the file
operations of the swap and of a restart, each safe in a worker thread. The broker's shell
(broker/replication/log_dir_mover.py) runs them.

Where this departs from Kafka, and why:

- The future log's directory has the partition's own name, ``<target>/<topic>-<partition>``,
  marked as a future replica by a file in it (:data:`FUTURE_MARKER`) instead of Kafka's
  ``<topic>-<partition>.<id>-future`` name: a PartitionLog knows its topic and partition
  from its directory's name, and unmarking a directory needs no rename of files that are
  open and being appended to. DescribeLogDirs reports it as Kafka does (IsFutureKey).
- A restart in the middle of a copy keeps the future log, and the move resumes once the
  partition is hosted again (its first LeaderAndIsr), as Kafka's LogManager loads future
  logs and its ReplicaManager restarts their ReplicaAlterLogDirsThread: the future log is
  recovered from its files, truncated by leader epoch against the current log (Kafka's
  future-replica truncation), and the copy goes on from its end. A restart in the middle
  of a swap completes the swap (see :func:`settle_moves`), so nothing appended to the
  future log after it became the partition's log is lost.
"""

from __future__ import annotations

import enum
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from minibroker.storage.checkpoint import fsync_directory
from minibroker.storage.log import parse_partition_dir_name

log = logging.getLogger("storage.replica_move")

# The file that marks a partition directory as a future replica (see the module's notes).
FUTURE_MARKER = ".future-replica"
# A current replica swapped out is renamed `<topic>-<partition>.<id>-delete`, as Kafka's
# LocalLog.logDeleteDirName names it, then deleted.
DELETE_SUFFIX = "-delete"
# At most this many bytes are copied per step: one step runs on the event loop between
# two checkpoints (Kafka's replica.fetch.max.bytes, 1 MiB, bounds each of its fetches).
COPY_STEP_BYTES = 1024 * 1024
# A move whose partition takes more than a step's worth of appends during each of this many
# fsyncs of the future log copies the rest in its swap step (see ReplicaMove).
MAX_FLUSHES = 3


def delete_dir_name(partition_dir: Path) -> str:
    """Kafka's LocalLog.logDeleteDirName: `<topic>-<partition>.<uuid without dashes>-delete`."""
    return f"{partition_dir.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}"


class Step(enum.Enum):
    COPY = "copy"  # copy the current log's batches from `offset` into the future log
    RESTART = "restart"  # empty the future log and start it at `offset`
    FLUSH = "flush"  # fsync the future log before the swap (off the event loop)
    SWAP = "swap"  # copy what is left, then swap (on the event loop, with no pause between)


@dataclass(frozen=True)
class Action:
    step: Step
    offset: int = 0


@dataclass
class ReplicaMove:
    """The steps of one move, decided from the offsets of the two logs.

    Kafka's ReplicaAlterLogDirsThread fetches from the current log at the future log's end
    and truncates the future log when the current one was truncated (by leader epoch);
    here a truncation of the current log (seen as a change of its `structure_version`, or a
    log end below the future's) restarts the copy at the log start offset, which is always
    right and rare (a follower truncating while a move runs), as does retention moving the
    current log's start past the future log's end. Once the future log has caught up it is
    fsynced (off the event loop); then what was appended meanwhile is copied and the logs
    swapped in one step on the event loop, so nothing can be appended between them.
    """

    target: Path
    structure_version: int = -1
    started: bool = False
    flushed: bool = False
    # Fsyncs so far: after MAX_FLUSHES the swap copies whatever is left, however much.
    flushes: int = 0

    def next_action(
        self,
        *,
        current_start: int,
        current_end: int,
        current_structure_version: int,
        future_end: int,
        behind_bytes: int = 0,
    ) -> Action:
        """`behind_bytes`: about how many bytes of the current log the future one lacks
        (the difference of their sizes): more than a step's worth appended during the fsync
        means copying on (and fsyncing again) rather than copying it all in the swap."""
        if (
            not self.started
            or current_structure_version != self.structure_version
            or current_end < future_end
            or future_end < current_start
        ):
            self.started = True
            self.structure_version = current_structure_version
            self.flushed = False
            return Action(Step.RESTART, current_start)
        if self.flushed:
            if behind_bytes <= COPY_STEP_BYTES or self.flushes >= MAX_FLUSHES:
                return Action(Step.SWAP, future_end)
            self.flushed = False
        if future_end < current_end:
            return Action(Step.COPY, future_end)
        self.flushed = True
        self.flushes += 1
        return Action(Step.FLUSH)


def mark_future(partition_dir: Path) -> None:
    """Mark a new partition directory as a future replica, durably (any thread)."""
    partition_dir.mkdir(parents=True)
    marker = partition_dir / FUTURE_MARKER
    with open(marker, "wb") as file:
        os.fsync(file.fileno())
    fsync_directory(partition_dir)
    fsync_directory(partition_dir.parent)


def is_future(partition_dir: Path) -> bool:
    return (partition_dir / FUTURE_MARKER).exists()


def finish_swap(deleted: Path, future_dir: Path) -> None:
    """The swap's file steps after the current replica's directory was renamed `deleted`
    (any thread): that rename made durable, then the future replica unmarked (durably),
    then the old files removed. A crash between any two of these is settled at the next
    start (:func:`settle_moves`)."""
    fsync_directory(deleted.parent)
    (future_dir / FUTURE_MARKER).unlink(missing_ok=True)
    fsync_directory(future_dir)
    shutil.rmtree(deleted, ignore_errors=True)
    fsync_directory(deleted.parent)


def discard_future(future_dir: Path) -> None:
    """Remove an abandoned future replica (any thread)."""
    shutil.rmtree(future_dir, ignore_errors=True)
    fsync_directory(future_dir.parent)


def settle_moves(log_dirs: list[Path]) -> dict[tuple[str, int], Path]:
    """At start, before the partition directories are read: finish the moves a stop
    interrupted. A future replica whose current replica still exists (in another log dir)
    is kept, and returned by partition: its copy had not finished, and resumes
    (broker/replication/log_dir_mover.py). One without (the current one was renamed for
    deletion: the swap had begun) becomes the partition's replica. Every directory renamed
    for deletion is then removed."""
    current: dict[tuple[str, int], Path] = {}
    futures: list[tuple[tuple[str, int], Path]] = []
    deleted: list[Path] = []
    for directory in log_dirs:
        for path in directory.iterdir():
            if not path.is_dir():
                continue
            if path.name.endswith(DELETE_SUFFIX):
                deleted.append(path)
                continue
            try:
                key = parse_partition_dir_name(path.name)
            except ValueError:
                continue
            if is_future(path):
                futures.append((key, path))
            else:
                current[key] = path
    touched: set[Path] = set()
    unfinished: dict[tuple[str, int], Path] = {}
    for key, path in futures:
        if key in current:
            log.info("keeping the future replica %s: its move resumes", path)
            unfinished[key] = path
            continue
        else:
            log.info("completing the interrupted swap of the future replica %s", path)
            (path / FUTURE_MARKER).unlink()
            fsync_directory(path)
        touched.add(path.parent)
    for path in deleted:
        log.info("removing %s: a replica moved away from it", path)
        shutil.rmtree(path)
        touched.add(path.parent)
    for directory in touched:
        fsync_directory(directory)
    return unfinished
