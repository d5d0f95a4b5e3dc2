"""Schemas by type: parsing, the stored (canonical) text, and compatibility, with no I/O.

Avro uses Apache Avro's own Python package (``avro``): its ``avro.compatibility`` is a port of
the Java library's ``SchemaCompatibility`` reader/writer checker, which is what Confluent
Schema Registry itself calls for AVRO subjects, so the same pairs of schemas are compatible
here and there (fastavro parses faster but has no compatibility checker, which would have to
be written by hand). JSON Schema documents are checked with ``jsonschema``'s validator for the
dialect they name (Draft 7 when they name none, as Confluent does); their compatibility rules
are Confluent's JSON Schema diff (``json_compat``). PROTOBUF schemas are parsed and compared by
``protobuf_schema`` (Confluent's ``protobuf.diff`` rules), with their references given as
``dependencies``.

References (``dependencies``: the referenced schemas' texts by reference name, each after
those it depends on, as Confluent's ``resolveReferences`` orders them) are resolved as
Confluent's providers resolve them: an AVRO schema's named types are parsed first into the
names the schema is parsed with (Confluent's ``AvroSchema`` parses them with one
``Schema.Parser``), so the schema uses them by name; a JSON schema's ``$ref``s to a
reference's name (``"$ref": "address.json"``, with or without a ``#/...`` fragment) resolve to
that document (Confluent loads them into everit's schema loader under their names). The text
stored and served stays the schema's own; the parsed form carries the referenced types.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum

import avro.compatibility
import avro.errors
import avro.name
import avro.schema
import jsonschema.exceptions
import jsonschema.validators

from minibroker.schema_registry import json_compat, protobuf_schema

AVRO = "AVRO"
JSON = "JSON"
PROTOBUF = "PROTOBUF"
# What GET /schemas/types lists: the types this registry can register.
SUPPORTED_TYPES = (JSON, PROTOBUF, AVRO)
KNOWN_TYPES = (AVRO, JSON, PROTOBUF)


class Level(Enum):
    """Confluent's compatibility levels."""

    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        return self in (
            Level.BACKWARD,
            Level.BACKWARD_TRANSITIVE,
            Level.FULL,
            Level.FULL_TRANSITIVE,
        )

    @property
    def forward(self) -> bool:
        return self in (Level.FORWARD, Level.FORWARD_TRANSITIVE, Level.FULL, Level.FULL_TRANSITIVE)


class InvalidSchema(ValueError):
    """A schema that cannot be parsed (Confluent's 42201)."""


class UnsupportedSchemaType(ValueError):
    """A type this registry does not handle yet, or does not know."""


@dataclass(frozen=True)
class ParsedSchema:
    schema_type: str
    # The text stored and served: the schema's JSON, compact (so whitespace does not make two
    # registrations of one schema differ).
    canonical: str
    parsed: object


def parse(schema_type: str, text: str, dependencies: dict[str, str] | None = None) -> ParsedSchema:
    """Parse ``text`` as a schema of ``schema_type``; InvalidSchema or UnsupportedSchemaType.
    ``dependencies``: the texts of its references by name (PROTOBUF's imports)."""
    if schema_type == PROTOBUF:
        try:
            proto = protobuf_schema.parse(text, dependencies)
        except protobuf_schema.ProtobufError as error:
            raise InvalidSchema(f"Invalid schema: {error}") from None
        # Stored as given (less surrounding blanks): .proto text or a base64 descriptor.
        return ParsedSchema(PROTOBUF, text.strip(), proto)
    if schema_type not in KNOWN_TYPES:
        raise UnsupportedSchemaType(f"Unknown schema type {schema_type}")
    try:
        document = json.loads(text)
    except (ValueError, TypeError) as error:
        raise InvalidSchema(f"Invalid schema: {error}") from None
    canonical = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    if schema_type == AVRO:
        names = _avro_names(dependencies or {})
        try:
            return ParsedSchema(AVRO, canonical, avro.schema.make_avsc_object(document, names))
        except (avro.errors.AvroException, TypeError, ValueError, AttributeError) as error:
            raise InvalidSchema(f"Invalid schema: {error}") from None
    if not isinstance(document, (dict, bool)):
        raise InvalidSchema("Invalid schema: a JSON schema is an object or a boolean")
    referenced = _json_documents(dependencies or {})
    try:
        validator = jsonschema.validators.validator_for(
            document, default=jsonschema.validators.Draft7Validator
        )
        validator.check_schema(document)
    except jsonschema.exceptions.SchemaError as error:
        raise InvalidSchema(f"Invalid schema: {error.message}") from None
    return ParsedSchema(JSON, canonical, json_compat.bundle(document, referenced))


def _avro_names(dependencies: dict[str, str]) -> avro.name.Names:
    """The named types of an AVRO schema's references, parsed in order (each after those it
    uses), for the schema to use by name."""
    names = avro.name.Names()
    for name, text in dependencies.items():
        try:
            document = json.loads(text)
            if isinstance(document, dict) and isinstance(document.get("name"), str):
                full = avro.name.Name(document["name"], document.get("namespace"), None)
                if full.fullname in names.names:
                    continue  # reached twice through a diamond of references: parsed once
            avro.schema.make_avsc_object(document, names)
        except (avro.errors.AvroException, TypeError, ValueError, AttributeError) as error:
            raise InvalidSchema(f"Invalid schema: reference {name!r}: {error}") from None
        names.default_namespace = None
    return names


def _json_documents(dependencies: dict[str, str]) -> dict[str, object]:
    documents: dict[str, object] = {}
    for name, text in dependencies.items():
        try:
            documents[name] = json.loads(text)
        except (ValueError, TypeError) as error:
            raise InvalidSchema(f"Invalid schema: reference {name!r}: {error}") from None
    return documents


def _avro_messages(reader: ParsedSchema, writer: ParsedSchema, direction: str) -> list[str]:
    checker = avro.compatibility.ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
    result = checker.get_compatibility(
        reader.parsed,  # type: ignore[arg-type]
        writer.parsed,  # type: ignore[arg-type]
    )
    if result.compatibility is avro.compatibility.SchemaCompatibilityType.compatible:
        return []
    kinds = ", ".join(sorted(kind.name.upper() for kind in result.incompatibilities))
    where = ", ".join(sorted(result.locations))
    what = ", ".join(sorted(str(message) for message in result.messages))
    return [f"{{errorType:'{kinds}', description:'{direction}: {what}', location:'{where}'}}"]


def _protobuf_messages(original: ParsedSchema, update: ParsedSchema) -> list[str]:
    """Confluent's details for each incompatible difference (ProtobufSchema's
    isCompatible: ``{errorType:..., description:...}``)."""
    found = protobuf_schema.incompatible(
        original.parsed,  # type: ignore[arg-type]
        update.parsed,  # type: ignore[arg-type]
    )
    return _diff_messages(found)


def _diff_messages(found: list[tuple[str, str]]) -> list[str]:
    """Confluent's detail of each incompatible difference (its errorType and location)."""
    return [
        f"{{errorType:'{kind}', description:'The change {kind} at path '{path}' of the new"
        f" schema is incompatible with the old schema', location:'{path}'}}"
        for kind, path in dict.fromkeys(found)
    ]


def incompatibilities(
    level: Level, candidate: ParsedSchema, earlier: list[ParsedSchema]
) -> list[str]:
    """Why ``candidate`` may not follow ``earlier`` (oldest first) under ``level``: empty when
    it may. Non-transitive levels check the latest version only, as Confluent does."""
    if level is Level.NONE or not earlier:
        return []
    checked = earlier if level.transitive else earlier[-1:]
    messages: list[str] = []
    for previous in reversed(checked):
        if previous.schema_type != candidate.schema_type:
            messages.append(
                f"Incompatible schema type {candidate.schema_type}: the subject holds"
                f" {previous.schema_type}"
            )
            continue
        if candidate.schema_type == PROTOBUF:
            if level.backward:
                messages += _protobuf_messages(previous, candidate)
            if level.forward:
                messages += _protobuf_messages(candidate, previous)
            continue
        if candidate.schema_type == JSON:
            if level.backward:
                messages += _diff_messages(
                    json_compat.incompatible(previous.parsed, candidate.parsed)
                )
            if level.forward:
                messages += _diff_messages(
                    json_compat.incompatible(candidate.parsed, previous.parsed)
                )
            continue
        if level.backward:
            messages += _avro_messages(
                candidate, previous, "The new schema cannot read data written with an earlier one"
            )
        if level.forward:
            messages += _avro_messages(
                previous, candidate, "An earlier schema cannot read data written with the new one"
            )
    return messages
