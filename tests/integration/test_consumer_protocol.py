"""The consumer group protocol (KIP-848) against a real broker process: confluent-kafka
(librdkafka) consumers with `group.protocol=consumer`, and raw ConsumerGroupHeartbeat and
ConsumerGroupDescribe requests for the answers to bad input.

One broker serves the whole module (the tests use distinct topics and groups).
"""

from __future__ import annotations

import datetime
import io
import struct
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest, OffsetFetchRequestGroup
from kio.static.primitive import i32, i32Timedelta, i64

from minibroker.protocol.consumer_group_heartbeat_v1 import (
    ConsumerGroupHeartbeatRequest as ConsumerGroupHeartbeatRequestV1,
)
from minibroker.testing import Cluster
from minibroker.tools import groups as groups_cli
from minibroker.tools import wire
from minibroker.tools.launcher import free_port
from tests.conftest import (
    coordinator_ready,
    create_topic,
    describe_consumer_group,
    encode,
    exchange,
    produce_numbers,
    scrape,
    wait_for,
)

PARTITIONS = 6
RECORDS = 600
SESSION_MS = 3000
METRICS_PORT = free_port()


# One broker for the module (the tests use distinct topics and groups); the plugin fails the
# module's last test if the broker does not shut down cleanly.
pytestmark = pytest.mark.minibroker(
    scope="module",
    server_properties={
        "metrics.port": METRICS_PORT,
        "offsets.topic.num.partitions": 3,
        "group.consumer.heartbeat.interval.ms": 500,
        "group.consumer.session.timeout.ms": SESSION_MS,
    },
)


@pytest.fixture
def broker(kafka_broker: Cluster) -> Cluster:
    """The plugin's broker, under the name the tests below take."""
    return kafka_broker


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


def heartbeat(bootstrap: str, group: str, **fields):
    values = {
        "group_id": group,
        "member_id": "",
        "member_epoch": i32(0),
        "rebalance_timeout": i32Timedelta.parse(datetime.timedelta(seconds=30)),
        "subscribed_topic_names": ("kip848-raw",),
        "topic_partitions": (),
    }
    values.update(fields)
    return exchange(bootstrap, ConsumerGroupHeartbeatRequest(**values))


def pump(consumers: list[Consumer], seen: dict) -> None:
    """Poll each consumer once, noting who read each record, and commit what was read."""
    for member in consumers:
        message = member.poll(0.1)
        if message is None or message.error() is not None:
            continue
        seen.setdefault((message.partition(), message.offset()), []).append(id(member))
        member.commit(message=message, asynchronous=True)


def drain(consumers: list[Consumer], seen: dict, until: int, timeout: float) -> None:
    """Poll until ``until`` distinct records were read."""
    wait_for(
        lambda: pump(consumers, seen) or len(seen) >= until,
        timeout,
        f"{until} records read",
        interval=0,
    )


def commit_all(consumers: list[Consumer]) -> None:
    """Commit what each member read, synchronously, before the membership changes (a
    partition that moves is read by its next owner from the committed offset)."""
    for member in consumers:
        try:
            member.commit(asynchronous=False)
        except KafkaException as error:
            assert error.args[0].code() == KafkaError._NO_OFFSET, error


def spread(consumers: list[Consumer], seen: dict, sizes: list[int], timeout: float) -> None:
    """Poll (reading records meanwhile) until the members hold ``sizes`` partitions."""

    def arrived():
        pump(consumers, seen)
        return sorted(len(member.assignment()) for member in consumers) == sorted(sizes)

    wait_for(arrived, timeout, f"partitions spread as {sizes}", interval=0)


def test_members_share_a_topic_and_read_every_record_once(broker: Cluster):
    topic, group = "kip848-share", "kip848-share-group"
    create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    coordinator_ready(broker.bootstrap_servers, group)
    members = [consumer(broker.bootstrap_servers, group) for _ in range(2)]
    for member in members:
        member.subscribe([topic])
    seen: dict = {}
    spread(members, seen, [3, 3], 30)
    produce_numbers(broker.bootstrap_servers, topic, 0, RECORDS)
    drain(members, seen, RECORDS, 30)
    assert len(seen) == RECORDS
    assert all(len(readers) == 1 for readers in seen.values()), "a record was read twice"
    commit_all(members)
    # A third member joins: the partitions move one member at a time, and new records are
    # read once more between the three.
    members.append(consumer(broker.bootstrap_servers, group))
    members[-1].subscribe([topic])

    spread(members, seen, [2, 2, 2], 30)
    produce_numbers(broker.bootstrap_servers, topic, RECORDS, RECORDS)
    drain(members, seen, 2 * RECORDS, 30)
    assert len(seen) == 2 * RECORDS
    assert all(len(readers) == 1 for readers in seen.values()), "a record was read twice"
    commit_all(members)
    # A member closed leaves the group (epoch -1) and its partitions move to the others.
    members.pop().close()

    spread(members, seen, [3, 3], 20)
    entry = describe_consumer_group(broker.bootstrap_servers, group)
    assert entry.error_code == 0 and entry.group_state == "Stable"
    assert len(entry.members) == 2 and entry.assignor_name == "uniform"
    assert sum(len(t.partitions) for m in entry.members for t in m.assignment.topic_partitions) == 6
    # `minibroker groups` lists and describes it through ConsumerGroupDescribe.
    out = io.StringIO()
    assert groups_cli.run(broker.bootstrap_servers, None, 20, out) == 0
    (row,) = [line.split() for line in out.getvalue().splitlines() if line.startswith(group)]
    assert row[2:] == ["consumer", "Stable", "consumer", "uniform", "2"]
    out = io.StringIO()
    assert groups_cli.run(broker.bootstrap_servers, group, 20, out) == 0
    assert (
        f"GROUP {group}: type consumer, state Stable, protocol type consumer, assignment"
        " strategy uniform, 2 members, coordinator"
    ) in out.getvalue()
    assert out.getvalue().count(f"{topic}:") == 2  # each member's assignment
    # The metrics count the group among the consumer-protocol groups, by state.
    samples = scrape(METRICS_PORT)
    stable = ("kafka_server_group_coordinator_metrics_consumer_group_count", (("state", "stable"),))
    assert samples[stable] >= 1
    rebalances = "kafka_server_group_coordinator_metrics_consumer_group_rebalance_total"
    assert samples[(rebalances, ())] >= 4  # two joins, a third, a leave
    listed = exchange(broker.bootstrap_servers, ListGroupsRequest(types_filter=("consumer",)))
    assert group in {g.group_id for g in listed.groups}
    assert {g.group_type for g in listed.groups} == {"consumer"}
    for member in members:
        member.close()


def test_bad_heartbeats_are_answered_with_kafkas_codes(broker: Cluster):
    group = "kip848-raw-group"
    create_topic(broker.bootstrap_servers, "kip848-raw", 2)
    coordinator_ready(broker.bootstrap_servers, group)
    bad_assignor = heartbeat(broker.bootstrap_servers, group, server_assignor="nope")
    assert bad_assignor.error_code == KafkaError.UNSUPPORTED_ASSIGNOR
    joined = heartbeat(broker.bootstrap_servers, group)
    assert joined.error_code == 0 and joined.member_epoch == 1
    assert sum(len(t.partitions) for t in joined.assignment.topic_partitions) == 2
    fenced = heartbeat(
        broker.bootstrap_servers,
        group,
        member_id=joined.member_id,
        member_epoch=i32(7),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=-1)),
        subscribed_topic_names=None,
        topic_partitions=None,
    )
    assert fenced.error_code == KafkaError.FENCED_MEMBER_EPOCH
    unknown = heartbeat(
        broker.bootstrap_servers,
        group,
        member_id=str(uuid.uuid4()),
        member_epoch=i32(3),
        subscribed_topic_names=None,
        topic_partitions=None,
    )
    assert unknown.error_code == KafkaError.UNKNOWN_MEMBER_ID
    invalid = heartbeat(broker.bootstrap_servers, group, subscribed_topic_names=())
    assert invalid.error_code == KafkaError.INVALID_REQUEST
    left = heartbeat(
        broker.bootstrap_servers,
        group,
        member_id=joined.member_id,
        member_epoch=i32(-1),
        subscribed_topic_names=None,
        topic_partitions=None,
    )
    assert left.error_code == 0 and left.member_epoch == -1


def test_commits_name_the_member_epoch_and_bad_classic_joins_are_refused(broker: Cluster):
    group, topic = "kip848-epochs", "kip848-epochs"
    create_topic(broker.bootstrap_servers, topic, 2)
    coordinator_ready(broker.bootstrap_servers, group)
    joined = heartbeat(
        broker.bootstrap_servers,
        group,
        member_id=str(uuid.uuid4()),
        subscribed_topic_names=(topic,),
    )
    assert joined.error_code == 0 and joined.member_epoch == 1

    def commit(epoch: int):
        answer = exchange(
            broker.bootstrap_servers,
            OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=i32(epoch),
                member_id=joined.member_id,
                topics=(
                    OffsetCommitRequestTopic(
                        name=topic,
                        partitions=(
                            OffsetCommitRequestPartition(
                                partition_index=i32(0),
                                committed_offset=i64(5),
                                committed_metadata="",
                            ),
                        ),
                    ),
                ),
            ),
        )
        return answer.topics[0].partitions[0].error_code

    assert commit(1) == 0
    assert commit(0) == KafkaError.STALE_MEMBER_EPOCH

    def fetch(epoch: int):
        answer = exchange(
            broker.bootstrap_servers,
            OffsetFetchRequest(
                groups=(
                    OffsetFetchRequestGroup(
                        group_id=group,
                        member_id=joined.member_id,
                        member_epoch=i32(epoch),
                        topics=None,
                    ),
                ),
            ),
        )
        return answer.groups[0]

    fetched = fetch(1)
    assert fetched.error_code == 0
    assert fetched.topics[0].partitions[0].committed_offset == 5
    assert fetch(0).error_code == KafkaError.STALE_MEMBER_EPOCH

    def join(member_id: str, protocol_type: str = "consumer"):
        return exchange(
            broker.bootstrap_servers,
            JoinGroupRequest(
                group_id=group,
                session_timeout=datetime.timedelta(seconds=10),
                rebalance_timeout=datetime.timedelta(seconds=10),
                member_id=member_id,
                protocol_type=protocol_type,
                protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
            ),
        )

    # A classic JoinGroup to a consumer group with members is served as Kafka 4 serves it
    # (see test_consumer_protocol_migration): a member id first; then a subscription that is
    # not the consumer protocol's is Kafka's UNKNOWN_SERVER_ERROR (an IllegalStateException
    # there), another protocol type INCONSISTENT_GROUP_PROTOCOL.
    required = join("")
    assert required.error_code == KafkaError.MEMBER_ID_REQUIRED
    assert join(required.member_id).error_code == KafkaError.UNKNOWN
    assert join("", "connect").error_code == KafkaError.INCONSISTENT_GROUP_PROTOCOL
    classic = exchange(
        broker.bootstrap_servers,
        DescribeGroupsRequest(groups=(group,), include_authorized_operations=False),
    )
    assert classic.groups[0].group_state == "Dead"  # a consumer group, as Kafka 4 answers


def test_a_member_that_stops_heartbeating_is_fenced_after_its_session(broker: Cluster):
    group, topic = "kip848-silent", "kip848-silent"
    create_topic(broker.bootstrap_servers, topic, 2)
    coordinator_ready(broker.bootstrap_servers, group)
    joined = heartbeat(broker.bootstrap_servers, group, subscribed_topic_names=(topic,))
    assert joined.error_code == 0
    started = time.monotonic()

    def described():
        return describe_consumer_group(broker.bootstrap_servers, group)

    assert [m.member_id for m in described().members] == [joined.member_id]
    empty = wait_for(
        lambda: (entry := described()).group_state == "Empty" and entry, 15, "the member fenced"
    )
    assert time.monotonic() - started >= SESSION_MS / 1000 - 0.5
    assert empty.members == () and empty.group_epoch == 2  # joined (1), fenced (2)
    # Its next heartbeat learns it is gone.
    late = heartbeat(
        broker.bootstrap_servers,
        group,
        member_id=joined.member_id,
        member_epoch=joined.member_epoch,
        subscribed_topic_names=None,
        topic_partitions=None,
    )
    assert late.error_code == KafkaError.UNKNOWN_MEMBER_ID


def test_a_regex_subscription_picks_up_a_new_topic(broker: Cluster):
    group = "kip848-regex-group"
    create_topic(broker.bootstrap_servers, "kip848-rx-a", 2)
    coordinator_ready(broker.bootstrap_servers, group)
    member = consumer(broker.bootstrap_servers, group)
    member.subscribe(["^kip848-rx-.*"])
    seen: dict = {}
    try:
        spread([member], seen, [2], 30)
        create_topic(broker.bootstrap_servers, "kip848-rx-b", 3)
        spread([member], seen, [5], 30)
        assert {tp.topic for tp in member.assignment()} == {"kip848-rx-a", "kip848-rx-b"}
        # New partitions of a subscribed topic reach the assignment too.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_partitions([NewPartitions("kip848-rx-a", 4)])["kip848-rx-a"].result(20)
        spread([member], seen, [7], 30)
    finally:
        member.close()
    bad = ConsumerGroupHeartbeatRequestV1(
        group_id=group,
        member_id=str(uuid.uuid4()),
        member_epoch=i32(0),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        subscribed_topic_regex="kip848-rx-(",
        topic_partitions=(),
    )
    # kio's reader knows no code above 127: the answer's error code is read by hand (after
    # the correlation id, the header's tagged fields and the throttle time).
    with wire.connect(broker.bootstrap_servers, 10, client_id="kip848-tests") as client:
        client.send_request(68, 1, encode(bad), correlation_id=7)
        frame = client.receive_frame()
    assert struct.unpack_from(">ibih", frame) == (7, 0, 0, KafkaError.INVALID_REGULAR_EXPRESSION)


def test_a_group_of_committed_offsets_moves_to_the_consumer_protocol(broker: Cluster):
    """An empty classic group (here: offsets committed without membership) becomes a
    consumer-protocol group when a member heartbeats, and the member reads on from the
    committed offsets; an empty consumer group becomes classic again on a JoinGroup."""
    group, topic = "kip848-upgrade", "kip848-upgrade"
    create_topic(broker.bootstrap_servers, topic, 1)
    coordinator_ready(broker.bootstrap_servers, group)
    produce_numbers(broker.bootstrap_servers, topic, 0, 20)
    committed = exchange(
        broker.bootstrap_servers,
        OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=i32(-1),
            member_id="",
            topics=(
                OffsetCommitRequestTopic(
                    name=topic,
                    partitions=(
                        OffsetCommitRequestPartition(
                            partition_index=i32(0), committed_offset=i64(15), committed_metadata=""
                        ),
                    ),
                ),
            ),
        ),
    )
    assert committed.topics[0].partitions[0].error_code == 0
    member = consumer(broker.bootstrap_servers, group)
    member.subscribe([topic])
    seen: dict = {}
    try:
        drain([member], seen, 5, 30)
    finally:
        member.close()
    assert sorted(offset for _, offset in seen) == [15, 16, 17, 18, 19]
    listed = exchange(broker.bootstrap_servers, ListGroupsRequest(types_filter=("consumer",)))
    assert group in {g.group_id for g in listed.groups}
    # Empty again (the member left): a classic JoinGroup turns it back into a classic group.
    join = exchange(
        broker.bootstrap_servers,
        JoinGroupRequest(
            group_id=group,
            session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10),
            member_id="",
            protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
        ),
    )
    assert join.error_code == KafkaError.MEMBER_ID_REQUIRED
    listed = exchange(broker.bootstrap_servers, ListGroupsRequest(types_filter=("classic",)))
    assert group in {g.group_id for g in listed.groups}


def test_a_static_member_gets_its_partitions_back_after_a_restart(broker: Cluster):
    topic, group = "kip848-static", "kip848-static-group"
    create_topic(broker.bootstrap_servers, topic, 4)
    coordinator_ready(broker.bootstrap_servers, group)
    members = [
        consumer(broker.bootstrap_servers, group, **{"group.instance.id": f"i{n}"}) for n in (1, 2)
    ]
    for member in members:
        member.subscribe([topic])
    seen: dict = {}
    spread(members, seen, [2, 2], 30)
    before = {tp.partition for tp in members[0].assignment()}
    kept = {tp.partition for tp in members[1].assignment()}

    def described() -> dict:
        entry = describe_consumer_group(broker.bootstrap_servers, group)
        return {member.instance_id: member for member in entry.members}

    # Closed, a static member leaves with epoch -2: its partitions wait for it. The window
    # starts once the coordinator has the leave (before that, nothing could have moved):
    # two seconds are four of the other member's heartbeats (500 ms), each of which would
    # have brought it the partitions had the coordinator moved them.
    members[0].close()

    def left() -> bool:
        group = described()
        assert "i1" in group, "the static member was removed instead of kept at epoch -2"
        return group["i1"].member_epoch == -2

    wait_for(left, 10, "the coordinator to see the leave")
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        pump(members[1:], seen)
        assert len(members[1].assignment()) == 2, "the static member's partitions moved"
    # And the coordinator's own view, which the client's could lag: nothing was moved.
    after = described()
    assert after["i1"].member_epoch == -2 and after["i2"].member_epoch > 0
    targeted = {p for t in after["i2"].target_assignment.topic_partitions for p in t.partitions}
    assert targeted == kept, "the coordinator moved the static member's partitions"
    members[0] = consumer(broker.bootstrap_servers, group, **{"group.instance.id": "i1"})
    members[0].subscribe([topic])
    try:
        spread(members, seen, [2, 2], 30)
        assert {tp.partition for tp in members[0].assignment()} == before
    finally:
        for member in members:
            member.close()
