"""The streams group's rules (broker/coordinator/group/streams_group.py), with time passed in."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.coordinator.group import streams_log_format
from minibroker.coordinator.group.consumer_group import HeartbeatError
from minibroker.coordinator.group.streams_assignor import MemberAssignment
from minibroker.coordinator.group.streams_group import (
    MemberState,
    Status,
    StreamsGroup,
    StreamsGroupState,
    StreamsHeartbeatRequest,
    StreamsSettings,
    configure,
    validate_topology,
)
from minibroker.coordinator.group.streams_log_format import (
    CopartitionGroup,
    RecordKind,
    Subtopology,
    TopicInfo,
    Topology,
)
from minibroker.protocol.errors import Error

SESSION = StreamsSettings().session_timeout_ms

# Word count: subtopology 0 reads `input` and writes the repartition topic; subtopology 1
# reads it and keeps a count store (a changelog).
WORD_COUNT = Topology(
    1,
    (
        Subtopology("0", source_topics=("input",), repartition_sink_topics=("app-rep",)),
        Subtopology(
            "1",
            repartition_source_topics=(TopicInfo("app-rep"),),
            state_changelog_topics=(TopicInfo("app-changelog"),),
        ),
    ),
)


def cluster(**topics):
    return lambda name: topics.get(name.replace("-", "_"))


READY = cluster(input=4, app_rep=4, app_changelog=4)


def join(group, member_id, now=0, topology=WORD_COUNT, topics=READY, **changes):
    changes.setdefault("process_id", f"proc-{member_id}")
    request = StreamsHeartbeatRequest(
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=1000,
        topology=topology,
        **changes,
    )
    return group.heartbeat(request, topics, now)


def beat(group, member_id, epoch, now=0, topics=READY, owned=None, **changes):
    member = group.members.get(member_id)
    if owned is None and member is not None:
        owned = member.assigned
    request = StreamsHeartbeatRequest(
        member_id=member_id,
        member_epoch=epoch,
        active=set(owned.active) if owned is not None else None,
        standby=set(owned.standby) if owned is not None else None,
        warmup=set(owned.warmup) if owned is not None else None,
        **changes,
    )
    return group.heartbeat(request, topics, now)


def new_group(**settings):
    return StreamsGroup("app", StreamsSettings(**settings))


def settle(group, now=0, rounds=6):
    """Heartbeat every member (reporting what it holds) until the group is stable."""
    for _ in range(rounds):
        for member_id in sorted(group.members):
            beat(group, member_id, group.members[member_id].member_epoch, now)
    assert group.state == StreamsGroupState.STABLE


def test_first_member_gets_every_task_and_records():
    group = new_group()
    result, records = join(group, "a")
    assert result.error == Error.NONE and result.member_epoch == 1
    assert result.active == {("0", p) for p in range(4)} | {("1", p) for p in range(4)}
    assert result.statuses == []
    kinds = [key.kind for key, _ in records]
    assert kinds == [
        RecordKind.MEMBER_METADATA,
        RecordKind.TOPOLOGY,
        RecordKind.GROUP_METADATA,
        RecordKind.TARGET_MEMBER,
        RecordKind.TARGET_METADATA,
        RecordKind.CURRENT_ASSIGNMENT,
    ]
    assert group.state == StreamsGroupState.STABLE


def test_second_member_revoke_before_assign():
    group = new_group(max_warmup_replicas=0)
    join(group, "a")
    result, _ = join(group, "b", now=10)
    # b's tasks are still a's: nothing yet, but b is at the new epoch, waiting (UNRELEASED).
    assert result.member_epoch == 2 and result.active == set()
    assert group.members["b"].state == MemberState.UNRELEASED_TASKS
    # a must revoke half first, at its old epoch.
    result, _ = beat(group, "a", 1, now=20)
    assert result.member_epoch == 1 and len(result.active) == 4
    assert group.members["a"].state == MemberState.UNREVOKED_TASKS
    # Until a reports the tasks gone, b gets nothing.
    result, _ = beat(group, "b", 2, now=30)
    assert result.active is None and group.members["b"].assigned.active == set()
    # a reports it gave them up: a reaches epoch 2; then b gets them.
    kept = group.members["a"].assigned
    result, _ = beat(group, "a", 1, now=40, owned=kept)
    assert result.member_epoch == 2 and group.members["a"].state == MemberState.STABLE
    result, _ = beat(group, "b", 2, now=50)
    assert len(result.active) == 4
    assert not (group.members["a"].assigned.active & group.members["b"].assigned.active)
    assert group.state == StreamsGroupState.STABLE


def test_missing_source_topics_and_internal_topics_to_create():
    group = new_group()
    result, _ = join(group, "a", topics=cluster())
    assert [s for s, _ in result.statuses] == [Status.MISSING_SOURCE_TOPICS]
    assert result.active == set() and group.state == StreamsGroupState.NOT_READY
    result, _ = beat(group, "a", result.member_epoch, topics=cluster(input=3))
    assert [s for s, _ in result.statuses] == [Status.MISSING_INTERNAL_TOPICS]
    assert result.topics_to_create == {
        "app-rep": TopicInfo("app-rep", 3),
        "app-changelog": TopicInfo("app-changelog", 3),
    }
    epoch = group.group_epoch
    ready = cluster(input=3, app_rep=3, app_changelog=3)
    result, _ = beat(group, "a", result.member_epoch, topics=ready)
    assert result.statuses == [] and len(result.active) == 6
    assert group.group_epoch == epoch + 1  # the partition counts changed


def test_incorrectly_partitioned_topics():
    result = configure(WORD_COUNT, cluster(input=4, app_rep=4, app_changelog=2))
    assert [s for s, _ in result.statuses] == [Status.INCORRECTLY_PARTITIONED_TOPICS]
    assert not result.partition_counts
    copartitioned = Topology(
        1,
        (
            Subtopology(
                "0",
                source_topics=("left", "right"),
                copartition_groups=(CopartitionGroup(source_topics=(0, 1)),),
            ),
        ),
    )
    result = configure(copartitioned, cluster(left=2, right=3))
    assert [s for s, _ in result.statuses] == [Status.INCORRECTLY_PARTITIONED_TOPICS]
    assert configure(copartitioned, cluster(left=3, right=3)).partition_counts == {"0": 3}


def test_invalid_topologies():
    bad = Topology(
        1,
        (
            Subtopology("0", source_topics=("x",), repartition_sink_topics=("x",)),
            Subtopology("1", repartition_source_topics=(TopicInfo("x"),)),
        ),
    )
    with pytest.raises(HeartbeatError) as caught:
        validate_topology(bad)
    assert caught.value.error == Error.STREAMS_INVALID_TOPOLOGY
    group = new_group()
    with pytest.raises(HeartbeatError) as caught:
        join(group, "a", topology=bad)
    assert caught.value.error == Error.STREAMS_INVALID_TOPOLOGY and not group.members


def test_topology_epochs():
    group = new_group()
    join(group, "a")
    other = Topology(1, (Subtopology("0", source_topics=("input",)),))
    with pytest.raises(HeartbeatError) as caught:
        join(group, "b", topology=other)
    assert caught.value.error == Error.STREAMS_INVALID_TOPOLOGY_EPOCH
    assert set(group.members) == {"a"}
    older = Topology(0, WORD_COUNT.subtopologies)
    result, _ = join(group, "c", topology=older)
    assert [s for s, _ in result.statuses] == [Status.STALE_TOPOLOGY]
    newer = Topology(2, WORD_COUNT.subtopologies)
    epoch = group.group_epoch
    join(group, "d", topology=newer)
    assert group.topology_epoch == 2 and group.group_epoch == epoch + 1


def test_epoch_errors_and_unknown_member_and_full_group():
    group = new_group(max_size=1)
    join(group, "a")
    for epoch in (5,):
        with pytest.raises(HeartbeatError) as caught:
            beat(group, "a", epoch)
        assert caught.value.error == Error.FENCED_MEMBER_EPOCH
    with pytest.raises(HeartbeatError) as caught:
        beat(group, "zz", 1)
    assert caught.value.error == Error.UNKNOWN_MEMBER_ID
    with pytest.raises(HeartbeatError) as caught:
        join(group, "b")
    assert caught.value.error == Error.GROUP_MAX_SIZE_REACHED
    with pytest.raises(HeartbeatError) as caught:
        beat(group, "a", -3)
    assert caught.value.error == Error.INVALID_REQUEST


def test_lost_response_previous_epoch_is_accepted():
    group = new_group()
    join(group, "a")
    join(group, "b")
    settle(group)
    a = group.members["a"]
    assert a.previous_member_epoch < a.member_epoch
    held = a.assigned
    result, _ = beat(group, "a", a.previous_member_epoch, owned=held)
    assert result.error == Error.NONE
    # The previous epoch with a task it does not have: fenced.
    extra = MemberAssignment(active=held.active | {("9", 9)})
    with pytest.raises(HeartbeatError) as caught:
        beat(group, "a", a.previous_member_epoch, owned=extra)
    assert caught.value.error == Error.FENCED_MEMBER_EPOCH


def test_leave_and_session_timeout():
    group = new_group()
    join(group, "a")
    join(group, "b")
    settle(group)
    epoch = group.group_epoch
    result, records = beat(group, "b", -1)
    assert result.member_epoch == -1 and set(group.members) == {"a"}
    assert group.group_epoch == epoch + 1
    assert any(v is None and k.member_id == "b" for k, v in records)
    settle(group, now=100)
    assert len(group.members["a"].assigned.active) == 8
    # a's session runs out without a heartbeat.
    assert group.expire(100 + SESSION - 1) == []
    records = group.expire(100 + SESSION)
    assert not group.members and group.state == StreamsGroupState.EMPTY
    assert {k.kind for k, v in records if v is None} >= {RecordKind.MEMBER_METADATA}


def test_static_member_leaves_and_comes_back():
    group = new_group()
    join(group, "a", instance_id="i1")
    join(group, "b")
    settle(group)
    tasks = set(group.members["a"].assigned.active)
    epoch = group.group_epoch
    beat(group, "a", -2, instance_id="i1")
    assert group.group_epoch == epoch and "a" in group.members  # it keeps its tasks
    result, _ = join(group, "a2", instance_id="i1", now=10)
    assert "a" not in group.members and result.active == tasks
    assert group.group_epoch == epoch
    # A second live member with the same instance id is refused.
    with pytest.raises(HeartbeatError) as caught:
        join(group, "a3", instance_id="i1")
    assert caught.value.error == Error.UNRELEASED_INSTANCE_ID


def test_shutdown_application_reaches_every_member():
    group = new_group()
    join(group, "a")
    join(group, "b")
    beat(group, "a", group.members["a"].member_epoch, shutdown_application=True)
    result, _ = beat(group, "b", group.members["b"].member_epoch)
    assert Status.SHUTDOWN_APPLICATION in [s for s, _ in result.statuses]


def test_warmups_until_caught_up():
    group = new_group(acceptable_recovery_lag=100)
    join(group, "a")
    join(group, "b")
    settle(group)
    b = group.members["b"].assigned
    assert len(b.warmup) == 2 and len(b.active) == 2  # two stateful tasks wait on b's state
    warm = sorted(b.warmup)
    offsets = dict.fromkeys(warm, 950)
    beat(
        group,
        "b",
        group.members["b"].member_epoch,
        task_offsets=offsets,
        task_end_offsets=dict.fromkeys(warm, 1000),
        client_tags={"zone": "z1"},  # a change that brings a new assignment
    )
    settle(group)
    assert set(warm) <= group.members["b"].assigned.active


def test_task_offsets_are_kept_as_kafkas_member_task_offsets():
    """Kafka's MemberTaskOffsets.update: each list a heartbeat sends replaces the one kept, a
    list it leaves out keeps the last one; the lag is end minus offset."""
    group = new_group()
    join(group, "a")
    epoch = group.members["a"].member_epoch
    beat(group, "a", epoch, task_offsets={("1", 0): 5, ("1", 1): 7})
    member = group.members["a"]
    assert member.task_offsets == {("1", 0): 5, ("1", 1): 7}
    assert member.task_end_offsets == {}
    assert member.lags == {("1", 0): 0, ("1", 1): 0}
    beat(group, "a", epoch, task_end_offsets={("1", 0): 9, ("1", 1): 7})
    assert member.task_offsets == {("1", 0): 5, ("1", 1): 7}
    assert member.task_end_offsets == {("1", 0): 9, ("1", 1): 7}
    assert member.lags == {("1", 0): 4, ("1", 1): 0}
    beat(group, "a", epoch)
    assert member.task_offsets == {("1", 0): 5, ("1", 1): 7}


def test_standbys_follow_the_group_config():
    group = new_group(num_standby_replicas=1, max_warmup_replicas=0)
    join(group, "a")
    join(group, "b")
    settle(group)
    a, b = group.members["a"].assigned, group.members["b"].assigned
    # Only subtopology 1 is stateful: each of its tasks has its standby on the other member.
    assert {t for t in a.standby | b.standby} == {("1", p) for p in range(4)}
    assert not (a.active & a.standby) and not (b.active & b.standby)


def test_revocation_timeout_fences():
    group = new_group()
    join(group, "a")
    join(group, "b")
    beat(group, "a", 1, now=0)
    assert group.members["a"].state == MemberState.UNREVOKED_TASKS
    group.expire(1000)
    assert "a" not in group.members


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["join", "beat", "leave", "expire"]), max_size=25), st.data())
def test_no_task_is_active_on_two_members(ops, data):
    """Whatever the order of heartbeats, joins and leaves, no active task is ever held by two
    members at once (revoke before assign)."""
    group = new_group(num_standby_replicas=1)
    now = 0
    for op in ops:
        now += 1000
        ids = sorted(group.members)
        if op == "join":
            join(group, data.draw(st.sampled_from("abcde")), now=now)
        elif op == "beat" and ids:
            member_id = data.draw(st.sampled_from(ids))
            beat(group, member_id, group.members[member_id].member_epoch, now=now)
        elif op == "leave" and ids:
            beat(group, data.draw(st.sampled_from(ids)), -1, now=now)
        elif op == "expire":
            group.expire(now + data.draw(st.sampled_from([0, SESSION])))
        held = [t for m in group.members.values() for t in m.owned() if t in m.assigned.active]
        held += [t for m in group.members.values() for t in m.pending_revocation.active]
        assert len(held) == len(set(held))
        for m in group.members.values():
            assert not (m.assigned.active & (m.assigned.standby | m.assigned.warmup))
    # Once every member has heartbeated a few times, each task runs exactly once, as targeted.
    now += 1000
    if group.members:
        settle(group, now=now)
        active = sorted(t for m in group.members.values() for t in m.assigned.active)
        assert active == sorted((s, p) for s in ("0", "1") for p in range(4))
        for member_id, member in group.members.items():
            assert member.assigned == group.target[member_id]


def test_records_round_trip_in_kafkas_layouts():
    """Every record the group writes reads back equal (streams_log_format.py)."""
    group = new_group(num_standby_replicas=1)
    copartitioned = Topology(
        1,
        WORD_COUNT.subtopologies
        + (
            Subtopology(
                "2",
                source_topics=("left", "right"),
                copartition_groups=(CopartitionGroup(source_topics=(0, 1)),),
                state_changelog_topics=(TopicInfo("cl", 0, 3, (("cleanup.policy", "compact"),)),),
            ),
        ),
    )
    ready = cluster(input=4, app_rep=4, app_changelog=4, left=2, right=2, cl=2)
    _, records = join(
        group,
        "a",
        topology=copartitioned,
        topics=ready,
        instance_id="i",
        rack_id="r",
        user_endpoint=("h", 8080),
        client_tags={"zone": "z"},
    )
    for _, more in (
        join(group, "b", topology=copartitioned, topics=ready),
        beat(group, "a", 1, topics=ready),
        beat(group, "a", -1),
    ):
        records += more
    assert {k.kind for k, _ in records} >= set(RecordKind)
    for key, value in records:
        assert streams_log_format.read_key(streams_log_format.encode_key(key)) == key
        if value is not None:
            data = streams_log_format.encode_value(value)
            assert streams_log_format.read_value(key.kind, data) == value


def test_record_bytes_match_kafkas_layout():
    """A fixed record, byte for byte, as Kafka's generated StreamsGroupTargetAssignmentMember
    writes it: version 0, three compact arrays of (compact string, compact i32 array, tags)."""
    value = streams_log_format.TargetAssignmentMemberValue((("0", (1, 2)),), (), ())
    assert streams_log_format.encode_value(value) == (
        b"\x00\x00"
        + b"\x02"
        + b"\x020"
        + b"\x03\x00\x00\x00\x01\x00\x00\x00\x02"
        + b"\x00"
        + b"\x01"
        + b"\x01"
        + b"\x00"
    )
    key = streams_log_format.RecordKey(streams_log_format.RecordKind.TARGET_MEMBER, "g", "m")
    assert streams_log_format.encode_key(key) == b"\x00\x15\x00\x01g\x00\x01m"


def test_a_member_of_an_older_topology_epoch_is_told_at_every_heartbeat():
    """Kafka 4.4's maybeSetTopologyStaleStatus: STALE_TOPOLOGY, with Kafka's detail, at each
    heartbeat of a member whose topology epoch is below the group's, which keeps its member
    epoch and its tasks (Kafka 4.4 never answers STREAMS_TOPOLOGY_FENCED)."""
    group = new_group()
    join(group, "a")
    newer = Topology(2, WORD_COUNT.subtopologies)
    join(group, "b", topology=newer)
    member = group.members["a"]
    result, _ = beat(group, "a", member.member_epoch)
    assert result.error == Error.NONE
    stale = "The member's topology epoch 1 is behind the group's topology epoch 2."
    assert (Status.STALE_TOPOLOGY, stale) in result.statuses
    again, _ = beat(group, "a", result.member_epoch)
    assert Status.STALE_TOPOLOGY in [s for s, _ in again.statuses]
    # The member on the group's epoch is not told.
    current, _ = beat(group, "b", group.members["b"].member_epoch)
    assert Status.STALE_TOPOLOGY not in [s for s, _ in current.statuses]
