"""Failover: kill -9 a partition leader under an acks=all producer; a new leader comes from
the ISR, nothing acknowledged is lost, and the killed broker rejoins."""

from __future__ import annotations

import time

import pytest

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import (
    CONVERGENCE_TIMEOUT,
    BackgroundProducer,
    assert_logs_identical,
    assert_replication_uses,
    create_replicated_topic,
    lost_and_duplicated,
    read_partitions,
    replicas_of,
    wait_for_new_leader,
)

TOPIC = "failover"
PARTITIONS = 3
ACKS_BEFORE_KILL = 2_000
ACKS_AFTER_FAILOVER = 2_000


@pytest.mark.parametrize("cluster_fixture", ["cluster", "sasl_ssl_cluster"])
def test_kill_9_leader_under_acks_all_producer(request, cluster_fixture: str):
    """Run on the plaintext cluster and on one replicating over SASL_SSL."""
    cluster: Cluster = request.getfixturevalue(cluster_fixture)
    create_replicated_topic(cluster, TOPIC, PARTITIONS, config={"min.insync.replicas": "2"})
    replicas = {
        partition: replicas_of(cluster, TOPIC, partition) for partition in range(PARTITIONS)
    }

    with BackgroundProducer(cluster.bootstrap, TOPIC, PARTITIONS) as producer:
        producer.wait_for_acks(ACKS_BEFORE_KILL)
        before = cluster.partition_metadata(TOPIC, 0)
        victim = cluster.brokers[before.leader_id]
        isr_before = set(before.isr_nodes)

        killed_at = time.monotonic()
        victim.kill()
        new_leader = wait_for_new_leader(
            cluster, TOPIC, 0, victim.node_id, timeout=CONVERGENCE_TIMEOUT
        )
        failover_seconds = time.monotonic() - killed_at
        print(
            f"failover: broker {victim.node_id} killed, broker {new_leader} leads {TOPIC}-0"
            f" after {failover_seconds:.2f}s (session timeout is part of it)"
        )
        assert new_leader in isr_before, f"new leader {new_leader} was not in ISR {isr_before}"
        after = cluster.partition_metadata(TOPIC, 0)
        assert after.leader_epoch > before.leader_epoch

        acked_at_failover = len(producer.acked)
        producer.wait_for_acks(acked_at_failover + ACKS_AFTER_FAILOVER)

        restarted_at = time.monotonic()
        victim.restart()
        victim.wait_ready()
        for partition in range(PARTITIONS):
            cluster.wait_for_isr(TOPIC, partition, replicas[partition], CONVERGENCE_TIMEOUT)
        print(
            f"broker {victim.node_id} back in every ISR"
            f" {time.monotonic() - restarted_at:.2f}s after its restart"
        )
        producer.stop()

    assert producer.errors == [], producer.errors[:10]
    assert producer.undelivered == 0
    stored = read_partitions(cluster.bootstrap, TOPIC, PARTITIONS)
    lost, duplicates = lost_and_duplicated(producer.acked, stored)
    print(
        f"acknowledged {len(producer.acked)}, stored {len(stored)}, lost {len(lost)},"
        f" duplicates {duplicates}"
    )
    assert lost == [], f"{len(lost)} acknowledged messages lost, first {lost[:10]}"

    # The restarted broker dropped any tail its old leadership left and holds the same log.
    for partition in range(PARTITIONS):
        assert_logs_identical(cluster, TOPIC, partition)
    if cluster_fixture == "sasl_ssl_cluster":
        assert_replication_uses(cluster, "INTERNAL")
