"""Share groups' membership (KIP-932) against a real broker process: confluent-kafka's
(librdkafka 2.16) ShareConsumer joins through ShareGroupHeartbeat, and the group is seen
through raw ShareGroupDescribe and ListGroups requests (confluent-kafka's AdminClient has no
share-group describe). Records do not flow yet (ShareFetch is not served here): nothing
below asserts a delivery.

The tests run on the worker's shared broker (tests/conftest.py's SHARED_BROKER, the pytest
plugin's `kafka_broker`), each with topics and groups of its own (share-groups-..., sg-...),
judging a listing by what it contains.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, ShareConsumer
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.static.primitive import i8, i32, i32Timedelta

from minibroker.protocol import share_group_offsets_schemas as s
from minibroker.protocol.errors import Error
from minibroker.protocol.schemas import ShareGroupDescribeRequestV1, ShareGroupHeartbeatRequestV1
from minibroker.testing import Cluster
from tests.conftest import (
    SHARED_BROKER,
    coordinator_ready,
    create_topic,
    exchange,
    set_group_configs,
    wait_for,
)

PARTITIONS = 6
BAD_INPUT_TOPIC = "share-groups-bad-input"

pytestmark = SHARED_BROKER


@pytest.fixture
def broker(kafka_broker: Cluster) -> Cluster:
    """The shared broker, under the name the tests take."""
    return kafka_broker


def describe(bootstrap: str, group_id: str):
    answer = exchange(
        bootstrap,
        ShareGroupDescribeRequestV1(group_ids=(group_id,), include_authorized_operations=True),
    )
    [group] = answer.groups
    return group


def heartbeat(bootstrap: str, group_id: str, member_id: str, epoch: int, topics=(BAD_INPUT_TOPIC,)):
    return exchange(
        bootstrap,
        ShareGroupHeartbeatRequestV1(
            group_id=group_id,
            member_id=member_id,
            member_epoch=i32(epoch),
            subscribed_topic_names=topics,
        ),
    )


def listed(bootstrap: str, *types: str) -> dict[str, tuple[str, str, str]]:
    answer = exchange(bootstrap, ListGroupsRequest(states_filter=(), types_filter=types))
    assert answer.error_code == Error.NONE
    return {g.group_id: (g.protocol_type, g.group_state, g.group_type) for g in answer.groups}


def test_three_share_consumers_get_the_partitions(broker):
    """Three ShareConsumers of one group: the broker's ShareGroupDescribe shows three members
    whose assignments cover the topic's six partitions, two each (the simple assignor), at
    one assignment epoch; ListGroups lists the group as a share group; DeleteGroups refuses
    it while it has members and deletes it once they left."""
    topic, group_id = "share-groups-three", "share-group-three"
    create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    consumers = [
        ShareConsumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": group_id,
                "client.id": f"sc{i}",
            }
        )
        for i in range(3)
    ]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])

        def three_members_assigned():
            for consumer in consumers:
                consumer.poll(0.2)  # nothing comes (no ShareFetch yet): it only drives the client
            group = describe(broker.bootstrap_servers, group_id)
            if group.error_code != Error.NONE or len(group.members) != 3:
                return None
            held = [
                {(t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions}
                for m in group.members
            ]
            epochs = {m.member_epoch for m in group.members}
            if epochs != {group.assignment_epoch} or not all(held):
                return None
            return group, held

        group, held = wait_for(three_members_assigned, 60, "three members with partitions")
        assert group.group_state == "Stable" and group.assignor_name == "simple"
        assert sorted(m.client_id for m in group.members) == ["sc0", "sc1", "sc2"]
        assert [len(parts) for parts in held] == [2, 2, 2]
        assert set().union(*held) == {(topic, p) for p in range(PARTITIONS)}
        assert all(m.subscribed_topic_names == (topic,) for m in group.members)
        assert group.authorized_operations != -(2**31)
        # ListGroups: the share group under the "share" type filter only.
        assert listed(broker.bootstrap_servers, "share")[group_id] == ("share", "Stable", "share")
        assert group_id not in listed(broker.bootstrap_servers, "consumer", "classic")
        refused = exchange(broker.bootstrap_servers, DeleteGroupsRequest(groups_names=(group_id,)))
        assert refused.results[0].error_code == Error.NON_EMPTY_GROUP
    finally:
        for consumer in consumers:
            consumer.close()
    # close() leaves the group (member epoch -1): empty, then deletable.
    wait_for(
        lambda: describe(broker.bootstrap_servers, group_id).group_state == "Empty",
        30,
        "the group empty",
    )
    deleted = exchange(broker.bootstrap_servers, DeleteGroupsRequest(groups_names=(group_id,)))
    assert deleted.results[0].error_code == Error.NONE
    assert describe(broker.bootstrap_servers, group_id).error_code == Error.GROUP_ID_NOT_FOUND


def test_share_group_bad_input_and_one_group_namespace(broker):
    """Kafka's answers: an empty or over-long member id is INVALID_REQUEST, a first heartbeat
    without topics INVALID_REQUEST, a stale epoch FENCED_MEMBER_EPOCH; a share group's id is
    INCONSISTENT_GROUP_PROTOCOL to JoinGroup, a classic group's GROUP_ID_NOT_FOUND to
    ShareGroupHeartbeat and ShareGroupDescribe; the broker keeps serving the group."""
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, BAD_INPUT_TOPIC, 2)
    # The first heartbeat below is answered by the group's coordinator: wait until it has one
    # (the offsets topic may not exist yet when this test runs first).
    coordinator_ready(bootstrap, "sg-bad")
    for member_id in ("", "x" * 37):
        answer = heartbeat(bootstrap, "sg-bad", member_id, 0)
        assert (answer.error_code, answer.error_message) == (
            Error.INVALID_REQUEST,
            "Invalid member id in the request.",
        )
    no_topics = heartbeat(bootstrap, "sg-bad", "m1", 0, topics=None)
    assert no_topics.error_code == Error.INVALID_REQUEST
    member_id = str(uuid.uuid4())
    joined = heartbeat(bootstrap, "sg-bad", member_id, 0)
    assert joined.error_code == Error.NONE and joined.member_epoch == 1
    assert joined.heartbeat_interval == datetime.timedelta(seconds=5)
    assert sorted(joined.assignment.topic_partitions[0].partitions) == [0, 1]
    stale = heartbeat(bootstrap, "sg-bad", member_id, 7, topics=None)
    assert stale.error_code == Error.FENCED_MEMBER_EPOCH

    join = JoinGroupRequest(
        group_id="sg-bad",
        session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
        reason=None,
    )
    assert exchange(bootstrap, join).error_code == Error.INCONSISTENT_GROUP_PROTOCOL
    classic = exchange(bootstrap, dataclasses.replace(join, group_id="classic-g"))
    assert classic.error_code in (Error.NONE, Error.MEMBER_ID_REQUIRED)
    other = heartbeat(bootstrap, "classic-g", str(uuid.uuid4()), 0)
    assert (other.error_code, other.error_message) == (
        Error.GROUP_ID_NOT_FOUND,
        "Group classic-g is not a share group.",
    )
    assert describe(bootstrap, "classic-g").error_code == Error.GROUP_ID_NOT_FOUND
    # Still served: the member heartbeats on at its epoch.
    again = heartbeat(bootstrap, "sg-bad", member_id, 1, topics=None)
    assert again.error_code == Error.NONE and again.member_epoch == 1


def test_share_group_offsets_admin_bad_input(broker):
    """The admin APIs' answers to bad input, as Kafka 4.4 gives them, on the wire:
    AlterShareGroupOffsets and DeleteShareGroupOffsets of a group with a member are
    NON_EMPTY_GROUP; an unknown group is GROUP_ID_NOT_FOUND to DeleteShareGroupOffsets, a
    classic group's id GROUP_ID_NOT_FOUND to both; an unknown topic or partition is
    UNKNOWN_TOPIC_OR_PARTITION for it alone; DescribeShareGroupOffsets (v0 and v1) answers the
    group's initialized share partitions. The group and the broker are served on."""
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "share-groups-admin", 2)
    member_id = str(uuid.uuid4())

    def join_admin_group():
        # As a client does: FindCoordinator first (it creates the offsets topic when this
        # test runs alone), then the heartbeat, until the coordinator has loaded.
        exchange(bootstrap, FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("sg-admin",)))
        answer = heartbeat(bootstrap, "sg-admin", member_id, 0, topics=("share-groups-admin",))
        return answer if answer.error_code == Error.NONE else None

    wait_for(join_admin_group, 30.0, "the share group's coordinator")

    def alter(group_id, topics):
        return exchange(
            bootstrap,
            s.AlterShareGroupOffsetsRequestV0(
                group_id=group_id,
                topics=tuple(
                    s.AlterRequestTopicV0(
                        topic_name=name,
                        partitions=tuple(
                            s.AlterRequestPartitionV0(partition_index=i32(p), start_offset=o)
                            for p, o in parts
                        ),
                    )
                    for name, parts in topics
                ),
            ),
        )

    def delete(group_id, names):
        return exchange(
            bootstrap,
            s.DeleteShareGroupOffsetsRequestV0(
                group_id=group_id,
                topics=tuple(s.DeleteRequestTopicV0(topic_name=n) for n in names),
            ),
        )

    def offsets(version, group_id, topics=None):
        request = (
            s.DescribeShareGroupOffsetsRequestV1
            if version
            else s.DescribeShareGroupOffsetsRequestV0
        )
        group = s.DescribeRequestGroupV1 if version else s.DescribeRequestGroupV0
        topic = s.DescribeRequestTopicV1 if version else s.DescribeRequestTopicV0
        asked = None
        if topics is not None:
            asked = tuple(topic(topic_name=n, partitions=tuple(map(i32, p))) for n, p in topics)
        answer = exchange(bootstrap, request(groups=(group(group_id=group_id, topics=asked),)))
        [described] = answer.groups
        return described

    not_empty = "The group is not empty."
    refused = alter("sg-admin", [("share-groups-admin", [(0, 0)])])
    assert (refused.error_code, refused.error_message, refused.responses) == (
        Error.NON_EMPTY_GROUP,
        not_empty,
        (),
    )
    refused = delete("sg-admin", ["share-groups-admin"])
    assert (refused.error_code, refused.error_message) == (Error.NON_EMPTY_GROUP, not_empty)
    unknown = delete("sg-nosuch", ["share-groups-admin"])
    assert (unknown.error_code, unknown.error_message) == (
        Error.GROUP_ID_NOT_FOUND,
        "Group sg-nosuch not found.",
    )
    join = JoinGroupRequest(
        group_id="classic-admin",
        session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
        reason=None,
    )
    assert exchange(bootstrap, join).error_code in (Error.NONE, Error.MEMBER_ID_REQUIRED)
    for answer in (alter("classic-admin", []), delete("classic-admin", ["share-groups-admin"])):
        assert (answer.error_code, answer.error_message) == (
            Error.GROUP_ID_NOT_FOUND,
            "Group classic-admin is not a share group.",
        )
    # The member's heartbeat initialized both share partitions: described, no start offset yet.
    for version in (0, 1):
        described = offsets(version, "sg-admin")
        assert described.error_code == Error.NONE
        [topic] = described.topics
        assert topic.topic_name == "share-groups-admin"
        assert [(p.partition_index, p.start_offset) for p in topic.partitions] == [(0, -1), (1, -1)]

    left = heartbeat(bootstrap, "sg-admin", member_id, -1, topics=None)
    assert left.error_code == Error.NONE
    # Empty: partition 0 is altered, the unknown topic and partition are refused alone.
    altered = alter(
        "sg-admin", [("share-groups-admin", [(0, 0), (5, 0)]), ("share-groups-nope", [(0, 0)])]
    )
    assert altered.error_code == Error.NONE
    codes = {
        (t.topic_name, p.partition_index): p.error_code
        for t in altered.responses
        for p in t.partitions
    }
    assert codes == {
        ("share-groups-admin", 0): Error.NONE,
        ("share-groups-admin", 5): Error.UNKNOWN_TOPIC_OR_PARTITION,
        ("share-groups-nope", 0): Error.UNKNOWN_TOPIC_OR_PARTITION,
    }
    described = offsets(1, "sg-admin", [("share-groups-admin", [0]), ("share-groups-nope", [0])])
    starts = {
        (t.topic_name, p.partition_index): (p.start_offset, p.lag)
        for t in described.topics
        for p in t.partitions
    }
    assert starts == {("share-groups-admin", 0): (0, -1), ("share-groups-nope", 0): (-1, -1)}
    deleted = delete("sg-admin", ["share-groups-nope"])
    assert deleted.error_code == Error.NONE
    assert [(t.topic_name, t.error_code) for t in deleted.responses] == [
        ("share-groups-nope", Error.UNKNOWN_TOPIC_OR_PARTITION)
    ]
    # Nothing else disturbed: the group is listed and a member joins it again.
    assert listed(bootstrap, "share")["sg-admin"][1] == "Empty"
    again = heartbeat(bootstrap, "sg-admin", member_id, 0, topics=("share-groups-admin",))
    assert again.error_code == Error.NONE and again.member_epoch > 1
    assert heartbeat(bootstrap, "sg-admin", member_id, -1, topics=None).error_code == Error.NONE


def test_a_share_groups_heartbeat_interval_is_its_own(broker):
    """The group config share.heartbeat.interval.ms (and share.session.timeout.ms) applies to
    the group's members, as Kafka 4.4's shareGroupHeartbeatIntervalMs reads it at each
    ShareGroupHeartbeat: set to 7 s, a joining member is told 7 s, where the broker's
    group.share.heartbeat.interval.ms is 5 s; a value outside the broker's
    group.share.min/max.heartbeat.interval.ms is INVALID_CONFIG."""
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "share-groups-own-interval", 1)
    coordinator_ready(bootstrap, "sg-own-interval")
    set_group_configs(
        bootstrap,
        "sg-own-interval",
        {"share.heartbeat.interval.ms": "7000", "share.session.timeout.ms": "50000"},
    )
    with pytest.raises(KafkaException) as refused:
        set_group_configs(bootstrap, "sg-own-interval", {"share.heartbeat.interval.ms": "16000"})
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    joined = heartbeat(
        bootstrap,
        "sg-own-interval",
        str(uuid.uuid4()),
        0,
        topics=("share-groups-own-interval",),
    )
    assert joined.error_code == Error.NONE
    assert joined.heartbeat_interval == datetime.timedelta(seconds=7)
