"""Consumers never read above the high watermark: not while a stalled follower holds the high
watermark back, and not across a failover, where whatever a consumer was given must have been
acknowledged, at that very offset, by the time the dust settles."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v2.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)

from minibroker.tools.launcher import BrokerProcess, Cluster
from tests.cluster.conftest import (
    CONVERGENCE_TIMEOUT,
    BackgroundProducer,
    create_replicated_topic,
    high_watermarks,
    replicas_of,
    wait_for,
    wait_for_new_leader,
)
from tests.conftest import exchange

TOPIC = "high-watermark"
# One partition, so that pausing one of its followers stalls no other partition's leader.
PARTITIONS = 1
ACKS_BEFORE_STALL = 1_000
ACKS_BETWEEN_STEPS = 2_000
LATEST = -1


class TailingConsumer:
    """Reads every partition from offset 0 in a thread, as fast as records become visible,
    from entering its `with` block until leaving it.

    read_uncommitted makes the high watermark the only limit on what it may see. With
    auto.offset.reset=error, a position beyond a new leader's log (which only reading above
    the high watermark could produce) surfaces as an error instead of a silent reset.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.seen: list[tuple[int, int, bytes]] = []
        self.next_offsets = dict.fromkeys(range(partitions), 0)
        self.errors: list[KafkaError] = []
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{topic}-tail",
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
                "auto.offset.reset": "error",
                "fetch.wait.max.ms": 100,
            }
        )
        self._consumer.assign(
            [TopicPartition(topic, partition, 0) for partition in range(partitions)]
        )
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"consumer-{topic}", daemon=True)

    def __enter__(self) -> TailingConsumer:
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        self._stopping.set()
        self._thread.join(30)

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                for message in self._consumer.consume(num_messages=1000, timeout=0.1):
                    if message.error() is not None:
                        self.errors.append(message.error())
                    else:
                        partition, offset = message.partition(), message.offset()
                        self.seen.append((partition, offset, message.value()))
                        self.next_offsets[partition] = max(self.next_offsets[partition], offset + 1)
        finally:
            self._consumer.close()

    def reached(self, ends: dict[int, int]) -> bool:
        """Whether every partition was read up to `ends` (exclusive)."""
        return all(self.next_offsets[partition] >= end for partition, end in ends.items())


def leader_high_watermark(leader: BrokerProcess) -> int:
    """ListOffsets latest from the leader itself: its high watermark, no client cache between."""
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(
            ListOffsetsTopic(
                name=TOPIC, partitions=(ListOffsetsPartition(partition_index=0, timestamp=LATEST),)
            ),
        ),
    )
    (answer,) = exchange(leader.bootstrap, request).topics[0].partitions
    assert answer.error_code == ErrorCode.none, answer
    return answer.offset


def check_reads_below_high_watermark_until_shrunk(
    cluster: Cluster, consumer: TailingConsumer, leader: BrokerProcess, in_sync: set[int]
) -> int:
    """Until the ISR is `in_sync`, compare what the consumer has read with the leader's high
    watermark, read afterwards: the HW only grows while the leader stays, so a consumer that
    was served only below it has always read less. Returns the number of comparisons."""
    comparisons = 0
    deadline = time.monotonic() + CONVERGENCE_TIMEOUT
    while cluster.isr_of(TOPIC, 0, via=leader.node_id) != in_sync:
        read_up_to = consumer.next_offsets[0]
        high_watermark = leader_high_watermark(leader)
        assert read_up_to <= high_watermark, (
            f"the consumer read up to offset {read_up_to - 1} while the HW was {high_watermark}"
        )
        comparisons += 1
        if time.monotonic() >= deadline:
            pytest.fail(f"the ISR did not become {in_sync} in {CONVERGENCE_TIMEOUT}s")
        time.sleep(0.02)
    return comparisons


def test_consumer_never_reads_above_high_watermark(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, PARTITIONS, config={"min.insync.replicas": "2"})
    replicas = replicas_of(cluster, TOPIC, 0)
    leader = cluster.brokers[cluster.leader_of(TOPIC, 0)]
    stalled, other = (cluster.brokers[node] for node in replicas if node != leader.node_id)

    with (
        BackgroundProducer(cluster.bootstrap, TOPIC, PARTITIONS) as producer,
        TailingConsumer(cluster.bootstrap, TOPIC, PARTITIONS) as consumer,
    ):
        producer.wait_for_acks(ACKS_BEFORE_STALL)
        # A stalled ISR member holds the HW back while the leader keeps appending: the
        # records above the HW are there to be (wrongly) served until the ISR shrinks.
        stalled.pause()
        comparisons = check_reads_below_high_watermark_until_shrunk(
            cluster, consumer, leader, {leader.node_id, other.node_id}
        )
        print(f"{comparisons} reads-below-HW comparisons while broker {stalled.node_id} stalled")
        stalled.resume()
        cluster.wait_for_isr(TOPIC, 0, replicas, CONVERGENCE_TIMEOUT)
        producer.wait_for_acks(len(producer.acked) + ACKS_BETWEEN_STEPS)

        leader.kill()
        wait_for_new_leader(cluster, TOPIC, 0, leader.node_id, CONVERGENCE_TIMEOUT)
        producer.wait_for_acks(len(producer.acked) + ACKS_BETWEEN_STEPS)
        producer.stop()
        ends = high_watermarks(cluster.bootstrap, TOPIC, PARTITIONS)
        wait_for(
            lambda: consumer.reached(ends), CONVERGENCE_TIMEOUT, f"the consumer to reach {ends}"
        )

    assert producer.errors == [], producer.errors[:10]
    assert producer.undelivered == 0
    print(
        f"consumed {len(consumer.seen)} records across the stall and the failover;"
        f" consumer errors: {[str(error) for error in consumer.errors]}"
    )
    acked_values = set(producer.acked.values())
    never_acknowledged = [record for record in consumer.seen if record[2] not in acked_values]
    assert never_acknowledged == [], f"read records never acknowledged: {never_acknowledged[:10]}"
    overwritten = [
        (partition, offset, value, producer.acked[(partition, offset)])
        for partition, offset, value in consumer.seen
        if producer.acked.get((partition, offset), value) != value
    ]
    assert overwritten == [], (
        f"read (partition, offset, value) later acknowledged with another value: {overwritten[:10]}"
    )
    values_at = defaultdict(set)
    for partition, offset, value in consumer.seen:
        values_at[(partition, offset)].add(value)
    reread_differently = {
        position: values for position, values in values_at.items() if len(values) > 1
    }
    assert reread_differently == {}, "an offset was read with different values"
    assert not [error for error in consumer.errors if error.code() == KafkaError._AUTO_OFFSET_RESET]
