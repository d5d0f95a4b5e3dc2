"""Broker configuration by Kafka's own property names, with Kafka's defaults.

One typed object, ``BrokerConfig``, built from sources in order: the embedded defaults, a
``server.properties`` file, then ``--override key=value`` pairs (as kafka-server-start.sh
does). A value that does not parse stops the start with a message naming the key. Unknown keys
are logged and ignored, as Kafka does, so a real Kafka properties file can be reused.
"""

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def _parse_int(text: str) -> int:
    return int(text.strip())


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("expected true or false")
    return value == "true"


def _parse_listeners(text: str) -> tuple[Listener, ...]:
    listeners = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)", item)
        if match is None:
            raise ValueError(f"{item!r} is not NAME://host:port")
        host = match.group(2).strip("[]")
        listeners.append(Listener(match.group(1).upper(), host, int(match.group(3))))
    if not listeners:
        raise ValueError("at least one listener is needed")
    return tuple(listeners)


def _parse_dirs(text: str) -> tuple[Path, ...]:
    dirs = tuple(Path(part.strip()) for part in text.split(",") if part.strip())
    if not dirs:
        raise ValueError("at least one directory is needed")
    return dirs


def _parse_timestamp_type(text: str) -> str:
    value = text.strip()
    if value not in ("CreateTime", "LogAppendTime"):
        raise ValueError("expected CreateTime or LogAppendTime")
    return value


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _parse_int(text)
        if value < minimum:
            raise ValueError(f"must be at least {minimum}")
        return value

    return parse


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
    "listeners": _Property("listeners", _parse_listeners),
    "advertised.listeners": _Property("advertised_listeners", _parse_listeners),
    "log.dirs": _Property("log_dirs", _parse_dirs),
    "log.dir": _Property("log_dirs", _parse_dirs),
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
    "message.max.bytes": _Property("message_max_bytes", _at_least(0)),
    "num.partitions": _Property("num_partitions", _at_least(1)),
    "default.replication.factor": _Property("default_replication_factor", _at_least(1)),
    "auto.create.topics.enable": _Property("auto_create_topics_enable", _parse_bool),
    "delete.topic.enable": _Property("delete_topic_enable", _parse_bool),
    "socket.request.max.bytes": _Property("socket_request_max_bytes", _at_least(1)),
    "min.insync.replicas": _Property("min_insync_replicas", _at_least(1)),
    "cluster.id": _Property("cluster_id", str.strip),
}

# The attributes fed by more than one property, in increasing precision.
_PRECEDENCE = {
    "log_retention_ms": ("log.retention.hours", "log.retention.minutes", "log.retention.ms"),
    "log_roll_ms": ("log.roll.hours", "log.roll.ms"),
    "node_id": ("broker.id", "node.id"),
    "log_dirs": ("log.dir", "log.dirs"),
}


@dataclass(frozen=True)
class BrokerConfig:
    """Everything the broker reads from configuration, under Kafka's names and defaults.

    The embedded defaults differ from Kafka's in two places so that ``minibroker serve`` with
    no file gives a working local broker: the listener binds 127.0.0.1:9092 and the data lives
    under ./data.
    """

    node_id: int = 1
    listeners: tuple[Listener, ...] = (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    advertised_listeners: tuple[Listener, ...] | None = None
    log_dirs: tuple[Path, ...] = (Path("data"),)
    log_segment_bytes: int = 1_073_741_824
    log_roll_ms: int = 168 * 3_600_000
    log_retention_ms: int = 168 * 3_600_000
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: int = 300_000
    log_index_interval_bytes: int = 4096
    log_index_size_max_bytes: int = 10_485_760
    log_flush_interval_messages: int = LONG_MAX
    log_flush_interval_ms: int | None = None
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    log_message_timestamp_type: str = "CreateTime"
    message_max_bytes: int = 1_048_588
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    socket_request_max_bytes: int = 104_857_600
    min_insync_replicas: int = 1
    cluster_id: str | None = None
    unknown: dict[str, str] = field(default_factory=dict)

    @property
    def advertised(self) -> tuple[Listener, ...]:
        """Where clients are told to connect: advertised.listeners, else the listeners."""
        return self.advertised_listeners or self.listeners

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> "BrokerConfig":
        """Build from Kafka property names; raises ConfigError naming the bad key."""
        values: dict[str, Any] = {}
        unknown = {}
        ordered = sorted(properties.items(), key=lambda item: _precedence_rank(item[0]))
        for key, text in ordered:
            prop = _PROPERTIES.get(key)
            if prop is None:
                unknown[key] = text
                continue
            try:
                value = prop.parse(text)
            except ValueError as error:
                raise ConfigError(f"invalid value {text!r} for {key}: {error}") from None
            values[prop.attribute] = value * prop.scale if prop.scale != 1 else value
        for key in unknown:
            log.warning("the configuration %r was supplied but isn't a known config", key)
        return cls(**values, unknown=unknown)


def _precedence_rank(key: str) -> int:
    prop = _PROPERTIES.get(key)
    if prop is None or prop.attribute not in _PRECEDENCE:
        return 0
    return _PRECEDENCE[prop.attribute].index(key)


def parse_properties(lines: Iterable[str]) -> dict[str, str]:
    """Parse Java-properties text as Kafka's files use it: key=value, # and ! comments."""
    properties: dict[str, str] = {}
    for raw in lines:
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        parts = re.split(r"\s*[=:]\s*", line, maxsplit=1)
        if len(parts) != 2:
            raise ConfigError(f"line {raw.rstrip()!r} is not key=value")
        properties[parts[0]] = parts[1]
    return properties


def load_config(path: Path | None, overrides: Iterable[str]) -> BrokerConfig:
    """Read ``server.properties`` (if given) and apply ``key=value`` overrides on top."""
    properties: dict[str, str] = {}
    if path is not None:
        try:
            text = path.read_text()
        except OSError as error:
            raise ConfigError(f"cannot read {path}: {error.strerror}") from None
        properties.update(parse_properties(text.splitlines()))
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {override!r} is not key=value")
        properties[key.strip()] = value.strip()
    return BrokerConfig.from_properties(properties)
