"""Eligible leader replicas (KIP-966) across broker restarts, as Kafka 4.4 decides them: a
broker stopped cleanly (SIGTERM) writes its broker epoch in its log dirs' clean-shutdown
markers and sends it back when it registers again (BrokerRegistration v4's
PreviousBrokerEpoch), so the controller keeps it eligible and elects it; a broker killed
(SIGKILL) has no marker and loses its eligibility when it registers again.

RF 3 and min.insync.replicas 3 on the cluster tests' short sessions: broker 2 stops cleanly
(the ISR falls below min ISR: it becomes eligible), broker 3 is killed (eligible too), then
the leader, broker 1, is killed: the ISR is empty and the partition has no leader. Broker 3
comes back first: not eligible any more, the partition stays without a leader. Broker 2 comes
back: elected from the ELR.
"""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_topic_partitions.v0.request import (
    DescribeTopicPartitionsRequest,
    TopicRequest,
)
from kio.schema.errors import ErrorCode

from minibroker.tools.launcher import BrokerProcess, Cluster
from tests.cluster.conftest import CONVERGENCE_TIMEOUT
from tests.conftest import exchange, wait_for

TOPIC = "elr-restart"


def partition_view(broker: BrokerProcess) -> tuple[int, list[int], list[int]] | None:
    """(leader, ISR, ELR) of the partition as DescribeTopicPartitions answers on `broker`,
    the lists sorted; None before it knows the topic."""
    request = DescribeTopicPartitionsRequest(
        topics=(TopicRequest(name=TOPIC),), response_partition_limit=10, cursor=None
    )
    (topic,) = exchange(broker.bootstrap, request).topics
    if topic.error_code != ErrorCode.none or not topic.partitions:
        return None
    (p,) = topic.partitions
    return p.leader_id, sorted(p.isr_nodes), sorted(p.eligible_leader_replicas)


def settles(broker: BrokerProcess, expected: tuple) -> None:
    wait_for(
        lambda: partition_view(broker) == expected,
        CONVERGENCE_TIMEOUT,
        f"{TOPIC}-0 to be (leader, ISR, ELR) {expected} on broker {broker.node_id}",
        0.05,
    )


def test_a_cleanly_stopped_broker_stays_eligible_and_a_killed_one_does_not(cluster: Cluster):
    one, two, three = (cluster.brokers[node_id] for node_id in (1, 2, 3))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(
        TOPIC, num_partitions=1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "3"}
    )
    admin.create_topics([topic])[TOPIC].result(30)
    cluster.wait_for_isr(TOPIC, 0, [1, 2, 3], CONVERGENCE_TIMEOUT)

    assert two.stop() == 0  # a clean shutdown: controlled, markers with its broker epoch
    settles(one, (1, [1, 3], [2]))
    three.kill()
    settles(one, (1, [1], [2, 3]))
    one.kill()  # the last ISR member: no leader, every replica eligible

    three.restart()  # killed: no marker, an unclean shutdown; it leaves the ELR
    three.wait_ready(CONVERGENCE_TIMEOUT)
    settles(three, (-1, [], [1, 2]))
    two.restart()  # stopped cleanly: still eligible, so elected
    two.wait_ready(CONVERGENCE_TIMEOUT)
    # Broker 3 may rejoin the ISR under the new leader as soon as it has caught up.
    wait_for(
        lambda: (
            (view := partition_view(two)) is not None
            and view[0] == 2
            and view[1] in ([2], [2, 3])
            and view[2] == [1]
        ),
        CONVERGENCE_TIMEOUT,
        f"broker 2 elected from the ELR of {TOPIC}-0",
        0.05,
    )
