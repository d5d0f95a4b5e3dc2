"""Online migration between the classic and the consumer group protocol (Kafka 4's
group.consumer.migration.policy), through the group coordinator service under trio's
MockClock (the harness of test_group_coordinator_service): a classic group upgraded by a
ConsumerGroupHeartbeat, classic members served inside the consumer group, the downgrade when
the last consumer-protocol member leaves, committed offsets kept throughout, and a mixed
group rebuilt from the log by a restarted coordinator."""

import dataclasses

import pytest
import trio
import trio.testing

from minibroker.controller import state as transitions
from minibroker.controller.state import ControllerState
from minibroker.coordinator.group.consumer_group import ConsumerGroup, HeartbeatRequest
from minibroker.coordinator.group.embedded_protocol import decode_assignment, encode_assignment
from minibroker.coordinator.group.service import OFFSETS_TOPIC, CommitRequest
from minibroker.coordinator.group.state import Group, GroupState, JoinRequest
from minibroker.protocol.errors import Error
from tests.unit.test_group_coordinator_service import NODE_ID, SESSION_MS, Broker

PARTITIONS = 4


def cluster_state() -> ControllerState:
    state = ControllerState()
    transitions.register_broker(state, NODE_ID, "127.0.0.1", 9092, "incarnation", 0)
    transitions.create_topic(state, OFFSETS_TOPIC, -1, -1, {}, {0: [NODE_ID]})
    transitions.create_topic(state, "t", -1, -1, {}, {p: [NODE_ID] for p in range(PARTITIONS)})
    return state


def subscription(owned: dict[str, set[int]] | None = None, version: int = 1) -> bytes:
    """A ConsumerProtocolSubscription of topic t (v0: no owned partitions)."""
    topic = b"\x00\x01t"
    out = (
        version.to_bytes(2, "big")
        + (1).to_bytes(4, "big")
        + topic
        + (-1).to_bytes(4, "big", signed=True)
    )
    if version >= 1:
        owned = owned or {}
        out += len(owned).to_bytes(4, "big")
        for name, parts in owned.items():
            out += len(name).to_bytes(2, "big") + name.encode() + len(parts).to_bytes(4, "big")
            out += b"".join(p.to_bytes(4, "big") for p in sorted(parts))
    return out


def classic_join(member_id: str = "", owned: dict[str, set[int]] | None = None) -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        group_instance_id=None,
        client_id="classic",
        client_host="/127.0.0.1",
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=SESSION_MS,
        protocol_type="consumer",
        protocols=[("range", subscription(owned))],
        require_known_member_id=False,
    )


def consumer_join() -> HeartbeatRequest:
    return HeartbeatRequest(
        member_id="consumer-member",
        member_epoch=0,
        rebalance_timeout_ms=SESSION_MS,
        subscribed_topic_names=("t",),
        owned={},
        api_version=1,
    )


async def classic_group_of_two(coordinator) -> tuple[list[str], int]:
    """Two classic members, partitions 0-1 and 2-3, the leader's assignment synced."""
    alone = await coordinator.join("g", classic_join())
    assert alone.error == Error.NONE
    answers: list = []

    async def join(member_id: str) -> None:
        answers.append(await coordinator.join("g", classic_join(member_id)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join, "")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(join, alone.member_id)
    assert [a.error for a in answers] == [Error.NONE, Error.NONE], answers
    leader = next(a for a in answers if a.leader == a.member_id)
    ids = [leader.member_id] + [a.member_id for a in answers if a is not leader]
    assignments = {
        ids[0]: encode_assignment({"t": {0, 1}}, 1),
        ids[1]: encode_assignment({"t": {2, 3}}, 1),
    }
    async with trio.open_nursery() as nursery:
        for member_id in ids:
            nursery.start_soon(
                coordinator.sync, "g", member_id, None, leader.generation, assignments
            )
    assert coordinator.groups["g"].state == GroupState.STABLE
    return ids, leader.generation


async def test_upgrade_mixed_membership_and_downgrade_keep_the_offsets(autojump_clock, tmp_path):
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        (first, second), generation = await classic_group_of_two(coordinator)
        committed = await coordinator.commit(
            CommitRequest("g", generation, first, None, {("t", 0): (17, 0, "")})
        )
        assert committed == {("t", 0): Error.NONE}

        # 1. A ConsumerGroupHeartbeat upgrades the group: the classic members stay, at the
        # classic generation, with their assignments; the newcomer starts with nothing
        # (every partition is still held).
        joined = await coordinator.consumer_heartbeat("g", consumer_join())
        assert joined.error == Error.NONE, joined
        group = coordinator.groups["g"]
        assert isinstance(group, ConsumerGroup)
        assert group.members[first].classic is not None
        assert group.members[first].member_epoch == generation
        assert joined.member_epoch == generation + 1
        assert joined.assignment == {}
        assert coordinator.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 17

        # 2. The classic members are told to rejoin, and rejoin: their JoinGroup is answered
        # at once with their new epoch, their SyncGroup with what the assignor left them.
        for member_id in (first, second):
            assert coordinator.heartbeat("g", member_id, None, generation) == (
                Error.REBALANCE_IN_PROGRESS
            )
        held: dict[str, set[int]] = {}
        for member_id in (first, second):
            owned = decode_assignment(
                encode_assignment({"t": {0, 1} if member_id == first else {2, 3}}, 1)
            )
            rejoined = await coordinator.join("g", classic_join(member_id, owned={}))
            assert rejoined.error == Error.NONE, rejoined
            assert (rejoined.leader, rejoined.members) == ("", [])
            synced = await coordinator.sync(
                "g", member_id, None, rejoined.generation, {}, "consumer", "range"
            )
            assert synced.error == Error.NONE, synced
            held[member_id] = decode_assignment(synced.assignment).get("t", set())
            assert held[member_id] <= owned["t"] | set(range(PARTITIONS))
        # An eager classic member gave everything up: the consumer member gets its share.
        answer = await coordinator.consumer_heartbeat(
            "g",
            HeartbeatRequest("consumer-member", joined.member_epoch, owned={}, api_version=1),
        )
        assert answer.error == Error.NONE
        mine = {p for parts in (answer.assignment or {}).values() for p in parts}
        assert mine and not (mine & (held[first] | held[second]))
        # A classic member commits with its epoch as the generation.
        epoch = coordinator.groups["g"].members[first].member_epoch
        committed = await coordinator.commit(
            CommitRequest("g", epoch, first, None, {("t", 1): (5, 0, "")})
        )
        assert committed == {("t", 1): Error.NONE}
        stale = await coordinator.commit(
            CommitRequest("g", epoch - 1, first, None, {("t", 1): (6, 0, "")})
        )
        assert stale == {("t", 1): Error.ILLEGAL_GENERATION}

        # 3. The consumer-protocol member leaves: the group is classic again, its members
        # asked to rejoin, the offsets kept.
        left = await coordinator.consumer_heartbeat(
            "g", HeartbeatRequest("consumer-member", -1, api_version=1)
        )
        assert left.error == Error.NONE
        classic = coordinator.groups["g"]
        assert type(classic) is Group
        assert set(classic.members) == {first, second}
        assert classic.state == GroupState.PREPARING_REBALANCE
        _, offsets = coordinator.fetch_offsets("g", [("t", 0), ("t", 1)])
        assert (offsets[("t", 0)].offset, offsets[("t", 1)].offset) == (17, 5)
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_a_mixed_group_is_rebuilt_from_the_log(autojump_clock, tmp_path):
    state = cluster_state()
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        (first, _), generation = await classic_group_of_two(broker.coordinator)
        joined = await broker.coordinator.consumer_heartbeat("g", consumer_join())
        assert joined.error == Error.NONE
        before = broker.coordinator.groups["g"]
        assert isinstance(before, ConsumerGroup)
        members = {
            member_id: (m.member_epoch, m.classic, m.assigned)
            for member_id, m in before.members.items()
        }
        nursery.cancel_scope.cancel()
    broker.stop()

    restarted = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await restarted.start(nursery, state)
        group = restarted.coordinator.groups["g"]
        assert isinstance(group, ConsumerGroup)
        assert {
            member_id: (m.member_epoch, m.classic, m.assigned)
            for member_id, m in group.members.items()
        } == members
        assert group.group_epoch == generation + 1
        # The classic member carries on where it was: told to rejoin.
        assert restarted.coordinator.heartbeat("g", first, None, generation) == (
            Error.REBALANCE_IN_PROGRESS
        )
        nursery.cancel_scope.cancel()
    restarted.stop()


@pytest.mark.parametrize("policy", ["disabled", "upgrade"])
async def test_no_downgrade_when_the_policy_forbids_it(autojump_clock, tmp_path, policy):
    broker = Broker(tmp_path)
    broker.config = dataclasses.replace(broker.config, group_consumer_migration_policy=policy)
    broker.coordinator.config = broker.config
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        (first, second), generation = await classic_group_of_two(coordinator)
        if policy == "disabled":
            refused = await coordinator.consumer_heartbeat("g", consumer_join())
            assert (refused.error, refused.message) == (
                Error.GROUP_ID_NOT_FOUND,
                "Cannot upgrade classic group g to consumer group because online upgrade is "
                "disabled.",
            )
            assert type(coordinator.groups["g"]) is Group
        else:
            joined = await coordinator.consumer_heartbeat("g", consumer_join())
            assert joined.error == Error.NONE
            left = await coordinator.consumer_heartbeat(
                "g", HeartbeatRequest("consumer-member", -1, api_version=1)
            )
            assert left.error == Error.NONE
            group = coordinator.groups["g"]
            assert isinstance(group, ConsumerGroup)
            assert set(group.members) == {first, second}
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_a_classic_join_the_group_cannot_serve(autojump_clock, tmp_path):
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        joined = await coordinator.consumer_heartbeat("g", consumer_join())
        assert joined.error == Error.NONE
        # Another protocol type than `consumer`: Kafka's INCONSISTENT_GROUP_PROTOCOL.
        connect = dataclasses.replace(classic_join(), protocol_type="connect")
        assert (await coordinator.join("g", connect)).error == Error.INCONSISTENT_GROUP_PROTOCOL
        # A consumer-protocol member is unknown to the classic APIs.
        assert coordinator.heartbeat("g", "consumer-member", None, joined.member_epoch) == (
            Error.UNKNOWN_MEMBER_ID
        )
        # A new classic consumer is served.
        answer = await coordinator.join("g", classic_join())
        assert answer.error == Error.NONE
        assert answer.generation == joined.member_epoch + 1
        nursery.cancel_scope.cancel()
    broker.stop()
