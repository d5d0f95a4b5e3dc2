import struct

import pytest

from minibroker.storage.index import CorruptIndexError, OffsetIndex, TimeIndex


def offset_index(tmp_path, base_offset=100, max_size=1024):
    index = OffsetIndex(tmp_path / "x.index", base_offset, max_size)
    index.create_empty()
    return index


def time_index(tmp_path, base_offset=100, max_size=1024):
    index = TimeIndex(tmp_path / "x.timeindex", base_offset, max_size)
    index.create_empty()
    return index


def test_offset_index_lookup_finds_the_largest_entry_at_or_below(tmp_path):
    index = offset_index(tmp_path)
    for offset, position in [(104, 500), (110, 1200), (130, 4000)]:
        index.append(offset, position)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(103) == (100, 0)
    assert index.lookup(104) == (104, 500)
    assert index.lookup(129) == (110, 1200)
    assert index.lookup(10**9) == (130, 4000)


def test_offset_index_file_is_exactly_sized_big_endian_relative_entries(tmp_path):
    index = offset_index(tmp_path)
    index.append(104, 500)
    index.append(110, 1200)
    assert (tmp_path / "x.index").read_bytes() == b""  # not written until asked
    index.write_pending()
    assert (tmp_path / "x.index").read_bytes() == struct.pack(">iiii", 4, 500, 10, 1200)
    index.append(111, 1300)
    index.flush()
    assert (tmp_path / "x.index").stat().st_size == 24


def test_offset_index_refuses_non_increasing_offsets(tmp_path):
    index = offset_index(tmp_path)
    index.append(104, 500)
    with pytest.raises(ValueError):
        index.append(104, 600)


def test_offset_index_truncate_drops_entries_at_or_above(tmp_path):
    index = offset_index(tmp_path)
    for offset, position in [(104, 500), (110, 1200), (130, 4000)]:
        index.append(offset, position)
    index.write_pending()
    index.truncate_to(110)
    assert index.entries == 1
    assert index.lookup(200) == (104, 500)
    assert (tmp_path / "x.index").read_bytes() == struct.pack(">ii", 4, 500)
    index.append(105, 600)
    index.write_pending()
    assert (tmp_path / "x.index").read_bytes() == struct.pack(">iiii", 4, 500, 5, 600)


def test_offset_index_reload_and_sanity_checks(tmp_path):
    index = offset_index(tmp_path)
    index.append(104, 500)
    index.append(110, 1200)
    index.write_pending()
    reloaded = OffsetIndex(tmp_path / "x.index", 100, 1024)
    reloaded.load(log_size=2000)
    assert reloaded.lookup(111) == (110, 1200)
    with pytest.raises(CorruptIndexError, match="past the end"):
        OffsetIndex(tmp_path / "x.index", 100, 1024).load(log_size=1200)
    (tmp_path / "x.index").write_bytes(struct.pack(">iiii", 10, 500, 4, 1200))
    with pytest.raises(CorruptIndexError, match="out of order"):
        OffsetIndex(tmp_path / "x.index", 100, 1024).load(log_size=2000)
    (tmp_path / "x.index").write_bytes(b"\x00" * 7)
    with pytest.raises(CorruptIndexError, match="multiple"):
        OffsetIndex(tmp_path / "x.index", 100, 1024).load(log_size=2000)
    with pytest.raises(FileNotFoundError):
        OffsetIndex(tmp_path / "missing.index", 100, 1024).load(log_size=2000)


def test_offset_index_is_full_at_its_max_size(tmp_path):
    index = offset_index(tmp_path, max_size=20)  # room for two 8-byte entries
    index.append(101, 10)
    assert not index.is_full
    index.append(102, 20)
    assert index.is_full


def test_time_index_only_takes_increasing_timestamps(tmp_path):
    index = time_index(tmp_path)
    index.maybe_append(-1, 101)  # no timestamp: never indexed
    index.maybe_append(1000, 103)
    index.maybe_append(1000, 105)
    index.maybe_append(900, 106)
    index.maybe_append(2000, 110)
    assert index.entries == 2
    assert index.last_entry == (2000, 110)
    index.write_pending()
    assert (tmp_path / "x.timeindex").read_bytes() == struct.pack(">qiqi", 1000, 3, 2000, 10)


def test_time_index_lookup_gives_the_offset_to_scan_from(tmp_path):
    index = time_index(tmp_path)
    index.maybe_append(1000, 103)
    index.maybe_append(2000, 110)
    assert index.lookup(999) == 100  # nothing older: scan from the segment start
    assert index.lookup(1000) == 103
    assert index.lookup(1999) == 103
    assert index.lookup(5000) == 110


def test_time_index_truncate_and_reload(tmp_path):
    index = time_index(tmp_path)
    index.maybe_append(1000, 103)
    index.maybe_append(2000, 110)
    index.write_pending()
    index.truncate_to(110)
    assert index.last_entry == (1000, 103)
    reloaded = TimeIndex(tmp_path / "x.timeindex", 100, 1024)
    reloaded.load()
    assert reloaded.last_entry == (1000, 103)
    (tmp_path / "x.timeindex").write_bytes(struct.pack(">qiqi", 2000, 3, 1000, 10))
    with pytest.raises(CorruptIndexError):
        TimeIndex(tmp_path / "x.timeindex", 100, 1024).load()
