"""Issue 39: what the controller tells brokers grows with what changed, not with the cluster.

UpdateMetadata is incremental (the changed partitions, a deleted topic's partitions with
leader -2, Kafka's LeaderDuringDelete) once a broker has the full picture, as Kafka's
ZooKeeper-mode controller sends it; the full picture goes to every broker when the controller
first tells anything or the live brokers change, and to a broker that registered. Brokers
merge an incremental one into their MetadataCache. The controller's state file is written
once for a burst of saves (group commit). In-process, under trio's MockClock, with the
controller service's real store and fake broker connections that apply every UpdateMetadata
to a real MetadataCache, so the brokers' picture is compared with the controller's state.
"""

import datetime
import uuid

import trio
import trio.testing

from minibroker.cluster.controller_client import build_request
from minibroker.controller import broker_requests
from minibroker.controller.state import BrokerInfo, ControllerState, PartitionChange, create_topic
from minibroker.controller.store import STATE_FILE, ControllerStore, LocalStore
from minibroker.protocol.versions import ApiKey
from minibroker.replication.metadata_cache import MetadataCache
from tests.unit.test_controller_service import Cluster, FakeBroker

# UpdateMetadata v8's Type (KIP-866).
FULL = 2
INCREMENTAL = 1


def cache_picture(cache: MetadataCache) -> dict[str, tuple[uuid.UUID, dict[int, tuple]]]:
    """Each topic's id and, by partition, (leader, replicas, ISR), as a broker's cache has
    them."""
    return {
        name: (
            topic.topic_id,
            {index: (p.leader, p.replicas, p.isr) for index, p in topic.partitions.items()},
        )
        for name, topic in cache.topics.items()
    }


def controller_picture(state: ControllerState) -> dict[str, tuple[uuid.UUID, dict[int, tuple]]]:
    """The same from the controller's state."""
    return {
        name: (
            topic.topic_id,
            {
                index: (p.leader, tuple(p.replicas), tuple(p.isr))
                for index, p in enumerate(topic.partitions)
            },
        )
        for name, topic in state.topics.items()
    }


class CachingBroker(FakeBroker):
    """A fake broker that applies every UpdateMetadata to a real MetadataCache."""

    def __init__(self, node_id: int) -> None:
        super().__init__(node_id)
        self.cache = MetadataCache()

    async def request(self, request):
        if request.__api_key__ == ApiKey.UPDATE_METADATA:
            self.cache.update(request)
        return await super().request(request)

    def picture(self) -> dict[str, tuple[uuid.UUID, dict[int, tuple]]]:
        return cache_picture(self.cache)

    def types(self) -> list[int]:
        return [request.type_ for request in self.of_type(ApiKey.UPDATE_METADATA)]


class CachingCluster(Cluster):
    def __init__(self, tmp_path, **settings) -> None:
        super().__init__(tmp_path, **settings)
        self.brokers = {node_id: CachingBroker(node_id) for node_id in (1, 2, 3)}


async def caching_cluster(nursery, tmp_path) -> CachingCluster:
    """As test_controller_service's ``started``, with caching brokers."""
    cluster = CachingCluster(tmp_path)
    await nursery.start(cluster.service.run)
    for node_id in cluster.brokers:
        await cluster.register(node_id)
    return cluster


async def delete_topic(cluster: Cluster, name: str) -> None:
    answer = await cluster.service.delete_topics(
        build_request(
            ApiKey.DELETE_TOPICS,
            {
                "topics": [{"name": name, "topic_id": None}],
                "timeout": datetime.timedelta(seconds=5),
            },
        )
    )
    assert answer["responses"][0]["error_code"] == 0


async def test_decisions_after_the_first_reach_brokers_as_increments(autojump_clock, tmp_path):
    async with trio.open_nursery() as nursery:
        cluster = await caching_cluster(nursery, tmp_path)
        alive = {1, 2, 3}
        await nursery.start(cluster.keep_alive, alive)
        for number in range(5):
            await cluster.create_topic(f"topic-{number}", [1, 2, 3])
        await trio.testing.wait_all_tasks_blocked()
        broker = cluster.brokers[1]
        sent = broker.of_type(ApiKey.UPDATE_METADATA)
        # The last creation told only the new topic, and only that partition.
        assert sent[-1].type_ == INCREMENTAL
        assert [t.topic_name for t in sent[-1].topic_states] == ["topic-4"]
        # The brokers' merged pictures are the controller's.
        for each in cluster.brokers.values():
            assert each.picture() == controller_picture(cluster.service.state)

        await delete_topic(cluster, "topic-2")
        await trio.testing.wait_all_tasks_blocked()
        newest = broker.of_type(ApiKey.UPDATE_METADATA)[-1]
        assert newest.type_ == INCREMENTAL
        (deleted,) = newest.topic_states
        assert deleted.topic_name == "topic-2"
        assert [s.leader for s in deleted.partition_states] == [-2]
        for each in cluster.brokers.values():
            assert "topic-2" not in each.picture()
            assert each.picture() == controller_picture(cluster.service.state)
        # Made again under the same name: a new id, the old one forgotten.
        await cluster.create_topic("topic-2", [2, 3])
        await trio.testing.wait_all_tasks_blocked()
        for each in cluster.brokers.values():
            assert each.picture() == controller_picture(cluster.service.state)
            topic = each.cache.topic("topic-2")
            assert each.cache.topic_by_id(topic.topic_id) is topic
        nursery.cancel_scope.cancel()


async def test_a_changed_set_of_live_brokers_and_a_registration_send_the_full_picture(
    autojump_clock, tmp_path
):
    async with trio.open_nursery() as nursery:
        cluster = await caching_cluster(nursery, tmp_path)
        alive = {1, 2, 3}
        await nursery.start(cluster.keep_alive, alive)
        await cluster.create_topic("orders", [3, 1, 2])
        await cluster.create_topic("payments", [1, 2, 3])
        await trio.testing.wait_all_tasks_blocked()
        assert cluster.brokers[1].types()[-1] == INCREMENTAL
        # Broker 3 stops heartbeating and is fenced: every partition's offline replicas
        # change, so the survivors hear the whole picture.
        alive.discard(3)
        while not cluster.service.state.brokers[3].fenced:
            await trio.sleep(0.1)
        await trio.testing.wait_all_tasks_blocked()
        for node_id in (1, 2):
            newest = cluster.brokers[node_id].of_type(ApiKey.UPDATE_METADATA)[-1]
            assert newest.type_ == FULL
            assert sorted(t.topic_name for t in newest.topic_states) == ["orders", "payments"]
            assert cluster.brokers[node_id].picture() == controller_picture(cluster.service.state)
        # Broker 1 restarts faster than its session (a new incarnation registers while it is
        # live), its cache empty: the live brokers are the same before and after, yet it
        # hears the whole picture, and broker 2 only what changed.
        told = {node_id: len(cluster.brokers[node_id].types()) for node_id in (1, 2)}
        cluster.brokers[1].cache = MetadataCache()
        await cluster.register(1)
        await trio.testing.wait_all_tasks_blocked()
        assert cluster.brokers[1].types()[told[1]] == FULL
        assert cluster.brokers[2].types()[told[2]] == INCREMENTAL
        for node_id in (1, 2):
            assert cluster.brokers[node_id].picture() == controller_picture(cluster.service.state)
        nursery.cancel_scope.cancel()


def test_a_metadata_cache_merges_increments_and_replaces_on_full():
    state = ControllerState()
    for node_id in (1, 2, 3):
        state.brokers[node_id] = BrokerInfo(node_id, "127.0.0.1", 9000 + node_id, 1, "x", False, 0)
    create_topic(state, "a", 3, 3, {})
    create_topic(state, "b", 2, 3, {})
    cache = MetadataCache()
    cache.update(broker_requests.update_metadata(state, 0)(1))
    assert cache_picture(cache) == controller_picture(state)
    old_b = state.topics["b"]
    # One partition of "a" changes leader; "b" is deleted.
    partition = state.topics["a"].partitions[1]
    state.topics["a"].partitions[1] = type(partition)(
        partition.replicas, partition.isr, partition.replicas[1], partition.leader_epoch + 1, 2
    )
    del state.topics["b"]
    delta = broker_requests.MetadataDelta.of(
        [PartitionChange("a", 1, state.topics["a"].partitions[1])], [old_b]
    )
    request = broker_requests.update_metadata(state, 0, delta)(1)
    assert request.type_ == INCREMENTAL
    assert sum(len(t.partition_states) for t in request.topic_states) == 1 + 2
    cache.update(request)
    assert cache.topic("b") is None
    assert cache.topic_by_id(old_b.topic_id) is None
    assert cache.topic("a").partitions[1].leader == partition.replicas[1]
    assert set(cache.topic("a").partitions) == {0, 1, 2}
    # A full picture replaces everything, whatever the cache held.
    cache.topics["stale"] = cache.topics["a"]
    cache.update(broker_requests.update_metadata(state, 0)(1))
    assert set(cache.topics) == {"a"}


async def test_a_burst_of_saves_is_written_once_and_each_returns_durable(tmp_path):
    writes: list[bytes] = []
    release = trio.Event()

    async def run_blocking(function, data):
        writes.append(data)
        await release.wait()
        function(data)

    store = LocalStore(tmp_path, run_blocking=run_blocking)
    state = await store.load()
    returned: list[int] = []

    async def save_after_change(number: int) -> None:
        state.metadata_offset = max(state.metadata_offset, number)
        await store.save(state)
        returned.append(number)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(save_after_change, 1)
        await trio.testing.wait_all_tasks_blocked()
        for number in range(2, 12):
            nursery.start_soon(save_after_change, number)
        await trio.testing.wait_all_tasks_blocked()
        assert returned == []  # nobody returns before a write that covers its change
        release.set()
    # The first write was in flight; the ten waiting behind it share the second.
    assert len(writes) == 2
    assert sorted(returned) == list(range(1, 12))
    assert ControllerStore(tmp_path / STATE_FILE).load().metadata_offset == 11


def test_topic_by_id_follows_creation_deletion_and_recreation():
    """The controller's id index (issue 39: AlterPartition looks a topic up by id for every
    partition it names) answers as the scan of every topic did."""
    state = ControllerState()
    state.brokers[1] = BrokerInfo(1, "127.0.0.1", 9001, 1, "x", False, 0)
    first, _ = create_topic(state, "a", 1, 1, {})
    other, _ = create_topic(state, "b", 1, 1, {})
    assert state.topic_by_id(first.topic_id) is first
    assert state.topic_by_id(other.topic_id) is other
    del state.topics["a"]
    assert state.topic_by_id(first.topic_id) is None
    again, _ = create_topic(state, "a", 1, 1, {})
    assert again.topic_id != first.topic_id
    assert state.topic_by_id(again.topic_id) is again
    assert state.topic_by_id(first.topic_id) is None
    assert state.topic_by_id(uuid.uuid4()) is None
