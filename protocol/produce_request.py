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
from dataclasses import dataclass
from typing import Literal, overload

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
    name: str
    partition_data: list[PartitionProduceData]


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout: datetime.timedelta
    topic_data: list[TopicProduceData]


class _Reader:
    """A cursor over the frame; every read checks that the bytes are there."""

    def __init__(self, frame: bytearray, offset: int, flexible: bool) -> None:
        self.view = memoryview(frame)
        self.pos = offset
        self.flexible = flexible

    def _take(self, count: int) -> int:
        start = self.pos
        if count < 0 or start + count > len(self.view):
            raise DecodeError(f"produce request truncated at byte {start}")
        self.pos = start + count
        return start

    def int16(self) -> int:
        value: int = _INT16.unpack_from(self.view, self._take(2))[0]
        return value

    def int32(self) -> int:
        value: int = _INT32.unpack_from(self.view, self._take(4))[0]
        return value

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            byte = self.view[self._take(1)]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise DecodeError("varint too long in produce request")

    def length(self) -> int:
        """A string, bytes or array length; -1 for null."""
        if self.flexible:
            return self.uvarint() - 1
        return self.int32()

    @overload
    def string(self, nullable: Literal[False]) -> str: ...

    @overload
    def string(self, nullable: Literal[True]) -> str | None: ...

    def string(self, nullable: bool) -> str | None:
        size = self.uvarint() - 1 if self.flexible else self.int16()
        if size < 0:
            if nullable:
                return None
            raise DecodeError("null where a string is required in produce request")
        start = self._take(size)
        return bytes(self.view[start : start + size]).decode("utf-8", "replace")

    def records(self) -> memoryview | None:
        size = self.length()
        if size < 0:
            return None
        start = self._take(size)
        return self.view[start : start + size]

    def array_count(self) -> int:
        count = self.length()
        if count < 0:
            raise DecodeError("null array in produce request")
        return count

    def skip_tagged_fields(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self._take(self.uvarint())


def decode_produce_request(version: int, frame: bytearray, offset: int) -> ProduceRequest:
    """Decode Produce v0-v12 from ``frame`` (a bytearray) starting at ``offset`` (v10-v12
    have v9's layout)."""
    reader = _Reader(frame, offset, version >= _FLEXIBLE_FROM)
    transactional_id = reader.string(nullable=True) if version >= 3 else None
    acks = reader.int16()
    timeout = datetime.timedelta(milliseconds=reader.int32())
    topics = []
    for _ in range(reader.array_count()):
        name = reader.string(nullable=False)
        partitions = []
        for _ in range(reader.array_count()):
            index = reader.int32()
            partitions.append(PartitionProduceData(index, reader.records()))
            reader.skip_tagged_fields()
        reader.skip_tagged_fields()
        topics.append(TopicProduceData(name, partitions))
    reader.skip_tagged_fields()
    return ProduceRequest(transactional_id, acks, timeout, topics)


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
            pos = _skip_tagged_fields(head, pos)
        if version >= 3:
            if flexible:
                length, pos = _uvarint(head, pos)
                length -= 1
            else:
                (length,) = _INT16.unpack_from(head, pos)
                pos += 2
            pos += max(length, 0)
        acks: int = _INT16.unpack_from(head, pos)[0]
        return acks
    except (struct.error, IndexError):
        return None


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while shift <= 63:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise IndexError("varint too long")


def _skip_tagged_fields(data: bytes, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos
