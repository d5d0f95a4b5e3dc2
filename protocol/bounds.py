"""Array counts checked against the bytes that remain, before kio decodes a request.

kio's native reader reserves room for an array as soon as it reads the array's count, before
it reads a single element: a request of a few bytes claiming an array of 2^31-1 elements makes
it ask for 16 GiB, a compact array of 2^32-2 for 32 GiB, and a failed allocation in Rust
aborts the whole process (the frame fuzzer found this: ``memory allocation of 34359738352
bytes failed``, broker gone). Kafka's generated parsers refuse such a request instead ("Tried
to allocate a collection of size N, but there are only M bytes remaining."): every element
takes at least one byte, so a count larger than the bytes left cannot be honest.

``check_array_counts(cls, buffer, offset)`` walks the request as the schema lays it out,
without building anything, and raises ``InvalidArrayError`` at the first array whose count is
larger than what remains of the buffer, or that is null where the schema says it cannot be
(kio would decode that as None, and handlers iterating it raised TypeError; Kafka's parser
refuses it too); kio then decodes only requests that passed. The walk
is compiled once per class into nested closures. It is lenient everywhere else (a string that
runs past the end is left for kio to refuse), so that kio stays the one judge of validity.

The same walk finds tagged fields that the schema does not know. Kafka skips them (KIP-482:
a newer client may send a tag an older broker has never heard of, and the broker must carry
on); kio refuses them. ``check_array_counts`` therefore returns the request with such fields
cut out, which kio then reads; a request without them comes back as it was, at no cost.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.static.protocol import Entity

from minibroker.protocol.buffers import Buffer


class InvalidArrayError(ValueError):
    """An array claims more elements than there are bytes left in the request, or is null
    where the schema does not allow null, or a known tagged field's size is not its value's."""


# Bytes taken by each fixed-width kafka_type.
_FIXED_WIDTH = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "uuid": 16,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "error_code": 2,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# A step reads one value at pos and returns the position after it.
Step = Callable[[Buffer, int], int]


class _Short(Exception):
    """The buffer ended: kio will say so with its own error, so the walk just stops."""


class _UnknownTag(Exception):
    """A tagged field the schema does not know: where its tag buffer's count is written
    (``count_at`` .. ``count_end``, holding ``count``) and the field's own bytes."""

    def __init__(self, count_at: int, count_end: int, count: int, start: int, end: int):
        super().__init__()
        self.count_at, self.count_end, self.count = count_at, count_end, count
        self.start, self.end = start, end

    def cut_from(self, buffer: Buffer) -> bytes:
        """The buffer without the field, its tag buffer's count one less."""
        return b"".join(
            (
                bytes(buffer[: self.count_at]),
                _uvarint_bytes(self.count - 1),
                bytes(buffer[self.count_end : self.start]),
                bytes(buffer[self.end :]),
            )
        )


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _uvarint(buffer: Buffer, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buffer):
            raise _Short
        byte = buffer[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise _Short  # kio refuses an overlong varint


class _Fixed:
    """The step over a fixed-width value: its ``width`` lets neighbours merge and arrays of
    them skip in one step."""

    __slots__ = ("width",)

    def __init__(self, width: int) -> None:
        self.width = width

    def __call__(self, buffer: Buffer, pos: int) -> int:
        return pos + self.width


def _sized(compact: bool, wide: bool) -> Step:
    """A string (int16 length) or bytes/records (int32 length); compact: uvarint length+1."""

    def skip(buffer: Buffer, pos: int) -> int:
        length: int
        if compact:
            length, pos = _uvarint(buffer, pos)
            return pos + max(0, length - 1)
        unpack = _I32 if wide else _I16
        if pos + unpack.size > len(buffer):
            raise _Short
        (length,) = unpack.unpack_from(buffer, pos)
        return pos + unpack.size + max(0, length)

    return skip


def _uvarint_step(buffer: Buffer, pos: int) -> int:
    return _uvarint(buffer, pos)[1]


def _primitive(kafka_type: str, compact: bool) -> Step:
    if kafka_type in _FIXED_WIDTH:
        return _Fixed(_FIXED_WIDTH[kafka_type])
    if kafka_type == "string":
        return _sized(compact, wide=False)
    if kafka_type in ("bytes", "records"):
        return _sized(compact, wide=True)
    if kafka_type in ("uvarint", "uvarlong"):
        return _uvarint_step
    raise TypeError(f"no bounds step for kafka type {kafka_type!r}")


def _array(item: Step, compact: bool, nullable: bool) -> Step:
    width = item.width if isinstance(item, _Fixed) else None

    def walk(buffer: Buffer, pos: int) -> int:
        if compact:
            count, pos = _uvarint(buffer, pos)
            count -= 1  # 0 is null
        else:
            if pos + 4 > len(buffer):
                raise _Short
            (count,) = _I32.unpack_from(buffer, pos)
            pos += 4
        if count <= 0:
            if count < 0 and not nullable:
                # kio would hand the handler None for a non-nullable array; Kafka's parser
                # refuses it ("non-nullable field ... was serialized as null").
                raise InvalidArrayError("null where the schema has a non-nullable array")
            return pos
        remaining = len(buffer) - pos
        if count > remaining:
            raise InvalidArrayError(
                f"an array of {count} elements, but only {remaining} bytes remain"
            )
        if width is not None:
            return pos + count * width
        for _ in range(count):
            pos = item(buffer, pos)
        return pos

    return walk


def _field_step(field: dataclasses.Field[Any], compact: bool) -> Step:
    kind = classify_field(field)
    if isinstance(kind, EntityTupleField):
        return _array(entity_step(kind.type_), compact, is_optional(field))
    if isinstance(kind, EntityField):
        nested = entity_step(kind.type_)
        if field.metadata.get("tag") is None and is_optional(field):
            return _nullable_entity(nested)
        return nested
    kafka_type = field.metadata["kafka_type"]
    if isinstance(kind, PrimitiveTupleField):
        return _array(_primitive(kafka_type, compact), compact, is_optional(field))
    return _primitive(kafka_type, compact)


def _nullable_entity(nested: Step) -> Step:
    """A nullable struct is preceded by an int8: -1 for null, 1 when present."""

    def walk(buffer: Buffer, pos: int) -> int:
        if pos >= len(buffer):
            raise _Short
        marker = buffer[pos]
        if marker == 0xFF:
            return pos + 1
        return nested(buffer, pos + 1)

    return walk


@cache
def entity_step(cls: type[Entity]) -> Step:
    flexible = bool(getattr(cls, "__flexible__", False))
    positional: list[Step] = []
    tagged: dict[int, Step] = {}
    for field in dataclasses.fields(cls):
        tag = field.metadata.get("tag")
        step = _field_step(field, flexible)
        if tag is None:
            last = positional[-1] if positional else None
            if isinstance(step, _Fixed) and isinstance(last, _Fixed):
                positional[-1] = _Fixed(last.width + step.width)
            else:
                positional.append(step)
        else:
            tagged[tag] = step

    if not flexible and len(positional) == 1 and isinstance(positional[0], _Fixed):
        return positional[0]  # a struct of fixed-width fields is one fixed-width step
    if not flexible and not positional:
        return _Fixed(0)

    def tag_buffer(buffer: Buffer, pos: int) -> int:
        count_at = pos
        count, pos = _uvarint(buffer, pos)
        count_end = pos
        for _ in range(count):
            start = pos
            tag, pos = _uvarint(buffer, pos)
            size, pos = _uvarint(buffer, pos)
            end = pos + size
            if end > len(buffer):
                raise _Short
            if (step := tagged.get(tag)) is None:
                raise _UnknownTag(count_at, count_end, count, start, end)
            # kio reads a known tagged field's value and goes on from where the value ends,
            # not from where its size says (so does Kafka's generated code); a value shorter
            # or longer than its size would leave kio reading the rest of the request from
            # another place than this walk checked (the fuzzer: a replica_directory_id of
            # size 17, then a 165 GB array in kio's reading, the broker aborted). Refused.
            after = step(memoryview(buffer)[:end], pos)
            if after != end:
                raise InvalidArrayError(
                    f"tagged field {tag} says {size} bytes but its value takes {after - pos}"
                )
            pos = end
        return pos

    if len(positional) == 1 and isinstance(positional[0], _Fixed):
        # The common flexible struct (a partition of a Fetch): fixed fields, empty tags.
        fixed_width = positional[0].width

        def walk_fixed(buffer: Buffer, pos: int) -> int:
            pos += fixed_width
            if pos < len(buffer) and buffer[pos] == 0:
                return pos + 1
            return tag_buffer(buffer, pos)

        return walk_fixed

    def walk(buffer: Buffer, pos: int) -> int:
        for step in positional:
            pos = step(buffer, pos)
        if flexible:
            if pos < len(buffer) and buffer[pos] == 0:
                return pos + 1
            return tag_buffer(buffer, pos)
        return pos

    return walk


def walked_size(cls: type[Entity], buffer: Buffer, offset: int = 0) -> int:
    """How many bytes the walk took for a whole request (for tests: it must match kio)."""
    return entity_step(cls)(buffer, offset) - offset


def check_array_counts(cls: type[Entity], buffer: Buffer, offset: int) -> Buffer:
    """Raise InvalidArrayError if any array of this ``cls`` request, read from ``buffer`` at
    ``offset``, claims more elements than bytes remain; otherwise return the buffer for kio,
    without the tagged fields the schema does not know (even for a buffer that is too short
    or malformed in other ways: kio reports those).

    Each unknown field found is cut out and the walk starts again; every cut removes at least
    two bytes, so this ends, and a request without unknown tags is walked once."""
    step = entity_step(cls)
    while True:
        try:
            step(buffer, offset)
        except _Short:
            return buffer
        except _UnknownTag as unknown:
            buffer = unknown.cut_from(buffer)
        else:
            return buffer
