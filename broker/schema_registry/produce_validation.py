"""Schema validation on produce, as Confluent Server names it, with no I/O.

A topic with ``confluent.value.schema.validation=true`` (``confluent.key.schema.validation``
for keys) takes only records whose value (key) is in Confluent's wire format: the magic byte 0,
then a 4-byte big-endian schema id that is registered for the topic's subject under
TopicNameStrategy (``<topic>-value``, ``<topic>-key``), in a version not deleted. The first
record that is not is named, and the produce handler refuses the partition's batches with
INVALID_RECORD (nothing of them is appended), as Confluent Server does.

What is checked is the framing and the id, not the payload: the bytes after the id are not
decoded against the schema (Confluent Server does not either by default). A null value or key
(a tombstone, a record without a key) carries no schema and is let through. Departures: only
TopicNameStrategy (``confluent.value.subject.name.strategy`` is not read), and schema ids in
record headers (confluent-kafka's header serializer) are not looked at.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection, Iterator

from minibroker.protocol.record_batch import COMPRESSION_CODEC_MASK, HEADER_SIZE, read_header
from minibroker.protocol.records import RecordError, decompress, read_varint

MAGIC_BYTE = 0
_ID = struct.Struct(">i")
# A null key or value (what _framings yields for it): no schema to check. Not an int: a
# framed payload may carry any 4-byte id, -1 included, and must still be checked.
NO_PAYLOAD = object()


def subject(topic: str, key: bool) -> str:
    """TopicNameStrategy."""
    return f"{topic}-key" if key else f"{topic}-value"


def schema_id(payload: bytes) -> int | None:
    """The schema id of a payload in Confluent's wire format; None when it is not framed."""
    if len(payload) < 5 or payload[0] != MAGIC_BYTE:
        return None
    return int(_ID.unpack_from(payload, 1)[0])


def _framings(batch: memoryview) -> Iterator[tuple[int | object | None, int | object | None]]:
    """For each record of one v2 batch: the schema id of its key and of its value (see
    ``schema_id``), NO_PAYLOAD where the field is null, None where it is not framed.

    A lean walk rather than ``records.decode_records``: only the first five bytes of the key
    and the value are read, in place, and the headers are skipped by the record's length; no
    Record is built and no payload copied. It reads what decode_records reads, and raises
    RecordError where it would."""
    header = read_header(batch, 0)
    payload = decompress(
        header.attributes & COMPRESSION_CODEC_MASK, bytes(batch[HEADER_SIZE : header.size])
    )
    size = len(payload)
    position = 0
    try:
        for _ in range(header.records_count):
            length, position = read_varint(payload, position)
            end = position + length
            if end > size:
                raise RecordError("record runs past the batch")
            # The attributes byte, then the timestamp and offset deltas: skipped, not read.
            field = position + 1
            while payload[field] & 0x80:
                field += 1
            field += 1
            while payload[field] & 0x80:
                field += 1
            field += 1
            key, field = _framing(payload, field, end)
            value, _ = _framing(payload, field, end)
            yield key, value
            position = end
    except IndexError:
        raise RecordError("record truncated inside a varint") from None


def _framing(payload: bytes, field: int, end: int) -> tuple[int | object | None, int]:
    """The framing of the key or value at ``field`` and where the next field starts."""
    byte = payload[field]
    if byte < 0x80:  # a one-byte length, the common case
        field_length, field = (byte >> 1) ^ -(byte & 1), field + 1
    else:
        field_length, field = read_varint(payload, field)
    if field_length < 0:
        return NO_PAYLOAD, field
    after = field + field_length
    if after > end:
        raise RecordError("record field runs past the record")
    if field_length >= 5 and payload[field] == MAGIC_BYTE:
        return int(_ID.unpack_from(payload, field + 1)[0]), after
    return None, after


def first_invalid(
    records: bytes,
    topic: str,
    check_key: bool,
    check_value: bool,
    ids_of: Callable[[str], Collection[int]],
) -> tuple[int, str] | None:
    """The index (among the partition data's records) and a message for the first record
    that fails; None when all pass, or when the batches do not decode (the log's own checks
    then refuse them with their error). ``ids_of`` is asked once per subject and call."""
    index = 0
    position = 0
    checks = [(0, "key", subject(topic, True))] if check_key else []
    if check_value:
        checks.append((1, "value", subject(topic, False)))
    ids = {name: ids_of(name) for _, _, name in checks}
    view = memoryview(records)
    try:
        while position + HEADER_SIZE <= len(records):
            header = read_header(records, position)
            for framing in _framings(view[position : position + header.size]):
                for which, what, name in checks:
                    found = framing[which]
                    if found is NO_PAYLOAD:
                        continue
                    if found is None:
                        return index, (
                            f"Record {index} of the batch: its {what} does not start with the"
                            f" magic byte {MAGIC_BYTE} and a schema id (topic {topic} validates"
                            f" {what}s against subject {name})"
                        )
                    if found not in ids[name]:
                        return index, (
                            f"Record {index} of the batch: its {what}'s schema id {found} is not"
                            f" registered for subject {name}"
                        )
                index += 1
            position += header.size
    except (RecordError, ValueError, struct.error):
        return None
    return None
