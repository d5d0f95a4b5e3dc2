"""Broker configuration by Kafka's own property names, with Kafka's defaults.

One typed object, ``BrokerConfig``, built from sources in order: the embedded defaults, a
``server.properties`` file, then ``--override key=value`` pairs (as kafka-server-start.sh
does). A value that does not parse stops the start with a message naming the key. Unknown keys
are logged and ignored, as Kafka does, so a real Kafka properties file can be reused.
"""

import logging
import re
import socket
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import javaproperties

from minibroker.common.config_model import (
    BROKER_CONFIG_DEFS,
    DOUBLE,
    INT,
    LONG,
    RACK_AWARE_REPLICA_SELECTOR,
    SHORT,
    STRING,
    check_cordoned_log_dirs,
    parse_cordoned_log_dirs,
)
from minibroker.common.group_configs import GroupBounds

log = logging.getLogger("config")

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """An invalid configuration value; the message names the key."""


@dataclass(frozen=True)
class Listener:
    """One ``NAME://host:port`` entry of ``listeners`` or ``advertised.listeners``."""

    name: str
    host: str
    port: int


@dataclass(frozen=True)
class Voter:
    """The controller, as ``controller.quorum.voters`` names it: ``id@host:port``."""

    node_id: int
    host: str
    port: int


class _NotANumber(ValueError):
    """A number property whose text is no number (Kafka's ConfigDef.parseType: "Not a number
    of type INT"); from_properties names the property's type from the config model."""


def _parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise _NotANumber() from None


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("Expected value to be either true or false")
    return value == "true"


def _parse_listeners(text: str) -> tuple[Listener, ...]:
    listeners = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)", item)
        if match is None:
            raise ValueError(f"{item!r} is not NAME://host:port")
        host = match.group(2).strip("[]")
        port = int(match.group(3))
        if port > 65535:
            raise ValueError(f"{item!r}: port {port} is not between 0 and 65535")
        listeners.append(Listener(match.group(1).upper(), host, port))
    if not listeners:
        raise ValueError("at least one listener is needed")
    return tuple(listeners)


@dataclass(frozen=True)
class HttpListener:
    """One of schema.registry.listeners: where it listens, and whether with TLS (https)."""

    host: str
    port: int
    tls: bool = False

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"


def _parse_http_listeners(text: str) -> tuple[HttpListener, ...]:
    """schema.registry.listeners, as Confluent Schema Registry's ``listeners``:
    ``http://host:port`` and ``https://host:port`` entries; empty turns it off."""
    listeners = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = re.fullmatch(r"(?i:(https?))://(\[[^\]]*\]|[^:]*):(\d+)", item)
        if match is None:
            raise ValueError(f"{item!r} is not http://host:port or https://host:port")
        port = int(match.group(3))
        if port > 65535:
            raise ValueError(f"{item!r}: port {port} is not between 0 and 65535")
        tls = match.group(1).lower() == "https"
        listeners.append(HttpListener(match.group(2).strip("[]"), port, tls))
    return tuple(listeners)


def _parse_registry_authentication(text: str) -> str:
    """schema.registry.authentication.method, as Confluent's ``authentication.method``:
    NONE, or BASIC (HTTP basic authentication against the broker's SCRAM users)."""
    value = text.strip().upper()
    if value not in ("NONE", "BASIC"):
        raise ValueError("expected NONE or BASIC")
    return value


def _parse_dirs(text: str) -> tuple[Path, ...]:
    dirs = tuple(Path(part.strip()) for part in text.split(",") if part.strip())
    if not dirs:
        raise ValueError("at least one directory is needed")
    return dirs


def _parse_ratio(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise _NotANumber() from None
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0.0 and 1.0")
    return value


def _parse_timestamp_type(text: str) -> str:
    value = text.strip()
    if value not in ("CreateTime", "LogAppendTime"):
        raise ValueError("expected CreateTime or LogAppendTime")
    return value


MIGRATION_POLICIES = ("disabled", "downgrade", "upgrade", "bidirectional")


def _parse_migration_policy(text: str) -> str:
    """Kafka's ConsumerGroupMigrationPolicy: one of its four names, in any case."""
    value = text.strip().lower()
    if value not in MIGRATION_POLICIES:
        raise ValueError(
            "String must be one of (case insensitive): "
            + ", ".join(policy.upper() for policy in MIGRATION_POLICIES)
        )
    return value


def _parse_roles(text: str) -> frozenset[str]:
    roles = frozenset(part.strip() for part in text.split(",") if part.strip())
    if not roles or not roles <= {"broker", "controller"}:
        raise ValueError("expected broker, controller, or broker,controller")
    return roles


def _parse_voters(text: str) -> tuple["Voter", ...]:
    voters = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = re.fullmatch(r"(\d+)@(\[[^\]]*\]|[^:]+):(\d+)", item)
        if match is None:
            raise ValueError(f"{item!r} is not id@host:port")
        voters.append(Voter(int(match.group(1)), match.group(2).strip("[]"), int(match.group(3))))
    if len(voters) != 1:
        raise ValueError("minibroker runs exactly one controller: give one id@host:port")
    return tuple(voters)


# controller.quorum.bootstrap.servers names where the controller is without its node id; the
# id is then learned from the controller's own requests (ReplicaManager.check_controller).
UNKNOWN_CONTROLLER_ID = -1


def _parse_bootstrap_servers(text: str) -> tuple["Voter", ...]:
    """controller.quorum.bootstrap.servers (KIP-853), as Kafka 4's stock config files name
    their controllers: ``host:port`` entries. minibroker runs one controller, so one entry."""
    servers = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = re.fullmatch(r"(\[[^\]]*\]|[^:@\s]+):(\d+)", item)
        if match is None:
            raise ValueError(f"{item!r} is not host:port")
        servers.append(
            Voter(UNKNOWN_CONTROLLER_ID, match.group(1).strip("[]"), int(match.group(2)))
        )
    if len(servers) != 1:
        raise ValueError("minibroker runs exactly one controller: give one host:port")
    return tuple(servers)


def _parse_zookeeper_connect(text: str) -> str:
    """host:port[,host:port...][/chroot], as Kafka and ZooKeeper clients take it."""
    value = text.strip()
    hosts, _, chroot = value.partition("/")
    for item in hosts.split(","):
        if not re.fullmatch(r"(\[[^\]]*\]|[^:,]+):\d+", item.strip()):
            raise ValueError(f"{item!r} is not host:port")
    if chroot and not re.fullmatch(r"[A-Za-z0-9._/-]+", chroot):
        raise ValueError(f"/{chroot} is not a ZooKeeper path")
    return value


def _parse_listener_name(text: str) -> str:
    name = text.strip().upper()
    if not re.fullmatch(r"[A-Z0-9_]+", name):
        raise ValueError("expected a listener name")
    return name


def _parse_names(text: str) -> tuple[str, ...]:
    return tuple(_parse_listener_name(part) for part in text.split(",") if part.strip())


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Security properties are read by name (broker.security), many with per-listener prefixes,
# so they are known without being listed one by one in _PROPERTIES.
_SECURITY_PREFIXES = ("ssl.", "sasl.", "listener.name.", "minibroker.scram.")
_SECURITY_KEYS = frozenset({"connections.max.reauth.ms", "security.inter.broker.protocol"})


def _parse_protocol_map(text: str) -> dict[str, str]:
    """NAME:PROTOCOL pairs, as Kafka's default map lists them all; whether a listener's
    protocol is implemented is checked against the listeners actually configured."""
    mapping = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, protocol = item.partition(":")
        if not sep:
            raise ValueError(f"{item!r} is not NAME:PROTOCOL")
        protocol = protocol.strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"{protocol} is not a security protocol")
        mapping[_parse_listener_name(name)] = protocol
    return mapping


def _parse_cleanup_policy(text: str) -> str:
    policies = [policy.strip() for policy in text.split(",") if policy.strip()]
    if not policies or not set(policies) <= {"compact", "delete"}:
        raise ValueError("expected compact, delete, or both")
    return ",".join(policies)


def _parse_compression_type(text: str) -> str:
    value = text.strip()
    if value not in ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"):
        raise ValueError("expected uncompressed, zstd, lz4, snappy, gzip or producer")
    return value


# The authorizers Kafka ships; either one selects minibroker's (StandardAuthorizer's rules,
# which AclAuthorizer shares for everything minibroker checks).
AUTHORIZER_CLASS_NAMES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)


def _parse_authorizer_class_name(text: str) -> str:
    name = text.strip()
    if name and name not in AUTHORIZER_CLASS_NAMES:
        raise ValueError(f"minibroker implements only {' and '.join(AUTHORIZER_CLASS_NAMES)}")
    return name


# replica.selector.class (KIP-392): the selector Kafka ships, by its class name or its short
# name; the replica manager builds it (replication/replica_selector.py).
_REPLICA_SELECTORS = {
    RACK_AWARE_REPLICA_SELECTOR: RACK_AWARE_REPLICA_SELECTOR,
    "RackAwareReplicaSelector": RACK_AWARE_REPLICA_SELECTOR,
}


def _parse_replica_selector_class(text: str) -> str | None:
    """Empty: unset (consumers read from leaders only). Kafka loads any ReplicaSelector class
    and fails at start when it cannot; minibroker has RackAwareReplicaSelector only and
    refuses any other name at start too."""
    name = text.strip()
    if not name:
        return None
    found = _REPLICA_SELECTORS.get(name)
    if found is None:
        raise ValueError(
            f"class {name} could not be found: minibroker implements only"
            f" {RACK_AWARE_REPLICA_SELECTOR} (or its short name RackAwareReplicaSelector)"
        )
    return found


def _parse_super_users(text: str) -> frozenset[str]:
    users = frozenset(part.strip() for part in text.split(";") if part.strip())
    for user in users:
        kind, separator, name = user.partition(":")
        if not separator or not kind or not name:
            raise ValueError(f"{user!r} is not a principal such as User:alice")
    return users


def _parse_ip_overrides(text: str) -> dict[str, int]:
    """``host:count,host:count`` (Kafka's max.connections.per.ip.overrides); the host is an
    address or a name, resolved when the broker starts."""
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host:
            raise ValueError(f"{item!r} is not host:count")
        value = _parse_int(count)
        if value < 0:
            raise ValueError(f"{item!r}: the count must be at least 0")
        overrides[host] = value
    return overrides


def _parse_iceberg_catalog_type(text: str) -> str:
    """iceberg.catalog.type: ``sql`` (pyiceberg's SqlCatalog, the default) or ``rest``
    (pyiceberg's RestCatalog, configured by the ``iceberg.rest.catalog.*`` properties)."""
    value = text.strip().lower()
    if value not in ("sql", "rest"):
        raise ValueError("must be sql or rest")
    return value


# iceberg.rest.catalog.<name>: <name> is the Iceberg REST catalog property pyiceberg's
# RestCatalog (and Iceberg's Java RESTCatalog, Spark's catalog options, the Kafka Connect
# Iceberg sink's iceberg.catalog.*) takes under that name, handed to it unchanged. Names
# outside this list, and outside the header./rest. families, are refused by name rather than
# passed on and ignored.
ICEBERG_REST_PREFIX = "iceberg.rest.catalog."
ICEBERG_REST_NAMES = frozenset(
    {
        "uri",
        "warehouse",
        "credential",
        "token",
        "prefix",
        "oauth2-server-uri",
        "scope",
        "audience",
        "resource",
    }
)
# header.<Name>: an HTTP header sent with every request (X-Iceberg-Access-Delegation, ...);
# rest.*: pyiceberg's SigV4 and authentication-manager settings (rest.sigv4-enabled, ...).
_ICEBERG_REST_FAMILIES = ("header.", "rest.")
# The HTTP timeouts, by Iceberg's Java client's names (minibroker.iceberg.table's defaults).
ICEBERG_REST_TIMEOUTS = ("rest.client.connection-timeout-ms", "rest.client.socket-timeout-ms")


def _iceberg_rest_properties(properties: dict[str, str]) -> dict[str, str]:
    """The ``iceberg.rest.catalog.*`` properties, by their Iceberg names, checked: each name
    known, ``uri`` an http(s) URL (checked where the catalog type is read)."""
    found = {}
    for key, text in properties.items():
        if not key.startswith(ICEBERG_REST_PREFIX):
            continue
        name = key[len(ICEBERG_REST_PREFIX) :]
        if name not in ICEBERG_REST_NAMES and not name.startswith(_ICEBERG_REST_FAMILIES):
            known = ", ".join(sorted(ICEBERG_REST_NAMES))
            raise ConfigError(
                f"unknown property {key}: the REST catalog takes {ICEBERG_REST_PREFIX}<name> "
                f"for <name> one of {known}, header.<HTTP header> or rest.<pyiceberg setting>"
            )
        found[name] = text.strip()
        if name in ICEBERG_REST_TIMEOUTS:
            try:
                _at_least(1)(found[name])
            except ValueError as error:
                raise ConfigError(_invalid(key, text, error)) from None
    return found


# iceberg.catalog.s3.<name>: pyiceberg's S3 FileIO properties (s3.endpoint, s3.region,
# s3.access-key-id, ...), by their Iceberg names as the Kafka Connect Iceberg sink takes them
# under iceberg.catalog.*, handed to the catalog (SQL or REST) unchanged: where the tables'
# data and metadata files go when the warehouse is an s3:// location.
ICEBERG_S3_PREFIX = "iceberg.catalog.s3."
# pyiceberg.io's S3_* names (written out: pyiceberg is an optional extra).
ICEBERG_S3_NAMES = frozenset(
    {
        "endpoint",
        "access-key-id",
        "secret-access-key",
        "session-token",
        "region",
        "resolve-region",
        "proxy-uri",
        "connect-timeout",
        "request-timeout",
        "force-virtual-addressing",
        "anonymous",
        "role-arn",
        "role-session-name",
        "sse.type",
        "sse.key",
        "sse.md5",
    }
)


def _iceberg_s3_properties(properties: dict[str, str]) -> dict[str, str]:
    """The ``iceberg.catalog.s3.*`` properties, as pyiceberg names them (``s3.endpoint``),
    checked by name."""
    found = {}
    for key, text in properties.items():
        if not key.startswith(ICEBERG_S3_PREFIX):
            continue
        name = key[len(ICEBERG_S3_PREFIX) :]
        if name not in ICEBERG_S3_NAMES:
            known = ", ".join(sorted(ICEBERG_S3_NAMES))
            raise ConfigError(
                f"unknown property {key}: the Iceberg S3 file IO takes {ICEBERG_S3_PREFIX}<name>"
                f" for <name> one of {known}"
            )
        found[f"s3.{name}"] = text.strip()
    return found


def _check_iceberg_catalog(config: "BrokerConfig", properties: dict[str, str]) -> None:
    """The catalog properties fit iceberg.catalog.type: a REST catalog has an http(s)
    ``iceberg.rest.catalog.uri`` and not the SQL catalog's uri or warehouse; a SQL catalog no
    ``iceberg.rest.catalog.*``. A broker with a catalog config that cannot work refuses to
    start and says why (a REST catalog that is only unreachable is not refused: its topics
    take writes and their lag grows, docs/iceberg-topics.md)."""
    rest = config.iceberg_rest_catalog
    if config.iceberg_catalog_type == "sql":
        if rest:
            raise ConfigError(
                f"{ICEBERG_REST_PREFIX}{sorted(rest)[0]} is set but iceberg.catalog.type is sql:"
                " set iceberg.catalog.type=rest to use a REST catalog"
            )
        return
    for key in ("iceberg.catalog.uri", "iceberg.catalog.warehouse"):
        if properties.get(key, "").strip():
            name = key.rsplit(".", 1)[1]
            raise ConfigError(
                f"{key} is the SQL catalog's; with iceberg.catalog.type=rest give"
                f" {ICEBERG_REST_PREFIX}{name}"
            )
    uri = rest.get("uri", "")
    if not uri:
        raise ConfigError(
            f"iceberg.catalog.type=rest needs {ICEBERG_REST_PREFIX}uri, the catalog's base URL"
            " (http://host:port/ or https://...: the path before /v1/config)"
        )
    parsed = urllib.parse.urlsplit(uri)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(
            _invalid(f"{ICEBERG_REST_PREFIX}uri", uri, ValueError("must be an http(s) URL"))
        )
    if rest.get("credential") and rest.get("token"):
        raise ConfigError(
            f"give one of {ICEBERG_REST_PREFIX}credential (OAuth2 client credentials,"
            f" client_id:client_secret) and {ICEBERG_REST_PREFIX}token (a bearer token),"
            " not both"
        )


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _parse_int(text)
        if value < minimum:
            raise ValueError(f"must be at least {minimum}")
        return value

    return parse


def _between(minimum: int, maximum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _parse_int(text)
        if not minimum <= value <= maximum:
            raise ValueError(f"must be between {minimum} and {maximum}")
        return value

    return parse


# Kafka's server-side assignors by class name, and their names (ConsumerGroupHeartbeat's
# ServerAssignor); either is accepted in group.consumer.assignors.
_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def _parse_assignors(text: str) -> tuple[str, ...]:
    names = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name = _ASSIGNOR_CLASSES.get(item, item)
        if name not in _ASSIGNOR_CLASSES.values():
            raise ValueError(f"{item!r} is not an assignor minibroker has (uniform, range)")
        names.append(name)
    if not names:
        raise ValueError("at least one assignor is needed")
    return tuple(names)


@dataclass(frozen=True)
class _Property:
    attribute: str
    parse: Callable[[str], Any]
    scale: int = 1


# Kafka property name -> where it lands and how it parses. Several Kafka names may feed one
# attribute (log.retention.hours/minutes/ms); the most precise one given wins, as in Kafka.
_PROPERTIES: dict[str, _Property] = {
    "node.id": _Property("node_id", _at_least(0)),
    "broker.id": _Property("node_id", _at_least(0)),
    "broker.rack": _Property("broker_rack", str.strip),
    "replica.selector.class": _Property("replica_selector_class", _parse_replica_selector_class),
    "listeners": _Property("listeners", _parse_listeners),
    "advertised.listeners": _Property("advertised_listeners", _parse_listeners),
    "log.dirs": _Property("log_dirs", _parse_dirs),
    "log.dir": _Property("log_dirs", _parse_dirs),
    "cordoned.log.dirs": _Property("cordoned_log_dirs", parse_cordoned_log_dirs),
    "log.segment.bytes": _Property("log_segment_bytes", _at_least(14)),
    "log.roll.hours": _Property("log_roll_ms", _at_least(1), 3_600_000),
    "log.roll.ms": _Property("log_roll_ms", _at_least(1)),
    "log.retention.hours": _Property("log_retention_ms", _parse_int, 3_600_000),
    "log.retention.minutes": _Property("log_retention_ms", _parse_int, 60_000),
    "log.retention.ms": _Property("log_retention_ms", _at_least(-1)),
    "log.retention.bytes": _Property("log_retention_bytes", _at_least(-1)),
    "log.retention.check.interval.ms": _Property("log_retention_check_interval_ms", _at_least(1)),
    "log.index.interval.bytes": _Property("log_index_interval_bytes", _at_least(0)),
    "log.index.size.max.bytes": _Property("log_index_size_max_bytes", _at_least(4)),
    "log.flush.interval.messages": _Property("log_flush_interval_messages", _at_least(1)),
    "log.flush.interval.ms": _Property("log_flush_interval_ms", _at_least(0)),
    "log.flush.offset.checkpoint.interval.ms": _Property(
        "log_flush_offset_checkpoint_interval_ms", _at_least(0)
    ),
    "log.message.timestamp.type": _Property("log_message_timestamp_type", _parse_timestamp_type),
    "log.cleaner.enable": _Property("log_cleaner_enable", _parse_bool),
    "log.cleaner.backoff.ms": _Property("log_cleaner_backoff_ms", _at_least(0)),
    "log.cleaner.dedupe.buffer.size": _Property("log_cleaner_dedupe_buffer_size", _at_least(1)),
    "log.cleaner.delete.retention.ms": _Property("log_cleaner_delete_retention_ms", _at_least(0)),
    "log.cleaner.min.cleanable.ratio": _Property("log_cleaner_min_cleanable_ratio", _parse_ratio),
    "log.cleaner.min.compaction.lag.ms": _Property(
        "log_cleaner_min_compaction_lag_ms", _at_least(0)
    ),
    "log.cleaner.max.compaction.lag.ms": _Property(
        "log_cleaner_max_compaction_lag_ms", _at_least(1)
    ),
    "message.max.bytes": _Property("message_max_bytes", _at_least(0)),
    "log.cleanup.policy": _Property("log_cleanup_policy", _parse_cleanup_policy),
    "compression.type": _Property("compression_type", _parse_compression_type),
    "fetch.max.bytes": _Property("fetch_max_bytes", _at_least(1024)),
    "max.incremental.fetch.session.cache.slots": _Property(
        "max_incremental_fetch_session_cache_slots", _at_least(0)
    ),
    "num.partitions": _Property("num_partitions", _at_least(1)),
    "telemetry.max.bytes": _Property("telemetry_max_bytes", _at_least(1)),
    "default.replication.factor": _Property("default_replication_factor", _at_least(1)),
    "auto.create.topics.enable": _Property("auto_create_topics_enable", _parse_bool),
    "delete.topic.enable": _Property("delete_topic_enable", _parse_bool),
    "socket.request.max.bytes": _Property("socket_request_max_bytes", _at_least(1)),
    "queued.max.request.bytes": _Property("queued_max_request_bytes", _parse_int),
    "connections.max.idle.ms": _Property("connections_max_idle_ms", _parse_int),
    "max.connections": _Property("max_connections", _at_least(0)),
    "max.connection.creation.rate": _Property("max_connection_creation_rate", _at_least(0)),
    "max.connections.per.ip": _Property("max_connections_per_ip", _at_least(0)),
    "max.connections.per.ip.overrides": _Property(
        "max_connections_per_ip_overrides", _parse_ip_overrides
    ),
    "min.insync.replicas": _Property("min_insync_replicas", _at_least(1)),
    "cluster.id": _Property("cluster_id", str.strip),
    "process.roles": _Property("process_roles", _parse_roles),
    "controller.quorum.voters": _Property("controller_quorum_voters", _parse_voters),
    "controller.quorum.bootstrap.servers": _Property(
        "controller_quorum_bootstrap_servers", _parse_bootstrap_servers
    ),
    "zookeeper.connect": _Property("zookeeper_connect", _parse_zookeeper_connect),
    "zookeeper.session.timeout.ms": _Property("zookeeper_session_timeout_ms", _at_least(1)),
    "broker.heartbeat.interval.ms": _Property("broker_heartbeat_interval_ms", _at_least(1)),
    "broker.session.timeout.ms": _Property("broker_session_timeout_ms", _at_least(1)),
    "replica.lag.time.max.ms": _Property("replica_lag_time_max_ms", _at_least(1)),
    "replica.fetch.max.bytes": _Property("replica_fetch_max_bytes", _at_least(0)),
    "replica.fetch.min.bytes": _Property("replica_fetch_min_bytes", _at_least(1)),
    "replica.fetch.wait.max.ms": _Property("replica_fetch_wait_max_ms", _at_least(0)),
    "replica.fetch.backoff.ms": _Property("replica_fetch_backoff_ms", _at_least(0)),
    "replica.high.watermark.checkpoint.interval.ms": _Property(
        "replica_high_watermark_checkpoint_interval_ms", _at_least(1)
    ),
    "num.replica.fetchers": _Property("num_replica_fetchers", _at_least(1)),
    "unclean.leader.election.enable": _Property("unclean_leader_election_enable", _parse_bool),
    "metrics.port": _Property("metrics_port", _at_least(0)),
    "event.loop.stall.warn.ms": _Property("event_loop_stall_warn_ms", _at_least(0)),
    "gc.freeze.after.startup": _Property("gc_freeze_after_startup", _parse_bool),
    "log.segment.reserve.max.bytes": _Property("log_segment_reserve_max_bytes", _at_least(0)),
    "max.request.partition.size.limit": _Property("max_request_partition_size_limit", _at_least(1)),
    # Not a Kafka property: the schema registry's HTTP listeners (docs/schema-registry.md).
    "schema.registry.listeners": _Property("schema_registry_listeners", _parse_http_listeners),
    "schema.registry.authentication.method": _Property(
        "schema_registry_authentication_method", _parse_registry_authentication
    ),
    # Not a Kafka broker property: the transaction.version level a new cluster's controller
    # finalizes (Kafka's kafka-storage.sh format --feature); kafka-features.sh changes it later.
    "transaction.version": _Property("transaction_version", _between(0, 2)),
    "auto.leader.rebalance.enable": _Property("auto_leader_rebalance_enable", _parse_bool),
    "leader.imbalance.check.interval.seconds": _Property(
        "leader_imbalance_check_interval_ms", _at_least(1), 1000
    ),
    "leader.imbalance.per.broker.percentage": _Property(
        "leader_imbalance_per_broker_percentage", _at_least(0)
    ),
    "inter.broker.listener.name": _Property("inter_broker_listener_name", _parse_listener_name),
    "controlled.shutdown.enable": _Property("controlled_shutdown_enable", _parse_bool),
    "offsets.topic.num.partitions": _Property("offsets_topic_num_partitions", _at_least(1)),
    "offsets.topic.replication.factor": _Property("offsets_topic_replication_factor", _at_least(1)),
    "offsets.topic.segment.bytes": _Property("offsets_topic_segment_bytes", _at_least(1)),
    "offsets.commit.timeout.ms": _Property("offsets_commit_timeout_ms", _at_least(1)),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": _Property(
        "transaction_abort_timed_out_transaction_cleanup_interval_ms", _at_least(1)
    ),
    "transaction.max.timeout.ms": _Property("transaction_max_timeout_ms", _at_least(1)),
    "transaction.remove.expired.transaction.cleanup.interval.ms": _Property(
        "transaction_remove_expired_transaction_cleanup_interval_ms", _at_least(1)
    ),
    # The share coordinator's (Kafka's ShareCoordinatorConfig).
    "share.coordinator.snapshot.update.records.per.snapshot": _Property(
        "share_coordinator_snapshot_update_records_per_snapshot", _at_least(0)
    ),
    "share.coordinator.state.topic.min.isr": _Property(
        "share_coordinator_state_topic_min_isr", _at_least(1)
    ),
    "share.coordinator.state.topic.num.partitions": _Property(
        "share_coordinator_state_topic_num_partitions", _at_least(1)
    ),
    "share.coordinator.state.topic.replication.factor": _Property(
        "share_coordinator_state_topic_replication_factor", _at_least(1)
    ),
    "share.coordinator.state.topic.segment.bytes": _Property(
        "share_coordinator_state_topic_segment_bytes", _at_least(1)
    ),
    "transaction.state.log.min.isr": _Property("transaction_state_log_min_isr", _at_least(1)),
    "transaction.state.log.num.partitions": _Property(
        "transaction_state_log_num_partitions", _at_least(1)
    ),
    "transaction.state.log.replication.factor": _Property(
        "transaction_state_log_replication_factor", _at_least(1)
    ),
    "transaction.state.log.segment.bytes": _Property(
        "transaction_state_log_segment_bytes", _at_least(1)
    ),
    "transactional.id.expiration.ms": _Property("transactional_id_expiration_ms", _at_least(1)),
    "producer.id.expiration.ms": _Property("producer_id_expiration_ms", _at_least(1)),
    "quota.window.num": _Property("quota_window_num", _at_least(1)),
    "quota.window.size.seconds": _Property("quota_window_size_seconds", _at_least(1)),
    "replication.quota.window.num": _Property("replication_quota_window_num", _at_least(1)),
    "replica.alter.log.dirs.io.max.bytes.per.second": _Property(
        "replica_alter_log_dirs_io_max_bytes_per_second", _at_least(0)
    ),
    "alter.log.dirs.replication.quota.window.num": _Property(
        "alter_log_dirs_replication_quota_window_num", _at_least(1)
    ),
    "alter.log.dirs.replication.quota.window.size.seconds": _Property(
        "alter_log_dirs_replication_quota_window_size_seconds", _at_least(1)
    ),
    "replication.quota.window.size.seconds": _Property(
        "replication_quota_window_size_seconds", _at_least(1)
    ),
    "producer.id.expiration.check.interval.ms": _Property(
        "producer_id_expiration_check_interval_ms", _at_least(1)
    ),
    "offsets.retention.minutes": _Property("offsets_retention_ms", _at_least(1), 60_000),
    "offsets.retention.check.interval.ms": _Property(
        "offsets_retention_check_interval_ms", _at_least(1)
    ),
    "offset.metadata.max.bytes": _Property("offset_metadata_max_bytes", _at_least(0)),
    "group.initial.rebalance.delay.ms": _Property("group_initial_rebalance_delay_ms", _at_least(0)),
    "group.min.session.timeout.ms": _Property("group_min_session_timeout_ms", _at_least(0)),
    "group.max.session.timeout.ms": _Property("group_max_session_timeout_ms", _at_least(0)),
    "group.max.size": _Property("group_max_size", _at_least(1)),
    "group.consumer.heartbeat.interval.ms": _Property(
        "group_consumer_heartbeat_interval_ms", _at_least(1)
    ),
    "group.consumer.session.timeout.ms": _Property(
        "group_consumer_session_timeout_ms", _at_least(1)
    ),
    "group.consumer.max.size": _Property("group_consumer_max_size", _at_least(1)),
    "group.consumer.migration.policy": _Property(
        "group_consumer_migration_policy", _parse_migration_policy
    ),
    "group.consumer.min.session.timeout.ms": _Property(
        "group_consumer_min_session_timeout_ms", _at_least(1)
    ),
    "group.consumer.max.session.timeout.ms": _Property(
        "group_consumer_max_session_timeout_ms", _at_least(1)
    ),
    "group.consumer.min.heartbeat.interval.ms": _Property(
        "group_consumer_min_heartbeat_interval_ms", _at_least(1)
    ),
    "group.consumer.max.heartbeat.interval.ms": _Property(
        "group_consumer_max_heartbeat_interval_ms", _at_least(1)
    ),
    "group.consumer.assignors": _Property("group_consumer_assignors", _parse_assignors),
    # Share groups (KIP-932): the share partitions' defaults and the share session cache.
    "group.share.record.lock.duration.ms": _Property(
        "group_share_record_lock_duration_ms", _at_least(1000)
    ),
    "group.share.min.record.lock.duration.ms": _Property(
        "group_share_min_record_lock_duration_ms", _at_least(1000)
    ),
    "group.share.max.record.lock.duration.ms": _Property(
        "group_share_max_record_lock_duration_ms", _at_least(1000)
    ),
    "group.share.delivery.count.limit": _Property("group_share_delivery_count_limit", _at_least(2)),
    "group.share.partition.max.record.locks": _Property(
        "group_share_partition_max_record_locks", _at_least(100)
    ),
    "group.share.max.share.sessions": _Property("group_share_max_share_sessions", _at_least(1)),
    # Share groups' dead-letter queues (KIP-1191): may a DLQ topic be created on first use,
    # and the prefix its name must have ("" for none).
    "errors.deadletterqueue.auto.create.topics.enable": _Property(
        "errors_deadletterqueue_auto_create_topics_enable", _parse_bool
    ),
    "errors.deadletterqueue.topic.name.prefix": _Property(
        "errors_deadletterqueue_topic_name_prefix", str
    ),
    "group.share.heartbeat.interval.ms": _Property(
        "group_share_heartbeat_interval_ms", _at_least(1)
    ),
    "group.share.session.timeout.ms": _Property("group_share_session_timeout_ms", _at_least(1)),
    "group.share.max.size": _Property("group_share_max_size", _between(1, 1000)),
    "group.share.min.session.timeout.ms": _Property(
        "group_share_min_session_timeout_ms", _at_least(1)
    ),
    "group.share.max.session.timeout.ms": _Property(
        "group_share_max_session_timeout_ms", _at_least(1)
    ),
    "group.share.min.heartbeat.interval.ms": _Property(
        "group_share_min_heartbeat_interval_ms", _at_least(1)
    ),
    "group.share.max.heartbeat.interval.ms": _Property(
        "group_share_max_heartbeat_interval_ms", _at_least(1)
    ),
    # Streams groups (KIP-1071): StreamsGroupHeartbeat's sessions, interval, size, standbys.
    "group.streams.session.timeout.ms": _Property("group_streams_session_timeout_ms", _at_least(1)),
    "group.streams.min.session.timeout.ms": _Property(
        "group_streams_min_session_timeout_ms", _at_least(1)
    ),
    "group.streams.max.session.timeout.ms": _Property(
        "group_streams_max_session_timeout_ms", _at_least(1)
    ),
    "group.streams.heartbeat.interval.ms": _Property(
        "group_streams_heartbeat_interval_ms", _at_least(1)
    ),
    "group.streams.min.heartbeat.interval.ms": _Property(
        "group_streams_min_heartbeat_interval_ms", _at_least(1)
    ),
    "group.streams.max.heartbeat.interval.ms": _Property(
        "group_streams_max_heartbeat_interval_ms", _at_least(1)
    ),
    "group.streams.max.size": _Property("group_streams_max_size", _at_least(1)),
    "group.streams.num.standby.replicas": _Property(
        "group_streams_num_standby_replicas", _at_least(0)
    ),
    "group.streams.max.standby.replicas": _Property(
        "group_streams_max_standby_replicas", _at_least(0)
    ),
    "group.streams.initial.rebalance.delay.ms": _Property(
        "group_streams_initial_rebalance_delay_ms", _at_least(0)
    ),
    "controller.listener.names": _Property("controller_listener_names", _parse_names),
    "listener.security.protocol.map": _Property(
        "listener_security_protocol_map", _parse_protocol_map
    ),
    "authorizer.class.name": _Property("authorizer_class_name", _parse_authorizer_class_name),
    "super.users": _Property("super_users", _parse_super_users),
    "allow.everyone.if.no.acl.found": _Property("allow_everyone_if_no_acl_found", _parse_bool),
    # Not Kafka's: where Iceberg topics' tables go (docs/iceberg-topics.md), Kafka-style
    # dotted names for what Redpanda calls iceberg_catalog_type and friends.
    "iceberg.catalog.type": _Property("iceberg_catalog_type", _parse_iceberg_catalog_type),
    "iceberg.catalog.name": _Property("iceberg_catalog_name", str.strip),
    "iceberg.catalog.uri": _Property("iceberg_catalog_uri", str.strip),
    "iceberg.catalog.warehouse": _Property("iceberg_catalog_warehouse", str.strip),
    "iceberg.catalog.namespace": _Property("iceberg_catalog_namespace", str.strip),
}

# The attributes fed by more than one property, in increasing precision.
_PRECEDENCE = {
    "log_retention_ms": ("log.retention.hours", "log.retention.minutes", "log.retention.ms"),
    "log_roll_ms": ("log.roll.hours", "log.roll.ms"),
    "node_id": ("broker.id", "node.id"),
    "log_dirs": ("log.dir", "log.dirs"),
}


def _kafka_default(name: str) -> Any:
    """A BrokerConfig attribute's default: Kafka's default of the property ``name`` as the
    config model (``config_model.BROKER_CONFIG_DEFS``, which DescribeConfigs reports) has it,
    parsed and scaled as the property is, so that each default is written once."""
    text = BROKER_CONFIG_DEFS[name][1]
    if text is None:
        return None
    prop = _PROPERTIES[name]
    value = prop.parse(text)
    return value * prop.scale if prop.scale != 1 else value


@dataclass(frozen=True)
class BrokerConfig:
    """Everything the broker reads from configuration, under Kafka's names and defaults.

    Kafka's defaults are taken from the config model (:func:`_kafka_default`); the few
    properties the model does not describe have theirs here. The embedded defaults differ
    from Kafka's so that ``minibroker serve`` with no file gives a working local broker: the
    listener binds 127.0.0.1:9092, the data lives under ./data, the node is broker and
    controller with id 1; and fetch.max.bytes is smaller (see below).
    """

    node_id: int = 1
    listeners: tuple[Listener, ...] = (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    advertised_listeners: tuple[Listener, ...] | None = None
    log_dirs: tuple[Path, ...] = (Path("data"),)
    # KIP-1066: log dirs that take no new replica ("*": all of them); see LogManager.
    cordoned_log_dirs: tuple[str, ...] = ()
    log_segment_bytes: int = _kafka_default("log.segment.bytes")
    log_roll_ms: int = _kafka_default("log.roll.hours")
    log_retention_ms: int = _kafka_default("log.retention.hours")
    log_retention_bytes: int = _kafka_default("log.retention.bytes")
    log_retention_check_interval_ms: int = _kafka_default("log.retention.check.interval.ms")
    log_index_interval_bytes: int = _kafka_default("log.index.interval.bytes")
    log_index_size_max_bytes: int = _kafka_default("log.index.size.max.bytes")
    log_flush_interval_messages: int = _kafka_default("log.flush.interval.messages")
    log_flush_interval_ms: int | None = _kafka_default("log.flush.interval.ms")
    log_flush_offset_checkpoint_interval_ms: int = _kafka_default(
        "log.flush.offset.checkpoint.interval.ms"
    )
    log_message_timestamp_type: str = _kafka_default("log.message.timestamp.type")
    log_cleaner_enable: bool = _kafka_default("log.cleaner.enable")
    log_cleaner_backoff_ms: int = _kafka_default("log.cleaner.backoff.ms")
    log_cleaner_dedupe_buffer_size: int = _kafka_default("log.cleaner.dedupe.buffer.size")
    log_cleaner_delete_retention_ms: int = _kafka_default("log.cleaner.delete.retention.ms")
    log_cleaner_min_cleanable_ratio: float = _kafka_default("log.cleaner.min.cleanable.ratio")
    log_cleaner_min_compaction_lag_ms: int = _kafka_default("log.cleaner.min.compaction.lag.ms")
    log_cleaner_max_compaction_lag_ms: int = _kafka_default("log.cleaner.max.compaction.lag.ms")
    message_max_bytes: int = _kafka_default("message.max.bytes")
    log_cleanup_policy: str = _kafka_default("log.cleanup.policy")
    compression_type: str = _kafka_default("compression.type")
    # Kafka's default is 55 MiB; see the README's architecture notes for why it is smaller.
    fetch_max_bytes: int = 4 * 1024 * 1024
    # The fetch session cache's size (KIP-227; replication/fetch_session.py).
    max_incremental_fetch_session_cache_slots: int = _kafka_default(
        "max.incremental.fetch.session.cache.slots"
    )
    num_partitions: int = _kafka_default("num.partitions")
    # The largest PushTelemetry payload taken (KIP-714; common/client_metrics.py).
    telemetry_max_bytes: int = _kafka_default("telemetry.max.bytes")
    default_replication_factor: int = _kafka_default("default.replication.factor")
    auto_create_topics_enable: bool = _kafka_default("auto.create.topics.enable")
    delete_topic_enable: bool = _kafka_default("delete.topic.enable")
    socket_request_max_bytes: int = _kafka_default("socket.request.max.bytes")
    # The bytes of requests held at once, being received or answered; -1 (or 0): unbounded.
    queued_max_request_bytes: int = _kafka_default("queued.max.request.bytes")
    # A connection with no request in flight and nothing received this long is closed; so
    # is one on a SASL listener that has not authenticated this long after it was accepted.
    # Negative: never.
    connections_max_idle_ms: int = _kafka_default("connections.max.idle.ms")
    max_connections: int = _kafka_default("max.connections")
    max_connection_creation_rate: int = _kafka_default("max.connection.creation.rate")
    max_connections_per_ip: int = _kafka_default("max.connections.per.ip")
    max_connections_per_ip_overrides: dict[str, int] = field(default_factory=dict)
    min_insync_replicas: int = _kafka_default("min.insync.replicas")
    cluster_id: str | None = None
    process_roles: frozenset[str] = frozenset({"broker", "controller"})
    controller_quorum_voters: tuple[Voter, ...] | None = None
    controller_quorum_bootstrap_servers: tuple[Voter, ...] | None = None
    # ZooKeeper mode (see the README's architecture): every broker competes for /controller.
    zookeeper_connect: str | None = None
    zookeeper_session_timeout_ms: int = 18_000
    broker_heartbeat_interval_ms: int = _kafka_default("broker.heartbeat.interval.ms")
    broker_session_timeout_ms: int = _kafka_default("broker.session.timeout.ms")
    replica_lag_time_max_ms: int = _kafka_default("replica.lag.time.max.ms")
    replica_fetch_max_bytes: int = _kafka_default("replica.fetch.max.bytes")
    replica_fetch_min_bytes: int = _kafka_default("replica.fetch.min.bytes")
    replica_fetch_wait_max_ms: int = _kafka_default("replica.fetch.wait.max.ms")
    replica_fetch_backoff_ms: int = _kafka_default("replica.fetch.backoff.ms")
    replica_high_watermark_checkpoint_interval_ms: int = _kafka_default(
        "replica.high.watermark.checkpoint.interval.ms"
    )
    num_replica_fetchers: int = _kafka_default("num.replica.fetchers")
    unclean_leader_election_enable: bool = _kafka_default("unclean.leader.election.enable")
    metrics_port: int | None = None
    # The rack (or availability zone) of this broker (KIP-36): registered with the controller,
    # shown in Metadata and DescribeCluster, and used to spread a partition's replicas.
    broker_rack: str | None = None
    # Follower fetching (KIP-392): the replica selector's class name (normalized to Kafka's
    # full name), None when unset. Set, a leader may send a consumer in another broker's rack
    # to that replica, and this broker serves consumers' fetches as a follower.
    replica_selector_class: str | None = None
    # Not Kafka's: a stall of the event loop longer than this is logged once with the code it
    # was running (node/loop_stalls.py); 0: never logged (still measured on /metrics).
    event_loop_stall_warn_ms: int = 100
    # Not Kafka's: gc.freeze() once the node serves, so that the cyclic garbage collector's
    # full collections do not scan what start-up made (bench/loop_stalls.py measures it).
    gc_freeze_after_startup: bool = False
    # Not Kafka's: the most disk blocks a growing segment reserves ahead of its end, so that
    # appends do not reserve them in the write system call (storage/segment.py,
    # PREALLOCATE_FROM_BYTES); 0: none reserved.
    log_segment_reserve_max_bytes: int = 8 << 20
    # DescribeTopicPartitions: the most partitions one answer holds (the client's own limit
    # is capped by it).
    max_request_partition_size_limit: int = _kafka_default("max.request.partition.size.limit")
    # The schema registry's HTTP listeners (docs/schema-registry.md); none: not served.
    schema_registry_listeners: tuple[HttpListener, ...] = ()
    # NONE, or BASIC: the registry's clients log in with a SCRAM user's name and password.
    schema_registry_authentication_method: str = "NONE"
    # The transaction.version feature level a new cluster finalizes (Kafka's TransactionVersion;
    # common/features.py): 2 serves KIP-890 part 2 (an epoch bump per transaction).
    transaction_version: int = 2
    auto_leader_rebalance_enable: bool = _kafka_default("auto.leader.rebalance.enable")
    leader_imbalance_check_interval_ms: int = _kafka_default(
        "leader.imbalance.check.interval.seconds"
    )
    leader_imbalance_per_broker_percentage: int = 10
    inter_broker_listener_name: str | None = None
    controlled_shutdown_enable: bool = _kafka_default("controlled.shutdown.enable")
    offsets_topic_num_partitions: int = _kafka_default("offsets.topic.num.partitions")
    offsets_topic_replication_factor: int = _kafka_default("offsets.topic.replication.factor")
    offsets_topic_segment_bytes: int = _kafka_default("offsets.topic.segment.bytes")
    offsets_commit_timeout_ms: int = _kafka_default("offsets.commit.timeout.ms")
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = _kafka_default(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms"
    )
    transaction_max_timeout_ms: int = _kafka_default("transaction.max.timeout.ms")
    transaction_remove_expired_transaction_cleanup_interval_ms: int = _kafka_default(
        "transaction.remove.expired.transaction.cleanup.interval.ms"
    )
    share_coordinator_snapshot_update_records_per_snapshot: int = _kafka_default(
        "share.coordinator.snapshot.update.records.per.snapshot"
    )
    share_coordinator_state_topic_min_isr: int = _kafka_default(
        "share.coordinator.state.topic.min.isr"
    )
    share_coordinator_state_topic_num_partitions: int = _kafka_default(
        "share.coordinator.state.topic.num.partitions"
    )
    share_coordinator_state_topic_replication_factor: int = _kafka_default(
        "share.coordinator.state.topic.replication.factor"
    )
    share_coordinator_state_topic_segment_bytes: int = _kafka_default(
        "share.coordinator.state.topic.segment.bytes"
    )
    transaction_state_log_min_isr: int = _kafka_default("transaction.state.log.min.isr")
    transaction_state_log_num_partitions: int = _kafka_default(
        "transaction.state.log.num.partitions"
    )
    transaction_state_log_replication_factor: int = _kafka_default(
        "transaction.state.log.replication.factor"
    )
    transaction_state_log_segment_bytes: int = _kafka_default("transaction.state.log.segment.bytes")
    transactional_id_expiration_ms: int = _kafka_default("transactional.id.expiration.ms")
    producer_id_expiration_ms: int = _kafka_default("producer.id.expiration.ms")
    quota_window_num: int = _kafka_default("quota.window.num")
    quota_window_size_seconds: int = _kafka_default("quota.window.size.seconds")
    # KIP-73's replication throttles measure their rates over these (replication_quota.py).
    replication_quota_window_num: int = _kafka_default("replication.quota.window.num")
    # The copy throttle of replica moves between log dirs (bytes/s; a dynamic broker config
    # overrides it: replica_manager.update_replication_throttle_rates).
    replica_alter_log_dirs_io_max_bytes_per_second: int = _kafka_default(
        "replica.alter.log.dirs.io.max.bytes.per.second"
    )
    # ... measured over these, as Kafka's QuotaConfig has them for that quota alone.
    alter_log_dirs_replication_quota_window_num: int = _kafka_default(
        "alter.log.dirs.replication.quota.window.num"
    )
    alter_log_dirs_replication_quota_window_size_seconds: int = _kafka_default(
        "alter.log.dirs.replication.quota.window.size.seconds"
    )
    replication_quota_window_size_seconds: int = _kafka_default(
        "replication.quota.window.size.seconds"
    )
    producer_id_expiration_check_interval_ms: int = _kafka_default(
        "producer.id.expiration.check.interval.ms"
    )
    offsets_retention_ms: int = _kafka_default("offsets.retention.minutes")
    offsets_retention_check_interval_ms: int = _kafka_default("offsets.retention.check.interval.ms")
    offset_metadata_max_bytes: int = _kafka_default("offset.metadata.max.bytes")
    group_initial_rebalance_delay_ms: int = _kafka_default("group.initial.rebalance.delay.ms")
    group_min_session_timeout_ms: int = _kafka_default("group.min.session.timeout.ms")
    group_max_session_timeout_ms: int = _kafka_default("group.max.session.timeout.ms")
    group_max_size: int = _kafka_default("group.max.size")
    group_consumer_heartbeat_interval_ms: int = _kafka_default(
        "group.consumer.heartbeat.interval.ms"
    )
    group_consumer_session_timeout_ms: int = _kafka_default("group.consumer.session.timeout.ms")
    group_consumer_max_size: int = _kafka_default("group.consumer.max.size")
    # Which live (non-empty) groups may change protocol: Kafka's online upgrade and
    # downgrade, neither of which minibroker performs (see the coordinator).
    group_consumer_migration_policy: str = _kafka_default("group.consumer.migration.policy")
    # The bounds of the groups' own consumer.session.timeout.ms and
    # consumer.heartbeat.interval.ms (group configs, KIP-848).
    group_consumer_min_session_timeout_ms: int = _kafka_default(
        "group.consumer.min.session.timeout.ms"
    )
    group_consumer_max_session_timeout_ms: int = _kafka_default(
        "group.consumer.max.session.timeout.ms"
    )
    group_consumer_min_heartbeat_interval_ms: int = _kafka_default(
        "group.consumer.min.heartbeat.interval.ms"
    )
    group_consumer_max_heartbeat_interval_ms: int = _kafka_default(
        "group.consumer.max.heartbeat.interval.ms"
    )
    group_consumer_assignors: tuple[str, ...] = _kafka_default("group.consumer.assignors")
    # Share groups (KIP-932): a share partition's acquisition lock, delivery limit and
    # in-flight bound unless the group's own share.* configs say otherwise, and how many
    # share sessions the broker keeps (replication/share_partition_manager.py).
    group_share_record_lock_duration_ms: int = _kafka_default("group.share.record.lock.duration.ms")
    group_share_min_record_lock_duration_ms: int = _kafka_default(
        "group.share.min.record.lock.duration.ms"
    )
    group_share_max_record_lock_duration_ms: int = _kafka_default(
        "group.share.max.record.lock.duration.ms"
    )
    group_share_delivery_count_limit: int = _kafka_default("group.share.delivery.count.limit")
    group_share_partition_max_record_locks: int = _kafka_default(
        "group.share.partition.max.record.locks"
    )
    group_share_max_share_sessions: int = _kafka_default("group.share.max.share.sessions")
    # Share groups' dead-letter queues (KIP-1191, replication/share_dlq.py).
    errors_deadletterqueue_auto_create_topics_enable: bool = _kafka_default(
        "errors.deadletterqueue.auto.create.topics.enable"
    )
    errors_deadletterqueue_topic_name_prefix: str = _kafka_default(
        "errors.deadletterqueue.topic.name.prefix"
    )
    # Share groups' membership (KIP-932): ShareGroupHeartbeat's interval and sessions.
    group_share_heartbeat_interval_ms: int = _kafka_default("group.share.heartbeat.interval.ms")
    group_share_session_timeout_ms: int = _kafka_default("group.share.session.timeout.ms")
    group_share_max_size: int = _kafka_default("group.share.max.size")
    group_share_min_session_timeout_ms: int = _kafka_default("group.share.min.session.timeout.ms")
    group_share_max_session_timeout_ms: int = _kafka_default("group.share.max.session.timeout.ms")
    group_share_min_heartbeat_interval_ms: int = _kafka_default(
        "group.share.min.heartbeat.interval.ms"
    )
    group_share_max_heartbeat_interval_ms: int = _kafka_default(
        "group.share.max.heartbeat.interval.ms"
    )
    # Streams groups (KIP-1071): the defaults of StreamsGroupHeartbeat's session timeout,
    # heartbeat interval and standby replicas, the bounds the groups' own streams.* configs
    # are held to, and the most members a streams group admits (GROUP_MAX_SIZE_REACHED).
    group_streams_session_timeout_ms: int = _kafka_default("group.streams.session.timeout.ms")
    group_streams_min_session_timeout_ms: int = _kafka_default(
        "group.streams.min.session.timeout.ms"
    )
    group_streams_max_session_timeout_ms: int = _kafka_default(
        "group.streams.max.session.timeout.ms"
    )
    group_streams_heartbeat_interval_ms: int = _kafka_default("group.streams.heartbeat.interval.ms")
    group_streams_min_heartbeat_interval_ms: int = _kafka_default(
        "group.streams.min.heartbeat.interval.ms"
    )
    group_streams_max_heartbeat_interval_ms: int = _kafka_default(
        "group.streams.max.heartbeat.interval.ms"
    )
    group_streams_max_size: int = _kafka_default("group.streams.max.size")
    group_streams_num_standby_replicas: int = _kafka_default("group.streams.num.standby.replicas")
    group_streams_max_standby_replicas: int = _kafka_default("group.streams.max.standby.replicas")
    # Read and described, not acted on: the coordinator computes a new group's first
    # assignment at once (Kafka waits this long for more members, ASSIGNMENT_DELAYED).
    group_streams_initial_rebalance_delay_ms: int = _kafka_default(
        "group.streams.initial.rebalance.delay.ms"
    )
    controller_listener_names: tuple[str, ...] = ()
    listener_security_protocol_map: dict[str, str] = field(default_factory=dict)
    authorizer_class_name: str = _kafka_default("authorizer.class.name")
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    # Iceberg topics' catalog (docs/iceberg-topics.md): pyiceberg's SQL catalog, by default on
    # SQLite in the first log dir (iceberg/catalog.db) with the warehouse beside it
    # (iceberg/warehouse); empty uri or warehouse means that default.
    iceberg_catalog_type: str = "sql"
    iceberg_catalog_name: str = "minibroker"
    iceberg_catalog_uri: str = ""
    iceberg_catalog_warehouse: str = ""
    iceberg_catalog_namespace: str = "minibroker"
    # iceberg.catalog.type=rest: the iceberg.rest.catalog.* properties by their Iceberg names
    # (uri, warehouse, credential, ...), handed to pyiceberg's RestCatalog as they are.
    iceberg_rest_catalog: dict[str, str] = field(default_factory=dict, repr=False)
    # iceberg.catalog.s3.*: pyiceberg's FileIO properties (s3.endpoint, ...), given to either
    # catalog.
    iceberg_file_io: dict[str, str] = field(default_factory=dict, repr=False)
    unknown: dict[str, str] = field(default_factory=dict)
    # The properties as given (file, then overrides): DescribeConfigs reports these as
    # STATIC_BROKER_CONFIG, and dynamic broker configs are layered over them.
    properties: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def iceberg_directory(self) -> Path:
        """Where the default catalog and warehouse live: `iceberg/` in the first log dir (the
        log manager only opens `<topic>-<partition>` directories, so it is left alone)."""
        return self.log_dirs[0].resolve() / "iceberg"

    @property
    def iceberg_uri(self) -> str:
        """The SQL catalog's SQLAlchemy URL: iceberg.catalog.uri, else SQLite in the data dir."""
        return self.iceberg_catalog_uri or f"sqlite:///{self.iceberg_directory / 'catalog.db'}"

    @property
    def iceberg_warehouse(self) -> str:
        """Where new tables' files go: iceberg.catalog.warehouse, else a local directory."""
        return self.iceberg_catalog_warehouse or (self.iceberg_directory / "warehouse").as_uri()

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles

    @property
    def is_controller(self) -> bool:
        """A node that is the controller from its start (KRaft-style roles). In ZooKeeper mode
        no node is: a broker becomes controller by winning the election."""
        return "controller" in self.process_roles and not self.zookeeper_mode

    @property
    def zookeeper_mode(self) -> bool:
        return self.zookeeper_connect is not None

    @property
    def controller(self) -> Voter:
        """Where the controller listens; a combined node without voters is its own controller.
        Named by ``controller.quorum.bootstrap.servers``, its node id is this node's on a
        controller, and unknown (UNKNOWN_CONTROLLER_ID, learned later) on a broker."""
        if self.controller_quorum_voters:
            return self.controller_quorum_voters[0]
        if self.controller_quorum_bootstrap_servers:
            server = self.controller_quorum_bootstrap_servers[0]
            if self.is_controller:
                return Voter(self.node_id, server.host, server.port)
            return server
        first = self.advertised[0]
        return Voter(self.node_id, first.host, first.port)

    @property
    def advertised(self) -> tuple[Listener, ...]:
        """Where clients are told to connect: every listener, as advertised.listeners
        overrides it by name (a listener without an advertised entry advertises itself)."""
        overrides = {listener.name: listener for listener in self.advertised_listeners or ()}
        return tuple(
            _routable(overrides.get(listener.name, listener)) for listener in self.listeners
        )

    def advertised_for(self, listener_name: str) -> Listener:
        """What a client that connected through ``listener_name`` is told this broker is."""
        for listener in self.advertised:
            if listener.name == listener_name:
                return listener
        return self.advertised[0]

    def security_protocol(self, listener_name: str) -> str:
        """The listener's protocol: from listener.security.protocol.map, else its name when
        that is a protocol's (Kafka's default map), else PLAINTEXT."""
        default = listener_name if listener_name in SECURITY_PROTOCOLS else "PLAINTEXT"
        return self.listener_security_protocol_map.get(listener_name, default)

    @property
    def group_bounds(self) -> GroupBounds:
        """What the groups' own configs (GROUP resources) are checked against."""
        return GroupBounds(
            consumer_session_timeout_ms=self.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=self.group_consumer_heartbeat_interval_ms,
            consumer_min_session_timeout_ms=self.group_consumer_min_session_timeout_ms,
            consumer_max_session_timeout_ms=self.group_consumer_max_session_timeout_ms,
            consumer_min_heartbeat_interval_ms=self.group_consumer_min_heartbeat_interval_ms,
            consumer_max_heartbeat_interval_ms=self.group_consumer_max_heartbeat_interval_ms,
            share_session_timeout_ms=self.group_share_session_timeout_ms,
            share_heartbeat_interval_ms=self.group_share_heartbeat_interval_ms,
            share_min_session_timeout_ms=self.group_share_min_session_timeout_ms,
            share_max_session_timeout_ms=self.group_share_max_session_timeout_ms,
            share_min_heartbeat_interval_ms=self.group_share_min_heartbeat_interval_ms,
            share_max_heartbeat_interval_ms=self.group_share_max_heartbeat_interval_ms,
            share_min_record_lock_duration_ms=self.group_share_min_record_lock_duration_ms,
            share_max_record_lock_duration_ms=self.group_share_max_record_lock_duration_ms,
            streams_session_timeout_ms=self.group_streams_session_timeout_ms,
            streams_heartbeat_interval_ms=self.group_streams_heartbeat_interval_ms,
            streams_min_session_timeout_ms=self.group_streams_min_session_timeout_ms,
            streams_max_session_timeout_ms=self.group_streams_max_session_timeout_ms,
            streams_min_heartbeat_interval_ms=self.group_streams_min_heartbeat_interval_ms,
            streams_max_heartbeat_interval_ms=self.group_streams_max_heartbeat_interval_ms,
            streams_max_standby_replicas=self.group_streams_max_standby_replicas,
        )

    @property
    def controller_listener_name(self) -> str:
        """The listener brokers reach the controller on: in ZooKeeper mode the inter-broker
        listener, else the first of controller.listener.names (KRaft's rule), else this node's
        first listener when it is its own controller, else PLAINTEXT."""
        if self.zookeeper_mode:
            # The elected controller is a broker, reached on its inter-broker listener.
            return self.inter_broker_listener.name
        if self.controller_listener_names:
            return self.controller_listener_names[0]
        if self.is_controller:
            return self.listeners[0].name
        return "PLAINTEXT"

    @property
    def inter_broker_listener(self) -> Listener:
        """The listener other brokers and the controller reach this broker on."""
        name = self.inter_broker_listener_name or self.listeners[0].name
        return self.advertised_for(name)

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> "BrokerConfig":
        """Build from Kafka property names; raises ConfigError naming the bad key."""
        values: dict[str, Any] = {}
        unknown = {}
        ordered = sorted(properties.items(), key=lambda item: _precedence_rank(item[0]))
        for key, text in ordered:
            prop = _PROPERTIES.get(key)
            if key.startswith((ICEBERG_REST_PREFIX, ICEBERG_S3_PREFIX)):
                continue
            if prop is None:
                unknown[key] = text
                continue
            try:
                value = prop.parse(text)
                _check_range(key, value)
            except ValueError as error:
                raise ConfigError(_invalid(key, text, error)) from None
            values[prop.attribute] = value * prop.scale if prop.scale != 1 else value
        for key in unknown:
            if key.startswith(_SECURITY_PREFIXES) or key in _SECURITY_KEYS:
                continue
            log.warning("the configuration %r was supplied but isn't a known config", key)
        if "security.inter.broker.protocol" in properties:
            # Kafka's older way to name the inter-broker listener: by its protocol.
            if "inter.broker.listener.name" in properties:
                raise ConfigError(
                    "only one of inter.broker.listener.name and security.inter.broker.protocol "
                    "should be set"
                )
            protocol = properties["security.inter.broker.protocol"].strip().upper()
            if protocol not in SECURITY_PROTOCOLS:
                raise ConfigError(
                    f"invalid value {protocol!r} for security.inter.broker.protocol: expected "
                    f"one of {', '.join(SECURITY_PROTOCOLS)}"
                )
            values["inter_broker_listener_name"] = protocol
        values["iceberg_rest_catalog"] = _iceberg_rest_properties(properties)
        values["iceberg_file_io"] = _iceberg_s3_properties(properties)
        config = cls(**values, unknown=unknown, properties=dict(properties))
        try:
            check_cordoned_log_dirs(config.cordoned_log_dirs, config.log_dirs)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        _check_iceberg_catalog(config, properties)
        if config.zookeeper_mode:
            if (
                "process.roles" in properties
                or config.controller_quorum_voters
                or config.controller_quorum_bootstrap_servers
                or config.controller_listener_names
            ):
                raise ConfigError(
                    "zookeeper.connect runs the ZooKeeper mode, where every broker may become"
                    " controller and is reached on its inter-broker listener: process.roles,"
                    " controller.quorum.voters and controller.listener.names belong to the"
                    " other mode and cannot be given with it"
                )
        elif config.controller_quorum_voters and config.controller_quorum_bootstrap_servers:
            raise ConfigError(
                "give the controller by controller.quorum.voters or by"
                " controller.quorum.bootstrap.servers, not both"
            )
        elif config.process_roles == {"broker"} and not (
            config.controller_quorum_voters or config.controller_quorum_bootstrap_servers
        ):
            raise ConfigError(
                "process.roles=broker needs controller.quorum.voters or"
                " controller.quorum.bootstrap.servers"
            )
        _check_listener_protocols(
            config, explicit_map="listener.security.protocol.map" in properties
        )
        _check_connection_limits(config)
        _check_share_lock_duration(config)
        _check_share_group_bounds(config)
        _check_streams_group_bounds(config)
        names = {listener.name for listener in config.listeners}
        # A controller-only node has no inter-broker listener of its own: it connects to the
        # brokers' one, with the security the shared properties give it.
        if (
            config.is_broker
            and config.inter_broker_listener_name
            and config.inter_broker_listener_name not in names
        ):
            raise ConfigError(
                f"inter.broker.listener.name {config.inter_broker_listener_name} is not one of "
                f"the listeners {sorted(names)}"
            )
        if config.is_controller and config.controller.node_id != config.node_id:
            raise ConfigError(
                f"controller.quorum.voters names node {config.controller.node_id}, but this "
                f"controller is node.id {config.node_id}"
            )
        return config


# Kafka's names of the config model's number types, and the range of each integer type.
_NUMBER_TYPES = {INT: "INT", SHORT: "SHORT", LONG: "LONG", DOUBLE: "DOUBLE"}
_INTEGER_RANGES = {INT: 2**31, SHORT: 2**15, LONG: 2**63}


def _check_range(key: str, value: Any) -> None:
    """Kafka parses an INT property with Integer.parseInt: a number out of its type's range is
    not a number of that type."""
    limit = _INTEGER_RANGES.get(BROKER_CONFIG_DEFS.get(key, (STRING, None))[0])
    if limit is not None and isinstance(value, int) and not -limit <= value < limit:
        raise _NotANumber()


def _invalid(key: str, text: str, error: ValueError) -> str:
    """Kafka's ConfigException message: "Invalid value x for configuration k: why"."""
    if isinstance(error, _NotANumber):
        kind = _NUMBER_TYPES.get(BROKER_CONFIG_DEFS.get(key, (INT, None))[0], "INT")
        error = ValueError(f"Not a number of type {kind}")
    return f"Invalid value {text.strip()} for configuration {key}: {error}"


def _check_listener_protocols(config: "BrokerConfig", *, explicit_map: bool) -> None:
    """Kafka refuses a listener whose name listener.security.protocol.map does not map ("No
    security protocol defined for listener"), the default map naming only the four protocols.
    When the map is not set, Kafka maps the controller.listener.names to PLAINTEXT, and so
    does minibroker for a listener named CONTROLLER (its own convention, the README's
    cluster by hand), so the start does not silently serve PLAINTEXT on a mistyped name."""
    allowed = set(SECURITY_PROTOCOLS) | set(config.listener_security_protocol_map)
    if not explicit_map:
        allowed |= {*config.controller_listener_names, "CONTROLLER"}
    for key, listeners in (
        ("listeners", config.listeners),
        ("advertised.listeners", config.advertised_listeners or ()),
    ):
        for listener in listeners:
            if listener.name not in allowed:
                raise ConfigError(
                    f"invalid value for {key}: no security protocol defined for listener "
                    f"{listener.name}: map it in listener.security.protocol.map (for example "
                    f"listener.security.protocol.map={listener.name}:PLAINTEXT, or "
                    f"{listener.name}:SSL, {listener.name}:SASL_PLAINTEXT, "
                    f"{listener.name}:SASL_SSL) or name the listener after its protocol"
                )


def _check_connection_limits(config: "BrokerConfig") -> None:
    """Kafka's own checks (KafkaConfig.validateValues) of the connection limits."""
    queued = config.queued_max_request_bytes
    if 0 < queued < config.socket_request_max_bytes:
        raise ConfigError(
            f"invalid value {queued} for queued.max.request.bytes: it must be at least "
            f"socket.request.max.bytes ({config.socket_request_max_bytes}), or -1 (unbounded)"
        )
    if config.max_connections_per_ip == 0 and not config.max_connections_per_ip_overrides:
        raise ConfigError(
            "max.connections.per.ip can be set to zero only if "
            "max.connections.per.ip.overrides is set"
        )


def _check_share_lock_duration(config: "BrokerConfig") -> None:
    """Kafka's ShareGroupConfig check: the share groups' default acquisition lock lies
    within the bounds the groups' own share.record.lock.duration.ms is held to."""
    low = config.group_share_min_record_lock_duration_ms
    high = config.group_share_max_record_lock_duration_ms
    value = config.group_share_record_lock_duration_ms
    if not low <= value <= high:
        raise ConfigError(
            f"invalid value {value} for group.share.record.lock.duration.ms: it must be "
            f"between group.share.min.record.lock.duration.ms ({low}) and "
            f"group.share.max.record.lock.duration.ms ({high})"
        )


def _check_share_group_bounds(config: "BrokerConfig") -> None:
    """Kafka's GroupCoordinatorConfig checks of the share groups' session and heartbeat: each
    between its min and max, and the heartbeat interval below the session timeout."""
    for name, value, low, high in (
        (
            "group.share.session.timeout.ms",
            config.group_share_session_timeout_ms,
            config.group_share_min_session_timeout_ms,
            config.group_share_max_session_timeout_ms,
        ),
        (
            "group.share.heartbeat.interval.ms",
            config.group_share_heartbeat_interval_ms,
            config.group_share_min_heartbeat_interval_ms,
            config.group_share_max_heartbeat_interval_ms,
        ),
    ):
        if not low <= value <= high:
            raise ConfigError(
                f"invalid value {value} for {name}: it must be between the min ({low}) and "
                f"the max ({high}) of its group.share bounds"
            )
    if config.group_share_heartbeat_interval_ms >= config.group_share_session_timeout_ms:
        raise ConfigError(
            "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms"
        )


def _check_streams_group_bounds(config: "BrokerConfig") -> None:
    """Kafka 4.4's GroupCoordinatorConfig.verifyStreamsGroupConfigs, its checks and messages
    in its order (the assignment, task offset and warm-up bounds are not properties here)."""
    c = config
    checks = (
        (
            c.group_streams_max_heartbeat_interval_ms >= c.group_streams_min_heartbeat_interval_ms,
            "group.streams.max.heartbeat.interval.ms must be greater than or equal to "
            "group.streams.min.heartbeat.interval.ms",
        ),
        (
            c.group_streams_heartbeat_interval_ms >= c.group_streams_min_heartbeat_interval_ms,
            "group.streams.heartbeat.interval.ms must be greater than or equal to "
            "group.streams.min.heartbeat.interval.ms",
        ),
        (
            c.group_streams_heartbeat_interval_ms <= c.group_streams_max_heartbeat_interval_ms,
            "group.streams.heartbeat.interval.ms must be less than or equal to "
            "group.streams.max.heartbeat.interval.ms",
        ),
        (
            c.group_streams_max_session_timeout_ms >= c.group_streams_min_session_timeout_ms,
            "group.streams.max.session.timeout.ms must be greater than or equal to "
            "group.streams.min.session.timeout.ms",
        ),
        (
            c.group_streams_session_timeout_ms >= c.group_streams_min_session_timeout_ms,
            "group.streams.session.timeout.ms must be greater than or equal to "
            "group.streams.min.session.timeout.ms",
        ),
        (
            c.group_streams_session_timeout_ms <= c.group_streams_max_session_timeout_ms,
            "group.streams.session.timeout.ms must be less than or equal to "
            "group.streams.max.session.timeout.ms",
        ),
        (
            c.group_streams_heartbeat_interval_ms < c.group_streams_session_timeout_ms,
            "group.streams.heartbeat.interval.ms must be less than "
            "group.streams.session.timeout.ms",
        ),
        (
            c.group_streams_num_standby_replicas <= c.group_streams_max_standby_replicas,
            "group.streams.num.standby.replicas must be less than or equal to "
            "group.streams.max.standby.replicas",
        ),
    )
    for holds, message in checks:
        if not holds:
            raise ConfigError(message)


def _routable(listener: Listener) -> Listener:
    """A listener with no host binds every interface; as in Kafka, it is advertised under
    this machine's fully qualified name."""
    if listener.host:
        return listener
    return Listener(listener.name, socket.getfqdn(), listener.port)


def _precedence_rank(key: str) -> int:
    prop = _PROPERTIES.get(key)
    if prop is None or prop.attribute not in _PRECEDENCE:
        return 0
    return _PRECEDENCE[prop.attribute].index(key)


def parse_properties(lines: Iterable[str]) -> dict[str, str]:
    """Parse Java-properties text exactly as java.util.Properties.load does (with the
    javaproperties library): `key=value`, `key: value` and `key value` (the separator is `=`,
    `:` or white space, with white space around it dropped), `#` and `!` comment lines, a line
    ending in an odd number of backslashes continued by the next one (whose leading white
    space is dropped; Kafka's sample files write `sasl.jaas.config` so), the escapes `\\t`,
    `\\n`, `\\uXXXX`, `\\=`, `\\:`, `\\ ` and `\\\\`, and a key alone on its line with an
    empty value. A # after a value is part of the value, as in Java; the last of repeated
    keys wins."""
    return _load_properties("\n".join(lines))


def _load_properties(text: str) -> dict[str, str]:
    try:
        return dict(javaproperties.loads(text))
    except ValueError as error:  # a malformed \\uXXXX escape, as Java's IllegalArgumentException
        raise ConfigError(f"malformed properties: {error}") from None


def read_properties_file(path: Path) -> dict[str, str]:
    """A properties file as Kafka reads it (Utils.loadProps, Properties.load of an
    InputStream): its bytes are ISO-8859-1, so no byte is an error, and other characters are
    written as \\uXXXX escapes. A file that cannot be read is a ConfigError naming it."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from None
    # Not split here: Java ends lines at \\n and \\r only (splitlines would also split at
    # form feeds and at NEL, byte 0x85, which are white space and a character to Java).
    try:
        return _load_properties(data.decode("iso-8859-1"))
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


def load_config(path: Path | None, overrides: Iterable[str]) -> BrokerConfig:
    """Read ``server.properties`` (if given) and apply ``key=value`` overrides on top."""
    properties: dict[str, str] = {}
    if path is not None:
        properties.update(read_properties_file(path))
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {override!r} is not key=value")
        properties[key.strip()] = value.strip()
    return BrokerConfig.from_properties(properties)
