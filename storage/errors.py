"""Errors the storage layer raises, each carrying the Kafka error code a client should see.

The broker answers a failed partition with `error.error` and `str(error)` as the message,
so the messages are written for the person reading a client's log. They share
:class:`~minibroker.protocol.errors.KafkaError` with the controller's and the config model's
refusals (Kafka: ``ApiException`` and its subclasses, e.g. ``KafkaStorageException``).
"""

from minibroker.protocol.errors import Error, KafkaError


class StorageError(KafkaError):
    """A storage operation failed; `error` is the Kafka error code for the client
    (Kafka: ``KafkaStorageException`` unless a subclass says otherwise)."""

    error: Error = Error.KAFKA_STORAGE_ERROR


class CorruptRecordError(StorageError):
    """A batch failed its framing, magic or CRC check."""

    error = Error.CORRUPT_MESSAGE


class InvalidRecordError(StorageError):
    """A batch is intact but breaks a rule (inconsistent counts, control batch from a client)."""

    error = Error.INVALID_RECORD


class OffsetOutOfRangeError(StorageError):
    error = Error.OFFSET_OUT_OF_RANGE


class RecordTooLargeError(StorageError):
    """A batch is larger than the topic's max.message.bytes."""

    error = Error.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(StorageError):
    """One append is larger than a whole segment (segment.bytes)."""

    error = Error.RECORD_LIST_TOO_LARGE


class OutOfOrderSequenceError(StorageError):
    error = Error.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    error = Error.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(StorageError):
    """A non-transactional batch from a producer with a transaction open on the partition
    (Kafka's InvalidTxnStateException)."""

    error = Error.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(StorageError):
    """A transaction marker whose coordinator epoch is older than the last one the
    partition saw for its producer (Kafka's TransactionCoordinatorFencedException)."""

    error = Error.TRANSACTION_COORDINATOR_FENCED


class UnexpectedAppendOffsetError(StorageError):
    """A replicated batch starts below the log end offset; the fetcher must truncate first.
    ``first_offset`` is the first batch's base offset, ``last_offset`` the append's last
    (Kafka's UnexpectedAppendOffsetException carries the same two)."""

    error = Error.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str, first_offset: int = -1, last_offset: int = -1) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class LogDirLockedError(Exception):
    """Another process (most likely another broker) holds a log directory's lock."""


class InconsistentMetaPropertiesError(Exception):
    """A log directory's meta.properties belongs to another node or cluster, or is unreadable."""


class CorruptCheckpointError(ValueError):
    """A checkpoint or metadata file does not have the expected format."""
