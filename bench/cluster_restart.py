"""How long a big cluster takes to be whole again after a full restart.
`python -m bench.cluster_restart`

A controller and 3 brokers as `minibroker dev` runs them (Kafka's default timeouts), 100 topics
of 10 partitions with 3 replicas each (1,000 partitions), a few records in each. Every process
is stopped cleanly (SIGTERM: brokers side by side, then the controller), then all are started
again on the same data. The clock runs from the relaunch until every partition, as Metadata
from every broker shows it, has its full replica set in the ISR and is led by its preferred
(first) replica, so each broker leads its share. It also prints when the brokers first
answered and when the ISRs were first full, and how leadership was spread then.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from minibroker.tools.launcher import Cluster, request_metadata

TOPICS = 100
PARTITIONS_PER_TOPIC = 10
REPLICATION_FACTOR = 3
BROKERS = 3
RECORDS_PER_PARTITION = 10
TIMEOUT_S = 600.0
POLL_S = 0.1


def _create_topics(cluster: Cluster, topics: int, partitions: int) -> list[str]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    names = [f"restart-{index:03d}" for index in range(topics)]
    futures = admin.create_topics(
        [NewTopic(name, partitions, REPLICATION_FACTOR) for name in names],
        request_timeout=120,
        operation_timeout=120,
    )
    for future in futures.values():
        future.result(180)
    return names


def _produce(cluster: Cluster, names: list[str], partitions: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20})
    for name in names:
        for partition in range(partitions):
            for number in range(RECORDS_PER_PARTITION):
                producer.produce(name, value=b"x%d" % number, partition=partition)
        producer.poll(0)
    assert producer.flush(120) == 0, "records still undelivered after 120 s"


def _views(cluster: Cluster):
    """Each broker's Metadata partitions (topic, index) -> (leader, replicas, isr); None for a
    broker that does not answer yet."""
    return views(cluster.brokers.values())


def views(nodes, timeout: float = 10.0):
    """`_views` for any nodes with a `node_id` and a `port` (minibroker's brokers, Apache
    Kafka's nodes): node id -> {(topic, index): (leader, replicas, isr)}, or None."""
    found = {}
    for node in nodes:
        try:
            response = request_metadata(node.port, timeout=timeout)
        except OSError:
            found[node.node_id] = None
            continue
        found[node.node_id] = {
            (topic.name, p.partition_index): (
                int(p.leader_id),
                tuple(int(n) for n in p.replica_nodes),
                frozenset(int(n) for n in p.isr_nodes),
            )
            for topic in response.topics
            for p in topic.partitions
        }
    return found


def _state(views, expected: int) -> tuple[bool, bool, Counter, str]:
    """(every partition led and its ISR full everywhere, every leader preferred everywhere,
    leaders by broker, a progress line: how many partitions each broker still shows
    under-replicated (or leaderless) or led by another than their preferred replica)."""
    if any(view is None or len(view) < expected for view in views.values()):
        answered = {node: len(view) if view else None for node, view in views.items()}
        return False, False, Counter(), f"partitions known by broker: {answered}"
    under = {
        node: sum(
            leader < 0 or isr != frozenset(replicas) for leader, replicas, isr in view.values()
        )
        for node, view in views.items()
    }
    elsewhere = {
        node: sum(leader != replicas[0] for leader, replicas, _ in view.values())
        for node, view in views.items()
    }
    leaders = Counter(leader for leader, _, _ in next(iter(views.values())).values())
    line = f"under-replicated by broker {under}, not led by the preferred replica {elsewhere}"
    return not any(under.values()), not any(elsewhere.values()), leaders, line


def wait_whole(
    read_views,
    expected: int,
    started: float,
    deadline: float,
    preferred: bool = True,
    poll_s: float = POLL_S,
) -> dict[str, float]:
    """Poll `read_views()` (as `views` answers) until every partition has its full replica set
    in the ISR on every broker (`full_isr_s`) and, with `preferred`, is led by its preferred
    replica (`whole_s`), printing progress; seconds since `started`. Without `preferred` it
    returns at full ISRs, with `whole_s` only if every leader was the preferred one by then."""
    figures: dict[str, float] = {}
    last_line = ""
    while True:
        full, on_preferred, leaders, line = _state(read_views(), expected)
        now = time.monotonic() - started
        if line != last_line:
            print(f"{now:6.1f} s: {line}", flush=True)
            last_line = line
        if full and "full_isr_s" not in figures:
            figures["full_isr_s"] = now
            print(f"ISRs full after {now:.1f} s; leaders by broker then: {dict(leaders)}")
        if full and on_preferred:
            figures["whole_s"] = now
            print(f"leaders by broker at the end: {dict(leaders)}")
            return figures
        if full and not preferred:
            return figures
        if time.monotonic() > deadline:
            raise TimeoutError(f"not whole in time: leaders {dict(leaders)}")
        time.sleep(poll_s)


def measure(work_dir: Path, topics: int, partitions: int) -> dict[str, float]:
    cluster = Cluster.start(
        work_dir, brokers=BROKERS, overrides={"default.replication.factor": REPLICATION_FACTOR}
    )
    try:
        names = _create_topics(cluster, topics, partitions)
        _produce(cluster, names, partitions)
        expected = topics * partitions
        deadline = time.monotonic() + TIMEOUT_S
        while _state(_views(cluster), expected)[:2] != (True, True):
            if time.monotonic() > deadline:
                raise TimeoutError("the cluster never became whole before the restart")
            time.sleep(0.5)
        cluster.stop()

        started = time.monotonic()
        cluster.controller._launch()
        for broker in cluster.brokers.values():
            broker._launch()
        cluster.wait_ready(TIMEOUT_S)
        figures = {"answering_s": time.monotonic() - started}
        figures.update(wait_whole(lambda: _views(cluster), expected, started, started + TIMEOUT_S))
        return figures
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_restart")
    parser.add_argument("--topics", type=int, default=TOPICS)
    parser.add_argument("--partitions", type=int, default=PARTITIONS_PER_TOPIC)
    parser.add_argument("--keep", action="store_true", help="keep the data and node logs")
    args = parser.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="cluster-restart-"))
    figures = measure(work_dir, args.topics, args.partitions)
    print(
        f"{args.topics * args.partitions} partitions, RF {REPLICATION_FACTOR}, {BROKERS} brokers:"
        f" answering after {figures['answering_s']:.1f} s, ISRs full after"
        f" {figures['full_isr_s']:.1f} s, whole (full ISRs, preferred leaders) after"
        f" {figures['whole_s']:.1f} s"
    )
    print(f"node logs under {work_dir}")


if __name__ == "__main__":
    main()
