"""Request decoding and response encoding on top of kio's schemas.

Handlers describe a response once, as plain dicts, lists and ints, for every version of an API.
``build`` turns that description into the kio entity of the exact version asked for: fields the
version lacks are dropped, fields the description leaves out take the schema default. This keeps
version differences out of the handlers; the cost (a Python walk over the response) is paid
once per response and the conversion plans are cached per class.
"""

import dataclasses
import datetime
import io
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any, TypeVar

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional
from kio.serial.readers import Reader
from kio.serial.writers import Writer
from kio.static.protocol import Entity, RequestPayload, ResponsePayload

from minibroker.protocol import schemas
from minibroker.protocol.bounds import InvalidArrayError, check_array_counts, entity_step
from minibroker.protocol.buffers import Buffer
from minibroker.protocol.versions import FIRST_FLEXIBLE_VERSION, ApiKey

_UTC = datetime.UTC
E = TypeVar("E", bound=Entity)
# A field's plan: its name, how to convert a plain value, and what to use when it is omitted
# (None, a value, or one of the sentinels _USE_SCHEMA_DEFAULT and _REQUIRED).
_FieldPlan = tuple[str, Callable[[Any], Any] | None, object]


class DecodeError(ValueError):
    """The request body does not parse with the schema of its key and version."""


@cache
def request_class(api_key: int, api_version: int) -> type[RequestPayload]:
    """kio's schema, or protocol.schemas' for the versions kio 0.6.1 lacks."""
    extra = schemas.REQUESTS.get((api_key, api_version))
    if extra is not None:
        return extra
    return load_request_schema(api_key, api_version)


@cache
def response_class(api_key: int, api_version: int) -> type[ResponsePayload]:
    extra = schemas.RESPONSES.get((api_key, api_version))
    if extra is not None:
        return extra
    return load_response_schema(api_key, api_version)


@cache
def request_is_flexible(api_key: int, api_version: int) -> bool:
    """Whether the request uses header v2: from the table for the APIs minibroker knows (for
    the versions kio has a schema of, without loading it), from kio's schema for the other
    APIs (to answer them), false for anything kio has no schema for (an ApiVersions of a
    future version is read as header v1, all its answer needs)."""
    first_flexible = FIRST_FLEXIBLE_VERSION.get(api_key)
    if first_flexible is not None:
        known = schema_name_map.get(api_key_map.get(api_key, ""), {})
        extra = (api_key, api_version) in schemas.REQUESTS
        return (api_version in known or extra) and api_version >= first_flexible
    try:
        return bool(request_class(api_key, api_version).__flexible__)
    except Exception:
        return False


def response_uses_flexible_header(api_key: int, api_version: int) -> bool:
    """A flexible response has header v1, except ApiVersions, which answers with header v0
    at every version so any client can read it."""
    if api_key == ApiKey.API_VERSIONS:
        return False
    return request_is_flexible(api_key, api_version)


@cache
def _reader(cls: type[Entity]) -> Reader[Any]:
    return entity_reader(cls)


@cache
def _writer(cls: type[Entity]) -> Writer[Entity]:
    return entity_writer(cls)


def warm(api_versions: Iterable[tuple[int, int]]) -> None:
    """Load, ahead of the first request, what decoding a request and encoding its response
    at these (api key, version) pairs takes: kio's schema modules (imported on first use:
    5-25 ms each on the reference machine, Fetch v16's request the slowest), their readers
    and writers, and the bounds walk. A node serves from one thread, so a first use while
    serving stalls every client for that long (issue 40's cold run). Idempotent (cached)."""
    for api_key, api_version in api_versions:
        request = request_class(api_key, api_version)
        _reader(request)
        entity_step(request)
        _writer(response_class(api_key, api_version))


def decode_request(api_key: int, api_version: int, frame: Buffer, offset: int) -> Any:
    """Decode a request body; trailing bytes after it are ignored, as Kafka ignores them.

    Array counts are checked against the bytes left first (protocol.bounds): kio reserves
    memory for a whole array as soon as it reads the count, and a failed allocation aborts
    the process. Null non-nullable arrays are refused there too, and tagged fields that the
    schema does not know are dropped there, as Kafka ignores them.
    """
    if not isinstance(frame, bytes):
        frame = memoryview(frame).toreadonly()  # kio reads any read-only buffer
    cls = request_class(api_key, api_version)
    try:
        frame = check_array_counts(cls, frame, offset)
    except InvalidArrayError as error:
        raise DecodeError(f"cannot decode api {api_key} v{api_version}: {error}") from error
    try:
        value, _size = _reader(cls)(frame, offset)
    except Exception as error:
        raise DecodeError(f"cannot decode api {api_key} v{api_version}: {error}") from error
    return value


def decode_response(api_key: int, api_version: int, frame: Buffer, offset: int) -> Any:
    """Decode a response body (the broker is a client too: fetchers, controller channels)."""
    if not isinstance(frame, bytes):
        frame = memoryview(frame).toreadonly()
    try:
        value, _size = _reader(response_class(api_key, api_version))(frame, offset)
    except Exception as error:
        raise DecodeError(f"cannot decode response {api_key} v{api_version}: {error}") from error
    return value


def encode_entity(entity: Entity) -> bytes:
    """Serialise a kio entity (a response body, or a request body in tests and fetchers)."""
    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()


def _ms_to_timedelta(value: Any) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=value)


def _ms_to_datetime(value: Any) -> datetime.datetime | None:
    if value is None or isinstance(value, datetime.datetime):
        return value
    return datetime.datetime.fromtimestamp(value / 1000, tz=_UTC)


def _add_error_code(name: str, value: int, retriable: bool) -> None:
    """Give kio's ErrorCode a code of Kafka's it lacks (kio 0.6.1 stops at 127), so responses
    carrying it are written and read like any other; a no-op once kio has it."""
    if value in ErrorCode._value2member_map_:
        return
    member = int.__new__(ErrorCode, value)
    member._value_ = value
    member._name_ = name
    member.retriable = retriable
    member.__objclass__ = ErrorCode  # type: ignore[attr-defined]
    ErrorCode._value2member_map_[value] = member
    ErrorCode._member_map_[name] = member


# KIP-848's INVALID_REGULAR_EXPRESSION (Kafka 4.0).
_add_error_code("invalid_regular_expression", 128, False)
# KIP-1102's REBOOTSTRAP_REQUIRED (Kafka 4.0; ApiVersions v5 answers it, KIP-1242).
_add_error_code("rebootstrap_required", 129, False)
# KIP-1071's streams group errors (Kafka 4.0+).
_add_error_code("streams_invalid_topology", 130, False)
_add_error_code("streams_invalid_topology_epoch", 131, False)
_add_error_code("streams_topology_fenced", 132, False)
# KIP-1331's StreamsGroupTopologyDescriptionUpdate (Kafka 4.4).
_add_error_code("streams_topology_description_update_failed", 135, False)


def _to_error_code(value: Any) -> ErrorCode:
    return ErrorCode(int(value))


_SCALAR_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "timedelta_i32": _ms_to_timedelta,
    "timedelta_i64": _ms_to_timedelta,
    "datetime_i64": _ms_to_datetime,
    "error_code": _to_error_code,
}


_USE_SCHEMA_DEFAULT = object()
_REQUIRED = object()
# Fields every response of some versions requires but no handler needs to think about.
_IMPLICIT_VALUES: dict[str, Any] = {"throttle_time": datetime.timedelta(0)}


@cache
def _plan(cls: type[Entity]) -> tuple[_FieldPlan, ...]:
    """For each field: its name, how to convert a plain value, and what to use when omitted."""
    steps: list[_FieldPlan] = []
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        has_default = field.default is not dataclasses.MISSING
        if isinstance(kind, EntityTupleField):
            steps.append((field.name, _tuple_builder(kind.type_), ()))
            continue
        converter: Callable[[Any], Any] | None
        fallback: object
        if isinstance(kind, EntityField):
            converter = _entity_builder(kind.type_)
        else:
            converter = _SCALAR_CONVERTERS.get(field.metadata.get("kafka_type", ""))
        if has_default:
            fallback = _USE_SCHEMA_DEFAULT
        elif is_optional(field):
            fallback = None  # a nullable field left out is null
        else:
            fallback = _IMPLICIT_VALUES.get(field.name, _REQUIRED)
        steps.append((field.name, converter, fallback))
    return tuple(steps)


def _tuple_builder(nested: type[Entity]) -> Callable[[Any], tuple[Entity, ...] | None]:
    def build_tuple(items: Any) -> tuple[Entity, ...] | None:
        if items is None:
            return None
        return tuple(item if isinstance(item, nested) else build(nested, item) for item in items)

    return build_tuple


def _entity_builder(nested: type[Entity]) -> Callable[[Any], Entity | None]:
    def build_entity(item: Any) -> Entity | None:
        if item is None or isinstance(item, nested):
            return item
        return build(nested, item)

    return build_entity


def build(cls: type[E], data: dict[str, Any]) -> E:
    """Build a kio entity of ``cls`` from a version-neutral description.

    Keys the class does not have are ignored; fields missing from ``data`` take the schema
    default (an empty tuple for arrays, null for nullable fields, zero throttle time). A
    required scalar that is missing is a bug in the handler and raises KeyError naming it.
    """
    kwargs: dict[str, object] = {}
    for name, converter, fallback in _plan(cls):
        if name in data:
            value = data[name]
            kwargs[name] = converter(value) if converter is not None else value
        elif fallback is _REQUIRED:
            raise KeyError(f"{cls.__module__}.{cls.__qualname__} needs field {name!r}")
        elif fallback is not _USE_SCHEMA_DEFAULT:
            kwargs[name] = fallback
    return cls(**kwargs)


def encode_response(api_key: int, api_version: int, data: dict[str, Any]) -> bytes:
    """Build and serialise the response body of ``api_key`` at ``api_version``."""
    return encode_entity(build(response_class(api_key, api_version), data))
