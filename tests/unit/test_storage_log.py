import os
import struct
import tempfile
from pathlib import Path

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibroker.protocol.errors import Error
from minibroker.protocol.record_batch import read_header, stamp_offsets, validate_batches
from minibroker.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from minibroker.storage.log import LogConfig, PartitionLog, parse_partition_dir_name
from tests.unit.batch_factory import make_batch

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100)


def open_log(tmp_path, config=SMALL, name="orders-0", **kwargs):
    kwargs.setdefault("needs_recovery", False)
    kwargs.setdefault("now_ms", 0)
    return PartitionLog.open(tmp_path / name, config, **kwargs)


def append(log, records=1, now_ms=0, leader_epoch=0, **kwargs):
    return log.append_as_leader(
        make_batch(records, **kwargs), leader_epoch=leader_epoch, now_ms=now_ms
    )


def batches(data: bytes):
    return validate_batches(data) if data else []


def test_partition_directory_names_split_at_the_last_dash(tmp_path):
    assert parse_partition_dir_name("my-topic.v2-13") == ("my-topic.v2", 13)
    for bad in ("topic", "topic-", "-1", "topic-x"):
        with pytest.raises(ValueError):
            parse_partition_dir_name(bad)
    log = open_log(tmp_path, name="a-b-3")
    assert (log.topic, log.partition) == ("a-b", 3)


def test_append_assigns_offsets_from_the_log_end(tmp_path):
    log = open_log(tmp_path)
    first = append(log, 3)
    second = append(log, 2)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert not second.duplicate and second.log_append_time_ms == -1
    assert log.log_end_offset == 5
    headers = batches(log.read(0, max_bytes=10**6))
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 0), (3, 0)]


def test_round_trip_across_segment_rolls(tmp_path):
    log = open_log(tmp_path)
    sent = []
    for number in range(60):
        records = [(b"k%d" % number, b"v" * (number % 7))] * (number % 3 + 1)
        result = append(log, records)
        sent.append((result.first_offset, records))
    assert log.segment_count > 3
    assert all(segment.size <= SMALL.segment_bytes for segment in log.segments)
    data = log.read(0, max_bytes=10**9)
    headers = batches(data)
    assert [h.base_offset for h in headers] == [first for first, _ in sent]
    expected = []
    for first, records in sent:
        batch = bytearray(make_batch(records))
        stamp_offsets(batch, 0, first, 0)
        expected.append(bytes(batch))
    assert data == b"".join(expected)


def test_read_from_inside_a_batch_returns_the_whole_batch(tmp_path):
    log = open_log(tmp_path)
    append(log, 5)
    append(log, 5)
    for offset in range(10):
        assert batches(log.read(offset, max_bytes=10**6))[0].base_offset == offset // 5 * 5


def test_read_bounds(tmp_path):
    log = open_log(tmp_path)
    for _ in range(4):
        append(log, 2)
    size = len(make_batch(2))
    assert log.read(8, max_bytes=100) == b""
    with pytest.raises(OffsetOutOfRangeError) as raised:
        log.read(9, max_bytes=100)
    assert raised.value.error == Error.OFFSET_OUT_OF_RANGE
    assert [h.base_offset for h in batches(log.read(0, max_bytes=10**6, max_offset=5))] == [0, 2, 4]
    assert log.read(4, max_bytes=10**6, max_offset=4) == b""
    assert len(log.read(0, max_bytes=size * 2 + 10)) == size * 2
    assert len(log.read(0, max_bytes=1)) == size
    assert log.read(0, max_bytes=1, min_one_batch=False) == b""


def test_read_continues_into_later_segments(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=150))  # two 75-byte batches each
    for _ in range(10):
        append(log, 1)
    assert log.segment_count == 5
    size = len(make_batch(1))
    assert [h.base_offset for h in batches(log.read(1, max_bytes=size * 5))] == [1, 2, 3, 4, 5]


def test_read_below_the_log_start_is_out_of_range(tmp_path):
    log = open_log(tmp_path)
    append(log, 4)
    append(log, 4)
    log.maybe_increment_log_start_offset(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, max_bytes=100)
    assert batches(log.read(2, max_bytes=100))[0].base_offset == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(9)


def test_corrupt_batches_are_refused_and_nothing_is_appended(tmp_path):
    log = open_log(tmp_path)
    good = make_batch(1)
    bad = bytearray(make_batch(1))
    bad[-1] ^= 0xFF
    for records in (good + bytes(bad), b"", good[:-3], good + b"\x00"):
        with pytest.raises(CorruptRecordError) as raised:
            log.append_as_leader(records, leader_epoch=0, now_ms=0)
        assert raised.value.error == Error.CORRUPT_MESSAGE
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_size_limits(tmp_path):
    log = open_log(tmp_path, LogConfig(max_message_bytes=200, segment_bytes=500))
    with pytest.raises(RecordTooLargeError) as raised:
        append(log, [(None, b"x" * 300)])
    assert raised.value.error == Error.MESSAGE_TOO_LARGE
    small = make_batch([(None, b"x" * 100)])
    with pytest.raises(RecordBatchTooLargeError):
        log.append_as_leader(small * 4, leader_epoch=0, now_ms=0)
    assert log.log_end_offset == 0


def reseal(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda b: stamp_offsets(b, 0, 7, -1), "should be 0"),
        (lambda b: struct.pack_into(">i", b, 57, 3), "Inconsistent batch offset range"),
        (lambda b: struct.pack_into(">i", b, 57, 0), "Invalid reported count"),
        (lambda b: struct.pack_into(">h", b, 21, 0x20), "control records"),
        (lambda b: struct.pack_into(">q", b, 43, 5), "Invalid sequence number -1"),
    ],
)
def test_client_batches_must_follow_kafkas_rules(tmp_path, mangle, message):
    log = open_log(tmp_path)
    batch = bytearray(make_batch(2))
    mangle(batch)
    with pytest.raises(InvalidRecordError, match=message) as raised:
        log.append_as_leader(reseal(batch), leader_epoch=0, now_ms=0)
    assert raised.value.error == Error.INVALID_RECORD


def test_log_append_time_stamps_the_broker_clock(tmp_path):
    log = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"))
    result = append(log, 3, now_ms=123_456, base_timestamp=5, attributes=1)
    assert result.log_append_time_ms == 123_456
    (header,) = batches(log.read(0, max_bytes=10**6))  # validate_batches checks the CRC
    assert header.uses_log_append_time
    assert header.max_timestamp == header.base_timestamp == 123_456
    assert header.compression == 1
    assert log.max_timestamp() == (0, 123_456)
    assert log.offset_for_timestamp(100_000) == (0, 123_456)


def test_roll_by_segment_ms_and_full_index(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_ms=1000))
    append(log, now_ms=10_000)
    append(log, now_ms=11_000)
    assert log.segment_count == 1
    append(log, now_ms=11_001)
    assert [s.base_offset for s in log.segments] == [0, 2]
    # room for 3 offset-index entries but only 2 time-index entries (12 bytes each)
    log = open_log(tmp_path, LogConfig(segment_index_bytes=24, index_interval_bytes=0), "full-0")
    for number in range(4):
        append(log, base_timestamp=1000 + number)
    # the 2nd and 3rd batches get entries (the first never does); then the time index is full
    assert [s.base_offset for s in log.segments] == [0, 3]


def test_roll_when_offsets_no_longer_fit_the_segment(tmp_path):
    log = open_log(tmp_path)
    batch = bytearray(make_batch(1))
    stamp_offsets(batch, 0, 2**31 + 5, 0)
    log.append_as_follower(bytes(batch), now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, 2**31 + 5]
    assert log.log_end_offset == 2**31 + 6


def test_follower_appends_keep_offsets_and_must_not_go_back(tmp_path):
    leader = open_log(tmp_path, name="t-0")
    for count in (2, 3, 1):
        append(leader, count, leader_epoch=4)
    follower = open_log(tmp_path, name="t-1")
    data = leader.read(0, max_bytes=10**6)
    result = follower.append_as_follower(data, now_ms=0)
    assert (result.first_offset, result.last_offset) == (0, 5)
    assert follower.read(0, max_bytes=10**6) == data
    assert follower.leader_epoch_cache.entries() == [(4, 0)]
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(leader.read(5, max_bytes=10**6), now_ms=0)
    assert follower.log_end_offset == 6


def test_leader_epochs_are_recorded_as_they_start(tmp_path):
    log = open_log(tmp_path)
    append(log, 2, leader_epoch=0)
    append(log, 2, leader_epoch=0)
    append(log, 1, leader_epoch=3)
    assert log.leader_epoch_cache.entries() == [(0, 0), (3, 4)]
    assert log.end_offset_for_epoch(0) == (0, 4)
    assert log.end_offset_for_epoch(3) == (3, 5)
    checkpoint = log.directory / "leader-epoch-checkpoint"
    # Entries learnt from batches are written with the batches, when the log flushes.
    assert not checkpoint.exists()
    log.flush()
    assert checkpoint.read_text() == "0\n2\n0 0\n3 4\n"


def test_a_new_leaders_epoch_is_written_at_once(tmp_path):
    log = open_log(tmp_path)
    append(log, 2, leader_epoch=0)
    log.leader_epoch_cache.assign(4, log.log_end_offset)  # what becoming leader does
    assert (log.directory / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n4 2\n"


def test_a_crash_before_the_epochs_were_written_recovers_them_from_the_batches(tmp_path):
    log = open_log(tmp_path)
    append(log, 2, leader_epoch=0)
    log.flush()  # the file has epoch 0; the recovery point is 2
    append(log, 2, leader_epoch=3)
    append(log, 1, leader_epoch=5)
    # A crash: nothing more is flushed; the page cache kept the batches.
    recovered = open_log(tmp_path, needs_recovery=True, recovery_point=2)
    assert recovered.leader_epoch_cache.entries() == [(0, 0), (3, 2), (5, 4)]


def test_a_crash_after_a_truncation_recovers_the_new_leaders_epoch(tmp_path):
    log = open_log(tmp_path)
    append(log, 2, leader_epoch=0)
    append(log, 2, leader_epoch=3)
    log.flush(up_to=2)  # the file has (0, 0) and (3, 2), the recovery point is 2
    assert log.truncate_to(2)  # a new leader's history has no epoch 3: the file drops it
    append(log, 1, leader_epoch=4)  # deferred: only the batch knows epoch 4 starts at 2
    recovered = open_log(tmp_path, needs_recovery=True, recovery_point=2)
    assert recovered.leader_epoch_cache.entries() == [(0, 0), (4, 2)]


def test_truncate_to(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=400))
    for epoch in range(8):
        append(log, 2, leader_epoch=epoch)
    assert [s.base_offset for s in log.segments] == [0, 8]  # four 89-byte batches each
    assert log.truncate_to(7)  # inside the batch 6-7: it goes as a whole
    assert log.log_end_offset == 6
    assert log.segment_count == 1
    assert [h.base_offset for h in batches(log.read(0, max_bytes=10**6))] == [0, 2, 4]
    assert log.leader_epoch_cache.latest_epoch == 2
    assert not log.truncate_to(100)
    assert append(log, 1).first_offset == 6
    assert log.truncate_to(2)
    assert log.log_end_offset == 2


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path)
    append(log, 3)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (1000, 1000, 1)
    assert append(log, 1).first_offset == 1000
    assert sorted(p.name for p in log.directory.glob("*.log")) == ["00000000000000001000.log"]


def test_offset_for_timestamp_and_max_timestamp(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=250, index_interval_bytes=0))
    append(log, 3, timestamps=[100, 150, 120])  # offsets 0-2
    append(log, 2, timestamps=[200, 300])  # 3-4
    append(log, 2, timestamps=[250, 260], attributes=1)  # 5-6, gzip
    append(log, 1, base_timestamp=50)  # 7
    assert log.segment_count > 1
    assert log.offset_for_timestamp(0) == (0, 100)
    assert log.offset_for_timestamp(101) == (1, 150)
    assert log.offset_for_timestamp(151) == (3, 200)
    assert log.offset_for_timestamp(201) == (4, 300)
    assert log.offset_for_timestamp(301) is None
    assert log.max_timestamp() == (4, 300)
    log.maybe_increment_log_start_offset(4)
    assert log.offset_for_timestamp(0) == (4, 300)


def test_compressed_batches_answer_with_their_first_offset(tmp_path):
    log = open_log(tmp_path)
    append(log, 2, timestamps=[100, 200], attributes=4)
    assert log.offset_for_timestamp(100) == (0, 100)
    assert log.offset_for_timestamp(150) == (0, 200)
    assert log.max_timestamp() == (1, 200)


def test_empty_log_has_no_timestamps(tmp_path):
    log = open_log(tmp_path)
    assert log.max_timestamp() is None
    assert log.offset_for_timestamp(0) is None
    append(log, 1, base_timestamp=-1)
    assert log.max_timestamp() is None


def test_flush_messages_and_flush_ms(tmp_path):
    log = open_log(tmp_path, LogConfig(flush_messages=3))
    append(log, 2)
    assert log.recovery_point == 0
    append(log, 1)
    assert log.recovery_point == 3
    log = open_log(tmp_path, LogConfig(flush_ms=1000), "timed-0", now_ms=0)
    append(log, 2, now_ms=10)
    assert not log.flush_if_due(999)
    assert log.flush_if_due(1000)
    assert log.recovery_point == 2


def test_rolled_segments_are_flushed_when_due(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    for _ in range(5):
        append(log)
    assert log.recovery_point == 0
    assert log.flush_if_due(now_ms=0)
    assert log.recovery_point == log.segments[-1].base_offset < log.log_end_offset
    log.flush()
    assert log.recovery_point == log.log_end_offset
    assert not log.flush_if_due(now_ms=0)


def test_config_changes_apply_to_later_appends(tmp_path):
    log = open_log(tmp_path, LogConfig())
    append(log, 1)
    log.config = LogConfig.from_topic_configs(
        log.config, {"message.timestamp.type": "LogAppendTime"}
    )
    assert append(log, 1, now_ms=77).log_append_time_ms == 77


def test_delete_removes_the_directory(tmp_path):
    log = open_log(tmp_path)
    append(log)
    log.delete()
    assert not os.path.exists(tmp_path / "orders-0")


def test_read_header_of_stored_batches_shows_stamped_offsets(tmp_path):
    log = open_log(tmp_path)
    append(log, 2)
    append(log, 2, leader_epoch=9)
    data = log.read(2, max_bytes=10**6)
    assert read_header(data).base_offset == 2
    assert read_header(data).partition_leader_epoch == 9


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    record_counts=st.lists(st.integers(1, 5), min_size=1, max_size=30),
    segment_bytes=st.integers(140, 700),
    index_interval_bytes=st.sampled_from([0, 50, 200, 4096]),
    reopen=st.booleans(),
)
def test_every_offset_reads_from_its_batch_across_segments(
    record_counts, segment_bytes, index_interval_bytes, reopen
):
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes)
    with tempfile.TemporaryDirectory() as directory:
        log = PartitionLog.open(Path(directory) / "t-0", config, now_ms=0, needs_recovery=False)
        ranges = []
        for count in record_counts:
            result = append(log, count)
            ranges.append((result.first_offset, result.last_offset))
        if reopen:
            log.close()
            log = PartitionLog.open(Path(directory) / "t-0", config, now_ms=0, needs_recovery=True)
        assert log.log_end_offset == ranges[-1][1] + 1
        everything = log.read(0, max_bytes=10**9)
        assert [(h.base_offset, h.last_offset) for h in batches(everything)] == ranges
        for base, last in ranges:
            for offset in range(base, last + 1):
                assert read_header(log.read(offset, max_bytes=1)).base_offset == base
        log.close()


def replicate(log, epoch, batches):
    """Append `batches` one-record batches of `epoch` as a follower does."""
    for _ in range(batches):
        batch = make_batch(1, base_offset=log.log_end_offset, partition_leader_epoch=epoch)
        log.append_as_follower(batch, now_ms=0)


def test_recovery_keeps_the_epochs_the_file_has_past_a_stale_recovery_point(tmp_path):
    log = open_log(tmp_path)
    replicate(log, 1, 100)
    replicate(log, 2, 50)
    log.flush()  # the file has (1, 0) and (2, 100); the checkpointed recovery point lags at 50
    recovered = open_log(tmp_path, needs_recovery=True, recovery_point=50)
    assert recovered.leader_epoch_cache.entries() == [(1, 0), (2, 100)]
    assert recovered.end_offset_for_epoch(1) == (1, 100)


def test_recovery_finds_a_new_epoch_after_a_truncation_below_the_recovery_point(tmp_path):
    log = open_log(tmp_path)
    replicate(log, 4, 100)
    replicate(log, 5, 100)
    log.flush()
    checkpointed = log.recovery_point  # 200
    assert log.truncate_to(150)  # a new leader's history diverges at 150
    replicate(log, 6, 100)  # epoch 6 from 150, its entry not written yet
    recovered = open_log(tmp_path, needs_recovery=True, recovery_point=checkpointed)
    assert recovered.leader_epoch_cache.entries() == [(4, 0), (5, 100), (6, 150)]


def test_recovery_does_not_bring_back_epochs_before_the_log_start(tmp_path):
    log = open_log(tmp_path)
    for epoch in (1, 2, 3):
        replicate(log, epoch, 10)
    log.maybe_increment_log_start_offset(25)
    recovered = open_log(tmp_path, needs_recovery=True, log_start_offset=25)
    assert recovered.leader_epoch_cache.entries() == [(3, 25)]


def test_a_compacted_topic_refuses_records_without_a_key(tmp_path):
    """Kafka's LogValidator.validateKey: a compacted topic refuses a producer's batch with a
    keyless record (INVALID_RECORD, Kafka 4.4's message naming the record's index in its
    batch), compressed or not; nothing of the append is written. Tombstones (a key, no
    value) are fine, and a topic that does not compact takes keyless records as before."""
    compacted = open_log(tmp_path, LogConfig(cleanup_policy="compact"))
    assert (
        compacted.append_as_leader(
            make_batch([(b"k", b"v"), (b"k", None)]), leader_epoch=0, now_ms=0
        ).last_offset
        == 1
    )
    for attributes in (0, 1):  # uncompressed, gzip
        keyless = make_batch([(b"k", b"v"), (None, b"v"), (b"k2", b"v")], attributes=attributes)
        with pytest.raises(InvalidRecordError) as refused:
            compacted.append_as_leader(keyless, leader_epoch=0, now_ms=0)
        assert refused.value.error == Error.INVALID_RECORD
        assert str(refused.value) == (
            "One or more records have been rejected due to 1 record errors in total, and only "
            "showing the first three errors at most: [RecordError(batchIndex=1, "
            "message='Compacted topic cannot accept message without key in topic partition "
            "orders-0')]"
        )
    assert compacted.log_end_offset == 2
    plain = open_log(tmp_path, name="plain-0")
    assert append(plain, [(None, b"v")]).last_offset == 0
