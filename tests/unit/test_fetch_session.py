"""The fetch session core (replication/fetch_session.py): Kafka's FetchSessionCache and
FetchManager rules, with time passed in (the cases of Kafka's FetchSessionTest)."""

import random

from minibroker.protocol.errors import Error
from minibroker.replication.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchManager,
    FetchSessionCache,
    PartitionRequest,
    next_epoch,
)

VERSION = 12


def req(offset=0, max_bytes=1024):
    return PartitionRequest(fetch_offset=offset, max_bytes=max_bytes)


def entry(index, hw=10, lso=0, records=b"", error=0):
    return {
        "partition_index": index,
        "error_code": error,
        "high_watermark": hw,
        "last_stable_offset": hw,
        "log_start_offset": lso,
        "preferred_read_replica": -1,
        "records": records,
    }


def manager(slots=10, eviction_ms=120_000):
    return FetchManager(FetchSessionCache(slots, eviction_ms, random.Random(1)))


def full(mgr, keys, now=0, privileged=False, version=VERSION, session_id=0, epoch=0):
    context = mgr.new_context(
        version=version,
        session_id=session_id,
        epoch=epoch,
        privileged=privileged,
        fetch_data=[(key, req()) for key in keys],
        to_forget=[],
        now_ms=now,
    )
    entries = [(key, entry(key[1])) for key, _ in context.partitions()]
    return context, context.respond(entries, now)


def incremental(mgr, session_id, epoch, fetch_data=(), to_forget=(), now=0, version=VERSION):
    return mgr.new_context(
        version=version,
        session_id=session_id,
        epoch=epoch,
        privileged=False,
        fetch_data=list(fetch_data),
        to_forget=list(to_forget),
        now_ms=now,
    )


def test_next_epoch_wraps_to_one_and_final_stays_final():
    assert next_epoch(0) == 1
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_full_fetch_creates_a_session_and_incremental_answers_only_changes():
    mgr = manager()
    keys = [("t", 0), ("t", 1), ("u", 0)]
    context, (error, session_id, sent) = full(mgr, keys)
    assert context.kind == "full" and error == Error.NONE and session_id != INVALID_SESSION_ID
    assert [key for key, _ in sent] == keys
    assert len(mgr.cache) == 1 and mgr.cache.total_partitions == 3

    # Epoch 1 with no partitions: the session's three are read; nothing changed.
    context = incremental(mgr, session_id, 1)
    assert context.kind == "incremental"
    assert [key for key, _ in context.partitions()] == keys
    unchanged = [(key, entry(key[1])) for key in keys]
    assert context.respond(unchanged, 0) == (Error.NONE, session_id, [])

    # Epoch 2: records on t-1, a new HW on u-0: both answered; t-1 rotates to the end.
    context = incremental(mgr, session_id, 2)
    changed = [
        (("t", 0), entry(0)),
        (("t", 1), entry(1, records=b"x" * 10)),
        (("u", 0), entry(0, hw=11)),
    ]
    error, _, sent = context.respond(changed, 0)
    assert [key for key, _ in sent] == [("t", 1), ("u", 0)]
    assert list(mgr.cache.get(session_id).partitions) == [("t", 0), ("u", 0), ("t", 1)]

    # The new HW was remembered: the same HW again is no change.
    context = incremental(mgr, session_id, 3)
    again = [(("t", 0), entry(0)), (("u", 0), entry(0, hw=11)), (("t", 1), entry(1))]
    assert context.respond(again, 0)[2] == []


def test_log_start_offset_error_preferred_replica_and_diverging_epoch_are_changes():
    cached = CachedPartition(req())
    cached.high_watermark, cached.local_log_start_offset = 10, 0
    assert not cached.must_respond(entry(0), update=True)
    assert cached.must_respond(entry(0, lso=5), update=True)
    assert not cached.must_respond(entry(0, lso=5), update=True)
    assert cached.must_respond(entry(0, lso=5, error=6), update=True)
    # An error forgets the HW, so the next good read is answered too.
    assert cached.must_respond(entry(0, lso=5), update=True)
    assert cached.must_respond({**entry(0, lso=5), "preferred_read_replica": 2}, update=True)
    diverging = {**entry(0, lso=5), "diverging_epoch": {"epoch": 3, "end_offset": 7}}
    assert cached.must_respond(diverging, update=True)


def test_incremental_adds_updates_and_forgets_partitions():
    mgr = manager()
    _, (_, session_id, _) = full(mgr, [("t", 0), ("t", 1)])
    context = incremental(
        mgr,
        session_id,
        1,
        fetch_data=[(("t", 2), req(5)), (("t", 0), req(7))],
        to_forget=[("t", 1), ("nope", 0)],
    )
    partitions = dict(context.partitions())
    assert list(partitions) == [("t", 0), ("t", 2)]
    assert partitions[("t", 0)].fetch_offset == 7
    assert mgr.cache.total_partitions == 2
    # A new partition is always answered once (its HW is unknown to the session).
    sent = context.respond([(k, entry(k[1])) for k in partitions], 0)[2]
    assert [k for k, _ in sent] == [("t", 2)]


def test_forgetting_every_partition_closes_the_session():
    mgr = manager()
    _, (_, session_id, _) = full(mgr, [("t", 0)])
    context = incremental(mgr, session_id, 1, to_forget=[("t", 0)])
    assert context.kind == "sessionless"
    assert mgr.cache.get(session_id) is None and mgr.cache.total_partitions == 0


def test_session_errors():
    mgr = manager()
    _, (_, session_id, _) = full(mgr, [("t", 0)])
    unknown = incremental(mgr, session_id + 1, 1)
    assert (unknown.kind, unknown.error) == ("error", Error.FETCH_SESSION_ID_NOT_FOUND)
    assert unknown.partitions() == []
    assert unknown.respond([], 0) == (Error.FETCH_SESSION_ID_NOT_FOUND, 0, [])
    stale = incremental(mgr, session_id, 5)
    assert (stale.kind, stale.error) == ("error", Error.INVALID_FETCH_SESSION_EPOCH)
    # The session is untouched by the bad requests: epoch 1 still works.
    switched = incremental(mgr, session_id, 1, version=13)
    assert (switched.kind, switched.error) == ("error", Error.FETCH_SESSION_TOPIC_ID_ERROR)
    assert incremental(mgr, session_id, 1).kind == "incremental"
    # A duplicate of the same epoch is then stale.
    assert incremental(mgr, session_id, 1).error == Error.INVALID_FETCH_SESSION_EPOCH


def test_a_concurrent_request_of_the_same_session_makes_the_first_answer_stale():
    mgr = manager()
    _, (_, session_id, _) = full(mgr, [("t", 0)])
    first = incremental(mgr, session_id, 1)
    second = incremental(mgr, session_id, 2)
    assert first.respond([(("t", 0), entry(0))], 0) == (
        Error.INVALID_FETCH_SESSION_EPOCH,
        session_id,
        [],
    )
    assert second.respond([(("t", 0), entry(0))], 0)[0] == Error.NONE


def test_final_epoch_closes_the_session_and_serves_sessionless():
    mgr = manager()
    _, (_, session_id, _) = full(mgr, [("t", 0)])
    context, (error, new_id, sent) = full(mgr, [("t", 0)], session_id=session_id, epoch=-1)
    assert context.kind == "sessionless" and new_id == INVALID_SESSION_ID and len(sent) == 1
    assert len(mgr.cache) == 0


def test_full_fetch_naming_a_session_replaces_it():
    mgr = manager()
    _, (_, first, _) = full(mgr, [("t", 0)])
    _, (_, second, _) = full(mgr, [("t", 0)], session_id=first, epoch=0)
    assert second != first and mgr.cache.get(first) is None and len(mgr.cache) == 1


def test_before_v7_there_are_no_sessions():
    mgr = manager()
    context, (_, session_id, _) = full(mgr, [("t", 0)], version=6)
    assert context.kind == "sessionless" and session_id == 0 and len(mgr.cache) == 0


def test_a_full_cache_evicts_a_session_idle_past_the_eviction_time():
    mgr = manager(slots=2, eviction_ms=1000)
    _, (_, a, _) = full(mgr, [("t", 0)] * 1, now=0)
    _, (_, b, _) = full(mgr, [("t", 0), ("t", 1)], now=500)
    # Full, nobody idle for more than 1000 ms, nobody evictable: no session.
    assert full(mgr, [("t", 0)] * 1, now=900)[1][1] == INVALID_SESSION_ID
    _, (_, c, _) = full(mgr, [("t", 5)], now=1001)
    assert c != INVALID_SESSION_ID and mgr.cache.get(a) is None and mgr.cache.get(b)
    assert mgr.cache.evictions == 1


def test_an_old_enough_smaller_session_is_evicted_by_a_bigger_one_not_a_smaller_one():
    mgr = manager(slots=2, eviction_ms=1000)
    _, (_, small, _) = full(mgr, [("t", 0), ("t", 1)], now=0)
    _, (_, big, _) = full(mgr, [("t", i) for i in range(5)], now=0)
    # Both are used again after the eviction time, so neither is idle past it, and both are
    # old enough to be evictable.
    for session_id in (small, big):
        incremental(mgr, session_id, 1, now=1500)
    assert full(mgr, [("u", 0)], now=1600)[1][1] == INVALID_SESSION_ID  # smaller than both
    _, (_, three, _) = full(mgr, [("u", i) for i in range(3)], now=1600)
    assert three != INVALID_SESSION_ID
    assert mgr.cache.get(small) is None and mgr.cache.get(big) is not None


def test_followers_evict_young_consumer_sessions_and_young_follower_sessions_stay():
    mgr = manager(slots=1, eviction_ms=1000)
    _, (_, consumer, _) = full(mgr, [("t", 0)], now=0)
    # A young consumer session: not evictable by another consumer, even a bigger one ...
    assert full(mgr, [("t", i) for i in range(9)], now=10)[1][1] == INVALID_SESSION_ID
    # ... but by a follower (privileged) at least as big.
    _, (_, follower, _) = full(mgr, [("t", 0), ("t", 1)], privileged=True, now=10)
    assert follower != INVALID_SESSION_ID and mgr.cache.get(consumer) is None
    # A young follower session is evictable by nobody.
    assert full(mgr, [("t", i) for i in range(9)], privileged=True, now=20)[1][1] == 0
    assert mgr.cache.get(follower) is not None and mgr.cache.evictions == 1


def test_a_zero_slot_cache_never_creates_sessions():
    mgr = manager(slots=0)
    assert full(mgr, [("t", 0)])[1][1] == INVALID_SESSION_ID


def test_the_fetching_side_sends_only_what_changed_and_starts_over_on_errors():
    from minibroker.replication.fetch_session import FetchSessionHandler

    handler = FetchSessionHandler()
    wanted = {("t", 0): 5, ("t", 1): 7}
    # No session yet: a full request (epoch 0) with everything.
    assert handler.build(wanted) == (0, 0, list(wanted.items()), [])
    handler.handle_response(0, 42)
    assert (handler.session_id, handler.epoch) == (42, 1)
    # Nothing changed: an empty incremental request.
    assert handler.build(wanted) == (42, 1, [], [])
    handler.handle_response(0, 42)
    # t-0 moved on, t-1 is no longer fetched, t-2 is new.
    changed = {("t", 0): 9, ("t", 2): 1}
    assert handler.build(changed) == (42, 2, [(("t", 0), 9), (("t", 2), 1)], [("t", 1)])
    handler.handle_response(0, 42)
    assert handler.build(changed) == (42, 3, [], [])
    # A session error: the next request is full again, naming the old session to replace.
    handler.handle_response(int(Error.FETCH_SESSION_ID_NOT_FOUND), 0)
    assert handler.build(changed) == (42, 0, list(changed.items()), [])
    # The leader had no room for a session: full requests go on.
    handler.handle_response(0, 0)
    assert handler.build(changed) == (0, 0, list(changed.items()), [])
    # A lost answer (reset) also starts over.
    handler.handle_response(0, 7)
    handler.build(changed)
    handler.reset()
    assert handler.build(changed)[1] == 0


def test_the_fetching_side_against_the_cache_keeps_one_session():
    """The follower's handler and the leader's manager, one request after another."""
    from minibroker.replication.fetch_session import FetchSessionHandler

    mgr = manager()
    handler = FetchSessionHandler()
    offsets = {("t", 0): 0, ("t", 1): 0}
    for step in range(5):
        session_id, epoch, send, forget = handler.build(
            {key: req(offset) for key, offset in offsets.items()}
        )
        context = mgr.new_context(
            version=12,
            session_id=session_id,
            epoch=epoch,
            privileged=True,
            fetch_data=send,
            to_forget=forget,
            now_ms=step,
        )
        assert context.kind in ("full", "incremental")
        read = [(key, entry(key[1], hw=step)) for key, _ in context.partitions()]
        error, answered_id, _ = context.respond(read, step)
        handler.handle_response(int(error), answered_id)
        offsets[("t", 0)] += 1
    assert len(mgr.cache) == 1 and handler.epoch == 5
