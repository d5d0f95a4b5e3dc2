"""A view of Kafka record batch v2 headers: validation, offset stamping, LogAppendTime.

The broker never decodes individual records on its data path: a produce request's batches are
checked (length, magic, CRC-32C), stamped with their offsets and leader epoch in place, and
written to disk as they came; fetches hand the same bytes back. Everything here therefore
works on the fixed 61-byte header only, which is enough to know a batch's offsets, timestamps,
producer and sequence numbers without touching its (possibly compressed) records.

Layout (all big-endian), with the CRC covering bytes 21 to the end of the batch:

    baseOffset i64 @0, batchLength i32 @8, partitionLeaderEpoch i32 @12, magic i8 @16,
    crc u32 @17, attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp i64 @27,
    maxTimestamp i64 @35, producerId i64 @43, producerEpoch i16 @51, baseSequence i32 @53,
    recordsCount i32 @57, records @61
"""

import mmap
import struct
from collections.abc import Generator
from typing import NamedTuple

import crc32c

from minibroker.protocol.buffers import Buffer, WritableBuffer

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
HEADER_SIZE = 61

# baseOffset and batchLength precede what batchLength counts.
LOG_OVERHEAD = 12
# The smallest batchLength a v2 batch can have: a header with no records.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
CURRENT_MAGIC = 2

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20

NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

_SEQUENCE_MODULUS = 2**31

_HEADER = struct.Struct(">qiibIhiqqqhii")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
assert _HEADER.size == HEADER_SIZE


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> int:
        """Codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def uses_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap to 0 after 2**31 - 1, as in Kafka."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % _SEQUENCE_MODULUS


class InvalidRecordBatch(ValueError):
    """The bytes are not a sequence of complete, intact v2 record batches."""


def read_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """The header of the batch starting at `pos`; nothing is checked beyond its presence."""
    try:
        return BatchHeader._make(_HEADER.unpack_from(buf, pos))
    except struct.error:
        raise InvalidRecordBatch(
            f"truncated record batch header at position {pos}: "
            f"{max(len(buf) - pos, 0)} bytes where {HEADER_SIZE} are needed"
        ) from None


def _checked_header(view: memoryview, pos: int) -> BatchHeader:
    """The header at `pos` after checking the batch's framing, magic and CRC."""
    available = len(view) - pos
    header = read_header(view, pos)
    if header.batch_length < MIN_BATCH_LENGTH:
        raise InvalidRecordBatch(
            f"record batch at position {pos} has length {header.batch_length}, "
            f"less than the {MIN_BATCH_LENGTH} bytes of a v2 batch header"
        )
    if header.size > available:
        raise InvalidRecordBatch(
            f"record batch at position {pos} claims {header.size} bytes "
            f"but only {available} remain: the batch is incomplete"
        )
    if header.magic != CURRENT_MAGIC:
        raise InvalidRecordBatch(
            f"record batch at position {pos} has magic {header.magic}; only v2 batches "
            f"(magic {CURRENT_MAGIC}) are supported"
        )
    computed = crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + header.size])
    if computed != header.crc:
        raise InvalidRecordBatch(
            f"record batch at position {pos} is corrupt: stored CRC-32C {header.crc:#010x}, "
            f"computed {computed:#010x}"
        )
    if header.last_offset_delta < 0:
        raise InvalidRecordBatch(
            f"record batch at position {pos} has a negative lastOffsetDelta "
            f"({header.last_offset_delta})"
        )
    return header


def validate_batches(buf: Buffer | mmap.mmap) -> list[BatchHeader]:
    """Headers of the batches filling `buf` exactly; InvalidRecordBatch if anything is off.

    A produce request is all or nothing, so a partial tail or trailing bytes fail the whole
    buffer rather than being trimmed; an empty buffer fails too, since Kafka refuses a
    produce that carries no records.
    """
    with memoryview(buf) as view:
        if len(view) == 0:
            raise InvalidRecordBatch("the record set is empty: expected at least one batch")
        headers = []
        pos = 0
        while pos < len(view):
            header = _checked_header(view, pos)
            headers.append(header)
            pos += header.size
        return headers


def scan_valid_batches(
    buf: Buffer | mmap.mmap, pos: int = 0
) -> Generator[tuple[int, BatchHeader], None, None]:
    """(position, header) of each intact batch from `pos`, stopping at the first bad one.

    Recovery uses this to find the last valid byte of a segment: whatever follows the last
    batch yielded is a torn write or garbage.
    """
    with memoryview(buf) as view:
        while pos < len(view):
            try:
                header = _checked_header(view, pos)
            except InvalidRecordBatch:
                return
            yield pos, header
            pos += header.size


def stamp_offsets(
    buf: WritableBuffer, pos: int, base_offset: int, partition_leader_epoch: int
) -> None:
    """Give the batch at `pos` its offsets and leader epoch; both lie outside the CRC."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def set_log_append_time(buf: WritableBuffer, pos: int, timestamp_ms: int) -> None:
    """Mark the batch at `pos` as LogAppendTime with the broker's clock, and re-seal its CRC.

    Readers take every record's timestamp from maxTimestamp once the timestamp-type bit is
    set, so the records themselves stay untouched. baseTimestamp is set too, as Kafka does
    when it rebuilds a batch for LogAppendTime, so that header-only readers (the time index,
    offset-by-timestamp lookups) see one consistent time for the whole batch.
    """
    (attributes,) = _INT16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, pos + BASE_TIMESTAMP_OFFSET, timestamp_ms)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    (batch_length,) = _INT32.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)
    with memoryview(buf) as view:
        crc = crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + batch_length])
    _UINT32.pack_into(buf, pos + CRC_OFFSET, crc)
