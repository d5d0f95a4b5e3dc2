"""KIP-903 against a real controller: AlterPartition v3 names each new ISR member with the
broker epoch its leader saw it with, and the controller refuses a member that restarted since
(a new broker epoch) with INELIGIBLE_REPLICA, changing nothing, as Kafka 4.4's controller
does (ReplicationControlManager.ineligibleReplicasForIsr). The request is the one a leader
would send that still held a follower's fetch state from before the follower's restart; the
test sends it itself, on the controller's listener, with the epochs the controller saved.

minibroker's followers fetch at v18 with their broker epoch in ReplicaState (KIP-903), so its
own leaders name them with the epoch of their last fetch (tests/unit/test_fetcher.py); a
follower of a topic without an id fetches at v12, which carries none, and is named with -1
(not checked), which the controller accepts, as here."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from minibroker.controller.state import ControllerState
from minibroker.controller.store import STATE_FILE, _state_from_json
from minibroker.protocol import codec
from minibroker.protocol.versions import ApiKey
from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import CONVERGENCE_TIMEOUT, create_replicated_topic, replicas_of
from tests.conftest import exchange, wait_for

TOPIC = "isr-epochs"


def saved_state(cluster: Cluster) -> ControllerState:
    """The controller's decisions as it saved them (every change is saved before it is sent),
    read only: ControllerStore.load would start a new controller epoch and write the file."""
    assert cluster.controller is not None
    path = cluster.controller.log_dir / STATE_FILE
    return _state_from_json(path.read_text(encoding="utf-8"), path)


def alter_partition_v3(cluster: Cluster, leader: int, isr_epochs: list[tuple[int, int]]):
    """AlterPartition v3 from ``leader`` (with its current broker epoch) for partition 0 at
    the saved epochs; returns the partition's answer."""
    assert cluster.controller is not None
    state = saved_state(cluster)
    topic = state.topics[TOPIC]
    partition = topic.partitions[0]
    request = codec.build(
        codec.request_class(ApiKey.ALTER_PARTITION, 3),
        {
            "broker_id": leader,
            "broker_epoch": state.brokers[leader].broker_epoch,
            "topics": [
                {
                    "topic_id": topic.topic_id,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "leader_epoch": partition.leader_epoch,
                            "new_isr_with_epochs": [
                                {"broker_id": broker, "broker_epoch": epoch}
                                for broker, epoch in isr_epochs
                            ],
                            "leader_recovery_state": 0,
                            "partition_epoch": partition.partition_epoch,
                        }
                    ],
                }
            ],
        },
    )
    response = exchange(cluster.controller.bootstrap, request)
    assert response.error_code == ErrorCode.none, response
    return response.topics[0].partitions[0]


def test_alter_partition_v3_refuses_a_follower_that_restarted_since(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, 1)
    replicas = replicas_of(cluster, TOPIC, 0)
    cluster.wait_for_isr(TOPIC, 0, replicas, CONVERGENCE_TIMEOUT)
    leader = cluster.leader_of(TOPIC, 0)
    assert leader is not None
    follower = cluster.brokers[next(node for node in replicas if node != leader)]
    old_epoch = saved_state(cluster).brokers[follower.node_id].broker_epoch

    follower.kill()
    follower.restart()
    follower.wait_ready(CONVERGENCE_TIMEOUT)
    # The follower registered again (a new broker epoch) and its leader took it back.
    wait_for(
        lambda: saved_state(cluster).brokers[follower.node_id].broker_epoch != old_epoch,
        CONVERGENCE_TIMEOUT,
        "the restarted follower's new registration",
    )
    cluster.wait_for_isr(TOPIC, 0, replicas, CONVERGENCE_TIMEOUT)
    before = saved_state(cluster)
    new_epoch = before.brokers[follower.node_id].broker_epoch
    assert new_epoch > old_epoch
    assert before.topics[TOPIC].partitions[0].leader == leader

    def isr_with(follower_epoch: int) -> list[tuple[int, int]]:
        """The current ISR, in the controller's order, the follower with ``follower_epoch``."""
        return [
            (
                node,
                follower_epoch if node == follower.node_id else before.brokers[node].broker_epoch,
            )
            for node in before.topics[TOPIC].partitions[0].isr
        ]

    refused = alter_partition_v3(cluster, leader, isr_with(old_epoch))
    assert refused.error_code == ErrorCode.ineligible_replica, refused
    after = saved_state(cluster).topics[TOPIC].partitions[0]
    assert after == before.topics[TOPIC].partitions[0]  # nothing changed, nothing saved

    # With the follower's current epoch, or -1 (not checked), the same ISR is accepted (and
    # is the ISR already: the partition epoch stays).
    for epoch in (new_epoch, -1):
        accepted = alter_partition_v3(cluster, leader, isr_with(epoch))
        assert accepted.error_code == ErrorCode.none, accepted
        assert list(accepted.isr) == after.isr
        assert accepted.partition_epoch == after.partition_epoch
