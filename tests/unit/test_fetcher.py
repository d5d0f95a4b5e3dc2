"""The follower's fetcher against an in-process leader, under trio's MockClock.

In the spirit of Kafka's AbstractFetcherThreadTest: two real ReplicaManagers with real logs
in a temp dir; the follower's fetcher reaches the leader through a connection object that
answers from the leader's replica manager (tests/unit/replication_harness.py). No sockets.
"""

import uuid

import pytest
import trio
import trio.testing

from minibroker.protocol.errors import Error
from minibroker.protocol.produce_request import PartitionProduceData
from minibroker.protocol.replica_fetch import HIGH_WATERMARK_UNKNOWN
from minibroker.replication.replica_manager import AppendOrigin
from minibroker.replication.replica_selector import RackAwareReplicaSelector
from tests.unit.batch_factory import make_batch
from tests.unit.replication_harness import (
    TOPIC,
    TOPIC_ID,
    append,
    leader_and_isr,
    make_broker,
)

LEADER, FOLLOWER = 1, 2


@pytest.fixture
async def brokers(tmp_path, nursery, autojump_clock):
    brokers: dict = {}
    brokers[LEADER] = make_broker(tmp_path, LEADER, brokers)
    brokers[FOLLOWER] = make_broker(tmp_path, FOLLOWER, brokers)
    for replicas in brokers.values():
        await nursery.start(replicas.run)
    yield brokers
    for replicas in brokers.values():
        replicas.log_manager.close()


def partition_of(replicas, index: int = 0):
    return next(p for p in replicas.partitions() if p.key == (TOPIC, index))


def epochs(replicas, index: int = 0) -> list[tuple[int, int]]:
    return list(partition_of(replicas, index).log.leader_epoch_cache.entries())


async def until(condition, timeout_s: float = 10.0) -> None:
    """Let the brokers run (MockClock time) until `condition` holds."""
    with trio.fail_after(timeout_s):
        while not condition():
            await trio.sleep(0.01)


async def test_follower_replicates_and_completes_an_acks_all_produce(brokers, autojump_clock):
    leader, follower = brokers[LEADER], brokers[FOLLOWER]
    await leader.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1, 2], [1, 2]))
    await follower.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1, 2], [1, 2]))
    start = trio.current_time()
    outcome = await append(leader, 0, 5)
    assert (outcome["error_code"], outcome["base_offset"]) == (Error.NONE, 0)
    assert trio.current_time() - start < 1  # the follower's fetch completed it
    await until(lambda: partition_of(follower).high_watermark == 5)
    assert partition_of(follower).log.log_end_offset == 5
    assert epochs(follower) == epochs(leader) == [(1, 0)]


async def test_follower_truncates_on_a_diverging_epoch(brokers, autojump_clock):
    leader, follower = brokers[LEADER], brokers[FOLLOWER]
    # Both once led epoch 1; the follower (then leader) kept 5 records of it, of which the
    # new leader has only the first 3, followed by 2 of its own epoch 2.
    for node_id, replicas in brokers.items():
        await replicas.apply_leader_and_isr(leader_and_isr(node_id, 1, [node_id], [1, 2]))
    follower_log = partition_of(follower).log
    follower_log.append_as_leader(make_batch(5), leader_epoch=1, now_ms=0)
    partition_of(leader).log.append_as_leader(make_batch(3), leader_epoch=1, now_ms=0)
    await leader.apply_leader_and_isr(leader_and_isr(LEADER, 2, [1], [1, 2]))
    assert (await append(leader, 0, 2, acks=1))["base_offset"] == 3

    await follower.apply_leader_and_isr(leader_and_isr(LEADER, 2, [1], [1, 2]))
    await until(lambda: follower_log.log_end_offset == 5 and epochs(follower) == epochs(leader))
    assert epochs(follower) == [(1, 0), (2, 3)]
    # The follower's records 3 and 4 are now the leader's epoch-2 records.
    assert bytes(follower_log.read(3, max_bytes=1 << 20)) == bytes(
        partition_of(leader).log.read(3, max_bytes=1 << 20)
    )


async def follower_behind_a_deletion(brokers, batches: tuple[int, ...]):
    """The leader's log in `batches`, deleted up to 8 (DeleteRecords); then a new follower
    fetching from 0 is out of range, and ListOffsets tells it the leader's start and end."""
    leader, follower = brokers[LEADER], brokers[FOLLOWER]
    # min.insync.replicas 1: the leader alone in the ISR moves the HW (at the harness's 2,
    # Kafka 4.4 holds it below min ISR and DeleteRecords could not pass offset 0).
    leader.announced_topic_configs[TOPIC] = {"min.insync.replicas": "1"}
    await leader.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1], [1, 2]))
    for count in batches:
        await append(leader, 0, count, acks=1)
    partition = partition_of(leader)
    assert partition.high_watermark == 10
    assert leader.delete_records(partition, 8) == (Error.NONE, 8)
    await follower.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1], [1, 2]))
    follower_log = partition_of(follower).log
    await until(lambda: follower_log.log_end_offset == 10)
    assert follower_log.log_start_offset <= 8


async def test_follower_behind_the_leaders_log_start_restarts_there(brokers, autojump_clock):
    await follower_behind_a_deletion(brokers, (8, 2))


async def test_follower_restarting_inside_a_batch_catches_up(brokers, autojump_clock):
    await follower_behind_a_deletion(brokers, (10,))


async def test_every_partition_of_a_fetcher_makes_progress(brokers, autojump_clock):
    leader, follower = brokers[LEADER], brokers[FOLLOWER]
    partitions = (0, 1, 2)
    await leader.apply_leader_and_isr(
        leader_and_isr(LEADER, 1, [1, 2], [1, 2], partitions=partitions)
    )
    await follower.apply_leader_and_isr(
        leader_and_isr(LEADER, 1, [1, 2], [1, 2], partitions=partitions)
    )
    for index in partitions:
        assert (await append(leader, index, 3))["error_code"] == Error.NONE
    await until(lambda: all(partition_of(follower, i).log.log_end_offset == 3 for i in partitions))


async def test_follower_fetches_in_an_incremental_session(brokers, autojump_clock):
    """KIP-227 between brokers: the follower's first fetch opens a session on the leader (a
    privileged one), then its fetches are incremental: the session's epoch climbs with each
    fetch and the follower keeps replicating through it."""
    leader, follower = brokers[LEADER], brokers[FOLLOWER]
    await leader.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1, 2], [1, 2]))
    await follower.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1, 2], [1, 2]))
    for round_number in range(1, 4):
        outcome = await append(leader, 0, 5)
        assert outcome["error_code"] == Error.NONE
        await until(lambda n=round_number: partition_of(follower).high_watermark == 5 * n)
    cache = leader.fetch_sessions.cache
    assert len(cache) == 1
    (session,) = cache.sessions.values()
    assert session.privileged and list(session.partitions) == [(TOPIC, 0)]
    assert session.epoch > 3
    assert cache.total_partitions == 1


@pytest.mark.parametrize(("topic_id", "version"), [(TOPIC_ID, 18), (uuid.UUID(int=0), 12)])
async def test_the_follower_fetches_by_topic_id_with_its_broker_epoch(
    brokers, autojump_clock, topic_id, version
):
    """As a Kafka 4.1-IV1+ follower: Fetch v18 by topic id, its broker epoch in ReplicaState
    (KIP-903), which the leader keeps for AlterPartition; v12 by name (no epoch) for a
    partition without a topic id, as Kafka's fetcher falls back."""
    leader, follower = brokers[LEADER], brokers[FOLLOWER]
    follower.controller.broker_epoch = 77
    request = leader_and_isr(LEADER, 1, [1, 2], [1, 2], topic_id=topic_id)
    await leader.apply_leader_and_isr(request)
    await follower.apply_leader_and_isr(request)
    assert (await append(leader, 0, 5))["error_code"] == Error.NONE
    await until(lambda: partition_of(follower).high_watermark == 5)
    fetches = [f for c in follower.harness_connections for f in c.fetches]
    assert fetches and set(fetches) == {(version, 77 if version == 18 else -1)}
    progress = partition_of(leader).followers[FOLLOWER]
    assert progress.broker_epoch == (77 if version == 18 else -1)
    isr = partition_of(leader).isr_with_broker_epochs([1, 2], 5)
    assert {e["broker_id"]: e["broker_epoch"] for e in isr} == {1: 5, 2: progress.broker_epoch}


@pytest.mark.parametrize("selector", [False, True])
async def test_a_follower_says_its_high_watermark_only_when_it_serves_consumers(
    brokers, autojump_clock, selector
):
    """KIP-1166's HighWatermark is sent by a follower with a replica selector (it serves
    consumers, who see its high watermark), and then a leader whose high watermark moved
    answers at once, so the follower learns it without waiting for more records; without a
    selector it sends "not known" (the departure in replication/fetcher.py)."""
    leader, follower = brokers[LEADER], brokers[FOLLOWER]
    if selector:
        follower.replica_selector = RackAwareReplicaSelector()
    request = leader_and_isr(LEADER, 1, [1, 2], [1, 2])
    await leader.apply_leader_and_isr(request)
    await follower.apply_leader_and_isr(request)
    start = trio.current_time()
    assert (await append(leader, 0, 5))["error_code"] == Error.NONE
    await until(lambda: partition_of(follower).high_watermark == 5)
    learned_after = trio.current_time() - start
    sent = {hw for c in follower.harness_connections for hw in c.known_high_watermarks}
    if selector:
        assert sent and HIGH_WATERMARK_UNKNOWN not in sent
        # Answered at once when the leader's moved (no replica.fetch.wait.max.ms, 0.5 s).
        assert learned_after < 0.1
    else:
        assert sent == {HIGH_WATERMARK_UNKNOWN}
        # The leader's high watermark comes with the fetch after the one that moved it,
        # which waits at the leader for new records until replica.fetch.wait.max.ms.
        assert learned_after >= 0.5


@pytest.mark.parametrize("side", ["follower", "leader"])
async def test_a_throttled_replica_catches_up_at_the_throttle_and_in_sync_ones_do_not_wait(
    tmp_path, nursery, autojump_clock, side
):
    """KIP-73, on the follower (Kafka's ReplicaFetcherThread.shouldFollowerThrottle: the
    partition left out of its fetches) or on the leader (ReplicaManager.shouldLeaderThrottle:
    answered without records): partition 0, new on the follower, copies 4 MiB under a 64 KiB/s
    throttle, measured over Kafka's 11 windows of 1 s, in 4 MiB / 64 KiB/s of (MockClock)
    time within 15%; partition 1, in sync, throttled by the same wildcard list, replicates an
    acks=all append at once meanwhile. Without the throttle the copy takes well under a
    second."""
    rate, batch_bytes, batches = 64 * 1024, 16 * 1024, 256
    properties = {"replica.fetch.max.bytes": str(batch_bytes)}
    brokers: dict = {}
    for node in (LEADER, FOLLOWER):
        brokers[node] = make_broker(tmp_path, node, brokers, properties=properties)
        await nursery.start(brokers[node].run)
    leader, follower = brokers[LEADER], brokers[FOLLOWER]
    configs = {"min.insync.replicas": "2", f"{side}.replication.throttled.replicas": "*"}
    throttled, node = (follower, FOLLOWER) if side == "follower" else (leader, LEADER)
    throttled.dynamic_configs.replace(str(node), {f"{side}.replication.throttled.rate": str(rate)})
    throttled.update_replication_throttle_rates()
    leader.announced_topic_configs[TOPIC] = dict(configs)
    await leader.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1], [1], partitions=(0,)))
    value = b"x" * 1024
    for _ in range(batches):
        batch = bytearray(make_batch([(None, value)] * (batch_bytes // len(value))))
        data = [(TOPIC, [PartitionProduceData(0, memoryview(batch))])]
        ((result,),) = await leader.append_records(
            data, acks=1, timeout_s=30.0, origin=AppendOrigin.CLIENT
        )
        assert result["error_code"] == Error.NONE
    size = partition_of(leader).log.size_bytes
    # Partition 0 gains a replica on the follower (out of the ISR); partition 1 is new on
    # both, in sync.
    request = leader_and_isr(LEADER, 2, [1, 2], [1, 2], partitions=(0, 1))
    request.topic_states[0].partition_states[0].isr = [1]
    start = trio.current_time()
    for replicas in (leader, follower):
        replicas.announced_topic_configs[TOPIC] = dict(configs)
        await replicas.apply_leader_and_isr(request)
    end = partition_of(leader).log.log_end_offset
    await until(lambda: partition_of(follower).log.log_end_offset >= end // 4, 30)
    # In sync, partition 1 is never held back: an acks=all append completes at once.
    before = trio.current_time()
    assert (await append(leader, 1, 3))["error_code"] == Error.NONE
    assert trio.current_time() - before < 1.5
    assert partition_of(follower).log.log_end_offset < end  # still catching up meanwhile
    await until(lambda: partition_of(follower).log.log_end_offset == end, 120)
    seconds = trio.current_time() - start
    # Kafka's Rate lets about ten seconds' worth (window.num - 1 windows) go at once and
    # holds the rest back until, over a copy of several windows, the whole is near the rate.
    expected = size / rate
    print(f"copied {size} bytes in {seconds:.2f} s of MockClock time, {expected:.2f} s expected")
    assert 0.85 * expected <= seconds <= 1.15 * expected, (seconds, expected)
    quota = follower.follower_quota if side == "follower" else leader.leader_quota
    assert quota.throttled_count > 0
