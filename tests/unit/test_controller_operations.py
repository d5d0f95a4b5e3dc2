"""The controller's day-two decisions, without sockets: ElectLeaders, the automatic leader
rebalance and its imbalance threshold, and partition reassignments (KIP-455)."""

import pytest

from minibroker.controller import (
    NO_LEADER,
    ControllerStore,
    ElectionType,
    alter_partition,
    alter_reassignment,
    create_topic,
    elect_leaders,
    elect_preferred_leaders,
    fence_broker,
    list_reassignments,
    register_broker,
)
from minibroker.protocol.errors import Error
from tests.unit.test_controller_state import cluster, part, refused, topic_on


def join_isr(state, replica: int, topic: str = "t", index: int = 0):
    """The leader adds ``replica`` to the ISR, as it does once the replica caught up."""
    p = part(state, topic, index)
    return alter_partition(
        state, topic, index, p.leader, p.leader_epoch, [*p.isr, replica], p.partition_epoch
    )


def led_by_second_replica(state):
    """A partition [1, 2, 3] whose leadership moved to 2 (1 was fenced and came back, and
    caught up)."""
    topic_on(state, 1, 2, 3)
    fence_broker(state, 1, unclean=False)
    register_broker(state, 1, "localhost", 9001, "incarnation-1b", 10)
    assert part(state).leader == 2
    assert 1 not in part(state).isr


# --- ElectLeaders -------------------------------------------------------------------------


def test_preferred_election_moves_leadership_back_once_in_sync():
    state = cluster(1, 2, 3)
    led_by_second_replica(state)
    results, changes = elect_leaders(state, ElectionType.PREFERRED, [("t", [0])])
    assert results == [("t", [(0, Error.PREFERRED_LEADER_NOT_AVAILABLE, results[0][1][0][2])])]
    assert changes == []

    join_isr(state, 1)
    epoch = part(state).leader_epoch
    results, changes = elect_leaders(state, ElectionType.PREFERRED, [("t", [0])])
    assert results == [("t", [(0, 0, None)])]
    assert [(c.topic, c.partition, c.state.leader) for c in changes] == [("t", 0, 1)]
    assert part(state).leader == 1
    assert part(state).leader_epoch == epoch + 1

    results, _ = elect_leaders(state, ElectionType.PREFERRED, [("t", [0])])
    assert results[0][1][0][1] == Error.ELECTION_NOT_NEEDED


def test_unknown_topics_and_partitions_are_reported_per_partition():
    state = cluster(1, 2)
    topic_on(state, 1, 2)
    results, changes = elect_leaders(
        state, ElectionType.PREFERRED, [("t", [0, 5]), ("missing", [0])]
    )
    codes = {(name, index): code for name, outcomes in results for index, code, _ in outcomes}
    assert codes == {
        ("t", 0): Error.ELECTION_NOT_NEEDED,
        ("t", 5): Error.UNKNOWN_TOPIC_OR_PARTITION,
        ("missing", 0): Error.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert changes == []


def test_all_partitions_leaves_out_those_that_need_no_election():
    state = cluster(1, 2, 3)
    create_topic(state, "many", 6, 3, {}, start_index=0)
    moved = [i for i, p in enumerate(state.topics["many"].partitions) if p.replicas[0] == 1]
    fence_broker(state, 1, unclean=False)
    register_broker(state, 1, "localhost", 9001, "incarnation-1b", 10)
    for index in moved:
        join_isr(state, 1, "many", index)
    results, changes = elect_leaders(state, ElectionType.PREFERRED, None)
    assert results == [("many", [(index, 0, None) for index in moved])]
    assert {c.partition for c in changes} == set(moved)


def test_unclean_election_only_for_a_partition_without_leader():
    state = cluster(1, 2)
    topic_on(state, 1, 2)
    results, _ = elect_leaders(state, ElectionType.UNCLEAN, [("t", [0])])
    assert results[0][1][0][1] == Error.ELECTION_NOT_NEEDED

    p = part(state)
    alter_partition(state, "t", 0, 1, p.leader_epoch, [1], p.partition_epoch)  # 2 fell behind
    fence_broker(state, 1, unclean=False)
    assert part(state).leader == NO_LEADER and part(state).isr == [1]
    results, changes = elect_leaders(state, ElectionType.UNCLEAN, [("t", [0])])
    assert results == [("t", [(0, 0, None)])]
    assert part(state).leader == 2 and part(state).isr == [2]
    assert changes[0].state == part(state)


def test_unclean_election_without_a_live_replica():
    state = cluster(1, 2)
    topic_on(state, 1, 2)
    fence_broker(state, 2, unclean=False)
    fence_broker(state, 1, unclean=False)
    results, changes = elect_leaders(state, ElectionType.UNCLEAN, [("t", [0])])
    assert results[0][1][0][1] == Error.ELIGIBLE_LEADERS_NOT_AVAILABLE
    assert changes == []


# --- automatic rebalance ---------------------------------------------------------------


def test_rebalance_waits_until_a_broker_is_more_than_the_threshold_off():
    state = cluster(1, 2, 3)
    create_topic(state, "big", 30, 3, {}, start_index=0)
    owned = [i for i, p in enumerate(state.topics["big"].partitions) if p.replicas[0] == 1]
    assert len(owned) == 10
    # One of broker 1's ten partitions led elsewhere: 10 %, not more than 10 %.
    p = part(state, "big", owned[0])
    state.topics["big"].partitions[owned[0]] = type(p)(p.replicas, p.isr, p.replicas[1], 1, 1)
    assert elect_preferred_leaders(state, imbalance_percentage=10) == []
    # Two of ten: 20 %, so both move back.
    p = part(state, "big", owned[1])
    state.topics["big"].partitions[owned[1]] = type(p)(p.replicas, p.isr, p.replicas[1], 1, 1)
    changes = elect_preferred_leaders(state, imbalance_percentage=10)
    assert sorted(c.partition for c in changes) == owned[:2]
    assert all(part(state, "big", i).leader == 1 for i in owned)


# --- reassignments -------------------------------------------------------------------------


def test_reassignment_adds_then_completes_when_the_new_replica_is_in_sync():
    state = cluster(1, 2, 3, 4)
    topic_on(state, 1, 2, 3)
    change = alter_reassignment(state, "t", 0, [4, 2, 3])
    assert change.state.replicas == [4, 2, 3, 1]
    assert change.state.adding_replicas == [4]
    assert change.state.removing_replicas == [1]
    assert change.state.leader == 1 and change.removed == ()
    assert list_reassignments(state, None) == [("t", [(0, part(state))])]

    completed = join_isr(state, 4)
    assert completed.replicas == [4, 2, 3]
    assert completed.isr == [2, 3, 4]
    assert completed.leader == 4  # the old leader was removed: the first target replica leads
    assert (completed.adding_replicas, completed.removing_replicas) == ([], [])
    assert list_reassignments(state, None) == []


def test_reassignment_to_a_subset_completes_at_once():
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2, 3)
    change = alter_reassignment(state, "t", 0, [2, 3])
    assert change.state.replicas == [2, 3]
    assert change.state.isr == [2, 3]
    assert change.state.leader == 2
    assert change.removed == (1,)


def test_cancelling_reverts_to_the_original_replicas():
    state = cluster(1, 2, 3, 4)
    topic_on(state, 1, 2, 3)
    alter_reassignment(state, "t", 0, [4, 2, 3])
    cancelled = alter_reassignment(state, "t", 0, None)
    # Kafka's revert: the replicas minus those being added, in the reassignment's order.
    assert cancelled.state.replicas == [2, 3, 1]
    assert cancelled.state.leader == 1
    assert cancelled.removed == (4,)
    assert not cancelled.state.reassigning
    refused(Error.NO_REASSIGNMENT_IN_PROGRESS, alter_reassignment, state, "t", 0, None)


def test_a_new_target_replaces_the_reassignment_in_progress():
    state = cluster(1, 2, 3, 4, 5)
    topic_on(state, 1, 2, 3)
    alter_reassignment(state, "t", 0, [4, 2, 3])
    change = alter_reassignment(state, "t", 0, [5, 2, 3])
    assert change.state.replicas == [5, 2, 3, 1]
    assert change.state.adding_replicas == [5]
    assert change.removed == (4,)


@pytest.mark.parametrize(
    ("target", "code"),
    [
        ([], Error.INVALID_REPLICA_ASSIGNMENT),
        ([1, 1], Error.INVALID_REPLICA_ASSIGNMENT),
        ([1, 9], Error.INVALID_REPLICA_ASSIGNMENT),
    ],
)
def test_bad_targets_are_refused(target, code):
    state = cluster(1, 2, 3)
    topic_on(state, 1, 2)
    refused(code, alter_reassignment, state, "t", 0, target)


def test_unknown_partitions_are_refused():
    state = cluster(1, 2)
    topic_on(state, 1, 2)
    refused(Error.UNKNOWN_TOPIC_OR_PARTITION, alter_reassignment, state, "t", 3, [1])
    refused(Error.UNKNOWN_TOPIC_OR_PARTITION, alter_reassignment, state, "x", 0, [1])


def test_a_reassignment_in_progress_survives_a_controller_restart(tmp_path):
    state = cluster(1, 2, 3, 4)
    topic_on(state, 1, 2, 3)
    alter_reassignment(state, "t", 0, [4, 2, 3])
    store = ControllerStore(tmp_path / "state.json")
    store.save(state)
    loaded = store.load()
    assert loaded.topics["t"].partitions[0] == part(state)
    join_isr(loaded, 4)
    assert loaded.topics["t"].partitions[0].replicas == [4, 2, 3]


def test_a_reassignment_may_be_kept_from_changing_the_replication_factor(autojump_clock):
    """AlterPartitionReassignments v1: with AllowReplicationFactorChange false, a target of
    another size than the original replicas is INVALID_REPLICATION_FACTOR and nothing starts;
    one of the same size is accepted, and so is any size when it is true (v0's behaviour)."""
    state = cluster(1, 2, 3, 4)
    topic_on(state, 1, 2)
    refused(Error.INVALID_REPLICATION_FACTOR, alter_reassignment, state, "t", 0, [1, 2, 3], False)
    refused(Error.INVALID_REPLICATION_FACTOR, alter_reassignment, state, "t", 0, [3], False)
    assert not part(state).reassigning
    moved = alter_reassignment(state, "t", 0, [3, 4], False)
    assert moved.state.adding_replicas == [3, 4]
    # A reassignment in progress is judged against the original replicas, not the moving set.
    refused(Error.INVALID_REPLICATION_FACTOR, alter_reassignment, state, "t", 0, [4], False)
    grown = alter_reassignment(state, "t", 0, [1, 2, 3], True)
    assert grown.state.replicas[:3] == [1, 2, 3]
