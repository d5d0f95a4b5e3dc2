"""The registry as a state machine over the records of `_schemas`, and its commands.

``Registry.apply`` takes one record (key and value as ``log_format`` decodes them) and is the
only way the state changes: every broker applies the same records in the same order, so every
broker answers the same. Commands (``register``, ``delete_subject`` ...) read the state and
return the records to write, or raise ``RegistryError`` with Confluent's HTTP status, error
code and message; they change nothing themselves. The writer (the leader of `_schemas`
partition 0) runs them one at a time, against a state that has applied everything in its log,
so ids and versions are allocated once.

References follow Confluent's ``KafkaSchemaRegistry``: they are resolved depth-first against
live versions (``resolveReferences``), count in look-ups and ids, and a referenced version
is not deleted (``ReferenceExistsException``, 42206) while any version, soft-deleted or not,
references it. Departures: a reference to "latest" (-1) is kept as given and holds whichever
version is latest; depth and count of references are bounded (MAX_REFERENCE_DEPTH,
MAX_REFERENCES).

Contexts follow Confluent's ``QualifiedSubject``: a subject written ``:.name:subject`` lives
in the context ``.name``, any other in the default context ``.``. Each context has an id space
of its own (ids start at 1 in each, and the same schema in two contexts has an id in each),
schemas by id are looked up in one context, and a subject's compatibility level and mode fall
back to its context's (set on the subject ``:.name:``) before the global one. Departures:
references name subjects as written (an unqualified reference from a context's schema is not
resolved in that context), and ``:.:subject`` is a subject of its own, not ``subject``.

No I/O and no clock here; the trio service and the HTTP app are thin shells around it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from minibroker.schema_registry import log_format as lf
from minibroker.schema_registry.schemas import (
    AVRO,
    PROTOBUF,
    InvalidSchema,
    Level,
    ParsedSchema,
    UnsupportedSchemaType,
    incompatibilities,
    parse,
)

DEFAULT_LEVEL = Level.BACKWARD
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
DEFAULT_MODE = "READWRITE"
MAX_VERSION = 2**31 - 1
LATEST = -1
# Bounds on a schema's references, followed transitively (a registry's own sanity limits;
# Confluent has none).
MAX_REFERENCE_DEPTH = 64
MAX_REFERENCES = 10_000

Record = tuple[lf.Key, lf.Value]
DEFAULT_CONTEXT = "."
# The fields of a schema beside its text, type and references that Confluent keeps with it
# (since 7.4: data contracts) and counts in its identity.
EXTRA_FIELDS = ("metadata", "ruleSet")


def extras_of(body: dict[str, Any]) -> dict[str, Any]:
    """A schema's EXTRA_FIELDS from a request body or a record's value: those given and not
    null; 42201 for one that is not a JSON object."""
    found = {name: body[name] for name in EXTRA_FIELDS if body.get(name) is not None}
    for name, value in found.items():
        if not isinstance(value, dict):
            raise invalid_schema(f"Invalid schema: {name} is not an object")
    return found


def context_of(subject: str | None) -> str:
    """The context of ``subject`` (Confluent's QualifiedSubject): ``.name`` for
    ``:.name:subject`` (and for ``:.name:``, the context's own settings), the default context
    ``.`` for any other subject and for None (the global settings)."""
    if subject is not None and subject.startswith(":."):
        end = subject.find(":", 1)
        if end > 1:
            return subject[1:end]
    return DEFAULT_CONTEXT


CONTEXT_WILDCARD = ":*:"


def subject_matches(name: str, prefix: str | None) -> bool:
    """``GET /subjects?subjectPrefix=``, as Confluent reads it: no prefix, or the context
    wildcard ``:*:``, matches every context (``:*:orders`` the subjects starting with
    ``orders`` in any context); a qualified prefix (``:.staging:or``) the qualified names it
    begins; an unqualified one (``orders``, or empty) the default context's subjects only."""
    if prefix is None:
        return True
    if prefix.startswith(CONTEXT_WILDCARD):
        context = context_of(name)
        unqualified = name if context == DEFAULT_CONTEXT else name[len(context) + 2 :]
        return unqualified.startswith(prefix.removeprefix(CONTEXT_WILDCARD))
    if prefix.startswith(":"):
        return name.startswith(prefix)
    return context_of(name) == DEFAULT_CONTEXT and name.startswith(prefix)


def context_subject(context: str) -> str | None:
    """The subject under which a context's own compatibility level and mode are kept
    (``:.name:``); None, the global settings, for the default context."""
    return None if context == DEFAULT_CONTEXT else f":{context}:"


class RegistryError(Exception):
    """An answer other than success, as Confluent gives it."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: int | str) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id: int | str = "") -> RegistryError:
    if schema_id == "":
        return RegistryError(404, 40403, "Schema not found")
    return RegistryError(404, 40403, f"Schema {schema_id} not found")


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(422, 42201, detail)


def invalid_version(text: str) -> RegistryError:
    return RegistryError(
        422,
        42202,
        f"The specified version '{text}' is not a valid version id. Allowed values are between"
        ' [1, 2^31-1] and the string "latest"',
    )


def invalid_level() -> RegistryError:
    return RegistryError(
        422,
        42203,
        "Invalid compatibility level. Valid values are none, backward, forward, full,"
        " backward_transitive, forward_transitive, and full_transitive",
    )


def parse_version(text: str) -> int:
    """A path's version: a number in [1, 2^31-1], or "latest" (or -1) as LATEST."""
    if text == "latest":
        return LATEST
    try:
        number = int(text)
    except ValueError:
        raise invalid_version(text) from None
    if number == LATEST:
        return LATEST
    if not 1 <= number <= MAX_VERSION:
        raise invalid_version(text)
    return number


@dataclass
class Version:
    subject: str
    version: int
    schema_id: int
    schema: str
    schema_type: str = AVRO
    references: list[dict[str, Any]] = field(default_factory=list)
    deleted: bool = False
    # Confluent's data contracts: the schema's "metadata" and "ruleSet", kept and served as
    # given (EXTRA_FIELDS); the clients run the rules.
    extras: dict[str, Any] = field(default_factory=dict)

    def answer(self) -> dict[str, Any]:
        """GET /subjects/{s}/versions/{v} (Confluent leaves schemaType out for AVRO)."""
        body: dict[str, Any] = {
            "subject": self.subject,
            "version": self.version,
            "id": self.schema_id,
        }
        if self.schema_type != AVRO:
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = self.references
        body.update(self.extras)
        body["schema"] = self.schema
        return body

    def value(self) -> dict[str, Any]:
        """Its record's value in `_schemas`."""
        value: dict[str, Any] = {
            "subject": self.subject,
            "version": self.version,
            "id": self.schema_id,
            "schema": self.schema,
            "deleted": self.deleted,
        }
        if self.schema_type != AVRO:
            value["schemaType"] = self.schema_type
        if self.references:
            value["references"] = self.references
        value.update(self.extras)
        return value


@dataclass
class Registry:
    subjects: dict[str, dict[int, Version]] = field(default_factory=dict)
    # (context, schema type, canonical text, references, extras) -> id: a schema registered
    # again, in any subject of the context, with the same references, metadata and rule set,
    # keeps it (Confluent's ids hash those too).
    ids: dict[tuple[str, str, str, str, str], int] = field(default_factory=dict)
    # Per context, the highest id any record ever carried: new ids go above it, so none is
    # reused.
    max_ids: dict[str, int] = field(default_factory=dict)
    # None: the global setting.
    levels: dict[str | None, Level] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    # How many records could not be applied (unknown key types, missing fields).
    skipped: int = 0

    # -- applying records ------------------------------------------------------------------

    def apply(self, key: lf.Key, value: lf.Value) -> None:
        keytype = key.get("keytype")
        subject = key.get("subject")
        if keytype == lf.SCHEMA and isinstance(subject, str):
            self._apply_schema(subject, key.get("version"), value)
        elif keytype == lf.CONFIG:
            level = None if value is None else value.get("compatibilityLevel")
            if level is None:
                self.levels.pop(subject, None)
            elif level in Level.__members__:
                self.levels[subject] = Level[level]
            else:
                self.skipped += 1
        elif keytype == lf.MODE:
            mode = None if value is None else value.get("mode")
            if mode is None:
                self.modes.pop(subject, None)
            else:
                self.modes[subject] = str(mode)
        elif keytype == lf.DELETE_SUBJECT and isinstance(subject, str) and value is not None:
            upto = value.get("version")
            for version in self.subjects.get(subject, {}).values():
                if not isinstance(upto, int) or version.version <= upto:
                    version.deleted = True
        elif keytype == lf.CLEAR_SUBJECT and isinstance(subject, str):
            for number, version in list(self.subjects.get(subject, {}).items()):
                if version.deleted:
                    del self.subjects[subject][number]
        elif keytype != lf.NOOP:
            self.skipped += 1

    def _apply_schema(self, subject: str, number: object, value: lf.Value) -> None:
        if not isinstance(number, int):
            self.skipped += 1
            return
        if value is None:
            versions = self.subjects.get(subject, {})
            versions.pop(number, None)
            if not versions:
                self.subjects.pop(subject, None)
            return
        schema_id, text = value.get("id"), value.get("schema")
        if not isinstance(schema_id, int) or not isinstance(text, str):
            self.skipped += 1
            return
        schema_type = str(value.get("schemaType") or AVRO)
        try:
            extras = extras_of(value)
        except RegistryError:
            self.skipped += 1
            return
        version = Version(
            subject,
            number,
            schema_id,
            text,
            schema_type,
            list(value.get("references") or []),
            bool(value.get("deleted", False)),
            extras,
        )
        self.subjects.setdefault(subject, {})[number] = version
        context = context_of(subject)
        identity = (
            context,
            schema_type,
            text,
            _references_key(version.references),
            _extras_key(extras),
        )
        self.ids.setdefault(identity, schema_id)
        self.max_ids[context] = max(self.max_ids.get(context, 0), schema_id)

    # -- reading ---------------------------------------------------------------------------

    def subject_names(self, deleted: bool = False) -> list[str]:
        return sorted(
            name
            for name, versions in self.subjects.items()
            if any(deleted or not v.deleted for v in versions.values())
        )

    def versions(self, subject: str, deleted: bool = False) -> list[Version]:
        """The subject's versions, oldest first; 40401 when it has none."""
        found = [
            v for _, v in sorted(self.subjects.get(subject, {}).items()) if deleted or not v.deleted
        ]
        if not found:
            raise subject_not_found(subject)
        return found

    def version(self, subject: str, number: int, deleted: bool = False) -> Version:
        versions = self.versions(subject, deleted)
        if number == LATEST:
            return versions[-1]
        for version in versions:
            if version.version == number:
                return version
        raise version_not_found(number)

    def contexts(self) -> list[str]:
        """GET /contexts: the default context and every context a subject is in, sorted."""
        return sorted({DEFAULT_CONTEXT} | {context_of(name) for name in self.subjects})

    def by_id(self, schema_id: int, context: str = DEFAULT_CONTEXT) -> Version:
        """A version of ``context`` holding schema ``schema_id`` (soft-deleted ones count, as
        Confluent still serves a soft-deleted schema by id); 40403 when none does."""
        for name, versions in self.subjects.items():
            if context_of(name) != context:
                continue
            for version in versions.values():
                if version.schema_id == schema_id:
                    return version
        raise schema_not_found(schema_id)

    def subject_versions_of(
        self, schema_id: int, deleted: bool = False, context: str = DEFAULT_CONTEXT
    ) -> list[dict[str, Any]]:
        found = [
            {"subject": version.subject, "version": version.version}
            for name in sorted(self.subjects)
            if context_of(name) == context
            for _, version in sorted(self.subjects[name].items())
            if version.schema_id == schema_id and (deleted or not version.deleted)
        ]
        if not found:
            raise schema_not_found(schema_id)
        return found

    def ids_of(self, subject: str) -> set[int]:
        """The schema ids of ``subject``'s live versions (schema validation on produce)."""
        return {v.schema_id for v in self.subjects.get(subject, {}).values() if not v.deleted}

    def level(self, subject: str | None) -> Level:
        """The subject's level, else its context's, else the global one."""
        if subject is not None and subject in self.levels:
            return self.levels[subject]
        context = context_subject(context_of(subject))
        if context is not None and context in self.levels:
            return self.levels[context]
        return self.levels.get(None, DEFAULT_LEVEL)

    def mode(self, subject: str | None) -> str:
        """The subject's mode, else its context's, else the global one."""
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        context = context_subject(context_of(subject))
        if context is not None and context in self.modes:
            return self.modes[context]
        return self.modes.get(None, DEFAULT_MODE)

    def lookup(
        self,
        subject: str,
        schema_type: str,
        text: str,
        deleted: bool = False,
        references: list[dict[str, Any]] | None = None,
        extras: dict[str, Any] | None = None,
    ) -> Version:
        """POST /subjects/{s}: the version of ``subject`` holding this schema (with these
        metadata and rule set, when given)."""
        candidate = self.parse(schema_type, text, references)
        versions = self.versions(subject, deleted)
        for version in reversed(versions):
            given = extras or {}
            if _same(version, candidate, references) and all(
                version.extras.get(name) == value for name, value in given.items()
            ):
                return version
        raise schema_not_found()

    # -- references --------------------------------------------------------------------------

    def dependencies(self, references: list[dict[str, Any]] | None) -> dict[str, str]:
        """The texts of ``references`` by name, their own references included, each after
        those it depends on (Confluent's resolveReferences, a depth-first walk); 42201 when
        one names no live version, or is not {name, subject, version}."""
        found: dict[str, str] = {}
        walking: set[str] = set()
        steps = 0

        def visit(pending: list[Any], depth: int) -> None:
            nonlocal steps
            if depth > MAX_REFERENCE_DEPTH:
                raise invalid_schema("Invalid schema: schema references nested too deeply")
            for reference in pending:
                steps += 1
                if steps > MAX_REFERENCES:
                    raise invalid_schema("Invalid schema: too many schema references")
                if not isinstance(reference, dict):
                    raise invalid_schema("Invalid schema: a reference is an object")
                name, subject = reference.get("name"), reference.get("subject")
                number = reference.get("version", LATEST)
                if not isinstance(name, str) or not isinstance(subject, str):
                    raise invalid_schema("Invalid schema: a reference needs a name and a subject")
                if name in found or name in walking:
                    continue  # reached again (a diamond), or a cycle: resolved once
                try:
                    version = self.version(subject, number if isinstance(number, int) else LATEST)
                except RegistryError:
                    raise invalid_schema(
                        f"Invalid schema: reference {name!r} to subject {subject!r} version"
                        f" {number} not found"
                    ) from None
                walking.add(name)
                visit(version.references, depth + 1)
                walking.discard(name)
                found[name] = version.schema

        visit(list(references or []), 0)
        return found

    def parse(
        self, schema_type: str, text: str, references: list[dict[str, Any]] | None = None
    ) -> ParsedSchema:
        """``text`` parsed with its references resolved against this state; 42201 if not."""
        return _parsed(schema_type, text, self.dependencies(references) if references else None)

    def parsed(self, version: Version) -> ParsedSchema:
        return self.parse(version.schema_type, version.schema, version.references)

    def referenced_by(self, subject: str, number: int) -> list[int]:
        """GET /subjects/{s}/versions/{v}/referencedby: the ids of the schemas that reference
        that version (soft-deleted ones too: as Confluent's, a reference holds until the
        referencing version is permanently deleted)."""
        return self._referrers(subject, self.version(subject, number).version)

    def _referrers(self, subject: str, number: int) -> list[int]:
        # A reference to "latest" (-1) holds the subject's latest live version.
        live = [v.version for v in self.subjects.get(subject, {}).values() if not v.deleted]
        held = (number, LATEST) if live and number == max(live) else (number,)
        return sorted(
            {
                version.schema_id
                for versions in self.subjects.values()
                for version in versions.values()
                if any(
                    isinstance(ref, dict)
                    and ref.get("subject") == subject
                    and ref.get("version") in held
                    for ref in version.references
                )
            }
        )

    def _refuse_if_referenced(self, subject: str, number: int) -> None:
        """42206 when another schema references that version (Confluent's
        ReferenceExistsException, for soft and permanent deletes alike)."""
        if self._referrers(subject, number):
            raise RegistryError(
                422,
                42206,
                f"One or more references exist to the schema {{magic=1,keytype=SCHEMA,"
                f"subject={subject},version={number}}}.",
            )

    def serialized(self, version: Version) -> str:
        """``format=serialized``: a PROTOBUF schema as a base64 FileDescriptorProto (what
        confluent-kafka's ProtobufDeserializer asks for); other types as stored."""
        if version.schema_type != PROTOBUF:
            return version.schema
        return str(self.parsed(version).parsed.to_base64())  # type: ignore[attr-defined]

    # -- commands: the records to write ----------------------------------------------------

    def register(
        self,
        subject: str,
        schema_type: str,
        text: str,
        references: list[dict[str, Any]] | None = None,
        schema_id: int | None = None,
        version_number: int | None = None,
        extras: dict[str, Any] | None = None,
    ) -> tuple[int, list[Record]]:
        """POST /subjects/{s}/versions: the schema's id, and the records that register it
        (none when the subject already holds it). ``schema_id`` and ``version_number`` only
        in IMPORT mode. A schema given without metadata or rule set takes those of the
        subject's latest version (Confluent's maybePopulateFromPrevious), so registering it
        again finds that version."""
        mode = self.mode(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise RegistryError(422, 42205, f"Subject {subject} is in read-only mode")
        if (schema_id is not None or version_number is not None) and mode != "IMPORT":
            raise RegistryError(
                422,
                42205,
                "Subject is not in import mode: an id or a version may not be given",
            )
        candidate = self.parse(schema_type, text, references)
        live = [v for _, v in sorted(self.subjects.get(subject, {}).items()) if not v.deleted]
        given = dict(extras or {})
        for name in EXTRA_FIELDS:
            if name not in given and live and name in live[-1].extras:
                given[name] = live[-1].extras[name]
        for version in live:
            if _same(version, candidate, references) and version.extras == given:
                return version.schema_id, []
        if mode != "IMPORT":
            messages = incompatibilities(
                self.level(subject), candidate, [self.parsed(v) for v in live]
            )
            if messages:
                raise RegistryError(
                    409,
                    409,
                    "Schema being registered is incompatible with an earlier schema for"
                    f' subject "{subject}", details: [{", ".join(messages)}]',
                )
        context = context_of(subject)
        identity = (
            context,
            candidate.schema_type,
            candidate.canonical,
            _references_key(references),
            _extras_key(given),
        )
        if schema_id is None:
            schema_id = self.ids.get(identity)
            if schema_id is None:
                schema_id = self.max_ids.get(context, 0) + 1
        elif self.ids.get(identity, schema_id) != schema_id:
            raise RegistryError(
                422, 42207, f"Schema is already registered with another id than {schema_id}"
            )
        existing = self.subjects.get(subject, {})
        if version_number is None:
            version_number = max(existing, default=0) + 1
        version = Version(
            subject,
            version_number,
            schema_id,
            candidate.canonical,
            candidate.schema_type,
            list(references or []),
            extras=given,
        )
        return schema_id, [(lf.schema_key(subject, version_number), version.value())]

    def delete_subject(self, subject: str, permanent: bool) -> tuple[list[int], list[Record]]:
        """DELETE /subjects/{s}: the versions deleted and the records that do it."""
        self._writable(subject)
        every = self.versions(subject, deleted=True)
        live = [v for v in every if not v.deleted]
        if permanent and live:
            raise RegistryError(
                404,
                40405,
                f"Subject '{subject}' was not deleted first before being permanently deleted",
            )
        for version in every if permanent else live:
            self._refuse_if_referenced(subject, version.version)
        if permanent:
            return [v.version for v in every], [
                (lf.schema_key(subject, v.version), None) for v in every
            ]
        if not live:
            raise RegistryError(404, 40404, f"Subject '{subject}' was soft deleted.")
        return [v.version for v in live], [
            (
                lf.delete_subject_key(subject),
                {"subject": subject, "version": live[-1].version},
            )
        ]

    def delete_version(
        self, subject: str, number: int, permanent: bool
    ) -> tuple[int, list[Record]]:
        """DELETE /subjects/{s}/versions/{v}."""
        self._writable(subject)
        every = self.versions(subject, deleted=True)
        if number == LATEST:
            live = [v for v in every if not v.deleted]
            if not live:
                raise subject_not_found(subject)
            version = live[-1]
        else:
            matching = [v for v in every if v.version == number]
            if not matching:
                raise version_not_found(number)
            version = matching[0]
        if permanent and not version.deleted:
            raise RegistryError(
                404,
                40407,
                f"Subject '{subject}' Version {version.version} was not deleted first"
                " before being permanently deleted",
            )
        if not permanent and version.deleted:
            raise RegistryError(
                404, 40406, f"Subject '{subject}' Version {version.version} was soft deleted."
            )
        self._refuse_if_referenced(subject, version.version)
        if permanent:
            return version.version, [(lf.schema_key(subject, version.version), None)]
        deleted = Version(**{**version.__dict__, "deleted": True})
        return version.version, [(lf.schema_key(subject, version.version), deleted.value())]

    def set_level(self, subject: str | None, level: object) -> tuple[Level, list[Record]]:
        if not isinstance(level, str) or level.upper() not in Level.__members__:
            raise invalid_level()
        chosen = Level[level.upper()]
        return chosen, [(lf.config_key(subject), {"compatibilityLevel": chosen.value})]

    def delete_level(self, subject: str | None) -> tuple[Level, list[Record]]:
        if subject is not None and subject not in self.levels:
            raise RegistryError(
                404,
                40408,
                f"Subject '{subject}' does not have subject-level compatibility configured",
            )
        return self.level(subject), [(lf.config_key(subject), None)]

    def set_mode(self, subject: str | None, mode: object, force: bool) -> tuple[str, list[Record]]:
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise RegistryError(
                422,
                42204,
                "Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE and IMPORT.",
            )
        chosen = mode.upper()
        if chosen == "IMPORT" and not force:
            names = self.subject_names()
            if names if subject is None else subject in names:
                raise RegistryError(
                    422,
                    42205,
                    "Cannot import since found existing subjects",
                )
        return chosen, [(lf.mode_key(subject), {"mode": chosen})]

    def check(
        self,
        subject: str,
        number: int,
        schema_type: str,
        text: str,
        verbose: bool,
        references: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """POST /compatibility/subjects/{s}/versions/{v}: against that version, or (latest)
        against the versions the subject's level checks."""
        candidate = self.parse(schema_type, text, references)
        live = self.versions(subject)
        earlier = live if number == LATEST else [self.version(subject, number)]
        level = self.level(subject)
        if number != LATEST and level.transitive:
            level = Level[level.value.removesuffix("_TRANSITIVE")]
        messages = incompatibilities(level, candidate, [self.parsed(v) for v in earlier])
        answer: dict[str, Any] = {"is_compatible": not messages}
        if verbose:
            answer["messages"] = messages
        return answer

    def _writable(self, subject: str) -> None:
        if self.mode(subject) in ("READONLY", "READONLY_OVERRIDE"):
            raise RegistryError(422, 42205, f"Subject {subject} is in read-only mode")


def _parsed(
    schema_type: str, text: str, dependencies: dict[str, str] | None = None
) -> ParsedSchema:
    try:
        return parse(schema_type, text, dependencies)
    except UnsupportedSchemaType as error:
        raise invalid_schema(f"Invalid schema: {error}") from None
    except InvalidSchema as error:
        raise invalid_schema(str(error)) from None


def _references_key(references: list[dict[str, Any]] | None) -> str:
    """References compared as Confluent compares them: name, subject and version, in order."""
    return json.dumps(
        [
            [ref.get("name"), ref.get("subject"), ref.get("version")]
            for ref in references or []
            if isinstance(ref, dict)
        ]
    )


def _extras_key(extras: dict[str, Any]) -> str:
    return json.dumps(extras, sort_keys=True, separators=(",", ":"))


def _same(
    version: Version, candidate: ParsedSchema, references: list[dict[str, Any]] | None
) -> bool:
    """Whether ``version`` holds ``candidate`` with the same references."""
    if version.schema_type != candidate.schema_type:
        return False
    if _references_key(version.references) != _references_key(references):
        return False
    if version.schema == candidate.canonical:
        return True
    try:
        return _parsed(version.schema_type, version.schema).canonical == candidate.canonical
    except RegistryError:
        return False
