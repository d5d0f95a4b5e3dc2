"""Schema references for AVRO and JSON in the registry's pure core: parsing, compatibility,
look-ups, referencedby and the deletes a reference refuses (Confluent's 42201 and 42206)."""

import json

import pytest

from minibroker.schema_registry import json_compat
from minibroker.schema_registry import log_format as lf
from minibroker.schema_registry.state import Registry, RegistryError

ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "com.example",
    "fields": [{"name": "city", "type": "string"}],
}
COUNTRY = {"type": "enum", "name": "Country", "namespace": "com.example", "symbols": ["FR", "NO"]}
# Address v2 uses Country from another subject: references are followed transitively.
ADDRESS_WITH_COUNTRY = {
    **ADDRESS,
    "fields": [*ADDRESS["fields"], {"name": "country", "type": "com.example.Country"}],
}
USER = {
    "type": "record",
    "name": "User",
    "namespace": "com.example",
    "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "Address"}],
}
ADDRESS_REF = {"name": "com.example.Address", "subject": "address", "version": 1}


def applied(registry: Registry, records) -> None:
    for key, value in records:
        registry.apply(lf.decode_key(lf.encode(key)), lf.decode_value(lf.encode(value)))


def register(registry: Registry, subject: str, schema: object, schema_type="AVRO", refs=None):
    schema_id, records = registry.register(subject, schema_type, json.dumps(schema), refs)
    applied(registry, records)
    return schema_id


def refused(code: int, call, *args) -> RegistryError:
    with pytest.raises(RegistryError) as caught:
        call(*args)
    assert caught.value.code == code, caught.value.message
    return caught.value


def test_avro_schema_uses_a_referenced_named_type(autojump_clock):
    registry = Registry()
    register(registry, "address", ADDRESS)
    user_id = register(registry, "users-value", USER, refs=[ADDRESS_REF])
    version = registry.version("users-value", 1)
    assert version.references == [ADDRESS_REF]
    # Stored as given: the referenced type is not inlined.
    assert json.loads(version.schema) == USER
    parsed = registry.parsed(version).parsed
    assert parsed.fields_dict["home"].type.fullname == "com.example.Address"
    # Without the reference, Address is an unknown type: 42201.
    error = refused(42201, registry.register, "other", "AVRO", json.dumps(USER), None)
    assert "Address" in error.message
    # The same text and references again: the same id, no new record.
    assert registry.register("users-value", "AVRO", json.dumps(USER), [ADDRESS_REF]) == (
        user_id,
        [],
    )
    # Look-up by schema resolves the references too; without them the schema does not parse.
    assert registry.lookup("users-value", "AVRO", json.dumps(USER), references=[ADDRESS_REF])
    refused(42201, registry.lookup, "users-value", "AVRO", json.dumps(USER), False, [])
    # The same text with other references (to a second, equal Address) is another schema.
    register(registry, "address-copy", ADDRESS)
    copy = [{**ADDRESS_REF, "subject": "address-copy"}]
    refused(40403, registry.lookup, "users-value", "AVRO", json.dumps(USER), False, copy)
    assert register(registry, "users-value-copy", USER, refs=copy) != user_id


def test_unresolvable_or_malformed_references_are_42201(autojump_clock):
    registry = Registry()
    register(registry, "address", ADDRESS)
    text = json.dumps(USER)
    missing_subject = [{"name": "com.example.Address", "subject": "nowhere", "version": 1}]
    missing_version = [{**ADDRESS_REF, "version": 7}]
    error = refused(42201, registry.register, "users-value", "AVRO", text, missing_subject)
    assert "nowhere" in error.message
    refused(42201, registry.register, "users-value", "AVRO", text, missing_version)
    refused(42201, registry.register, "users-value", "AVRO", text, [{"subject": "address"}])
    refused(42201, registry.register, "users-value", "AVRO", text, ["address"])
    refused(42201, registry.check, "address", -1, "AVRO", text, False, missing_subject)


def test_references_are_followed_transitively_and_diamonds_parse_once(autojump_clock):
    registry = Registry()
    register(registry, "country", COUNTRY)
    country_ref = {"name": "com.example.Country", "subject": "country", "version": 1}
    register(registry, "address", ADDRESS_WITH_COUNTRY, refs=[country_ref])
    # User names both Address (which uses Country) and Country itself: a diamond.
    user = {
        **USER,
        "fields": [*USER["fields"], {"name": "born", "type": "com.example.Country"}],
    }
    register(registry, "users-value", user, refs=[ADDRESS_REF, country_ref])
    dependencies = registry.dependencies(registry.version("users-value", 1).references)
    # Each after what it uses, as Confluent's resolveReferences orders them.
    assert list(dependencies) == ["com.example.Country", "com.example.Address"]


def test_compatibility_follows_referenced_types(autojump_clock):
    registry = Registry()
    register(registry, "address", ADDRESS)
    address_v2 = {
        **ADDRESS,
        "fields": [*ADDRESS["fields"], {"name": "zip", "type": "string"}],
    }
    # Address v2 adds zip without a default: refused under the subject's BACKWARD, taken
    # under NONE.
    refused(409, registry.register, "address", "AVRO", json.dumps(address_v2), None)
    applied(registry, registry.set_level("address", "NONE")[1])
    register(registry, "address", address_v2)
    register(registry, "users-value", USER, refs=[ADDRESS_REF])
    # A User v2 of the same text that moves to Address v2 cannot read data written with v1 (zip has
    # no default): the check reaches into the referenced type.
    v2_ref = {**ADDRESS_REF, "version": 2}
    error = refused(409, registry.register, "users-value", "AVRO", json.dumps(USER), [v2_ref])
    assert "zip" in error.message
    check = registry.check("users-value", -1, "AVRO", json.dumps(USER), True, [v2_ref])
    assert check["is_compatible"] is False


def test_json_schema_refs_resolve_to_referenced_documents(autojump_clock):
    registry = Registry()
    address = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "additionalProperties": False,
    }
    register(registry, "address.json", address, "JSON")
    ref = {"name": "address.json", "subject": "address.json", "version": 1}
    user = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "home": {"$ref": "address.json"}},
    }
    register(registry, "users-value", user, "JSON", [ref])
    # Address v2 narrows city to an integer: a User moving to it is incompatible, which only
    # a comparison that follows the $ref into the referenced documents can see.
    narrowed = {**address, "properties": {"city": {"type": "integer"}}}
    applied(registry, registry.set_level("address.json", "NONE")[1])
    register(registry, "address.json", narrowed, "JSON")
    v2 = {**ref, "version": 2}
    error = refused(409, registry.register, "users-value", "JSON", json.dumps(user), [v2])
    assert "TYPE_CHANGED" in error.message and "#/properties/home" in error.message


def test_bundle_rewrites_refs_into_the_referenced_copies(autojump_clock):
    referenced = {
        "a.json": {"definitions": {"X": {"type": "string"}}, "$ref": "#/definitions/X"},
        "b.json": {"$ref": "a.json#/definitions/X"},
    }
    bundled = json_compat.bundle({"$ref": "b.json", "title": "t"}, referenced)
    key = json_compat.REFERENCES_KEY
    assert bundled["$ref"] == f"#/{key}/1"
    assert bundled[key][0]["$ref"] == f"#/{key}/0/definitions/X"
    assert bundled[key][1]["$ref"] == f"#/{key}/0/definitions/X"
    assert json_compat.bundle(True, referenced) is True
    # Comparing a bundled schema with itself finds nothing; with a changed referenced
    # document, the change at the place the $ref leads to.
    changed = {**referenced, "a.json": {"definitions": {"X": {"type": "integer"}}}}
    changed["a.json"]["$ref"] = "#/definitions/X"
    same = json_compat.bundle({"$ref": "b.json"}, referenced)
    assert json_compat.incompatible(same, same) == []
    assert json_compat.incompatible(same, json_compat.bundle({"$ref": "b.json"}, changed)) == [
        ("TYPE_CHANGED", "#/")
    ]


def test_referencedby_and_deletes_refused_while_referenced(autojump_clock):
    registry = Registry()
    register(registry, "address", ADDRESS)
    user_id = register(registry, "users-value", USER, refs=[ADDRESS_REF])
    assert registry.referenced_by("address", 1) == [user_id]
    assert registry.referenced_by("address", -1) == [user_id]
    refused(42206, registry.delete_version, "address", 1, False)
    refused(42206, registry.delete_subject, "address", False)
    # A soft-deleted referrer still holds its reference (it is served by id): the
    # referenced version stays, and is still listed as referenced.
    applied(registry, registry.delete_subject("users-value", False)[1])
    assert registry.referenced_by("address", 1) == [user_id]
    refused(42206, registry.delete_version, "address", 1, False)
    # Once the referrer is permanently deleted, the referenced one may go, soft then hard.
    applied(registry, registry.delete_subject("users-value", True)[1])
    assert registry.referenced_by("address", 1) == []
    applied(registry, registry.delete_version("address", 1, False)[1])
    applied(registry, registry.delete_version("address", 1, True)[1])
    refused(40401, registry.versions, "address", True)


def test_a_hard_delete_of_a_referenced_soft_deleted_version_is_42206(autojump_clock):
    registry = Registry()
    register(registry, "address", ADDRESS)
    # The referenced version soft-deleted first (a record an IMPORT or another registry
    # wrote), then referenced: the permanent delete is refused while the reference holds.
    applied(registry, registry.delete_version("address", 1, False)[1])
    user = registry.subjects["address"][1]
    registry.apply(
        lf.schema_key("users-value", 1),
        {
            "subject": "users-value",
            "version": 1,
            "id": user.schema_id + 1,
            "schema": json.dumps(USER),
            "references": [ADDRESS_REF],
            "deleted": False,
        },
    )
    error = refused(42206, registry.delete_version, "address", 1, True)
    assert "subject=address,version=1" in error.message
    refused(42206, registry.delete_subject, "address", True)


def test_a_reference_to_latest_holds_the_latest_live_version(autojump_clock):
    registry = Registry()
    register(registry, "address", ADDRESS)
    user_id = register(registry, "users-value", USER, refs=[{**ADDRESS_REF, "version": -1}])
    assert registry.referenced_by("address", 1) == [user_id]
    refused(42206, registry.delete_version, "address", -1, False)
