"""The data source's options, parsed and checked on the driver, named as Spark's Kafka source
names them.

Spark hands a Python data source its options with lowercased names (`maxOffsetsPerTrigger`
arrives as `maxoffsetspertrigger`), so every lookup here is by the lowercased name and every
message names the option as a user writes it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# Spark's option names, as users write them; looked up lowercased.
BOOTSTRAP = "kafka.bootstrap.servers"
SUBSCRIBE = "subscribe"
SUBSCRIBE_PATTERN = "subscribePattern"
ASSIGN = "assign"
STARTING_OFFSETS = "startingOffsets"
ENDING_OFFSETS = "endingOffsets"
STARTING_TIMESTAMP = "startingTimestamp"
ENDING_TIMESTAMP = "endingTimestamp"
STARTING_BY_TIMESTAMP = "startingOffsetsByTimestamp"
ENDING_BY_TIMESTAMP = "endingOffsetsByTimestamp"
BY_TIMESTAMP_STRATEGY = "startingOffsetsByTimestampStrategy"
MAX_OFFSETS_PER_TRIGGER = "maxOffsetsPerTrigger"
MIN_PARTITIONS = "minPartitions"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
INCLUDE_HEADERS = "includeHeaders"
POLL_TIMEOUT_MS = "kafkaConsumer.pollTimeoutMs"
TOPIC = "topic"
# The exactly-once sink (this source's own; Spark's Kafka sink has no such option).
EXACTLY_ONCE = "exactlyOnce"
TRANSACTIONAL_ID_PREFIX = "transactionalIdPrefix"

EARLIEST = -2
LATEST = -1

# Kafka client settings Spark's Kafka source refuses, because the source manages them itself.
_MANAGED_KAFKA_PARAMS = {
    "auto.offset.reset": "set startingOffsets instead",
    "enable.auto.commit": "offsets are kept in Spark's checkpoint, never committed",
    "key.deserializer": "keys are always read as bytes",
    "value.deserializer": "values are always read as bytes",
    "key.serializer": "keys are always written as bytes",
    "value.serializer": "values are always written as bytes",
    "interceptor.classes": "the Java client's interceptors do not exist here",
}


class OptionError(ValueError):
    """An option is missing, malformed or contradicts another; the message names it."""


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(key).lower(): str(value) for key, value in options.items()}


def _get(options: dict[str, str], name: str) -> str | None:
    value = options.get(name.lower())
    return None if value is None or value.strip() == "" else value.strip()


def _bool(options: dict[str, str], name: str, default: bool) -> bool:
    value = _get(options, name)
    if value is None:
        return default
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise OptionError(f"option {name} must be true or false, not {value!r}")


def _positive_int(options: dict[str, str], name: str) -> int | None:
    value = _get(options, name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"option {name} must be a positive integer, not {value!r}") from None
    if number <= 0:
        raise OptionError(f"option {name} must be a positive integer, not {value!r}")
    return number


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """The `kafka.`-prefixed options without the prefix: librdkafka settings. Names the first
    option the source manages itself."""
    params = {}
    for key, value in _lower(options).items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name in _MANAGED_KAFKA_PARAMS:
            raise OptionError(
                f"option kafka.{name} is not supported: {_MANAGED_KAFKA_PARAMS[name]}"
            )
        params[name] = value
    if not params.get("bootstrap.servers", "").strip():
        raise OptionError(f"option {BOOTSTRAP} must be set (e.g. 127.0.0.1:9092)")
    return params


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends: `kind` is "earliest", "latest", "offsets" (per-partition
    JSON, -2 earliest and -1 latest allowed), "timestamp" (one for every partition) or
    "timestamps" (per-partition JSON). `option` is the option it came from, for messages."""

    kind: str
    option: str
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True)
class TopicSelection:
    """Exactly one of `subscribe` (topic names), `subscribePattern` (a regex matched against
    the whole name) or `assign` (fixed partitions)."""

    option: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def matches(self, topic: str) -> bool:
        if self.option == SUBSCRIBE:
            return topic in self.topics
        if self.option == SUBSCRIBE_PATTERN:
            return re.fullmatch(self.pattern or "", topic) is not None
        return topic in self.partitions


@dataclass(frozen=True)
class ReadOptions:
    kafka: dict[str, str]
    selection: TopicSelection
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    timestamp_strategy_latest: bool


def parse_offsets_json(text: str, option: str) -> dict[str, dict[int, int]]:
    """`{"topic":{"0":23,"1":-2}}` as Spark's Kafka source takes it; names the option when the
    text is not that shape."""
    shape = 'a JSON object like {"topicA":{"0":23,"1":-1}}'
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        raise OptionError(
            f"option {option} is not valid JSON ({error}): expected {shape}"
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(f"option {option} must be {shape}, not {text!r}")
    result: dict[str, dict[int, int]] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"option {option}: topic {topic!r} must map to an object, {shape}")
        result[topic] = {}
        for partition, value in partitions.items():
            try:
                number = int(partition)
            except ValueError:
                raise OptionError(
                    f"option {option}: partition {partition!r} of topic {topic!r} is not a number"
                ) from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(
                    f"option {option}: {topic}-{partition} must be an integer, not {value!r}"
                )
            result[topic][number] = value
    return result


def _selection(options: dict[str, str]) -> TopicSelection:
    given = [name for name in (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN) if _get(options, name)]
    if len(given) != 1:
        raise OptionError(
            f"exactly one of the options {ASSIGN}, {SUBSCRIBE}, {SUBSCRIBE_PATTERN} must be set"
            + (f" (got {', '.join(given)})" if given else "")
        )
    (option,) = given
    value = _get(options, option)
    assert value is not None
    if option == SUBSCRIBE:
        topics = tuple(topic.strip() for topic in value.split(",") if topic.strip())
        if not topics:
            raise OptionError(f"option {SUBSCRIBE} names no topic: {value!r}")
        return TopicSelection(SUBSCRIBE, topics=topics)
    if option == SUBSCRIBE_PATTERN:
        try:
            re.compile(value)
        except re.error as error:
            raise OptionError(f"option {SUBSCRIBE_PATTERN} is not a regex: {error}") from None
        return TopicSelection(SUBSCRIBE_PATTERN, pattern=value)
    parsed = parse_offsets_json_list(value)
    return TopicSelection(ASSIGN, partitions=parsed)


def parse_offsets_json_list(text: str) -> dict[str, tuple[int, ...]]:
    """`assign`: `{"topicA":[0,1],"topicB":[2,4]}`."""
    shape = 'a JSON object like {"topicA":[0,1],"topicB":[2,4]}'
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        raise OptionError(
            f"option {ASSIGN} is not valid JSON ({error}): expected {shape}"
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(f"option {ASSIGN} must be {shape}, not {text!r}")
    result = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise OptionError(f"option {ASSIGN}: topic {topic!r} must map to a list of partitions")
        result[topic] = tuple(sorted(set(partitions)))
    return result


def _offset_spec(
    options: dict[str, str], *, starting: bool, streaming: bool, default: str
) -> OffsetSpec:
    if starting:
        names = (STARTING_BY_TIMESTAMP, STARTING_TIMESTAMP, STARTING_OFFSETS)
    else:
        names = (ENDING_BY_TIMESTAMP, ENDING_TIMESTAMP, ENDING_OFFSETS)
    by_timestamp, timestamp, offsets = names
    # Spark's precedence: per-partition timestamps, then one timestamp, then offsets.
    if (value := _get(options, by_timestamp)) is not None:
        return OffsetSpec(
            "timestamps", by_timestamp, offsets=parse_offsets_json(value, by_timestamp)
        )
    if (value := _get(options, timestamp)) is not None:
        try:
            millis = int(value)
        except ValueError:
            raise OptionError(
                f"option {timestamp} must be milliseconds since the epoch, not {value!r}"
            ) from None
        return OffsetSpec("timestamp", timestamp, timestamp=millis)
    value = _get(options, offsets)
    if value is None:
        return OffsetSpec(default, offsets)
    if value.lower() in ("earliest", "latest"):
        kind = value.lower()
        if not streaming and starting and kind == "latest":
            raise OptionError(f"option {offsets}=latest is not allowed in a batch query")
        if not streaming and not starting and kind == "earliest":
            raise OptionError(f"option {offsets}=earliest is not allowed in a batch query")
        return OffsetSpec(kind, offsets)
    spec = OffsetSpec("offsets", offsets, offsets=parse_offsets_json(value, offsets))
    for topic, partitions in spec.offsets.items():
        for partition, offset in partitions.items():
            if offset < EARLIEST:
                raise OptionError(f"option {offsets}: {topic}-{partition} offset {offset} < -2")
            if not streaming and starting and offset == LATEST:
                raise OptionError(
                    f"option {offsets}: latest (-1) for {topic}-{partition} is not allowed in a"
                    " batch query"
                )
            if not streaming and not starting and offset == EARLIEST:
                raise OptionError(
                    f"option {offsets}: earliest (-2) for {topic}-{partition} is not allowed as"
                    " an ending offset"
                )
    return spec


def read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    """Check every read option and return them parsed; raises OptionError naming the option."""
    lowered = _lower(options)
    kafka = kafka_params(options)
    selection = _selection(lowered)
    starting = _offset_spec(
        lowered, starting=True, streaming=streaming, default="latest" if streaming else "earliest"
    )
    if streaming:
        for name in (ENDING_OFFSETS, ENDING_TIMESTAMP, ENDING_BY_TIMESTAMP):
            if _get(lowered, name) is not None:
                raise OptionError(f"option {name} is not allowed in a streaming query")
        ending = OffsetSpec("latest", ENDING_OFFSETS)
    else:
        ending = _offset_spec(lowered, starting=False, streaming=False, default="latest")
        if _get(lowered, MAX_OFFSETS_PER_TRIGGER) is not None:
            pass  # Spark ignores it in batch queries; so do we.
    strategy = (_get(lowered, BY_TIMESTAMP_STRATEGY) or "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"option {BY_TIMESTAMP_STRATEGY} must be error or latest, not {strategy!r}"
        )
    poll_timeout = _positive_int(lowered, POLL_TIMEOUT_MS) or 120_000
    isolation = kafka.get("isolation.level", "read_uncommitted")
    if isolation not in ("read_committed", "read_uncommitted"):
        raise OptionError(
            f"option kafka.isolation.level must be read_committed or read_uncommitted,"
            f" not {isolation!r}"
        )
    # Spark's Kafka source reads uncommitted by default (the Java consumer's default);
    # librdkafka's default is read_committed, so say it explicitly.
    kafka["isolation.level"] = isolation
    return ReadOptions(
        kafka=kafka,
        selection=selection,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(lowered, MAX_OFFSETS_PER_TRIGGER),
        min_partitions=_positive_int(lowered, MIN_PARTITIONS),
        fail_on_data_loss=_bool(lowered, FAIL_ON_DATA_LOSS, True),
        include_headers=_bool(lowered, INCLUDE_HEADERS, False),
        poll_timeout_ms=poll_timeout,
        timestamp_strategy_latest=strategy == "latest",
    )


@dataclass(frozen=True)
class WriteOptions:
    kafka: dict[str, str]
    topic: str | None
    exactly_once: bool = False
    transactional_id_prefix: str | None = None


# A transactional id is at most this long here (Kafka allows any string; the prefix is also a
# consumer group id, and both show up in logs and ACLs: keep them readable).
_MAX_PREFIX = 200


def write_options(options: Mapping[str, str]) -> WriteOptions:
    """Check every write option. `exactlyOnce=true` writes in Kafka transactions; the
    producer settings it depends on (idempotence, acks=all, the transactional id) are the
    sink's, so contradicting them fails, naming the option."""
    lowered = _lower(options)
    kafka = kafka_params(options)
    exactly_once = _bool(lowered, EXACTLY_ONCE, False)
    prefix = _get(lowered, TRANSACTIONAL_ID_PREFIX)
    if "transactional.id" in kafka:
        raise OptionError(
            "option kafka.transactional.id is not supported: the sink chooses one per task;"
            f" set {EXACTLY_ONCE}=true (and {TRANSACTIONAL_ID_PREFIX} to choose their prefix)"
        )
    if prefix is not None and not exactly_once:
        raise OptionError(f"option {TRANSACTIONAL_ID_PREFIX} needs {EXACTLY_ONCE}=true")
    if prefix is not None and (
        len(prefix) > _MAX_PREFIX or not re.fullmatch(r"[A-Za-z0-9._-]+", prefix)
    ):
        raise OptionError(
            f"option {TRANSACTIONAL_ID_PREFIX} must be letters, digits, '.', '_' or '-'"
            f" (at most {_MAX_PREFIX}), not {prefix!r}"
        )
    if exactly_once:
        if kafka.get("enable.idempotence", "true").lower() != "true":
            raise OptionError(
                f"option kafka.enable.idempotence=false contradicts {EXACTLY_ONCE}=true"
                " (transactions need the idempotent producer)"
            )
        if kafka.get("acks", "all").lower() not in ("all", "-1"):
            raise OptionError(
                f"option kafka.acks={kafka['acks']} contradicts {EXACTLY_ONCE}=true"
                " (transactions need acks=all)"
            )
    return WriteOptions(
        kafka=kafka,
        topic=_get(lowered, TOPIC),
        exactly_once=exactly_once,
        transactional_id_prefix=prefix,
    )


def include_headers(options: Mapping[str, str]) -> bool:
    """Checks what every read needs (bootstrap servers, one topic selection) and returns
    includeHeaders, which decides the schema."""
    lowered = _lower(options)
    kafka_params(options)
    _selection(lowered)
    return _bool(lowered, INCLUDE_HEADERS, False)
