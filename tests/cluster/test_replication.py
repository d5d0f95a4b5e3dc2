"""Replication end to end: acks=all through a 3-broker cluster, read back in full, and the
followers' logs byte for byte the leader's."""

from __future__ import annotations

import time

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import (
    assert_logs_identical,
    create_replicated_topic,
    high_watermarks,
    produce_acks_all,
    read_partitions,
    replicas_of,
)

TOPIC = "replicated"
PARTITIONS = 6
MESSAGE_COUNT = 100_000


def test_acks_all_round_trip_and_identical_replicas(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, PARTITIONS, config={"min.insync.replicas": "2"})

    started = time.monotonic()
    acked = produce_acks_all(
        cluster.bootstrap,
        TOPIC,
        (
            (number % PARTITIONS, f"replicated-{number:07d}-{'r' * 80}".encode())
            for number in range(MESSAGE_COUNT)
        ),
    )
    elapsed = time.monotonic() - started
    print(
        f"acks=all: {MESSAGE_COUNT} messages over {PARTITIONS} partitions (RF=3) in"
        f" {elapsed:.1f}s, {MESSAGE_COUNT / elapsed:,.0f} msg/s"
    )
    assert len(acked) == MESSAGE_COUNT, "two messages were acknowledged at one offset"
    per_partition = MESSAGE_COUNT // PARTITIONS
    for partition in range(PARTITIONS):
        offsets = sorted(offset for (part, offset) in acked if part == partition)
        assert offsets == list(range(len(offsets))), f"offsets of partition {partition} have gaps"
        assert len(offsets) in (per_partition, per_partition + 1)

    assert high_watermarks(cluster.bootstrap, TOPIC, PARTITIONS) == {
        partition: sum(1 for (part, _) in acked if part == partition)
        for partition in range(PARTITIONS)
    }
    assert read_partitions(cluster.bootstrap, TOPIC, PARTITIONS) == acked

    for partition in range(PARTITIONS):
        cluster.wait_for_isr(TOPIC, partition, replicas_of(cluster, TOPIC, partition))
        # Production has stopped and everything was acknowledged, so the leader's log ends
        # at the high watermark: the whole log must be replicated, byte for byte.
        assert assert_logs_identical(cluster, TOPIC, partition) > 0
