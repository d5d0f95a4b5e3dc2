"""The pure transaction state (Kafka's TransactionMetadata and TransactionCoordinator's
decisions), TV1: every transition, fencing, retries and timeouts, time passed in."""

import pytest

from minibroker.coordinator.transaction.state import (
    IllegalTransition,
    Transit,
    TxnMetadata,
    TxnState,
    valid_timeout,
)
from minibroker.protocol.errors import Error

T0 = 1_000


def apply(meta: TxnMetadata, result) -> Transit:
    assert isinstance(result, Transit), result
    meta.complete(result)
    return result


def initialized(epoch_after: int = 0) -> TxnMetadata:
    meta = TxnMetadata("tx", producer_id=10)
    apply(meta, meta.prepare_init(60_000, None, T0))
    while meta.producer_epoch < epoch_after:
        apply(meta, meta.prepare_init(60_000, None, T0))
    return meta


def ongoing(meta: TxnMetadata, *partitions, now=T0 + 10) -> None:
    apply(
        meta,
        meta.prepare_add_partitions(
            meta.producer_id, meta.producer_epoch, set(partitions or {("t", 0)}), now
        ),
    )


def test_first_init_gives_epoch_0_and_is_empty():
    meta = TxnMetadata("tx", producer_id=10)
    transit = meta.prepare_init(60_000, None, T0)
    assert isinstance(transit, Transit)
    assert meta.pending == TxnState.EMPTY
    assert (transit.producer_id, transit.producer_epoch, transit.start_ms) == (10, 0, -1)
    meta.complete(transit)
    assert (meta.state, meta.producer_epoch, meta.pending) == (TxnState.EMPTY, 0, None)


def test_init_again_bumps_the_epoch_fencing_the_older_producer():
    meta = initialized()
    apply(meta, meta.prepare_init(60_000, None, T0))
    assert meta.producer_epoch == 1
    # The older producer (epoch 0) is now fenced.
    assert meta.prepare_add_partitions(10, 0, {("t", 0)}, T0) == Error.PRODUCER_FENCED
    assert meta.prepare_end(10, 0, True, T0) == Error.PRODUCER_FENCED


def test_init_while_a_change_is_pending_is_concurrent():
    meta = initialized()
    meta.prepare_add_partitions(10, 0, {("t", 0)}, T0)
    assert meta.prepare_init(60_000, None, T0) == Error.CONCURRENT_TRANSACTIONS


def test_init_of_an_ongoing_transaction_fences_it_first():
    meta = initialized()
    ongoing(meta)
    fence = meta.prepare_init(60_000, None, T0 + 20)
    assert isinstance(fence, Transit)
    assert fence.state == TxnState.PREPARE_EPOCH_FENCE
    assert fence.producer_epoch == 1
    # The coordinator aborts with the bumped epoch.
    abort = meta.prepare_end(10, fence.producer_epoch, False, T0 + 20, from_client=False)
    assert isinstance(abort, Transit)
    assert (abort.state, abort.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    assert meta.producer_epoch == 1  # the old producer is fenced at once
    meta.complete(abort)
    # Markers pending: a retried init waits.
    assert meta.prepare_init(60_000, None, T0 + 30) == Error.CONCURRENT_TRANSACTIONS
    apply(meta, meta.prepare_complete(T0 + 40))
    assert meta.state == TxnState.COMPLETE_ABORT
    assert meta.partitions == set()
    apply(meta, meta.prepare_init(60_000, None, T0 + 50))
    assert meta.producer_epoch == 2


def test_a_failed_fence_does_not_bump_twice():
    meta = initialized()
    ongoing(meta)
    fence = meta.prepare_init(60_000, None, T0)
    abort = meta.prepare_end(10, fence.producer_epoch, False, T0, from_client=False)
    meta.abandon(abort, fence=True)
    assert meta.has_failed_epoch_fence
    assert meta.state == TxnState.ONGOING and meta.pending is None
    fence2 = meta.prepare_fence()
    assert fence2.producer_epoch == 1


def test_init_in_prepare_states_is_concurrent():
    meta = initialized()
    ongoing(meta)
    apply(meta, meta.prepare_end(10, 0, True, T0))
    assert meta.state == TxnState.PREPARE_COMMIT
    assert meta.prepare_init(60_000, None, T0) == Error.CONCURRENT_TRANSACTIONS


def test_kip_360_bump_with_the_clients_id_and_epoch():
    meta = initialized()
    transit = apply(meta, meta.prepare_init(60_000, (10, 0), T0))
    assert (transit.producer_epoch, transit.last_producer_epoch) == (1, 0)
    # The same request again (its answer was lost): the same epoch, no second bump.
    retry = apply(meta, meta.prepare_init(60_000, (10, 0), T0))
    assert (retry.producer_epoch, retry.last_producer_epoch) == (1, 0)


def test_kip_360_with_a_stale_epoch_is_fenced():
    meta = initialized(epoch_after=3)
    assert meta.prepare_init(60_000, (10, 1), T0) == Error.PRODUCER_FENCED
    assert meta.pending is None


def test_kip_360_with_another_producer_id_is_fenced():
    meta = initialized()
    assert meta.prepare_init(60_000, (99, 0), T0) == Error.PRODUCER_FENCED


def test_kip_360_of_a_new_transactional_id_is_accepted():
    meta = TxnMetadata("tx", producer_id=10)
    transit = meta.prepare_init(60_000, (99, 5), T0)
    assert isinstance(transit, Transit) and transit.producer_epoch == 0


def test_exhausted_epoch_rotates_the_producer_id():
    meta = TxnMetadata("tx", producer_id=10, producer_epoch=32766)
    assert meta.needs_new_producer_id(None)
    with pytest.raises(IllegalTransition):
        meta.prepare_init(60_000, None, T0)
    transit = apply(meta, meta.prepare_init(60_000, None, T0, new_producer_id=11))
    assert (transit.producer_id, transit.producer_epoch, transit.last_producer_epoch) == (11, 0, -1)
    assert meta.previous_producer_id == 10


def test_exhausted_epoch_with_kip_360_records_the_last_epoch():
    meta = TxnMetadata("tx", producer_id=10, producer_epoch=32766)
    transit = apply(meta, meta.prepare_init(60_000, (10, 32766), T0, new_producer_id=11))
    assert (transit.producer_id, transit.producer_epoch, transit.last_producer_epoch) == (
        11,
        0,
        32766,
    )
    # A retry with the old id and exhausted epoch is not fenced (its answer was lost).
    assert meta.prepare_init(60_000, (10, 32766), T0) != Error.PRODUCER_FENCED


def test_add_partitions_starts_the_transaction_and_keeps_its_start():
    meta = initialized()
    transit = apply(meta, meta.prepare_add_partitions(10, 0, {("t", 0)}, T0 + 5))
    assert transit.start_ms == T0 + 5
    assert meta.state == TxnState.ONGOING
    transit = apply(meta, meta.prepare_add_partitions(10, 0, {("u", 1)}, T0 + 9))
    assert transit.start_ms == T0 + 5
    assert meta.partitions == {("t", 0), ("u", 1)}
    assert meta.last_update_ms == T0 + 9


def test_add_partitions_already_in_is_answered_without_writing():
    meta = initialized()
    ongoing(meta, ("t", 0), ("t", 1))
    assert meta.prepare_add_partitions(10, 0, {("t", 1)}, T0) == Error.NONE
    assert meta.pending is None


@pytest.mark.parametrize(
    "producer_id, epoch, error",
    [(11, 0, Error.INVALID_PRODUCER_ID_MAPPING), (10, 1, Error.PRODUCER_FENCED)],
)
def test_add_partitions_of_another_producer(producer_id, epoch, error):
    meta = initialized()
    assert meta.prepare_add_partitions(producer_id, epoch, {("t", 0)}, T0) == error


def test_add_partitions_while_completing_is_concurrent():
    meta = initialized()
    ongoing(meta)
    apply(meta, meta.prepare_end(10, 0, False, T0))
    assert meta.prepare_add_partitions(10, 0, {("t", 1)}, T0) == Error.CONCURRENT_TRANSACTIONS
    pending = TxnMetadata("tx", 10, 0, pending=TxnState.ONGOING)
    assert pending.prepare_add_partitions(10, 0, {("t", 1)}, T0) == Error.CONCURRENT_TRANSACTIONS


def test_commit_then_complete_then_a_new_transaction():
    meta = initialized()
    ongoing(meta, ("t", 0), ("u", 2))
    prepare = apply(meta, meta.prepare_end(10, 0, True, T0 + 20))
    assert prepare.partitions == {("t", 0), ("u", 2)}
    assert meta.state == TxnState.PREPARE_COMMIT
    done = apply(meta, meta.prepare_complete(T0 + 30))
    assert done.state == TxnState.COMPLETE_COMMIT and done.partitions == frozenset()
    assert meta.partitions == set() and meta.producer_epoch == 0  # TV1: no bump per txn
    transit = apply(meta, meta.prepare_add_partitions(10, 0, {("t", 1)}, T0 + 40))
    assert transit.start_ms == T0 + 40


def test_retried_end_txn_is_answered_as_kafka_does():
    meta = initialized()
    ongoing(meta)
    apply(meta, meta.prepare_end(10, 0, True, T0))
    assert meta.prepare_end(10, 0, True, T0) == Error.CONCURRENT_TRANSACTIONS
    assert meta.prepare_end(10, 0, False, T0) == Error.INVALID_TXN_STATE
    apply(meta, meta.prepare_complete(T0))
    assert meta.prepare_end(10, 0, True, T0) == Error.NONE
    assert meta.prepare_end(10, 0, False, T0) == Error.INVALID_TXN_STATE


def test_retried_abort():
    meta = initialized()
    ongoing(meta)
    apply(meta, meta.prepare_end(10, 0, False, T0))
    assert meta.prepare_end(10, 0, False, T0) == Error.CONCURRENT_TRANSACTIONS
    assert meta.prepare_end(10, 0, True, T0) == Error.INVALID_TXN_STATE
    apply(meta, meta.prepare_complete(T0))
    assert meta.state == TxnState.COMPLETE_ABORT
    assert meta.prepare_end(10, 0, False, T0) == Error.NONE
    assert meta.prepare_end(10, 0, True, T0) == Error.INVALID_TXN_STATE


def test_end_txn_with_no_transaction_is_invalid_state():
    meta = initialized()
    assert meta.prepare_end(10, 0, True, T0) == Error.INVALID_TXN_STATE
    assert meta.prepare_end(10, 0, False, T0) == Error.INVALID_TXN_STATE


@pytest.mark.parametrize(
    "producer_id, epoch, error",
    [
        (11, 1, Error.INVALID_PRODUCER_ID_MAPPING),
        (10, 0, Error.PRODUCER_FENCED),  # stale
        (10, 2, Error.PRODUCER_FENCED),  # TV1: a client never has a newer epoch
    ],
)
def test_end_txn_of_another_producer(producer_id, epoch, error):
    meta = initialized(epoch_after=1)
    ongoing(meta)
    assert meta.prepare_end(producer_id, epoch, True, T0) == error


def test_end_txn_while_adding_is_concurrent():
    meta = initialized()
    ongoing(meta)
    meta.prepare_add_partitions(10, 0, {("t", 5)}, T0)
    assert meta.prepare_end(10, 0, True, T0) == Error.CONCURRENT_TRANSACTIONS


def test_failed_write_leaves_the_state_as_it_was():
    meta = initialized()
    transit = meta.prepare_add_partitions(10, 0, {("t", 0)}, T0)
    assert isinstance(transit, Transit)
    meta.abandon(transit)
    assert (meta.state, meta.pending, meta.partitions) == (TxnState.EMPTY, None, set())


def test_verify_partitions():
    meta = initialized()
    ongoing(meta, ("t", 0))
    assert meta.verify_partitions(10, 0, [("t", 0), ("t", 1)]) == {
        ("t", 0): Error.NONE,
        ("t", 1): Error.TRANSACTION_ABORTABLE,
    }
    assert meta.verify_partitions(10, 1, [("t", 0)]) == {("t", 0): Error.PRODUCER_FENCED}
    assert meta.verify_partitions(9, 0, [("t", 0)]) == {("t", 0): Error.INVALID_PRODUCER_ID_MAPPING}
    apply(meta, meta.prepare_end(10, 0, True, T0))
    assert meta.verify_partitions(10, 0, [("t", 0)]) == {("t", 0): Error.CONCURRENT_TRANSACTIONS}


def test_timed_out_only_when_ongoing_past_its_timeout():
    meta = TxnMetadata("tx", 10)
    apply(meta, meta.prepare_init(1_000, None, T0))
    ongoing(meta, now=T0)
    assert not meta.timed_out(T0 + 1_000)
    assert meta.timed_out(T0 + 1_001)
    meta.prepare_fence()
    assert not meta.timed_out(T0 + 5_000)  # a change is pending


def test_expired_transaction_aborted_with_a_bump_fences_the_zombie():
    meta = TxnMetadata("tx", 10)
    apply(meta, meta.prepare_init(1_000, None, T0))
    ongoing(meta, now=T0)
    fence = meta.prepare_fence()
    abort = apply(meta, meta.prepare_end(10, fence.producer_epoch, False, T0 + 2_000, False))
    assert abort.producer_epoch == 1
    apply(meta, meta.prepare_complete(T0 + 2_001))
    # The zombie (epoch 0) cannot go on.
    assert meta.prepare_add_partitions(10, 0, {("t", 0)}, T0) == Error.PRODUCER_FENCED
    assert meta.prepare_end(10, 0, True, T0) == Error.PRODUCER_FENCED


def test_transactional_id_expiration():
    meta = initialized()
    assert not meta.expired(T0 + 99, 100)
    assert meta.expired(T0 + 100, 100)
    ongoing(meta, now=T0)
    assert not meta.expired(T0 + 10_000, 100)
    apply(meta, meta.prepare_end(10, 0, True, T0))
    apply(meta, meta.prepare_complete(T0 + 1))
    assert meta.expired(T0 + 101, 100)
    dead = meta.prepare_dead()
    assert dead.state == TxnState.DEAD and meta.pending == TxnState.DEAD


def test_dead_and_fence_states_are_never_completed():
    meta = initialized()
    with pytest.raises(IllegalTransition):
        meta.complete(meta.prepare_dead())


def test_illegal_transitions_raise():
    meta = initialized()
    with pytest.raises(IllegalTransition):
        meta.prepare_complete(T0)
    with pytest.raises(IllegalTransition):
        meta.prepare_fence()  # only from Ongoing


@pytest.mark.parametrize(
    "timeout, ok", [(0, False), (-1, False), (1, True), (900_000, True), (900_001, False)]
)
def test_transaction_timeout_bounds(timeout, ok):
    assert valid_timeout(timeout, 900_000) is ok


def test_state_names_are_kafkas():
    assert [s.kafka_name for s in TxnState] == [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    ]
    assert TxnState.from_name("Ongoing") == TxnState.ONGOING
    assert TxnState.from_name("ongoing") is None


def test_end_txn_while_the_markers_are_written_is_concurrent_whatever_the_outcome():
    """Kafka prepares the completion right after PrepareCommit is written: it stays pending
    while the markers go out, and a retry of either outcome is CONCURRENT_TRANSACTIONS."""
    meta = initialized()
    ongoing(meta)
    apply(meta, meta.prepare_end(10, 0, True, T0))
    completion = meta.prepare_complete(T0)
    assert meta.prepare_end(10, 0, True, T0) == Error.CONCURRENT_TRANSACTIONS
    assert meta.prepare_end(10, 0, False, T0) == Error.CONCURRENT_TRANSACTIONS
    assert meta.prepare_init(60_000, None, T0) == Error.CONCURRENT_TRANSACTIONS
    meta.complete(completion)
    assert meta.prepare_end(10, 0, True, T0) == Error.NONE
