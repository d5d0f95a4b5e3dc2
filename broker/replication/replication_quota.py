"""Replication throttles (KIP-73), the pure core: Kafka's ``ReplicationQuotaManager``.

A broker has two of them, one per side of replication:

- the **leader** quota, ``leader.replication.throttled.rate`` (bytes/s), over the partitions
  this broker is named for in each topic's ``leader.replication.throttled.replicas``;
- the **follower** quota, ``follower.replication.throttled.rate``, over the partitions this
  broker is named for in ``follower.replication.throttled.replicas``.

Rules, as Kafka's:

- The rate is a broker dynamic config (kafka-configs --entity-type brokers, or
  kafka-reassign-partitions --throttle): this broker's own value, else the cluster default's
  (the resource ""), else unbounded (Kafka's Long.MAX_VALUE: nothing is throttled). A value
  must be a LONG of at least 0 (QuotaConfig's ConfigDef); anything else is refused as Kafka
  4.4 refuses it (measured): INVALID_REQUEST, "Invalid value fast for configuration
  leader.replication.throttled.rate: Not a number of type LONG" (KAFKA-13609). A malformed
  replica list is INVALID_CONFIG (storage/log.py's topic config check).
- A replica list is empty, the wildcard ``*`` (every partition of the topic, on every broker
  the list concerns), or ``partitionId:brokerId`` pairs; a broker keeps the partitions of the
  pairs that name it (Kafka's ``TopicConfigHandler.parseThrottledPartitions``).
- The rate is Kafka's ``Rate`` over ``replication.quota.window.num`` samples of
  ``replication.quota.window.size.seconds`` (``common.quota_manager.Rate``, the client quotas'
  own): the bytes of every throttled partition are recorded, in-sync ones too ("traffic from
  both in-sync and out of sync replicas are accounted for", ReplicaFetcherThread), and the
  quota is exceeded while the measured rate is above the bound (Sensor.checkQuotas).
- ``should_throttle``: a replica is held back only when it is NOT in sync, its partition is
  throttled here and the quota is exceeded (ReplicaManager.shouldLeaderThrottle and
  ReplicaFetcherThread.shouldFollowerThrottle): in-sync replication is never throttled. The
  follower then leaves the partition out of its next fetch; the leader answers it with no
  records (and does not count it towards the fetch's min_bytes).

The third quota, ``replica.alter.log.dirs.io.max.bytes.per.second``, bounds the copy of a
replica moving between this broker's log dirs (replication/log_dir_mover.py), as Kafka's
ReplicaAlterLogDirsThread: every future replica is throttled (it is never in sync until it
swaps in), every copied byte is recorded, and no copy step runs while the quota is exceeded.
Its rate is also a static broker property (the dynamic values win).

Departures: ``throttled_count`` (how often a replica was
held back) is minibroker's, for its metrics; Kafka has no such count.
"""

from collections.abc import Mapping

from minibroker.common.config_model import REPLICATION_THROTTLE_RATES, validate_throttle_rate
from minibroker.common.quota_manager import Rate

LEADER_RATE, FOLLOWER_RATE, ALTER_LOG_DIRS_RATE = REPLICATION_THROTTLE_RATES
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
# QuotaConfig.QUOTA_BYTES_PER_SECOND_DEFAULT: unbounded.
UNBOUNDED = 2**63 - 1
DEFAULT_WINDOW_NUM = 11
DEFAULT_WINDOW_SIZE_S = 1

# Every partition of a topic (the wildcard).
ALL: frozenset[int] = frozenset({-1})


def rate_of(
    name: str, broker: Mapping[str, str], cluster: Mapping[str, str], static: int | None = None
) -> int:
    """The rate a broker applies: its own dynamic value, else the cluster default's, else
    its static property (``static``, only the alter-log-dirs rate has one here), else
    unbounded. A stored value that does not parse (written before it was validated) counts
    as unset."""
    for layer in (broker, cluster):
        text = layer.get(name)
        if text is not None:
            try:
                return validate_throttle_rate(name, text)
            except ValueError:
                continue
    return UNBOUNDED if static is None else static


def throttled_partitions(text: str, broker_id: int) -> frozenset[int]:
    """The partitions a replica list throttles on ``broker_id``: ALL for the wildcard."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if items == ["*"]:
        return ALL
    partitions = set()
    for item in items:
        partition, _, broker = item.partition(":")
        if partition.isdigit() and broker.isdigit() and int(broker) == broker_id:
            partitions.add(int(partition))
    return frozenset(partitions)


class ReplicationQuotaManager:
    """One side's quota on one broker (see the module docstring): the bound, the measured
    rate, and which partitions it applies to (parsed from the topic's replica list, cached by
    its text)."""

    def __init__(
        self,
        kind: str,
        broker_id: int,
        window_num: int = DEFAULT_WINDOW_NUM,
        window_size_s: int = DEFAULT_WINDOW_SIZE_S,
    ) -> None:
        self.kind = kind  # "LeaderReplication" or "FollowerReplication", Kafka's metric group
        self.broker_id = broker_id
        self.bound: int = UNBOUNDED
        self.rate = Rate(window_num, window_size_s * 1000)
        self.throttled_count = 0  # times a replica was held back (for the logs and metrics)
        self._parsed: dict[str, frozenset[int]] = {}

    @property
    def bounded(self) -> bool:
        return self.bound < UNBOUNDED

    def update_quota(self, bound: int) -> None:
        self.bound = bound

    def is_throttled(self, partition: int, replica_list: str) -> bool:
        """Whether ``partition`` of a topic whose replica list is ``replica_list`` is
        throttled on this broker."""
        if not replica_list:
            return False
        partitions = self._parsed.get(replica_list)
        if partitions is None:
            if len(self._parsed) > 10_000:
                self._parsed.clear()
            partitions = self._parsed[replica_list] = throttled_partitions(
                replica_list, self.broker_id
            )
        return partitions is ALL or partition in partitions

    def record(self, size: int, now_ms: int) -> None:
        self.rate.record(size, now_ms)

    def measure(self, now_ms: int) -> float:
        """Bytes per second, as Kafka's ``byte-rate`` metric of this quota."""
        return self.rate.measure(now_ms)

    def is_quota_exceeded(self, now_ms: int) -> bool:
        return self.bounded and self.rate.measure(now_ms) > self.bound

    def should_throttle(
        self, in_sync: bool, partition: int, replica_list: str, now_ms: int
    ) -> bool:
        """Whether a replica of ``partition`` is held back now: not in sync, throttled here,
        and over the quota."""
        if in_sync or not self.bounded or not self.is_throttled(partition, replica_list):
            return False
        if self.is_quota_exceeded(now_ms):
            self.throttled_count += 1
            return True
        return False
