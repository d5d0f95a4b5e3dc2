"""Dead-letter queues of share groups (KIP-1191) with real confluent-kafka (librdkafka 2.16)
ShareConsumers in explicit acknowledgement mode, against one broker process: a REJECTed record
and a poison record RELEASEd until `share.delivery.count.limit` are written by the partition
leader to the group's DLQ topic, with Kafka 4.4's headers (read back with a plain Consumer);
a group without a DLQ only archives; a DLQ topic that fails Kafka's checks gets nothing and
the failure is counted on /metrics; bad DLQ group configs are INVALID_CONFIG. One broker is
shared by the module's tests, each with its own topic and group: the pytest plugin's
`kafka_broker`, module-scoped, with a /metrics port and DLQ topics created on first use
(errors.deadletterqueue.auto.create.topics.enable, which minibroker, as Kafka, reads only at
start), so not the worker's shared broker."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kio.static.primitive import i32

from minibroker.protocol import share_group_offsets_schemas as offsets_schemas
from minibroker.testing import Cluster
from minibroker.tools.launcher import free_port
from tests.conftest import create_topic, exchange, scrape, set_group_configs

DEADLINE_S = 60.0
METRICS_PORT = free_port()
REJECTED = "Offset rejected by client."
EXCEEDED = "Offset delivery count exceeded the threshold."


# One broker for the module; the plugin fails the test that closes it if it does not shut
# down cleanly.
pytestmark = pytest.mark.minibroker(
    scope="module",
    server_properties={
        "offsets.topic.num.partitions": 3,
        "metrics.port": METRICS_PORT,
        # Kafka 4.4's default is false; the first test has its DLQ topic created.
        "errors.deadletterqueue.auto.create.topics.enable": "true",
    },
)


@pytest.fixture
def broker(kafka_broker: Cluster) -> Cluster:
    """The plugin's broker, under the name the tests take."""
    return kafka_broker


def create_dlq_topic(bootstrap: str, topic: str, enabled: bool = True) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"errors.deadletterqueue.group.enable": "true"} if enabled else {}
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1, config=configs)],
        request_timeout=10,
    )
    futures[topic].result(timeout=15)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in records:
        producer.produce(topic, key=key, value=value, headers=[("origin", b"test")])
    assert producer.flush(30) == 0


def share_consumer(bootstrap: str, group: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
        }
    )
    consumer.subscribe([topic])
    return consumer


def poll_until(consumer: ShareConsumer, count: int) -> list:
    """Poll until ``count`` records were delivered (or the deadline)."""
    delivered: list = []
    deadline = time.monotonic() + DEADLINE_S
    while len(delivered) < count and time.monotonic() < deadline:
        for message in consumer.poll(0.5) or []:
            assert message.error() is None, message.error()
            delivered.append(message)
    assert len(delivered) == count, [m.offset() for m in delivered]
    return delivered


def read_dlq(bootstrap: str, topic: str, count: int) -> list:
    """The first ``count`` records of ``topic``'s partition 0 (a plain Consumer, assigned),
    waiting for them until the deadline (the DLQ is written off the acknowledgement's path)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    found: list = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + DEADLINE_S
        while len(found) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                # The DLQ topic may not exist yet when the reader starts.
                assert message.error().code() == KafkaError.UNKNOWN_TOPIC_OR_PART
                continue
            found.append(message)
    finally:
        consumer.close()
    return found


def headers_of(message) -> dict[str, str]:
    return {name: value.decode() for name, value in message.headers() or []}


def dlq_sample(name: str, group: str) -> float:
    key = (f"kafka_server_sharegroupmetrics_{name}_total", (("group", group),))
    return scrape(METRICS_PORT).get(key, 0.0)


def start_offset_reaches(bootstrap: str, group: str, topic: str, wanted: int) -> int:
    """The group's start offset of ``topic``-0 (DescribeShareGroupOffsets v1, on the wire),
    once it is ``wanted`` or after DEADLINE_S: archived records still ARCHIVING (their DLQ
    write pending) hold it back, as in Kafka 4.4."""
    s = offsets_schemas
    request = s.DescribeShareGroupOffsetsRequestV1(
        groups=(
            s.DescribeRequestGroupV1(
                group_id=group,
                topics=(s.DescribeRequestTopicV1(topic_name=topic, partitions=(i32(0),)),),
            ),
        )
    )
    deadline = time.monotonic() + DEADLINE_S
    while True:
        (described,) = exchange(bootstrap, request).groups
        start = described.topics[0].partitions[0].start_offset
        if start == wanted or time.monotonic() > deadline:
            return start
        time.sleep(0.1)


def test_a_rejected_record_goes_to_the_dlq_with_kafkas_headers(broker):
    """REJECT archives the record and the leader writes it to the group's DLQ topic, created
    on first use (errors.deadletterqueue.auto.create.topics.enable) with
    errors.deadletterqueue.group.enable=true; the original key and value are copied
    (errors.deadletterqueue.copy.record.enable), its headers are not (Kafka 4.4)."""
    topic, group, dlq = "orders", "order-workers", "dlq.orders"
    create_topic(broker.bootstrap_servers, topic, 1)
    produce(broker.bootstrap_servers, topic, [(b"k%d" % n, b"order-%d" % n) for n in range(3)])
    set_group_configs(
        broker.bootstrap_servers,
        group,
        {
            "share.auto.offset.reset": "earliest",
            "errors.deadletterqueue.topic.name": dlq,
            "errors.deadletterqueue.copy.record.enable": "true",
        },
    )
    consumer = share_consumer(broker.bootstrap_servers, group, topic)
    try:
        for message in poll_until(consumer, 3):
            kind = AcknowledgeType.REJECT if message.offset() == 1 else AcknowledgeType.ACCEPT
            consumer.acknowledge(message, kind)
        consumer.commit_sync()
    finally:
        consumer.close()

    (written,) = read_dlq(broker.bootstrap_servers, dlq, 1)
    assert headers_of(written) == {
        "__dlq.errors.topic": topic,
        "__dlq.errors.partition": "0",
        "__dlq.errors.offset": "1",
        "__dlq.errors.group": group,
        "__dlq.errors.delivery.count": "1",
        "__dlq.errors.message": REJECTED,
    }
    assert (written.key(), written.value()) == (b"k1", b"order-1")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    resource = ConfigResource(ResourceType.TOPIC, dlq)
    described = admin.describe_configs([resource])[resource].result(timeout=30)
    assert described["errors.deadletterqueue.group.enable"].value == "true"
    assert dlq_sample("deadletterqueuerecordcount", group) == 1.0
    assert dlq_sample("deadletterqueuefailedproducerequests", group) == 0.0
    # Offset 1 was ARCHIVING until written, then ARCHIVED: the start offset is past all three.
    assert start_offset_reaches(broker.bootstrap_servers, group, topic, 3) == 3


def test_a_poison_record_released_to_the_delivery_limit_goes_to_the_dlq(broker):
    """A record RELEASEd at each delivery reaches share.delivery.count.limit (2 here) and is
    archived into the DLQ: headers only (no copy), the delivery count and Kafka's reason."""
    topic, group, dlq = "payments", "payment-workers", "dlq.payments"
    create_topic(broker.bootstrap_servers, topic, 1)
    create_dlq_topic(broker.bootstrap_servers, dlq)
    produce(broker.bootstrap_servers, topic, [(b"poison", b"bad-payment")])
    set_group_configs(
        broker.bootstrap_servers,
        group,
        {
            "share.auto.offset.reset": "earliest",
            "share.delivery.count.limit": "2",
            "errors.deadletterqueue.topic.name": dlq,
        },
    )
    consumer = share_consumer(broker.bootstrap_servers, group, topic)
    try:
        for _ in range(2):
            (message,) = poll_until(consumer, 1)
            assert message.offset() == 0
            consumer.acknowledge(message, AcknowledgeType.RELEASE)
            consumer.commit_sync()
    finally:
        consumer.close()

    (written,) = read_dlq(broker.bootstrap_servers, dlq, 1)
    assert headers_of(written) == {
        "__dlq.errors.topic": topic,
        "__dlq.errors.partition": "0",
        "__dlq.errors.offset": "0",
        "__dlq.errors.group": group,
        "__dlq.errors.delivery.count": "2",
        "__dlq.errors.message": EXCEEDED,
    }
    assert (written.key(), written.value()) == (None, None)


def test_without_a_dlq_a_rejected_record_is_only_archived(broker):
    """No errors.deadletterqueue.topic.name: REJECT archives as at share.version 1 (a new
    consumer of the group does not get the record again) and nothing is written."""
    topic, group = "refunds", "refund-workers"
    create_topic(broker.bootstrap_servers, topic, 1)
    produce(broker.bootstrap_servers, topic, [(b"r", b"refund-0")])
    set_group_configs(broker.bootstrap_servers, group, {"share.auto.offset.reset": "earliest"})
    consumer = share_consumer(broker.bootstrap_servers, group, topic)
    try:
        (message,) = poll_until(consumer, 1)
        consumer.acknowledge(message, AcknowledgeType.REJECT)
        consumer.commit_sync()
    finally:
        consumer.close()
    produce(broker.bootstrap_servers, topic, [(b"r", b"refund-1")])
    consumer = share_consumer(broker.bootstrap_servers, group, topic)
    try:
        (message,) = poll_until(consumer, 1)
        assert message.offset() == 1  # offset 0 stayed archived
        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
    finally:
        consumer.close()
    assert dlq_sample("deadletterqueuetotalproducerequests", group) == 0.0
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10)
    assert not [name for name in metadata.topics if name.startswith("dlq.refund")]


def test_a_dlq_topic_failing_kafkas_checks_gets_nothing_and_counts_a_failure(broker):
    """A DLQ topic name without the broker's prefix (errors.deadletterqueue.topic.name.prefix,
    dlq.) is refused when the record is archived, without retries: nothing is written, the
    record stays archived, the failure is on /metrics, and the group is served on."""
    topic, group, dlq = "invoices", "invoice-workers", "invoices-dead"
    create_topic(broker.bootstrap_servers, topic, 1)
    create_dlq_topic(broker.bootstrap_servers, dlq)
    produce(broker.bootstrap_servers, topic, [(b"i", b"invoice-0"), (b"i", b"invoice-1")])
    set_group_configs(
        broker.bootstrap_servers,
        group,
        {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": dlq},
    )
    consumer = share_consumer(broker.bootstrap_servers, group, topic)
    try:
        first, second = poll_until(consumer, 2)
        consumer.acknowledge(first, AcknowledgeType.REJECT)
        consumer.acknowledge(second, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
    finally:
        consumer.close()
    deadline = time.monotonic() + DEADLINE_S
    while (
        dlq_sample("deadletterqueuefailedproducerequests", group) < 1
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert dlq_sample("deadletterqueuefailedproducerequests", group) == 1.0
    assert dlq_sample("deadletterqueuetotalproducerequests", group) == 1.0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "x"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(dlq, 0), timeout=10)
    finally:
        consumer.close()
    assert (low, high) == (0, 0)
    assert "does not comply with the DLQ topic prefix" in broker.node(1).log_tail(100_000)
    # The DLQ write given up, the record went from ARCHIVING to ARCHIVED all the same (Kafka's
    # "proceeding to ARCHIVED regardless"): it does not hold the start offset back.
    assert start_offset_reaches(broker.bootstrap_servers, group, topic, 2) == 2


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("errors.deadletterqueue.topic.name", "__internal-dlq"),
        ("errors.deadletterqueue.copy.record.enable", "sometimes"),
    ],
)
def test_a_bad_dlq_config_is_invalid_config(broker, name, value):
    """IncrementalAlterConfigs on the GROUP resource answers INVALID_CONFIG for a DLQ topic
    name starting with __ and a copy flag that is not a boolean (Kafka 4.4's GroupConfig);
    the broker serves on, and a good value is then taken."""
    group = "config-checked"
    with pytest.raises(KafkaException) as refused:
        set_group_configs(broker.bootstrap_servers, group, {name: value})
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    set_group_configs(
        broker.bootstrap_servers, group, {"errors.deadletterqueue.topic.name": "dlq.ok"}
    )
