"""A throttled reassignment and an acks=all producer on the same brokers:
`python -m bench.throttle_producer`

Issue 39's check of replication throttles (KIP-73): a throttled reassignment's catch-up rate
within 15% of the throttle, while an acks=all producer's throughput stays within 20% of its
rate without the reassignment. tests/java/test_replication_throttle.py checks the catch-up
loosely (between a half and three times the throttle, on a busy CI machine) and that the
producer keeps being acknowledged; this command measures both halves.

Three brokers (a controller of their own). Topic `live` (one partition on brokers [1, 2],
min.insync.replicas=2) takes an acks=all confluent-kafka producer's records, back to back
(RECORD bytes each, as many in flight as librdkafka allows), for the whole run. Topics
`moving-N` and `moving-free` (one partition each on [1, 2], --data MiB each, written first)
gain a replica on broker 3, so broker 1 leads both the copy and the producer's partition and
broker 2 follows both. The throttle is set as kafka-reassign-partitions --throttle sets it:
leader.replication.throttled.rate and follower.replication.throttled.rate on brokers 1-3,
leader.replication.throttled.replicas=0:1,0:2 and follower.replication.throttled.replicas=0:3
on the moving topic; the move itself is kafka-python's AlterPartitionReassignments. Each of
--rounds rounds is a phase of the producer alone (--data / --rate seconds), then a throttled
copy, which lasts until broker 3's copy (the sizes of its .log files) holds every byte of the
leader's; a last phase alone closes them, and an unthrottled copy of `moving-free` ends the
run (what the throttle spares the producer; that copy is short, so its figure is rough).

For each round it prints the catch-up rate (bytes over the seconds from the first byte on
broker 3 to the last, and over the second half of the bytes) against the throttle, and the
producer's acknowledged bytes per second during the copy against the mean of the phases alone
before and after it (the machine's load drifts); then the medians and the load average.

The brokers measure the throttle over --windows windows of 1 s (default 2, as the test does).
With Kafka's 11, a follower takes about ten seconds' worth of the throttle at once each time
the windows empty, so only a copy of many such periods (a minute or more) shows the rate the
throttle holds; the second-half figure means little then.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition

from minibroker.tools.launcher import Cluster

LIVE, MOVING, FREE = "live", "moving", "moving-free"
RECORD = 16 * 1024
MIB = 1024 * 1024
COPY_TIMEOUT_S = 300.0
SAMPLE_S = 0.05


class AcksAllProducer(threading.Thread):
    """Records to `live` partition 0, back to back; the time of each acknowledgement."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        self.stop = threading.Event()
        self.acked: list[float] = []
        self.failed = 0
        self.payload = os.urandom(RECORD)

    def _delivered(self, error, _message) -> None:
        if error is None:
            self.acked.append(time.monotonic())
        else:
            self.failed += 1

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.producer.produce(LIVE, self.payload, partition=0, on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.01)
                continue
            self.producer.poll(0)
        self.producer.flush(60)

    def rate(self, start: float, end: float) -> float:
        """Acknowledged bytes per second between two instants."""
        count = sum(1 for t in self.acked if start <= t < end)
        return count * RECORD / (end - start)


def _fill(bootstrap: str, topic: str, size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    payload = os.urandom(RECORD)
    for _ in range(size // RECORD):
        while True:
            try:
                producer.produce(topic, payload, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit(f"could not fill {topic}")


def _log_bytes(cluster: Cluster, node: int, topic: str) -> int:
    directory = cluster.brokers[node].log_dir / f"{topic}-0"
    if not directory.exists():
        return 0
    total = 0
    for path in directory.glob("*.log"):
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


def _set(admin: AdminClient, kind, name: str, entries: dict[str, str]) -> None:
    resource = ConfigResource(
        kind,
        name,
        incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            for key, value in entries.items()
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def _copy(cluster: Cluster, legacy: KafkaAdminClient, topic: str) -> list[tuple[float, int]]:
    """Move `topic` partition 0 from [1, 2] to [1, 2, 3]; broker 3's copy sampled until it
    holds every byte of the leader's."""
    target = _log_bytes(cluster, 1, topic)
    answer = legacy.alter_partition_reassignments({TopicPartition(topic, 0): [1, 2, 3]})
    if answer != {TopicPartition(topic, 0): None}:
        raise SystemExit(f"reassignment refused: {answer}")
    samples = [(time.monotonic(), _log_bytes(cluster, 3, topic))]
    deadline = samples[0][0] + COPY_TIMEOUT_S
    while samples[-1][1] < target:
        if time.monotonic() > deadline:
            raise SystemExit(f"broker 3's copy of {topic} not done in {COPY_TIMEOUT_S} s")
        time.sleep(SAMPLE_S)
        samples.append((time.monotonic(), _log_bytes(cluster, 3, topic)))
    return samples


def _catch_up(samples: list[tuple[float, int]]) -> tuple[float, float, float]:
    """(seconds from the first byte to the last, the mean rate over them, the rate over the
    second half of the bytes, after the first windows' burst)."""
    total = samples[-1][1]
    first = next(t for t, size in samples if size > 0)
    end = samples[-1][0]
    half, half_size = next((t, size) for t, size in samples if size >= total / 2)
    steady = (total - half_size) / (end - half) if end > half else float("nan")
    return end - first, total / (end - first), steady


def run(rate: int, data: int, windows: int, rounds: int, base: Path) -> None:
    load_before = os.getloadavg()
    cluster = Cluster.start(
        base,
        brokers=3,
        overrides={
            "replication.quota.window.num": windows,
            "replication.quota.window.size.seconds": 1,
            "group.initial.rebalance.delay.ms": 0,
        },
    )
    moving = [f"{MOVING}-{n}" for n in range(rounds)]
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topics = [
            NewTopic(LIVE, num_partitions=1, replica_assignment=[[1, 2]],
                     config={"min.insync.replicas": "2"}),
            *(NewTopic(t, num_partitions=1, replica_assignment=[[1, 2]]) for t in [*moving, FREE]),
        ]  # fmt: skip
        for future in admin.create_topics(topics).values():
            future.result(timeout=30)
        for topic in [*moving, FREE]:
            _fill(cluster.bootstrap, topic, data)
        for node in (1, 2, 3):
            _set(admin, ConfigResource.Type.BROKER, str(node), {
                "leader.replication.throttled.rate": str(rate),
                "follower.replication.throttled.rate": str(rate),
            })  # fmt: skip
        legacy = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
        phase_s = data / rate
        producer = AcksAllProducer(cluster.bootstrap)
        producer.start()
        alone: list[tuple[float, float]] = []
        copies: list[tuple[float, float, list[tuple[float, int]]]] = []
        try:
            time.sleep(2.0)  # the producer's connections and first batches, untimed
            for topic in moving:
                started = time.monotonic()
                time.sleep(phase_s)
                alone.append((started, time.monotonic()))
                _set(admin, ConfigResource.Type.TOPIC, topic, {
                    "leader.replication.throttled.replicas": "0:1,0:2",
                    "follower.replication.throttled.replicas": "0:3",
                })  # fmt: skip
                started = time.monotonic()
                samples = _copy(cluster, legacy, topic)
                copies.append((started, time.monotonic(), samples))
            started = time.monotonic()
            time.sleep(phase_s)
            alone.append((started, time.monotonic()))
            started = time.monotonic()
            free = _copy(cluster, legacy, FREE)
            free_phase = (started, time.monotonic())
        finally:
            producer.stop.set()
            producer.join(90)
            legacy.close()
        load_after = os.getloadavg()

        print(f"throttle {rate / MIB:.2f} MiB/s over {windows} windows of 1 s; "
              f"{data / MIB:.1f} MiB copied to broker 3 in each of {rounds} rounds")  # fmt: skip
        print(f"acks=all producer: {RECORD // 1024} KiB records to {LIVE} (leader 1, "
              f"follower 2, min.insync.replicas=2), back to back")  # fmt: skip
        ratios = []
        for n, (start, end, samples) in enumerate(copies):
            seconds, mean, steady = _catch_up(samples)
            reference = (producer.rate(*alone[n]) + producer.rate(*alone[n + 1])) / 2
            during = producer.rate(start, end)
            ratios.append((mean / rate, steady / rate, during / reference))
            print(
                f"round {n + 1}: catch-up {seconds:.2f} s, {mean / MIB:.2f} MiB/s = "
                f"{mean / rate:.2f} of the throttle (second half {steady / rate:.2f}); "
                f"producer {during / MIB:.2f} MiB/s = {during / reference:.2f} of its "
                f"{reference / MIB:.2f} MiB/s alone (mean of the phases before and after)"
            )
        free_seconds, free_mean, _ = _catch_up(free)
        reference = producer.rate(*alone[-1])
        during = producer.rate(*free_phase)
        print(
            f"unthrottled copy: {free_seconds:.2f} s, {free_mean / MIB:.1f} MiB/s; producer "
            f"{during / MIB:.2f} MiB/s = {during / reference:.2f} of alone before it"
        )
        for label, index in (
            ("catch-up / throttle", 0),
            ("second half / throttle", 1),
            ("producer / alone", 2),
        ):
            values = sorted(r[index] for r in ratios)
            print(
                f"median {label}: {values[len(values) // 2]:.2f} "
                f"(range {values[0]:.2f}-{values[-1]:.2f})"
            )
        print(f"failed deliveries: {producer.failed}")
        print("load average before: " + ", ".join(f"{v:.2f}" for v in load_before)
              + "; after: " + ", ".join(f"{v:.2f}" for v in load_after))  # fmt: skip
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.throttle_producer")
    parser.add_argument("--rate", type=float, default=2.0, help="throttle, MiB/s (default 2)")
    parser.add_argument("--data", type=float, default=16.0, help="MiB to move (default 16)")
    parser.add_argument("--windows", type=int, default=2, help="replication.quota.window.num")
    parser.add_argument("--rounds", type=int, default=3, help="throttled copies (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="throttle-producer-") as base:
        run(int(args.rate * MIB), int(args.data * MIB), args.windows, args.rounds, Path(base))


if __name__ == "__main__":
    main()
