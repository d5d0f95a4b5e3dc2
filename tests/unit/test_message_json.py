"""The schemas protocol.message_json builds from Kafka 4.4's message JSONs (protocol/messages/):
for every message and version registered in protocol.schemas from them, a populated instance
(every field set, no field at its default, every array with one element) is written by the
codec, read back equal and written again to the same bytes; and each class's fields are the
JSON's fields present at that version, in the JSON's order, with the JSON's types, nullability
and nested structs."""

import dataclasses
import datetime
import sys
import uuid
from importlib import resources
from types import NoneType, UnionType
from typing import Any, get_args, get_origin

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from minibroker.protocol import codec, message_json, schemas

GENERATED_MODULES = {
    "minibroker.protocol.kafka44_schemas",
    "minibroker.protocol.consumer_group_heartbeat_v1",
    "minibroker.protocol.share_fetch_v1",
    "minibroker.protocol.share_group_offsets_schemas",
    "minibroker.protocol.streams_group_schemas",
}
GENERATED = sorted(
    (kind, key, version, cls)
    for kind, table in (("request", schemas.REQUESTS), ("response", schemas.RESPONSES))
    for (key, version), cls in table.items()
    if cls.__module__ in GENERATED_MODULES
)
JSON_FILES = sorted(
    path.name
    for path in resources.files("minibroker.protocol").joinpath("messages").iterdir()
    if path.name.endswith(".json")
)


def _inner(annotation: Any) -> tuple[Any, bool, bool]:
    """(item type, nullable, array) of a field's annotation."""
    nullable = False
    if get_origin(annotation) is UnionType:
        args = [arg for arg in get_args(annotation) if arg is not NoneType]
        nullable, annotation = True, args[0]
    if get_origin(annotation) is tuple:
        return get_args(annotation)[0], nullable, True
    return annotation, nullable, False


_SAMPLES: dict[str, Any] = {
    "bool": True,
    "int8": 7,
    "int16": 300,
    "int32": 70000,
    "int64": 2**40 + 3,
    "uint16": 65000,
    "string": "s-\u00e9",
    "uuid": uuid.UUID(int=0x1234_5678_9ABC_DEF0_1122_3344_5566_7788),
    "error_code": ErrorCode.group_id_not_found,
    "timedelta_i32": datetime.timedelta(milliseconds=1234),
    "bytes": b"\x00bytes",
    "records": b"\x00records",
}


def populated(cls: type, depth: int = 0) -> Any:
    """An instance of ``cls`` with every field set to a value that is not its default."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        item, _nullable, array = _inner(field.type)
        if dataclasses.is_dataclass(item):
            one = populated(item, depth + 1)
            values[field.name] = (one,) if array else one
            continue
        kind = field.metadata["kafka_type"]
        sample = _SAMPLES[kind] if kind != "string" else f"{field.name}-{depth}"
        if kind not in ("error_code", "timedelta_i32", "uuid", "bool"):
            sample = item(sample)
        values[field.name] = (sample,) if array else sample
    return cls(**values)


@pytest.mark.parametrize(
    ("kind", "key", "version", "cls"),
    GENERATED,
    ids=[f"{kind}-{key}-v{version}" for kind, key, version, _cls in GENERATED],
)
def test_a_populated_message_round_trips_through_the_codec(kind, key, version, cls):
    entity = populated(cls)
    body = codec.encode_entity(entity)
    decode = codec.decode_request if kind == "request" else codec.decode_response
    read = decode(key, version, body, 0)
    assert read == entity
    assert codec.encode_entity(read) == body


def _kio_has(kind: str, key: int, version: int) -> bool:
    try:
        (load_request_schema if kind == "request" else load_response_schema)(key, version)
    except Exception:
        return False
    return True


def test_every_vendored_json_is_registered_at_every_valid_version_kio_lacks():
    registered = {(kind, key, version) for kind, key, version, _cls in GENERATED}
    expected = set()
    for name in JSON_FILES:
        spec = message_json.load(name)
        for version in message_json.version_range(spec["validVersions"]):
            if (spec["type"], spec["apiKey"], version) in registered:
                expected.add((spec["type"], spec["apiKey"], version))
            else:
                assert _kio_has(spec["type"], spec["apiKey"], version), (name, version)
    assert registered == expected
    assert len(registered) >= 20


def _json_kind(field: dict[str, Any], timedeltas: frozenset[str]) -> str:
    item = field["type"].removeprefix("[]")
    if field["name"] in ("ErrorCode", "PartitionErrorCode") and item == "int16":
        return "error_code"
    if field["name"] in timedeltas:
        return "timedelta_i32" if item == "int32" else "timedelta_i64"
    return item


def check_layout(cls: type, fields: list[dict[str, Any]], spec: dict[str, Any], version: int):
    common = {struct["name"]: struct for struct in spec.get("commonStructs", ())}
    present = [f for f in fields if message_json.in_versions(f["versions"], version)]
    built = dataclasses.fields(cls)
    module = sys.modules[cls.__module__]
    timedeltas = getattr(module, "TIMEDELTA_NAMES", message_json.THROTTLE_ONLY)
    assert [f.name for f in built] == [
        message_json.to_snake_case(
            f["name"].removesuffix("Ms") if f["name"] in timedeltas else f["name"]
        )
        for f in present
    ], cls.__name__
    assert cls.__version__ == version and cls.__api_key__ == spec["apiKey"]
    assert cls.__flexible__ == message_json.in_versions(spec["flexibleVersions"], version)
    for json_field, field in zip(present, built, strict=True):
        item, nullable, array = _inner(field.type)
        assert array == json_field["type"].startswith("[]"), field.name
        json_nullable = message_json.in_versions(json_field.get("nullableVersions"), version)
        item_name = json_field["type"].removeprefix("[]")
        if dataclasses.is_dataclass(item):
            assert item.__type__ is EntityType.nested
            assert nullable == json_nullable, field.name
            nested = json_field.get("fields") or common[item_name]["fields"]
            check_layout(item, nested, spec, version)
        else:
            kind = _json_kind(json_field, timedeltas)
            assert field.metadata["kafka_type"] == kind, field.name
            if kind == "uuid" and not array:
                assert nullable, field.name  # kio: a uuid is always UUID | None
            elif array or kind in ("string", "bytes", "records"):
                assert nullable == json_nullable, field.name
        tagged = message_json.in_versions(json_field.get("taggedVersions"), version)
        assert ("tag" in field.metadata) == tagged, field.name


@pytest.mark.parametrize("name", JSON_FILES)
def test_the_classes_have_the_jsons_layout(name):
    spec = message_json.load(name)
    table = schemas.REQUESTS if spec["type"] == "request" else schemas.RESPONSES
    versions = [
        version
        for version in message_json.version_range(spec["validVersions"])
        if table.get((spec["apiKey"], version), object).__module__ in GENERATED_MODULES
    ]
    assert versions, name
    for version in versions:
        check_layout(table[(spec["apiKey"], version)], spec["fields"], spec, version)


@pytest.mark.parametrize(("key", "version"), [(78, 1), (78, 2), (79, 2)])
def test_a_share_error_response_without_the_lock_timeout_is_written_with_zero(key, version):
    """apis/share_fetch.py's error responses leave AcquisitionLockTimeoutMs out: it is 0, as in
    Kafka, not a missing field."""
    body = codec.encode_response(
        key, version, {"error_code": ErrorCode.unknown_server_error, "responses": []}
    )
    read = codec.decode_response(key, version, body, 0)
    assert read.error_code is ErrorCode.unknown_server_error
    assert read.acquisition_lock_timeout == datetime.timedelta(0)
