"""Client telemetry (KIP-714) with Kafka 4.4's own tool and Java client, against one minibroker:
``kafka-client-metrics.sh --alter --name NAME --metrics org.apache.kafka.producer. --interval
1000`` creates the subscription, ``--list`` and ``--describe`` show it, and a Java producer
(kafka-console-producer, ``enable.metrics.push`` at its default, true) pushes its metrics,
which the broker's /metrics serves labelled by the producer's client instance id.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from minibroker.tools.launcher import free_port
from tests.conftest import scrape, wait_for


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
