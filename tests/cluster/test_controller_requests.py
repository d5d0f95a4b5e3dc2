"""LeaderAndIsr is the controller's command: a broker refuses it from a controller epoch it has
seen superseded, and from anyone but the configured controller, and such a refusal changes
nothing (the broker still obeys the real controller afterwards)."""

from __future__ import annotations

import dataclasses
import sys

from kio.index import load_request_schema
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from minibroker.tools.launcher import CONTROLLER_NODE_ID, BrokerProcess, Cluster
from tests.cluster.conftest import (
    CONVERGENCE_TIMEOUT,
    create_replicated_topic,
    produce_raw,
    produce_when_leading,
    replicas_of,
    wait_for_new_leader,
)
from tests.conftest import exchange

TOPIC = "controlled"
LEADER_AND_ISR_KEY = 4
# kio 0.6.1 (Kafka 3.9 schemas) knows LeaderAndIsr up to v7.
HIGHEST_KNOWN_VERSION = 7
# Far above anything the controller has reached in a test, so only a broker that adopted it
# from a refused request would then refuse the real controller.
FORGED_EPOCH = 1_000_000


def leader_and_isr_version(broker: BrokerProcess) -> int:
    """The highest LeaderAndIsr version both the broker (by ApiVersions) and kio speak."""
    advertised = {
        entry.api_key: entry for entry in exchange(broker.bootstrap, ApiVersionsRequest()).api_keys
    }
    assert LEADER_AND_ISR_KEY in advertised, "the broker does not list LeaderAndIsr in ApiVersions"
    version = min(advertised[LEADER_AND_ISR_KEY].max_version, HIGHEST_KNOWN_VERSION)
    assert version >= 2, "the test builds LeaderAndIsr v2+ (topic_states)"
    return version


def build(schema: type, **values):
    """An instance of a kio schema class from the values its version has fields for."""
    names = {field.name for field in dataclasses.fields(schema)}
    return schema(**{name: value for name, value in values.items() if name in names})


def make_leader_and_isr(
    cluster: Cluster, target: BrokerProcess, *, controller_id: int, controller_epoch: int
):
    """A LeaderAndIsr telling `target` that it now leads the topic's partition 0 under a much
    newer leader epoch: harmless only if the broker refuses it."""
    version = leader_and_isr_version(target)
    request_type = load_request_schema(LEADER_AND_ISR_KEY, version)
    # The nested entity classes live beside the request class, in its version's module.
    schema = sys.modules[request_type.__module__]
    metadata = cluster.metadata([TOPIC])
    (topic,) = metadata.topics
    (state,) = topic.partitions
    replicas = tuple(state.replica_nodes)
    partition_state = build(
        schema.LeaderAndIsrPartitionState,
        topic_name=TOPIC,
        partition_index=0,
        controller_epoch=controller_epoch,
        leader=target.node_id,
        leader_epoch=state.leader_epoch + 100,
        isr=replicas,
        partition_epoch=state.leader_epoch + 100,
        replicas=replicas,
        is_new=False,
    )
    topic_state = build(
        schema.LeaderAndIsrTopicState,
        topic_name=TOPIC,
        topic_id=topic.topic_id,
        partition_states=(partition_state,),
    )
    live_leader = build(
        schema.LeaderAndIsrLiveLeader,
        broker_id=target.node_id,
        host_name="127.0.0.1",
        port=target.port,
    )
    return build(
        request_type,
        controller_id=controller_id,
        is_k_raft_controller=False,
        controller_epoch=controller_epoch,
        broker_epoch=-1,
        type_=0,
        topic_states=(topic_state,),
        live_leaders=(live_leader,),
    )


def test_leader_and_isr_refused_from_stale_epoch_and_non_controller(cluster: Cluster):
    # Creating the topic makes the controller send LeaderAndIsr to every replica, so each
    # broker has seen the controller's epoch, which starts at 1: epoch 0 is stale.
    create_replicated_topic(cluster, TOPIC, 1)
    leader_id = cluster.leader_of(TOPIC, 0)
    # The controller elects the first live ISR member in assignment order.
    successor = cluster.brokers[
        next(node for node in replicas_of(cluster, TOPIC, 0) if node != leader_id)
    ]

    stale = make_leader_and_isr(
        cluster, successor, controller_id=CONTROLLER_NODE_ID, controller_epoch=0
    )
    response = exchange(successor.bootstrap, stale)
    assert response.error_code == ErrorCode.stale_controller_epoch, response

    forged = make_leader_and_isr(
        cluster, successor, controller_id=leader_id, controller_epoch=FORGED_EPOCH
    )
    response = exchange(successor.bootstrap, forged)
    assert response.error_code == ErrorCode.cluster_authorization_failed, response

    refused_leadership = produce_raw(successor, TOPIC, 0, [b"not the leader"], acks=1)
    assert refused_leadership.error_code == ErrorCode.not_leader_or_follower, refused_leadership

    cluster.brokers[leader_id].kill()
    assert wait_for_new_leader(cluster, TOPIC, 0, leader_id, CONVERGENCE_TIMEOUT) == (
        successor.node_id
    )
    produce_when_leading(successor, TOPIC, 0, [b"led by the real controller's choice"])
