"""Idempotent producer state of one partition, kept from batch headers alone.

This follows Kafka's ProducerStateManager/ProducerAppendInfo: for every producer id the
partition remembers the current epoch and the last five batches (their sequence and offset
ranges). A batch from a client is then

- a duplicate if it repeats one of those five batches (same epoch, same first and last
  sequence): it is not appended again and the client gets the original offsets back;
- refused with INVALID_PRODUCER_EPOCH if its epoch is older than the current one;
- refused with OUT_OF_ORDER_SEQUENCE_NUMBER if, under the current epoch, its first sequence
  does not follow the last one (sequences wrap from 2**31 - 1 to 0), or if it opens a newer
  epoch with a first sequence other than 0.

As in Kafka, a producer the partition has no state for is accepted at any sequence: its
batches may simply have been removed by retention, and refusing it would be fatal for the
client. Batches without a producer id are never checked.

Departures from Kafka: no `.snapshot` files are written; the partition log rebuilds this state
by replaying the batch headers of the whole log when it opens or truncates. The state of a
producer whose batches all fall below the log start offset is dropped (which is also what a
replay after a restart would find), where Kafka keeps it until producer.id.expiration.ms.
Transactions are not tracked (control batches only advance the epoch).
"""

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from minibroker.protocol.record_batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from minibroker.storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError

BATCHES_RETAINED_PER_PRODUCER = 5
_MAX_SEQUENCE = 2**31 - 1


class BatchMetadata(NamedTuple):
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=BATCHES_RETAINED_PER_PRODUCER)
    )

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


def _in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (
        next_sequence == 0 and last_sequence == _MAX_SEQUENCE
    )


class ProducerStateManager:
    """Producer id -> epoch and recent batches, for one partition."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def check_append(
        self, headers: Sequence[BatchHeader], *, check_sequences: bool = True
    ) -> BatchMetadata | None:
        """Check a client's batches before anything is written; nothing is changed here.

        Returns the original batch when the first batch of a producer that repeats one is
        found (the whole request is then answered as that duplicate, as in Kafka), else
        None; raises InvalidProducerEpochError or OutOfOrderSequenceError.
        Later batches of the same producer in the same request are checked against the
        earlier ones. With ``check_sequences`` False (an append of the group coordinator,
        Kafka's AppendOrigin.COORDINATOR) only producer epochs are checked.
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
            if header.producer_epoch != updated_epoch:
                if header.base_sequence != 0 and updated_epoch != NO_PRODUCER_EPOCH:
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
            pending[producer_id] = (header.producer_epoch, header.last_sequence)
        return None

    def record(self, header: BatchHeader) -> None:
        """Take an appended (or replayed) batch into the state, without checks."""
        if header.producer_id < 0:
            return
        entry = self._producers.get(header.producer_id)
        if entry is None:
            entry = self._producers[header.producer_id] = ProducerEntry(header.producer_epoch)
        elif entry.epoch != header.producer_epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        if header.is_control:
            return
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
            )
        )

    def last_data_offsets(self) -> dict[int, int]:
        """Producer id -> last offset of its last data batch (the log cleaner keeps that
        batch, as Kafka's lastRecordsOfActiveProducers, so that the state survives)."""
        return {
            producer_id: entry.batches[-1].last_offset
            for producer_id, entry in self._producers.items()
            if entry.batches
        }

    def remove_before(self, log_start_offset: int) -> None:
        """Forget producers whose last batch lies wholly below the log start offset."""
        self._producers = {
            producer_id: entry
            for producer_id, entry in self._producers.items()
            if not entry.batches or entry.batches[-1].last_offset >= log_start_offset
        }

    def clear(self) -> None:
        self._producers.clear()
