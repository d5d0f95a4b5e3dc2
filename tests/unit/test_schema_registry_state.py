"""The schema registry's pure core: records applied, commands, Avro compatibility levels."""

import json

import pytest

from minibroker.schema_registry import log_format as lf
from minibroker.schema_registry.schemas import Level
from minibroker.schema_registry.state import (
    LATEST,
    Registry,
    RegistryError,
    extras_of,
    parse_version,
    subject_matches,
)


def record(*fields: tuple[str, str, object]) -> str:
    return json.dumps(
        {
            "type": "record",
            "name": "User",
            "fields": [
                {"name": name, "type": kind, **({} if default is ... else {"default": default})}
                for name, kind, default in fields
            ],
        }
    )


V1 = record(("name", "string", ...))
V2_NO_DEFAULT = record(("name", "string", ...), ("age", "int", ...))
V2_DEFAULT = record(("name", "string", ...), ("age", "int", 0))
V3_DROPS_NAME = record(("age", "int", 0))


def applied(registry: Registry, records) -> None:
    """Round trip through the wire format, as the service applies them."""
    for key, value in records:
        registry.apply(lf.decode_key(lf.encode(key)), lf.decode_value(lf.encode(value)))


def register(registry: Registry, subject: str, schema: str, schema_type: str = "AVRO") -> int:
    schema_id, records = registry.register(subject, schema_type, schema)
    applied(registry, records)
    return schema_id


def test_records_are_confluents_layout():
    registry = Registry()
    _, [(key, value)] = registry.register("users-value", "AVRO", V1)
    assert lf.encode(key) == b'{"keytype":"SCHEMA","subject":"users-value","version":1,"magic":1}'
    assert value == {
        "subject": "users-value",
        "version": 1,
        "id": 1,
        "schema": json.dumps(json.loads(V1), separators=(",", ":")),
        "deleted": False,
    }
    _, [(key, value)] = registry.set_level(None, "full")
    assert lf.encode(key) == b'{"keytype":"CONFIG","subject":null,"magic":0}'
    assert value == {"compatibilityLevel": "FULL"}


def test_adding_a_field_without_default_is_refused_under_backward_accepted_under_none():
    registry = Registry()
    assert register(registry, "s", V1) == 1
    with pytest.raises(RegistryError) as refused:
        registry.register("s", "AVRO", V2_NO_DEFAULT)
    assert (refused.value.status, refused.value.code) == (409, 409)
    assert "age" in refused.value.message
    applied(registry, registry.set_level("s", "NONE")[1])
    assert register(registry, "s", V2_NO_DEFAULT) == 2
    assert [v.version for v in registry.versions("s")] == [1, 2]


def test_a_field_with_default_is_backward_compatible():
    registry = Registry()
    register(registry, "s", V1)
    assert register(registry, "s", V2_DEFAULT) == 2


def test_forward_refuses_what_old_readers_cannot_read():
    registry = Registry()
    applied(registry, registry.set_level(None, "FORWARD")[1])
    register(registry, "s", V2_DEFAULT)
    # Dropping a field without default in the old reader: old readers cannot read new data.
    with pytest.raises(RegistryError):
        registry.register("s", "AVRO", record(("age", "int", 0)))
    # Adding a field is forward compatible: the old reader ignores it.
    register(registry, "s", record(("name", "string", ...), ("age", "int", 0), ("x", "int", ...)))


def test_transitive_levels_check_every_earlier_version():
    # `third` requires `age`: it reads `second`'s data but not `first`'s, which has none.
    first = record(("name", "string", ...))
    second = record(("name", "string", ...), ("age", "int", 0))
    third = record(("name", "string", ...), ("age", "int", ...))
    registry = Registry()
    register(registry, "s", first)
    register(registry, "s", second)
    assert register(registry, "s", third) > 0  # BACKWARD: against `second` only
    registry = Registry()
    applied(registry, registry.set_level("s", "BACKWARD_TRANSITIVE")[1])
    register(registry, "s", first)
    register(registry, "s", second)
    with pytest.raises(RegistryError) as refused:
        registry.register("s", "AVRO", third)
    assert refused.value.code == 409


def test_ids_are_stable_across_subjects_and_re_registration():
    registry = Registry()
    first = register(registry, "a", V1)
    assert register(registry, "a", V1) == first
    assert register(registry, "b", json.dumps(json.loads(V1), indent=4)) == first
    other = register(registry, "c", V3_DROPS_NAME)
    assert other == first + 1
    assert registry.subject_versions_of(first) == [
        {"subject": "a", "version": 1},
        {"subject": "b", "version": 1},
    ]


def test_soft_and_hard_delete():
    registry = Registry()
    register(registry, "s", V1)
    register(registry, "s", V2_DEFAULT)
    with pytest.raises(RegistryError) as first:
        registry.delete_subject("s", permanent=True)
    assert first.value.code == 40405
    versions, records = registry.delete_subject("s", permanent=False)
    assert versions == [1, 2]
    applied(registry, records)
    assert registry.subject_names() == []
    assert registry.subject_names(deleted=True) == ["s"]
    with pytest.raises(RegistryError) as gone:
        registry.versions("s")
    assert gone.value.code == 40401
    # A soft-deleted schema is still served by id.
    assert registry.by_id(1).schema_id == 1
    applied(registry, registry.delete_subject("s", permanent=True)[1])
    with pytest.raises(RegistryError) as missing:
        registry.by_id(1)
    assert missing.value.code == 40403
    # Ids are never reused, even after a hard delete.
    assert register(registry, "t", record(("z", "int", ...))) == 3


def test_delete_version_and_latest():
    registry = Registry()
    register(registry, "s", V1)
    register(registry, "s", V2_DEFAULT)
    number, records = registry.delete_version("s", LATEST, permanent=False)
    assert number == 2
    applied(registry, records)
    assert registry.version("s", LATEST).version == 1
    with pytest.raises(RegistryError) as error:
        registry.version("s", 2)
    assert error.value.code == 40402
    # A new version goes above the soft-deleted one.
    _, records = registry.register("s", "AVRO", V2_DEFAULT)
    assert records[0][0]["version"] == 3


def test_bad_input_gets_confluents_codes():
    registry = Registry()
    for schema_type, text in (("AVRO", "{not json"), ("AVRO", '{"type":"nope"}'), ("FOO", "{}")):
        with pytest.raises(RegistryError) as error:
            registry.register("s", schema_type, text)
        assert (error.value.status, error.value.code) == (422, 42201)
    with pytest.raises(RegistryError) as protobuf:
        registry.register("s", "PROTOBUF", 'syntax = "proto3"; message M { Unknown u = 1; }')
    assert protobuf.value.code == 42201 and "Unknown" in protobuf.value.message
    with pytest.raises(RegistryError) as level:
        registry.set_level(None, "SIDEWAYS")
    assert level.value.code == 42203
    for text in ("0", "x", str(2**31)):
        with pytest.raises(RegistryError) as version:
            parse_version(text)
        assert version.value.code == 42202
    assert parse_version("latest") == LATEST == parse_version("-1")


def test_json_schemas_are_validated():
    registry = Registry()
    good = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    assert register(registry, "j", good, "JSON") == 1
    with pytest.raises(RegistryError) as error:
        registry.register("j2", "JSON", json.dumps({"type": 12}))
    assert error.value.code == 42201
    assert registry.version("j", 1).answer()["schemaType"] == "JSON"


def test_check_endpoint_and_read_only_mode():
    registry = Registry()
    register(registry, "s", V1)
    assert registry.check("s", LATEST, "AVRO", V2_DEFAULT, False) == {"is_compatible": True}
    verdict = registry.check("s", 1, "AVRO", V2_NO_DEFAULT, True)
    assert verdict["is_compatible"] is False and verdict["messages"]
    applied(registry, registry.set_mode(None, "READONLY", False)[1])
    with pytest.raises(RegistryError) as error:
        registry.register("s", "AVRO", V2_DEFAULT)
    assert error.value.code == 42205
    assert registry.level("s") is Level.BACKWARD


def test_unknown_records_are_skipped_not_fatal():
    registry = Registry()
    registry.apply({"keytype": "SOMETHING_NEW"}, {"x": 1})
    registry.apply({"keytype": "NOOP", "magic": 0}, None)
    registry.apply({"keytype": "SCHEMA", "subject": "s", "version": "x"}, {})
    assert registry.skipped == 2
    with pytest.raises(lf.RecordFormatError):
        lf.decode_key(b"not json")


def test_the_collector_reports_requests_subjects_and_schemas():
    from collections import Counter
    from types import SimpleNamespace

    from minibroker.schema_registry.service import SchemaRegistryCollector

    registry = Registry()
    register(registry, "a", V1)
    register(registry, "b", V1)
    register(registry, "b", V2_DEFAULT)
    register(registry, ":.other:c", V2_DEFAULT)  # id 1 of another context: one more schema
    service = SimpleNamespace(
        registry=registry,
        requests=Counter({("POST /subjects/{subject}/versions", 200): 3}),
        writes=3,
        is_writer=lambda: True,
    )
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in SchemaRegistryCollector(service).collect()  # type: ignore[arg-type]
        for sample in family.samples
    }
    endpoint = (("endpoint", "POST /subjects/{subject}/versions"), ("status", "200"))
    assert samples[("minibroker_schema_registry_requests_total", endpoint)] == 3
    assert samples[("minibroker_schema_registry_subjects", ())] == 3
    assert samples[("minibroker_schema_registry_schemas", ())] == 3
    assert samples[("minibroker_schema_registry_writer", ())] == 1


def test_contexts_have_ids_levels_and_modes_of_their_own():
    """Confluent's contexts (QualifiedSubject): ``:.name:subject`` is in context ``.name``,
    whose ids start at 1 apart from the default context's; a schema by id is looked up in
    one context; a subject's level and mode fall back to its context's (kept on the subject
    ``:.name:``) before the global one; /contexts lists ``.`` and every context used."""
    registry = Registry()
    assert registry.contexts() == ["."]
    assert register(registry, "users-value", V1) == 1
    assert register(registry, "orders-value", V2_DEFAULT) == 2
    # The same schema in another context gets that context's first id, not the default's 1.
    assert register(registry, ":.staging:users-value", V2_DEFAULT) == 1
    assert register(registry, ":.staging:orders-value", V1) == 2
    assert register(registry, ":.staging:more-value", V1) == 2  # same schema, same context
    assert registry.contexts() == [".", ".staging"]
    assert registry.by_id(1).subject == "users-value"
    assert registry.by_id(1, ".staging").subject == ":.staging:users-value"
    assert registry.by_id(1, ".staging").schema == json.dumps(
        json.loads(V2_DEFAULT), separators=(",", ":")
    )
    assert registry.subject_versions_of(2, context=".staging") == [
        {"subject": ":.staging:more-value", "version": 1},
        {"subject": ":.staging:orders-value", "version": 1},
    ]
    with pytest.raises(RegistryError) as caught:
        registry.by_id(3, ".staging")
    assert (caught.value.status, caught.value.code) == (404, 40403)
    # The context's level applies to its subjects only; a subject's own still wins.
    applied(registry, registry.set_level(":.staging:", "NONE")[1])
    assert registry.level(":.staging:users-value") is Level.NONE
    assert registry.level("users-value") is Level.BACKWARD
    register(registry, ":.staging:users-value", V2_NO_DEFAULT)  # NONE takes what BACKWARD refuses
    with pytest.raises(RegistryError) as caught:
        register(registry, "users-value", V2_NO_DEFAULT)
    assert caught.value.code == 409
    applied(registry, registry.set_level(":.staging:orders-value", "FULL")[1])
    assert registry.level(":.staging:orders-value") is Level.FULL
    applied(registry, registry.set_mode(":.staging:", "READONLY", False)[1])
    assert registry.mode(":.staging:orders-value") == "READONLY"
    assert registry.mode("orders-value") == "READWRITE"
    with pytest.raises(RegistryError) as caught:
        register(registry, ":.staging:new-value", V1)
    assert caught.value.code == 42205
    # Records as Confluent writes them for a context are read back into the same state.
    copy = Registry()
    for subject in registry.subject_names():
        for version in registry.versions(subject):
            copy.apply(lf.schema_key(subject, version.version), version.value())
    assert copy.max_ids == {".": 2, ".staging": 3}
    assert copy.by_id(3, ".staging").subject == ":.staging:users-value"


def test_metadata_and_rule_sets_are_kept_served_and_counted_in_ids():
    """Confluent's data contracts (7.4+): a schema's "metadata" and "ruleSet" are kept with
    it, in its record and its answers; the same text with another rule set is another
    version with another id; a schema given without them takes the latest version's
    (maybePopulateFromPrevious), so registering it again finds that version."""
    registry = Registry()
    rules = {"domainRules": [{"name": "r", "kind": "CONDITION", "mode": "READ", "type": "CEL"}]}
    metadata = {"properties": {"owner": "team-a"}}
    first, records = registry.register(
        "s", "AVRO", V1, extras={"ruleSet": rules, "metadata": metadata}
    )
    applied(registry, records)
    [(_, value)] = records
    assert value["ruleSet"] == rules and value["metadata"] == metadata
    version = registry.version("s", 1)
    assert version.answer()["ruleSet"] == rules
    assert version.answer()["metadata"] == metadata
    assert registry.register("s", "AVRO", V1) == (first, [])  # inherits: the same version
    assert registry.lookup("s", "AVRO", V1).version == 1
    other_rules = {"domainRules": []}
    second = register_with(registry, "s", V1, {"ruleSet": other_rules})
    assert second != first
    assert registry.version("s", 2).extras == {"ruleSet": other_rules, "metadata": metadata}
    assert registry.lookup("s", "AVRO", V1, extras={"ruleSet": rules}).version == 1
    with pytest.raises(RegistryError) as caught:
        extras_of({"schema": V1, "ruleSet": [], "metadata": None})
    assert (caught.value.status, caught.value.code) == (422, 42201)
    assert extras_of({"schema": V1, "ruleSet": rules, "metadata": None}) == {"ruleSet": rules}


def register_with(registry: Registry, subject: str, schema: str, extras: dict) -> int:
    schema_id, records = registry.register(subject, "AVRO", schema, extras=extras)
    applied(registry, records)
    return schema_id


def test_subject_prefixes_are_read_as_confluent_reads_them():
    """GET /subjects?subjectPrefix=: none or the wildcard ``:*:`` (the default of Confluent's
    CLI) spans every context, a qualified prefix its context, a plain one the default
    context."""
    names = ["orders-value", "users-value", ":.staging:orders-value", ":.staging:x", ":.b:o"]

    def matching(prefix):
        return [name for name in names if subject_matches(name, prefix)]

    assert matching(None) == names
    assert matching(":*:") == names
    assert matching(":*:or") == ["orders-value", ":.staging:orders-value"]
    assert matching(":.staging:") == [":.staging:orders-value", ":.staging:x"]
    assert matching(":.staging:o") == [":.staging:orders-value"]
    assert matching(":.st") == [":.staging:orders-value", ":.staging:x"]
    assert matching("or") == ["orders-value"]
    assert matching("") == ["orders-value", "users-value"]
