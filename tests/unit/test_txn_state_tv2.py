"""The pure transaction state with Kafka's transaction protocol v2 (KIP-890 part 2): every
EndTxn v5 bumps the epoch (TransactionMetadata.prepareAbortOrCommit), an exhausted epoch
moves to the next producer id at completion (prepareComplete), retries are recognised by the
epoch before the bump (endTxnEpochBumped, retryOnOverflow), and the log carries it all."""

from minibroker.coordinator.transaction import log_format as txn_log_format
from minibroker.coordinator.transaction.state import (
    SHORT_MAX,
    TV_1,
    TV_2,
    Transit,
    TxnMetadata,
    TxnState,
)
from minibroker.protocol.errors import Error

T0 = 1_000


def apply(meta: TxnMetadata, result) -> Transit:
    assert isinstance(result, Transit), result
    meta.complete(result)
    return result


def initialized() -> TxnMetadata:
    meta = TxnMetadata("tx", producer_id=10)
    apply(meta, meta.prepare_init(60_000, None, T0))
    return meta


def add(meta: TxnMetadata, version: int = TV_2) -> None:
    apply(
        meta,
        meta.prepare_add_partitions(
            meta.producer_id, meta.producer_epoch, {("t", 0)}, T0 + 10, version
        ),
    )


def end(meta: TxnMetadata, commit: bool, next_id: int | None = None) -> Transit:
    """EndTxn v5, its decision written, then its completion written: the completion."""
    decision = apply(
        meta,
        meta.prepare_end(
            meta.producer_id, meta.producer_epoch, commit, T0 + 20, True, TV_2, next_id
        ),
    )
    assert decision.client_transaction_version == TV_2
    return apply(meta, meta.prepare_complete(T0 + 30))


def test_every_commit_and_abort_bumps_the_epoch():
    meta = initialized()
    for transaction, commit in enumerate([True, False, True]):
        add(meta)
        epoch = meta.producer_epoch
        assert epoch == transaction
        decision = meta.prepare_end(10, epoch, commit, T0 + 20, True, TV_2)
        assert isinstance(decision, Transit)
        # Kafka's prepareAbortOrCommit: the decision has the new epoch, the old one as last.
        assert (decision.producer_epoch, decision.last_producer_epoch) == (epoch + 1, epoch)
        meta.complete(decision)
        assert meta.producer_epoch == epoch + 1
        done = apply(meta, meta.prepare_complete(T0 + 30))
        assert (done.producer_id, done.producer_epoch) == (10, epoch + 1)
        assert meta.state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    # The old epoch is fenced: its partitions cannot join a transaction any more.
    assert meta.prepare_add_partitions(10, 2, {("t", 1)}, T0, TV_2) == Error.PRODUCER_FENCED


def test_tv1_end_does_not_bump():
    meta = initialized()
    add(meta, TV_1)
    apply(meta, meta.prepare_end(10, 0, True, T0 + 20))
    done = apply(meta, meta.prepare_complete(T0 + 30))
    assert (meta.producer_epoch, done.producer_epoch) == (0, 0)


def test_a_retried_end_txn_v5_is_answered_as_the_first():
    meta = initialized()
    add(meta)
    decision = apply(meta, meta.prepare_end(10, 0, True, T0 + 20, True, TV_2))
    # Retried while the markers are written (epoch before the bump): CONCURRENT_TRANSACTIONS.
    assert meta.prepare_end(10, 0, True, T0, True, TV_2) == Error.CONCURRENT_TRANSACTIONS
    # With the new epoch before any new transaction: fenced, as Kafka answers.
    assert meta.prepare_end(10, 1, True, T0, True, TV_2) == Error.PRODUCER_FENCED
    apply(meta, meta.prepare_complete(T0 + 30))
    assert decision.producer_epoch == 1
    # Retried once complete: NONE (nothing to write), the other outcome INVALID_TXN_STATE.
    assert meta.prepare_end(10, 0, True, T0, True, TV_2) == Error.NONE
    assert meta.prepare_end(10, 0, False, T0, True, TV_2) == Error.INVALID_TXN_STATE
    # An older epoch than the one before the bump is fenced.
    add(meta)
    apply(meta, meta.prepare_end(10, 1, False, T0 + 20, True, TV_2))
    apply(meta, meta.prepare_complete(T0 + 30))
    assert meta.prepare_end(10, 0, True, T0, True, TV_2) == Error.PRODUCER_FENCED


def test_exhausted_epoch_moves_to_the_next_producer_id():
    meta = initialized()
    meta.producer_epoch = SHORT_MAX - 2  # (as after as many transactions)
    add(meta)
    assert not meta.needs_next_producer_id(TV_2)  # SHORT_MAX - 2 is not exhausted
    done = end(meta, True)
    assert (done.producer_id, done.producer_epoch) == (10, SHORT_MAX - 1)
    add(meta)
    assert meta.needs_next_producer_id(TV_2) and not meta.needs_next_producer_id(TV_1)
    decision = meta.prepare_end(10, SHORT_MAX - 1, True, T0 + 20, True, TV_2, 77)
    assert isinstance(decision, Transit)
    assert (decision.producer_epoch, decision.next_producer_id) == (SHORT_MAX, 77)
    # The next id is written with the decision (NextProducerId) ...
    logged = txn_log_format.read_value(txn_log_format.value(decision.log_value()))
    assert (logged.next_producer_id, logged.client_transaction_version) == (77, TV_2)
    meta.complete(decision)
    # ... and becomes the producer id, at epoch 0, in the completion.
    done = apply(meta, meta.prepare_complete(T0 + 30))
    assert (done.producer_id, done.producer_epoch) == (77, 0)
    assert (meta.producer_id, meta.producer_epoch, meta.previous_producer_id) == (77, 0, 10)
    assert meta.next_producer_id == -1
    logged = txn_log_format.read_value(txn_log_format.value(done.log_value()))
    assert (logged.producer_id, logged.previous_producer_id) == (77, 10)
    # A retry with the old id and epoch is recognised (Kafka's retryOnOverflow).
    assert meta.prepare_end(10, SHORT_MAX - 1, True, T0, True, TV_2) == Error.NONE
    # The new id runs the next transaction.
    add(meta)
    assert end(meta, False).producer_epoch == 1


def test_a_decision_found_in_the_log_completes_as_written():
    """Failover: the next coordinator reads a TV2 decision (bumped epoch, next id) and
    completes it to the same producer id and epoch the first one answered."""
    meta = initialized()
    meta.producer_epoch = SHORT_MAX - 1
    add(meta)
    decision = apply(meta, meta.prepare_end(10, SHORT_MAX - 1, False, T0 + 20, True, TV_2, 78))
    value = txn_log_format.read_value(txn_log_format.value(decision.log_value()))
    loaded = TxnMetadata.from_log("tx", value)
    assert loaded.state == TxnState.PREPARE_ABORT
    done = apply(loaded, loaded.prepare_complete(T0 + 30))
    assert (done.producer_id, done.producer_epoch) == (78, 0)


def test_a_fence_of_a_tv2_transaction_bumps_once():
    """The coordinator's own abort (timeout, a new producer) is not a client's EndTxn: the
    fence's bump is the only one, and the zombie's old epoch is refused."""
    meta = initialized()
    add(meta)
    fence = meta.prepare_fence()
    decision = apply(meta, meta.prepare_end(10, fence.producer_epoch, False, T0, False))
    assert decision.producer_epoch == 1
    apply(meta, meta.prepare_complete(T0 + 30))
    assert meta.producer_epoch == 1
    assert meta.prepare_end(10, 0, False, T0, True, TV_2) == Error.PRODUCER_FENCED


def test_an_abort_of_an_empty_transaction_bumps_the_epoch():
    """Kafka 4's TV2 endTransaction: an ABORT from Empty, CompleteAbort or CompleteCommit at
    the current epoch writes PrepareAbort with no partitions and bumps the epoch (its start
    is now, prepareAbortOrCommit with noPartitionAdded); a COMMIT there is INVALID_TXN_STATE;
    the epoch before the bump is a retry, answered as the abort was. Checked against Kafka 4.4
    by tests/integration/test_transactions_v2.py."""
    meta = initialized()
    assert meta.prepare_end(10, 0, True, T0, True, TV_2) == Error.INVALID_TXN_STATE
    decision = meta.prepare_end(10, 0, False, T0 + 20, True, TV_2)
    assert isinstance(decision, Transit)
    assert (decision.state, decision.partitions) == (TxnState.PREPARE_ABORT, frozenset())
    assert (decision.producer_epoch, decision.last_producer_epoch) == (1, 0)
    assert decision.start_ms == T0 + 20
    meta.complete(decision)
    done = apply(meta, meta.prepare_complete(T0 + 30))
    assert (meta.state, done.producer_id, done.producer_epoch) == (TxnState.COMPLETE_ABORT, 10, 1)
    # A retry (the epoch before the bump): NONE for the abort, the other outcome refused.
    assert meta.prepare_end(10, 0, False, T0, True, TV_2) == Error.NONE
    assert meta.prepare_end(10, 0, True, T0, True, TV_2) == Error.INVALID_TXN_STATE
    # From CompleteAbort at the current epoch: a commit is refused, an abort bumps again.
    assert meta.prepare_end(10, 1, True, T0, True, TV_2) == Error.INVALID_TXN_STATE
    assert end(meta, False).producer_epoch == 2
    # From CompleteCommit at the current epoch, likewise.
    add(meta)
    assert end(meta, True).producer_epoch == 3
    assert meta.prepare_end(10, 3, True, T0, True, TV_2) == Error.INVALID_TXN_STATE
    assert meta.prepare_end(10, 2, False, T0, True, TV_2) == Error.INVALID_TXN_STATE
    assert end(meta, False).producer_epoch == 4
    assert meta.state == TxnState.COMPLETE_ABORT and not meta.partitions
    # A stale or a future epoch is fenced; the next transaction runs at the new epoch.
    assert meta.prepare_end(10, 2, False, T0, True, TV_2) == Error.PRODUCER_FENCED
    assert meta.prepare_end(10, 9, False, T0, True, TV_2) == Error.PRODUCER_FENCED
    add(meta)
    assert meta.partitions == {("t", 0)}
    assert end(meta, True).producer_epoch == 5


def test_an_empty_abort_with_tv1_stays_refused():
    """EndTxn v0-v4 (Kafka's endTransactionWithTV1): an abort from Empty is INVALID_TXN_STATE."""
    meta = initialized()
    assert meta.prepare_end(10, 0, False, T0, True, TV_1) == Error.INVALID_TXN_STATE


def test_an_empty_abort_at_the_last_epoch_moves_to_the_next_producer_id():
    meta = initialized()
    meta.producer_epoch = SHORT_MAX - 1
    assert not meta.needs_next_producer_id(TV_2, commit=True)
    assert meta.needs_next_producer_id(TV_2, commit=False)
    decision = meta.prepare_end(10, SHORT_MAX - 1, False, T0 + 20, True, TV_2, 79)
    assert isinstance(decision, Transit)
    assert (decision.producer_epoch, decision.next_producer_id) == (SHORT_MAX, 79)
    # Written and read back (a failover between the decision and its completion).
    value = txn_log_format.read_value(txn_log_format.value(decision.log_value()))
    meta.complete(decision)
    loaded = TxnMetadata.from_log("tx", value)
    assert (loaded.state, loaded.partitions) == (TxnState.PREPARE_ABORT, set())
    for state in (meta, loaded):
        done = apply(state, state.prepare_complete(T0 + 30))
        assert (done.producer_id, done.producer_epoch) == (79, 0)
