"""The replica manager's append and read paths, in process under trio's MockClock.

In the spirit of Kafka's ReplicaManagerTest: real logs in a temp dir and a real
ReplicaManager, made leader by LeaderAndIsr requests as the controller sends them; the
followers' progress arrives as their fetches do, through read_records. No sockets, no sleep.
"""

import pytest
import trio
import trio.testing

from minibroker.common.names import OFFSETS_TOPIC
from minibroker.protocol.errors import Error
from minibroker.protocol.offsets import LATEST
from minibroker.replication.replica_manager import AppendOrigin
from tests.unit.replication_harness import TOPIC, append, leader_and_isr, make_broker, records

LEADER, FOLLOWER = 1, 2


@pytest.fixture
async def leader(tmp_path, nursery, autojump_clock):
    """Broker 1 leading TOPIC-0 (replicas 1 and 2, both in the ISR, min.insync.replicas=2)."""
    replicas = make_broker(tmp_path, LEADER)
    await nursery.start(replicas.run)
    await replicas.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1, 2], [1, 2]))
    yield replicas
    replicas.log_manager.close()


def follower_fetch(replicas, offset: int) -> dict:
    """Broker 2 fetching TOPIC-0 from `offset`, as its fetcher would."""
    partition, error = replicas.leader_partition(TOPIC, 0)
    assert error == Error.NONE
    return replicas.read_records(
        partition,
        offset,
        replica_id=FOLLOWER,
        last_fetched_epoch=-1,
        max_bytes=1 << 20,
        min_one_batch=True,
        record_progress=True,
    )


def log_end(replicas) -> int:
    partition, _ = replicas.leader_partition(TOPIC, 0)
    return replicas.fetch_offset_for_timestamp(partition, LATEST, 0, replica_id=FOLLOWER)[1]


async def test_acks_all_completes_when_the_isr_reaches_the_offset(leader, autojump_clock):
    start = trio.current_time()
    outcome = {}

    async def produce():
        outcome.update(await append(leader, 0, 5))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        await trio.testing.wait_all_tasks_blocked()
        assert outcome == {}  # appended, parked until the follower has it
        assert log_end(leader) == 5
        follower_fetch(leader, 3)
        await trio.testing.wait_all_tasks_blocked()
        assert outcome == {}  # the HW is 3: not there yet
        follower_fetch(leader, 5)
    assert outcome["error_code"] == Error.NONE
    assert outcome["base_offset"] == 0
    assert trio.current_time() - start < 1  # woken by the fetch, not at the 30 s timeout


async def test_acks_all_times_out_with_request_timed_out(leader, autojump_clock):
    start = trio.current_time()
    outcome = await append(leader, 0, 5, timeout_s=2.0)
    assert outcome["error_code"] == Error.REQUEST_TIMED_OUT
    assert outcome["base_offset"] == -1
    assert trio.current_time() - start == pytest.approx(2.0, abs=0.1)
    assert log_end(leader) == 5  # appended all the same, as in Kafka


async def test_acks_one_answers_at_once(leader, autojump_clock):
    outcome = await append(leader, 0, 5, acks=1)
    assert (outcome["error_code"], outcome["base_offset"]) == (Error.NONE, 0)
    assert (await append(leader, 0, 2, acks=1))["base_offset"] == 5
    assert leader.metrics.messages_in.labels(TOPIC)._value.get() == 7


async def test_not_enough_replicas_before_appending(leader, autojump_clock):
    await leader.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1], [1, 2], partition_epoch=2))
    outcome = await append(leader, 0, 5)
    assert outcome["error_code"] == Error.NOT_ENOUGH_REPLICAS
    assert log_end(leader) == 0  # nothing appended
    # acks=1 does not look at the ISR.
    assert (await append(leader, 0, 5, acks=1))["error_code"] == Error.NONE


async def test_isr_shrinking_below_min_isr_while_waiting_holds_the_high_watermark(
    leader, autojump_clock
):
    # Kafka 4.4 (KAFKA-15583): the ISR shrinks to the leader alone, below
    # min.insync.replicas=2, so the HW stays where it was; the produce is not acknowledged
    # by the smaller ISR (Kafka 3.6 and older answered NOT_ENOUGH_REPLICAS_AFTER_APPEND) and
    # times out.
    outcome = {}

    async def produce():
        outcome.update(await append(leader, 0, 5, timeout_s=2.0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        await trio.testing.wait_all_tasks_blocked()
        await leader.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1], [1, 2], partition_epoch=2))
    assert outcome["error_code"] == Error.REQUEST_TIMED_OUT
    assert consumer_latest(leader) == 0


def consumer_latest(replicas) -> int:
    """ListOffsets LATEST as a consumer (replica id -1, read_uncommitted) asks it: the HW."""
    partition, _ = replicas.leader_partition(TOPIC, 0)
    return replicas.fetch_offset_for_timestamp(partition, LATEST, 0, replica_id=-1)[1]


async def test_acks_one_records_stay_above_a_high_watermark_held_under_min_isr(
    leader, autojump_clock
):
    """Kafka 4.4's Partition.maybeIncrementLeaderHW returns at once while isUnderMinIsr: an
    acks=1 record appended while the ISR is below min.insync.replicas=2 is acknowledged but
    stays above the HW, invisible to consumers, even once the follower has it, until the
    follower is back in the ISR."""
    await leader.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1], [1, 2], partition_epoch=2))
    assert (await append(leader, 0, 5, acks=1))["error_code"] == Error.NONE
    assert log_end(leader) == 5
    follower_fetch(leader, 0)
    follower_fetch(leader, 5)  # the follower has all five records; the ISR is still [1]
    assert consumer_latest(leader) == 0
    partition, _ = leader.leader_partition(TOPIC, 0)
    assert partition.high_watermark == 0
    # The controller puts the follower back: the ISR meets min.insync.replicas again.
    await leader.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1, 2], [1, 2], partition_epoch=3))
    assert consumer_latest(leader) == 5


async def test_losing_leadership_while_waiting_answers_not_leader(leader, autojump_clock):
    outcome = {}

    async def produce():
        outcome.update(await append(leader, 0, 5))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        await trio.testing.wait_all_tasks_blocked()
        leader.fetchers.add = lambda partition: None  # no leader to fetch from here
        await leader.apply_leader_and_isr(leader_and_isr(FOLLOWER, 2, [2], [1, 2]))
    assert outcome["error_code"] == Error.NOT_LEADER_OR_FOLLOWER


async def test_a_partition_not_led_here(tmp_path, nursery, autojump_clock):
    follower = make_broker(tmp_path, FOLLOWER)
    await nursery.start(follower.run)
    follower.fetchers.add = lambda partition: None
    await follower.apply_leader_and_isr(leader_and_isr(LEADER, 1, [1, 2], [1, 2]))
    for acks in (-1, 1, 0):
        outcome = await append(follower, 0, 5, acks=acks)
        assert outcome["error_code"] == Error.NOT_LEADER_OR_FOLLOWER
    assert (await append(follower, 9, 1))["error_code"] == Error.UNKNOWN_TOPIC_OR_PARTITION
    follower.log_manager.close()


async def test_the_coordinator_appends_to_the_offsets_topic_and_clients_cannot(
    tmp_path, nursery, autojump_clock
):
    replicas = make_broker(tmp_path, LEADER)
    replicas.announced_topic_configs[OFFSETS_TOPIC] = {}
    await nursery.start(replicas.run)
    request = leader_and_isr(LEADER, 1, [1], [1])
    request.topic_states[0].topic_name = OFFSETS_TOPIC
    await replicas.apply_leader_and_isr(request)

    ((refused,),) = await replicas.append_records(
        records(0, 1, OFFSETS_TOPIC), acks=-1, timeout_s=5.0, origin=AppendOrigin.CLIENT
    )
    assert refused["error_code"] == Error.INVALID_TOPIC_EXCEPTION
    ((written,),) = await replicas.append_records(
        records(0, 3, OFFSETS_TOPIC), acks=-1, timeout_s=5.0, origin=AppendOrigin.COORDINATOR
    )
    assert (written["error_code"], written["base_offset"]) == (Error.NONE, 0)
    partition, _ = replicas.leader_partition(OFFSETS_TOPIC, 0)
    assert partition.high_watermark == 3  # the ISR is this broker alone
    assert replicas.metrics.messages_in.labels(OFFSETS_TOPIC)._value.get() == 3
    replicas.log_manager.close()


async def test_consumers_read_up_to_the_high_watermark_and_followers_past_it(
    leader, autojump_clock
):
    await append(leader, 0, 5, acks=1)
    partition, _ = leader.leader_partition(TOPIC, 0)
    consumer = leader.read_records(
        partition,
        0,
        replica_id=-1,
        last_fetched_epoch=-1,
        max_bytes=1 << 20,
        min_one_batch=True,
        record_progress=True,
    )
    assert (consumer["error_code"], consumer["records"], consumer["high_watermark"]) == (
        Error.NONE,
        b"",
        0,
    )
    assert len(follower_fetch(leader, 0)["records"]) > 0
    assert follower_fetch(leader, 5)["high_watermark"] == 5


@pytest.mark.parametrize("isolation_level", [0, 1])
async def test_a_consumer_read_at_its_end_answers_as_the_full_read(
    leader, autojump_clock, monkeypatch, isolation_level
):
    """read_records answers a consumer whose fetch offset is the high watermark (read_committed:
    the last stable offset) without reading the log (issue 40: most partitions of a
    keeping-up consumer's fetch); every offset, before and after the log start moves, gets the
    entry the full read gives (the full read forced by claiming a log dir offline, which sends
    every read down the guarded path without refusing this one)."""
    await append(leader, 0, 5, acks=1)
    assert follower_fetch(leader, 5)["high_watermark"] == 5
    partition, _ = leader.leader_partition(TOPIC, 0)

    def consumer_read(offset: int) -> dict:
        return leader.read_records(
            partition,
            offset,
            replica_id=-1,
            last_fetched_epoch=-1,
            max_bytes=1 << 20,
            min_one_batch=True,
            record_progress=True,
            isolation_level=isolation_level,
        )

    def answers() -> list[dict]:
        return [consumer_read(offset) for offset in range(7)]

    fast = answers()
    failures = type(leader.log_manager.failures)
    with monkeypatch.context() as patch:
        patch.setattr(failures, "any_offline", property(lambda self: True))
        full = answers()
    assert fast == full
    assert fast[5]["records"] == b"" and fast[5]["high_watermark"] == 5
    assert fast[5]["aborted_transactions"] == ([] if isolation_level else None)
    assert fast[6]["error_code"] == Error.OFFSET_OUT_OF_RANGE
    assert leader.delete_records(partition, 5)[1] == 5
    fast = answers()
    with monkeypatch.context() as patch:
        patch.setattr(failures, "any_offline", property(lambda self: True))
        full = answers()
    assert fast == full
    assert [entry["error_code"] for entry in fast[:5]] == [Error.OFFSET_OUT_OF_RANGE] * 5
    assert fast[5]["error_code"] == Error.NONE and fast[5]["log_start_offset"] == 5
