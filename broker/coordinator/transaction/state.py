"""A transactional id's state, as Kafka's transaction coordinator keeps it: pure, time passed in.

Kafka's TransactionMetadata (core/.../coordinator/transaction/TransactionMetadata.scala) and
the decisions of TransactionCoordinator that depend on it alone. Every change is two steps,
as in Kafka: ``prepare_*`` checks the request against the state and returns the state to
write (a :class:`Transit`) while marking it pending, so no other change can start; the service
writes it to `__transaction_state` and then calls :meth:`TxnMetadata.complete` (or
:meth:`TxnMetadata.abandon` when the write failed). A ``prepare_*`` that refuses returns
the error to answer; ``Error.NONE`` means nothing needs writing (Kafka's ``Left(NONE)``).

States and their ids are Kafka's (TransactionState.fromId), so the log is Kafka's.

Both transaction protocols are served, chosen per request as Kafka does (its
``clientTransactionVersion``): with version 1 (TV1: EndTxn v0-v4, AddPartitionsToTxn from the
client) the producer epoch changes only at InitProducerId and when the coordinator fences a
producer (an expired transaction, a new producer with the same transactional id). With
version 2 (TV2, KIP-890 part 2: EndTxn v5; partitions added by their leaders on Produce v12
and by the group coordinator on TxnOffsetCommit v5) every EndTxn bumps the epoch
(Kafka's prepareAbortOrCommit): PrepareCommit/PrepareAbort are written with epoch + 1 and the
old epoch as the last one, the markers carry the new epoch, and the client continues with it.
An epoch that would reach the last usable value gets a new producer id instead: it is written
as NextProducerId with the decision and becomes the producer id, at epoch 0, in
CompleteCommit/CompleteAbort (Kafka's prepareComplete), the previous id then kept as
PreviousProducerId. A retried TV2 EndTxn is recognised by its epoch being one less than the
stored one (or, after a new id, by the previous id at the last epoch) and answered as the
original was (Kafka's endTxnEpochBumped and retryOnOverflow). The client's version is kept
with the state (ClientTransactionVersion in the log), as Kafka does.
"""

import enum
from dataclasses import dataclass, field

from minibroker.coordinator.transaction.log_format import TxnLogValue
from minibroker.protocol.errors import Error

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767
# Kafka's TransactionVersion levels a client uses: TV_0/TV_1 (no bump per transaction), TV_2.
TV_1 = 0
TV_2 = 2


def supports_epoch_bump(client_transaction_version: int) -> bool:
    """Kafka's TransactionVersion.supportsEpochBump."""
    return client_transaction_version >= TV_2


class TxnState(enum.IntEnum):
    """Kafka's TransactionState, by the id written in the log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions answer ("PrepareCommit")."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> "TxnState | None":
        for state, text in _NAMES.items():
            if text == name:
                return state
        return None


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

# Kafka's validPreviousStates of each state.
VALID_PREVIOUS = {
    TxnState.EMPTY: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.ONGOING: {
        TxnState.ONGOING,
        TxnState.EMPTY,
        TxnState.COMPLETE_COMMIT,
        TxnState.COMPLETE_ABORT,
    },
    TxnState.PREPARE_COMMIT: {TxnState.ONGOING},
    # TV2 (Kafka 4): an abort of a transaction with no partition in it, from Empty or a
    # completed transaction, writes PrepareAbort with no partitions.
    TxnState.PREPARE_ABORT: {
        TxnState.ONGOING,
        TxnState.PREPARE_EPOCH_FENCE,
        TxnState.EMPTY,
        TxnState.COMPLETE_COMMIT,
        TxnState.COMPLETE_ABORT,
    },
    TxnState.COMPLETE_COMMIT: {TxnState.PREPARE_COMMIT},
    TxnState.COMPLETE_ABORT: {TxnState.PREPARE_ABORT},
    TxnState.DEAD: {TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT},
    TxnState.PREPARE_EPOCH_FENCE: {TxnState.ONGOING},
}

# The states a TV2 EndTxn ABORT with no partition in the transaction leaves (Kafka 4's
# TransactionCoordinator.endTransaction: Empty, CompleteCommit, CompleteAbort).
_EMPTY_ABORT_FROM = {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}

# Kafka's isExpirationAllowed: a transactional id idle this long in these states is removed.
EXPIRABLE = {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}


class IllegalTransition(RuntimeError):
    """A transition Kafka throws IllegalStateException for: a bug, never a client's doing."""


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's TransactionMetadata.isEpochExhausted: the last epoch is kept for fencing."""
    return epoch >= SHORT_MAX - 1


def valid_timeout(timeout_ms: int, max_timeout_ms: int) -> bool:
    """Kafka's validateTransactionTimeoutMs (transaction.max.timeout.ms)."""
    return 0 < timeout_ms <= max_timeout_ms


Partition = tuple[str, int]


@dataclass(frozen=True)
class Transit:
    """The state a prepared change writes (Kafka's TxnTransitMetadata)."""

    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[Partition]
    start_ms: int
    last_update_ms: int
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = TV_1

    def log_value(self) -> TxnLogValue:
        """The TransactionLogValue Kafka writes for it (TransactionLog.valueToBytes): the
        partitions grouped by topic, none when Empty; the tagged fields PreviousProducerId
        (only when it differs from the producer id, which is all a reader needs: it is the id
        before a rotation), NextProducerId and ClientTransactionVersion."""
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(index)
        return TxnLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms,
            state=int(self.state),
            partitions=tuple((t, tuple(ids)) for t, ids in by_topic.items()),
            last_update_ms=self.last_update_ms,
            start_ms=self.start_ms,
            previous_producer_id=(
                self.previous_producer_id
                if self.previous_producer_id != self.producer_id
                else NO_PRODUCER_ID
            ),
            next_producer_id=self.next_producer_id,
            client_transaction_version=self.client_transaction_version,
        )


@dataclass
class TxnMetadata:
    """One transactional id (Kafka's TransactionMetadata)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: set[Partition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = 0
    # The state being written (Kafka's pendingState): no other change starts meanwhile.
    pending: TxnState | None = None
    # A fence whose write failed: the next fence does not bump the epoch again (Kafka's
    # hasFailedEpochFence; the bumped epoch was never given to anyone).
    has_failed_epoch_fence: bool = False
    # TV2: the producer id the client gets when the epoch bumped by EndTxn is the last one
    # (Kafka's nextProducerId), and the transaction version of the last change.
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = TV_1

    @classmethod
    def from_log(cls, transactional_id: str, value: TxnLogValue) -> "TxnMetadata":
        """As Kafka's readTxnRecordValue: the last epoch is not in the log (-1)."""
        state = TxnState(value.state)
        partitions = (
            set()
            if state == TxnState.EMPTY
            else {(t, i) for t, ids in value.partitions for i in ids}
        )
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            NO_PRODUCER_EPOCH,
            value.previous_producer_id,
            value.timeout_ms,
            state,
            partitions,
            value.start_ms,
            value.last_update_ms,
            next_producer_id=value.next_producer_id,
            client_transaction_version=value.client_transaction_version,
        )

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT)

    # -- the two-step change ------------------------------------------------------------------

    def _prepare(
        self,
        state: TxnState,
        producer_id: int,
        epoch: int,
        last_epoch: int,
        timeout_ms: int,
        partitions: frozenset[Partition],
        start_ms: int,
        now_ms: int,
        next_producer_id: int = NO_PRODUCER_ID,
        client_transaction_version: int = TV_1,
    ) -> Transit:
        if self.pending is not None:
            raise IllegalTransition(f"{self.transactional_id}: already going to {self.pending}")
        if producer_id < 0:
            raise IllegalTransition(f"illegal producer id {producer_id}")
        if state != TxnState.DEAD and epoch < 0:
            raise IllegalTransition(f"illegal producer epoch {epoch}")
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(
                f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}"
            )
        self.pending = state
        return Transit(
            producer_id,
            self.producer_id,
            epoch,
            last_epoch,
            timeout_ms,
            state,
            partitions,
            start_ms,
            now_ms,
            next_producer_id,
            client_transaction_version,
        )

    def complete(self, transit: Transit) -> None:
        """The transit is in the log: make it the state (Kafka's completeTransitionTo, with
        its consistency checks)."""
        if self.pending != transit.state:
            raise IllegalTransition(
                f"{self.transactional_id}: completing {transit.state} while pending {self.pending}"
            )
        state = transit.state
        if state == TxnState.EMPTY:
            bumped = transit.producer_epoch == self.producer_epoch + 1 or (
                transit.producer_epoch == 0 and transit.producer_id != self.producer_id
            )
            if (
                (transit.producer_epoch != self.producer_epoch and not bumped)
                or transit.partitions
                or transit.start_ms != -1
            ):
                raise IllegalTransition(f"{self.transactional_id}: bad InitProducerId transit")
            self.timeout_ms = transit.timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.previous_producer_id = transit.previous_producer_id
        elif state == TxnState.ONGOING:
            if (
                not self._valid_producer_epoch(transit)
                or not self.partitions <= transit.partitions
                or self.timeout_ms != transit.timeout_ms
            ):
                raise IllegalTransition(f"{self.transactional_id}: bad AddPartitions transit")
            self.start_ms = transit.start_ms
            self.partitions |= transit.partitions
        elif state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            # An empty TV2 abort starts its transaction now (Kafka's allowedEmptyAbort).
            empty_abort = (
                state == TxnState.PREPARE_ABORT
                and supports_epoch_bump(transit.client_transaction_version)
                and self.state in _EMPTY_ABORT_FROM
            )
            if (
                not self._valid_producer_epoch(transit)
                or self.partitions != transit.partitions
                or self.timeout_ms != transit.timeout_ms
                or (self.start_ms != transit.start_ms and not empty_abort)
            ):
                raise IllegalTransition(f"{self.transactional_id}: bad EndTxn transit")
            if supports_epoch_bump(transit.client_transaction_version):
                self.producer_epoch = transit.producer_epoch
                self.last_producer_epoch = transit.last_producer_epoch
                self.next_producer_id = transit.next_producer_id
                self.start_ms = transit.start_ms
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            if (
                not self._valid_producer_epoch(transit)
                or self.timeout_ms != transit.timeout_ms
                or transit.start_ms == -1
            ):
                raise IllegalTransition(f"{self.transactional_id}: bad completion transit")
            self.start_ms = transit.start_ms
            self.partitions.clear()
            self.has_failed_epoch_fence = False
            if supports_epoch_bump(transit.client_transaction_version):
                self.producer_epoch = transit.producer_epoch
                self.last_producer_epoch = transit.last_producer_epoch
                self.previous_producer_id = transit.previous_producer_id
                self.producer_id = transit.producer_id
                self.next_producer_id = transit.next_producer_id
        else:
            # PrepareEpochFence is never written (it turns into PrepareAbort), and Dead is
            # removed from memory instead of completed.
            raise IllegalTransition(f"{self.transactional_id}: cannot complete {state}")
        self.client_transaction_version = transit.client_transaction_version
        self.last_update_ms = transit.last_update_ms
        self.pending = None
        self.state = state

    def abandon(self, transit: Transit, fence: bool = False) -> None:
        """The transit's write failed: no longer pending (Kafka's appendTransactionToLog
        callback on an error). A failed fence (``fence``: the abort that a PrepareEpochFence
        became) is remembered, see has_failed_epoch_fence."""
        if self.pending == transit.state:
            self.pending = None
        if fence:
            self.has_failed_epoch_fence = True

    def _valid_producer_epoch(self, transit: Transit) -> bool:
        """Kafka's validProducerEpoch: the transit is of this producer; a TV2 decision
        carries the bumped epoch (its last epoch is the current one), and a TV2 completion
        after a new producer id carries that id at epoch 0 (its previous id is the current)."""
        tv2 = supports_epoch_bump(transit.client_transaction_version)
        overflow_complete = (
            tv2
            and transit.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
            and transit.producer_epoch == 0
            and transit.producer_id != transit.previous_producer_id
        )
        if overflow_complete or (
            tv2 and transit.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        ):
            epoch = transit.last_producer_epoch
        else:
            epoch = transit.producer_epoch
        producer_id = transit.previous_producer_id if overflow_complete else transit.producer_id
        return epoch == self.producer_epoch and producer_id == self.producer_id

    # -- InitProducerId ----------------------------------------------------------------------

    def needs_new_producer_id(self, expected: tuple[int, int] | None) -> bool:
        """Whether InitProducerId would rotate to a new producer id (the epoch is exhausted,
        Kafka's prepareProducerIdRotation), so the service allocates one first."""
        return (
            self.pending is None
            and self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
            and self.epoch_exhausted
            and (expected is None or expected[1] == self.producer_epoch)
        )

    def prepare_init(
        self,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
        new_producer_id: int | None = None,
    ) -> Error | Transit:
        """InitProducerId (Kafka's prepareInitProducerIdTransit). ``expected`` is the
        client's (producer id, epoch) of KIP-360 (v3+), None when it sent -1.

        An Ongoing transaction answers a PrepareEpochFence transit: the service aborts the
        transaction with it (:meth:`prepare_end` from the coordinator) and answers
        CONCURRENT_TRANSACTIONS, so the client retries and gets a second bump.
        """
        if self.pending is not None:
            return Error.CONCURRENT_TRANSACTIONS
        if expected is not None and not (
            self.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == self.producer_id
            or (expected[0] == self.previous_producer_id and is_epoch_exhausted(expected[1]))
        ):
            return Error.PRODUCER_FENCED
        if self.state in (TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT):
            return Error.CONCURRENT_TRANSACTIONS
        if self.state == TxnState.ONGOING:
            return self.prepare_fence()
        if self.state not in (TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT):
            raise IllegalTransition(f"{self.transactional_id} found in {self.state.kafka_name}")
        if self.needs_new_producer_id(expected):
            if new_producer_id is None:
                raise IllegalTransition("a new producer id is needed (needs_new_producer_id)")
            return self._prepare(
                TxnState.EMPTY,
                new_producer_id,
                0,
                self.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
                timeout_ms,
                frozenset(),
                -1,
                now_ms,
            )
        if self.epoch_exhausted:
            raise IllegalTransition(f"no more epochs for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected[1] == self.last_producer_epoch:
            # A retry of a bump whose answer was lost: the same epoch again.
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return Error.PRODUCER_FENCED
        return self._prepare(
            TxnState.EMPTY, self.producer_id, epoch, last, timeout_ms, frozenset(), -1, now_ms
        )

    def prepare_fence(self) -> Transit:
        """Kafka's prepareFenceProducerEpoch: the epoch of an Ongoing transaction is bumped
        (once, even if an earlier fence's write failed) before the coordinator aborts it,
        which fences the producer that runs it."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransition("cannot fence an epoch of Short.MaxValue")
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(
            TxnState.PREPARE_EPOCH_FENCE,
            self.producer_id,
            epoch,
            NO_PRODUCER_EPOCH,
            self.timeout_ms,
            frozenset(self.partitions),
            self.start_ms,
            self.last_update_ms,
        )

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------

    def prepare_add_partitions(
        self,
        producer_id: int,
        epoch: int,
        partitions: set[Partition],
        now_ms: int,
        client_transaction_version: int = TV_1,
    ) -> Error | Transit:
        """Kafka's handleAddPartitionsToTransaction checks, then prepareAddPartitions (with
        the version of the client: TV2 when a partition leader or the group coordinator adds
        the partition for Produce v12 or TxnOffsetCommit v5)."""
        if self.producer_id != producer_id:
            return Error.INVALID_PRODUCER_ID_MAPPING
        if self.producer_epoch != epoch:
            return Error.PRODUCER_FENCED
        if self.pending is not None:
            return Error.CONCURRENT_TRANSACTIONS
        if self.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return Error.CONCURRENT_TRANSACTIONS
        if self.state == TxnState.ONGOING and partitions <= self.partitions:
            return Error.NONE
        start = (
            now_ms
            if self.state in (TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT)
            else self.start_ms
        )
        return self._prepare(
            TxnState.ONGOING,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            frozenset(self.partitions | partitions),
            start,
            now_ms,
            client_transaction_version=client_transaction_version,
        )

    def verify_partitions(
        self, producer_id: int, epoch: int, partitions: list[Partition]
    ) -> dict[Partition, Error]:
        """KIP-890's verification (Kafka's handleVerifyPartitionsInTransaction): a partition
        not in the transaction is TRANSACTION_ABORTABLE. Pending changes are not looked at:
        partitions join when their write is complete."""
        if self.producer_id != producer_id:
            error = Error.INVALID_PRODUCER_ID_MAPPING
        elif self.producer_epoch != epoch:
            error = Error.PRODUCER_FENCED
        elif self.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            error = Error.CONCURRENT_TRANSACTIONS
        else:
            return {
                p: Error.NONE if p in self.partitions else Error.TRANSACTION_ABORTABLE
                for p in partitions
            }
        return dict.fromkeys(partitions, error)

    # -- EndTxn ----------------------------------------------------------------------------------

    def needs_next_producer_id(self, client_transaction_version: int, commit: bool = True) -> bool:
        """Whether a TV2 EndTxn would exhaust the epoch, so the service allocates the next
        producer id first (Kafka's endTransaction calls generateProducerId there): the end of
        an Ongoing transaction, or a TV2 abort of an empty one (see :meth:`prepare_end`)."""
        states = {TxnState.ONGOING} if commit else {TxnState.ONGOING, *_EMPTY_ABORT_FROM}
        return (
            supports_epoch_bump(client_transaction_version)
            and self.pending is None
            and self.state in states
            and self.epoch_exhausted
        )

    def _end_txn_epoch_bumped(self, epoch: int) -> bool:
        """Kafka's endTxnEpochBumped: a TV2 EndTxn retried after its bump was written."""
        return (
            self.pending != TxnState.PREPARE_EPOCH_FENCE
            and supports_epoch_bump(self.client_transaction_version)
            and self.producer_epoch == epoch + 1
        )

    def prepare_end(
        self,
        producer_id: int,
        epoch: int,
        commit: bool,
        now_ms: int,
        from_client: bool = True,
        client_transaction_version: int = TV_1,
        next_producer_id: int | None = None,
    ) -> Error | Transit:
        """Kafka's endTransaction before the write. A retried EndTxn of a completed
        transaction with the same outcome answers NONE (nothing to write); of one whose
        markers are still being written, CONCURRENT_TRANSACTIONS; the other outcome,
        INVALID_TXN_STATE. ``from_client`` False is the coordinator's own abort (a fence), with
        the bumped epoch of a pending PrepareEpochFence.

        ``client_transaction_version`` 2 (EndTxn v5) bumps the epoch in the decision; when
        that is the last usable epoch, ``next_producer_id`` (from the service, see
        :meth:`needs_next_producer_id`) is written as the id to continue with. A client's
        TV2 EndTxn follows the TV2 branch of Kafka 4's endTransaction (chosen by the request's
        version, as Kafka's handleEndTransaction does): at the current epoch it ends the
        transaction; with the epoch before the bump it is a retry; and an ABORT of a
        transaction with no partition in it (from Empty, CompleteCommit or CompleteAbort:
        KIP-890 part 2 makes such an abort always legal, e.g. when the transaction's only
        produce never reached a partition) writes PrepareAbort with no partitions and bumps
        the epoch like any other end; a COMMIT there is INVALID_TXN_STATE. For TV1 requests
        (and the coordinator's fence) which epochs are valid depends on the version of the
        state's last change: after a TV2 change, a retry carries the epoch before the bump."""
        if not self._fencing_pending() and supports_epoch_bump(client_transaction_version):
            return self._prepare_end_tv2(producer_id, epoch, commit, now_ms, next_producer_id)
        fencing = self._fencing_pending()
        state = self.state
        current_tv2 = not fencing and supports_epoch_bump(self.client_transaction_version)
        retry_on_overflow = (
            current_tv2
            and self.previous_producer_id == producer_id
            and epoch == SHORT_MAX - 1
            and self.producer_epoch == 0
        )
        retry_on_bump = self._end_txn_epoch_bumped(epoch)
        if current_tv2:
            if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                valid_epoch = retry_on_bump
            elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                valid_epoch = retry_on_bump or retry_on_overflow
            else:
                valid_epoch = epoch == self.producer_epoch
        else:
            valid_epoch = (
                not from_client or epoch == self.producer_epoch
            ) and epoch >= self.producer_epoch
        if self.producer_id != producer_id and not retry_on_overflow:
            return Error.INVALID_PRODUCER_ID_MAPPING
        if not valid_epoch:
            return Error.PRODUCER_FENCED
        if self.pending is not None and not fencing:
            return Error.CONCURRENT_TRANSACTIONS
        if state == TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            if fencing:
                if target != TxnState.PREPARE_ABORT:
                    raise IllegalTransition("a fence only aborts")
                self.pending = None
                self.producer_epoch = epoch
                self.last_producer_epoch = NO_PRODUCER_EPOCH
            if supports_epoch_bump(client_transaction_version):
                # A fence with a TV2 request version (the service sends TV1): no rotation.
                return self._prepare_decision(target, now_ms, None, self.start_ms, False)
            return self._prepare(
                target,
                self.producer_id,
                self.producer_epoch,
                self.last_producer_epoch,
                self.timeout_ms,
                frozenset(self.partitions),
                self.start_ms,
                now_ms,
                NO_PRODUCER_ID,
                client_transaction_version,
            )
        if state == TxnState.COMPLETE_COMMIT:
            return Error.NONE if commit else Error.INVALID_TXN_STATE
        if state == TxnState.COMPLETE_ABORT:
            return Error.NONE if not commit else Error.INVALID_TXN_STATE
        if state == TxnState.PREPARE_COMMIT:
            return Error.CONCURRENT_TRANSACTIONS if commit else Error.INVALID_TXN_STATE
        if state == TxnState.PREPARE_ABORT:
            return Error.CONCURRENT_TRANSACTIONS if not commit else Error.INVALID_TXN_STATE
        if state == TxnState.EMPTY:
            return Error.INVALID_TXN_STATE
        raise IllegalTransition(f"{self.transactional_id} found in {state.kafka_name}")

    def _fencing_pending(self) -> bool:
        return self.pending == TxnState.PREPARE_EPOCH_FENCE

    def _prepare_end_tv2(
        self,
        producer_id: int,
        epoch: int,
        commit: bool,
        now_ms: int,
        next_producer_id: int | None,
    ) -> Error | Transit:
        """The TV2 branch of Kafka 4's TransactionCoordinator.endTransaction, for a client's
        EndTxn v5 (no fence pending). A completed transaction takes a new end at the current
        epoch, which for an ABORT is the abort of an empty transaction; with the epoch before
        the bump it is a retry (retryOnEpochBump, retryOnOverflow). Departure: a retry is
        recognised only after a TV2 change of the state, where Kafka 4.4 looks at the epoch
        alone, because the coordinator's fence here bumps the epoch once (Kafka's TV2 fence
        bumps twice): the fenced producer's epoch is then one below the stored one and must
        stay PRODUCER_FENCED, not pass as a retry."""
        state = self.state
        tv2_state = supports_epoch_bump(self.client_transaction_version)
        retry_on_overflow = (
            tv2_state
            and self.previous_producer_id == producer_id
            and epoch == SHORT_MAX - 1
            and self.producer_epoch == 0
        )
        retry_on_bump = self._end_txn_epoch_bumped(epoch)
        retry = retry_on_bump or retry_on_overflow
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            valid_epoch = retry_on_bump
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid_epoch = retry or epoch == self.producer_epoch
        else:
            valid_epoch = epoch == self.producer_epoch
        if self.producer_id != producer_id and not retry_on_overflow:
            return Error.INVALID_PRODUCER_ID_MAPPING
        if not valid_epoch:
            return Error.PRODUCER_FENCED
        if self.pending is not None:
            return Error.CONCURRENT_TRANSACTIONS
        if state == TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            return self._prepare_decision(target, now_ms, next_producer_id, self.start_ms)
        if state == TxnState.PREPARE_COMMIT:
            return Error.CONCURRENT_TRANSACTIONS if commit else Error.INVALID_TXN_STATE
        if state == TxnState.PREPARE_ABORT:
            return Error.CONCURRENT_TRANSACTIONS if not commit else Error.INVALID_TXN_STATE
        if state not in _EMPTY_ABORT_FROM:
            raise IllegalTransition(f"{self.transactional_id} found in {state.kafka_name}")
        if retry:
            # Only a completed transaction's own outcome is a retry's answer.
            same = commit == (state == TxnState.COMPLETE_COMMIT)
            if state != TxnState.EMPTY and same:
                return Error.NONE
            return Error.INVALID_TXN_STATE
        if commit:
            return Error.INVALID_TXN_STATE
        # Kafka's prepareAbortOrCommit with noPartitionAdded: its start is now.
        return self._prepare_decision(TxnState.PREPARE_ABORT, now_ms, next_producer_id, now_ms)

    def _prepare_decision(
        self,
        target: TxnState,
        now_ms: int,
        next_producer_id: int | None,
        start_ms: int,
        rotate: bool = True,
    ) -> Transit:
        """Kafka's prepareAbortOrCommit with TV2: the decision carries the bumped epoch (never
        past Short.MaxValue: the epoch is at most SHORT_MAX - 1 here, exhausted epochs rotate
        at InitProducerId), and the next producer id when that epoch is the last (not for a
        fence: ``rotate`` False)."""
        following = NO_PRODUCER_ID
        if rotate and self.epoch_exhausted:
            if next_producer_id is None:
                raise IllegalTransition("a next producer id is needed (needs_next_producer_id)")
            following = next_producer_id
        return self._prepare(
            target,
            self.producer_id,
            self.producer_epoch + 1,
            self.producer_epoch,
            self.timeout_ms,
            frozenset(self.partitions),
            start_ms,
            now_ms,
            following,
            TV_2,
        )

    def prepare_complete(self, now_ms: int) -> Transit:
        """The markers are written: CompleteCommit or CompleteAbort (Kafka's
        prepareComplete), with no partitions left."""
        if self.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise IllegalTransition(f"{self.transactional_id}: complete from {self.state}")
        target = (
            TxnState.COMPLETE_COMMIT
            if self.state == TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        producer_id, epoch = self.producer_id, self.producer_epoch
        if (
            supports_epoch_bump(self.client_transaction_version)
            and self.next_producer_id != NO_PRODUCER_ID
        ):
            # The bumped epoch was the last: the client continues with the next id.
            producer_id, epoch = self.next_producer_id, 0
        return self._prepare(
            target,
            producer_id,
            epoch,
            self.producer_epoch,
            self.timeout_ms,
            frozenset(),
            self.start_ms,
            now_ms,
            NO_PRODUCER_ID,
            self.client_transaction_version,
        )

    # -- expiry ----------------------------------------------------------------------------------

    def timed_out(self, now_ms: int) -> bool:
        """Kafka's timedOutTransactions: Ongoing for longer than its timeout, nothing pending."""
        return (
            self.pending is None
            and self.state == TxnState.ONGOING
            and self.start_ms + self.timeout_ms < now_ms
        )

    def expired(self, now_ms: int, expiration_ms: int) -> bool:
        """Kafka's shouldExpire (transactional.id.expiration.ms): idle and finished."""
        return (
            self.pending is None
            and self.state in EXPIRABLE
            and self.last_update_ms <= now_ms - expiration_ms
        )

    def prepare_dead(self) -> Transit:
        """Kafka's prepareDead: its tombstone is written, then it is dropped from memory."""
        return self._prepare(
            TxnState.DEAD,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            frozenset(),
            self.start_ms,
            self.last_update_ms,
        )
