"""Kafka Streams 4.4 with `group.protocol=streams` (KIP-1071) on a 3-broker minibroker cluster:
the broker assigns the tasks (StreamsGroupHeartbeat), creates the application's repartition
and changelog topics itself (the MISSING_INTERNAL_TOPICS path), and the admin client describes
the group (StreamsGroupDescribe).

One word count application (programs/StreamsGroupInstance.java), at least once: a first
instance counts the first lines; a second instance joins and the six tasks (two subtopologies
over three partitions) are split between them, as StreamsGroupDescribe shows; more lines are
counted by both; the second instance is stopped and its tasks move back to the first, which
counts the last lines. The output's last count per word is the exact count of every line.
"""

from __future__ import annotations

import json
import struct
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from tests.cluster.conftest import create_replicated_topic
from tests.java.conftest import JAVA_TIMEOUT, minibroker_cluster
from tests.java.test_apps import _expected, _lines, _produce

# The word count's tasks: subtopology 0 (the source to the repartition topic) and subtopology 1
# (the repartition topic to the counts), each over the input's three partitions.
TASKS = {f"{sub}_{partition}" for sub in (0, 1) for partition in range(3)}


@pytest.fixture(scope="module")
def streams_cluster(tmp_path_factory):
    with minibroker_cluster(tmp_path_factory.mktemp("streams-cluster")) as started:
        yield started


class Instance:
    """One application instance as a child JVM, stopped by closing its standard input."""

    def __init__(self, java, bootstrap: str, app_id: str, work: Path):
        work.mkdir(parents=True, exist_ok=True)
        self.log = work / "streams.log"
        self.process = subprocess.Popen(
            java.command(
                "StreamsGroupInstance", "run", bootstrap, app_id, f"in-{app_id}",
                f"out-{app_id}", str(work / "state"),
            ),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log.open("w"), text=True,
        )  # fmt: skip

    def wait_for(self, prefix: str) -> str:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            assert not line.startswith("ERROR"), line + self.log.read_text()[-4000:]
            if line.startswith(prefix):
                return line
        raise AssertionError(f"instance ended before {prefix!r}:\n{self.log.read_text()[-4000:]}")

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        closed = self.wait_for("CLOSED")
        assert closed.strip() == "CLOSED NOT_RUNNING", closed
        assert self.process.wait(JAVA_TIMEOUT) == 0

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _describe(java, bootstrap: str, app_id: str) -> dict:
    return java.json("StreamsGroupInstance", "describe", bootstrap, app_id)


def _wait_for_assignment(java, bootstrap: str, app_id: str, members: int) -> dict:
    """StreamsGroupDescribe until the group is Stable with ``members`` members that own every
    task between them, each task once (or fail at the deadline with the last answer)."""
    deadline = time.monotonic() + 120
    described: dict = {}
    while time.monotonic() < deadline:
        described = _describe(java, bootstrap, app_id)
        owned = [task for member in described["members"] for task in member["active"]]
        if (
            described["state"].upper() == "STABLE"
            and len(described["members"]) == members
            and sorted(owned) == sorted(TASKS)
        ):
            return described
        time.sleep(0.5)
    raise AssertionError(f"no stable assignment to {members} members: {json.dumps(described)}")


def _wait_for_counts(bootstrap: str, topic: str, expected: dict[str, int]) -> dict[str, int]:
    """Read the output topic from the start until the last count per word is `expected` (or
    the deadline passes); the counts read."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    counts: dict[str, int] = {}
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and counts != expected:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            counts[message.key().decode()] = struct.unpack(">q", message.value())[0]
    finally:
        consumer.close()
    return counts


def test_word_count_with_the_streams_protocol(java, streams_cluster, tmp_path):
    bootstrap = streams_cluster.bootstrap
    app_id = "streams-wc"
    create_replicated_topic(streams_cluster, f"in-{app_id}", 3)
    create_replicated_topic(streams_cluster, f"out-{app_id}", 3)
    first, second, third = _lines(200, 3), _lines(200, 4), _lines(200, 5)
    _produce(bootstrap, f"in-{app_id}", first)
    a = Instance(java, bootstrap, app_id, tmp_path / "a")
    b = None
    try:
        a.wait_for("RUNNING")
        assert _wait_for_counts(bootstrap, f"out-{app_id}", _expected(first)) == _expected(first)
        alone = _wait_for_assignment(java, bootstrap, app_id, 1)
        assert set(alone["members"][0]["active"]) == TASKS

        # A second instance joins: the tasks are split between the two processes.
        b = Instance(java, bootstrap, app_id, tmp_path / "b")
        b.wait_for("RUNNING")
        both = _wait_for_assignment(java, bootstrap, app_id, 2)
        split = [set(member["active"]) for member in both["members"]]
        assert all(len(tasks) == 3 for tasks in split), split
        assert split[0] | split[1] == TASKS
        assert both["group_epoch"] > alone["group_epoch"]
        _produce(bootstrap, f"in-{app_id}", second)
        expected = _expected(first + second)
        assert _wait_for_counts(bootstrap, f"out-{app_id}", expected) == expected

        # The second instance stops: its tasks move back to the first.
        b.stop()
        b = None
        back = _wait_for_assignment(java, bootstrap, app_id, 1)
        assert set(back["members"][0]["active"]) == TASKS
        _produce(bootstrap, f"in-{app_id}", third)
        expected = _expected(first + second + third)
        assert _wait_for_counts(bootstrap, f"out-{app_id}", expected) == expected
        a.stop()
    finally:
        a.kill()
        if b is not None:
            b.kill()
    # The broker created the internal topics the topology needs.
    listed = streams_cluster_topics(bootstrap)
    assert {f"{app_id}-counts-changelog", f"{app_id}-words-repartition"} <= listed


def streams_cluster_topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)
