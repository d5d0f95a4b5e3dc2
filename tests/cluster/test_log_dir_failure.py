"""One failed log dir among several (issue 39; Kafka's KIP-858 rule for JBOD in KRaft mode).

Three brokers with two log dirs each; broker 3's second dir is a small tmpfs (needs root, as
tests/integration/test_full_disk.py). Under an idempotent acks=all confluent-kafka producer the
tmpfs is filled: broker 3's next write there fails, the dir goes offline, and only its
partitions with it. Broker 3 keeps running and serving the partitions of its first dir; the
failed dir's partitions get leaders elsewhere and lose broker 3 from their ISRs (the broker's
heartbeat names the dir, the controller asks it by LeaderAndIsr which replicas failed:
controller/broker_lifecycle.py); every acknowledged record is read back, once, in order.

Without the rule (before issue 39) broker 3 halted as soon as its second dir failed: the test
fails on "broker 3 keeps running".
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from faults.chaos import fill_disk
from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import (
    CLUSTER_OVERRIDES,
    CONVERGENCE_TIMEOUT,
    NEEDS_TMPFS,
    BackgroundProducer,
    _check_clean_stop,
    read_partitions,
)
from tests.conftest import wait_for

pytestmark = NEEDS_TMPFS

TOPIC = "jbod"
PARTITIONS = 6
# Each partition's replicas, the first its leader: broker 3 leads two and follows four.
ASSIGNMENT = [[3, 1, 2], [1, 2, 3], [2, 3, 1], [3, 2, 1], [1, 3, 2], [2, 1, 3]]


class IdempotentProducer(BackgroundProducer):
    """The suite's background producer (acks=all, numbered values round-robin over the
    partitions), idempotent: a retry after the failover must store nothing twice."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(bootstrap, topic, partitions)
        self._settings["enable.idempotence"] = True


@pytest.fixture
def jbod_cluster(tmp_path: Path):
    """A controller and three brokers, each with log.dirs `broker-N,disk-N`; broker 3's
    `disk-3` is a 16 MB tmpfs."""
    disk = tmp_path / "disk-3"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], check=True)
    cluster = None
    try:
        cluster = Cluster.start(
            tmp_path,
            brokers=3,
            overrides=CLUSTER_OVERRIDES,
            node_overrides={
                node: {"log.dirs": f"{tmp_path / f'broker-{node}'},{tmp_path / f'disk-{node}'}"}
                for node in (1, 2, 3)
            },
        )
        yield cluster, disk
        _check_clean_stop(cluster)
    finally:
        if cluster is not None:
            for broker in cluster.nodes:
                if broker.running:
                    broker.kill()
        subprocess.run(["umount", "-l", str(disk)], check=False)


def partitions_in(directory: Path) -> set[int]:
    return {
        int(path.name.rsplit("-", 1)[1])
        for path in directory.glob(f"{TOPIC}-*")
        if path.is_dir() and path.name.rsplit("-", 1)[1].isdigit()
    }


def test_a_failed_log_dir_takes_only_its_partitions_offline(jbod_cluster):
    cluster, disk = jbod_cluster
    broker3 = cluster.brokers[3]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new_topic = NewTopic(
        TOPIC, PARTITIONS, replica_assignment=ASSIGNMENT, config={"min.insync.replicas": "2"}
    )
    admin.create_topics([new_topic])[TOPIC].result(30)
    for partition, replicas in enumerate(ASSIGNMENT):
        cluster.wait_for_isr(TOPIC, partition, replicas, CONVERGENCE_TIMEOUT)
    # Each new replica goes to the dir holding the fewest: broker 3's six are split.
    failing = partitions_in(disk)
    staying = partitions_in(broker3.log_dir)
    assert failing and staying and failing | staying == set(range(PARTITIONS)), (
        failing,
        staying,
    )
    with IdempotentProducer(cluster.bootstrap, TOPIC, PARTITIONS) as producer:
        producer.wait_for_acks(600)
        ballast = fill_disk(disk)
        wait_for(
            lambda: (
                "its partitions are offline on this broker" in broker3.log_tail(200)
                or not broker3.running
            ),
            CONVERGENCE_TIMEOUT,
            "broker 3's write to its full dir to fail",
        )
        assert broker3.running, f"broker 3 keeps running:\n{broker3.log_tail()}"
        for partition in failing:
            wait_for(
                lambda partition=partition: (
                    cluster.leader_of(TOPIC, partition) not in (None, -1, 3)
                    and 3 not in (cluster.isr_of(TOPIC, partition) or {3})
                ),
                CONVERGENCE_TIMEOUT,
                f"{TOPIC}-{partition} to be led elsewhere, without broker 3 in its ISR",
            )
        # Broker 3 still serves its other dir: it leads what it led there, and stays in sync.
        for partition in staying:
            replicas = ASSIGNMENT[partition]
            if replicas[0] == 3:
                assert cluster.leader_of(TOPIC, partition) == 3
            assert 3 in (cluster.isr_of(TOPIC, partition) or ())
        # The failed dir's partitions take records again, at their new leaders.
        ends = {p: max((o for q, o in list(producer.acked) if q == p), default=-1) for p in failing}
        wait_for(
            lambda: (
                all(any(q == p and o > ends[p] for q, o in list(producer.acked)) for p in failing)
                or producer.errors
            ),
            CONVERGENCE_TIMEOUT,
            "records acknowledged on every partition of the failed dir after its failover",
        )
        ballast.unlink()
    producer.stop()
    assert not producer.errors, producer.errors[:10]
    assert producer.undelivered == 0
    assert broker3.running
    stored = read_partitions(cluster.bootstrap, TOPIC, PARTITIONS)
    lost = [position for position, value in producer.acked.items() if stored.get(position) != value]
    assert not lost, lost[:10]
    values = [value for _, value in sorted(stored.items())]
    assert len(values) == len(set(values)), "a value is stored twice"
    for partition in range(PARTITIONS):
        in_order = [stored[key] for key in sorted(stored) if key[0] == partition]
        assert in_order == sorted(in_order), f"{TOPIC}-{partition} is out of order"
