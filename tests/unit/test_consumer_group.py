"""The consumer group protocol's rules (broker/coordinator/group/consumer_group.py, assignors.py,
consumer_log_format.py), with time passed in."""

import uuid

import pytest

from minibroker.coordinator.group import assignors, consumer_log_format, state
from minibroker.coordinator.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerSettings,
    HeartbeatError,
    HeartbeatRequest,
    MemberState,
    validate,
)
from minibroker.coordinator.group.state import GroupSettings, GroupState
from minibroker.protocol.errors import Error
from minibroker.protocol.record_batch import scan_valid_batches
from minibroker.protocol.records import Record, encode_batch

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
TOPICS = {"t": (T, 6), "u": (U, 2)}
SESSION = ConsumerSettings().session_timeout_ms


def lookup(name):
    return TOPICS.get(name)


def new_group(**settings) -> ConsumerGroup:
    return ConsumerGroup("g", GroupSettings(), ConsumerSettings(**settings), 0)


def join(group, member_id="", now=0, topics=("t",), **changes):
    request = HeartbeatRequest(
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=tuple(topics),
        owned={},
        client_id="c",
        client_host="/127.0.0.1",
        **changes,
    )
    validate(request, group.group_id, assignors.ASSIGNORS)
    result, records = group.consumer_heartbeat(request, lookup, now)
    assert result.error == Error.NONE, result
    return result, records


def beat(group, member_id, epoch, owned, now=0, **changes):
    request = HeartbeatRequest(member_id=member_id, member_epoch=epoch, owned=owned, **changes)
    return group.consumer_heartbeat(request, lookup, now)


def total(assignment) -> int:
    return sum(len(p) for p in (assignment or {}).values())


def test_the_first_member_gets_every_partition_at_epoch_one():
    group = new_group()
    result, records = join(group)
    assert result.member_id and result.member_epoch == 1
    assert result.heartbeat_interval_ms == 5000
    assert result.assignment == {T: set(range(6))}
    assert group.is_(GroupState.STABLE) and group.state == ConsumerGroupState.STABLE
    kinds = [key.kind for key, _ in records]
    assert consumer_log_format.RecordKind.MEMBER_METADATA in kinds
    assert consumer_log_format.RecordKind.CURRENT_ASSIGNMENT in kinds


def test_a_second_member_gets_partitions_only_after_the_first_revokes_them():
    group = new_group()
    first, _ = join(group)
    a = first.member_id
    second, _ = join(group, now=10)
    b = second.member_id
    # B is at the new epoch but its partitions are still A's: nothing usable yet.
    assert second.member_epoch == 2 and second.assignment == {}
    assert group.members[b].state == MemberState.UNRELEASED_PARTITIONS
    assert group.state == ConsumerGroupState.RECONCILING
    # A is asked to revoke three partitions, at its current epoch.
    answer, _ = beat(group, a, 1, {T: set(range(6))}, now=20)
    assert answer.member_epoch == 1 and total(answer.assignment) == 3
    assert group.members[a].state == MemberState.UNREVOKED_PARTITIONS
    # Still owning them: it stays there.
    answer, _ = beat(group, a, 1, {T: set(range(6))}, now=30)
    assert group.members[a].state == MemberState.UNREVOKED_PARTITIONS
    # Revoked: A moves to epoch 2; then B receives the released partitions.
    kept = answer.assignment or group.members[a].assigned
    answer, _ = beat(group, a, 1, {T: set(kept[T])}, now=40)
    assert answer.member_epoch == 2 and group.members[a].state == MemberState.STABLE
    answer, _ = beat(group, b, 2, {}, now=50)
    assert total(answer.assignment) == 3
    assert answer.assignment[T].isdisjoint(kept[T])
    assert group.state == ConsumerGroupState.STABLE


def test_a_stale_or_future_epoch_is_fenced_but_the_previous_one_with_a_subset_is_not():
    group = new_group()
    first, _ = join(group)
    a = first.member_id
    result, records = beat(group, a, 5, {})
    assert result.error == Error.FENCED_MEMBER_EPOCH and not records
    join(group, now=1)  # epoch 2; A goes to revoke at epoch 1 then to 2
    beat(group, a, 1, {T: set(range(6))})
    beat(group, a, 1, {T: group.members[a].assigned[T]})
    assert group.members[a].member_epoch == 2
    # The previous epoch with owned partitions within the assignment: a lost answer.
    ok, _ = beat(group, a, 1, {T: set(group.members[a].assigned[T])})
    assert ok.error == Error.NONE
    stale, _ = beat(group, a, 1, {T: set(range(6))})
    assert stale.error == Error.FENCED_MEMBER_EPOCH


def test_an_unknown_member_and_an_unknown_assignor_are_refused():
    group = new_group()
    result, _ = beat(group, "nobody", 3, {})
    assert result.error == Error.UNKNOWN_MEMBER_ID
    request = HeartbeatRequest(
        "",
        0,
        rebalance_timeout_ms=1,
        subscribed_topic_names=("t",),
        owned={},
        server_assignor="nope",
    )
    with pytest.raises(HeartbeatError) as error:
        validate(request, "g", assignors.ASSIGNORS)
    assert error.value.error == Error.UNSUPPORTED_ASSIGNOR
    for bad in (
        HeartbeatRequest("", 0, rebalance_timeout_ms=-1, subscribed_topic_names=("t",), owned={}),
        HeartbeatRequest("", 0, rebalance_timeout_ms=1, subscribed_topic_names=(), owned={}),
        HeartbeatRequest("", 3),
        HeartbeatRequest("m", -3),
        HeartbeatRequest("m", -2),
    ):
        with pytest.raises(HeartbeatError) as error:
            validate(bad, "g", assignors.ASSIGNORS)
        assert error.value.error == Error.INVALID_REQUEST


def test_the_group_max_size_is_enforced():
    group = new_group(max_size=1)
    join(group)
    request = HeartbeatRequest(
        "", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",), owned={}
    )
    result, _ = group.consumer_heartbeat(request, lookup, 0)
    assert result.error == Error.GROUP_MAX_SIZE_REACHED


def test_leaving_hands_the_partitions_to_the_others():
    group = new_group()
    a = join(group)[0].member_id
    b = join(group)[0].member_id
    beat(group, a, 1, {T: set(range(6))})
    beat(group, a, 1, {T: group.members[a].assigned[T]})
    beat(group, b, 2, {})
    left, records = group.consumer_heartbeat(HeartbeatRequest(b, -1), lookup, 0)
    assert left.error == Error.NONE and left.member_epoch == -1
    assert b not in group.members
    assert any(value is None for _, value in records)  # tombstones of the member
    answer, _ = beat(group, a, 2, {T: group.members[a].assigned[T]})
    assert answer.assignment == {T: set(range(6))} and answer.member_epoch == 3


def test_a_member_that_misses_its_session_is_fenced():
    group = new_group()
    a = join(group)[0].member_id
    join(group, now=1000)
    assert group.next_deadline_ms() == SESSION
    records = group.expire(SESSION)
    assert a not in group.members and records
    assert len(group.members) == 1


def test_a_static_member_leaving_with_minus_two_keeps_its_partitions_for_its_successor():
    group = new_group()
    first, _ = join(group, instance_id="i1")
    a = first.member_id
    left, _ = group.consumer_heartbeat(HeartbeatRequest(a, -2, instance_id="i1"), lookup, 5)
    assert left.member_epoch == -2 and group.members[a].assigned == {T: set(range(6))}
    # Another incarnation with the instance id takes the partitions its predecessor kept.
    back, _ = join(group, member_id="new-id", instance_id="i1")
    assert back.member_id == "new-id" and back.assignment == {T: set(range(6))}
    assert a not in group.members


def test_range_and_uniform_assignors():
    subs = {"a": {T}, "b": {T}, "c": {T}}
    ranged = assignors.range_(subs, {T: 7}, {})
    assert ranged == {"a": {T: {0, 1, 2}}, "b": {T: {3, 4}}, "c": {T: {5, 6}}}
    uniform = assignors.uniform(subs, {T: 7}, {"a": {T: {0, 1, 2, 3, 4, 5, 6}}})
    assert sorted(total(v) for v in uniform.values()) == [2, 2, 3]
    assert len(uniform["a"][T]) == 3
    # Sticky: members keep what they own when the balance allows (a range-like assignor would
    # hand a 0-2 and b 3-4).
    sticky = assignors.uniform(subs, {T: 7}, {"a": {T: {1, 3, 5}}, "b": {T: {0, 2}}})
    assert sticky["a"][T] == {1, 3, 5} and sticky["b"][T] == {0, 2}
    assert sticky["c"][T] == {4, 6}
    # Heterogeneous: u only to b.
    hetero = assignors.uniform({"a": {T}, "b": {T, U}}, {T: 6, U: 2}, {})
    assert hetero["b"].get(U) == {0, 1} and total(hetero["a"]) + total(hetero["b"]) == 8


def test_the_records_round_trip_and_rebuild_the_group():
    group = new_group()
    a = join(group, instance_id="i1")[0].member_id
    join(group)
    beat(group, a, 1, {T: set(range(6))})
    values = {}
    for key, value in group._persisted().items():
        data_key = consumer_log_format.encode_key(key)
        data_value = consumer_log_format.encode_value(value)
        read = consumer_log_format.read_key(data_key)
        assert read == key
        values[read] = consumer_log_format.read_value(read.kind, data_value)
        assert values[read] == value
    again = ConsumerGroup("g", GroupSettings(), ConsumerSettings(), 0)
    again.restore_records(values, 100)
    assert again._persisted() == group._persisted()
    assert again.state == group.state
    assert again.members[a].state == MemberState.UNREVOKED_PARTITIONS


def test_offset_commit_checks_the_member_epoch():
    group = new_group()
    assert group.validate_offset_commit("", -1) == Error.NONE
    a = join(group)[0].member_id
    assert group.validate_offset_commit(a, 1) == Error.NONE
    assert group.validate_offset_commit(a, 0) == Error.STALE_MEMBER_EPOCH
    assert group.validate_offset_commit("x", 1) == Error.UNKNOWN_MEMBER_ID
    assert group.validate_offset_commit("", -1) == Error.UNKNOWN_MEMBER_ID


def test_new_partitions_bump_the_group_epoch():
    group = new_group()
    a = join(group)[0].member_id
    TOPICS["t"] = (T, 8)
    try:
        group.refresh_metadata(lookup, 10)
        assert group.state == ConsumerGroupState.ASSIGNING
        answer, _ = beat(group, a, 1, {T: set(range(6))})
        assert answer.member_epoch == 2 and answer.assignment == {T: set(range(8))}
    finally:
        TOPICS["t"] = (T, 6)


def _replayed(batches: list[list]) -> state.PartitionReplay:
    """Feed ``batches`` of (key, value) records through the load path's replay."""
    replay = state.PartitionReplay()
    log = b"".join(
        encode_batch(
            [Record(n * 100 + i, 0, key, value) for i, (key, value) in enumerate(batch)],
            base_offset=n * 100,
        )
        for n, batch in enumerate(batches)
    )
    for start, header in scan_valid_batches(log):
        replay.batch(header, memoryview(log)[start : start + header.size])
    return replay


def _encoded(records) -> list:
    return [
        (
            consumer_log_format.encode_key(key),
            None if value is None else consumer_log_format.encode_value(value),
        )
        for key, value in records
    ]


def test_a_group_is_rebuilt_from_its_records_in_the_log_and_a_deleted_one_is_gone():
    group = new_group()
    writes = []
    a, records = join(group)
    writes.append(_encoded(records))
    writes.append(_encoded(join(group, instance_id="i2")[1]))
    writes.append(_encoded(beat(group, a.member_id, 1, {T: set(range(6))})[1]))
    replay = _replayed(writes)
    assert replay.group_ids() == {"g"} and replay.skipped == []
    again = new_group()
    again.restore_records(replay.consumer_records("g"), 0)
    assert again._persisted() == group._persisted()
    assert again.static_members == group.static_members
    assert again.state == ConsumerGroupState.RECONCILING
    # A member that leaves is tombstoned; the whole group's tombstones delete it.
    writes.append(
        _encoded(group.consumer_heartbeat(HeartbeatRequest(a.member_id, -1), lookup, 0)[1])
    )
    assert len(_replayed(writes).consumer_records("g")) == len(group._persisted())
    writes.append(_encoded(group.tombstones()))
    assert _replayed(writes).group_ids() == set()


def test_a_regex_subscription_follows_the_topics_it_matches():
    group = new_group()
    names = ["t", "__consumer_offsets", "other"]
    request = HeartbeatRequest(
        "m1",
        0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_regex="t|u",
        owned={},
        api_version=1,
    )
    validate(request, "g", assignors.ASSIGNORS)
    result, _ = group.consumer_heartbeat(request, lookup, 0, lambda: names)
    assert result.error == Error.NONE and result.assignment == {T: set(range(6))}
    assert group.subscribed_topics() == {"t"}
    # A new topic that matches joins the subscription at the next heartbeat.
    names.append("u")
    result, _ = group.consumer_heartbeat(
        HeartbeatRequest("m1", 1, owned={T: set(range(6))}), lookup, 10, lambda: names
    )
    assert result.member_epoch == 2 and result.assignment == {T: set(range(6)), U: {0, 1}}


def test_a_bad_regex_is_invalid_regular_expression():
    for pattern in ("t(", "(?=t)", r"(a)\1"):
        request = HeartbeatRequest(
            "m", 0, rebalance_timeout_ms=1, subscribed_topic_regex=pattern, owned={}
        )
        with pytest.raises(HeartbeatError) as error:
            validate(request, "g", assignors.ASSIGNORS)
        assert error.value.error == Error.INVALID_REGULAR_EXPRESSION
    neither = HeartbeatRequest("m", 0, rebalance_timeout_ms=1, owned={})
    with pytest.raises(HeartbeatError) as error:
        validate(neither, "g", assignors.ASSIGNORS)
    assert error.value.error == Error.INVALID_REQUEST


def test_a_change_of_a_subscribed_partitions_replica_racks_bumps_the_group_epoch():
    """KIP-1101 (Kafka 4.1+): the group's metadata hash covers each subscribed partition's
    sorted replica racks (Utils.computeTopicHash), so moving a replica to another rack bumps
    the group epoch at the next heartbeat. The assignment itself does not follow racks:
    Kafka 4.4's uniform and range assignors never read them (nor do minibroker's)."""
    racks = {"t": (("a", "b"),) * 6}

    def racked(name):
        found = TOPICS.get(name)
        return None if found is None else (*found, racks[name])

    group = new_group()
    requests = [
        HeartbeatRequest(
            member_id="",
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=("t",),
            owned={},
            rack_id=rack,
        )
        for rack in ("a", "b")
    ]
    a = group.consumer_heartbeat(requests[0], racked, 0)[0]
    b = group.consumer_heartbeat(requests[1], racked, 0)[0]
    assert (a.member_epoch, b.member_epoch) == (1, 2)
    assert group.members[b.member_id].rack_id == "b"
    target = {m: {t: set(p) for t, p in parts.items()} for m, parts in group.target.items()}
    # The same racks again: nothing moves.
    group.consumer_heartbeat(HeartbeatRequest(b.member_id, 2, owned={}), racked, 10)
    assert group.group_epoch == 2
    # Partition 3's second replica moves from rack b to rack a.
    racks["t"] = (("a", "b"),) * 3 + (("a", "a"),) + (("a", "b"),) * 2
    group.consumer_heartbeat(HeartbeatRequest(b.member_id, 2, owned={}), racked, 20)
    assert group.group_epoch == 3 and group.assignment_epoch == 3
    assert group.target == target
    # Without racks (a 2-tuple lookup, or a cluster without them) the facts are as before.
    group.consumer_heartbeat(HeartbeatRequest(b.member_id, 3, owned={}), lookup, 30)
    assert group.group_epoch == 4
    group.consumer_heartbeat(HeartbeatRequest(b.member_id, 4, owned={}), lookup, 40)
    assert group.group_epoch == 4


def test_partition_racks_are_the_replicas_brokers_racks_dead_brokers_included():
    """Kafka's KRaftCoordinatorMetadataImage.partitionRacks reads the racks of the replicas'
    broker registrations, which a stopped (fenced) broker keeps: its rack still counts."""
    from types import SimpleNamespace

    from minibroker.replication.metadata_cache import MetadataCache

    def update(cache, live, replicas):
        brokers = [
            SimpleNamespace(id_=node, rack=rack, endpoints=[SimpleNamespace(
                listener="PLAINTEXT", host="127.0.0.1", port=9000 + node)])
            for node, rack in live.items()
        ]  # fmt: skip
        partitions = [
            SimpleNamespace(partition_index=index, leader=r[0], leader_epoch=0, replicas=r,
                            isr=r, offline_replicas=())
            for index, r in enumerate(replicas)
        ]  # fmt: skip
        topic = SimpleNamespace(topic_name="t", topic_id=T, partition_states=partitions)
        cache.update(SimpleNamespace(live_brokers=brokers, topic_states=[topic], controller_id=0))
        return cache.partition_racks(cache.topic("t"))

    cache = MetadataCache()
    assert update(cache, {1: None, 2: None}, [(1, 2)]) == ()
    cache = MetadataCache()
    live = {1: "b", 2: "a", 3: None}
    assert update(cache, live, [(1, 2), (2, 3), (3,)]) == (("a", "b"), ("a",), ())
    # Broker 1 stops: its replica's rack is still b.
    assert update(cache, {2: "a", 3: None}, [(1, 2), (2, 3), (3,)]) == (("a", "b"), ("a",), ())
