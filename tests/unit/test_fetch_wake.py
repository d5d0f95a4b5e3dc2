"""A parked Fetch woken by an append: the Fetch handler (apis/fetch.py) on an in-process
ReplicaManager under trio's MockClock, no sockets.

Kafka's DelayedFetch reads every partition of the fetch again when it completes; minibroker's
handler reads again only the partitions notified while it was parked and keeps the others'
empty entries, with their offsets taken again (the module's notes say why the answer is the
same). These tests hold both halves: what is read on the wake, and that a kept entry's offsets
are the partition's current ones.
"""

from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from minibroker.apis.fetch import handle
from minibroker.protocol.errors import Error
from minibroker.replication.replica_manager import AppendOrigin
from tests.unit.replication_harness import (
    TOPIC,
    append,
    count_reads,
    fetch_by_name,
    fetch_context,
    leader_and_isr,
    start_solo_leader,
)

LEADER = 1
PARTITIONS = (0, 1, 2, 3)
FETCH_VERSION = 12  # topics by name


@pytest.fixture
async def solo(tmp_path, nursery, autojump_clock):
    """Broker 1 leading TOPIC-0..3 alone (ISR [1])."""
    replicas = await start_solo_leader(tmp_path, nursery, LEADER, PARTITIONS)
    yield replicas
    replicas.log_manager.close()


def context(replicas):
    return fetch_context(replicas, FETCH_VERSION)


def fetch_request(offsets: dict[int, int], max_wait_ms: int = 500):
    """A consumer's sessionless Fetch of TOPIC's partitions at `offsets`, min_bytes 1."""
    return fetch_by_name(offsets, max_wait_ms=max_wait_ms)


@asynccontextmanager
async def parked_fetch(replicas, offsets: dict[int, int]):
    """A consumer's fetch of ``offsets``, parked (every task blocked) when the block starts;
    the yielded list holds its response once the block has ended."""
    responses: list[dict] = []

    async def fetch():
        responses.append(await handle(context(replicas), fetch_request(offsets)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fetch)
        await trio.testing.wait_all_tasks_blocked()
        yield responses


def partitions_of(response: dict) -> dict[int, dict]:
    ((topic,),) = [response["responses"]]
    return {entry["partition_index"]: entry for entry in topic["partitions"]}


async def test_a_woken_fetch_reads_again_only_the_partition_appended_to(solo, autojump_clock):
    reads = count_reads(solo)
    async with parked_fetch(solo, dict.fromkeys(PARTITIONS, 0)) as responses:
        assert sorted(reads) == list(PARTITIONS)  # the first read: every partition, all empty
        reads.clear()
        await append(solo, 2, 3, acks=1, origin=AppendOrigin.CLIENT)
    assert reads == [2]
    answered = partitions_of(responses[0])
    assert sorted(answered) == list(PARTITIONS)
    assert answered[2]["high_watermark"] == 3 and len(answered[2]["records"]) > 0
    for index in (0, 1, 3):
        assert answered[index]["high_watermark"] == 0
        assert answered[index]["records"] == b""
    assert trio.current_time() == 0  # answered at the append, not at max_wait


async def test_a_woken_fetch_looks_up_again_only_the_partition_appended_to(solo, autojump_clock):
    looked_up = []
    leader_partition = solo.leader_partition

    def counted(topic, index, *args):
        looked_up.append(index)
        return leader_partition(topic, index, *args)

    solo.leader_partition = counted
    async with parked_fetch(solo, dict.fromkeys(PARTITIONS, 0)) as responses:
        assert sorted(looked_up) == list(PARTITIONS)
        looked_up.clear()
        await append(solo, 1, 2, acks=1, origin=AppendOrigin.CLIENT)
    assert set(looked_up) == {1}  # the append's own lookup and the wake's read of it
    assert sorted(partitions_of(responses[0])) == list(PARTITIONS)


async def test_a_leadership_moved_while_parked_is_answered_at_the_wake(solo, autojump_clock):
    # The move notifies the partition's watchers: the wake looks it up again and answers
    # NOT_LEADER_OR_FOLLOWER, though its entry of the read before was an empty one.
    async with parked_fetch(solo, dict.fromkeys(PARTITIONS, 0)) as responses:
        await solo.apply_leader_and_isr(
            leader_and_isr(2, 2, [2, LEADER], [2, LEADER], partitions=(3,))
        )
    answered = partitions_of(responses[0])
    assert answered[3]["error_code"] == Error.NOT_LEADER_OR_FOLLOWER
    assert [answered[index]["error_code"] for index in (0, 1, 2)] == [Error.NONE] * 3
    assert trio.current_time() == 0  # answered at the move, not at max_wait


async def test_a_kept_entry_carries_the_partition_offsets_of_the_answer(solo, autojump_clock):
    await append(solo, 1, 5, acks=1)
    async with parked_fetch(solo, {0: 0, 1: 5}) as responses:
        # DeleteRecords notifies no fetch: the parked one learns of it when it answers.
        partition = solo.leader_partition(TOPIC, 1)[0]
        assert solo.delete_records(partition, 4)[1] == 4
        await append(solo, 0, 2, acks=1)
    answered = partitions_of(responses[0])
    assert answered[0]["high_watermark"] == 2 and answered[0]["records"]
    assert answered[1]["records"] == b""
    assert (answered[1]["high_watermark"], answered[1]["log_start_offset"]) == (5, 4)


async def test_a_fetch_that_waits_out_max_wait_reads_nothing_again(solo, autojump_clock):
    reads = count_reads(solo)
    response = await handle(context(solo), fetch_request(dict.fromkeys(PARTITIONS, 0), 200))
    assert sorted(reads) == list(PARTITIONS)
    assert trio.current_time() == pytest.approx(0.2)
    assert all(entry["records"] == b"" for entry in partitions_of(response).values())


def test_fetch_error_codes_are_those_the_generic_walk_finds():
    """dispatch counts a Fetch response's error codes (ErrorsPerSec) without walking every
    value of every partition: the same codes as the generic walk, diverging epochs, current
    leaders and aborted transactions included."""
    from minibroker.apis.dispatch import _error_codes, _fetch_error_codes
    from minibroker.protocol.errors import Error
    from minibroker.replication.replica_manager import fetch_result

    moved = fetch_result(1, Error.NOT_LEADER_OR_FOLLOWER)
    moved["current_leader"] = {"leader_id": 2, "leader_epoch": 3}
    diverging = fetch_result(2, Error.NONE)
    diverging["diverging_epoch"] = {"epoch": 1, "end_offset": 10}
    committed = fetch_result(3, Error.NONE)
    committed["aborted_transactions"] = [{"producer_id": 1, "first_offset": 0}]
    for response in (
        {"error_code": Error.NONE, "session_id": 0, "responses": ()},
        {"error_code": Error.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": ()},
        {
            "error_code": Error.NONE,
            "session_id": 7,
            "responses": [
                {"topic": "a", "topic_id": None, "partitions": [fetch_result(0, Error.NONE)]},
                {"topic": "b", "topic_id": None, "partitions": [moved, diverging, committed]},
                {
                    "topic": None,
                    "topic_id": None,
                    "partitions": [fetch_result(0, Error.UNKNOWN_TOPIC_ID)],
                },
            ],
            "node_endpoints": [{"node_id": 2, "host": "h", "port": 1, "rack": None}],
        },
    ):
        assert sorted(_fetch_error_codes(response)) == sorted(_error_codes(response))


async def test_a_woken_fetch_answers_before_the_acks_1_append_that_woke_it_returns(
    solo, autojump_clock
):
    """ReplicaManager.append_records lets the fetches its append woke take their step (read,
    answer) before it returns to the Produce handler, whose response would otherwise be
    written first (purgatory.readers_first). trio runs a batch of ready tasks in either order,
    chosen at random, so one round could pass by chance: 40 rounds, each must."""
    for round_ in range(40):
        order = []

        async def fetch(offset=round_, order=order):
            await handle(context(solo), fetch_request({0: offset}))
            order.append("fetch answered")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fetch)
            await trio.testing.wait_all_tasks_blocked()
            await append(solo, 0, 1, acks=1)
            order.append("append returned")
        assert order == ["fetch answered", "append returned"], round_
