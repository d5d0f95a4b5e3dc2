import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibroker.protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidRecordBatch,
    read_header,
    scan_valid_batches,
    set_log_append_time,
    stamp_offsets,
    validate_batches,
)
from tests.unit.batch_factory import make_batch

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

records_strategy = st.lists(
    st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=40)),
    min_size=1,
    max_size=8,
)


def crc_is_valid(batch: bytes | bytearray, pos: int = 0) -> bool:
    header = read_header(batch, pos)
    return crc32c.crc32c(bytes(batch[pos + ATTRIBUTES_OFFSET : pos + header.size])) == header.crc


@FAST
@given(
    records=records_strategy,
    base_offset=st.integers(0, 2**40),
    base_timestamp=st.integers(0, 2**42),
    producer_id=st.integers(-1, 2**40),
    producer_epoch=st.integers(-1, 2**15 - 1),
    base_sequence=st.integers(-1, 2**31 - 1),
    attributes=st.sampled_from([0, 1, 2, 3, 4, 0x10, 0x11]),
)
def test_header_view_round_trip(
    records, base_offset, base_timestamp, producer_id, producer_epoch, base_sequence, attributes
):
    batch = make_batch(
        records,
        base_offset=base_offset,
        base_timestamp=base_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        attributes=attributes,
    )
    (header,) = validate_batches(batch)
    assert header == read_header(batch)
    assert header.base_offset == base_offset
    assert header.size == len(batch)
    assert header.magic == 2
    assert header.records_count == len(records)
    assert header.last_offset_delta == len(records) - 1
    assert header.last_offset == base_offset + len(records) - 1
    assert header.base_timestamp == header.max_timestamp == base_timestamp
    assert (header.producer_id, header.producer_epoch) == (producer_id, producer_epoch)
    assert header.base_sequence == base_sequence
    assert header.compression == attributes & 7
    assert header.is_transactional == bool(attributes & 0x10)
    assert not header.is_control
    assert not header.uses_log_append_time


@FAST
@given(
    records=records_strategy,
    new_base_offset=st.integers(0, 2**62),
    epoch=st.integers(-1, 2**31 - 1),
)
def test_stamping_keeps_the_crc_valid(records, new_base_offset, epoch):
    batch = bytearray(make_batch(records))
    stamp_offsets(batch, 0, new_base_offset, epoch)
    (header,) = validate_batches(batch)
    assert header.base_offset == new_base_offset
    assert header.partition_leader_epoch == epoch


@FAST
@given(records=records_strategy, data=st.data())
def test_any_flipped_byte_in_the_crc_range_is_detected(records, data):
    batch = bytearray(make_batch(records))
    position = data.draw(st.integers(ATTRIBUTES_OFFSET, len(batch) - 1))
    flip = data.draw(st.integers(1, 255))
    batch[position] ^= flip
    with pytest.raises(InvalidRecordBatch):
        validate_batches(batch)


def test_several_batches_are_validated_in_order():
    batches = [make_batch(n, base_offset=0) for n in (1, 3, 2)]
    headers = validate_batches(b"".join(batches))
    assert [h.records_count for h in headers] == [1, 3, 2]


@pytest.mark.parametrize(
    "mangle, reason",
    [
        (lambda b: b"", "empty"),
        (lambda b: b[:-1], "incomplete"),
        (lambda b: b + b"\x00", "truncated record batch header"),
        (lambda b: b + b[:20], "truncated"),
        (lambda b: b[:16] + b"\x01" + b[17:], "magic 1"),
        (lambda b: b[:8] + struct.pack(">i", 48) + b[12:], "less than"),
        (lambda b: b[:17] + b"\x00\x00\x00\x00" + b[21:], "CRC"),
    ],
)
def test_malformed_buffers_are_refused(mangle, reason):
    with pytest.raises(InvalidRecordBatch, match=reason):
        validate_batches(mangle(make_batch(2)))


def test_negative_last_offset_delta_is_refused():
    batch = bytearray(make_batch(1))
    struct.pack_into(">i", batch, 23, -1)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    with pytest.raises(InvalidRecordBatch, match="negative lastOffsetDelta"):
        validate_batches(batch)


def test_scan_stops_silently_at_the_first_bad_batch():
    good = [make_batch(1), make_batch(2)]
    torn = make_batch(3)[:-5]
    buffer = b"".join(good) + torn
    found = list(scan_valid_batches(buffer))
    assert [pos for pos, _ in found] == [0, len(good[0])]
    assert list(scan_valid_batches(buffer, len(good[0]) + len(good[1]))) == []
    assert list(scan_valid_batches(b"")) == []


def test_log_append_time_sets_timestamps_and_reseals_the_crc():
    batch = bytearray(make_batch(3, base_timestamp=1000, attributes=0x01))
    set_log_append_time(batch, 0, 99_999)
    (header,) = validate_batches(batch)
    assert header.uses_log_append_time
    assert header.max_timestamp == header.base_timestamp == 99_999
    assert header.compression == 1
    assert crc_is_valid(batch)


def test_log_append_time_in_a_batch_that_is_not_first():
    first, second = make_batch(1), make_batch(2)
    buffer = bytearray(first + second)
    set_log_append_time(buffer, len(first), 5)
    headers = validate_batches(buffer)
    assert not headers[0].uses_log_append_time
    assert headers[1].uses_log_append_time and headers[1].max_timestamp == 5


def test_header_flags_and_sizes():
    header = BatchHeader(10, 100, 0, 2, 0, 0x08 | 0x20 | 0x03, 4, 0, 0, 1, 0, 7, 5)
    assert header.size == 100 + LOG_OVERHEAD
    assert header.last_offset == 14
    assert header.uses_log_append_time and header.is_control and not header.is_transactional
    assert header.compression == 3
    assert header.last_sequence == 11


@pytest.mark.parametrize(
    "base_sequence, delta, expected",
    [(-1, 5, -1), (0, 0, 0), (2**31 - 1, 0, 2**31 - 1), (2**31 - 1, 1, 0), (2**31 - 3, 4, 1)],
)
def test_last_sequence_wraps_like_kafka(base_sequence, delta, expected):
    header = BatchHeader(0, 49, 0, 2, 0, 0, delta, 0, 0, 1, 0, base_sequence, delta + 1)
    assert header.last_sequence == expected


def test_read_header_of_a_short_buffer_raises():
    with pytest.raises(InvalidRecordBatch):
        read_header(b"\x00" * (HEADER_SIZE - 1))


def test_factory_encodes_records_as_kafka_does():
    batch = make_batch([(b"k", b"v"), (None, None)], base_timestamp=1000)
    records = batch[HEADER_SIZE:]
    # zigzag varints: length 8, attributes 0, deltas (0, 0), key "k", value "v", no headers
    assert records[:9] == bytes([16, 0, 0, 0, 2]) + b"k" + bytes([2]) + b"v" + bytes([0])
    # length 6, attributes 0, deltas (0, 1), null key and value (-1), no headers
    assert records[9:] == bytes([12, 0, 0, 2, 1, 1, 0])
