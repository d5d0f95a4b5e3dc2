"""Builds genuine record batch v2 bytes for tests, as a Kafka producer would send them.

Records are encoded field by field (zigzag varints, null keys/values as length -1, no
headers) so that real clients could decode what the tests push through the broker. With the
gzip codec in `attributes` the records section is really gzip-compressed; the other codecs
(snappy, lz4, zstd) need libraries the tests do not depend on, so for them only the attribute
bits are set: good enough for the broker, which never decodes records.
"""

import gzip
import struct

import crc32c

DEFAULT_TIMESTAMP = 1_700_000_000_000
_GZIP = 1


def _zigzag_varint(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = encoded & 0x7F
        encoded >>= 7
        if encoded:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(data: bytes | None) -> bytes:
    if data is None:
        return _zigzag_varint(-1)
    return _zigzag_varint(len(data)) + data


def encode_record(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None
) -> bytes:
    body = (
        b"\x00"  # record attributes (unused)
        + _zigzag_varint(timestamp_delta)
        + _zigzag_varint(offset_delta)
        + _bytes_field(key)
        + _bytes_field(value)
        + _zigzag_varint(0)  # no headers
    )
    return _zigzag_varint(len(body)) + body


def make_batch(
    records: list[tuple[bytes | None, bytes | None]] | int,
    base_offset: int = 0,
    base_timestamp: int = DEFAULT_TIMESTAMP,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    *,
    timestamps: list[int] | None = None,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One v2 batch; `records` is a list of (key, value) or a count of generated values.

    Every record gets `base_timestamp` unless `timestamps` gives one absolute timestamp per
    record (then baseTimestamp is the first of them, as the Java producer does).
    """
    if isinstance(records, int):
        records = [(None, b"value-%d" % index) for index in range(records)]
    if not records:
        raise ValueError("a batch needs at least one record")
    if timestamps is None:
        timestamps = [base_timestamp] * len(records)
    if len(timestamps) != len(records):
        raise ValueError("one timestamp per record")
    first_timestamp = timestamps[0]
    body = b"".join(
        encode_record(index, timestamp - first_timestamp, key, value)
        for index, ((key, value), timestamp) in enumerate(zip(records, timestamps, strict=True))
    )
    if attributes & 0x07 == _GZIP:
        body = gzip.compress(body)
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            len(records) - 1,
            first_timestamp,
            max(timestamps),
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + body
    )
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, then the rest
    return (
        struct.pack(
            ">qiibI",
            base_offset,
            batch_length,
            partition_leader_epoch,
            2,
            crc32c.crc32c(after_crc),
        )
        + after_crc
    )
