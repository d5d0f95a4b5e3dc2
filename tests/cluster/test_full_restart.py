"""After every node of the cluster is stopped cleanly and started again, the cluster becomes
whole by itself: every partition has its full replica set in the ISR and is led by its
preferred (first) replica, so each broker leads its share again. (How fast is measured by
`python -m bench.cluster_restart`, not here.)"""

from __future__ import annotations

from collections import Counter

from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import create_replicated_topic
from tests.conftest import wait_for

TOPICS = 6
PARTITIONS = 10
# Generous: the restart itself, registration, catching up and the elections, on a busy machine.
WHOLE_TIMEOUT = 90.0


def partition_states(cluster: Cluster) -> dict[tuple[str, int], tuple[int, tuple, frozenset]]:
    """(leader, replicas, ISR) of every partition of our topics, as one broker's Metadata
    says; empty while it does not answer."""
    response = cluster.metadata()
    if response is None:
        return {}
    return {
        (topic.name, p.partition_index): (
            int(p.leader_id),
            tuple(int(n) for n in p.replica_nodes),
            frozenset(int(n) for n in p.isr_nodes),
        )
        for topic in response.topics
        if topic.name.startswith("whole-")
        for p in topic.partitions
    }


def whole_everywhere(cluster: Cluster) -> bool:
    """Every broker's Metadata shows every partition with a full ISR and its preferred leader."""
    for node_id in cluster.brokers:
        response = cluster.metadata(via=node_id)
        if response is None:
            return False
        states = [
            p
            for topic in response.topics
            if topic.name.startswith("whole-")
            for p in topic.partitions
        ]
        if len(states) != TOPICS * PARTITIONS:
            return False
        for p in states:
            replicas = [int(n) for n in p.replica_nodes]
            if int(p.leader_id) != replicas[0] or {int(n) for n in p.isr_nodes} != set(replicas):
                return False
    return True


def test_a_full_restart_ends_with_full_isrs_and_preferred_leaders(cluster: Cluster):
    for index in range(TOPICS):
        create_replicated_topic(cluster, f"whole-{index}", PARTITIONS)
    before = partition_states(cluster)
    assert len(before) == TOPICS * PARTITIONS
    preferred_share = Counter(replicas[0] for _, replicas, _ in before.values())
    assert set(preferred_share) == set(cluster.brokers)

    cluster.stop()
    for node in cluster.nodes:
        node.restart()
    cluster.wait_ready()

    wait_for(
        lambda: whole_everywhere(cluster),
        WHOLE_TIMEOUT,
        "every partition with a full ISR and its preferred leader, on every broker",
        interval=0.5,
    )
    after = partition_states(cluster)
    assert {key: replicas for key, (_, replicas, _) in after.items()} == {
        key: replicas for key, (_, replicas, _) in before.items()
    }
    assert Counter(leader for leader, _, _ in after.values()) == preferred_share
