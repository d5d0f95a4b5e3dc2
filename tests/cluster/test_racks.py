"""Racks (KIP-36) on a real 3-broker cluster: each broker's `broker.rack` reaches clients
(DescribeCluster with confluent-kafka, Metadata with kafka-python), and a new topic's replicas
span both racks of brokers {1: a, 2: a, 3: b}, where Kafka's rack-unaware placement would
put some partitions' two replicas on brokers 1 and 2, one rack. In a consumer group
(KIP-848), members' `client.rack` is kept, and a reassignment that changes a subscribed
partition's replica racks bumps the group epoch (KIP-1101) without moving any partition: Kafka
4.4's uniform and range assignors do not read racks. One cluster serves the module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition as KafkaPartition
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.static.primitive import i8

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import (
    BROKERS,
    CLUSTER_OVERRIDES,
    CONVERGENCE_TIMEOUT,
    _check_clean_stop,
)
from tests.conftest import describe_consumer_group, exchange, wait_for

RACKS = {1: "a", 2: "a", 3: "b"}


@pytest.fixture(scope="module")
def racked(tmp_path_factory) -> Iterator[Cluster]:
    started = Cluster.start(
        tmp_path_factory.mktemp("racked"),
        brokers=BROKERS,
        overrides={
            **CLUSTER_OVERRIDES,
            "offsets.topic.num.partitions": 1,
            "group.consumer.heartbeat.interval.ms": 500,
        },
        node_overrides={node: {"broker.rack": rack} for node, rack in RACKS.items()},
    )
    yield started
    _check_clean_stop(started)


def test_racks_reach_clients_and_spread_replicas(racked: Cluster):
    admin = AdminClient({"bootstrap.servers": racked.bootstrap})
    described = admin.describe_cluster(request_timeout=30).result(timeout=40)
    assert {node.id: node.rack for node in described.nodes} == RACKS

    legacy = KafkaAdminClient(bootstrap_servers=racked.bootstrap)
    try:
        # kafka-python's cluster view, from the Metadata responses it bootstrapped with.
        brokers = legacy._client.cluster.brokers()
    finally:
        legacy.close()
    assert {broker.node_id: broker.rack for broker in brokers} == RACKS

    admin.create_topics([NewTopic("racked", 12, 2)], request_timeout=30)["racked"].result(40)
    partitions = admin.list_topics("racked", timeout=30).topics["racked"].partitions
    assert len(partitions) == 12
    for index, partition in partitions.items():
        assert {RACKS[b] for b in partition.replicas} == {"a", "b"}, (index, partition.replicas)


def _coordinator(cluster: Cluster, group: str) -> str:
    answer = exchange(
        cluster.brokers[1].bootstrap,
        FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,)),
    )
    (found,) = answer.coordinators
    assert found.error_code == 0, found
    return f"{found.host}:{found.port}"


def test_a_rack_change_of_a_subscribed_partition_bumps_the_group_epoch_only(racked: Cluster):
    """Partition 0 of the topic moves from brokers [1, 3] (racks a, b) to [1, 2] (a, a): the
    group epoch moves on (Kafka's topic hash covers the replicas' racks), each member keeps
    its partition (no assignor of Kafka 4.4 prefers a member's rack)."""
    topic, group = "rack-moves", "rack-moves"
    admin = AdminClient({"bootstrap.servers": racked.bootstrap})
    created = admin.create_topics(
        [NewTopic(topic, num_partitions=2, replica_assignment=[[1, 3], [2, 3]])]
    )
    created[topic].result(timeout=30)
    consumers = {
        rack: Consumer({
            "bootstrap.servers": racked.bootstrap, "group.id": group,
            "group.protocol": "consumer", "client.rack": rack, "enable.auto.commit": False,
        })
        for rack in ("a", "b")
    }  # fmt: skip
    try:
        for consumer in consumers.values():
            consumer.subscribe([topic])

        def assigned() -> dict[str, list[int]] | None:
            for consumer in consumers.values():
                consumer.poll(0.2)
            owned = {r: sorted(tp.partition for tp in c.assignment()) for r, c in consumers.items()}
            balanced = sorted(sum(owned.values(), [])) == [0, 1] and all(owned.values())
            return owned if balanced else None

        before = wait_for(assigned, CONVERGENCE_TIMEOUT, "a partition for each member")
        coordinator = _coordinator(racked, group)
        described = describe_consumer_group(coordinator, group)
        assert described.error_code == 0, described
        assert sorted(m.rack_id for m in described.members) == ["a", "b"]
        epoch = described.group_epoch

        legacy = KafkaAdminClient(bootstrap_servers=racked.bootstrap, request_timeout_ms=30000)
        try:
            moved = legacy.alter_partition_reassignments({KafkaPartition(topic, 0): [1, 2]})
            assert moved == {KafkaPartition(topic, 0): None}
            wait_for(
                lambda: not legacy.list_partition_reassignments({topic: [0]}),
                CONVERGENCE_TIMEOUT,
                "the reassignment to complete",
            )
        finally:
            legacy.close()

        def bumped():
            for consumer in consumers.values():
                consumer.poll(0.2)
            entry = describe_consumer_group(coordinator, group)
            return entry if entry.group_epoch > epoch and entry.assignment_epoch > epoch else None

        after = wait_for(bumped, CONVERGENCE_TIMEOUT, "the group epoch to move on")
        targets = {m.rack_id: m.target_assignment for m in after.members}
        for rack, partitions in before.items():
            (owned,) = targets[rack].topic_partitions
            assert sorted(owned.partitions) == partitions, (rack, targets)
        for rack, consumer in consumers.items():
            assert sorted(tp.partition for tp in consumer.assignment()) == before[rack]
    finally:
        for consumer in consumers.values():
            consumer.close()
