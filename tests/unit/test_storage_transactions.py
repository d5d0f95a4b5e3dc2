"""Transactions in the log (Kafka's ProducerStateManager, TransactionIndex, UnifiedLog rules):
control batches, producer state of open transactions, the `.txnindex` in Kafka's format, the
first unstable offset and last stable offset, collect_aborted_transactions, fencing of
markers, followers' markers, truncation and recovery after a torn tail."""

import struct
from pathlib import Path

import pytest

from minibroker.protocol.control_batch import encode_control_batch, read_control_marker
from minibroker.protocol.errors import Error
from minibroker.protocol.record_batch import read_header, validate_batches
from minibroker.protocol.records import decode_records
from minibroker.replication.partition import Partition
from minibroker.storage.errors import StorageError
from minibroker.storage.log import LogConfig, PartitionLog
from minibroker.storage.producer_state import ProducerStateManager
from minibroker.storage.segment import segment_file_name
from minibroker.storage.transaction_index import AbortedTxn
from tests.unit.batch_factory import make_batch

TRANSACTIONAL = 0x10
CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=120)


def open_log(directory: Path, *, needs_recovery: bool = False) -> PartitionLog:
    return PartitionLog.open(directory, CONFIG, now_ms=0, needs_recovery=needs_recovery)


def txn_batch(producer_id: int, sequence: int, count: int = 2, epoch: int = 0) -> bytes:
    return make_batch(
        count,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        attributes=TRANSACTIONAL,
    )


def marker(
    log: PartitionLog,
    producer_id: int,
    commit: bool,
    *,
    epoch=0,
    coordinator_epoch=0,
    transaction_version=0,
):
    return log.append_control_marker(
        producer_id=producer_id,
        producer_epoch=epoch,
        coordinator_epoch=coordinator_epoch,
        commit=commit,
        leader_epoch=0,
        now_ms=5,
        transaction_version=transaction_version,
    )


def txn_index_files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.txnindex"))}


# -- control batches -------------------------------------------------------------------------


def test_a_control_batch_is_kafkas_end_transaction_marker():
    batch = encode_control_batch(
        producer_id=7, producer_epoch=3, coordinator_epoch=11, commit=False, timestamp_ms=99
    )
    (header,) = validate_batches(batch)  # framing and CRC-32C hold
    assert header.attributes == 0x30  # transactional | control, uncompressed
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, -1)
    assert header.records_count == 1
    (record,) = decode_records(batch)
    assert record.key == b"\x00\x00\x00\x00"  # version 0, type 0 (ABORT)
    assert record.value == b"\x00\x00" + struct.pack(">i", 11)  # version 0, coordinator epoch
    assert read_control_marker(batch) == (False, 11)
    commit = encode_control_batch(
        producer_id=7, producer_epoch=3, coordinator_epoch=12, commit=True, timestamp_ms=99
    )
    assert decode_records(commit)[0].key == b"\x00\x00\x00\x01"
    assert read_control_marker(commit) == (True, 12)


# -- producer state --------------------------------------------------------------------------


def test_producer_state_opens_and_closes_transactions():
    producers = ProducerStateManager()
    first = read_header(txn_batch(1, 0))
    producers.record(first)
    assert producers.ongoing_transaction(1) == first.base_offset == 0
    assert producers.first_unstable_offset() == 0
    control = read_header(
        encode_control_batch(
            producer_id=1, producer_epoch=0, coordinator_epoch=0, commit=True, timestamp_ms=1
        )
    )
    completed = producers.record(control._replace(base_offset=2), (True, 0))
    assert completed is not None and not completed.is_aborted
    assert (completed.first_offset, completed.last_offset) == (0, 2)
    assert producers.ongoing_transaction(1) is None
    # Still unstable until the high watermark passes the marker.
    assert producers.first_unstable_offset() == 0
    producers.on_high_watermark_updated(2)
    assert producers.first_unstable_offset() == 0
    producers.on_high_watermark_updated(3)
    assert producers.first_unstable_offset() is None


def test_a_plain_batch_from_a_producer_with_an_open_transaction_is_invalid_txn_state(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(1, 0), leader_epoch=0, now_ms=0)
    plain = make_batch(1, producer_id=1, producer_epoch=0, base_sequence=2)
    with pytest.raises(StorageError) as refused:
        log.append_as_leader(plain, leader_epoch=0, now_ms=0)
    assert refused.value.error == Error.INVALID_TXN_STATE
    assert log.log_end_offset == 2


def test_markers_are_fenced_by_producer_and_coordinator_epochs(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(1, 0, epoch=4), leader_epoch=0, now_ms=0)
    with pytest.raises(StorageError) as stale:
        marker(log, 1, True, epoch=3, coordinator_epoch=0)
    assert stale.value.error == Error.INVALID_PRODUCER_EPOCH
    marker(log, 1, True, epoch=4, coordinator_epoch=5)
    log.append_as_leader(txn_batch(1, 2, epoch=4), leader_epoch=0, now_ms=0)
    with pytest.raises(StorageError) as zombie:
        marker(log, 1, False, epoch=4, coordinator_epoch=4)
    assert zombie.value.error == Error.TRANSACTION_COORDINATOR_FENCED
    end = log.log_end_offset
    assert log.producer_state.ongoing_transaction(1) == end - 2  # nothing was appended
    # A transactional batch of an older epoch is refused as well.
    with pytest.raises(StorageError) as old:
        log.append_as_leader(txn_batch(1, 0, epoch=3), leader_epoch=0, now_ms=0)
    assert old.value.error == Error.INVALID_PRODUCER_EPOCH


def test_a_tv2_marker_needs_a_newer_producer_epoch(tmp_path):
    """Kafka 4.4's ProducerAppendInfo.checkProducerEpoch with the marker's transaction
    version (KIP-1228): TV2 refuses epoch <= current, TV0/TV1 only epoch < current; a TV2
    marker at the current epoch with no open transaction is a retry, and written again."""
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(1, 0, epoch=4), leader_epoch=0, now_ms=0)
    end = log.log_end_offset
    for stale_epoch in (3, 4):
        with pytest.raises(StorageError) as stale:
            marker(log, 1, True, epoch=stale_epoch, transaction_version=2)
        assert stale.value.error == Error.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == end  # nothing was appended
    assert log.producer_state.ongoing_transaction(1) == 0
    # The bumped epoch closes the transaction; its retry at that epoch is written again.
    marker(log, 1, True, epoch=5, transaction_version=2)
    assert log.producer_state.ongoing_transaction(1) is None
    marker(log, 1, True, epoch=5, transaction_version=2)
    assert log.log_end_offset == end + 2
    # A new transaction at epoch 5 is open: a TV2 marker at 5 is no retry, and refused.
    log.append_as_leader(txn_batch(1, 0, epoch=5), leader_epoch=0, now_ms=0)
    with pytest.raises(StorageError) as open_txn:
        marker(log, 1, False, epoch=5, transaction_version=2)
    assert open_txn.value.error == Error.INVALID_PRODUCER_EPOCH
    # The same marker of transaction version 1 (or 0, a v1 request) is written.
    marker(log, 1, False, epoch=5, transaction_version=1)
    assert log.producer_state.ongoing_transaction(1) is None


def test_a_tv2_marker_at_the_last_epoch_is_written(tmp_path):
    """Epoch 32767 cannot be bumped: Kafka lets a TV2 marker at it through."""
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(1, 0, epoch=32767), leader_epoch=0, now_ms=0)
    marker(log, 1, True, epoch=32767, transaction_version=2)
    assert log.producer_state.ongoing_transaction(1) is None


def test_describe_producers_view(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(9, 0, count=3, epoch=2), leader_epoch=0, now_ms=0)
    (producer,) = log.producer_state.active_producers()
    assert producer.producer_id == 9 and producer.producer_epoch == 2
    assert producer.last_sequence == 2 and producer.current_txn_start_offset == 0
    marker(log, 9, True, epoch=2, coordinator_epoch=7)
    (producer,) = log.producer_state.active_producers()
    assert producer.coordinator_epoch == 7 and producer.current_txn_start_offset == -1


# -- the transaction index, LSO and aborted transactions -----------------------------------


def test_abort_markers_write_kafkas_txnindex(tmp_path):
    directory = tmp_path / "t-0"
    log = open_log(directory)
    log.append_as_leader(txn_batch(1, 0), leader_epoch=0, now_ms=0)  # 0-1
    log.append_as_leader(txn_batch(2, 0), leader_epoch=0, now_ms=0)  # 2-3
    marker(log, 1, False)  # 4: aborts producer 1's [0, 4]; producer 2 still open at 2
    marker(log, 2, True)  # 5
    log.append_as_leader(txn_batch(2, 2), leader_epoch=0, now_ms=0)  # 6-7
    marker(log, 2, False)  # 8: aborts [6, 8], nothing else open
    (name, data), *_ = txn_index_files(directory).items()
    expected = struct.pack(">hqqqq", 0, 1, 0, 4, 2) + struct.pack(">hqqqq", 0, 2, 6, 8, 9)
    assert len(txn_index_files(directory)) == 1
    assert data == expected
    assert log.collect_aborted_transactions(0, 9) == [(1, 0), (2, 6)]
    assert log.collect_aborted_transactions(5, 6) == []
    assert log.collect_aborted_transactions(5, 7) == [(2, 6)]


def test_last_stable_offset_is_min_of_hw_and_first_unstable_offset(tmp_path):
    log = open_log(tmp_path / "t-0")
    partition = Partition("t", None, 0, log, local_id=1, leader=1)
    log.append_as_leader(make_batch(3), leader_epoch=0, now_ms=0)  # 0-2, not transactional
    log.append_as_leader(txn_batch(1, 0), leader_epoch=0, now_ms=0)  # 3-4
    partition.high_watermark = log.log_end_offset
    assert partition.last_stable_offset == 3
    marker(log, 1, True)  # 5
    assert partition.last_stable_offset == 3  # the marker is not replicated yet
    partition.high_watermark = log.log_end_offset
    assert partition.last_stable_offset == 6


def test_a_follower_takes_markers_through_the_same_path(tmp_path):
    leader = open_log(tmp_path / "leader" / "t-0")
    follower = open_log(tmp_path / "follower" / "t-0")
    leader.append_as_leader(txn_batch(1, 0), leader_epoch=0, now_ms=0)
    marker(leader, 1, False)
    leader.append_as_leader(txn_batch(1, 2), leader_epoch=0, now_ms=0)
    data = leader.read(0, max_bytes=1 << 20)
    follower.append_as_follower(data, now_ms=0)
    assert follower.producer_state.ongoing_transaction(1) == 3
    assert follower.collect_aborted_transactions(0, 5) == [(1, 0)]
    assert txn_index_files(tmp_path / "follower" / "t-0") == txn_index_files(
        tmp_path / "leader" / "t-0"
    )


def test_truncation_drops_index_entries_and_reopens_the_transaction(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(1, 0), leader_epoch=0, now_ms=0)
    marker(log, 1, False)  # 2
    assert log.collect_aborted_transactions(0, 3) == [(1, 0)]
    log.truncate_to(2)
    assert log.collect_aborted_transactions(0, 3) == []
    assert txn_index_files(tmp_path / "t-0") == {}
    assert log.producer_state.ongoing_transaction(1) == 0


def build_many_segments(directory: Path) -> PartitionLog:
    log = open_log(directory)
    sequence = {1: 0, 2: 0}
    for round_number in range(12):
        for producer_id in (1, 2):
            log.append_as_leader(
                txn_batch(producer_id, sequence[producer_id]), leader_epoch=0, now_ms=0
            )
            sequence[producer_id] += 2
        marker(log, 1, round_number % 2 == 0)
        marker(log, 2, round_number % 3 == 0)
    return log


def test_recovery_after_a_torn_tail_rebuilds_the_txnindex(tmp_path):
    directory = tmp_path / "t-0"
    log = build_many_segments(directory)
    assert log.segment_count > 3
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    assert len(aborted) == 6 + 8
    log.close()
    clean = txn_index_files(directory)
    assert len(clean) > 1
    # A crash: every index lost, and half a batch at the end of the active segment.
    for path in directory.glob("*.txnindex"):
        path.unlink()
    active = sorted(directory.glob("*.log"))[-1]
    with open(active, "ab") as file:
        file.write(txn_batch(1, 99)[:30])
    recovered = open_log(directory, needs_recovery=True)
    assert txn_index_files(directory) == clean
    assert recovered.collect_aborted_transactions(0, recovered.log_end_offset) == aborted
    assert recovered.producer_state.ongoing_transaction(1) is None


def test_a_clean_open_keeps_the_txnindex_and_a_torn_entry_is_cut(tmp_path):
    directory = tmp_path / "t-0"
    log = build_many_segments(directory)
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    log.close()
    some_index = sorted(directory.glob("*.txnindex"))[0]
    with open(some_index, "ab") as file:
        file.write(b"\x00" * 10)  # a torn entry
    reopened = open_log(directory)
    assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == aborted
    assert some_index.stat().st_size % 34 == 0


def test_retention_deletes_the_txnindex_with_its_segment(tmp_path):
    directory = tmp_path / "t-0"
    log = build_many_segments(directory)
    first = log.segments[0]
    index_path = first.txn_index.path
    assert index_path.exists()
    log.maybe_increment_log_start_offset(log.segments[1].base_offset)
    log.delete_segments_by_retention(0)
    assert not first.log_path.exists()
    assert not index_path.exists()
    assert AbortedTxn(1, 0, 4, 2).encode() == struct.pack(">hqqqq", 0, 1, 0, 4, 2)


# -- producer-state snapshots ----------------------------------------------------------------


def test_a_snapshot_is_kafkas_producer_snapshot_v1(tmp_path):
    import crc32c

    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(7, 0, count=3, epoch=2), leader_epoch=0, now_ms=0)
    data = log.producer_state.snapshot_bytes()
    entry = struct.pack(
        ">qhiqiqiq",
        7,  # producer id
        2,  # epoch
        2,  # last sequence
        2,  # last offset
        2,  # offset delta
        read_header(txn_batch(7, 0, count=3)).max_timestamp,  # timestamp
        -1,  # coordinator epoch (no marker yet)
        0,  # the open transaction's first offset
    )
    body = struct.pack(">i", 1) + entry
    assert data == struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def test_opening_replays_only_the_batches_after_the_latest_snapshot(tmp_path, monkeypatch):
    directory = tmp_path / "t-0"
    log = build_many_segments(directory)
    batches = sum(1 for segment in log.segments for _ in segment.batches())
    log.append_as_leader(txn_batch(1, 24), leader_epoch=0, now_ms=0)  # open: 1's txn
    state = sorted(log.producer_state.active_producers())
    log.close()
    assert len(list(directory.glob("*.snapshot"))) == log.segment_count  # rolls and close
    replayed = []
    original = ProducerStateManager.record
    monkeypatch.setattr(
        ProducerStateManager,
        "record",
        lambda self, header, marker=None: replayed.append(header) or original(self, header, marker),
    )
    reopened = open_log(directory)
    assert replayed == []  # the snapshot at the log end holds everything
    assert sorted(reopened.producer_state.active_producers()) == state
    assert reopened.producer_state.ongoing_transaction(1) == reopened.log_end_offset - 2
    # The producer's last batch is still recognised as a duplicate.
    duplicate = reopened.append_as_leader(txn_batch(1, 24), leader_epoch=0, now_ms=0)
    assert duplicate.duplicate
    reopened.close()
    # Without the last snapshot, only the active segment's batches are replayed.
    last = sorted(directory.glob("*.snapshot"))[-1]
    last.unlink()
    replayed.clear()
    again = open_log(directory)
    assert 0 < len(replayed) < batches / 2
    assert sorted(again.producer_state.active_producers()) == state
    again.close()


def test_a_torn_snapshot_is_ignored(tmp_path):
    directory = tmp_path / "t-0"
    log = build_many_segments(directory)
    state = sorted(log.producer_state.active_producers())
    log.close()
    for path in directory.glob("*.snapshot"):
        path.write_bytes(path.read_bytes()[:-3])
    reopened = open_log(directory)
    assert sorted(reopened.producer_state.active_producers()) == state
    assert list(directory.glob("*.snapshot")) == []  # each failed its check and went


def test_after_a_crash_the_snapshot_is_used_below_the_rescanned_segments(tmp_path, monkeypatch):
    directory = tmp_path / "t-0"
    log = build_many_segments(directory)
    state = sorted(log.producer_state.active_producers())
    end = log.log_end_offset
    active_base = log.segments[-1].base_offset
    log.flush()
    log.close()
    (directory / segment_file_name(end, ".snapshot")).unlink()  # the crash came before close
    replayed = []
    original = ProducerStateManager.record
    monkeypatch.setattr(
        ProducerStateManager,
        "record",
        lambda self, header, marker=None: replayed.append(header) or original(self, header, marker),
    )
    recovered = PartitionLog.open(
        directory, CONFIG, now_ms=0, recovery_point=end, needs_recovery=True
    )
    # Only the active segment (at or past the recovery point) was rescanned and replayed.
    assert replayed and all(header.base_offset >= active_base for header in replayed)
    assert sorted(recovered.producer_state.active_producers()) == state
