import pytest

from minibroker.storage.log import LogConfig, PartitionLog
from tests.unit.batch_factory import make_batch

BATCH_SIZE = len(make_batch(1))
DAY = 86_400_000


def open_log(tmp_path, **config):
    config.setdefault("segment_bytes", BATCH_SIZE * 2)
    return PartitionLog.open(
        tmp_path / "metrics-0", LogConfig(**config), now_ms=0, needs_recovery=False
    )


def append(log, timestamp):
    return log.append_as_leader(
        make_batch(1, base_timestamp=timestamp), leader_epoch=0, now_ms=timestamp
    )


def test_time_retention_deletes_segments_older_than_retention_ms(tmp_path):
    log = open_log(tmp_path, retention_ms=DAY)
    for day in range(6):  # two batches per segment: segments hold days (0,1) (2,3) (4,5)
        append(log, day * DAY)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    # a segment's age is that of its newest record: day 1 for the first one
    assert log.delete_segments_by_retention(now_ms=2 * DAY) == 0
    assert log.delete_segments_by_retention(now_ms=2 * DAY + 1) == 1
    assert log.log_start_offset == 2
    assert [s.base_offset for s in log.segments] == [2, 4]
    assert not (log.directory / "00000000000000000000.log").exists()


def test_retention_stops_at_the_first_segment_to_keep(tmp_path):
    log = open_log(tmp_path, retention_ms=DAY)
    for timestamp in (0, 0, 10 * DAY, 10 * DAY, 0, 0):
        append(log, timestamp)
    assert log.delete_segments_by_retention(now_ms=5 * DAY) == 1
    assert [s.base_offset for s in log.segments] == [2, 4]


def test_size_retention_deletes_oldest_segments_while_over(tmp_path):
    log = open_log(tmp_path, retention_bytes=BATCH_SIZE * 3)
    for number in range(7):
        append(log, number)
    assert log.size_bytes == BATCH_SIZE * 7
    assert log.delete_segments_by_retention(now_ms=0) == 2
    assert log.size_bytes == BATCH_SIZE * 3
    assert log.log_start_offset == 4
    assert log.delete_segments_by_retention(now_ms=0) == 0


def test_an_expired_active_segment_goes_after_a_roll(tmp_path):
    log = open_log(tmp_path, retention_ms=DAY, segment_bytes=10**6)
    append(log, 0)
    append(log, 0)
    assert log.delete_segments_by_retention(now_ms=2 * DAY) == 1
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    assert [(s.base_offset, s.size) for s in log.segments] == [(2, 0)]
    assert log.delete_segments_by_retention(now_ms=10 * DAY) == 0  # empty active stays
    assert append(log, 10 * DAY).first_offset == 2


def test_nothing_at_or_beyond_the_high_watermark_is_deleted(tmp_path):
    log = open_log(tmp_path, retention_ms=0)
    for _ in range(6):
        append(log, 0)
    assert log.delete_segments_by_retention(now_ms=DAY, high_watermark=3) == 1
    assert log.log_start_offset == 2


def test_compact_only_topics_keep_old_segments(tmp_path):
    log = open_log(tmp_path, retention_ms=0, cleanup_policy="compact")
    for _ in range(6):
        # Keyed: a compacted topic refuses a record without a key (LogValidator.validateKey).
        log.append_as_leader(make_batch([(b"k", b"v")]), leader_epoch=0, now_ms=0)
    assert len(log.segments) > 1
    assert log.delete_segments_by_retention(now_ms=DAY) == 0


def test_segments_below_an_advanced_log_start_offset_are_deleted(tmp_path):
    log = open_log(tmp_path, retention_ms=-1)
    for _ in range(6):
        append(log, 0)
    assert log.maybe_increment_log_start_offset(5)
    assert not log.maybe_increment_log_start_offset(3)
    assert log.delete_segments_by_retention(now_ms=DAY) == 2
    assert [s.base_offset for s in log.segments] == [4]
    assert log.log_start_offset == 5


def test_retention_moves_the_leader_epoch_cache_start(tmp_path):
    log = open_log(tmp_path, retention_bytes=BATCH_SIZE * 2)
    for epoch in range(6):
        log.append_as_leader(make_batch(1), leader_epoch=epoch // 3, now_ms=0)
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 3)]
    log.delete_segments_by_retention(now_ms=0)
    assert log.log_start_offset == 4
    assert log.leader_epoch_cache.entries() == [(1, 4)]


@pytest.mark.parametrize("retention_ms", [-1, 10 * DAY])
def test_nothing_expires_early(tmp_path, retention_ms):
    log = open_log(tmp_path, retention_ms=retention_ms)
    for _ in range(4):
        append(log, 0)
    assert log.delete_segments_by_retention(now_ms=DAY) == 0
