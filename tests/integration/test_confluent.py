"""confluent-kafka (librdkafka) against a real broker process.

librdkafka is the strictest of the common clients about the protocol, and the one most
production services use; its defaults (acks=all, linger.ms=5, read_committed consumers) are
left alone except for timeouts.
"""

from __future__ import annotations

import logging
import re
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from minibroker.testing import Cluster
from minibroker.tools.launcher import BrokerProcess
from tests.conftest import (
    COMPRESSION_CODECS,
    SHARED_BROKER,
    assert_round_trip,
    batch_compression,
    batch_crc_is_valid,
    confluent_read_all,
    create_topic,
    fetch_all_batches,
)

MESSAGE_COUNT = 10_000
PARTITIONS = 3
KEY_COUNT = 100

# The worker's shared broker (tests/conftest.py): each test uses topics and transactional ids
# of its own (confluent-...), with default settings.
pytestmark = SHARED_BROKER


@pytest.fixture
def broker(kafka_broker: Cluster) -> BrokerProcess:
    """The shared broker's process."""
    return kafka_broker.node(1)


def produce_keyed(broker: BrokerProcess, topic: str, count: int, **settings) -> list[tuple]:
    """Send `count` keyed messages; return (key, value, partition, offset) in send order, the
    partition and offset being what the delivery reports said."""
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 30000, **settings}
    )
    reports: dict[bytes, tuple[int, int]] = {}
    errors = []

    def on_delivery(error, message):
        if error is None:
            reports[message.value()] = (message.partition(), message.offset())
        else:
            errors.append(error)

    sent = []
    for number in range(count):
        key = f"key-{number % KEY_COUNT}".encode()
        # A run of one letter makes even a one-record batch shrink when compressed, so
        # librdkafka never falls back to sending it uncompressed.
        value = f"value-{number:06d}-{'c' * (100 + number % 100)}".encode()
        sent.append((key, value))
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0, "messages still undelivered after 60s"
    assert errors == []
    return [(key, value, *reports[value]) for key, value in sent]


def read_back(broker: BrokerProcess, topic: str, partitions: int, count: int) -> list[tuple]:
    messages = confluent_read_all(
        broker.bootstrap, topic, {partition: 0 for partition in range(partitions)}, count
    )
    return [
        (message.key(), message.value(), message.partition(), message.offset())
        for message in messages
    ]


@pytest.mark.parametrize("acks", ["1", "all"])
def test_keyed_round_trip_over_three_partitions(broker: BrokerProcess, acks: str):
    topic = f"confluent-acks-{acks}"
    create_topic(broker.bootstrap, topic, PARTITIONS)

    produced = produce_keyed(broker, topic, MESSAGE_COUNT, acks=acks)
    consumed = read_back(broker, topic, PARTITIONS, MESSAGE_COUNT)

    assert_round_trip(produced, consumed, PARTITIONS)


# librdkafka switches LZ4 on only for brokers that advertise FindCoordinator (key 10), taking
# it as the mark of Kafka 0.8.2+: this passes since consumer groups exist.
@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_served_as_produced(broker: BrokerProcess, compression: str):
    topic = f"confluent-{compression}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    count = 3_000

    produced = produce_keyed(broker, topic, count, **{"compression.type": compression})

    for partition in range(PARTITIONS):
        batches = fetch_all_batches(broker.bootstrap, topic, partition)
        assert batches, f"partition {partition} returned no batches"
        assert {batch_compression(batch) for batch in batches} == {COMPRESSION_CODECS[compression]}
        assert all(batch_crc_is_valid(batch) for batch in batches)
    consumed = read_back(broker, topic, PARTITIONS, count)
    assert_round_trip(produced, consumed, PARTITIONS)


def test_a_transactional_producer_initializes(broker):
    """A single broker coordinates transactions too (`__transaction_state` with one replica):
    init_transactions succeeds in librdkafka and kafka-python, and a second producer with the
    same transactional id fences the first."""
    import time

    from confluent_kafka import KafkaException
    from kafka import KafkaProducer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "confluent-tx"})
    started = time.monotonic()
    producer.init_transactions(30)
    assert time.monotonic() - started < 20
    successor = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": "confluent-tx"}
    )
    successor.init_transactions(30)
    producer.begin_transaction()
    producer.produce("confluent-fenced", b"zombie")
    with pytest.raises(KafkaException) as fenced:
        producer.commit_transaction(20)
    assert fenced.value.args[0].fatal()

    python_producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, transactional_id="confluent-tx2"
    )
    try:
        python_producer.init_transactions()
    finally:
        python_producer.close(timeout=5)


# Issue 34: the API versions librdkafka 2.16 (confluent-kafka 2.16.1) sends to minibroker, each
# the newest it knows (its own ranges in librdkafka's rdkafka_request.c and friends, all at or
# below minibroker's): the table of docs/compatibility.md.
LIBRDKAFKA_SENDS = {
    "ApiVersion": 3,
    "Metadata": 13,
    "CreateTopics": 4,
    "DescribeConfigs": 1,
    "InitProducerId": 4,
    "Produce": 10,
    "FindCoordinator": 2,
    "JoinGroup": 5,
    "SyncGroup": 3,
    "OffsetFetch": 9,
    "ListOffsets": 7,
    "Fetch": 16,
    "OffsetCommit": 9,
    "LeaveGroup": 1,
}
_SENT = re.compile(r"Sent (\w+)Request \(v(\d+)")


def test_librdkafka_sends_the_newest_versions_both_know(broker):
    """An admin client, an idempotent producer and a classic group consumer with librdkafka's
    protocol debug log: every request of these APIs at LIBRDKAFKA_SENDS' version (a broker
    advertising less would get less)."""
    sent: dict[str, set[int]] = defaultdict(set)

    class Versions(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if found := _SENT.search(record.getMessage()):
                sent[found.group(1)].add(int(found.group(2)))

    logger = logging.getLogger("confluent-versions")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(Versions())
    common = {"bootstrap.servers": broker.bootstrap, "debug": "protocol", "logger": logger}
    topic = "confluent-versions"
    admin = AdminClient(common)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    admin.describe_configs([ConfigResource("topic", topic)])[ConfigResource("topic", topic)].result(
        30
    )
    admin.poll(1)
    producer = Producer({**common, "enable.idempotence": True})
    for number in range(10):
        producer.produce(topic, b"%d" % number)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {**common, "group.id": "confluent-versions", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    read = 0
    deadline = time.monotonic() + 30
    while read < 10 and time.monotonic() < deadline:
        message = consumer.poll(1)
        read += message is not None and message.error() is None
    assert read == 10
    consumer.commit(asynchronous=False)
    consumer.close()
    assert {api: sent[api] for api in LIBRDKAFKA_SENDS} == {
        api: {version} for api, version in LIBRDKAFKA_SENDS.items()
    }
