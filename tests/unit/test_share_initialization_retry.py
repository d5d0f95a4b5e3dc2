"""Issue 35's share-group violation, in process under trio's MockClock: the group
coordinator, the share coordinator, the broker's persister (node/share_persister.py, local)
and a share partition leader's SharePartitionManager on one real replica manager in tmp_path
(no sockets, no sleep but the mock clock's).

The group coordinator initializes a subscribed share partition (InitializeShareGroupState,
start offset -1, the group epoch as state epoch; Kafka's GroupMetadataManager
initializeShareGroupState), then records it as initialized in its
ShareGroupStatePartitionMetadata record. When that record's write fails (here: failed once,
as a REQUEST_TIMED_OUT of `__consumer_offsets` under the fault campaign's load fails it), the
partition stays *initializing*, and a heartbeat after group.share.initialize.retry.interval.ms
(30 s) initializes it again, at the group's epoch of the time. Before the fix the share
coordinator replaced the state (as Kafka's ShareCoordinatorShard.initializeState does), the
leader's next write was FENCED_STATE_EPOCH, the leader read the state again (start offset
-1) and started the partition again at share.auto.offset.reset: records whose ACCEPT had
been acknowledged were delivered again (redelivered_after_accept in docs/faults.md)."""

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
from minibroker.coordinator.group.share_log_format import ShareStatePartitionMetadataValue
from minibroker.coordinator.share.service import ShareCoordinator
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
TOPICS = (OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC, "queue")


def cluster_state() -> ControllerState:
    state = ControllerState()
    transitions.register_broker(state, NODE_ID, "127.0.0.1", 9092, "incarnation", 0)
    for name in TOPICS:
        transitions.create_topic(state, name, -1, -1, {}, {0: [NODE_ID]})
    return state


async def start_broker(nursery, directory):
    config = BrokerConfig(
        node_id=NODE_ID,
        log_dirs=(directory,),
        offsets_topic_num_partitions=1,
        offsets_topic_replication_factor=1,
        share_coordinator_state_topic_num_partitions=1,
        group_initial_rebalance_delay_ms=0,
    )
    logs = LogManager([directory], LogConfig(), node_id=NODE_ID, cluster_id="mock")
    logs.open(trio_ms())
    replicas = ReplicaManager(
        config,
        logs,
        StubController(),
        BrokerMetrics(),
        clock_ms=trio_ms,
        run_blocking=log_io.inline,
    )
    groups = GroupCoordinator(config, replicas)
    share = ShareCoordinator(config, replicas)
    await nursery.start(replicas.run)
    await nursery.start(groups.run)
    await nursery.start(share.run)
    persister = CoordinatorPersister(config, replicas, share)
    groups.share_persister = persister
    state = cluster_state()
    for topic in TOPICS:
        replicas.announced_topic_configs[topic] = {}
    replicas.apply_update_metadata(broker_requests.update_metadata(state, CONTROLLER_ID)(NODE_ID))
    results = await replicas.apply_leader_and_isr(
        broker_requests.leader_and_isr(
            state, CONTROLLER_ID, NODE_ID, broker_requests.all_partitions(state)
        )
    )
    assert set(results.values()) == {Error.NONE}
    await trio.testing.wait_all_tasks_blocked()
    replicas.group_configs["g"] = {"share.auto.offset.reset": "earliest"}
    return logs, replicas, groups, persister


async def test_an_initialization_retried_after_a_failed_record_delivers_no_accepted_record_again(
    autojump_clock, tmp_path
):
    async with trio.open_nursery() as nursery:
        logs, replicas, groups, persister = await start_broker(nursery, tmp_path)
        # The first ShareGroupStatePartitionMetadata write that records partitions as
        # initialized fails, as a timed-out write of `__consumer_offsets` does.
        write_records = groups._write_share_records
        failed: list[ShareStatePartitionMetadataValue] = []

        async def failing_once(group, share_records):
            for _, value in share_records:
                if (
                    isinstance(value, ShareStatePartitionMetadataValue)
                    and value.initialized
                    and not failed
                ):
                    failed.append(value)
                    return Error.COORDINATOR_NOT_AVAILABLE
            return await write_records(group, share_records)

        groups._write_share_records = failing_once

        async def heartbeat(member_id: str, epoch: int):
            request = ShareHeartbeatRequest(
                member_id, epoch, subscribed_topic_names=("queue",) if epoch == 0 else None
            )
            answer = await groups.share_heartbeat("g", request)
            assert answer.error == Error.NONE, answer
            return answer

        first = await heartbeat("member-a", 0)
        assert failed, "the initialized record was not written"
        group = groups.share_groups["g"]
        assert group.state_partitions.initializing and not group.state_partitions.initialized

        (queue,) = [p for p in replicas.partitions() if p.key == ("queue", 0)]

        async def produce(count: int) -> None:
            ((result,),) = await replicas.append_records(
                records(0, count, "queue"), acks=-1, timeout_s=5.0, origin=AppendOrigin.CLIENT
            )
            assert result["error_code"] == Error.NONE

        async def delivered(manager: SharePartitionManager, member_id: str) -> list[int]:
            """What a fetch acquires (the next fetch's, after one answered an error)."""
            for _ in range(2):
                fetched = await manager.acquire(
                    "g", member_id, queue, max_records=100, max_bytes=1 << 20
                )
                if fetched.error == Error.NONE:
                    break
            assert fetched.error == Error.NONE
            return [o for r in fetched.acquired for o in range(r.first_offset, r.last_offset + 1)]

        leader = SharePartitionManager(replicas.config, replicas, persister)
        await produce(10)
        assert await delivered(leader, "member-a") == list(range(10))
        accept = [Acknowledgement(0, 9, AcknowledgeType.ACCEPT)]
        assert await leader.acknowledge("g", "member-a", queue, accept) == Error.NONE

        # A second member joins (the group epoch grows); past the retry interval, a heartbeat
        # finds the partition still initializing and initializes it again.
        await heartbeat("member-b", 0)
        await trio.sleep(31)
        await heartbeat("member-a", first.member_epoch)
        await heartbeat("member-b", group.members["member-b"].member_epoch)
        assert group.state_partitions.initialized and not group.state_partitions.initializing

        await produce(1)
        assert await delivered(leader, "member-a") == [10]
        nursery.cancel_scope.cancel()
    replicas.close()
    logs.close()
