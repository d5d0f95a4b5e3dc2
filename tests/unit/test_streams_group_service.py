"""Streams groups (KIP-1071) in the group coordinator service, under trio's MockClock: a real
replica manager leading `__consumer_offsets` in tmp_path (the harness of
test_group_coordinator_service.py), StreamsGroupHeartbeat's calls on the service, the records
read back by a restarted coordinator, sessions expiring on the runtime's timers, offsets
committed with member epochs, and bad input answered with Kafka's codes while the group keeps
serving its members."""

import dataclasses

import trio
import trio.testing

from minibroker.coordinator.group.service import CommitRequest
from minibroker.coordinator.group.streams_entry import StreamsGroupEntry
from minibroker.coordinator.group.streams_group import Status, StreamsHeartbeatRequest
from minibroker.coordinator.group.streams_log_format import Subtopology, TopicInfo, Topology
from minibroker.protocol.errors import Error
from tests.unit.test_group_coordinator_service import Broker, cluster_state, join_request

SESSION_MS = 45_000  # streams.session.timeout.ms's default
# One stateless subtopology reading `t` (one partition): one task, ("0", 0).
TOPOLOGY = Topology(1, (Subtopology("0", source_topics=("t",)),))


def streams_broker(tmp_path, delay_ms: int = 0) -> Broker:
    """The harness's broker with group.streams.initial.rebalance.delay.ms at ``delay_ms``
    (0 unless a test is about the delay: Kafka's 3000 would hold every first assignment)."""
    broker = Broker(tmp_path)
    broker.config = dataclasses.replace(
        broker.config, group_streams_initial_rebalance_delay_ms=delay_ms
    )
    broker.coordinator.config = broker.config
    return broker


def joining(member_id: str, process: str, topology: Topology = TOPOLOGY) -> StreamsHeartbeatRequest:
    return StreamsHeartbeatRequest(
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        topology=topology,
        process_id=process,
        active=set(),
        standby=set(),
        warmup=set(),
    )


def heartbeat(member_id: str, epoch: int, active=frozenset()) -> StreamsHeartbeatRequest:
    return StreamsHeartbeatRequest(
        member_id=member_id,
        member_epoch=epoch,
        active=set(active),
        standby=set(),
        warmup=set(),
    )


async def test_a_member_gets_the_task_and_loses_it_when_its_session_runs_out(
    autojump_clock, tmp_path
):
    broker = streams_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        result = await coordinator.streams_heartbeat("app", joining("m1", "p1"))
        assert result.error == Error.NONE, result
        assert (result.member_id, result.member_epoch) == ("m1", 1)
        assert result.active == {("0", 0)} and result.statuses == []
        assert result.heartbeat_interval_ms == 5000
        group = coordinator.groups["app"]
        assert isinstance(group, StreamsGroupEntry)
        assert group.state.value == "Stable"
        # Heartbeats within the session keep it, for several sessions.
        for _ in range(4):
            await trio.sleep(SESSION_MS / 1000 * 0.8)
            kept = await coordinator.streams_heartbeat("app", heartbeat("m1", 1, {("0", 0)}))
            assert kept.error == Error.NONE and kept.member_epoch == 1
        # Silence: fenced by the runtime's timer once the session ran out, not before.
        await trio.sleep(SESSION_MS / 1000 * 0.9)
        assert "m1" in group.streams.members
        await trio.sleep(SESSION_MS / 1000 * 0.2)
        assert "m1" not in group.streams.members
        assert group.state.value == "Empty"
        late = await coordinator.streams_heartbeat("app", heartbeat("m1", 1, {("0", 0)}))
        assert late.error == Error.UNKNOWN_MEMBER_ID
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_the_task_moves_to_a_second_member_only_once_the_first_revoked_it(
    autojump_clock, tmp_path
):
    """Two members, a two-partition source: the second member's task is handed over only
    after the first member's heartbeat says it no longer owns it (Kafka's
    CurrentAssignmentBuilder: UNREVOKED_TASKS, then UNRELEASED_TASKS)."""
    state = cluster_state()
    from minibroker.controller import state as transitions

    transitions.create_topic(state, "two", -1, -1, {}, {0: [1], 1: [1]})
    topology = Topology(1, (Subtopology("0", source_topics=("two",)),))
    broker = streams_broker(tmp_path)
    broker.replicas.announced_topic_configs["two"] = {}
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        c = broker.coordinator
        first = await c.streams_heartbeat("app", joining("m1", "p1", topology))
        assert first.active == {("0", 0), ("0", 1)}
        second = await c.streams_heartbeat("app", joining("m2", "p2", topology))
        assert second.error == Error.NONE and second.member_epoch == 2
        # m2's task is still owned by m1: it gets nothing yet.
        assert second.active == set()
        # m1 is told to give one task up (still at epoch 1: UNREVOKED_TASKS).
        revoke = await c.streams_heartbeat("app", heartbeat("m1", 1, {("0", 0), ("0", 1)}))
        assert revoke.member_epoch == 1 and len(revoke.active) == 1
        kept = revoke.active
        # It revokes: its next heartbeat owns one task; it moves to epoch 2.
        done = await c.streams_heartbeat("app", heartbeat("m1", 1, kept))
        assert done.member_epoch == 2
        # Now m2 gets the released task.
        got = await c.streams_heartbeat("app", heartbeat("m2", 2))
        assert got.active == {("0", 0), ("0", 1)} - kept
        assert c.groups["app"].state.value == "Stable"
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_the_group_is_read_back_by_a_restarted_coordinator(autojump_clock, tmp_path):
    state = cluster_state()
    broker = streams_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        joined = await broker.coordinator.streams_heartbeat("app", joining("m1", "p1"))
        assert joined.member_epoch == 1
        errors = await broker.coordinator.commit(
            CommitRequest("app", 1, "m1", None, {("t", 0): (7, 0, "")})
        )
        assert errors == {("t", 0): Error.NONE}
        nursery.cancel_scope.cancel()
    broker.stop()

    restarted = streams_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await restarted.start(nursery, state)
        group = restarted.coordinator.groups["app"]
        assert isinstance(group, StreamsGroupEntry)
        member = group.streams.members["m1"]
        assert (member.member_epoch, member.process_id) == (1, "p1")
        assert member.assigned.active == {("0", 0)}
        assert group.streams.topology == TOPOLOGY
        assert group.streams.group_epoch == 1
        error, offsets = restarted.coordinator.fetch_offsets("app", [("t", 0)])
        assert error == Error.NONE and offsets[("t", 0)].offset == 7
        # The member goes on heartbeating at its epoch with the new coordinator.
        again = await restarted.coordinator.streams_heartbeat("app", heartbeat("m1", 1, {("0", 0)}))
        assert again.error == Error.NONE
        nursery.cancel_scope.cancel()
    restarted.stop()


async def test_offsets_are_committed_and_fetched_with_the_member_epoch(autojump_clock, tmp_path):
    broker = streams_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        c = broker.coordinator
        await c.streams_heartbeat("app", joining("m1", "p1"))

        async def commit(member: str, epoch: int) -> Error:
            errors = await c.commit(
                CommitRequest("app", epoch, member, None, {("t", 0): (1, 0, "")})
            )
            return errors[("t", 0)]

        assert await commit("m1", 1) == Error.NONE
        assert await commit("m1", 0) == Error.STALE_MEMBER_EPOCH
        assert await commit("nobody", 1) == Error.UNKNOWN_MEMBER_ID
        # An admin commit (no member, epoch -1) only to an empty group.
        assert await commit("", -1) == Error.UNKNOWN_MEMBER_ID
        assert c.validate_offset_fetch("app", "m1", 1) == Error.NONE
        assert c.validate_offset_fetch("app", "m1", 5) == Error.STALE_MEMBER_EPOCH
        assert c.validate_offset_fetch("app", None, -1) == Error.NONE
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_bad_input_gets_kafkas_codes_and_the_member_keeps_its_task(autojump_clock, tmp_path):
    broker = streams_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        c = broker.coordinator
        assert (await c.streams_heartbeat("app", joining("m1", "p1"))).member_epoch == 1

        async def error_of(request, group="app") -> Error:
            return (await c.streams_heartbeat(group, request)).error

        # A stale member epoch, an unknown member.
        assert await error_of(heartbeat("m1", 7)) == Error.FENCED_MEMBER_EPOCH
        assert await error_of(heartbeat("ghost", 1)) == Error.UNKNOWN_MEMBER_ID
        # A topology that changed without an epoch bump.
        other = Topology(1, (Subtopology("0", source_topics=("t",)), Subtopology("1", ("t2",))))
        assert await error_of(joining("m2", "p2", other)) == Error.STREAMS_INVALID_TOPOLOGY_EPOCH
        # An invalid topology: a repartition topic that is also a source topic.
        invalid = Topology(
            1,
            (
                Subtopology(
                    "0",
                    source_topics=("t",),
                    repartition_source_topics=(TopicInfo("t"),),
                ),
            ),
        )
        assert await error_of(joining("m3", "p3", invalid), "app2") == (
            Error.STREAMS_INVALID_TOPOLOGY
        )
        assert "app2" not in c.groups  # a refused first heartbeat creates no group
        # The first heartbeat without a topology.
        no_topology = dataclasses.replace(joining("m4", "p4"), topology=None)
        assert await error_of(no_topology) == Error.INVALID_REQUEST
        # A group id of a classic group with members is not a streams group.
        joined = await c.join("classic", join_request())
        assert joined.error == Error.NONE
        assert await error_of(joining("m5", "p5"), "classic") == Error.GROUP_ID_NOT_FOUND
        # ... nor is a streams group a consumer group or a classic one.
        describe = c.describe_consumer_group("app")
        assert describe[0] == Error.GROUP_ID_NOT_FOUND
        assert (await c.join("app", join_request())).error == Error.INCONSISTENT_GROUP_PROTOCOL
        # Through all of it the member kept its epoch and its task.
        kept = await c.streams_heartbeat("app", heartbeat("m1", 1, {("0", 0)}))
        assert kept.error == Error.NONE and kept.member_epoch == 1
        assert c.groups["app"].streams.members["m1"].assigned.active == {("0", 0)}
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_missing_internal_topics_are_named_with_their_partition_counts(
    autojump_clock, tmp_path
):
    """A stateful subtopology's changelog topic does not exist: the member is answered
    MISSING_INTERNAL_TOPICS with no tasks, and the result lists the topic to create with the
    source topic's partition count (the handler creates it through the controller)."""
    stateful = Topology(
        1,
        (
            Subtopology(
                "0",
                source_topics=("t",),
                state_changelog_topics=(TopicInfo("app-store-changelog", 0, 0, (("a", "b"),)),),
            ),
        ),
    )
    broker = streams_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        result = await broker.coordinator.streams_heartbeat("app", joining("m1", "p1", stateful))
        assert result.error == Error.NONE
        assert [code for code, _ in result.statuses] == [Status.MISSING_INTERNAL_TOPICS]
        assert result.active == set()
        created = result.topics_to_create["app-store-changelog"]
        assert (created.partitions, created.configs) == (1, (("a", "b"),))
        assert broker.coordinator.groups["app"].state.value == "NotReady"
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_an_empty_streams_group_is_deleted_with_its_records(autojump_clock, tmp_path):
    """DeleteGroups: NON_EMPTY_GROUP while a member is in; once it left (epoch -1) the group,
    its records and its offsets are tombstoned, and a restarted coordinator does not bring it
    back. ListGroups' entry is the streams group while it lives."""
    state = cluster_state()
    broker = streams_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        c = broker.coordinator
        await c.streams_heartbeat("app", joining("m1", "p1"))
        await c.commit(CommitRequest("app", 1, "m1", None, {("t", 0): (3, 0, "")}))
        listed = [g for g in c.list_groups()[1] if g.group_id == "app"]
        assert [(g.protocol_type, g.state.value) for g in listed] == [("streams", "Stable")]
        assert await c.delete_group("app") == Error.NON_EMPTY_GROUP
        left = await c.streams_heartbeat("app", heartbeat("m1", -1))
        assert left.error == Error.NONE and left.member_epoch == -1
        assert c.groups["app"].state.value == "Empty"
        assert await c.delete_group("app") == Error.NONE
        assert "app" not in c.groups
        nursery.cancel_scope.cancel()
    broker.stop()

    restarted = streams_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await restarted.start(nursery, state)
        assert "app" not in restarted.coordinator.groups
        error, offsets = restarted.coordinator.fetch_offsets("app", [("t", 0)])
        assert error == Error.NONE and offsets[("t", 0)] is None
        nursery.cancel_scope.cancel()
    restarted.stop()


async def test_an_application_moves_between_the_classic_and_the_streams_protocol(
    autojump_clock, tmp_path
):
    """Kafka 4.4's offline migration, both ways, with the committed offsets: a classic group
    with no members becomes a streams group at a StreamsGroupHeartbeat (getOrCreateStreamsGroup,
    maybeDeleteEmptyClassicGroup), and an empty streams group a classic group at a JoinGroup
    (classicGroupJoinToClassicGroup, maybeDeleteEmptyStreamsGroup: its records tombstoned, so
    a restarted coordinator reads back the classic group). While either has members the other
    protocol is refused: GROUP_ID_NOT_FOUND, INCONSISTENT_GROUP_PROTOCOL."""
    state = cluster_state()
    broker = streams_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        c = broker.coordinator
        classic = await c.join("app", join_request())
        assert classic.error == Error.NONE
        member = classic.member_id
        synced = await c.sync("app", member, None, classic.generation, {member: b"a"})
        assert synced.error == Error.NONE
        committed = await c.commit(
            CommitRequest("app", classic.generation, member, None, {("t", 0): (5, 0, "")})
        )
        assert committed == {("t", 0): Error.NONE}
        refused = await c.streams_heartbeat("app", joining("m1", "p1"))
        assert (refused.error, refused.message) == (
            Error.GROUP_ID_NOT_FOUND,
            "Group app is not a streams group.",
        )
        assert await c.leave("app", [(member, None)]) == [Error.NONE]
        joined = await c.streams_heartbeat("app", joining("m1", "p1"))
        assert joined.error == Error.NONE and joined.member_epoch == 1
        assert c.fetch_offsets("app", [("t", 0)])[1][("t", 0)].offset == 5
        committed = await c.commit(CommitRequest("app", 1, "m1", None, {("t", 0): (8, 0, "")}))
        assert committed == {("t", 0): Error.NONE}
        assert (await c.join("app", join_request())).error == Error.INCONSISTENT_GROUP_PROTOCOL
        assert (await c.streams_heartbeat("app", heartbeat("m1", -1))).error == Error.NONE
        # A known member id: the streams group goes, and no classic group is made for it.
        stale = await c.join("app", join_request("old-member"))
        assert stale.error == Error.UNKNOWN_MEMBER_ID
        back = await c.join("app", join_request())
        assert back.error == Error.NONE
        assert not isinstance(c.groups["app"], StreamsGroupEntry)
        assert c.fetch_offsets("app", [("t", 0)])[1][("t", 0)].offset == 8
        assert await c.leave("app", [(back.member_id, None)]) == [Error.NONE]
        nursery.cancel_scope.cancel()
    broker.stop()

    restarted = streams_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await restarted.start(nursery, state)
        c = restarted.coordinator
        assert not isinstance(c.groups["app"], StreamsGroupEntry)
        assert c.fetch_offsets("app", [("t", 0)])[1][("t", 0)].offset == 8
        # ... and it becomes a streams group again.
        again = await c.streams_heartbeat("app", joining("m2", "p2"))
        assert again.error == Error.NONE and again.member_epoch >= 1
        nursery.cancel_scope.cancel()
    restarted.stop()


async def test_the_brokers_group_streams_properties_and_the_groups_configs_apply(
    autojump_clock, tmp_path
):
    """group.streams.heartbeat.interval.ms, group.streams.session.timeout.ms and
    group.streams.max.size act on StreamsGroupHeartbeat (Kafka's GroupCoordinatorConfig as
    GroupMetadataManager reads it); a group's own streams.* configs override them; a full
    group answers the newcomer GROUP_MAX_SIZE_REACHED and keeps serving its member."""
    broker = streams_broker(tmp_path)
    broker.coordinator.config = dataclasses.replace(
        broker.config,
        group_streams_heartbeat_interval_ms=3000,
        group_streams_session_timeout_ms=60_000,
        group_streams_max_size=1,
    )
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        c = broker.coordinator
        first = await c.streams_heartbeat("app", joining("m1", "p1"))
        assert first.error == Error.NONE and first.heartbeat_interval_ms == 3000
        full = await c.streams_heartbeat("app", joining("m2", "p2"))
        assert full.error == Error.GROUP_MAX_SIZE_REACHED
        assert full.message == "The streams group has reached its maximum capacity of 1 members."
        assert set(c.groups["app"].streams.members) == {"m1"}
        # The session is the broker's 60 s, not Kafka's default 45 s.
        await trio.sleep(50)
        assert "m1" in c.groups["app"].streams.members
        kept = await c.streams_heartbeat("app", heartbeat("m1", 1, {("0", 0)}))
        assert kept.error == Error.NONE and kept.member_epoch == 1
        # The group's own config over the broker's, at the next heartbeat.
        broker.replicas.group_configs["app"] = {"streams.heartbeat.interval.ms": "4000"}
        again = await c.streams_heartbeat("app", heartbeat("m1", 1, {("0", 0)}))
        assert again.heartbeat_interval_ms == 4000
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_a_share_groups_id_is_not_a_streams_group(autojump_clock, tmp_path):
    """Kafka keeps every group type in one map: StreamsGroupHeartbeat and StreamsGroupDescribe
    to a share group's id are GROUP_ID_NOT_FOUND (castToStreamsGroup), and the share group
    goes on."""
    from minibroker.coordinator.group.share_group import ShareHeartbeatRequest

    broker = streams_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        c = broker.coordinator
        shared = await c.share_heartbeat(
            "sg", ShareHeartbeatRequest("s1", 0, subscribed_topic_names=("t",))
        )
        assert shared.error == Error.NONE
        refused = await c.streams_heartbeat("sg", joining("m1", "p1"))
        assert (refused.error, refused.message) == (
            Error.GROUP_ID_NOT_FOUND,
            "Group sg is not a streams group.",
        )
        assert "sg" not in c.groups
        assert c.describe_streams_group("sg")[:2] == (
            Error.GROUP_ID_NOT_FOUND,
            "Group sg is not a streams group.",
        )
        still = await c.share_heartbeat("sg", ShareHeartbeatRequest("s1", shared.member_epoch))
        assert still.error == Error.NONE
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_the_initial_rebalance_delay_holds_the_first_assignment(autojump_clock, tmp_path):
    """group.streams.initial.rebalance.delay.ms (Kafka's 3000): a member that joins an empty
    group is answered at member epoch 0, without task lists and with the ASSIGNMENT_DELAYED
    status until the delay has passed (so it joins again, as Kafka Streams does); then the
    runtime's timer computes the assignment and the next heartbeat brings the task; a member
    that joins once the group has an assignment is assigned at once."""
    broker = streams_broker(tmp_path, delay_ms=3000)
    delayed = (
        Status.ASSIGNMENT_DELAYED,
        "Assignment delayed due to the configured initial rebalance delay.",
    )
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        c = broker.coordinator
        first = await c.streams_heartbeat("app", joining("m1", "p1"))
        assert first.error == Error.NONE and first.active is None, first
        assert first.statuses == [delayed] and first.member_epoch == 0
        group = c.groups["app"]
        assert group.state.value == "Assigning"
        assert group.streams.initial_delay_deadline_ms == c.clock_ms() + 3000
        await trio.sleep(2.9)
        still = await c.streams_heartbeat("app", joining("m1", "p1"))
        assert still.statuses == [delayed] and still.active is None, still
        await trio.sleep(0.2)
        # The timer computed the target assignment: the task comes with the next heartbeat.
        assert group.streams.initial_delay_deadline_ms is None
        assert group.streams.assignment_epoch == group.streams.group_epoch
        assigned = await c.streams_heartbeat("app", joining("m1", "p1"))
        assert assigned.statuses == [] and assigned.active == {("0", 0)}, assigned
        # Not empty any more: a newcomer's epoch is assigned at once.
        second = await c.streams_heartbeat("app", joining("m2", "p2"))
        assert second.statuses == [] and second.error == Error.NONE
        assert group.streams.assignment_epoch == group.streams.group_epoch
        nursery.cancel_scope.cancel()
    broker.stop()
