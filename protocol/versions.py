"""The one table of API versions minibroker speaks.

ApiVersions advertises exactly what the node's roles serve, and dispatch refuses anything
outside it, so the two can never disagree. Every range lies inside what kio 0.6.1 has schemas
for, or protocol/schemas.py adds (Kafka 4's EndTxn v5, Produce v12, TxnOffsetCommit v5,
UpdateFeatures v2). The
inter-node APIs (LeaderAndIsr, UpdateMetadata, StopReplica, AlterPartition,
BrokerRegistration, BrokerHeartbeat, AllocateProducerIds) are accepted only at the versions
minibroker itself sends.
"""

from enum import IntEnum


class ApiKey(IntEnum):
    """Kafka API keys minibroker knows by name."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    WRITE_TXN_MARKERS = 27
    OFFSET_FOR_LEADER_EPOCH = 23
    DELETE_RECORDS = 21
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    ALTER_PARTITION = 56
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    ALLOCATE_PRODUCER_IDS = 67
    # The consumer group protocol (KIP-848).
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    # Share groups' membership (KIP-932).
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    # Share groups' offsets, for admins (KIP-932).
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92
    # Kafka Streams' rebalance protocol (KIP-1071).
    STREAMS_GROUP_HEARTBEAT = 88
    STREAMS_GROUP_DESCRIBE = 89
    STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE = 93
    # Transactions.
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    # Features (KIP-584) and paged topic descriptions (KIP-966).
    UPDATE_FEATURES = 57
    # The metadata quorum's description (KIP-595, KIP-836, KIP-853), for kafka-metadata-quorum.
    DESCRIBE_QUORUM = 55
    DESCRIBE_TOPIC_PARTITIONS = 75
    # The share coordinator's state APIs (KIP-932), between partition leaders and it.
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    # Share groups (KIP-932): the data path.
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    # Client telemetry (KIP-714) and the listing of config resources (KIP-1142).
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    LIST_CONFIG_RESOURCES = 74


# The version this node sends each inter-node request at.
SENT_VERSIONS: dict[int, int] = {
    ApiKey.LEADER_AND_ISR: 7,
    ApiKey.STOP_REPLICA: 4,
    ApiKey.UPDATE_METADATA: 8,
    # AlterPartition at 3 (KIP-903: each ISR member's broker epoch) where the controller
    # serves it, else at the controller's highest (cluster/controller_client.py Described).
    ApiKey.ALTER_PARTITION: 3,
    ApiKey.BROKER_REGISTRATION: 4,
    ApiKey.BROKER_HEARTBEAT: 1,
    ApiKey.ALLOCATE_PRODUCER_IDS: 0,
    # The follower's Fetch by topic id (protocol/replica_fetch.py; v12 by name without ids).
    ApiKey.FETCH: 18,
    ApiKey.LIST_OFFSETS: 7,
    ApiKey.METADATA: 12,
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.DELETE_TOPICS: 6,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.CREATE_ACLS: 3,
    ApiKey.DESCRIBE_ACLS: 3,
    ApiKey.SASL_HANDSHAKE: 1,
    ApiKey.SASL_AUTHENTICATE: 2,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_CLIENT_QUOTAS: 1,
    # The transaction coordinator's: markers to partition leaders, and KIP-890's
    # AddPartitionsToTxn from a partition leader to the coordinator (verify-only for TV1,
    # adding the partition for TV2; v5 knows TRANSACTION_ABORTABLE).
    27: 1,  # WriteTxnMarkers (its handler, and ApiKey.WRITE_TXN_MARKERS, are the log side's)
    ApiKey.ADD_PARTITIONS_TO_TXN: 5,
    # The share persister's (node/share_persister.py), to the share coordinator.
    ApiKey.FIND_COORDINATOR: 6,
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE: 0,
    ApiKey.WRITE_SHARE_GROUP_STATE: 1,
    ApiKey.DELETE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: 1,
    # The share groups' dead-letter queue writer (replication/share_dlq_writer.py), to the
    # leader of a DLQ partition led elsewhere.
    ApiKey.PRODUCE: 9,
}

# The first version of each API whose request and response use the flexible (tagged-field)
# headers, from Kafka's message definitions ("flexibleVersions"). Parsing a request header
# needs this before anything else; with the table, a served version never touches kio for it
# (loading a kio schema module costs milliseconds, paid by a client's first request of each
# version). Kafka's flexible versions are always "this one and every later one", so the table
# answers for every version kio has a schema of (see codec.request_is_flexible).
# tests/unit/test_protocol_framing.py checks it against kio for every such version.
NEVER_FLEXIBLE = 2**15  # OffsetDelete has no flexible version
FIRST_FLEXIBLE_VERSION: dict[int, int] = {
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 9,
    ApiKey.LEADER_AND_ISR: 4,
    ApiKey.STOP_REPLICA: 2,
    ApiKey.UPDATE_METADATA: 6,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 6,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 6,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 4,
    ApiKey.SYNC_GROUP: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 3,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.OFFSET_DELETE: NEVER_FLEXIBLE,
    ApiKey.DELETE_RECORDS: 2,
    ApiKey.TXN_OFFSET_COMMIT: 3,
    ApiKey.DESCRIBE_CLUSTER: 0,
    ApiKey.API_VERSIONS: 3,
    ApiKey.SASL_HANDSHAKE: NEVER_FLEXIBLE,
    ApiKey.SASL_AUTHENTICATE: 2,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: 1,
    ApiKey.ALTER_CLIENT_QUOTAS: 1,
    ApiKey.CREATE_TOPICS: 5,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.INIT_PRODUCER_ID: 2,
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.END_TXN: 3,
    ApiKey.DESCRIBE_TRANSACTIONS: 0,
    ApiKey.LIST_TRANSACTIONS: 0,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.CREATE_PARTITIONS: 2,
    ApiKey.ELECT_LEADERS: 2,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.ALTER_REPLICA_LOG_DIRS: 2,
    ApiKey.DESCRIBE_LOG_DIRS: 2,
    ApiKey.DESCRIBE_ACLS: 2,
    ApiKey.CREATE_ACLS: 2,
    ApiKey.DELETE_ACLS: 2,
    ApiKey.ALTER_PARTITION: 0,
    ApiKey.BROKER_REGISTRATION: 0,
    ApiKey.BROKER_HEARTBEAT: 0,
    ApiKey.ALLOCATE_PRODUCER_IDS: 0,
    ApiKey.WRITE_TXN_MARKERS: 1,
    ApiKey.DESCRIBE_PRODUCERS: 0,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: 0,
    ApiKey.CONSUMER_GROUP_DESCRIBE: 0,
    ApiKey.SHARE_GROUP_HEARTBEAT: 0,
    ApiKey.SHARE_GROUP_DESCRIBE: 0,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: 0,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: 0,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: 0,
    ApiKey.STREAMS_GROUP_HEARTBEAT: 0,
    ApiKey.STREAMS_GROUP_DESCRIBE: 0,
    ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE: 0,
    ApiKey.UPDATE_FEATURES: 0,
    ApiKey.DESCRIBE_QUORUM: 0,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: 0,
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE: 0,
    ApiKey.WRITE_SHARE_GROUP_STATE: 0,
    ApiKey.DELETE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: 0,
    ApiKey.SHARE_FETCH: 0,
    ApiKey.SHARE_ACKNOWLEDGE: 0,
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: 0,
    ApiKey.PUSH_TELEMETRY: 0,
    ApiKey.LIST_CONFIG_RESOURCES: 0,
}
