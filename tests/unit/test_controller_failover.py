"""A new controller in ZooKeeper mode fences the brokers without a session before it tells
any broker anything (Kafka's KafkaController.onControllerFailover reads the live brokers
from ZooKeeper first, then its PartitionStateMachine.startup elects leaders for the
partitions whose leader is not live).

The real controller service runs in-process on trio's MockClock over fake broker
connections (tests/unit/test_controller_service.py's Cluster); the store is the service's
own JSON file, with the brokers' sessions at load time as ZooKeeperStore reads them from
``/brokers/ids``.
"""

import trio

from minibroker.controller.store import LocalStore
from minibroker.protocol.versions import ApiKey
from minibroker.replication import log_io
from tests.unit.test_controller_service import Cluster, started

PARTITIONS = 30


class StoreWithSessions:
    """The service's store, and the brokers that had a ZooKeeper session when it was
    loaded (ZooKeeperStore.sessions_at_load)."""

    def __init__(self, store, sessions: set[int]) -> None:
        self._store = store
        self.sessions_at_load = sessions

    async def load(self):
        return await self._store.load()

    async def save(self, state) -> None:
        await self._store.save(state)

    async def allocate_producer_id_block(self) -> tuple[int, int]:
        return await self._store.allocate_producer_id_block()


async def test_a_new_controller_tells_the_brokers_only_leaders_that_have_a_session(
    autojump_clock, tmp_path
):
    async with trio.open_nursery() as nursery:
        first = await started(nursery, tmp_path)
        for index in range(PARTITIONS):
            replicas = [1 + (index + shift) % 3 for shift in range(3)]
            await first.create_topic(f"t{index}", replicas)
        assert {first.leader(f"t{i}") for i in range(PARTITIONS)} == {1, 2, 3}
        nursery.cancel_scope.cancel()

    # Broker 2 died with the controller: its ZooKeeper session is gone.
    successor = Cluster(tmp_path)
    successor.service.store = StoreWithSessions(
        LocalStore(tmp_path, run_blocking=log_io.inline), {1, 3}
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(successor.service.run)
        # What ZooKeeperBroker._watch_broker_sessions then tells it, at once and on changes.
        await successor.service.broker_sessions_changed({1, 3})
        await trio.sleep(1)
        assert successor.service.state.brokers[2].fenced
        for node_id in (1, 3):
            told = successor.brokers[node_id].of_type(ApiKey.LEADER_AND_ISR)
            # One LeaderAndIsr with every partition, already with leaders that are alive:
            # not every partition with broker 2's leaders first and the moved ones after.
            assert len(told) == 1
            leaders = {
                state.leader for topic in told[0].topic_states for state in topic.partition_states
            }
            assert leaders <= {1, 3}
            assert sum(len(topic.partition_states) for topic in told[0].topic_states) == (
                PARTITIONS
            )
        assert successor.brokers[2].requests == []
        nursery.cancel_scope.cancel()
