"""The log cleaner in a real broker process, seen by a real client (confluent-kafka).

A compacted topic with small segments gets many updates of a few keys; once the cleaner's
checkpoint shows the last update round was cleaned, a consumer reading from the beginning
must see exactly the latest value of every key, at the offsets the producer was told.
"""

from __future__ import annotations

import shutil
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from minibroker.protocol.record_batch import read_header
from minibroker.protocol.records import DELETE_HORIZON_FLAG, decode_records
from minibroker.storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, read_offset_checkpoint
from tests.conftest import batch_compression, fetch_all_batches, wait_for
from tests.integration.test_kcat import kcat

TOPIC = "compacted-updates"
KEYS = 10
ROUNDS = 200
FILLERS = 400
ZSTD = 4


def create_compacted_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
    topic = NewTopic(
        TOPIC,
        num_partitions=1,
        replication_factor=1,
        config={
            "cleanup.policy": "compact",
            "segment.bytes": "4096",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    admin.create_topics([topic], request_timeout=10)[TOPIC].result(timeout=15)


# offset -> timestamp, from the delivery reports and from what consumers read.
TIMESTAMPS_SENT: dict[int, int] = {}
TIMESTAMPS_READ: dict[int, int] = {}


def produce(
    bootstrap: str, messages: list[tuple[bytes, bytes | None]], **settings
) -> dict[tuple[bytes, bytes | None], int]:
    """Send in order; return (key, value) -> offset from the delivery reports (and note each
    record's timestamp in TIMESTAMPS_SENT)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": "zstd",
            "batch.num.messages": 5,
            "message.timeout.ms": 30000,
            **settings,
        }
    )
    offsets: dict[tuple[bytes, bytes | None], int] = {}
    errors = []

    def on_delivery(error, message):
        if error is not None:
            errors.append(error)
        else:
            offsets[message.key(), message.value()] = message.offset()
            TIMESTAMPS_SENT[message.offset()] = message.timestamp()[1]

    for key, value in messages:
        producer.produce(TOPIC, key=key, value=value, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0 and errors == []
    return offsets


def high_watermark(consumer: Consumer, timeout: float = 30.0) -> int:
    """The partition's high watermark. librdkafka answers _DESTROY_BROKER locally, without
    asking anyone, when the query went to the handle of a broker it is dropping (a bootstrap
    broker that was just killed, as in the cluster test's failover); asked again, it asks a
    live one. Any other error, or that one past `timeout`, is raised."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)[1]
        except KafkaException as failure:
            if failure.args[0].code() != KafkaError._DESTROY_BROKER or time.monotonic() > deadline:
                raise


def consume_everything(bootstrap: str) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compacted-reader",
            "enable.auto.commit": False,
            "socket.timeout.ms": 10000,
        }
    )
    try:
        high = high_watermark(consumer)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        messages = []

        def reached_the_end():
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                messages.append((message.offset(), message.key(), message.value()))
                TIMESTAMPS_READ[message.offset()] = message.timestamp()[1]
            return messages and messages[-1][0] >= high - 1

        wait_for(reached_the_end, 30, f"messages up to offset {high - 1}", interval=0)
        return messages
    finally:
        consumer.close()


def consume_with_kafka_python(bootstrap: str, last_offset: int) -> list[tuple]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([KafkaTopicPartition(TOPIC, 0)])
        consumer.seek_to_beginning()
        messages = []

        def reached_the_end():
            for batch in consumer.poll(timeout_ms=200).values():
                messages.extend((m.offset, m.key, m.value) for m in batch)
            return messages and messages[-1][0] >= last_offset

        wait_for(reached_the_end, 30, f"kafka-python to read up to offset {last_offset}")
        return messages
    finally:
        consumer.close()


def consume_with_kcat(broker) -> list[tuple]:
    out = kcat(
        broker.bootstrap,
        "-C",
        "-t",
        TOPIC,
        "-p",
        "0",
        "-o",
        "beginning",
        "-e",
        "-f",
        "%o %k %S %s\n",
    )
    messages = []
    for line in out.splitlines():
        offset, key, length, *value = line.split(" ", 3)
        data = None if int(length) < 0 else (value[0] if value else "").encode()
        messages.append((int(offset), key.encode(), data))
    return messages


def test_a_compacted_topic_keeps_the_latest_value_of_each_key(broker_factory):
    broker = broker_factory({"log.cleaner.backoff.ms": 100})
    create_compacted_topic(broker.bootstrap)
    updates = [
        (b"key-%d" % key, b"key-%d-round-%03d" % (key, round_number))
        for round_number in range(ROUNDS)
        for key in range(KEYS)
    ]
    half = len(updates) // 2
    # The first half comes from an idempotent producer: its last batch is superseded, and
    # stays as a header-only batch for its producer state, which consumers must step over.
    offsets = produce(broker.bootstrap, updates[:half], **{"enable.idempotence": True})
    # A tombstone for key-0 after its last update; then keys written once, so that the last
    # round leaves the active segment (which is never cleaned) and the cleaner sees it.
    tombstone = [(b"key-0", None)]
    fillers = [(b"filler-%d" % number, b"filler-%d" % number) for number in range(FILLERS)]
    offsets |= produce(broker.bootstrap, updates[half:] + tombstone + fillers)
    messages = updates + tombstone + fillers
    latest = dict(messages)
    expected = sorted((offsets[key, value], key, value) for key, value in latest.items())
    last_round_end = offsets[tombstone[0]] + 1

    checkpoint = broker.log_dir / CLEANER_OFFSET_CHECKPOINT

    def cleaned_past_the_last_round():
        if not checkpoint.exists():
            return False
        return read_offset_checkpoint(checkpoint).get((TOPIC, 0), 0) >= last_round_end

    wait_for(cleaned_past_the_last_round, 60, "the cleaner to clean the last update round")

    # Exactly the latest value of every key, the tombstone included (delete.retention.ms is a
    # day), at the offsets the producer was told.
    TIMESTAMPS_READ.clear()
    assert consume_everything(broker.bootstrap) == expected
    # Every record keeps its timestamp, in the batches that got a delete horizon too.
    assert {offset: TIMESTAMPS_SENT[offset] for offset, _, _ in expected} == TIMESTAMPS_READ
    assert consume_with_kafka_python(broker.bootstrap, expected[-1][0]) == expected
    if shutil.which("kcat"):  # Debian's kcat: librdkafka 2.0.2
        assert consume_with_kcat(broker) == expected

    # The cleaned batches (librdkafka compressed every batch of several records it sent)
    # kept their codec; the idempotent producer's last batch is there, empty.
    batches = fetch_all_batches(broker.bootstrap, TOPIC, 0)
    cleaned = [
        batch
        for batch in batches
        if read_header(batch).last_offset < last_round_end
        and 0 < read_header(batch).records_count < read_header(batch).last_offset_delta + 1
    ]
    assert cleaned and all(batch_compression(batch) == ZSTD for batch in cleaned)
    # The tombstone's batch carries its delete horizon (and the consumers above read its
    # records' timestamps right).
    tombstone_batch = next(b for b in batches if read_header(b).last_offset >= last_round_end - 1)
    assert read_header(tombstone_batch).attributes & DELETE_HORIZON_FLAG
    assert sum(len(decode_records(batch)) for batch in batches) == len(latest)
    empty = [read_header(batch) for batch in batches if read_header(batch).records_count == 0]
    assert [header.producer_id >= 0 for header in empty] == [True]

    # And a restart (recovery from the cleaned files and the cleaner checkpoint) changes
    # nothing.
    broker.restart()
    broker.wait_ready(20)
    assert consume_everything(broker.bootstrap) == expected
