"""The log cleaner in a real broker process, seen by a real client (confluent-kafka).

A compacted topic with small segments gets many updates of a few keys; once the cleaner's
checkpoint shows the last update round was cleaned, a consumer reading from the beginning
must see exactly the latest value of every key, at the offsets the producer was told.
"""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.records import decode_records
from storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, read_offset_checkpoint
from tests.conftest import batch_compression, fetch_all_batches, wait_for

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


def produce(bootstrap: str, messages: list[tuple[bytes, bytes]]) -> dict[bytes, int]:
    """Send in order; return value -> offset from the delivery reports."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": "zstd",
            "batch.num.messages": 5,
            "message.timeout.ms": 30000,
        }
    )
    offsets: dict[bytes, int] = {}
    errors = []

    def on_delivery(error, message):
        if error is not None:
            errors.append(error)
        else:
            offsets[message.value()] = message.offset()

    for key, value in messages:
        producer.produce(TOPIC, key=key, value=value, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0 and errors == []
    return offsets


def consume_everything(bootstrap: str) -> list[tuple[int, bytes, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compacted-reader",
            "enable.auto.commit": False,
            "socket.timeout.ms": 10000,
        }
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        messages = []

        def reached_the_end():
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                messages.append((message.offset(), message.key(), message.value()))
            return messages and messages[-1][0] >= high - 1

        wait_for(reached_the_end, 30, f"messages up to offset {high - 1}", interval=0)
        return messages
    finally:
        consumer.close()


def test_a_compacted_topic_keeps_the_latest_value_of_each_key(broker_factory):
    broker = broker_factory({"log.cleaner.backoff.ms": 100})
    create_compacted_topic(broker.bootstrap)
    updates = [
        (b"key-%d" % key, b"key-%d-round-%03d" % (key, round_number))
        for round_number in range(ROUNDS)
        for key in range(KEYS)
    ]
    # Distinct keys after the updates, so that the last round leaves the active segment
    # (which is never cleaned) and the cleaner can see it.
    fillers = [(b"filler-%d" % number, b"filler-%d" % number) for number in range(FILLERS)]
    offsets = produce(broker.bootstrap, updates + fillers)
    latest = {key: value for key, value in updates + fillers}
    last_round_end = max(offsets[value] for value in latest.values() if b"round" in value) + 1

    checkpoint = broker.log_dir / CLEANER_OFFSET_CHECKPOINT

    def cleaned_past_the_last_round():
        if not checkpoint.exists():
            return False
        return read_offset_checkpoint(checkpoint).get((TOPIC, 0), 0) >= last_round_end

    wait_for(cleaned_past_the_last_round, 60, "the cleaner to clean the last update round")

    consumed = consume_everything(broker.bootstrap)
    assert [offset for offset, _, _ in consumed] == sorted(offsets[v] for v in latest.values())
    assert {key: value for _, key, value in consumed} == latest
    assert len(consumed) == len(latest)  # one record per key: every older value is gone

    # The rewritten batches kept their codec.
    batches = fetch_all_batches(broker.bootstrap, TOPIC, 0)
    assert all(batch_compression(batch) == ZSTD for batch in batches if len(batch) > 61)
    assert sum(len(decode_records(batch)) for batch in batches) == len(latest)
