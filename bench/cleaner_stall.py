"""Does the log cleaner stall the broker's clients? `python -m bench.cleaner_stall`

One broker, started with the cleaner off, gets a compacted topic (8 MiB segments) of many
updates of a few thousand keys from a confluent-kafka producer; another client on its own
connection sends ApiVersions, waits for the answer, and again, for a few seconds. The broker
is restarted with the cleaner on, and the client does the same until the cleaner's checkpoint
shows the whole log below the active segment cleaned. It prints the log size before and
after, the time from the restart until then, and the other client's round trips in both
phases (median, 99th percentile, worst).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.creation_stall import _Pinger
from minibroker.storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, read_offset_checkpoint
from minibroker.tools.launcher import BrokerProcess

TOPIC = "compacted"
IDLE_SECONDS = 3.0
CLEAN_TIMEOUT_S = 600.0


def _produce(bootstrap: str, records: int, keys: int, codec: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
    for number in range(records):
        producer.produce(TOPIC, key=b"key-%d" % (number % keys), value=b"v" * 100)
        if number % 10000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def _partition_bytes(node: BrokerProcess) -> int:
    return sum(path.stat().st_size for path in (node.log_dir / f"{TOPIC}-0").glob("*.log"))


def _cleaned_to(node: BrokerProcess) -> int:
    path = node.log_dir / CLEANER_OFFSET_CHECKPOINT
    return read_offset_checkpoint(path).get((TOPIC, 0), -1) if path.exists() else -1


def _active_base(node: BrokerProcess) -> int:
    return max(int(path.stem) for path in (node.log_dir / f"{TOPIC}-0").glob("*.log"))


def _round_trips_while(node: BrokerProcess, action) -> list[float]:
    pinger = _Pinger(node.port)
    pinger.start()
    try:
        action()
    finally:
        pinger.stop.set()
        pinger.join()
    return pinger.round_trips


def _summary(round_trips: list[float]) -> str:
    if not round_trips:
        return "no round trips"
    ordered = sorted(round_trips)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"{len(ordered)} round trips, median {statistics.median(ordered) * 1000:.2f} ms, "
        f"p99 {p99 * 1000:.1f} ms, worst {ordered[-1] * 1000:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cleaner_stall")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=5000)
    parser.add_argument("--codec", default="none", choices=["none", "gzip", "lz4", "zstd"])
    parser.add_argument("--segment-bytes", type=int, default=8 << 20)
    args = parser.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="cleaner-stall-"))
    node = BrokerProcess.start(
        1, work_dir / "node" / "data", overrides={"log.cleaner.enable": "false"}
    )
    node.wait_ready(30)
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    config = {"cleanup.policy": "compact", "segment.bytes": str(args.segment_bytes)}
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)])[TOPIC].result(30)
    _produce(node.bootstrap, args.records, args.keys, args.codec)
    idle = _round_trips_while(node, lambda: time.sleep(IDLE_SECONDS))
    node.stop()
    before_bytes = _partition_bytes(node)
    active_base = _active_base(node)
    if active_base == 0:
        raise SystemExit(
            "nothing to clean: the whole log is the active segment (lower --segment-bytes)"
        )
    node.overrides["log.cleaner.enable"] = "true"
    started = time.monotonic()
    node.restart()
    node.wait_ready(30)

    def until_cleaned() -> None:
        deadline = time.monotonic() + CLEAN_TIMEOUT_S
        for _ in range(int(CLEAN_TIMEOUT_S / 0.01)):
            if _cleaned_to(node) >= active_base:
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        raise RuntimeError(f"the cleaner did not reach offset {active_base} in {CLEAN_TIMEOUT_S} s")

    during = _round_trips_while(node, until_cleaned)
    seconds = time.monotonic() - started
    node.stop()
    print(
        f"{args.records} records x 100 B ({args.codec}), {args.keys} keys: "
        f"{before_bytes / 1e6:.1f} MB cleaned to {_partition_bytes(node) / 1e6:.2f} MB "
        f"{seconds:.1f} s after the restart (startup included)"
    )
    print(f"  another client's ApiVersions, cleaner off: {_summary(idle)}")
    print(f"  another client's ApiVersions while it cleans: {_summary(during)}")
    for line in node.log_tail().splitlines():
        if "[log_cleaner]" in line:
            print("  broker:", line.split("] ", 1)[-1])


if __name__ == "__main__":
    main()
