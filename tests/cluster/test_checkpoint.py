"""The high-watermark checkpoint: Kafka's file format, the HWs clients are told, and a whole
cluster restart that brings back the same offsets and records."""

from __future__ import annotations

import re

from minibroker.tools.launcher import BrokerProcess, Cluster
from tests.cluster.conftest import (
    CONVERGENCE_TIMEOUT,
    create_replicated_topic,
    high_watermarks,
    produce_acks_all,
    read_checkpoint,
    read_partitions,
    replicas_of,
    wait_for,
)

TOPIC = "checkpointed"
# Different counts per partition, so that a checkpoint that mixes partitions up shows.
COUNTS = {0: 3_000, 1: 2_000, 2: 1_000}
HW_CHECKPOINT = "replication-offset-checkpoint"


def topic_checkpoint(broker: BrokerProcess) -> dict[int, int] | None:
    """This broker's checkpointed HW per partition of TOPIC; None while the file is missing."""
    path = broker.log_dir / HW_CHECKPOINT
    if not path.exists():
        return None
    return {
        partition: offset
        for (topic, partition), offset in read_checkpoint(path).items()
        if topic == TOPIC
    }


def assert_epoch_checkpoints_well_formed(broker: BrokerProcess) -> None:
    """Each partition directory holds a leader-epoch-checkpoint: `0`, the count, then
    `epoch startOffset` lines with increasing epochs and offsets, the first from offset 0."""
    for partition in COUNTS:
        path = broker.log_dir / f"{TOPIC}-{partition}" / "leader-epoch-checkpoint"
        text = path.read_text()
        lines = text.splitlines()
        assert text.endswith("\n") and lines[0] == "0", f"{path}: {text!r}"
        assert int(lines[1]) == len(lines) - 2 >= 1, f"{path}: {text!r}"
        entries = []
        for line in lines[2:]:
            assert re.fullmatch(r"\d+ \d+", line), f"{path}: {text!r}"
            entries.append(tuple(int(field) for field in line.split()))
        assert entries[0][1] == 0, f"{path}: {text!r}"
        assert entries == sorted(set(entries)), f"{path}: {text!r}"


def test_hw_checkpoint_format_and_full_cluster_restart(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, len(COUNTS))
    acked = produce_acks_all(
        cluster.bootstrap,
        TOPIC,
        (
            (partition, f"{partition}-{number:05d}".encode())
            for partition, count in COUNTS.items()
            for number in range(count)
        ),
    )
    assert high_watermarks(cluster.bootstrap, TOPIC, len(COUNTS)) == COUNTS

    # Followers learn the final HW from their next fetch, and the file is rewritten every
    # replica.high.watermark.checkpoint.interval.ms: every broker converges on the same HWs.
    for broker in cluster.brokers.values():
        wait_for(
            lambda broker=broker: topic_checkpoint(broker) == COUNTS,
            CONVERGENCE_TIMEOUT,
            f"broker {broker.node_id}'s {HW_CHECKPOINT} to list {COUNTS}",
        )

    # Removed just before SIGTERM, so that the file found afterwards was (barring a periodic
    # write in those few milliseconds) written by the clean shutdown itself.
    for broker in cluster.brokers.values():
        (broker.log_dir / HW_CHECKPOINT).unlink()
        broker.terminate()
    for broker in cluster.brokers.values():
        assert broker.stop() == 0, broker.log_tail()
        assert topic_checkpoint(broker) == COUNTS
        # Epochs learnt from appended batches are written when the log flushes, at the
        # latest by a clean shutdown.
        assert_epoch_checkpoints_well_formed(broker)

    for broker in cluster.brokers.values():
        broker.restart()
    cluster.wait_ready()
    for partition in COUNTS:
        cluster.wait_for_isr(
            TOPIC, partition, replicas_of(cluster, TOPIC, partition), CONVERGENCE_TIMEOUT
        )
    assert high_watermarks(cluster.bootstrap, TOPIC, len(COUNTS)) == COUNTS
    assert read_partitions(cluster.bootstrap, TOPIC, len(COUNTS)) == acked
    for broker in cluster.brokers.values():
        assert topic_checkpoint(broker) == COUNTS
