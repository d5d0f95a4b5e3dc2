"""Time to a usable cluster: what an application's test suite waits for before its first test.

Measured from nothing (no process, no data) until a confluent-kafka producer's record to a
topic created after the start is acknowledged with acks=all, the topic replicated on every
broker: the start, CreateTopics and the first produce, as a test using a fixture pays them.
Also the part of it until the cluster answers at all ("ready": every broker lists every
broker).

- minibroker: `minibroker.testing.Cluster`, exactly what the pytest fixtures start (one node
  that is its own controller, or a controller and N brokers, every listener behind the
  fixture's proxy), its nodes forked from the launcher's fork server. The fork server is
  started once per process, as once per test session (about one CPU second: it imports the
  broker), before the clock starts.
- mock: librdkafka's mock cluster in a `bench.mock_host` process (a Python process that loads
  librdkafka and creates the mock cluster in it).
- kafka: Apache Kafka (bench.kafka_ref: `kafka-storage.sh format` per node, then the nodes,
  KRaft, combined broker+controller), when java/fetch.sh has resolved its jars; skipped
  otherwise.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.targets import KAFKA, MINIBROKER, MOCK, BenchError, Mock, Skipped

__all__ = ["KAFKA", "Skipped", "time_to_usable"]

TOPIC = "first"
PRODUCE_TIMEOUT = 60.0


def _produce_once(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    errors: list = []
    producer.produce(TOPIC, b"first", on_delivery=lambda error, message: errors.append(error))
    producer.flush(PRODUCE_TIMEOUT)
    if errors != [None]:
        raise BenchError(f"the first produce failed: {errors or 'no delivery report'}")


def _create_with_admin(bootstrap: str, brokers: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, brokers)], request_timeout=PRODUCE_TIMEOUT)[
        TOPIC
    ].result()


def time_to_usable(system: str, brokers: int, work_dir: Path) -> dict[str, float]:
    """{"ready_s", "usable_s"} for one fresh start of `system` with `brokers` brokers."""
    base = Path(tempfile.mkdtemp(prefix=f"startup-{system}-", dir=work_dir))
    try:
        if system == MINIBROKER:
            from minibroker.testing import Cluster
            from minibroker.tools.forkserver import fork_server

            # Once per test session, not per cluster: its imports done before the clock starts.
            fork_server().wait_ready()
            started = time.monotonic()
            with Cluster(brokers=brokers, data_dir=base) as cluster:
                ready = time.monotonic() - started
                cluster.create_topic(TOPIC, replication_factor=brokers)
                _produce_once(cluster.bootstrap_servers)
                usable = time.monotonic() - started
        elif system == MOCK:
            started = time.monotonic()
            mock = Mock(brokers, base)
            try:
                ready = time.monotonic() - started
                mock.create_topic(TOPIC, 1, brokers, {})
                _produce_once(mock.bootstrap)
                usable = time.monotonic() - started
            finally:
                mock.close()
        elif system == KAFKA:
            from bench.kafka_ref import KafkaCluster, missing_reason

            reason = missing_reason("kafka")
            if reason is not None:
                raise Skipped(reason)
            started = time.monotonic()
            kafka = KafkaCluster.start(base, brokers)
            try:
                ready = time.monotonic() - started
                _create_with_admin(kafka.bootstrap, brokers)
                _produce_once(kafka.bootstrap)
                usable = time.monotonic() - started
            finally:
                kafka.stop()
        else:
            raise ValueError(system)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {"ready_s": ready, "usable_s": usable}


def profile_minibroker(brokers: int) -> None:
    """Where a minibroker start goes: the launcher's phases and one node's import time."""
    import subprocess
    import sys

    from minibroker.testing import Cluster

    started = time.monotonic()
    with Cluster(brokers=brokers):
        ready = time.monotonic() - started
    imports = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import minibroker.node.server"],
        capture_output=True,
        text=True,
    ).stderr.splitlines()
    heaviest = sorted(
        (line for line in imports if line.startswith("import time:") and "|" in line),
        key=lambda line: int(line.split("|")[1]),
        reverse=True,
    )[:8]
    print(f"{brokers} broker(s) ready in {ready:.2f}s; heaviest imports of one node (us):")
    print("\n".join(heaviest))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Time to a usable cluster, once per system.")
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="where minibroker's start goes")
    arguments = parser.parse_args()
    if arguments.profile:
        profile_minibroker(arguments.brokers)
    else:
        with tempfile.TemporaryDirectory() as work:
            for each in (MINIBROKER, MOCK, KAFKA):
                try:
                    print(each, time_to_usable(each, arguments.brokers, Path(work)))
                except Skipped as why:
                    print(each, "skipped:", why)
