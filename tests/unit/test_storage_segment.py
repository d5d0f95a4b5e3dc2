import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibroker.protocol.record_batch import read_header, stamp_offsets, validate_batches
from minibroker.storage.segment import LogSegment
from tests.unit.batch_factory import make_batch


def open_segment(directory: Path, base_offset=0, index_interval_bytes=0, max_index_size=4096):
    return LogSegment(
        directory,
        base_offset,
        index_interval_bytes=index_interval_bytes,
        max_index_size=max_index_size,
    )


def stamped(records, base_offset, **kwargs) -> bytes:
    batch = bytearray(make_batch(records, **kwargs))
    stamp_offsets(batch, 0, base_offset, 0)
    return bytes(batch)


def fill(segment: LogSegment, record_counts, timestamps=None):
    """Append one batch per count; returns the (base, last) offsets of each batch."""
    offset = segment.base_offset
    ranges = []
    for number, count in enumerate(record_counts):
        timestamp = timestamps[number] if timestamps else 1000 + number
        batch = stamped(count, offset, base_timestamp=timestamp)
        segment.append(batch, [read_header(batch)], now_ms=0)
        ranges.append((offset, offset + count - 1))
        offset += count
    return ranges


def test_files_are_named_by_the_zero_padded_base_offset(tmp_path):
    segment = open_segment(tmp_path, base_offset=42)
    assert sorted(os.listdir(tmp_path)) == [
        "00000000000000000042.index",
        "00000000000000000042.log",
        "00000000000000000042.timeindex",
    ]
    assert all((tmp_path / name).stat().st_size == 0 for name in os.listdir(tmp_path))
    segment.close()


def test_append_is_one_write_of_the_exact_bytes(tmp_path):
    segment = open_segment(tmp_path)
    batches = [stamped(2, 0), stamped(3, 2)]
    data = b"".join(batches)
    segment.append(data, validate_batches(data), now_ms=5)
    assert (tmp_path / "00000000000000000000.log").read_bytes() == data
    assert segment.size == len(data)
    assert segment.next_offset == 5
    assert segment.rolling_base_ms == 5
    segment.close()


def test_read_returns_whole_batches_from_the_one_containing_the_offset(tmp_path):
    segment = open_segment(tmp_path, base_offset=10)
    fill(segment, [3, 3, 3])
    for offset, expected_base in [(10, 10), (11, 10), (12, 10), (13, 13), (18, 16)]:
        result = segment.read(offset, max_bytes=10**6)
        assert validate_batches(result.data)[0].base_offset == expected_base
        assert result.reached_end
    assert segment.read(19, max_bytes=10**6) is None
    segment.close()


def test_read_limits(tmp_path):
    segment = open_segment(tmp_path)
    fill(segment, [1, 1, 1])
    one = len(stamped(1, 0))
    assert len(segment.read(0, max_bytes=one * 2).data) == one * 2
    assert len(segment.read(0, max_bytes=one * 2 + 5).data) == one * 2
    assert segment.read(0, max_bytes=one - 1).data == b""
    assert len(segment.read(0, max_bytes=one - 1, min_one_batch=True).data) == one
    limited = segment.read(0, max_bytes=10**6, max_offset=2)
    assert [h.base_offset for h in validate_batches(limited.data)] == [0, 1]
    assert not limited.reached_end
    assert segment.read(2, max_bytes=10**6, max_offset=2).data == b""
    segment.close()


def test_truncate_to_removes_the_batch_holding_the_offset(tmp_path):
    segment = open_segment(tmp_path)
    fill(segment, [2, 2, 2], timestamps=[1000, 3000, 2000])
    removed = segment.truncate_to(3)
    assert segment.next_offset == 2
    assert removed == 2 * len(stamped(2, 0))
    assert segment.max_timestamp == 1000
    assert segment.truncate_to(10) == 0
    segment.close()


def test_recover_cuts_garbage_and_rebuilds_identical_indexes(tmp_path):
    segment = open_segment(tmp_path, index_interval_bytes=150)
    fill(segment, [1, 4, 2, 7, 1, 3, 5], timestamps=[5, 3, 9, 9, 12, 1, 20])
    segment.close()
    index_bytes = (tmp_path / "00000000000000000000.index").read_bytes()
    time_bytes = (tmp_path / "00000000000000000000.timeindex").read_bytes()
    assert index_bytes and time_bytes
    log_path = tmp_path / "00000000000000000000.log"
    good_size = log_path.stat().st_size
    with open(log_path, "ab") as file:
        file.write(b"\x00\x01garbage" * 10)
    segment = open_segment(tmp_path, index_interval_bytes=150)
    assert segment.recover() == 90
    assert log_path.stat().st_size == good_size
    assert segment.next_offset == 23
    assert (segment.max_timestamp, segment.offset_of_max_timestamp) == (20, 22)
    segment.close()
    assert (tmp_path / "00000000000000000000.index").read_bytes() == index_bytes
    assert (tmp_path / "00000000000000000000.timeindex").read_bytes() == time_bytes


def test_reopening_without_recovery_restores_state_from_the_indexes(tmp_path):
    segment = open_segment(tmp_path, index_interval_bytes=100)
    fill(segment, [2] * 20, timestamps=[100 + (i * 7) % 13 for i in range(20)])
    expected = (segment.next_offset, segment.max_timestamp, segment.offset_of_max_timestamp)
    segment.close()
    reopened = open_segment(tmp_path, index_interval_bytes=100)
    assert not reopened.needs_index_rebuild
    assert (reopened.next_offset, reopened.max_timestamp, reopened.offset_of_max_timestamp) == (
        expected
    )
    reopened.close()
    (tmp_path / "00000000000000000000.timeindex").unlink()
    assert open_segment(tmp_path, index_interval_bytes=100).needs_index_rebuild


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    record_counts=st.lists(st.integers(1, 6), min_size=1, max_size=40),
    index_interval_bytes=st.sampled_from([0, 1, 100, 300, 1000, 4096]),
    base_offset=st.integers(0, 10**12),
)
def test_every_offset_is_found_in_its_batch(record_counts, index_interval_bytes, base_offset):
    with tempfile.TemporaryDirectory() as directory:
        segment = open_segment(Path(directory), base_offset, index_interval_bytes)
        ranges = fill(segment, record_counts)
        for check in (segment, None):
            if check is None:  # again after recovery rebuilt the indexes
                segment.recover()
            for base, last in ranges:
                for offset in range(base, last + 1):
                    _, header = segment.find_batch(offset)
                    assert (header.base_offset, header.last_offset) == (base, last)
                    data = segment.read(offset, max_bytes=1).data
                    assert data == b"" or read_header(data).base_offset == base
        segment.close()


def test_recover_stops_where_offsets_go_backwards(tmp_path):
    segment = open_segment(tmp_path, base_offset=10)
    fill(segment, [2, 2])
    segment.close()
    log_path = tmp_path / "00000000000000000010.log"
    intact_size = log_path.stat().st_size
    with open(log_path, "ab") as file:
        file.write(stamped(1, 11))  # a valid batch, but offset 11 is already taken
        file.write(stamped(1, 14))
    segment = open_segment(tmp_path, base_offset=10)
    assert segment.recover() == 2 * len(stamped(1, 0))
    assert log_path.stat().st_size == intact_size
    assert segment.next_offset == 14
    segment.close()


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_a_growing_segment_reserves_blocks_ahead_and_gives_them_back_when_sealed(tmp_path):
    """Issue 40: past PREALLOCATE_FROM_BYTES an append reserves blocks ahead of the file's end
    (fallocate, the size left alone), so that the write system call has none to reserve; a
    seal frees what lies past the end and keeps the file's modification time."""
    import pytest

    from minibroker.storage import segment as segment_module

    if segment_module._fallocate is None:
        pytest.skip("no fallocate in this libc")
    segment = open_segment(tmp_path, index_interval_bytes=4096, max_index_size=1 << 20)
    value = b"v" * 60_000
    written = []
    offset = 0
    while segment.size < segment_module.PREALLOCATE_FROM_BYTES + 100_000:
        batch = stamped([(None, value)], offset)
        segment.append(batch, [read_header(batch)], now_ms=0)
        written.append(batch)
        offset += 1
        if segment.size < segment_module.PREALLOCATE_FROM_BYTES:
            assert segment.reserved_to <= segment.size  # a small segment reserves nothing
    # As much again as it held when it asked, past the end; the file's size is its data.
    assert segment.reserved_to > segment.size
    assert segment.reserved_to >= 2 * segment_module.PREALLOCATE_FROM_BYTES
    assert os.stat(segment.log_path).st_size == segment.size
    segment_module.RESERVER.wait_idle()  # the reserver thread does the fallocate
    if _allocated(segment.log_path) < segment.reserved_to:
        pytest.skip("this filesystem does not reserve blocks (fallocate refused)")
    assert segment.read(0, max_bytes=1 << 30).data == b"".join(written)
    os.utime(segment.log_path, ns=(1_000_000_000_000, 1_000_000_000_000))
    segment.seal_indexes()
    stat = os.stat(segment.log_path)
    assert stat.st_size == segment.size and segment.reserved_to == segment.size
    assert _allocated(segment.log_path) < segment.size + (64 << 10), "the reserve is freed"
    assert stat.st_mtime_ns == 1_000_000_000_000, "the seal keeps the modification time"
    segment.close()
    reopened = open_segment(tmp_path, index_interval_bytes=4096, max_index_size=1 << 20)
    assert reopened.read(0, max_bytes=1 << 30).data == b"".join(written)
    reopened.close()


def test_a_truncation_frees_the_reserve_past_its_new_end(tmp_path):
    from minibroker.storage import segment as segment_module

    segment = open_segment(tmp_path, index_interval_bytes=4096, max_index_size=1 << 20)
    value = b"t" * 100_000
    for offset in range(15):
        batch = stamped([(None, value)], offset)
        segment.append(batch, [read_header(batch)], now_ms=0)
    assert segment.size > segment_module.PREALLOCATE_FROM_BYTES
    segment.truncate_to(3)
    assert segment.reserved_to == segment.size == os.stat(segment.log_path).st_size
    assert _allocated(segment.log_path) < segment.size + (64 << 10)
    segment.close()


def test_no_blocks_are_reserved_when_the_broker_says_none(tmp_path):
    from minibroker.storage import segment as segment_module

    before = segment_module.PREALLOCATE_MAX_BYTES
    segment_module.set_reserve_max_bytes(0)  # log.segment.reserve.max.bytes=0
    try:
        segment = open_segment(tmp_path, index_interval_bytes=4096, max_index_size=1 << 20)
        for offset in range(15):
            batch = stamped([(None, b"n" * 100_000)], offset)
            segment.append(batch, [read_header(batch)], now_ms=0)
        assert segment.size > segment_module.PREALLOCATE_FROM_BYTES
        assert segment.reserved_to <= segment.size
        assert _allocated(segment.log_path) < segment.size + (64 << 10)
        segment.close()
    finally:
        segment_module.set_reserve_max_bytes(before)


def test_the_reservation_runs_on_the_reserver_thread_and_a_seal_waits_for_it(tmp_path, monkeypatch):
    """The fallocate can wait on the disk (a block group's bitmap), so an append only asks
    for it: the append returns while the reservation is still held up, and a seal after it
    waits for it before freeing what lies past the end."""
    import threading

    import pytest

    from minibroker.storage import segment as segment_module

    real = segment_module._fallocate
    if real is None:
        pytest.skip("no fallocate in this libc")
    gate = threading.Event()
    callers: list[str] = []

    def held_fallocate(fd, mode, start, length):
        callers.append(threading.current_thread().name)
        gate.wait()
        return real(fd, mode, start, length)

    monkeypatch.setattr(segment_module, "_fallocate", held_fallocate)
    segment = open_segment(tmp_path, index_interval_bytes=4096, max_index_size=1 << 20)
    try:
        offset = 0
        while segment.reserved_to <= segment.size:
            batch = stamped([(None, b"r" * 100_000)], offset)
            segment.append(batch, [read_header(batch)], now_ms=0)
            offset += 1
        # The append that asked has returned, and more can follow, while the fallocate waits.
        batch = stamped([(None, b"r" * 100_000)], offset)
        segment.append(batch, [read_header(batch)], now_ms=0)
        assert not segment._reserving.is_set()
    finally:
        gate.set()  # the thread serves every segment of the process: never leave it held
    segment.seal_indexes()
    assert callers and set(callers) == {"segment-reserver"}
    assert segment.reserved_to == segment.size == os.stat(segment.log_path).st_size
    assert _allocated(segment.log_path) < segment.size + (64 << 10), "the reserve is freed"
    segment.close()


def test_a_growing_segment_writes_its_index_entries_as_it_goes(tmp_path):
    """Issue 40: a roll used to write every index entry of the segment at once (200 ms on
    the loop for a 1 GiB segment); appends now write them INDEX_WRITE_ENTRIES at a time, and
    the files hold exactly what memory holds, in Kafka's layout."""
    import struct

    from minibroker.storage import segment as segment_module

    segment = open_segment(tmp_path, index_interval_bytes=10, max_index_size=1 << 20)
    offset = 0
    while segment.offset_index.entries <= segment_module.INDEX_WRITE_ENTRIES:
        batch = stamped([(None, b"i" * 20)], offset, base_timestamp=1_000 + offset)
        segment.append(batch, [read_header(batch)], now_ms=0)
        offset += 1
    # Written at the append that reached INDEX_WRITE_ENTRIES, before any seal or flush.
    on_disk = segment.offset_index.path.read_bytes()
    assert len(on_disk) == 8 * segment_module.INDEX_WRITE_ENTRIES
    assert segment.offset_index.pending == 1
    times = segment.time_index.path.read_bytes()
    assert len(times) == 12 * segment_module.INDEX_WRITE_ENTRIES
    segment.seal_indexes()
    entries = list(struct.iter_unpack(">ii", segment.offset_index.path.read_bytes()))
    assert len(entries) == segment.offset_index.entries
    for relative, position in entries:
        found = segment.find_batch(relative)
        assert found is not None and found[0] == position
    stamps = list(struct.iter_unpack(">qi", segment.time_index.path.read_bytes()))
    assert [relative for _, relative in stamps] == [relative for relative, _ in entries]
    assert all(stamp == 1_000 + relative for stamp, relative in stamps)
    segment.close()


def test_a_reserve_left_by_a_crash_is_freed_by_the_next_seal(tmp_path):
    """A segment whose process died before it was sealed keeps its blocks past the end; the
    next run's segment sees them (a megabyte or more allocated past the size) and its seal
    frees them, data and modification time untouched."""
    import pytest

    from minibroker.storage import segment as segment_module

    segment = open_segment(tmp_path, index_interval_bytes=4096, max_index_size=1 << 20)
    written = []
    for offset in range(15):  # 1.5 MB, with 3 MB reserved
        batch = stamped([(None, b"c" * 100_000)], offset)
        segment.append(batch, [read_header(batch)], now_ms=0)
        written.append(batch)
    segment_module.RESERVER.wait_idle()
    if _allocated(segment.log_path) < segment.size + (1 << 20):
        pytest.skip("this filesystem does not reserve blocks (fallocate refused)")
    segment.offset_index.write_pending()
    segment.time_index.write_pending()
    segment.close_descriptor()  # no seal: as a kill leaves it
    os.utime(segment.log_path, ns=(1_000_000_000_000, 1_000_000_000_000))
    again = open_segment(tmp_path, index_interval_bytes=4096, max_index_size=1 << 20)
    assert again.reserved_to > again.size
    again.seal_indexes()
    assert _allocated(again.log_path) < again.size + (64 << 10), "the reserve is freed"
    assert os.stat(again.log_path).st_mtime_ns == 1_000_000_000_000
    assert again.read(0, max_bytes=1 << 30).data == b"".join(written)
    again.close()
