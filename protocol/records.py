"""Records inside a v2 batch: encode and decode, for the few places that need them.

The produce and fetch paths never come here (they work on batch headers only). What does: the
group coordinator, which writes its own `__consumer_offsets` batches and reads them back when
it loads a partition's groups, and the log cleaner, which keeps the latest record per key.
Compressed batches are decoded through the codec libraries clients use (gzip from the
standard library; snappy, lz4 and zstd when installed), and written back with the same codec.

Record layout (varints are zigzag-encoded): length, attributes i8, timestampDelta,
offsetDelta, keyLength, key, valueLength, value, headerCount, then per header keyLength, key,
valueLength, value. A length of -1 is null.
"""

import gzip
import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import crc32c

from minibroker.protocol.buffers import Buffer
from minibroker.protocol.record_batch import (
    COMPRESSION_CODEC_MASK,
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    read_header,
)

NO_PRODUCER_ID = -1

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# After the CRC: attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId,
# producerEpoch, baseSequence, recordsCount.
_AFTER_CRC = struct.Struct(">hiqqqhii")
# Before it: baseOffset, batchLength, partitionLeaderEpoch, magic.
_BEFORE_CRC = struct.Struct(">qiib")


class RecordError(ValueError):
    """Records that do not decode (truncated, a bad varint, an unknown codec)."""


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def _varint(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while encoded > 0x7F:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


def read_varint(data: Buffer, pos: int) -> tuple[int, int]:
    """A zigzag varint (as record fields are encoded) at ``pos``: (value, next position).
    Raises RecordError (a ValueError) when the data ends inside it or it is too long."""
    raw = 0
    shift = 0
    while True:
        try:
            byte = data[pos]
        except IndexError:
            raise RecordError("record truncated inside a varint") from None
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise RecordError("varint longer than 10 bytes")


def _nullable(data: bytes | None) -> bytes:
    return _varint(-1) if data is None else _varint(len(data)) + data


def _read_nullable(data: Buffer, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(data, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(data):
        raise RecordError("record field runs past the batch")
    return bytes(data[pos:end]), end


def _encode_record(offset_delta: int, timestamp_delta: int, record: Record) -> bytes:
    headers = b"".join(
        _nullable(name.encode()) + _nullable(value) for name, value in record.headers
    )
    body = (
        b"\x00"
        + _varint(timestamp_delta)
        + _varint(offset_delta)
        + _nullable(record.key)
        + _nullable(record.value)
        + _varint(len(record.headers))
        + headers
    )
    return _varint(len(body)) + body


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        return gzip.compress(data)
    if codec == SNAPPY:
        import snappy

        block: bytes = snappy.compress(data)  # python-snappy has no types
        return _xerial_snappy(block)
    if codec == LZ4:
        import lz4.frame

        framed: bytes = lz4.frame.compress(data)  # lz4 has no types
        return framed
    if codec == ZSTD:
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    raise RecordError(f"unknown compression codec {codec}")


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _xerial_snappy(block: bytes) -> bytes:
    """Kafka's Java clients frame snappy in xerial's stream format; librdkafka reads both."""
    return _XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block


def decompress(codec: int, data: bytes) -> bytes:
    try:
        if codec == NONE:
            return data
        if codec == GZIP:
            return gzip.decompress(data)
        if codec == SNAPPY:
            import snappy

            if data.startswith(_XERIAL_MAGIC):
                out, pos = bytearray(), 16
                while pos < len(data):
                    (length,) = struct.unpack_from(">i", data, pos)
                    out += snappy.decompress(data[pos + 4 : pos + 4 + length])
                    pos += 4 + length
                return bytes(out)
            block: bytes = snappy.decompress(data)  # python-snappy has no types
            return block
        if codec == LZ4:
            import lz4.frame

            framed: bytes = lz4.frame.decompress(data)  # lz4 has no types
            return framed
        if codec == ZSTD:
            import zstandard

            return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    except ImportError as missing:
        raise RecordError(f"{CODEC_NAMES[codec]} batches need {missing.name}") from None
    except RecordError:
        raise
    except Exception as error:
        raise RecordError(f"cannot decompress {CODEC_NAMES.get(codec)}: {error}") from None
    raise RecordError(f"unknown compression codec {codec}")


def decode_records(batch: Buffer) -> list[Record]:
    """Every record of one v2 batch (which starts at ``batch[0]``), with absolute offsets and
    timestamps; compressed batches are decompressed first."""
    header = read_header(batch, 0)
    payload = bytes(batch[HEADER_SIZE : header.size])
    payload = decompress(header.attributes & COMPRESSION_CODEC_MASK, payload)
    records = []
    pos = 0
    for _ in range(header.records_count):
        length, pos = read_varint(payload, pos)
        end = pos + length
        if end > len(payload):
            raise RecordError("record runs past the batch")
        timestamp_delta, field = read_varint(payload, pos + 1)
        offset_delta, field = read_varint(payload, field)
        key, field = _read_nullable(payload, field)
        value, field = _read_nullable(payload, field)
        header_count, field = read_varint(payload, field)
        headers = []
        for _ in range(header_count):
            name, field = _read_nullable(payload, field)
            header_value, field = _read_nullable(payload, field)
            headers.append(((name or b"").decode("utf-8", "replace"), header_value))
        records.append(
            Record(
                header.base_offset + offset_delta,
                header.base_timestamp + timestamp_delta,
                key,
                value,
                tuple(headers),
            )
        )
        pos = end
    return records


def _framed(base_offset: int, partition_leader_epoch: int, after_crc: bytes) -> bytes:
    """A whole v2 batch: the fields before the CRC, the CRC-32C of the rest, the rest."""
    batch_length = len(after_crc) + HEADER_SIZE - LOG_OVERHEAD - _AFTER_CRC.size
    return (
        _BEFORE_CRC.pack(base_offset, batch_length, partition_leader_epoch, CURRENT_MAGIC)
        + struct.pack(">I", crc32c.crc32c(after_crc))
        + after_crc
    )


def encode_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    codec: int = NONE,
    attributes: int = 0,
    partition_leader_epoch: int = -1,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    last_offset_delta: int | None = None,
) -> bytes:
    """One v2 batch of ``records``; their offsets are kept relative to ``base_offset`` (the
    cleaner keeps gaps), and ``last_offset_delta`` may extend past the last record, as a
    compacted batch keeps the offset range it had."""
    records = list(records)
    if not records:
        raise ValueError("a batch needs at least one record")
    first_timestamp = records[0].timestamp
    body = b"".join(
        _encode_record(record.offset - base_offset, record.timestamp - first_timestamp, record)
        for record in records
    )
    body = compress(codec, body)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset
    after_crc = (
        _AFTER_CRC.pack(
            (attributes & ~COMPRESSION_CODEC_MASK) | codec,
            last_offset_delta,
            first_timestamp,
            max(record.timestamp for record in records),
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + body
    )
    return _framed(base_offset, partition_leader_epoch, after_crc)


# Attributes bit 6 (Kafka 3.1+, KIP-534): the batch's baseTimestamp holds the time after which
# the cleaner may remove the tombstones (and transaction markers) in it.
DELETE_HORIZON_FLAG = 0x40


class RawRecord(NamedTuple):
    """One record of a batch as the log cleaner sees it: the fields it decides on, and the
    encoded bytes from keyLength to the end of the record (key, value, headers) so that a
    retained record is written back byte for byte (header names are not round-tripped
    through str)."""

    offset: int
    timestamp: int
    key: bytes | None
    has_value: bool
    attributes: int
    tail: bytes


def decode_raw_records(batch: Buffer) -> list[RawRecord]:
    """Every record of one v2 batch as RawRecord, decompressing first if need be."""
    return list(iter_raw_records(batch))


def iter_raw_records(batch: Buffer) -> Iterator[RawRecord]:
    """decode_raw_records one record at a time (the batch is decompressed at the start)."""
    header = read_header(batch, 0)
    payload = decompress(
        header.attributes & COMPRESSION_CODEC_MASK, bytes(batch[HEADER_SIZE : header.size])
    )
    pos = 0
    for _ in range(header.records_count):
        length, pos = read_varint(payload, pos)
        end = pos + length
        if end > len(payload) or length < 1:
            raise RecordError("record runs past the batch")
        attributes = payload[pos]
        timestamp_delta, field = read_varint(payload, pos + 1)
        offset_delta, field = read_varint(payload, field)
        tail_start = field
        key, field = _read_nullable(payload, field)
        value_length, _ = read_varint(payload, field)
        yield RawRecord(
            header.base_offset + offset_delta,
            header.base_timestamp + timestamp_delta,
            key,
            value_length >= 0,
            attributes,
            payload[tail_start:end],
        )
        pos = end


def encode_raw_batch(
    records: list[RawRecord],
    *,
    base_offset: int,
    last_offset_delta: int,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    partition_leader_epoch: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> bytes:
    """A v2 batch of `records` (possibly none: a header-only batch, as the cleaner keeps for
    producer state), compressed with the codec `attributes` names; offset and timestamp
    deltas are taken against `base_offset` and `base_timestamp`."""
    body = b"".join(
        _varint(len(encoded)) + encoded
        for encoded in (
            bytes((record.attributes,))
            + _varint(record.timestamp - base_timestamp)
            + _varint(record.offset - base_offset)
            + record.tail
            for record in records
        )
    )
    codec = attributes & COMPRESSION_CODEC_MASK
    if records:
        body = compress(codec, body)
    after_crc = (
        _AFTER_CRC.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + body
    )
    return _framed(base_offset, partition_leader_epoch, after_crc)


def iter_record_keys(batch: Buffer) -> Iterator[tuple[int, bytes | None]]:
    """(offset, key) of each record of one v2 batch, in turn (the batch is decompressed at
    the start): what the log cleaner's offset map needs, without the rest of each record."""
    header = read_header(batch, 0)
    payload = decompress(
        header.attributes & COMPRESSION_CODEC_MASK, bytes(batch[HEADER_SIZE : header.size])
    )
    pos = 0
    base_offset = header.base_offset
    for _ in range(header.records_count):
        length, pos = read_varint(payload, pos)
        end = pos + length
        if end > len(payload) or length < 1:
            raise RecordError("record runs past the batch")
        _, field = read_varint(payload, pos + 1)  # timestampDelta
        offset_delta, field = read_varint(payload, field)
        key, _ = _read_nullable(payload, field)
        yield base_offset + offset_delta, key
        pos = end


def recompress_batch(batch: Buffer, codec: int) -> bytes:
    """The same v2 batch with its records compressed with ``codec`` instead: every header
    field but the attributes' codec bits (and so the length and CRC) is kept, as Kafka's
    LogValidator rebuilds a batch whose codec differs from the topic's compression.type."""
    header = read_header(batch, 0)
    return encode_raw_batch(
        decode_raw_records(batch),
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        attributes=(header.attributes & ~COMPRESSION_CODEC_MASK) | codec,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        partition_leader_epoch=header.partition_leader_epoch,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
    )
