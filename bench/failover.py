"""The failover row: kill -9 of a partition's leader, and the seconds until the first acks=all
acknowledgement from its new leader.

Three brokers, a topic of RF=3 and min.insync.replicas=2 (the row's cluster). A confluent-kafka
producer (acks=all, idempotent, librdkafka's other defaults) sends one record every
SEND_INTERVAL_S to one partition; once a few are acknowledged, the harness kills that
partition's leader with SIGKILL and the clock runs from the kill to the first successful
delivery report of a record sent after it (the old leader is dead: that acknowledgement can
only come from the new one). This is what a producer sees, so it adds up the cluster noticing
the death (minibroker's controller: the broker's connection closing and its port refusing;
Kafka's: broker.session.timeout.ms, 9 s by default), the election, the new leader learning it
leads, and the client's own metadata refresh and retry.

Which node dies: on minibroker the controller is a process of its own, so the victim is only a
broker. Apache Kafka's nodes are each broker and controller (`bench.kafka_ref`), so the victim
is chosen among the partitions whose leader is not the active controller (read from each node's
`__cluster_metadata-0/quorum-state`): a plain broker's death on both systems. Killing Kafka's
active controller as well would add a quorum election; minibroker has no controller quorum to
compare it with (its controller's death moves no leader).
"""

from __future__ import annotations

import json
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench.retry import close_producer
from bench.targets import BenchError, Kafka, Minibroker

SEND_INTERVAL_S = 0.005
ACKED_BEFORE_KILL = 20
FAILOVER_TIMEOUT_S = 120.0
START_TIMEOUT_S = 30.0
METADATA_TIMEOUT_S = 10.0


def partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's leader, as Metadata from the cluster says."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(topic, timeout=METADATA_TIMEOUT_S)
    return {index: state.leader for index, state in metadata.topics[topic].partitions.items()}


def active_kafka_controller(target: Kafka) -> int | None:
    """The KRaft quorum's leader, from the quorum-state file of a node that names one."""
    for node in target.cluster.nodes:
        path = node.data_dir / "__cluster_metadata-0" / "quorum-state"
        try:
            leader = json.loads(path.read_text()).get("leaderId", -1)
        except (OSError, ValueError):
            continue
        if leader >= 0:
            return leader
    return None


def failover_time(target: Minibroker | Kafka, topic: str) -> dict[str, float]:
    leaders = partition_leaders(target.bootstrap, topic)
    spared = active_kafka_controller(target) if isinstance(target, Kafka) else None
    if isinstance(target, Kafka) and spared is None:
        raise target.failure("no node names the KRaft quorum's leader")
    candidates = sorted(p for p, leader in leaders.items() if leader >= 0 and leader != spared)
    if not candidates:
        raise target.failure(f"every partition is led by the active controller {spared}")
    partition = candidates[0]
    victim = leaders[partition]

    producer = Producer(
        {"bootstrap.servers": target.bootstrap, "acks": "all", "enable.idempotence": True}
    )
    # Delivery reports: (sent at, acknowledged at or None, error or None), by send order.
    reports: list[tuple[float, float | None, str | None]] = []
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            sent = time.monotonic()

            def delivered(error, _message, sent=sent) -> None:
                if error is None:
                    reports.append((sent, time.monotonic(), None))
                else:
                    reports.append((sent, None, str(error)))

            producer.produce(topic, b"x" * 100, partition=partition, on_delivery=delivered)
            producer.poll(SEND_INTERVAL_S)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while sum(1 for report in reports if report[1] is not None) < ACKED_BEFORE_KILL:
            if time.monotonic() > deadline or not sender.is_alive():
                raise target.failure(f"no acks=all acknowledgements on {topic}-{partition}")
            time.sleep(SEND_INTERVAL_S)
        killed = time.monotonic()
        target.kill_broker(victim)
        deadline = killed + FAILOVER_TIMEOUT_S
        while True:
            after = [acked for sent, acked, _ in list(reports) if sent >= killed and acked]
            if after:
                failover = min(after) - killed
                break
            if time.monotonic() > deadline:
                errors = {error for _, _, error in reports if error}
                raise target.failure(
                    f"no acknowledgement on {topic}-{partition} {FAILOVER_TIMEOUT_S}s after"
                    f" broker {victim} was killed; delivery errors: {sorted(errors)}"
                )
            time.sleep(0.001)
    finally:
        stop.set()
        sender.join(FAILOVER_TIMEOUT_S)
        close_producer(producer)
    new_leader = partition_leaders(target.bootstrap, topic).get(partition)
    if new_leader == victim:
        raise BenchError(f"Metadata still names the killed broker {victim} as the leader")
    return {"failover_s": failover}
