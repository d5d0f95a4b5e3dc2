"""Online migration between the protocols, pure (broker/coordinator/group/consumer_group.py's
from_classic, classic_* and to_classic; embedded_protocol.py; the ClassicMemberMetadata of
consumer_log_format.py), with time passed in."""

import uuid

import pytest

from minibroker.coordinator.group import consumer_log_format
from minibroker.coordinator.group.consumer_group import (
    ConsumerGroup,
    ConsumerSettings,
    HeartbeatRequest,
    MemberState,
)
from minibroker.coordinator.group.consumer_log_format import (
    ClassicMemberMetadata,
    MemberMetadataValue,
    RecordKey,
    RecordKind,
)
from minibroker.coordinator.group.embedded_protocol import (
    EmbeddedProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from minibroker.coordinator.group.state import Group, GroupSettings, GroupState, JoinRequest, Member
from minibroker.protocol.errors import Error

T = uuid.UUID(int=1)
TOPICS = {"t": (T, 4)}
SESSION_MS = 10_000


def lookup(name):
    return TOPICS.get(name)


def subscription(version: int = 1, owned: dict[str, list[int]] | None = None) -> bytes:
    out = version.to_bytes(2, "big") + (1).to_bytes(4, "big") + b"\x00\x01t"
    out += (-1).to_bytes(4, "big", signed=True)  # user data
    if version >= 1:
        owned = owned or {}
        out += len(owned).to_bytes(4, "big")
        for name, parts in owned.items():
            out += len(name).to_bytes(2, "big") + name.encode() + len(parts).to_bytes(4, "big")
            out += b"".join(p.to_bytes(4, "big") for p in parts)
    if version >= 2:
        out += (-1).to_bytes(4, "big", signed=True)  # generation
    if version >= 3:
        out += b"\x00\x05rack1"
    return out


def join_request(member_id: str, owned=None, protocol_type="consumer") -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        group_instance_id=None,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=SESSION_MS,
        protocol_type=protocol_type,
        protocols=[("range", subscription(owned=owned))],
        require_known_member_id=True,
    )


def classic_group() -> Group:
    """A Stable classic group at generation 3: a holds t-0 and t-1, b holds t-2 and t-3."""
    group = Group("g", GroupSettings(initial_rebalance_delay_ms=0), 0)
    group.protocol_type = "consumer"
    for member_id in ("a", "b"):
        group.members[member_id] = Member(
            member_id,
            None,
            "c",
            "/127.0.0.1",
            SESSION_MS,
            SESSION_MS,
            "consumer",
            [("range", subscription())],
        )
    group.generation = 3
    group.protocol_name = "range"
    group.state = GroupState.STABLE
    group.members["a"].assignment = encode_assignment({"t": {0, 1}}, 1)
    group.members["b"].assignment = encode_assignment({"t": {2, 3}}, 1)
    return group


def test_the_embedded_protocol_round_trips_every_subscription_version():
    for version in range(4):
        decoded = decode_subscription(subscription(version, {"t": [1, 2]}))
        assert decoded.topics == ("t",)
        assert decoded.owned == ({"t": {1, 2}} if version >= 1 else {})
        assert decoded.rack_id == ("rack1" if version >= 3 else None)
    assigned = encode_assignment({"t": {3, 1}, "u": {0}}, 7)
    assert assigned[:2] == b"\x00\x03"  # capped at the highest assignment version
    assert decode_assignment(assigned) == {"t": {1, 3}, "u": {0}}
    for bad in (b"", b"\x00\x00\x7f\xff\xff\xff", subscription(1)[:-2]):
        with pytest.raises(EmbeddedProtocolError):
            decode_subscription(bad)


def test_classic_member_metadata_round_trips_in_kafkas_tagged_field():
    classic = ClassicMemberMetadata(45_000, (("range", b"\x00\x01sub"), ("roundrobin", b"")))
    value = MemberMetadataValue(None, None, "c", "/h", ("t",), None, 30_000, None, classic)
    data = consumer_log_format.encode_value(value)
    # Version, the fields, then one tagged field: tag 0, its size, presence 1, the struct.
    struct = (
        (45_000).to_bytes(4, "big")
        + b"\x03"  # two protocols
        + b"\x06range"
        + b"\x06\x00\x01sub"
        + b"\x00"
        + b"\x0broundrobin"
        + b"\x01"
        + b"\x00"
        + b"\x00"
    )
    assert data.endswith(b"\x01\x00" + bytes([len(struct) + 1]) + b"\x01" + struct)
    assert consumer_log_format.read_value(RecordKind.MEMBER_METADATA, data) == value
    plain = MemberMetadataValue(None, None, "c", "/h", ("t",), None, 30_000, None)
    assert (
        consumer_log_format.read_value(
            RecordKind.MEMBER_METADATA, consumer_log_format.encode_value(plain)
        )
        == plain
    )
    assert len(data) > len(consumer_log_format.encode_value(plain))


def test_from_classic_keeps_members_generation_and_assignments():
    group, records = ConsumerGroup.from_classic(
        classic_group(), ConsumerSettings(), lookup, now_ms=100
    )
    assert (group.group_epoch, group.assignment_epoch) == (3, 3)
    assert set(group.members) == {"a", "b"}
    a = group.members["a"]
    assert (a.member_epoch, a.state, a.assigned) == (3, MemberState.STABLE, {T: {0, 1}})
    assert a.classic is not None and a.classic.session_timeout_ms == SESSION_MS
    assert group.target == {"a": {T: {0, 1}}, "b": {T: {2, 3}}}
    assert a.session_deadline_ms == 100 + SESSION_MS
    kinds = [key.kind for key, _ in records]
    # Kafka's createConsumerGroupRecords order.
    assert kinds == [
        RecordKind.MEMBER_METADATA,
        RecordKind.MEMBER_METADATA,
        RecordKind.GROUP_METADATA,
        RecordKind.TARGET_MEMBER,
        RecordKind.TARGET_MEMBER,
        RecordKind.TARGET_METADATA,
        RecordKind.CURRENT_ASSIGNMENT,
        RecordKind.CURRENT_ASSIGNMENT,
    ]
    restored = ConsumerGroup("g", GroupSettings(), ConsumerSettings(), 0)
    restored.restore_records(dict(records), now_ms=0)
    assert restored.members["a"].classic == a.classic
    assert restored.members["b"].assigned == {T: {2, 3}}


def test_a_malformed_subscription_refuses_the_upgrade():
    classic = classic_group()
    classic.members["a"].protocols = [("range", b"junk")]
    with pytest.raises(EmbeddedProtocolError):
        ConsumerGroup.from_classic(classic, ConsumerSettings(), lookup, 0)


def test_classic_members_rebalance_with_a_consumer_member_then_downgrade():
    group, _ = ConsumerGroup.from_classic(classic_group(), ConsumerSettings(), lookup, 0)
    joined, records = group.consumer_heartbeat(
        HeartbeatRequest(
            "c", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",), owned={}
        ),
        lookup,
        10,
    )
    assert joined.error == Error.NONE and joined.member_epoch == 4
    assert joined.assignment == {}  # everything is still held by the classic members
    # The classic members are told to rejoin: the group epoch passed theirs.
    assert group.classic_heartbeat("a", None, 3, 20) == Error.REBALANCE_IN_PROGRESS
    assert group.classic_heartbeat("a", None, 2, 20) == Error.ILLEGAL_GENERATION
    # a rejoins still owning t-0 and t-1 (a cooperative client): it must revoke first.
    answer, _ = group.classic_join(join_request("a", owned={"t": [0, 1]}), lookup, 30)
    assert (answer.error, answer.generation, answer.leader) == (Error.NONE, 3, "")
    a = group.members["a"]
    if a.state == MemberState.UNREVOKED_PARTITIONS:
        synced = group.classic_sync("a", None, 3, "consumer", "range", 40)
        assert synced.error == Error.NONE
        kept = decode_assignment(synced.assignment).get("t", set())
        assert kept < {0, 1}
        assert group.classic_heartbeat("a", None, 3, 50) == Error.REBALANCE_IN_PROGRESS
        answer, _ = group.classic_join(join_request("a", owned={"t": sorted(kept)}), lookup, 60)
    assert answer.generation == 4
    # b rejoins having revoked everything (an eager client): straight to its target.
    answer, _ = group.classic_join(join_request("b", owned={}), lookup, 70)
    assert answer.generation == 4
    assert group.classic_sync("b", None, 3, "consumer", "range", 80).error == (
        Error.ILLEGAL_GENERATION
    )
    assert group.classic_sync("b", None, 4, "consumer", "other", 80).error == (
        Error.INCONSISTENT_GROUP_PROTOCOL
    )
    synced = group.classic_sync("b", None, 4, "consumer", "range", 80)
    assert synced.error == Error.NONE
    # The consumer member's heartbeat now gets the released partitions.
    answer_c, _ = group.consumer_heartbeat(HeartbeatRequest("c", 4, owned={}), lookup, 90)
    held = {
        "a": group.members["a"].assigned.get(T, set()),
        "b": group.members["b"].assigned.get(T, set()),
        "c": (answer_c.assignment or {}).get(T, set()),
    }
    assert all(held.values()), held
    assert sorted(p for parts in held.values() for p in parts) == [0, 1, 2, 3]
    # A classic JoinGroup with another protocol type, or a consumer member on the classic
    # APIs, is refused.
    refused, none = group.classic_join(join_request("x", protocol_type="connect"), lookup, 100)
    assert (refused.error, none) == (Error.INCONSISTENT_GROUP_PROTOCOL, [])
    assert group.classic_heartbeat("c", None, 4, 100) == Error.UNKNOWN_MEMBER_ID
    # The consumer member leaves: the group is to be downgraded, not changed.
    before = {m: (x.member_epoch, dict(x.assigned)) for m, x in group.members.items()}
    left, records = group.consumer_heartbeat(HeartbeatRequest("c", -1), lookup, 110)
    assert left.error == Error.NONE and records == []
    assert group.downgrade_leaving == "c"
    assert {m: (x.member_epoch, dict(x.assigned)) for m, x in group.members.items()} == before
    classic = group.to_classic(120)
    assert set(classic.members) == {"a", "b"}
    assert (classic.generation, classic.protocol_type, classic.protocol_name) == (
        group.group_epoch,
        "consumer",
        "range",
    )
    targets = {m: group.target[m].get(T, set()) for m in ("a", "b")}
    for member_id, member in classic.members.items():
        assert decode_assignment(member.assignment).get("t", set()) == targets[member_id]
        assert member.session_timeout_ms == SESSION_MS


@pytest.mark.parametrize("policy", ["disabled", "upgrade"])
def test_no_downgrade_unless_the_policy_allows_it(policy):
    group, _ = ConsumerGroup.from_classic(
        classic_group(), ConsumerSettings(migration_policy=policy), lookup, 0
    )
    group.consumer_heartbeat(
        HeartbeatRequest(
            "c", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",), owned={}
        ),
        lookup,
        0,
    )
    left, records = group.consumer_heartbeat(HeartbeatRequest("c", -1), lookup, 10)
    assert left.error == Error.NONE
    assert group.downgrade_leaving is None
    assert "c" not in group.members
    assert any(key == RecordKey(RecordKind.MEMBER_METADATA, "g", "c") for key, _ in records)


def test_a_classic_member_that_does_not_rejoin_is_fenced_after_its_rebalance_timeout():
    group, _ = ConsumerGroup.from_classic(classic_group(), ConsumerSettings(), lookup, 0)
    group.consumer_heartbeat(
        HeartbeatRequest(
            "c", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",), owned={}
        ),
        lookup,
        0,
    )
    assert group.classic_heartbeat("a", None, 3, 1000) == Error.REBALANCE_IN_PROGRESS
    group.classic_heartbeat("a", None, 3, 1000 + SESSION_MS - 1)
    group.classic_heartbeat("b", None, 3, 1000 + SESSION_MS - 1)  # b has more time
    group.expire(1000 + SESSION_MS - 1)
    assert "a" in group.members
    group.expire(1000 + SESSION_MS)
    assert "a" not in group.members
    # A classic LeaveGroup: b goes, one epoch bump; the group stays a consumer group.
    epoch = group.group_epoch
    errors, records = group.classic_leave([("b", None), ("nobody", None)], 2000)
    assert errors == [Error.NONE, Error.UNKNOWN_MEMBER_ID]
    assert group.group_epoch == epoch + 1 and set(group.members) == {"c"}
    assert records


def test_a_classic_member_that_does_not_sync_after_its_join_is_fenced():
    group, _ = ConsumerGroup.from_classic(classic_group(), ConsumerSettings(), lookup, 0)
    answer, _ = group.classic_join(join_request("a", owned={}), lookup, 100)
    assert answer.error == Error.NONE
    group.classic_join(join_request("b", owned={}), lookup, 100)
    assert group.classic_sync("b", None, answer.generation, None, None, 200).error == Error.NONE
    group.expire(100 + SESSION_MS - 1)
    assert set(group.members) == {"a", "b"}
    # Both heartbeat (a's session holds): a alone never sent its SyncGroup.
    for member_id in ("a", "b"):
        group.classic_heartbeat(member_id, None, answer.generation, 100 + SESSION_MS - 1)
    group.expire(100 + SESSION_MS)
    assert set(group.members) == {"b"}


def test_a_downgrade_no_longer_valid_fences_the_member_instead():
    group, _ = ConsumerGroup.from_classic(classic_group(), ConsumerSettings(), lookup, 0)
    for member_id in ("c", "d"):
        group.consumer_heartbeat(
            HeartbeatRequest(
                member_id, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",), owned={}
            ),
            lookup,
            0,
        )
    group.downgrade_leaving = "c"  # as if d had joined after c's leave was decided
    valid, records = group.downgrade_still_valid(10)
    assert (valid, group.downgrade_leaving) == (False, None)
    assert "c" not in group.members and records
    left, _ = group.consumer_heartbeat(HeartbeatRequest("d", -1), lookup, 20)
    assert left.error == Error.NONE and group.downgrade_leaving == "d"
    assert group.downgrade_still_valid(30) == (True, [])
