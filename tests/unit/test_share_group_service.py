"""Share groups (KIP-932) served by the group coordinator service under trio's MockClock (the
harness of test_group_coordinator_service: a real replica manager and log, the runtime's
timers): joins and the simple assignor's partitions over three members, a member's session
expiring and its partitions going to the others, the group rebuilt from `__consumer_offsets`
by a restarted coordinator, deletion, and one id namespace shared with the classic and
consumer groups."""

import uuid

import trio

from minibroker.controller import state as transitions
from minibroker.controller.state import ControllerState
from minibroker.coordinator.group.consumer_group import HeartbeatRequest
from minibroker.coordinator.group.service import OFFSETS_TOPIC, CommitRequest
from minibroker.coordinator.group.share_group import ShareHeartbeatRequest
from minibroker.protocol.errors import Error
from tests.unit.test_group_coordinator_service import NODE_ID, Broker, join_request

PARTITIONS = 6
SESSION_S = 45.0  # group.share.session.timeout.ms's default
INTERVAL_S = 5.0  # group.share.heartbeat.interval.ms's default


def cluster_state() -> ControllerState:
    state = ControllerState()
    transitions.register_broker(state, NODE_ID, "127.0.0.1", 9092, "incarnation", 0)
    transitions.create_topic(state, OFFSETS_TOPIC, -1, -1, {}, {0: [NODE_ID]})
    transitions.create_topic(state, "t", -1, -1, {}, {p: [NODE_ID] for p in range(PARTITIONS)})
    return state


def join(member_id: str) -> ShareHeartbeatRequest:
    return ShareHeartbeatRequest(member_id, 0, subscribed_topic_names=("t",), client_id="c")


def beat(member_id: str, epoch: int) -> ShareHeartbeatRequest:
    return ShareHeartbeatRequest(member_id, epoch)


def partitions(coordinator, member_id: str) -> set[int]:
    assigned = coordinator.share_assignment("sg", member_id)
    assert assigned is not None
    return {index for _, index in assigned}


async def three_members(coordinator) -> dict[str, int]:
    """Members a, b, c joined in turn; each heartbeats until it has the final epoch.
    Returns each member's epoch."""
    epochs: dict[str, int] = {}
    for member_id in ("a", "b", "c"):
        joined = await coordinator.share_heartbeat("sg", join(member_id))
        assert joined.error == Error.NONE, joined
        assert joined.heartbeat_interval_ms == INTERVAL_S * 1000
        epochs[member_id] = joined.member_epoch
    for member_id in ("a", "b"):
        answer = await coordinator.share_heartbeat("sg", beat(member_id, epochs[member_id]))
        assert answer.error == Error.NONE, answer
        epochs[member_id] = answer.member_epoch
    return epochs


async def test_three_members_share_the_partitions(autojump_clock, tmp_path):
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        first = await coordinator.share_heartbeat("sg", join("a"))
        # Alone: every partition, at the group's first epoch.
        assert first.error == Error.NONE and first.member_epoch == 1
        assert first.assignment is not None
        assert {p for parts in first.assignment.values() for p in parts} == set(range(6))
        epochs = await three_members(coordinator)
        group = coordinator.share_groups["sg"]
        assert group.group_epoch == 3 and set(epochs.values()) == {3}
        # The simple assignor: two partitions each, all six covered once.
        held = {member_id: partitions(coordinator, member_id) for member_id in "abc"}
        assert [len(parts) for parts in held.values()] == [2, 2, 2]
        assert set().union(*held.values()) == set(range(PARTITIONS))
        # Described as Kafka's ShareGroupDescribe sees it; listed beside the other groups.
        error, _, described = coordinator.describe_share_group("sg")
        assert error == Error.NONE and described is group
        assert described.state.value == "Stable"
        assert [g.group_id for g in coordinator.list_share_groups()] == ["sg"]
        assert coordinator.share_assignment("sg", "nobody") is None
        assert coordinator.share_assignment("other", "a") is None
        # A stale epoch is fenced; an unknown member is told so.
        stale = await coordinator.share_heartbeat("sg", beat("a", 1))
        assert stale.error == Error.FENCED_MEMBER_EPOCH
        unknown = await coordinator.share_heartbeat("sg", beat("zz", 3))
        assert unknown.error == Error.UNKNOWN_MEMBER_ID
        # Leaving (-1): the others get its partitions at their next heartbeat.
        left = await coordinator.share_heartbeat("sg", beat("c", -1))
        assert left.error == Error.NONE and left.member_epoch == -1
        answer = await coordinator.share_heartbeat("sg", beat("a", epochs["a"]))
        assert answer.member_epoch == 4 and answer.assignment is not None
        assert len(partitions(coordinator, "a")) == 3
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_a_silent_member_is_fenced_and_its_partitions_reassigned(autojump_clock, tmp_path):
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        epochs = await three_members(coordinator)
        group = coordinator.share_groups["sg"]
        # a and b heartbeat every interval; c is silent. c stays until its session lapses.
        started = trio.current_time()
        while "c" in group.members:
            await trio.sleep(INTERVAL_S)
            for member_id in ("a", "b"):
                answer = await coordinator.share_heartbeat("sg", beat(member_id, epochs[member_id]))
                assert answer.error == Error.NONE, answer
                epochs[member_id] = answer.member_epoch
        silent_for = trio.current_time() - started
        assert SESSION_S <= silent_for <= SESSION_S + INTERVAL_S, silent_for
        # The fence bumped the group epoch; a and b now hold all six partitions, three each.
        assert group.group_epoch == 4 and (epochs["a"], epochs["b"]) == (4, 4)
        held = [partitions(coordinator, member_id) for member_id in ("a", "b")]
        assert sorted(map(len, held)) == [3, 3]
        assert held[0] | held[1] == set(range(PARTITIONS))
        fenced = await coordinator.share_heartbeat("sg", beat("c", 3))
        assert fenced.error == Error.UNKNOWN_MEMBER_ID
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_a_restarted_coordinator_replays_the_share_group(autojump_clock, tmp_path):
    state = cluster_state()
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        epochs = await three_members(broker.coordinator)
        before = {m: partitions(broker.coordinator, m) for m in "abc"}
        group = broker.coordinator.share_groups["sg"]
        group_epoch, assignment_epoch = group.group_epoch, group.assignment_epoch
        nursery.cancel_scope.cancel()
    broker.stop()

    # A new broker process on the same logs: the group comes back from its records.
    restarted = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await restarted.start(nursery, state)
        coordinator = restarted.coordinator
        group = coordinator.share_groups["sg"]
        assert (group.group_epoch, group.assignment_epoch) == (group_epoch, assignment_epoch)
        assert {m: partitions(coordinator, m) for m in "abc"} == before
        assert {m: group.members[m].member_epoch for m in "abc"} == epochs
        assert group.members["a"].subscribed_topic_names == ("t",)
        # The members carry on at their epochs, without rejoining.
        answer = await coordinator.share_heartbeat("sg", beat("a", epochs["a"]))
        assert answer.error == Error.NONE and answer.member_epoch == epochs["a"]
        # The sessions were started again at the load: silent members are fenced after one.
        await trio.sleep(SESSION_S + 1)
        assert group.members == {}
        nursery.cancel_scope.cancel()
    restarted.stop()


async def test_delete_and_one_namespace_for_every_group_type(autojump_clock, tmp_path):
    state = cluster_state()
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        coordinator = broker.coordinator
        joined = await coordinator.share_heartbeat("sg", join("a"))
        assert joined.error == Error.NONE
        # A share group's id is not a classic or consumer group's, and the other way round.
        refused = await coordinator.join("sg", join_request())
        assert refused.error == Error.INCONSISTENT_GROUP_PROTOCOL
        consumer = await coordinator.consumer_heartbeat(
            "sg",
            HeartbeatRequest(
                member_id=str(uuid.uuid4()),
                member_epoch=0,
                rebalance_timeout_ms=10_000,
                subscribed_topic_names=("t",),
                owned={},
                api_version=1,
            ),
        )
        assert consumer.error == Error.GROUP_ID_NOT_FOUND
        assert consumer.message == "Group sg is not a consumer group."
        committed = await coordinator.commit(
            CommitRequest("sg", -1, "", None, {("t", 0): (1, 0, "")})
        )
        assert committed == {("t", 0): Error.GROUP_ID_NOT_FOUND}
        assert coordinator.fetch_offsets("sg", None)[0] == Error.GROUP_ID_NOT_FOUND
        assert (await coordinator.join("classic", join_request())).error == Error.NONE
        other = await coordinator.share_heartbeat("classic", join("a"))
        assert (other.error, other.message) == (
            Error.GROUP_ID_NOT_FOUND,
            "Group classic is not a share group.",
        )
        assert coordinator.describe_share_group("classic")[:2] == (
            Error.GROUP_ID_NOT_FOUND,
            "Group classic is not a share group.",
        )
        assert coordinator.describe_share_group("nosuch")[:2] == (
            Error.GROUP_ID_NOT_FOUND,
            "Group nosuch not found.",
        )
        # DeleteGroups: not while it has members; then gone, and gone from the log too.
        assert await coordinator.delete_group("sg") == Error.NON_EMPTY_GROUP
        left = await coordinator.share_heartbeat("sg", beat("a", -1))
        assert left.error == Error.NONE
        assert coordinator.share_groups["sg"].state.value == "Empty"
        assert await coordinator.delete_group("sg") == Error.NONE
        assert "sg" not in coordinator.share_groups
        assert await coordinator.delete_group("sg") == Error.GROUP_ID_NOT_FOUND
        nursery.cancel_scope.cancel()
    broker.stop()

    restarted = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await restarted.start(nursery, state)
        assert "sg" not in restarted.coordinator.share_groups
        nursery.cancel_scope.cancel()
    restarted.stop()


async def test_the_groups_own_session_timeout_and_heartbeat_interval(autojump_clock, tmp_path):
    """The group configs share.session.timeout.ms and share.heartbeat.interval.ms (GROUP
    resources) over the broker's group.share.*, read at each heartbeat as Kafka 4.4's
    GroupMetadataManager.shareGroupSessionTimeoutMs / shareGroupHeartbeatIntervalMs: members
    are told the group's interval, and a silent one is fenced after the group's session
    timeout; a change applies from the next heartbeat on."""
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        broker.replicas.group_configs["sg"] = {
            "share.session.timeout.ms": "50000",
            "share.heartbeat.interval.ms": "8000",
        }
        a = await coordinator.share_heartbeat("sg", join("a"))
        c = await coordinator.share_heartbeat("sg", join("c"))
        assert (a.heartbeat_interval_ms, c.heartbeat_interval_ms) == (8000, 8000)
        group = coordinator.share_groups["sg"]
        epoch = (await coordinator.share_heartbeat("sg", beat("a", a.member_epoch))).member_epoch
        # c is silent from its join on: fenced after the group's 50 s, not the broker's 45 s.
        joined = trio.current_time()
        while "c" in group.members:
            await trio.sleep(2)
            answer = await coordinator.share_heartbeat("sg", beat("a", epoch))
            assert answer.error == Error.NONE and answer.heartbeat_interval_ms == 8000
            epoch = answer.member_epoch
        assert 50.0 <= trio.current_time() - joined <= 52.0
        # Back to the broker's values: the next heartbeat is told the broker's interval.
        broker.replicas.group_configs["sg"] = {}
        answer = await coordinator.share_heartbeat("sg", beat("a", epoch))
        assert answer.heartbeat_interval_ms == INTERVAL_S * 1000
        nursery.cancel_scope.cancel()
    broker.stop()
