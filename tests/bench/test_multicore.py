"""bench.multicore's pure helpers: the leader split of the two-broker design and the grouping
of Kafka's threads (the measurement itself is `python -m bench.multicore`, not a test)."""

from __future__ import annotations

import os

import pytest

from bench.multicore import (
    leader_counts,
    split_leaders,
    thread_cpu,
    thread_group,
    thread_groups,
)


def test_split_leaders_gives_each_broker_half_of_64_partitions_rf_1():
    assignment = split_leaders(64, [1, 2])
    assert len(assignment) == 64
    assert all(len(replicas) == 1 for replicas in assignment)
    assert leader_counts([replicas[0] for replicas in assignment]) == {1: 32, 2: 32}
    # Neighbouring partitions on different brokers.
    assert assignment[:4] == [[1], [2], [1], [2]]


@pytest.mark.parametrize(("partitions", "brokers"), [(7, [1, 2]), (10, [4, 5, 6]), (3, [9])])
def test_split_leaders_shares_differ_by_at_most_one(partitions, brokers):
    counts = leader_counts([replicas[0] for replicas in split_leaders(partitions, brokers)])
    assert set(counts) <= set(brokers)
    assert sum(counts.values()) == partitions
    assert max(counts.values()) - min(counts.values()) <= 1


def test_split_leaders_needs_a_broker():
    with pytest.raises(ValueError):
        split_leaders(4, [])


def test_thread_group_drops_the_number():
    assert thread_group("GC Thread#1") == "GC Thread"
    assert thread_group("C2 CompilerThre") == "C2 CompilerThre"
    assert thread_group("kafka-request-handler-12") == "kafka-request-handler"
    assert thread_group("main") == "main"
    assert (
        thread_group("data-plane-kafka-network-thread-1-PLAINTEXT-PLAINTEXT-0")
        == "data-plane-kafka-network-thread"
    )


def test_thread_groups_sum_by_group_and_count_new_threads_from_zero():
    before = {1: ("GC Thread#0", 1.0), 2: ("GC Thread#1", 2.0), 3: ("main", 5.0)}
    after = {1: ("GC Thread#0", 1.5), 2: ("GC Thread#1", 2.25), 3: ("main", 5.0), 4: ("x-7", 0.5)}
    assert thread_groups(before, after) == {"GC Thread": 0.75, "x": 0.5}


def test_thread_cpu_reads_this_process():
    threads = thread_cpu(os.getpid())
    assert os.getpid() in threads
    assert all(seconds >= 0 for _, seconds in threads.values())
