"""The coordinator of a consumer-protocol group (KIP-848) dies (kill -9) while two
confluent-kafka consumers with `group.protocol=consumer` read and commit: another broker
loads the group from its records in `__consumer_offsets`, the same members carry on at
their epochs, and the group reads on from its committed offsets."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import (
    BROKERS,
    CLUSTER_OVERRIDES,
    CONVERGENCE_TIMEOUT,
    _check_clean_stop,
    create_replicated_topic,
    produce_acks_all,
)
from tests.conftest import exchange, wait_for

TOPIC = "kip848-orders"
GROUP = "kip848-billing"
PARTITIONS = 4
RECORDS = 400


@pytest.fixture
def cluster(tmp_path: Path):
    started = Cluster.start(
        tmp_path,
        brokers=BROKERS,
        overrides={
            **CLUSTER_OVERRIDES,
            "group.consumer.heartbeat.interval.ms": 500,
            "group.consumer.session.timeout.ms": 10000,
        },
    )
    yield started
    _check_clean_stop(started)


def coordinator_of(cluster: Cluster) -> int:
    for broker in cluster.brokers.values():
        if broker.running:
            answer = exchange(broker.bootstrap, FindCoordinatorRequest(key=GROUP, key_type=0))
            if answer.error_code.value == 0:
                return int(answer.node_id)
    return -1


def describe(cluster: Cluster):
    """The group as ConsumerGroupDescribe gives it, asked of its coordinator (None while
    there is none, or while it loads)."""
    node = coordinator_of(cluster)
    if node < 0:
        return None
    answer = exchange(
        cluster.brokers[node].bootstrap,
        ConsumerGroupDescribeRequest(group_ids=(GROUP,), include_authorized_operations=False),
    )
    (group,) = answer.groups
    return group if group.error_code.value == 0 else None


def member(cluster: Cluster) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": GROUP,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.subscribe([TOPIC])
    return consumer


def test_the_group_survives_its_coordinators_death(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, PARTITIONS)
    produce_acks_all(
        cluster.bootstrap, TOPIC, [(i % PARTITIONS, b"order-%d" % i) for i in range(RECORDS)]
    )
    members = [member(cluster), member(cluster)]
    reads: dict[tuple[int, int], int] = {}
    committed_before_kill: dict[int, int] = {}
    acknowledged: dict[int, int] = {}
    before = None
    deadline = time.monotonic() + 4 * CONVERGENCE_TIMEOUT
    try:
        while len(reads) < RECORDS and time.monotonic() < deadline:
            for consumer in members:
                message = consumer.poll(0.05)
                if message is None or message.error() is not None:
                    continue
                key = (message.partition(), message.offset())
                reads[key] = reads.get(key, 0) + 1
                position = TopicPartition(TOPIC, message.partition(), message.offset() + 1)
                try:
                    (done,) = consumer.commit(offsets=[position], asynchronous=False)
                except KafkaException:
                    continue  # not acknowledged: the coordinator is moving
                if done.error is None:
                    acknowledged[done.partition] = done.offset
            spread = sorted(len(consumer.assignment()) for consumer in members)
            if before is None and len(reads) >= RECORDS // 3 and spread == [2, 2]:
                before = describe(cluster)
                if before is None or before.group_state != "Stable":
                    before = None
                    continue
                committed_before_kill = dict(acknowledged)
                victim = coordinator_of(cluster)
                cluster.brokers[victim].kill()
                wait_for(
                    lambda dead=victim: coordinator_of(cluster) not in (-1, dead),
                    CONVERGENCE_TIMEOUT,
                    "another broker to coordinate the group",
                )
        after = wait_for(
            lambda: (
                (group := describe(cluster)) is not None and group.group_state == "Stable" and group
            ),
            CONVERGENCE_TIMEOUT,
            "the group, loaded by the new coordinator",
        )
    finally:
        for consumer in members:
            consumer.close()
    assert before is not None, "the group never settled before the kill"
    assert len(reads) == RECORDS, f"only {len(reads)} of {RECORDS} records were read"
    # The new coordinator rebuilt the group from the log: the same members, whose epochs
    # and the group's carried on from where they were.
    assert {m.member_id for m in after.members} == {m.member_id for m in before.members}
    assert after.group_epoch >= before.group_epoch >= 2
    # Nothing before a committed offset was read again: a partition that moved was read
    # from the offset the group had committed.
    for (partition, offset), count in reads.items():
        if count > 1:
            assert offset >= committed_before_kill.get(partition, 0), (partition, offset)
    assert sum(count - 1 for count in reads.values()) <= PARTITIONS
