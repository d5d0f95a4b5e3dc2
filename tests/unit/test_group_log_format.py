"""`__consumer_offsets` records in Kafka's layout, and Kafka's group -> partition mapping."""

import pytest

from minibroker.coordinator.group import log_format
from minibroker.coordinator.group.log_format import (
    GroupKey,
    GroupValue,
    MemberRecord,
    OffsetKey,
    OffsetValue,
)
from minibroker.coordinator.runtime_state import java_string_hash, partition_for


@pytest.mark.parametrize(
    ("text", "expected"),
    # Values printed by Java 17's String.hashCode (the last one is a surrogate pair).
    [
        ("", 0),
        ("hello", 99162322),
        ("my-group", -1906497762),
        ("ß€", 15277),
        ("\U0001f600group", -1231696132),
    ],
)
def test_java_string_hash(text, expected):
    assert java_string_hash(text) == expected


def test_partition_for_matches_kafka_including_the_min_value_hash():
    assert partition_for("hello", 50) == 99162322 % 50
    # "polygenelubricants".hashCode() is Integer.MIN_VALUE; Kafka's Utils.abs makes it 0.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("my-group", 50) == 1906497762 % 50


def test_offset_commit_key_and_value_bytes():
    key = log_format.offset_key("g", "t", 3)
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    assert log_format.read_key(key) == OffsetKey("g", "t", 3)
    value = OffsetValue(42, 5, "meta", 1_700_000_000_000)
    encoded = log_format.offset_value(value)
    assert encoded[:2] == b"\x00\x03"
    assert log_format.read_offset_value(encoded) == value


def test_offset_value_v1_with_expire_timestamp_is_read():
    v1 = b"\x00\x01" + (7).to_bytes(8, "big") + b"\x00\x00" + (9).to_bytes(8, "big") * 2
    assert log_format.read_offset_value(v1) == OffsetValue(7, -1, "", 9)


def test_group_metadata_round_trip():
    member = MemberRecord("m-1", "static-1", "client", "/127.0.0.1", 30000, 10000, b"s", b"a")
    value = GroupValue("consumer", 4, "range", "m-1", 1234, (member,))
    assert log_format.read_key(log_format.group_key("g")) == GroupKey("g")
    assert log_format.read_group_value(log_format.group_value(value)) == value


def test_unknown_versions_and_truncation_are_refused():
    with pytest.raises(log_format.RecordFormatError):
        log_format.read_key(b"\x00\x09\x00\x01g")
    with pytest.raises(log_format.RecordFormatError):
        log_format.read_offset_value(b"\x00\x03\x00")


def test_a_key_that_is_not_utf8_is_a_format_error_not_a_crash():
    with pytest.raises(log_format.RecordFormatError):
        log_format.read_key(b"\x00\x02\x00\x01\xff")
