"""`minibroker groups` on a 3-broker cluster: the list covers the groups of every coordinator,
whichever broker it is asked of, and a description reads each partition's log end from its
own leader."""

from __future__ import annotations

import itertools
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from minibroker.tools.groups import connect_any, find_coordinator
from tests.cluster.conftest import CONVERGENCE_TIMEOUT
from tests.integration.test_groups_cli import groups_cli, table

TOPIC = "ledger"
PARTITIONS = 6


def commit(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    """A simple commit (no subscription, generation -1), as a tool or a manual-assign
    consumer makes: the group exists, Empty, with these offsets."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def test_list_and_describe_span_every_broker(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for number in range(PARTITIONS * 10):
        producer.produce(TOPIC, value=b"v%d" % number, partition=number % PARTITIONS)
    assert producer.flush(30) == 0

    # One group coordinated by each broker (found as any client finds them).
    groups: dict[int, str] = {}
    deadline = time.monotonic() + CONVERGENCE_TIMEOUT
    for number in itertools.count():
        assert time.monotonic() < deadline, f"coordinators found so far: {groups}"
        group = f"team-{number}"
        with connect_any(cluster.bootstrap, time.monotonic() + CONVERGENCE_TIMEOUT) as conn:
            coordinator = find_coordinator(conn, group).node_id
        if coordinator not in groups:
            groups[coordinator] = group
        if len(groups) == 3:
            break
    committed = {p: p + 1 for p in range(PARTITIONS)}
    for group in groups.values():
        commit(cluster.bootstrap, group, committed)

    for node in cluster.nodes:
        if node.kind != "broker":
            continue
        finished = groups_cli("--bootstrap", node.bootstrap)
        assert finished.returncode == 0, finished.stderr
        rows = {row["GROUP"]: row for row in table(finished.stdout, "GROUP")}
        assert set(rows) == set(groups.values()), finished.stdout
        for coordinator, group in groups.items():
            assert rows[group]["COORDINATOR"] == str(coordinator)
            assert rows[group]["STATE"] == "Empty"

    # Partitions are led by all three brokers; each log end comes from its leader.
    group = groups[2]
    finished = groups_cli("--bootstrap", cluster.bootstrap, "--describe", group)
    assert finished.returncode == 0, finished.stderr
    assert "coordinator 2 " in finished.stdout.splitlines()[0]
    offsets = {int(row["PARTITION"]): row for row in table(finished.stdout, "TOPIC")}
    assert set(offsets) == set(range(PARTITIONS)), finished.stdout
    for partition, row in offsets.items():
        assert row["CURRENT-OFFSET"] == str(committed[partition])
        assert row["LOG-END-OFFSET"] == "10", finished.stdout
        assert row["LAG"] == str(10 - committed[partition])
        assert row["CONSUMER-ID"] == "-"
