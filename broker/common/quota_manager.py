"""Client quotas on a broker, the pure core: which quota applies to a (user, client-id) pair,
the rate that pair has used, and how long to throttle it (Kafka's ``ClientQuotaManager`` with
its ``DefaultQuotaCallback``, ``Sensor``/``Rate``/``SampledStat`` and ``QuotaUtils``).

Nothing here reads a clock or sleeps: every call takes ``now_ms``; the trio shell (dispatch,
the connection's read loop) measures time and mutes the channel.

Entities are Kafka's: a quota entity is a set of (entity type, name) pairs of ``user``,
``client-id`` (together or alone) or ``ip`` (alone), a name of None being that type's default
(``<default>`` in ZooKeeper). A quota key (``producer_byte_rate``, ...) of an entity is
resolved for a connection's (user, client-id) with Kafka's precedence, the most specific
first:

1. /config/users/<user>/clients/<client-id>
2. /config/users/<user>/clients/<default>
3. /config/users/<user>
4. /config/users/<default>/clients/<client-id>
5. /config/users/<default>/clients/<default>
6. /config/users/<default>
7. /config/clients/<client-id>
8. /config/clients/<default>

The level that matched names the metric tags (user and client-id, "" where the level does not
use one), and all connections with the same tags share one rate: a user quota is the user's
across all its client ids, as in Kafka.

The rate is Kafka's ``Rate`` over ``quota.window.num`` samples of
``quota.window.size.seconds``: the sum of the samples still in the window divided by the time
since the oldest sample started, counted as at least ``num - 1`` whole windows (so a client's
first burst is measured against the whole window, not its first millisecond). A record that
takes the rate above the quota returns Kafka's throttle time, ``(rate - quota) / quota *
window`` (QuotaUtils.throttleTime), the delay after which the rate would be back at the quota
if nothing else came. Kafka leaves it unbounded; here it is bounded by the whole window
(``num * size``), so that one huge request cannot mute a connection for minutes.

The same manager measures ``request_percentage`` (the request handler time of a client as a
percentage of one thread, KIP-124; its throttle bounded by one sample window as in Kafka's
``ClientRequestQuotaManager``); ``controller_mutation_rate`` (KIP-599) is Kafka's token
bucket instead (``ControllerMutationQuotaManager`` below).
"""

from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# A quota entity: its (type, name) pairs sorted by type; a name of None is the default.
QuotaEntity = tuple[tuple[str, str | None], ...]

DEFAULT_WINDOW_NUM = 11
DEFAULT_WINDOW_SIZE_S = 1


def entity_key(pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The canonical form of an entity (its pairs sorted by entity type)."""
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


def principal_user(principal: str) -> str:
    """The user name a quota names: the principal without its ``User:`` type."""
    kind, separator, name = principal.partition(":")
    return name if separator and kind == "User" else principal


# A sample: [start_ms, value, last_event_ms] (lists, not objects: this runs on every Produce
# and Fetch of a client a quota applies to).
_START, _VALUE, _LAST = 0, 1, 2


class Rate:
    """Kafka's ``Rate`` over a ``SampledStat``: ``samples`` windows of ``window_ms``, and one
    more for the sample that overlaps the start of the measured window."""

    __slots__ = ("samples", "window_ms", "_samples", "_current")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[list] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        samples = self._samples
        if not samples:
            samples.append([now_ms, 0.0, now_ms])
        sample = samples[self._current]
        if now_ms - sample[_START] >= self.window_ms:
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(samples):
                samples.append([now_ms, 0.0, now_ms])
            else:
                samples[self._current][:] = [now_ms, 0.0, now_ms]
            sample = samples[self._current]
        sample[_VALUE] += value
        sample[_LAST] = now_ms

    def window_and_total(self, now_ms: int) -> tuple[int, float]:
        """The time the rate is measured over (Kafka's Rate.windowSize: obsolete samples
        purged first) and the total of the samples in it."""
        samples = self._samples
        if not samples:
            samples.append([now_ms, 0.0, now_ms])
        expire_ms = self.samples * self.window_ms
        oldest = now_ms
        total = 0.0
        for sample in samples:
            if now_ms - sample[_LAST] >= expire_ms:
                sample[:] = [now_ms, 0.0, now_ms]
            if sample[_START] < oldest:
                oldest = sample[_START]
            total += sample[_VALUE]
        elapsed = now_ms - oldest
        full_windows = elapsed // self.window_ms
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return max(elapsed, 1), total

    def window_size_ms(self, now_ms: int) -> int:
        return self.window_and_total(now_ms)[0]

    def measure(self, now_ms: int) -> float:
        """Units per second."""
        window_ms, total = self.window_and_total(now_ms)
        return total / (window_ms / 1000)


@dataclass
class QuotaSensor:
    """One quota entity's rate and the throttle times it was given (metrics)."""

    tags: tuple[str, str]  # (user, client-id) as Kafka's metric tags
    rate: "Rate"
    throttle_ms_total: float = 0.0
    throttle_count: int = 0
    last_record_ms: int = 0


class ClientQuotaManager:
    """One quota type (``producer_byte_rate`` or ``consumer_byte_rate``) on one broker: the
    quotas the controller pushed, and a rate per metric-tag pair (see the module docstring)."""

    # Kafka drops a sensor after an hour without records.
    INACTIVE_SENSOR_MS = 3_600_000

    def __init__(
        self,
        quota_key: str,
        window_num: int = DEFAULT_WINDOW_NUM,
        window_size_s: int = DEFAULT_WINDOW_SIZE_S,
        max_throttle_windows: int | None = None,
    ) -> None:
        self.quota_key = quota_key
        self.window_num = window_num
        self.window_ms = window_size_s * 1000
        # The byte-rate managers cap a throttle at the whole window (see the module); the
        # request manager at one sample window, as Kafka's ClientRequestQuotaManager does.
        self.max_throttle_ms = (max_throttle_windows or window_num) * self.window_ms
        # (user, client-id) entity -> quota; None names a default, "" an absent type.
        self._quotas: dict[tuple[str | None, str | None], float] = {}
        self._sensors: dict[tuple[str, str], QuotaSensor] = {}
        self._resolved: dict[tuple[str, str], tuple[tuple[str, str], float] | None] = {}

    @property
    def enabled(self) -> bool:
        return bool(self._quotas)

    def update(self, quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Take every entity's quotas (the controller's whole set); only this manager's key
        of user and client-id entities counts."""
        found = {}
        for entity, values in quotas.items():
            value = values.get(self.quota_key)
            names = dict(entity)
            if value is None or IP in names:
                continue
            found[(names.get(USER, ""), names.get(CLIENT_ID, ""))] = float(value)
        self._quotas = found
        self._resolved.clear()

    def resolve(self, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """The metric tags and quota that apply to a connection, with Kafka's precedence;
        None when no quota applies."""
        key = (user, client_id)
        if key in self._resolved:
            return self._resolved[key]
        quotas = self._quotas
        found = None
        for entity, tags in (
            ((user, client_id), (user, client_id)),
            ((user, None), (user, client_id)),
            ((user, ""), (user, "")),
            ((None, client_id), (user, client_id)),
            ((None, None), (user, client_id)),
            ((None, ""), (user, "")),
            (("", client_id), ("", client_id)),
            (("", None), ("", client_id)),
        ):
            if entity in quotas:
                found = (tags, quotas[entity])
                break
        if len(self._resolved) > 100_000:
            self._resolved.clear()
        self._resolved[key] = found
        return found

    def _sensor(self, tags: tuple[str, str]) -> QuotaSensor:
        sensor = self._sensors.get(tags)
        if sensor is None:
            sensor = QuotaSensor(tags, Rate(self.window_num, self.window_ms))
            self._sensors[tags] = sensor
        return sensor

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` (bytes, or handler time) for a connection; the throttle time in
        milliseconds (0 when the rate stays within the quota or no quota applies)."""
        resolved = self.resolve(user, client_id)
        if resolved is None:
            return 0
        tags, quota = resolved
        sensor = self._sensor(tags)
        sensor.rate.record(value, now_ms)
        sensor.last_record_ms = now_ms
        window_ms, total = sensor.rate.window_and_total(now_ms)
        observed = total / (window_ms / 1000)
        if observed <= quota:
            return 0
        throttle_ms = min(round((observed - quota) / quota * window_ms), self.max_throttle_ms)
        sensor.throttle_ms_total += throttle_ms
        sensor.throttle_count += 1
        return throttle_ms

    def sensors(self, now_ms: int) -> list[tuple[QuotaSensor, float, float | None]]:
        """Each live sensor with its current rate and quota (metrics); sensors idle for an
        hour are dropped, as Kafka expires them."""
        stale = [
            tags
            for tags, sensor in self._sensors.items()
            if now_ms - sensor.last_record_ms > self.INACTIVE_SENSOR_MS
        ]
        for tags in stale:
            del self._sensors[tags]
        result = []
        for tags, sensor in self._sensors.items():
            resolved = self.resolve(*tags)
            quota = resolved[1] if resolved is not None else None
            result.append((sensor, sensor.rate.measure(now_ms), quota))
        return result


# -- request_percentage (KIP-124) ----------------------------------------------------------

# Kafka's ClientRequestQuotaManager.NanosToPercentagePerSecond, for seconds: a request's
# handler time in seconds times this is what it adds to its client's rate, whose unit is then
# the percentage of one thread's time.
SECONDS_TO_PERCENTAGE = 100.0

# The seconds the request being handled spent parked: dispatch sets a fresh one-element list
# when a request_percentage quota applies to anyone; the places where a handler waits for
# something other than this thread (the purgatory of delayed fetches, acks=all produces and
# group joins; a request forwarded to the controller) add their wait to it, as Kafka parks
# such requests off its request handler threads; dispatch takes it off the request's time.
# Unset (None), nobody reads a clock for it.
PARKED: ContextVar[list[float] | None] = ContextVar("minibroker_parked", default=None)


# -- controller_mutation_rate (KIP-599) -------------------------------------------------------


class TokenBucket:
    """Kafka's ``TokenBucket`` measurable: a bucket of ``burst = samples x window x quota``
    tokens, refilled at ``quota`` tokens a second; recording takes tokens and may leave the
    bucket below zero (it is full at first)."""

    __slots__ = ("tokens", "last_ms")

    def __init__(self) -> None:
        self.tokens: float | None = None  # None: full
        self.last_ms = 0

    def measure(self, quota: float, burst: float, now_ms: int) -> float:
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * (now_ms - self.last_ms) / 1000)
        self.last_ms = now_ms
        return self.tokens

    def record(self, value: float, quota: float, burst: float, now_ms: int) -> float:
        self.tokens = min(burst, self.measure(quota, burst, now_ms) - value)
        return self.tokens


@dataclass
class MutationSensor(QuotaSensor):
    bucket: TokenBucket = field(default_factory=TokenBucket)


class ControllerMutationQuotaManager(ClientQuotaManager):
    """Kafka's ``ControllerMutationQuotaManager`` (KIP-599): the partitions a (user,
    client-id) creates or deletes (CreateTopics, CreatePartitions, DeleteTopics) count against
    its ``controller_mutation_rate``, a token bucket of ``quota.window.num x
    quota.window.size.seconds x rate`` partitions refilled at ``rate`` a second.

    Strict (the versions that know THROTTLING_QUOTA_EXCEEDED: CreateTopics v6+, DeleteTopics
    v5+, CreatePartitions v3+): each topic in turn is accepted while the bucket is not below
    zero, and then takes its partitions (so one topic can take it below zero: Kafka checks
    before it records); the rest are refused. Permissive (older versions): everything is
    accepted and recorded. Either way the throttle time is the time the bucket needs to be back
    at zero, ``-tokens / rate`` (ControllerMutationQuotaManager.throttleTimeMs), unbounded as
    in Kafka. Kafka reads the quota window from ``controller.quota.window.num`` and
    ``controller.quota.window.size.seconds`` (default 11 and 1, as the client quotas'); here
    from ``quota.window.num`` and ``quota.window.size.seconds``."""

    def __init__(
        self, window_num: int = DEFAULT_WINDOW_NUM, window_size_s: int = DEFAULT_WINDOW_SIZE_S
    ) -> None:
        super().__init__(CONTROLLER_MUTATION_RATE, window_num, window_size_s)

    def _sensor(self, tags: tuple[str, str]) -> QuotaSensor:
        sensor = self._sensors.get(tags)
        if sensor is None:
            sensor = MutationSensor(tags, Rate(self.window_num, self.window_ms))
            self._sensors[tags] = sensor
        return sensor

    def burst(self, quota: float) -> float:
        return self.window_num * self.window_ms / 1000 * quota

    def admit(
        self, user: str, client_id: str, permits: Sequence[float], strict: bool, now_ms: int
    ) -> tuple[list[bool], int]:
        """Which of the topics (their ``permits``: partitions created or deleted, in request
        order) may go ahead, and the throttle time in milliseconds."""
        resolved = self.resolve(user, client_id)
        if resolved is None:
            return [True] * len(permits), 0
        tags, quota = resolved
        sensor = self._sensor(tags)
        assert isinstance(sensor, MutationSensor)
        bucket = sensor.bucket
        burst = self.burst(quota)
        accepted = []
        for value in permits:
            if strict and bucket.measure(quota, burst, now_ms) < 0:
                accepted.append(False)
                continue
            accepted.append(True)
            bucket.record(value, quota, burst, now_ms)
            sensor.rate.record(value, now_ms)
        sensor.last_record_ms = now_ms
        tokens = bucket.measure(quota, burst, now_ms)
        if tokens >= 0:
            return accepted, 0
        throttle_ms = round(-tokens / quota * 1000)
        sensor.throttle_ms_total += throttle_ms
        sensor.throttle_count += 1
        return accepted, throttle_ms

    def refund(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Give back what a topic took that was then not created or deleted (Kafka records a
        topic's partitions only once the controller goes on with it)."""
        resolved = self.resolve(user, client_id)
        if resolved is None or value <= 0:
            return
        tags, quota = resolved
        sensor = self._sensor(tags)
        assert isinstance(sensor, MutationSensor)
        sensor.bucket.record(-value, quota, self.burst(quota), now_ms)
        sensor.rate.record(-value, now_ms)

    def tokens(self, sensor: QuotaSensor, quota: float, now_ms: int) -> float:
        assert isinstance(sensor, MutationSensor)
        return sensor.bucket.measure(quota, self.burst(quota), now_ms)


@dataclass
class BrokerQuotas:
    """The quota managers of one broker (Kafka's ``QuotaManagers``): produce bytes in, fetch
    bytes out, request handler time and controller mutations. ``quotas`` is the controller's
    whole set, as pushed; each manager's ``enabled`` is whether a quota of its kind applies to
    anyone, so that a broker without quotas does no work per request."""

    produce: ClientQuotaManager
    fetch: ClientQuotaManager
    request: ClientQuotaManager
    mutation: ControllerMutationQuotaManager
    quotas: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)
    # Bumped at each change, so that readers of ``quotas`` elsewhere (the connection rates of
    # IP entities, node/connection_limits.py) know when to read them again.
    version: int = 0

    @property
    def enabled(self) -> bool:
        return self.produce.enabled or self.fetch.enabled

    @classmethod
    def create(
        cls, window_num: int = DEFAULT_WINDOW_NUM, window_size_s: int = DEFAULT_WINDOW_SIZE_S
    ) -> "BrokerQuotas":
        return cls(
            ClientQuotaManager(PRODUCER_BYTE_RATE, window_num, window_size_s),
            ClientQuotaManager(CONSUMER_BYTE_RATE, window_num, window_size_s),
            ClientQuotaManager(
                REQUEST_PERCENTAGE, window_num, window_size_s, max_throttle_windows=1
            ),
            ControllerMutationQuotaManager(window_num, window_size_s),
        )

    def replace(self, quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        self.quotas = {entity: dict(values) for entity, values in quotas.items() if values}
        self._refresh()

    def alter(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        """Set one entity's whole quota set (empty: it has none left)."""
        if values:
            self.quotas[entity] = dict(values)
        else:
            self.quotas.pop(entity, None)
        self._refresh()

    def _refresh(self) -> None:
        self.version += 1
        for manager in (self.produce, self.fetch, self.request, self.mutation):
            manager.update(self.quotas)
