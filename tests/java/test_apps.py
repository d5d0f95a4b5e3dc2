"""Applications built on the Java client against a 3-broker minibroker cluster: Kafka Streams'
word count (at least once, a state store with its changelog, a repartition topic), also through
a kill -9 of a broker, and Kafka Connect in standalone mode moving a file through a topic into
another file with the FileStream connectors.

Both run as their users start them: the word count is an ordinary Streams application
(programs/WordCount.java); Connect is org.apache.kafka.connect.cli.ConnectStandalone, the main
class of bin/connect-standalone.sh, with a worker and two connector property files.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from bench.kafka_ref import missing_reason
from minibroker.tools.launcher import free_port
from tests.cluster.conftest import create_replicated_topic
from tests.java.conftest import JAVA_TIMEOUT, minibroker_cluster

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"]


@pytest.fixture(scope="module")
def apps_cluster(tmp_path_factory):
    with minibroker_cluster(tmp_path_factory.mktemp("apps-cluster")) as started:
        yield started


def _lines(count: int, seed: int) -> list[str]:
    """Lines of 1-4 words, deterministic."""
    return [
        " ".join(WORDS[(seed + i * 3 + j * 5) % len(WORDS)] for j in range(1 + (i + seed) % 4))
        for i in range(count)
    ]


def _produce(bootstrap: str, topic: str, lines: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i, line in enumerate(lines):
        producer.produce(topic, key=f"line-{i}", value=line)
    assert producer.flush(30) == 0


def _expected(lines: list[str]) -> dict[str, int]:
    return dict(Counter(word for line in lines for word in line.split()))


class StreamsApp:
    """The word count running as a child JVM; `wait_for(prefix)` reads its output lines."""

    def __init__(self, java, bootstrap: str, app_id: str, work: Path, expected: dict):
        (work / "expected.json").write_text(json.dumps(expected))
        self.process = subprocess.Popen(
            java.command(
                "WordCount", bootstrap, app_id, f"in-{app_id}", f"out-{app_id}",
                str(work / "state"), str(work / "expected.json"), "120",
            ),
            stdout=subprocess.PIPE, stderr=(work / "streams.log").open("w"), text=True,
        )  # fmt: skip
        self.log = work / "streams.log"

    def wait_for(self, prefix: str) -> str:
        for line in self.process.stdout:
            if line.startswith(prefix):
                return line
        raise AssertionError(f"WordCount ended before {prefix!r}:\n{self.log.read_text()[-4000:]}")

    def result(self) -> dict:
        line = self.wait_for("{")
        assert self.process.wait(JAVA_TIMEOUT) == 0, self.log.read_text()[-4000:]
        return json.loads(line)


def _setup_topics(cluster, app_id: str) -> None:
    create_replicated_topic(cluster, f"in-{app_id}", 3)
    create_replicated_topic(cluster, f"out-{app_id}", 3)


def _check_word_count(result: dict, app_id: str, expected: dict) -> None:
    assert result["counts"] == expected
    assert result["changelog"] == expected
    assert result["internal_topics"] == [
        f"{app_id}-counts-changelog",
        f"{app_id}-words-repartition",
    ]
    assert result["final_state"] == "NOT_RUNNING"


def test_streams_word_count(java, apps_cluster, tmp_path):
    app_id = "wordcount"
    _setup_topics(apps_cluster, app_id)
    lines = _lines(300, 0)
    _produce(apps_cluster.bootstrap, f"in-{app_id}", lines)
    app = StreamsApp(java, apps_cluster.bootstrap, app_id, tmp_path, _expected(lines))
    _check_word_count(app.result(), app_id, _expected(lines))


def test_streams_word_count_through_broker_kill(java, apps_cluster, tmp_path):
    """Half the lines, the application running and counting, a broker killed with SIGKILL, the
    other half: the counts still come out exact (no input lost, no update counted twice: the
    application's producer is idempotent and its tasks never move)."""
    app_id = "wordcount-kill"
    _setup_topics(apps_cluster, app_id)
    first, second = _lines(300, 1), _lines(300, 2)
    expected = _expected(first + second)
    _produce(apps_cluster.bootstrap, f"in-{app_id}", first)
    app = StreamsApp(java, apps_cluster.bootstrap, app_id, tmp_path, expected)
    java.request_log.broker_killed.add(java.request_log.files[-1])
    app.wait_for("PROGRESS")
    victim = apps_cluster.brokers[2]
    victim.kill()
    try:
        _produce(apps_cluster.bootstrap, f"in-{app_id}", second)
        _check_word_count(app.result(), app_id, expected)
    finally:
        victim.restart()
        victim.wait_ready()


def test_connect_standalone_file_to_file(java, apps_cluster, tmp_path):
    """Connect 4.3.1 throughout (java/connect/pom.xml: connect-file is not served at 4.4.0)."""
    if (reason := missing_reason("connect")) is not None:
        pytest.skip(f"Kafka Connect: {reason}")
    topic = "connect-lines"
    create_replicated_topic(apps_cluster, topic, 1)
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    lines = [f"line {i} of the file" for i in range(200)]
    source_file.write_text("".join(f"{line}\n" for line in lines))
    worker = tmp_path / "worker.properties"
    worker.write_text(
        f"bootstrap.servers={apps_cluster.bootstrap}\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "value.converter=org.apache.kafka.connect.storage.StringConverter\n"
        f"offset.storage.file.filename={tmp_path / 'offsets'}\n"
        "offset.flush.interval.ms=500\n"
        f"listeners=http://127.0.0.1:{free_port()}\n"
    )
    source = tmp_path / "source.properties"
    source.write_text(
        "name=file-source\nconnector.class=org.apache.kafka.connect.file.FileStreamSourceConnector\n"
        f"tasks.max=1\nfile={source_file}\ntopic={topic}\n"
    )
    sink = tmp_path / "sink.properties"
    sink.write_text(
        "name=file-sink\nconnector.class=org.apache.kafka.connect.file.FileStreamSinkConnector\n"
        f"tasks.max=1\nfile={sink_file}\ntopics={topic}\n"
    )
    log = tmp_path / "connect.log"
    process = subprocess.Popen(
        java.command(
            "org.apache.kafka.connect.cli.ConnectStandalone",
            str(worker),
            str(source),
            str(sink),
            classpath_module="connect",
        ),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and process.poll() is None:
            if sink_file.exists() and sink_file.read_text().splitlines() == lines:
                break
            time.sleep(0.3)
        assert process.poll() is None, log.read_text()[-4000:]
        assert sink_file.exists(), log.read_text()[-4000:]
        assert sink_file.read_text().splitlines() == lines
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
