"""StreamsGroupHeartbeat, StreamsGroupDescribe and StreamsGroupTopologyDescriptionUpdate on the
wire, against a real broker process: the schemas of protocol/streams_group_schemas.py both
ways, the internal topics the broker creates (MISSING_INTERNAL_TOPICS, then the tasks on the
next heartbeat), bad input answered with Kafka's codes while the group goes on serving its
member, the ACLs Kafka checks, and the groups' streams.* configs.

The tests without ACLs run on the worker's shared broker (tests/conftest.py's SHARED_BROKER),
with topics and groups of their own (`wire-`); the ACL test on the module's broker with an
authorizer (the `secured` fixture)."""

import struct

import pytest
from kio.schema.errors import ErrorCode

from minibroker.protocol import codec
from minibroker.protocol.versions import ApiKey
from minibroker.testing import Cluster
from minibroker.tools import wire
from minibroker.tools.launcher import BrokerProcess
from tests.conftest import SHARED_BROKER, create_topic, exchange, wait_for

pytestmark = SHARED_BROKER


@pytest.fixture
def broker(kafka_broker: Cluster) -> BrokerProcess:
    """The shared broker's node: its `.bootstrap`, the attribute the helpers below take, as
    the `secured` broker's does."""
    return kafka_broker.node(1)


TOPOLOGY = {
    "epoch": 1,
    "subtopologies": [
        {
            "subtopology_id": "0",
            "source_topics": ["wire-in"],
            "source_topic_regex": [],
            "state_changelog_topics": [
                {
                    "name": "wire-app-store-changelog",
                    "partitions": 0,
                    "replication_factor": 0,
                    "topic_configs": [{"key": "cleanup.policy", "value": "compact"}],
                }
            ],
            "repartition_sink_topics": [],
            "repartition_source_topics": [],
            "copartition_groups": [],
        }
    ],
}


def heartbeat(broker, version: int = 1, **fields):
    data = {
        "group_id": "wire-app",
        "member_id": "m1",
        "member_epoch": 0,
        "endpoint_information_epoch": 0,
        "rebalance_timeout_ms": 30000,
        "topology": None,
        "process_id": None,
        **fields,
    }
    request = codec.build(codec.request_class(ApiKey.STREAMS_GROUP_HEARTBEAT, version), data)
    return exchange(broker.bootstrap, request)


def error_of(broker, **fields) -> int:
    """The error code of a heartbeat's answer, read from the frame: kio's native reader knows
    no code above 127 (the broker writes 130-132 as Kafka does; Java clients read them)."""
    data = {
        "group_id": "wire-app",
        "member_id": "m1",
        "member_epoch": 0,
        "endpoint_information_epoch": 0,
        "rebalance_timeout_ms": 30000,
        "process_id": "p1",
        "active_tasks": [],
        "standby_tasks": [],
        "warmup_tasks": [],
        **fields,
    }
    request = codec.build(codec.request_class(ApiKey.STREAMS_GROUP_HEARTBEAT, 1), data)
    with wire.connect(broker.bootstrap, 10.0) as client:
        client.send_request(ApiKey.STREAMS_GROUP_HEARTBEAT, 1, codec.encode_entity(request))
        frame = client.receive_frame()
    # Response header v1 (correlation id, no tagged fields), throttle time, then the error.
    return struct.unpack_from(">h", frame, 4 + 1 + 4)[0]


def join(broker, version: int = 1, **fields):
    joining = {
        "topology": TOPOLOGY,
        "process_id": "p1",
        "active_tasks": [],
        "standby_tasks": [],
        "warmup_tasks": [],
    }
    return heartbeat(broker, version, **{**joining, **fields})


def coordinator_ready(broker, group_id: str) -> bool:
    """FindCoordinator (which creates `__consumer_offsets`) until it names a node."""
    request = codec.build(
        codec.request_class(ApiKey.FIND_COORDINATOR, 4),
        {"key_type": 0, "coordinator_keys": [group_id]},
    )
    return exchange(broker.bootstrap, request).coordinators[0].error_code == ErrorCode.none


def test_a_member_joins_gets_its_changelog_created_and_its_tasks(broker):
    create_topic(broker.bootstrap, "wire-in", 2)
    for group_id in ("wire-app", "wire-other"):
        wait_for(lambda g=group_id: coordinator_ready(broker, g), 30, "the group coordinator")
    first = join(broker, version=0)
    assert first.error_code == ErrorCode.none, first
    # MISSING_INTERNAL_TOPICS, and ASSIGNMENT_DELAYED: the first member of an empty group waits
    # for group.streams.initial.rebalance.delay.ms (Kafka's 3000) at member epoch 0, with no
    # task lists (a Kafka Streams member then stays joining).
    assert [s.status_code for s in first.status] == [3, 5]
    assert first.active_tasks is None and first.member_epoch == 0

    # The broker created the changelog with the source's two partitions: once the delay has
    # passed, the tasks follow. Until then the member joins again, as Kafka Streams does.
    def assigned():
        answer = join(broker)
        assert answer.error_code == ErrorCode.none, answer
        return answer if answer.active_tasks else None

    answer = wait_for(assigned, 30, "the tasks once the changelog exists")
    assert [(t.subtopology_id, list(t.partitions)) for t in answer.active_tasks] == [("0", [0, 1])]
    assert answer.status is None or list(answer.status) == []
    assert answer.heartbeat_interval_ms == 5000 and answer.acceptable_recovery_lag == 10000
    epoch = answer.member_epoch

    # Bad input: Kafka's codes, and the member keeps its epoch and tasks.
    fenced = heartbeat(broker, member_epoch=epoch + 5)
    assert fenced.error_code == ErrorCode.fenced_member_epoch
    unknown = heartbeat(broker, member_id="ghost", member_epoch=1)
    assert unknown.error_code == ErrorCode.unknown_member_id
    changed = {
        **TOPOLOGY,
        "subtopologies": [{**TOPOLOGY["subtopologies"][0], "subtopology_id": "x"}],
    }
    same_epoch = error_of(broker, member_id="m2", topology=changed, process_id="p2")
    assert same_epoch == 131  # STREAMS_INVALID_TOPOLOGY_EPOCH
    invalid = {
        **TOPOLOGY,
        "subtopologies": [
            {
                **TOPOLOGY["subtopologies"][0],
                "repartition_source_topics": [
                    {
                        "name": "wire-in",
                        "partitions": 0,
                        "replication_factor": 0,
                        "topic_configs": [],
                    }
                ],
            }
        ],
    }
    refused = error_of(broker, member_id="m3", topology=invalid, group_id="wire-other")
    assert refused == 130  # STREAMS_INVALID_TOPOLOGY
    # The member's task offsets (its changelog offset and end offset sums per task).
    offsets = [{"subtopology_id": "0", "partition": p, "offset": 10 * p + 3} for p in (0, 1)]
    ends = [{"subtopology_id": "0", "partition": p, "offset": 40} for p in (0, 1)]
    kept = heartbeat(broker, member_epoch=epoch, task_offsets=offsets, task_end_offsets=ends)
    assert kept.error_code == ErrorCode.none and kept.member_epoch == epoch

    # StreamsGroupDescribe v1: the member, its tasks, the topology; no stored description.
    describe = codec.build(
        codec.request_class(ApiKey.STREAMS_GROUP_DESCRIBE, 1),
        {
            "group_ids": ["wire-app", "wire-missing"],
            "include_authorized_operations": False,
            "include_topology_description": True,
        },
    )
    groups = exchange(broker.bootstrap, describe).groups
    assert groups[0].error_code == ErrorCode.none
    assert groups[0].group_state == "Stable" and groups[0].group_epoch == epoch
    assert [m.member_id for m in groups[0].members] == ["m1"]
    assert groups[0].members[0].process_id == "p1"
    described_offsets = [
        [(o.subtopology_id, o.partition, o.offset) for o in kind]
        for kind in (groups[0].members[0].task_offsets, groups[0].members[0].task_end_offsets)
    ]
    assert described_offsets == [[("0", 0, 3), ("0", 1, 13)], [("0", 0, 40), ("0", 1, 40)]]
    active = groups[0].members[0].assignment.active_tasks
    assert [(t.subtopology_id, list(t.partitions)) for t in active] == [("0", [0, 1])]
    assert groups[0].topology.subtopologies[0].source_topics == ("wire-in",)
    assert groups[0].topology_description_status == 1  # NOT_STORED
    assert groups[1].error_code == ErrorCode.group_id_not_found

    # ListGroups shows its type.
    listed = codec.build(
        codec.request_class(ApiKey.LIST_GROUPS, 5),
        {"states_filter": [], "types_filter": ["streams"]},
    )
    names = [(g.group_id, g.group_type) for g in exchange(broker.bootstrap, listed).groups]
    # (other modules' streams groups may share the broker: judged by what the listing holds)
    assert ("wire-app", "streams") in names, names
    assert {kind for _, kind in names} == {"streams"}, names
    assert "wire-other" not in {group for group, _ in names}, names

    # Leaving.
    left = heartbeat(broker, member_epoch=-1)
    assert left.error_code == ErrorCode.none and left.member_epoch == -1


def test_streams_heartbeats_are_authorized_as_kafka_does(secured):
    """READ on the group (GROUP_AUTHORIZATION_FAILED), DESCRIBE on every topic of a joining
    member's topology (TOPIC_AUTHORIZATION_FAILED), and an internal topic the caller may not
    CREATE named in the MISSING_INTERNAL_TOPICS status instead of created."""
    from minibroker.security.authorizer.acls import Operation, ResourceType
    from tests.integration.authz import binding

    def on_group(operation):
        return binding("wire-app", operation, resource_type=ResourceType.GROUP)

    broker = secured(
        [
            on_group(Operation.READ),
            on_group(Operation.DESCRIBE),
            binding("wire-in", Operation.CREATE),
            binding("wire-in", Operation.DESCRIBE),
            binding("wire-b-store-changelog", Operation.DESCRIBE),
            binding("wire-b", Operation.READ, resource_type=ResourceType.GROUP),
            binding("wire-b", Operation.DESCRIBE, resource_type=ResourceType.GROUP),
        ]
    )
    create_topic(broker.bootstrap, "wire-in", 2)
    assert join(broker, group_id="elsewhere").error_code == ErrorCode.group_authorization_failed
    denied = join(broker)
    assert denied.error_code == ErrorCode.topic_authorization_failed
    assert denied.error_message == "Unauthorized topics wire-app-store-changelog"
    assert "wire-app-store-changelog" not in broker_topics(broker)
    # Allowed to describe its changelog but not to create it: named in the status.
    wait_for(lambda: coordinator_ready(broker, "wire-b"), 30, "the group coordinator")
    topology = {
        **TOPOLOGY,
        "subtopologies": [
            {
                **TOPOLOGY["subtopologies"][0],
                "state_changelog_topics": [
                    {"name": "wire-b-store-changelog", "partitions": 0, "replication_factor": 0,
                     "topic_configs": []}
                ],
            }
        ],
    }  # fmt: skip
    answer = join(broker, group_id="wire-b", topology=topology)
    assert answer.error_code == ErrorCode.none, answer
    details = [(s.status_code, s.status_detail) for s in answer.status]
    assert (3, "Unauthorized to CREATE on topics wire-b-store-changelog.") in details, details
    assert not answer.active_tasks  # none (the first assignment waits for the initial delay)
    assert "wire-b-store-changelog" not in broker_topics(broker)


def broker_topics(broker) -> set[str]:
    request = codec.build(
        codec.request_class(ApiKey.METADATA, 12),
        {"topics": None, "allow_auto_topic_creation": False,
         "include_topic_authorized_operations": False},
    )  # fmt: skip
    return {topic.name for topic in exchange(broker.bootstrap, request).topics}


def test_topology_description_updates_and_streams_group_configs(broker):
    """StreamsGroupTopologyDescriptionUpdate (93) is advertised at v0 and answered as a Kafka
    4.4 broker without a topology description plugin answers it; a group's streams.* configs
    are held to the broker's group.streams.* bounds (INVALID_CONFIG) and, once set, reach
    the member's heartbeat."""

    def call(api_key, version, data):
        with wire.connect(broker.bootstrap, 10, exact=True) as client:
            return client.request(api_key, version, data)

    versions = call(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
    )
    advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert advertised[93] == (0, 0)
    node = {"name": "KSTREAM-SOURCE-0000000000", "node_type": 1, "source_topics": ["wire-in"],
            "sink_topic": None, "stores": [], "successors": []}  # fmt: skip
    update = call(
        ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE,
        0,
        {
            "group_id": "wire-cfg",
            "member_id": "m1",
            "topology_epoch": 1,
            "topology_description": {
                "subtopologies": [{"subtopology_id": "0", "nodes": [node]}],
                "global_stores": [],
            },
        },
    )
    assert (update.error_code, update.error_message) == (
        ErrorCode.unsupported_version,
        "The broker has no streams group topology description plugin configured.",
    )

    def set_config(name: str, value: str):
        configs = [{"name": name, "value": value, "config_operation": 0}]
        resource = {"resource_type": 32, "resource_name": "wire-cfg", "configs": configs}
        answer = call(
            ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [resource], "validate_only": False}
        )
        return answer.responses[0].error_code, answer.responses[0].error_message

    assert set_config("streams.session.timeout.ms", "1000") == (
        ErrorCode.invalid_config,
        "streams.session.timeout.ms must be in the range 45000 to 60000 inclusive.",
    )
    assert set_config("streams.num.standby.replicas", "3") == (
        ErrorCode.invalid_config,
        "streams.num.standby.replicas must be less than or equal to 2",
    )
    assert set_config("streams.heartbeat.interval.ms", "6000")[0] == ErrorCode.none
    wait_for(lambda: coordinator_ready(broker, "wire-cfg"), 30, "the group coordinator")

    def interval():
        answer = join(broker, group_id="wire-cfg")
        assert answer.error_code == ErrorCode.none, answer
        return answer.heartbeat_interval_ms == 6000

    wait_for(interval, 30, "the group's heartbeat interval in the heartbeat")
