"""iceberg.mode=value_schema_id_prefix's pure part (minibroker.iceberg.values): Avro schemas
mapped to Iceberg types, values in Confluent's wire format (encoded here by fastavro, the
library confluent-kafka's AvroSerializer writes with) decoded to columns, and the records that
cannot be written typed named with their reason."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import struct
import uuid

import fastavro
import pytest
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from minibroker.iceberg.translation import Rows
from minibroker.iceberg.values import AvroMapping, Decoder, decoder, schema_id, split

EVERYTHING = {
    "type": "record",
    "name": "Everything",
    "namespace": "test",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "count", "type": "int"},
        {"name": "total", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "score", "type": "double"},
        {"name": "name", "type": "string"},
        {"name": "blob", "type": "bytes"},
        {"name": "nickname", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attributes", "type": {"type": "map", "values": "long"}},
        {
            "name": "address",
            "type": {
                "type": "record",
                "name": "Address",
                "fields": [
                    {"name": "city", "type": "string"},
                    {"name": "zip", "type": ["null", "int"]},
                ],
            },
        },
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_micros", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "clock", "type": {"type": "int", "logicalType": "time-millis"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}
AT = datetime.datetime(2026, 12, 2, 5, 0, 0, 123000, tzinfo=datetime.UTC)
VALUE = {
    "flag": True,
    "count": 7,
    "total": 1 << 40,
    "ratio": 0.5,
    "score": 2.25,
    "name": "ada",
    "blob": b"\x00\x01",
    "nickname": None,
    "tags": ["a", "b"],
    "attributes": {"x": 1},
    "address": {"city": "Paris", "zip": 75001},
    "color": "BLUE",
    "digest": b"abcd",
    "day": datetime.date(2026, 12, 2),
    "at": AT,
    "at_micros": AT,
    "local": datetime.datetime(2026, 12, 2, 6, 0),
    "clock": datetime.time(5, 6, 7),
    "price": decimal.Decimal("12.34"),
    "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
}


def framed(schema: dict, value: object, schema_id: int = 1) -> bytes:
    """A value as confluent-kafka's AvroSerializer frames it: 0, the id, fastavro's bytes."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return b"\x00" + struct.pack(">i", schema_id) + out.getvalue()


def raw_rows(values: list[bytes | None]) -> Rows:
    rows = Rows()
    for offset, value in enumerate(values):
        rows.partition.append(0)
        rows.offset.append(offset)
        rows.timestamp_ms.append(1_796_000_000_000 + offset)
        rows.timestamp_type.append(0)
        rows.key.append(b"k")
        rows.value.append(value)
        rows.headers.append([("h", b"v")])
    return rows


def test_avro_types_map_to_iceberg_types(autojump_clock):
    mapping = AvroMapping(json.dumps(EVERYTHING))
    types = {field.name: field.field_type for field in mapping.fields}
    assert all(not field.required for field in mapping.fields)
    simple = {name: type(kind) for name, kind in types.items()}
    assert simple == {
        "flag": BooleanType,
        "count": IntegerType,
        "total": LongType,
        "ratio": FloatType,
        "score": DoubleType,
        "name": StringType,
        "blob": BinaryType,
        "nickname": StringType,
        "tags": ListType,
        "attributes": MapType,
        "address": StructType,
        "color": StringType,
        "digest": FixedType,
        "day": DateType,
        "at": TimestamptzType,
        "at_micros": TimestamptzType,
        "local": TimestampType,
        "clock": TimeType,
        "price": DecimalType,
        "id": StringType,
    }
    assert types["price"] == DecimalType(10, 2)
    assert types["digest"] == FixedType(4)
    assert isinstance(types["tags"], ListType) and types["tags"].element_type == StringType()
    assert isinstance(types["attributes"], MapType)
    assert types["attributes"].value_type == LongType()
    address = types["address"]
    assert isinstance(address, StructType)
    assert [(f.name, f.field_type) for f in address.fields] == [
        ("city", StringType()),
        ("zip", IntegerType()),
    ]
    ids = [field.field_id for field in mapping.schema().fields]
    assert len(ids) == len(set(ids))


def test_framed_values_decode_to_columns(autojump_clock):
    mapping = AvroMapping(json.dumps(EVERYTHING))
    payload = framed(EVERYTHING, VALUE)
    assert schema_id(payload) == 1
    columns = mapping.decode(payload[5:])
    assert columns == {
        **VALUE,
        "attributes": [("x", 1)],
        "id": "12345678-1234-5678-1234-567812345678",
    }


def test_a_schema_that_is_not_a_record_is_one_value_column(autojump_clock):
    mapping = AvroMapping(json.dumps("long"))
    assert [(f.name, f.field_type) for f in mapping.fields] == [("value", LongType())]
    assert mapping.decode(framed("long", 42)[5:]) == {"value": 42}


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (
            {"type": "record", "name": "R", "fields": [{"name": "u", "type": ["int", "string"]}]},
            "a union of int, string is not mapped yet",
        ),
        (
            {
                "type": "record",
                "name": "Node",
                "fields": [{"name": "next", "type": ["null", "Node"]}],
            },
            "record Node contains itself",
        ),
        (
            {"type": "record", "name": "R", "fields": [{"name": "kafka", "type": "int"}]},
            "hide the record's metadata column",
        ),
    ],
)
def test_schemas_not_mapped_say_why(autojump_clock, schema, reason):
    found = decoder(9, ("AVRO", json.dumps(schema)))
    assert found.mapping is None and reason in str(found.reason)


def test_records_that_cannot_be_typed_become_dead_letters_with_the_reason(autojump_clock):
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]}
    known = {
        1: decoder(1, ("AVRO", json.dumps(schema))),
        2: decoder(2, ("PROTOBUF", "message {", ValueError("Could not parse Protobuf schema"))),
    }

    def decoders(found: int) -> Decoder:
        return known.get(found) or decoder(found, None)

    raw = raw_rows(
        [
            framed(schema, {"n": 5}),  # 0: typed
            b"plain text",  # 1: no schema id
            framed(schema, {"n": 6}, schema_id=77),  # 2: an id the registry does not hold
            framed(schema, {"n": 7})[:-1] + b"\x80",  # 3: a varint that never ends
            framed(schema, {"n": 8}) + b"extra",  # 4: bytes after the value
            b"\x00\x00\x00\x00\x02" + b"\x08",  # 5: a Protobuf schema that did not build
            None,  # 6: a tombstone: no columns, not a dead letter
        ]
    )
    typed = split(raw, decoders)
    assert [row.get("n") for row in typed.rows] == [5, None]
    assert typed.schema_ids == [1, None]
    assert [row["kafka"]["offset"] for row in typed.rows] == [0, 6]
    first = typed.rows[0]["kafka"]
    assert first == {
        "partition": 0,
        "offset": 0,
        "timestamp": 1_796_000_000_000_000,
        "timestamp_type": 0,
        "key": b"k",
        "value": raw.value[0],
        "headers": [{"key": "h", "value": b"v"}],
        "schema_id": 1,
    }
    assert typed.dead.offset == [1, 2, 3, 4, 5]
    assert typed.dead.value == raw.value[1:6]
    reasons = typed.reasons
    assert "does not start with the magic byte 0" in reasons[0]
    assert "schema id 77 is not in the schema registry" in reasons[1]
    assert "does not decode with schema id 1" in reasons[2]
    assert "bytes left over" in reasons[3]
    assert "schema id 2 does not build: Could not parse" in reasons[4]

    typed.drop_schema(1, "cannot merge", raw)
    assert typed.schema_ids == [None]
    assert typed.dead.offset == [1, 2, 3, 4, 5, 0]
    assert typed.reasons[-1] == "cannot merge"


ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "price": {"type": "number"},
        "item": {"type": "string"},
        "paid": {"type": "boolean"},
        "note": {"type": ["string", "null"]},
        "lines": {
            "type": "array",
            "items": {"type": "object", "properties": {"sku": {"type": "string"}}},
        },
        "labels": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
    "required": ["id"],
}


def json_framed(value: object, schema_id: int = 3) -> bytes:
    """As confluent-kafka's JSONSerializer frames a value: 0, the id, the JSON text."""
    return b"\x00" + struct.pack(">i", schema_id) + json.dumps(value).encode()


def test_json_schemas_map_and_values_are_checked_against_their_columns(autojump_clock):
    found = decoder(3, ("JSON", json.dumps(ORDER)))
    assert found.mapping is not None
    types = {field.name: field.field_type for field in found.mapping.fields}
    assert types["id"] == LongType() and types["price"] == DoubleType()
    assert types["item"] == StringType() and types["paid"] == BooleanType()
    assert types["note"] == StringType()
    assert isinstance(types["lines"], ListType) and isinstance(types["labels"], MapType)
    good = {"id": 1, "price": 2, "item": "pen", "paid": True, "lines": [{"sku": "a"}]}
    raw = raw_rows(
        [
            json_framed({**good, "labels": {"x": 1}, "extra": "kept in the raw value"}),
            json_framed({**good, "id": "one"}),  # a string where an integer goes
            json_framed({**good, "item": None}),  # null where the schema does not allow it
            b"\x00\x00\x00\x00\x03{not json",
        ]
    )
    typed = split(raw, lambda schema_id: found)
    assert typed.rows[0]["id"] == 1 and typed.rows[0]["price"] == 2.0
    assert typed.rows[0]["labels"] == [("x", 1)] and typed.rows[0]["note"] is None
    assert "extra" not in typed.rows[0]
    assert typed.dead.offset == [1, 2, 3]
    assert "property 'id' must be an integer" in typed.reasons[0]
    assert "property 'item' is null where the schema does not allow it" in typed.reasons[1]
    assert "does not decode with schema id 3" in typed.reasons[2]


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "object", "properties": {"a": {"$ref": "#/x"}}}, "uses $ref"),
        ({"type": "object", "properties": {"a": {"type": ["string", "integer"]}}}, "only one type"),
        ({"properties": {"a": {"type": "string"}}}, "has no type"),
    ],
)
def test_json_schemas_not_mapped_say_why(autojump_clock, schema, reason):
    found = decoder(4, ("JSON", json.dumps(schema)))
    assert found.mapping is None and reason in str(found.reason)


ORDER_PROTO = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Order {
  int64 id = 1;
  string item = 2;
  repeated string tags = 3;
  map<string, int32> counts = 4;
  Address ship_to = 5;
  Status status = 6;
  google.protobuf.Timestamp at = 7;
  uint32 small = 8;
  double price = 9;
  bytes blob = 10;
  bool paid = 11;
  message Address { string city = 1; }
  enum Status { NEW = 0; PAID = 1; }
}
"""


def test_protobuf_messages_map_and_decode_after_their_message_indexes(autojump_clock):
    from google.protobuf import message_factory

    from minibroker.schema_registry.protobuf_schema import parse

    file = parse(ORDER_PROTO).file
    found = decoder(5, ("PROTOBUF", ORDER_PROTO, file))
    assert found.mapping is not None
    types = {field.name: field.field_type for field in found.mapping.fields}
    assert types["id"] == LongType() and types["item"] == StringType()
    assert isinstance(types["tags"], ListType) and isinstance(types["counts"], MapType)
    assert isinstance(types["ship_to"], StructType) and types["status"] == StringType()
    assert types["at"] == TimestamptzType() and types["small"] == LongType()
    assert types["price"] == DoubleType() and types["blob"] == BinaryType()
    order_class = message_factory.GetMessageClass(file.message_types_by_name["Order"])
    order = order_class(id=7, item="pen", tags=["a", "b"], status=1, small=3, paid=True)
    order.counts["x"] = 2
    order.ship_to.city = "Paris"
    order.at.FromDatetime(datetime.datetime(2026, 12, 2, 5, 0, tzinfo=datetime.UTC))
    prefix = b"\x00" + struct.pack(">i", 5)
    unset = order_class(id=8)  # no ship_to, no at: null; the scalars hold their defaults
    raw = raw_rows(
        [
            prefix + b"\x00" + order.SerializeToString(),  # indexes [0] as the single 0 byte
            prefix + b"\x02\x00" + unset.SerializeToString(),  # [0] written out: count 1, 0
            prefix + b"\x02\x04" + order.SerializeToString(),  # [2]: no third message
            prefix + b"\x00\xff\xff",  # not a message
        ]
    )
    typed = split(raw, lambda schema_id: found)
    first, second = typed.rows
    assert {k: v for k, v in first.items() if k != "kafka"} == {
        "id": 7,
        "item": "pen",
        "tags": ["a", "b"],
        "counts": [("x", 2)],
        "ship_to": {"city": "Paris"},
        "status": "PAID",
        "at": datetime.datetime(2026, 12, 2, 5, 0, tzinfo=datetime.UTC),
        "small": 3,
        "price": 0.0,
        "blob": b"",
        "paid": True,
    }
    assert second["id"] == 8 and second["ship_to"] is None and second["at"] is None
    assert second["status"] == "NEW" and second["tags"] == []
    assert typed.dead.offset == [2, 3]
    assert "message indexes [2] name no message" in typed.reasons[0]
    assert "does not decode with schema id 5" in typed.reasons[1]
    assert "does not build" in str(decoder(6, ("PROTOBUF", "x", ValueError("bad"))).reason)
