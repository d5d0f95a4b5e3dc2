"""Rack-aware replica placement (KIP-36; controller/state.py's assign_replicas_rack_aware):
Kafka's own example from AdminRackAwareTest to the broker, and the rules on random racks."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from minibroker.controller.state import (
    ControllerState,
    assign_replicas,
    assign_replicas_rack_aware,
    create_topic,
    rack_alternated,
    register_broker,
)

KAFKA_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def test_kafkas_example_to_the_broker():
    """AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers."""
    assert rack_alternated(KAFKA_RACKS) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({k: v for k, v in KAFKA_RACKS.items() if k != 5}) == [0, 3, 1, 4, 2]
    assert assign_replicas_rack_aware(KAFKA_RACKS, 7, 3, 0, 0) == [
        [0, 3, 1],
        [3, 1, 5],
        [1, 5, 4],
        [5, 4, 2],
        [4, 2, 0],
        [2, 0, 3],
        [0, 4, 2],
    ]


@pytest.mark.parametrize("seed", range(40))
def test_replicas_span_as_many_racks_as_they_can(seed):
    rng = random.Random(seed)
    brokers = rng.randint(2, 9)
    rack_names = [f"r{i}" for i in range(rng.randint(1, brokers))]
    racks = {node: rack_names[node % len(rack_names)] for node in range(1, brokers + 1)}
    factor = rng.randint(1, brokers)
    partitions = rng.randint(1, 3 * brokers)
    start, shift = rng.randrange(brokers), rng.randrange(brokers)
    placed = assign_replicas_rack_aware(racks, partitions, factor, start, shift)
    assert len(placed) == partitions
    for replicas in placed:
        assert len(replicas) == factor == len(set(replicas)), replicas
        assert len({racks[b] for b in replicas}) == min(factor, len(rack_names)), (racks, replicas)
    leaders = Counter(replicas[0] for replicas in placed)
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in racks) <= 1


def test_rack_unaware_placement_can_put_two_replicas_in_one_rack():
    """What the rack-aware placement is for: the same brokers placed without their racks."""
    racks = {1: "a", 2: "a", 3: "b"}
    unaware = assign_replicas(sorted(racks), 6, 2, 0, 0)
    assert any(len({racks[b] for b in replicas}) == 1 for replicas in unaware)
    aware = assign_replicas_rack_aware(racks, 6, 2, 0, 0)
    assert all(len({racks[b] for b in replicas}) == 2 for replicas in aware)


def test_a_broker_without_a_rack_counts_as_a_rack_of_its_own():
    racks = {1: "a", 2: None, 3: "a"}
    for replicas in assign_replicas_rack_aware(racks, 6, 2, 1, 1):
        assert 2 in replicas or len(set(replicas)) == 2
        assert len({racks[b] or "" for b in replicas}) == 2


def test_the_controller_places_by_the_racks_brokers_registered():
    state = ControllerState()
    for node, rack in ((1, "a"), (2, "a"), (3, "b")):
        register_broker(state, node, "localhost", 9000 + node, f"inc-{node}", 0, rack=rack)
    assert state.brokers[3].rack == "b"
    topic, _ = create_topic(state, "placed", 12, 2, {}, rng=random.Random(7))
    for partition in topic.partitions:
        assert {state.brokers[b].rack for b in partition.replicas} == {"a", "b"}
