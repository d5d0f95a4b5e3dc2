"""The mover of replicas between log dirs (replication/log_dir_mover.py) in-process: its
worker-thread steps are gated so that a test holds a move at its fsync, appends to the
partition meanwhile, sees the future replica DescribeLogDirs reports, then lets it swap."""

from __future__ import annotations

import uuid
from pathlib import Path

import trio

from minibroker.protocol.errors import Error
from minibroker.replication.log_dir_mover import LogDirMover
from minibroker.replication.replication_quota import ReplicationQuotaManager
from minibroker.storage.log import LogConfig
from minibroker.storage.log_manager import LogManager
from tests.unit.batch_factory import make_batch

CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"


class _Partition:
    def __init__(self, partition_log) -> None:
        self.log = partition_log


class _Replicas:
    """The replica manager as the mover sees it; blocking steps wait at `gate` when set."""

    def __init__(self, log_manager: LogManager, partition: _Partition) -> None:
        self.log_manager = log_manager
        self.partition = partition
        self.gate: trio.Event | None = None
        self.waiting = trio.Event()
        self.notified = 0

    async def run_blocking(self, function, *args):
        if self.gate is not None and getattr(function, "__name__", "") == "flush":
            self.waiting.set()
            await self.gate.wait()
        return function(*args)

    def clock_ms(self) -> int:
        return 0

    def local_partition(self, key):
        return self.partition if key == ("moving", 0) else None

    def hosted_partition(self, topic, index):
        if (topic, index) == ("moving", 0):
            return self.partition, Error.NONE
        return None, Error.UNKNOWN_TOPIC_OR_PARTITION

    def notify(self, partition) -> None:
        self.notified += 1


def append(partition_log, count: int, first: int) -> None:
    for number in range(first, first + count):
        partition_log.append_as_leader(
            make_batch([(None, b"%d" % number)]), leader_epoch=1, now_ms=0
        )


async def test_a_move_held_at_its_fsync_reports_the_future_replica_then_swaps(tmp_path: Path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    logs = LogManager(dirs, LogConfig(segment_bytes=4096), node_id=1, cluster_id=CLUSTER)
    logs.open(now_ms=0)
    current = logs.ensure_log("moving", uuid.uuid4(), 0, {}, now_ms=0)
    append(current, 200, 0)
    partition = _Partition(current)
    replicas = _Replicas(logs, partition)
    replicas.gate = trio.Event()
    mover = LogDirMover(replicas)
    async with trio.open_nursery() as nursery:
        await nursery.start(mover.run)
        assert mover.alter({("moving", 0): str(dirs[1])}) == {("moving", 0): Error.NONE}
        await replicas.waiting.wait()
        # Caught up and being fsynced: DescribeLogDirs lists it as the future replica.
        [(future, lag)] = mover.futures()
        assert future.directory.parent == dirs[1] and lag == 0
        assert partition.log is current
        # The partition keeps taking appends; the swap copies them too.
        append(current, 30, 200)
        assert mover.futures()[0][1] == 30
        expected = current.read(0, max_bytes=1 << 20)
        replicas.gate.set()
        await mover.wait_idle(("moving", 0))
        nursery.cancel_scope.cancel()
    assert partition.log is future and logs.get_log("moving", 0) is future
    assert current.closed and not (dirs[0] / "moving-0").exists()
    assert mover.futures() == []
    assert future.log_end_offset == 230
    # The batches as they were, byte for byte (offsets, epochs, CRCs): copied, not re-encoded.
    assert future.read(0, max_bytes=1 << 20) == expected
    assert replicas.notified == 1
    logs.close()


async def test_a_move_replaced_by_one_back_home_removes_its_future_replica(tmp_path: Path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    logs = LogManager(dirs, LogConfig(), node_id=1, cluster_id=CLUSTER)
    logs.open(now_ms=0)
    current = logs.ensure_log("moving", uuid.uuid4(), 0, {}, now_ms=0)
    append(current, 10, 0)
    partition = _Partition(current)
    replicas = _Replicas(logs, partition)
    replicas.gate = trio.Event()
    mover = LogDirMover(replicas)
    async with trio.open_nursery() as nursery:
        await nursery.start(mover.run)
        mover.alter({("moving", 0): str(dirs[1])})
        await replicas.waiting.wait()
        assert (dirs[1] / "moving-0").is_dir()
        # Kafka's futureReplicaDirChanged: asked back to the dir it is in, the move stops.
        assert mover.alter({("moving", 0): str(dirs[0])}) == {("moving", 0): Error.NONE}
        replicas.gate.set()
        await mover.wait_idle(("moving", 0))
        nursery.cancel_scope.cancel()
    assert partition.log is current and not current.closed
    assert not (dirs[1] / "moving-0").exists()
    assert mover.alter({("other", 0): str(dirs[1])}) == {
        ("other", 0): Error.UNKNOWN_TOPIC_OR_PARTITION
    }
    assert mover.alter({("moving", 0): "relative"}) == {("moving", 0): Error.LOG_DIR_NOT_FOUND}
    logs.close()


async def _move_virtual_seconds(tmp_path: Path, quota) -> tuple[float, int]:
    """Move a log of about 6 MiB under ``quota`` (None: unthrottled); the seconds the move
    took on trio's clock (a MockClock here) and the bytes moved."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    logs = LogManager(dirs, LogConfig(), node_id=1, cluster_id=CLUSTER)
    logs.open(now_ms=0)
    current = logs.ensure_log("moving", uuid.uuid4(), 0, {}, now_ms=0)
    for number in range(60):
        current.append_as_leader(
            make_batch([(None, b"%d" % number + bytes(100_000))]), leader_epoch=1, now_ms=0
        )
    partition = _Partition(current)
    mover = LogDirMover(_Replicas(logs, partition), quota, backoff_s=0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(mover.run)
        started = trio.current_time()
        assert mover.alter({("moving", 0): str(dirs[1])}) == {("moving", 0): Error.NONE}
        await mover.wait_idle(("moving", 0))
        took = trio.current_time() - started
        nursery.cancel_scope.cancel()
    assert partition.log.directory.parent == dirs[1]
    size = partition.log.size_bytes
    logs.close()
    return took, size


async def test_a_throttled_copy_waits_as_the_rate_requires(tmp_path: Path, autojump_clock):
    """replica.alter.log.dirs.io.max.bytes.per.second (Kafka's ReplicaAlterLogDirsThread
    quota), on trio's MockClock: at 1 MiB/s, with the quota's rate over two 1-second windows,
    a 6 MiB copy may run ahead by what the windows allow (about two steps of 1 MiB), and no
    more: it takes at least (size - 2 MiB) / rate seconds, where unthrottled it takes none;
    and it goes on as soon as the rate allows (within a backoff of it)."""
    rate = 1 << 20
    quota = ReplicationQuotaManager("AlterLogDirsReplication", 1, window_num=2, window_size_s=1)
    quota.update_quota(rate)
    took, size = await _move_virtual_seconds(tmp_path / "throttled", quota)
    assert size > 6_000_000
    assert (size - 2 * rate) / rate <= took <= size / rate + 1, took
    assert quota.measure(int(trio.current_time() * 1000)) <= 2 * rate
    unthrottled, _ = await _move_virtual_seconds(tmp_path / "free", None)
    assert unthrottled < 0.5, unthrottled


async def test_a_copy_a_restart_interrupted_resumes_from_its_future_replica(
    tmp_path: Path, autojump_clock
):
    """Kafka resumes an unfinished copy after a restart: the future replica (half the log
    copied) is kept, the broker restarts, the partition takes more records, and the move
    resumes once it is hosted: it copies only what the future replica lacks (the quota
    counts those bytes alone), then swaps, byte for byte the current log."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    logs = LogManager(dirs, LogConfig(segment_bytes=4096), node_id=1, cluster_id=CLUSTER)
    logs.open(now_ms=0)
    current = logs.ensure_log("moving", uuid.uuid4(), 0, {}, now_ms=0)
    append(current, 200, 0)
    future = logs.open_future_log(current, dirs[1], now_ms=0)
    half = current.read(0, max_bytes=1 << 20, max_offset=100)
    future.append_as_follower(half, now_ms=0)
    assert future.log_end_offset == 100
    future.close()
    logs.close()  # the broker stops in the middle of the copy

    logs = LogManager(dirs, LogConfig(segment_bytes=4096), node_id=1, cluster_id=CLUSTER)
    logs.open(now_ms=0)
    assert logs.unfinished_moves == {("moving", 0): dirs[1] / "moving-0"}
    current = logs.get_log("moving", 0)
    append(current, 30, 200)
    partition = _Partition(current)
    quota = ReplicationQuotaManager("AlterLogDirsReplication", 1)
    mover = LogDirMover(_Replicas(logs, partition), quota)
    async with trio.open_nursery() as nursery:
        await nursery.start(mover.run)
        assert mover.resume_unfinished() == [("moving", 0)]
        await mover.wait_idle(("moving", 0))
        nursery.cancel_scope.cancel()
    moved = partition.log
    assert moved.directory == dirs[1] / "moving-0" and current.closed
    assert moved.log_end_offset == 230
    assert moved.read(0, max_bytes=1 << 20) == half + current_bytes(dirs, moved, 100)
    copied = quota.rate.window_and_total(int(trio.current_time() * 1000))[1]
    assert copied == moved.size_bytes - len(half), (copied, len(half))
    assert logs.unfinished_moves == {}
    logs.close()


def current_bytes(dirs, partition_log, start: int) -> bytes:
    return partition_log.read(start, max_bytes=1 << 20)
