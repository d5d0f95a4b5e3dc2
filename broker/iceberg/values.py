"""Typed values for ``iceberg.mode=value_schema_id_prefix``: a record value in Confluent's
wire format (magic byte 0, a 4-byte big-endian schema id, the payload) decoded with its
schema from the schema registry (Avro, JSON Schema, Protobuf), and the schema mapped to
Iceberg types. Pure: no I/O, no
trio; the schema's text comes in from the caller (the service asks the broker's own registry).

Follows Redpanda's Iceberg Topics (``value_schema_id_prefix``: the table's columns are the
value schema's fields, one per field, with the record's metadata in a struct of its own beside
them) and the Avro specification for what each type means. The mapping (``AvroMapping``):

- record -> struct (the top-level record's fields are the table's columns; a top-level schema
  that is not a record becomes one column named ``value``); boolean, int, long, float, double,
  string, bytes -> the Iceberg type of the same name (bytes: binary); fixed(n) -> fixed(n);
  enum -> string (the symbol); array -> list; map -> map<string, T>;
- a union of null and one type -> that type, optional; any other union is not mapped yet (its
  records go to the dead-letter table with the reason; Redpanda makes a struct of one optional
  field per branch);
- logical types: date -> date; time-millis, time-micros -> time; timestamp-millis,
  timestamp-micros -> timestamptz (Avro's timestamps are instants in UTC);
  local-timestamp-millis/-micros -> timestamp; decimal(p, s) on bytes or fixed -> decimal(p, s)
  (p <= 38); uuid -> string; unknown logical types -> their underlying type;
- a recursive record (a type that contains itself) is not mapped.

Where minibroker departs: every column made from the schema is optional, even for a field
that is not a union with null. Iceberg cannot add a required column to a table that already
has rows, and a later compatible schema version may drop a field, so a column required today
would make the next version's rows unwritable; the decoded values are never null where the
schema says they cannot be. JSON Schema values are decoded too (``JsonMapping``: a subset of
JSON Schema, where Redpanda decodes none), and Protobuf values (``ProtobufMapping``, on the
``FileDescriptor`` the registry's code builds, as Redpanda maps them).

Decoding is fastavro's (``schemaless_reader``, its C extension); a payload with bytes left
over after the value is refused as Confluent's deserializers would not read it either.
"""

from __future__ import annotations

import datetime
import io
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fastavro
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from minibroker.iceberg.translation import Rows

MAGIC_BYTE = 0
_ID = struct.Struct(">i")
AVRO = "AVRO"
JSON = "JSON"
PROTOBUF = "PROTOBUF"
# The column a top-level schema that is not a record is written to.
VALUE_COLUMN = "value"
# The struct column of the record's metadata and raw bytes beside the value's columns (table.py
# makes it): a top-level field of that name cannot be a column too.
META_COLUMN = "kafka"


class Unmappable(ValueError):
    """A schema this translation cannot map to Iceberg (the reason is the message)."""


def schema_id(payload: bytes) -> int | None:
    """The schema id of a value in Confluent's wire format; None when it is not framed."""
    if len(payload) < 5 or payload[0] != MAGIC_BYTE:
        return None
    return int(_ID.unpack_from(payload, 1)[0])


Convert = Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


class _Ids:
    """Field ids for a schema made here; the table assigns its own when the schema is merged
    into it (pyiceberg's union_by_name matches fields by name)."""

    def __init__(self) -> None:
        self.next = 0

    def __call__(self) -> int:
        self.next += 1
        return self.next


_PRIMITIVES: dict[str, IcebergType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "bytes": BinaryType(),
}
_LOGICAL: dict[str, IcebergType] = {
    "date": DateType(),
    "time-millis": TimeType(),
    "time-micros": TimeType(),
    "timestamp-millis": TimestamptzType(),
    "timestamp-micros": TimestamptzType(),
    "local-timestamp-millis": TimestampType(),
    "local-timestamp-micros": TimestampType(),
}


def _uuid_text(value: Any) -> Any:
    return None if value is None else str(value)


class AvroMapping:
    """One Avro schema: its Iceberg fields (``fields``, the table's value columns), its
    fastavro reader and the conversion of a decoded value to the row's columns (``row``).
    Unmappable when the schema cannot be mapped; ValueError-family errors from fastavro when
    it does not parse."""

    def __init__(self, text: str) -> None:
        document = json.loads(text)
        self.parsed = fastavro.parse_schema(document)
        self._ids = _Ids()
        self._stack: list[str] = []
        # Named types (records, enums, fixed) by full name: fastavro's parsed schema names a
        # type it has already defined instead of repeating it.
        self._named: dict[str, Any] = {}
        kind, convert = self._map(self.parsed)
        if isinstance(kind, StructType) and self._is_record(self.parsed):
            self.fields = tuple(kind.fields)
            self._top_is_record = True
            if any(f.name == META_COLUMN for f in self.fields):
                raise Unmappable(
                    f"a top-level field named {META_COLUMN!r} would hide the record's metadata"
                    " column"
                )
        else:
            self.fields = (NestedField(self._ids(), VALUE_COLUMN, kind, required=False),)
            self._top_is_record = False
        self._convert = convert

    @staticmethod
    def _is_record(schema: Any) -> bool:
        return isinstance(schema, dict) and schema.get("type") in ("record", "error")

    def schema(self) -> Schema:
        return Schema(*self.fields)

    def decode(self, payload: bytes) -> dict[str, Any]:
        """The value's columns from its payload (after the 5-byte prefix); ValueError (and
        the errors of fastavro's reader) when it does not decode to the end."""
        stream = io.BytesIO(payload)
        value = fastavro.schemaless_reader(stream, self.parsed, None)
        if stream.tell() != len(payload):
            raise ValueError(f"{len(payload) - stream.tell()} bytes left over after the Avro value")
        converted = self._convert(value)
        if self._top_is_record:
            return dict(converted)
        return {VALUE_COLUMN: converted}

    # -- the mapping ---------------------------------------------------------------------------

    def _map(self, schema: Any) -> tuple[IcebergType, Convert]:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema], _same
            if schema in self._named:
                if schema in self._stack:
                    raise Unmappable(
                        f"record {schema} contains itself: recursive types are not mapped"
                    )
                return self._map(self._named[schema])
            if schema == "null":
                raise Unmappable("a field of type null alone has no Iceberg type")
            raise Unmappable(f"unknown Avro type {schema!r}")
        if isinstance(schema, list):
            return self._union(schema)
        if not isinstance(schema, dict):
            raise Unmappable(f"unexpected Avro schema {schema!r}")
        logical = schema.get("logicalType")
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and "name" in schema:
            self._named.setdefault(schema["name"], schema)
        if logical == "decimal" and kind in ("bytes", "fixed"):
            precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
            if precision > 38:
                raise Unmappable(f"decimal({precision}, {scale}): Iceberg decimals hold 38 digits")
            return DecimalType(precision, scale), _same
        if logical in _LOGICAL:
            return _LOGICAL[logical], _same
        if logical == "uuid" and kind in ("string", "fixed"):
            return StringType(), _uuid_text
        if kind in ("record", "error"):
            return self._record(schema)
        if kind == "enum":
            return StringType(), _same
        if kind == "fixed":
            return FixedType(int(schema["size"])), _same
        if kind == "array":
            element, convert = self._map(schema["items"])
            list_type = ListType(self._ids(), element, element_required=False)
            if convert is _same:
                return list_type, _same
            return list_type, lambda items: None if items is None else [convert(i) for i in items]
        if kind == "map":
            value_type, convert = self._map(schema["values"])
            map_type = MapType(self._ids(), StringType(), self._ids(), value_type, False)
            return (
                map_type,
                lambda entries: (
                    None if entries is None else [(k, convert(v)) for k, v in entries.items()]
                ),
            )
        if isinstance(kind, (str, list, dict)):
            return self._map(kind)
        raise Unmappable(f"unexpected Avro schema {schema!r}")

    def _union(self, branches: list[Any]) -> tuple[IcebergType, Convert]:
        others = [branch for branch in branches if branch != "null"]
        if len(others) == 1 and len(branches) == 2:
            return self._map(others[0])
        raise Unmappable(
            "a union of " + ", ".join(_name(b) for b in branches) + " is not mapped yet"
            " (only a union of null and one type is)"
        )

    def _record(self, schema: dict[str, Any]) -> tuple[IcebergType, Convert]:
        name = schema.get("name", "")
        if name in self._stack:
            raise Unmappable(f"record {name} contains itself: recursive types are not mapped")
        self._stack.append(name)
        fields = []
        converts: list[tuple[str, Convert]] = []
        for field in schema["fields"]:
            kind, convert = self._map(field["type"])
            fields.append(NestedField(self._ids(), field["name"], kind, required=False))
            if convert is not _same:
                converts.append((field["name"], convert))
        self._stack.pop()
        if not converts:
            return StructType(*fields), _same

        def convert_record(value: Any) -> Any:
            if value is None:
                return None
            converted = dict(value)
            for key, convert in converts:
                converted[key] = convert(converted.get(key))
            return converted

        return StructType(*fields), convert_record


def _name(branch: Any) -> str:
    if isinstance(branch, dict):
        return str(branch.get("name") or branch.get("type"))
    return str(branch)


class JsonMapping:
    """One JSON Schema (Confluent's JSON Schema serializer writes the value as UTF-8 JSON
    text after the prefix): its Iceberg fields and the conversion of a parsed value, which
    checks each value against its column's type (a value that does not match is refused, as
    its record must become a dead letter rather than stop the commit).

    Mapped: ``type`` object with ``properties`` -> struct (the top-level object's properties
    are the columns; properties not declared are not columns: the raw value keeps them);
    object with only ``additionalProperties`` (a schema) -> map<string, T>; array with
    ``items`` (one schema) -> list; string -> string (formats are not read); integer -> long;
    number -> double; boolean -> boolean; a ``type`` list of one type and ``"null"`` -> that
    type, nullable. Not mapped yet: schemas without ``type``, ``$ref``, ``oneOf``/``anyOf``/
    ``allOf``, several non-null types, tuple ``items``."""

    def __init__(self, text: str) -> None:
        document = json.loads(text)
        self._ids = _Ids()
        kind, convert = self._map(document, "the schema")
        if isinstance(kind, StructType):
            self.fields = tuple(kind.fields)
            self._top_is_record = True
            if any(f.name == META_COLUMN for f in self.fields):
                raise Unmappable(
                    f"a top-level property named {META_COLUMN!r} would hide the record's"
                    " metadata column"
                )
        else:
            self.fields = (NestedField(self._ids(), VALUE_COLUMN, kind, required=False),)
            self._top_is_record = False
        self._convert = convert

    def schema(self) -> Schema:
        return Schema(*self.fields)

    def decode(self, payload: bytes) -> dict[str, Any]:
        value = json.loads(payload)
        converted = self._convert(value)
        if self._top_is_record:
            return dict(converted or {})
        return {VALUE_COLUMN: converted}

    def _map(self, schema: Any, where: str) -> tuple[IcebergType, Convert]:
        if not isinstance(schema, dict):
            raise Unmappable(f"{where} is not an object schema")
        for keyword in ("$ref", "oneOf", "anyOf", "allOf"):
            if keyword in schema:
                raise Unmappable(f"{where} uses {keyword}: not mapped yet")
        kinds = schema.get("type")
        if kinds is None:
            raise Unmappable(f"{where} has no type: not mapped yet")
        kinds = list(kinds) if isinstance(kinds, list) else [kinds]
        nullable = "null" in kinds
        others = [kind for kind in kinds if kind != "null"]
        if len(others) != 1:
            raise Unmappable(f"{where} has the types {kinds}: only one type (and null) is mapped")
        kind = others[0]
        if kind == "object":
            kind_type, convert = self._object(schema, where)
        elif kind == "array":
            items = schema.get("items")
            element, convert_item = self._map(items, f"{where}'s items")
            kind_type = ListType(self._ids(), element, element_required=False)

            def convert(value: Any) -> Any:
                if not isinstance(value, list):
                    raise ValueError(f"{where} must be an array")
                return [convert_item(item) for item in value]

        elif kind in _JSON_PRIMITIVES:
            kind_type, convert = _JSON_PRIMITIVES[kind](where)
        else:
            raise Unmappable(f"{where} has the unknown type {kind!r}")

        def checked(value: Any) -> Any:
            if value is None:
                if not nullable:
                    raise ValueError(f"{where} is null where the schema does not allow it")
                return None
            return convert(value)

        return kind_type, checked

    def _object(self, schema: dict[str, Any], where: str) -> tuple[IcebergType, Convert]:
        properties = schema.get("properties")
        if not properties:
            extra = schema.get("additionalProperties")
            if not isinstance(extra, dict):
                raise Unmappable(f"{where} is an object without properties: not mapped yet")
            value_type, convert_value = self._map(extra, f"{where}'s additional properties")
            map_type = MapType(self._ids(), StringType(), self._ids(), value_type, False)

            def convert_map(value: Any) -> Any:
                if not isinstance(value, dict):
                    raise ValueError(f"{where} must be an object")
                return [(key, convert_value(item)) for key, item in value.items()]

            return map_type, convert_map
        fields = []
        converts = []
        for name, property_schema in properties.items():
            kind, convert = self._map(property_schema, f"property {name!r}")
            fields.append(NestedField(self._ids(), name, kind, required=False))
            converts.append((name, convert))

        def convert_object(value: Any) -> Any:
            if not isinstance(value, dict):
                raise ValueError(f"{where} must be an object")
            # A property left out is null (JSON Schema's "required" decides whether it may be).
            return {
                name: convert(value[name]) if name in value else None for name, convert in converts
            }

        return StructType(*fields), convert_object


def _json_string(where: str) -> tuple[IcebergType, Convert]:
    def convert(value: Any) -> Any:
        if not isinstance(value, str):
            raise ValueError(f"{where} must be a string")
        return value

    return StringType(), convert


def _json_integer(where: str) -> tuple[IcebergType, Convert]:
    def convert(value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where} must be an integer")
        if not -(1 << 63) <= value < (1 << 63):
            raise ValueError(f"{where} does not fit a long")
        return value

    return LongType(), convert


def _json_number(where: str) -> tuple[IcebergType, Convert]:
    def convert(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where} must be a number")
        return float(value)

    return DoubleType(), convert


def _json_boolean(where: str) -> tuple[IcebergType, Convert]:
    def convert(value: Any) -> Any:
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be a boolean")
        return value

    return BooleanType(), convert


_JSON_PRIMITIVES = {
    "string": _json_string,
    "integer": _json_integer,
    "number": _json_number,
    "boolean": _json_boolean,
}


class ProtobufMapping:
    """One Protobuf schema, as the registry built it (a ``FileDescriptor``, its references
    resolved): the message a value names, its Iceberg fields, and the decoding of a payload
    (protobuf's own parser, the message class from ``message_factory``).

    Confluent's framing puts the message indexes after the schema id: a zigzag varint count,
    then that many zigzag varints, the path to the message among the file's top-level messages
    and their nested ones; a count of 0 is the first message ([0]). The columns are the file's
    first message's (the one confluent-kafka's ProtobufSerializer names when its message is
    the file's first); a value naming another message is a dead letter (not mapped yet).

    Mapped (as Redpanda maps Protobuf): message -> struct; int32, sint32, sfixed32 -> int;
    int64, sint64, sfixed64, uint32 -> long; uint64, fixed64 -> long (a value past 2^63 - 1
    does not fit: a dead letter); fixed32 -> long; float, double, bool, string, bytes -> float,
    double, boolean, string, binary; enum -> string (the value's name, its number when it has
    none); repeated -> list; map -> map; google.protobuf.Timestamp -> timestamptz. A field
    without presence (proto3's scalars) holds its value, default included; a message field not
    set is null. Not mapped: a message that contains itself."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self._ids = _Ids()
        self._stack: list[str] = []
        self._messages: dict[tuple[int, ...], tuple[Any, Convert]] = {}
        tops = [file.message_types_by_name[m] for m in file.message_types_by_name]
        if not tops:
            raise Unmappable("the schema has no message")
        self._tops = tops
        kind, convert = self._message(tops[0])
        self._messages[(0,)] = (tops[0], convert)
        self.fields = tuple(kind.fields)
        if any(f.name == META_COLUMN for f in self.fields):
            raise Unmappable(
                f"a top-level field named {META_COLUMN!r} would hide the record's metadata column"
            )

    def schema(self) -> Schema:
        return Schema(*self.fields)

    def decode(self, payload: bytes) -> dict[str, Any]:
        from google.protobuf import message_factory

        indexes, position = _message_indexes(payload)
        known = self._messages.get(indexes)
        if known is None:
            descriptor = self._find(indexes)
            if descriptor.full_name != self._messages[(0,)][0].full_name:
                raise ValueError(
                    f"the value names message {descriptor.full_name}; the table's columns are"
                    f" {self._messages[(0,)][0].full_name}'s"
                )
            known = self._messages[(0,)]
        descriptor, convert = known
        message = message_factory.GetMessageClass(descriptor).FromString(payload[position:])
        return dict(convert(message))

    def _find(self, indexes: tuple[int, ...]) -> Any:
        try:
            descriptor = self._tops[indexes[0]]
            for index in indexes[1:]:
                descriptor = descriptor.nested_types[index]
        except IndexError:
            raise ValueError(f"message indexes {list(indexes)} name no message") from None
        return descriptor

    def _message(self, descriptor: Any) -> tuple[StructType, Convert]:
        if descriptor.full_name in self._stack:
            raise Unmappable(
                f"message {descriptor.full_name} contains itself: recursive types are not mapped"
            )
        self._stack.append(descriptor.full_name)
        fields = []
        converts: list[tuple[str, Convert, bool]] = []
        for field in descriptor.fields:
            kind, convert = self._field(field)
            fields.append(NestedField(self._ids(), field.name, kind, required=False))
            presence = field.message_type is not None and not _is_repeated(field)
            converts.append((field.name, convert, presence))
        self._stack.pop()

        def convert_message(message: Any) -> Any:
            row: dict[str, Any] = {}
            for name, convert, presence in converts:
                if presence and not message.HasField(name):
                    row[name] = None
                else:
                    row[name] = convert(getattr(message, name))
            return row

        return StructType(*fields), convert_message

    def _field(self, field: Any) -> tuple[IcebergType, Convert]:
        if (
            _is_repeated(field)
            and field.message_type is not None
            and (field.message_type.GetOptions().map_entry)
        ):
            entry = field.message_type
            key_type, convert_key = self._single(entry.fields_by_name["key"])
            value_type, convert_value = self._single(entry.fields_by_name["value"])
            map_type = MapType(self._ids(), key_type, self._ids(), value_type, False)
            return map_type, lambda entries: [
                (convert_key(k), convert_value(v)) for k, v in entries.items()
            ]
        element, convert = self._single(field)
        if _is_repeated(field):
            list_type = ListType(self._ids(), element, element_required=False)
            return list_type, lambda items: [convert(item) for item in items]
        return element, convert

    def _single(self, field: Any) -> tuple[IcebergType, Convert]:
        if field.message_type is not None:
            if field.message_type.full_name == "google.protobuf.Timestamp":
                return TimestamptzType(), _timestamp
            return self._message(field.message_type)
        if field.enum_type is not None:
            names = {value.number: value.name for value in field.enum_type.values}
            return StringType(), lambda number: names.get(number, str(number))
        kind = _PROTO_SCALARS.get(field.type)
        if kind is None:
            raise Unmappable(f"field {field.full_name} has a type that is not mapped")
        return kind, _same


def _is_repeated(field: Any) -> bool:
    repeated = getattr(field, "is_repeated", None)  # protobuf 6's, where label is deprecated
    if repeated is not None:
        return bool(repeated)
    return bool(field.label == field.LABEL_REPEATED)


def _timestamp(value: Any) -> Any:
    return value.ToDatetime(tzinfo=datetime.UTC)


def _zigzag(payload: bytes, position: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if position >= len(payload):
            raise ValueError("the message indexes are cut short")
        byte = payload[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
        if shift > 63:
            raise ValueError("a message index varint is too long")


def _message_indexes(payload: bytes) -> tuple[tuple[int, ...], int]:
    """Confluent's message indexes at the start of a Protobuf payload, and where the message
    starts."""
    count, position = _zigzag(payload, 0)
    if count == 0:
        return (0,), position
    if count < 0 or count > 100:
        raise ValueError(f"{count} message indexes")
    indexes = []
    for _ in range(count):
        index, position = _zigzag(payload, position)
        indexes.append(index)
    return tuple(indexes), position


def _proto_scalars() -> dict[int, IcebergType]:
    from google.protobuf.descriptor import FieldDescriptor as F

    return {
        F.TYPE_INT32: IntegerType(),
        F.TYPE_SINT32: IntegerType(),
        F.TYPE_SFIXED32: IntegerType(),
        F.TYPE_UINT32: LongType(),
        F.TYPE_FIXED32: LongType(),
        F.TYPE_INT64: LongType(),
        F.TYPE_SINT64: LongType(),
        F.TYPE_SFIXED64: LongType(),
        F.TYPE_UINT64: LongType(),
        F.TYPE_FIXED64: LongType(),
        F.TYPE_FLOAT: FloatType(),
        F.TYPE_DOUBLE: DoubleType(),
        F.TYPE_BOOL: BooleanType(),
        F.TYPE_STRING: StringType(),
        F.TYPE_BYTES: BinaryType(),
    }


_PROTO_SCALARS = _proto_scalars()


@dataclass(frozen=True)
class Decoder:
    """What the translation knows of one schema id: a mapping to decode with, or the reason
    its records go to the dead-letter table."""

    schema_id: int
    mapping: AvroMapping | JsonMapping | ProtobufMapping | None = None
    reason: str | None = None


def decoder(schema_id: int, found: tuple[Any, ...] | None) -> Decoder:
    """The decoder of ``schema_id`` from the registry's answer, (schema type, schema text) and,
    for PROTOBUF, the ``FileDescriptor`` the registry built (or the error that stopped it);
    None when the registry has no such id."""
    if found is None:
        return Decoder(schema_id, reason=f"schema id {schema_id} is not in the schema registry")
    schema_type, text, *rest = found
    built = rest[0] if rest else None
    if schema_type not in (AVRO, JSON, PROTOBUF):
        return Decoder(schema_id, reason=f"schema id {schema_id} is of unknown type {schema_type}")
    try:
        if schema_type == PROTOBUF:
            if built is None or isinstance(built, Exception):
                return Decoder(schema_id, reason=f"schema id {schema_id} does not build: {built}")
            return Decoder(schema_id, ProtobufMapping(built))
        if schema_type == JSON:
            return Decoder(schema_id, JsonMapping(text))
        return Decoder(schema_id, AvroMapping(text))
    except Unmappable as error:
        return Decoder(schema_id, reason=f"schema id {schema_id}: {error}")
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as error:
        return Decoder(schema_id, reason=f"schema id {schema_id} does not parse: {error}")


def decode(value: bytes | None, decoders: Callable[[int], Decoder]) -> tuple[int | None, Any]:
    """A record value as (schema id, its columns), or (schema id or None, the reason) as a
    ``str`` when it goes to the dead-letter table. A null value (a tombstone) carries no
    schema: no columns, no schema id."""
    if value is None:
        return None, {}
    found = schema_id(value)
    if found is None:
        return None, (
            f"the value does not start with the magic byte {MAGIC_BYTE} and a 4-byte schema id"
        )
    known = decoders(found)
    if known.mapping is None:
        return found, str(known.reason)
    try:
        return found, known.mapping.decode(value[5:])
    except Exception as error:  # fastavro raises many kinds on bad bytes
        return (
            found,
            f"the value does not decode with schema id {found}: {type(error).__name__}: {error}",
        )


@dataclass
class TypedRows:
    """A commit's records split: ``rows`` (each the value's columns plus the metadata struct,
    ready for the table's Arrow schema) with their schema ids and their index among the
    translated records, and the dead letters (the raw key_value columns, ``dead``) with their
    reasons."""

    rows: list[dict[str, Any]]
    schema_ids: list[int | None]
    indexes: list[int]
    dead: Rows
    reasons: list[str]

    def drop_schema(self, schema_id: int, reason: str, raw: Rows) -> None:
        """Send the rows of ``schema_id`` to the dead letters (their schema cannot evolve the
        table); ``raw``: the translated records the rows were made from."""
        self.drop({i: reason for i, found in enumerate(self.schema_ids) if found == schema_id}, raw)

    def drop(self, reasons: dict[int, str], raw: Rows) -> None:
        """Send the rows at these positions to the dead letters, each with its reason."""
        for position in sorted(reasons):
            _copy_row(self.dead, raw, self.indexes[position])
            self.reasons.append(reasons[position])
        kept = [i for i in range(len(self.rows)) if i not in reasons]
        self.rows = [self.rows[i] for i in kept]
        self.schema_ids = [self.schema_ids[i] for i in kept]
        self.indexes = [self.indexes[i] for i in kept]


def _copy_row(dead: Rows, raw: Rows, index: int) -> None:
    dead.partition.append(raw.partition[index])
    dead.offset.append(raw.offset[index])
    dead.timestamp_ms.append(raw.timestamp_ms[index])
    dead.timestamp_type.append(raw.timestamp_type[index])
    dead.key.append(raw.key[index])
    dead.value.append(raw.value[index])
    dead.headers.append(raw.headers[index])


def split(raw: Rows, decoders: Callable[[int], Decoder]) -> TypedRows:
    """Each translated record decoded: a typed row, or a dead letter with its reason."""
    typed = TypedRows([], [], [], Rows(), [])
    for index in range(len(raw)):
        found, columns = decode(raw.value[index], decoders)
        if isinstance(columns, str):
            _copy_row(typed.dead, raw, index)
            typed.reasons.append(columns)
            continue
        row = dict(columns)
        row[META_COLUMN] = {
            "partition": raw.partition[index],
            "offset": raw.offset[index],
            "timestamp": raw.timestamp_ms[index] * 1000,
            "timestamp_type": raw.timestamp_type[index],
            "key": raw.key[index],
            "value": raw.value[index],
            "headers": [{"key": k, "value": v} for k, v in raw.headers[index]],
            "schema_id": found,
        }
        typed.rows.append(row)
        typed.schema_ids.append(found)
        typed.indexes.append(index)
    return typed
