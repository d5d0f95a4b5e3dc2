"""The API versions Kafka 4.4 serves that minibroker raised to (issue 34), each sent on the wire
to one real broker process at its newest version, checking the behaviour the version adds; and
the versions Kafka 4 removed (KIP-896), sent raw, answered as Kafka 4.4 answers them (the same
requests are asked of Apache Kafka 4.4 in test_answers_as_kafka.py)."""

from __future__ import annotations

import socket
import struct
import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.static.primitive import i32

from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.schemas import ApiVersionsRequestV5, ListTransactionsRequestV2
from minibroker.protocol.versions import ApiKey
from minibroker.testing import Cluster
from minibroker.tools import wire
from minibroker.tools.launcher import BrokerProcess
from minibroker.tools.wire import WireError
from tests.conftest import (
    SHARED_BROKER,
    coordinator_ready,
    create_topic,
    produce_numbers,
    wait_for,
    wire_client,
)
from tests.unit.batch_factory import make_batch

TOPIC = "k44"


# The worker's shared broker (tests/conftest.py): nothing here needs settings of its own; the
# topic, groups and transactional ids are this module's (k44...).
pytestmark = SHARED_BROKER


@pytest.fixture
def node(kafka_broker: Cluster) -> BrokerProcess:
    """The shared broker's process, with the module's topic: ten numbers, the first four
    deleted (made by the first test that asks for it)."""
    broker = kafka_broker.node(1)
    if kafka_broker.leader_of(TOPIC, 0) is None:
        create_topic(broker.bootstrap, TOPIC, 1)
        produce_numbers(broker.bootstrap, TOPIC, 0, 10)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        deleted = admin.delete_records([TopicPartition(TOPIC, 0, 4)], request_timeout=10)
        for future in deleted.values():
            future.result(timeout=15)
    return broker


def code(value) -> Error:
    return Error(int(getattr(value, "value", value)))


def list_offsets(node, version: int, *timestamps: int) -> list:
    """(error, offset, leader epoch) for each timestamp, one request each (a partition listed
    twice in one request is INVALID_REQUEST)."""
    answers = []
    for timestamp in timestamps:
        fields = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}
                    ],
                }
            ],
        }
        if version >= 10:
            fields["timeout"] = 5000
        with wire.connect(node.bootstrap, 10, exact=True) as client:
            response = client.request(ApiKey.LIST_OFFSETS, version, fields)
        ((partition,),) = [topic.partitions for topic in response.topics]
        answers.append((code(partition.error_code), partition.offset, partition.leader_epoch))
    return answers


def test_list_offsets_v11_special_timestamps(node):
    """ListOffsets v8-v11 (KIP-405, KIP-1005, KIP-1023): with no tiered storage the earliest
    local offset is the log start offset (4 after DeleteRecords, not 0), and no tiered offset
    is known (-1, epoch -1), as Kafka 4.4 answers for a topic without remote storage."""
    earliest, earliest_local, latest_tiered, pending_upload, latest = list_offsets(
        node, 11, -2, -4, -5, -6, -1
    )
    assert earliest[:2] == (Error.NONE, 4)
    assert earliest_local[:2] == (Error.NONE, 4)
    assert latest_tiered == (Error.NONE, -1, -1)
    assert pending_upload == (Error.NONE, -1, -1)
    assert latest[:2] == (Error.NONE, 10)


@pytest.mark.parametrize(
    ("version", "timestamp"),
    [(7, -4), (8, -5), (10, -6), (11, -7), (6, -3)],
)
def test_list_offsets_timestamp_newer_than_the_version_is_unsupported(node, version, timestamp):
    """Kafka's isListOffsetsTimestampUnsupported: a special timestamp newer than the request's
    version, or a negative one that names nothing, is UNSUPPORTED_VERSION for its partition;
    the same connection's next request is answered."""
    ((error, offset, _),) = list_offsets(node, version, timestamp)
    assert (error, offset) == (Error.UNSUPPORTED_VERSION, -1)
    ((error, offset, _),) = list_offsets(node, version, -1)
    assert (error, offset) == (Error.NONE, 10)


def metadata(node, version: int = 13):
    fields = {
        "topics": [{"name": TOPIC, "topic_id": None}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    with wire.connect(node.bootstrap, 10, exact=True) as client:
        return client.request(ApiKey.METADATA, version, fields)


def test_metadata_v13_has_a_top_level_error_code(node):
    """Metadata v13 adds the top-level ErrorCode: NONE in an ordinary answer."""
    response = metadata(node)
    assert code(response.error_code) == Error.NONE
    (topic,) = response.topics
    assert topic.name == TOPIC and topic.topic_id is not None
    assert [b.node_id for b in response.brokers] == [1]


def commit(node, group: str, version: int, topic_ref: dict, offset: int) -> list:
    fields = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {
                **topic_ref,
                "partitions": [
                    {"partition_index": 0, "committed_offset": offset, "committed_metadata": "m"}
                ],
            }
        ],
    }
    with wire.connect(node.bootstrap, 10, exact=True) as client:
        return client.request(ApiKey.OFFSET_COMMIT, version, fields).topics


def fetch_offsets(node, group: str, version: int, topics) -> object:
    fields = {"groups": [{"group_id": group, "topics": topics}], "require_stable": False}
    with wire.connect(node.bootstrap, 10, exact=True) as client:
        (answer,) = client.request(ApiKey.OFFSET_FETCH, version, fields).groups
    return answer


def test_offset_commit_and_fetch_v10_name_topics_by_id(node):
    """OffsetCommit and OffsetFetch v10 (KIP-848): topics by id in requests and answers; the
    offset committed by id is the one v9 reads by name; an unknown id is UNKNOWN_TOPIC_ID for
    its partitions, and the known topic beside it is committed."""
    group = "k44-by-id"
    coordinator_ready(node.bootstrap, group)
    (topic_id,) = [topic.topic_id for topic in metadata(node).topics]
    unknown = uuid.uuid4()

    (answered,) = commit(node, group, 10, {"topic_id": topic_id}, 7)
    assert answered.topic_id == topic_id
    assert [code(p.error_code) for p in answered.partitions] == [Error.NONE]
    (refused,) = commit(node, group, 10, {"topic_id": unknown}, 3)
    assert refused.topic_id == unknown
    assert [code(p.error_code) for p in refused.partitions] == [Error.UNKNOWN_TOPIC_ID]

    by_name = fetch_offsets(node, group, 9, [{"name": TOPIC, "partition_indexes": [0]}])
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in by_name.topics] == [
        (TOPIC, [7])
    ]
    by_id = fetch_offsets(
        node,
        group,
        10,
        [
            {"topic_id": topic_id, "partition_indexes": [0]},
            {"topic_id": unknown, "partition_indexes": [0]},
        ],
    )
    assert code(by_id.error_code) == Error.NONE
    answers = {
        t.topic_id: [(p.committed_offset, code(p.error_code)) for p in t.partitions]
        for t in by_id.topics
    }
    assert answers == {topic_id: [(7, Error.NONE)], unknown: [(-1, Error.UNKNOWN_TOPIC_ID)]}
    every = fetch_offsets(node, group, 10, None)
    assert [(t.topic_id, [p.committed_offset for p in t.partitions]) for t in every.topics] == [
        (topic_id, [7])
    ]


def describe_group(node, group: str, version: int):
    fields = {"groups": [group], "include_authorized_operations": False}
    with wire.connect(node.bootstrap, 10, exact=True) as client:
        (described,) = client.request(ApiKey.DESCRIBE_GROUPS, version, fields).groups
    return described


def test_describe_groups_v6_unknown_group_is_group_id_not_found(node):
    """DescribeGroups v6 (KIP-1043): a group that does not exist is GROUP_ID_NOT_FOUND with a
    message; v5 still answers it as a Dead group; an existing group is described as before."""
    coordinator_ready(node.bootstrap, "k44-missing")
    missing = describe_group(node, "k44-missing", 6)
    assert code(missing.error_code) == Error.GROUP_ID_NOT_FOUND
    assert missing.error_message == "Group k44-missing not found."
    old = describe_group(node, "k44-missing", 5)
    assert (code(old.error_code), old.group_state) == (Error.NONE, "Dead")
    group = "k44-described"
    coordinator_ready(node.bootstrap, group)
    commit(node, group, 9, {"name": TOPIC}, 1)
    described = describe_group(node, group, 6)
    assert (code(described.error_code), described.error_message) == (Error.NONE, None)
    assert described.group_state == "Empty"


def test_delete_groups_v3_says_why_a_group_was_not_deleted(node):
    """DeleteGroups v3: each result carries an error message when the group is refused (here
    one that does not exist), null when it is deleted."""
    group = "k44-deleted"
    coordinator_ready(node.bootstrap, group)
    commit(node, group, 9, {"name": TOPIC}, 1)
    with wire.connect(node.bootstrap, 10, exact=True) as client:
        response = client.request(
            ApiKey.DELETE_GROUPS, 3, {"groups_names": [group, "k44-never-was"]}
        )
    results = {r.group_id: (code(r.error_code), r.error_message) for r in response.results}
    assert results == {
        group: (Error.NONE, None),
        "k44-never-was": (Error.GROUP_ID_NOT_FOUND, "The group id does not exist."),
    }


def produce(node, version: int, topic_ref: dict, batch: bytes):
    fields = {
        "transactional_id": None,
        "acks": -1,
        "timeout": 10000,
        "topic_data": [{**topic_ref, "partition_data": [{"index": 0, "records": batch}]}],
    }
    with wire.connect(node.bootstrap, 10, exact=True) as client:
        (answer,) = client.request(ApiKey.PRODUCE, version, fields).responses
    return answer


def test_produce_v13_names_topics_by_id(node):
    """Produce v13 (KIP-516): the topic by id; the batch is appended to that topic (the next
    offset, as v12 by name sees it) and the answer names the topic by id; an unknown id is
    UNKNOWN_TOPIC_ID, nothing appended."""
    (topic_id,) = [topic.topic_id for topic in metadata(node).topics]
    ((_, end, _),) = list_offsets(node, 11, -1)
    answer = produce(node, 13, {"topic_id": topic_id}, make_batch(2))
    assert answer.topic_id == topic_id
    ((index, error, base),) = [
        (p.index, code(p.error_code), p.base_offset) for p in answer.partition_responses
    ]
    assert (index, error, base) == (0, Error.NONE, end)
    unknown = produce(node, 13, {"topic_id": uuid.uuid4()}, make_batch(1))
    assert [code(p.error_code) for p in unknown.partition_responses] == [Error.UNKNOWN_TOPIC_ID]
    by_name = produce(node, 12, {"name": TOPIC}, make_batch(1))
    assert [p.base_offset for p in by_name.partition_responses] == [end + 2]


def api_versions(node, cluster_id: str | None, node_id: int) -> tuple[Error, dict]:
    """(error, {api key: max version}) of an ApiVersions v5 request. Read by hand: kio 0.6.1's
    reader knows no error code above 127 (REBOOTSTRAP_REQUIRED is 129)."""
    body = codec.encode_entity(
        ApiVersionsRequestV5(
            client_software_name="k44",
            client_software_version="1",
            cluster_id=cluster_id,
            node_id=i32(node_id),
        )
    )
    with wire.connect(node.bootstrap, 10, exact=True) as client:
        client.send_request(ApiKey.API_VERSIONS, 5, body)
        frame = client.receive_frame()
    # Header v0 (the correlation id), then the error code and the compact array of ranges.
    (error,) = struct.unpack_from(">h", frame, 4)
    if error != Error.NONE:
        return Error(error), {}
    _, response = wire.decode_response(ApiKey.API_VERSIONS, 5, frame)
    return Error.NONE, {k.api_key: k.max_version for k in response.api_keys}


def test_api_versions_v5_checks_the_cluster_and_node_the_client_means(node):
    """ApiVersions v5 (KIP-1242): a client naming this cluster and node (or neither) gets the
    table; another cluster id or another node id is REBOOTSTRAP_REQUIRED; the connection
    keeps serving."""
    cluster_id = metadata(node).cluster_id
    for asked in ((None, -1), (cluster_id, 1), (cluster_id, -1), (None, 1)):
        error, table = api_versions(node, *asked)
        assert error == Error.NONE, asked
        assert table[ApiKey.API_VERSIONS] == 5 and table[ApiKey.METADATA] == 13
    for asked in (("another-cluster", 1), (cluster_id, 2), (None, 7)):
        assert api_versions(node, *asked) == (Error.REBOOTSTRAP_REQUIRED, {}), asked


def test_list_transactions_v2_filters_by_transactional_id_pattern(node):
    """ListTransactions v2 (KIP-1152): only the transactional ids the whole pattern matches; a
    pattern that does not compile is INVALID_REGULAR_EXPRESSION (read by hand: kio 0.6.1's
    reader knows no code above 127); no pattern lists both."""
    producers = []
    for transactional_id in ("k44-txn-apple", "k44-txn-banana"):
        producer = Producer(
            {"bootstrap.servers": node.bootstrap, "transactional.id": transactional_id}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(TOPIC, b"in a transaction")
        producer.flush(30)
        producers.append(producer)
    try:

        def listed(version: int, fields: dict) -> set[str]:
            with wire.connect(node.bootstrap, 10, exact=True) as client:
                response = client.request(ApiKey.LIST_TRANSACTIONS, version, fields)
            assert code(response.error_code) == Error.NONE
            return {state.transactional_id for state in response.transaction_states}

        assert listed(2, {"transactional_id_pattern": "k44-txn-a.*"}) == {"k44-txn-apple"}
        assert listed(2, {"transactional_id_pattern": "txn"}) == set()  # the whole id
        assert listed(2, {"transactional_id_pattern": None}) >= {
            "k44-txn-apple",
            "k44-txn-banana",
        }
        assert listed(1, {}) >= {"k44-txn-apple", "k44-txn-banana"}
        body = codec.encode_entity(ListTransactionsRequestV2(transactional_id_pattern="k44-("))
        with wire.connect(node.bootstrap, 10, exact=True) as client:
            client.send_request(ApiKey.LIST_TRANSACTIONS, 2, body)
            frame = client.receive_frame()
        # Header v1 (correlation id, no tags), throttle time, then the error code.
        (error,) = struct.unpack_from(">h", frame, 4 + 1 + 4)
        assert error == Error.INVALID_REGULAR_EXPRESSION
    finally:
        for producer in producers:
            producer.abort_transaction(30)


def test_consumer_group_describe_v1_gives_each_member_its_type(node):
    """ConsumerGroupDescribe v1 (KIP-1099): a member that joined by ConsumerGroupHeartbeat is
    a consumer-protocol member, type 1 (v0 has no such field)."""
    group = "k44-consumers"
    coordinator_ready(node.bootstrap, group)
    with wire.connect(node.bootstrap, 10, exact=True) as client:
        joined = client.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            0,
            {
                "group_id": group,
                "member_id": "",
                "member_epoch": 0,
                "rebalance_timeout": 30000,
                "subscribed_topic_names": [TOPIC],
                "topic_partitions": [],
            },
        )
        assert code(joined.error_code) == Error.NONE
        described = client.request(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            1,
            {"group_ids": [group], "include_authorized_operations": False},
        )
    ((member_id, member_type),) = [
        (member.member_id, member.member_type) for member in described.groups[0].members
    ]
    assert (member_id, member_type) == (joined.member_id, 1)


def test_alter_partition_reassignments_v1_echoes_whether_the_replication_factor_may_change(node):
    """AlterPartitionReassignments v1: the answer echoes AllowReplicationFactorChange; a target
    of the same size is accepted with it false (one broker: the replicas stay [1]); a target
    naming an unknown broker is still INVALID_REPLICA_ASSIGNMENT. (A change of size refused
    with INVALID_REPLICATION_FACTOR needs more brokers: tests/unit/test_controller_operations.)"""

    def reassign(replicas: list[int]):
        fields = {
            "timeout": 10000,
            "allow_replication_factor_change": False,
            "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": replicas}]}
            ],
        }
        with wire.connect(node.bootstrap, 10, exact=True) as client:
            return client.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, fields)

    same = reassign([1])
    assert same.allow_replication_factor_change is False
    assert code(same.error_code) == Error.NONE
    assert [code(p.error_code) for t in same.responses for p in t.partitions] == [Error.NONE]
    unknown = reassign([1, 9])
    assert [code(p.error_code) for t in unknown.responses for p in t.partitions] == [
        Error.INVALID_REPLICA_ASSIGNMENT
    ]


def test_describe_log_dirs_v5_and_describe_cluster_v2(node):
    """DescribeLogDirs v5: each directory says it is not cordoned (none is, here);
    DescribeCluster v2: each broker says whether it is fenced (the live broker is not)."""
    with wire.connect(node.bootstrap, 10, exact=True) as client:
        dirs = client.request(ApiKey.DESCRIBE_LOG_DIRS, 5, {"topics": None})
        cluster = client.request(
            ApiKey.DESCRIBE_CLUSTER,
            2,
            {"include_cluster_authorized_operations": False, "include_fenced_brokers": True},
        )
    assert code(dirs.error_code) == Error.NONE
    assert [(code(r.error_code), r.is_cordoned) for r in dirs.results] == [(Error.NONE, False)]
    assert TOPIC in {t.name for r in dirs.results for t in r.topics}
    assert code(cluster.error_code) == Error.NONE
    assert [(b.broker_id, b.is_fenced) for b in cluster.brokers] == [(1, False)]


def test_init_producer_id_v5(node):
    """InitProducerId v5 (the newest Kafka 4.4 advertises): an idempotent producer's id and
    epoch 0; sending them back bumps the epoch (KIP-360), as at v4."""
    fields = {"transactional_id": None, "transaction_timeout": 60000}
    with wire.connect(node.bootstrap, 10, exact=True) as client:
        first = client.request(ApiKey.INIT_PRODUCER_ID, 5, fields)
        assert (code(first.error_code), first.producer_epoch) == (Error.NONE, 0)
        assert first.producer_id >= 0
        again = client.request(
            ApiKey.INIT_PRODUCER_ID,
            5,
            {**fields, "producer_id": first.producer_id, "producer_epoch": 0},
        )
    assert (code(again.error_code), again.producer_id, again.producer_epoch) == (
        Error.NONE,
        first.producer_id,
        1,
    )


def test_txn_offset_commit_v6_names_topics_by_id(node):
    """TxnOffsetCommit v6 (KIP-1319): a transactional producer's offsets by topic id; an unknown
    id is UNKNOWN_TOPIC_ID; the committed transaction's offset is the one OffsetFetch reads."""
    group, transactional_id = "k44-txn-group", "k44-txn-offsets"
    coordinator_ready(node.bootstrap, group)
    (topic_id,) = [topic.topic_id for topic in metadata(node).topics]
    with wire.connect(node.bootstrap, 20, exact=True) as client:

        def coordinator_found() -> bool:
            found = client.request(
                ApiKey.FIND_COORDINATOR, 2, {"key": transactional_id, "key_type": 1}
            )
            return code(found.error_code) == Error.NONE

        wait_for(coordinator_found, 20, "the transaction coordinator")
        init = client.request(
            ApiKey.INIT_PRODUCER_ID,
            5,
            {"transactional_id": transactional_id, "transaction_timeout": 60000},
        )
        assert code(init.error_code) == Error.NONE
        producer = {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
        added = client.request(
            ApiKey.ADD_OFFSETS_TO_TXN,
            3,
            {"transactional_id": transactional_id, "group_id": group, **producer},
        )
        assert code(added.error_code) == Error.NONE

        def partitions(offset: int) -> list[dict]:
            return [
                {
                    "partition_index": 0,
                    "committed_offset": offset,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "txn",
                }
            ]

        unknown = uuid.uuid4()
        committed = client.request(
            ApiKey.TXN_OFFSET_COMMIT,
            6,
            {
                "transactional_id": transactional_id,
                "group_id": group,
                **producer,
                "generation_id": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {"topic_id": topic_id, "partitions": partitions(5)},
                    {"topic_id": unknown, "partitions": partitions(6)},
                ],
            },
        )
        answers = {t.topic_id: [code(p.error_code) for p in t.partitions] for t in committed.topics}
        assert answers == {topic_id: [Error.NONE], unknown: [Error.UNKNOWN_TOPIC_ID]}
        ended = client.request(
            ApiKey.END_TXN,
            4,
            {"transactional_id": transactional_id, **producer, "committed": True},
        )
        assert code(ended.error_code) == Error.NONE

    def offset_visible() -> bool:
        answer = fetch_offsets(node, group, 10, [{"topic_id": topic_id, "partition_indexes": [0]}])
        return [p.committed_offset for t in answer.topics for p in t.partitions] == [5]

    wait_for(offset_visible, 20, "the transaction's committed offset")


# KIP-896: a valid request at each version Kafka 4 removed (kio still has their schemas), so
# that a broker serving the version would answer it. Kafka 4.4's network processor refuses a
# version its ApiVersionManager does not enable before reading the body (Processor.
# parseRequestHeader: InvalidRequestException or UnsupportedVersionException) and closes the
# connection (processChannelException); minibroker's dispatch does the same. Produce v0-v2
# are refused although both advertise Produce from v0 (KAFKA-18659).
_GROUP = {"group_id": "k44-removed", "generation_id": -1, "member_id": ""}
_ACL_FILTER = {
    "resource_type_filter": 2,
    "resource_name_filter": None,
    "principal_filter": None,
    "host_filter": None,
    "operation": 1,
    "permission_type": 1,
}
REMOVED = {
    (ApiKey.PRODUCE, 0): {"acks": 1, "timeout": 1000, "topic_data": []},
    (ApiKey.PRODUCE, 2): {"acks": 1, "timeout": 1000, "topic_data": []},
    (ApiKey.FETCH, 3): {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1024},
    (ApiKey.LIST_OFFSETS, 0): {"replica_id": -1, "topics": []},
    (ApiKey.OFFSET_COMMIT, 1): {**_GROUP, "topics": []},
    (ApiKey.OFFSET_FETCH, 0): {"group_id": "k44-removed", "topics": []},
    (ApiKey.CREATE_TOPICS, 1): {"topics": [], "timeout": 1000, "validate_only": False},
    (ApiKey.DELETE_TOPICS, 0): {"topic_names": [], "timeout": 1000},
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 1): {"topics": []},
    (ApiKey.WRITE_TXN_MARKERS, 0): {"markers": []},
    (ApiKey.DESCRIBE_ACLS, 0): _ACL_FILTER,
    (ApiKey.CREATE_ACLS, 0): {"creations": []},
    (ApiKey.DELETE_ACLS, 0): {"filters": []},
    (ApiKey.DESCRIBE_CONFIGS, 0): {"resources": []},
    (ApiKey.ALTER_REPLICA_LOG_DIRS, 0): {"dirs": []},
    (ApiKey.DESCRIBE_LOG_DIRS, 0): {"topics": []},
}
# ApiVersions at a version the broker does not know: the KIP-511 answer, not a close.
UNKNOWN_API_VERSIONS = 6


def sent_at(bootstrap: str, api_key: ApiKey, version: int) -> object:
    """What a broker does with ``REMOVED[(api_key, version)]`` on a new connection: "closed",
    or the answer's correlation id and body bytes."""
    host, port = bootstrap.rsplit(":", 1)
    body = codec.encode_entity(
        codec.build(codec.request_class(api_key, version), REMOVED[(api_key, version)])
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        client = wire_client(sock)
        client.send_request(api_key, version, body, correlation_id=7)
        try:
            frame = client.receive_frame()
        except (WireError, ConnectionResetError):
            return "closed"
        return struct.unpack_from(">i", frame)[0], bytes(frame[4:])


def api_versions_at(bootstrap: str, version: int) -> tuple[int, int, list]:
    """ApiVersions with an empty body at ``version`` (3 or newer), its answer read as v0 (as a
    client reads an answer to a version the broker does not know): correlation id, error code,
    and the ranges listed."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        client = wire_client(sock)
        # Request header v2, with its empty tag buffer: ApiVersions v3 and newer are flexible,
        # and Kafka reads the header of a newer version as v2 too.
        client.send_raw(struct.pack(">ihhihb", 11, ApiKey.API_VERSIONS, version, 9, 0, 0))
        frame = client.receive_frame()
    correlation_id, error_code, count = struct.unpack_from(">ihi", frame)
    ranges = [struct.unpack_from(">hhh", frame, 10 + 6 * index) for index in range(count)]
    assert len(frame) == 10 + 6 * count, "an ApiVersions v0 answer uses its whole frame"
    return correlation_id, error_code, ranges


@pytest.mark.parametrize(
    ("api_key", "version"),
    list(REMOVED),
    ids=[f"{key.name}-v{version}" for key, version in REMOVED],
)
def test_a_version_kafka_4_removed_closes_the_connection(kafka_broker, api_key, version):
    """KIP-896: a request at a version Kafka 4 removed closes its connection, as on Kafka 4.4,
    and the broker keeps serving: a connection opened before it is answered after it."""
    bootstrap = kafka_broker.node(1).bootstrap
    with wire.connect(bootstrap, 10, exact=True) as bystander:
        assert sent_at(bootstrap, api_key, version) == "closed"
        assert bystander.api_versions()[ApiKey.API_VERSIONS] == (0, 5)


def test_produce_is_advertised_from_v0_and_served_from_v3(kafka_broker):
    """As Kafka 4.4 (KAFKA-18659): Produce's range in ApiVersions starts at v0 for librdkafka
    before 2.1, which compresses only then; the lowest version answered is v3."""
    bootstrap = kafka_broker.node(1).bootstrap
    with wire.connect(bootstrap, 10, exact=True) as client:
        assert client.api_versions()[ApiKey.PRODUCE] == (0, 13)
        answer = client.request(
            ApiKey.PRODUCE, 3, {"transactional_id": None, **REMOVED[(ApiKey.PRODUCE, 2)]}
        )
    assert answer.responses == ()


def test_an_unknown_api_versions_version_gets_kip_511s_answer(kafka_broker):
    """ApiVersions at a version the broker does not know: a v0 answer, UNSUPPORTED_VERSION,
    and ApiVersions' own range alone (Kafka's ApiVersionsRequest.getErrorResponse); the
    client asks again at v5 on the same connection."""
    bootstrap = kafka_broker.node(1).bootstrap
    assert api_versions_at(bootstrap, UNKNOWN_API_VERSIONS) == (
        9,
        Error.UNSUPPORTED_VERSION,
        [(ApiKey.API_VERSIONS, 0, 5)],
    )


def test_metadata_v0_is_served_as_kafka_4_4_serves_it(node):
    """Metadata v0 (kept by Kafka 4): a topic by name, and an empty list for every topic
    (Kafka's MetadataRequest.isAllTopics; from v1 an empty list asks for none)."""
    with wire.connect(node.bootstrap, 10, exact=True) as client:
        named = client.request(ApiKey.METADATA, 0, {"topics": [{"name": TOPIC}]})
        every = client.request(ApiKey.METADATA, 0, {"topics": []})
        none = client.request(ApiKey.METADATA, 1, {"topics": []})
    ((name, error, partitions),) = [
        (t.name, code(t.error_code), [p.partition_index for p in t.partitions])
        for t in named.topics
    ]
    assert (name, error, partitions) == (TOPIC, Error.NONE, [0])
    assert [b.node_id for b in named.brokers] == [1]
    assert TOPIC in {t.name for t in every.topics}
    assert none.topics == ()
