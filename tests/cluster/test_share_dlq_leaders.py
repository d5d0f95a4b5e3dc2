"""A share group's dead-letter queue (KIP-1191) whose DLQ partition is led by another broker:
the source partition's leader sends the DLQ record there as a Produce over the inter-broker
listener (Kafka's ShareGroupDLQStateManager sends its ProduceRequests to the DLQ partition's
leader node), and a plain Consumer reads it back with Kafka 4.4's headers. A controller and
two brokers (real processes: the fewest that put the two partitions on different leaders; the
cluster's start is most of the test's time), a confluent-kafka ShareConsumer in explicit
mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import CLUSTER_OVERRIDES, _check_clean_stop
from tests.conftest import set_group_configs, wait_for
from tests.integration.test_share_dlq import (
    REJECTED,
    headers_of,
    poll_until,
    produce,
    read_dlq,
    share_consumer,
)


@pytest.fixture
def cluster(tmp_path: Path):
    started = Cluster.start(tmp_path, brokers=2, overrides=CLUSTER_OVERRIDES)
    yield started
    _check_clean_stop(started)


def _one_record_and_its_dlq(cluster, topic, dlq, group, source_node, dlq_node, record, dlq_configs):
    """The admin client, once `topic` is led by `source_node` holding `record`, its DLQ
    topic `dlq` led by `dlq_node` (with `dlq_configs` beside
    errors.deadletterqueue.group.enable), and `group` reads from the earliest offset with `dlq`
    as its dead-letter queue."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(topic, num_partitions=1, replica_assignment=[[source_node]]),
            NewTopic(
                dlq,
                num_partitions=1,
                replica_assignment=[[dlq_node]],
                config={"errors.deadletterqueue.group.enable": "true", **dlq_configs},
            ),
        ],
        request_timeout=15,
    )
    for future in futures.values():
        future.result(timeout=20)
    wait_for(lambda: cluster.leader_of(topic, 0) == source_node, 30, f"{topic} led")
    wait_for(lambda: cluster.leader_of(dlq, 0) == dlq_node, 30, f"{dlq} led")
    produce(cluster.bootstrap, topic, [record])
    set_group_configs(
        cluster.bootstrap,
        group,
        {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": dlq},
    )
    return admin


def test_a_dlq_partition_led_elsewhere_is_written_by_a_produce_to_its_leader(cluster):
    source_node, dlq_node = sorted(cluster.brokers)[:2]
    topic, dlq, group = "jobs", "dlq.jobs", "job-workers"
    _one_record_and_its_dlq(
        cluster, topic, dlq, group, source_node, dlq_node, (b"job", b"job-0"), {}
    )
    consumer = share_consumer(cluster.bootstrap, group, topic)
    try:
        (message,) = poll_until(consumer, 1)
        consumer.acknowledge(message, AcknowledgeType.REJECT)
        consumer.commit_sync()
    finally:
        consumer.close()

    (written,) = read_dlq(cluster.bootstrap, dlq, 1)
    assert headers_of(written) == {
        "__dlq.errors.topic": topic,
        "__dlq.errors.partition": "0",
        "__dlq.errors.offset": "0",
        "__dlq.errors.group": group,
        "__dlq.errors.delivery.count": "1",
        "__dlq.errors.message": REJECTED,
    }
    assert (written.key(), written.value()) == (None, None)


def test_a_leader_killed_before_its_dlq_write_leaves_the_record_for_its_restart(cluster):
    """kill -9 of the source partition's leader between the ARCHIVING write and the DLQ write
    (Kafka's maybeResumeDlqArchiving, at least once): the DLQ topic refuses the write while
    its min.insync.replicas (2) exceeds its one replica (NOT_ENOUGH_REPLICAS, retried with
    backoff), the REJECT's answer says ARCHIVING is on `__share_group_state`, the leader is
    killed with SIGKILL at once, the DLQ topic is made writable, and the restarted leader,
    loading the share partition at the next ShareFetch, writes the record to the DLQ. The
    record can reach the DLQ only through the restart: no write could succeed before it."""
    source_node, dlq_node = sorted(cluster.brokers)[:2]
    topic, dlq, group = "orders", "dlq.orders", "order-workers"
    admin = _one_record_and_its_dlq(
        cluster,
        topic,
        dlq,
        group,
        source_node,
        dlq_node,
        (b"order", b"order-0"),
        {"min.insync.replicas": "2"},
    )
    consumer = share_consumer(cluster.bootstrap, group, topic)
    try:
        (message,) = poll_until(consumer, 1)
        consumer.acknowledge(message, AcknowledgeType.REJECT)
        results = consumer.commit_sync()
        assert all(error is None for error in results.values()), results
        # Answered: ARCHIVING is persisted, the DLQ write is failing and being retried.
        assert cluster.brokers[source_node].kill() == -9
    finally:
        consumer.close()

    resource = ConfigResource(
        ResourceType.TOPIC,
        dlq,
        incremental_configs=[
            ConfigEntry("min.insync.replicas", "1", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    cluster.brokers[source_node].restart()
    cluster.brokers[source_node].wait_ready(30)
    wait_for(lambda: cluster.leader_of(topic, 0) == source_node, 30, f"{topic} led again")
    # A next record, so that the consumer's ShareFetch shows the share partition loaded.
    produce(cluster.bootstrap, topic, [(b"order", b"order-1")])
    consumer = share_consumer(cluster.bootstrap, group, topic)
    try:
        (message,) = poll_until(consumer, 1)
        assert message.offset() == 1
        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
    finally:
        consumer.close()

    written = read_dlq(cluster.bootstrap, dlq, 1)
    assert [headers_of(w) for w in written] == [
        {
            "__dlq.errors.topic": topic,
            "__dlq.errors.partition": "0",
            "__dlq.errors.offset": "0",
            "__dlq.errors.group": group,
            "__dlq.errors.delivery.count": "1",
            "__dlq.errors.message": REJECTED,
        }
    ]


@pytest.fixture
def cluster3(tmp_path: Path):
    started = Cluster.start(tmp_path, brokers=3, overrides=CLUSTER_OVERRIDES)
    yield started
    _check_clean_stop(started)


def test_archiving_records_of_a_killed_leader_go_to_the_dlq_from_the_next_leader(cluster3):
    """The DLQ's at-least-once write across a leadership move (KIP-1191, Kafka 4.4's
    maybeResumeDlqArchiving): a source topic with 3 replicas on 3 brokers, three records
    REJECTed while the DLQ topic refuses writes (min.insync.replicas 2 on its one replica:
    NOT_ENOUGH_REPLICAS, retried), so the REJECT's answer leaves them ARCHIVING on
    `__share_group_state`; the source leader is killed with SIGKILL and another replica is
    elected; the DLQ is made writable and the next ShareFetch, on the new leader, initializes
    the share partition from the share coordinator's state, finds them ARCHIVING and writes
    them to the DLQ (Kafka's rule: at initialization). The old leader stays dead: only the new
    leader can have written them. The records' cause comes from their delivery count (1, below
    the limit: rejected), as the state does not keep it."""
    cluster = cluster3
    source_node, dlq_node, third = sorted(cluster.brokers)
    topic, dlq, group = "tasks", "dlq.tasks", "task-workers"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(topic, num_partitions=1, replica_assignment=[[source_node, dlq_node, third]]),
            NewTopic(
                dlq,
                num_partitions=1,
                replica_assignment=[[dlq_node]],
                config={"errors.deadletterqueue.group.enable": "true", "min.insync.replicas": "2"},
            ),
        ],
        request_timeout=15,
    )
    for future in futures.values():
        future.result(timeout=20)
    wait_for(lambda: cluster.leader_of(topic, 0) == source_node, 30, f"{topic} led")
    cluster.wait_for_isr(topic, 0, {source_node, dlq_node, third})
    wait_for(lambda: cluster.leader_of(dlq, 0) == dlq_node, 30, f"{dlq} led")
    produce(cluster.bootstrap, topic, [(b"task", b"task-%d" % n) for n in range(3)])
    set_group_configs(
        cluster.bootstrap,
        group,
        {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": dlq},
    )
    consumer = share_consumer(cluster.bootstrap, group, topic)
    try:
        for message in poll_until(consumer, 3):
            consumer.acknowledge(message, AcknowledgeType.REJECT)
        results = consumer.commit_sync()
        assert all(error is None for error in results.values()), results
        # Answered: ARCHIVING is persisted; the DLQ write is failing and being retried (for
        # about 15 s: 5 attempts over Kafka's backoff). The other replicas in the ISR, so that
        # one of them can be elected (replica.lag.time.max.ms is 1.5 s here: a busy machine
        # can drop a follower for a moment).
        cluster.wait_for_isr(topic, 0, {source_node, dlq_node, third})
        assert cluster.brokers[source_node].kill() == -9
    finally:
        consumer.close()
    wait_for(
        lambda: cluster.leader_of(topic, 0, via=dlq_node) in (dlq_node, third),
        30,
        f"{topic} led by another replica",
    )
    resource = ConfigResource(
        ResourceType.TOPIC,
        dlq,
        incremental_configs=[
            ConfigEntry("min.insync.replicas", "1", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    # A next record, so that the consumer's ShareFetch shows the share partition loaded on
    # the new leader.
    produce(cluster.bootstrap, topic, [(b"task", b"task-3")])
    consumer = share_consumer(cluster.bootstrap, group, topic)
    try:
        (message,) = poll_until(consumer, 1)
        assert message.offset() == 3
        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
    finally:
        consumer.close()

    written = read_dlq(cluster.bootstrap, dlq, 3)
    assert sorted(int(headers_of(w)["__dlq.errors.offset"]) for w in written) == [0, 1, 2]
    for record in written:
        headers = headers_of(record)
        assert headers["__dlq.errors.topic"] == topic
        assert headers["__dlq.errors.group"] == group
        assert headers["__dlq.errors.delivery.count"] == "1"
        assert headers["__dlq.errors.message"] == REJECTED
