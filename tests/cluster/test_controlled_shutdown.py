"""Controlled shutdown: a broker stopped with SIGTERM hands its leadership over before it
exits, so a rolling restart of every broker under an acks=all producer fails no send."""

from __future__ import annotations

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import (
    CONVERGENCE_TIMEOUT,
    BackgroundProducer,
    create_replicated_topic,
    lost_and_duplicated,
    read_partitions,
    replicas_of,
)

TOPIC = "rolling"
PARTITIONS = 6
ACKS_PER_STEP = 500


def leaders(cluster: Cluster, via: int) -> dict[int, int]:
    return {p: cluster.leader_of(TOPIC, p, via=via) for p in range(PARTITIONS)}


def test_a_stopped_broker_leads_nothing_by_the_time_it_exits(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, PARTITIONS, config={"min.insync.replicas": "2"})
    victim = cluster.brokers[1]
    assert 1 in leaders(cluster, via=2).values()
    assert victim.stop() == 0
    # Asked at once: the broker session (1.5 s here) has not expired yet, so only the
    # controlled shutdown can have moved the leaders.
    after = leaders(cluster, via=2)
    assert 1 not in after.values() and -1 not in after.values(), after
    # The leaving broker itself was told before it exited: it stopped acting as leader.
    shutdown_log = victim.log_tail(200).split("received SIGTERM", 1)[-1]
    assert "follower of" in shutdown_log, shutdown_log


def test_rolling_restart_under_acks_all_fails_no_send(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, PARTITIONS, config={"min.insync.replicas": "2"})
    replicas = {p: replicas_of(cluster, TOPIC, p) for p in range(PARTITIONS)}
    with BackgroundProducer(cluster.bootstrap, TOPIC, PARTITIONS) as producer:
        producer.wait_for_acks(ACKS_PER_STEP)
        for broker in cluster.brokers.values():
            assert broker.stop() == 0, broker.log_tail()
            producer.wait_for_acks(len(producer.acked) + ACKS_PER_STEP)
            broker.restart()
            broker.wait_ready()
            for partition in range(PARTITIONS):
                cluster.wait_for_isr(TOPIC, partition, replicas[partition], CONVERGENCE_TIMEOUT)
            producer.wait_for_acks(len(producer.acked) + ACKS_PER_STEP)
        producer.stop()
    assert producer.errors == [] and producer.undelivered == 0, producer.errors[:10]
    lost, _duplicates = lost_and_duplicated(
        producer.acked, read_partitions(cluster.bootstrap, TOPIC, PARTITIONS)
    )
    assert lost == []
