"""A replica moved between the log dirs of one broker (storage/replica_move.py and the log
manager's future-log steps): the move's state machine, the swap, and a restart at each point
of it (Kafka's ReplicaManager.alterReplicaLogDirs, LogManager.replaceCurrentWithFutureLog)."""

import os
import uuid
from pathlib import Path

import pytest

from minibroker.storage.log import LogConfig
from minibroker.storage.log_manager import LogManager
from minibroker.storage.replica_move import (
    COPY_STEP_BYTES,
    FUTURE_MARKER,
    Action,
    ReplicaMove,
    Step,
    is_future,
)
from tests.unit.batch_factory import make_batch

CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"
TOPIC_ID = uuid.uuid4()


def opened(dirs: list[Path]) -> LogManager:
    logs = LogManager(dirs, LogConfig(segment_bytes=600), node_id=1, cluster_id=CLUSTER)
    logs.open(now_ms=0)
    return logs


def read_all(partition_log) -> list[bytes]:
    """Every batch of the log as stored (bytes), from its start."""
    data = partition_log.read(partition_log.log_start_offset, max_bytes=1 << 20)
    return [data]


def copy_all(current, future) -> None:
    """What the mover's copy steps do: the current log's batches, as bytes, appended to the
    future log from its end."""
    while future.log_end_offset < current.log_end_offset:
        data = current.read(future.log_end_offset, max_bytes=COPY_STEP_BYTES)
        future.append_as_follower(data, now_ms=0)


@pytest.fixture
def two_dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "a", tmp_path / "b"]


def hosted_with_data(dirs: list[Path], batches: int = 10) -> tuple[LogManager, object]:
    logs = opened(dirs)
    current = logs.ensure_log("moving", TOPIC_ID, 0, {}, now_ms=0)
    assert current.directory.parent == dirs[0]
    for index in range(batches):
        current.append_as_leader(
            make_batch([(b"k%d" % index, b"v%d" % index)] * 3), leader_epoch=4, now_ms=0
        )
    return logs, current


def test_the_state_machine_restarts_copies_flushes_then_swaps():
    move = ReplicaMove(Path("/b"))
    offsets = dict(current_start=5, current_end=100, current_structure_version=1)
    assert move.next_action(**offsets, future_end=0) == Action(Step.RESTART, 5)
    assert move.next_action(**offsets, future_end=5) == Action(Step.COPY, 5)
    assert move.next_action(**offsets, future_end=60) == Action(Step.COPY, 60)
    assert move.next_action(**offsets, future_end=100) == Action(Step.FLUSH)
    # Appends during the flush are copied by the swap step itself...
    later = dict(offsets, current_end=120)
    assert move.next_action(**later, future_end=100, behind_bytes=5000) == Action(Step.SWAP, 100)


def test_a_partition_busy_during_the_fsync_is_copied_on_then_swapped_after_three_fsyncs():
    move = ReplicaMove(Path("/b"))
    offsets = dict(current_start=0, current_structure_version=1)
    move.next_action(**offsets, current_end=10, future_end=0)
    much = 2 * COPY_STEP_BYTES
    for flush in range(3):
        end = 100 * (flush + 1)
        assert move.next_action(**offsets, current_end=end, future_end=end) == Action(Step.FLUSH)
        # More than a step appended during the fsync: copy on, then fsync again.
        assert move.next_action(
            **offsets, current_end=end + 50, future_end=end, behind_bytes=much
        ) == (Action(Step.COPY, end) if flush < 2 else Action(Step.SWAP, end))


def test_a_truncation_or_retention_of_the_current_log_restarts_the_copy():
    move = ReplicaMove(Path("/b"))
    move.next_action(current_start=0, current_end=50, current_structure_version=1, future_end=0)
    # Truncated (a follower's divergence), then appended to past the future's end again.
    assert move.next_action(
        current_start=0, current_end=80, current_structure_version=2, future_end=40
    ) == Action(Step.RESTART, 0)
    assert move.next_action(
        current_start=0, current_end=30, current_structure_version=2, future_end=40
    ) == Action(Step.RESTART, 0)
    # Retention moved the start past what the future log holds.
    assert move.next_action(
        current_start=60, current_end=90, current_structure_version=2, future_end=10
    ) == Action(Step.RESTART, 60)


def test_a_swapped_replica_holds_the_same_bytes_in_the_other_dir_after_a_restart(two_dirs):
    logs, current = hosted_with_data(two_dirs)
    before = read_all(current)
    end = current.log_end_offset
    future = logs.open_future_log(current, two_dirs[1], now_ms=0)
    assert is_future(future.directory)
    assert future.directory == two_dirs[1] / "moving-0"
    copy_all(current, future)
    deleted = logs.swap_in_future(future)
    assert logs.get_log("moving", 0) is future
    assert not (two_dirs[0] / "moving-0").exists()
    assert deleted.parent == two_dirs[0] and deleted.name.endswith("-delete")
    LogManager.finish_future_swap(deleted, future.directory)
    assert not deleted.exists() and not is_future(future.directory)
    # The moved log takes appends, and everything survives a restart.
    future.append_as_leader(make_batch(2), leader_epoch=5, now_ms=0)
    logs.flush_due(now_ms=10**12)
    logs.close()
    reopened = opened(two_dirs)
    moved = reopened.get_log("moving", 0)
    assert moved.directory == two_dirs[1] / "moving-0"
    assert moved.log_end_offset == end + 2
    assert read_all(moved)[0].startswith(before[0])
    assert [epoch for epoch, _ in moved.leader_epoch_cache.entries()] == [4, 5]
    reopened.close()


def test_a_restart_before_the_swap_keeps_the_future_replica_for_its_move_to_resume(two_dirs):
    """Kafka keeps an unfinished future replica across a restart and resumes its copy: the
    current replica is still the one served, and the future one is left in place, named
    for the mover (log_dir_mover.resume_unfinished), not loaded as a log."""
    logs, current = hosted_with_data(two_dirs)
    end = current.log_end_offset
    future = logs.open_future_log(current, two_dirs[1], now_ms=0)
    copy_all(current, future)
    future.close()
    logs.close()
    reopened = opened(two_dirs)
    kept = reopened.get_log("moving", 0)
    assert kept.directory == two_dirs[0] / "moving-0"
    assert kept.log_end_offset == end
    assert reopened.unfinished_moves == {("moving", 0): two_dirs[1] / "moving-0"}
    assert is_future(two_dirs[1] / "moving-0")
    reopened.close()


def test_a_restart_in_the_middle_of_the_swap_completes_it(two_dirs):
    """The current replica renamed for deletion, the future one still marked (a crash
    between the two): the future replica, complete since the swap began, is the one kept,
    with what was appended to it after the swap."""
    logs, current = hosted_with_data(two_dirs)
    end = current.log_end_offset
    future = logs.open_future_log(current, two_dirs[1], now_ms=0)
    copy_all(current, future)
    deleted = logs.swap_in_future(future)
    future.append_as_leader(make_batch(1), leader_epoch=4, now_ms=0)
    assert (future.directory / FUTURE_MARKER).exists() and deleted.exists()
    logs.flush_due(now_ms=10**12)
    logs.close()
    reopened = opened(two_dirs)
    moved = reopened.get_log("moving", 0)
    assert moved.directory == two_dirs[1] / "moving-0"
    assert moved.log_end_offset == end + 1
    assert not deleted.exists() and not is_future(moved.directory)
    assert sorted(os.listdir(two_dirs[0])) == sorted(
        name for name in os.listdir(two_dirs[0]) if not name.startswith("moving")
    )
    reopened.close()


def test_a_partition_not_hosted_yet_is_made_in_its_preferred_dir(two_dirs):
    logs = opened(two_dirs)
    logs.preferred_log_dirs[("later", 0)] = two_dirs[1]
    made = logs.ensure_log("later", TOPIC_ID, 0, {}, now_ms=0)
    assert made.directory.parent == two_dirs[1]
    assert ("later", 0) not in logs.preferred_log_dirs
    logs.close()


def test_only_configured_absolute_dirs_are_named(two_dirs):
    logs = opened(two_dirs)
    assert logs.log_dir_named(str(two_dirs[1].absolute())) == two_dirs[1]
    assert logs.log_dir_named(str(two_dirs[1].parent / "c")) is None
    assert logs.log_dir_named("b") is None
    logs.close()


def test_cordoned_log_dirs_take_no_new_partition_unless_all_are(two_dirs):
    """Kafka's LogManager.nextLogDirs with KIP-1066: the cordoned dirs are left out, unless
    every live dir is cordoned (then the first one)."""
    logs = opened(two_dirs)
    logs.set_cordoned((str(two_dirs[0]),))
    placed = [logs.ensure_log("c", TOPIC_ID, p, {}, now_ms=0).directory.parent for p in range(3)]
    assert placed == [two_dirs[1]] * 3
    logs.set_cordoned(("*",))
    assert logs.cordoned_log_dirs == set(two_dirs)
    assert logs.ensure_log("c", TOPIC_ID, 3, {}, now_ms=0).directory.parent == two_dirs[0]
    logs.set_cordoned(())
    assert logs.ensure_log("c", TOPIC_ID, 4, {}, now_ms=0).directory.parent == two_dirs[0]
    logs.close()


def test_cordoned_log_dirs_must_be_log_dirs_and_per_broker(two_dirs):
    from minibroker.common.config import BrokerConfig, ConfigError
    from minibroker.common.config_model import ConfigChangeError, validate_broker_overrides

    dirs = ",".join(str(d) for d in two_dirs)
    config = BrokerConfig.from_properties({"log.dirs": dirs, "cordoned.log.dirs": "*"})
    assert config.cordoned_log_dirs == ("*",)
    with pytest.raises(ConfigError, match="Invalid entry in cordoned.log.dirs: /elsewhere"):
        BrokerConfig.from_properties({"log.dirs": dirs, "cordoned.log.dirs": "/elsewhere"})
    with pytest.raises(ConfigError, match="must not contain other values"):
        BrokerConfig.from_properties({"log.dirs": dirs, "cordoned.log.dirs": f"*,{dirs}"})
    validate_broker_overrides({"cordoned.log.dirs": str(two_dirs[0])})
    with pytest.raises(ConfigChangeError, match="broker id must be specified"):
        validate_broker_overrides({"cordoned.log.dirs": "*"}, cluster_default=True)


def test_a_flush_in_flight_when_its_log_moves_away_takes_no_log_dir_offline(two_dirs):
    """The periodic flush's thread fsyncs the old directory, gone since the swap: the failure
    of a flush of a closed log is logged, not a log dir failure (which halts the broker)."""
    logs, current = hosted_with_data(two_dirs)
    current.append_as_leader(make_batch(1), leader_epoch=6, now_ms=0)  # an unsaved epoch
    job = current.begin_flush()
    assert job.directory is not None
    future = logs.open_future_log(current, two_dirs[1], now_ms=0)
    copy_all(current, future)
    deleted = logs.swap_in_future(future)
    LogManager.finish_future_swap(deleted, future.directory)
    job.run()
    assert job.error is not None
    current.finish_flush(job)
    assert logs.failures.offline_dirs == {}
    logs.close()
