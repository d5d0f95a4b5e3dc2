"""Prometheus metrics under the names a Kafka operator knows from Kafka's JMX exporter: the
registry of one node and its counters and histograms.

Counters are bumped where things happen (a produce appended, a request answered, an ISR
changed), so every layer may hold this object. What is a current state (partition counts,
lags, the controller's view, the groups) is read at scrape time by the collector in
node/metrics.py, registered here by the node that wires the layers together.
"""

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
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
from prometheus_client.registry import Collector


class _OneFamily(Collector):
    """A collector of one already collected family, for generate_latest."""

    def __init__(self, family: Any) -> None:
        self.family = family

    def collect(self) -> list[Any]:
        return [self.family]


log = logging.getLogger("metrics")

# The *_created series double the output and no Kafka dashboard uses them.
disable_created_metrics()

# Per-partition series stop beyond this many hosted partitions, to bound cardinality.
MAX_PARTITION_SERIES = 2000
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# Stalls and pauses of the event loop's thread, seconds (node/loop_stalls.py).
STALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
MAX_HTTP_REQUEST_BYTES = 8192
HTTP_READ_TIMEOUT_S = 5.0


class BrokerMetrics:
    """The counters and histograms of one node; collectors of its live state are registered
    by the node that wires it (node/metrics.py)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # Labelled children, by metric and label values (`child`).
        self._children: dict[tuple, Any] = {}
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
            "Bytes of record batches sent to consumers by this broker, as leader or, with"
            " follower fetching (KIP-392), as follower (BytesOutPerSec).",
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
        # Not Kafka's: how much of the records sent went by sendfile (zero-copy, plaintext
        # listeners) rather than through Python (TLS, small reads).
        self.fetch_sendfile_bytes = Counter(
            "minibroker_fetch_sendfile_bytes",
            "Bytes of record batches sent to consumers and followers with sendfile.",
            registry=self.registry,
        )
        # Not Kafka's (its closes are spread over selector metrics and logs): connections the
        # broker closed or refused to protect itself, by why (node/server.py).
        self.connections_closed = Counter(
            "minibroker_connections_closed",
            "Connections closed or refused by the broker's connection limits, by listener and"
            " reason (idle, authentication_timeout, max_connections_per_ip, max_connections,"
            " connection_creation_rate).",
            ["listener", "reason"],
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

        # Share groups' dead-letter queues (KIP-1191): Kafka's ShareGroupMetrics
        # DeadLetterQueueTotalProduceRequestsPerSec, DeadLetterQueueFailedProduceRequestsPerSec
        # and DeadLetterQueueRecordCount, by group (replication/share_dlq_writer.py).
        self.dlq_produce_requests = Counter(
            "kafka_server_sharegroupmetrics_deadletterqueuetotalproducerequests",
            "Attempts to write a share group's dead letters to its DLQ topic.",
            ["group"],
            registry=self.registry,
        )
        self.dlq_failed_produce_requests = Counter(
            "kafka_server_sharegroupmetrics_deadletterqueuefailedproducerequests",
            "Attempts to write a share group's dead letters to its DLQ topic that failed.",
            ["group"],
            registry=self.registry,
        )
        self.dlq_records = Counter(
            "kafka_server_sharegroupmetrics_deadletterqueuerecordcount",
            "Records written to a share group's DLQ topic.",
            ["group"],
            registry=self.registry,
        )

        # Not Kafka's (its request path has no single thread to stall): runs of the event loop
        # of 1 ms or more without polling for I/O, and every garbage collection's pause
        # (node/loop_stalls.py).
        self.loop_stalls = Histogram(
            "minibroker_event_loop_stall_seconds",
            "Runs of the event loop of 1 ms or more between two polls for I/O: every client's"
            " requests wait meanwhile; kind: busy (the thread ran code for at least half of it)"
            " or waiting (a blocking system call, or not scheduled).",
            ["kind"],
            buckets=STALL_BUCKETS,
            registry=self.registry,
        )
        self.gc_pauses = Histogram(
            "minibroker_gc_pause_seconds",
            "Pauses of Python's cyclic garbage collector, by generation.",
            ["generation"],
            buckets=STALL_BUCKETS,
            registry=self.registry,
        )

    def child(self, metric, *values: str):
        """``metric.labels(*values)``, looked up once: ``labels()`` takes a lock and builds a
        key on every call, and the data path bumps the request, error, MessagesIn/BytesIn and
        BytesOut series on every request and partition. Children are never removed, so a
        cached one is the very object ``labels()`` would give."""
        key = (metric, values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def register(self, collector: Collector) -> None:
        """Add a collector of live state, read at scrape time (node/metrics.py has the
        broker's)."""
        self.registry.register(collector)

    def render(self) -> bytes:
        return b"".join(self.render_parts())

    def render_parts(self) -> Iterator[bytes]:
        """The exposition text one metric family at a time (``render`` is their join), so
        that the scrape handler can let the event loop serve between families: rendered in
        one step, a scrape held the loop for 7-8 ms (issue 40). Collectors of live state run
        as their turn comes, so a scrape is a sequence of family snapshots, not one instant
        (as a JMX exporter's reads of Kafka's MBeans are)."""
        for family in self.registry.collect():
            yield generate_latest(_OneFamily(family))
