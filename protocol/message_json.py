"""kio-shaped schema classes built at import time from Kafka's own message JSONs.

kio 0.6.1 was generated from Kafka's message definitions of its day and stops there; the APIs
and versions it lacks are built here from the JSON files of Kafka 4.4 (``protocol/messages/``,
copied from kafka-clients-4.4.0.jar's ``common/message/``, Apache-2.0, headers kept), one frozen
dataclass per struct and version, in the shape kio's generator gives its own classes, so kio's
readers and writers (and ``protocol.codec``, ``protocol.bounds``) serve them like any other
schema:

- ClassVars ``__type__`` (request, response or nested), ``__version__``, ``__flexible__``,
  ``__api_key__`` and ``__header_schema__`` (request header v2 or v1, response header v1 or v0);
- one field per JSON field present at the version, in the JSON's order, named in snake case
  by kio's rule (``to_snake_case``), with ``metadata={"kafka_type": ...}`` for primitives and
  primitive arrays and ``"tag"`` for tagged fields;
- the types kio's generator gives: ``ErrorCode`` for fields named ErrorCode or
  PartitionErrorCode, ``uuid.UUID | None`` for every uuid, ``X | None`` for what is nullable at
  the version, the entity types of ``kio.schema.types`` (GroupId, TopicName, BrokerId, ...) for
  an ``entityType`` kio knows, a timedelta (``i32Timedelta``, name without ``Ms``) for the
  ``...Ms`` fields the caller names, plain integers for the others;
- defaults from the JSON (``"null"`` is None), ``()`` for primitive arrays, none for the rest
  (except the fields a module names in ``zero_defaults``).

Building at import time rather than committing generated code keeps the JSON the one source:
a new version is a new JSON file, not a thousand lines to regenerate and review, and
tests/unit/test_message_json.py checks every class built against its JSON's layout and
round-trips it through the codec. The price is that mypy does not see the classes' fields;
handlers build responses from dicts (``codec.build``) and read requests as kio entities, so
they never needed it.
"""

from __future__ import annotations

import builtins
import dataclasses
import datetime
import json
import re
import uuid
from collections.abc import Iterable
from functools import cache
from importlib import resources
from typing import Any

from kio.schema import types as kio_types
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.static.constants import EntityType
from kio.static.primitive import (
    Records,
    f64,
    i8,
    i16,
    i32,
    i32Timedelta,
    i64,
    i64Timedelta,
    u8,
    u16,
    u32,
    u64,
)

# Primitive JSON type -> (kafka_type, Python type).
_PRIMITIVES: dict[str, tuple[str, type]] = {
    "bool": ("bool", bool),
    "int8": ("int8", i8),
    "int16": ("int16", i16),
    "int32": ("int32", i32),
    "int64": ("int64", i64),
    "uint8": ("uint8", u8),
    "uint16": ("uint16", u16),
    "uint32": ("uint32", u32),
    "uint64": ("uint64", u64),
    "float64": ("float64", f64),
    "string": ("string", str),
    "bytes": ("bytes", bytes),
    "records": ("records", Records),
    "uuid": ("uuid", uuid.UUID),
}
_NUMBERS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
_ERROR_CODE_NAMES = frozenset({"ErrorCode", "PartitionErrorCode"})
# The time fields kio's generator turns into timedeltas (codegen/parser.py's timedelta_names).
KIO_TIMEDELTA_NAMES = frozenset(
    {
        "timeoutMs",
        "TimeoutMs",
        "ThrottleTimeMs",
        "MaxWaitMs",
        "SessionLifetimeMs",
        "TransactionTimeoutMs",
        "MaxLifetimeMs",
        "SessionTimeoutMs",
        "RebalanceTimeoutMs",
        "ExpiryTimePeriodMs",
        "RenewPeriodMs",
        "RetentionTimeMs",
        "HeartbeatIntervalMs",
        "PushIntervalMs",
    }
)
THROTTLE_ONLY = frozenset({"ThrottleTimeMs"})
_BUILTINS = frozenset(dir(builtins))


def to_snake_case(value: str) -> str:
    """kio's codegen/case.py: ``ISRReplicas`` -> ``isr_replicas``, ``Type`` -> ``type_``."""
    groups: list[str] = []
    current = value[0]
    for offset in range(1, len(value)):
        char = value[offset]
        previous = current[-1]
        following = value[offset + 1] if offset + 1 < len(value) else ""
        if following == "":
            if previous.islower() and char.isupper():
                groups.append(current)
                current = char
            else:
                current += char
            break
        if (
            (previous.isupper() and char.isupper() and following.islower())
            or (previous.islower() and char.isupper())
            or (previous.isdigit() and char.isupper() and following.islower())
        ):
            groups.append(current)
            current = char
        else:
            current += char
    groups.append(current)
    formatted = "_".join(groups).lower()
    return formatted + "_" if formatted in _BUILTINS else formatted


def in_versions(spec: str | None, version: int) -> bool:
    """Kafka's version ranges: ``"0+"``, ``"1-3"``, ``"2"``, ``"none"`` (or absent)."""
    if spec is None or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


def version_range(spec: str) -> range:
    low, _, high = spec.partition("-")
    return range(int(low), int(high or low) + 1)


_COMMENT = re.compile(r"^\s*//.*$", re.MULTILINE)


@cache
def load(filename: str) -> dict[str, Any]:
    """One of protocol/messages/'s JSON files (Kafka's, with its ``//`` comment lines)."""
    text = resources.files(__package__).joinpath("messages", filename).read_text()
    spec: dict[str, Any] = json.loads(_COMMENT.sub("", text))
    return spec


def _entity_type(name: str | None) -> type | None:
    if name is None:
        return None
    found = getattr(kio_types, name[0].upper() + name[1:], None)
    return found if isinstance(found, type) else None


def _default(kind: str, value: Any, python_type: type) -> Any:
    if value == "null":
        return None
    if kind == "error_code":
        return ErrorCode(int(value))
    if kind in ("timedelta_i32", "timedelta_i64"):
        delta = datetime.timedelta(milliseconds=int(value))
        return (i32Timedelta if kind == "timedelta_i32" else i64Timedelta).parse(delta)
    if kind == "bool":
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if kind in _NUMBERS:
        return python_type(int(value, 0) if isinstance(value, str) else int(value))
    if kind == "float64":
        return python_type(float(value))
    return python_type(value)


_IMPLICIT_TAGGED = {"bool": False, "error_code": ErrorCode.none}


class MessageBuilder:
    """The classes of one message JSON at one version: nested structs first, then the message
    itself. ``class_name(struct_name)`` names each nested struct's class; ``zero_defaults``
    (JSON names) are numeric fields that default to 0 when the JSON gives no default."""

    def __init__(
        self,
        spec: dict[str, Any],
        version: int,
        class_name: Any,
        timedelta_names: frozenset[str],
        module: str,
        zero_defaults: frozenset[str] = frozenset(),
    ) -> None:
        self.spec = spec
        self.version = version
        self.class_name = class_name
        self.timedelta_names = timedelta_names
        self.zero_defaults = zero_defaults
        self.module = module
        self.flexible = in_versions(spec.get("flexibleVersions"), version)
        if spec["type"] == "request":
            self.header: type = RequestHeaderV2 if self.flexible else RequestHeaderV1
        else:
            self.header = ResponseHeaderV1 if self.flexible else ResponseHeaderV0
        self.common = {struct["name"]: struct for struct in spec.get("commonStructs", ())}
        self.classes: dict[str, type] = {}

    def build(self) -> type:
        top = self._make(
            self.spec["name"], self.spec["fields"], EntityType[self.spec["type"]], None
        )
        return top

    def _make(
        self, struct: str, fields: list[dict[str, Any]], kind: EntityType, name: str | None
    ) -> type:
        made: list[tuple[str, Any, dataclasses.Field[Any]]] = []
        for field in fields:
            if in_versions(field.get("versions"), self.version):
                made.append(self._field(field))
        cls_name = name or f"{struct}V{self.version}"
        namespace = {
            "__type__": kind,
            "__version__": i16(self.version),
            "__flexible__": self.flexible,
            "__api_key__": i16(self.spec["apiKey"]),
            "__header_schema__": self.header,
        }
        cls = dataclasses.make_dataclass(
            cls_name, made, namespace=namespace, frozen=True, slots=True, kw_only=True
        )
        cls.__module__ = self.module
        return cls

    def _struct(self, type_name: str, field: dict[str, Any]) -> type:
        if type_name not in self.classes:
            struct_fields = field.get("fields")
            if struct_fields is None:
                struct_fields = self.common[type_name]["fields"]
            self.classes[type_name] = self._make(
                type_name, struct_fields, EntityType.nested, self.class_name(type_name)
            )
        return self.classes[type_name]

    def _field(self, field: dict[str, Any]) -> tuple[str, Any, dataclasses.Field[Any]]:
        json_name: str = field["name"]
        json_type: str = field["type"]
        nullable = in_versions(field.get("nullableVersions"), self.version)
        tag = field.get("tag") if in_versions(field.get("taggedVersions"), self.version) else None
        metadata: dict[str, Any] = {}
        if tag is not None:
            metadata["tag"] = int(tag)
        default: Any = dataclasses.MISSING
        is_array = json_type.startswith("[]")
        item = json_type.removeprefix("[]")
        name = to_snake_case(json_name)
        if item in _PRIMITIVES:
            kind, python_type = _PRIMITIVES[item]
            if json_name in _ERROR_CODE_NAMES and item == "int16":
                kind, python_type = "error_code", ErrorCode
            elif json_name in self.timedelta_names and item in ("int32", "int64"):
                kind = "timedelta_i32" if item == "int32" else "timedelta_i64"
                python_type = i32Timedelta if item == "int32" else i64Timedelta
                name = to_snake_case(json_name.removesuffix("Ms"))
            elif item in ("string", "int32", "int64"):
                python_type = _entity_type(field.get("entityType")) or python_type
            metadata["kafka_type"] = kind
            annotation: Any = python_type
            if is_array:
                annotation = tuple[python_type, ...]  # type: ignore[valid-type]
                default = None if field.get("default") == "null" else ()
                if nullable:
                    annotation = annotation | None
            else:
                optional = nullable and item not in _NUMBERS | {"float64", "bool"}
                if optional or item == "uuid":
                    annotation = python_type | None
                if "default" in field:
                    default = _default(kind, field["default"], python_type)
                elif json_name in self.zero_defaults:
                    default = _default(kind, 0, python_type)
                elif tag is not None:
                    default = None if optional else _IMPLICIT_TAGGED.get(kind, python_type())
        else:
            struct = self._struct(item, field)
            annotation = tuple[struct, ...] if is_array else struct  # type: ignore[valid-type]
            if nullable:
                annotation = annotation | None
            if field.get("default") == "null" or (tag is not None and nullable):
                default = None
            elif tag is not None:
                default = () if is_array else struct()
        made = dataclasses.field(default=default, metadata=metadata or None)
        return name, annotation, made


def build_classes(
    filename: str,
    class_name: Any,
    *,
    timedelta_names: frozenset[str] = THROTTLE_ONLY,
    module: str = __name__,
    versions: Iterable[int] | None = None,
    zero_defaults: frozenset[str] = frozenset(),
) -> dict[int, tuple[type, dict[str, type]]]:
    """For each valid version of the message in ``filename`` (or those of ``versions``): its
    class and its nested structs' classes by JSON struct name. ``class_name(message, struct,
    version)`` names a nested struct's class; the message's own class is its JSON name plus
    ``V<version>``."""
    spec = load(filename)
    built: dict[int, tuple[type, dict[str, type]]] = {}
    for version in versions if versions is not None else version_range(spec["validVersions"]):
        builder = MessageBuilder(
            spec,
            version,
            lambda struct, v=version: class_name(spec["name"], struct, v),
            timedelta_names,
            module,
            zero_defaults,
        )
        top = builder.build()
        built[version] = (top, builder.classes)
    return built


def build_module(
    filenames: Iterable[str],
    class_name: Any,
    module: str,
    *,
    timedelta_names: frozenset[str] = THROTTLE_ONLY,
    versions: Iterable[int] | None = None,
    zero_defaults: frozenset[str] = frozenset(),
) -> tuple[dict[tuple[int, int], type], dict[tuple[int, int], type], dict[str, type]]:
    """The classes of the messages in ``filenames`` for a schema module: its REQUESTS and
    RESPONSES tables ((api key, version) -> class, as protocol.schemas registers them) and
    every class by name, for the module's globals. ``versions``: only these (those valid in
    each file), for the messages whose earlier versions kio has. ``zero_defaults``: JSON names
    of numeric fields without a JSON default that default to zero here (Kafka's own implicit
    default), for responses that handlers build without them."""
    requests: dict[tuple[int, int], type] = {}
    responses: dict[tuple[int, int], type] = {}
    names: dict[str, type] = {}
    for filename in filenames:
        spec = load(filename)
        table = requests if spec["type"] == "request" else responses
        valid = version_range(spec["validVersions"])
        built = build_classes(
            filename,
            class_name,
            timedelta_names=timedelta_names,
            module=module,
            versions=valid if versions is None else [v for v in versions if v in valid],
            zero_defaults=zero_defaults,
        )
        for version, (top, nested) in built.items():
            table[(int(spec["apiKey"]), version)] = top
            for cls in (top, *nested.values()):
                if names.setdefault(cls.__name__, cls) is not cls:
                    raise ValueError(f"{filename}: two classes named {cls.__name__}")
    return requests, responses, names
