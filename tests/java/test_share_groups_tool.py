"""Kafka 4.4's kafka-share-groups.sh (org.apache.kafka.tools.consumer.group.ShareGroupCommand,
unchanged) against one minibroker broker, around confluent-kafka ShareConsumers (KIP-932's
admin path: ListGroups, ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets, DeleteGroups).

A consumer takes the topic's ten records and accepts them (commit_sync, which librdkafka needs
before close); while it is a member the tool lists and describes the group and its members
and refuses to reset it; once it left, the tool shows the share partition's start offset (10),
resets it to the earliest offset, and a new consumer of the group gets the ten records again;
then the tool deletes the group's offsets and the group. Every step runs in one JVM
(programs/ToolBatch.java, as tests/java/test_tools.py runs the others), started in the
background: the test acts with its consumers when the JVM reaches the steps that wait for them
(ToolBatch's "until")."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from confluent_kafka import Producer, ShareConsumer

from tests.conftest import create_topic, set_group_configs
from tests.java.conftest import JAVA_TIMEOUT, SENDING

SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
TOPIC = "admin-queue"
GROUP = "admin-workers"
RECORDS = 10
DEADLINE_S = 30.0


def _step(name: str, bootstrap: str, *args: str, until: str | None = None) -> dict:
    step = {"name": name, "main": SHARE_GROUPS, "args": ["--bootstrap-server", bootstrap, *args]}
    if until is not None:
        step |= {"until": until, "timeout_s": DEADLINE_S}
    return step


def _wait_for_step(log: Path, name: str, tools: subprocess.Popen) -> None:
    """Until the tools' JVM starts step ``name`` (ToolBatch logs "minibroker-tool <name>" to
    the request log before each step): the steps before it are done."""
    deadline = time.monotonic() + JAVA_TIMEOUT
    marker = f"minibroker-tool {name}\n"
    while not log.exists() or marker not in log.read_text(errors="replace"):
        assert tools.poll() is None, f"the tools' JVM ended before step {name}"
        assert time.monotonic() < deadline, f"step {name} never started"
        time.sleep(0.1)


def _ok(answers: dict, name: str) -> str:
    answer = answers[name]
    assert answer["exit"] == 0 and "exception" not in answer, (name, answer)
    return answer["stdout"]


def _start_offset(stdout: str) -> str:
    """The START-OFFSET column of the topic's partition 0 in `--describe` output."""
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    header = next(line for line in lines if line[0] == "GROUP")
    (row,) = [line for line in lines if line[:3] == [GROUP, TOPIC, "0"]]
    return row[header.index("START-OFFSET")]


def _take(bootstrap: str, client_id: str) -> tuple[ShareConsumer, list[int]]:
    """A share consumer of the group that polled until it had the ten records, accepted
    (commit_sync); still a member."""
    consumer = ShareConsumer(
        {"bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": client_id}
    )
    consumer.subscribe([TOPIC])
    offsets: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(offsets) < RECORDS and time.monotonic() < deadline:
        offsets += [m.offset() for m in consumer.poll(0.2) or [] if m.error() is None]
    consumer.commit_sync()
    return consumer, offsets


def test_kafka_share_groups_list_describe_reset_delete(java, broker_factory, tmp_path):
    broker = broker_factory({"offsets.topic.num.partitions": 3})
    bootstrap = broker.bootstrap
    create_topic(bootstrap, TOPIC, 1)
    set_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    b = bootstrap
    reset = ["--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-earliest", "--execute"]
    batch = [
        # While the first consumer is a member (the JVM starts as it joins).
        _step("list", b, "--list", until=GROUP),
        _step("members", b, "--describe", "--group", GROUP, "--members", until="first"),
        _step("state", b, "--describe", "--group", GROUP, "--state"),
        _step("reset-refused", b, *reset),
        # Once it left (the test closes it when this step starts).
        _step("left", b, "--describe", "--group", GROUP, "--state", until="Empty"),
        _step("describe", b, "--describe", "--group", GROUP),
        _step("reset", b, *reset),
        _step("describe-after", b, "--describe", "--group", GROUP),
        # A second consumer takes the records again and accepts them: the start offset is back
        # at 10 (" 10 ": the START-OFFSET column, the LAG column after it), then it leaves.
        _step("taken-again", b, "--describe", "--group", GROUP, until=f" {RECORDS} "),
        _step("left-again", b, "--describe", "--group", GROUP, "--state", until="Empty"),
        _step("delete-offsets", b, "--delete-offsets", "--group", GROUP, "--topic", TOPIC),
        _step("delete", b, "--delete", "--group", GROUP),
        _step("list-after", b, "--list"),
    ]
    batch_path, answers_path = tmp_path / "batch.json", tmp_path / "answers.json"
    batch_path.write_text(json.dumps(batch))
    # One JVM for every step (a JVM start costs seconds), the consumers acting between steps.
    command = java.command("ToolBatch", str(batch_path), str(answers_path))
    log = java.request_log.files[-1]
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as tools:
        try:
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
            for number in range(RECORDS):
                producer.produce(TOPIC, value=b"job-%02d" % number)
            assert producer.flush(30) == 0
            consumer, offsets = _take(bootstrap, "first")
            _wait_for_step(log, "left", tools)
            consumer.close()
            assert sorted(offsets) == list(range(RECORDS))
            _wait_for_step(log, "taken-again", tools)
            again, offsets = _take(bootstrap, "second")
            again.close()
            assert sorted(offsets) == list(range(RECORDS)), "the reset did not deliver them again"
            _, stderr = tools.communicate(timeout=JAVA_TIMEOUT)
        finally:
            if tools.poll() is None:
                tools.kill()
    assert tools.returncode == 0, stderr[-4000:]
    answers = {answer["name"]: answer for answer in json.loads(answers_path.read_text())}

    assert GROUP in _ok(answers, "list").split()
    members = _ok(answers, "members")
    assert "first" in members and f"{TOPIC}:0" in members, members
    assert "Stable" in _ok(answers, "state")
    refused = answers["reset-refused"]
    assert refused["exit"] != 0, refused
    assert f"Share group '{GROUP}' is not empty." in refused["stdout"] + refused["stderr"]
    assert "Empty" in _ok(answers, "left")
    # Every record accepted: the share partition starts after them.
    assert _start_offset(_ok(answers, "describe")) == str(RECORDS)
    reset_out = _ok(answers, "reset")
    assert GROUP in reset_out and TOPIC in reset_out, reset_out
    assert _start_offset(_ok(answers, "describe-after")) == "0"
    assert _start_offset(_ok(answers, "taken-again")) == str(RECORDS)
    assert "Empty" in _ok(answers, "left-again")
    delete_offsets = _ok(answers, "delete-offsets")
    assert TOPIC in delete_offsets and "Successful" in delete_offsets, delete_offsets
    assert f"Deletion of requested share groups ('{GROUP}') was successful." in _ok(
        answers, "delete"
    )
    assert GROUP not in _ok(answers, "list-after").split()

    # What the tool sent (for docs/java.md's table): the three admin APIs among them.
    sent = sorted(
        {
            (match.group(2), int(match.group(3)))
            for match in SENDING.finditer(log.read_text(errors="replace"))
        }
    )
    print("kafka-share-groups sent:", ", ".join(f"{name} v{version}" for name, version in sent))
    names = {name for name, _ in sent}
    assert {
        "DESCRIBE_SHARE_GROUP_OFFSETS",
        "ALTER_SHARE_GROUP_OFFSETS",
        "DELETE_SHARE_GROUP_OFFSETS",
    } <= names, sent
