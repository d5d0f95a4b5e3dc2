"""The table's rows: what each one measures, and running it against every system in turn.

Each measurement starts a fresh target and a fresh topic of 64 partitions (8 in the smoke run:
Sizes.partitions). Runs alternate between minibroker, the mock and Apache Kafka, so that
whatever else the shared machine is doing at the time weighs on all of them about equally; the
table shows each system's median over the runs.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench import spark_read
from bench.failover import failover_time
from bench.procfs import machine_ticks, steal_share
from bench.startup import time_to_usable
from bench.streams_pause import LINES_PER_S as STREAMS_LINES_PER_S
from bench.streams_pause import streams_join_pause
from bench.targets import KAFKA, MINIBROKER, MOCK, SYSTEMS, BenchError, Skipped, start
from bench.transactions import (
    PARTITIONS_PER_TRANSACTION,
    NotServed,
    isolation_consume_throughput,
    transactional_produce_throughput,
)
from bench.workloads import (
    PARTITIONS,
    SHARE_MEMBERS,
    Neighbour,
    Sizes,
    Target,
    consume_throughput,
    end_to_end_latency,
    first_rebalance_time,
    group_consume_throughput,
    produce_throughput,
    record_file,
    resource_usage,
    restart_time,
    share_consume_throughput,
    tls_cost,
)
from minibroker.tools.launcher import BrokerStartError

SMALL = 100
LARGE = 1024
LATENCY_RATE_BYTES = 10_000_000
# The latency-noisy row's neighbour: 1 KiB records at three times the measured flow's bytes,
# batched over 50 ms (bulk requests of up to librdkafka's 1 MB batch.size).
NOISY_NEIGHBOUR = Neighbour(rate_bytes=30_000_000, record_bytes=LARGE, linger_ms=50.0)

REAL_SIZES = Sizes(
    produce_records=1_000_000,
    consume_records=1_000_000,
    resources_records=1_000_000,
    restart_records=1_000_000,
    group_consume_records=1_000_000,
    tls_records=1_000_000,
    latency_seconds=10.0,
    latency_warmup_seconds=1.0,
)
SMOKE_SIZES = Sizes(
    produce_records=10_000,
    consume_records=10_000,
    resources_records=10_000,
    restart_records=10_000,
    group_consume_records=10_000,
    tls_records=10_000,
    latency_seconds=1.0,
    latency_warmup_seconds=0.25,
    share_records=2_000,
    fork_brokers=True,
    mock_rebalance=False,
    partitions=8,
    internal_partitions=8,
    txn_records=10_000,
    spark_records=20_000,
    spark_probes=3,
    streams_baseline_seconds=3.0,
    streams_tail_seconds=3.0,
)
# Why the Kafka column is empty when Kafka is left out of a run (the smoke run, by default).
KAFKA_LEFT_OUT = (
    "left out of this run (--smoke runs Apache Kafka only with --kafka or"
    " MINIBROKER_BENCH_KAFKA=1, and java/fetch.sh's jars cached)"
)
# The Spark rows' systems, all reading the same topic on one minibroker broker: minibroker's
# source (`format("minibroker")`, under MINIBROKER so that the ratios are of it), Spark's own
# connector (`format("kafka")`, spark-sql-kafka-0-10) and one plain confluent-kafka consumer.
SPARK_KAFKA = "spark-kafka"
CONSUMER = "consumer"
SPARK_SYSTEMS = (MINIBROKER, SPARK_KAFKA, CONSUMER)
SPARK_TRIGGER_MS = 1000


@dataclass(frozen=True)
class Line:
    """One line of the table: a figure (`key`), printed with `fmt`, and optionally a second
    figure in parentheses (MB/s next to records/s); the ratio is always of `key`."""

    metric: str
    key: str
    fmt: str
    extra_key: str | None = None
    extra_fmt: str = ""


THROUGHPUT = (Line("records/s (MB/s)", "records_per_s", "{:,.0f}", "mb_per_s", "{:.1f}"),)
# The produce rows: kcat (librdkafka), then the Java client's ProducerPerformance (not on the
# mock: see bench.workloads.produce_throughput).
JAVA_PRODUCER_KEY = "java_records_per_s"
PRODUCE = (
    Line("records/s (MB/s), kcat", "records_per_s", "{:,.0f}", "mb_per_s", "{:.1f}"),
    Line(
        "records/s (MB/s), Java producer-perf-test",
        JAVA_PRODUCER_KEY,
        "{:,.0f}",
        "java_mb_per_s",
        "{:.1f}",
    ),
)
LATENCY = (
    Line("p50 ms", "p50_ms", "{:.2f}"),
    Line("p99 ms", "p99_ms", "{:.2f}"),
    Line("p99.9 ms", "p999_ms", "{:.2f}"),
)
RESTART = (Line("s until served (GB of log)", "restart_s", "{:.2f}", "log_gb", "{:.2f}"),)
REBALANCE = (Line("s until every member is assigned", "rebalance_s", "{:.2f}"),)
GROUP_MEMBERS = 2
REBALANCE_MEMBERS = 3
# The group rows: no initial rebalance delay on either system (the mock's is set in
# bench.mock_host), so that a group's first rebalance starts as soon as its members join.
NO_INITIAL_DELAY = {"group.initial.rebalance.delay.ms": "0"}
TLS = (
    Line("SSL / plaintext produce records/s", "produce_ratio", "{:.2f}"),
    Line("SSL / plaintext consume records/s", "consume_ratio", "{:.2f}"),
    Line(
        "produce records/s, SSL (plaintext)",
        "ssl_produce_rps",
        "{:,.0f}",
        "plaintext_produce_rps",
        "{:,.0f}",
    ),
    Line(
        "consume records/s, SSL (plaintext)",
        "ssl_consume_rps",
        "{:,.0f}",
        "plaintext_consume_rps",
        "{:,.0f}",
    ),
    Line(
        "broker CPU s per GB, SSL (plaintext)",
        "ssl_cpu_s_per_gb",
        "{:.2f}",
        "plaintext_cpu_s_per_gb",
        "{:.2f}",
    ),
)
RECORDS_PER_TRANSACTION = 1000
ISOLATION = (
    Line("read_committed / read_uncommitted records/s", "committed_ratio", "{:.2f}"),
    Line(
        "records/s read_committed (read_uncommitted)",
        "read_committed_rps",
        "{:,.0f}",
        "read_uncommitted_rps",
        "{:,.0f}",
    ),
)
# Startup rows: the target is the thing measured, so each run starts its own (bench.startup).
STARTUP = (
    Line("s until a first acks=all produce to a new topic is acknowledged", "usable_s", "{:.2f}"),
    Line("s until every broker answers and lists every broker", "ready_s", "{:.2f}"),
)
SPARK_RATE = (Line("rows/s", "rows_per_s", "{:,.0f}"),)
SPARK_LATENCY = (
    Line("median ms of the probes", "median_ms", "{:,.0f}"),
    Line("max ms of the probes", "max_ms", "{:,.0f}"),
)
FAILOVER = (
    Line(
        "s from kill -9 of a partition's leader to the first acks=all acknowledgement from"
        " the new one",
        "failover_s",
        "{:.2f}",
    ),
)
STREAMS_JOIN = (
    Line(
        "s tasks unavailable as a 4th instance joins, streams protocol (steady state)",
        "streams_pause_s",
        "{:.2f}",
        "streams_steady_s",
        "{:.2f}",
    ),
    Line(
        "s tasks unavailable as a 4th instance joins, classic protocol (steady state)",
        "classic_pause_s",
        "{:.2f}",
        "classic_steady_s",
        "{:.2f}",
    ),
)
STREAMS_JOIN_COLD = (
    "the row's instances are new JVMs each time, and what it times is the group's hand-over,"
    " timers and round trips, not a warm broker"
)
# Why the smoke run leaves the mock out of the group rows (Sizes.mock_rebalance).
MOCK_REBALANCE_LEFT_OUT = (
    "left out of the smoke run: the mock's groups wait its built-in 3 s initial delay (12 s"
    " when a member misses it)"
)
# Why the mock has no figure in the streams-join row.
MOCK_HAS_NO_STREAMS_GROUPS = (
    "librdkafka's mock serves neither StreamsGroupHeartbeat (KIP-1071) nor Kafka Streams'"
    " internal topics' creation with their configs"
)
# Why the mock has no failover figure.
MOCK_CANNOT_FAIL_OVER = (
    "librdkafka's mock can take a broker down (rd_kafka_mock_broker_set_down) but does not"
    " move its partitions' leadership: a new leader is only ever set by hand"
    " (rd_kafka_mock_partition_set_leader), so there is no failover of its own to time"
)
# The share-consume row (issue 35): one line per share group size, then the classic group.
SHARE_CONSUME = (
    *(
        Line(
            f"records/s, {members} share consumer{'s' if members > 1 else ''} on 1 partition",
            f"share_{members}_rps",
            "{:,.0f}",
        )
        for members in SHARE_MEMBERS
    ),
    Line("records/s, classic group of 4 on 4 partitions", "classic_rps", "{:,.0f}"),
)
RESOURCES = (
    Line("CPU s per GB moved", "cpu_s_per_gb", "{:.2f}"),
    Line("peak RSS MiB", "peak_rss_mib", "{:.0f}"),
)

# Why a warm run (`--warm`) leaves a row out.
STARTS_ITS_OWN = "the row times a system's start, so there is nothing started to warm up first"
RESTART_COLD = "the row times a new process started on the old log, whatever ran before the stop"
FAILOVER_COLD = (
    "the row times the cluster's and the client's reaction to a kill: timers and round trips"
    " (on Kafka mostly broker.session.timeout.ms, 9 s), on a cluster that a kill then leaves"
    " one broker short"
)
SPARK_WARM_ALREADY = (
    "the Spark rows warm up already (a first read of the topic before the clock, one"
    " SparkSession and broker for all their runs)"
)

Measure = Callable[[Target, str, Path], dict[str, float]]
# A measurement of one system that brings its own target: (system, run, work directory).
MeasureSystem = Callable[[str, int, Path], dict[str, float]]


def tls_overrides(work_dir: Path) -> dict[str, str]:
    """An SSL listener with a throwaway CA's certificate (made once per bench run)."""
    from minibroker.tools.dev_secure import make_certificates

    directory = work_dir / "tls"
    if not (directory / "broker.pem").exists():
        directory.mkdir(parents=True, exist_ok=True)
        ca_pem, keystore_pem = make_certificates()
        (directory / "ca.pem").write_bytes(ca_pem)
        (directory / "broker.pem").write_bytes(keystore_pem)
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(directory / "broker.pem"),
    }


@dataclass(frozen=True)
class Row:
    name: str
    workload: str
    lines: tuple[Line, ...]
    measure: Measure
    brokers: int = 1
    replication_factor: int = 1
    topic_configs: dict[str, str] = field(default_factory=dict)
    systems: tuple[str, ...] = SYSTEMS
    # Broker properties (Kafka's names: Kafka gets them too), or a function of the work
    # directory that makes them (files such as certificates live there).
    broker_overrides: dict[str, str] | Callable[[Path], dict[str, str]] = field(
        default_factory=dict
    )
    extra_listeners: tuple[str, ...] = ()
    # A startup row: the measurement starts this many brokers itself (bench.startup).
    starts: int | None = None
    # Systems the row does not measure, and why (the table says "skipped" and the reason).
    not_measured: dict[str, str] = field(default_factory=dict)
    # Set for rows whose systems are not brokers (the Spark rows): called instead of starting
    # a target; such rows have a table of their own.
    measure_system: MeasureSystem | None = None
    # What a warm run (`--warm`) runs untimed before each measurement, on the same started
    # system and a topic of its own: `measure` itself unless set here.
    warm_up: Measure | None = None
    # Why a warm run leaves the row out (a row whose measurement starts its own system).
    cold_only: str | None = None
    # The row measures the broker process itself (its restart, its peak RSS): minibroker's
    # nodes are new interpreters, never forked (Sizes.fork_brokers).
    fresh_process: bool = False
    # minibroker's nodes for this row are forked from the fork server (set by `rows`).
    fork: bool = False
    # Partitions of the row's topic (set by `rows`, from Sizes.partitions).
    partitions: int = PARTITIONS
    # Partitions of __consumer_offsets and __transaction_state on a single-node row's broker
    # (set by `rows`, from Sizes.internal_partitions; None: the broker's default, 50). The
    # 3-broker rows use neither topic.
    internal_partitions: int | None = None

    @property
    def spark(self) -> bool:
        return self.measure_system is not None


def on_records(workload, count: int, size: int) -> Measure:
    """A measurement running `workload` on a prepared file of `count` records of `size` bytes."""
    return lambda target, topic, work_dir: workload(
        target, topic, record_file(work_dir, count, size), count, size
    )


def rows(sizes: Sizes, kafka: bool = True, spark: bool = True) -> list[Row]:
    """Every row, in table order, for these sizes; without `kafka`, Apache Kafka is left out
    of every row (and the table says why); without `spark`, the Spark rows are left out."""
    table = [
        dataclasses.replace(
            row,
            fork=sizes.fork_brokers and not row.fresh_process,
            partitions=sizes.partitions,
            internal_partitions=sizes.internal_partitions,
        )
        for row in _rows(sizes, java=kafka)
        if spark or not row.spark
    ]
    if kafka:
        return table
    return [
        dataclasses.replace(
            row,
            systems=tuple(system for system in row.systems if system != KAFKA),
            not_measured={**row.not_measured, KAFKA: KAFKA_LEFT_OUT},
        )
        if KAFKA in row.systems
        else row
        for row in table
    ]


def _rows(sizes: Sizes, java: bool) -> list[Row]:
    """The rows; `java` adds the Java producer to the produce rows (with Kafka, as it needs
    the same cached jars and a JVM start per run, which the smoke run leaves out)."""

    def produce(
        size: int, acks: str, replication_factor: int = 1, java: bool = java, **configs: str
    ) -> Measure:
        count = sizes.produce_records
        return lambda target, topic, work_dir: produce_throughput(
            target,
            topic,
            record_file(work_dir, count, size),
            count,
            size,
            acks,
            replication_factor,
            configs,
            java,
        )

    produced_lines = PRODUCE if java else THROUGHPUT

    cluster = {
        "brokers": 3,
        "replication_factor": 3,
        "topic_configs": {"min.insync.replicas": "2"},
    }

    def produce_row(name: str, workload: str, size: int, acks: str, rf3: bool = False) -> Row:
        """A produce row; its warm-up (`--warm`) is kcat's part alone: the Java producer's
        figure is taken after kcat's records on the same broker anyway, warm or not, and a
        second JVM client run would add minutes per run for no warmer broker."""
        replication, configs, placement = (
            (3, {"min.insync.replicas": "2"}, cluster) if rf3 else (1, {}, {})
        )
        return Row(
            name,
            workload,
            produced_lines,
            produce(size, acks, replication, **configs),
            warm_up=produce(size, acks, replication, False, **configs),
            **placement,
        )

    produced = f"{sizes.produce_records:,}"
    java_too = " (kcat, then the Java client)" if java else ""

    # The group rows leave the mock out of the smoke run (Sizes.mock_rebalance).
    group_systems: dict = (
        {}
        if sizes.mock_rebalance
        else {
            "systems": tuple(system for system in SYSTEMS if system != MOCK),
            "not_measured": {MOCK: MOCK_REBALANCE_LEFT_OUT},
        }
    )

    def startup(brokers: int) -> Row:
        shape = "1 broker" if brokers == 1 else f"{brokers} brokers, the topic RF={brokers}"
        return Row(
            f"startup-{brokers}",
            f"from nothing to a usable cluster, {shape} (minibroker: the pytest fixture's"
            " Cluster, its fork server already up; kafka: KRaft, storage format included)",
            STARTUP,
            lambda target, topic, work_dir: {},
            starts=brokers,
            cold_only=STARTS_ITS_OWN,
        )

    return [
        startup(1),
        startup(3),
        produce_row(
            "produce-100",
            f"produce {produced} x 100 B, acks=1, 1 broker{java_too}",
            SMALL,
            "1",
        ),
        produce_row(
            "produce-1k",
            f"produce {produced} x 1 KiB, acks=1, 1 broker{java_too}",
            LARGE,
            "1",
        ),
        produce_row(
            "produce-all-100",
            f"produce {produced} x 100 B, acks=all, 3 brokers RF=3 min.insync=2{java_too}",
            SMALL,
            "all",
            rf3=True,
        ),
        produce_row(
            "produce-all-1k",
            f"produce {produced} x 1 KiB, acks=all, 3 brokers RF=3 min.insync=2{java_too}",
            LARGE,
            "all",
            rf3=True,
        ),
        Row(
            "failover",
            "kill -9 of a partition's leader under a steady acks=all producer (confluent-kafka,"
            " idempotent, a record every 5 ms), 3 brokers RF=3 min.insync=2 (Kafka: a node that"
            " is not the active controller)",
            FAILOVER,
            lambda target, topic, work_dir: failover_time(target, topic),
            systems=(MINIBROKER, KAFKA),
            not_measured={MOCK: MOCK_CANNOT_FAIL_OVER},
            cold_only=FAILOVER_COLD,
            **cluster,
        ),
        *(
            [
                Row(
                    "streams-join",
                    "a Kafka Streams 4.4 word count (state store, changelog, at_least_once) on"
                    f" 3 instances under {STREAMS_LINES_PER_S} lines/s; a 4th instance joins;"
                    " the longest gap in an output partition's appends (LogAppendTime), with"
                    " group.protocol=streams, then =classic; 3 brokers (bench/streams_pause.py)",
                    STREAMS_JOIN,
                    lambda target, topic, work_dir: streams_join_pause(
                        target.bootstrap,
                        work_dir,
                        topic,
                        sizes.streams_baseline_seconds,
                        sizes.streams_tail_seconds,
                    ),
                    systems=(MINIBROKER, KAFKA),
                    not_measured={MOCK: MOCK_HAS_NO_STREAMS_GROUPS},
                    cold_only=STREAMS_JOIN_COLD,
                    brokers=3,
                    replication_factor=3,
                )
            ]
            # With Kafka only (the smoke run leaves it out unless asked): the row runs Kafka
            # Streams' JVMs from the same cached jars, and takes minutes a system.
            if java
            else []
        ),
        Row(
            "txn-produce",
            f"transactional produce {sizes.txn_records:,} x 100 B, {RECORDS_PER_TRANSACTION:,}"
            f" records a transaction to {PARTITIONS_PER_TRANSACTION} partitions"
            " (confluent-kafka), 1 broker",
            THROUGHPUT,
            lambda target, topic, work_dir: transactional_produce_throughput(
                target, topic, sizes.txn_records, SMALL, RECORDS_PER_TRANSACTION
            ),
        ),
        Row(
            "txn-consume",
            f"consume {sizes.txn_records:,} x 100 B written in transactions of"
            f" {RECORDS_PER_TRANSACTION:,}, read_committed against read_uncommitted (kcat),"
            " 1 broker",
            ISOLATION,
            lambda target, topic, work_dir: isolation_consume_throughput(
                target, topic, sizes.txn_records, SMALL, RECORDS_PER_TRANSACTION
            ),
        ),
        Row(
            "consume",
            f"consume {sizes.consume_records:,} x 100 B from the beginning, 1 broker",
            THROUGHPUT,
            on_records(consume_throughput, sizes.consume_records, SMALL),
        ),
        Row(
            "latency",
            f"end-to-end latency at 10 MB/s, {sizes.latency_seconds:g} s, 1 broker",
            LATENCY,
            lambda target, topic, work_dir: end_to_end_latency(
                target,
                topic,
                LATENCY_RATE_BYTES,
                sizes.latency_seconds,
                sizes.latency_warmup_seconds,
            ),
        ),
        Row(
            "latency-3",
            f"end-to-end latency at 10 MB/s, {sizes.latency_seconds:g} s, acks=all, 3 brokers"
            " RF=3 min.insync=2",
            LATENCY,
            lambda target, topic, work_dir: end_to_end_latency(
                target,
                topic,
                LATENCY_RATE_BYTES,
                sizes.latency_seconds,
                sizes.latency_warmup_seconds,
                acks="all",
            ),
            **cluster,
        ),
        Row(
            "latency-noisy",
            f"end-to-end latency at 10 MB/s, {sizes.latency_seconds:g} s, 1 broker, while"
            f" another producer sends {NOISY_NEIGHBOUR.rate_bytes / 1e6:g} MB/s of 1 KiB"
            f" records (linger.ms={NOISY_NEIGHBOUR.linger_ms:g}, acks=1) to another topic",
            LATENCY,
            lambda target, topic, work_dir: end_to_end_latency(
                target,
                topic,
                LATENCY_RATE_BYTES,
                sizes.latency_seconds,
                sizes.latency_warmup_seconds,
                neighbour=NOISY_NEIGHBOUR,
            ),
        ),
        Row(
            "resources",
            f"produce then consume {sizes.resources_records:,} x 1 KiB, 1 broker",
            RESOURCES,
            on_records(resource_usage, sizes.resources_records, LARGE),
            fresh_process=True,
        ),
        Row(
            "group-consume",
            f"consume {sizes.group_consume_records:,} x 100 B through a group of"
            f" {GROUP_MEMBERS} (confluent-kafka, one process each), 1 broker",
            THROUGHPUT,
            lambda target, topic, work_dir: group_consume_throughput(
                target,
                topic,
                record_file(work_dir, sizes.group_consume_records, SMALL),
                sizes.group_consume_records,
                SMALL,
                GROUP_MEMBERS,
            ),
            broker_overrides=NO_INITIAL_DELAY,
            **group_systems,
        ),
        Row(
            "share-consume",
            f"consume {sizes.share_records:,} x 100 B from 1 partition through a share group"
            " (KIP-932) of 1, 2 and 4 confluent-kafka ShareConsumers, explicit acknowledgement"
            " (one process each), then through a classic group of 4 on 4 partitions, 1 broker"
            " (bench/share_member.py)",
            SHARE_CONSUME,
            lambda target, topic, work_dir: share_consume_throughput(
                target,
                topic,
                record_file(work_dir, sizes.share_records, SMALL),
                sizes.share_records,
                SMALL,
            ),
            broker_overrides=NO_INITIAL_DELAY,
        ),
        Row(
            "first-rebalance",
            f"{REBALANCE_MEMBERS} confluent-kafka consumers subscribe at once: their group's"
            " first rebalance, 1 broker",
            REBALANCE,
            lambda target, topic, work_dir: first_rebalance_time(target, topic, REBALANCE_MEMBERS),
            broker_overrides=NO_INITIAL_DELAY,
            **group_systems,
        ),
        Row(
            "tls",
            f"produce then consume {sizes.tls_records:,} x 100 B over PLAINTEXT, then over SSL,"
            " acks=1, 1 broker",
            TLS,
            lambda target, topic, work_dir: tls_cost(
                target,
                topic,
                record_file(work_dir, sizes.tls_records, SMALL),
                sizes.tls_records,
                SMALL,
                work_dir / "tls" / "ca.pem",
            ),
            systems=(MINIBROKER, KAFKA),
            broker_overrides=tls_overrides,
            extra_listeners=("SSL",),
        ),
        Row(
            "restart",
            f"clean stop, then restart with {sizes.restart_records:,} x 1 KiB of log, 1 broker",
            RESTART,
            on_records(restart_time, sizes.restart_records, LARGE),
            systems=(MINIBROKER, KAFKA),
            cold_only=RESTART_COLD,
            fresh_process=True,
        ),
        *spark_rows(sizes),
    ]


def spark_rows(sizes: Sizes) -> list[Row]:
    """Issue 22's rows: Spark reading one topic of `sizes.spark_records` x 100 B in
    SPARK_PARTITIONS partitions on one minibroker broker, through minibroker's source, Spark's
    connector and one plain consumer (bench.spark_read: one broker, topic and SparkSession for
    all three rows, made by the first and stopped by close_spark)."""
    records = f"{sizes.spark_records:,} x 100 B, {SPARK_PARTITIONS} partitions"

    def measure(kind: str) -> MeasureSystem:
        return lambda system, run, work_dir: spark_figures(sizes, kind, system)

    def row(name: str, workload: str, lines: tuple[Line, ...]) -> Row:
        return Row(
            name,
            workload,
            lines,
            lambda target, topic, work_dir: {},
            systems=SPARK_SYSTEMS,
            measure_system=measure(name),
            cold_only=SPARK_WARM_ALREADY,
        )

    return [
        row(
            "spark-count",
            f"Spark batch read of {records} into count(), local[2] (consumer: every record"
            " in one confluent-kafka Consumer)",
            SPARK_RATE,
        ),
        row(
            "spark-parquet",
            f"Spark batch read of {records} into Parquet, local[2] (consumer: one"
            " confluent-kafka Consumer, the columns written with pyarrow)",
            SPARK_RATE,
        ),
        row(
            "spark-latency",
            f"streaming end-to-end latency, topic -> Parquet at a {SPARK_TRIGGER_MS / 1000:g} s"
            f" trigger, {sizes.spark_probes} single records a run: produce until the file sink"
            " commits (consumer: until one confluent-kafka Consumer holds it)",
            SPARK_LATENCY,
        ),
    ]


SPARK_PARTITIONS = 4
_spark: spark_read.SparkRead | None = None
_spark_unavailable: str | None = None


def _spark_read(sizes: Sizes) -> spark_read.SparkRead:
    global _spark, _spark_unavailable
    if _spark_unavailable is not None:
        raise Skipped(_spark_unavailable)
    if _spark is None or _spark.records != sizes.spark_records:
        close_spark()
        try:
            _spark = spark_read.SparkRead(
                sizes.spark_records,
                SMALL,
                SPARK_PARTITIONS,
                log=lambda line: print(f"[spark] {line}", file=sys.stderr),
            )
        except ImportError as missing:
            _spark_unavailable = f"pyspark is not installed ({missing})"
            raise Skipped(_spark_unavailable) from missing
        except Exception as error:
            raise BenchError(f"Spark's topic or session could not be set up: {error}") from error
    return _spark


def close_spark() -> None:
    """Stop the Spark rows' SparkSession and broker, if a row started them."""
    global _spark
    if _spark is not None:
        _spark.close()
        _spark = None


def spark_figures(sizes: Sizes, kind: str, system: str) -> dict[str, float]:
    """One run of a Spark row for one system."""
    bench = _spark_read(sizes)
    source = "kafka" if system == SPARK_KAFKA else system
    if system == SPARK_KAFKA and "kafka" not in bench.sources:
        raise Skipped(bench.left_out or "Spark's connector is not available")
    try:
        if kind == "spark-count":
            rate = bench.consumer() if system == CONSUMER else bench.count(source)
            return {"rows_per_s": rate}
        if kind == "spark-parquet":
            rate = bench.consumer_parquet() if system == CONSUMER else bench.parquet(source)
            return {"rows_per_s": rate}
        latencies = sorted(bench.latency(source, SPARK_TRIGGER_MS, sizes.spark_probes))
        return {
            "median_ms": statistics.median(latencies) * 1000,
            "max_ms": latencies[-1] * 1000,
        }
    except (Skipped, BenchError):
        raise
    except Exception as error:
        raise BenchError(f"{kind}, {system}: {error}") from error


@dataclass
class RowResult:
    row: Row
    runs: dict[str, list[dict[str, float]]]
    failures: dict[str, str]
    # Systems that refuse what the row measures (transactions, before minibroker served them).
    not_served: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def median(self, system: str, key: str) -> float | None:
        # A key some runs lack (the Java producer where no JVM is) counts only where present.
        values = [figures[key] for figures in self.runs[system] if key in figures]
        return statistics.median(values) if values else None


def warm_selection(selected: list[Row], warmups: int) -> tuple[list[Row], dict[str, str]]:
    """The rows a run with `warmups` untimed runs before each measurement measures, and the
    ones it leaves out with the reason (none when `warmups` is 0)."""
    if not warmups:
        return selected, {}
    kept = [row for row in selected if row.cold_only is None]
    return kept, {row.name: row.cold_only for row in selected if row.cold_only is not None}


def measure_once(
    row: Row, system: str, run: int, work_dir: Path, warmups: int = 0
) -> dict[str, float]:
    """One measurement on a fresh target, which is stopped (and its data removed) afterwards.

    With `warmups`, the row's workload (`warm_up`, or `measure`) first runs that many times
    untimed on the same target, each into a topic of its own made like the measured one, so
    that the measurement finds every system warm: a JVM whose JIT has compiled the paths the
    workload takes, pools and caches filled, connections' first costs paid. Only the timed
    run's figures are kept (the resources row's CPU is taken around it; its peak RSS is the
    process's high-water mark, warm-up included)."""
    if row.starts is not None:
        return time_to_usable(system, row.starts, work_dir)
    if row.measure_system is not None:
        return row.measure_system(system, run, work_dir)
    overrides = row.broker_overrides
    if callable(overrides):
        overrides = overrides(work_dir)
    if row.internal_partitions is not None and row.brokers == 1:
        overrides = {
            **overrides,
            "offsets.topic.num.partitions": str(row.internal_partitions),
            "transaction.state.log.num.partitions": str(row.internal_partitions),
        }
    target = start(system, row.brokers, work_dir, overrides, row.extra_listeners, row.fork)
    try:
        topic = f"bench-{row.name}-{run}"
        for warm_up in range(warmups):
            warm_topic = f"{topic}-warm-{warm_up}"
            target.create_topic(
                warm_topic, row.partitions, row.replication_factor, row.topic_configs
            )
            untimed = (row.warm_up or row.measure)(target, warm_topic, work_dir)
            shown = ", ".join(f"{key} {value:,.2f}" for key, value in untimed.items())
            print(
                f"[{row.name}] {system} warm-up {warm_up + 1}/{warmups}: {shown}", file=sys.stderr
            )
        target.create_topic(topic, row.partitions, row.replication_factor, row.topic_configs)
        figures = row.measure(target, topic, work_dir)
    except BaseException:
        try:
            target.close()
        except BenchError as shutdown:
            print(f"[{row.name}] {system} also failed to stop: {shutdown}", file=sys.stderr)
        raise
    target.close()
    return figures


def run_row(row: Row, runs: int, work_dir: Path, warmups: int = 0) -> RowResult:
    """`runs` measurements of each system, alternating (each after `warmups` untimed runs of
    the workload on the same target: measure_once); a system that fails is reported and not
    measured again on this row, so one broken workload does not stall the table."""
    result = RowResult(
        row,
        {system: [] for system in {*SYSTEMS, *row.systems}},
        {},
        skipped={
            system: why for system, why in row.not_measured.items() if system not in row.systems
        },
    )
    for run in range(runs):
        for system in row.systems:
            if system in result.failures or system in result.not_served or system in result.skipped:
                continue
            ticks = machine_ticks()
            try:
                figures = measure_once(row, system, run, work_dir, warmups)
            except NotServed as refused:
                result.not_served[system] = str(refused)
                print(f"[{row.name}] {system}: {refused}", file=sys.stderr)
                continue
            except Skipped as why:
                result.skipped[system] = str(why)
                print(f"[{row.name}] {system} skipped: {why}", file=sys.stderr)
                continue
            except (BenchError, BrokerStartError) as error:
                result.failures[system] = str(error)
                print(f"[{row.name}] run {run + 1}: {system} FAILED: {error}", file=sys.stderr)
                continue
            result.runs[system].append(figures)
            shown = ", ".join(f"{key} {value:,.2f}" for key, value in figures.items())
            # The hypervisor's share of the machine during the run (start to stop): printed,
            # not tabled, so that a reader can tell a noisy run from a slow system.
            stolen = steal_share(ticks, machine_ticks())
            print(
                f"[{row.name}] run {run + 1}/{runs} {system}: {shown} (steal {stolen:.0%})",
                file=sys.stderr,
            )
    return result
