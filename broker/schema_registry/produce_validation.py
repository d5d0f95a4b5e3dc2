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
from collections.abc import Callable, Collection

from minibroker.protocol.record_batch import HEADER_SIZE, read_header
from minibroker.protocol.records import RecordError, decode_records

MAGIC_BYTE = 0
_ID = struct.Struct(">i")


def subject(topic: str, key: bool) -> str:
    """TopicNameStrategy."""
    return f"{topic}-key" if key else f"{topic}-value"


def schema_id(payload: bytes) -> int | None:
    """The schema id of a payload in Confluent's wire format; None when it is not framed."""
    if len(payload) < 5 or payload[0] != MAGIC_BYTE:
        return None
    return int(_ID.unpack_from(payload, 1)[0])


def first_invalid(
    records: bytes,
    topic: str,
    check_key: bool,
    check_value: bool,
    ids_of: Callable[[str], Collection[int]],
) -> tuple[int, str] | None:
    """The index (among the partition data's records) and a message for the first record
    that fails; None when all pass, or when the batches do not decode (the log's own checks
    then refuse them with their error)."""
    index = 0
    position = 0
    checks = [(True, "key")] if check_key else []
    if check_value:
        checks.append((False, "value"))
    try:
        while position + HEADER_SIZE <= len(records):
            header = read_header(records, position)
            batch = memoryview(records)[position : position + header.size]
            for record in decode_records(batch):
                for is_key, what in checks:
                    payload = record.key if is_key else record.value
                    if payload is None:
                        continue
                    found = schema_id(payload)
                    name = subject(topic, is_key)
                    if found is None:
                        return index, (
                            f"Record {index} of the batch: its {what} does not start with the"
                            f" magic byte {MAGIC_BYTE} and a schema id (topic {topic} validates"
                            f" {what}s against subject {name})"
                        )
                    if found not in ids_of(name):
                        return index, (
                            f"Record {index} of the batch: its {what}'s schema id {found} is not"
                            f" registered for subject {name}"
                        )
                index += 1
            position += header.size
    except (RecordError, ValueError, struct.error):
        return None
    return None
