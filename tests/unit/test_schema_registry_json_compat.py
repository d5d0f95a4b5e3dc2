"""Confluent's JSON Schema compatibility rules in the registry's pure core, checked against
Confluent Schema Registry's own cases (json-schema-provider's diff-schema-examples.json and
diff-combined-schema-examples.json, copied into tests/unit/data from confluentinc/schema-registry
at 794611bd), and through the registry's levels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minibroker.schema_registry import json_compat
from minibroker.schema_registry.state import Registry, RegistryError

DATA = Path(__file__).parent / "data"
CASES = [
    case
    for name in (
        "confluent-json-diff-examples.json",
        "confluent-json-diff-combined-schema-examples.json",
    )
    for case in json.loads((DATA / name).read_text())
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["description"])
def test_confluents_json_schema_diff_examples(case):
    incompatible = json_compat.incompatible(case["original_schema"], case["update_schema"])
    assert (not incompatible) is case["compatible"], (incompatible, case["changes"])
    # Each incompatible change we name is one Confluent names (type and path).
    assert set(incompatible) <= {tuple(change.split(" ", 1)) for change in case["changes"]}


def test_the_cases_are_there():
    assert len(CASES) >= 130


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}


def register(registry: Registry, subject: str, schema: dict) -> int:
    schema_id, records = registry.register(subject, "JSON", json.dumps(schema))
    for key, value in records:
        registry.apply(key, value)
    return schema_id


def level(registry: Registry, subject: str, name: str) -> None:
    registry.apply(*registry.set_level(subject, name)[1][0])


def test_open_content_model_under_backward_forward_and_full():
    registry = Registry()
    register(registry, "p", PERSON)
    # An optional property added to an open content model: Confluent's strict rules refuse it
    # (old data may hold that property with another type).
    with pytest.raises(RegistryError) as refused:
        register(
            registry,
            "p",
            {**PERSON, "properties": {**PERSON["properties"], "email": {"type": "string"}}},
        )
    assert refused.value.code == 409
    assert "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL" in refused.value.message
    # Widening integer to number is backward compatible, not forward.
    wider = {**PERSON, "properties": {**PERSON["properties"], "age": {"type": "number"}}}
    assert registry.check("p", -1, "JSON", json.dumps(wider), False)["is_compatible"]
    level(registry, "p", "FORWARD")
    assert not registry.check("p", -1, "JSON", json.dumps(wider), False)["is_compatible"]
    # Removing "name" from required: backward yes; FULL checks both ways.
    relaxed = {**PERSON, "required": []}
    assert registry.check("p", -1, "JSON", json.dumps(relaxed), False)["is_compatible"] is False
    level(registry, "p", "BACKWARD")
    assert registry.check("p", -1, "JSON", json.dumps(relaxed), False)["is_compatible"]
    level(registry, "p", "FULL")
    verbose = registry.check("p", -1, "JSON", json.dumps(relaxed), True)
    assert not verbose["is_compatible"]
    assert any("REQUIRED_ATTRIBUTE_ADDED" in m for m in verbose["messages"])


def test_closed_content_model_and_transitive_levels():
    closed = {**PERSON, "additionalProperties": False}
    registry = Registry()
    level(registry, None, "BACKWARD_TRANSITIVE")
    register(registry, "c", closed)
    # An optional property added to a closed model: compatible.
    v2 = {**closed, "properties": {**closed["properties"], "email": {"type": "string"}}}
    assert register(registry, "c", v2) == 2
    # Narrowing age to a string against v2 and v1 both: refused, TYPE_CHANGED.
    v3 = {**v2, "properties": {**v2["properties"], "age": {"type": "string"}}}
    with pytest.raises(RegistryError) as refused:
        register(registry, "c", v3)
    assert "TYPE_CHANGED" in refused.value.message and "#/properties/age" in refused.value.message
    # A property removed from a closed model breaks readers of v1 under transitive only.
    v4 = {**v2, "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}
    del v4["properties"]["age"]
    level(registry, "c", "BACKWARD")
    backward = registry.check("c", -1, "JSON", json.dumps(v4), True)
    assert not backward["is_compatible"]
    assert any("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL" in m for m in backward["messages"])
    level(registry, "c", "NONE")
    assert register(registry, "c", v3) == 3
