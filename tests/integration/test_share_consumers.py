"""Queues for Kafka end to end (KIP-932), as the issue's new user tried them: three
confluent-kafka (librdkafka 2.16) ShareConsumers of one share group on a one-partition topic of
600 records. They join through ShareGroupHeartbeat (the group coordinator), fetch through
ShareFetch (the share partition manager on the leader, its state kept by the share coordinator
on `__share_group_state`) and accept each record implicitly at their next poll, or at
`commit_sync()` when done (librdkafka 2.16 does not accept the records of the last poll at
`close()`: it leaves and closes its share session, and they are delivered again). Every
record is delivered, to one consumer, once (which consumer takes which is the fetches' race:
the first to fetch may acquire them all, as in Kafka); and the acceptances are kept: a new
consumer of the group, after them, gets only the record produced after them.

The test runs on the worker's shared broker (tests/conftest.py's SHARED_BROKER, the pytest
plugin's `kafka_broker`), with a topic and a group of its own."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from minibroker.common.names import OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC
from minibroker.coordinator.group import share_log_format as share_group_format
from minibroker.coordinator.group.share_log_format import ShareRecordKind
from minibroker.coordinator.share import log_format as share_state_format
from minibroker.protocol import share_group_offsets_schemas as offsets_schemas
from minibroker.testing import Cluster
from tests.conftest import (
    SHARED_BROKER,
    create_topic,
    exchange,
    set_group_configs,
    topic_id,
    wait_for,
)

RECORDS = 600
DEADLINE_S = 120.0

pytestmark = SHARED_BROKER


@pytest.fixture
def broker(kafka_broker: Cluster) -> Cluster:
    """The shared broker, under the name the test takes."""
    return kafka_broker


def test_three_share_consumers_take_every_record_once(broker):
    topic, group_id = "share-consumers-queue", "share-consumers-workers"
    create_topic(broker.bootstrap_servers, topic, 1)
    # share.auto.offset.reset=earliest for the group: the records are produced before the
    # consumers join.
    set_group_configs(broker.bootstrap_servers, group_id, {"share.auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    for number in range(RECORDS):
        producer.produce(topic, value=b"job-%04d" % number)
    assert producer.flush(30) == 0

    consumers = [
        ShareConsumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": group_id,
                "client.id": f"worker-{index}",
            }
        )
        for index in range(3)
    ]
    delivered: Counter[int] = Counter()
    by_consumer: Counter[int] = Counter()
    errors = []
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while len(delivered) < RECORDS and time.monotonic() < deadline:
            for index, consumer in enumerate(consumers):
                for message in consumer.poll(0.2) or []:
                    if message.error() is not None:
                        errors.append(str(message.error()))
                        continue
                    assert message.value() == b"job-%04d" % message.offset()
                    delivered[message.offset()] += 1
                    by_consumer[index] += 1
        for consumer in consumers:
            consumer.commit_sync()
    finally:
        for consumer in consumers:
            consumer.close()
    assert not errors, errors[:5]
    assert set(delivered) == set(range(RECORDS)), f"{RECORDS - len(delivered)} never delivered"
    twice = [offset for offset, count in delivered.items() if count > 1]
    assert not twice, f"delivered more than once: {twice[:10]}"
    print("records taken by each consumer:", dict(by_consumer))

    producer.produce(topic, value=b"job-%04d" % RECORDS)
    assert producer.flush(30) == 0
    with ShareConsumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": group_id}
    ) as late:
        late.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        later: list[int] = []
        while not later and time.monotonic() < deadline:
            later = [m.offset() for m in late.poll(0.5) or [] if m.error() is None]
    assert later == [RECORDS], f"accepted records delivered again, or none: {later[:10]}"


def test_read_committed_share_group_never_delivers_aborted_records(broker):
    """`share.isolation.level=read_committed`: the records of aborted transactions are never
    delivered, those of committed ones are (Kafka's SharePartition archives the batches of
    aborted transactions instead of handing them out; minibroker leaves them out of what it
    acquires, as it does transaction markers). confluent-kafka-python's
    test_read_committed_skips_aborted_transaction found them delivered. Two aborted
    transactions, each followed by a committed one: once the last committed record (after
    every aborted one) is delivered, every record before it has been, in offset order."""
    topic, group_id = "share-read-committed", "share-read-committed-workers"
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic, 1)
    set_group_configs(
        bootstrap,
        group_id,
        {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"},
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "share-rc-txn"})
    producer.init_transactions(30)
    for round_ in range(2):
        producer.begin_transaction()
        for number in range(3):
            producer.produce(topic, value=b"aborted-%d-%d" % (round_, number))
        producer.flush(30)
        producer.abort_transaction(30)
        producer.begin_transaction()
        producer.produce(topic, value=b"committed-%d" % round_)
        producer.commit_transaction(30)

    delivered: list[bytes] = []
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id}) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while b"committed-1" not in delivered and time.monotonic() < deadline:
            for message in consumer.poll(0.5) or []:
                assert message.error() is None, message.error()
                delivered.append(message.value())
        consumer.commit_sync()
    assert delivered == [b"committed-0", b"committed-1"]


def test_by_duration_share_group_starts_at_the_records_of_the_last_hour(broker):
    """`share.auto.offset.reset=by_duration:PT1H` (KIP-1106): a share group's first fetch of
    a partition starts at the first record whose timestamp is at most an hour old, as Kafka
    4.4's SharePartition finds it by timestamp (records produced two hours "ago" with
    explicit CreateTime timestamps are never delivered; the recent ones are, in order). A
    value Kafka refuses is refused with INVALID_CONFIG by IncrementalAlterConfigs, and the
    group keeps the value it had."""
    topic, group_id = "share-by-duration", "share-by-duration-workers"
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic, 1)
    set_group_configs(bootstrap, group_id, {"share.auto.offset.reset": "by_duration:PT1H"})
    with pytest.raises(KafkaException) as refused:
        set_group_configs(bootstrap, group_id, {"share.auto.offset.reset": "by_duration:P1DT"})
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    now_ms = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for number in range(5):
        producer.produce(topic, value=b"old-%d" % number, timestamp=now_ms - 2 * 3_600_000)
    assert producer.flush(30) == 0
    for number in range(5):
        producer.produce(topic, value=b"new-%d" % number, timestamp=now_ms)
    assert producer.flush(30) == 0

    wanted = [b"new-%d" % number for number in range(5)]
    delivered: list[bytes] = []
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id}) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while len(delivered) < len(wanted) and time.monotonic() < deadline:
            for message in consumer.poll(0.5) or []:
                assert message.error() is None, message.error()
                delivered.append(message.value())
        consumer.commit_sync()
    assert delivered == wanted


def describe_share_group_offsets(bootstrap: str, group: str) -> list:
    """DescribeShareGroupOffsets v1 of all the group's topics, on the wire: [(topic, topic
    id, [(partition, start offset)])]."""
    request = offsets_schemas.DescribeShareGroupOffsetsRequestV1(
        groups=(offsets_schemas.DescribeRequestGroupV1(group_id=group, topics=None),)
    )
    (described,) = exchange(bootstrap, request).groups
    return [
        (t.topic_name, t.topic_id, [(p.partition_index, p.start_offset) for p in t.partitions])
        for t in described.topics
    ]


def internal_records(bootstrap: str, topic: str) -> list[tuple[bytes, bytes | None]]:
    """Every (key, value) of a topic up to its high watermarks (an internal topic's records,
    as the coordinators wrote them). Read to each partition's end by position, not by a count
    of messages: the broker is shared with other tests, whose transactional offset commits put
    transaction markers (offsets that deliver no message) and open transactions into
    `__consumer_offsets`, so read_uncommitted, to the end."""
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-probe",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": True,
        }
    )
    records: list[tuple[bytes, bytes | None]] = []
    try:
        partitions = reader.list_topics(topic, timeout=10).topics[topic].partitions
        marks = {
            index: reader.get_watermark_offsets(TopicPartition(topic, index), timeout=10)
            for index in partitions
        }
        pending = {index for index, (low, high) in marks.items() if high > low}
        reader.assign([TopicPartition(topic, index, marks[index][0]) for index in pending])
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                pending.discard(message.partition())  # at its end: past the mark taken
                continue
            records.append((message.key(), message.value()))
            if message.offset() + 1 >= marks[message.partition()][1]:
                pending.discard(message.partition())
        assert not pending, f"{topic}: partitions {sorted(pending)} not read to their end"
    finally:
        reader.close()
    return records


def test_a_deleted_topic_leaves_its_share_groups_and_one_made_again_starts_afresh(broker):
    """A topic's deletion cleans the share groups' state of it, as Kafka 4.4's coordinators do
    on TopicsDelta.deletedTopicIds: the share coordinator tombstones its share partitions'
    state on `__share_group_state` (ShareCoordinatorShard.maybeCleanupShareState) and the group
    coordinator writes the group's ShareGroupStatePartitionMetadata without it
    (maybeCleanupShareGroupState). A topic made again under the name is a new topic to the
    group: a share consumer starts it at share.auto.offset.reset (earliest: offset 0, although
    offsets 0-4 of the old topic were accepted), and DescribeShareGroupOffsets lists it alone."""
    topic, group_id = "share-deleted-topic", "share-deleted-topic-workers"
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic, 1)
    set_group_configs(bootstrap, group_id, {"share.auto.offset.reset": "earliest"})

    def take(count: int, prefix: bytes) -> list[tuple[int, bytes]]:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for number in range(count):
            producer.produce(topic, value=prefix + b"-%d" % number)
        assert producer.flush(30) == 0
        taken: list[tuple[int, bytes]] = []
        with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id}) as consumer:
            consumer.subscribe([topic])
            deadline = time.monotonic() + DEADLINE_S
            while len(taken) < count and time.monotonic() < deadline:
                for message in consumer.poll(0.5) or []:
                    assert message.error() is None, message.error()
                    taken.append((message.offset(), message.value()))
            consumer.commit_sync()
        return taken

    assert take(5, b"old") == [(n, b"old-%d" % n) for n in range(5)]
    old_id = topic_id(bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], request_timeout=10)[topic].result(timeout=15)

    def old_state_tombstoned() -> bool:
        for key, value in internal_records(bootstrap, SHARE_GROUP_STATE_TOPIC):
            state_key = share_state_format.read_key(key)
            if (state_key.group, state_key.topic_id, value) == (group_id, old_id, None):
                return True
        return False

    def group_forgot_old_topic() -> bool:
        last = None
        for key, value in internal_records(bootstrap, OFFSETS_TOPIC):
            try:
                record_key = share_group_format.read_key(key)
            except Exception:  # noqa: BLE001 - another kind of group record
                continue
            if (
                record_key.kind == ShareRecordKind.STATE_PARTITION_METADATA
                and record_key.group == group_id
                and value is not None
            ):
                last = share_group_format.read_value(record_key.kind, value)
        return last is not None and old_id not in {
            t.topic_id for t in (*last.initializing, *last.initialized, *last.deleting)
        }

    wait_for(old_state_tombstoned, 30, "the old topic's share state tombstoned")
    wait_for(group_forgot_old_topic, 30, "the group's record without the old topic")

    create_topic(bootstrap, topic, 1)
    new_id = topic_id(bootstrap, topic)
    assert new_id != old_id
    assert take(3, b"new") == [(n, b"new-%d" % n) for n in range(3)]
    described = describe_share_group_offsets(bootstrap, group_id)
    assert described == [(topic, new_id, [(0, 3)])]
