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
    REPLICA_NOT_AVAILABLE = 9
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    SASL_AUTHENTICATION_FAILED = 58
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    STALE_CONTROLLER_EPOCH = 11
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    SECURITY_DISABLED = 54
    NOT_CONTROLLER = 41
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    INCONSISTENT_CLUSTER_ID = 104
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    TRANSACTION_COORDINATOR_FENCED = 52
    PRODUCER_FENCED = 90
    INVALID_CONFIG = 40
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    INELIGIBLE_REPLICA = 107
    INVALID_UPDATE_VERSION = 95  # Kafka's code (108 is NEW_LEADER_ELECTED)
    INVALID_RECORD = 87
    THROTTLING_QUOTA_EXCEEDED = 89
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    # The consumer group protocol (KIP-848).
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129  # KIP-1102; ApiVersions v5's cluster/node check (KIP-1242)
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED = 135
    # Transactions (the coordinator's codes).
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    UNKNOWN_PRODUCER_ID = 59
    TRANSACTIONAL_ID_NOT_FOUND = 105
    TRANSACTION_ABORTABLE = 120
    OPERATION_NOT_ATTEMPTED = 55
    UNSTABLE_OFFSET_COMMIT = 88
    NETWORK_EXCEPTION = 13
    # Share groups (KIP-932).
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    SHARE_SESSION_LIMIT_REACHED = 133
    # Direct-to-controller admin clients (KIP-919): DescribeCluster's endpoint type.
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    # Client telemetry (KIP-714).
    UNSUPPORTED_COMPRESSION_TYPE = 76
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118


class KafkaError(Exception):
    """An operation refused with a Kafka error code (Kafka: ``ApiException``, whose
    subclasses each map to one code in ``Errors``; an answer carries ``ApiError``, the code
    and a message).

    ``error`` is the code the client is answered with and ``message`` the text for the
    person reading the client's log (``str(error)`` is the same text). A subclass that always
    means one code sets ``error`` as a class attribute and is raised with the message alone;
    a general one is raised with both: ``KafkaError("why", Error.INVALID_REQUEST)``.
    """

    error: Error = Error.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", error: Error | None = None) -> None:
        super().__init__(message)
        self.message = message
        if error is not None:
            self.error = Error(error)


def error_name(code: int) -> str:
    """The name of an error code, or the number for one minibroker does not know."""
    return Error(code).name if code in Error._value2member_map_ else str(code)
