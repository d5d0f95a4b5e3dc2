"""A follower's incremental fetch session on its leader: the Fetch handler (apis/fetch.py) on
an in-process ReplicaManager under trio's MockClock, the follower's fetches made by hand.

Kafka's leader reads every partition of a follower's session at every fetch, and each read
records the follower's progress (its fetch time keeps it in the ISR). minibroker's handler
answers a follower's idle partition from the note of its last read, as it does a consumer's
(tests/unit/test_fetch_session_idle.py), when the follower is in the ISR, caught up with the
log end now, and its progress is what the fetch says; it then stamps the follower's progress
with the fetch's time through the same record_follower_fetch. These tests hold both halves:
idle partitions are not read, yet the follower stays caught up for replica.lag.time.max.ms
and longer; and a partition with news, or a follower behind, is read as before.
"""

import pytest
import trio

from minibroker.apis.fetch import handle
from minibroker.protocol.errors import Error
from tests.unit.replication_harness import (
    TOPIC,
    append,
    count_reads,
    fetch_by_name,
    fetch_context,
    leader_and_isr,
    make_broker,
)

LEADER, FOLLOWER = 1, 2
PARTITIONS = (0, 1, 2, 3)
FETCH_VERSION = 12  # topics by name


@pytest.fixture
async def leader(tmp_path, nursery, autojump_clock):
    """Broker 1 leading TOPIC-0..3 with broker 2 (not running: its fetches are the test's) in
    the ISR, each partition holding 5 records."""
    replicas = make_broker(tmp_path, LEADER)
    replicas.announced_topic_configs[TOPIC] = {"min.insync.replicas": "1"}
    await nursery.start(replicas.run)
    await replicas.apply_leader_and_isr(
        leader_and_isr(LEADER, 1, [LEADER, FOLLOWER], [LEADER, FOLLOWER], partitions=PARTITIONS)
    )
    for index in PARTITIONS:
        assert (await append(replicas, index, 5, acks=1))["error_code"] == Error.NONE
    yield replicas
    replicas.log_manager.close()


def follower_fetch(offsets: dict[int, int], *, session_id: int, epoch: int):
    """Broker 2's Fetch v12 in a session (max_wait 0: answered at once) naming ``offsets``."""
    return fetch_by_name(
        offsets,
        replica_id=FOLLOWER,
        session_id=session_id,
        epoch=epoch,
        max_bytes=10 << 20,
        leader_epoch=1,
        last_fetched_epoch=1,
        log_start_offset=0,
    )


class FollowerSession:
    """The follower's session: a full fetch, then incremental ones naming what changed."""

    def __init__(self, replicas, offsets: dict[int, int]) -> None:
        self.replicas = replicas
        self.offsets = offsets
        self.id = 0
        self.epoch = 0

    async def fetch(self, changed: dict[int, int] | None = None) -> dict[int, dict]:
        names = dict(self.offsets) if self.epoch == 0 else dict(changed or {})
        self.offsets.update(changed or {})
        response = await handle(
            fetch_context(self.replicas, FETCH_VERSION),
            follower_fetch(names, session_id=self.id, epoch=self.epoch),
        )
        assert response["error_code"] == Error.NONE, response
        if self.epoch == 0:
            self.id = response["session_id"]
            assert self.id != 0
        self.epoch += 1
        if not response["responses"]:
            return {}
        ((topic,),) = [response["responses"]]
        return {entry["partition_index"]: entry for entry in topic["partitions"]}


def partition(replicas, index: int):
    return next(p for p in replicas.partitions() if p.key == (TOPIC, index))


def lagging(replicas) -> dict[int, list[int]]:
    lag_ms = replicas.config.replica_lag_time_max_ms
    now_ms = replicas.elapsed_ms()
    found = {i: partition(replicas, i).lagging_isr_members(now_ms, lag_ms) for i in PARTITIONS}
    return {i: members for i, members in found.items() if members}


async def test_an_idle_followers_partitions_are_not_read_yet_it_stays_caught_up(
    leader, autojump_clock
):
    reads = count_reads(leader)
    session = FollowerSession(leader, dict.fromkeys(PARTITIONS, 5))
    assert all(e["high_watermark"] == 5 for e in (await session.fetch()).values())
    assert await session.fetch() == {}  # the first incremental fetch reads and notes
    reads.clear()
    lag_s = leader.config.replica_lag_time_max_ms / 1000
    start = trio.current_time()
    fetches = 0
    while trio.current_time() - start < 2 * lag_s:  # as an idle follower fetches: every 0.5 s
        assert await session.fetch() == {}
        fetches += 1
        assert lagging(leader) == {}
        await trio.sleep(0.5)
    assert fetches >= 100 and reads == []
    # Every partition's progress carries the last fetch's time (what the read would stamp).
    assert await session.fetch() == {}
    now_ms = leader.elapsed_ms()
    assert all(
        partition(leader, i).followers[FOLLOWER].last_caught_up_ms == now_ms for i in PARTITIONS
    )


class WaitingController:
    """A controller client that takes requests and never answers (the ISR change stays in
    flight), keeping what it was sent."""

    broker_epoch = 1

    def __init__(self) -> None:
        self.sent: list = []

    async def request(self, request, timeout_s: float = 5.0):
        self.sent.append(request)
        await trio.sleep_forever()


async def test_a_follower_that_stops_fetching_lags(leader, autojump_clock):
    leader.controller = controller = WaitingController()
    session = FollowerSession(leader, dict.fromkeys(PARTITIONS, 5))
    await session.fetch()
    await session.fetch()
    lag_s = leader.config.replica_lag_time_max_ms / 1000
    await trio.sleep(lag_s / 2)
    assert lagging(leader) == {} and not controller.sent
    # No fetch for longer than the lag time: the notes stamp nothing by themselves (the
    # leader's ISR check then asks the controller, which keeps the request in flight).
    await trio.sleep(lag_s)
    assert lagging(leader) == {index: [FOLLOWER] for index in PARTITIONS}


async def test_news_and_a_follower_behind_are_read_as_before(leader, autojump_clock):
    reads = count_reads(leader)
    session = FollowerSession(leader, dict.fromkeys(PARTITIONS, 5))
    await session.fetch()
    await session.fetch()
    reads.clear()
    assert (await append(leader, 1, 3, acks=1))["error_code"] == Error.NONE
    # The append is read (records), the idle others are not.
    answered = await session.fetch()
    assert reads == [1] and list(answered) == [1] and answered[1]["records"]
    reads.clear()
    # The follower has not appended them yet (its fetch offset stays 5): it is behind the
    # log end, so its partition 1 is read again (no note of a read with records), and
    # its progress is not stamped caught up by a note.
    behind_since = partition(leader, 1).followers[FOLLOWER].last_caught_up_ms
    await trio.sleep(1)
    answered = await session.fetch()
    assert reads == [1] and answered[1]["records"]  # read again, the same records again
    assert partition(leader, 1).followers[FOLLOWER].last_caught_up_ms == behind_since
    reads.clear()
    # Caught up again (offset 8): read once with the new offset, then noted.
    assert (await session.fetch({1: 8}))[1]["high_watermark"] == 8
    assert reads == [1]
    reads.clear()
    assert await session.fetch() == {}
    assert await session.fetch() == {}
    assert reads == [1]  # the first after the change reads and notes, the next does not
