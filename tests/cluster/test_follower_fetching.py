"""Follower fetching (KIP-392) on a real 3-broker cluster with librdkafka: brokers in racks
a, b and c with Kafka's RackAwareReplicaSelector; a consumer whose `client.rack` is a
follower's rack reads every record from that follower (the leader names it in
preferred_read_replica and sends no records itself, as each broker's BytesOut shows), and
once that follower is stopped it goes back to the leader and reads what comes next. One
cluster for both steps: tests/cluster is CI's critical path."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from minibroker.tools.launcher import Cluster, free_port
from tests.cluster.conftest import (
    BROKERS,
    CLUSTER_OVERRIDES,
    CONVERGENCE_TIMEOUT,
    _check_clean_stop,
    create_replicated_topic,
    produce_acks_all,
    replicas_of,
)
from tests.conftest import scrape, wait_for

RACKS = {1: "a", 2: "b", 3: "c"}
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
TOPIC = "near"
FIRST, SECOND = 300, 200
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"


@pytest.fixture
def racked(tmp_path: Path) -> Iterator[tuple[Cluster, dict[int, int]]]:
    metrics_ports = {node: free_port() for node in RACKS}
    started = Cluster.start(
        tmp_path,
        brokers=BROKERS,
        overrides={**CLUSTER_OVERRIDES, "replica.selector.class": SELECTOR},
        node_overrides={
            node: {"broker.rack": rack, "metrics.port": metrics_ports[node]}
            for node, rack in RACKS.items()
        },
    )
    yield started, metrics_ports
    _check_clean_stop(started)


def bytes_out(port: int) -> float:
    """The broker's BytesOut for the topic: record bytes it sent to consumers."""
    return scrape(port).get((BYTES_OUT, (("topic", TOPIC),)), 0.0)


def read(consumer: Consumer, values: list[bytes], count: int) -> None:
    """Poll until `values` holds `count` records, failing on an error or at the deadline."""
    deadline = time.monotonic() + CONVERGENCE_TIMEOUT
    while len(values) < count:
        if time.monotonic() >= deadline:
            pytest.fail(f"read {len(values)} of {count} records in {CONVERGENCE_TIMEOUT}s")
        message = consumer.poll(0.2)
        if message is None:
            continue
        assert message.error() is None, message.error()
        values.append(message.value())


def test_a_consumer_reads_from_the_follower_in_its_rack_then_from_the_leader(racked):
    cluster, metrics_ports = racked
    create_replicated_topic(cluster, TOPIC, 1)
    leader = cluster.leader_of(TOPIC, 0)
    near = next(node for node in replicas_of(cluster, TOPIC, 0) if node != leader)
    first = [b"first-%d" % n for n in range(FIRST)]
    produce_acks_all(cluster.bootstrap, TOPIC, [(0, value) for value in first])

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"{TOPIC}-reader",
            "client.rack": RACKS[near],
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.wait.max.ms": 100,
            "socket.timeout.ms": 10000,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        values: list[bytes] = []
        read(consumer, values, FIRST)
        assert values == first
        # The follower in the consumer's rack sent every record; the leader none (it
        # answered the first fetch with preferred_read_replica and no records).
        assert bytes_out(metrics_ports[near]) > 0
        assert bytes_out(metrics_ports[leader]) == 0

        # That follower stops: the consumer's connection to it fails and librdkafka goes
        # back to the leader; no live in-sync replica is in the consumer's rack any more,
        # so the leader serves it.
        assert cluster.brokers[near].stop() == 0
        wait_for(
            lambda: near not in (cluster.isr_of(TOPIC, 0, via=leader) or {near}),
            CONVERGENCE_TIMEOUT,
            f"broker {near} out of the ISR",
        )
        second = [b"second-%d" % n for n in range(SECOND)]
        produce_acks_all(cluster.bootstrap, TOPIC, [(0, value) for value in second])
        read(consumer, values, FIRST + SECOND)
        assert values == first + second
        assert bytes_out(metrics_ports[leader]) > 0
    finally:
        consumer.close()
