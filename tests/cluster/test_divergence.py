"""Divergence: a leader that took records its followers never got (acks=1 while they were
stalled) loses its leadership uncleanly, returns as a follower, and truncates those records by
leader epoch until its log is the new leader's, byte for byte."""

from __future__ import annotations

import re

from kio.schema.errors import ErrorCode

from minibroker.tools.launcher import BrokerProcess, Cluster
from tests.cluster.conftest import (
    CONVERGENCE_TIMEOUT,
    assert_logs_identical,
    create_replicated_topic,
    log_sizes,
    produce_raw,
    produce_when_leading,
    read_partitions,
    replicas_of,
    wait_for_new_leader,
)

TOPIC = "divergence"
BATCHES = 4
RECORDS_PER_BATCH = 25
REPLICATED = [
    [f"replicated-{batch}-{record}".encode() for record in range(RECORDS_PER_BATCH)]
    for batch in range(BATCHES)
]
UNREPLICATED = [
    [f"never-replicated-{batch}-{record}".encode() for record in range(RECORDS_PER_BATCH)]
    for batch in range(BATCHES)
]
# Fewer records than the lost tail, so that only truncation can make the logs agree.
AFTER_FAILOVER = [
    [f"new-leader-{batch}-{record}".encode() for record in range(RECORDS_PER_BATCH)]
    for batch in range(BATCHES - 1)
]


def leader_epoch_entries(broker: BrokerProcess) -> list[tuple[int, int]] | None:
    """The (epoch, start offset) entries of the partition's leader-epoch-checkpoint, checking
    Kafka's format (`0`, the count, `epoch offset` lines); None while the file is missing."""
    path = broker.log_dir / f"{TOPIC}-0" / "leader-epoch-checkpoint"
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    lines = text.splitlines()
    assert text.endswith("\n") and lines[0] == "0", f"{path}: {text!r}"
    assert int(lines[1]) == len(lines) - 2, f"{path}: {text!r}"
    assert all(re.fullmatch(r"\d+ \d+", line) for line in lines[2:]), f"{path}: {text!r}"
    return [tuple(int(field) for field in line.split()) for line in lines[2:]]


def test_former_leader_truncates_unreplicated_records(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, 1, config={"unclean.leader.election.enable": "true"})
    replicas = replicas_of(cluster, TOPIC, 0)
    old_leader = cluster.brokers[cluster.leader_of(TOPIC, 0)]
    followers = [cluster.brokers[node] for node in replicas if node != old_leader.node_id]

    for values in REPLICATED:
        assert produce_raw(old_leader, TOPIC, 0, values, acks=-1).error_code == ErrorCode.none
    replicated_count = BATCHES * RECORDS_PER_BATCH
    replicated_size = assert_logs_identical(cluster, TOPIC, 0)

    for follower in followers:
        follower.pause()
    cluster.wait_for_isr(TOPIC, 0, {old_leader.node_id}, CONVERGENCE_TIMEOUT)
    for values in UNREPLICATED:
        assert produce_raw(old_leader, TOPIC, 0, values, acks=1).error_code == ErrorCode.none
    sizes = log_sizes([old_leader, *followers], TOPIC, 0)
    assert sizes[old_leader.node_id] > replicated_size, sizes
    assert all(sizes[follower.node_id] == replicated_size for follower in followers), sizes

    old_leader.kill()
    for follower in followers:
        follower.resume()
    new_leader_id = wait_for_new_leader(cluster, TOPIC, 0, old_leader.node_id, CONVERGENCE_TIMEOUT)
    new_leader = cluster.brokers[new_leader_id]
    print(f"unclean election: broker {new_leader_id} leads after broker {old_leader.node_id}")
    assert new_leader in followers

    next_offset = replicated_count
    for values in AFTER_FAILOVER:
        assert produce_when_leading(new_leader, TOPIC, 0, values) == next_offset
        next_offset += len(values)
    # The epoch the new leader wrote in: the last one that has batches. Later epochs (the
    # former leader, the preferred replica, leads again as soon as it is back in the ISR, and a
    # stop moves leadership) start with no batch, so only the replica that led them knows them,
    # as in Kafka, where followers learn epochs from the batches they fetch.
    epoch_of_new_records = cluster.partition_metadata(TOPIC, 0).leader_epoch

    old_leader.restart()
    old_leader.wait_ready()
    cluster.wait_for_isr(TOPIC, 0, replicas, CONVERGENCE_TIMEOUT)
    assert_logs_identical(cluster, TOPIC, 0)

    stored = read_partitions(cluster.bootstrap, TOPIC, 1)
    expected = [value for batch in REPLICATED + AFTER_FAILOVER for value in batch]
    assert [stored[(0, offset)] for offset in range(len(stored))] == expected

    # The new leader's epoch starts where the replicated records end, and every replica, the
    # former leader included, ends up with the same history of the epochs that hold batches.
    # Epochs learnt from batches reach the file when the log flushes, at the latest by a clean
    # shutdown.
    for node in replicas:
        cluster.brokers[node].terminate()
    for node in replicas:
        assert cluster.brokers[node].stop() == 0, cluster.brokers[node].log_tail()
    histories = {
        node: [
            e for e in leader_epoch_entries(cluster.brokers[node]) if e[0] <= epoch_of_new_records
        ]
        for node in replicas
    }
    history = histories[new_leader_id]
    assert history and all(other == history for other in histories.values()), histories
    assert history[-1][1] == replicated_count, history
