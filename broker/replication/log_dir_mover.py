"""Moving replicas between this broker's log dirs while they serve: AlterReplicaLogDirs.

Kafka's ReplicaManager.alterReplicaLogDirs and ReplicaAlterLogDirsThread, as a trio shell
around storage/replica_move.py (the move's steps, pure, and its file operations):

- the request (``alter``) is checked per partition as Kafka checks it: a path that is not
  the absolute path of a configured log dir is LOG_DIR_NOT_FOUND, an offline one (or a
  partition whose own dir is offline) KAFKA_STORAGE_ERROR, a partition of a known topic not
  hosted here REPLICA_NOT_AVAILABLE (Kafka keeps that code for this API "for
  compatibility"), an unknown one UNKNOWN_TOPIC_OR_PARTITION; a cordoned dir (KIP-1066,
  cordoned.log.dirs) INVALID_REPLICA_ASSIGNMENT, as Kafka 4.4 refuses it. For a partition
  not hosted yet, the dir is remembered and used when its log is made (preferredLogDirs). A
  move to another dir replaces a move in progress to a third (Kafka's
  futureReplicaDirChanged); a move to the dir the replica is in cancels one.
- each move is a task: the future log is made in a worker thread; then, step by step, up
  to COPY_STEP_BYTES of the current log's batches are read and appended to the future log
  as they are on disk (PartitionLog.append_as_follower: offsets, epochs, producer state and
  transaction indexes from the batch headers; no record is decoded), yielding to the event
  loop between steps; once caught up the future log is fsynced in a worker thread; then,
  with no roll or cleaner swap of the current log in flight, what was appended meanwhile is
  copied and the logs are swapped in one step on the loop (Kafka does it under the
  partition's lock): produce and fetch served the current log until then and serve the new
  one from then on. The old directory's removal and the swap's fsyncs run in a worker
  thread afterwards.
- a move stops, and its future log is removed, when the partition's log goes (StopReplica,
  a log dir failure) or a new request replaces it.

The copy is throttled by replica.alter.log.dirs.io.max.bytes.per.second, as Kafka's
ReplicaAlterLogDirsThread is (replication_quota.py, the replication throttles' own quota):
every copied byte is recorded, and while the measured rate is above the bound no copy step
runs; the mover waits replica.fetch.backoff.ms and looks again (Kafka's fetcher thread backs
off so on a fetch the quota left empty). The last catch-up, inside the swap, is not held
back: it is what was appended during the fsync, and the swap must stay short.

A copy a stop interrupted resumes (``resume_unfinished``, once the partition is hosted
again), as Kafka's does: the future log is reopened and recovered, truncated by leader
epoch against the current log (Kafka's ReplicaAlterLogDirsThread truncates the future
replica to the current one's end offset for its latest epoch), and copied on from its end.

Departures: see storage/replica_move.py (the future directory's name). Kafka pauses the
log cleaner on the partition during a move; here a cleaning in progress finishes first (the
swap waits for it) and a cleaning after the copy began is harmless (the future log holds the
uncleaned batches, which the cleaner cleans again later).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import trio

from minibroker.protocol.errors import Error
from minibroker.replication.log_io import settled
from minibroker.replication.replication_quota import ReplicationQuotaManager
from minibroker.storage.errors import (
    OffsetOutOfRangeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from minibroker.storage.log import PartitionLog
from minibroker.storage.log_manager import LogManager
from minibroker.storage.replica_move import COPY_STEP_BYTES, ReplicaMove, Step

log = logging.getLogger("replication.log_dir_mover")


def _quota_now_ms() -> int:
    """The quota's clock: trio's (monotonic, and a MockClock in tests)."""
    return int(trio.current_time() * 1000)


@dataclass
class _Move:
    key: tuple[str, int]
    target: Path
    state: ReplicaMove
    future: PartitionLog | None = None
    cancelled: bool = False
    # A future replica a stop left behind, to reopen instead of making a new one.
    resume_from: Path | None = None
    done: trio.Event = field(default_factory=trio.Event)


class _Replicas(Protocol):
    """What the mover uses of the replica manager (which owns it)."""

    log_manager: LogManager
    run_blocking: Any

    def clock_ms(self) -> int: ...
    def local_partition(self, key: tuple[str, int]) -> Any: ...
    def hosted_partition(self, topic: str | None, index: int) -> tuple[Any, Error]: ...
    def notify(self, partition: Any) -> None: ...


class LogDirMover:
    """The replica moves between this broker's log dirs (one task each)."""

    def __init__(
        self,
        replica_manager: _Replicas,
        quota: ReplicationQuotaManager | None = None,
        backoff_s: float = 1.0,
    ) -> None:
        """``quota`` bounds the copies' rate (none: unbounded); ``backoff_s`` is how long a
        move waits while it is exceeded (replica.fetch.backoff.ms)."""
        self._replicas = replica_manager
        self.quota = quota
        self._backoff_s = backoff_s
        self._moves: dict[tuple[str, int], _Move] = {}
        # Every move whose task has not ended, replaced ones included.
        self._running: list[_Move] = []
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    # -- the request ---------------------------------------------------------------------

    def alter(self, moves: dict[tuple[str, int], str]) -> dict[tuple[str, int], Error]:
        """Kafka's ReplicaManager.alterReplicaLogDirs: an error per partition."""
        return {key: self._alter_one(key, path) for key, path in moves.items()}

    def _alter_one(self, key: tuple[str, int], path: str) -> Error:
        log_manager = self._replicas.log_manager
        target = log_manager.log_dir_named(path)
        if target is None:
            return Error.LOG_DIR_NOT_FOUND
        if log_manager.failures.is_offline(target):
            return Error.KAFKA_STORAGE_ERROR
        if target in log_manager.cordoned_log_dirs:
            return Error.INVALID_REPLICA_ASSIGNMENT  # Kafka 4.4: "Log dir ... is cordoned"
        partition, error = self._replicas.hosted_partition(*key)
        if partition is None:
            if error is Error.UNKNOWN_TOPIC_OR_PARTITION:
                return error
            log_manager.preferred_log_dirs[key] = target
            return Error.REPLICA_NOT_AVAILABLE
        current = partition.log
        if log_manager.failures.is_offline(current.directory.parent):
            return Error.KAFKA_STORAGE_ERROR
        running = self._moves.get(key)
        if running is not None:
            if running.target == target:
                return Error.NONE
            self._cancel(running)
        if current.directory.parent == target:
            return Error.NONE
        if self._nursery is None:
            return Error.KAFKA_STORAGE_ERROR
        move = _Move(key, target, ReplicaMove(target))
        self._moves[key] = move
        self._running.append(move)
        self._nursery.start_soon(self._run, move)
        return Error.NONE

    def resume_unfinished(self) -> list[tuple[str, int]]:
        """Resume the moves a stop interrupted whose partitions are hosted now (Kafka's
        ReplicaManager restarts a future replica's copy when its partition comes online);
        a move to a dir that failed since is dropped with its future replica. Returns the
        partitions resumed."""
        log_manager = self._replicas.log_manager
        resumed = []
        for key, directory in list(log_manager.unfinished_moves.items()):
            partition = self._replicas.local_partition(key)
            if partition is None or self._nursery is None or key in self._moves:
                continue
            del log_manager.unfinished_moves[key]
            target = directory.parent
            if log_manager.failures.is_offline(target) or partition.log.directory == directory:
                continue
            move = _Move(key, target, ReplicaMove(target), resume_from=directory)
            self._moves[key] = move
            self._running.append(move)
            self._nursery.start_soon(self._run, move)
            log.info("resuming the move of %s-%d to %s", *key, target)
            resumed.append(key)
        return resumed

    def _cancel(self, move: _Move) -> None:
        move.cancelled = True
        if self._moves.get(move.key) is move:
            del self._moves[move.key]

    # -- what DescribeLogDirs reports ------------------------------------------------------

    def futures(self) -> list[tuple[PartitionLog, int]]:
        """Each future log being filled, with its lag behind the current log (Kafka's
        offset lag of a future replica: the current log end minus the future's)."""
        found = []
        for move in self._moves.values():
            future = move.future
            partition = self._replicas.local_partition(move.key)
            if future is None or future.closed or partition is None:
                continue
            found.append((future, max(partition.log.log_end_offset - future.log_end_offset, 0)))
        return found

    async def wait_idle(self, key: tuple[str, int]) -> None:
        """Return once no move of the partition runs, replaced ones included (for tests)."""
        for move in [move for move in self._running if move.key == key]:
            await move.done.wait()

    # -- a move ----------------------------------------------------------------------------

    async def _run(self, move: _Move) -> None:
        replicas = self._replicas
        log_manager = replicas.log_manager
        try:
            partition = replicas.local_partition(move.key)
            if partition is None:
                return
            current = partition.log
            if move.resume_from is not None:
                move.future = await replicas.run_blocking(
                    log_manager.reopen_future_log, current, move.resume_from, replicas.clock_ms()
                )
                self._truncate_resumed(move, current, move.future)
            else:
                move.future = await replicas.run_blocking(
                    log_manager.open_future_log, current, move.target, replicas.clock_ms()
                )
            while True:
                if move.cancelled or partition.log is not current or current.closed:
                    return
                if log_manager.failures.is_offline(move.target):
                    return
                future = move.future
                action = move.state.next_action(
                    current_start=current.log_start_offset,
                    current_end=current.log_end_offset,
                    current_structure_version=current.structure_version,
                    future_end=future.log_end_offset,
                    behind_bytes=current.size_bytes - future.size_bytes,
                )
                if action.step is Step.RESTART:
                    future.truncate_fully_and_start_at(action.offset)
                elif action.step is Step.COPY:
                    if self._quota_exceeded():
                        await trio.sleep(self._backoff_s)
                        continue
                    self._copy(move, current, future, action.offset, until=None)
                elif action.step is Step.FLUSH:
                    await replicas.run_blocking(future.flush)
                else:
                    await settled(current)
                    if move.cancelled or partition.log is not current or current.closed:
                        return
                    if current.structure_version != move.state.structure_version:
                        continue  # truncated meanwhile: the state machine restarts
                    if not self._copy(move, current, future, future.log_end_offset, until=current):
                        continue
                    self._align(current, future)
                    deleted = log_manager.swap_in_future(future)
                    partition.log = future
                    move.future = None
                    replicas.notify(partition)
                    log.info(
                        "moved %s-%d from %s to %s at offset %d",
                        *move.key,
                        current.directory.parent,
                        move.target,
                        future.log_end_offset,
                    )
                    await replicas.run_blocking(
                        log_manager.finish_future_swap, deleted, future.directory
                    )
                    return
                await trio.lowlevel.checkpoint()
        except StorageError as error:
            log.error("moving %s-%d to %s failed: %s", *move.key, move.target, error)
        except OSError as error:
            log_manager.failures.maybe_add_offline_log_dir(
                move.target, f"Error while moving {move.key[0]}-{move.key[1]} into it", error
            )
        finally:
            if self._moves.get(move.key) is move:
                del self._moves[move.key]
            if move.future is not None:
                directory = log_manager.discard_future_log(move.future)
                move.future = None
                with trio.CancelScope(shield=True):
                    try:
                        await replicas.run_blocking(log_manager.remove_future_dir, directory)
                    except OSError as error:
                        log.warning("cannot remove %s: %s", directory, error)
            self._running.remove(move)
            move.done.set()

    def _copy(
        self,
        move: _Move,
        current: PartitionLog,
        future: PartitionLog,
        offset: int,
        *,
        until: PartitionLog | None,
    ) -> bool:
        """Append the current log's batches from `offset` to the future log, as bytes: one
        step of COPY_STEP_BYTES, or (`until`) every step up to the current log end. False
        when the copy must start again (retention moved the current log's start past it,
        or the log cleaner rewrote what it reads)."""
        now_ms = self._replicas.clock_ms()
        while True:
            try:
                data = current.read(offset, max_bytes=COPY_STEP_BYTES)
                if not data:
                    return True
                result = future.append_as_follower(data, now_ms=now_ms)
            except (OffsetOutOfRangeError, UnexpectedAppendOffsetError):
                move.state.started = False
                return False
            if self.quota is not None:
                self.quota.record(len(data), _quota_now_ms())
            offset = result.last_offset + 1
            if until is None or offset >= until.log_end_offset:
                return True

    @staticmethod
    def _truncate_resumed(move: _Move, current: PartitionLog, future: PartitionLog) -> None:
        """A resumed future replica keeps what agrees with the current log: it is cut to the
        current log's end offset for the future's latest leader epoch (Kafka's truncation
        of a future replica by OffsetsForLeaderEpoch against the current one), and the copy
        goes on from its end; one the current log no longer covers starts over."""
        latest = future.leader_epoch_cache.latest_epoch
        if latest is not None:
            _, end = current.end_offset_for_epoch(latest)
            if 0 <= end < future.log_end_offset:
                future.truncate_to(end)
        move.state.started = True
        move.state.structure_version = current.structure_version

    def _quota_exceeded(self) -> bool:
        """Kafka's ReplicaAlterLogDirsThread: a future replica is never in sync, so it is
        held back whenever the quota is exceeded."""
        quota = self.quota
        return quota is not None and quota.is_quota_exceeded(_quota_now_ms())

    @staticmethod
    def _align(current: PartitionLog, future: PartitionLog) -> None:
        """What the copy does not carry: the log start offset, and the leader epochs that
        begin at the log end (a new leader's epoch before its first batch)."""
        if current.log_start_offset > future.log_start_offset:
            future.maybe_increment_log_start_offset(current.log_start_offset)
        cache = future.leader_epoch_cache
        for epoch, start_offset in current.leader_epoch_cache.entries():
            latest = cache.latest_epoch
            if latest is None or epoch > latest:
                cache.assign(epoch, start_offset, durable=False)
