"""The rules that protect the broker from its connections, pure (time passed in, no sockets):
how many connections it accepts (Kafka's ConnectionQuotas), which connections have been idle
too long (the LRU of Kafka's Selector.IdleExpiryManager), and how many bytes of requests it
holds at once (Kafka's MemoryPool for ``queued.max.request.bytes``).

The server (node/server.py) asks these at accept, at close, once per received chunk and once
per request; the waiting (for a connection slot, for room in the pool) is its own.
"""

from collections import OrderedDict
from collections.abc import Hashable, Iterator, Mapping

from minibroker.common.quota_manager import IP, QuotaEntity, Rate

UNBOUNDED = 2**31 - 1  # Kafka's Integer.MAX_VALUE defaults of the max.connections family
CONNECTION_CREATION_RATE = "connection_creation_rate"
# Kafka expires an idle IP's connection rate sensor after an hour (ConnectionQuotaEntity).
IP_RATE_EXPIRY_MS = 3_600_000


class ConnectionQuotas:
    """Connection counts per address and in total, and the limits on them.

    ``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``, by address) refuses
    a connection once its address has that many: Kafka closes it right after accepting it.
    ``max.connections`` is not a refusal: while the broker has that many, the listeners stop
    accepting (new clients wait in the kernel's backlog) until one closes. The inter-node
    listeners (the inter-broker one, and the controller's on a combined node) are exempt when
    the node has other listeners too (Kafka's "protected listener"): brokers and the
    controller always get in, and the least recently active connection of another listener
    is closed to make room (``over_limit``).
    """

    def __init__(
        self,
        max_connections: int = UNBOUNDED,
        max_per_ip: int = UNBOUNDED,
        overrides: dict[str, int] | None = None,
        protected_listeners: frozenset[str] = frozenset(),
    ) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = dict(overrides or {})
        self.protected_listeners = protected_listeners
        self.per_address: dict[str, int] = {}
        self.per_listener: dict[str, int] = {}
        self.total = 0

    def limit_for(self, address: str) -> int:
        return self.overrides.get(address, self.max_per_ip)

    def is_protected(self, listener: str) -> bool:
        return listener in self.protected_listeners

    def slot_available(self, listener: str) -> bool:
        """Whether a listener may accept a connection now (else it waits for a close)."""
        return self.is_protected(listener) or self.total < self.max_connections

    def admit(self, listener: str, address: str) -> int | None:
        """Count a connection just accepted; None when admitted, else the per-address limit
        it is over (the connection is then not counted and must be closed)."""
        count = self.per_address.get(address, 0)
        limit = self.limit_for(address)
        if count >= limit:
            return limit
        self.per_address[address] = count + 1
        self.per_listener[listener] = self.per_listener.get(listener, 0) + 1
        self.total += 1
        return None

    def release(self, listener: str, address: str) -> None:
        """Forget a closed connection that ``admit`` counted."""
        count = self.per_address[address]
        if count <= 1:
            del self.per_address[address]
        else:
            self.per_address[address] = count - 1
        self.per_listener[listener] -= 1
        self.total -= 1

    def over_limit(self) -> bool:
        """More connections than max.connections: only the protected listener gets there,
        and a connection of another listener is then closed."""
        return self.total > self.max_connections


class CreationRates:
    """How fast connections are created: broker-wide (``max.connection.creation.rate``) and
    per address (the ``connection_creation_rate`` client quotas of IP entities), each Kafka's
    ``Rate`` over ``quota.window.num`` samples of ``quota.window.size.seconds``, and the
    throttle time a connection that takes a rate above its limit gets (Kafka's QuotaUtils,
    bounded by one window, as ConnectionQuotas bounds it).

    The two are used differently, as in Kafka: the broker-wide rate delays the acceptor (no
    connection is accepted meanwhile; the inter-node listeners are exempt), while an address
    over its own rate has its connection closed after the throttle time, and that connection
    is not counted in any rate.
    """

    def __init__(
        self,
        max_creation_rate: int = UNBOUNDED,
        window_num: int = 11,
        window_size_s: int = 1,
    ) -> None:
        self.max_creation_rate = max_creation_rate
        self.window_num = window_num
        self.window_ms = window_size_s * 1000
        self.broker_rate = (
            Rate(window_num, self.window_ms) if max_creation_rate < UNBOUNDED else None
        )
        # The IP quotas: an address, or None for the default of every address.
        self.ip_quotas: dict[str | None, float] = {}
        self._ip_rates: dict[str, tuple[Rate, list[int]]] = {}
        self._next_expiry_ms = 0

    def _throttle_ms(self, rate: Rate, limit: float, now_ms: int) -> int:
        window_ms, total = rate.window_and_total(now_ms)
        observed = total / (window_ms / 1000)
        if observed <= limit:
            return 0
        if limit <= 0:
            return self.window_ms
        return min(round((observed - limit) / limit * window_ms), self.window_ms)

    def broker_throttle_ms(self, now_ms: int) -> int:
        """Record a connection accepted on a listener that is not exempt; how long the
        acceptor is to wait before it goes on (0: at once)."""
        rate = self.broker_rate
        if rate is None:
            return 0
        rate.record(1.0, now_ms)
        return self._throttle_ms(rate, self.max_creation_rate, now_ms)

    def unrecord_broker(self, now_ms: int) -> None:
        """Take back a connection the broker-wide rate counted and that its address's quota
        refused (Kafka's updateListenerMetrics)."""
        if self.broker_rate is not None:
            self.broker_rate.record(-1.0, now_ms)

    def update_ip_quotas(self, quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Take the connection_creation_rate of every IP entity (the controller's whole set
        of client quotas); a rate whose quota went away is dropped."""
        found: dict[str | None, float] = {}
        for entity, values in quotas.items():
            names = dict(entity)
            value = values.get(CONNECTION_CREATION_RATE)
            if value is not None and IP in names and len(names) == 1:
                found[names[IP]] = float(value)
        self.ip_quotas = found
        if None not in found:
            for address in [a for a in self._ip_rates if a not in found]:
                del self._ip_rates[address]

    def ip_throttle_ms(self, address: str, now_ms: int) -> int:
        """Record a connection from ``address``; when it takes the address above its quota,
        the connection is not counted and is to be closed after the returned time."""
        quotas = self.ip_quotas
        if not quotas:
            return 0
        if now_ms >= self._next_expiry_ms:
            self.expire(now_ms)
            self._next_expiry_ms = now_ms + 60_000
        limit = quotas.get(address, quotas.get(None))
        if limit is None:
            return 0
        entry = self._ip_rates.get(address)
        if entry is None:
            entry = (Rate(self.window_num, self.window_ms), [now_ms])
            self._ip_rates[address] = entry
        rate, last = entry
        last[0] = now_ms
        rate.record(1.0, now_ms)
        throttle_ms = self._throttle_ms(rate, limit, now_ms)
        if throttle_ms:
            rate.record(-1.0, now_ms)  # Kafka un-records a refused connection
        return throttle_ms

    def expire(self, now_ms: int) -> None:
        """Forget the rates of addresses that made no connection for an hour."""
        stale = [
            address
            for address, (_rate, last) in self._ip_rates.items()
            if now_ms - last[0] > IP_RATE_EXPIRY_MS
        ]
        for address in stale:
            del self._ip_rates[address]


class IdleConnections:
    """Connections that may expire, least recently active first (Kafka's IdleExpiryManager).

    A connection is in here while it has no request in flight: ``remove`` takes it out when a
    request has arrived, ``touch`` puts it back (or moves it to the end) with the time of its
    latest activity, a received chunk or a response sent. Each operation is O(1); finding the
    expired ones costs only what expired.
    """

    def __init__(self, max_idle: float) -> None:
        self.max_idle = max_idle
        self._last_active: OrderedDict[Hashable, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._last_active)

    def touch(self, key: Hashable, now: float) -> None:
        self._last_active[key] = now
        self._last_active.move_to_end(key)

    def remove(self, key: Hashable) -> None:
        """Take a connection out: a request has arrived on it (``touch`` puts it back once
        answered), or it has closed."""
        self._last_active.pop(key, None)

    def next_deadline(self) -> float | None:
        """When the least recently active connection expires; None when there is none."""
        for last_active in self._last_active.values():
            return last_active + self.max_idle
        return None

    def expired(self, now: float) -> list[Hashable]:
        """The connections idle for longer than max_idle at ``now``, removed from here."""
        found = []
        while self._last_active:
            key, last_active = next(iter(self._last_active.items()))
            if now - last_active <= self.max_idle:
                break
            del self._last_active[key]
            found.append(key)
        return found

    def least_recent(self) -> Iterator[Hashable]:
        """The idle connections, least recently active first."""
        return iter(list(self._last_active))


class MemoryPool:
    """The bytes of requests the broker holds, bounded (``queued.max.request.bytes``).

    A request's declared size is taken when its size prefix has arrived, before its body is
    read, and given back once it has been answered. Unlike Kafka's pool, which lends to any
    request while any byte is left (so it may overshoot by one request), a request is read
    only when its whole size fits, so the bound holds exactly; a request that does not fit
    waits while smaller ones that fit go ahead. A size above the pool is never asked for:
    the configuration keeps queued.max.request.bytes at least socket.request.max.bytes.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.used = 0

    @property
    def available(self) -> int:
        return self.size - self.used

    def try_allocate(self, count: int) -> bool:
        if count > self.size - self.used:
            return False
        self.used += count
        return True

    def release(self, count: int) -> None:
        self.used -= count
