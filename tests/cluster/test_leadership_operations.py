"""An operator's day-two tools against a real cluster, through real admin clients:
ElectLeaders (confluent-kafka and kafka-python) and partition reassignment (kafka-python's
AlterPartitionReassignments and ListPartitionReassignments), the latter under an acks=all
producer whose every acknowledged record must be read back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ElectionType as ConfluentElectionType
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaPartition

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import (
    CLUSTER_OVERRIDES,
    CONVERGENCE_TIMEOUT,
    BackgroundProducer,
    create_replicated_topic,
    lost_and_duplicated,
    read_partitions,
    replicas_of,
)
from tests.conftest import wait_for

PREFERRED = 0
UNCLEAN = 1
ELECTION_NOT_NEEDED = 84


@pytest.fixture
def still_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster whose controller never moves leadership back by itself
    (auto.leader.rebalance.enable=false), so that only ElectLeaders does."""
    started = Cluster.start(
        tmp_path, overrides={**CLUSTER_OVERRIDES, "auto.leader.rebalance.enable": "false"}
    )
    yield started
    started.stop()


def kafka_admin(cluster: Cluster) -> KafkaAdminClient:
    """kafka-python's admin, bootstrapped from the running brokers only (it gives up on the
    first address that refuses)."""
    running = [broker.bootstrap for broker in cluster.brokers.values() if broker.running]
    return KafkaAdminClient(bootstrap_servers=running, request_timeout_ms=30000)


def stop_broker(cluster: Cluster, node_id: int) -> None:
    """Stop a broker cleanly and wait until the others' Metadata no longer lists it (clients
    would otherwise still try it)."""
    cluster.brokers[node_id].stop()

    def gone_everywhere() -> bool:
        for other in cluster.brokers.values():
            if other.running:
                response = cluster.metadata(via=other.node_id)
                if response is None or node_id in {b.node_id for b in response.brokers}:
                    return False
        return True

    wait_for(gone_everywhere, CONVERGENCE_TIMEOUT, f"broker {node_id} out of Metadata")


def wait_for_full_isr(cluster: Cluster, topic: str, partitions: int) -> None:
    for partition in range(partitions):
        cluster.wait_for_isr(
            topic, partition, replicas_of(cluster, topic, partition), CONVERGENCE_TIMEOUT
        )


def test_preferred_election_moves_leadership_back(still_cluster: Cluster):
    cluster = still_cluster
    create_replicated_topic(cluster, "elect", 3)
    preferred = replicas_of(cluster, "elect", 0)[0]
    cluster.brokers[preferred].restart()  # a clean stop moves its leadership away
    cluster.wait_ready()
    wait_for_full_isr(cluster, "elect", 3)
    assert cluster.leader_of("elect", 0) != preferred

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    partition = ConfluentPartition("elect", 0)
    results = admin.elect_leaders(ConfluentElectionType.PREFERRED, [partition]).result(30)
    assert results == {partition: None}
    wait_for(lambda: cluster.leader_of("elect", 0) == preferred, CONVERGENCE_TIMEOUT, "preferred")

    again = admin.elect_leaders(ConfluentElectionType.PREFERRED, [partition]).result(30)
    assert again[partition].code() == ELECTION_NOT_NEEDED

    # kafka-python, every topic (it names each partition): all preferred now.
    response = kafka_admin(cluster).elect_leaders(PREFERRED, None, raise_errors=False)
    codes = {
        (entry.topic, result.partition_id): result.error_code
        for entry in response.replica_election_results
        for result in entry.partition_result
    }
    assert {key: code for key, code in codes.items() if key[0] == "elect"} == {
        ("elect", index): ELECTION_NOT_NEEDED for index in range(3)
    }
    for index in range(3):
        assert cluster.leader_of("elect", index) == replicas_of(cluster, "elect", index)[0]


def test_unclean_election_brings_an_offline_partition_back(still_cluster: Cluster):
    cluster = still_cluster
    create_replicated_topic(cluster, "offline", 1, replication_factor=2)
    first, second = replicas_of(cluster, "offline", 0)
    cluster.brokers[second].stop()
    cluster.wait_for_isr("offline", 0, [first], CONVERGENCE_TIMEOUT)
    cluster.brokers[first].stop()  # the last ISR member: the partition has no leader now
    cluster.brokers[second].restart()
    cluster.wait_ready()
    wait_for(lambda: cluster.leader_of("offline", 0) == -1, CONVERGENCE_TIMEOUT, "offline")

    admin = kafka_admin(cluster)
    response = admin.elect_leaders(UNCLEAN, {"offline": [0]}, raise_errors=False)
    outcomes = [
        (entry.topic, result.partition_id, result.error_code)
        for entry in response.replica_election_results
        for result in entry.partition_result
    ]
    assert outcomes == [("offline", 0, 0)]
    wait_for(lambda: cluster.leader_of("offline", 0) == second, CONVERGENCE_TIMEOUT, "leader")
    assert cluster.isr_of("offline", 0) == {second}


def test_reassignment_under_an_acks_all_producer_loses_nothing(cluster: Cluster):
    topic = "moving"
    create_replicated_topic(
        cluster, topic, 2, replication_factor=2, config={"min.insync.replicas": "2"}
    )
    before = replicas_of(cluster, topic, 0)
    (newcomer,) = set(cluster.brokers) - set(before)
    leader = cluster.leader_of(topic, 0)
    # The leader leaves, the third broker joins: leadership must move as part of it.
    target = [newcomer, *[replica for replica in before if replica != leader]]

    admin = kafka_admin(cluster)
    with BackgroundProducer(cluster.bootstrap, topic, 2) as producer:
        producer.wait_for_acks(500)
        result = admin.alter_partition_reassignments({KafkaPartition(topic, 0): target})
        assert result == {KafkaPartition(topic, 0): None}
        wait_for(
            lambda: not admin.list_partition_reassignments({topic: [0]}),
            CONVERGENCE_TIMEOUT,
            "the reassignment to complete",
        )
        wait_for(
            lambda: list(replicas_of(cluster, topic, 0)) == target,
            CONVERGENCE_TIMEOUT,
            f"replicas {target} in Metadata",
        )
        cluster.wait_for_isr(topic, 0, target, CONVERGENCE_TIMEOUT)
        assert cluster.leader_of(topic, 0) in target
        acked_before = len(producer.acked)
        producer.wait_for_acks(acked_before + 500)
        producer.stop()
    assert producer.undelivered == 0
    assert not producer.errors, producer.errors[:10]

    stored = read_partitions(cluster.bootstrap, topic, 2)
    lost, _duplicates = lost_and_duplicated(producer.acked, stored)
    assert lost == [], f"{len(lost)} acknowledged records lost, first {lost[:5]}"
    removed = cluster.brokers[leader]
    wait_for(
        lambda: not (removed.log_dir / f"{topic}-0").exists(),
        CONVERGENCE_TIMEOUT,
        f"the removed replica's log on broker {leader} to be deleted",
    )


def test_a_pending_reassignment_is_listed_and_cancelled(cluster: Cluster):
    topic = "pending"
    create_replicated_topic(cluster, topic, 1, replication_factor=2)
    before = replicas_of(cluster, topic, 0)
    (absent,) = set(cluster.brokers) - set(before)
    stop_broker(cluster, absent)  # registered but down: it can never catch up

    admin = kafka_admin(cluster)
    partition = KafkaPartition(topic, 0)
    assert admin.alter_partition_reassignments({partition: [*before, absent]}) == {partition: None}
    listed = admin.list_partition_reassignments()
    assert listed == {
        partition: {
            "replicas": [*before, absent],
            "adding_replicas": [absent],
            "removing_replicas": [],
        }
    }
    wait_for(
        lambda: list(replicas_of(cluster, topic, 0)) == [*before, absent],
        CONVERGENCE_TIMEOUT,
        "the adding replica in Metadata",
    )

    assert admin.alter_partition_reassignments({partition: None}) == {partition: None}
    assert admin.list_partition_reassignments() == {}
    wait_for(
        lambda: list(replicas_of(cluster, topic, 0)) == list(before), CONVERGENCE_TIMEOUT, "revert"
    )
    again = admin.alter_partition_reassignments({partition: None})
    assert again[partition].errno == 85  # NO_REASSIGNMENT_IN_PROGRESS
    bad = admin.alter_partition_reassignments({partition: [before[0], 42]})
    assert bad[partition].errno == 39  # INVALID_REPLICA_ASSIGNMENT


def test_a_controller_restart_carries_a_reassignment_on(cluster: Cluster):
    topic = "carried"
    create_replicated_topic(cluster, topic, 1, replication_factor=2)
    before = replicas_of(cluster, topic, 0)
    (absent,) = set(cluster.brokers) - set(before)
    stop_broker(cluster, absent)
    target = [absent, before[1]]  # the preferred replica leaves, the stopped broker joins

    admin = kafka_admin(cluster)
    partition = KafkaPartition(topic, 0)
    assert admin.alter_partition_reassignments({partition: target}) == {partition: None}
    assert admin.list_partition_reassignments()[partition]["adding_replicas"] == [absent]
    admin.close()

    cluster.controller.restart()
    cluster.controller.wait_ready()
    cluster.brokers[absent].restart()  # it registers with the new controller and catches up
    cluster.wait_ready()
    wait_for(
        lambda: list(replicas_of(cluster, topic, 0)) == target,
        CONVERGENCE_TIMEOUT,
        f"replicas {target} after the controller's restart",
    )
    cluster.wait_for_isr(topic, 0, target, CONVERGENCE_TIMEOUT)
    assert kafka_admin(cluster).list_partition_reassignments() == {}
