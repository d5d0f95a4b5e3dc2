"""Transactional offset commits through the group coordinator service in-process (the
harness of test_group_coordinator_service: real logs in tmp_path, MockClock): the offsets
are written as a transactional batch, stay pending until the marker listener the replica
manager calls on a COMMIT or ABORT marker, and come back pending or completed when the
partition is loaded again."""

import struct

import trio

from minibroker.coordinator.group.service import OFFSETS_TOPIC, CommitRequest, TxnCommitRequest
from minibroker.protocol.errors import Error
from minibroker.protocol.record_batch import (
    CONTROL_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
    scan_valid_batches,
)
from minibroker.protocol.records import Record, encode_batch
from tests.unit.test_group_coordinator_service import Broker, cluster_state, join_and_sync

PRODUCER = 4000
T0 = ("t", 0)


def txn_request(offset: int, producer_id=PRODUCER, epoch=0, generation=-1, member_id=""):
    return TxnCommitRequest(
        "g", producer_id, epoch, generation, member_id, None, {T0: (offset, -1, "m")}
    )


def marker(broker: Broker, producer_id: int, commit: bool) -> None:
    """What the replica manager does once a marker is appended as leader (helper S's
    WriteTxnMarkers path): tell every marker listener."""
    for listener in broker.replicas.marker_listeners:
        listener(OFFSETS_TOPIC, 0, producer_id, commit)


def committed(broker: Broker) -> int | None:
    error, offsets = broker.coordinator.fetch_offsets("g", [T0])
    assert error == Error.NONE
    found = offsets[T0]
    return None if found is None else found.offset


def offsets_log(broker: Broker):
    partition, error = broker.replicas.leader_partition(OFFSETS_TOPIC, 0)
    assert error == Error.NONE and partition is not None
    return partition.log


async def test_pending_offsets_become_visible_on_commit_and_vanish_on_abort(
    autojump_clock, tmp_path
):
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        assert await coordinator.commit(CommitRequest("g", -1, "", None, {T0: (5, -1, "")})) == {
            T0: Error.NONE
        }
        end = offsets_log(broker).log_end_offset
        assert await coordinator.commit_transactional_offsets(txn_request(9)) == {T0: Error.NONE}
        # The same producer again (its sequences are not checked on the coordinator's append).
        assert await coordinator.commit_transactional_offsets(txn_request(10)) == {T0: Error.NONE}
        assert offsets_log(broker).log_end_offset == end + 2
        data = offsets_log(broker).read(end, max_bytes=1 << 20)
        headers = [header for _, header in scan_valid_batches(data)]
        assert [(h.is_transactional, h.producer_id, h.producer_epoch) for h in headers] == [
            (True, PRODUCER, 0),
            (True, PRODUCER, 0),
        ]
        assert committed(broker) == 5
        assert coordinator.unstable_offsets("g") == {T0}
        marker(broker, PRODUCER, commit=True)
        assert committed(broker) == 10
        assert coordinator.unstable_offsets("g") == set()

        assert await coordinator.commit_transactional_offsets(
            txn_request(99, producer_id=PRODUCER + 1)
        ) == {T0: Error.NONE}
        assert coordinator.unstable_offsets("g") == {T0}
        marker(broker, PRODUCER + 1, commit=False)
        assert committed(broker) == 10
        assert coordinator.unstable_offsets("g") == set()
        # A marker of another partition or producer changes nothing.
        assert await coordinator.commit_transactional_offsets(txn_request(50)) == {T0: Error.NONE}
        for listener in broker.replicas.marker_listeners:
            listener("t", 0, PRODUCER, True)
        marker(broker, PRODUCER + 2, commit=True)
        assert committed(broker) == 10 and coordinator.unstable_offsets("g") == {T0}
        nursery.cancel_scope.cancel()
    broker.stop()


async def test_member_and_generation_checks_and_a_fenced_producer_epoch(autojump_clock, tmp_path):
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        member_id, generation = await join_and_sync(coordinator)
        stale = txn_request(1, generation=generation + 1, member_id=member_id)
        assert await coordinator.commit_transactional_offsets(stale) == {
            T0: Error.ILLEGAL_GENERATION
        }
        unknown = txn_request(1, generation=generation, member_id="nobody")
        assert await coordinator.commit_transactional_offsets(unknown) == {
            T0: Error.UNKNOWN_MEMBER_ID
        }
        # v0-v2 name no member: a producer commits to a group with members all the same.
        assert await coordinator.commit_transactional_offsets(txn_request(1)) == {T0: Error.NONE}
        good = txn_request(2, epoch=1, generation=generation, member_id=member_id)
        assert await coordinator.commit_transactional_offsets(good) == {T0: Error.NONE}
        # The producer's older epoch is fenced by the log.
        zombie = txn_request(3, epoch=0)
        assert await coordinator.commit_transactional_offsets(zombie) == {
            T0: Error.INVALID_PRODUCER_EPOCH
        }
        # The refused commit left nothing pending: the pending offset is still epoch 1's.
        pending = coordinator.groups["g"].pending_txn_offsets[PRODUCER][T0]
        assert pending.value.offset == 2 and pending.record_offset is not None
        nursery.cancel_scope.cancel()
    broker.stop()


def append_marker(broker: Broker, producer_id: int, commit: bool) -> None:
    """A marker as S's leader path writes it (Kafka's EndTransactionMarker control batch),
    put in the log directly since WriteTxnMarkers is not in this branch."""
    log = offsets_log(broker)
    base = log.log_end_offset
    batch = encode_batch(
        [Record(base, 0, struct.pack(">hh", 0, 1 if commit else 0), struct.pack(">hi", 0, 0))],
        base_offset=base,
        attributes=TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK,
        producer_id=producer_id,
        producer_epoch=0,
    )
    log.append_as_follower(batch, now_ms=0)


async def test_a_reloaded_partition_keeps_open_transactions_pending_and_applies_markers(
    autojump_clock, tmp_path
):
    state = cluster_state()
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, state)
        await broker.coordinator.commit(CommitRequest("g", -1, "", None, {T0: (5, -1, "")}))
        assert await broker.coordinator.commit_transactional_offsets(txn_request(9)) == {
            T0: Error.NONE
        }
        nursery.cancel_scope.cancel()
    broker.stop()

    restarted = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await restarted.start(nursery, state)
        assert committed(restarted) == 5
        assert restarted.coordinator.unstable_offsets("g") == {T0}
        # The marker the coordinator still sends completes what was loaded pending.
        append_marker(restarted, PRODUCER, commit=True)
        marker(restarted, PRODUCER, commit=True)
        assert committed(restarted) == 9
        assert restarted.coordinator.unstable_offsets("g") == set()
        nursery.cancel_scope.cancel()
    restarted.stop()

    again = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await again.start(nursery, state)
        assert committed(again) == 9
        assert again.coordinator.unstable_offsets("g") == set()
        nursery.cancel_scope.cancel()
    again.stop()


async def test_expiry_keeps_a_group_with_pending_offsets_and_deletion_drops_them(
    autojump_clock, tmp_path
):
    broker = Broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await broker.start(nursery, cluster_state())
        coordinator = broker.coordinator
        assert await coordinator.commit_transactional_offsets(txn_request(9)) == {T0: Error.NONE}
        await coordinator.expire_offsets(coordinator.clock_ms() + 10**12)
        assert "g" in coordinator.groups
        assert coordinator.unstable_offsets("g") == {T0}
        assert await coordinator.delete_group("g") == Error.NONE
        assert "g" not in coordinator.groups
        marker(broker, PRODUCER, commit=True)  # finds nothing to apply
        assert committed(broker) is None
        nursery.cancel_scope.cancel()
    broker.stop()
