"""Schema validation on produce (Confluent Server's confluent.value.schema.validation): which
records pass, and the message naming the first that does not (pure; the broker path is in
tests/cluster/test_schema_registry.py)."""

from __future__ import annotations

import random
import struct

from minibroker.protocol.records import GZIP, Record, decode_records, encode_batch
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


def test_an_id_of_minus_one_is_checked_and_headers_are_skipped():
    # 0xffffffff is id -1: framed, and not registered (it is not taken for a null value).
    index, message = check(batch(framed(7), framed(-1)))
    assert index == 1 and "schema id -1 is not registered" in message
    with_headers = encode_batch(
        [Record(0, 0, None, framed(7), (("h", framed(8)), ("", None))), Record(1, 0, None, b"x")]
    )
    assert check(with_headers)[0] == 1


def test_the_registry_is_asked_once_per_subject_and_call():
    asked = []

    def ids_of(subject):
        asked.append(subject)
        return IDS.get(subject, set())

    records = batch(*[framed(7)] * 50, keys=[framed(9)] * 50)
    assert first_invalid(records, "orders", True, True, ids_of) is None
    assert sorted(asked) == ["orders-key", "orders-value"]


def test_the_lean_walk_agrees_with_decoding_every_record():
    """The scan reads keys and values where decode_records reads them: on random batches
    (keys and values null, short, framed with either id, headers, every codec) the first
    failing record it names is the one a full decode finds."""
    rng = random.Random(932)
    choices = [
        None,
        b"",
        b"\x00\x00",
        framed(7),
        framed(7, b""),
        framed(8),
        framed(9),
        b"plain value",
    ]
    for round_ in range(200):
        count = rng.randint(1, 12)
        records = [
            Record(
                n,
                0,
                rng.choice(choices),
                rng.choice(choices),
                tuple(("k", rng.choice(choices)) for _ in range(rng.randint(0, 2))),
            )
            for n in range(count)
        ]
        data = encode_batch(records, codec=rng.choice([0, GZIP]))
        key = rng.random() < 0.5
        expected = None
        for index, record in enumerate(decode_records(data)):
            fields = ([record.key] if key else []) + [record.value]
            for payload, subject in zip(
                fields, (["orders-key"] if key else []) + ["orders-value"], strict=True
            ):
                if payload is None:
                    continue
                if schema_id(payload) not in IDS[subject]:
                    expected = index
                    break
            if expected is not None:
                break
        found = check(data, key=key)
        assert (found[0] if found else None) == expected, round_
