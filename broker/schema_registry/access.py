"""What each registry request needs of the Kafka ACLs, with no I/O.

A registry with basic authentication on a broker that has an authorizer
(``authorizer.class.name``) checks its requests against the cluster's Kafka ACLs, as
Confluent's Schema Registry ACL authorizer (its security plugin) checks its own: a subject's
operations on that subject, the global ones on the registry as a whole, a schema id through
the subjects that hold it, the subject list filtered to what the user may see.

Departure from Confluent: its plugin keeps ACLs of its own (``sr-acl-cli``, resource types
Subject and SchemaRegistry); here they are Kafka ACLs, made with kafka-acls.sh or
AdminClient.create_acls and kept by the controller like any other, on resource types Kafka
already has:

- a subject is the TOPIC resource named ``subject:<subject>`` (``:`` cannot appear in a
  Kafka topic name, so such a binding never grants anything on a real topic; PREFIXED
  ``subject:orders`` covers every subject starting with ``orders``, and ``subject:`` all);
- the registry as a whole (``/config`` and ``/mode`` without a subject) is the CLUSTER
  resource ``kafka-cluster``.

Operations: READ (read a subject's versions, look a schema up, check compatibility; and a
schema by id, when READ is granted on a subject holding it), WRITE (register), DELETE
(delete versions or the subject), DESCRIBE (see the subject in ``GET /subjects``; READ,
WRITE, DELETE and ALTER imply it, as in Kafka), DESCRIBE_CONFIGS and ALTER_CONFIGS
(``/config`` and ``/mode``, of a subject or, on the cluster, the global ones). ``GET /``,
``GET /schemas/types`` and ``GET /contexts`` need nothing beyond authentication.
``super.users`` may do everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from minibroker.security.authorizer.acls import CLUSTER_NAME, Operation, ResourceType

__all__ = [
    "CLUSTER_NAME",
    "Needs",
    "Operation",
    "ResourceType",
    "Unclassified",
    "denied",
    "needs",
]

SUBJECT_PREFIX = "subject:"

Op = Operation


def subject_resource(subject: str) -> str:
    return SUBJECT_PREFIX + subject


@dataclass(frozen=True)
class Needs:
    """One request's need: ``operation`` on ``resource_type``/``name``; or, when ``by_id``,
    READ on a subject holding the schema; or, when ``listing``, nothing (the answer is
    filtered); or nothing at all when ``operation`` is None."""

    operation: Operation | None = None
    resource_type: int = ResourceType.TOPIC
    name: str = ""
    by_id: bool = False
    listing: bool = False


SUBJECT_ROUTES: dict[tuple[str, str], Operation] = {
    ("GET", "/subjects/{subject:path}/versions/{version}/schema"): Op.READ,
    ("GET", "/subjects/{subject:path}/versions/{version}/referencedby"): Op.READ,
    ("GET", "/subjects/{subject:path}/versions/{version}"): Op.READ,
    ("DELETE", "/subjects/{subject:path}/versions/{version}"): Op.DELETE,
    ("GET", "/subjects/{subject:path}/versions"): Op.READ,
    ("POST", "/subjects/{subject:path}/versions"): Op.WRITE,
    ("POST", "/subjects/{subject:path}"): Op.READ,
    ("DELETE", "/subjects/{subject:path}"): Op.DELETE,
    ("GET", "/config/{subject:path}"): Op.DESCRIBE_CONFIGS,
    ("PUT", "/config/{subject:path}"): Op.ALTER_CONFIGS,
    ("DELETE", "/config/{subject:path}"): Op.ALTER_CONFIGS,
    ("GET", "/mode/{subject:path}"): Op.DESCRIBE_CONFIGS,
    ("PUT", "/mode/{subject:path}"): Op.ALTER_CONFIGS,
    ("POST", "/compatibility/subjects/{subject:path}/versions/{version}"): Op.READ,
    ("POST", "/compatibility/subjects/{subject:path}/versions"): Op.READ,
}
GLOBAL_ROUTES: dict[tuple[str, str], Operation] = {
    ("GET", "/config"): Op.DESCRIBE_CONFIGS,
    ("PUT", "/config"): Op.ALTER_CONFIGS,
    ("DELETE", "/config"): Op.ALTER_CONFIGS,
    ("GET", "/mode"): Op.DESCRIBE_CONFIGS,
    ("PUT", "/mode"): Op.ALTER_CONFIGS,
}


BY_ID_ROUTES = frozenset(
    {
        ("GET", "/schemas/ids/{id}"),
        ("GET", "/schemas/ids/{id}/schema"),
        ("GET", "/schemas/ids/{id}/versions"),
        ("GET", "/schemas/ids/{id}/subjects"),
    }
)
LISTING_ROUTES = frozenset({("GET", "/subjects")})
# GET /contexts names contexts, not subjects: like the schema types, it needs no ACL.
OPEN_ROUTES = frozenset({("GET", "/"), ("GET", "/schemas/types"), ("GET", "/contexts")})


class Unclassified(KeyError):
    """A route this module does not know: every route must be classified here, so that a new
    one cannot be served without a decision on what it needs."""


def needs(method: str, template: str, subject: str | None) -> Needs:
    """What a request to route ``template`` (its path as declared) needs; Unclassified for
    a route not listed here."""
    key = (method, template)
    if key in SUBJECT_ROUTES:
        return Needs(SUBJECT_ROUTES[key], ResourceType.TOPIC, subject_resource(subject or ""))
    if key in GLOBAL_ROUTES:
        return Needs(GLOBAL_ROUTES[key], ResourceType.CLUSTER, CLUSTER_NAME)
    if key in BY_ID_ROUTES:
        return Needs(Op.READ, by_id=True)
    if key in LISTING_ROUTES:
        return Needs(Op.DESCRIBE, listing=True)
    if key in OPEN_ROUTES:
        return Needs()
    raise Unclassified(key)


def denied(operation: Operation, need: Needs) -> tuple[int, int, str]:
    """Confluent's answer to a request the ACLs refuse: status, error code, message."""
    if need.by_id:
        what = "the subjects holding this schema"
    elif need.resource_type == ResourceType.CLUSTER:
        what = "the schema registry"
    else:
        what = f"subject {need.name.removeprefix(SUBJECT_PREFIX)!r}"
    return 403, 40301, f"User is denied operation {operation.name.title()} on {what}"
