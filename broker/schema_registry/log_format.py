"""The records of `_schemas` in Confluent Schema Registry's layout (JSON keys and values).

Keys, with their fields in the order Confluent's serializer writes them::

    {"keytype":"SCHEMA","subject":"s","version":1,"magic":1}
    {"keytype":"CONFIG","subject":null,"magic":0}          (null: the global config)
    {"keytype":"MODE","subject":null,"magic":0}
    {"keytype":"DELETE_SUBJECT","subject":"s","magic":0}
    {"keytype":"CLEAR_SUBJECT","subject":"s","magic":0}
    {"keytype":"NOOP","magic":0}

Values: a SCHEMA's ``{"subject","version","id","schema","deleted"}`` (plus ``schemaType`` when
it is not AVRO, and ``references`` when there are some), a CONFIG's
``{"compatibilityLevel": ...}``, a MODE's ``{"mode": ...}``, a DELETE_SUBJECT's
``{"subject","version"}`` (every version up to it is soft-deleted). A null value (a
tombstone) under a SCHEMA key is a permanently deleted version, under CONFIG or MODE a
removed setting. So a `_schemas` topic can be copied between this registry and Confluent's
or Karapace's.
"""

from __future__ import annotations

import json
from typing import Any

SCHEMA = "SCHEMA"
CONFIG = "CONFIG"
MODE = "MODE"
DELETE_SUBJECT = "DELETE_SUBJECT"
CLEAR_SUBJECT = "CLEAR_SUBJECT"
NOOP = "NOOP"

Key = dict[str, Any]
Value = dict[str, Any] | None


class RecordFormatError(ValueError):
    """A record of `_schemas` that is not JSON of a known key type."""


def schema_key(subject: str, version: int) -> Key:
    return {"keytype": SCHEMA, "subject": subject, "version": version, "magic": 1}


def config_key(subject: str | None) -> Key:
    return {"keytype": CONFIG, "subject": subject, "magic": 0}


def mode_key(subject: str | None) -> Key:
    return {"keytype": MODE, "subject": subject, "magic": 0}


def delete_subject_key(subject: str) -> Key:
    return {"keytype": DELETE_SUBJECT, "subject": subject, "magic": 0}


def encode(document: Key | Value) -> bytes | None:
    if document is None:
        return None
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def decode_key(data: bytes | None) -> Key:
    if data is None:
        raise RecordFormatError("a record without a key")
    try:
        key = json.loads(data)
    except ValueError as error:
        raise RecordFormatError(f"a key that is not JSON: {error}") from None
    if not isinstance(key, dict) or not isinstance(key.get("keytype"), str):
        raise RecordFormatError("a key without a keytype")
    return key


def decode_value(data: bytes | None) -> Value:
    if data is None:
        return None
    try:
        value = json.loads(data)
    except ValueError as error:
        raise RecordFormatError(f"a value that is not JSON: {error}") from None
    if value is not None and not isinstance(value, dict):
        raise RecordFormatError("a value that is not a JSON object")
    return value
