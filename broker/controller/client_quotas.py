"""Client quotas decided on the ControllerState: AlterClientQuotas and DescribeClientQuotas
with Kafka's rules (``ClientQuotaControlManager`` for the alterations, ``ClientQuotasImage``
for the description), and what the controller pushes to brokers.

An entity is a set of (entity type, name) pairs: ``user`` and ``client-id``, together or
alone, or ``ip`` alone; a name of None is the type's default. Its quotas are Kafka's keys:
``producer_byte_rate`` and ``consumer_byte_rate`` (whole numbers), ``request_percentage`` and
``controller_mutation_rate`` for users and client ids, ``connection_creation_rate`` (a whole
number) for IPs. Every value must be greater than 0; an alteration of an entity is applied all
or none, and each entity gets its own answer, as in Kafka.

Departures: an ``ip`` name must be an IP address (Kafka also accepts a host name it can
resolve; the controller does no DNS lookups); an entity named twice in one request is refused
with INVALID_REQUEST for both (Kafka applies the first and answers the second's error); an
infinite or NaN rate is refused (Kafka accepts them for its DOUBLE keys; the JSON store
could not keep them).

The push to brokers reuses AlterClientQuotas on the controller's channel (as the SCRAM push
reuses AlterUserScramCredentials): an entry carries one entity's whole quota set (no ops: it
has none left), and an entry with an empty entity first in the list means "this is every
quota: forget the others" (sent when a broker registers).
"""

import ipaddress
import math

from minibroker.common.quota_manager import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    ENTITY_TYPES,
    IP,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    QuotaEntity,
    entity_key,
)
from minibroker.controller.state import ControllerState
from minibroker.protocol.errors import Error

# Kafka's QuotaConfig: each key's type (whole numbers: the largest value allowed).
_LONG_MAX = 2**63 - 1
_INT_MAX = 2**31 - 1
USER_CLIENT_KEYS: dict[str, int | None] = {
    PRODUCER_BYTE_RATE: _LONG_MAX,
    CONSUMER_BYTE_RATE: _LONG_MAX,
    REQUEST_PERCENTAGE: None,
    CONTROLLER_MUTATION_RATE: None,
}
IP_KEYS: dict[str, int | None] = {CONNECTION_CREATION_RATE: _INT_MAX}

# DescribeClientQuotas' match types.
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

# The entry that opens a full snapshot push (see the module docstring).
SNAPSHOT_MARKER: dict[str, object] = {"entity": (), "ops": ()}


class QuotaRequestError(Exception):
    def __init__(self, error: Error, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _entity_wire(entity: QuotaEntity) -> list[dict[str, object]]:
    return [{"entity_type": kind, "entity_name": name} for kind, name in entity]


def _validate_entity(pairs: list[tuple[str, str | None]]) -> dict[str, int | None]:
    """Kafka's validateEntity and configKeysForEntityType: the keys this entity may set."""
    if not pairs:
        raise QuotaRequestError(Error.INVALID_REQUEST, "Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for kind, name in pairs:
        if kind in seen:
            raise QuotaRequestError(
                Error.INVALID_REQUEST,
                f"Invalid client quota entity, duplicate entity entry {kind}",
            )
        if kind not in ENTITY_TYPES:
            raise QuotaRequestError(
                Error.INVALID_REQUEST, f"Unhandled client quota entity type: {kind}"
            )
        if name is not None and not name:
            raise QuotaRequestError(Error.INVALID_REQUEST, f"Empty {kind} not supported")
        seen[kind] = name
    if IP in seen:
        if USER in seen or CLIENT_ID in seen:
            raise QuotaRequestError(
                Error.INVALID_REQUEST,
                "Invalid quota entity combination, IP entity shouldnot be combined with User"
                " or ClientId",
            )
        address = seen[IP]
        if address is not None:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise QuotaRequestError(
                    Error.INVALID_REQUEST, f"{address} is not a valid IP or resolvable host."
                ) from None
        return IP_KEYS
    return USER_CLIENT_KEYS


def _validate_value(keys: dict[str, int | None], key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue."""
    if key not in keys:
        raise QuotaRequestError(Error.INVALID_REQUEST, f"Invalid configuration key {key}")
    if not value > 0.0:
        raise QuotaRequestError(Error.INVALID_REQUEST, f"Quota {key} must be greater than 0")
    largest = keys[key]
    if largest is None:
        if math.isinf(value):
            raise QuotaRequestError(Error.INVALID_REQUEST, f"Quota {key} must be finite")
        return
    if value > largest:
        kind = "an INT" if largest == _INT_MAX else "a LONG"
        raise QuotaRequestError(
            Error.INVALID_REQUEST, f"Proposed value for {key} is too large for {kind}."
        )
    if abs(value % 1.0) > 1e-6:
        raise QuotaRequestError(Error.INVALID_REQUEST, f"{key} cannot be a fractional value.")


def alter(state: ControllerState, request) -> tuple[list[dict[str, object]], set[QuotaEntity]]:
    """Apply (or, with ``validate_only``, only check) the request's alterations; one result
    per entry and the entities whose quotas changed."""
    keyed = []
    for entry in request.entries:
        pairs = [(component.entity_type, component.entity_name) for component in entry.entity]
        keyed.append((entry, pairs, entity_key(pairs)))
    counts: dict[QuotaEntity, int] = {}
    for _entry, _pairs, key in keyed:
        counts[key] = counts.get(key, 0) + 1
    results = []
    changed: set[QuotaEntity] = set()
    for entry, pairs, key in keyed:
        try:
            if counts[key] > 1:
                raise QuotaRequestError(Error.INVALID_REQUEST, f"Ignoring duplicate entity {key}")
            allowed = _validate_entity(pairs)
            alterations: dict[str, float | None] = {}
            for op in entry.ops:
                if op.key in alterations:
                    raise QuotaRequestError(
                        Error.INVALID_REQUEST,
                        f"Duplicate quota key {op.key} not updating quota for this entity",
                    )
                alterations[op.key] = None if op.remove else float(op.value)
            for quota_key, value in alterations.items():
                if value is not None:
                    _validate_value(allowed, quota_key, value)
        except QuotaRequestError as refused:
            results.append(_result(pairs, refused.error, refused.message))
            continue
        results.append(_result(pairs))
        if request.validate_only:
            continue
        current = dict(state.client_quotas.get(key, {}))
        for quota_key, value in alterations.items():
            if value is None:
                current.pop(quota_key, None)
            else:
                current[quota_key] = value
        if current != state.client_quotas.get(key, {}):
            changed.add(key)
            if current:
                state.client_quotas[key] = current
            else:
                state.client_quotas.pop(key, None)
    return results, changed


def _result(
    pairs: list[tuple[str, str | None]], error: Error = Error.NONE, message: str | None = None
) -> dict[str, object]:
    return {
        "error_code": error,
        "error_message": message,
        "entity": [{"entity_type": kind, "entity_name": name} for kind, name in pairs],
    }


def describe(state: ControllerState, request) -> dict[str, object]:
    """The entities that match the request's filter, with their quotas (Kafka's
    ClientQuotasImage.describe); a bad filter is the whole response's error."""
    try:
        exact, specified = _filter(request.components)
    except QuotaRequestError as refused:
        return {"error_code": refused.error, "error_message": refused.message, "entries": None}
    entries = []
    for entity, values in sorted(state.client_quotas.items(), key=lambda item: repr(item[0])):
        names = dict(entity)
        if request.strict and len(names) != len(exact) + len(specified):
            continue
        if any(kind not in names or names[kind] != name for kind, name in exact.items()):
            continue
        if any(kind not in names for kind in specified):
            continue
        entries.append(
            {
                "entity": _entity_wire(entity),
                "values": [{"key": key, "value": value} for key, value in sorted(values.items())],
            }
        )
    return {"error_code": Error.NONE, "error_message": None, "entries": entries}


def _filter(components) -> tuple[dict[str, str | None], set[str]]:
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for component in components:
        kind = component.entity_type
        if not kind:
            raise QuotaRequestError(Error.INVALID_REQUEST, "Invalid empty entity type.")
        if kind in exact or kind in specified:
            raise QuotaRequestError(
                Error.INVALID_REQUEST,
                f"Entity type {kind} cannot appear more than once in the filter.",
            )
        if kind not in ENTITY_TYPES:
            raise QuotaRequestError(Error.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}")
        if component.match_type == MATCH_EXACT:
            if component.match is None:
                raise QuotaRequestError(
                    Error.INVALID_REQUEST,
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                )
            exact[kind] = component.match
        elif component.match_type == MATCH_DEFAULT:
            if component.match is not None:
                raise QuotaRequestError(
                    Error.INVALID_REQUEST,
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                )
            exact[kind] = None
        elif component.match_type == MATCH_SPECIFIED:
            if component.match is not None:
                raise QuotaRequestError(
                    Error.INVALID_REQUEST,
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
                )
            specified.add(kind)
        else:
            raise QuotaRequestError(
                Error.INVALID_REQUEST, f"Unknown match type {component.match_type}"
            )
    types = set(exact) | specified
    if IP in types and (USER in types or CLIENT_ID in types):
        raise QuotaRequestError(
            Error.INVALID_REQUEST,
            "Invalid entity filter component combination. IP filter component should not be"
            " used with user or clientId filter component.",
        )
    return exact, specified


def push_request_data(
    state: ControllerState, entities: set[QuotaEntity] | None
) -> dict[str, object]:
    """The AlterClientQuotas body that tells a broker the whole quota set of ``entities``
    (none left: an entry without ops); every entity, as a snapshot, when None."""
    entries: list[dict[str, object]] = []
    if entities is None:
        entries.append(SNAPSHOT_MARKER)
        entities = set(state.client_quotas)
    for entity in sorted(entities, key=repr):
        values = state.client_quotas.get(entity, {})
        entries.append(
            {
                "entity": _entity_wire(entity),
                "ops": [
                    {"key": key, "value": value, "remove": False}
                    for key, value in sorted(values.items())
                ],
            }
        )
    return {"entries": entries, "validate_only": False}


def entities_to_json(quotas: dict[QuotaEntity, dict[str, float]]) -> list[dict[str, object]]:
    """The quotas as the JSON store keeps them: a list of {"entity": {type: name}, "quotas"}."""
    return [
        {"entity": dict(entity), "quotas": dict(values)}
        for entity, values in sorted(quotas.items(), key=lambda item: repr(item[0]))
    ]


def entities_from_json(saved: list[dict]) -> dict[QuotaEntity, dict[str, float]]:
    return {
        entity_key(item["entity"].items()): {
            key: float(value) for key, value in item["quotas"].items()
        }
        for item in saved
    }
