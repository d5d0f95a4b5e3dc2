"""Client telemetry (KIP-714) with Kafka 4.4's own tool and Java client, against one minibroker:
``kafka-client-metrics.sh --alter --name NAME --metrics org.apache.kafka.producer. --interval
1000`` creates the subscription, ``--list`` and ``--describe`` show it, and a Java producer
(kafka-console-producer, ``enable.metrics.push`` at its default, true) pushes its metrics,
which the broker's /metrics serves labelled by the producer's client instance id.

Then the issue's whole picture on a 3-broker cluster (the Java tests' `minibroker_cluster`, each
broker with its /metrics port): the subscription set with that tool, a Java producer
(kafka-clients 4.4) and a confluent-kafka (librdkafka) producer pushing, and a real Prometheus
scraping every broker (each broker serves the clients that pushed to it) finding both clients'
series through its HTTP API.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.static.primitive import i8

from minibroker.tools.launcher import Cluster, free_port
from tests.cluster.conftest import BROKERS
from tests.conftest import create_topic, exchange, prometheus_query, scrape, wait_for
from tests.java.conftest import minibroker_cluster

SCRAPED = "scraped-producers"  # the cluster test's subscription


def _kafka(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`minibroker kafka ARGS...`: Kafka 4.4's tool by its main class, as a user types it."""
    script = Path(sys.executable).parent / "minibroker"
    return subprocess.run(
        [str(script), "kafka", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )


def _subscribed(bootstrap: str) -> bool:
    """Whether this broker (DescribeConfigs on the CLIENT_METRICS resource, type 16) has the
    subscription the tool set, as its metadata holds it."""
    request = DescribeConfigsRequest(
        resources=(
            DescribeConfigsResource(
                resource_type=i8(16), resource_name=SCRAPED, configuration_keys=None
            ),
        )
    )
    (described,) = exchange(bootstrap, request).results
    return described.error_code.value == 0 and {
        entry.name: entry.value for entry in described.configs
    } == {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"}


def test_kafka_client_metrics_and_a_java_producer_pushing(broker_factory, tmp_path):
    port = free_port()
    broker = broker_factory({"metrics.port": port})
    b = ["--bootstrap-server", broker.bootstrap]
    altered = _kafka(
        "kafka-client-metrics", *b, "--alter", "--name", "java-producers",
        "--metrics", "org.apache.kafka.producer.", "--interval", "1000",
    )  # fmt: skip
    assert altered.returncode == 0, altered.stderr[-3000:]
    assert "Altered client metrics config for java-producers." in altered.stdout
    listed = _kafka("kafka-client-metrics", *b, "--list")
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert listed.stdout.split() == ["java-producers"]
    described = _kafka("kafka-client-metrics", *b, "--describe", "--name", "java-producers")
    assert described.returncode == 0, described.stderr[-3000:]
    assert "interval.ms=1000" in described.stdout
    assert "metrics=org.apache.kafka.producer." in described.stdout

    # The producer runs until its pushes are seen: on its 1 s interval it pushes while it
    # runs (its last push, as it closes, may be cut short by the close itself).
    script = Path(sys.executable).parent / "minibroker"
    log = tmp_path / "producer.log"
    producer = subprocess.Popen(
        [str(script), "kafka", "kafka-console-producer", *b, "--topic", "java-telemetry",
         "--command-property", "client.id=java-pusher"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True,
    )  # fmt: skip

    def pushed():
        assert producer.poll() is None, log.read_text()[-3000:]
        return {
            key: value
            for key, value in scrape(port).items()
            if key[0].startswith("org_apache_kafka_producer_")
            and dict(key[1]).get("client_id") == "java-pusher"
        }

    try:
        assert producer.stdin is not None
        producer.stdin.write("a\nb\nc\n")
        producer.stdin.flush()
        series = wait_for(pushed, 120, "the Java producer's pushed metrics on /metrics")
        producer.stdin.close()  # the producer ends
        assert producer.wait(300) == 0, log.read_text()[-3000:]
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    instances = {dict(labels)["client_instance_id"] for _name, labels in series}
    assert len(instances) == 1
    names = {name for name, _labels in series}
    assert "org_apache_kafka_producer_node_request_total" in names, sorted(names)[:20]


@pytest.fixture
def metered_cluster(tmp_path) -> Iterator[tuple[Cluster, dict[int, int]]]:
    """The Java tests' 3-broker cluster, each broker with its /metrics port: (the cluster,
    {broker id: port})."""
    ports = {node: free_port() for node in range(1, BROKERS + 1)}
    with minibroker_cluster(
        tmp_path / "cluster",
        node_overrides={node: {"metrics.port": port} for node, port in ports.items()},
    ) as cluster:
        yield cluster, ports


def test_java_and_librdkafka_producers_pushing_to_a_real_prometheus(
    metered_cluster, tmp_path, prometheus
):
    """KIP-714 end to end: Kafka's ClientMetricsCommand sets the subscription (an
    IncrementalAlterConfigs on a CLIENT_METRICS resource, stored by the controller and pushed
    to every broker), each producer asks GetTelemetrySubscriptions and pushes every second
    (PushTelemetry) to a broker of its choosing, and Prometheus, scraping all three brokers'
    /metrics, has series from both clients, told apart by their client ids. Where a Kafka
    broker hands pushes to a ClientTelemetryReceiver plugin, minibroker serves them itself."""
    cluster, ports = metered_cluster
    bootstrap = cluster.bootstrap
    b = ["--bootstrap-server", bootstrap]
    topic = "telemetry-scraped"
    # Before the subscription: the AdminClient is a librdkafka handle that would push too.
    create_topic(bootstrap, topic, 1)
    altered = _kafka(
        "kafka-client-metrics", *b, "--alter", "--name", SCRAPED,
        "--metrics", "org.apache.kafka.producer.", "--interval", "1000",
    )  # fmt: skip
    assert altered.returncode == 0, altered.stderr[-3000:]
    assert f"Altered client metrics config for {SCRAPED}." in altered.stdout
    # Every broker must hold it before a client asks: a client that no subscription
    # matches is told to ask again after 5 minutes (Kafka's default interval).
    wait_for(
        lambda: all(_subscribed(node.bootstrap) for node in cluster.brokers.values()),
        30,
        "the subscription on every broker",
    )
    api = prometheus(*ports.values())

    script = Path(sys.executable).parent / "minibroker"
    log = tmp_path / "java-producer.log"
    java_producer = subprocess.Popen(
        [str(script), "kafka", "kafka-console-producer", *b, "--topic", topic,
         "--command-property", "client.id=java-scraped"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True,
    )  # fmt: skip
    rdkafka_producer = Producer({"bootstrap.servers": bootstrap, "client.id": "rdkafka-scraped"})
    query = '{__name__=~"org_apache_kafka_producer_.+", client_id=~".+-scraped"}'

    clients: set[str] = set()  # the client ids Prometheus' last answer held

    def both_seen():
        assert java_producer.poll() is None, log.read_text()[-3000:]
        rdkafka_producer.produce(topic, b"v")
        rdkafka_producer.poll(0.1)
        found = [series["metric"] for series in prometheus_query(api, query) or ()]
        clients.clear()
        clients.update(metric["client_id"] for metric in found)
        return found if clients == {"java-scraped", "rdkafka-scraped"} else None

    try:
        assert java_producer.stdin is not None
        java_producer.stdin.write("a\nb\nc\n")
        java_producer.stdin.flush()
        try:
            found = wait_for(both_seen, 60, "Prometheus to find both producers' series")
        except pytest.fail.Exception as failed:
            pytest.fail(f"{failed}; its last answer had client ids {sorted(clients)}")
        java_producer.stdin.close()  # the producer ends
        assert java_producer.wait(60) == 0, log.read_text()[-3000:]
        assert rdkafka_producer.flush(15) == 0
    finally:
        rdkafka_producer.close()
        if java_producer.poll() is None:
            java_producer.kill()
            java_producer.wait()

    by_client: dict[str, set[str]] = {}
    for metric in found:
        assert metric["job"] == "minibroker"
        assert metric["instance"] in {f"127.0.0.1:{port}" for port in ports.values()}
        by_client.setdefault(metric["client_id"], set()).add(metric["client_instance_id"])
    # One client instance each, with a non-zero id the broker gave it.
    assert {client: len(ids) for client, ids in by_client.items()} == {
        "java-scraped": 1,
        "rdkafka-scraped": 1,
    }
    for ids in by_client.values():
        assert uuid.UUID(next(iter(ids))).int != 0
