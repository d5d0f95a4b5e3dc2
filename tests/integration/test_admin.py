"""Admin requests from real clients, errors included: CreateTopics and DeleteTopics.

The tests that need no settings of their own run on the worker's shared broker
(tests/conftest.py's SHARED_BROKER, the pytest plugin's `kafka_broker`), each on topics of
its own (admin-...). Two take a fresh broker: the one with topic deletion disabled
(delete.topic.enable is read at start), and the DescribeCluster test, which checks the address
the broker advertises (the plugin's broker advertises its fault proxy's).
"""

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.errors import TopicAlreadyExistsError

from minibroker.testing import Cluster
from tests.conftest import SHARED_BROKER

pytestmark = SHARED_BROKER


@pytest.fixture
def shared(kafka_broker: Cluster) -> str:
    """The shared broker's bootstrap address."""
    return kafka_broker.bootstrap_servers


def test_kafka_python_sees_topic_already_exists(shared):
    admin = KafkaAdminClient(bootstrap_servers=shared, request_timeout_ms=10000)
    try:
        topics = {"admin-twice": {"num_partitions": 2, "replication_factor": 1}}
        admin.create_topics(topics, timeout_ms=10000)
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics(topics, timeout_ms=10000)
        admin.delete_topics(["admin-twice"])
        assert "admin-twice" not in admin.list_topics()
    finally:
        admin.close()


def test_confluent_admin_errors_and_deletion(shared):
    admin = AdminClient({"bootstrap.servers": shared})
    admin.create_topics([NewTopic("admin-made", 1, 1)])["admin-made"].result(15)
    again = admin.create_topics([NewTopic("admin-made", 1, 1)])["admin-made"]
    with pytest.raises(Exception) as refused:
        again.result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    too_many = admin.create_topics([NewTopic("admin-replicated", 1, 3)])["admin-replicated"]
    with pytest.raises(Exception) as invalid:
        too_many.result(15)
    assert invalid.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    admin.delete_topics(["admin-made"])["admin-made"].result(15)
    assert "admin-made" not in admin.list_topics(timeout=10).topics


def test_deletion_disabled_is_refused_and_keeps_the_topic(broker_factory):
    broker = broker_factory({"delete.topic.enable": "false"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("kept", 1, 1)])["kept"].result(15)
    with pytest.raises(Exception) as refused:
        admin.delete_topics(["kept"])["kept"].result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_DELETION_DISABLED
    assert "kept" in admin.list_topics(timeout=10).topics


def test_describe_cluster_and_delete_records(broker):
    from confluent_kafka import Producer, TopicPartition

    from tests.conftest import confluent_read_all

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.describe_cluster().result(15)
    assert [(node.id, node.port) for node in cluster.nodes] == [(broker.node_id, broker.port)]
    assert cluster.controller.id == broker.node_id and cluster.cluster_id

    admin.create_topics([NewTopic("trimmed", 1, 1)])["trimmed"].result(15)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for index in range(20):
        producer.produce("trimmed", b"%d" % index, partition=0)
    assert producer.flush(15) == 0
    (future,) = admin.delete_records([TopicPartition("trimmed", 0, 12)]).values()
    assert future.result(15).low_watermark == 12
    read = confluent_read_all(broker.bootstrap, "trimmed", {0: 12}, 8)
    assert [m.value() for m in read] == [b"%d" % i for i in range(12, 20)]
    (too_far,) = admin.delete_records([TopicPartition("trimmed", 0, 99)]).values()
    with pytest.raises(Exception) as refused:
        too_far.result(15)
    assert refused.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "low-watermark"})
    low, high = consumer.get_watermark_offsets(TopicPartition("trimmed", 0), timeout=10)
    consumer.close()
    assert (low, high) == (12, 20)


def test_create_partitions_with_both_admin_clients(shared, kafka_broker):
    from confluent_kafka.admin import NewPartitions
    from kafka.admin import NewPartitions as KafkaNewPartitions

    admin = AdminClient({"bootstrap.servers": shared})
    admin.create_topics([NewTopic("admin-growing", 1, 1)])["admin-growing"].result(15)
    admin.create_partitions([NewPartitions("admin-growing", 3)])["admin-growing"].result(15)
    assert len(admin.list_topics(timeout=10).topics["admin-growing"].partitions) == 3
    shrink = admin.create_partitions([NewPartitions("admin-growing", 2)])["admin-growing"]
    with pytest.raises(Exception) as refused:
        shrink.result(15)
    assert refused.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    missing = admin.create_partitions([NewPartitions("admin-nowhere", 2)])["admin-nowhere"]
    with pytest.raises(Exception) as unknown:
        missing.result(15)
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    kafka_admin = KafkaAdminClient(bootstrap_servers=shared, request_timeout_ms=10000)
    try:
        kafka_admin.create_partitions({"admin-growing": KafkaNewPartitions(total_count=5)})
    finally:
        kafka_admin.close()
    partitions = admin.list_topics(timeout=10).topics["admin-growing"].partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4]
    assert all(p.leader == kafka_broker.node(1).node_id for p in partitions.values())
