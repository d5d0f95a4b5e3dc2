"""The replica manager's transaction paths, in process under trio's MockClock (in the spirit
of Kafka's ReplicaManagerTest): markers written with acks=-1 and told to the marker
listeners once replicated, read_committed reads up to the LSO with the aborted transactions
of the range, a parked read_committed fetch woken by a marker, per-partition errors."""

import pytest
import trio
import trio.testing

from minibroker.protocol.errors import Error
from minibroker.protocol.offsets import LATEST
from minibroker.protocol.record_batch import validate_batches
from minibroker.replication.replica_manager import AppendOrigin
from tests.unit.batch_factory import make_batch
from tests.unit.replication_harness import (
    TOPIC,
    PartitionProduceData,
    leader_and_isr,
    make_broker,
)

LEADER, FOLLOWER = 1, 2
TRANSACTIONAL = 0x10


@pytest.fixture
async def solo(tmp_path, nursery, autojump_clock):
    """Broker 1 leading TOPIC-0 alone (ISR [1])."""
    replicas = make_broker(tmp_path, LEADER)
    replicas.announced_topic_configs[TOPIC] = {"min.insync.replicas": "1"}
    await nursery.start(replicas.run)
    await replicas.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1], [1]))
    yield replicas
    replicas.log_manager.close()


async def produce_txn(replicas, producer_id: int, sequence: int, count: int = 2) -> dict:
    batch = bytearray(
        make_batch(
            count,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=sequence,
            attributes=TRANSACTIONAL,
        )
    )
    ((result,),) = await replicas.append_records(
        [(TOPIC, [PartitionProduceData(0, memoryview(batch))])],
        acks=-1,
        timeout_s=30.0,
        origin=AppendOrigin.CLIENT,
    )
    return result


async def end_txn(replicas, producer_id: int, commit: bool, **fields) -> Error:
    fields.setdefault("producer_epoch", 0)
    fields.setdefault("coordinator_epoch", 0)
    results = await replicas.append_txn_markers(
        producer_id=producer_id,
        commit=commit,
        partitions=[(TOPIC, 0)],
        timeout_s=30.0,
        **fields,
    )
    return results[(TOPIC, 0)]


def consume(replicas, offset: int, isolation_level: int) -> dict:
    partition, error = replicas.leader_partition(TOPIC, 0)
    assert error == Error.NONE
    return replicas.read_records(
        partition,
        offset,
        replica_id=-1,
        last_fetched_epoch=-1,
        max_bytes=1 << 20,
        min_one_batch=True,
        record_progress=True,
        isolation_level=isolation_level,
    )


def offsets_read(entry: dict) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for h in validate_batches(entry["records"])]


async def test_read_committed_stops_at_the_lso_and_lists_aborted_transactions(solo, autojump_clock):
    heard = []
    solo.marker_listeners.append(lambda *args: heard.append(args))
    assert (await produce_txn(solo, 1, 0))["error_code"] == Error.NONE  # 0-1
    assert (await produce_txn(solo, 2, 0))["error_code"] == Error.NONE  # 2-3
    committed = consume(solo, 0, 1)
    assert committed["last_stable_offset"] == 0 and committed["records"] == b""
    assert committed["aborted_transactions"] == []
    uncommitted = consume(solo, 0, 0)
    assert uncommitted["aborted_transactions"] is None
    assert offsets_read(uncommitted) == [(0, 1), (2, 3)]
    assert await end_txn(solo, 1, False) == Error.NONE  # 4
    assert heard == [(TOPIC, 0, 1, False)]
    committed = consume(solo, 0, 1)
    assert committed["last_stable_offset"] == 2  # producer 2 still open
    assert offsets_read(committed) == [(0, 1)]
    assert committed["aborted_transactions"] == [{"producer_id": 1, "first_offset": 0}]
    assert await end_txn(solo, 2, True) == Error.NONE  # 5
    committed = consume(solo, 0, 1)
    assert committed["last_stable_offset"] == committed["high_watermark"] == 6
    assert offsets_read(committed) == [(0, 1), (2, 3), (4, 4), (5, 5)]
    assert committed["aborted_transactions"] == [{"producer_id": 1, "first_offset": 0}]
    # From past the aborted transaction's marker, there is none to report.
    assert consume(solo, 5, 1)["aborted_transactions"] == []
    partition, _ = solo.leader_partition(TOPIC, 0)
    assert solo.fetch_offset_for_timestamp(partition, LATEST, 1, replica_id=-1) == (-1, 6)


async def test_markers_are_fenced_per_partition(solo, autojump_clock):
    await produce_txn(solo, 1, 0)
    assert await end_txn(solo, 1, True, producer_epoch=0, coordinator_epoch=3) == Error.NONE
    stale = await end_txn(solo, 1, True, producer_epoch=0, coordinator_epoch=2)
    assert stale == Error.TRANSACTION_COORDINATOR_FENCED
    await produce_txn_epoch(solo, 1, epoch=1)
    assert await end_txn(solo, 1, False, producer_epoch=0, coordinator_epoch=3) == (
        Error.INVALID_PRODUCER_EPOCH
    )
    results = await solo.append_txn_markers(
        producer_id=1,
        producer_epoch=1,
        coordinator_epoch=3,
        commit=True,
        partitions=[("no-such-topic", 0)],
        timeout_s=1.0,
    )
    assert results == {("no-such-topic", 0): Error.UNKNOWN_TOPIC_OR_PARTITION}


async def produce_txn_epoch(replicas, producer_id: int, *, epoch: int) -> None:
    batch = bytearray(
        make_batch(
            1,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=0,
            attributes=TRANSACTIONAL,
        )
    )
    ((result,),) = await replicas.append_records(
        [(TOPIC, [PartitionProduceData(0, memoryview(batch))])],
        acks=1,
        timeout_s=1.0,
        origin=AppendOrigin.CLIENT,
    )
    assert result["error_code"] == Error.NONE


async def test_a_parked_read_committed_fetch_is_woken_by_the_marker(solo, autojump_clock):
    await produce_txn(solo, 1, 0)
    partition, _ = solo.leader_partition(TOPIC, 0)
    woken_at = []

    async def parked_fetch():
        deadline = trio.current_time() + 10
        while not consume(solo, 0, 1)["records"]:
            await solo.watchers.wait_any([partition.key], deadline, "Fetch")
        woken_at.append(trio.current_time())

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked_fetch)
        await trio.testing.wait_all_tasks_blocked()
        assert woken_at == []
        await trio.sleep(1)
        assert await end_txn(solo, 1, True) == Error.NONE
    assert woken_at and 1 <= woken_at[0] - start < 2  # by the marker, not at the 10 s deadline


async def test_a_marker_waits_for_the_isr_as_acks_all(tmp_path, nursery, autojump_clock):
    replicas = make_broker(tmp_path, LEADER)
    await nursery.start(replicas.run)
    await replicas.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1, 2], [1, 2]))
    heard = []
    replicas.marker_listeners.append(lambda *args: heard.append(args))
    outcome = await replicas.append_txn_markers(
        producer_id=5,
        producer_epoch=0,
        coordinator_epoch=0,
        commit=True,
        partitions=[(TOPIC, 0)],
        timeout_s=2.0,
    )
    assert outcome == {(TOPIC, 0): Error.REQUEST_TIMED_OUT}  # the follower never fetched
    assert heard == []
    replicas.log_manager.close()
