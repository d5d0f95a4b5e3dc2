"""Consumers never read above the high watermark, even across a failover: whatever a consumer
was given must have been acknowledged, at that very offset, by the time the dust settles."""

from __future__ import annotations

import threading
from collections import defaultdict

from confluent_kafka import Consumer, KafkaError, TopicPartition

from broker.launcher import Cluster
from tests.cluster.conftest import (
    CONVERGENCE_TIMEOUT,
    BackgroundProducer,
    create_replicated_topic,
    high_watermarks,
    wait_for,
    wait_for_new_leader,
)

TOPIC = "high-watermark"
PARTITIONS = 3
ACKS_BEFORE_KILL = 2_000
ACKS_AFTER_FAILOVER = 2_000


class TailingConsumer:
    """Reads every partition from offset 0 in a thread, as fast as records become visible,
    from entering its `with` block until leaving it.

    read_uncommitted makes the high watermark the only limit on what it may see. With
    auto.offset.reset=error, a position beyond a new leader's log (which only reading above
    the high watermark could produce) surfaces as an error instead of a silent reset.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.seen: list[tuple[int, int, bytes]] = []
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
                        self.seen.append((message.partition(), message.offset(), message.value()))
        finally:
            self._consumer.close()

    def reached(self, ends: dict[int, int]) -> bool:
        """Whether every partition was read up to `ends` (exclusive)."""
        next_offsets = dict.fromkeys(ends, 0)
        for partition, offset, _ in list(self.seen):
            next_offsets[partition] = max(next_offsets[partition], offset + 1)
        return all(next_offsets[partition] >= end for partition, end in ends.items())


def test_consumer_never_reads_above_high_watermark_during_failover(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, PARTITIONS, config={"min.insync.replicas": "2"})

    with (
        BackgroundProducer(cluster.bootstrap, TOPIC, PARTITIONS) as producer,
        TailingConsumer(cluster.bootstrap, TOPIC, PARTITIONS) as consumer,
    ):
        producer.wait_for_acks(ACKS_BEFORE_KILL)
        victim = cluster.brokers[cluster.leader_of(TOPIC, 0)]
        victim.kill()
        wait_for_new_leader(cluster, TOPIC, 0, victim.node_id, CONVERGENCE_TIMEOUT)
        producer.wait_for_acks(len(producer.acked) + ACKS_AFTER_FAILOVER)
        producer.stop()
        ends = high_watermarks(cluster.bootstrap, TOPIC, PARTITIONS)
        wait_for(
            lambda: consumer.reached(ends), CONVERGENCE_TIMEOUT, f"the consumer to reach {ends}"
        )

    assert producer.errors == [], producer.errors[:10]
    assert producer.undelivered == 0
    print(
        f"consumed {len(consumer.seen)} records during the failover;"
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
