"""Producer state of one partition, kept from batch headers (and markers) alone.

This follows Kafka's ProducerStateManager/ProducerAppendInfo: for every producer id the
partition remembers the current epoch, the last five batches (their sequence and offset
ranges), the coordinator epoch of its last transaction marker and the first offset of its
ongoing transaction. A batch from a client is then

- a duplicate if it repeats one of those five batches (same epoch, same first and last
  sequence): it is not appended again and the client gets the original offsets back;
- refused with INVALID_PRODUCER_EPOCH if its epoch is older than the current one;
- refused with OUT_OF_ORDER_SEQUENCE_NUMBER if, under the current epoch, its first sequence
  does not follow the last one (sequences wrap from 2**31 - 1 to 0), or if it opens a newer
  epoch with a first sequence other than 0;
- refused with INVALID_TXN_STATE if it is not transactional while its producer has a
  transaction open on this partition.

As in Kafka, a producer the partition has no state for is accepted at any sequence: its
batches may simply have been removed by retention, and refusing it would be fatal for the
client. Batches without a producer id are never checked.

Transactions (Kafka's rules): a transactional data batch of a producer with no open
transaction opens one at its base offset; a control batch (COMMIT or ABORT marker) closes it
and yields a :class:`CompletedTxn` (none for a marker of a producer with nothing open, as
Kafka emits none for an empty transaction). A marker is refused with INVALID_PRODUCER_EPOCH
when its producer epoch is older than the producer's, and with
TRANSACTION_COORDINATOR_FENCED when its coordinator epoch is older than the last one seen
for the producer (:meth:`ProducerStateManager.check_marker`); a follower replays markers
without those checks, as Kafka's REPLICATION origin does. A completed transaction stays
"unreplicated" until the high watermark passes its marker; the first unstable offset is the
smallest first offset of the open and the unreplicated transactions (Kafka's
firstUnstableOffset), and the last stable offset is min(high watermark, first unstable
offset).

Transaction verification (KIP-890; Kafka's VerificationStateEntry, KAFKA-14920 and
KAFKA-18202): when a transactional batch of a producer with no transaction open here is to be
verified with the transaction coordinator, the partition remembers, per producer, the lowest
first sequence and the newest epoch of the batches it started verifying
(:meth:`ProducerStateManager.start_verification`). Until a transactional batch or marker of
that producer is written here (which forgets it), a client batch whose first sequence is above
that lowest one is refused with OUT_OF_ORDER_SEQUENCE_NUMBER: otherwise, when the first batch
of a transaction fails its verification with a retriable error (the coordinator loading or
moving) and the next one, in flight behind it, passes, the second is written without the
first, and the client retries the first against a sequence that has gone past it until its
transaction times out (seen with the Java client in CI). Under transaction protocol v2 (the
leader adds the partition, Produce v12) a batch of a producer the partition has no batches of
must also start at sequence 0. The client retries both refusals: the batch is not the next
one it waits on. Verification states expire with the producers (``remove_expired``).
Departure: Kafka checks every batch of the producer in a request against the state; here only
the first, the later ones follow it in sequence.

Snapshots (Kafka's `<offset>.snapshot`, ProducerSnapshot.json version 1): version i16 (1),
CRC-32C u32 of everything after it, then an i32-counted array of entries: producer id i64,
epoch i16, last sequence i32, last offset i64, offset delta i32, timestamp i64, coordinator
epoch i32, current transaction's first offset i64 (-1: none). As in Kafka a snapshot keeps
one batch per producer (its last), so after loading one only that batch is recognised as a
duplicate, and transactions closed but not yet replicated are not in it. The partition log
writes one when it rolls a segment and when it closes, and on open replays only the batches
after the latest usable one (storage/log.py).

Expiration (Kafka's ProducerStateManager.removeExpiredProducers / isProducerExpired): a
producer is expired when it has no transaction open on this partition and ``now -
last_timestamp >= producer.id.expiration.ms``. ``last_timestamp`` is what Kafka's
ProducerStateEntry.lastTimestamp holds: the max timestamp of the producer's last data batch
as written (the client's CreateTime, or the broker's clock on a LogAppendTime topic, since
the batch is stamped before the producer state sees it), or the timestamp of its last
transaction marker (the broker's clock; here the later of it and the previous value, where
Kafka takes the marker's as is, so that a client clock ahead of the broker's cannot make a
marker shorten the producer's life). The broker runs the check every
producer.id.expiration.check.interval.ms (:meth:`ProducerStateManager.remove_expired`, from
storage/log_manager.py), and also as a log is loaded, so that producers already expired in a
snapshot do not come back (Kafka's loadFromSnapshot filters them the same way). An expired
producer then writes again as one the partition has no state for.

Departure from Kafka: the state of a producer whose batches all fall below the log start
offset is dropped unless it has a transaction open (Kafka keeps it in memory until it
expires, though its snapshots lose it, as ProducerStateManager.truncateAndReload notes).
"""

import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import crc32c

from minibroker.protocol.record_batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from minibroker.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
BATCHES_RETAINED_PER_PRODUCER = 5
_MAX_SEQUENCE = 2**31 - 1
NO_COORDINATOR_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767  # Short.MAX_VALUE: an epoch that cannot be bumped


class BatchMetadata(NamedTuple):
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


class CompletedTxn(NamedTuple):
    """Kafka's CompletedTxn: a transaction a marker closed on this partition, from its first
    batch's offset to the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerSnapshot(NamedTuple):
    """One producer as DescribeProducers shows it (Kafka's ProducerState)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=BATCHES_RETAINED_PER_PRODUCER)
    )
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    # The first offset of the producer's open transaction here, None if none.
    current_txn_first_offset: int | None = None
    last_timestamp: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.epoch:
            return None
        for batch in self.batches:
            if (
                batch.first_sequence == header.base_sequence
                and batch.last_sequence == header.last_sequence
            ):
                return batch
        return None


@dataclass
class VerificationState:
    """Kafka's VerificationStateEntry: a producer's transaction being verified here."""

    timestamp: int
    lowest_sequence: int
    epoch: int
    # Transaction protocol v2 (Kafka's supportsEpochBump): only sequence 0 may start.
    supports_epoch_bump: bool

    def update(self, sequence: int, epoch: int) -> None:
        """Kafka's maybeUpdateLowestSequenceAndEpoch: a lower sequence of the same epoch, or
        any sequence of a newer epoch, becomes the lowest."""
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        if epoch > self.epoch:
            self.epoch = epoch
            self.lowest_sequence = sequence


def _in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (
        next_sequence == 0 and last_sequence == _MAX_SEQUENCE
    )


class ProducerStateManager:
    """Producer id -> epoch, recent batches and open transaction, for one partition."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}
        # Producer id -> first offset of its open transaction (Kafka's ongoingTxns).
        self._ongoing: dict[int, int] = {}
        # Transactions closed by a marker the high watermark has not passed yet, in marker
        # order (Kafka's unreplicatedTxns).
        self._unreplicated: deque[CompletedTxn] = deque()
        # Producer id -> its transaction being verified here (Kafka's verificationStates).
        self._verifications: dict[int, VerificationState] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    # -- transactions ----------------------------------------------------------------------

    def ongoing_transaction(self, producer_id: int) -> int | None:
        """The first offset of the producer's open transaction on this partition, or None."""
        return self._ongoing.get(producer_id)

    @property
    def has_transactions(self) -> bool:
        """Whether any transaction is open or waits for the HW (the LSO may lag the HW)."""
        return bool(self._ongoing or self._unreplicated)

    def first_unstable_offset(self) -> int | None:
        """Kafka's firstUnstableOffset: the smallest first offset of the open transactions
        and of those closed by a marker the HW has not passed; None if there are none."""
        if not self._ongoing and not self._unreplicated:
            return None
        candidates = list(self._ongoing.values())
        if self._unreplicated:
            candidates.append(min(txn.first_offset for txn in self._unreplicated))
        return min(candidates)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget the completed transactions whose marker lies below the HW."""
        unreplicated = self._unreplicated
        # Markers are recorded in offset order, so the oldest come first.
        while unreplicated and unreplicated[0].last_offset < high_watermark:
            unreplicated.popleft()

    def last_stable_offset_of(self, completed: CompletedTxn) -> int:
        """Kafka's lastStableOffset(completedTxn): the LSO once ``completed`` is closed, which
        an aborted transaction's `.txnindex` entry records: the first offset of another
        producer's open transaction, else the offset after the marker."""
        others = [
            first
            for producer_id, first in self._ongoing.items()
            if producer_id != completed.producer_id
        ]
        return min(others) if others else completed.last_offset + 1

    def active_producers(self) -> list[ProducerSnapshot]:
        """Every producer known here, for DescribeProducers."""
        return [
            ProducerSnapshot(
                producer_id,
                entry.epoch,
                entry.last_sequence,
                entry.last_timestamp,
                entry.coordinator_epoch,
                -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset,
            )
            for producer_id, entry in self._producers.items()
        ]

    def start_verification(
        self,
        producer_id: int,
        sequence: int,
        epoch: int,
        now_ms: int,
        *,
        supports_epoch_bump: bool,
    ) -> None:
        """Kafka's maybeCreateVerificationStateEntry: a transactional batch (first sequence
        ``sequence``) of a producer with no transaction open here goes to the coordinator to
        be verified; see the module notes.

        Departure: a batch whose first sequence is at or below the last one the partition has
        of the producer at that epoch (a retry of a written batch, or a request a healed
        network delivered late) neither starts nor lowers the state; it is a duplicate or out
        of order anyway. In a fault run such a request reached a partition after its
        transaction had ended and left 219 as the lowest sequence, which then refused the
        producer's next first batch there (333) with OUT_OF_ORDER_SEQUENCE_NUMBER, fatal for
        librdkafka as the batch it waited on. (Sequences that wrapped past 2**31 - 1 are not
        told apart here.)"""
        entry = self._producers.get(producer_id)
        if (
            entry is not None
            and entry.epoch == epoch
            and entry.batches
            and sequence <= entry.last_sequence
        ):
            return
        state = self._verifications.get(producer_id)
        if state is None:
            self._verifications[producer_id] = VerificationState(
                now_ms, sequence, epoch, supports_epoch_bump
            )
        else:
            state.update(sequence, epoch)

    def verification(self, producer_id: int) -> VerificationState | None:
        return self._verifications.get(producer_id)

    def check_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        transaction_version: int = 0,
    ) -> None:
        """Kafka's ProducerAppendInfo.appendEndTxnMarker checks, as leader (origin
        COORDINATOR): checkProducerEpoch, then checkCoordinatorEpoch.

        The producer epoch (Kafka 4.4, KIP-1228): a marker of transaction version 0 or 1 is
        refused with INVALID_PRODUCER_EPOCH when its epoch is older than the producer's here
        (``<``); one of transaction version 2 when it is not newer (``<=``), as a TV2
        commit or abort bumps the epoch, so its marker always carries an epoch above the
        one the transaction's records were written with. The one exception, as Kafka's: a
        TV2 marker at the producer's current epoch when no transaction of it is open here
        (or at epoch 32767, which cannot be bumped) is a retry of a marker already written,
        and is written again. TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch.
        """
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        tv2 = transaction_version >= 2
        stale = producer_epoch <= entry.epoch if tv2 else producer_epoch < entry.epoch
        if stale and not (
            tv2
            and producer_epoch == entry.epoch
            and (entry.current_txn_first_offset is None or producer_epoch == MAX_PRODUCER_EPOCH)
        ):
            relation = "<=" if tv2 else "<"
            raise InvalidProducerEpochError(
                f"Epoch of producer {producer_id} is {producer_epoch}, which is {relation} the "
                f"last seen epoch {entry.epoch} (transaction version {transaction_version})"
            )
        if entry.coordinator_epoch > coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"Invalid coordinator epoch for producerId {producer_id}: {coordinator_epoch} "
                f"(zombie), {entry.coordinator_epoch} (current)"
            )

    # -- data batches ----------------------------------------------------------------------

    def check_append(
        self, headers: Sequence[BatchHeader], *, check_sequences: bool = True
    ) -> BatchMetadata | None:
        """Check a client's batches before anything is written; nothing is changed here.

        Returns the original batch when the first batch of a producer that repeats one is
        found (the whole request is then answered as that duplicate, as in Kafka), else
        None; raises InvalidProducerEpochError, OutOfOrderSequenceError or
        InvalidTxnStateError. Later batches of the same producer in the same request are
        checked against the earlier ones. With ``check_sequences`` False (an append of the
        group coordinator, Kafka's AppendOrigin.COORDINATOR) only producer epochs are checked.
        """
        # producer id -> (epoch, last sequence) after the earlier batches of this request
        pending: dict[int, tuple[int, int]] = {}
        for header in headers:
            producer_id = header.producer_id
            if producer_id < 0:
                continue
            current = self._producers.get(producer_id)
            if (
                check_sequences
                and current is not None
                and (duplicate := current.find_duplicate(header))
            ):
                return duplicate
            current_epoch = current.epoch if current is not None else NO_PRODUCER_EPOCH
            if producer_id in pending:
                updated_epoch, last_sequence = pending[producer_id]
            else:
                updated_epoch = current_epoch
                last_sequence = (
                    current.last_sequence
                    if current is not None and header.producer_epoch == current.epoch
                    else NO_SEQUENCE
                )
            where = f"producer {producer_id} at offset {header.base_offset}"
            if header.producer_epoch < updated_epoch:
                raise InvalidProducerEpochError(
                    f"Epoch of {where} is {header.producer_epoch}, which is smaller than the "
                    f"last seen epoch {updated_epoch}"
                )
            verifying = self._verifications.get(producer_id)
            if check_sequences and verifying is not None and producer_id not in pending:
                if (
                    verifying.supports_epoch_bump
                    and header.base_sequence != 0
                    and (current is None or not current.batches)
                ):
                    raise OutOfOrderSequenceError(
                        f"Invalid sequence number for {where}: {header.base_sequence} "
                        "(incoming seq. number). Expected sequence 0 for transactions v2 "
                        "idempotent producer with no existing state."
                    )
                if header.base_sequence > verifying.lowest_sequence:
                    raise OutOfOrderSequenceError(
                        f"Out of order sequence number for {where}: {header.base_sequence} "
                        f"(incoming seq. number), {verifying.lowest_sequence} (earliest seen "
                        "sequence)"
                    )
            if header.producer_epoch != updated_epoch:
                if (
                    check_sequences
                    and header.base_sequence != 0
                    and updated_epoch != NO_PRODUCER_EPOCH
                ):
                    raise OutOfOrderSequenceError(
                        f"Invalid sequence number for new epoch of {where}: "
                        f"{header.producer_epoch} (request epoch), {header.base_sequence} "
                        f"(seq. number), {updated_epoch} (current producer epoch)"
                    )
            elif (
                check_sequences
                and current_epoch != NO_PRODUCER_EPOCH
                and not _in_sequence(last_sequence, header.base_sequence)
            ):
                raise OutOfOrderSequenceError(
                    f"Out of order sequence number for {where}: {header.base_sequence} "
                    f"(incoming seq. number), {last_sequence} (current end sequence number)"
                )
            if not header.is_transactional and producer_id in self._ongoing:
                raise InvalidTxnStateError(
                    f"Expected transactional write from {where}: it has a transaction open "
                    f"since offset {self._ongoing[producer_id]}"
                )
            pending[producer_id] = (header.producer_epoch, header.last_sequence)
        return None

    def record(
        self, header: BatchHeader, marker: tuple[bool, int] | None = None
    ) -> CompletedTxn | None:
        """Take an appended (or replayed) batch into the state, without checks.

        ``marker`` is (commit?, coordinator epoch) of a control batch (see
        protocol.control_batch.read_control_marker); a control batch without one (not a
        transaction marker) only moves the epoch. Returns the transaction a marker closed.
        """
        producer_id = header.producer_id
        if producer_id < 0:
            return None
        if header.is_transactional:
            # Kafka's updateProducers: a transactional batch or marker written, the
            # transaction either has its first offset here or is over.
            self._verifications.pop(producer_id, None)
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerEntry(header.producer_epoch)
        elif entry.epoch != header.producer_epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        if header.is_control:
            if marker is None:
                return None
            commit, coordinator_epoch = marker
            entry.coordinator_epoch = coordinator_epoch
            entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
            first_offset = entry.current_txn_first_offset
            if first_offset is None:
                return None
            entry.current_txn_first_offset = None
            self._ongoing.pop(producer_id, None)
            completed = CompletedTxn(producer_id, first_offset, header.base_offset, not commit)
            self._unreplicated.append(completed)
            return completed
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
            )
        )
        entry.last_timestamp = header.max_timestamp
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = header.base_offset
            self._ongoing[producer_id] = header.base_offset
        return None

    def last_data_offsets(self) -> dict[int, int]:
        """Producer id -> last offset of its last data batch (the log cleaner keeps that
        batch, as Kafka's lastRecordsOfActiveProducers, so that the state survives)."""
        return {
            producer_id: entry.batches[-1].last_offset
            for producer_id, entry in self._producers.items()
            if entry.batches
        }

    @staticmethod
    def is_expired(entry: ProducerEntry, now_ms: int, expiration_ms: int) -> bool:
        """Kafka's isProducerExpired: no transaction open here, and the last write (see
        the module notes on ``last_timestamp``) is ``expiration_ms`` or more before now."""
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= expiration_ms
        )

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Kafka's removeExpiredProducers: forget every expired producer; their ids. The
        verification states started ``expiration_ms`` or more before now go too (those of
        transactions never written here)."""
        expired = [
            producer_id
            for producer_id, entry in self._producers.items()
            if self.is_expired(entry, now_ms, expiration_ms)
        ]
        for producer_id in expired:
            del self._producers[producer_id]
        self._verifications = {
            producer_id: state
            for producer_id, state in self._verifications.items()
            if now_ms - state.timestamp < expiration_ms
        }
        return expired

    def remove_before(self, log_start_offset: int) -> None:
        """Forget producers whose last batch lies wholly below the log start offset, unless
        they have a transaction open (its marker is still to come)."""
        self._producers = {
            producer_id: entry
            for producer_id, entry in self._producers.items()
            if not entry.batches
            or entry.batches[-1].last_offset >= log_start_offset
            or entry.current_txn_first_offset is not None
        }

    # -- snapshots -------------------------------------------------------------------------

    def snapshot_bytes(self) -> bytes:
        """The state as Kafka's `.snapshot` file holds it (see the module notes)."""
        entries = []
        for producer_id, entry in self._producers.items():
            last = entry.batches[-1] if entry.batches else None
            entries.append(
                _SNAPSHOT_ENTRY.pack(
                    producer_id,
                    entry.epoch,
                    last.last_sequence if last else NO_SEQUENCE,
                    last.last_offset if last else -1,
                    last.last_offset - last.first_offset if last else 0,
                    entry.last_timestamp,
                    entry.coordinator_epoch,
                    -1
                    if entry.current_txn_first_offset is None
                    else entry.current_txn_first_offset,
                )
            )
        body = struct.pack(">i", len(entries)) + b"".join(entries)
        crc = crc32c.crc32c(body)
        return struct.pack(">hI", SNAPSHOT_VERSION, crc) + body

    def load_snapshot(self, data: bytes) -> None:
        """Replace the state with a snapshot's; ValueError if it is not a valid one."""
        if len(data) < _SNAPSHOT_HEAD.size:
            raise ValueError("snapshot too short")
        version, crc, count = _SNAPSHOT_HEAD.unpack_from(data)
        if version != SNAPSHOT_VERSION:
            raise ValueError(f"snapshot version {version}")
        if crc32c.crc32c(data[6:]) != crc:
            raise ValueError("snapshot CRC mismatch")
        if count < 0 or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
            raise ValueError("snapshot length does not match its entry count")
        self.clear()
        for number in range(count):
            (
                producer_id,
                epoch,
                last_sequence,
                last_offset,
                offset_delta,
                timestamp,
                coordinator_epoch,
                txn_first_offset,
            ) = _SNAPSHOT_ENTRY.unpack_from(
                data, _SNAPSHOT_HEAD.size + number * _SNAPSHOT_ENTRY.size
            )
            entry = ProducerEntry(epoch, coordinator_epoch=coordinator_epoch)
            entry.last_timestamp = timestamp
            if last_offset >= 0:
                first_sequence = last_sequence - offset_delta
                if first_sequence < 0:
                    first_sequence += _MAX_SEQUENCE + 1
                entry.batches.append(
                    BatchMetadata(
                        first_sequence,
                        last_sequence,
                        last_offset - offset_delta,
                        last_offset,
                        timestamp,
                    )
                )
            if txn_first_offset >= 0:
                entry.current_txn_first_offset = txn_first_offset
                self._ongoing[producer_id] = txn_first_offset
            self._producers[producer_id] = entry

    def clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
