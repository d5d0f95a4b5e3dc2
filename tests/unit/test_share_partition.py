"""The share partition (replication/share_partition.py): Kafka's SharePartition rules, pure."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.protocol.errors import Error
from minibroker.replication.share_partition import (
    Acknowledgement,
    AcknowledgeType,
    AcquiredRange,
    AutoOffsetReset,
    DeadLetterReason,
    InvalidRecordState,
    PersistedState,
    RecordState,
    SharePartition,
    ShareSettings,
    StateBatch,
)

LOCK = 30_000


def new(
    log_start: int = 0, log_end: int = 0, reset: AutoOffsetReset = AutoOffsetReset.EARLIEST, **kw
) -> SharePartition:
    return SharePartition.initialize(
        ShareSettings(auto_offset_reset=reset, **kw), None, log_start, log_end
    )


def ack(first: int, last: int, kind: AcknowledgeType) -> Acknowledgement:
    return Acknowledgement(first, last, kind)


def test_auto_offset_reset_latest_and_earliest() -> None:
    assert new(5, 100, AutoOffsetReset.LATEST).start_offset == 100
    assert new(5, 100, AutoOffsetReset.EARLIEST).start_offset == 5
    assert SharePartition.initialize(ShareSettings(), None, 5, 100).start_offset == 100


def test_acquire_gives_ranges_with_delivery_counts_and_locks() -> None:
    sp = new()
    got = sp.acquire("m1", 10, [(0, 4)], now_ms=1000)
    assert got == [AcquiredRange(0, 4, 1)]
    assert all(sp.state_of(o) is RecordState.ACQUIRED for o in range(5))
    assert sp.holder(3) == "m1"
    assert sp.end_offset == 5 and sp.next_fetch_offset() == 5
    assert sp.next_deadline() == 1000 + LOCK
    # A second member gets nothing of what m1 holds.
    assert sp.acquire("m2", 10, [(0, 4)], now_ms=1001) == []


def test_max_records_limits_an_acquisition() -> None:
    sp = new()
    assert sp.acquire("m1", 3, [(0, 9)], 0) == [AcquiredRange(0, 2, 1)]
    assert sp.next_fetch_offset() == 3
    assert sp.acquire("m2", 100, [(3, 9)], 0) == [AcquiredRange(3, 9, 1)]


def test_accept_advances_the_start_offset() -> None:
    sp = new()
    sp.acquire("m1", 10, [(0, 9)], 0)
    sp.acknowledge("m1", [ack(0, 3, AcknowledgeType.ACCEPT)], 1)
    assert sp.start_offset == 4
    assert sp.state_of(2) is None  # below the window: done
    sp.acknowledge("m1", [ack(6, 9, AcknowledgeType.ACCEPT)], 1)
    assert sp.start_offset == 4  # 4 and 5 still acquired
    sp.acknowledge("m1", [ack(4, 5, AcknowledgeType.REJECT)], 1)
    assert sp.start_offset == 10 == sp.end_offset


def test_release_makes_records_available_again_with_their_count() -> None:
    sp = new()
    sp.acquire("m1", 10, [(0, 4)], 0)
    sp.acknowledge("m1", [ack(1, 2, AcknowledgeType.RELEASE)], 1)
    assert sp.state_of(1) is RecordState.AVAILABLE and sp.holder(1) is None
    assert sp.next_fetch_offset() == 1
    assert sp.acquire("m2", 10, [(1, 4)], 2) == [AcquiredRange(1, 2, 2)]


def test_acknowledging_records_not_acquired_by_the_member_is_invalid_and_changes_nothing() -> None:
    sp = new()
    sp.acquire("m1", 5, [(0, 4)], 0)
    sp.acquire("m2", 5, [(5, 9)], 0)
    before = sp.snapshot()
    with pytest.raises(InvalidRecordState) as raised:
        sp.acknowledge(
            "m1", [ack(0, 1, AcknowledgeType.ACCEPT), ack(4, 5, AcknowledgeType.ACCEPT)], 1
        )
    assert raised.value.error is Error.INVALID_RECORD_STATE
    assert sp.snapshot() == before and sp.state_of(0) is RecordState.ACQUIRED
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("m1", [ack(20, 20, AcknowledgeType.ACCEPT)], 1)  # past the window
    sp.acknowledge("m1", [ack(0, 0, AcknowledgeType.ACCEPT)], 1)
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("m1", [ack(0, 0, AcknowledgeType.ACCEPT)], 1)  # twice


def test_lock_expiry_makes_records_available_and_late_acks_invalid() -> None:
    sp = new()
    sp.acquire("m1", 10, [(0, 2)], 0)
    assert sp.expire(LOCK - 1) == []
    assert sp.expire(LOCK) == [0, 1, 2]
    assert sp.state_of(0) is RecordState.AVAILABLE and sp.next_deadline() is None
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("m1", [ack(0, 0, AcknowledgeType.ACCEPT)], LOCK + 1)
    # acknowledge and acquire expire locks themselves: no separate expire() needed.
    sp.acquire("m2", 10, [(0, 2)], 2 * LOCK)
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("m2", [ack(0, 0, AcknowledgeType.ACCEPT)], 3 * LOCK)


def test_renew_restarts_the_lock_without_counting_a_delivery() -> None:
    sp = new()
    sp.acquire("m1", 10, [(0, 0)], 0)
    sp.acknowledge("m1", [ack(0, 0, AcknowledgeType.RENEW)], LOCK - 1)
    assert sp.expire(LOCK) == []
    assert sp.next_deadline() == 2 * LOCK - 1 and sp.delivery_count(0) == 1
    sp.acknowledge("m1", [ack(0, 0, AcknowledgeType.ACCEPT)], LOCK + 5)
    assert sp.start_offset == 1


def test_delivery_count_limit_archives_instead_of_offering_again() -> None:
    sp = new(delivery_count_limit=3)
    for attempt in range(1, 4):
        assert sp.acquire("m", 10, [(0, 0)], attempt * LOCK * 2) == [AcquiredRange(0, 0, attempt)]
        if attempt < 3:
            sp.acknowledge("m", [ack(0, 0, AcknowledgeType.RELEASE)], attempt * LOCK * 2)
    assert sp.expire(100 * LOCK) == [0]  # the third lock expires: limit reached
    assert sp.state_of(0) is None and sp.start_offset == 1
    letters = sp.take_dead_letters()
    assert [(d.offset, d.reason, d.delivery_count) for d in letters] == [
        (0, DeadLetterReason.DELIVERY_COUNT_LIMIT, 3)
    ]
    assert sp.take_dead_letters() == []


def test_reject_archives_and_is_a_dead_letter() -> None:
    sp = new()
    sp.acquire("m", 10, [(0, 1)], 0)
    sp.acknowledge("m", [ack(1, 1, AcknowledgeType.REJECT)], 1)
    assert sp.state_of(1) is RecordState.ARCHIVED
    assert [(d.offset, d.reason) for d in sp.dead_letters] == [(1, DeadLetterReason.REJECTED)]


def test_with_a_dlq_archived_records_stay_archiving_until_their_dlq_write() -> None:
    """KIP-1191 as Kafka 4.4's SharePartition runs it (recordStateWithDlq,
    initiateDLQAndArchive, maybeResumeDlqArchiving): with a DLQ a REJECTed record, and one
    whose lock expires at the delivery limit, go to ARCHIVING (persisted as DeliveryState 3),
    which holds the start offset back and is not counted complete; a new leader rebuilding
    from that state hands them to the DLQ again (at least once); the DLQ write done, they are
    ARCHIVED and the start offset moves past them."""
    sp = new(delivery_count_limit=2, dead_letter_queue=True)
    sp.acquire("m", 10, [(0, 2)], 0)
    changed = sp.acknowledge(
        "m", [ack(0, 0, AcknowledgeType.REJECT), ack(1, 1, AcknowledgeType.RELEASE)], 1
    )
    assert changed == [
        StateBatch(0, 0, RecordState.ARCHIVING, 1),
        StateBatch(1, 1, RecordState.AVAILABLE, 1),
    ]
    assert sp.acquire("m", 10, [(1, 2)], 2) == [AcquiredRange(1, 1, 2)]
    assert sp.expire(2 + LOCK) == [1, 2]  # 1 at the limit: ARCHIVING; 2 AVAILABLE again
    assert (sp.state_of(1), sp.state_of(2)) == (RecordState.ARCHIVING, RecordState.AVAILABLE)
    assert (sp.start_offset, sp.delivery_complete_count) == (0, 0)
    letters = sp.take_dead_letters()
    assert [(d.offset, d.reason, d.delivery_count) for d in letters] == [
        (0, DeadLetterReason.REJECTED, 1),
        (1, DeadLetterReason.DELIVERY_COUNT_LIMIT, 2),
    ]
    # The leader dies before the DLQ write: the next one has them ARCHIVING, as dead letters.
    persisted = sp.snapshot()
    assert persisted.batches[0] == StateBatch(0, 0, RecordState.ARCHIVING, 1)
    settings = ShareSettings(delivery_count_limit=2, dead_letter_queue=True)
    rebuilt = SharePartition.initialize(settings, persisted, 0, 3)
    assert rebuilt.state_of(0) is RecordState.ARCHIVING and rebuilt.start_offset == 0
    assert [(d.offset, d.reason) for d in rebuilt.take_dead_letters()] == [
        (0, DeadLetterReason.REJECTED),
        (1, DeadLetterReason.DELIVERY_COUNT_LIMIT),
    ]
    # ARCHIVING records are not acknowledged again, nor acquired.
    with pytest.raises(InvalidRecordState):
        rebuilt.acknowledge("m", [ack(0, 0, AcknowledgeType.ACCEPT)], 3)
    assert rebuilt.acquire("m", 10, [(0, 2)], 3) == [AcquiredRange(2, 2, 2)]
    # The DLQ write of 0 done: ARCHIVED, the start offset past it; then 1's.
    assert rebuilt.dead_letters_written([0]) == [StateBatch(0, 0, RecordState.ARCHIVED, 1)]
    assert (rebuilt.start_offset, rebuilt.delivery_complete_count) == (1, 0)
    assert rebuilt.dead_letters_written([1, 0]) == [StateBatch(1, 1, RecordState.ARCHIVED, 2)]
    assert rebuilt.start_offset == 2
    # Without a DLQ the same records are ARCHIVED at once (share.version 1's rule).
    plain = new(delivery_count_limit=2)
    plain.acquire("m", 10, [(0, 0)], 0)
    plain.acknowledge("m", [ack(0, 0, AcknowledgeType.REJECT)], 1)
    assert (plain.state_of(0), plain.start_offset) == (None, 1)


def test_max_record_locks_bounds_the_window_but_not_redelivery() -> None:
    sp = new(max_record_locks=4)
    assert sp.acquire("m", 100, [(0, 9)], 0) == [AcquiredRange(0, 3, 1)]
    assert not sp.can_acquire() and sp.acquire("m2", 100, [(4, 9)], 0) == []
    sp.acknowledge("m", [ack(2, 2, AcknowledgeType.RELEASE)], 1)
    assert sp.can_acquire()
    assert sp.acquire("m2", 100, [(2, 9)], 1) == [AcquiredRange(2, 2, 2)]
    sp.acknowledge("m", [ack(0, 1, AcknowledgeType.ACCEPT)], 2)
    assert sp.acquire("m2", 100, [(4, 9)], 2) == [AcquiredRange(4, 5, 1)]


def test_the_in_flight_limit_bounds_what_an_acquisition_asks_for_not_whole_batches() -> None:
    """Kafka 4.4's SharePartition.lastOffsetAndMaxRecordsToAcquire and
    acquireNewBatchRecords: an acquisition asks for min(max_records, limit - in flight)
    records; batch_optimized rounds that up to the end of the log batch it ends in, past the
    limit; the next acquisition finds no room and takes nothing new until the start offset
    moves."""
    sp = new(max_record_locks=4)
    # Batches of 10 and 5 records: 2 asked for, the whole first batch taken.
    got = sp.acquire("m", 2, [(0, 9), (10, 14)], 0, batch_optimized=True)
    assert got == [AcquiredRange(0, 9, 1)]
    assert sp.in_flight == 10 and not sp.can_acquire()
    assert sp.acquire("m2", 100, [(10, 14)], 0, batch_optimized=True) == []
    sp.acknowledge("m", [ack(0, 8, AcknowledgeType.ACCEPT)], 1)
    # One record in flight, room for 3: rounded up to the end of the 5-record batch.
    assert sp.acquire("m2", 100, [(10, 14)], 1, batch_optimized=True) == [AcquiredRange(10, 14, 1)]
    assert sp.in_flight == 6
    # record_limit takes exactly min(max_records, room).
    exact = new(max_record_locks=4)
    assert exact.acquire("m", 100, [(0, 9)], 0) == [AcquiredRange(0, 3, 1)]


def test_without_room_only_available_records_of_the_window_are_acquired() -> None:
    """Kafka's rule, also with room: the count is min(max_records, limit - in flight), and
    AVAILABLE records of the window come first: records released in a full window are
    acquired again, none past its end."""
    sp = new(max_record_locks=8)
    sp.acquire("m", 8, [(0, 19)], 0)
    sp.acknowledge("m", [ack(0, 1, AcknowledgeType.RELEASE)], 1)
    assert sp.in_flight == 8
    # No room: the released records only, though the batch read goes on to 19.
    assert sp.acquire("m2", 100, [(0, 19)], 2, batch_optimized=True) == [AcquiredRange(0, 1, 2)]
    assert sp.end_offset == 8
    sp.acknowledge("m", [ack(2, 3, AcknowledgeType.ACCEPT)], 3)
    sp.acknowledge("m2", [ack(0, 1, AcknowledgeType.ACCEPT)], 3)
    sp.acknowledge("m", [ack(4, 4, AcknowledgeType.RELEASE)], 3)
    # Start 4, end 8: room for 4, of which the released record 4 takes 1.
    assert sp.acquire("m2", 100, [(4, 19)], 4) == [
        AcquiredRange(4, 4, 2),
        AcquiredRange(8, 10, 1),
    ]


def test_a_batch_acquired_and_accepted_in_one_range_costs_one_run() -> None:
    """The window is kept by offset range (Kafka's InFlightBatch): 100,000 records acquired,
    partly released, accepted and redelivered are a handful of runs, not a state per
    record."""
    sp = new(max_record_locks=200_000)
    assert sp.acquire("m", 100_000, [(0, 99_999)], 0) == [AcquiredRange(0, 99_999, 1)]
    assert len(sp.clone()._runs) == 1
    sp.acknowledge("m", [ack(10, 19, AcknowledgeType.RELEASE)], 1)
    assert len(sp._runs) == 3
    assert sp.acquire("n", 10, [(10, 99_999)], 2) == [AcquiredRange(10, 19, 2)]
    sp.acknowledge(
        "m", [ack(0, 9, AcknowledgeType.ACCEPT), ack(20, 99_999, AcknowledgeType.ACCEPT)], 3
    )
    assert sp.start_offset == 10 and len(sp._runs) == 2
    assert sp.state_batches() == [
        StateBatch(10, 19, RecordState.AVAILABLE, 2),
        StateBatch(20, 99_999, RecordState.ACKNOWLEDGED, 1),
    ]
    sp.acknowledge("n", [ack(10, 19, AcknowledgeType.ACCEPT)], 4)
    assert sp.start_offset == sp.end_offset == 100_000 and sp._runs == []


def test_offsets_the_log_did_not_return_are_gaps() -> None:
    sp = new()
    # Offsets 3 and 4 are transaction markers or compacted away.
    assert sp.acquire("m", 100, [(0, 2), (5, 6)], 0) == [
        AcquiredRange(0, 2, 1),
        AcquiredRange(5, 6, 1),
    ]
    assert sp.state_of(3) is None
    sp.acknowledge("m", [ack(0, 2, AcknowledgeType.ACCEPT), ack(5, 6, AcknowledgeType.ACCEPT)], 1)
    assert sp.start_offset == 7
    sp2 = new()
    sp2.acquire("m", 100, [(0, 2), (5, 6)], 0)
    sp2.acknowledge("m", [ack(0, 6, AcknowledgeType.GAP)], 1)  # GAP may span non-records
    assert sp2.start_offset == 7


def test_release_member_frees_what_it_holds() -> None:
    sp = new()
    sp.acquire("m1", 2, [(0, 5)], 0)
    sp.acquire("m2", 2, [(2, 5)], 0)
    assert sp.release_member("m1") == [0, 1]
    assert sp.holder(2) == "m2" and sp.next_fetch_offset() == 0


def test_log_start_offset_moving_drops_records() -> None:
    sp = new()
    sp.acquire("m", 10, [(0, 9)], 0)
    sp.update_log_start_offset(6)
    assert sp.start_offset == 6 and sp.state_of(5) is None and sp.holder(6) == "m"


def test_state_batches_coalesce_and_rebuild() -> None:
    sp = new(delivery_count_limit=5)
    sp.acquire("m", 10, [(0, 9)], 0)
    sp.acknowledge(
        "m",
        [
            ack(1, 3, AcknowledgeType.ACCEPT),
            ack(4, 4, AcknowledgeType.REJECT),
            ack(5, 6, AcknowledgeType.RELEASE),
        ],
        1,
    )
    state = sp.snapshot()
    assert state == PersistedState(
        0,
        0,
        (
            StateBatch(0, 0, RecordState.AVAILABLE, 1),
            StateBatch(1, 3, RecordState.ACKNOWLEDGED, 1),
            StateBatch(4, 4, RecordState.ARCHIVED, 1),
            StateBatch(5, 9, RecordState.AVAILABLE, 1),
        ),
    )
    rebuilt = SharePartition.initialize(ShareSettings(), state, 0, 10)
    assert rebuilt.start_offset == 0 and rebuilt.end_offset == 10
    got = rebuilt.acquire("n", 100, [(0, 12)], 5)
    assert got == [
        AcquiredRange(0, 0, 2),
        AcquiredRange(5, 9, 2),
        AcquiredRange(10, 12, 1),
    ]


def test_rebuild_archives_available_records_at_the_limit() -> None:
    state = PersistedState(3, 2, (StateBatch(3, 4, RecordState.AVAILABLE, 5),))
    sp = SharePartition.initialize(ShareSettings(delivery_count_limit=5), state, 0, 10)
    assert sp.start_offset == 5 and sp.state_epoch == 2


def test_acknowledge_returns_the_changed_batches() -> None:
    sp = new()
    sp.acquire("m", 10, [(0, 9)], 0)
    changed = sp.acknowledge(
        "m", [ack(2, 3, AcknowledgeType.ACCEPT), ack(7, 7, AcknowledgeType.RELEASE)], 1
    )
    assert changed == [
        StateBatch(2, 3, RecordState.ACKNOWLEDGED, 1),
        StateBatch(7, 7, RecordState.AVAILABLE, 1),
    ]


# -- properties: random schedules of acquisitions, acknowledgements, expiries, failovers --

MEMBERS = ("a", "b", "c")
LOG_END = 40
LIMIT = 3
BATCH = 5

step = st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 12), st.booleans()),
    st.tuples(
        st.just("ack"),
        st.sampled_from(MEMBERS),
        st.sampled_from(list(AcknowledgeType)),
        st.integers(0, 11),
    ),
    st.tuples(st.just("tick"), st.integers(0, LOCK * 2)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("failover")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=60), st.integers(2, 50))
def test_no_accepted_record_is_delivered_again_and_none_is_lost(
    steps: list[tuple[object, ...]], max_locks: int
) -> None:
    """The share group's guarantees under any schedule: a record whose acceptance was
    acknowledged (and persisted) is never delivered again; no delivery count passes the
    limit; an acquired record is held by one member; every record below the start offset was
    accepted or archived; the persisted state rebuilds to the same window."""
    cfg = ShareSettings(
        delivery_count_limit=LIMIT,
        max_record_locks=max_locks,
        auto_offset_reset=AutoOffsetReset.EARLIEST,
    )
    sp = SharePartition.initialize(cfg, None, 0, LOG_END)
    now = 0
    held: dict[str, list[int]] = {m: [] for m in MEMBERS}
    accepted: set[int] = set()
    archived: set[int] = set()
    for s in steps:
        if s[0] == "acquire":
            member, n, whole = str(s[1]), int(s[2]), bool(s[3])  # type: ignore[call-overload]
            start = sp.next_fetch_offset()
            # The log's batches: offsets 5k to 5k + 4 (the first one cut at the fetch offset).
            fetched = [
                (max(first, start), min(first + BATCH - 1, LOG_END - 1))
                for first in range(start - start % BATCH, LOG_END, BATCH)
            ]
            before, end_before = sp.in_flight, sp.end_offset
            got = sp.acquire(member, n, fetched, now, batch_optimized=whole)
            total = 0
            for r in got:
                assert r.delivery_count <= LIMIT
                for o in range(r.first_offset, r.last_offset + 1):
                    assert o not in accepted and o not in archived, o
                    held[member].append(o)
                    total += 1
            if whole:
                # Whole log batches: past n and the limit by less than a batch.
                assert total < n + BATCH and sp.in_flight < max_locks + BATCH
                if sp.end_offset > end_before:  # new records: up to a batch's end
                    assert sp.end_offset % BATCH == 0 or sp.end_offset == LOG_END
            else:
                assert total <= n and sp.in_flight <= max(max_locks, before)
        elif s[0] == "ack":
            member, kind, i = str(s[1]), AcknowledgeType(s[2]), int(s[3])  # type: ignore[call-overload]
            mine = [o for o in held[member] if sp.holder(o) == member]
            if not mine:
                continue
            o = mine[i % len(mine)]
            sp.acknowledge(member, [Acknowledgement(o, o, kind)], now)
            if kind is AcknowledgeType.ACCEPT:
                accepted.add(o)
            elif kind in (AcknowledgeType.REJECT, AcknowledgeType.GAP):
                archived.add(o)
        elif s[0] == "tick":
            now += int(s[1])  # type: ignore[call-overload]
            sp.expire(now)
        elif s[0] == "leave":
            sp.release_member(str(s[1]))
        else:
            state = sp.snapshot()
            sp = SharePartition.initialize(cfg, state, 0, LOG_END)
            assert sp.snapshot() == state or all(
                b.delivery_state is not RecordState.ACQUIRED for b in state.batches
            )
        for d in sp.take_dead_letters():
            archived.add(d.offset)
        # Invariants.
        for o in range(sp.start_offset, sp.end_offset):
            st_ = sp.state_of(o)
            assert st_ is not None
            assert sp.delivery_count(o) <= LIMIT
            if st_ is RecordState.ACQUIRED:
                assert sp.holder(o) is not None
            else:
                assert sp.holder(o) is None
            if o in accepted:
                assert st_ is RecordState.ACKNOWLEDGED
            if st_ is RecordState.ACKNOWLEDGED:
                assert o in accepted
        assert sp.start_offset == sp.end_offset or sp.state_of(sp.start_offset) in (
            RecordState.AVAILABLE,
            RecordState.ACQUIRED,
        )
        for o in range(0, sp.start_offset):
            assert o in accepted or o in archived, o
