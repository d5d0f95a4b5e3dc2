"""A node with an inter-node listener of its own keeps the cluster's requests off the client
listener: not advertised there, refused there (CLUSTER_AUTHORIZATION_FAILED), and a plain
client's LeaderAndIsr, StopReplica or follower's Fetch changes nothing."""

import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import BrokerId

from minibroker.protocol import codec
from minibroker.protocol.versions import ApiKey
from minibroker.tools.launcher import BrokerProcess, free_port
from tests.conftest import exchange, topic_id
from tests.integration.test_authorization import create, end_offset, produce_error

INTER_NODE_KEYS = {ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA}


@pytest.fixture
def two_listeners(tmp_path: Path) -> Iterator[tuple[BrokerProcess, str]]:
    """A broker (its own controller) with a CLIENT listener and an INTERNAL one named by
    inter.broker.listener.name; yields the broker (bootstrap: CLIENT) and INTERNAL's address."""
    client, internal = free_port(), free_port()
    listeners = f"INTERNAL://127.0.0.1:{internal},CLIENT://127.0.0.1:{client}"
    broker = BrokerProcess.start(
        node_id=1,
        log_dir=tmp_path / "data",
        port=client,
        overrides={
            "listeners": listeners,
            "advertised.listeners": listeners,
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CLIENT:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        },
    )
    try:
        broker.wait_ready(20)
        yield broker, f"127.0.0.1:{internal}"
    finally:
        assert broker.stop() == 0, broker.log_tail()


def advertised_keys(bootstrap: str) -> set[int]:
    response = exchange(
        bootstrap,
        ApiVersionsRequest(client_software_name="tests", client_software_version="1"),
    )
    assert response.error_code == ErrorCode.none
    return {entry.api_key for entry in response.api_keys}


def leader_and_isr(name: str, topic_uuid, new_leader: int):
    """What a controller would send to move the partition's leadership away."""
    return codec.build(
        codec.request_class(ApiKey.LEADER_AND_ISR, 7),
        {
            "controller_id": 1,
            "is_k_raft_controller": False,
            "controller_epoch": 1000,
            "broker_epoch": -1,
            "type_": 0,
            "topic_states": [
                {
                    "topic_name": name,
                    "topic_id": topic_uuid,
                    "partition_states": [
                        {
                            "partition_index": 0,
                            "controller_epoch": 1000,
                            "leader": new_leader,
                            "leader_epoch": 1000,
                            "isr": (new_leader,),
                            "partition_epoch": 1000,
                            "replicas": (1, new_leader),
                            "adding_replicas": (),
                            "removing_replicas": (),
                            "is_new": False,
                            "leader_recovery_state": 0,
                        }
                    ],
                }
            ],
            "live_leaders": [{"broker_id": new_leader, "host_name": "127.0.0.1", "port": 1}],
        },
    )


def stop_replica(name: str):
    return codec.build(
        codec.request_class(ApiKey.STOP_REPLICA, 4),
        {
            "controller_id": 1,
            "is_k_raft_controller": False,
            "controller_epoch": 1000,
            "broker_epoch": -1,
            "topic_states": [
                {
                    "topic_name": name,
                    "partition_states": [
                        {"partition_index": 0, "leader_epoch": -2, "delete_partition": True}
                    ],
                }
            ],
        },
    )


def test_client_listener_does_not_advertise_inter_node_apis(two_listeners):
    broker, internal = two_listeners
    assert not advertised_keys(broker.bootstrap) & INTER_NODE_KEYS
    assert advertised_keys(internal) >= INTER_NODE_KEYS


def test_single_listener_node_still_advertises_them_to_its_peers(broker):
    assert advertised_keys(broker.bootstrap) >= INTER_NODE_KEYS


def test_a_clients_leader_and_isr_and_stop_replica_change_nothing(two_listeners):
    broker, _ = two_listeners
    create(broker.bootstrap, "kept")
    assert produce_error(broker.bootstrap, "kept") == 0
    attack = leader_and_isr("kept", topic_id(broker.bootstrap, "kept"), new_leader=2)
    answered = exchange(broker.bootstrap, attack)
    assert answered.error_code == ErrorCode.cluster_authorization_failed
    answered = exchange(broker.bootstrap, stop_replica("kept"))
    assert answered.error_code == ErrorCode.cluster_authorization_failed
    # Still the leader, with its log: it appends and serves as before.
    assert produce_error(broker.bootstrap, "kept") == 0
    assert end_offset(broker.bootstrap, "kept") == 2
    assert (broker.log_dir / "kept-0").is_dir()


def follower_fetch(name: str) -> FetchRequest:
    """A fetch claiming to come from replica 1, which would report its progress to the
    leader and read past the high watermark."""
    return FetchRequest(
        replica_id=BrokerId(1),
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=1,
        max_bytes=1 << 20,
        topics=(
            FetchTopic(
                topic=name,
                partitions=(
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def test_a_clients_follower_fetch_is_refused_on_the_client_listener(two_listeners):
    broker, internal = two_listeners
    create(broker.bootstrap, "replicated")
    assert produce_error(broker.bootstrap, "replicated") == 0
    refused = exchange(broker.bootstrap, follower_fetch("replicated"))
    [partition] = refused.responses[0].partitions
    assert partition.error_code == ErrorCode.topic_authorization_failed
    answered = exchange(internal, follower_fetch("replicated"))
    assert answered.responses[0].partitions[0].error_code == ErrorCode.none


def test_a_clients_verify_only_add_partitions_is_refused_on_the_client_listener(two_listeners):
    """AddPartitionsToTxn v4+ (KIP-890's batched, verify-only form) comes from brokers only:
    CLUSTER_AUTHORIZATION_FAILED on the client listener, answered on the inter-broker one."""
    broker, internal = two_listeners
    verify = codec.build(
        codec.request_class(ApiKey.ADD_PARTITIONS_TO_TXN, 4),
        {
            "transactions": [
                {
                    "transactional_id": "tx",
                    "producer_id": 1,
                    "producer_epoch": 0,
                    "verify_only": True,
                    "topics": [{"name": "t", "partitions": [0]}],
                }
            ]
        },
    )
    refused = exchange(broker.bootstrap, verify)
    assert refused.error_code == ErrorCode.cluster_authorization_failed
    assert refused.results_by_transaction == ()
    answered = exchange(internal, verify)
    assert answered.error_code == ErrorCode.none
    ((result,),) = [r.topic_results for r in answered.results_by_transaction]
    assert result.results_by_partition[0].partition_error_code == (
        ErrorCode.unknown_topic_or_partition
    )
