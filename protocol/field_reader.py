"""Reading the fields of a Kafka message that is not a request: the records of the
coordinators' internal topics (`__consumer_offsets`, `__transaction_state`,
`__share_group_state`), whose keys and values are generated messages of Kafka's own types.

Kafka's ``ByteBufferAccessor`` with the readers of its generated ``*Key``/``*Value`` classes:
the classic types (INT8-INT64, STRING with an INT16 length, BYTES with an INT32 length) and
the flexible versions' (unsigned varints, compact strings and bytes whose length is the varint
minus one, zero meaning null, and tagged fields). Every read is bounds-checked and a malformed
record raises the format's own error (``error``, set by each format's subclass), never
``struct.error`` or ``IndexError``: a record the coordinator cannot read is reported with the
format's name and its loader decides what to do.

Pure: bytes in, values out. The writers are the framing helpers of protocol/framing.py.
"""

from __future__ import annotations

import struct

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class FieldReader:
    """A cursor over one key or value. Subclasses set ``error`` to their format's exception
    and add the readers of their own structures."""

    error: type[Exception] = ValueError

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.pos = 0

    def _take(self, fmt: struct.Struct) -> int:
        try:
            (value,) = fmt.unpack_from(self.data, self.pos)
        except struct.error:
            raise self.error("record truncated") from None
        self.pos += fmt.size
        return int(value)

    def i8(self) -> int:
        return self._take(_I8)

    def i16(self) -> int:
        return self._take(_I16)

    def u16(self) -> int:
        return self._take(_U16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def raw(self, length: int) -> bytes:
        end = self.pos + length
        if length < 0 or end > len(self.data):
            raise self.error("record truncated")
        data = self.data[self.pos : end]
        self.pos = end
        return data

    def uvarint(self) -> int:
        """An unsigned varint of at most 5 bytes (an INT32's), as Kafka's ByteUtils reads."""
        value = shift = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                raise self.error("bad varint")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def _text(self, data: bytes) -> str:
        try:
            return data.decode()
        except UnicodeDecodeError:
            raise self.error("a string that is not UTF-8") from None

    def nullable_string(self) -> str | None:
        """STRING with an INT16 length, -1 meaning null."""
        length = self.i16()
        return None if length < 0 else self._text(self.raw(length))

    def compact_string(self) -> str | None:
        """COMPACT_STRING: a varint length plus one, 0 meaning null."""
        length = self.uvarint()
        return None if length == 0 else self._text(self.raw(length - 1))

    def compact_bytes(self) -> bytes:
        """COMPACT_BYTES, null read as empty."""
        return self.raw(max(self.uvarint() - 1, 0))

    def count(self) -> int:
        """A compact array's length (null read as empty)."""
        return max(self.uvarint() - 1, 0)

    def tagged(self) -> dict[int, bytes]:
        """The tagged fields, by tag, their values unread."""
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self.raw(self.uvarint())
        return fields

    def skip_tagged(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.raw(self.uvarint())
