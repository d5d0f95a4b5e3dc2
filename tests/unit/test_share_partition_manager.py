"""The share partition manager (replication/share_partition_manager.py) and share sessions
(replication/share_session.py), in process under trio's MockClock.

A real ReplicaManager leading TOPIC-0 on real logs (tests/unit/replication_harness.py), the
in-memory persister, and the manager reading records through the replica manager's read
path: acquisitions, acknowledgements, lock expiry on the timer, members leaving, a persister
that refuses writes, and the share session rules. No sockets, no sleep.
"""

from dataclasses import dataclass

import pytest
import trio
import trio.testing

from minibroker.protocol.errors import Error
from minibroker.protocol.produce_request import PartitionProduceData
from minibroker.replication.replica_manager import AppendOrigin
from minibroker.replication.share_partition import (
    Acknowledgement,
    AcknowledgeType,
    AcquiredRange,
    RecordState,
)
from minibroker.replication.share_partition_manager import SharePartitionManager, _aborted_batches
from minibroker.replication.share_persister import InMemoryPersister, ShareStateKey, WriteState
from minibroker.replication.share_session import ShareSessionCache, next_epoch
from tests.unit.batch_factory import make_batch
from tests.unit.replication_harness import TOPIC, TOPIC_ID, append, leader_and_isr, make_broker

GROUP = "g"
LOCK_MS = 30_000


@dataclass
class RefusingPersister(InMemoryPersister):
    """The in-memory persister, whose writes can be made to fail with a given code (the
    share coordinator unavailable, a fenced epoch)."""

    refuse_writes: Error = Error.NONE
    # Seconds each read takes (a share coordinator's round trip), on the MockClock.
    read_delay: float = 0.0
    initializations: int = 0

    async def read(self, key: ShareStateKey, leader_epoch: int):
        await trio.sleep(self.read_delay)
        return await InMemoryPersister.read(self, key, leader_epoch)

    async def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> Error:
        self.initializations += 1
        return await InMemoryPersister.initialize(self, key, state_epoch, start_offset)

    async def write(self, key: ShareStateKey, state: WriteState) -> Error:
        if self.refuse_writes is not Error.NONE:
            return self.refuse_writes
        return await InMemoryPersister.write(self, key, state)


@pytest.fixture
async def broker(tmp_path, nursery, autojump_clock):
    replicas = make_broker(tmp_path, 1)
    await nursery.start(replicas.run)
    await replicas.apply_leader_and_isr(leader_and_isr(1, 1, [1], [1]))
    replicas.group_configs[GROUP] = {"share.auto.offset.reset": "earliest"}
    yield replicas
    replicas.log_manager.close()


@pytest.fixture
async def manager(broker, nursery):
    shares = SharePartitionManager(broker.config, broker, RefusingPersister())
    await nursery.start(shares.run)
    return shares


def partition(broker):
    found, error = broker.leader_partition(TOPIC, 0)
    assert error is Error.NONE
    return found


async def produce(broker, count: int) -> None:
    assert (await append(broker, 0, count, acks=1))["error_code"] == Error.NONE


async def acquire(manager, broker, member: str, max_records: int = 500, **kw):
    return await manager.acquire(
        GROUP, member, partition(broker), max_records=max_records, max_bytes=1 << 20, **kw
    )


def ack(first: int, last: int, kind: AcknowledgeType) -> list[Acknowledgement]:
    return [Acknowledgement(first, last, kind)]


async def test_acquire_returns_the_stored_batches_and_the_acquired_ranges(
    manager, broker, autojump_clock
):
    await produce(broker, 10)
    result = await acquire(manager, broker, "m1")
    assert result.error is Error.NONE
    assert result.acquired == [AcquiredRange(0, 9, 1)]
    # The batch as the log holds it: the same bytes a Fetch from offset 0 reads.
    stored = broker.read_records(
        partition(broker),
        0,
        replica_id=-1,
        last_fetched_epoch=-1,
        max_bytes=1 << 20,
        min_one_batch=True,
        record_progress=False,
    )["records"]
    assert result.records == bytes(stored)
    # The acquisition is persisted before it is answered (ACQUIRED as AVAILABLE, count 1).
    state = manager.persister.states[ShareStateKey(GROUP, TOPIC_ID, 0)]
    assert [(b.first_offset, b.last_offset, b.delivery_count) for b in state.batches] == [(0, 9, 1)]
    # Another member gets nothing of what m1 holds.
    assert (await acquire(manager, broker, "m2")).acquired == []


async def test_record_limit_and_batch_optimized_modes(manager, broker, autojump_clock):
    await produce(broker, 10)
    await produce(broker, 10)
    limited = await acquire(manager, broker, "m1", max_records=3, batch_optimized=False)
    assert limited.acquired == [AcquiredRange(0, 2, 1)]
    whole = await acquire(manager, broker, "m2", max_records=3, batch_optimized=True)
    assert whole.acquired == [AcquiredRange(3, 9, 1)]  # up to the end of the first batch


async def test_a_produced_batch_larger_than_the_in_flight_limit_is_acquired_whole(
    manager, broker, autojump_clock
):
    """Kafka 4.4's rule (SharePartition.lastOffsetAndMaxRecordsToAcquire): the in-flight
    limit (share.partition.max.record.locks, 2,000) bounds what an acquisition asks for, and
    batch_optimized rounds up to the end of the log batch: a 5,000-record batch goes out once,
    whole, to one member, persisted in one write; the next member finds no room until it is
    acknowledged."""
    await produce(broker, 5000)
    writes = []
    write = manager.persister.write

    async def counting(key, state):
        writes.append(state.batches)
        return await write(key, state)

    manager.persister.write = counting
    whole = await acquire(manager, broker, "m1", max_records=500)
    assert whole.acquired == [AcquiredRange(0, 4999, 1)]
    assert len(writes) == 1
    assert (await acquire(manager, broker, "m2", max_records=500)).acquired == []
    await produce(broker, 10)
    assert (await acquire(manager, broker, "m2", max_records=500)).acquired == []
    p = partition(broker)
    assert await manager.acknowledge(GROUP, "m1", p, ack(0, 4999, AcknowledgeType.ACCEPT)) == (
        Error.NONE
    )
    assert (await acquire(manager, broker, "m2", max_records=500)).acquired == [
        AcquiredRange(5000, 5009, 1)
    ]


async def test_a_share_fetch_persists_its_acknowledgements_and_acquisition_in_one_write(
    manager, broker, autojump_clock
):
    """A ShareFetch's acknowledgements of a partition go with its acquisition: one state write
    for both (Kafka writes once per ShareFetch), each answered with its own code; a refused
    write undoes both; acknowledgements that are invalid leave the acquisition alone."""
    await produce(broker, 10)
    await produce(broker, 10)
    writes = []
    write = manager.persister.write

    async def counting(key, state):
        writes.append(state)
        return await write(key, state)

    manager.persister.write = counting
    first = await acquire(manager, broker, "m1", max_records=5)
    assert first.acquired == [AcquiredRange(0, 9, 1)] and len(writes) == 1
    # Accept 0-7, release 8-9: they go out again with the next batch, in one write.
    acks = [
        Acknowledgement(0, 7, AcknowledgeType.ACCEPT),
        Acknowledgement(8, 9, AcknowledgeType.RELEASE),
    ]
    second = await acquire(manager, broker, "m1", max_records=5, acknowledgements=acks)
    assert (second.error, second.acknowledge_error) == (Error.NONE, Error.NONE)
    assert second.acquired == [AcquiredRange(8, 9, 2), AcquiredRange(10, 19, 1)]
    assert len(writes) == 2
    assert writes[-1].start_offset == 8
    assert [(b.first_offset, b.last_offset, b.delivery_count) for b in writes[-1].batches] == [
        (8, 9, 2),
        (10, 19, 1),
    ]
    state = manager.persister.states[ShareStateKey(GROUP, TOPIC_ID, 0)]
    assert state.start_offset == 8
    # Acknowledging what m2 does not hold: INVALID_RECORD_STATE, its acquisition goes on.
    await produce(broker, 10)
    wrong = [Acknowledgement(8, 9, AcknowledgeType.ACCEPT)]
    third = await acquire(manager, broker, "m2", max_records=5, acknowledgements=wrong)
    assert third.acknowledge_error is Error.INVALID_RECORD_STATE
    assert third.acquired == [AcquiredRange(20, 29, 1)]
    assert len(writes) == 3
    # A refused write: neither the acknowledgement nor the acquisition happened.
    await produce(broker, 10)
    manager.persister.refuse_writes = Error.COORDINATOR_NOT_AVAILABLE
    accept = [Acknowledgement(8, 19, AcknowledgeType.ACCEPT)]
    refused = await acquire(manager, broker, "m1", max_records=5, acknowledgements=accept)
    assert (refused.error, refused.acknowledge_error) == (
        Error.COORDINATOR_NOT_AVAILABLE,
        Error.COORDINATOR_NOT_AVAILABLE,
    )
    share = manager.share_partition(GROUP, TOPIC, 0)
    assert share.state_of(8) is RecordState.ACQUIRED and share.end_offset == 30
    manager.persister.refuse_writes = Error.NONE
    again = await acquire(manager, broker, "m1", max_records=5, acknowledgements=accept)
    assert (again.acknowledge_error, again.acquired) == (Error.NONE, [AcquiredRange(30, 39, 1)])
    assert manager.share_partition(GROUP, TOPIC, 0).start_offset == 20
    assert len(writes) == 5


async def test_a_share_fetch_whose_write_is_fenced_still_fetches(manager, broker, autojump_clock):
    """The state was reset under the leader (FENCED_STATE_EPOCH on the ShareFetch's one write):
    its acknowledgements fail with that code, as Kafka's acknowledge does, and the fetch goes
    on from the state read again, as Kafka's does (it is not answered with the error)."""
    await produce(broker, 5)
    assert (await acquire(manager, broker, "m1")).acquired == [AcquiredRange(0, 4, 1)]
    write = manager.persister.write
    refusals = [Error.FENCED_STATE_EPOCH]

    async def once(key, state):
        return refusals.pop() if refusals else await write(key, state)

    manager.persister.write = once
    acks = [Acknowledgement(0, 4, AcknowledgeType.ACCEPT)]
    result = await acquire(manager, broker, "m1", acknowledgements=acks)
    assert (result.error, result.acknowledge_error) == (Error.NONE, Error.FENCED_STATE_EPOCH)
    # Read again from the persister: 0-4 as written at their acquisition, delivered again.
    assert result.acquired == [AcquiredRange(0, 4, 2)]


async def test_a_new_share_partition_starts_at_latest_by_default(manager, broker, autojump_clock):
    await produce(broker, 5)
    broker.group_configs[GROUP] = {}
    assert (await acquire(manager, broker, "m1")).acquired == []
    assert manager.share_partition(GROUP, TOPIC, 0).start_offset == 5
    await produce(broker, 2)
    assert (await acquire(manager, broker, "m1")).acquired == [AcquiredRange(5, 6, 1)]


async def test_accept_release_and_reject(manager, broker, autojump_clock):
    await produce(broker, 10)
    await acquire(manager, broker, "m1")
    p = partition(broker)
    assert await manager.acknowledge(GROUP, "m1", p, ack(0, 5, AcknowledgeType.ACCEPT)) == (
        Error.NONE
    )
    assert await manager.acknowledge(GROUP, "m1", p, ack(6, 6, AcknowledgeType.RELEASE)) == (
        Error.NONE
    )
    assert await manager.acknowledge(GROUP, "m1", p, ack(7, 9, AcknowledgeType.REJECT)) == (
        Error.NONE
    )
    share = manager.share_partition(GROUP, TOPIC, 0)
    assert share.start_offset == 6
    # The released record goes to the next member, delivered a second time.
    assert (await acquire(manager, broker, "m2")).acquired == [AcquiredRange(6, 6, 2)]
    # Acknowledging what another member holds, or again what is done, changes nothing.
    assert await manager.acknowledge(GROUP, "m1", p, ack(6, 6, AcknowledgeType.ACCEPT)) == (
        Error.INVALID_RECORD_STATE
    )
    assert await manager.acknowledge(GROUP, "m2", p, ack(0, 0, AcknowledgeType.ACCEPT)) == (
        Error.INVALID_RECORD_STATE
    )
    assert share.state_of(6) is RecordState.ACQUIRED


async def test_an_expired_lock_redelivers_on_the_timer(manager, broker, autojump_clock):
    await produce(broker, 4)
    start = trio.current_time()
    await acquire(manager, broker, "m1")
    share = manager.share_partition(GROUP, TOPIC, 0)
    # A fetch parked for the records wakes when the timer releases them.
    got = {}

    async def second_member():
        got["result"] = await manager_wait_and_acquire(manager, broker, "m2")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second_member)
    assert got["result"].acquired == [AcquiredRange(0, 3, 2)]
    assert trio.current_time() - start == pytest.approx(LOCK_MS / 1000, abs=0.01)
    assert share.holder(0) == "m2"
    # m1's acknowledgement after its lock expired is refused.
    assert await manager.acknowledge(
        GROUP, "m1", partition(broker), ack(0, 3, AcknowledgeType.ACCEPT)
    ) == (Error.INVALID_RECORD_STATE)


async def manager_wait_and_acquire(manager, broker, member):
    """As a ShareFetch parks (DelayedShareFetch): try, then wait on the partition's keys."""
    from minibroker.replication.share_partition_manager import share_watch_key

    while True:
        result = await acquire(manager, broker, member)
        if result.acquired:
            return result
        await broker.watchers.wait_any(
            [(TOPIC, 0), share_watch_key(GROUP, TOPIC, 0)], trio.current_time() + 3600
        )


async def test_the_delivery_count_limit_archives(manager, broker, autojump_clock):
    broker.group_configs[GROUP] = {
        "share.auto.offset.reset": "earliest",
        "share.delivery.count.limit": "2",
    }
    await produce(broker, 1)
    p = partition(broker)
    for member in ("m1", "m2"):
        assert (await acquire(manager, broker, member)).acquired
        assert await manager.acknowledge(GROUP, member, p, ack(0, 0, AcknowledgeType.RELEASE)) == (
            Error.NONE
        )
    assert (await acquire(manager, broker, "m3")).acquired == []
    assert manager.share_partition(GROUP, TOPIC, 0).start_offset == 1


async def test_a_member_leaving_releases_its_records(manager, broker, autojump_clock):
    await produce(broker, 6)
    await acquire(manager, broker, "m1", max_records=3, batch_optimized=False)
    await acquire(manager, broker, "m2", max_records=3, batch_optimized=False)
    for member in ("m1", "m2"):
        opened = manager.sessions.fetch(
            GROUP, member, 0, [(TOPIC_ID, 0)], [], has_acknowledgements=False
        )
        assert opened.error is Error.NONE
    await manager.member_left(GROUP, "m1")
    assert manager.sessions.get(GROUP, "m1") is None
    share = manager.share_partition(GROUP, TOPIC, 0)
    assert [share.state_of(o) for o in range(6)] == [RecordState.AVAILABLE] * 3 + [
        RecordState.ACQUIRED
    ] * 3
    assert (await acquire(manager, broker, "m3")).acquired == [AcquiredRange(0, 2, 2)]
    # The group's last share session here ends: its share partitions are dropped (Kafka's
    # onGroupEmpty), to be read again from the persister by the next fetch.
    await manager.member_left(GROUP, "m2")
    assert manager.share_partition(GROUP, TOPIC, 0) is None


async def test_a_refused_write_is_answered_and_undone(manager, broker, autojump_clock):
    await produce(broker, 5)
    manager.persister.refuse_writes = Error.COORDINATOR_LOAD_IN_PROGRESS
    # The share partition is created (read and initialize succeed), the acquisition is not.
    result = await acquire(manager, broker, "m1")
    assert (result.error, result.acquired) == (Error.COORDINATOR_NOT_AVAILABLE, [])
    share = manager.share_partition(GROUP, TOPIC, 0)
    assert share.state_of(0) is None and share.end_offset == 0
    manager.persister.refuse_writes = Error.NONE
    assert (await acquire(manager, broker, "m1")).acquired == [AcquiredRange(0, 4, 1)]
    p = partition(broker)
    manager.persister.refuse_writes = Error.COORDINATOR_NOT_AVAILABLE
    assert await manager.acknowledge(GROUP, "m1", p, ack(0, 4, AcknowledgeType.ACCEPT)) == (
        Error.COORDINATOR_NOT_AVAILABLE
    )
    share = manager.share_partition(GROUP, TOPIC, 0)
    assert share.state_of(0) is RecordState.ACQUIRED  # rolled back
    # A fenced state epoch (an admin reset the state): the share partition is dropped (Kafka's
    # fencedSharePartitionHandler) and the next fetch builds it again from the persister.
    manager.persister.refuse_writes = Error.FENCED_STATE_EPOCH
    assert await manager.acknowledge(GROUP, "m1", p, ack(0, 4, AcknowledgeType.ACCEPT)) == (
        Error.FENCED_STATE_EPOCH
    )
    assert manager.share_partition(GROUP, TOPIC, 0) is None
    manager.persister.refuse_writes = Error.NONE
    assert (await acquire(manager, broker, "m1")).acquired == [AcquiredRange(0, 4, 2)]
    assert await manager.acknowledge(GROUP, "m1", p, ack(0, 4, AcknowledgeType.ACCEPT)) == (
        Error.NONE
    )
    assert manager.persister.states[ShareStateKey(GROUP, TOPIC_ID, 0)].start_offset == 5


async def test_a_new_leader_rebuilds_from_the_persister(manager, broker, autojump_clock):
    await produce(broker, 6)
    p = partition(broker)
    await acquire(manager, broker, "m1")
    await manager.acknowledge(GROUP, "m1", p, ack(0, 2, AcknowledgeType.ACCEPT))
    # A new leader epoch: the share partition is built again from what was persisted.
    await broker.apply_leader_and_isr(leader_and_isr(1, 2, [1], [1]))
    assert manager.share_partition(GROUP, TOPIC, 0) is None
    result = await acquire(manager, broker, "m2")
    # Accepted records are not delivered again; the others are, a second time.
    assert result.acquired == [AcquiredRange(3, 5, 2)]


# -- share sessions (pure) ----------------------------------------------------------------


def test_share_session_epochs() -> None:
    cache = ShareSessionCache(max_sessions=2)
    a = ("t", 0)
    opened = cache.fetch("g", "m", 0, [a], [], has_acknowledgements=False)
    assert (opened.error, opened.partitions) == (Error.NONE, (a,))
    assert cache.get("g", "m").epoch == 1
    # The next request carries 1, then 2; its partitions stay in the session.
    assert cache.fetch("g", "m", 1, [], [], has_acknowledgements=True).partitions == (a,)
    assert cache.fetch("g", "m", 1, [], [], has_acknowledgements=False).error == (
        Error.INVALID_SHARE_SESSION_EPOCH
    )
    assert cache.acknowledge("g", "m", 2).error == Error.NONE
    b = ("t", 1)
    assert cache.fetch("g", "m", 3, [b], [a], has_acknowledgements=False).partitions == (b,)
    # Unknown sessions, and ShareAcknowledge never opening one.
    assert cache.fetch("g", "x", 1, [], [], has_acknowledgements=False).error == (
        Error.SHARE_SESSION_NOT_FOUND
    )
    assert cache.acknowledge("g", "m", 0).error == Error.INVALID_SHARE_SESSION_EPOCH
    assert cache.acknowledge("g", "x", 5).error == Error.SHARE_SESSION_NOT_FOUND
    # Acknowledgements cannot ride on the opening fetch; a closing fetch cannot fetch.
    assert cache.fetch("g", "n", 0, [a], [], has_acknowledgements=True).error == (
        Error.INVALID_REQUEST
    )
    assert cache.fetch("g", "m", -1, [a], [], has_acknowledgements=False).error == (
        Error.INVALID_REQUEST
    )
    # The limit, then closing frees a slot.
    assert cache.fetch("g", "n", 0, [a], [], has_acknowledgements=False).error == Error.NONE
    assert cache.fetch("g", "o", 0, [a], [], has_acknowledgements=False).error == (
        Error.SHARE_SESSION_LIMIT_REACHED
    )
    assert cache.fetch("g", "m", -1, [], [], has_acknowledgements=True).closed
    assert cache.fetch("g", "m", -1, [], [], has_acknowledgements=False).error == (
        Error.SHARE_SESSION_NOT_FOUND
    )
    assert cache.fetch("g", "o", 0, [a], [], has_acknowledgements=False).error == Error.NONE
    # Reopening replaces a member's session, at epoch 1 again.
    assert cache.fetch("g", "o", 0, [b], [], has_acknowledgements=False).partitions == (b,)
    assert next_epoch(2**31 - 1) == 1 and next_epoch(-1) == -1


def test_a_closed_connection_ends_its_sessions() -> None:
    cache = ShareSessionCache()
    first, second = object(), object()
    cache.fetch("g", "m1", 0, [], [], has_acknowledgements=False, connection=first)
    cache.fetch("g", "m2", 0, [], [], has_acknowledgements=False, connection=second)
    gone = cache.remove_connection(first)
    assert [s.member_id for s in gone] == ["m1"]
    assert cache.get("g", "m2") is not None


async def test_waiting_is_on_the_mock_clock(manager, broker, autojump_clock):
    """Nothing to acquire: a parked fetch wakes on an append, not at its deadline."""
    start = trio.current_time()
    got = {}

    async def fetch():
        got["result"] = await manager_wait_and_acquire(manager, broker, "m1")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fetch)
        await trio.testing.wait_all_tasks_blocked()
        assert got == {}
        await produce(broker, 2)
    assert got["result"].acquired == [AcquiredRange(0, 1, 1)]
    assert trio.current_time() - start < 1


async def test_concurrent_first_fetches_initialize_once(manager, broker, autojump_clock):
    """Two members' first fetches while the persister's read is slow: one share partition,
    one InitializeShareGroupState, and each record acquired by one member."""
    await produce(broker, 4)
    manager.persister.read_delay = 1.0
    got = {}

    async def fetch(member):
        got[member] = await acquire(manager, broker, member, max_records=2, batch_optimized=False)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fetch, "m1")
        nursery.start_soon(fetch, "m2")
    assert manager.persister.initializations == 1
    assert sorted((r for result in got.values() for r in result.acquired), key=str) == [
        AcquiredRange(0, 1, 1),
        AcquiredRange(2, 3, 1),
    ]


def test_the_batches_of_aborted_transactions_are_found_as_a_read_committed_consumer_finds_them():
    """`_aborted_batches`: a producer's transactional batches from its aborted transaction's
    first offset up to its abort marker; not another producer's, not a plain batch, not a
    batch before the transaction began nor after its marker; none without aborted
    transactions (read_uncommitted's null, or none overlapping)."""
    # (first, last, position, size, control, transactional producer id or None)
    headers = [
        (0, 1, 0, 0, False, 7),  # producer 7's committed transaction, before the aborted one
        (2, 2, 0, 0, True, 7),  # its commit marker
        (3, 4, 0, 0, False, 7),  # producer 7's aborted transaction
        (5, 5, 0, 0, False, None),  # a plain batch in the middle
        (6, 6, 0, 0, False, 9),  # producer 9's transaction (committed)
        (7, 8, 0, 0, False, 7),  # still producer 7's aborted transaction
        (9, 9, 0, 0, True, 7),  # its abort marker
        (10, 10, 0, 0, False, 7),  # producer 7's next transaction
    ]
    aborted = [{"producer_id": 7, "first_offset": 3}]
    assert _aborted_batches(headers, aborted) == {3, 7}
    assert _aborted_batches(headers, None) == set()
    assert _aborted_batches(headers, []) == set()


async def append_at(broker, timestamps: list[int]) -> None:
    """One batch of records with these timestamps (ms), as a producer's CreateTime."""
    batch = bytearray(
        make_batch([(None, b"t%d" % n) for n in range(len(timestamps))], timestamps=timestamps)
    )
    ((result,),) = await broker.append_records(
        [(TOPIC, [PartitionProduceData(0, memoryview(batch))])],
        acks=1,
        timeout_s=30.0,
        origin=AppendOrigin.CLIENT,
    )
    assert result["error_code"] == Error.NONE


async def test_by_duration_starts_at_the_first_record_at_or_after_now_minus_the_duration(
    manager, broker, autojump_clock
):
    """share.auto.offset.reset=by_duration:<ISO-8601 duration> (KIP-1106), as Kafka 4.4's
    SharePartition.startOffsetDuringInitialization: the first offset whose timestamp is at
    or after now minus the duration, found by timestamp when the share partition is first
    initialized (now: the broker's wall clock, here MockClock's); none that recent: the
    partition answers OFFSET_NOT_AVAILABLE, nothing is initialized, and a later fetch finds
    the record produced since."""
    # The wall clock of the broker: a time of day, moving with MockClock.
    wall_start = 1_780_000_000_000
    broker.clock_ms = lambda: wall_start + int(trio.current_time() * 1000)
    hour, minute = 3_600_000, 60_000
    now = broker.clock_ms()
    await append_at(broker, [now - 3 * hour, now - 2 * hour])  # offsets 0-1
    # One batch whose records straddle the cut: the record, not the batch, decides.
    await append_at(broker, [now - 2 * hour, now - 10 * minute, now - 6 * minute])  # 2-4
    await append_at(broker, [now - 2 * minute])  # 5
    p = partition(broker)

    broker.group_configs["recent"] = {"share.auto.offset.reset": "by_duration:PT12M"}
    first = await manager.acquire("recent", "m1", p, max_records=500, max_bytes=1 << 20)
    assert first.error is Error.NONE
    assert [(r.first_offset, r.last_offset) for r in first.acquired] == [(3, 5)]
    assert manager.share_partition("recent", TOPIC, 0).start_offset == 3
    assert manager.persister.states[ShareStateKey("recent", TOPIC_ID, 0)].start_offset == 3

    # Now is read at initialization: 7 minutes later, 12 minutes reach back to offset 5 only.
    await trio.sleep(7 * 60)
    broker.group_configs["later"] = {"share.auto.offset.reset": "by_duration:PT12M"}
    later = await manager.acquire("later", "m1", p, max_records=500, max_bytes=1 << 20)
    assert [(r.first_offset, r.last_offset) for r in later.acquired] == [(5, 5)]

    # Nothing in the last minute: OFFSET_NOT_AVAILABLE, nothing initialized; the next fetch
    # after a new record starts at it.
    broker.group_configs["minute"] = {"share.auto.offset.reset": "by_duration:PT1M"}
    missing = await manager.acquire("minute", "m1", p, max_records=500, max_bytes=1 << 20)
    assert (missing.error, missing.acquired) == (Error.OFFSET_NOT_AVAILABLE, [])
    assert ShareStateKey("minute", TOPIC_ID, 0) not in manager.persister.states
    await append_at(broker, [broker.clock_ms()])  # offset 6
    found = await manager.acquire("minute", "m1", p, max_records=500, max_bytes=1 << 20)
    assert found.error is Error.NONE
    assert [(r.first_offset, r.last_offset) for r in found.acquired] == [(6, 6)]


async def test_a_groups_share_configs_apply_to_its_existing_share_partitions(
    manager, broker, autojump_clock
):
    """Kafka 4.4's SharePartition reads the group's share.record.lock.duration.ms,
    share.delivery.count.limit and share.renew.acknowledge.enable at each use (its
    ShareGroupConfigProvider), not once: changed while records are in flight, they apply
    from the next acknowledgement, acquisition and lock expiry on."""
    await produce(broker, 10)
    p = partition(broker)
    assert (await acquire(manager, broker, "m1")).acquired == [AcquiredRange(0, 9, 1)]
    broker.group_configs[GROUP] = {
        "share.auto.offset.reset": "earliest",
        "share.record.lock.duration.ms": "15000",
        "share.delivery.count.limit": "2",
        "share.renew.acknowledge.enable": "false",
    }
    # RENEW refused (Kafka: InvalidRecordStateException, "Renewing acquisition locks is not
    # enabled for the group."), nothing changed.
    renew = ack(0, 9, AcknowledgeType.RENEW)
    assert await manager.acknowledge(GROUP, "m1", p, renew) == Error.INVALID_RECORD_STATE
    release = ack(0, 9, AcknowledgeType.RELEASE)
    assert await manager.acknowledge(GROUP, "m1", p, release) == Error.NONE
    started = trio.current_time()
    assert (await acquire(manager, broker, "m1")).acquired == [AcquiredRange(0, 9, 2)]
    # The lock of the new acquisition is the group's 15 s, and at the group's limit of 2
    # deliveries its expiry archives the records: the start offset passes them.
    share = manager.share_partition(GROUP, TOPIC, 0)
    with trio.move_on_after(20):  # MockClock seconds; the broker's own lock is 30 s
        while share.start_offset < 10:
            await trio.sleep(0.5)
    assert share.start_offset == 10
    assert 15.0 <= trio.current_time() - started <= 16.0


@dataclass
class RacedPersister(RefusingPersister):
    """The group coordinator's InitializeShareGroupState (start offset -1, the group epoch 3)
    lands between the leader's first read (no state yet) and its own initialize."""

    raced: bool = False

    async def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> Error:
        if not self.raced:
            self.raced = True
            assert await InMemoryPersister.initialize(self, key, 3, -1) is Error.NONE
        return await RefusingPersister.initialize(self, key, state_epoch, start_offset)


async def test_a_state_initialized_by_the_group_coordinator_meanwhile_is_read_again(
    broker, nursery, autojump_clock
):
    """Before: the leader's initialize at epoch 0 was FENCED_STATE_EPOCH (the group epoch 3
    stored meanwhile) and the fetch answered FENCED_STATE_EPOCH, which librdkafka raises to the
    application. Now the state is read again and started at share.auto.offset.reset under
    the group coordinator's epoch."""
    persister = RacedPersister()
    shares = SharePartitionManager(broker.config, broker, persister)
    await nursery.start(shares.run)
    await produce(broker, 5)
    result = await acquire(shares, broker, "m1")
    assert result.error is Error.NONE
    assert result.acquired == [AcquiredRange(0, 4, 1)]
    state = persister.states[ShareStateKey(GROUP, TOPIC_ID, 0)]
    assert state.state_epoch == 3 and state.start_offset == 0
    assert persister.initializations == 2
