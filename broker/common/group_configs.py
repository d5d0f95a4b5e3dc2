"""Group configs (KIP-848): the GROUP config resource (type 32), as Kafka 4.4's GroupConfig
defines, validates and describes it.

Pure: plain dicts in, plain dicts out. A group's overrides are set by IncrementalAlterConfigs
or AlterConfigs, decided and stored by the controller (``controller/configs.py``) and pushed to
every broker; DescribeConfigs answers each config with its value and source:
DYNAMIC_GROUP_CONFIG (8) for an override, else its broker synonym's source
(``consumer.session.timeout.ms`` <- ``group.consumer.session.timeout.ms``) or DEFAULT_CONFIG.
Kafka's 4.4 answers were read from a Kafka 4.4 broker: its error messages, the bounds its
defaults give, which configs it lists (the internal ones only when set).

The group coordinator reads ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms`` at each ConsumerGroupHeartbeat, the share groups'
``share.session.timeout.ms`` and ``share.heartbeat.interval.ms`` at each ShareGroupHeartbeat,
and the streams groups'
``streams.session.timeout.ms``, ``streams.heartbeat.interval.ms``,
``streams.num.standby.replicas``, ``streams.acceptable.recovery.lag`` and
``streams.task.offset.interval.ms`` at each StreamsGroupHeartbeat, as Kafka's
GroupMetadataManager does; the other configs are validated, stored and described as Kafka
does, for knobs minibroker does not have (the assignment interval, assignor offload, the
initial rebalance delay of a streams group).
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from minibroker.common.config_model import (
    BOOLEAN,
    DEFAULT_CONFIG,
    INT,
    LIST,
    LONG,
    STATIC_BROKER_CONFIG,
    STRING,
    ConfigChangeError,
)
from minibroker.protocol.errors import Error

GROUP_RESOURCE = 32
# DescribeConfigsResponse.ConfigSource GROUP_CONFIG (the admin client's DYNAMIC_GROUP_CONFIG).
DYNAMIC_GROUP_CONFIG = 8

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"


@dataclass(frozen=True)
class GroupBounds:
    """The broker properties a group config is checked against (Kafka's
    GroupCoordinatorConfig and ShareGroupConfig): the consumer, share and streams protocols'
    from this broker's properties, the rest at Kafka's defaults. The share group's record
    lock duration is checked against ``group.share.min.record.lock.duration.ms`` and
    ``group.share.max.record.lock.duration.ms`` as Kafka's GroupConfig.validateValues does
    (a broker that lowers the minimum, as confluent-kafka-python's test cluster does to 1 s,
    accepts a group's 5 s)."""

    consumer_session_timeout_ms: int = 45000
    consumer_heartbeat_interval_ms: int = 5000
    consumer_min_session_timeout_ms: int = 45000
    consumer_max_session_timeout_ms: int = 60000
    consumer_min_heartbeat_interval_ms: int = 5000
    consumer_max_heartbeat_interval_ms: int = 15000
    share_session_timeout_ms: int = 45000
    share_heartbeat_interval_ms: int = 5000
    share_min_session_timeout_ms: int = 45000
    share_max_session_timeout_ms: int = 60000
    share_min_heartbeat_interval_ms: int = 5000
    share_max_heartbeat_interval_ms: int = 15000
    share_min_record_lock_duration_ms: int = 15000
    share_max_record_lock_duration_ms: int = 60000
    streams_session_timeout_ms: int = 45000
    streams_heartbeat_interval_ms: int = 5000
    streams_min_session_timeout_ms: int = 45000
    streams_max_session_timeout_ms: int = 60000
    streams_min_heartbeat_interval_ms: int = 5000
    streams_max_heartbeat_interval_ms: int = 15000
    streams_max_standby_replicas: int = 2


@dataclass(frozen=True)
class GroupConfigDef:
    type: int
    default: str | None
    # ConfigDef's atLeast (INT and LONG), else None.
    at_least: int | None = None
    # The broker property whose value is the default (GroupConfig.brokerSynonym).
    synonym: str | None = None
    # Kafka's internal configs: described only when set.
    internal: bool = False
    # The value ConfigDef's validator allows (STRING configs), else None.
    one_of: tuple[str, ...] | None = None


def _int(default: int, at_least: int, synonym: str, *, internal: bool = False) -> GroupConfigDef:
    return GroupConfigDef(INT, str(default), at_least, synonym, internal)


def _bool(default: bool, synonym: str | None = None, *, internal: bool = False) -> GroupConfigDef:
    return GroupConfigDef(BOOLEAN, str(default).lower(), None, synonym, internal)


# Kafka 4.4's GroupConfig, in its definition order.
GROUP_CONFIG_DEFS: dict[str, GroupConfigDef] = {
    CONSUMER_SESSION_TIMEOUT_MS: _int(45000, 1, "group.consumer.session.timeout.ms"),
    CONSUMER_HEARTBEAT_INTERVAL_MS: _int(5000, 1, "group.consumer.heartbeat.interval.ms"),
    "consumer.assignment.interval.ms": _int(1000, 0, "group.consumer.assignment.interval.ms"),
    "consumer.assignor.offload.enable": _bool(
        True, "group.consumer.assignor.offload.enable", internal=True
    ),
    "share.session.timeout.ms": _int(45000, 1, "group.share.session.timeout.ms"),
    "share.heartbeat.interval.ms": _int(5000, 1, "group.share.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": _int(30000, 1000, "group.share.record.lock.duration.ms"),
    "share.delivery.count.limit": _int(5, 2, "group.share.delivery.count.limit"),
    "share.partition.max.record.locks": _int(2000, 100, "group.share.partition.max.record.locks"),
    "share.auto.offset.reset": GroupConfigDef(STRING, "latest"),
    "share.isolation.level": GroupConfigDef(
        STRING, "read_uncommitted", one_of=("read_committed", "read_uncommitted")
    ),
    "share.renew.acknowledge.enable": _bool(True),
    "share.assignment.interval.ms": _int(1000, 0, "group.share.assignment.interval.ms"),
    "share.assignor.offload.enable": _bool(
        True, "group.share.assignor.offload.enable", internal=True
    ),
    "streams.session.timeout.ms": _int(45000, 1, "group.streams.session.timeout.ms"),
    "streams.heartbeat.interval.ms": _int(5000, 1, "group.streams.heartbeat.interval.ms"),
    "streams.num.standby.replicas": _int(0, 0, "group.streams.num.standby.replicas"),
    "streams.initial.rebalance.delay.ms": _int(3000, 0, "group.streams.initial.rebalance.delay.ms"),
    "streams.assignment.interval.ms": _int(1000, 0, "group.streams.assignment.interval.ms"),
    "streams.assignor.offload.enable": _bool(
        True, "group.streams.assignor.offload.enable", internal=True
    ),
    "streams.task.offset.interval.ms": _int(
        60000, 1, "group.streams.task.offset.interval.ms", internal=True
    ),
    "streams.num.warmup.replicas": _int(2, 0, "group.streams.num.warmup.replicas", internal=True),
    "streams.rack.aware.assignment.tags": GroupConfigDef(
        LIST, "", synonym="group.streams.rack.aware.assignment.tags"
    ),
    "streams.acceptable.recovery.lag": GroupConfigDef(
        LONG, "10000", 0, "group.streams.acceptable.recovery.lag", internal=True
    ),
    # No default of its own: the first of the broker's group.streams.assignors.
    "streams.assignor.name": GroupConfigDef(STRING, None, synonym="group.streams.assignors"),
    "errors.deadletterqueue.topic.name": GroupConfigDef(STRING, ""),
    "errors.deadletterqueue.copy.record.enable": _bool(False),
}

# Kafka's defaults of the broker properties that are group configs' synonyms and that
# minibroker does not read (it runs no share or streams groups).
_KAFKA_BROKER_DEFAULTS = {
    definition.synonym: definition.default
    for definition in GROUP_CONFIG_DEFS.values()
    if definition.synonym is not None and definition.default is not None
} | {"group.streams.assignors": "sticky"}
_STREAMS_ASSIGNORS = ("sticky",)

# (config, lowest, highest) checked against the broker's bounds (GroupConfig.validateValues),
# the consumer, share and streams protocols' filled in by `_ranges` (Kafka's order: the streams
# heartbeat, session and standby checks come before the streams assignment interval's);
# None: no bound on that side.
_FIXED_RANGES: tuple[tuple[str, int | None, int | None], ...] = (
    ("consumer.assignment.interval.ms", 0, 15000),
    ("share.delivery.count.limit", 2, 10),
    ("share.partition.max.record.locks", 100, 4000),
    ("share.assignment.interval.ms", 0, 15000),
    ("streams.assignment.interval.ms", 0, 15000),
    ("streams.task.offset.interval.ms", 15000, None),
    ("streams.num.warmup.replicas", None, 20),
)

# java.time.Duration.parse's pattern (JDK 17), case-insensitive as Java's.
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)
_LONG_MAX = 2**63 - 1
BY_DURATION_PREFIX = "by_duration:"


def parse_duration_ms(text: str) -> int | None:
    """java.time.Duration.parse of ``text``, in milliseconds (nanoseconds truncated, as
    ``Instant.minus`` then ``toEpochMilli`` lose them), or None where Java throws
    DateTimeParseException: no part at all, a ``T`` without a time part, a value past a long
    of seconds. Signs are Java's: ``-PT1H`` is negative, ``-PT-1H`` positive, ``PT1H-30M``
    thirty minutes."""
    match = _DURATION.fullmatch(text)
    if match is None or match.group(3) == "T":
        return None
    negate, days, hours, minutes, seconds, fraction = (
        match.group(1),
        match.group(2),
        match.group(4),
        match.group(5),
        match.group(6),
        match.group(7),
    )
    if days is None and hours is None and minutes is None and seconds is None:
        return None
    total_s = 0
    for part, unit in ((days, 86400), (hours, 3600), (minutes, 60), (seconds, 1)):
        if part is not None:
            seconds_of_part = int(part) * unit
            if abs(seconds_of_part) > _LONG_MAX:  # Math.multiplyExact's overflow
                return None
            total_s += seconds_of_part
    nanos = 0
    if fraction:
        nanos = int(fraction.ljust(9, "0"))
        if seconds is not None and seconds.startswith("-"):
            nanos = -nanos
    if abs(total_s) > _LONG_MAX:
        return None
    total_ns = total_s * 1_000_000_000 + nanos
    if negate == "-":
        total_ns = -total_ns
    # Duration.toMillis rounds toward negative infinity (floorDiv of the nanos).
    return total_ns // 1_000_000


def share_auto_offset_reset(text: str) -> tuple[str, int] | None:
    """Kafka's ShareGroupAutoOffsetResetStrategy.fromString of a (trimmed) value: ("earliest",
    0), ("latest", 0) or ("by_duration", the duration in ms); None where Kafka throws
    (``none``, any other word, an unparsable or negative duration). Case-sensitive, as
    AutoOffsetResetStrategy.fromString (``EARLIEST`` is refused)."""
    if text in ("earliest", "latest"):
        return text, 0
    if not text.startswith(BY_DURATION_PREFIX):
        return None
    duration_ms = parse_duration_ms(text[len(BY_DURATION_PREFIX) :])
    if duration_ms is None or duration_ms < 0:
        return None
    return "by_duration", duration_ms


def _invalid(message: str) -> ConfigChangeError:
    return ConfigChangeError(Error.INVALID_CONFIG, message)


def _parse(name: str, definition: GroupConfigDef, text: str) -> object:
    """ConfigDef.parse of one value, with its messages."""
    stripped = text.strip()
    if definition.type in (INT, LONG):
        bits = 32 if definition.type == INT else 64
        try:
            value = int(stripped)
        except ValueError:
            value = None
        if value is None or not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            type_name = "INT" if definition.type == INT else "LONG"
            raise _invalid(
                f"Invalid value {text} for configuration {name}: Not a number of type {type_name}"
            )
        if definition.at_least is not None and value < definition.at_least:
            raise _invalid(
                f"Invalid value {value} for configuration {name}: Value must be at least "
                f"{definition.at_least}"
            )
        return value
    if definition.type == BOOLEAN:
        if stripped.lower() not in ("true", "false"):
            raise _invalid(
                f"Invalid value {text} for configuration {name}: Expected value to be either "
                "true or false"
            )
        return stripped.lower() == "true"
    if definition.type == LIST:
        return [part.strip() for part in stripped.split(",")] if stripped else []
    if definition.one_of is not None and stripped not in definition.one_of:
        raise _invalid(
            f"Invalid value {text} for configuration {name}: String must be one of: "
            f"{', '.join(definition.one_of)}"
        )
    if name == "share.auto.offset.reset" and not _valid_offset_reset(stripped):
        raise _invalid(
            f"Invalid value {text} for configuration {name}: Invalid value `{text}` for "
            f"configuration {name}. The value must be either 'earliest', 'latest' or of the "
            "format 'by_duration:<PnDTnHnMn.nS>'."
        )
    return stripped


def _valid_offset_reset(text: str) -> bool:
    return share_auto_offset_reset(text) is not None


def _ranges(bounds: GroupBounds) -> tuple[tuple[str, int | None, int | None], ...]:
    consumer = (
        (
            CONSUMER_HEARTBEAT_INTERVAL_MS,
            bounds.consumer_min_heartbeat_interval_ms,
            bounds.consumer_max_heartbeat_interval_ms,
        ),
        (
            CONSUMER_SESSION_TIMEOUT_MS,
            bounds.consumer_min_session_timeout_ms,
            bounds.consumer_max_session_timeout_ms,
        ),
    )
    share = (
        (
            "share.heartbeat.interval.ms",
            bounds.share_min_heartbeat_interval_ms,
            bounds.share_max_heartbeat_interval_ms,
        ),
        (
            "share.session.timeout.ms",
            bounds.share_min_session_timeout_ms,
            bounds.share_max_session_timeout_ms,
        ),
        (
            "share.record.lock.duration.ms",
            bounds.share_min_record_lock_duration_ms,
            bounds.share_max_record_lock_duration_ms,
        ),
    )
    streams = (
        (
            "streams.heartbeat.interval.ms",
            bounds.streams_min_heartbeat_interval_ms,
            bounds.streams_max_heartbeat_interval_ms,
        ),
        (
            "streams.session.timeout.ms",
            bounds.streams_min_session_timeout_ms,
            bounds.streams_max_session_timeout_ms,
        ),
        ("streams.num.standby.replicas", None, bounds.streams_max_standby_replicas),
    )
    before = tuple(r for r in _FIXED_RANGES if not r[0].startswith("streams."))
    after = tuple(r for r in _FIXED_RANGES if r[0].startswith("streams."))
    return consumer + before[:1] + share + before[1:] + streams + after


def validate(overrides: Mapping[str, str], bounds: GroupBounds) -> dict[str, object]:
    """Kafka's GroupConfig.validate of a group's complete set of overrides: known names,
    values of their types and ConfigDef bounds, then the broker's bounds
    (``group.consumer.min.session.timeout.ms`` ...) and session above heartbeat. Raises
    ConfigChangeError (INVALID_CONFIG, Kafka's message); returns the parsed values."""
    for name in overrides:
        if name not in GROUP_CONFIG_DEFS:
            raise _invalid(f"Unknown group config name: {name}")
    values = {
        name: _parse(name, definition, overrides[name])
        for name, definition in GROUP_CONFIG_DEFS.items()
        if name in overrides
    }
    tags = values.get("streams.rack.aware.assignment.tags")
    if isinstance(tags, list) and len(set(tags)) != len(tags):
        raise _invalid("streams.rack.aware.assignment.tags must not contain duplicate tag keys.")
    for name, lowest, highest in _ranges(bounds):
        value = values.get(name)
        if not isinstance(value, int):
            continue
        if lowest is not None and highest is not None:
            if not lowest <= value <= highest:
                raise _invalid(f"{name} must be in the range {lowest} to {highest} inclusive.")
        elif lowest is not None and value < lowest:
            raise _invalid(f"{name} must be greater than or equal to {lowest}")
        elif highest is not None and value > highest:
            raise _invalid(f"{name} must be less than or equal to {highest}")
    assignor = values.get("streams.assignor.name")
    if assignor is not None and assignor not in _STREAMS_ASSIGNORS:
        raise _invalid(
            f"streams.assignor.name '{assignor}' is not a registered task assignor. "
            f"Registered assignors are: [{', '.join(_STREAMS_ASSIGNORS)}]."
        )
    for protocol, session_default, heartbeat_default in (
        ("consumer", bounds.consumer_session_timeout_ms, bounds.consumer_heartbeat_interval_ms),
        ("share", bounds.share_session_timeout_ms, bounds.share_heartbeat_interval_ms),
        ("streams", bounds.streams_session_timeout_ms, bounds.streams_heartbeat_interval_ms),
    ):
        session_name = f"{protocol}.session.timeout.ms"
        heartbeat_name = f"{protocol}.heartbeat.interval.ms"
        if session_name not in values and heartbeat_name not in values:
            continue
        session = values.get(session_name, session_default)
        heartbeat = values.get(heartbeat_name, heartbeat_default)
        assert isinstance(session, int) and isinstance(heartbeat, int)
        if session <= heartbeat:
            raise _invalid(f"{session_name} must be greater than {heartbeat_name}")
    dlq = values.get("errors.deadletterqueue.topic.name")
    if isinstance(dlq, str) and dlq.startswith("__"):
        raise _invalid("errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'")
    return values


def check_name(name: str) -> None:
    """A group resource's name: Kafka refuses the empty one (the default resource)."""
    if not name:
        raise ConfigChangeError(Error.INVALID_REQUEST, "Default group resources are not allowed.")


def _broker_chain(synonym: str, static: Mapping[str, str]) -> list[dict]:
    """The broker property's sources, highest first: as given to this broker, then Kafka's
    default (minibroker's group.* properties are static only)."""
    chain = []
    if synonym in static:
        chain.append({"name": synonym, "value": static[synonym], "source": STATIC_BROKER_CONFIG})
    default = _KAFKA_BROKER_DEFAULTS.get(synonym)
    if default is not None:
        chain.append({"name": synonym, "value": default, "source": DEFAULT_CONFIG})
    return chain


def describe(
    overrides: Mapping[str, str],
    static: Mapping[str, str],
    *,
    include_synonyms: bool,
    keys: Iterable[str] | None = None,
) -> list[dict]:
    """DescribeConfigs entries of a group with these overrides, on a broker with these
    ``static`` properties: every non-internal group config and each set internal one (or
    those of ``keys``), with its value, source and (when asked) synonyms, as Kafka 4.4
    answers: an override's chain is itself then its broker synonym's; a config without a
    broker synonym is its own DEFAULT_CONFIG synonym."""
    entries = []
    for name, definition in GROUP_CONFIG_DEFS.items():
        if keys and name not in keys:
            continue
        if definition.internal and name not in overrides:
            continue
        if definition.synonym is not None:
            chain = _broker_chain(definition.synonym, static)
        else:
            chain = [{"name": name, "value": definition.default, "source": DEFAULT_CONFIG}]
        if name in overrides:
            chain.insert(
                0, {"name": name, "value": overrides[name], "source": DYNAMIC_GROUP_CONFIG}
            )
        source = chain[0]["source"] if chain else DEFAULT_CONFIG
        entries.append(
            {
                "name": name,
                "value": chain[0]["value"] if chain else definition.default,
                "read_only": False,
                "config_source": source,
                "is_default": source == DEFAULT_CONFIG,
                "is_sensitive": False,
                "synonyms": chain if include_synonyms else [],
                "config_type": definition.type,
                "documentation": None,
            }
        )
    return entries


def consumer_overrides(
    overrides: Mapping[str, str], protocol: str = "consumer"
) -> tuple[int | None, int | None]:
    """The group's (session timeout, heartbeat interval) overrides of a protocol
    (``consumer.*`` or ``share.*``), None where not set (the values were validated when they
    were set; an unreadable one counts as not set)."""

    def read(name: str) -> int | None:
        try:
            return int(overrides[name].strip()) if name in overrides else None
        except ValueError:
            return None

    return read(f"{protocol}.session.timeout.ms"), read(f"{protocol}.heartbeat.interval.ms")
