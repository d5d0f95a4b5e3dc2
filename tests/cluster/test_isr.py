"""The ISR follows the followers: a stalled follower leaves it after replica.lag.time.max.ms,
acks=all needs min.insync.replicas members, and a follower that catches up comes back."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from minibroker.tools.launcher import BrokerProcess, Cluster
from tests.cluster.conftest import (
    CONVERGENCE_TIMEOUT,
    HEARTBEAT_INTERVAL_MS,
    REPLICA_FETCH_WAIT_MS,
    REPLICA_LAG_TIME_MS,
    SESSION_TIMEOUT_MS,
    create_replicated_topic,
    produce_raw,
    replicas_of,
)
from tests.conftest import wait_for

TOPIC = "isr"

# A stalled follower may leave the ISR for either of two reasons, both legitimate: the leader
# sees it lag (its last caught-up fetch, possibly parked for replica.fetch.wait.max.ms, is
# older than replica.lag.time.max.ms), or the controller fences it (no heartbeat within the
# session timeout). Neither can happen sooner than this after the stall.
EARLIEST_SHRINK_SECONDS = (
    min(
        REPLICA_LAG_TIME_MS - REPLICA_FETCH_WAIT_MS,
        SESSION_TIMEOUT_MS - HEARTBEAT_INTERVAL_MS,
    )
    / 1000
)


def consumer_high_watermark(leader: BrokerProcess, isolation: str) -> int:
    """The high watermark a confluent-kafka consumer learns from the leader (ListOffsets
    LATEST at its isolation level; read_committed gives the last stable offset, the HW here
    since there are no transactions)."""
    consumer = Consumer(
        {
            "bootstrap.servers": leader.bootstrap,
            "group.id": f"{TOPIC}-{isolation}",
            "isolation.level": isolation,
        }
    )
    try:
        return consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10, cached=False)[1]
    finally:
        consumer.close()


def test_isr_shrinks_refuses_acks_all_below_min_insync_and_expands(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, 1, config={"min.insync.replicas": "2"})
    replicas = replicas_of(cluster, TOPIC, 0)
    leader = cluster.brokers[cluster.leader_of(TOPIC, 0)]
    first, second = (cluster.brokers[node] for node in replicas if node != leader.node_id)

    in_sync = produce_raw(leader, TOPIC, 0, [b"all three in sync"], acks=-1)
    assert (in_sync.error_code, in_sync.base_offset) == (ErrorCode.none, 0)

    first.pause()
    paused_at = time.monotonic()
    # Until the ISR shrinks, acks=all must wait for the stalled member: the record is appended
    # but not acknowledged, and the request times out.
    waiting = produce_raw(
        leader, TOPIC, 0, [b"waits for the stalled follower"], acks=-1, timeout_ms=300
    )
    if time.monotonic() - paused_at < EARLIEST_SHRINK_SECONDS:
        assert waiting.error_code == ErrorCode.request_timed_out, waiting
    cluster.wait_for_isr(TOPIC, 0, {leader.node_id, second.node_id}, CONVERGENCE_TIMEOUT)
    shrink_seconds = time.monotonic() - paused_at
    print(f"ISR dropped the stalled broker {first.node_id} after {shrink_seconds:.2f}s")
    assert shrink_seconds >= EARLIEST_SHRINK_SECONDS
    assert cluster.leader_of(TOPIC, 0) == leader.node_id

    # The timed-out record stayed in the log (offset 1) and is committed by the smaller ISR.
    two_in_sync = produce_raw(leader, TOPIC, 0, [b"two in sync"], acks=-1)
    assert (two_in_sync.error_code, two_in_sync.base_offset) == (ErrorCode.none, 2)

    second.pause()
    cluster.wait_for_isr(TOPIC, 0, {leader.node_id}, CONVERGENCE_TIMEOUT)
    refused = produce_raw(leader, TOPIC, 0, [b"needs two replicas"], acks=-1)
    assert refused.error_code == ErrorCode.not_enough_replicas, refused
    # min.insync.replicas binds acks=all only; and the refused record was never appended,
    # so this one takes the offset after the last acknowledged record.
    leader_only = produce_raw(leader, TOPIC, 0, [b"acks=1 needs the leader only"], acks=1)
    assert (leader_only.error_code, leader_only.base_offset) == (ErrorCode.none, 3)
    # Kafka 4.4 (Partition.maybeIncrementLeaderHW, KIP-966): below min.insync.replicas the
    # high watermark stays where it is, so the acks=1 record is not exposed to any consumer,
    # read_committed or not, until the ISR is back at min.insync.replicas.
    assert consumer_high_watermark(leader, "read_committed") == 3
    assert consumer_high_watermark(leader, "read_uncommitted") == 3

    first.resume()
    second.resume()
    expand_seconds = cluster.wait_for_isr(TOPIC, 0, replicas, CONVERGENCE_TIMEOUT)
    print(f"ISR complete again {expand_seconds:.2f}s after both followers resumed")
    current_leader = cluster.brokers[cluster.leader_of(TOPIC, 0)]
    wait_for(
        lambda: consumer_high_watermark(current_leader, "read_uncommitted") == 4,
        CONVERGENCE_TIMEOUT,
        "the HW to pass the acks=1 record once the ISR is full again",
    )

    all_back = produce_raw(current_leader, TOPIC, 0, [b"all three again"], acks=-1)
    assert (all_back.error_code, all_back.base_offset) == (ErrorCode.none, 4)
