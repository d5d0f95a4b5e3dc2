"""The share coordinator on a real 3-broker cluster (KIP-932's share state on
`__share_group_state`): the state APIs over real sockets, FindCoordinator key type 2, the
share coordinator's broker killed with SIGKILL and the state read back identical from the
next one; bad input answered with Kafka's codes; and the persister a broker runs
(node/share_persister.py) finding the coordinator and retrying across the kill."""

from __future__ import annotations

import uuid

import trio

from minibroker.cluster.node_connection import NodeConnection
from minibroker.common.config import BrokerConfig
from minibroker.coordinator.share.state import kafka_uuid
from minibroker.node.share_persister import CoordinatorPersister
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.replication.metadata_cache import BrokerEndpoint
from minibroker.replication.share_partition import PersistedState, RecordState, StateBatch
from minibroker.replication.share_persister import ShareStateKey, WriteState
from minibroker.tools import wire
from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import CONVERGENCE_TIMEOUT, create_replicated_topic
from tests.conftest import wait_for

TOPIC = "queue"
GROUP = "share-group"
RETRIABLE = {
    Error.NOT_COORDINATOR,
    Error.COORDINATOR_NOT_AVAILABLE,
    Error.COORDINATOR_LOAD_IN_PROGRESS,
}


def call(cluster: Cluster, broker: int, api: ApiKey, version: int, data: dict):
    with wire.connect(cluster.brokers[broker].bootstrap, 10.0, exact=True) as client:
        return client.request(api, version, data)


def find_share_coordinator(cluster: Cluster, key: str, version: int = 6) -> tuple[int, Error]:
    """FindCoordinator key type 2 asked of the first running broker: (node id, error)."""
    for node, broker in cluster.brokers.items():
        if broker.running:
            answer = call(
                cluster,
                node,
                ApiKey.FIND_COORDINATOR,
                version,
                {"key_type": 2, "coordinator_keys": [key], "key": key},
            )
            (coordinator,) = answer.coordinators
            return int(coordinator.node_id), Error(coordinator.error_code.value)
    raise AssertionError("no broker running")


def one(topic_id: uuid.UUID, group: str = GROUP, **partition) -> dict:
    return {
        "group_id": group,
        "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0, **partition}]}],
    }


def state_call(cluster: Cluster, broker: int, api: ApiKey, version: int, data: dict):
    """The one partition's result of a state API."""
    return call(cluster, broker, api, version, data).results[0].partitions[0]


def code(result) -> Error:
    return Error(result.error_code.value)


def until_served(cluster: Cluster, key: str, api: ApiKey, version: int, data: dict):
    """Ask the share coordinator of ``key`` (found again each time) until it answers with
    something other than a retriable coordinator error; that answer and the node."""

    def attempt():
        node, error = find_share_coordinator(cluster, key)
        if error != Error.NONE or not cluster.brokers[node].running:
            return None  # not known yet, or still the killed broker in the metadata
        try:
            result = state_call(cluster, node, api, version, data)
        except OSError:
            return None
        return None if code(result) in RETRIABLE else (node, result)

    return wait_for(attempt, CONVERGENCE_TIMEOUT, f"the share coordinator of {key}")


def batches(result) -> list[tuple[int, int, int, int]]:
    return [
        (int(b.first_offset), int(b.last_offset), int(b.delivery_state), int(b.delivery_count))
        for b in result.state_batches
    ]


def test_share_state_survives_the_coordinators_sigkill(cluster: Cluster):
    create_replicated_topic(cluster, TOPIC, 1)
    metadata = cluster.metadata([TOPIC])
    assert metadata is not None
    topic_id = metadata.topics[0].topic_id
    key = f"{GROUP}:{kafka_uuid(topic_id)}:0"

    # Initialize, then a leader at epoch 3 reads and writes 12 times (ShareUpdates over the
    # initial ShareSnapshot).
    coordinator, result = until_served(
        cluster,
        key,
        ApiKey.INITIALIZE_SHARE_GROUP_STATE,
        0,
        one(topic_id, state_epoch=1, start_offset=0),
    )
    assert code(result) == Error.NONE
    read = state_call(
        cluster, coordinator, ApiKey.READ_SHARE_GROUP_STATE, 0, one(topic_id, leader_epoch=3)
    )
    assert (code(read), int(read.start_offset), int(read.state_epoch), batches(read)) == (
        Error.NONE,
        0,
        1,
        [],
    )
    for step in range(12):
        written = state_call(
            cluster,
            coordinator,
            ApiKey.WRITE_SHARE_GROUP_STATE,
            1,
            one(
                topic_id,
                state_epoch=1,
                leader_epoch=3,
                start_offset=step if step % 5 == 4 else -1,
                delivery_complete_count=step,
                state_batches=[
                    {
                        "first_offset": step * 2,
                        "last_offset": step * 2 + 2,
                        "delivery_state": (0, 2, 4)[step % 3],
                        "delivery_count": step % 3 + 1,
                    }
                ],
            ),
        )
        assert code(written) == Error.NONE, code(written)
    before = state_call(
        cluster, coordinator, ApiKey.READ_SHARE_GROUP_STATE, 0, one(topic_id, leader_epoch=3)
    )
    assert code(before) == Error.NONE
    assert int(before.start_offset) == 9
    assert batches(before)[0][0] == 9 and batches(before)[-1][1] == 24
    summary = state_call(
        cluster,
        coordinator,
        ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
        1,
        one(topic_id, leader_epoch=3),
    )
    assert (
        code(summary),
        int(summary.state_epoch),
        int(summary.leader_epoch),
        int(summary.start_offset),
        int(summary.delivery_complete_count),
    ) == (Error.NONE, 1, 3, 9, 11)

    # Bad input, each with Kafka's code, and the coordinator keeps serving.
    stale_leader = state_call(
        cluster,
        coordinator,
        ApiKey.WRITE_SHARE_GROUP_STATE,
        0,
        one(topic_id, state_epoch=1, leader_epoch=2, start_offset=-1, state_batches=[]),
    )
    assert code(stale_leader) == Error.FENCED_LEADER_EPOCH
    stale_state = state_call(
        cluster,
        coordinator,
        ApiKey.WRITE_SHARE_GROUP_STATE,
        0,
        one(topic_id, state_epoch=0, leader_epoch=3, start_offset=-1, state_batches=[]),
    )
    assert code(stale_state) == Error.FENCED_STATE_EPOCH
    assert (
        code(
            state_call(
                cluster,
                coordinator,
                ApiKey.INITIALIZE_SHARE_GROUP_STATE,
                0,
                one(topic_id, state_epoch=0, start_offset=0),
            )
        )
        == Error.FENCED_STATE_EPOCH
    )
    stale_read = state_call(
        cluster, coordinator, ApiKey.READ_SHARE_GROUP_STATE, 0, one(topic_id, leader_epoch=2)
    )
    assert code(stale_read) == Error.FENCED_LEADER_EPOCH
    unknown_topic = uuid.uuid4()
    unknown_key = f"{GROUP}:{kafka_uuid(unknown_topic)}:0"
    _, result = until_served(
        cluster, unknown_key, ApiKey.READ_SHARE_GROUP_STATE, 0, one(unknown_topic, leader_epoch=0)
    )
    assert code(result) == Error.UNKNOWN_TOPIC_OR_PARTITION
    never_initialized = f"other-group:{kafka_uuid(topic_id)}:0"
    _, result = until_served(
        cluster,
        never_initialized,
        ApiKey.READ_SHARE_GROUP_STATE,
        0,
        one(topic_id, group="other-group", leader_epoch=0),
    )
    assert code(result) == Error.UNKNOWN_TOPIC_OR_PARTITION
    other = next(node for node in cluster.brokers if node != coordinator)
    not_here = state_call(
        cluster, other, ApiKey.READ_SHARE_GROUP_STATE, 0, one(topic_id, leader_epoch=3)
    )
    assert code(not_here) == Error.NOT_COORDINATOR
    assert find_share_coordinator(cluster, "no-topic-id")[1] == Error.INVALID_REQUEST
    # The topic id as Kafka writes it, not Python's hex form.
    assert find_share_coordinator(cluster, f"{GROUP}:{topic_id}:0")[1] == Error.INVALID_REQUEST
    assert find_share_coordinator(cluster, key, version=5)[1] == Error.INVALID_REQUEST

    # The coordinator's broker is killed; the next one loads `__share_group_state`.
    cluster.brokers[coordinator].kill()
    successor, after = until_served(
        cluster, key, ApiKey.READ_SHARE_GROUP_STATE, 0, one(topic_id, leader_epoch=3)
    )
    assert successor != coordinator
    assert code(after) == Error.NONE
    assert (int(after.start_offset), int(after.state_epoch), batches(after)) == (
        int(before.start_offset),
        int(before.state_epoch),
        batches(before),
    )
    # The leader epoch recorded before the kill still fences.
    stale_after = state_call(
        cluster,
        successor,
        ApiKey.WRITE_SHARE_GROUP_STATE,
        0,
        one(topic_id, state_epoch=1, leader_epoch=2, start_offset=-1, state_batches=[]),
    )
    assert code(stale_after) == Error.FENCED_LEADER_EPOCH
    # Delete: the key is gone.
    deleted = state_call(cluster, successor, ApiKey.DELETE_SHARE_GROUP_STATE, 0, one(topic_id))
    assert code(deleted) == Error.NONE
    gone = state_call(
        cluster, successor, ApiKey.READ_SHARE_GROUP_STATE, 0, one(topic_id, leader_epoch=3)
    )
    assert code(gone) == Error.UNKNOWN_TOPIC_OR_PARTITION


class _Metadata:
    def __init__(self, cluster: Cluster) -> None:
        self.brokers = {
            node: BrokerEndpoint(node, "127.0.0.1", broker.port)
            for node, broker in cluster.brokers.items()
        }


class _Replicas:
    """What the persister reads of a replica manager: the brokers' inter-broker endpoints
    and how to connect to one."""

    def __init__(self, cluster: Cluster) -> None:
        self.metadata = _Metadata(cluster)
        self.connect = NodeConnection.connect


class _NotHere:
    """A share coordinator that serves nothing, so every operation goes over the wire."""

    def check(self, key) -> Error:
        return Error.NOT_COORDINATOR


async def test_the_persister_finds_the_coordinator_and_retries_across_its_kill(
    cluster: Cluster,
):
    create_replicated_topic(cluster, TOPIC, 1)
    metadata = cluster.metadata([TOPIC])
    assert metadata is not None
    key = ShareStateKey("persisted", metadata.topics[0].topic_id, 0)
    # Node id 99 is none of the cluster's: FindCoordinator goes to the cluster's brokers.
    persister = CoordinatorPersister(
        BrokerConfig(node_id=99),
        _Replicas(cluster),  # type: ignore[arg-type]
        _NotHere(),  # type: ignore[arg-type]
        deadline_s=CONVERGENCE_TIMEOUT,
    )
    try:
        assert await persister.initialize(key, 2, 100) == Error.NONE
        read = await persister.read(key, 0)
        assert (read.error, read.state) == (Error.NONE, PersistedState(100, 2, ()))
        batches = (StateBatch(100, 104, RecordState.ACKNOWLEDGED, 1),)
        assert await persister.write(key, WriteState(2, 0, -1, batches, 5)) == Error.NONE
        assert await persister.write(key, WriteState(1, 0, -1, ())) == Error.FENCED_STATE_EPOCH
        coordinator, error = await persister.find_coordinator(key)
        assert error == Error.NONE and coordinator is not None
        assert persister.remote_requests >= 4

        await trio.to_thread.run_sync(cluster.brokers[coordinator].kill)
        read = await persister.read(key, 1)
        assert (read.error, read.state) == (Error.NONE, PersistedState(100, 2, batches))
        summary = await persister.read_summary(key, 1)
        assert (summary.error, summary.leader_epoch, summary.delivery_complete_count) == (
            Error.NONE,
            1,
            5,
        )
        assert (await persister.find_coordinator(key))[0] != coordinator
        assert await persister.delete(key) == Error.NONE
        assert (await persister.read(key, 1)).error == Error.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        await persister.aclose()
