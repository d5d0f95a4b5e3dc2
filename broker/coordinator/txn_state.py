"""A transactional id's state, as Kafka's transaction coordinator keeps it: pure, time passed in.

Kafka's TransactionMetadata (core/.../coordinator/transaction/TransactionMetadata.scala) and
the decisions of TransactionCoordinator that depend on it alone. Every change is two steps,
as in Kafka: ``prepare_*`` checks the request against the state and returns the state to
write (a :class:`Transit`) while marking it pending, so no other change can start; the service
writes it to `__transaction_state` and then calls :meth:`TxnMetadata.complete` (or
:meth:`TxnMetadata.abandon` when the write failed). A ``prepare_*`` that refuses returns
the error to answer; ``Error.NONE`` means nothing needs writing (Kafka's ``Left(NONE)``).

States and their ids are Kafka's (TransactionState.fromId), so the log is Kafka's.

Scope: Kafka's transaction protocol version 1 (TV1): the producer epoch changes only at
InitProducerId and when the coordinator fences a producer (an expired transaction, a new
producer with the same transactional id); TV2's epoch bump per transaction (EndTxn v5) is not
served, so the client's transaction version is always 0 here, as Kafka records it for clients
of EndTxn v4 and older.
"""

import enum
from dataclasses import dataclass, field

from minibroker.coordinator.txn_log_format import TxnLogValue
from minibroker.protocol.errors import Error

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767


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
    TxnState.PREPARE_ABORT: {TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE},
    TxnState.COMPLETE_COMMIT: {TxnState.PREPARE_COMMIT},
    TxnState.COMPLETE_ABORT: {TxnState.PREPARE_ABORT},
    TxnState.DEAD: {TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT},
    TxnState.PREPARE_EPOCH_FENCE: {TxnState.ONGOING},
}

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

    def log_value(self) -> TxnLogValue:
        """The TransactionLogValue Kafka writes for it (TransactionLog.valueToBytes): the
        partitions grouped by topic, none when Empty."""
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
                not self._same_producer(transit)
                or not self.partitions <= transit.partitions
                or self.timeout_ms != transit.timeout_ms
            ):
                raise IllegalTransition(f"{self.transactional_id}: bad AddPartitions transit")
            self.start_ms = transit.start_ms
            self.partitions |= transit.partitions
        elif state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            if (
                not self._same_producer(transit)
                or self.partitions != transit.partitions
                or self.timeout_ms != transit.timeout_ms
                or self.start_ms != transit.start_ms
            ):
                raise IllegalTransition(f"{self.transactional_id}: bad EndTxn transit")
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            if (
                not self._same_producer(transit)
                or self.timeout_ms != transit.timeout_ms
                or transit.start_ms == -1
            ):
                raise IllegalTransition(f"{self.transactional_id}: bad completion transit")
            self.start_ms = transit.start_ms
            self.partitions.clear()
            self.has_failed_epoch_fence = False
        else:
            # PrepareEpochFence is never written (it turns into PrepareAbort), and Dead is
            # removed from memory instead of completed.
            raise IllegalTransition(f"{self.transactional_id}: cannot complete {state}")
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

    def _same_producer(self, transit: Transit) -> bool:
        return (
            transit.producer_epoch == self.producer_epoch
            and transit.producer_id == self.producer_id
        )

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
        self, producer_id: int, epoch: int, partitions: set[Partition], now_ms: int
    ) -> Error | Transit:
        """Kafka's handleAddPartitionsToTransaction checks, then prepareAddPartitions."""
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

    def prepare_end(
        self, producer_id: int, epoch: int, commit: bool, now_ms: int, from_client: bool = True
    ) -> Error | Transit:
        """Kafka's endTransaction before the write, for TV1 (EndTxn v0-v4). A retried EndTxn
        of a completed transaction with the same outcome answers NONE (nothing to write); of
        one whose markers are still being written, CONCURRENT_TRANSACTIONS; the other outcome,
        INVALID_TXN_STATE. ``from_client`` False is the coordinator's own abort (a fence), with
        the bumped epoch of a pending PrepareEpochFence."""
        fencing = self.pending == TxnState.PREPARE_EPOCH_FENCE
        if self.producer_id != producer_id:
            return Error.INVALID_PRODUCER_ID_MAPPING
        if not ((not from_client or epoch == self.producer_epoch) and epoch >= self.producer_epoch):
            return Error.PRODUCER_FENCED
        if self.pending is not None and not fencing:
            return Error.CONCURRENT_TRANSACTIONS
        state = self.state
        if state == TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            if fencing:
                if target != TxnState.PREPARE_ABORT:
                    raise IllegalTransition("a fence only aborts")
                self.pending = None
                self.producer_epoch = epoch
                self.last_producer_epoch = NO_PRODUCER_EPOCH
            return self._prepare(
                target,
                self.producer_id,
                self.producer_epoch,
                self.last_producer_epoch,
                self.timeout_ms,
                frozenset(self.partitions),
                self.start_ms,
                now_ms,
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
        return self._prepare(
            target,
            self.producer_id,
            self.producer_epoch,
            self.producer_epoch,
            self.timeout_ms,
            frozenset(),
            self.start_ms,
            now_ms,
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
