from pathlib import Path

from minibroker.protocol.record_batch import validate_batches
from minibroker.storage.log import LogConfig, PartitionLog
from tests.unit.batch_factory import make_batch

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=120)


def open_log(directory: Path, needs_recovery: bool, recovery_point: int = 0) -> PartitionLog:
    return PartitionLog.open(
        directory,
        CONFIG,
        now_ms=0,
        recovery_point=recovery_point,
        needs_recovery=needs_recovery,
    )


def build(tmp_path, batch_count=20) -> PartitionLog:
    log = open_log(tmp_path / "events-0", needs_recovery=False)
    for number in range(batch_count):
        log.append_as_leader(
            make_batch(number % 3 + 1, base_timestamp=1000 + number), leader_epoch=0, now_ms=0
        )
    return log


def snapshot(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def every_offset_readable(log: PartitionLog) -> None:
    for offset in range(log.log_start_offset, log.log_end_offset):
        header = validate_batches(log.read(offset, max_bytes=1))[0]
        assert header.base_offset <= offset <= header.last_offset


def test_garbage_after_the_last_batch_is_cut_by_recovery(tmp_path):
    log = build(tmp_path)
    end = log.log_end_offset
    log.close()
    directory = tmp_path / "events-0"
    clean_files = snapshot(directory)
    active = sorted(directory.glob("*.log"))[-1]
    with open(active, "ab") as file:
        file.write(b"\xff" * 37)
    recovered = open_log(directory, needs_recovery=True)
    assert recovered.log_end_offset == end
    assert active.stat().st_size == len(clean_files[active.name])
    every_offset_readable(recovered)
    recovered.close()
    assert snapshot(directory) == clean_files  # indexes rebuilt byte for byte


def test_a_torn_last_batch_is_removed(tmp_path):
    log = build(tmp_path)
    end_before = log.log_end_offset
    last_records = 19 % 3 + 1  # the 20th batch
    log.close()
    active = sorted((tmp_path / "events-0").glob("*.log"))[-1]
    size = active.stat().st_size
    with open(active, "r+b") as file:
        file.truncate(size - 10)
    recovered = open_log(tmp_path / "events-0", needs_recovery=True)
    assert recovered.log_end_offset == end_before - last_records
    assert active.stat().st_size == size - len(make_batch(last_records))
    every_offset_readable(recovered)
    result = recovered.append_as_leader(make_batch(1), leader_epoch=0, now_ms=0)
    assert result.first_offset == end_before - last_records


def test_corruption_in_an_older_segment_deletes_the_later_ones(tmp_path):
    log = build(tmp_path)
    log.close()
    directory = tmp_path / "events-0"
    segments = sorted(directory.glob("*.log"))
    assert len(segments) >= 3
    data = bytearray(segments[1].read_bytes())
    data[-5] ^= 0xFF  # flip a byte inside the last batch's CRC range
    segments[1].write_bytes(bytes(data))
    recovered = open_log(directory, needs_recovery=True)
    assert recovered.segment_count == 2
    assert [p.name for p in sorted(directory.glob("*.log"))] == [p.name for p in segments[:2]]
    assert recovered.log_end_offset < int(segments[2].stem)
    every_offset_readable(recovered)


def test_segments_below_the_recovery_point_are_not_reread(tmp_path):
    log = build(tmp_path)
    log.close()
    directory = tmp_path / "events-0"
    segments = sorted(directory.glob("*.log"))
    data = bytearray(segments[0].read_bytes())
    data[-5] ^= 0xFF
    segments[0].write_bytes(bytes(data))  # damage that only a CRC check would notice
    recovery_point = int(segments[1].stem)
    recovered = open_log(directory, needs_recovery=True, recovery_point=recovery_point)
    assert recovered.segment_count == len(segments)


def test_a_clean_open_trusts_the_log_but_rebuilds_missing_indexes(tmp_path):
    log = build(tmp_path)
    end = log.log_end_offset
    log.close()
    directory = tmp_path / "events-0"
    clean_files = snapshot(directory)
    for index in list(directory.glob("*.index"))[:2] + list(directory.glob("*.timeindex"))[-1:]:
        index.unlink()
    reopened = open_log(directory, needs_recovery=False)
    assert reopened.log_end_offset == end
    assert reopened.recovery_point == end
    every_offset_readable(reopened)
    reopened.close()
    assert snapshot(directory) == clean_files


def test_clean_open_leaves_a_garbage_tail_that_unclean_open_cuts(tmp_path):
    log = build(tmp_path)
    end = log.log_end_offset
    log.close()
    directory = tmp_path / "events-0"
    active = sorted(directory.glob("*.log"))[-1]
    with open(active, "ab") as file:
        file.write(b"\x00" * 10)
    size = active.stat().st_size
    trusted = open_log(directory, needs_recovery=False)
    assert trusted.log_end_offset == end
    trusted.close()
    assert active.stat().st_size == size
    recovered = open_log(directory, needs_recovery=True, recovery_point=end)
    assert recovered.log_end_offset == end
    assert recovered.recovery_point == end
    assert active.stat().st_size == size - 10


def test_unclean_recovery_point_is_not_advanced(tmp_path):
    log = build(tmp_path)
    log.close()
    recovered = open_log(tmp_path / "events-0", needs_recovery=True, recovery_point=7)
    assert recovered.recovery_point == 7


def test_leftover_files_are_removed_on_open(tmp_path):
    log = build(tmp_path, batch_count=2)
    log.close()
    directory = tmp_path / "events-0"
    (directory / "leader-epoch-checkpoint.tmp").write_text("junk")
    (directory / "00000000000000009999.index").write_bytes(b"")
    (directory / "00000000000000000000.log.deleted").write_bytes(b"")
    open_log(directory, needs_recovery=False).close()
    names = {path.name for path in directory.iterdir()}
    assert not names & {
        "leader-epoch-checkpoint.tmp",
        "00000000000000009999.index",
        "00000000000000000000.log.deleted",
    }


def test_log_start_offset_beyond_the_data_starts_over_empty(tmp_path):
    log = build(tmp_path, batch_count=3)
    log.close()
    reopened = PartitionLog.open(
        tmp_path / "events-0", CONFIG, now_ms=0, log_start_offset=500, needs_recovery=True
    )
    assert (reopened.log_start_offset, reopened.log_end_offset) == (500, 500)
    assert [s.base_offset for s in reopened.segments] == [500]
