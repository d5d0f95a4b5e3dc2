"""kcat (librdkafka's command-line client) against a real broker process.

kcat is what an operator reaches for first, so it must list, produce, consume and look up offsets
by time exactly as it would against Kafka.

The tests run on the worker's shared broker (tests/conftest.py's SHARED_BROKER, the pytest
plugin's `kafka_broker`), each on a topic of its own, but the metadata test: it checks the
address the broker advertises, and the plugin's broker advertises its fault proxy's, so it
takes a fresh broker of its own (tests/conftest.py's `broker`).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from confluent_kafka import Producer

from minibroker.testing import Cluster
from minibroker.tools.launcher import BrokerProcess
from tests.conftest import COMPRESSION_CODECS, SHARED_BROKER, batch_compression, fetch_all_batches

pytestmark = [
    pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed"),
    SHARED_BROKER,
]

KCAT_TIMEOUT = 60
LINE_COUNT = 10_000


@pytest.fixture
def shared(kafka_broker: Cluster) -> str:
    """The shared broker's bootstrap address."""
    return kafka_broker.bootstrap_servers


def kcat(bootstrap: str, *args: str, stdin: bytes | None = None) -> str:
    """Run kcat against the broker at `bootstrap` and return its stdout; fail with its stderr
    on a non-zero exit."""
    command = ["kcat", "-b", bootstrap, "-m", "10", *args]
    try:
        finished = subprocess.run(
            command, input=stdin, capture_output=True, timeout=KCAT_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(f"{' '.join(command)} ran for more than {KCAT_TIMEOUT}s: {timeout.stderr!r}")
    if finished.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} exited with {finished.returncode}:\n"
            f"{finished.stderr.decode(errors='replace')}"
        )
    return finished.stdout.decode()


def produce_lines(bootstrap: str, topic: str, lines: list[str]) -> None:
    kcat(
        bootstrap,
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-X",
        "message.timeout.ms=30000",
        stdin=("\n".join(lines) + "\n").encode(),
    )


def consume_from_beginning(bootstrap: str, topic: str) -> list[tuple[int, str]]:
    """Every message of partition 0 as (offset, value), reading until the end of the log."""
    output = kcat(
        bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q", "-f", "%o:%s\n"
    )
    records = []
    for line in output.splitlines():
        offset, value = line.split(":", 1)
        records.append((int(offset), value))
    return records


def test_metadata_lists_the_broker_and_its_topics(broker: BrokerProcess):
    produce_lines(broker.bootstrap, "listed-topic", ["hello"])

    metadata = json.loads(kcat(broker.bootstrap, "-L", "-J"))

    assert metadata["brokers"] == [{"id": broker.node_id, "name": broker.bootstrap}]
    topics = {topic["topic"]: topic for topic in metadata["topics"]}
    assert "listed-topic" in topics
    listed = topics["listed-topic"]
    assert "error" not in listed
    assert [partition["partition"] for partition in listed["partitions"]] == [0]
    assert listed["partitions"][0]["leader"] == broker.node_id


def test_lines_produced_to_an_auto_created_topic_come_back_in_order(shared: str):
    lines = [f"line-{number:05d}-{'x' * (number % 50)}" for number in range(LINE_COUNT)]

    produce_lines(shared, "kcat-roundtrip", lines)
    records = consume_from_beginning(shared, "kcat-roundtrip")

    assert [offset for offset, _ in records] == list(range(LINE_COUNT))
    assert [value for _, value in records] == lines


def query_offset_for_time(bootstrap: str, topic: str, timestamp_ms: int) -> int:
    answer = json.loads(kcat(bootstrap, "-Q", "-t", f"{topic}:0:{timestamp_ms}", "-J"))
    return answer[topic]["0"]["offset"]


def test_offsets_for_times_find_the_first_message_at_or_after_the_timestamp(shared: str):
    topic = "kcat-times"
    first_group_time = 1_700_000_000_000
    second_group_time = first_group_time + 60_000
    group_size = 20
    producer = Producer({"bootstrap.servers": shared, "linger.ms": 5, "message.timeout.ms": 30000})
    deliveries = []

    def record_delivery(error, message):
        deliveries.append((error, message.offset()))

    # Each group goes out as its own batches (flush in between); within the second group every
    # record is a millisecond later than the previous one, so a lookup must look inside batches.
    for group_time in (first_group_time, second_group_time):
        for index in range(group_size):
            producer.produce(
                topic,
                value=f"{group_time}-{index}".encode(),
                partition=0,
                timestamp=group_time + index,
                on_delivery=record_delivery,
            )
        assert producer.flush(30) == 0, "messages still undelivered after 30s"
    assert [error for error, _ in deliveries if error is not None] == []
    assert [offset for _, offset in deliveries] == list(range(2 * group_size))

    assert query_offset_for_time(shared, topic, first_group_time) == 0
    assert query_offset_for_time(shared, topic, first_group_time + 30_000) == group_size
    assert query_offset_for_time(shared, topic, second_group_time) == group_size
    assert query_offset_for_time(shared, topic, second_group_time + 5) == group_size + 5
    # No message is that late: Kafka answers offset -1.
    assert query_offset_for_time(shared, topic, second_group_time + 3_600_000) == -1


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kcat_compressed_batches_are_stored_compressed(shared: str, codec: str):
    """librdkafka decides which codecs a broker takes from the APIs it advertises: Debian's
    kcat (librdkafka 2.0.2) sent gzip, snappy and lz4 uncompressed until FindCoordinator was."""
    topic = f"kcat-{codec}"
    lines = [f"line {index} " + "x" * 50 for index in range(500)]
    kcat(
        shared,
        *("-P", "-t", topic, "-p", "0", "-z", codec),
        stdin=("\n".join(lines) + "\n").encode(),
    )
    batches = fetch_all_batches(shared, topic, 0)
    assert batches
    assert {batch_compression(batch) for batch in batches} == {COMPRESSION_CODECS[codec]}
    assert [value for _, value in consume_from_beginning(shared, topic)] == lines
