"""A hand-written Produce request decoder for the data path.

kio's decoder copies every record set into a new bytes object, and the log then copies it
again to stamp offsets. This decoder reads the few fields of a Produce request itself and
hands each partition's records back as a writable view into the request frame, so the log
validates, stamps and writes the producer's bytes where they arrived. It gives the same
attributes kio's ProduceRequest has for the fields the broker uses;
tests/unit/test_produce_request.py checks it against kio for every supported version.
"""

import datetime
import struct
import uuid
from dataclasses import dataclass, field

from minibroker.protocol.codec import DecodeError
from minibroker.protocol.versions import FIRST_FLEXIBLE_VERSION, ApiKey

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_FLEXIBLE_FROM = FIRST_FLEXIBLE_VERSION[ApiKey.PRODUCE]


@dataclass(slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | None


@dataclass(slots=True)
class TopicProduceData:
    # The topic's name; from v13 on None as decoded (the request names the topic by id) and
    # set by the handler once it knows the id's name.
    name: str | None
    partition_data: list[PartitionProduceData]
    topic_id: uuid.UUID | None = field(default=None)  # v13+ (KIP-516); None: the zero id


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout: datetime.timedelta
    topic_data: list[TopicProduceData]


_ACKS_TIMEOUT = struct.Struct(">hi")


def _truncated(pos: int) -> DecodeError:
    return DecodeError(f"produce request truncated at byte {pos}")


def _read_uvarint(frame: bytes | bytearray, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(frame):
            raise _truncated(pos)
        byte = frame[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varint too long in produce request")


def _skip_tags(frame: bytes | bytearray, pos: int) -> int:
    count, pos = _read_uvarint(frame, pos)
    for _ in range(count):
        _, pos = _read_uvarint(frame, pos)
        size, pos = _read_uvarint(frame, pos)
        if pos + size > len(frame):
            raise _truncated(pos)
        pos += size
    return pos


_ZERO_ID = bytes(16)


def decode_produce_request(version: int, frame: bytearray, offset: int) -> ProduceRequest:
    """Decode Produce v0-v13 from ``frame`` (a bytearray) starting at ``offset`` (v10-v12
    have v9's layout; v13 has a topic id, 16 bytes, where the name was).

    Straight-line reads with the position in a local: this runs for every Produce request,
    and a method call per field was a tenth of the broker's time per small request. A
    string, bytes or array length below zero is null (a null string or array where one is
    required, or a length past the frame's end, is a DecodeError, as is a truncated frame).
    """
    view = memoryview(frame)
    end = len(frame)
    flexible = version >= _FLEXIBLE_FROM
    by_id = version >= 13
    pos = offset
    try:
        transactional_id = None
        if version >= 3:
            if flexible:
                size, pos = _read_uvarint(frame, pos)
                size -= 1
            else:
                size = _INT16.unpack_from(frame, pos)[0]
                pos += 2
            if size >= 0:
                if pos + size > end:
                    raise _truncated(pos)
                transactional_id = bytes(view[pos : pos + size]).decode("utf-8", "replace")
                pos += size
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
        pos += 6
        if flexible:
            topic_count, pos = _read_uvarint(frame, pos)
            topic_count -= 1
        else:
            topic_count = _INT32.unpack_from(frame, pos)[0]
            pos += 4
        if topic_count < 0:
            raise DecodeError("null array in produce request")
        topics = []
        for _ in range(topic_count):
            name: str | None = None
            topic_id = None
            if by_id:
                if pos + 16 > end:
                    raise _truncated(pos)
                raw_id = bytes(view[pos : pos + 16])
                topic_id = None if raw_id == _ZERO_ID else uuid.UUID(bytes=raw_id)
                pos += 16
            else:
                if flexible:
                    size, pos = _read_uvarint(frame, pos)
                    size -= 1
                else:
                    size = _INT16.unpack_from(frame, pos)[0]
                    pos += 2
                if size < 0:
                    raise DecodeError("null where a string is required in produce request")
                if pos + size > end:
                    raise _truncated(pos)
                name = bytes(view[pos : pos + size]).decode("utf-8", "replace")
                pos += size
            if flexible:
                partition_count, pos = _read_uvarint(frame, pos)
                partition_count -= 1
            else:
                partition_count = _INT32.unpack_from(frame, pos)[0]
                pos += 4
            if partition_count < 0:
                raise DecodeError("null array in produce request")
            partitions = []
            for _ in range(partition_count):
                index = _INT32.unpack_from(frame, pos)[0]
                pos += 4
                if flexible:
                    size, pos = _read_uvarint(frame, pos)
                    size -= 1
                else:
                    size = _INT32.unpack_from(frame, pos)[0]
                    pos += 4
                records = None
                if size >= 0:
                    if pos + size > end:
                        raise _truncated(pos)
                    records = view[pos : pos + size]
                    pos += size
                if flexible:
                    pos = _skip_tags(frame, pos)
                partitions.append(PartitionProduceData(index, records))
            if flexible:
                pos = _skip_tags(frame, pos)
            topics.append(TopicProduceData(name, partitions, topic_id))
        if flexible:
            pos = _skip_tags(frame, pos)
    except struct.error:
        raise _truncated(pos) from None
    return ProduceRequest(
        transactional_id, acks, datetime.timedelta(milliseconds=timeout_ms), topics
    )


# Produce's API key, and the bytes of a request's start that produce_acks reads at most.
_PRODUCE = int(ApiKey.PRODUCE)
ACKS_PEEK_BYTES = 256
_HEADER_FIXED = struct.Struct(">hhih")  # api key, version, correlation id, client id length


def produce_acks(head: bytes) -> int | None:
    """The acks of a Produce request, from the first bytes of its frame (header included):
    None when it is not a Produce request or ``head`` ends before its acks field. Nothing
    is checked beyond reaching the field; the full decode does that when the request is
    served."""
    try:
        api_key, version, _, client_id_length = _HEADER_FIXED.unpack_from(head, 0)
        if api_key != _PRODUCE:
            return None
        pos = _HEADER_FIXED.size + max(client_id_length, 0)
        flexible = version >= _FLEXIBLE_FROM
        if flexible:
            pos = _skip_tags(head, pos)
        if version >= 3:
            if flexible:
                length, pos = _read_uvarint(head, pos)
                length -= 1
            else:
                (length,) = _INT16.unpack_from(head, pos)
                pos += 2
            pos += max(length, 0)
        acks: int = _INT16.unpack_from(head, pos)[0]
        return acks
    except (struct.error, DecodeError):
        return None
