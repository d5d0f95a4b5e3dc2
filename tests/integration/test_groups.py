"""Consumer groups with real clients: kcat -G, kafka-python, confluent-kafka (librdkafka) and
aiokafka subscribe, split partitions, commit, and resume where they committed.

The broker runs with group.initial.rebalance.delay.ms=0 so that groups form at once; every
wait is a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import threading
from collections import Counter

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, OffsetAndMetadata
from kafka import TopicPartition as KafkaTopicPartition

from minibroker.testing import Cluster
from tests.conftest import create_topic, wait_for

GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}
TIMEOUT = 60.0


# A fresh broker for each test (the plugin's default scope); the plugin fails a test whose
# broker does not shut down cleanly.
pytestmark = pytest.mark.minibroker(server_properties=GROUP_OVERRIDES)


@pytest.fixture
def broker(kafka_broker: Cluster) -> Cluster:
    """The plugin's broker, under the name the helpers below take."""
    return kafka_broker


def produce_values(broker: Cluster, topic: str, values: list[str], partitions: int) -> None:
    """Produce each value to partition index % partitions, acks=all, and wait for delivery."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    failures = []
    for index, value in enumerate(values):
        producer.produce(
            topic,
            value.encode(),
            partition=index % partitions,
            on_delivery=lambda error, _m: error and failures.append(error),
        )
    assert producer.flush(30) == 0
    assert not failures


class KcatMember:
    """A `kcat -G` process: the records it printed (partition, offset, value) and the
    partitions of its latest assignment, read from its output as it runs."""

    ASSIGNED = re.compile(r"rebalanced \(memberid [^)]*\): assigned: (.*)")
    REVOKED = re.compile(r"rebalanced \(memberid [^)]*\): revoked:")

    def __init__(self, broker: Cluster, group: str, topic: str) -> None:
        self.records: list[tuple[int, int, str]] = []
        self.assigned: set[int] = set()
        self.stderr: list[str] = []
        self.process = subprocess.Popen(
            [
                *("kcat", "-b", broker.bootstrap_servers, "-G", group, "-u", "-f", "%p:%o:%s\n"),
                *("-X", "auto.offset.reset=earliest", topic),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read_records, daemon=True).start()
        threading.Thread(target=self._read_events, daemon=True).start()

    def _read_records(self) -> None:
        for line in self.process.stdout:
            partition, offset, value = line.rstrip("\n").split(":", 2)
            self.records.append((int(partition), int(offset), value))

    def _read_events(self) -> None:
        for line in self.process.stderr:
            self.stderr.append(line)
            if match := self.ASSIGNED.search(line):
                self.assigned = {int(p) for p in re.findall(r"\[(\d+)\]", match.group(1))}
            elif self.REVOKED.search(line):
                self.assigned = set()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_members_split_the_partitions_and_read_every_record_once(broker):
    topic, group, partitions = "kcat-group", "kcat-readers", 4
    create_topic(broker.bootstrap_servers, topic, partitions)
    members = [KcatMember(broker, group, topic) for _ in range(2)]
    try:

        def split_between(count: int) -> bool:
            owned = [m.assigned for m in members[:count]]
            return all(owned) and sorted(p for o in owned for p in o) == list(range(partitions))

        wait_for(lambda: split_between(2), TIMEOUT, "two kcat members to share 4 partitions")
        first = [f"first-{i}" for i in range(400)]
        produce_values(broker, topic, first, partitions)
        wait_for(lambda: sum(len(m.records) for m in members) >= len(first), TIMEOUT, "reads")
        for member in members:
            assert {partition for partition, _, _ in member.records} <= member.assigned

        members.append(KcatMember(broker, group, topic))
        wait_for(lambda: split_between(3), TIMEOUT, "a third member to get partitions")
        assert sorted(len(m.assigned) for m in members) == [1, 1, 2]
        second = [f"second-{i}" for i in range(400)]
        produce_values(broker, topic, second, partitions)
        expected = len(first) + len(second)
        wait_for(lambda: sum(len(m.records) for m in members) >= expected, TIMEOUT, "reads")
        final_assignment = [set(m.assigned) for m in members]
    finally:
        for member in members:
            member.stop()
    values = Counter(value for member in members for _, _, value in member.records)
    assert set(values) == set(first) | set(second)
    assert max(values.values()) == 1, "a record was read twice"
    for member, assigned in zip(members, final_assignment, strict=True):
        late = {p for p, _, value in member.records if value.startswith("second-")}
        assert late <= assigned


def test_kafka_python_resumes_at_its_committed_offset(broker):
    topic, group = "kp-group", "kp-readers"
    create_topic(broker.bootstrap_servers, topic, 2)
    values = [f"v{i}" for i in range(100)]
    produce_values(broker, topic, values, 2)

    def session(limit: int | None) -> list[str]:
        consumer = KafkaConsumer(
            topic,
            group_id=group,
            bootstrap_servers=broker.bootstrap_servers,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=3000,
        )
        read = []
        for message in consumer:
            read.append(message.value.decode())
            if limit is not None and len(read) == limit:
                break
        consumer.commit()
        consumer.close()
        return read

    first = session(40)
    rest = session(None)
    assert len(first) == 40
    assert sorted(first + rest) == sorted(values)


def confluent_session(broker, topic, group, strategy, limit: int) -> list[str]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": strategy,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.subscribe([topic])
    read: list[str] = []
    try:
        misses = 0
        while len(read) < limit and misses < 5:
            message = consumer.poll(1.0)
            if message is None:
                misses += 1
                continue
            assert message.error() is None, message.error()
            read.append(message.value().decode())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return read


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_confluent_resumes_at_its_committed_offset(broker, strategy):
    topic, group = f"ck-{strategy}", f"ck-readers-{strategy}"
    create_topic(broker.bootstrap_servers, topic, 3)
    values = [f"v{i}" for i in range(90)]
    produce_values(broker, topic, values, 3)
    first = confluent_session(broker, topic, group, strategy, 30)
    rest = confluent_session(broker, topic, group, strategy, 1000)
    assert len(first) == 30
    assert sorted(first + rest) == sorted(values)


def test_aiokafka_resumes_at_its_committed_offset(broker):
    aiokafka = pytest.importorskip("aiokafka")
    topic, group = "ak-group", "ak-readers"
    create_topic(broker.bootstrap_servers, topic, 2)
    values = [f"v{i}" for i in range(50)]
    produce_values(broker, topic, values, 2)

    async def session(limit: int) -> list[str]:
        consumer = aiokafka.AIOKafkaConsumer(
            topic,
            group_id=group,
            bootstrap_servers=broker.bootstrap_servers,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        read = []
        try:
            while len(read) < limit:
                try:
                    message = await asyncio.wait_for(consumer.getone(), 3)
                except TimeoutError:
                    break
                read.append(message.value.decode())
            await consumer.commit()  # the positions of what getone returned
        finally:
            await consumer.stop()
        return read

    first = asyncio.run(session(20))
    rest = asyncio.run(session(1000))
    assert len(first) == 20
    assert sorted(first + rest) == sorted(values)


def test_admin_clients_list_describe_alter_and_delete_groups(broker):
    topic, group = "admin-groups", "admin-readers"
    create_topic(broker.bootstrap_servers, topic, 2)
    produce_values(broker, topic, [f"v{i}" for i in range(20)], 2)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    try:
        wait_for(lambda: consumer.poll(0.5) and consumer.assignment(), TIMEOUT, "assignment")
        consumer.commit(
            offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 3)], asynchronous=False
        )
        listed = admin.list_consumer_groups().result(timeout=30)
        assert group in {g.group_id for g in listed.valid}
        (described,) = admin.describe_consumer_groups([group])[group].result(timeout=30).members
        assert {tp.partition for tp in described.assignment.topic_partitions} == {0, 1}
        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups([group])[group].result(timeout=30)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        consumer.close()

    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    committed = offsets[group].result(timeout=30).topic_partitions
    assert sorted((tp.partition, tp.offset) for tp in committed) == [(0, 7), (1, 3)]
    kafka_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        altered = kafka_admin.alter_group_offsets(
            group, {KafkaTopicPartition(topic, 0): OffsetAndMetadata(2, "", -1)}
        )
        assert [error.__name__ for error in altered.values()] == ["NoError"]
        listed = kafka_admin.list_group_offsets(group)[group]
        assert listed[KafkaTopicPartition(topic, 0)].offset == 2
        assert listed[KafkaTopicPartition(topic, 1)].offset == 3
        described = kafka_admin.describe_groups([group])[group]
        assert (described["group_state"], described["members"]) == ("Empty", [])
    finally:
        kafka_admin.close()
    admin.delete_consumer_groups([group])[group].result(timeout=30)
    listed = admin.list_consumer_groups().result(timeout=30)
    assert group not in {g.group_id for g in listed.valid}
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    assert all(tp.offset < 0 for tp in offsets[group].result(timeout=30).topic_partitions)


def test_a_static_member_restarts_without_a_rebalance(broker):
    """KIP-345: a consumer with group.instance.id that restarts within its session gets its
    partitions back and the other member is never revoked."""
    topic, group = "static-group", "static-readers"
    create_topic(broker.bootstrap_servers, topic, 4)
    revocations: dict[str, int] = {"a": 0, "b": 0}
    assignments: dict[str, set[int]] = {"a": set(), "b": set()}

    def member(name: str) -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": group,
                "group.instance.id": name,
                "session.timeout.ms": 30000,
                "heartbeat.interval.ms": 500,
            }
        )

        def assigned(_consumer, partitions):
            assignments[name] = {p.partition for p in partitions}

        def revoked(_consumer, partitions):
            revocations[name] += 1

        consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
        return consumer

    a, b = member("a"), member("b")

    def settled() -> bool:
        a.poll(0.2)
        b.poll(0.2)
        # Both members hold partitions: b alone holding all four (a not joined yet) is not
        # the shared assignment this test starts from.
        return (
            bool(assignments["a"])
            and bool(assignments["b"])
            and sorted(assignments["a"] | assignments["b"]) == [0, 1, 2, 3]
            and not (assignments["a"] & assignments["b"])
        )

    try:
        wait_for(settled, TIMEOUT, "two static members to share the partitions")
        before = dict(assignments)
        revoked_before = revocations["b"]
        a.close()
        assignments["a"] = set()
        a = member("a")
        wait_for(
            lambda: (a.poll(0.2), b.poll(0.1), assignments["a"])[-1],
            TIMEOUT,
            "the restarted member",
        )
        for _ in range(10):
            b.poll(0.2)
        assert assignments == before
        assert revocations["b"] == revoked_before
    finally:
        a.close()
        b.close()
