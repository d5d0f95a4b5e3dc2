"""The idempotent producer through kill -9 of leaders and fencing storms, without Iceberg:
`python -m bench.idempotence_failover --records 1000000 --kills 8 --stalls`

Written to chase the librdkafka fatal error (`_FATAL`) that stopped
`python -m bench.iceberg_failover --records 1000000` after its second kill. A 3-broker cluster
(minibroker.testing's Cluster, on bench.iceberg_failover's short failover timeouts), two plain
topics of 3 partitions with 3 replicas, and one idempotent acks=all confluent-kafka producer
sending ``--records`` records to each, round robin over the partitions, from a thread. While it
sends, ``--kills`` times the leader of a partition (of each topic in turn, never the broker
killed last) is killed with SIGKILL, started again once 500 more records are acknowledged, and
waited for until every replica is back in sync. With ``--stalls`` a second thread stops a node
with SIGSTOP every 1 to 4 s, for 1 to 3 s when it is the controller (70% of the stalls: every
broker misses its heartbeats and is fenced at once, as a loaded machine made the controller do
in the Iceberg run) and 0.3 to 1.4 s for a broker. ``--min-insync-replicas`` sets the topics'.

librdkafka's `eos,msg,protocol,broker` debug goes to ``--debug-log`` (the fatal error's name
and the requests before it); the run counts what in that log tells of the producer's recovery
(ERRSEQ: a request refused as out of order behind a failed one, recovered by an epoch bump;
IMPLICITACK: records acknowledged by a later batch; DUPSEQ; and the fatal ones: sequence
desynchronization, rewound sequence, success when a failure was expected). Then the partition
logs of every broker are walked batch by batch: within a producer epoch each batch must
follow the previous one's last sequence, and a new epoch must start at 0 (a gap would be an
acknowledged batch lost, or one accepted out of order).

Exit status 1 when the producer reported a fatal error or any delivery error, or a log has a
sequence gap. Kafka is not run: this is a search for a fault, not a comparison.
"""

from __future__ import annotations

import argparse
import logging
import random
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import Producer

from minibroker.storage.segment import LogSegment
from minibroker.testing import Cluster

from .iceberg_failover import FAILOVER_OVERRIDES

PARTITIONS = 3
REPLICATION = 3
MAX_QUEUED = 20_000
WAIT_S = 120.0
CONTROLLER = 0
# What the debug log tells of the idempotent producer's recovery (see the module docstring).
MARKERS = {
    "ERRSEQ": "ERRSEQ",
    "IMPLICITACK": "IMPLICITACK",
    "DUPSEQ": "DUPSEQ",
    "desynchronization": "sequence desynchronization",
    "rewound": "rewound sequence",
    "unexpected success": "succeeded when expecting failure",
}


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


class Sender:
    """The idempotent acks=all producer, in a thread: ``records`` records to each topic."""

    def __init__(self, cluster: Cluster, topics: list[str], records: int, debug_log: Path):
        self.topics, self.records = topics, records
        self.acked = 0
        self.errors: list[str] = []
        self.fatal: list[str] = []
        self.undelivered = -1
        logger = logging.getLogger("bench.idempotence_failover.rdkafka")
        handler = logging.FileHandler(debug_log, mode="w")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        self.producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 180_000,
                "retry.backoff.ms": 100,
                "queue.buffering.max.messages": MAX_QUEUED * 5,
                "error_cb": self._on_error,
                "debug": "eos,msg,protocol,broker",
                "logger": logger,
            }
        )
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="idempotent-sender", daemon=True)

    def _on_error(self, error) -> None:
        if error.fatal():
            self.fatal.append(str(error))

    def _on_delivery(self, error, message) -> None:
        if error is not None:
            self.errors.append(f"{message.topic()}-{message.partition()}: {error}")
        else:
            self.acked += 1

    def _run(self) -> None:
        try:
            producer = self.producer
            for number in range(self.records):
                if self.fatal:
                    break
                for topic in self.topics:
                    producer.produce(
                        topic,
                        key=str(number).encode(),
                        value=f"{topic[-1]}-{number:09d}".encode(),
                        partition=number % PARTITIONS,
                        on_delivery=self._on_delivery,
                    )
                if number % 200 == 0:
                    producer.poll(0)
                    while len(producer) > MAX_QUEUED:
                        producer.poll(0.05)
            self.undelivered = producer.flush(240)
        except Exception as error:  # a fatal producer error: said, not hidden in the thread
            self.errors.append(f"{type(error).__name__}: {error}")
        finally:
            self.done.set()


class Stalls:
    """SIGSTOP and SIGCONT of the controller (mostly) and the brokers, in a thread."""

    def __init__(self, cluster: Cluster, seed: int) -> None:
        self.cluster = cluster
        self.random = random.Random(seed)
        self.lock = threading.Lock()  # kills and restarts wait for a stall to end
        self.stop = threading.Event()
        self.count: Counter[int] = Counter()
        self.thread = threading.Thread(target=self._run, name="stalls", daemon=True)

    def _run(self) -> None:
        rng = self.random
        while not self.stop.wait(rng.uniform(1.0, 4.0)):
            nodes = self.cluster.node_ids
            node = CONTROLLER if rng.random() < 0.7 else rng.choice(nodes)
            with self.lock:
                try:
                    self.cluster.pause(node)
                except Exception:  # killed just now: no stall this time
                    continue
                self.count[node] += 1
                time.sleep(rng.uniform(1.0, 3.0) if node == CONTROLLER else rng.uniform(0.3, 1.4))
                self.cluster.resume(node)


def sequence_gaps(data_dir: Path) -> dict[str, list[str]]:
    """Per broker and partition log, the batches that do not follow their producer's
    previous one (see the module docstring); only logs with gaps are listed."""
    found: dict[str, list[str]] = {}
    for directory in sorted(data_dir.glob("broker-*/*-[0-9]*")):
        if not directory.is_dir() or directory.name.startswith("_"):
            continue
        last: dict[int, tuple[int, int]] = {}
        gaps: list[str] = []
        for path in sorted(directory.glob("*.log")):
            segment = LogSegment(
                directory, int(path.stem), index_interval_bytes=4096, max_index_size=10 << 20
            )
            for _position, header in segment.batches():
                if header.producer_id < 0:
                    continue
                previous = last.get(header.producer_id)
                if previous is not None:
                    epoch, sequence = previous
                    expected = sequence + 1 if header.producer_epoch == epoch else 0
                    if header.base_sequence != expected:
                        gaps.append(
                            f"offset {header.base_offset}: epoch {header.producer_epoch}"
                            f" sequence {header.base_sequence}, expected {expected}"
                        )
                last[header.producer_id] = (
                    header.producer_epoch,
                    header.base_sequence + header.records_count - 1,
                )
        if gaps:
            found[f"{directory.parent.name}/{directory.name}"] = gaps
    return found


def run(args: argparse.Namespace, root: Path) -> int:
    properties = {**FAILOVER_OVERRIDES}
    if args.min_insync_replicas:
        properties["min.insync.replicas"] = args.min_insync_replicas
    data_dir = root / "cluster"
    with Cluster(brokers=3, server_properties=properties, data_dir=data_dir) as cluster:
        suffix = uuid.uuid4().hex[:6]
        topics = [f"idem-{suffix}-a", f"idem-{suffix}-b"]
        for topic in topics:
            cluster.create_topic(topic, PARTITIONS, REPLICATION)
        sender = Sender(cluster, topics, args.records, args.debug_log)
        stalls = Stalls(cluster, args.seed)
        started = time.monotonic()
        sender.thread.start()
        if args.stalls:
            stalls.thread.start()
        total = len(topics) * args.records
        killed: list[int] = []
        for number in range(args.kills):
            target = (number + 1) * total // (args.kills + 1)
            _wait(
                lambda t=target: sender.acked >= t or sender.done.is_set(),
                WAIT_S * 5,
                f"{target:,} records acknowledged",
            )
            if sender.done.is_set():
                print("the producer finished (or failed) before kill", number + 1)
                break
            topic = topics[number % len(topics)]
            leaders = [cluster.leader_of(topic, index) for index in range(PARTITIONS)]
            candidates = [n for n in leaders if n not in (None, -1, *killed[-1:])]
            if not candidates:
                continue
            victim = candidates[0]
            before = sender.acked
            with stalls.lock:
                cluster.kill(victim)
            killed.append(victim)
            print(f"killed broker {victim} (a leader of {topic}) at {before:,} acknowledged")
            _wait(
                lambda b=before: sender.acked > b + 500 or sender.done.is_set(),
                WAIT_S,
                "records acknowledged by the new leaders",
            )
            with stalls.lock:
                cluster.restart(victim)
            for name in topics:
                cluster.wait_until_in_sync(name, timeout=WAIT_S)
            print(f"broker {victim} back and in sync at {sender.acked:,} acknowledged")
        sender.thread.join(900)
        stalls.stop.set()
        if stalls.thread.is_alive():
            stalls.thread.join(10)
        elapsed = time.monotonic() - started
        fenced = sum(
            line.count("fenced broker(s)")
            for line in (data_dir / "controller-0.log").read_text(errors="replace").splitlines()
        )
        # The brokers stop cleanly before their logs are read.
    debug = args.debug_log.read_text(errors="replace")
    markers = {name: debug.count(text) for name, text in MARKERS.items()}
    gaps = sequence_gaps(data_dir)
    print(
        f"{sender.acked:,} of {total:,} records acknowledged in {elapsed:.1f} s; kills"
        f" {killed}; stalls {dict(stalls.count)}; brokers fenced {fenced} times"
    )
    print("librdkafka debug log:", ", ".join(f"{k} {v}" for k, v in markers.items()))
    print("fatal:", sender.fatal or "none")
    print("delivery errors:", len(sender.errors), sender.errors[:5])
    print("undelivered at flush:", sender.undelivered)
    print("sequence gaps:", gaps or "none")
    bad = sender.fatal or sender.errors or gaps or sender.undelivered != 0
    return 1 if bad else 0


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.idempotence_failover")
    parser.add_argument("--records", type=int, default=1_000_000, help="per topic")
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--stalls", action="store_true", help="SIGSTOP nodes meanwhile")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-insync-replicas", type=int, default=0, help="0: the default")
    parser.add_argument("--debug-log", type=Path, default=Path("idempotence-failover.log"))
    parser.add_argument("--keep", type=Path, help="keep the cluster's data here")
    args = parser.parse_args()
    if args.keep is not None:
        raise SystemExit(run(args, args.keep))
    with tempfile.TemporaryDirectory(prefix="idempotence-failover-") as directory:
        raise SystemExit(run(args, Path(directory)))


if __name__ == "__main__":
    main()
