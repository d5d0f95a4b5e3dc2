"""kafka-python (the pure-Python client) against a real broker process.

Its producer enables idempotence by default, so the default settings already exercise
InitProducerId and producer sequence numbers; acks=1 is the one setting that silently turns
idempotence off, which makes the two acks values two different producers.
"""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import codec as kafka_codec
from kafka.admin import KafkaAdminClient

from minibroker.testing import Cluster
from minibroker.tools.launcher import BrokerProcess
from tests.conftest import (
    COMPRESSION_CODECS,
    SHARED_BROKER,
    assert_round_trip,
    batch_compression,
    batch_crc_is_valid,
    fetch_all_batches,
)

MESSAGE_COUNT = 10_000
PARTITIONS = 3
KEY_COUNT = 100

CODEC_AVAILABLE = {
    "gzip": kafka_codec.has_gzip,
    "snappy": kafka_codec.has_snappy,
    "lz4": kafka_codec.has_lz4,
    "zstd": kafka_codec.has_zstd,
}
CODEC_PACKAGE = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}

# The worker's shared broker (tests/conftest.py): each test writes and reads a topic of its
# own (kafka-python-...), with default settings.
pytestmark = SHARED_BROKER


@pytest.fixture
def broker(kafka_broker: Cluster) -> BrokerProcess:
    """The shared broker's process."""
    return kafka_broker.node(1)


def create_topic(broker: BrokerProcess, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics(
            {topic: {"num_partitions": partitions, "replication_factor": 1}},
            timeout_ms=10000,
            wait_for_metadata=True,
        )
    finally:
        admin.close()


def produce_keyed(broker: BrokerProcess, topic: str, count: int, **producer_settings) -> list:
    """Send `count` keyed messages; return (key, value, partition, offset) in send order, the
    partition and offset being what the producer's RecordMetadata said.

    Only timeouts are added to the caller's settings: they make a broken broker fail the test
    within seconds instead of the client's default minutes.
    """
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        max_block_ms=15000,
        delivery_timeout_ms=30000,
        request_timeout_ms=10000,
        **producer_settings,
    )
    try:
        sent = []
        for number in range(count):
            key = f"key-{number % KEY_COUNT}".encode()
            # The run of one letter makes even a one-record batch shrink when compressed, so
            # clients never fall back to sending it uncompressed.
            value = f"value-{number:06d}-{'v' * (100 + number % 100)}".encode()
            sent.append((key, value, producer.send(topic, key=key, value=value)))
        producer.flush(timeout=60)
        reported = [(key, value, future.get(timeout=1)) for key, value, future in sent]
        return [(key, value, meta.partition, meta.offset) for key, value, meta in reported]
    finally:
        producer.close(timeout=10)


def consume_all(broker: BrokerProcess, topic: str, partitions: int, expected: int) -> list:
    """Read `expected` records from the start of every partition, without a consumer group;
    return them as (key, value, partition, offset)."""
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        request_timeout_ms=10000,
    )
    records = []
    try:
        consumer.assign([TopicPartition(topic, partition) for partition in range(partitions)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 60
        while len(records) < expected:
            if time.monotonic() >= deadline:
                pytest.fail(f"consumed {len(records)} of {expected} records within 60s")
            for partition_records in consumer.poll(timeout_ms=500).values():
                records += partition_records
    finally:
        consumer.close()
    return [(record.key, record.value, record.partition, record.offset) for record in records]


@pytest.mark.parametrize("acks", [1, "all"])
def test_keyed_round_trip_over_three_partitions(broker: BrokerProcess, acks):
    topic = f"kafka-python-acks-{acks}"
    create_topic(broker, topic, PARTITIONS)

    produced = produce_keyed(broker, topic, MESSAGE_COUNT, acks=acks)
    consumed = consume_all(broker, topic, PARTITIONS, MESSAGE_COUNT)

    assert_round_trip(produced, consumed, PARTITIONS)


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_round_trip(broker: BrokerProcess, compression: str):
    if not CODEC_AVAILABLE[compression]():
        pytest.skip(f"kafka-python cannot {compression}: install {CODEC_PACKAGE[compression]}")
    topic = f"kafka-python-{compression}"
    create_topic(broker, topic, PARTITIONS)
    count = 3_000

    produced = produce_keyed(broker, topic, count, compression_type=compression, linger_ms=5)
    consumed = consume_all(broker, topic, PARTITIONS, count)

    assert_round_trip(produced, consumed, PARTITIONS)
    for partition in range(PARTITIONS):
        batches = fetch_all_batches(broker.bootstrap, topic, partition)
        assert batches
        assert {batch_compression(batch) for batch in batches} == {COMPRESSION_CODECS[compression]}
        assert all(batch_crc_is_valid(batch) for batch in batches)
