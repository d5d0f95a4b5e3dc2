"""The broker coordinating a group dies (kill -9) while its consumer commits: another broker
takes over the group's `__consumer_offsets` partition, loads the group from the log, and no
acknowledged commit is lost."""

from __future__ import annotations

import datetime
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v3.request import JoinGroupRequest, JoinGroupRequestProtocol

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import (
    CONVERGENCE_TIMEOUT,
    coordinator_of,
    create_replicated_topic,
    produce_acks_all,
)
from tests.conftest import exchange, wait_for

TOPIC = "orders"
GROUP = "billing"
PARTITIONS = 2


def group_consumer(cluster: Cluster) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.subscribe([TOPIC])
    return consumer


def test_commits_survive_the_coordinators_death(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, PARTITIONS)
    produce_acks_all(
        cluster.bootstrap, TOPIC, [(i % PARTITIONS, b"order-%d" % i) for i in range(2000)]
    )
    consumer = group_consumer(cluster)
    acknowledged: dict[int, int] = {}
    killed_at: float | None = None
    commits_after_kill = 0
    deadline = time.monotonic() + 4 * CONVERGENCE_TIMEOUT
    try:
        while commits_after_kill < 20 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            position = TopicPartition(TOPIC, message.partition(), message.offset() + 1)
            try:
                (committed,) = consumer.commit(offsets=[position], asynchronous=False)
            except KafkaException:
                continue  # not acknowledged: the coordinator is moving
            if committed.error is not None:
                continue
            acknowledged[committed.partition] = committed.offset
            if killed_at is not None:
                commits_after_kill += 1
            elif sum(acknowledged.values()) >= 100:
                victim = coordinator_of(cluster, GROUP)
                cluster.brokers[victim].kill()
                killed_at = time.monotonic()
                wait_for(
                    lambda dead=victim: coordinator_of(cluster, GROUP) not in (-1, dead),
                    CONVERGENCE_TIMEOUT,
                    "another broker to coordinate the group",
                )
    finally:
        consumer.close()
    assert killed_at is not None, "the consumer never committed enough to kill its coordinator"
    assert commits_after_kill == 20, "commits never succeeded against the new coordinator"

    # Records after every acknowledged position: while commits failed (the coordinator
    # moving) the consumer read on, and on a slow machine it may have read a partition to
    # its end, committing there, which would leave the new consumer nothing to read from it.
    produce_acks_all(
        cluster.bootstrap,
        TOPIC,
        [(partition, b"after-%d" % i) for partition in range(PARTITIONS) for i in range(5)],
    )
    resumed = group_consumer(cluster)
    first_offsets: dict[int, int] = {}
    try:
        wait_for(
            lambda: _first_offsets(resumed, first_offsets) == set(acknowledged),
            CONVERGENCE_TIMEOUT,
            "the new consumer to read from every partition it resumes",
        )
    finally:
        resumed.close()
    assert first_offsets == acknowledged


def _first_offsets(consumer: Consumer, seen: dict[int, int]) -> set[int]:
    message = consumer.poll(0.5)
    if message is not None and message.error() is None:
        seen.setdefault(message.partition(), message.offset())
    return set(seen)


def test_brokers_that_do_not_coordinate_the_group_say_so(cluster: Cluster):
    coordinator = wait_for(
        lambda: coordinator_of(cluster, GROUP) not in (-1, None) and coordinator_of(cluster, GROUP),
        CONVERGENCE_TIMEOUT,
        "a coordinator",
    )
    join = JoinGroupRequest(
        group_id=GROUP,
        session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10),
        member_id="",
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
    )
    for node_id, broker in cluster.brokers.items():
        answer = exchange(broker.bootstrap, join)
        expected = ErrorCode.none if node_id == coordinator else ErrorCode.not_coordinator
        assert answer.error_code == expected, (node_id, coordinator)
