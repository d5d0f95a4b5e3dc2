"""The log manager's slow file-system work runs off the event loop (issue 40,
replication/log_io.py), and keeps the orderings durability depends on.

Each test holds the first fsync (or rmtree, or unlink) of the operation on a
``threading.Event`` and checks that the event loop meanwhile runs another task (or answers a
second request), then releases it and checks the result and the order of the calls: a file's
fsync before the rename that publishes it, the directory's fsync after, everything before
the answer or before the recovery point moves. The disk is never timed: a hold on the event
loop's own thread is let go after ``HOLD_TIMEOUT_S`` (so that such a test fails rather than
hangs), and that is what the assertions catch.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from minibroker.controller.state import ControllerState
from minibroker.controller.store import STATE_FILE, LocalStore
from minibroker.protocol.errors import Error
from minibroker.replication import log_io
from minibroker.storage.checkpoint import LeaderEpochCache, read_leader_epoch_checkpoint
from minibroker.storage.log import LogConfig, PartitionLog
from minibroker.storage.log_manager import LogManager, LogRequest
from tests.unit import test_log_cleaner_service as cleaner_tests
from tests.unit.batch_factory import make_batch
from tests.unit.replication_harness import (
    TOPIC,
    append,
    leader_and_isr,
    make_broker,
    records,
    trio_ms,
)

HOLD_TIMEOUT_S = 3.0
CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"
REAL_FSYNC = os.fsync


class HeldDisk:
    """Records every call of the patched function (what, path, whether on the loop's
    thread) and holds the first one made after `arm()` until `release()` (or the timeout)."""

    def __init__(self) -> None:
        self.loop_thread = threading.get_ident()
        self.calls: list[tuple[str, str, bool]] = []
        self.held = threading.Event()
        self.released = threading.Event()
        self.timed_out = False
        self._armed = False
        self._lock = threading.Lock()
        # Hold only a call on a path this accepts (None: the first call after arm()).
        self.hold_only: Callable[[str], bool] | None = None

    def arm(self) -> None:
        """Forget the calls so far; hold the next one."""
        with self._lock:
            self.calls.clear()
            self._armed = True

    def note(self, what: str, path: str = "") -> None:
        with self._lock:
            self.calls.append((what, path, threading.get_ident() == self.loop_thread))

    def _maybe_hold(self, path: str = "") -> None:
        with self._lock:
            accepted = self.hold_only is None or self.hold_only(path)
            first = accepted and self._armed and not self.held.is_set()
            if first:
                self.held.set()
        if first and not self.released.wait(HOLD_TIMEOUT_S):
            self.timed_out = True

    def fsync(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        self.note("fsync", path)
        self._maybe_hold(path)
        REAL_FSYNC(fd)

    async def wait_held(self) -> None:
        """Wait, on the loop, until the first call is held."""
        with trio.fail_after(10 + HOLD_TIMEOUT_S):
            while not self.held.is_set():
                await trio.sleep(0.001)

    def release(self) -> None:
        self.released.set()

    def fsynced(self) -> list[str]:
        return [path for what, path, _ in self.calls if what == "fsync"]

    def on_loop(self) -> list[tuple[str, str]]:
        return [(what, path) for what, path, on_loop in self.calls if on_loop]


@pytest.fixture
def disk(monkeypatch) -> HeldDisk:
    held = HeldDisk()
    monkeypatch.setattr(os, "fsync", held.fsync)
    yield held
    held.release()


async def test_leader_and_isr_makes_partitions_off_the_loop_with_one_log_dir_fsync(tmp_path, disk):
    replicas = make_broker(tmp_path, 1, threads=True)
    log_dir = tmp_path / "broker-1"
    await replicas.apply_leader_and_isr(leader_and_isr(1, 1, [1], [1], partitions=(0,)))
    # The next request makes 8 more partitions of the same topic (same configs: the topic
    # table is not written again).
    replicas.announced_topic_configs[TOPIC] = {"min.insync.replicas": "2"}
    new = tuple(range(1, 9))
    results: dict = {}
    answered = trio.Event()

    async def create() -> None:
        results.update(
            await replicas.apply_leader_and_isr(leader_and_isr(1, 1, [1], [1], partitions=new))
        )
        disk.note("answered")
        answered.set()

    disk.arm()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(create)
        await disk.wait_held()
        # The first fsync of the creation is held: the loop answers another request.
        outcome = await append(replicas, 0, 3, acks=1)
        assert outcome["error_code"] == Error.NONE
        assert not answered.is_set()
        assert not disk.timed_out, "the creation's fsync held the event loop"
        disk.release()
        await answered.wait()
    assert results == {(TOPIC, index): Error.NONE for index in new}
    assert disk.on_loop() == [("answered", "")]  # every fsync ran in a worker thread
    fsynced = disk.fsynced()
    for index in new:
        directory = log_dir / f"{TOPIC}-{index}"
        assert (directory / "partition.metadata").exists()
        assert (directory / f"{0:020d}.log").exists()
        # partition.metadata fsynced (as .tmp, before its rename), then its directory.
        tmp = fsynced.index(str(directory / "partition.metadata.tmp"))
        assert fsynced.index(str(directory)) > tmp
    # The log dir once for all 8, after every partition directory, before the answer.
    assert fsynced.count(str(log_dir)) == 1
    assert fsynced[-1] == str(log_dir)
    assert disk.calls[-1][0] == "answered"
    replicas.log_manager.close()


async def test_stop_replica_deletes_partitions_off_the_loop(tmp_path, disk, monkeypatch):
    replicas = make_broker(tmp_path, 1, threads=True)
    log_dir = tmp_path / "broker-1"
    partitions = tuple(range(4))
    await replicas.apply_leader_and_isr(leader_and_isr(1, 1, [1], [1], partitions=partitions))
    real_rmtree = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        disk.note("rmtree", str(path))
        disk._maybe_hold()
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    request = SimpleNamespace(
        topic_states=[
            SimpleNamespace(
                topic_name=TOPIC,
                partition_states=[
                    SimpleNamespace(partition_index=index, delete_partition=True)
                    for index in partitions
                ],
            )
        ]
    )
    answered = trio.Event()
    ticks = 0

    async def stop() -> None:
        await replicas.apply_stop_replica(request)
        disk.note("answered")
        answered.set()

    disk.arm()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop)
        await disk.wait_held()
        for _ in range(5):
            await trio.sleep(0)  # another task runs while the removal is held
            ticks += 1
        assert not answered.is_set()
        assert not disk.timed_out, "the partition's removal held the event loop"
        disk.release()
        await answered.wait()
    assert ticks == 5
    assert disk.on_loop() == [("answered", "")]
    assert not any((log_dir / f"{TOPIC}-{index}").exists() for index in partitions)
    # Every tree removed, then the log dir fsynced once; then the topic leaves the topic
    # table (its file fsynced before its rename, the directory after); then the answer.
    whats = [(what, path) for what, path, _ in disk.calls]
    assert whats == [("rmtree", str(log_dir / f"{TOPIC}-{index}")) for index in partitions] + [
        ("fsync", str(log_dir)),
        ("fsync", str(log_dir / "minibroker-topics.json.tmp")),
        ("fsync", str(log_dir)),
        ("answered", ""),
    ]
    assert TOPIC not in replicas.log_manager.topics()
    replicas.log_manager.close()


def small_segments_manager(tmp_path: Path) -> tuple[LogManager, PartitionLog]:
    manager = LogManager(
        [tmp_path / "logs"], LogConfig(segment_bytes=400), node_id=1, cluster_id=CLUSTER
    )
    manager.open(0)
    partition_log = manager.ensure_log("t", uuid.UUID(int=5), 0, {}, now_ms=0)
    for _ in range(20):
        partition_log.append_as_leader(make_batch(2), leader_epoch=3, now_ms=0)
    assert partition_log.segment_count > 3
    return manager, partition_log


async def test_rolled_segments_are_fsynced_off_the_loop_before_the_recovery_point_moves(
    tmp_path, disk
):
    manager, partition_log = small_segments_manager(tmp_path)
    rolled = [segment for segment in partition_log.segments[:-1]]
    active_base = partition_log.segments[-1].base_offset
    before = partition_log.recovery_point
    done = trio.Event()

    async def checkpoint() -> None:
        await log_io.checkpoint(manager, 0)
        done.set()

    disk.arm()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(checkpoint)
        await disk.wait_held()
        # Appends go on (on the loop) while the flush is held; the recovery point waits.
        partition_log.append_as_leader(make_batch(2), leader_epoch=3, now_ms=0)
        assert partition_log.recovery_point == before
        assert not disk.timed_out, "the flush held the event loop"
        disk.release()
        await done.wait()
    assert partition_log.recovery_point == active_base
    assert disk.on_loop() == []
    fsynced = disk.fsynced()
    directory = str(partition_log.directory)
    for segment in rolled:
        for path in (segment.log_path, segment.offset_index.path, segment.time_index.path):
            assert fsynced.index(str(path)) < fsynced.index(directory)
    # The leader epoch checkpoint (deferred by the appends) written with the flush, before
    # the recovery-point checkpoint names the new recovery point.
    epoch_file = fsynced.index(directory + "/leader-epoch-checkpoint.tmp")
    recovery = fsynced.index(str(tmp_path / "logs" / "recovery-point-offset-checkpoint.tmp"))
    assert epoch_file < recovery
    assert read_leader_epoch_checkpoint(partition_log.directory / "leader-epoch-checkpoint") == [
        (3, 0)
    ]
    text = (tmp_path / "logs" / "recovery-point-offset-checkpoint").read_text().split()
    assert text == ["0", "1", "t", "0", str(active_base)]
    manager.close()


async def test_high_watermark_checkpoint_is_written_off_the_loop(tmp_path, disk):
    replicas = make_broker(tmp_path, 1, threads=True)
    await replicas.apply_leader_and_isr(leader_and_isr(1, 1, [1], [1], partitions=(0,)))
    path = tmp_path / "broker-1" / "replication-offset-checkpoint"
    done = trio.Event()

    async def write() -> None:
        await log_io.write_offset_checkpoints(
            replicas.log_manager, path.name, replicas._high_watermarks_by_dir()
        )
        done.set()

    disk.arm()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write)
        await disk.wait_held()
        await trio.sleep(0)
        assert not done.is_set()
        assert not disk.timed_out
        disk.release()
        await done.wait()
    assert disk.on_loop() == []
    assert disk.fsynced() == [str(path) + ".tmp", str(path.parent)]
    assert path.read_text().split() == ["0", "1", TOPIC, "0", "0"]
    replicas.log_manager.close()


async def test_retention_unlinks_segments_off_the_loop(tmp_path, monkeypatch):
    replicas = make_broker(tmp_path, 1, threads=True)
    replicas.announced_topic_configs[TOPIC] = {"segment.bytes": "400", "retention.bytes": "0"}
    await replicas.apply_leader_and_isr(leader_and_isr(1, 1, [1], [1], partitions=(0,)))
    for _ in range(20):
        await append(replicas, 0, 2, acks=1)
    partition, _ = replicas.leader_partition(TOPIC, 0)
    assert partition.high_watermark == partition.log.log_end_offset  # the ISR is the leader
    doomed = [segment.log_path for segment in partition.log.segments]
    assert len(doomed) > 2
    disk = HeldDisk()
    real_unlink = Path.unlink

    def unlink(path, *args, **kwargs):
        disk.note("unlink", str(path))
        disk._maybe_hold()
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", unlink)
    done = trio.Event()

    async def retention() -> None:
        await replicas.run_retention(0)
        done.set()

    disk.arm()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(retention)
        await disk.wait_held()
        await trio.sleep(0)
        # Already gone from the log (renamed .deleted on the loop); unlinked meanwhile.
        assert partition.log.segments[0].base_offset > 0
        assert not any(path.exists() for path in doomed)
        assert not done.is_set()
        assert not disk.timed_out, "retention's unlink held the event loop"
        disk.release()
        await done.wait()
    assert disk.on_loop() == []
    unlinked = [path for what, path, _ in disk.calls if what == "unlink"]
    assert all(path.endswith(".deleted") for path in unlinked)
    assert {str(path) + ".deleted" for path in doomed} <= set(unlinked)
    assert not list(partition.log.directory.glob("*.deleted"))
    replicas.log_manager.close()


def test_a_flush_does_not_move_the_recovery_point_past_a_truncation(tmp_path):
    _, partition_log = small_segments_manager(tmp_path)
    job = partition_log.begin_flush()
    target = job.target
    partition_log.truncate_to(4)
    job.run()  # as a worker thread would, after the owner truncated the log
    partition_log.finish_flush(job)
    assert target > 4
    assert partition_log.recovery_point <= 4


def test_a_flush_begun_while_another_is_in_flight_still_fsyncs_the_directory(tmp_path):
    _, partition_log = small_segments_manager(tmp_path)
    first = partition_log.begin_flush(partition_log.segments[1].base_offset)
    second = partition_log.begin_flush()
    assert first.directory == second.directory == partition_log.directory
    second.run()
    partition_log.finish_flush(second)
    first.run()
    partition_log.finish_flush(first)
    third = partition_log.begin_flush()
    assert third.directory is None  # both finished: nothing new in the directory
    third.close()


def test_an_older_epoch_snapshot_never_replaces_a_newer_file(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    cache.assign(1, 0, durable=False)
    snapshot = cache.unsaved_snapshot()
    assert snapshot is not None
    cache.assign(2, 10)  # written at once, while the snapshot waits for its thread
    cache.write_snapshot(*snapshot)
    assert read_leader_epoch_checkpoint(path) == [(1, 0), (2, 10)]
    assert cache.unsaved_snapshot() is None


def test_retention_renames_segments_deleted_and_a_restart_removes_them(tmp_path):
    manager, partition_log = small_segments_manager(tmp_path)
    partition_log.config = LogConfig(segment_bytes=400, retention_bytes=0)
    assert manager.run_retention(0, defer_unlink=True) > 2
    leftovers = sorted(path.name for path in partition_log.directory.glob("*.deleted"))
    assert f"{0:020d}.log.deleted" in leftovers
    assert f"{0:020d}.index.deleted" in leftovers
    log_start = partition_log.log_start_offset
    assert log_start == partition_log.log_end_offset
    manager.close()  # a crash before the unlinking, as far as the files go
    reopened = LogManager(
        [tmp_path / "logs"], LogConfig(segment_bytes=400), node_id=1, cluster_id=CLUSTER
    )
    reopened.open(0)
    assert not list(partition_log.directory.glob("*.deleted"))
    assert reopened.get_log("t", 0).log_start_offset == log_start
    reopened.close()


def test_partitions_made_together_are_spread_over_the_log_dirs_with_one_fsync_each(tmp_path, disk):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    manager = LogManager(dirs, LogConfig(), node_id=1, cluster_id=CLUSTER)
    manager.open(0)
    disk.calls.clear()
    topic_id = uuid.UUID(int=9)
    creation = manager.begin_logs(
        [LogRequest("t", topic_id, index, {}) for index in range(6)], now_ms=0
    )
    assert manager.logs() == []  # nothing is the manager's before `finish`
    creation.run()
    logs = creation.finish()
    assert [log_.partition for log_ in logs] == list(range(6))
    assert sorted(sum(1 for log_ in logs if log_.directory.parent == d) for d in dirs) == [3, 3]
    fsynced = disk.fsynced()
    assert [fsynced.count(str(d)) for d in dirs] == [1 + 1, 1]  # d1 also holds the topic table
    assert manager.topics()["t"].topic_id == topic_id
    # Asked again: the same logs, nothing made.
    assert manager.ensure_log("t", topic_id, 3, {}, now_ms=0) is logs[3]
    manager.close()


async def test_controller_state_is_saved_off_the_loop_in_order_and_durable_before_save_returns(
    tmp_path, disk
):
    store = LocalStore(tmp_path)
    path = tmp_path / STATE_FILE
    state = ControllerState(controller_epoch=7)
    saved: list[int] = []
    ticks = 0

    async def save(epoch: int) -> None:
        await store.save(state)
        disk.note("saved", str(epoch))
        saved.append(epoch)

    disk.arm()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(save, 7)
        await disk.wait_held()
        # The first save's fsync is held: the loop runs other tasks, a second change is
        # made and its save waits behind the first.
        state.controller_epoch = 8
        nursery.start_soon(save, 8)
        for _ in range(5):
            await trio.sleep(0)
            ticks += 1
        assert saved == []
        assert not disk.timed_out, "the controller's state file write held the event loop"
        disk.release()
    assert ticks == 5
    assert disk.on_loop() == [("saved", "7"), ("saved", "8")]
    assert saved == [7, 8]
    tmp, directory = str(path) + ".tmp", str(tmp_path)
    # Each save: the file fsynced before its rename, the directory after, then save returns.
    assert [(what, where) for what, where, _ in disk.calls] == [
        ("fsync", tmp),
        ("fsync", directory),
        ("saved", "7"),
        ("fsync", tmp),
        ("fsync", directory),
        ("saved", "8"),
    ]
    assert json.loads(path.read_text())["controller_epoch"] == 8


async def test_producer_id_blocks_are_reserved_off_the_loop_before_they_are_handed_out(
    tmp_path, disk
):
    store = LocalStore(tmp_path)
    blocks: list[tuple[int, int]] = []

    async def allocate() -> None:
        blocks.append(await store.allocate_producer_id_block())

    disk.arm()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(allocate)
        await disk.wait_held()
        nursery.start_soon(allocate)
        await trio.sleep(0)
        assert blocks == []
        assert not disk.timed_out, "the producer id block's write held the event loop"
        disk.release()
    assert disk.on_loop() == []
    assert blocks == [(0, 1000), (1000, 1000)]
    assert (tmp_path / "producer-id-block").read_text().strip() == "2000"
    assert disk.fsynced() == [str(tmp_path / "producer-id-block.tmp"), str(tmp_path)] * 2


async def test_a_segment_roll_makes_its_files_off_the_loop_before_the_next_append(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(log_io, "ROLLS_IN_THREAD", True)  # off by default: log_io's note
    replicas = make_broker(tmp_path, 1, threads=True)
    replicas.announced_topic_configs[TOPIC] = {"segment.bytes": "400"}
    await replicas.apply_leader_and_isr(leader_and_isr(1, 1, [1], [1], partitions=(0, 1)))
    partition, _ = replicas.leader_partition(TOPIC, 0)
    log_ = partition.log
    size = len(records(0, 2)[0][1][0].records)
    while not log_.roll_due(size, trio_ms()):
        assert (await append(replicas, 0, 2, acks=1))["error_code"] == Error.NONE
    segments_before = log_.segment_count
    roll_offset = log_.log_end_offset
    disk = HeldDisk()
    real_open = os.open

    def open_(path, flags, *args, **kwargs):
        if flags & os.O_CREAT:
            disk.note("create", str(path))
            if str(path).endswith(".log"):
                disk._maybe_hold()
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    answers: list[dict] = []

    async def produce() -> None:
        answers.append(await append(replicas, 0, 2, acks=1))
        disk.note("answered")

    disk.arm()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            await disk.wait_held()
            # The new segment's .log is being made: another partition takes appends, and a
            # second append to the rolling one waits for the roll.
            other = await append(replicas, 1, 2, acks=1)
            assert other["error_code"] == Error.NONE
            nursery.start_soon(produce)
            for _ in range(5):
                await trio.sleep(0)
            assert answers == []
            assert log_.segment_count == segments_before
            assert log_.log_end_offset == roll_offset
            assert not disk.timed_out, "the roll's file creation held the event loop"
            disk.release()
    finally:
        disk.release()
    assert [answer["error_code"] for answer in answers] == [Error.NONE, Error.NONE]
    # Both appends went to the new segment, at its base offset and after it.
    assert sorted(answer["base_offset"] for answer in answers) == [roll_offset, roll_offset + 2]
    assert log_.segment_count == segments_before + 1
    assert log_.segments[-1].base_offset == roll_offset
    assert log_.log_end_offset == roll_offset + 4
    created = [path for what, path, on_loop in disk.calls if what == "create"]
    assert str(log_.directory / f"{roll_offset:020d}.log") in created
    assert not [call for call in disk.calls if call[0] == "create" and call[2]], (
        "a roll's file was created on the event loop"
    )
    assert (log_.directory / f"{roll_offset:020d}.snapshot").exists()
    replicas.log_manager.close()


async def test_a_roll_is_dropped_when_the_log_is_truncated_meanwhile(tmp_path):
    manager, partition_log = small_segments_manager(tmp_path)
    partition_log.append_as_leader(make_batch(2), leader_epoch=3, now_ms=0)
    while not partition_log.roll_due(len(make_batch(2)), 0):
        partition_log.append_as_leader(make_batch(2), leader_epoch=3, now_ms=0)
    job = partition_log.begin_roll()
    assert job is not None and partition_log.roll_in_flight is job
    job.run()  # as a worker thread would, while the owner truncated the log
    base = job.base_offset
    partition_log.truncate_to(base - 2)
    assert not partition_log.finish_roll(job)
    assert partition_log.roll_in_flight is None
    assert partition_log.segments[-1].base_offset < base
    assert not (partition_log.directory / f"{base:020d}.log").exists()
    assert not (partition_log.directory / f"{base:020d}.snapshot").exists()
    # The next append at the log end goes on in the old active segment (and rolls inline).
    appended = partition_log.append_as_leader(make_batch(2), leader_epoch=3, now_ms=0)
    assert appended.first_offset == base - 2
    manager.close()


async def test_a_truncation_writes_its_epochs_and_unlinks_segments_off_the_loop(
    tmp_path, disk, monkeypatch
):
    manager, partition_log = small_segments_manager(tmp_path)  # epoch 3 from offset 0
    cut = partition_log.log_end_offset
    for _ in range(20):
        partition_log.append_as_leader(make_batch(2), leader_epoch=4, now_ms=0)
    partition_log.flush()  # both epochs in the file, every segment durable
    doomed = [s.log_path for s in partition_log.segments if s.base_offset > cut]
    assert len(doomed) > 2
    real_unlink = Path.unlink

    def unlink(path, *args, **kwargs):
        disk.note("unlink", str(path))
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", unlink)
    disk.arm()
    assert partition_log.truncate_to(cut)
    # On the loop: the removed segments renamed, nothing fsynced; unlinked there only the
    # producer snapshots past the new end (small files, as truncateAndReload deletes them).
    assert disk.fsynced() == []
    assert {path.rsplit(".", 1)[-1] for what, path, _ in disk.calls} == {"snapshot"}
    disk.calls.clear()
    assert not any(path.exists() for path in doomed)
    assert all(path.with_name(path.name + ".deleted").exists() for path in doomed)
    epoch_file = partition_log.directory / "leader-epoch-checkpoint"
    assert read_leader_epoch_checkpoint(epoch_file) == [(3, 0), (4, cut)]
    done = trio.Event()

    async def finish() -> None:
        await log_io.finish_truncation(partition_log)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(finish)
        await disk.wait_held()
        await trio.sleep(0)
        assert not done.is_set()
        assert not disk.timed_out, "the truncation's epoch checkpoint held the event loop"
        disk.release()
    assert disk.on_loop() == []
    assert read_leader_epoch_checkpoint(epoch_file) == [(3, 0)]
    assert not list(partition_log.directory.glob("*.deleted"))
    # The checkpoint's fsync before its rename, the directory's after.
    assert disk.fsynced() == [str(epoch_file) + ".tmp", str(partition_log.directory)]
    assert partition_log.log_end_offset == cut
    manager.close()


async def test_the_cleaners_swap_commits_off_the_loop_and_replaces_segments_in_one_step(
    tmp_path, disk
):
    partition_log = cleaner_tests.compacted_log(tmp_path)
    for number in range(2000):
        cleaner_tests.append(
            partition_log, b"key-%d" % (number % 10), b"key-%d-%04d" % (number % 10, number)
        )
    service, _, _, _ = cleaner_tests.service_for([partition_log])
    directory = partition_log.directory
    before = list(partition_log.segments)
    cleaned_below = before[-1].base_offset
    # The swap's commit: the directory's fsync after the cleaned files became `.swap`.
    disk.hold_only = lambda path: path == str(directory) and any(directory.glob("*.log.swap"))
    disk.arm()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.clean_filthiest)
        await disk.wait_held()
        # The cleaned files are renamed .swap and the directory's fsync is held: the log
        # still holds the old segments and takes appends.
        assert list(directory.glob("*.log.swap"))
        assert partition_log.segments == before
        cleaner_tests.append(partition_log, b"new", b"v")
        assert not disk.timed_out, "the cleaner's swap held the event loop"
        disk.release()
    assert disk.on_loop() == []
    fsynced = disk.fsynced()
    assert fsynced.count(str(directory)) >= 2  # after the .swap renames, after the last
    assert not list(directory.glob("*.swap")) and not list(directory.glob("*.deleted"))
    # Every segment below the cleaned offset is a cleaned one now.
    assert not [
        segment
        for segment in partition_log.segments
        if segment.base_offset < cleaned_below and any(segment is old for old in before)
    ]
    records = cleaner_tests.all_records(partition_log)
    below = [record for record in records if record[0] < cleaned_below]
    assert len(below) == len({key for _, key, _ in below}) == 10
    assert records[-1][1] == b"new"
    partition_log.close()
