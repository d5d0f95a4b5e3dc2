"""Share groups' membership (KIP-932) against a real broker process: confluent-kafka's
(librdkafka 2.16) ShareConsumer joins through ShareGroupHeartbeat, and the group is seen
through raw ShareGroupDescribe and ListGroups requests (confluent-kafka's AdminClient has no
share-group describe). Records do not flow yet (ShareFetch is not served here): nothing
below asserts a delivery.

One broker serves the whole module (the tests use distinct topics and groups).
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid

import pytest
from confluent_kafka import ShareConsumer
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.static.primitive import i8, i32, i32Timedelta

from minibroker.protocol import share_group_offsets_schemas as s
from minibroker.protocol.errors import Error
from minibroker.protocol.schemas import ShareGroupDescribeRequestV1, ShareGroupHeartbeatRequestV1
from minibroker.tools.launcher import BrokerProcess
from tests.conftest import create_topic, exchange, wait_for

PARTITIONS = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> BrokerProcess:
    log_dir = tmp_path_factory.mktemp("kip932") / "data"
    broker = BrokerProcess.start(
        node_id=1,
        log_dir=log_dir,
        overrides={"offsets.topic.num.partitions": 3},
    )
    broker.wait_ready(20.0)
    yield broker
    assert broker.stop() == 0, broker.log_tail()


def describe(bootstrap: str, group_id: str):
    answer = exchange(
        bootstrap,
        ShareGroupDescribeRequestV1(group_ids=(group_id,), include_authorized_operations=True),
    )
    [group] = answer.groups
    return group


def heartbeat(bootstrap: str, group_id: str, member_id: str, epoch: int, topics=("t",)):
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
    topic, group_id = "share-three", "share-group-three"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    consumers = [
        ShareConsumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": group_id, "client.id": f"sc{i}"}
        )
        for i in range(3)
    ]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])

        def three_members_assigned():
            for consumer in consumers:
                consumer.poll(0.2)  # nothing comes (no ShareFetch yet): it only drives the client
            group = describe(broker.bootstrap, group_id)
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
        assert listed(broker.bootstrap, "share")[group_id] == ("share", "Stable", "share")
        assert group_id not in listed(broker.bootstrap, "consumer", "classic")
        refused = exchange(broker.bootstrap, DeleteGroupsRequest(groups_names=(group_id,)))
        assert refused.results[0].error_code == Error.NON_EMPTY_GROUP
    finally:
        for consumer in consumers:
            consumer.close()
    # close() leaves the group (member epoch -1): empty, then deletable.
    wait_for(
        lambda: describe(broker.bootstrap, group_id).group_state == "Empty", 30, "the group empty"
    )
    deleted = exchange(broker.bootstrap, DeleteGroupsRequest(groups_names=(group_id,)))
    assert deleted.results[0].error_code == Error.NONE
    assert describe(broker.bootstrap, group_id).error_code == Error.GROUP_ID_NOT_FOUND


def test_share_group_bad_input_and_one_group_namespace(broker):
    """Kafka's answers: an empty or over-long member id is INVALID_REQUEST, a first heartbeat
    without topics INVALID_REQUEST, a stale epoch FENCED_MEMBER_EPOCH; a share group's id is
    INCONSISTENT_GROUP_PROTOCOL to JoinGroup, a classic group's GROUP_ID_NOT_FOUND to
    ShareGroupHeartbeat and ShareGroupDescribe; the broker keeps serving the group."""
    create_topic(broker.bootstrap, "t", 2)
    bootstrap = broker.bootstrap
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
    create_topic(broker.bootstrap, "t-admin", 2)
    bootstrap = broker.bootstrap
    member_id = str(uuid.uuid4())

    def join_admin_group():
        # As a client does: FindCoordinator first (it creates the offsets topic when this
        # test runs alone), then the heartbeat, until the coordinator has loaded.
        exchange(bootstrap, FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("sg-admin",)))
        answer = heartbeat(bootstrap, "sg-admin", member_id, 0, topics=("t-admin",))
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
    refused = alter("sg-admin", [("t-admin", [(0, 0)])])
    assert (refused.error_code, refused.error_message, refused.responses) == (
        Error.NON_EMPTY_GROUP,
        not_empty,
        (),
    )
    refused = delete("sg-admin", ["t-admin"])
    assert (refused.error_code, refused.error_message) == (Error.NON_EMPTY_GROUP, not_empty)
    unknown = delete("sg-nosuch", ["t-admin"])
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
    for answer in (alter("classic-admin", []), delete("classic-admin", ["t-admin"])):
        assert (answer.error_code, answer.error_message) == (
            Error.GROUP_ID_NOT_FOUND,
            "Group classic-admin is not a share group.",
        )
    # The member's heartbeat initialized both share partitions: described, no start offset yet.
    for version in (0, 1):
        described = offsets(version, "sg-admin")
        assert described.error_code == Error.NONE
        [topic] = described.topics
        assert topic.topic_name == "t-admin"
        assert [(p.partition_index, p.start_offset) for p in topic.partitions] == [(0, -1), (1, -1)]

    left = heartbeat(bootstrap, "sg-admin", member_id, -1, topics=None)
    assert left.error_code == Error.NONE
    # Empty: partition 0 is altered, the unknown topic and partition are refused alone.
    altered = alter("sg-admin", [("t-admin", [(0, 0), (5, 0)]), ("t-nope", [(0, 0)])])
    assert altered.error_code == Error.NONE
    codes = {
        (t.topic_name, p.partition_index): p.error_code
        for t in altered.responses
        for p in t.partitions
    }
    assert codes == {
        ("t-admin", 0): Error.NONE,
        ("t-admin", 5): Error.UNKNOWN_TOPIC_OR_PARTITION,
        ("t-nope", 0): Error.UNKNOWN_TOPIC_OR_PARTITION,
    }
    described = offsets(1, "sg-admin", [("t-admin", [0]), ("t-nope", [0])])
    starts = {
        (t.topic_name, p.partition_index): (p.start_offset, p.lag)
        for t in described.topics
        for p in t.partitions
    }
    assert starts == {("t-admin", 0): (0, -1), ("t-nope", 0): (-1, -1)}
    deleted = delete("sg-admin", ["t-nope"])
    assert deleted.error_code == Error.NONE
    assert [(t.topic_name, t.error_code) for t in deleted.responses] == [
        ("t-nope", Error.UNKNOWN_TOPIC_OR_PARTITION)
    ]
    # Nothing else disturbed: the group is listed and a member joins it again.
    assert listed(bootstrap, "share")["sg-admin"][1] == "Empty"
    again = heartbeat(bootstrap, "sg-admin", member_id, 0, topics=("t-admin",))
    assert again.error_code == Error.NONE and again.member_epoch > 1
    assert heartbeat(bootstrap, "sg-admin", member_id, -1, topics=None).error_code == Error.NONE
