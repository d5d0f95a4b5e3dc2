"""A topic's deletion cleans the share groups' state of it, as Kafka 4.4 does, in process under
trio's MockClock: the group coordinator, the share coordinator, the broker's persister and a
share partition leader's SharePartitionManager on one real replica manager in tmp_path (no
sockets, no sleep but the mock clock's).

Kafka's coordinators see the deletion in the metadata (TopicsDelta.deletedTopicIds): the group
coordinator's maybeCleanupShareGroupState takes the topic out of every share group's
initializing, initialized and deleting topics (a new ShareGroupStatePartitionMetadata record),
and the share coordinator's maybeCleanupShareState tombstones the state of its share
partitions. Here the controller's UpdateMetadata without the topic is that delta. A topic made
again under the name is another topic (another id): the group initializes it at its next
heartbeat and its leader starts it at share.auto.offset.reset."""

import trio
import trio.testing

from minibroker.common.config import BrokerConfig
from minibroker.common.metrics import BrokerMetrics
from minibroker.common.names import SHARE_GROUP_STATE_TOPIC
from minibroker.controller import broker_requests
from minibroker.controller import state as transitions
from minibroker.controller.state import ControllerState
from minibroker.coordinator.group.service import OFFSETS_TOPIC, GroupCoordinator
from minibroker.coordinator.group.share_group import ShareHeartbeatRequest
from minibroker.coordinator.share.service import ShareCoordinator
from minibroker.coordinator.share.state import SharePartitionKey
from minibroker.node.share_persister import CoordinatorPersister
from minibroker.protocol.errors import Error
from minibroker.replication import log_io
from minibroker.replication.replica_manager import AppendOrigin, ReplicaManager
from minibroker.replication.share_partition import Acknowledgement, AcknowledgeType
from minibroker.replication.share_partition_manager import SharePartitionManager
from minibroker.storage.log import LogConfig
from minibroker.storage.log_manager import LogManager
from tests.unit.replication_harness import StubController, records, trio_ms

NODE_ID = 1
CONTROLLER_ID = 0
GROUP = "g"


def create(state: ControllerState, name: str) -> None:
    transitions.create_topic(state, name, -1, -1, {}, {0: [NODE_ID]})


async def announce(replicas: ReplicaManager, state: ControllerState, *topics: str) -> None:
    """The controller's full UpdateMetadata, then LeaderAndIsr for the partitions of
    ``topics`` (all when none)."""
    for topic in state.topics:
        replicas.announced_topic_configs.setdefault(topic, {})
    replicas.apply_update_metadata(broker_requests.update_metadata(state, CONTROLLER_ID)(NODE_ID))
    results = await replicas.apply_leader_and_isr(
        broker_requests.leader_and_isr(
            state,
            CONTROLLER_ID,
            NODE_ID,
            [
                change
                for change in broker_requests.all_partitions(state)
                if not topics or change.topic in topics
            ],
        )
    )
    assert set(results.values()) == {Error.NONE}
    await trio.testing.wait_all_tasks_blocked()


async def test_a_deleted_topic_leaves_the_share_groups_and_its_successor_starts_afresh(
    autojump_clock, tmp_path
):
    config = BrokerConfig(
        node_id=NODE_ID,
        log_dirs=(tmp_path,),
        offsets_topic_num_partitions=1,
        offsets_topic_replication_factor=1,
        share_coordinator_state_topic_num_partitions=1,
        group_initial_rebalance_delay_ms=0,
    )
    logs = LogManager([tmp_path], LogConfig(), node_id=NODE_ID, cluster_id="mock")
    logs.open(trio_ms())
    replicas = ReplicaManager(
        config,
        logs,
        StubController(),
        BrokerMetrics(),
        clock_ms=trio_ms,
        run_blocking=log_io.inline,
    )
    async with trio.open_nursery() as nursery:
        groups = GroupCoordinator(config, replicas)
        share = ShareCoordinator(config, replicas)
        await nursery.start(replicas.run)
        await nursery.start(groups.run)
        await nursery.start(share.run)
        persister = CoordinatorPersister(config, replicas, share)
        groups.share_persister = persister
        leader = SharePartitionManager(config, replicas, persister)
        state = ControllerState()
        transitions.register_broker(state, NODE_ID, "127.0.0.1", 9092, "incarnation", 0)
        for name in (OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC, "queue"):
            create(state, name)
        await announce(replicas, state)
        replicas.group_configs[GROUP] = {"share.auto.offset.reset": "earliest"}

        epoch = 0

        async def heartbeat() -> None:
            nonlocal epoch
            request = ShareHeartbeatRequest(
                "member", epoch, subscribed_topic_names=("queue",) if epoch == 0 else None
            )
            answer = await groups.share_heartbeat(GROUP, request)
            assert answer.error == Error.NONE, answer
            epoch = answer.member_epoch

        def queue_partition():
            (found,) = [p for p in replicas.partitions() if p.key == ("queue", 0)]
            return found

        async def produce(count: int) -> None:
            ((result,),) = await replicas.append_records(
                records(0, count, "queue"), acks=-1, timeout_s=5.0, origin=AppendOrigin.CLIENT
            )
            assert result["error_code"] == Error.NONE

        async def take_and_accept() -> list[int]:
            partition = queue_partition()
            fetched = await leader.acquire(
                GROUP, "member", partition, max_records=100, max_bytes=1 << 20
            )
            assert fetched.error == Error.NONE
            offsets = [
                o for r in fetched.acquired for o in range(r.first_offset, r.last_offset + 1)
            ]
            if offsets:
                accept = [Acknowledgement(offsets[0], offsets[-1], AcknowledgeType.ACCEPT)]
                assert await leader.acknowledge(GROUP, "member", partition, accept) == Error.NONE
            return offsets

        await heartbeat()
        group = groups.share_groups[GROUP]
        old_id = state.topics["queue"].topic_id
        assert set(group.state_partitions.initialized) == {old_id}
        await produce(10)
        assert await take_and_accept() == list(range(10))
        old_key = SharePartitionKey(GROUP, old_id, 0)
        (shard,) = share.shards.values()
        assert shard.states[old_key].start_offset == 10

        # The topic is deleted: StopReplica with delete, then UpdateMetadata without it.
        transitions.delete_topic(state, "queue")
        await replicas.apply_stop_replica(
            broker_requests.stop_replica(state, CONTROLLER_ID, NODE_ID, {"queue": [0]})
        )
        replicas.apply_update_metadata(
            broker_requests.update_metadata(state, CONTROLLER_ID)(NODE_ID)
        )
        await trio.testing.wait_all_tasks_blocked()
        assert group.state_partitions.is_empty()
        assert old_key not in shard.states
        # Both written: a load of the partitions finds the same.
        (offsets_partition,) = [p for p in replicas.partitions() if p.topic == OFFSETS_TOPIC]
        assert offsets_partition.log.log_end_offset > 0

        # Made again under the name: the group initializes the new topic at its next
        # heartbeat, and its leader starts it at share.auto.offset.reset (earliest): offset 0.
        create(state, "queue")
        new_id = state.topics["queue"].topic_id
        assert new_id != old_id
        await announce(replicas, state, "queue")
        await heartbeat()
        assert set(group.state_partitions.initialized) == {new_id}
        await produce(3)
        assert await take_and_accept() == [0, 1, 2]
        assert shard.states[SharePartitionKey(GROUP, new_id, 0)].start_offset == 3
        assert old_key not in shard.states
        # DescribeShareGroupOffsets of the group lists the new topic only.
        error, _, described = await groups.describe_share_group_offsets(GROUP, None)
        assert error == Error.NONE
        assert [
            (name, topic_id, [row[:2] for row in rows]) for name, topic_id, rows in described
        ] == [("queue", new_id, [(0, 3)])]
        nursery.cancel_scope.cancel()
    replicas.close()
    logs.close()
