"""Protobuf schemas in the registry's pure core: parsing (.proto text and confluent-kafka's
base64 FileDescriptorProto), references, and Confluent's Protobuf compatibility rules, checked
against Confluent Schema Registry's own cases (protobuf-provider's diff-schema-examples.json,
copied into tests/unit/data from confluentinc/schema-registry at 794611bd)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from minibroker.schema_registry import protobuf_schema
from minibroker.schema_registry.state import Registry, RegistryError

CASES = json.loads(
    (Path(__file__).parent / "data" / "confluent-protobuf-diff-examples.json").read_text()
)
# Cases that need what this registry does not do: Confluent's metadata
# (confluent:reserved) and references resolved by Confluent's own test harness.
SKIPPED = {
    case["description"]
    for case in CASES
    if case.get("original_metadata")
    or case.get("update_metadata")
    or "import " in case["original_schema"] + case["update_schema"]
}


@pytest.mark.parametrize(
    "case",
    [case for case in CASES if case["description"] not in SKIPPED],
    ids=lambda case: case["description"],
)
def test_confluents_protobuf_diff_examples(case):
    original = protobuf_schema.parse(case["original_schema"])
    update = protobuf_schema.parse(case["update_schema"])
    incompatible = protobuf_schema.incompatible(original, update)
    assert (not incompatible) is case["compatible"], (incompatible, case["changes"])
    # The incompatible changes Confluent names are among ours.
    expected = {change.split(" ")[0] for change in case["changes"]}
    assert {kind for kind, _ in incompatible} <= expected | {"FIELD_NAMED_TYPE_CHANGED"}


def test_most_of_confluents_cases_run():
    assert len(CASES) - len(SKIPPED) >= 40


V1 = 'syntax = "proto3";\npackage shop;\nmessage Order {\n  string id = 1;\n  int64 cents = 2;\n}\n'


def register(registry: Registry, subject: str, text: str, references=None) -> int:
    schema_id, records = registry.register(subject, "PROTOBUF", text, references)
    for key, value in records:
        registry.apply(key, value)
    return schema_id


def test_levels_and_transitivity():
    registry = Registry()
    assert register(registry, "orders-value", V1) == 1
    # A field added: compatible both ways.
    v2 = V1.replace("}\n", "  string note = 3;\n}\n", 1)
    assert register(registry, "orders-value", v2) == 2
    # A scalar kind changed (int64 to string): refused with Confluent's 409.
    bad = v2.replace("int64 cents", "string cents")
    with pytest.raises(RegistryError) as error:
        register(registry, "orders-value", bad)
    assert (error.value.status, error.value.code) == (409, 409)
    assert "FIELD_SCALAR_KIND_CHANGED" in error.value.message and "#/Order/2" in error.value.message
    # int64 to int32 is the same kind (GENERAL_NUMBER): accepted, as Confluent accepts it.
    assert register(registry, "orders-value", v2.replace("int64 cents", "int32 cents")) == 3
    # Under NONE anything goes.
    registry.apply(*registry.set_level("orders-value", "NONE")[1][0])
    assert register(registry, "orders-value", bad) == 4


def test_transitive_levels_check_every_version():
    registry = Registry()
    registry.apply(*registry.set_level(None, "NONE")[1][0])
    register(registry, "t", V1)
    register(registry, "t", V1.replace("int64 cents", "string cents"))
    back_to_int = V1.replace("string id", "int32 id")  # id's kind changes against both
    candidate = V1.replace("int64 cents", "double cents").replace("int64", "double")
    registry.apply(*registry.set_level("t", "FULL")[1][0])
    # The latest (cents: string) and the candidate (cents: double): incompatible either way.
    assert not registry.check("t", -1, "PROTOBUF", candidate, False)["is_compatible"]
    # string again matches the latest but not version 1 (int64): FULL yes, FULL_TRANSITIVE no.
    again = V1.replace("int64 cents", "string cents").replace("}\n", "  bool x = 9;\n}\n", 1)
    assert registry.check("t", -1, "PROTOBUF", again, False)["is_compatible"]
    registry.apply(*registry.set_level("t", "FULL_TRANSITIVE")[1][0])
    assert not registry.check("t", -1, "PROTOBUF", again, True)["is_compatible"]
    assert not registry.check("t", -1, "PROTOBUF", back_to_int, False)["is_compatible"]


def test_references_and_the_serialized_format():
    registry = Registry()
    money = 'syntax = "proto3";\npackage common;\nmessage Money { int64 units = 1; }\n'
    register(registry, "money.proto", money)
    order = (
        'syntax = "proto3";\npackage shop;\nimport "money.proto";\n'
        "message Order { string id = 1; common.Money total = 2; }\n"
    )
    reference = [{"name": "money.proto", "subject": "money.proto", "version": 1}]
    schema_id = register(registry, "orders-value", order, reference)
    version = registry.version("orders-value", -1)
    assert version.references == reference
    assert registry.referenced_by("money.proto", 1) == [schema_id]
    # A referenced version may not be deleted (Confluent's 42206).
    with pytest.raises(RegistryError) as referenced:
        registry.delete_version("money.proto", 1, False)
    assert referenced.value.code == 42206
    # Without its reference, the import does not resolve: 42201.
    with pytest.raises(RegistryError) as missing:
        registry.register("other", "PROTOBUF", order)
    assert missing.value.code == 42201
    # format=serialized: the base64 FileDescriptorProto confluent-kafka decodes.
    proto = protobuf_schema.descriptor_pb2.FileDescriptorProto.FromString(
        base64.b64decode(registry.serialized(version))
    )
    assert [m.name for m in proto.message_type] == ["Order"]
    assert list(proto.dependency) == ["money.proto"]
    # A serialized descriptor registers as the text does, and keeps its id when sent again.
    serialized = registry.serialized(registry.version("money.proto", 1))
    first = register(registry, "money-serialized", serialized)
    assert register(registry, "money-serialized", serialized) == first


def test_well_known_types_need_no_reference():
    text = (
        'syntax = "proto3";\nimport "google/protobuf/timestamp.proto";\n'
        "message Event { google.protobuf.Timestamp at = 1; map<string, int32> counts = 2; }\n"
    )
    parsed = protobuf_schema.parse(text)
    assert parsed.file.message_types_by_name["Event"].fields_by_name["counts"].message_type


@pytest.mark.parametrize(
    "text",
    [
        "message {",
        'syntax = "proto3"; message M { string a = 1; int32 b = 1; }',
        'syntax = "proto3"; message M { Missing m = 1; }',
        'syntax = "proto3"; import "nowhere.proto"; message M {}',
        'syntax = "proto9"; message M {}',
    ],
)
def test_bad_protobuf_is_42201(text):
    with pytest.raises(RegistryError) as error:
        Registry().register("s", "PROTOBUF", text)
    assert (error.value.status, error.value.code) == (422, 42201)
