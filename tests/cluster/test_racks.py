"""Racks (KIP-36) on a real 3-broker cluster: each broker's `broker.rack` reaches clients
(DescribeCluster with confluent-kafka, Metadata with kafka-python), and a new topic's replicas
span both racks of brokers {1: a, 2: a, 3: b}, where Kafka's rack-unaware placement would
put some partitions' two replicas on brokers 1 and 2, one rack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import BROKERS, CLUSTER_OVERRIDES, _check_clean_stop

RACKS = {1: "a", 2: "a", 3: "b"}


@pytest.fixture
def racked(tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster.start(
        tmp_path,
        brokers=BROKERS,
        overrides=CLUSTER_OVERRIDES,
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
