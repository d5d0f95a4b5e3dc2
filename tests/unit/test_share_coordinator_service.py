"""The share coordinator's service (coordinator/share/service.py) on the coordinator runtime,
under MockClock, on a real log manager and replica manager in tmp_path (made leader of
`__share_group_state` by a LeaderAndIsr the controller's pure core builds, as
test_coordinator_runtime.py does): operations written through the runtime with acks=-1,
a restarted node loading the same state back, the checks before the shard, and a share
partition manager persisting through the broker's persister to it."""

import uuid

import trio
import trio.testing

from minibroker.common.config import BrokerConfig
from minibroker.common.metrics import BrokerMetrics
from minibroker.common.names import SHARE_GROUP_STATE_TOPIC
from minibroker.controller import broker_requests
from minibroker.controller import state as transitions
from minibroker.controller.state import ControllerState
from minibroker.coordinator.share.service import ShareCoordinator
from minibroker.coordinator.share.state import SharePartitionKey
from minibroker.node.share_persister import CoordinatorPersister
from minibroker.protocol.errors import Error
from minibroker.replication import log_io
from minibroker.replication.replica_manager import AppendOrigin, ReplicaManager
from minibroker.replication.share_partition import (
    Acknowledgement,
    AcknowledgeType,
    RecordState,
    StateBatch,
)
from minibroker.replication.share_partition_manager import SharePartitionManager
from minibroker.replication.share_persister import ShareStateKey
from minibroker.storage.log import LogConfig
from minibroker.storage.log_manager import LogManager
from tests.unit.replication_harness import StubController, records, trio_ms

NODE_ID = 1
CONTROLLER_ID = 0


def cluster_state() -> ControllerState:
    state = ControllerState()
    transitions.register_broker(state, NODE_ID, "127.0.0.1", 9092, "incarnation", 0)
    transitions.create_topic(state, SHARE_GROUP_STATE_TOPIC, -1, -1, {}, {0: [NODE_ID]})
    transitions.create_topic(state, "queue", -1, -1, {}, {0: [NODE_ID], 1: [NODE_ID]})
    return state


class Node:
    def __init__(self, directory, per_snapshot: int = 500) -> None:
        self.config = BrokerConfig(
            node_id=NODE_ID,
            log_dirs=(directory,),
            share_coordinator_snapshot_update_records_per_snapshot=per_snapshot,
        )
        self.logs = LogManager([directory], LogConfig(), node_id=NODE_ID, cluster_id="mock")
        self.logs.open(trio_ms())
        self.replicas = ReplicaManager(
            self.config,
            self.logs,
            StubController(),
            BrokerMetrics(),
            clock_ms=trio_ms,
            run_blocking=log_io.inline,  # MockClock: no worker threads (replication/log_io.py)
        )
        self.coordinator = ShareCoordinator(self.config, self.replicas)

    async def start(self, nursery, state: ControllerState) -> None:
        await nursery.start(self.replicas.run)
        await nursery.start(self.coordinator.run)
        for topic in (SHARE_GROUP_STATE_TOPIC, "queue"):
            self.replicas.announced_topic_configs[topic] = {}
        self.replicas.apply_update_metadata(
            broker_requests.update_metadata(state, CONTROLLER_ID)(NODE_ID)
        )
        changes = broker_requests.all_partitions(state)
        results = await self.replicas.apply_leader_and_isr(
            broker_requests.leader_and_isr(state, CONTROLLER_ID, NODE_ID, changes)
        )
        assert set(results.values()) == {Error.NONE}
        await trio.testing.wait_all_tasks_blocked()

    def log_end(self) -> int:
        (partition,) = [p for p in self.replicas.partitions() if p.topic == SHARE_GROUP_STATE_TOPIC]
        return partition.log.log_end_offset

    def stop(self) -> None:
        self.replicas.close()
        self.logs.close()


async def test_state_written_through_the_runtime_is_loaded_back(autojump_clock, tmp_path):
    state = cluster_state()
    topic_id = state.topics["queue"].topic_id
    key = SharePartitionKey("g", topic_id, 1)
    node = Node(tmp_path, per_snapshot=2)
    async with trio.open_nursery() as nursery:
        await node.start(nursery, state)
        share = node.coordinator
        assert share.check(key) == Error.NONE
        assert await share.initialize(key, 1, 10) == Error.NONE
        assert (await share.read(key, 4)).error == Error.NONE  # records leader epoch 4
        for offset in range(10, 15):
            error = await share.write(
                key,
                state_epoch=1,
                leader_epoch=4,
                start_offset=-1,
                batches=(StateBatch(offset, offset, RecordState.ACKNOWLEDGED, 1),),
                delivery_complete_count=offset - 9,
            )
            assert error == Error.NONE
        # 1 snapshot + 1 leader-epoch update + 5 writes: every record committed, one a batch.
        assert node.log_end() == 7
        assert (
            await share.write(key, state_epoch=1, leader_epoch=3, start_offset=-1, batches=())
            == Error.FENCED_LEADER_EPOCH
        )
        assert node.log_end() == 7  # a refused write appends nothing
        live = share.shards[0].states[key]
        nursery.cancel_scope.cancel()
    node.stop()

    again = Node(tmp_path, per_snapshot=2)
    async with trio.open_nursery() as nursery:
        await again.start(nursery, state)
        assert again.coordinator.shards[0].states[key] == live
        read = await again.coordinator.read(key, 4)
        assert read.error == Error.NONE and read.state is not None
        assert read.state.batches == (StateBatch(10, 14, RecordState.ACKNOWLEDGED, 1),)
        summary = await again.coordinator.read_summary(key, 4)
        assert summary.summary is not None and summary.summary.delivery_complete_count == 5
        nursery.cancel_scope.cancel()
    again.stop()


async def test_the_checks_before_the_shard(autojump_clock, tmp_path):
    state = cluster_state()
    topic_id = state.topics["queue"].topic_id
    node = Node(tmp_path)
    async with trio.open_nursery() as nursery:
        await node.start(nursery, state)
        share = node.coordinator
        # A topic id or partition this cluster does not have (Kafka's metadata image check).
        unknown = SharePartitionKey("g", uuid.uuid4(), 0)
        assert await share.initialize(unknown, 0, 0) == Error.UNKNOWN_TOPIC_OR_PARTITION
        no_partition = SharePartitionKey("g", topic_id, 7)
        assert await share.initialize(no_partition, 0, 0) == Error.UNKNOWN_TOPIC_OR_PARTITION
        # Null topic id, negative partition, empty group.
        for bad in (
            SharePartitionKey("g", uuid.UUID(int=0), 0),
            SharePartitionKey("g", topic_id, -1),
            SharePartitionKey("", topic_id, 0),
        ):
            assert await share.initialize(bad, 0, 0) == Error.INVALID_REQUEST
        assert node.log_end() == 0
        # No longer leader: NOT_COORDINATOR, and the shard is dropped.
        (partition,) = [p for p in node.replicas.partitions() if p.topic == SHARE_GROUP_STATE_TOPIC]
        assert share.runtime.unload(0, partition.leader_epoch)
        assert share.shards == {}
        key = SharePartitionKey("g", topic_id, 0)
        assert await share.initialize(key, 0, 0) == Error.NOT_COORDINATOR
        nursery.cancel_scope.cancel()
    node.stop()


async def test_a_retried_initialization_keeps_what_the_leader_persisted(autojump_clock, tmp_path):
    """Issue 35's fault campaign: the group coordinator initializes a share partition
    (InitializeShareGroupState, start offset -1, the group epoch as state epoch), its
    ShareGroupStatePartitionMetadata write fails, so the partition stays *initializing* and
    is initialized again later, at the group's higher epoch. Before the fix the second
    initialization replaced the state: the leader's next write was FENCED_STATE_EPOCH, the
    partition was read again from start offset -1 and started again at
    share.auto.offset.reset (earliest), and records whose ACCEPT had been acknowledged were
    delivered again. Here the leader's SharePartitionManager persists through the broker's
    own persister (node/share_persister.py, local) to this service's shard."""

    state = cluster_state()
    topic_id = state.topics["queue"].topic_id
    key = ShareStateKey("g", topic_id, 0)
    node = Node(tmp_path)
    async with trio.open_nursery() as nursery:
        await node.start(nursery, state)
        node.replicas.group_configs["g"] = {"share.auto.offset.reset": "earliest"}
        persister = CoordinatorPersister(node.config, node.replicas, node.coordinator)
        # The group coordinator's first initialization, at group epoch 1.
        assert await persister.initialize(key, 1, -1) == Error.NONE
        ((appended,),) = await node.replicas.append_records(
            records(0, 10, "queue"), acks=-1, timeout_s=5.0, origin=AppendOrigin.CLIENT
        )
        assert appended["error_code"] == Error.NONE
        (queue,) = [p for p in node.replicas.partitions() if p.key == ("queue", 0)]

        async def delivered(manager: SharePartitionManager) -> list[int]:
            """The offsets one fetch acquires (after a refused write, the next fetch's)."""
            for _ in range(2):
                fetched = await manager.acquire("g", "m", queue, max_records=100, max_bytes=1 << 20)
                if fetched.error == Error.NONE:
                    break
            assert fetched.error == Error.NONE
            return [
                offset
                for r in fetched.acquired
                for offset in range(r.first_offset, r.last_offset + 1)
            ]

        leader = SharePartitionManager(node.config, node.replicas, persister)
        assert await delivered(leader) == list(range(10))
        accept = [Acknowledgement(0, 9, AcknowledgeType.ACCEPT)]
        assert await leader.acknowledge("g", "m", queue, accept) == Error.NONE

        # Initialized again, the group now at epoch 3 (members came and went meanwhile).
        assert await persister.initialize(key, 3, -1) == Error.NONE

        ((appended,),) = await node.replicas.append_records(
            records(0, 1, "queue"), acks=-1, timeout_s=5.0, origin=AppendOrigin.CLIENT
        )
        assert appended["error_code"] == Error.NONE
        # Neither the leader nor a new one (reading the state back) delivers 0-9 again.
        assert await delivered(leader) == [10]
        new_leader = SharePartitionManager(node.config, node.replicas, persister)
        read = await persister.read(key, queue.leader_epoch)
        assert read.error == Error.NONE and read.state is not None
        assert read.state.start_offset == 10
        await leader.acknowledge(
            "g", "m", queue, [Acknowledgement(10, 10, AcknowledgeType.RELEASE)]
        )
        assert await delivered(new_leader) == [10]
        nursery.cancel_scope.cancel()
    node.stop()
