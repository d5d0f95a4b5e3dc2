"""The share group state machine (coordinator/group/share_group.py) and the simple assignor."""

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.coordinator.group import assignors
from minibroker.coordinator.group.share_group import (
    ShareGroup,
    ShareGroupState,
    ShareHeartbeatRequest,
    ShareSettings,
    metadata_hash,
)
from minibroker.coordinator.group.share_log_format import (
    ShareCurrentAssignmentValue,
    ShareGroupMetadataValue,
    ShareMemberMetadataValue,
    ShareRecordKey,
    ShareRecordKind,
)
from minibroker.protocol.errors import Error

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
TOPICS: dict[str, tuple[uuid.UUID, int]] = {"t1": (T1, 1), "t2": (T2, 4)}


def lookup(name: str) -> tuple[uuid.UUID, int] | None:
    return TOPICS.get(name)


def join(group: ShareGroup, member: str, topics: tuple[str, ...] = ("t1",), now: int = 0):  # type: ignore[no-untyped-def]
    return group.heartbeat(
        ShareHeartbeatRequest(member, 0, subscribed_topic_names=topics), lookup, now
    )


def beat(group: ShareGroup, member: str, epoch: int, now: int = 0, **kw):  # type: ignore[no-untyped-def]
    return group.heartbeat(ShareHeartbeatRequest(member, epoch, **kw), lookup, now)


def test_join_assigns_and_writes_records_in_kafkas_layout() -> None:
    group = ShareGroup("g")
    result, records = join(group, "m1", ("t1", "t2"))
    assert result.error is Error.NONE and result.member_epoch == 1 == group.group_epoch
    assert result.assignment == {T1: {0}, T2: {0, 1, 2, 3}}
    assert result.heartbeat_interval_ms == 5000
    kinds = [k.kind for k, _ in records]
    assert kinds == [
        ShareRecordKind.MEMBER_METADATA,
        ShareRecordKind.GROUP_METADATA,
        ShareRecordKind.TARGET_MEMBER,
        ShareRecordKind.TARGET_METADATA,
        ShareRecordKind.CURRENT_ASSIGNMENT,
    ]
    values = dict(records)
    assert values[ShareRecordKey(ShareRecordKind.MEMBER_METADATA, "g", "m1")] == (
        ShareMemberMetadataValue(None, "", "", ("t1", "t2"))
    )
    meta = values[ShareRecordKey(ShareRecordKind.GROUP_METADATA, "g")]
    assert isinstance(meta, ShareGroupMetadataValue) and meta.epoch == 1
    assert group.state is ShareGroupState.STABLE


def test_a_partition_is_shared_by_several_members() -> None:
    group = ShareGroup("g")
    join(group, "m1")
    result, _ = join(group, "m2")
    assert result.member_epoch == 2 and result.assignment == {T1: {0}}
    # m1 learns of the new epoch at its next heartbeat; its assignment did not change.
    r1, records = beat(group, "m1", 1)
    assert r1.member_epoch == 2 and r1.assignment is None
    assert [k.kind for k, _ in records] == [ShareRecordKind.CURRENT_ASSIGNMENT]
    r1, records = beat(group, "m1", 2)
    assert r1.error is Error.NONE and records == []


def test_errors() -> None:
    group = ShareGroup("g", ShareSettings(max_size=1))
    assert beat(group, "", 0, subscribed_topic_names=("t1",))[0].error is Error.INVALID_REQUEST
    assert beat(group, "m", 0)[0].error is Error.INVALID_REQUEST  # no subscription
    assert beat(group, "m", -2)[0].error is Error.INVALID_REQUEST
    assert beat(group, "m", 3)[0].error is Error.UNKNOWN_MEMBER_ID
    assert beat(group, "m", -1)[0].error is Error.UNKNOWN_MEMBER_ID
    join(group, "m")
    full, records = join(group, "n")
    assert full.error is Error.GROUP_MAX_SIZE_REACHED and records == []
    assert beat(group, "m", 7)[0].error is Error.FENCED_MEMBER_EPOCH
    assert beat(group, "m", 0, subscribed_topic_names=("t1",))[0].error is Error.NONE


def test_leave_with_epoch_minus_one_tombstones_the_member() -> None:
    group = ShareGroup("g")
    join(group, "m1")
    join(group, "m2")
    result, records = beat(group, "m2", -1)
    assert result.member_epoch == -1 and "m2" not in group.members
    tombstones = [k for k, v in records if v is None]
    assert {k.kind for k in tombstones} == {
        ShareRecordKind.CURRENT_ASSIGNMENT,
        ShareRecordKind.TARGET_MEMBER,
        ShareRecordKind.MEMBER_METADATA,
    }
    assert group.group_epoch == 3


def test_subscription_change_and_topic_growth_bump_the_epoch() -> None:
    group = ShareGroup("g")
    join(group, "m1")
    result, _ = beat(group, "m1", 1, subscribed_topic_names=("t2",))
    assert result.member_epoch == 2 and result.assignment == {T2: {0, 1, 2, 3}}
    TOPICS["t2"] = (T2, 6)
    try:
        result, _ = beat(group, "m1", 2)
        assert result.member_epoch == 3 and result.assignment == {T2: set(range(6))}
    finally:
        TOPICS["t2"] = (T2, 4)


def test_session_timeout_fences() -> None:
    group = ShareGroup("g")
    join(group, "m1", now=0)
    join(group, "m2", now=10_000)
    assert group.next_deadline_ms() == 45_000
    assert group.expire(lookup, 44_999) == ([], [])
    fenced, records = group.expire(lookup, 45_000)
    assert fenced == ["m1"] and any(v is None for _, v in records)
    assert beat(group, "m1", 2)[0].error is Error.UNKNOWN_MEMBER_ID
    group.expire(lookup, 55_000)
    assert group.state is ShareGroupState.EMPTY


def test_replay_rebuilds_the_group() -> None:
    group = ShareGroup("g")
    log = []
    log += join(group, "m1", ("t1", "t2"))[1]
    log += join(group, "m2", ("t2",))[1]
    log += beat(group, "m1", 1)[1]
    log += join(group, "m3")[1]
    log += beat(group, "m3", 3)[1]
    log += beat(group, "m3", -1)[1]
    rebuilt = ShareGroup.replay("g", log, now_ms=0)
    assert rebuilt.group_epoch == group.group_epoch
    assert rebuilt.assignment_epoch == group.assignment_epoch
    assert rebuilt.target == group.target
    assert set(rebuilt.members) == {"m1", "m2"}
    for mid, member in group.members.items():
        other = rebuilt.members[mid]
        assert (other.member_epoch, other.assigned, other.subscribed_topic_names) == (
            member.member_epoch,
            member.assigned,
            member.subscribed_topic_names,
        )
    current = dict(log)[ShareRecordKey(ShareRecordKind.CURRENT_ASSIGNMENT, "g", "m1")]
    assert isinstance(current, ShareCurrentAssignmentValue)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text("abcdef", min_size=1, max_size=3),
        st.sets(st.sampled_from([T1, T2, uuid.UUID(int=3)])),
        max_size=8,
    ),
    st.dictionaries(st.sampled_from([T1, T2, uuid.UUID(int=3)]), st.integers(0, 7)),
)
def test_simple_assignor_covers_every_partition_and_balances(
    subscriptions: dict[str, set[uuid.UUID]], counts: dict[uuid.UUID, int]
) -> None:
    result = assignors.simple(subscriptions, counts)
    assert set(result) == set(subscriptions)
    for topic, count in counts.items():
        members = [m for m, ts in subscriptions.items() if topic in ts]
        holders = {
            p: [m for m in members if p in result[m].get(topic, set())] for p in range(count)
        }
        for m, assigned in result.items():
            assert set(assigned.get(topic, set())) <= set(range(count))
            if topic not in subscriptions[m]:
                assert topic not in assigned
        if not members or count == 0:
            continue
        # Every partition has a member; every subscriber has a partition when there are
        # enough to go round; the load is even within one.
        assert all(holders[p] for p in range(count))
        loads = [len(result[m].get(topic, set())) for m in members]
        assert max(loads) - min(loads) <= 1
        per_partition = [len(h) for h in holders.values()]
        assert max(per_partition) - min(per_partition) <= 1


def test_a_lost_join_is_answered_again_without_a_new_epoch() -> None:
    group = ShareGroup("g")
    join(group, "m1")
    again, records = join(group, "m1")
    assert again.error is Error.NONE and again.member_epoch == 1 == group.group_epoch
    assert again.assignment == {T1: {0}} and records == []


def test_a_change_of_a_subscribed_partitions_replica_racks_bumps_the_share_group_epoch() -> None:
    """Kafka 4.4's share groups hash the same facts as its consumer groups (KIP-1101's
    computeTopicHash, racks included): a replica moved to another rack bumps the epoch;
    without racks the hash is the one before racks were hashed."""
    racks = {"t2": (("a", "b"),) * 4}

    def racked(name: str):  # type: ignore[no-untyped-def]
        found = TOPICS.get(name)
        return None if found is None or name not in racks else (*found, racks[name])

    group = ShareGroup("g")
    group.heartbeat(ShareHeartbeatRequest("m1", 0, subscribed_topic_names=("t2",)), racked, 0)
    assert group.group_epoch == 1
    group.heartbeat(ShareHeartbeatRequest("m1", 1), racked, 10)
    assert group.group_epoch == 1
    racks["t2"] = (("a", "a"),) + (("a", "b"),) * 3
    result, _ = group.heartbeat(ShareHeartbeatRequest("m1", 1), racked, 20)
    assert group.group_epoch == 2 and result.member_epoch == 2
    assert metadata_hash(["t2"], lambda name: (*TOPICS[name], ((),) * 4)) == metadata_hash(
        ["t2"], lookup
    )
