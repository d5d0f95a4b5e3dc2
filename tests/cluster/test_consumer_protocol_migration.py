"""Online migration of a group with members between the classic and the consumer group
protocol (KIP-848, Kafka 4's group.consumer.migration.policy, bidirectional by default), on a
3-broker cluster with confluent-kafka: three classic consumers read a topic of 6 partitions;
one by one each is replaced by a consumer with `group.protocol=consumer` (the first one
upgrades the group online; the classic members go on inside the consumer group); the
coordinator is killed (kill -9) while the group is mixed and another broker rebuilds it from
the log; then one by one they are replaced by classic consumers again (the last
consumer-protocol member leaving downgrades the group). Every record is read, none before an
acknowledged committed offset is read twice, and the committed offsets are never lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.static.primitive import i32

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import (
    BROKERS,
    CLUSTER_OVERRIDES,
    CONVERGENCE_TIMEOUT,
    _check_clean_stop,
    coordinator_of,
    create_replicated_topic,
    produce_acks_all,
)
from tests.conftest import exchange, wait_for

TOPIC = "migration-orders"
GROUP = "migration-billing"
PARTITIONS = 6
BATCH = 120  # records produced at each step


@pytest.fixture
def cluster(tmp_path: Path):
    started = Cluster.start(
        tmp_path,
        brokers=BROKERS,
        overrides={
            **CLUSTER_OVERRIDES,
            "group.consumer.heartbeat.interval.ms": 500,
            "group.consumer.session.timeout.ms": 10000,
        },
    )
    yield started
    _check_clean_stop(started)


def describe(cluster: Cluster):
    """ConsumerGroupDescribe from the coordinator: the group if it is a consumer group, the
    error code otherwise (GROUP_ID_NOT_FOUND, 69, for a classic group)."""
    node = coordinator_of(cluster, GROUP)
    if node < 0:
        return None
    answer = exchange(
        cluster.brokers[node].bootstrap,
        ConsumerGroupDescribeRequest(group_ids=(GROUP,), include_authorized_operations=False),
    )
    (group,) = answer.groups
    return group if group.error_code.value == 0 else group.error_code.value


def committed(cluster: Cluster) -> dict[int, int]:
    node = coordinator_of(cluster, GROUP)
    answer = exchange(
        cluster.brokers[node].bootstrap,
        OffsetFetchRequest(
            group_id=GROUP,
            topics=(
                OffsetFetchRequestTopic(
                    name=TOPIC, partition_indexes=tuple(i32(p) for p in range(PARTITIONS))
                ),
            ),
            require_stable=False,
        ),
    )
    assert answer.error_code.value == 0, answer
    return {
        int(p.partition_index): int(p.committed_offset)
        for topic in answer.topics
        for p in topic.partitions
        if int(p.committed_offset) >= 0
    }


class Group:
    """The consumers of the group, polled in turn from this thread; every record read is
    committed (synchronously) before the next poll."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.members: list[tuple[str, Consumer]] = []
        self.reads: dict[tuple[int, int], int] = {}
        # Every acknowledged commit: partition -> the highest offset acknowledged.
        self.acknowledged: dict[int, int] = {}
        # Records read again although an earlier commit past them was acknowledged.
        self.lost_commits: list[tuple[int, int]] = []

    def add(self, protocol: str) -> None:
        settings = {
            "bootstrap.servers": self.cluster.bootstrap,
            "group.id": GROUP,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
        if protocol == "classic":
            settings.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
        consumer = Consumer(settings)
        consumer.subscribe([TOPIC])
        self.members.append((protocol, consumer))

    def remove(self, protocol: str) -> None:
        index = next(i for i, (p, _) in enumerate(self.members) if p == protocol)
        _, consumer = self.members.pop(index)
        consumer.close()

    def step(self) -> None:
        for _, consumer in self.members:
            message = consumer.poll(0.05)
            if message is None or message.error() is not None:
                continue
            key = (message.partition(), message.offset())
            self.reads[key] = self.reads.get(key, 0) + 1
            if message.offset() < self.acknowledged.get(message.partition(), 0):
                self.lost_commits.append(key)
            position = TopicPartition(TOPIC, message.partition(), message.offset() + 1)
            try:
                (done,) = consumer.commit(offsets=[position], asynchronous=False)
            except KafkaException:
                continue  # not acknowledged (a rebalance, the coordinator moving)
            if done.error is None:
                self.acknowledged[done.partition] = max(
                    self.acknowledged.get(done.partition, 0), done.offset
                )

    def read_until(self, count: int, what: str) -> None:
        def enough() -> bool:
            self.step()
            return len(self.reads) >= count

        wait_for(enough, 6 * CONVERGENCE_TIMEOUT, what, interval=0)

    def settle(self, what: str, check) -> object:
        """Poll the members until ``check`` holds (the group converged)."""

        def converged():
            self.step()
            return check()

        return wait_for(converged, 4 * CONVERGENCE_TIMEOUT, what, interval=0)

    def close(self) -> None:
        for _, consumer in self.members:
            consumer.close()


def assigned_everywhere(group: Group) -> bool:
    """Every partition assigned to exactly one member."""
    owned = [tp.partition for _, c in group.members for tp in c.assignment()]
    return sorted(owned) == list(range(PARTITIONS))


def test_members_switch_protocol_one_by_one_and_back(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, PARTITIONS)
    produced = 0

    def produce() -> None:
        nonlocal produced
        produce_acks_all(
            cluster.bootstrap,
            TOPIC,
            [(i % PARTITIONS, b"order-%d" % i) for i in range(produced, produced + BATCH)],
        )
        produced += BATCH

    group = Group(cluster)
    try:
        # A classic group of three.
        for _ in range(3):
            group.add("classic")
        produce()
        group.read_until(produced, "the classic group reading")
        group.settle("three classic members", lambda: assigned_everywhere(group))
        assert describe(cluster) == 69  # GROUP_ID_NOT_FOUND: a classic group

        # One by one, a consumer-protocol member replaces a classic one.
        for switched in range(1, 4):
            group.add("consumer")
            group.remove("classic")
            produce()
            group.read_until(produced, f"reading with {switched} consumer-protocol members")
            described = group.settle(
                f"{switched} consumer-protocol members",
                lambda: (
                    assigned_everywhere(group)
                    and not isinstance(d := describe(cluster), int | None)
                    and d.group_state == "Stable"
                    and d
                ),
            )
            assert len(described.members) == 3
            if switched == 1:
                # A mixed group: its coordinator dies, another rebuilds it from the log.
                before = {m.member_id for m in described.members}
                epoch = described.group_epoch
                victim = coordinator_of(cluster, GROUP)
                cluster.brokers[victim].kill()
                wait_for(
                    lambda victim=victim: coordinator_of(cluster, GROUP) not in (-1, victim),
                    CONVERGENCE_TIMEOUT,
                    "another broker to coordinate the group",
                )
                rebuilt = group.settle(
                    "the mixed group, loaded by the new coordinator",
                    lambda: (
                        not isinstance(d := describe(cluster), int | None)
                        and d.group_state == "Stable"
                        and d
                    ),
                )
                assert {m.member_id for m in rebuilt.members} == before
                assert rebuilt.group_epoch >= epoch
                produce()
                group.read_until(produced, "reading after the failover")

        # And back: classic members replace the consumer-protocol ones; the last one leaving
        # downgrades the group.
        for switched in range(1, 4):
            group.add("classic")
            group.remove("consumer")
            produce()
            group.read_until(produced, f"reading with {switched} classic members again")
            group.settle(f"{switched} classic members again", lambda: assigned_everywhere(group))
        group.settle("a classic group again", lambda: describe(cluster) == 69)
        produce()
        group.read_until(produced, "the classic group reading again")
        # The committed offsets are the group's: everything read was committed.
        group.settle(
            "every offset committed",
            lambda: committed(cluster) == dict.fromkeys(range(PARTITIONS), produced // PARTITIONS),
        )
    finally:
        group.close()
    assert len(group.reads) == produced
    assert group.lost_commits == []
