"""Kafka 4.4's kafka-share-groups.sh (org.apache.kafka.tools.consumer.group.ShareGroupCommand,
unchanged) against one minibroker broker, around confluent-kafka ShareConsumers (KIP-932's
admin path: ListGroups, ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets, DeleteGroups).

A consumer takes the topic's ten records and accepts them (commit_sync, which librdkafka needs
before close); while it is a member the tool lists and describes the group and its members
and refuses to reset it; once it left, the tool shows the share partition's start offset (10),
resets it to the earliest offset, and a new consumer of the group gets the ten records again;
then the tool deletes the group's offsets and the group. The tool runs in one JVM per phase
(programs/ToolBatch.java, as tests/java/test_tools.py runs the others)."""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer, ShareConsumer

from tests.conftest import create_topic
from tests.java.conftest import SENDING
from tests.integration.test_share_consumers import _from_the_earliest

SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
TOPIC = "admin-queue"
GROUP = "admin-workers"
RECORDS = 10
DEADLINE_S = 30.0


def _run_tools(java, work, phase: str, bootstrap: str, steps: list[tuple[str, list[str]]]):
    """Each (name, arguments) step run by kafka-share-groups in one JVM: answers by name."""
    batch = [
        {"name": name, "main": SHARE_GROUPS, "args": ["--bootstrap-server", bootstrap, *args]}
        for name, args in steps
    ]
    batch_path, answers_path = work / f"{phase}.json", work / f"{phase}-answers.json"
    batch_path.write_text(json.dumps(batch))
    done = java.run("ToolBatch", str(batch_path), str(answers_path))
    assert done.returncode == 0, done.stderr[-4000:]
    return {answer["name"]: answer for answer in json.loads(answers_path.read_text())}


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
    first_log = len(java.request_log.files)
    broker = broker_factory({"offsets.topic.num.partitions": 3})
    bootstrap = broker.bootstrap
    create_topic(bootstrap, TOPIC, 1)
    _from_the_earliest(bootstrap, GROUP)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for number in range(RECORDS):
        producer.produce(TOPIC, value=b"job-%02d" % number)
    assert producer.flush(30) == 0

    consumer, offsets = _take(bootstrap, "first")
    try:
        assert sorted(offsets) == list(range(RECORDS))
        live = _run_tools(
            java,
            tmp_path,
            "live",
            bootstrap,
            [
                ("list", ["--list"]),
                ("members", ["--describe", "--group", GROUP, "--members"]),
                ("state", ["--describe", "--group", GROUP, "--state"]),
                (
                    "reset-refused",
                    ["--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-earliest",
                     "--execute"],
                ),  # fmt: skip
            ],
        )
    finally:
        consumer.close()
    assert GROUP in _ok(live, "list").split()
    members = _ok(live, "members")
    assert "first" in members and f"{TOPIC}:0" in members, members
    assert "Stable" in _ok(live, "state")
    refused = live["reset-refused"]
    assert refused["exit"] != 0, refused
    assert f"Share group '{GROUP}' is not empty." in refused["stdout"] + refused["stderr"]

    empty = _run_tools(
        java,
        tmp_path,
        "empty",
        bootstrap,
        [
            ("describe", ["--describe", "--group", GROUP]),
            (
                "reset",
                ["--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-earliest",
                 "--execute"],
            ),  # fmt: skip
            ("describe-after", ["--describe", "--group", GROUP]),
        ],
    )
    # Every record accepted: the share partition starts after them.
    assert _start_offset(_ok(empty, "describe")) == str(RECORDS)
    reset = _ok(empty, "reset")
    assert GROUP in reset and TOPIC in reset, reset
    assert _start_offset(_ok(empty, "describe-after")) == "0"

    again, offsets = _take(bootstrap, "second")
    again.close()
    assert sorted(offsets) == list(range(RECORDS)), "the reset did not deliver the records again"

    deleted = _run_tools(
        java,
        tmp_path,
        "deleted",
        bootstrap,
        [
            ("delete-offsets", ["--delete-offsets", "--group", GROUP, "--topic", TOPIC]),
            ("delete", ["--delete", "--group", GROUP]),
            ("list-after", ["--list"]),
        ],
    )
    delete_offsets = _ok(deleted, "delete-offsets")
    assert TOPIC in delete_offsets and "Successful" in delete_offsets, delete_offsets
    assert f"Deletion of requested share groups ('{GROUP}') was successful." in _ok(
        deleted, "delete"
    )
    assert GROUP not in _ok(deleted, "list-after").split()

    # What the tool sent (for docs/java.md's table): the three admin APIs among them.
    sent = sorted(
        {
            (match.group(2), int(match.group(3)))
            for path in java.request_log.files[first_log:]
            if path.exists()
            for match in SENDING.finditer(path.read_text(errors="replace"))
        }
    )
    print("kafka-share-groups sent:", ", ".join(f"{name} v{version}" for name, version in sent))
    names = {name for name, _ in sent}
    assert {
        "DESCRIBE_SHARE_GROUP_OFFSETS",
        "ALTER_SHARE_GROUP_OFFSETS",
        "DELETE_SHARE_GROUP_OFFSETS",
    } <= names, sent
