"""Admin requests from real clients, errors included: CreateTopics and DeleteTopics."""

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.errors import TopicAlreadyExistsError


def test_kafka_python_sees_topic_already_exists(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        topics = {"twice": {"num_partitions": 2, "replication_factor": 1}}
        admin.create_topics(topics, timeout_ms=10000)
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics(topics, timeout_ms=10000)
        admin.delete_topics(["twice"])
        assert "twice" not in admin.list_topics()
    finally:
        admin.close()


def test_confluent_admin_errors_and_deletion(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("made", 1, 1)])["made"].result(15)
    again = admin.create_topics([NewTopic("made", 1, 1)])["made"]
    with pytest.raises(Exception) as refused:
        again.result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    too_many = admin.create_topics([NewTopic("replicated", 1, 3)])["replicated"]
    with pytest.raises(Exception) as invalid:
        too_many.result(15)
    assert invalid.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    admin.delete_topics(["made"])["made"].result(15)
    assert "made" not in admin.list_topics(timeout=10).topics


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


def test_create_partitions_with_both_admin_clients(broker):
    from confluent_kafka.admin import NewPartitions
    from kafka.admin import NewPartitions as KafkaNewPartitions

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("growing", 1, 1)])["growing"].result(15)
    admin.create_partitions([NewPartitions("growing", 3)])["growing"].result(15)
    assert len(admin.list_topics(timeout=10).topics["growing"].partitions) == 3
    shrink = admin.create_partitions([NewPartitions("growing", 2)])["growing"]
    with pytest.raises(Exception) as refused:
        shrink.result(15)
    assert refused.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    missing = admin.create_partitions([NewPartitions("nowhere", 2)])["nowhere"]
    with pytest.raises(Exception) as unknown:
        missing.result(15)
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    kafka_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        kafka_admin.create_partitions({"growing": KafkaNewPartitions(total_count=5)})
    finally:
        kafka_admin.close()
    partitions = admin.list_topics(timeout=10).topics["growing"].partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4]
    assert all(p.leader == broker.node_id for p in partitions.values())
