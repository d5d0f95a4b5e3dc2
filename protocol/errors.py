"""Kafka error codes used by minibroker, as plain ints.

The wire carries error codes as int16; handlers and storage speak in these names and the
response builder turns them into kio's ``ErrorCode`` enum at the edge.
"""

from enum import IntEnum


class Error(IntEnum):
    """The subset of Kafka's error codes that minibroker answers with (values from Kafka)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REQUEST = 42
    STALE_CONTROLLER_EPOCH = 11
    CLUSTER_AUTHORIZATION_FAILED = 31
    NOT_CONTROLLER = 41
    STALE_BROKER_EPOCH = 77
    INCONSISTENT_CLUSTER_ID = 104
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    INVALID_CONFIG = 40
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    KAFKA_STORAGE_ERROR = 56
    FETCH_SESSION_ID_NOT_FOUND = 70
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    INVALID_RECORD = 87


def error_name(code: int) -> str:
    """The name of an error code, or the number for one minibroker does not know."""
    return Error(code).name if code in Error._value2member_map_ else str(code)
