"""`minibroker groups`: a real consumer group, described from the command line as a user would
run it, against a real broker process.

The tests run on the worker's shared broker (tests/conftest.py's SHARED_BROKER, the pytest
plugin's `kafka_broker`), each with a topic and a group of its own; the listing is judged by
the rows it holds, since other modules' groups share the broker."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, ShareConsumer, TopicPartition

from minibroker.testing import Cluster
from minibroker.tools.launcher import free_port
from tests.conftest import SHARED_BROKER, create_topic, set_group_configs, wait_for

pytestmark = SHARED_BROKER

GROUP = "billing"
# Records produced to each partition before the consumer starts.
PRODUCED = {0: 10, 1: 20, 2: 30}
CONSUMED = 45
LATE = 7  # produced to partition 0 after the commit: lag that grows while nobody reads
CLI_TIMEOUT = 60
GROUP_TIMEOUT = 30.0


def groups_cli(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "minibroker", "groups", *arguments],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, count in counts.items():
        for number in range(count):
            producer.produce(topic, value=b"r%d" % number, partition=partition)
    assert producer.flush(30) == 0, "records still unacknowledged after 30 s"


def table(output: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the table whose header line starts with `first_header`, as dicts."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header))
    header = lines[start].split()
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(dict(zip(header, line.split(maxsplit=len(header) - 1), strict=True)))
    return rows


@dataclasses.dataclass
class GroupBroker:
    bootstrap: str
    node_id: int
    topic: str  # this test's, with PRODUCED records in it
    group: str  # this test's, nothing committed yet


@pytest.fixture
def group_broker(kafka_broker: Cluster, request: pytest.FixtureRequest) -> GroupBroker:
    """The shared broker (the plugin's brokers start with group.initial.rebalance.delay.ms=0,
    which these tests need) with a topic and a group named after the test."""
    name = request.node.name.removeprefix("test_")[:40]
    setup = GroupBroker(
        kafka_broker.bootstrap_servers,
        kafka_broker.broker_ids[0],
        f"orders-{name}",
        f"billing-{name}",
    )
    create_topic(setup.bootstrap, setup.topic, len(PRODUCED))
    produce(setup.bootstrap, setup.topic, PRODUCED)
    return setup


def consume_and_commit(bootstrap: str, topic: str, group: str) -> Consumer:
    """A subscribed consumer that read CONSUMED records and committed them synchronously;
    still a member of the group when returned."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": "billing-app",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )
    consumer.subscribe([topic])
    read = 0
    deadline = time.monotonic() + GROUP_TIMEOUT
    while read < CONSUMED:
        if time.monotonic() > deadline:
            consumer.close()
            pytest.fail(f"the group consumer read {read} of {CONSUMED} records in time")
        message = consumer.poll(0.2)
        if message is None:
            continue
        assert message.error() is None or message.error().code() == KafkaError._PARTITION_EOF
        if message.error() is None:
            read += 1
    consumer.commit(asynchronous=False)
    return consumer


def committed_offsets(consumer: Consumer, topic: str) -> dict[int, int]:
    answer = consumer.committed([TopicPartition(topic, p) for p in PRODUCED], timeout=10)
    return {tp.partition: tp.offset for tp in answer if tp.offset >= 0}


def test_describe_prints_lag_as_log_end_minus_committed(group_broker):
    consumer = consume_and_commit(group_broker.bootstrap, group_broker.topic, group_broker.group)
    try:
        committed = committed_offsets(consumer, group_broker.topic)
        assert sum(committed.values()) == CONSUMED, committed
        produce(group_broker.bootstrap, group_broker.topic, {0: LATE})
        log_end = {p: n + (LATE if p == 0 else 0) for p, n in PRODUCED.items()}

        finished = groups_cli(
            "--bootstrap", group_broker.bootstrap, "--describe", group_broker.group
        )
        assert finished.returncode == 0, finished.stderr
        output = finished.stdout
        assert output.startswith(
            f"GROUP {group_broker.group}: type classic, state Stable, protocol type consumer,"
            " assignment strategy range, 1 member, coordinator"
        ), output

        members = table(output, "MEMBER-ID")
        assert [m["MEMBER-ID"] for m in members] == [consumer.memberid()], output
        assert members[0]["CLIENT-ID"] == "billing-app"
        assert members[0]["ASSIGNMENT"] == f"{group_broker.topic}:0,1,2", output

        offsets = {int(row["PARTITION"]): row for row in table(output, "TOPIC")}
        assert set(offsets) == set(PRODUCED), output
        for partition, row in offsets.items():
            assert row["TOPIC"] == group_broker.topic
            assert row["LOG-END-OFFSET"] == str(log_end[partition]), output
            assert row["CONSUMER-ID"] == consumer.memberid()
            if partition in committed:
                assert row["CURRENT-OFFSET"] == str(committed[partition]), output
                assert row["LAG"] == str(log_end[partition] - committed[partition]), output
            else:  # assigned but nothing read from it yet
                assert (row["CURRENT-OFFSET"], row["LAG"]) == ("-", "-"), output
        total_lag = sum(int(row["LAG"]) for row in offsets.values() if row["LAG"] != "-")
        assert total_lag == sum(log_end[p] - committed[p] for p in committed)
    finally:
        consumer.close()

    # Once the member has left, the group is Empty and keeps its offsets; nobody owns them.
    def empty_group() -> str | None:
        finished = groups_cli(
            "--bootstrap", group_broker.bootstrap, "--describe", group_broker.group
        )
        return finished.stdout if "state Empty" in finished.stdout else None

    output = wait_for(empty_group, GROUP_TIMEOUT, "the group to become Empty")
    assert "no active members" in output
    # The same words as the list's columns, in every state.
    header = (
        f"GROUP {group_broker.group}: type classic, state Empty, protocol type consumer, assignment"
    )
    assert output.startswith(header), output
    listed = groups_cli("--bootstrap", group_broker.bootstrap)
    (row,) = [row for row in table(listed.stdout, "GROUP") if row["GROUP"] == group_broker.group]
    strategy = output.split("assignment strategy ", 1)[1].split(",", 1)[0]
    assert (row["TYPE"], row["STATE"], row["ASSIGNMENT-STRATEGY"]) == ("classic", "Empty", strategy)
    offsets = {int(row["PARTITION"]): row for row in table(output, "TOPIC")}
    assert set(offsets) == set(committed)
    for partition, row in offsets.items():
        assert row["CONSUMER-ID"] == "-"
        assert row["LAG"] == str(log_end[partition] - committed[partition])


def test_list_shows_every_group_with_state_and_protocol(group_broker):
    consumer = consume_and_commit(group_broker.bootstrap, group_broker.topic, group_broker.group)
    try:
        finished = groups_cli("--bootstrap", group_broker.bootstrap)
        assert finished.returncode == 0, finished.stderr
        rows = {row["GROUP"]: row for row in table(finished.stdout, "GROUP")}
        assert group_broker.group in rows, finished.stdout  # (with other modules' groups)
        assert rows[group_broker.group]["TYPE"] == "classic"
        assert rows[group_broker.group]["STATE"] == "Stable"
        assert rows[group_broker.group]["PROTOCOL-TYPE"] == "consumer"
        assert rows[group_broker.group]["ASSIGNMENT-STRATEGY"] == "range"
        assert rows[group_broker.group]["MEMBERS"] == "1"
        assert rows[group_broker.group]["COORDINATOR"] == str(group_broker.node_id)
    finally:
        consumer.close()


def test_a_share_group_is_listed_and_described_as_one(group_broker):
    """A share group (KIP-932) with a member that took 45 records of the topic: listed as type
    share, described through ShareGroupDescribe and DescribeShareGroupOffsets (OffsetFetch
    answers a share group GROUP_ID_NOT_FOUND), with each share partition's start offset."""
    share_group = f"workers-{group_broker.topic}"
    set_group_configs(group_broker.bootstrap, share_group, {"share.auto.offset.reset": "earliest"})
    consumer = ShareConsumer({"bootstrap.servers": group_broker.bootstrap, "group.id": share_group})
    try:
        consumer.subscribe([group_broker.topic])
        taken = 0
        deadline = time.monotonic() + GROUP_TIMEOUT
        while taken < sum(PRODUCED.values()) and time.monotonic() < deadline:
            taken += sum(1 for m in consumer.poll(0.5) or [] if m.error() is None)
        assert taken == sum(PRODUCED.values())
        consumer.commit_sync()  # every record taken accepted: the start offsets at the ends

        listed = groups_cli("--bootstrap", group_broker.bootstrap)
        assert listed.returncode == 0, listed.stderr
        row = {r["GROUP"]: r for r in table(listed.stdout, "GROUP")}[share_group]
        assert (row["TYPE"], row["PROTOCOL-TYPE"], row["ASSIGNMENT-STRATEGY"]) == (
            "share",
            "share",
            "simple",
        ), listed.stdout
        assert (row["STATE"], row["MEMBERS"]) == ("Stable", "1"), listed.stdout

        described = groups_cli("--bootstrap", group_broker.bootstrap, "--describe", share_group)
        assert described.returncode == 0, described.stderr
        assert f"GROUP {share_group}: type share, state Stable" in described.stdout
        (member,) = table(described.stdout, "MEMBER-ID")
        assigned = ",".join(str(p) for p in PRODUCED)
        assert member["ASSIGNMENT"] == f"{group_broker.topic}:{assigned}", described.stdout
        partitions = {int(r["PARTITION"]): r for r in table(described.stdout, "TOPIC")}
        assert sorted(partitions) == sorted(PRODUCED), described.stdout
        for index, count in PRODUCED.items():
            assert partitions[index]["START-OFFSET"] == str(count), described.stdout
            assert partitions[index]["LOG-END-OFFSET"] == str(count), described.stdout
            assert partitions[index]["LAG"] == "0", described.stdout
    finally:
        consumer.close()


def test_unknown_group_is_an_error(group_broker):
    finished = groups_cli("--bootstrap", group_broker.bootstrap, "--describe", "nobody")
    assert finished.returncode == 1
    assert "'nobody' does not exist" in finished.stderr
    assert finished.stdout == ""


def test_unreachable_broker_is_an_error():
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    for arguments in ([], ["--describe", GROUP]):
        finished = groups_cli("--bootstrap", address, "--timeout", "3", *arguments)
        assert finished.returncode == 1, finished.stdout
        assert f"cannot connect to {address}" in finished.stderr
