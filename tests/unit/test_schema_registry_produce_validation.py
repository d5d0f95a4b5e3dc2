"""Schema validation on produce (Confluent Server's confluent.value.schema.validation): which
records pass, and the message naming the first that does not (pure; the broker path is in
tests/cluster/test_schema_registry.py)."""

from __future__ import annotations

import struct

from minibroker.protocol.records import GZIP, Record, encode_batch
from minibroker.schema_registry.produce_validation import first_invalid, schema_id

IDS = {"orders-value": {7}, "orders-key": {9}}


def framed(schema: int, payload: bytes = b"x") -> bytes:
    return b"\x00" + struct.pack(">i", schema) + payload


def batch(*values: bytes | None, keys=None, codec: int = 0, base_offset: int = 0) -> bytes:
    keys = keys or [None] * len(values)
    return encode_batch(
        [Record(n, 0, key, value) for n, (key, value) in enumerate(zip(keys, values, strict=True))],
        base_offset=base_offset,
        codec=codec,
    )


def check(records: bytes, key: bool = False, value: bool = True):
    return first_invalid(records, "orders", key, value, lambda subject: IDS.get(subject, set()))


def test_framed_values_with_the_subjects_id_pass():
    assert check(batch(framed(7), framed(7, b""), None)) is None
    # Compressed batches are decoded too.
    assert check(batch(framed(7), framed(7), codec=GZIP)) is None


def test_the_first_bad_record_is_named_across_batches():
    records = batch(framed(7), framed(7)) + batch(framed(7), b"plain", base_offset=2)
    index, message = check(records)
    assert index == 3
    assert "Record 3" in message and "magic byte 0" in message and "orders-value" in message
    index, message = check(batch(framed(7), framed(8)))
    assert index == 1 and "schema id 8 is not registered for subject orders-value" in message
    # Shorter than magic byte + id.
    assert check(batch(b"\x00\x00\x00"))[0] == 0


def test_keys_are_checked_only_when_asked():
    records = batch(framed(7), keys=[b"plain key"])
    assert check(records) is None
    assert "its key" in check(records, key=True)[1]
    assert check(batch(framed(7), keys=[framed(9)]), key=True) is None
    # The value of a key-only check is not looked at.
    assert check(batch(b"plain", keys=[framed(9)]), key=True, value=False) is None


def test_undecodable_batches_are_left_to_the_logs_checks():
    assert check(b"\x00" * 10) is None
    assert check(batch(framed(7))[:-3]) is None


def test_schema_id():
    assert schema_id(framed(123456)) == 123456
    assert schema_id(b"\x01\x00\x00\x00\x01") is None
    assert schema_id(b"") is None
