"""A failing disk, as Kafka's log-dir failure handling treats it (issue 42).

An I/O error on a log dir takes it offline at once (storage/log_dir_failure.py); a broker with
no live log dir halts with exit code 1 ("Shutdown broker because all log dirs in ... have
failed"), and its restart recovers the logs from their files, truncates by leader epoch and
catches up before it rejoins an ISR. The log dirs here are small tmpfs mounts (needs root).

The sequence of issue 42 (../shared/evidence/divergent-follower): a follower truncated, then
its appends failed on a full disk; the ABORT marker it was appending fitted in its segment's
last page but the aborted transaction's `.txnindex` entry needed a page of its own, so the
batch was in the file while the log end offset did not count it. The fetcher fetched it again
and wrote it twice, and the follower rejoined the ISR with a log one batch longer than its
leader's. Both tests of that sequence fail without the rule.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest

from faults.chaos import fill_disk
from minibroker.protocol.errors import Error
from minibroker.protocol.record_batch import read_header
from minibroker.storage.errors import StorageError
from minibroker.storage.log import LogConfig, PartitionLog
from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import (
    CLUSTER_OVERRIDES,
    CONVERGENCE_TIMEOUT,
    NEEDS_TMPFS,
    _check_clean_stop,
    assert_logs_identical,
    log_sizes,
    produce_raw,
)
from tests.conftest import confluent_read_all, create_topic, exchange, wait_for
from tests.unit.batch_factory import make_batch

pytestmark = NEEDS_TMPFS

TOPIC = "full"
HALTED = "have failed"  # Kafka's "Shutdown broker because all log dirs in ... have failed"


def mount_tmpfs(directory: Path, size: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], check=True
    )


@pytest.fixture
def small_disk(tmp_path: Path):
    """Set up before the broker and so torn down after it."""
    disk = tmp_path / "disk"
    mount_tmpfs(disk, "16m")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def log_file_bytes(directory: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def test_a_marker_whose_txnindex_entry_fails_is_never_written_twice(tmp_path: Path):
    """The storage rule alone, deterministic: a follower truncates, appends a transactional
    batch, then its disk fills; the ABORT marker fits in the segment's last page but its
    `.txnindex` entry does not fit on the disk. The log dir goes offline: the retry the
    fetcher would make is refused without touching a file, and once the disk has room and
    the log is opened again (the broker's restart) it holds exactly the leader's bytes."""
    config = LogConfig()
    leader = PartitionLog.open(tmp_path / "leader" / "t-0", config, now_ms=0, needs_recovery=False)
    old = make_batch(3)
    leader.append_as_leader(make_batch(2), leader_epoch=0, now_ms=1)
    transactional = make_batch(2, producer_id=7, producer_epoch=0, base_sequence=0, attributes=0x10)
    leader.append_as_leader(transactional, leader_epoch=1, now_ms=2)
    leader.append_control_marker(
        producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False, leader_epoch=1, now_ms=3
    )
    fetched = leader.read(0, max_bytes=1 << 20)
    first = read_header(fetched, 0)
    second = read_header(fetched, first.size)
    marker_at = first.size + second.size

    disk = tmp_path / "disk"
    mount_tmpfs(disk, "1m")
    try:
        follower_dir = disk / "t-0"
        follower = PartitionLog.open(follower_dir, config, now_ms=0, needs_recovery=False)
        # What a former leader wrote in epoch 0 and the new leader never had: truncated away.
        follower.append_as_follower(fetched[: first.size], now_ms=4)
        follower.append_as_leader(old, leader_epoch=0, now_ms=5)
        assert follower.truncate_to(2)
        follower.append_as_follower(fetched[first.size : marker_at], now_ms=6)
        ballast = fill_disk(disk)
        with pytest.raises(StorageError) as failed:
            follower.append_as_follower(fetched[marker_at:], now_ms=7)
        assert failed.value.error == Error.KAFKA_STORAGE_ERROR
        ballast.unlink()
        # The fetcher's retry, from the log end offset the log reports.
        retry_from = follower.log_end_offset
        assert retry_from == 4
        try:
            follower.append_as_follower(fetched[marker_at:], now_ms=8)
        except StorageError as refused:
            assert "offline" in str(refused)
            follower = PartitionLog.open(follower_dir, config, now_ms=9, needs_recovery=True)
            if follower.log_end_offset == 4:
                follower.append_as_follower(fetched[marker_at:], now_ms=10)
        assert follower.log_end_offset == leader.log_end_offset
        assert log_file_bytes(follower_dir) == log_file_bytes(leader.directory)
        follower.close()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_halts_the_broker_and_a_restart_recovers_everything_acknowledged(
    small_disk, broker_factory
):
    """One broker, one log dir: Kafka halts when its last log dir fails. Nothing
    acknowledged is lost; after the disk is freed the restarted broker serves what it had,
    and the refused batch was not acknowledged, so its absence loses nothing."""
    broker = broker_factory({"log.dirs": str(small_disk / "data")})
    create_topic(broker.bootstrap, TOPIC, 1)
    before = [b"before-%d" % i for i in range(50)]
    assert produce_raw(broker, TOPIC, 0, before, acks=1).error_code == ErrorCode.none

    ballast = fill_disk(small_disk)
    try:
        answer = produce_raw(broker, TOPIC, 0, [b"x" * 1000] * 200, acks=1)
    except (ConnectionError, EOFError, OSError):
        answer = None  # the broker halted before it could answer
    assert answer is None or answer.error_code == ErrorCode.kafka_storage_error
    wait_for(lambda: not broker.running, 30, "the broker to halt")
    assert broker.exit_code == 1
    assert HALTED in broker.log_tail()

    ballast.unlink()
    broker.restart()
    broker.wait_ready(60)
    read = confluent_read_all(broker.bootstrap, TOPIC, {0: 0}, len(before))
    assert [message.value() for message in read][: len(before)] == before
    after = [b"after-%d" % i for i in range(50)]
    answer = produce_raw(broker, TOPIC, 0, after, acks=1)
    assert answer.error_code == ErrorCode.none
    start = answer.base_offset
    assert start >= len(before)
    read = confluent_read_all(broker.bootstrap, TOPIC, {0: start}, len(after))
    assert [message.value() for message in read] == after


def _transaction_coordinator(cluster: Cluster, transactional_id: str) -> int:
    for broker in cluster.brokers.values():
        answer = exchange(
            broker.bootstrap, FindCoordinatorRequest(key=transactional_id, key_type=1)
        )
        if answer.error_code.value == 0:
            return int(answer.node_id)
    return -1


@pytest.fixture
def cluster_with_a_small_disk(tmp_path: Path):
    """The `cluster` fixture's three brokers, broker 3's data on a 4 MB tmpfs."""
    disk = tmp_path / "broker-3"
    mount_tmpfs(disk, "4m")
    cluster = Cluster.start(
        tmp_path,
        brokers=3,
        overrides={
            **CLUSTER_OVERRIDES,
            "offsets.topic.num.partitions": 2,
            "transaction.state.log.num.partitions": 2,
        },
    )
    try:
        yield cluster, disk
        _check_clean_stop(cluster)
    finally:
        for broker in cluster.brokers.values():
            if broker.running:
                broker.kill()
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_follower_whose_disk_filled_never_rejoins_the_isr_with_another_log(
    cluster_with_a_small_disk,
):
    """Issue 42's sequence with real processes: broker 3 follows a partition led by broker 1;
    a transaction's records reach it, its disk fills, the transaction is aborted. Broker 3's
    append of the ABORT marker (or any write before it) fails: it halts, is restarted once
    the disk is freed (as compose's restart policy does), recovers, and rejoins the ISR with
    exactly its leader's bytes. Without the rule it kept running, wrote the marker twice once
    the disk had room, and rejoined the ISR with a longer log."""
    cluster, disk = cluster_with_a_small_disk
    topic = "txn-disk"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]])])[
        topic
    ].result(30)
    cluster.wait_for_isr(topic, 0, (1, 2, 3), CONVERGENCE_TIMEOUT)
    transactional_id = next(
        candidate
        for candidate in (f"disk-txn-{n}" for n in range(50))
        if _transaction_coordinator(cluster, candidate) in (1, 2)
    )
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60000,
        }
    )
    try:
        producer.init_transactions(30)
        broker3 = cluster.brokers[3]
        for round_ in range(2):
            producer.begin_transaction()
            for i in range(5):
                producer.produce(topic, b"r%d-%d" % (round_, i), partition=0)
            producer.flush(30)
            wait_for(
                lambda: len(set(log_sizes(cluster.brokers.values(), topic, 0).values())) == 1,
                CONVERGENCE_TIMEOUT,
                "broker 3 to hold the transaction's records",
            )
            if round_ == 0:
                producer.commit_transaction(30)
                continue
            ballast = fill_disk(disk)
            producer.abort_transaction(30)
            wait_for(
                lambda: not broker3.running or "cannot append" in broker3.log_tail(),
                CONVERGENCE_TIMEOUT,
                "broker 3's append of the marker to fail",
            )
            ballast.unlink()
        if not broker3.running:
            assert broker3.exit_code == 1 and HALTED in broker3.log_tail()
            broker3.restart()
        cluster.wait_for_isr(topic, 0, (1, 2, 3), CONVERGENCE_TIMEOUT)
        assert_logs_identical(cluster, topic, 0)
    finally:
        producer.purge()
        producer.flush(5)
