"""The share groups' admin path (KIP-932) in process: the bookkeeping of which share partitions
have state (share_offsets.ShareStatePartitions, Kafka's ShareGroupStatePartitionMetadataInfo)
as pure data, its record's bytes, and the group coordinator service's
DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets and DeleteGroups
over an in-memory persister under trio's MockClock (the harness of test_share_group_service)."""

import uuid

import trio

from minibroker.coordinator.group import share_log_format
from minibroker.coordinator.group.share_log_format import (
    ShareRecordKey,
    ShareRecordKind,
    ShareStatePartitionMetadataValue,
    StatePartitionTopic,
)
from minibroker.coordinator.group.share_offsets import (
    InitTopic,
    ShareStatePartitions,
    plan_alter,
)
from minibroker.protocol.errors import Error
from minibroker.replication.share_persister import InMemoryPersister, ShareStateKey, WriteState
from tests.unit.test_group_coordinator_service import Broker, join_request
from tests.unit.test_share_group_service import PARTITIONS, beat, cluster_state, join

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
TOPICS = {"t": (T, 3), "u": (U, 2)}


def lookup(name):
    return TOPICS.get(name)


def by_id(topic_id):
    return next(((n, c) for n, (i, c) in TOPICS.items() if i == topic_id), None)


# -- the pure bookkeeping ---------------------------------------------------------------------


def test_subscribed_partitions_without_state_are_initialized_then_recorded():
    empty = ShareStatePartitions()
    changes = empty.to_initialize({"t", "u", "gone"}, lookup, now_ms=1000)
    assert changes == {
        T: InitTopic("t", frozenset({0, 1, 2}), 1000),
        U: InitTopic("u", frozenset({0, 1}), 1000),
    }
    initializing = empty.with_initializing(changes)
    # Initializing and fresh: not asked again; older than the retry interval: asked again.
    assert initializing.to_initialize({"t", "u"}, lookup, now_ms=1000 + 29_999) == {}
    assert set(initializing.to_initialize({"t"}, lookup, now_ms=1000 + 30_000)) == {T}
    done = initializing.with_initialized({T: {0, 1, 2}}, {T: "t"}, 2000)
    done = done.without_initializing({U: {0, 1}})
    assert done.initialized_partitions() == {T: {0, 1, 2}}
    assert done.initializing == {}
    # A topic that grew: only its new partition.
    TOPICS["t"] = (T, 4)
    try:
        assert done.to_initialize({"t"}, lookup, 3000) == {T: InitTopic("t", frozenset({3}), 3000)}
    finally:
        TOPICS["t"] = (T, 3)


def test_offsets_delete_and_group_delete_move_topics_to_deleting():
    state = ShareStatePartitions(initialized={T: InitTopic("t", frozenset({0, 1, 2}))})
    after, to_delete, refused = state.for_offsets_delete(["t", "u", "nosuch"], lookup)
    assert to_delete == {T: {0, 1, 2}}
    assert after.initialized == {} and after.deleting == {T: "t"}
    assert refused == [
        ("u", Error.UNKNOWN_TOPIC_OR_PARTITION, "There is no offset information to delete."),
        (
            "nosuch",
            Error.UNKNOWN_TOPIC_OR_PARTITION,
            "This server does not host this topic-partition.",
        ),
    ]
    # Still deleting (the persister failed): deleted again, all its partitions.
    again, to_delete, _ = after.for_offsets_delete(["t"], lookup)
    assert to_delete == {T: {0, 1, 2}} and again.deleting == {T: "t"}
    assert after.deleted([T]).is_empty()
    # Initializing a deleting topic takes it out of deleting.
    assert after.with_initializing({T: InitTopic("t", frozenset({0}))}).deleting == {}
    # Deleting the group: everything with state, and what is left deleting.
    mixed = ShareStatePartitions(
        initializing={U: InitTopic("u", frozenset({1}))},
        initialized={},
        deleting={T: "t", uuid.UUID(int=9): "dropped"},
    )
    gone, to_delete = mixed.for_group_delete(by_id)
    assert to_delete == {U: {1}, T: {0, 1, 2}}
    assert gone.deleting == {U: "u", T: "t"} and not gone.initialized and not gone.initializing


def test_alter_plan_initializes_known_partitions_only():
    plan = plan_alter([("t", [(0, 5), (7, 1)]), ("nosuch", [(0, 1)])], lookup, 100)
    unknown = "This server does not host this topic-partition."
    assert plan.responses == [
        ("t", T, [(0, Error.NONE, None), (7, Error.UNKNOWN_TOPIC_OR_PARTITION, unknown)]),
        ("nosuch", None, [(0, Error.UNKNOWN_TOPIC_OR_PARTITION, unknown)]),
    ]
    assert plan.offsets == {T: {0: 5}}
    assert plan.initializing == {T: InitTopic("t", frozenset({0}), 100)}


def test_state_partition_metadata_record_round_trips():
    value = ShareStatePartitionMetadataValue(
        initializing=(StatePartitionTopic(U, "u", (1,)),),
        initialized=(StatePartitionTopic(T, "t", (0, 1, 2)),),
        deleting=(StatePartitionTopic(uuid.UUID(int=9), "d"),),
    )
    data = share_log_format.encode_value(value)
    # Kafka's layout: version 0, three compact arrays, tagged fields.
    assert data[:3] == b"\x00\x00\x02"
    kind = ShareRecordKind.STATE_PARTITION_METADATA
    assert share_log_format.read_value(kind, data) == value
    key = share_log_format.encode_key(ShareRecordKey(kind, "sg"))
    assert key == b"\x00\x0f\x00\x02sg"
    assert share_log_format.read_key(key) == ShareRecordKey(kind, "sg")
    back = ShareStatePartitions.from_value(value, 5)
    assert back.value() == value


# -- the service ------------------------------------------------------------------------------


def _persisted(persister: InMemoryPersister) -> dict[int, tuple[int, int]]:
    """partition -> (start offset, state epoch) of group sg's share partitions of topic t."""
    return {
        key.partition: (state.start_offset, state.state_epoch)
        for key, state in persister.states.items()
        if key.group == "sg"
    }


async def test_join_initializes_then_admins_describe_alter_and_delete(autojump_clock, tmp_path):
    state = cluster_state()
    broker = Broker(tmp_path)
    persister = InMemoryPersister()
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        coordinator = broker.coordinator
        coordinator.share_persister = persister
        topic_id = broker.replicas.metadata.topic("t").topic_id
        joined = await coordinator.share_heartbeat("sg", join("a"))
        assert joined.error == Error.NONE
        # The heartbeat initialized the six share partitions (group epoch 1, start -1) and
        # recorded them as initialized.
        assert _persisted(persister) == {p: (-1, 1) for p in range(PARTITIONS)}
        group = coordinator.share_groups["sg"]
        assert group.state_partitions.initialized_partitions() == {topic_id: set(range(6))}
        # Described: all the group's share partitions (topics null), or those asked.
        error, _, topics = await coordinator.describe_share_group_offsets("sg", None)
        assert error == Error.NONE
        assert topics == [("t", topic_id, [(p, -1, -1, -1) for p in range(PARTITIONS)])]
        _, _, asked = await coordinator.describe_share_group_offsets("sg", [("t", [1]), ("x", [0])])
        assert asked == [("t", topic_id, [(1, -1, -1, -1)]), ("x", None, [(0, -1, 0, -1)])]
        # Lag: the end offset minus the start offset minus the records done after it.
        await persister.write(
            ShareStateKey("sg", topic_id, 3), WriteState(1, 0, 0, (), delivery_complete_count=0)
        )
        _, _, lagged = await coordinator.describe_share_group_offsets("sg", [("t", [3])])
        assert lagged == [("t", topic_id, [(3, 0, 0, 0)])]
        # Not while it has members.
        refused = await coordinator.alter_share_group_offsets("sg", [("t", [(0, 0)])])
        assert refused[:2] == (Error.NON_EMPTY_GROUP, "The group is not empty.")
        refused = await coordinator.delete_share_group_offsets("sg", ["t"])
        assert refused[0] == Error.NON_EMPTY_GROUP
        assert (await coordinator.share_heartbeat("sg", beat("a", -1))).error == Error.NONE
        assert (await coordinator.join("classic", join_request())).error == Error.NONE
        # Unknown group: DeleteShareGroupOffsets is GROUP_ID_NOT_FOUND; AlterShareGroupOffsets
        # creates it, as Kafka 4.4 does (getOrMaybeCreateShareGroup(groupId, true)).
        assert (await coordinator.delete_share_group_offsets("nosuch", ["t"]))[:2] == (
            Error.GROUP_ID_NOT_FOUND,
            "Group nosuch not found.",
        )
        created = await coordinator.alter_share_group_offsets("new", [("t", [(0, 4)])])
        assert created[0] == Error.NONE
        assert coordinator.share_groups["new"].state.value == "Empty"
        assert persister.states[ShareStateKey("new", topic_id, 0)].start_offset == 4
        assert (await coordinator.alter_share_group_offsets("classic", []))[:2] == (
            Error.GROUP_ID_NOT_FOUND,
            "Group classic is not a share group.",
        )
        assert (await coordinator.delete_share_group_offsets("classic", ["t"]))[:2] == (
            Error.GROUP_ID_NOT_FOUND,
            "Group classic is not a share group.",
        )
        # Alter: partition 2 to 7 (state epoch: the group epoch), partition 9 does not exist.
        error, _, answers = await coordinator.alter_share_group_offsets(
            "sg", [("t", [(2, 7), (9, 0)])]
        )
        unknown = "This server does not host this topic-partition."
        assert (error, answers) == (
            Error.NONE,
            [
                (
                    "t",
                    topic_id,
                    [(2, Error.NONE, None), (9, Error.UNKNOWN_TOPIC_OR_PARTITION, unknown)],
                )
            ],
        )
        assert _persisted(persister)[2] == (7, group.group_epoch)
        _, _, topics = await coordinator.describe_share_group_offsets("sg", [("t", [2])])
        # No delivery complete count known yet (none written since): no lag, as Kafka.
        assert topics == [("t", topic_id, [(2, 7, -1, -1)])]
        # Delete the offsets of t: the state is gone and so is the bookkeeping.
        error, _, answers = await coordinator.delete_share_group_offsets("sg", ["t", "x"])
        assert error == Error.NONE
        assert answers == [
            ("t", topic_id, Error.NONE, None),
            ("x", None, Error.UNKNOWN_TOPIC_OR_PARTITION, unknown),
        ]
        assert _persisted(persister) == {}
        assert group.state_partitions.is_empty()
        assert (await coordinator.describe_share_group_offsets("sg", None))[2] == []
        _, _, answers = await coordinator.delete_share_group_offsets("sg", ["t"])
        assert answers == [
            (
                "t",
                None,
                Error.UNKNOWN_TOPIC_OR_PARTITION,
                "There is no offset information to delete.",
            )
        ]
        # Alter on an empty group with no state: initializes it, recorded as initialized.
        await coordinator.alter_share_group_offsets("sg", [("t", [(0, 3)])])
        assert _persisted(persister) == {0: (3, group.group_epoch)}
        assert group.state_partitions.initialized_partitions() == {topic_id: {0}}
        nursery.cancel_scope.cancel()
    broker.stop()

    # A restarted coordinator has the bookkeeping back from the record.
    restarted = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await restarted.start(nursery, state)
        coordinator = restarted.coordinator
        coordinator.share_persister = persister
        group = coordinator.share_groups["sg"]
        assert group.state_partitions.initialized_partitions() == {topic_id: {0}}
        # DeleteGroups deletes the group's share state through the persister.
        assert await coordinator.delete_group("sg") == Error.NONE
        assert _persisted(persister) == {}
        assert "sg" not in coordinator.share_groups
        nursery.cancel_scope.cancel()
    restarted.stop()


async def test_a_failed_initialization_is_tried_again(autojump_clock, tmp_path):
    class Failing(InMemoryPersister):
        fail = True

        async def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int):
            if self.fail:
                return Error.COORDINATOR_NOT_AVAILABLE
            return await super().initialize(key, state_epoch, start_offset)

    broker = Broker(tmp_path)
    persister = Failing()
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        coordinator.share_persister = persister
        joined = await coordinator.share_heartbeat("sg", join("a"))
        assert joined.error == Error.NONE  # the heartbeat is answered all the same
        group = coordinator.share_groups["sg"]
        assert group.state_partitions.is_empty()  # taken out of initializing
        persister.fail = False
        again = await coordinator.share_heartbeat("sg", beat("a", joined.member_epoch))
        assert again.error == Error.NONE
        (initialized,) = group.state_partitions.initialized_partitions().values()
        assert initialized == set(range(PARTITIONS))
        # DeleteGroups answers the persister's error and keeps the group.
        assert (await coordinator.share_heartbeat("sg", beat("a", -1))).error == Error.NONE

        async def refuse(key):
            return Error.COORDINATOR_NOT_AVAILABLE

        persister.delete = refuse  # type: ignore[method-assign]
        assert await coordinator.delete_group("sg") == Error.COORDINATOR_NOT_AVAILABLE
        assert "sg" in coordinator.share_groups
        nursery.cancel_scope.cancel()
    broker.stop()
