"""Issue 38's bench row: the table's lag behind the log at 10 MB/s of produce, and produce
throughput and p99 latency with translation on against off, in one run:
`python -m bench.iceberg_produce`

One broker (a process of its own, its embedded SQL catalog on SQLite in a temporary directory,
``metrics.port`` scraped), and for each of ``off`` (``iceberg.mode=disabled``) and ``on``
(``iceberg.mode=key_value``, ``iceberg.target.lag.ms`` as given) a topic of 3 partitions:

1. **paced**: a confluent-kafka producer in this process (acks=1, linger.ms=5, as
   bench.latency_producer) sends ``--rate-mb`` MB/s of ``--size``-byte records for
   ``--seconds``; each record's produce latency is the time from ``produce()`` to its delivery
   report (the send time is in the value). With translation on, the broker's
   ``minibroker_iceberg_lag_records`` and ``minibroker_iceberg_lag_seconds`` are sampled every
   half second meanwhile (their maximum and mean), and then the time until the table holds
   every offset of the topic (its snapshot summary's) after the last acknowledgement;
2. **burst**: ``--burst`` records of the same size as fast as the broker acknowledges them
   (records/s from the first send to the last acknowledgement), the writer translating them
   meanwhile when on.

Meanwhile, through the paced phase of each mode, a second producer (a thread of its own, its
own confluent-kafka client) sends ``--other-rate-mb`` MB/s to a topic of its own that is never
translated (``other-off``, ``other-on``, ``iceberg.mode=disabled``): its produce p50/p99 with
translation on against off is what the writer costs the broker's *other* topics (issue 38: the
writer must not stall the broker).

For each paced phase the bench also prints the slowest record (its latency, and when it was
sent) and the broker's own event-loop stalls over 100 ms (``minibroker_event_loop_stall_seconds``:
busy, the loop's thread ran code; waiting, it was blocked or not scheduled, as when a thread of
the broker holds the interpreter's lock), so a client-side delay can be told from the broker's.

The first ``--warmup`` seconds of the paced phase are left out of the percentiles. The two
modes run one after the other on the same broker, off first; the figures of a loaded machine
vary between runs more than between neighbouring modes of one run, so the load average is
printed beside them. Kafka has no Iceberg topics: nothing to compare with.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import re
import struct
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.iceberg_failover import _catalog, table_next_offsets
from minibroker.tools.launcher import BrokerProcess, free_port

PARTITIONS = 3
MB = 1_000_000
ONE_BROKER = {
    "offsets.topic.replication.factor": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "transaction.state.log.num.partitions": 1,
}
SAMPLE_S = 0.5
TICK_S = 0.0005
SAMPLE_LINE = re.compile(r"^(\w+)\{([^}]*)\}\s+(\S+)$")


@dataclass
class ModeResult:
    mode: str
    sent: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    p999_ms: float = 0.0
    paced_mb_per_s: float = 0.0
    burst_records_per_s: float = 0.0
    burst_mb_per_s: float = 0.0
    lag_records_max: float = 0.0
    lag_records_mean: float = 0.0
    lag_seconds_max: float = 0.0
    catch_up_s: float | None = None
    # The slowest record's latency and when it was sent (seconds into the paced phase): one
    # stall, or many.
    worst_ms: float = 0.0
    worst_at_s: float = 0.0
    other_worst_ms: float = 0.0
    other_worst_at_s: float = 0.0
    other_sent: int = 0
    # The broker's event-loop stalls over 100 ms during the paced phase, by kind: (count,
    # seconds stalled in all, stalls of every size).
    loop_stalls: dict[str, tuple[float, float]] = field(default_factory=dict)
    other_p50_ms: float = 0.0
    other_p99_ms: float = 0.0
    other_p999_ms: float = 0.0
    loadavg: list[str] = field(default_factory=list)


def _scrape(port: int, topic: str) -> tuple[float, float]:
    """(sum over partitions of minibroker_iceberg_lag_records, minibroker_iceberg_lag_seconds)
    for ``topic`` from the broker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    records = seconds = 0.0
    for line in text.splitlines():
        found = SAMPLE_LINE.match(line)
        if found is None or f'topic="{topic}"' not in found.group(2):
            continue
        if found.group(1) == "minibroker_iceberg_lag_records":
            records += float(found.group(3))
        elif found.group(1) == "minibroker_iceberg_lag_seconds":
            seconds = max(seconds, float(found.group(3)))
    return records, seconds


def _stalls(port: int) -> dict[str, tuple[float, float]]:
    """The broker's event-loop stalls so far (minibroker_event_loop_stall_seconds), by kind
    (busy: its thread ran code; waiting: a blocking call, or not scheduled): (how many took
    longer than 100 ms, their total seconds of all sizes)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    counts: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        found = SAMPLE_LINE.match(line)
        if found is None or not found.group(1).startswith("minibroker_event_loop_stall_seconds"):
            continue
        labels = dict(part.split("=", 1) for part in found.group(2).split(","))
        kind = labels.get("kind", '""').strip('"')
        entry = counts.setdefault(kind, {})
        if found.group(1).endswith("_bucket"):
            entry[labels["le"].strip('"')] = float(found.group(3))
        elif found.group(1).endswith("_sum"):
            entry["sum"] = float(found.group(3))
    return {
        kind: (entry.get("+Inf", 0.0) - entry.get("0.1", 0.0), entry.get("sum", 0.0))
        for kind, entry in counts.items()
    }


def _percentile(ordered: list[int], fraction: float) -> float:
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)] / 1e6


def _loadavg() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


class OtherTopic:
    """The untranslated topic's paced producer, in a thread of its own for the paced phase."""

    def __init__(self, bootstrap: str, topic: str, args: argparse.Namespace) -> None:
        self.topic = topic
        self.rate = args.other_rate_mb * MB / args.size
        self.padding = b"x" * (args.size - 8)
        self.latencies: list[int] = []
        self.worst = [0, 0]
        self.started = 0
        self.errors: list[str] = []
        self.sent = 0
        self.measure_from = 0
        self.stop = threading.Event()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "1",
                "linger.ms": 5,
                "queue.buffering.max.messages": 1_000_000,
                "queue.buffering.max.kbytes": 2_000_000,
            }
        )
        self.producer.list_topics(topic, timeout=10)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error, message) -> None:
        now = time.perf_counter_ns()
        if error is not None:
            self.errors.append(str(error))
            return
        (sent,) = struct.unpack_from(">q", message.value())
        if sent >= self.measure_from:
            self.latencies.append(now - sent)
            if now - sent > self.worst[0]:
                self.worst = [now - sent, sent]

    def _run(self) -> None:
        started = self.started = time.perf_counter_ns()
        while not self.stop.is_set():
            due = int((time.perf_counter_ns() - started) / 1e9 * self.rate) + 1
            while self.sent < due:
                value = struct.pack(">q", time.perf_counter_ns()) + self.padding
                self.producer.produce(
                    self.topic,
                    value=value,
                    partition=self.sent % PARTITIONS,
                    on_delivery=self._delivered,
                )
                self.sent += 1
            self.producer.poll(0)
            time.sleep(TICK_S)

    def start(self, measure_from: int) -> None:
        self.measure_from = measure_from
        self.thread.start()

    def finish(self, result: ModeResult) -> None:
        self.stop.set()
        self.thread.join(30)
        assert self.producer.flush(60) == 0, "the other topic's records not acknowledged"
        assert not self.errors, self.errors[:5]
        ordered = sorted(self.latencies)
        result.other_sent = self.sent
        result.other_p50_ms = _percentile(ordered, 0.5)
        result.other_p99_ms = _percentile(ordered, 0.99)
        result.other_p999_ms = _percentile(ordered, 0.999)
        result.other_worst_ms = self.worst[0] / 1e6
        result.other_worst_at_s = (self.worst[1] - self.started) / 1e9


def run_mode(
    bootstrap: str,
    metrics_port: int,
    catalog_uri: str,
    mode: str,
    args: argparse.Namespace,
) -> ModeResult:
    topic = f"row-{mode}"
    configs = {"iceberg.mode": "key_value" if mode == "on" else "disabled"}
    if mode == "on":
        configs["iceberg.target.lag.ms"] = str(args.target_lag_ms)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=configs)])[topic].result(30)
    other_topic = f"other-{mode}"
    admin.create_topics(
        [NewTopic(other_topic, PARTITIONS, 1, config={"iceberg.mode": "disabled"})]
    )[other_topic].result(30)
    other = OtherTopic(bootstrap, other_topic, args)
    result = ModeResult(mode, loadavg=_loadavg())
    latencies: list[int] = []
    errors: list[str] = []
    ends: dict[int, int] = {}
    measure_from = [0]
    worst = [0, 0]

    def delivered(error, message) -> None:
        now = time.perf_counter_ns()
        if error is not None:
            errors.append(str(error))
            return
        ends[message.partition()] = max(ends.get(message.partition(), 0), message.offset() + 1)
        (sent,) = struct.unpack_from(">q", message.value())
        if sent >= measure_from[0]:
            latencies.append(now - sent)
            if now - sent > worst[0]:
                worst[:] = [now - sent, sent]

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
        }
    )
    producer.list_topics(topic, timeout=10)
    padding = b"x" * (args.size - 8)

    samples: list[tuple[float, float]] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(SAMPLE_S):
            with contextlib.suppress(OSError):
                samples.append(_scrape(metrics_port, topic))

    sampler = threading.Thread(target=sample, daemon=True)
    if mode == "on":
        sampler.start()
    rate = args.rate_mb * MB / args.size
    started = time.perf_counter_ns()
    measure_from[0] = started + int(args.warmup * 1e9)
    stalls_before = _stalls(metrics_port)
    other.start(measure_from[0])
    count = 0
    total = int(rate * args.seconds)
    while count < total:
        due = min(total, int((time.perf_counter_ns() - started) / 1e9 * rate) + 1)
        while count < due:
            value = struct.pack(">q", time.perf_counter_ns()) + padding
            producer.produce(
                topic, value=value, partition=count % PARTITIONS, on_delivery=delivered
            )
            count += 1
        producer.poll(0)
        time.sleep(TICK_S)
    assert producer.flush(60) == 0, "paced records not acknowledged"
    paced_s = (time.perf_counter_ns() - started) / 1e9
    other.finish(result)
    stalls_after = _stalls(metrics_port)
    result.loop_stalls = {
        kind: (
            count - stalls_before.get(kind, (0.0, 0.0))[0],
            seconds - stalls_before.get(kind, (0.0, 0.0))[1],
        )
        for kind, (count, seconds) in stalls_after.items()
    }
    acked_at = time.monotonic()
    assert not errors, errors[:5]
    result.sent = count
    result.paced_mb_per_s = count * args.size / paced_s / MB
    ordered = sorted(latencies)
    result.p50_ms = _percentile(ordered, 0.5)
    result.p99_ms = _percentile(ordered, 0.99)
    result.p999_ms = _percentile(ordered, 0.999)
    result.worst_ms = worst[0] / 1e6
    result.worst_at_s = (worst[1] - started) / 1e9
    if mode == "on":
        catalog = _catalog(catalog_uri)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            held = table_next_offsets(catalog, topic)
            if all(held.get(p, 0) >= end for p, end in ends.items()):
                result.catch_up_s = time.monotonic() - acked_at
                break
            time.sleep(0.1)
        sampling.set()
        sampler.join(10)
        if samples:
            result.lag_records_max = max(r for r, _ in samples)
            result.lag_records_mean = sum(r for r, _ in samples) / len(samples)
            result.lag_seconds_max = max(s for _, s in samples)

    # The burst: as fast as acknowledged, translated meanwhile when on.
    measure_from[0] = 1 << 62  # no latencies
    started = time.perf_counter_ns()
    for number in range(args.burst):
        value = struct.pack(">q", 0) + padding
        while True:
            try:
                producer.produce(
                    topic, value=value, partition=number % PARTITIONS, on_delivery=delivered
                )
                break
            except BufferError:
                producer.poll(0.01)
        if number % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0, "burst records not acknowledged"
    assert not errors, errors[:5]
    burst_s = (time.perf_counter_ns() - started) / 1e9
    result.burst_records_per_s = args.burst / burst_s
    result.burst_mb_per_s = args.burst * args.size / burst_s / MB
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.iceberg_produce")
    parser.add_argument("--rate-mb", type=float, default=10.0, help="paced MB/s")
    parser.add_argument("--size", type=int, default=1024, help="bytes per record value")
    parser.add_argument("--seconds", type=float, default=20.0, help="of the paced phase")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--burst", type=int, default=100_000, help="records")
    parser.add_argument("--target-lag-ms", type=int, default=1000)
    parser.add_argument(
        "--other-rate-mb", type=float, default=1.0, help="paced MB/s to the untranslated topic"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="iceberg-produce-") as directory:
        root = Path(directory)
        (root / "iceberg").mkdir()
        catalog_uri = f"sqlite:///{root / 'iceberg' / 'catalog.db'}"
        metrics_port = free_port()
        broker = BrokerProcess.start(
            node_id=1,
            log_dir=root / "node" / "data",
            overrides={
                **ONE_BROKER,
                "metrics.port": metrics_port,
                "iceberg.catalog.uri": catalog_uri,
                "iceberg.catalog.warehouse": (root / "iceberg" / "warehouse").as_uri(),
            },
        )
        try:
            broker.wait_ready(60)
            results = [
                run_mode(broker.bootstrap, metrics_port, catalog_uri, mode, args)
                for mode in ("off", "on")
            ]
        finally:
            broker.stop()
    print(
        f"one broker, {PARTITIONS} partitions, {args.size}-byte records, acks=1, linger.ms=5;"
        f" paced {args.rate_mb:g} MB/s for {args.seconds:g} s (first {args.warmup:g} s left"
        f" out), then a burst of {args.burst:,}; iceberg.target.lag.ms={args.target_lag_ms};"
        f" meanwhile {args.other_rate_mb:g} MB/s paced to an untranslated topic"
    )
    for r in results:
        line = (
            f"translation {r.mode:3}: produce p50 {r.p50_ms:.1f} ms, p99 {r.p99_ms:.1f} ms,"
            f" p99.9 {r.p999_ms:.1f} ms at {r.paced_mb_per_s:.2f} MB/s ({r.sent:,} records);"
            f" burst {r.burst_records_per_s:,.0f} records/s ({r.burst_mb_per_s:.1f} MB/s);"
            f" untranslated topic meanwhile: p50 {r.other_p50_ms:.1f} ms, p99"
            f" {r.other_p99_ms:.1f} ms, p99.9 {r.other_p999_ms:.1f} ms ({r.other_sent:,} records);"
            f" slowest {r.worst_ms:.0f} ms sent at {r.worst_at_s:.1f} s (untranslated"
            f" {r.other_worst_ms:.0f} ms at {r.other_worst_at_s:.1f} s)"
        )
        if r.mode == "on":
            catch_up = "not within 300 s" if r.catch_up_s is None else f"{r.catch_up_s:.1f} s"
            line += (
                f"; table lag max {r.lag_records_max:,.0f} records (mean"
                f" {r.lag_records_mean:,.0f}), max {r.lag_seconds_max:.1f} s; table caught up"
                f" {catch_up} after the last paced acknowledgement"
            )
        stalls = ", ".join(
            f"{kind} {count:.0f} ({seconds:.2f} s in all)"
            for kind, (count, seconds) in sorted(r.loop_stalls.items())
        )
        line += f"; broker loop stalls over 100 ms: {stalls or 'none'}"
        print(line + f" [load average at start {' '.join(r.loadavg)}]")
    print(f"load average at the end: {' '.join(_loadavg())}")


if __name__ == "__main__":
    main()
