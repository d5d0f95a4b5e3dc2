import errno

import pytest

from minibroker.protocol.errors import Error
from minibroker.storage.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    StorageError,
)
from minibroker.storage.log import LogConfig, PartitionLog
from tests.unit.batch_factory import make_batch

PID = 4000


def open_log(tmp_path, needs_recovery=False, config=None):
    return PartitionLog.open(
        tmp_path / "payments-0",
        config or LogConfig(segment_bytes=400),
        now_ms=0,
        needs_recovery=needs_recovery,
    )


def produce(log, sequence, records=2, epoch=0, producer_id=PID, now_ms=0):
    batch = make_batch(
        records, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence
    )
    return log.append_as_leader(batch, leader_epoch=0, now_ms=now_ms)


def test_a_retried_batch_gets_its_original_offsets(tmp_path):
    log = open_log(tmp_path)
    first = produce(log, 0)
    second = produce(log, 2)
    produce(log, 4)
    retry = produce(log, 2)
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (second.first_offset, second.last_offset)
    assert log.log_end_offset == 6
    assert produce(log, 0).first_offset == first.first_offset


def test_only_the_last_five_batches_are_remembered(tmp_path):
    log = open_log(tmp_path)
    for sequence in range(0, 12, 2):
        produce(log, sequence)
    assert produce(log, 2).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 0)  # evicted from the window: no longer recognised


def test_a_gap_in_sequences_is_out_of_order(tmp_path):
    log = open_log(tmp_path)
    produce(log, 0)
    with pytest.raises(OutOfOrderSequenceError) as raised:
        produce(log, 5)
    assert raised.value.error == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 2


def test_a_stale_epoch_is_fenced(tmp_path):
    log = open_log(tmp_path)
    produce(log, 0, epoch=3)
    with pytest.raises(InvalidProducerEpochError) as raised:
        produce(log, 2, epoch=2)
    assert raised.value.error == Error.INVALID_PRODUCER_EPOCH


def test_a_new_epoch_must_start_at_sequence_zero(tmp_path):
    log = open_log(tmp_path)
    produce(log, 0, epoch=0)
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        produce(log, 2, epoch=1)
    produce(log, 0, epoch=1)
    assert not produce(log, 0, epoch=0, producer_id=PID + 1).duplicate


def test_an_unknown_producer_is_accepted_at_any_sequence(tmp_path):
    """Kafka: its batches may have been removed by retention; refusing it would be fatal."""
    log = open_log(tmp_path)
    assert produce(log, 41).first_offset == 0
    assert produce(log, 43).first_offset == 2


def test_sequences_wrap_after_int_max(tmp_path):
    log = open_log(tmp_path)
    produce(log, 2**31 - 2, records=2)  # sequences 2**31-2 and 2**31-1
    assert produce(log, 0, records=1).first_offset == 2


def test_batches_without_a_producer_id_are_not_checked(tmp_path):
    log = open_log(tmp_path)
    for _ in range(3):
        assert not log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=0).duplicate
    assert len(log.producer_state) == 0


def test_several_batches_of_one_request_are_checked_in_order(tmp_path):
    log = open_log(tmp_path, config=LogConfig())
    produce(log, 0)
    ok = b"".join(
        make_batch(2, producer_id=PID, producer_epoch=0, base_sequence=sequence)
        for sequence in (2, 4)
    )
    assert log.append_as_leader(ok, leader_epoch=0, now_ms=0).last_offset == 5
    gap = b"".join(
        make_batch(2, producer_id=PID, producer_epoch=0, base_sequence=sequence)
        for sequence in (6, 9)
    )
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(gap, leader_epoch=0, now_ms=0)
    assert log.log_end_offset == 6


def test_state_is_rebuilt_on_reopen(tmp_path):
    log = open_log(tmp_path)
    offsets = [produce(log, sequence, epoch=1) for sequence in range(0, 20, 2)]
    assert log.segment_count > 1
    log.close()
    for needs_recovery in (False, True):
        reopened = open_log(tmp_path, needs_recovery=needs_recovery)
        retry = produce(reopened, 18, epoch=1)
        assert retry.duplicate and retry.first_offset == offsets[-1].first_offset
        with pytest.raises(OutOfOrderSequenceError):
            produce(reopened, 30, epoch=1)
        with pytest.raises(InvalidProducerEpochError):
            produce(reopened, 20, epoch=0)
        reopened.close()


def test_truncation_rolls_the_state_back(tmp_path):
    log = open_log(tmp_path)
    for sequence in range(0, 10, 2):
        produce(log, sequence)
    log.truncate_to(6)
    assert produce(log, 6).first_offset == 6  # sequence 6 is new again, at the new log end
    log.truncate_fully_and_start_at(100)
    assert produce(log, 77).first_offset == 100  # no state left: any sequence goes


def test_retention_forgets_producers_with_nothing_left(tmp_path):
    log = open_log(tmp_path, config=LogConfig(segment_bytes=200, retention_bytes=0))
    produce(log, 0, producer_id=1)
    produce(log, 0, producer_id=2)
    produce(log, 0, producer_id=3)
    log.delete_segments_by_retention(now_ms=0)
    assert log.producer_state.entry(1) is None
    assert produce(log, 9, producer_id=1).first_offset == 6


def test_a_batch_behind_a_failed_write_is_a_storage_error_not_a_gap(tmp_path, monkeypatch):
    """A full disk fails a batch while the producer's next one is in flight: that one gets
    KAFKA_STORAGE_ERROR (the failed write took the log dir offline), so the client retries
    both in order, instead of a sequence error that makes librdkafka bump its epoch and
    renumber messages that may already be stored. The retries are written once the log is
    opened again (the broker's restart) from what its files hold."""
    import minibroker.storage.segment

    config = LogConfig(segment_bytes=100_000)
    log = open_log(tmp_path, config=config)
    produce(log, 0)
    write = minibroker.storage.segment._write_all

    def disk_full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(minibroker.storage.segment, "_write_all", disk_full)
    with pytest.raises(StorageError) as failed:
        produce(log, 2)
    assert failed.value.error == Error.KAFKA_STORAGE_ERROR
    monkeypatch.setattr(minibroker.storage.segment, "_write_all", write)
    with pytest.raises(StorageError) as behind:
        produce(log, 4)
    assert behind.value.error == Error.KAFKA_STORAGE_ERROR
    assert "No space left on device" in str(behind.value)
    assert log.log_end_offset == 2
    reopened = open_log(tmp_path, needs_recovery=True, config=config)
    assert produce(reopened, 2).first_offset == 2
    assert produce(reopened, 4).first_offset == 4
    with pytest.raises(OutOfOrderSequenceError):
        produce(reopened, 10)


def test_a_verification_state_expires_with_the_producers(tmp_path):
    """Kafka's removeExpiredProducers drops verification states as old as
    producer.id.expiration.ms: a transaction never written here does not hold its producer's
    sequences back for ever."""
    log = open_log(tmp_path)
    state = log.producer_state
    state.start_verification(PID, 0, 0, 1_000, supports_epoch_bump=False)
    state.start_verification(PID, 4, 0, 2_000, supports_epoch_bump=False)  # not lower: kept
    assert state.verification(PID).lowest_sequence == 0
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 4)
    state.remove_expired(now_ms=1_000 + 9_999, expiration_ms=10_000)
    assert state.verification(PID) is not None
    state.remove_expired(now_ms=1_000 + 10_000, expiration_ms=10_000)
    assert state.verification(PID) is None
    assert produce(log, 4).first_offset == 0  # an unknown producer, any sequence


def test_a_late_retry_of_a_written_batch_leaves_no_verification_state(tmp_path):
    """A request a healed network delivers after its transaction ended starts no verification
    state: the producer's next transaction then starts here as it should (a fault run, before
    this rule: "333 (incoming seq. number), 219 (earliest seen sequence)", fatal for
    librdkafka)."""
    log = open_log(tmp_path)
    state = log.producer_state
    transactional = 0x10
    for sequence in (0, 2):
        state.start_verification(PID, sequence, 0, 0, supports_epoch_bump=False)
        batch = make_batch(
            2, producer_id=PID, producer_epoch=0, base_sequence=sequence, attributes=transactional
        )
        log.append_as_leader(batch, leader_epoch=0, now_ms=0)
    log.append_control_marker(
        producer_id=PID,
        producer_epoch=0,
        coordinator_epoch=0,
        commit=True,
        leader_epoch=0,
        now_ms=0,
    )
    state.start_verification(PID, 0, 0, 0, supports_epoch_bump=False)  # the late one
    assert state.verification(PID) is None
    state.start_verification(PID, 4, 0, 0, supports_epoch_bump=False)  # the next transaction
    batch = make_batch(
        2, producer_id=PID, producer_epoch=0, base_sequence=4, attributes=transactional
    )
    assert log.append_as_leader(batch, leader_epoch=0, now_ms=0).first_offset == 5
