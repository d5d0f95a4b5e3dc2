"""The consumer group protocol (KIP-848) against the classic one, on minibroker and on
librdkafka's mock cluster (which serves ConsumerGroupHeartbeat too), in one run:

- assign: seconds from three consumers' subscribe until every partition of the topic is
  assigned to one of them;
- pause: while records arrive on every partition at a steady pace, a fourth consumer joins;
  the longest gap between two consecutive reads of any partition from its join until the
  group has settled (every member has partitions and 3 s passed). With the classic protocol's
  eager assignors every partition stops for the rebalance; with the consumer protocol only the
  partitions that move should.

    python -m bench.consumer_protocol [--runs N] [--partitions P] [--heartbeat-ms MS]

Consumers run in threads of this process (librdkafka's own threads do the network work), a
producer thread sends one record to each partition every 20 ms. Prints one line per
(system, protocol, run) and the medians; writes nothing. The figures are coarse: consumers
poll every 50 ms, so a gap is known to about that.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from bench.targets import MINIBROKER, MOCK, start

PACE_SECONDS = 0.02
SETTLE_SECONDS = 3.0
TIMEOUT_SECONDS = 60.0


class Member:
    """One consumer polling in a thread; notes when each partition was last read."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str) -> None:
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "latest",
            "enable.partition.eof": False,
        }
        if protocol == "consumer":
            config["group.protocol"] = "consumer"
        else:
            config["session.timeout.ms"] = 10_000  # see bench/group_member.py
        self.consumer = Consumer(config)
        self.consumer.subscribe([topic])
        self.reads: dict[int, list[float]] = {}
        self.assigned: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self.consumer.poll(0.05)
            self.assigned = {tp.partition for tp in self.consumer.assignment()}
            if message is not None and message.error() is None:
                self.reads.setdefault(message.partition(), []).append(time.monotonic())

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.consumer.close()


def _produce(bootstrap: str, topic: str, partitions: int, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    while not stop.is_set():
        for partition in range(partitions):
            producer.produce(topic, b"x", partition=partition)
        producer.poll(0)
        time.sleep(PACE_SECONDS)
    producer.flush(10)


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.01)


def measure(
    system: str, protocol: str, partitions: int, work_dir: Path, heartbeat_ms: int | None
) -> tuple[float, float]:
    overrides = {}
    if system == MINIBROKER and heartbeat_ms is not None:
        overrides["group.consumer.heartbeat.interval.ms"] = str(heartbeat_ms)
    target = start(system, 1, work_dir, overrides)
    members: list[Member] = []
    stop = threading.Event()
    producer = None
    try:
        topic, group = "bench-kip848", f"bench-{protocol}"
        target.create_topic(topic, partitions, 1, {})
        producer = threading.Thread(
            target=_produce, args=(target.bootstrap, topic, partitions, stop), daemon=True
        )
        producer.start()
        began = time.monotonic()
        members = [Member(target.bootstrap, group, topic, protocol) for _ in range(3)]
        _wait(
            lambda: set().union(*(m.assigned for m in members)) == set(range(partitions)),
            "every partition assigned to three members",
        )
        assign_seconds = time.monotonic() - began
        # Everyone reading before the fourth arrives.
        _wait(
            lambda: all(p in m.reads for m in members for p in m.assigned),
            "every assigned partition read",
        )
        joined = time.monotonic()
        members.append(Member(target.bootstrap, group, topic, protocol))
        _wait(lambda: all(m.assigned for m in members), "four members with partitions")
        time.sleep(SETTLE_SECONDS)
        end = time.monotonic()
        reads: dict[int, list[float]] = {}
        for member in members:
            for partition, times in member.reads.items():
                reads.setdefault(partition, []).extend(times)
        longest = 0.0
        for partition in range(partitions):
            times = sorted(t for t in reads.get(partition, []) if t >= joined - 1.0)
            points = [joined, *[t for t in times if t >= joined], end]
            longest = max(longest, max(b - a for a, b in zip(points, points[1:], strict=False)))
        return assign_seconds, longest
    finally:
        stop.set()
        if producer is not None:
            producer.join()
        for member in members:
            member.close()
        target.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument(
        "--heartbeat-ms",
        type=int,
        default=None,
        help="minibroker's group.consumer.heartbeat.interval.ms (default: its 5000)",
    )
    args = parser.parse_args()
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-kip848-") as work:
        for run in range(args.runs):
            for system in (MINIBROKER, MOCK):
                for protocol in ("classic", "consumer"):
                    try:
                        figures = measure(
                            system, protocol, args.partitions, Path(work), args.heartbeat_ms
                        )
                    except Exception as error:  # a failed run is reported, the rest go on
                        print(f"{system} {protocol} run {run + 1}: failed: {error}", flush=True)
                        continue
                    results.setdefault((system, protocol), []).append(figures)
                    print(
                        f"{system} {protocol} run {run + 1}: assign {figures[0]:.2f} s, "
                        f"longest pause while a fourth joins {figures[1]:.2f} s",
                        flush=True,
                    )
    print()
    print(f"{'system':12} {'protocol':9} {'assign (s)':>11} {'pause (s)':>10}")
    for (system, protocol), figures in sorted(results.items()):
        assign = statistics.median(f[0] for f in figures)
        pause = statistics.median(f[1] for f in figures)
        print(f"{system:12} {protocol:9} {assign:11.2f} {pause:10.2f}")
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
