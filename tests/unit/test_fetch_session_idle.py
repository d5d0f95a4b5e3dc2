"""An incremental fetch session's idle partitions: the Fetch handler (apis/fetch.py) on an
in-process ReplicaManager under trio's MockClock, no sockets.

Kafka's IncrementalFetchContext reads every partition of the session at every fetch;
minibroker's handler answers a consumer's partition from its note of the last read when that
read found nothing and nothing was notified under the partition since (the module's notes say
why the answer is the same). These tests hold both halves: what is read, and that every change
that could make the answer different is read again.
"""

import pytest

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


def fetch_request(
    offsets: dict[int, int], *, session_id: int, epoch: int, isolation_level: int = 0
):
    """A consumer's Fetch in a session (max_wait 0: answered at once) naming `offsets`."""
    return fetch_by_name(
        offsets, session_id=session_id, epoch=epoch, isolation_level=isolation_level
    )


def partitions_of(response: dict) -> dict[int, dict]:
    if not response["responses"]:
        return {}
    ((topic,),) = [response["responses"]]
    return {entry["partition_index"]: entry for entry in topic["partitions"]}


class Session:
    """A consumer's session: a full fetch, then incremental ones."""

    def __init__(self, replicas, offsets: dict[int, int]) -> None:
        self.replicas = replicas
        self.offsets = offsets
        self.id = 0
        self.epoch = 0

    async def fetch(self, changed: dict[int, int] | None = None, **options) -> dict:
        names = dict(self.offsets) if self.epoch == 0 else dict(changed or {})
        response = await handle(
            context(self.replicas),
            fetch_request(names, session_id=self.id, epoch=self.epoch, **options),
        )
        assert response["error_code"] == Error.NONE, response
        if self.epoch == 0:
            self.id = response["session_id"]
            assert self.id != 0
        self.epoch += 1
        return partitions_of(response)


async def test_an_idle_partition_is_read_once_then_answered_from_its_note(solo, autojump_clock):
    reads = count_reads(solo)
    session = Session(solo, dict.fromkeys(PARTITIONS, 0))
    await session.fetch()  # full: every partition read
    assert sorted(reads) == list(PARTITIONS)
    reads.clear()
    assert await session.fetch() == {}  # the first incremental fetch reads and notes
    assert sorted(reads) == list(PARTITIONS)
    reads.clear()
    for _ in range(3):
        assert await session.fetch() == {}
    assert reads == []  # nothing notified: nothing read
    await append(solo, 2, 3, acks=1, origin=AppendOrigin.CLIENT)
    answered = await session.fetch()
    assert reads == [2]
    assert sorted(answered) == [2]
    assert answered[2]["high_watermark"] == 3 and len(answered[2]["records"]) > 0
    reads.clear()
    # The consumer moves on: a changed fetch offset is read, and noted again.
    assert await session.fetch({2: 3}) == {}
    assert reads == [2]
    reads.clear()
    assert await session.fetch() == {}
    assert reads == []


async def test_a_log_start_moved_by_delete_records_is_answered(solo, autojump_clock):
    """DeleteRecords notifies nothing; the note's answer takes the log start again, so the
    session answers the partition with its new log start offset as a full read would."""
    await append(solo, 1, 5, acks=1)
    reads = count_reads(solo)
    session = Session(solo, {0: 0, 1: 5})
    await session.fetch()
    await session.fetch()
    reads.clear()
    assert await session.fetch() == {}
    assert reads == []
    partition = solo.leader_partition(TOPIC, 1)[0]
    assert solo.delete_records(partition, 4)[1] == 4
    answered = await session.fetch()
    assert sorted(answered) == [1]
    assert (answered[1]["high_watermark"], answered[1]["log_start_offset"]) == (5, 4)
    assert answered[1]["records"] == b""


async def test_a_leadership_change_is_answered_not_leader(solo, autojump_clock):
    session = Session(solo, dict.fromkeys(PARTITIONS, 0))
    await session.fetch()
    await session.fetch()
    await solo.apply_leader_and_isr(leader_and_isr(2, 2, [2, LEADER], [2, LEADER], partitions=(3,)))
    answered = await session.fetch()
    assert sorted(answered) == [3]
    assert answered[3]["error_code"] == Error.NOT_LEADER_OR_FOLLOWER
    again = await session.fetch()  # an error is answered at every fetch, as in Kafka
    assert again[3]["error_code"] == Error.NOT_LEADER_OR_FOLLOWER
    # Leadership comes back: the partition is answered, without error, as a full read would.
    await solo.apply_leader_and_isr(leader_and_isr(LEADER, 3, [LEADER], [LEADER], partitions=(3,)))
    answered = await session.fetch()
    assert sorted(answered) == [3]
    assert answered[3]["error_code"] == Error.NONE and answered[3]["high_watermark"] == 0
    assert await session.fetch() == {}


async def test_another_isolation_level_reads_again(solo, autojump_clock):
    reads = count_reads(solo)
    session = Session(solo, {0: 0})
    await session.fetch()
    await session.fetch()
    reads.clear()
    await session.fetch(isolation_level=1)
    assert reads == [0]


async def test_a_partition_answered_with_an_error_is_answered_again_after_it(solo, autojump_clock):
    """An error (here OFFSET_OUT_OF_RANGE for an offset below the log start, which notifies
    nothing) resets what the session last told the client; back at the noted offset, the
    partition is answered with its offsets, as Kafka's session answers a partition whose
    high watermark differs from the one it last sent."""
    await append(solo, 1, 5, acks=1)
    partition = solo.leader_partition(TOPIC, 1)[0]
    assert solo.delete_records(partition, 4)[1] == 4
    session = Session(solo, {1: 5})
    await session.fetch()
    await session.fetch()
    assert await session.fetch() == {}
    answered = await session.fetch({1: 2})
    assert answered[1]["error_code"] == Error.OFFSET_OUT_OF_RANGE
    answered = await session.fetch({1: 5})
    assert sorted(answered) == [1]
    assert answered[1]["error_code"] == Error.NONE and answered[1]["high_watermark"] == 5
    assert await session.fetch() == {}
