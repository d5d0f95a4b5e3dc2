"""The group membership rules (broker/coordinator/group/state.py), with time passed in."""

from minibroker.coordinator.group.log_format import OffsetValue
from minibroker.coordinator.group.state import (
    Group,
    GroupSettings,
    GroupState,
    JoinRequest,
)
from minibroker.protocol.errors import Error

NO_DELAY = GroupSettings(initial_rebalance_delay_ms=0)
SESSION_MS = 10_000
REBALANCE_MS = 30_000


def join_request(member_id="", protocols=(("range", b"meta"),), instance_id=None, **changes):
    fields = {
        "member_id": member_id,
        "group_instance_id": instance_id,
        "client_id": "client",
        "client_host": "/127.0.0.1",
        "session_timeout_ms": SESSION_MS,
        "rebalance_timeout_ms": REBALANCE_MS,
        "protocol_type": "consumer",
        "protocols": list(protocols),
        "require_known_member_id": True,
    }
    fields.update(changes)
    return JoinRequest(**fields)


def known_member(group: Group, now: int = 0, **changes) -> str:
    """A member id handed out with MEMBER_ID_REQUIRED, as a v4+ client receives it."""
    member, answer = group.join(join_request(**changes), now)
    assert member is None and answer.error == Error.MEMBER_ID_REQUIRED
    return answer.member_id


def stable_group_of_one(settings: GroupSettings = NO_DELAY) -> tuple[Group, str]:
    group = Group("g", settings, 0)
    member_id = known_member(group)
    member, _ = group.join(join_request(member_id), 0)
    assert member.join_result.error == Error.NONE
    _, _, store = group.sync(member_id, None, 1, {member_id: b"assignment"}, 0)
    assert store
    group.complete_sync(1, Error.NONE, 0)
    assert group.is_(GroupState.STABLE)
    return group, member_id


def test_a_new_member_gets_an_id_then_joins_and_leads_generation_one():
    group = Group("g", NO_DELAY, 0)
    member_id = known_member(group)
    assert member_id.startswith("client-")
    member, answer = group.join(join_request(member_id), 5)
    assert answer is None
    result = member.join_result
    assert result.error == Error.NONE
    assert (result.generation, result.leader, result.member_id) == (1, member_id, member_id)
    assert result.protocol_name == "range"
    assert result.members == [(member_id, None, b"meta")]
    assert group.is_(GroupState.COMPLETING_REBALANCE)


def test_only_the_leaders_assignment_counts_and_reaches_every_member():
    group = Group("g", NO_DELAY, 0)
    first = known_member(group)
    leader, _ = group.join(join_request(first), 0)
    second_id = known_member(group)
    second, _ = group.join(join_request(second_id), 0)
    # The second join started a rebalance: the first member must rejoin.
    assert group.is_(GroupState.PREPARING_REBALANCE)
    leader, _ = group.join(join_request(first), 0)
    assert leader.join_result.generation == second.join_result.generation == 2
    assert leader.join_result.leader == first
    assert second.join_result.members == []
    follower, answer, store = group.sync(second_id, None, 2, {second_id: b"mine!"}, 0)
    assert answer is None and not store
    _, answer, store = group.sync(first, None, 2, {first: b"a", second_id: b"b"}, 0)
    assert store
    group.complete_sync(2, Error.NONE, 0)
    assert follower.sync_result.assignment == b"b"
    assert group.is_(GroupState.STABLE)


def test_protocol_chosen_by_vote_among_those_every_member_supports():
    group = Group("g", NO_DELAY, 0)
    a = known_member(group)
    group.join(join_request(a, protocols=[("roundrobin", b""), ("range", b"")]), 0)
    b = known_member(group)
    second, _ = group.join(join_request(b, protocols=[("range", b""), ("sticky", b"")]), 0)
    first, _ = group.join(join_request(a, protocols=[("roundrobin", b""), ("range", b"")]), 0)
    assert first.join_result.protocol_name == "range"


def test_a_member_without_a_common_protocol_is_refused():
    group, _ = stable_group_of_one()
    _, answer = group.join(join_request(protocols=[("sticky", b"")]), 0)
    assert answer.error == Error.INCONSISTENT_GROUP_PROTOCOL
    _, answer = group.join(join_request(protocol_type="connect"), 0)
    assert answer.error == Error.INCONSISTENT_GROUP_PROTOCOL


def test_stale_generation_unknown_member_and_rebalance_errors():
    group, member_id = stable_group_of_one()
    assert group.heartbeat(member_id, None, 1, 10) == Error.NONE
    assert group.heartbeat(member_id, None, 0, 10) == Error.ILLEGAL_GENERATION
    assert group.heartbeat("nobody", None, 1, 10) == Error.UNKNOWN_MEMBER_ID
    _, answer, _ = group.sync(member_id, None, 7, {}, 10)
    assert answer.error == Error.ILLEGAL_GENERATION
    newcomer = known_member(group)
    group.join(join_request(newcomer), 10)
    assert group.heartbeat(member_id, None, 1, 10) == Error.REBALANCE_IN_PROGRESS


def test_a_missed_session_removes_the_member_and_rebalances_the_rest():
    group = Group("g", NO_DELAY, 0)
    a = known_member(group)
    group.join(join_request(a), 0)
    b = known_member(group)
    group.join(join_request(b), 0)
    group.join(join_request(a), 0)
    group.sync(a, None, 2, {a: b"1", b: b"2"}, 0)
    group.complete_sync(2, Error.NONE, 0)
    assert group.heartbeat(a, None, 2, SESSION_MS - 1) == Error.NONE
    assert group.next_deadline_ms() == SESSION_MS  # b's session
    group.expire(SESSION_MS)
    assert set(group.members) == {a}
    assert group.is_(GroupState.PREPARING_REBALANCE)
    assert group.heartbeat(b, None, 2, SESSION_MS) == Error.UNKNOWN_MEMBER_ID


def test_the_join_phase_ends_at_the_rebalance_timeout_without_the_silent_members():
    group = Group("g", NO_DELAY, 0)
    a = known_member(group)
    group.join(join_request(a), 0)
    b = known_member(group)
    second, _ = group.join(join_request(b, session_timeout_ms=REBALANCE_MS * 2), 0)
    assert second.join_result is None  # a has not rejoined
    assert group.join_deadline_ms == REBALANCE_MS
    group.heartbeat(b, None, 1, 1)  # wrong generation: b's session is not renewed by it
    group.expire(REBALANCE_MS)
    assert second.join_result.generation == 2
    assert set(group.members) == {b}


def test_the_initial_delay_waits_and_is_extended_by_each_newcomer():
    group = Group("g", GroupSettings(initial_rebalance_delay_ms=3000), 0)
    a = known_member(group)
    first, _ = group.join(join_request(a), 0)
    assert group.join_deadline_ms == 3000
    b = known_member(group, 2000)
    group.join(join_request(b), 2000)
    assert group.join_deadline_ms == 5000
    group.expire(4999)
    assert first.join_result is None
    group.expire(5000)
    assert first.join_result.generation == 1
    assert len(first.join_result.members) == 2


def test_the_last_leave_empties_the_group_in_a_new_generation():
    group, member_id = stable_group_of_one()
    assert group.leave("nobody", None, 5) == Error.UNKNOWN_MEMBER_ID
    assert group.leave(member_id, None, 5) == Error.NONE
    # Nobody is left to wait for: the rebalance completes at once into an empty generation.
    assert group.is_(GroupState.EMPTY)
    assert group.generation == 2
    assert group.heartbeat(member_id, None, 2, 5) == Error.UNKNOWN_MEMBER_ID


def test_a_static_member_restart_keeps_its_assignment_and_fences_the_old_id():
    group = Group("g", NO_DELAY, 0)
    leader_id = known_member(group)
    group.join(join_request(leader_id), 0)
    old, _ = group.join(join_request("", instance_id="box-1"), 0)  # static: no id round trip
    group.join(join_request(leader_id), 0)
    old_id = old.member_id
    group.sync(leader_id, None, 2, {leader_id: b"x", old_id: b"static"}, 0)
    group.complete_sync(2, Error.NONE, 0)
    _, answer = group.join(join_request("", instance_id="box-1"), 100)
    assert answer.error == Error.NONE and answer.member_id != old_id
    assert answer.generation == 2  # no rebalance
    assert group.heartbeat(old_id, "box-1", 2, 100) == Error.FENCED_INSTANCE_ID
    _, synced, _ = group.sync(answer.member_id, "box-1", 2, {}, 100)
    assert synced.assignment == b"static"


def test_group_max_size_refuses_newcomers():
    group, _ = stable_group_of_one(GroupSettings(initial_rebalance_delay_ms=0, max_size=1))
    _, answer = group.join(join_request(), 0)
    assert answer.error == Error.GROUP_MAX_SIZE_REACHED


def test_a_failed_write_of_the_assignment_sends_everyone_back_to_rebalance():
    group = Group("g", NO_DELAY, 0)
    member_id = known_member(group)
    group.join(join_request(member_id), 0)
    member, _, store = group.sync(member_id, None, 1, {member_id: b"a"}, 0)
    assert store
    group.complete_sync(1, Error.NOT_COORDINATOR, 0)
    assert member.sync_result.error == Error.NOT_COORDINATOR
    assert group.is_(GroupState.PREPARING_REBALANCE)


def test_restored_members_are_stable_and_expire_unless_they_heartbeat():
    group, member_id = stable_group_of_one()
    records = tuple(group.records())
    loaded = Group("g", NO_DELAY, 1000)
    loaded.restore("consumer", 1, "range", member_id, 0, records, 1000)
    assert loaded.is_(GroupState.STABLE)
    assert loaded.members[member_id].assignment == b"assignment"
    assert loaded.heartbeat(member_id, None, 1, 1000 + SESSION_MS - 1) == Error.NONE
    loaded.expire(1000 + 2 * SESSION_MS)
    assert loaded.is_empty


def test_subscribed_topics_are_read_from_the_consumer_subscription():
    subscription = b"\x00\x01" + b"\x00\x00\x00\x02" + b"\x00\x01a" + b"\x00\x02bc" + b"\xff" * 4
    group = Group("g", NO_DELAY, 0)
    member_id = known_member(group)
    group.join(join_request(member_id, protocols=[("range", subscription)]), 0)
    assert group.subscribed_topics() == {"a", "bc"}


def test_a_restarted_static_leader_keeps_the_generation_and_skips_assignment():
    group = Group("g", NO_DELAY, 0)
    old, _ = group.join(join_request("", instance_id="leader"), 0)
    old_id = old.member_id
    group.sync(old_id, "leader", 1, {old_id: b"a"}, 0)
    group.complete_sync(1, Error.NONE, 0)
    _, answer = group.join(join_request("", instance_id="leader", protocols=[("range", b"v2")]), 9)
    assert answer.error == Error.NONE and answer.member_id != old_id
    assert (answer.generation, answer.leader, answer.skip_assignment) == (1, answer.member_id, True)
    assert answer.members == [(answer.member_id, "leader", b"v2")]
    assert group.is_(GroupState.STABLE)
    assert group.heartbeat(old_id, "leader", 1, 9) == Error.FENCED_INSTANCE_ID
    _, synced, _ = group.sync(answer.member_id, "leader", 1, {}, 9)
    assert synced.assignment == b"a"


def test_a_static_member_whose_restart_changes_the_protocol_rebalances():
    group = Group("g", NO_DELAY, 0)
    both = [("range", b""), ("rr", b"")]
    old, _ = group.join(join_request("", instance_id="x", protocols=both), 0)
    group.sync(old.member_id, "x", 1, {old.member_id: b"a"}, 0)
    group.complete_sync(1, Error.NONE, 0)
    # It now prefers rr: the vote, and so the group's protocol, changes.
    restarted, answer = group.join(join_request("", instance_id="x", protocols=both[::-1]), 9)
    assert answer is None
    assert restarted.join_result.generation == 2
    assert restarted.join_result.protocol_name == "rr"
    assert restarted is not old and old.join_result.generation == 1


def test_offsets_expire_once_the_group_has_been_empty_for_the_retention():
    group, member_id = stable_group_of_one()
    group.offsets[("t", 0)] = OffsetValue(5, -1, "", 0)
    assert group.expired_offsets(10**9, 1000) == [], "a group with members keeps its offsets"
    group.leave(member_id, None, 50_000)
    assert group.expired_offsets(50_999, 1000) == []
    assert group.expired_offsets(51_000, 1000) == [("t", 0)]


def test_offsets_of_a_group_without_members_expire_one_by_one():
    group = Group("g", NO_DELAY, 0)
    group.offsets[("t", 0)] = OffsetValue(5, -1, "", 1000)
    group.offsets[("t", 1)] = OffsetValue(5, -1, "", 5000)
    assert group.expired_offsets(6000, 2000) == [("t", 0)]


def test_a_member_parked_in_join_keeps_its_session():
    group = Group("g", NO_DELAY, 0)
    a = known_member(group)
    group.join(join_request(a), 0)
    b = known_member(group)
    parked, _ = group.join(join_request(b), 2000)  # waits for a to rejoin
    assert parked.join_result is None
    group.expire(2000 + SESSION_MS + 1)  # b's session has run out while it waits
    assert b in group.members, "a parked member cannot heartbeat and must not expire"
    assert group.next_deadline_ms() > 2000 + SESSION_MS, "no timer spins on a parked member"


def test_a_static_member_that_did_not_rejoin_stays_and_does_not_lead():
    group = Group("g", NO_DELAY, 0)
    static, _ = group.join(
        join_request("", instance_id="s", session_timeout_ms=REBALANCE_MS * 2), 0
    )
    dynamic_id = known_member(group)
    group.join(join_request(dynamic_id), 0)  # starts a rebalance; s does not rejoin
    group.expire(REBALANCE_MS)
    assert static.member_id in group.members
    assert group.leader_id == dynamic_id


def test_at_no_initial_delay_the_first_join_does_not_wait_for_a_member_id_handed_out():
    """Kafka's first join of a new group ends on InitialDelayedJoin's timer, even at a delay
    of 0, without waiting for members that hold a member id from MEMBER_ID_REQUIRED and have
    not joined with it yet; a later rebalance does wait for them (hasAllMembersJoined)."""
    group = Group("g", NO_DELAY, 0)
    a = known_member(group)
    b = known_member(group)
    first, _ = group.join(join_request(a), 5)
    assert first.join_result is not None, "the first join waited for a member id handed out"
    assert first.join_result.generation == 1
    assert first.join_result.members == [(a, None, b"meta")]
    _, _, store = group.sync(a, None, 1, {a: b"assignment"}, 6)
    assert store
    group.complete_sync(1, Error.NONE, 6)
    second, _ = group.join(join_request(b), 7)
    assert group.is_(GroupState.PREPARING_REBALANCE)
    assert second.join_result is None  # waits for a, whose next heartbeat says rebalance
    c = known_member(group, 8)
    group.join(join_request(a), 9)
    assert group.is_(GroupState.PREPARING_REBALANCE), "a later rebalance waits for c's id"
    group.join(join_request(c), 10)
    assert second.join_result.generation == 2
    assert sorted(group.members) == sorted([a, b, c])
    assert group.is_(GroupState.COMPLETING_REBALANCE)


def test_an_offset_commit_in_completing_rebalance_checks_member_and_generation_first():
    """Kafka 4's ClassicGroup.validateOffsetCommit: UNKNOWN_MEMBER_ID, then
    ILLEGAL_GENERATION, then (for OffsetCommit, not TxnOffsetCommit) the state. A member of
    the previous generation committing while the group completes its rebalance (librdkafka
    0113's manual commit during a cooperative rebalance) learns ILLEGAL_GENERATION."""
    group, first = stable_group_of_one()
    second = known_member(group)
    group.join(join_request(second), 0)
    group.join(join_request(first), 0)
    assert group.is_(GroupState.COMPLETING_REBALANCE) and group.generation == 2

    def commit(member_id, generation, instance_id=None, transactional=False):
        return group.validate_classic_offset_commit(
            member_id, instance_id, generation, transactional
        )

    assert commit(first, 1) == Error.ILLEGAL_GENERATION
    assert commit("gone", 1) == Error.UNKNOWN_MEMBER_ID
    assert commit("gone", 2) == Error.UNKNOWN_MEMBER_ID
    assert commit(first, 2) == Error.REBALANCE_IN_PROGRESS
    assert commit(first, 2, transactional=True) == Error.NONE
    assert commit(first, 1, transactional=True) == Error.ILLEGAL_GENERATION
    # A commit naming no member (generation -1) to a group with members.
    assert commit("", -1) == Error.UNKNOWN_MEMBER_ID
    assert commit("", -1, transactional=True) == Error.NONE
    # An instance id nobody holds is an unknown member, even with a known member id.
    assert commit(first, 2, instance_id="nobody") == Error.UNKNOWN_MEMBER_ID
    # Once stable, the current generation commits.
    group.sync(first, None, 2, {first: b"a", second: b"b"}, 0)
    group.complete_sync(2, Error.NONE, 0)
    assert group.is_(GroupState.STABLE)
    assert commit(first, 2) == Error.NONE
    assert commit(second, 1) == Error.ILLEGAL_GENERATION


def test_an_offset_commit_to_an_empty_group_without_a_generation_is_free():
    group = Group("g", NO_DELAY, 0)
    assert group.validate_classic_offset_commit("", None, -1, False) == Error.NONE
    assert group.validate_classic_offset_commit("m", None, 3, False) == Error.UNKNOWN_MEMBER_ID
    group.state = GroupState.DEAD
    assert (
        group.validate_classic_offset_commit("", None, -1, False) == Error.COORDINATOR_NOT_AVAILABLE
    )
