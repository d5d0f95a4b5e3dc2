"""A Metadata answer for every topic, in process (issue 39): `python -m bench.metadata_encode`.

`bench.many_partitions` measured a Metadata v12 request for all topics at 5,000 partitions
taking minibroker 429-479 ms against Kafka 4.4's 13-20 ms, the same 211,849 bytes, and the
profile put the time in kio's pure-Python writer. This times the three steps of that answer
apart, with no broker and no socket, on the picture `bench.many_partitions` builds
(`--partitions` in topics of 100 named many-0000..., RF=3 over brokers 1-3, every ISR full):

- **describe**: the handler's description of every topic (broker/apis/metadata.py's
  ``_topic_entry`` over metadata cache entries), as the broker builds it per request;
- **kio**: that description built into kio's entity and written (``codec.encode_response``,
  the path before protocol/metadata_response.py);
- **hand-written**: ``encode_metadata_response``, the path since.

Each is run `--runs` times (after one untimed run); printed are every run's milliseconds, the
median, the response bytes (the two encoders' bytes are checked equal first) and the load
average before and after. Not part of `python -m bench`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

from minibroker.apis.metadata import _topic_entry
from minibroker.protocol import codec
from minibroker.protocol.metadata_response import encode_metadata_response
from minibroker.protocol.versions import ApiKey
from minibroker.replication.metadata_cache import PartitionMetadata, TopicMetadata

PARTITIONS_PER_TOPIC = 100  # bench.many_partitions' topics
BROKERS = (1, 2, 3)


def cluster(partitions: int) -> list[TopicMetadata]:
    """The metadata cache's topics as bench.many_partitions leaves them: every partition led
    by its first replica, its ISR full."""
    topics = []
    for index in range(partitions // PARTITIONS_PER_TOPIC):
        parts = {}
        for p in range(PARTITIONS_PER_TOPIC):
            replicas = tuple(BROKERS[(p + k) % 3] for k in range(3))
            parts[p] = PartitionMetadata(replicas[0], 1, replicas, replicas, ())
        topics.append(TopicMetadata(f"many-{index:04d}", uuid.uuid4(), parts))
    return topics


def describe(topics: list[TopicMetadata]) -> dict:
    return {
        "brokers": [{"node_id": n, "host": "127.0.0.1", "port": 19090 + n} for n in BROKERS],
        "cluster_id": "bench-metadata-encode-0",
        "controller_id": 1,
        "topics": [_topic_entry(topic) for topic in topics],
    }


def _timed(step, runs: int) -> list[float]:
    step()  # untimed: caches (kio's writers, the encoder's partition layouts) warm
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        step()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--version", type=int, default=12)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    if args.partitions % PARTITIONS_PER_TOPIC:
        raise SystemExit(f"--partitions must be a multiple of {PARTITIONS_PER_TOPIC}")
    load_before = os.getloadavg()
    topics = cluster(args.partitions)
    data = describe(topics)
    expected = codec.encode_response(ApiKey.METADATA, args.version, data)
    if encode_metadata_response(args.version, data) != expected:
        raise SystemExit("the hand-written encoder's bytes differ from kio's")
    steps = {
        "describe": lambda: describe(topics),
        "kio": lambda: codec.encode_response(ApiKey.METADATA, args.version, data),
        "hand-written": lambda: encode_metadata_response(args.version, data),
    }
    print(
        f"Metadata v{args.version}, all topics: {args.partitions} partitions "
        f"({len(topics)} topics, RF=3), {len(expected)} bytes, {args.runs} runs"
    )
    medians = {}
    for name, step in steps.items():
        times = _timed(step, args.runs)
        medians[name] = statistics.median(times)
        runs = ", ".join(f"{t:.1f}" for t in times)
        print(f"  {name:13} median {medians[name]:7.2f} ms  ({runs})")
    print(
        f"  kio / hand-written: {medians['kio'] / medians['hand-written']:.1f}x; "
        f"describe + encode: {medians['describe'] + medians['kio']:.1f} ms before, "
        f"{medians['describe'] + medians['hand-written']:.1f} ms after"
    )
    load_after = os.getloadavg()
    print(
        "  load average "
        + " ".join(f"{x:.2f}" for x in load_before)
        + " before, "
        + " ".join(f"{x:.2f}" for x in load_after)
        + " after"
    )


if __name__ == "__main__":
    main()
