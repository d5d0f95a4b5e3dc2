"""A broker whose process dies is fenced as soon as the controller sees its connection close
and its port refuse, long before its session would expire; a paused broker, whose port
still accepts, keeps its session."""

from __future__ import annotations

from pathlib import Path

import pytest

from minibroker.tools.launcher import BrokerStartError, Cluster
from tests.cluster.conftest import (
    CLUSTER_OVERRIDES,
    CONVERGENCE_TIMEOUT,
    create_replicated_topic,
    wait_for_new_leader,
)
from tests.conftest import wait_for

TOPIC = "fast"
# Far longer than the waits below: only the connection probe can fence within them.
LONG_SESSION_MS = 120_000


@pytest.fixture
def slow_session_cluster(tmp_path: Path):
    overrides = {**CLUSTER_OVERRIDES, "broker.session.timeout.ms": LONG_SESSION_MS}
    cluster = Cluster.start(tmp_path, brokers=3, overrides=overrides)
    yield cluster
    for node in cluster.nodes:
        if node.paused:
            node.resume()
    try:
        cluster.stop()
    except BrokerStartError as hung:
        pytest.fail(str(hung))


def brokers_in_metadata(cluster: Cluster, via: int) -> set[int]:
    return {int(entry.node_id) for entry in cluster.metadata(via=via).brokers}


def test_a_killed_leader_is_replaced_without_waiting_for_its_session(slow_session_cluster):
    cluster = slow_session_cluster
    create_replicated_topic(cluster, TOPIC, 1)
    leader = cluster.leader_of(TOPIC, 0)
    cluster.brokers[leader].kill()
    new_leader = wait_for_new_leader(cluster, TOPIC, 0, leader, CONVERGENCE_TIMEOUT)
    assert new_leader != leader


def test_a_paused_broker_keeps_its_session(slow_session_cluster):
    cluster = slow_session_cluster
    create_replicated_topic(cluster, TOPIC, 1)
    leader = cluster.leader_of(TOPIC, 0)
    follower = next(node for node in cluster.brokers if node != leader)
    cluster.brokers[follower].pause()
    # The leader drops the silent follower from the ISR (replica.lag.time.max.ms) ...
    wait_for(
        lambda: follower not in (cluster.isr_of(TOPIC, 0, via=leader) or {follower}),
        CONVERGENCE_TIMEOUT,
        "the paused follower to leave the ISR",
    )
    # ... but the controller has not fenced it: its port still accepts connections.
    assert follower in brokers_in_metadata(cluster, via=leader)
