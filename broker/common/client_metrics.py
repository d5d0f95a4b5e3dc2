"""Client telemetry (KIP-714): client-metrics subscriptions and Kafka's ClientMetricsManager
rules, as a pure core with time passed in.

The CLIENT_METRICS config resource (type 16) is a named subscription with three configs,
as Kafka's ``ClientMetricsConfigs`` defines and validates them: ``metrics`` (a LIST of
metric-name prefixes, ``*`` for all), ``interval.ms`` (the push interval, 100 ms to 1 h,
default 5 min) and ``match`` (a LIST of ``selector=regex``, the selectors
client_instance_id, client_id, client_software_name, client_software_version,
client_source_address and client_source_port; every one given must match in full). The
controller stores them as other dynamic configs and pushes them to every broker, whose
:class:`ClientMetricsManager` takes them with :meth:`ClientMetricsManager.update_subscriptions`.

:class:`ClientMetricsManager` is Kafka's ``ClientMetricsManager`` (server module) without
its threads and timer: GetTelemetrySubscriptions gives a client instance id (a new one for
the zero id), its subscription id (CRC-32C of its metrics and interval XOR the instance id's
hash), the lowest interval of the subscriptions that match it and the union of their
metrics; an early Get or Push is THROTTLING_QUOTA_EXCEEDED, a push after a terminating one
INVALID_REQUEST, a stale subscription id UNKNOWN_SUBSCRIPTION_ID, a compression id Kafka does
not know UNSUPPORTED_COMPRESSION_TYPE, a payload above ``telemetry.max.bytes``
TELEMETRY_TOO_LARGE, and a payload that does not decompress or parse INVALID_RECORD (Kafka's
answer when its receiver plugin fails). Instances expire ``max(60 s, 3 x push interval)``
after their last request (Kafka's expiration timer task), and the cache holds at most 16384.

Where minibroker departs: the decoded metrics are kept (``ClientInstance.series``) and served
on ``/metrics`` (node/metrics.py, Kafka needs a receiver plugin for that); a client's series
are left out of a scrape once it has not pushed for 3 push intervals. Kafka's subscription id
hashes ``metrics.toString()`` of a Java HashSet, whose order is the set's bucket order; here
the metrics are sorted first (the id is opaque to clients, only its change matters).
"""

import re
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import crc32c

from minibroker.common.config_model import ConfigChangeError
from minibroker.protocol.errors import Error

CLIENT_METRICS_RESOURCE = 16
# DescribeConfigsResponse's ConfigSource CLIENT_METRICS_CONFIG.
CLIENT_METRICS_CONFIG = 7

METRICS = "metrics"
INTERVAL_MS = "interval.ms"
MATCH = "match"
ALL_METRICS = "*"

DEFAULT_INTERVAL_MS = 5 * 60 * 1000
MIN_INTERVAL_MS = 100
MAX_INTERVAL_MS = 3600000
DEFAULT_CACHE_EXPIRY_MS = 60 * 1000
CACHE_MAX_SIZE = 16384
TELEMETRY_MAX_BYTES = 1024 * 1024

MATCH_SELECTORS = (
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
)
# Kafka's ClientMetricsManager.SUPPORTED_COMPRESSION_TYPES: zstd, lz4, gzip, snappy.
ACCEPTED_COMPRESSION_TYPES = (4, 3, 1, 2)
# CompressionType.forId: the ids Kafka knows (none, gzip, snappy, lz4, zstd).
KNOWN_COMPRESSION_TYPES = frozenset(range(5))


def _list(value: str) -> list[str]:
    """ConfigDef's LIST parsing: comma-separated, trimmed, an empty string is no element."""
    if not value.strip():
        return []
    return [item.strip() for item in value.split(",")]


def parse_match(patterns: list[str]) -> dict[str, re.Pattern[str]]:
    """Kafka's ClientMetricsConfigs.parseMatchingPatterns: ``selector=regex`` each, split on
    '=' into exactly two parts; INVALID_CONFIG for anything else."""
    parsed: dict[str, re.Pattern[str]] = {}
    for pattern in patterns:
        parts = pattern.split("=")
        # Java's String.split drops trailing empty strings.
        while len(parts) > 1 and parts[-1] == "":
            parts.pop()
        if len(parts) != 2 or parts[0].strip() not in MATCH_SELECTORS:
            raise ConfigChangeError(
                Error.INVALID_CONFIG, f"Illegal client matching pattern: {pattern}"
            )
        try:
            parsed[parts[0].strip()] = re.compile(parts[1].strip())
        except re.error:
            raise ConfigChangeError(
                Error.INVALID_CONFIG, f"Illegal client matching pattern: {pattern}"
            ) from None
    return parsed


def check_name(name: str) -> None:
    if not name:
        raise ConfigChangeError(Error.INVALID_REQUEST, "Subscription name can't be empty")


def validate(name: str, configs: Mapping[str, str]) -> None:
    """Kafka's ClientMetricsConfigs.validate, by its errors and messages."""
    check_name(name)
    for key in configs:
        if key not in (METRICS, INTERVAL_MS, MATCH):
            raise ConfigChangeError(
                Error.INVALID_REQUEST, f"Unknown client metrics configuration: {key}"
            )
    if INTERVAL_MS in configs:
        text = configs[INTERVAL_MS].strip()
        try:
            interval = int(text)
        except ValueError:
            raise ConfigChangeError(
                Error.INVALID_CONFIG,
                f"Invalid value {text} for configuration {INTERVAL_MS}: Not a number of type INT",
            ) from None
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            raise ConfigChangeError(
                Error.INVALID_REQUEST,
                f"Invalid value {interval} for {INTERVAL_MS}, interval must be between 100 "
                "and 3600000 (1 hour)",
            )
    if MATCH in configs:
        parse_match(_list(configs[MATCH]))


def describe(configs: Mapping[str, str], keys: list[str] | tuple[str, ...] | None) -> list[dict]:
    """Kafka's DescribeConfigs of a CLIENT_METRICS resource (ConfigHelper): only the configs
    set, each with source CLIENT_METRICS_CONFIG; an unknown name has none."""
    return [
        {
            "name": name,
            "value": value,
            "read_only": False,
            "config_source": CLIENT_METRICS_CONFIG,
            "is_default": False,
            "is_sensitive": False,
            "synonyms": [],
            "config_type": 0,
            "documentation": None,
        }
        for name, value in configs.items()
        if not keys or name in keys
    ]


@dataclass(frozen=True)
class Subscription:
    name: str
    metrics: frozenset[str]
    interval_ms: int
    match: dict[str, re.Pattern[str]]

    @classmethod
    def from_configs(cls, name: str, configs: Mapping[str, str]) -> "Subscription":
        return cls(
            name,
            frozenset(_list(configs.get(METRICS, ""))),
            int(configs.get(INTERVAL_MS, DEFAULT_INTERVAL_MS)),
            parse_match(_list(configs.get(MATCH, ""))),
        )


@dataclass(frozen=True)
class ClientMetadata:
    """What ClientMetricsInstanceMetadata reads from the request's context."""

    client_id: str | None = None
    software_name: str | None = None
    software_version: str | None = None
    source_address: str | None = None
    source_port: int | None = None

    def attributes(self, instance_id: uuid.UUID) -> dict[str, str | None]:
        return {
            "client_instance_id": str(instance_id),
            "client_id": self.client_id,
            "client_software_name": self.software_name,
            "client_software_version": self.software_version,
            "client_source_address": self.source_address,
            "client_source_port": None if self.source_port is None else str(self.source_port),
        }

    def matches(self, instance_id: uuid.UUID, patterns: Mapping[str, re.Pattern[str]]) -> bool:
        attributes = self.attributes(instance_id)
        return all(
            (value := attributes.get(selector)) is not None and pattern.fullmatch(value)
            for selector, pattern in patterns.items()
        )


def java_uuid_hash(value: uuid.UUID) -> int:
    """Kafka's Uuid.hashCode: the two 64-bit halves XORed, then the halves of that."""
    h = (value.int >> 64) ^ (value.int & (2**64 - 1))
    return ((h >> 32) ^ h) & 0xFFFFFFFF


def _signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def subscription_id(metrics: frozenset[str], interval_ms: int, instance_id: uuid.UUID) -> int:
    """Kafka's computeSubscriptionId: CRC-32C of "[m1, m2]" + the interval, XOR the
    instance id's hash (the metrics sorted, see the module's docstring)."""
    text = "[" + ", ".join(sorted(metrics)) + "]" + str(interval_ms)
    return _signed32(crc32c.crc32c(text.encode()) ^ java_uuid_hash(instance_id))


# A pushed series: (metric name, its labels) -> (kind, value); see common/otlp_metrics.py.
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
# A gauge's or counter's value, or a histogram's (bounds, bucket counts, sum).
Histogram = tuple[list[float], list[int], float]
SeriesValue = tuple[str, float | Histogram]


@dataclass
class ClientInstance:
    """Kafka's ClientMetricsInstance: one client's subscription and request times."""

    instance_id: uuid.UUID
    metadata: ClientMetadata
    subscription_id: int
    subscription_version: int
    metrics: tuple[str, ...]
    push_interval_ms: int
    last_get_ms: int | None = None
    last_push_ms: int | None = None
    terminating: bool = False
    last_error: Error = Error.NONE
    expires_ms: int = 0
    # The pushed metrics, by series; each push's points replace (cumulative) or add to
    # (delta) the values kept.
    series: dict[SeriesKey, SeriesValue] = field(default_factory=dict)
    last_series_push_ms: int | None = None

    def may_get(self, now_ms: int) -> bool:
        """maybeUpdateGetRequestTimestamp."""
        times = [t for t in (self.last_get_ms, self.last_push_ms) if t is not None]
        if not times or now_ms - max(times) >= self.push_interval_ms:
            self.last_get_ms = now_ms
            return True
        return False

    def may_push(self, now_ms: int) -> bool:
        """maybeUpdatePushRequestTimestamp: the first push after a Get is always accepted
        (clients jitter the interval), later ones one interval apart."""
        if self.last_get_ms is not None and (
            self.last_push_ms is None or self.last_get_ms > self.last_push_ms
        ):
            accept = True
        else:
            accept = (
                self.last_push_ms is None or now_ms - self.last_push_ms >= self.push_interval_ms
            )
        if accept:
            self.last_push_ms = now_ms
        return accept


# Decodes a pushed payload into series, given the instance's current ones (raises ValueError).
Decoder = Callable[[bytes, int, dict[SeriesKey, SeriesValue]], None]


class ClientMetricsManager:
    """Kafka's ClientMetricsManager: subscriptions, client instances, and the answers to
    GetTelemetrySubscriptions and PushTelemetry (plain dicts in the codec's field names)."""

    def __init__(
        self,
        *,
        telemetry_max_bytes: int = TELEMETRY_MAX_BYTES,
        cache_expiry_ms: int = DEFAULT_CACHE_EXPIRY_MS,
        new_id: Callable[[], uuid.UUID] = uuid.uuid4,
    ) -> None:
        self.telemetry_max_bytes = telemetry_max_bytes
        self.cache_expiry_ms = cache_expiry_ms
        self.new_id = new_id
        self.subscriptions: dict[str, Subscription] = {}
        self.subscription_version = 0
        self.instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()

    def update_subscriptions(self, name: str, configs: Mapping[str, str]) -> None:
        """updateSubscription: a pushed resource's complete configs (none: removed)."""
        if not configs:
            if self.subscriptions.pop(name, None) is not None:
                self.subscription_version += 1
            return
        self.subscriptions[name] = Subscription.from_configs(name, configs)
        self.subscription_version += 1

    def _create(self, instance_id: uuid.UUID, metadata: ClientMetadata) -> ClientInstance:
        interval = DEFAULT_INTERVAL_MS
        metrics: set[str] = set()
        everything = False
        for info in self.subscriptions.values():
            if metadata.matches(instance_id, info.match):
                everything = everything or ALL_METRICS in info.metrics
                metrics |= info.metrics
                interval = min(interval, info.interval_ms)
        chosen = frozenset([ALL_METRICS]) if everything else frozenset(metrics)
        return ClientInstance(
            instance_id,
            metadata,
            subscription_id(chosen, interval, instance_id),
            self.subscription_version,
            tuple(sorted(chosen)),
            interval,
        )

    def _instance(
        self, instance_id: uuid.UUID, metadata: ClientMetadata, now_ms: int
    ) -> ClientInstance:
        """clientInstance: from the cache, made anew when unknown or its subscriptions
        changed since (keeping its request times and series), its expiry pushed back."""
        self.expire(now_ms)
        instance = self.instances.get(instance_id)
        if instance is None:
            instance = self._create(instance_id, metadata)
        elif instance.subscription_version < self.subscription_version:
            renewed = self._create(instance_id, instance.metadata)
            renewed.series = instance.series
            renewed.last_series_push_ms = instance.last_series_push_ms
            instance = renewed
        self.instances[instance_id] = instance
        self.instances.move_to_end(instance_id)
        while len(self.instances) > CACHE_MAX_SIZE:
            self.instances.popitem(last=False)
        instance.expires_ms = now_ms + max(self.cache_expiry_ms, 3 * instance.push_interval_ms)
        return instance

    def expire(self, now_ms: int) -> None:
        for instance_id in [i for i, c in self.instances.items() if c.expires_ms <= now_ms]:
            del self.instances[instance_id]

    def get_subscriptions(
        self, instance_id: uuid.UUID | None, metadata: ClientMetadata, now_ms: int
    ) -> dict:
        """processGetTelemetrySubscriptionRequest."""
        if instance_id is None or instance_id.int == 0:
            instance_id = self.new_id()
            while instance_id in self.instances:
                instance_id = self.new_id()
        instance = self._instance(instance_id, metadata, now_ms)
        answer: dict = {
            "throttle_time": 0,
            "error_code": Error.NONE,
            "client_instance_id": uuid.UUID(int=0),
            "subscription_id": 0,
            "accepted_compression_types": (),
            "push_interval": 0,
            "telemetry_max_bytes": 0,
            "delta_temporality": False,
            "requested_metrics": (),
        }
        # Kafka's condition (lastKnownError != A || != B) is always true: any early Get.
        if not instance.may_get(now_ms):
            answer["error_code"] = Error.THROTTLING_QUOTA_EXCEEDED
            return answer
        instance.last_error = Error.NONE
        answer.update(
            client_instance_id=instance_id,
            subscription_id=instance.subscription_id,
            accepted_compression_types=ACCEPTED_COMPRESSION_TYPES,
            push_interval=instance.push_interval_ms,
            telemetry_max_bytes=self.telemetry_max_bytes,
            delta_temporality=True,
            requested_metrics=instance.metrics,
        )
        return answer

    def push(
        self,
        instance_id: uuid.UUID | None,
        subscription: int,
        terminating: bool,
        compression_type: int,
        payload: bytes,
        metadata: ClientMetadata,
        now_ms: int,
        decode: Decoder,
    ) -> tuple[Error, str | None]:
        """processPushTelemetryRequest: the error and its message (NONE, None when taken)."""
        if instance_id is None or instance_id.int in (0, 1):  # Uuid.RESERVED
            return Error.INVALID_REQUEST, (
                f"Invalid request from the client [{instance_id}], invalid client instance id"
            )
        instance = self._instance(instance_id, metadata, now_ms)
        error, message = self._refusal(
            instance, subscription, terminating, compression_type, payload, now_ms
        )
        instance.terminating = terminating
        if error is not Error.NONE:
            instance.last_error = error
            return error, message
        if payload:
            try:
                decode(payload, compression_type, instance.series)
            except ValueError as bad:
                instance.last_error = Error.INVALID_RECORD
                return Error.INVALID_RECORD, f"Unable to decode the pushed metrics: {bad}"
            instance.last_series_push_ms = now_ms
        instance.last_error = Error.NONE
        return Error.NONE, None

    def _refusal(
        self,
        instance: ClientInstance,
        subscription: int,
        terminating: bool,
        compression_type: int,
        payload: bytes,
        now_ms: int,
    ) -> tuple[Error, str | None]:
        """validatePushRequest, in Kafka's order."""
        who = instance.instance_id
        if instance.terminating:
            return Error.INVALID_REQUEST, (
                f"Client [{who}] sent the previous request with state terminating to TRUE, "
                "can not accept any requests after that"
            )
        if not instance.may_push(now_ms) and not terminating:
            return Error.THROTTLING_QUOTA_EXCEEDED, (
                f"Request from the client [{who}] arrived before the next push interval time"
            )
        if subscription != instance.subscription_id:
            return Error.UNKNOWN_SUBSCRIPTION_ID, (
                f"Unknown client subscription id for the client [{who}]"
            )
        if compression_type not in KNOWN_COMPRESSION_TYPES:
            return Error.UNSUPPORTED_COMPRESSION_TYPE, (
                f"Unknown compression type [{compression_type}] is received in telemetry "
                f"request from [{who}]"
            )
        if len(payload) > self.telemetry_max_bytes:
            return Error.TELEMETRY_TOO_LARGE, (
                f"Telemetry request from [{who}] is larger than the maximum allowed size "
                f"[{self.telemetry_max_bytes}]"
            )
        return Error.NONE, None

    def pushed(self, now_ms: int) -> list[ClientInstance]:
        """The instances whose series a scrape shows: pushed within 3 push intervals."""
        self.expire(now_ms)
        return [
            instance
            for instance in self.instances.values()
            if instance.series
            and instance.last_series_push_ms is not None
            and now_ms - instance.last_series_push_ms <= 3 * instance.push_interval_ms
        ]
