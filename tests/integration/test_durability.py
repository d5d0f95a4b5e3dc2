"""What survives a crash, and how the log on disk is shaped: recovery, rolling and retention.

These tests look at the files themselves (`<log.dir>/<topic>-<partition>/<base offset>.log`)
because their names and sizes are part of what Kafka operators rely on.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from minibroker.tools.launcher import BrokerProcess
from tests.conftest import BrokerFactory, confluent_read_all, create_topic, wait_for

SEGMENT_NAME = re.compile(r"^\d{20}\.log$")
# Brokers of their own (tests/conftest.py's `broker`, `broker_factory`): each test kills or
# restarts its broker and reads its files, or needs log.segment.bytes and retention read at start.


def produce(broker: BrokerProcess, topic: str, values: list[bytes], **settings) -> list[int]:
    """Send `values` to partition 0 with acks=all; return the offsets the broker assigned."""
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "message.timeout.ms": 30000,
            **settings,
        }
    )
    offsets: dict[bytes, int] = {}
    errors = []

    def on_delivery(error, message):
        if error is None:
            offsets[message.value()] = message.offset()
        else:
            errors.append(error)

    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0, "messages still undelivered after 60s"
    assert errors == []
    return [offsets[value] for value in values]


def numbered_values(first: int, count: int, padding: int = 100) -> list[bytes]:
    return [
        f"message-{number:07d}-{'p' * padding}".encode() for number in range(first, first + count)
    ]


def read_partition(broker: BrokerProcess, topic: str, start: int, count: int) -> list[tuple]:
    """(offset, value) of `count` messages of partition 0 from offset `start`."""
    messages = confluent_read_all(broker.bootstrap, topic, {0: start}, count)
    return [(message.offset(), message.value()) for message in messages]


def segment_files(partition_dir: Path) -> list[Path]:
    return sorted(path for path in partition_dir.glob("*.log") if SEGMENT_NAME.match(path.name))


def watermarks(broker: BrokerProcess, topic: str) -> tuple[int, int]:
    """(earliest, latest) offsets of partition 0, by ListOffsets (-2 and -1)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)
    finally:
        consumer.close()


def test_acknowledged_messages_survive_kill_9(broker: BrokerProcess):
    topic = "survives-crash"
    create_topic(broker.bootstrap, topic, 1)
    values = numbered_values(0, 5_000)
    assert produce(broker, topic, values) == list(range(len(values)))

    broker.kill()
    broker.restart()
    broker.wait_ready()

    assert read_partition(broker, topic, 0, len(values)) == list(enumerate(values))
    assert watermarks(broker, topic) == (0, len(values))


def torn_batch(last_batch: bytes, next_offset: int) -> bytes:
    """The first bytes of a batch whose header promises more than was written."""
    return struct.pack(">qi", next_offset, len(last_batch) - 12) + last_batch[12:40]


def batch_with_bad_crc(last_batch: bytes, next_offset: int) -> bytes:
    """A complete, well-sized batch whose last byte no longer matches its CRC."""
    corrupted = bytearray(last_batch)
    corrupted[0:8] = struct.pack(">q", next_offset)
    corrupted[-1] ^= 0xFF
    return bytes(corrupted)


def zero_fill(last_batch: bytes, next_offset: int) -> bytes:
    """What a file system may leave after a crash: blocks of zeros past the last write."""
    return bytes(4096)


def last_batch_in(segment: Path) -> bytes:
    data = segment.read_bytes()
    position = 0
    while True:
        (batch_length,) = struct.unpack_from(">i", data, position + 8)
        end = position + 12 + batch_length
        if end == len(data):
            return data[position:end]
        position = end


@pytest.mark.parametrize(
    "garbage", [torn_batch, batch_with_bad_crc, zero_fill], ids=lambda garbage: garbage.__name__
)
def test_garbage_at_the_end_of_the_log_is_truncated_at_restart(broker: BrokerProcess, garbage):
    topic = "garbage-tail"
    create_topic(broker.bootstrap, topic, 1)
    first_values = numbered_values(0, 1_000)
    assert produce(broker, topic, first_values) == list(range(1_000))

    broker.kill()
    segments = segment_files(broker.log_dir / f"{topic}-0")
    assert segments, f"no segment files in {broker.log_dir / f'{topic}-0'}"
    active = segments[-1]
    valid_size = active.stat().st_size
    with open(active, "ab") as log_file:
        log_file.write(garbage(last_batch_in(active), len(first_values)))
    broker.restart()
    broker.wait_ready()

    assert active.stat().st_size == valid_size
    more_values = numbered_values(1_000, 500)
    assert produce(broker, topic, more_values) == list(range(1_000, 1_500))
    everything = first_values + more_values
    assert read_partition(broker, topic, 0, len(everything)) == list(enumerate(everything))


def test_log_rolls_into_segments_named_by_base_offset(broker_factory: BrokerFactory):
    segment_bytes = 16384
    broker = broker_factory({"log.segment.bytes": segment_bytes})
    topic = "rolling"
    create_topic(broker.bootstrap, topic, 1)
    values = numbered_values(0, 3_000)

    # Small producer batches, so that segments fill batch by batch rather than one batch each.
    assert produce(broker, topic, values, **{"batch.size": 4096}) == list(range(len(values)))

    partition_dir = broker.log_dir / f"{topic}-0"
    segments = segment_files(partition_dir)
    assert len(segments) >= 5, [path.name for path in partition_dir.iterdir()]
    assert segments[0].name == f"{0:020d}.log"
    for segment in segments:
        (first_batch_offset,) = struct.unpack_from(">q", segment.read_bytes(), 0)
        assert int(segment.stem) == first_batch_offset, segment.name
        assert segment.stat().st_size <= segment_bytes, segment.name
    for rolled in segments[:-1]:
        assert rolled.with_suffix(".index").exists(), rolled.name
        assert rolled.with_suffix(".timeindex").exists(), rolled.name

    assert read_partition(broker, topic, 0, len(values)) == list(enumerate(values))
    assert broker.stop() == 0
    broker.restart()
    broker.wait_ready()
    assert read_partition(broker, topic, 0, len(values)) == list(enumerate(values))


def test_retention_by_size_deletes_the_oldest_segments(broker_factory: BrokerFactory):
    retention_bytes = 65536
    broker = broker_factory(
        {
            "log.segment.bytes": 16384,
            "log.retention.bytes": retention_bytes,
            "log.retention.check.interval.ms": 200,
        }
    )
    topic = "retention"
    create_topic(broker.bootstrap, topic, 1)
    values = numbered_values(0, 3_000)
    assert produce(broker, topic, values, **{"batch.size": 4096}) == list(range(len(values)))
    partition_dir = broker.log_dir / f"{topic}-0"

    def retention_applied():
        """Kafka deletes the oldest segment while the rest still hold retention.bytes, and the
        log start offset becomes the base offset of the oldest segment left."""
        try:
            segments = segment_files(partition_dir)
            sizes = [segment.stat().st_size for segment in segments]
        except FileNotFoundError:
            return None
        if not segments or sum(sizes) - sizes[0] >= retention_bytes:
            return None
        earliest, latest = watermarks(broker, topic)
        if earliest != int(segments[0].stem):
            return None
        return sizes, earliest, latest

    sizes, earliest, latest = wait_for(retention_applied, timeout=20, what="size-based retention")

    assert earliest > 0
    assert latest == len(values)
    assert sum(sizes) >= retention_bytes, "retention deleted more than it had to"
    assert not (partition_dir / f"{0:020d}.log").exists()
    remaining = values[earliest:]
    assert read_partition(broker, topic, earliest, len(remaining)) == list(
        enumerate(remaining, start=earliest)
    )
