"""Follower fetching's choice of replica (KIP-392), the pure rule: Kafka's
RackAwareReplicaSelector and ReplicaManager.findPreferredReadReplica, case by case, as Kafka's
RackAwareReplicaSelectorTest and ReplicaManagerTest check them."""

import pytest

from minibroker.common.config import BrokerConfig, ConfigError
from minibroker.replication.replica_selector import (
    RACK_AWARE_REPLICA_SELECTOR,
    FollowerState,
    RackAwareReplicaSelector,
    ReplicaView,
    find_preferred_read_replica,
    replica_selector_for,
)

SELECTOR = RackAwareReplicaSelector()
LEADER = 1
NOW = 100_000
# Brokers 1 (the leader), 2 and 3 in racks a, b, c; broker 4 in rack b too.
RACKS = {1: "a", 2: "b", 3: "c", 4: "b"}


def follower(node_id, *, in_sync=True, start=0, end=100, caught_up_ago=0) -> FollowerState:
    return FollowerState(node_id, in_sync, start, end, NOW - caught_up_ago)


def choose(client_rack, followers, *, fetch_offset=50, racks=RACKS, leader_end=100):
    return find_preferred_read_replica(
        SELECTOR,
        client_rack=client_rack,
        fetch_offset=fetch_offset,
        now_ms=NOW,
        leader_id=LEADER,
        leader_log_end_offset=leader_end,
        followers=followers,
        racks=racks,
    )


def test_a_client_in_a_followers_rack_is_sent_to_that_follower():
    assert choose("b", [follower(2), follower(3)]) == 2
    assert choose("c", [follower(2), follower(3)]) == 3


def test_the_leader_serves_a_client_in_its_own_rack():
    assert choose("a", [follower(2), follower(3)]) is None


def test_the_leader_serves_a_client_in_its_rack_even_when_a_follower_shares_it():
    racks = {**RACKS, 2: "a"}
    assert choose("a", [follower(2, end=1000), follower(3)], racks=racks) is None


def test_the_leader_serves_a_client_without_a_rack_or_in_an_unknown_rack():
    assert choose("", [follower(2), follower(3)]) is None
    assert choose(None, [follower(2), follower(3)]) is None
    assert choose("z", [follower(2), follower(3)]) is None


def test_a_follower_out_of_the_isr_is_not_a_candidate():
    assert choose("b", [follower(2, in_sync=False), follower(3)]) is None


def test_a_follower_whose_log_does_not_cover_the_fetch_offset_is_not_a_candidate():
    # Its log ends before the offset: the consumer would wait on it.
    assert choose("b", [follower(2, end=40), follower(3)], fetch_offset=50) is None
    # The offset is its log end: it has everything before it, as on the leader.
    assert choose("b", [follower(2, end=50), follower(3)], fetch_offset=50) == 2
    # Its log starts after the offset (its own retention): OFFSET_OUT_OF_RANGE there.
    assert choose("b", [follower(2, start=60), follower(3)], fetch_offset=50) is None
    # A log start not known yet (no fetch seen with one) does not exclude it, as in Kafka.
    assert choose("b", [follower(2, start=-1), follower(3)], fetch_offset=50) == 2


def test_a_follower_without_an_endpoint_is_never_chosen():
    """A fenced or stopped broker is absent from the live brokers' endpoints: no rack, as
    Kafka's Node.noNode(), and the leader serves."""
    racks = {node: rack for node, rack in RACKS.items() if node != 2}
    assert choose("b", [follower(2), follower(3)], racks=racks) is None


def test_the_most_caught_up_follower_of_the_rack_wins():
    """ReplicaView.comparator: the largest log end offset, then the shortest time since it
    last caught up, then the largest broker id."""
    assert choose("b", [follower(2, end=90), follower(4, end=100)]) == 4
    assert choose("b", [follower(2, end=100), follower(4, end=90)]) == 2
    assert choose("b", [follower(2, caught_up_ago=10), follower(4, caught_up_ago=500)]) == 2
    assert choose("b", [follower(2, caught_up_ago=500), follower(4, caught_up_ago=10)]) == 4
    assert choose("b", [follower(2), follower(4)]) == 4


def test_the_leader_is_never_named_as_the_preferred_replica():
    """Even a leader whose own endpoint is unknown (before its first UpdateMetadata): the
    choice of the leader is "read here"."""
    racks = {2: "b", 3: "c"}
    assert choose("a", [follower(2), follower(3)], racks=racks) is None
    assert choose("b", [follower(2), follower(3)], racks=racks) == 2


def test_the_selector_alone_follows_kafkas_rack_aware_selector():
    leader = ReplicaView(1, "a", 100, 0)
    b_behind = ReplicaView(2, "b", 90, 0)
    b_ahead = ReplicaView(4, "b", 100, 5)
    replicas = [leader, b_behind, b_ahead]
    assert SELECTOR.select("b", replicas, leader) == b_ahead
    assert SELECTOR.select("a", replicas, leader) == leader
    assert SELECTOR.select("c", replicas, leader) == leader
    assert SELECTOR.select("", replicas, leader) == leader


def test_the_selector_comes_from_replica_selector_class():
    assert replica_selector_for(None) is None
    assert isinstance(replica_selector_for(RACK_AWARE_REPLICA_SELECTOR), RackAwareReplicaSelector)


def test_replica_selector_class_accepts_kafkas_class_and_its_short_name():
    base = {"node.id": "1", "log.dirs": "/tmp/x"}
    assert BrokerConfig.from_properties(base).replica_selector_class is None
    for name in (
        RACK_AWARE_REPLICA_SELECTOR,
        "RackAwareReplicaSelector",
        f" {RACK_AWARE_REPLICA_SELECTOR} ",
    ):
        config = BrokerConfig.from_properties({**base, "replica.selector.class": name})
        assert config.replica_selector_class == RACK_AWARE_REPLICA_SELECTOR
    empty = BrokerConfig.from_properties({**base, "replica.selector.class": ""})
    assert empty.replica_selector_class is None


def test_an_unknown_replica_selector_class_is_refused_at_start():
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.from_properties(
            {"node.id": "1", "log.dirs": "/tmp/x", "replica.selector.class": "com.example.Mine"}
        )
    message = str(refused.value)
    assert message.startswith(
        "Invalid value com.example.Mine for configuration replica.selector.class"
    )
    assert RACK_AWARE_REPLICA_SELECTOR in message
