"""Compacted partitions on a 3-broker cluster: every replica cleans its own log, a replica
rebuilt from nothing copies the leader's cleaned log (gaps and header-only batches included),
and a consumer reads the latest value of every key after the leader dies."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from minibroker.protocol.record_batch import read_header
from minibroker.protocol.records import decode_records
from minibroker.storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, read_offset_checkpoint
from minibroker.tools.launcher import BrokerProcess, Cluster
from tests.cluster.conftest import (
    CLUSTER_OVERRIDES,
    CONVERGENCE_TIMEOUT,
    create_replicated_topic,
    replicas_of,
    wait_for_new_leader,
)
from tests.conftest import wait_for
from tests.integration.test_log_cleaner import (
    FILLERS,
    KEYS,
    ROUNDS,
    TOPIC,
    consume_everything,
    produce,
)


@pytest.fixture
def cleaning_cluster(tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster.start(
        tmp_path, brokers=3, overrides={**CLUSTER_OVERRIDES, "log.cleaner.backoff.ms": 100}
    )
    yield started
    print("node logs:", *(str(node.stderr_path) for node in started.nodes), sep="\n  ")
    running = {node.node_id for node in started.nodes if node.running}
    exit_codes = started.stop()
    unclean = {node: code for node, code in exit_codes.items() if node in running and code}
    assert not unclean, f"nodes exited uncleanly on SIGTERM: {unclean}"


def records_on_disk(broker: BrokerProcess) -> list[tuple[int, bytes, bytes | None]] | None:
    """Every record in the partition's segment files, or None when a read met the cleaner (or
    the fetcher) replacing a segment: the cleaner keeps cleaning after its checkpoint passed an
    offset (the fillers make the log dirty again), so one read can fall between a swap's
    delete and its rename and see a gap that no reader of the log ever sees."""
    records = []
    for path in sorted((broker.log_dir / f"{TOPIC}-0").glob("*.log")):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        position = 0
        while position < len(data):
            header = read_header(data, position)
            batch = data[position : position + header.size]
            records += [(r.offset, r.key, r.value) for r in decode_records(batch)]
            position += header.size
    return records


def cleaner_checkpoint(broker: BrokerProcess) -> int:
    path = broker.log_dir / CLEANER_OFFSET_CHECKPOINT
    return read_offset_checkpoint(path).get((TOPIC, 0), -1) if path.exists() else -1


def test_replicas_of_a_compacted_partition_clean_and_copy_cleaned_logs(cleaning_cluster):
    cluster = cleaning_cluster
    create_replicated_topic(
        cluster,
        TOPIC,
        1,
        config={
            "cleanup.policy": "compact",
            "segment.bytes": "4096",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    updates = [
        (b"key-%d" % key, b"key-%d-round-%03d" % (key, round_number))
        for round_number in range(ROUNDS)
        for key in range(KEYS)
    ]
    half = len(updates) // 2
    offsets = produce(cluster.bootstrap, updates[:half], **{"enable.idempotence": True})
    tombstone = [(b"key-0", None)]
    fillers = [(b"filler-%d" % number, b"filler-%d" % number) for number in range(FILLERS)]
    offsets |= produce(cluster.bootstrap, updates[half:] + tombstone + fillers)
    latest = dict(updates + tombstone + fillers)
    expected = sorted((offsets[key, value], key, value) for key, value in latest.items())
    last_round_end = offsets[tombstone[0]] + 1

    # Every replica cleans its own copy.
    for broker in cluster.brokers.values():
        wait_for(
            lambda broker=broker: cleaner_checkpoint(broker) >= last_round_end,
            CONVERGENCE_TIMEOUT,
            f"broker {broker.node_id} to clean past offset {last_round_end}",
        )
        wait_for(
            lambda broker=broker: records_on_disk(broker) == expected,
            CONVERGENCE_TIMEOUT,
            f"broker {broker.node_id} to hold exactly the latest value of every key on disk",
        )

    # A follower that lost its copy gets the leader's cleaned log back, gaps and all.
    leader = cluster.leader_of(TOPIC, 0)
    follower = cluster.brokers[next(node for node in cluster.brokers if node != leader)]
    follower.stop()
    shutil.rmtree(follower.log_dir / f"{TOPIC}-0")
    follower.restart()
    follower.wait_ready(CONVERGENCE_TIMEOUT)
    cluster.wait_for_isr(TOPIC, 0, replicas_of(cluster, TOPIC, 0), CONVERGENCE_TIMEOUT)
    wait_for(
        lambda: records_on_disk(follower) == expected,
        CONVERGENCE_TIMEOUT,
        f"broker {follower.node_id} to hold the cleaned log again",
    )

    # The leader dies; the new one serves exactly the latest value of every key.
    cluster.brokers[leader].kill()
    wait_for_new_leader(cluster, TOPIC, 0, leader, CONVERGENCE_TIMEOUT)
    assert consume_everything(cluster.bootstrap) == expected
