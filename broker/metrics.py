"""Prometheus metrics under the names a Kafka operator knows from Kafka's JMX exporter.

Counters are bumped where things happen (a produce appended, a request answered, an ISR
changed). Everything that is a current state (partition counts, under-replicated partitions,
log sizes, purgatory sizes, fetcher lag, the controller's view) is read from the live objects
at scrape time by a collector, so there is nothing to keep in sync and no stale series after a
partition goes away.

The /metrics endpoint is served from the trio loop itself (a few milliseconds of work per
scrape), so the collector reads the broker's state without threads or locks; a slow or broken
scraper only holds its own connection.
"""

import itertools
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import trio
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .coordinator.state import GroupState

if TYPE_CHECKING:
    from .controller.service import ControllerService
    from .coordinator.service import GroupCoordinator
    from .replica_manager import ReplicaManager

log = logging.getLogger("metrics")

# The *_created series double the output and no Kafka dashboard uses them.
disable_created_metrics()

# Per-partition series stop beyond this many hosted partitions, to bound cardinality.
MAX_PARTITION_SERIES = 2000
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
MAX_HTTP_REQUEST_BYTES = 8192
HTTP_READ_TIMEOUT_S = 5.0


class BrokerMetrics:
    """The counters and histograms of one node, and the collector of its live state."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.messages_in = Counter(
            "kafka_server_brokertopicmetrics_messagesin",
            "Records appended by this broker as leader (MessagesInPerSec).",
            ["topic"],
            registry=self.registry,
        )
        self.bytes_in = Counter(
            "kafka_server_brokertopicmetrics_bytesin",
            "Bytes of record batches appended as leader (BytesInPerSec).",
            ["topic"],
            registry=self.registry,
        )
        self.bytes_out = Counter(
            "kafka_server_brokertopicmetrics_bytesout",
            "Bytes of record batches sent to consumers (BytesOutPerSec).",
            ["topic"],
            registry=self.registry,
        )
        self.replication_bytes_out = Counter(
            "kafka_server_brokertopicmetrics_replicationbytesout",
            "Bytes of record batches sent to follower replicas (ReplicationBytesOutPerSec).",
            ["topic"],
            registry=self.registry,
        )
        self.requests = Counter(
            "kafka_network_requestmetrics_requests",
            "Requests answered, by API (RequestsPerSec).",
            ["request"],
            registry=self.registry,
        )
        self.errors = Counter(
            "kafka_network_requestmetrics_errors",
            "Error codes in responses, by API and error (ErrorsPerSec).",
            ["request", "error"],
            registry=self.registry,
        )
        self.request_time = Histogram(
            "kafka_network_requestmetrics_totaltime_seconds",
            "Time from a request's arrival to its response being ready (TotalTimeMs).",
            ["request"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.isr_shrinks = Counter(
            "kafka_server_replicamanager_isrshrinks",
            "ISR shrinks this broker made as leader (IsrShrinksPerSec).",
            registry=self.registry,
        )
        self.isr_expands = Counter(
            "kafka_server_replicamanager_isrexpands",
            "ISR expansions this broker made as leader (IsrExpandsPerSec).",
            registry=self.registry,
        )
        self.fetcher_bytes = Counter(
            "kafka_server_fetcherstats_bytes",
            "Bytes of record batches fetched from leaders by this broker's fetchers.",
            registry=self.registry,
        )
        self.leader_elections = Counter(
            "kafka_controller_controllerstats_leaderelections",
            "Partition leader changes decided by the controller (LeaderElectionRateAndTimeMs).",
            registry=self.registry,
        )
        # The log cleaner (broker/log_cleaner.py); Kafka's LogCleaner and LogCleanerManager.
        self.cleaner_runs = Counter(
            "kafka_log_logcleaner_cleanings",
            "Cleanings of compacted partitions completed by the log cleaner.",
            registry=self.registry,
        )
        self.cleaner_bytes_reclaimed = Counter(
            "kafka_log_logcleaner_bytes_reclaimed",
            "Bytes the log cleaner removed from compacted logs (read minus written back).",
            registry=self.registry,
        )
        self.cleaner_recopy_percent = Gauge(
            "kafka_log_logcleaner_cleaner_recopy_percent",
            "Bytes written back as a percentage of bytes read, in the last cleaning.",
            registry=self.registry,
        )
        self.cleaner_max_dirty_percent = Gauge(
            "kafka_log_logcleanermanager_max_dirty_percent",
            "Cleanable bytes as a percentage of the log, for the dirtiest compacted partition.",
            registry=self.registry,
        )
        self.uncleanable_partitions = Gauge(
            "kafka_log_logcleanermanager_uncleanable_partitions_count",
            "Compacted partitions the cleaner gave up on after an error.",
            registry=self.registry,
        )
        self._state = _StateCollector()
        self.registry.register(self._state)

    def watch(
        self,
        replicas: "ReplicaManager | None",
        controller: "ControllerService | None",
        coordinator: "GroupCoordinator | None" = None,
    ) -> None:
        """Tell the collector where the live state is."""
        self._state.replicas = replicas
        self._state.controller = controller
        self._state.coordinator = coordinator

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector:
    """Gauges read from the broker's live state at scrape time."""

    def __init__(self) -> None:
        self.replicas: ReplicaManager | None = None
        self.controller: ControllerService | None = None
        self.coordinator: GroupCoordinator | None = None

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.replicas is not None:
            yield from _broker_gauges(self.replicas)
        if self.controller is not None:
            yield from _controller_gauges(self.controller)
        if self.coordinator is not None:
            yield from _coordinator_metrics(self.coordinator)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _broker_gauges(replicas: "ReplicaManager") -> Iterator[GaugeMetricFamily]:
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
    }
    for partition in partitions[:MAX_PARTITION_SERIES]:
        labels = [partition.topic, str(partition.index)]
        families["size"].add_metric(labels, partition.log.size_bytes)
        families["segments"].add_metric(labels, partition.log.segment_count)
        families["end"].add_metric(labels, partition.log.log_end_offset)
        families["start"].add_metric(labels, partition.log.log_start_offset)
        families["hw"].add_metric(labels, partition.high_watermark)
    yield from families.values()


def _controller_gauges(controller: "ControllerService") -> Iterator[GaugeMetricFamily]:
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
    coordinator: "GroupCoordinator",
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
                body = metrics.render()
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
    log.info("metrics on http://%s:%d/metrics", host, port)
    task_status.started()
    await trio.serve_listeners(handle, listeners)
