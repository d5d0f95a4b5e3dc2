"""The coordinator of a consumer-protocol group (KIP-848) dies (kill -9) while two
confluent-kafka consumers with `group.protocol=consumer` read and commit: another broker
loads the group from its records in `__consumer_offsets`, the same members carry on at
their epochs, and the group reads on from its committed offsets."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from kio.static.primitive import i32, i32Timedelta

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import (
    BROKERS,
    CLUSTER_OVERRIDES,
    CONVERGENCE_TIMEOUT,
    _check_clean_stop,
    coordinator_of,
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


def describe(cluster: Cluster):
    """The group as ConsumerGroupDescribe gives it, asked of its coordinator (None while
    there is none, or while it loads)."""
    node = coordinator_of(cluster, GROUP)
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


def bump_epoch_twice(cluster: Cluster) -> None:
    coordinator = cluster.brokers[coordinator_of(cluster, GROUP)].bootstrap
    joined = exchange(
        coordinator,
        ConsumerGroupHeartbeatRequest(
            group_id=GROUP,
            member_id="",
            member_epoch=i32(0),
            rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            subscribed_topic_names=(TOPIC,),
            topic_partitions=(),
        ),
    )
    assert joined.error_code.value == 0, joined
    left = exchange(
        coordinator,
        ConsumerGroupHeartbeatRequest(
            group_id=GROUP,
            member_id=joined.member_id,
            member_epoch=i32(-1),
            topic_partitions=None,
        ),
    )
    assert left.error_code.value == 0, left


def test_the_group_survives_its_coordinators_death(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, PARTITIONS)
    half = RECORDS // 2
    produce_acks_all(
        cluster.bootstrap, TOPIC, [(i % PARTITIONS, b"order-%d" % i) for i in range(half)]
    )
    members = [member(cluster), member(cluster)]
    reads: dict[tuple[int, int], int] = {}
    acknowledged: dict[int, int] = {}

    def poll_once() -> None:
        """Poll each member once, committing the record it read. librdkafka applies an
        assignment and acknowledges a revocation only from poll: a member not polled never
        reconciles, so every wait on the group polls."""
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

    def read_until(count: int, what: str) -> None:
        """Poll both members, committing each record read, until ``count`` were read."""

        def step() -> bool:
            poll_once()
            return len(reads) >= count

        wait_for(step, 4 * CONVERGENCE_TIMEOUT, what, interval=0)

    try:
        read_until(half, "the first half read")
        # A third member joins and leaves (raw heartbeats): the group epoch is then past what
        # a group formed afresh by the two members would have, which tells a group rebuilt
        # from the log from one recreated after the failover.
        bump_epoch_twice(cluster)

        def stable_over_two():
            poll_once()
            if sorted(len(c.assignment()) for c in members) != [2, 2]:
                return None
            group = describe(cluster)
            return group if group is not None and group.group_state == "Stable" else None

        before = wait_for(stable_over_two, CONVERGENCE_TIMEOUT, "the group stable over two members")
        committed_before_kill = dict(acknowledged)
        victim = coordinator_of(cluster, GROUP)
        cluster.brokers[victim].kill()
        wait_for(
            lambda: coordinator_of(cluster, GROUP) not in (-1, victim),
            CONVERGENCE_TIMEOUT,
            "another broker to coordinate the group",
        )
        produce_acks_all(
            cluster.bootstrap,
            TOPIC,
            [(i % PARTITIONS, b"order-%d" % i) for i in range(half, RECORDS)],
        )
        read_until(RECORDS, "every record read after the failover")
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
    assert len(reads) == RECORDS
    # The new coordinator rebuilt the group from the log: the same members, whose epochs
    # and the group's carried on from where they were.
    assert {m.member_id for m in after.members} == {m.member_id for m in before.members}
    assert after.group_epoch >= before.group_epoch >= 4
    # Nothing before a committed offset was read again: a partition that moved was read
    # from the offset the group had committed.
    for (partition, offset), count in reads.items():
        if count > 1:
            assert offset >= committed_before_kill.get(partition, 0), (partition, offset)
    assert sum(count - 1 for count in reads.values()) <= PARTITIONS
