"""Errors the storage layer raises, each carrying the Kafka error code a client should see.

The broker answers a failed partition with `error.error_code` and `str(error)` as the message,
so the messages are written for the person reading a client's log.
"""

from minibroker.protocol.errors import Error


class StorageError(Exception):
    """A storage operation failed; `error_code` is the Kafka error code for the client."""

    error_code: Error = Error.KAFKA_STORAGE_ERROR


class CorruptRecordError(StorageError):
    """A batch failed its framing, magic or CRC check."""

    error_code = Error.CORRUPT_MESSAGE


class InvalidRecordError(StorageError):
    """A batch is intact but breaks a rule (inconsistent counts, control batch from a client)."""

    error_code = Error.INVALID_RECORD


class OffsetOutOfRangeError(StorageError):
    error_code = Error.OFFSET_OUT_OF_RANGE


class RecordTooLargeError(StorageError):
    """A batch is larger than the topic's max.message.bytes."""

    error_code = Error.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(StorageError):
    """One append is larger than a whole segment (segment.bytes)."""

    error_code = Error.RECORD_LIST_TOO_LARGE


class OutOfOrderSequenceError(StorageError):
    error_code = Error.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    error_code = Error.INVALID_PRODUCER_EPOCH


class UnexpectedAppendOffsetError(StorageError):
    """A replicated batch starts below the log end offset; the fetcher must truncate first."""

    error_code = Error.UNKNOWN_SERVER_ERROR


class LogDirLockedError(Exception):
    """Another process (most likely another broker) holds a log directory's lock."""


class InconsistentMetaPropertiesError(Exception):
    """A log directory's meta.properties belongs to another node or cluster, or is unreadable."""


class CorruptCheckpointError(ValueError):
    """A checkpoint or metadata file does not have the expected format."""
