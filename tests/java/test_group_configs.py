"""kafka-configs (kafka-tools 4.4) with `--entity-type groups` against a minibroker broker:
group configs (KIP-848's GROUP resources) set, described, refused and deleted, judged against
what the same commands print against Kafka 4.4 (the lines below were read from a Kafka 4.4
broker with its defaults; the broker here has them too).

One JVM runs the commands in turn (programs/ToolBatch.java, as tests/java/test_tools.py).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from bench.kafka_ref import classpath
from tests.java.conftest import PROGRAMS, JavaRunner

CONFIGS = "org.apache.kafka.tools.ConfigCommand"
GROUP = "tools-group-configs"


@pytest.fixture(scope="module")
def tool_batch(tmp_path_factory, request_log) -> JavaRunner:
    """ToolBatch alone compiled (the session's `java` fixture compiles every program: seconds
    more when this module runs by itself)."""
    classes = tmp_path_factory.mktemp("tool-batch-classes")
    compiled = subprocess.run(
        ["javac", "-nowarn", "-d", str(classes), "-cp", classpath("clients"),
         str(PROGRAMS / "ToolBatch.java")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    return JavaRunner(classes, tmp_path_factory.mktemp("tool-batch-logs"), request_log)


@pytest.fixture(scope="module")
def answers(tool_batch, java_cluster, tmp_path_factory) -> dict:
    """kafka-configs' answers for a group of this module's own on the session's Java cluster
    (tests/java/conftest.py), whose group defaults are Kafka's."""
    b = ["--bootstrap-server", java_cluster.bootstrap]
    group = ["--entity-type", "groups", "--entity-name", GROUP]

    def step(name: str, *args: str) -> dict:
        return {"name": name, "main": CONFIGS, "args": [*b, *args]}

    batch = [
        step("alter", "--alter", *group, "--add-config",
             "consumer.heartbeat.interval.ms=6000,consumer.session.timeout.ms=50000"),
        step("describe", "--describe", *group),
        step("describe-all", "--describe", *group, "--all"),
        step("unknown", "--alter", *group, "--add-config", "consumer.nope=1"),
        step("out-of-bounds", "--alter", *group, "--add-config",
             "consumer.session.timeout.ms=70000"),
        step("delete", "--alter", *group, "--delete-config", "consumer.heartbeat.interval.ms"),
        step("describe-deleted", "--describe", *group),
    ]  # fmt: skip
    work = tmp_path_factory.mktemp("java-group-configs-batch")
    (work / "batch.json").write_text(json.dumps(batch))
    done = tool_batch.run("ToolBatch", str(work / "batch.json"), str(work / "answers.json"))
    assert done.returncode == 0, done.stderr[-4000:]
    return {a["name"]: a for a in json.loads((work / "answers.json").read_text())}


def ok(answers: dict, name: str) -> str:
    answer = answers[name]
    assert answer["exit"] == 0, (name, answer)
    return answer["stdout"]


def refused(answers: dict, name: str) -> str:
    answer = answers[name]
    assert answer["exit"] != 0, (name, answer)
    return answer["stdout"] + answer["stderr"] + str(answer.get("exception", ""))


def test_kafka_configs_sets_and_describes_group_configs(answers):
    assert "Completed updating config for group tools-group-configs." in ok(answers, "alter")
    assert ok(answers, "describe").splitlines() == [
        "Dynamic configs for group tools-group-configs are:",
        "  consumer.heartbeat.interval.ms=6000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
        "consumer.heartbeat.interval.ms=6000, DEFAULT_CONFIG:group.consumer.heartbeat.interval.ms"
        "=5000}",
        "  consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
        "consumer.session.timeout.ms=50000, DEFAULT_CONFIG:group.consumer.session.timeout.ms="
        "45000}",
    ]
    every = ok(answers, "describe-all").splitlines()
    assert every[0] == "All configs for group tools-group-configs are:"
    # Kafka 4.4 lists 21 (its internal configs only when set).
    assert len(every) == 22
    assert (
        "  share.auto.offset.reset=latest sensitive=false"
        " synonyms={DEFAULT_CONFIG:share.auto.offset.reset=latest}" in every
    )
    assert (
        "  streams.assignor.name=sticky sensitive=false"
        " synonyms={DEFAULT_CONFIG:group.streams.assignors=sticky}" in every
    )


def test_kafka_configs_refusals_and_delete(answers):
    assert "InvalidConfigurationException: Unknown group config name: consumer.nope" in refused(
        answers, "unknown"
    )
    assert (
        "InvalidConfigurationException: consumer.session.timeout.ms must be in the range 45000"
        " to 60000 inclusive." in refused(answers, "out-of-bounds")
    )
    ok(answers, "delete")
    assert ok(answers, "describe-deleted").splitlines() == [
        "Dynamic configs for group tools-group-configs are:",
        "  consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
        "consumer.session.timeout.ms=50000, DEFAULT_CONFIG:group.consumer.session.timeout.ms="
        "45000}",
    ]
