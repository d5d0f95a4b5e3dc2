"""The log manager's blocking file-system work, in worker threads (issue 40).

One event loop serves every client, so an fsync, a directory fsync, a file's creation or a
tree's removal on it stalls them all for as long as the disk takes (117 ms seen for the
directory fsync of one partition made by LeaderAndIsr). Kafka never does such work on a
network thread: LogManager.getOrCreateLog runs on a request handler thread, UnifiedLog's
flush and its checkpoint files' writes on scheduler threads, retention's unlinking after
file.delete.delay.ms on the scheduler, a deleted log's removal on the scheduler too.

Here storage/ knows nothing of trio: each operation comes in steps (a first one on the
loop that decides and takes what the blocking one needs, the blocking one that is safe in
any thread, a last one on the loop that publishes the result) and this module runs the
middle one with ``trio.to_thread.run_sync``. The orderings durability depends on live in
the steps themselves (storage/log_manager.py, storage/log.py, storage/checkpoint.py):

- a new partition's files and directory are fsynced, and its log dir once for the whole
  LeaderAndIsr, before its log is handed out and the controller answered;
- a flush moves the recovery point only after its fsyncs (files, directory, leader epoch
  checkpoint) finished, and only past what they covered;
- a checkpoint file is fsynced before the rename that publishes it, the directory after;
  the values written are taken on the loop after the flushes they report finished;
- a deleted partition's tree and its log dir's fsync finish before StopReplica is answered
  and before the topic leaves the topic table.

- a follower's truncation writes its leader epoch checkpoint (and unlinks the segments it
  removed) in a worker thread before the fetcher fetches again (``finish_truncation``);
- the log cleaner's swap commits (the cleaned files renamed `.swap`, the directory
  fsynced) in a worker thread before the loop deletes the old segments and drops the
  suffixes in one step, and the directory is fsynced again before the cleaner goes on
  (``replace_segments``);
- with ROLLS_IN_THREAD (off: see its note), a segment roll's new files (and its producer
  snapshot) are made in a worker thread before the new segment takes any append: every
  append path waits here (``ready_to_append``) while a roll of its log is in flight, and a
  log truncated, closed or appended to meanwhile drops the new segment
  (PartitionLog.finish_roll); a partition's deletion waits for its roll first.

Writers stay one per file: a log's appends and truncations stay on the loop; a thread
only fsyncs descriptors of its own, writes files no loop code writes at the same time (the
checkpoint files under the log manager's lock, the leader epoch file under the cache's, a
new segment's files before the log has it), or removes what no log uses any more.
Creation and deletion hold the replica manager's state-change lock across the thread, and
are shielded from cancellation (as rolls and truncations' last steps are) so that a
thread's work is always followed by its last step.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from minibroker.storage.checkpoint import write_offset_checkpoint
from minibroker.storage.errors import StorageError
from minibroker.storage.log import PartitionLog
from minibroker.storage.log_manager import (
    LogManager,
    LogRequest,
    delete_directories,
    run_flush_jobs,
    unlink_files,
)
from minibroker.storage.segment import LogSegment

log = logging.getLogger("storage.io")

# How the blocking steps run: ``trio.to_thread.run_sync``; the in-process tests under trio's
# MockClock pass one that runs them inline instead (a worker thread's real time lets an
# autojumping clock fire every timer meanwhile).
RunSync = Callable[..., Awaitable[Any]]
IN_THREAD: RunSync = trio.to_thread.run_sync


async def inline(function: Callable[..., Any], *args: Any) -> Any:
    """A RunSync that runs the function on the loop (for MockClock tests)."""
    await trio.lowlevel.checkpoint()
    return function(*args)


# The rolls in flight, by log: what an append to that log (or its deletion) waits for.
_rolls: weakref.WeakKeyDictionary[PartitionLog, trio.Event] = weakref.WeakKeyDictionary()
# The log cleaner's swaps in flight, by log: what a truncation or deletion waits for.
_swaps: weakref.WeakKeyDictionary[PartitionLog, trio.Event] = weakref.WeakKeyDictionary()


# Whether the append paths roll a due segment in a worker thread (True) or leave the roll
# to the append itself, on the loop (False). Measured with python -m bench.io_stalls (the
# benchmarks page): the appends of the rolling partition wait for the thread either way,
# and the thread's Python needs the GIL back after each of its system calls, up to the
# 5 ms switch interval each while the loop is busy, so the partition's end-to-end latency
# rose; the roll's file creations cost the loop less than that.
ROLLS_IN_THREAD = False


def must_wait(partition_log: PartitionLog, size: int, now_ms: int) -> bool:
    """Whether an append of `size` bytes to the log must go through ``ready_to_append``
    first: a roll of it is in flight, or (with ROLLS_IN_THREAD) the append would roll
    it. Cheap: the append paths ask it for every partition before they append."""
    return partition_log.roll_in_flight is not None or (
        ROLLS_IN_THREAD and partition_log.roll_due(size, now_ms)
    )


async def settled(partition_log: PartitionLog) -> bool:
    """Return once no roll or cleaner's swap of the log is in flight (before truncating
    or deleting it): True if it waited for one (without yielding otherwise)."""
    waited = False
    while True:
        done = _rolls.get(partition_log)
        if done is None:
            done = _swaps.get(partition_log)
        if done is None:
            return waited
        await done.wait()
        waited = True


async def ready_to_append(
    partition_log: PartitionLog, size: int, now_ms: int, run_sync: RunSync = IN_THREAD
) -> None:
    """Make the log ready for an append of `size` bytes: wait for a roll in flight, and
    roll it first, its files made in a worker thread, if the append would roll it (Kafka
    makes them on the request thread, under the log's lock, which parks every other
    append to the log as ``must_wait`` does here). The caller then appends without
    yielding. A failed roll takes the log dir offline and raises StorageError."""
    while True:
        await settled(partition_log)
        if partition_log.closed or not partition_log.roll_due(size, now_ms):
            return
        job = partition_log.begin_roll()
        if job is None:
            return
        done = _rolls[partition_log] = trio.Event()
        try:
            with trio.CancelScope(shield=True):
                await run_sync(job.run)
        finally:
            del _rolls[partition_log]
            done.set()
            if not job.done:  # never started (a failed thread start): give the log back
                partition_log.roll_in_flight = None
        try:
            partition_log.finish_roll(job)
        finally:
            if partition_log.roll_in_flight is job:  # refused: its log dir is offline
                partition_log.roll_in_flight = None


async def replace_segments(
    partition_log: PartitionLog,
    cleaned: LogSegment,
    old: list[LogSegment],
    run_sync: RunSync = IN_THREAD,
) -> bool:
    """PartitionLog.replace_segments (the log cleaner's swap) with its two directory
    fsyncs, the `.swap` renames of the cleaned files and the old segments' unlinks in
    worker threads; the renames that change what the log holds, and the list splice, stay
    on the loop in one step (``finish_swap``), so a reader sees the old segments or the
    new one. Truncations and deletions of the log wait for it (``settled``). Kafka's
    cleaner thread does all of it off the request threads, under the log's lock."""
    job = partition_log.begin_swap(cleaned, old)
    if job is None:
        return False
    done = _swaps[partition_log] = trio.Event()
    try:
        with trio.CancelScope(shield=True):
            await run_sync(job.run)
            swapped = partition_log.finish_swap(job)
            files = partition_log.take_deleted_files()

            def last() -> OSError | None:
                try:
                    job.run_last()
                except OSError as error:
                    return error
                finally:
                    unlink_files(files)
                return None

            failed = await run_sync(last)
    finally:
        del _swaps[partition_log]
        done.set()
    if failed is not None:
        partition_log.io_failed("replacing cleaned segments of", failed)
    return swapped


async def finish_truncation(partition_log: PartitionLog, run_sync: RunSync = IN_THREAD) -> None:
    """What a follower's truncation (PartitionLog.truncate_to, on the loop) leaves to do,
    in a worker thread, before the caller fetches again: the leader epoch checkpoint
    written (it was durable before the truncation returned when that wrote it on the loop;
    it is durable before the next fetch now) and the removed segments' `.deleted` files
    unlinked. A failed write takes the log dir offline and raises StorageError."""
    snapshot = partition_log.leader_epoch_cache.unsaved_snapshot()
    files = partition_log.take_deleted_files()
    if snapshot is None and not files:
        return

    def run() -> OSError | None:
        unlink_files(files)
        if snapshot is not None:
            try:
                partition_log.leader_epoch_cache.write_snapshot(*snapshot)
            except OSError as error:
                return error
        return None

    with trio.CancelScope(shield=True):
        failed = await run_sync(run)
    if failed is not None and not partition_log.closed:
        # (A log closed meanwhile, moved to another log dir or deleted, has no files here
        # to keep consistent: its failure takes nothing offline.)
        partition_log.io_failed("writing the leader epoch checkpoint of", failed)


async def create_logs(
    log_manager: LogManager,
    requests: list[LogRequest],
    now_ms: int,
    run_sync: RunSync = IN_THREAD,
) -> tuple[list[PartitionLog], Exception | None]:
    """LogManager.ensure_log for many partitions, their files made in a worker thread with
    one fsync per log dir for all of them (see LogManager.begin_logs). The caller holds the
    state-change lock. Returns the logs in the requests' order up to the first failure, and
    that failure (what a loop of ensure_log would have raised there), or None."""
    creation = log_manager.begin_logs(requests, now_ms)
    failure: Exception | None = None
    with trio.CancelScope(shield=True):
        await run_sync(creation.run)
        try:
            creation.finish()
        except Exception as error:
            failure = error
    return creation.logs, failure


async def delete_logs(
    log_manager: LogManager, keys: list[tuple[str, int]], run_sync: RunSync = IN_THREAD
) -> None:
    """Delete partitions hosted here (StopReplica with delete_partition): closed on the
    loop, their directories removed durably in a worker thread, then the topics left
    without a partition dropped from the topic table. The caller holds the state-change
    lock, so no LeaderAndIsr makes one of those directories again meanwhile. An OSError
    takes the log dir offline and is raised as StorageError."""
    # No new segment's files are being made in a tree about to be removed (checked again
    # after each wait, as an append may begin another roll meanwhile).
    while rolling := [
        partition_log
        for key in keys
        if (partition_log := log_manager.get_log(*key)) is not None
        and (partition_log in _rolls or partition_log in _swaps)
    ]:
        await settled(rolling[0])
    directories = log_manager.detach_logs(keys)
    gone = log_manager.topics_without_logs(sorted({topic for topic, _ in keys}))

    def delete() -> tuple[Path, str, OSError] | None:
        try:
            delete_directories(directories)
        except OSError as error:
            return directories[0].parent, f"deleting {len(directories)} partition(s)", error
        try:
            log_manager.forget_topics(gone)  # only once their directories are gone for good
        except OSError as error:
            return log_manager.log_dirs[0], "writing the topic table", error
        return None

    if not directories and not gone:
        return
    with trio.CancelScope(shield=True):
        failed = await run_sync(delete)
    if failed is not None:
        directory, what, error = failed
        log_manager.failures.maybe_add_offline_log_dir(directory, f"Error while {what}", error)
        raise StorageError(f"{what} failed ({error}); log dir {directory} is offline") from error


async def flush_due(log_manager: LogManager, now_ms: int, run_sync: RunSync = IN_THREAD) -> None:
    """LogManager.flush_due with its fsyncs in a worker thread."""
    jobs = log_manager.begin_flushes(now_ms)
    if jobs:
        log_manager.finish_flushes(await run_sync(run_flush_jobs, jobs))


async def write_checkpoints(log_manager: LogManager, run_sync: RunSync = IN_THREAD) -> None:
    """The recovery-point, log-start-offset and cleaner-offset checkpoints, written in a
    worker thread from values taken now on the loop."""
    positions = log_manager.checkpoint_positions()
    failed = await run_sync(log_manager.write_checkpoint_files, positions)
    log_manager.finish_checkpoints(failed)


async def checkpoint(log_manager: LogManager, now_ms: int, run_sync: RunSync = IN_THREAD) -> None:
    """LogManager.checkpoint off the loop: due flushes first (their recovery points are
    then the ones written), then the checkpoint files."""
    await flush_due(log_manager, now_ms, run_sync)
    await write_checkpoints(log_manager, run_sync)


async def unlink_deleted_files(log_manager: LogManager, run_sync: RunSync = IN_THREAD) -> None:
    """Unlink the `.deleted` files retention left, in a worker thread."""
    files = log_manager.take_deleted_files()
    if files:
        await run_sync(unlink_files, files)


async def write_offset_checkpoints(
    log_manager: LogManager,
    name: str,
    per_dir: dict[Path, dict[tuple[str, int], int]],
    run_sync: RunSync = IN_THREAD,
) -> None:
    """Write the offset checkpoint ``name`` in each online log dir (the high watermarks'
    replication-offset-checkpoint) in a worker thread; a failed write takes its dir
    offline and raises StorageError, after the other dirs were written."""
    per_dir = {
        d: offsets for d, offsets in per_dir.items() if not log_manager.failures.is_offline(d)
    }

    def write_all() -> dict[Path, OSError]:
        failed: dict[Path, OSError] = {}
        for directory, offsets in per_dir.items():
            try:
                write_offset_checkpoint(directory / name, offsets)
            except OSError as error:
                failed[directory] = error
        return failed

    failed = await run_sync(write_all)
    first: StorageError | None = None
    for directory, error in failed.items():
        log_manager.failures.maybe_add_offline_log_dir(
            directory, f"Error while writing {name}", error
        )
        first = first or StorageError(
            f"writing {name} failed ({error}); log dir {directory} is offline"
        )
    if first is not None:
        raise first
