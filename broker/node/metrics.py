"""The broker's live state as Prometheus gauges, read at scrape time, and the /metrics
endpoint.

Everything that is a current state (partition counts, under-replicated partitions, log sizes,
purgatory sizes, fetcher lag, the controller's view, the groups) is read from the live objects
at scrape time by a collector, so there is nothing to keep in sync and no stale series after a
partition goes away. The counters that are bumped where things happen live in
common/metrics.py, which every layer may import; this collector reads the layers themselves,
so it belongs to the node that wires them.

The /metrics endpoint is served from the trio loop itself (a few milliseconds of work per
scrape), so the collector reads the broker's state without threads or locks; a slow or broken
scraper only holds its own connection.
"""

import itertools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import trio
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from minibroker.common import otlp_metrics
from minibroker.common.metrics import (
    HTTP_READ_TIMEOUT_S,
    MAX_HTTP_REQUEST_BYTES,
    MAX_PARTITION_SERIES,
    BrokerMetrics,
)
from minibroker.common.quota_manager import BrokerQuotas
from minibroker.controller.service import ControllerService
from minibroker.coordinator.group.consumer_group import ConsumerGroup, ConsumerGroupState
from minibroker.coordinator.group.service import GroupCoordinator
from minibroker.coordinator.group.state import GroupState
from minibroker.coordinator.group.streams_entry import StreamsGroupEntry
from minibroker.coordinator.group.streams_group import StreamsGroupState
from minibroker.coordinator.transaction.service import TransactionCoordinator
from minibroker.coordinator.transaction.state import TxnState
from minibroker.node.connection_limits import ConnectionQuotas, MemoryPool
from minibroker.replication.replica_manager import ReplicaManager, monotonic_ms

log = logging.getLogger("metrics")


class StateCollector:
    """Gauges read from the broker's live state at scrape time."""

    def __init__(
        self,
        replicas: ReplicaManager | None,
        controller: Callable[[], ControllerService | None],
        coordinator: GroupCoordinator | None = None,
        transactions: TransactionCoordinator | None = None,
    ) -> None:
        """``controller`` is asked at each scrape: in ZooKeeper mode this node is the
        controller only while it holds the election."""
        self.replicas = replicas
        self.controller = controller
        self.coordinator = coordinator
        self.transactions = transactions

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        if self.replicas is not None:
            yield from _broker_gauges(self.replicas)
        if (controller := self.controller()) is not None:
            yield from _controller_gauges(controller)
        if self.coordinator is not None:
            yield from _coordinator_metrics(self.coordinator)
        if self.transactions is not None:
            yield from _transaction_metrics(self.transactions)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _broker_gauges(
    replicas: ReplicaManager,
) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    partitions = replicas.partitions()
    leaders = [p for p in partitions if p.is_leader]
    yield _gauge(
        "kafka_server_replicamanager_partitioncount", "Partitions hosted here.", len(partitions)
    )
    yield _gauge(
        "kafka_server_replicamanager_leadercount", "Partitions led by this broker.", len(leaders)
    )
    yield _gauge(
        "kafka_server_replicamanager_underreplicatedpartitions",
        "Partitions led here whose ISR is smaller than their replica set.",
        sum(1 for p in leaders if len(p.isr) < len(p.replicas)),
    )
    offline = sum(
        1
        for topic in replicas.metadata.topics.values()
        for state in topic.partitions.values()
        if state.leader < 0
    )
    yield _gauge(
        "kafka_server_replicamanager_offlinepartitions",
        "Partitions without a leader in this broker's latest metadata.",
        offline,
    )
    lags = [p.fetch_lag for p in partitions if not p.is_leader and p.fetch_lag is not None]
    yield _gauge(
        "kafka_server_replicafetchermanager_maxlag",
        "Largest lag (leader's high watermark minus log end) over follower partitions.",
        max(lags, default=0),
    )
    purgatory = GaugeMetricFamily(
        "kafka_server_delayedoperationpurgatory_purgatorysize",
        "Requests parked waiting on the log (DelayedProduce, DelayedFetch).",
        labels=["delayedoperation"],
    )
    for kind, count in sorted(replicas.watchers.parked_by_kind().items()):
        purgatory.add_metric([kind], count)
    yield purgatory
    # Kafka's FetchSessionCache metrics (KIP-227).
    sessions = replicas.fetch_sessions.cache
    yield _gauge(
        "kafka_server_fetchsessioncache_numincrementalfetchsessions",
        "Incremental fetch sessions cached (NumIncrementalFetchSessions).",
        len(sessions),
    )
    yield _gauge(
        "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
        "Partitions of the cached fetch sessions (NumIncrementalFetchPartitionsCached).",
        sessions.total_partitions,
    )
    yield CounterMetricFamily(
        "kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
        "Fetch sessions evicted to make room for new ones"
        " (IncrementalFetchSessionEvictionsPerSec).",
        value=sessions.evictions,
    )
    # Replication throttles (KIP-73): Kafka's LeaderReplication and FollowerReplication
    # byte-rate (every throttled partition's bytes) and the bound in force.
    now_ms = replicas.elapsed_ms()
    for quota in (replicas.leader_quota, replicas.follower_quota):
        kind = quota.kind.lower()
        yield _gauge(
            f"kafka_server_{kind}_byte_rate",
            f"Bytes/s of throttled partitions' replication traffic ({quota.kind} byte-rate).",
            quota.measure(now_ms),
        )
        yield _gauge(
            f"kafka_server_{kind}_throttled_rate",
            "The replication throttle in force, bytes/s (-1: unbounded).",
            quota.bound if quota.bounded else -1,
        )
        yield CounterMetricFamily(
            f"minibroker_{kind}_throttled",
            "Times a replica was held back by this replication throttle (not a Kafka metric).",
            value=quota.throttled_count,
        )
    families = {
        "size": GaugeMetricFamily(
            "kafka_log_log_size", "Bytes of the partition's log.", labels=["topic", "partition"]
        ),
        "segments": GaugeMetricFamily(
            "kafka_log_log_numlogsegments", "Segments of the log.", labels=["topic", "partition"]
        ),
        "end": GaugeMetricFamily(
            "kafka_log_log_logendoffset", "Log end offset.", labels=["topic", "partition"]
        ),
        "start": GaugeMetricFamily(
            "kafka_log_log_logstartoffset", "Log start offset.", labels=["topic", "partition"]
        ),
        "hw": GaugeMetricFamily(
            "kafka_cluster_partition_highwatermark",
            "High watermark of the replica.",
            labels=["topic", "partition"],
        ),
        "lso_lag": GaugeMetricFamily(
            "kafka_cluster_partition_laststableoffsetlag",
            "High watermark minus last stable offset: how far open transactions hold "
            "read_committed consumers back (Kafka's Partition LastStableOffsetLag; leaders only).",
            labels=["topic", "partition"],
        ),
    }
    for partition in partitions[:MAX_PARTITION_SERIES]:
        labels = [partition.topic, str(partition.index)]
        families["size"].add_metric(labels, partition.log.size_bytes)
        families["segments"].add_metric(labels, partition.log.segment_count)
        families["end"].add_metric(labels, partition.log.log_end_offset)
        families["start"].add_metric(labels, partition.log.log_start_offset)
        families["hw"].add_metric(labels, partition.high_watermark)
        if partition.is_leader:
            lag = partition.high_watermark - partition.last_stable_offset
            families["lso_lag"].add_metric(labels, lag)
    yield from families.values()


def _controller_gauges(controller: ControllerService) -> Iterator[GaugeMetricFamily]:
    state = controller.state
    yield _gauge(
        "kafka_controller_kafkacontroller_activecontrollercount",
        "1 on the active controller.",
        1,
    )
    yield _gauge(
        "kafka_controller_kafkacontroller_activebrokercount",
        "Registered, unfenced brokers.",
        len(state.live_brokers()),
    )
    yield _gauge(
        "kafka_controller_kafkacontroller_fencedbrokercount",
        "Registered brokers fenced for missing their session.",
        sum(1 for broker in state.brokers.values() if broker.fenced),
    )
    yield _gauge(
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "Partitions without a leader.",
        sum(1 for t in state.topics.values() for p in t.partitions if p.leader < 0),
    )
    yield _gauge("kafka_controller_kafkacontroller_globaltopiccount", "Topics.", len(state.topics))
    yield _gauge(
        "kafka_controller_kafkacontroller_globalpartitioncount",
        "Partitions of all topics.",
        sum(len(t.partitions) for t in state.topics.values()),
    )


def _coordinator_metrics(
    coordinator: GroupCoordinator,
) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """The groups this broker coordinates (those of the `__consumer_offsets` partitions it
    leads), and their consumer lag on the partitions it hosts a replica of."""
    groups = list(coordinator.groups.values())
    by_state = GaugeMetricFamily(
        "kafka_coordinator_group_groupmetadatamanager_numgroups",
        "Groups coordinated here, by state (NumGroups, NumGroupsStable, ...).",
        labels=["state"],
    )
    for state in GroupState:
        by_state.add_metric([state.value], sum(1 for group in groups if group.state == state))
    yield by_state
    yield _gauge(
        "kafka_coordinator_group_groupmetadatamanager_numoffsets",
        "Committed offsets held for the groups coordinated here (NumOffsets).",
        sum(len(group.offsets) for group in groups),
    )
    yield _gauge(
        "kafka_coordinator_group_groupmetadatamanager_nummembers",
        "Members of the groups coordinated here.",
        sum(len(group.members) for group in groups),
    )
    rebalances = CounterMetricFamily(
        "kafka_server_group_coordinator_metrics_group_completed_rebalance",
        "Join phases completed (each starts a new generation) by the groups coordinated here.",
    )
    rebalances.add_metric([], coordinator.rebalances)
    yield rebalances
    # The consumer protocol's groups (KIP-848), as Kafka's group-coordinator-metrics count them.
    consumer_groups = GaugeMetricFamily(
        "kafka_server_group_coordinator_metrics_consumer_group_count",
        "Consumer-protocol groups (KIP-848) coordinated here, by state (consumer-group-count).",
        labels=["state"],
    )
    modern = [group for group in groups if isinstance(group, ConsumerGroup)]
    for consumer_state in ConsumerGroupState:
        if consumer_state != ConsumerGroupState.DEAD:
            consumer_groups.add_metric(
                [consumer_state.value.lower()],
                sum(1 for group in modern if group.consumer_state == consumer_state),
            )
    yield consumer_groups
    consumer_rebalances = CounterMetricFamily(
        "kafka_server_group_coordinator_metrics_consumer_group_rebalance",
        "Group epoch bumps of the consumer-protocol groups coordinated here "
        "(consumer-group-rebalance-count).",
    )
    consumer_rebalances.add_metric([], coordinator.consumer_rebalances)
    yield consumer_rebalances
    # The streams groups (KIP-1071), as Kafka 4.4's GroupCoordinatorMetrics counts them
    # (streams-group-count, its state tag the state's name as StreamsGroupState.toString gives
    # it: Empty, NotReady, Assigning, Reconciling, Stable, Dead; streams-group-rebalance-count:
    # group epoch bumps).
    streams_groups = GaugeMetricFamily(
        "kafka_server_group_coordinator_metrics_streams_group_count",
        "Streams groups (KIP-1071) coordinated here, by state (streams-group-count).",
        labels=["state"],
    )
    streams = [group for group in groups if isinstance(group, StreamsGroupEntry)]
    for streams_state in StreamsGroupState:
        streams_groups.add_metric(
            [streams_state.value],
            sum(1 for group in streams if group.state.value == streams_state.value),
        )
    yield streams_groups
    streams_rebalances = CounterMetricFamily(
        "kafka_server_group_coordinator_metrics_streams_group_rebalance",
        "Group epoch bumps of the streams groups coordinated here (streams-group-rebalance-count).",
    )
    streams_rebalances.add_metric([], coordinator.streams_rebalances)
    yield streams_rebalances
    commits = CounterMetricFamily(
        "kafka_server_group_coordinator_metrics_offset_commit",
        "Partition offsets committed through this coordinator (acknowledged by the ISR).",
    )
    commits.add_metric([], coordinator.offset_commits)
    yield commits

    # kafka_exporter's per-group series, within the same cap as the per-partition ones.
    members = GaugeMetricFamily(
        "kafka_consumergroup_members", "Members of the group.", labels=["consumergroup"]
    )
    for group in sorted(groups, key=lambda g: g.group_id)[:MAX_PARTITION_SERIES]:
        members.add_metric([group.group_id], len(group.members))
    yield members
    labels = ["consumergroup", "topic", "partition"]
    current = GaugeMetricFamily(
        "kafka_consumergroup_current_offset",
        "Committed offset of the group on a partition hosted here.",
        labels=labels,
    )
    lag = GaugeMetricFamily(
        "kafka_consumergroup_lag",
        "High watermark minus the group's committed offset, on a partition hosted here.",
        labels=labels,
    )
    hosted = {(p.topic, p.index): p for p in coordinator.replicas.partitions()}
    committed_here = (
        (group.group_id, key, committed, hosted[key])
        for group in sorted(groups, key=lambda g: g.group_id)
        for key, committed in sorted(group.offsets.items())
        if key in hosted
    )
    for group_id, (topic, index), committed, partition in itertools.islice(
        committed_here, MAX_PARTITION_SERIES
    ):
        names = [group_id, topic, str(index)]
        current.add_metric(names, committed.offset)
        lag.add_metric(names, partition.high_watermark - committed.offset)
    yield current
    yield lag


def _transaction_metrics(
    coordinator: TransactionCoordinator,
) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """The transactional ids this broker coordinates (those of the `__transaction_state`
    partitions it leads). Kafka has no such gauge (its coordinator reports load times); these
    are minibroker's, named after it."""
    metas = list(coordinator.transactions.values())
    yield _gauge(
        "minibroker_transaction_coordinator_ongoing_transactions",
        "Transactions begun and not yet completed (Ongoing, PrepareCommit, PrepareAbort) "
        "coordinated here.",
        coordinator.ongoing_count(),
    )
    by_state = GaugeMetricFamily(
        "minibroker_transaction_coordinator_transactional_ids",
        "Transactional ids coordinated here, by state.",
        labels=["state"],
    )
    for state in TxnState:
        by_state.add_metric([state.kafka_name], sum(1 for m in metas if m.state == state))
    yield by_state
    for outcome, count in (
        ("commit", coordinator.transactions_committed),
        ("abort", coordinator.transactions_aborted),
    ):
        completed = CounterMetricFamily(
            f"minibroker_transaction_coordinator_completed_{outcome}",
            f"Transactions completed with {outcome.upper()} markers by this coordinator.",
        )
        completed.add_metric([], count)
        yield completed


# A scrape renders for at most this long before it lets the event loop serve (issue 40).
RENDER_SLICE_S = 0.001


async def serve_metrics(metrics: BrokerMetrics, host: str, port: int, *, task_status) -> None:
    """A minimal HTTP/1.0 endpoint: GET /metrics answers the exposition format, else 404."""

    async def handle(stream: trio.SocketStream) -> None:
        try:
            request = b""
            with trio.move_on_after(HTTP_READ_TIMEOUT_S):
                while b"\r\n\r\n" not in request and len(request) < MAX_HTTP_REQUEST_BYTES:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    request += chunk
            line = request.split(b"\r\n", 1)[0].split()
            if len(line) >= 2 and line[0] == b"GET" and line[1].split(b"?")[0] == b"/metrics":
                parts = []
                slice_ends = time.perf_counter() + RENDER_SLICE_S
                for part in metrics.render_parts():
                    parts.append(part)
                    if time.perf_counter() >= slice_ends:
                        await trio.sleep(0)  # the clients' requests between families
                        slice_ends = time.perf_counter() + RENDER_SLICE_S
                body = b"".join(parts)
                head = f"HTTP/1.0 200 OK\r\nContent-Type: {CONTENT_TYPE_LATEST}\r\n"
            else:
                body = b"not found: try /metrics\n"
                head = "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
            head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            await stream.send_all(head.encode() + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:
            log.exception("metrics request failed")
        finally:
            await trio.aclose_forcefully(stream)

    listeners = await trio.open_tcp_listeners(port, host=host or None)
    port = listeners[0].socket.getsockname()[1]  # (port 0: the one the kernel chose)
    log.info("metrics on http://%s:%d/metrics", host, port)
    task_status.started(port)
    await trio.serve_listeners(handle, listeners)


class QuotaCollector:
    """Each quota entity's rate and throttle time, as Kafka's ``ClientQuotaManager``
    sensors show them (JMX ``kafka.server:type=Produce|Fetch,user=..,client-id=..``
    ``byte-rate`` and ``throttle-time``), read at scrape time. Only entities that a quota
    applies to have sensors, and idle ones are dropped, which bounds the series."""

    def __init__(self, quotas: BrokerQuotas) -> None:
        self.quotas = quotas

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now_ms = monotonic_ms()
        for name, manager in (("produce", self.quotas.produce), ("fetch", self.quotas.fetch)):
            labels = ["user", "client_id"]
            rate = GaugeMetricFamily(
                f"kafka_server_{name}_byte_rate",
                f"Bytes per second of {name} requests by quota entity (byte-rate).",
                labels=labels,
            )
            throttle = GaugeMetricFamily(
                f"kafka_server_{name}_throttle_time",
                "Average throttle time in ms of the throttled responses (throttle-time).",
                labels=labels,
            )
            quota = GaugeMetricFamily(
                f"kafka_server_{name}_quota_byte_rate",
                f"The {manager.quota_key} that applies to the quota entity.",
                labels=labels,
            )
            for sensor, measured, limit in manager.sensors(now_ms):
                tags = list(sensor.tags)
                rate.add_metric(tags, measured)
                average = (
                    sensor.throttle_ms_total / sensor.throttle_count
                    if sensor.throttle_count
                    else 0.0
                )
                throttle.add_metric(tags, average)
                if limit is not None:
                    quota.add_metric(tags, limit)
            yield from (rate, throttle, quota)
        yield from self._request_families(now_ms)
        yield from self._mutation_families(now_ms)

    def _families(self, prefix: str, rate_name: str, rate_help: str, quota_name: str, key: str):
        labels = ["user", "client_id"]
        return (
            GaugeMetricFamily(f"{prefix}_{rate_name}", rate_help, labels=labels),
            GaugeMetricFamily(
                f"{prefix}_throttle_time",
                "Average throttle time in ms of the throttled responses (throttle-time).",
                labels=labels,
            ),
            GaugeMetricFamily(
                f"{prefix}_quota_{quota_name}",
                f"The {key} that applies to the quota entity.",
                labels=labels,
            ),
        )

    def _request_families(self, now_ms: int) -> Iterator[GaugeMetricFamily]:
        """Kafka's ``type=Request`` sensors: ``request-time`` (percentage of one thread's
        time) and ``throttle-time``."""
        manager = self.quotas.request
        rate, throttle, quota = self._families(
            "kafka_server_request",
            "request_time",
            "Percentage of one thread's time the quota entity's requests took (request-time).",
            "request_percentage",
            manager.quota_key,
        )
        for sensor, measured, limit in manager.sensors(now_ms):
            tags = list(sensor.tags)
            rate.add_metric(tags, measured)
            throttle.add_metric(tags, _average_throttle(sensor))
            if limit is not None:
                quota.add_metric(tags, limit)
        yield from (rate, throttle, quota)

    def _mutation_families(self, now_ms: int) -> Iterator[GaugeMetricFamily]:
        """Kafka's ``type=ControllerMutation`` sensors: ``mutation-rate`` (partitions created
        or deleted per second), ``tokens`` (what is left in the token bucket) and
        ``throttle-time``."""
        manager = self.quotas.mutation
        rate, throttle, quota = self._families(
            "kafka_server_controllermutation",
            "mutation_rate",
            "Partitions created or deleted per second by the quota entity (mutation-rate).",
            "controller_mutation_rate",
            manager.quota_key,
        )
        tokens = GaugeMetricFamily(
            "kafka_server_controllermutation_tokens",
            "Partitions left in the quota entity's token bucket (tokens).",
            labels=["user", "client_id"],
        )
        for sensor, measured, limit in manager.sensors(now_ms):
            tags = list(sensor.tags)
            rate.add_metric(tags, measured)
            throttle.add_metric(tags, _average_throttle(sensor))
            if limit is not None:
                quota.add_metric(tags, limit)
                tokens.add_metric(tags, manager.tokens(sensor, limit, now_ms))
        yield from (rate, throttle, quota, tokens)


def _average_throttle(sensor) -> float:
    return sensor.throttle_ms_total / sensor.throttle_count if sensor.throttle_count else 0.0


class ConnectionCollector:
    """Open connections by listener (Kafka's socket-server-metrics ``connection-count``) and,
    with queued.max.request.bytes, the request memory pool (Kafka's SocketServer
    ``MemoryPoolUsed`` and ``MemoryPoolAvailable``), read at scrape time."""

    def __init__(self, quotas: ConnectionQuotas, pool: MemoryPool | None) -> None:
        self.quotas = quotas
        self.pool = pool

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        count = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "Open client connections, by listener (connection-count).",
            labels=["listener"],
        )
        for listener, open_connections in sorted(self.quotas.per_listener.items()):
            count.add_metric([listener], open_connections)
        yield count
        if self.pool is not None:
            yield GaugeMetricFamily(
                "kafka_network_socketserver_memorypoolused",
                "Bytes of requests held, received or being received (MemoryPoolUsed).",
                value=self.pool.used,
            )
            yield GaugeMetricFamily(
                "kafka_network_socketserver_memorypoolavailable",
                "Bytes left of queued.max.request.bytes (MemoryPoolAvailable).",
                value=self.pool.available,
            )


class ClientTelemetryCollector:
    """The metrics clients push (KIP-714), as Prometheus series: one family per OTLP metric,
    its name with dots turned to underscores (common/otlp_metrics.py), each series labelled
    by the pushing client's ``client_instance_id`` and ``client_id`` besides the points'
    own attributes. Read at scrape time from the ClientMetricsManager's instances; a client
    that has not pushed for 3 push intervals (or whose instance expired) is left out. Kafka
    hands these to a receiver plugin; minibroker serves them here."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator:
        families: dict[str, Any] = {}
        kinds: dict[str, str] = {}
        manager = self.replicas.client_metrics
        for instance in manager.pushed(time.monotonic_ns() // 1_000_000):
            own = (
                ("client_instance_id", str(instance.instance_id)),
                ("client_id", instance.metadata.client_id or ""),
            )
            for (name, attributes), (kind, value) in instance.series.items():
                if kinds.setdefault(name, kind) != kind:
                    continue  # the same name pushed as another type: the first one wins
                labels = dict(attributes)
                labels.update(own)
                names, values = list(labels), list(labels.values())
                family = families.get(name)
                if kind == otlp_metrics.HISTOGRAM:
                    if family is None:
                        family = families[name] = HistogramMetricFamily(
                            name, "Pushed by clients (KIP-714).", labels=names
                        )
                    assert isinstance(value, tuple)
                    bounds, counts, total = value
                    buckets, running = [], 0
                    for bound, count in zip([*bounds, float("inf")], counts, strict=True):
                        running += count
                        buckets.append(("+Inf" if bound == float("inf") else str(bound), running))
                    family.add_metric(values, buckets, total)
                    continue
                if isinstance(value, tuple):
                    continue
                if family is None:
                    cls = CounterMetricFamily if kind == otlp_metrics.COUNTER else GaugeMetricFamily
                    family = families[name] = cls(
                        name, "Pushed by clients (KIP-714).", labels=names
                    )
                family.add_metric(values, value)
        yield from families.values()
