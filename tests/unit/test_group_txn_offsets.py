"""Transactional offset commits in the pure group state and in the replay of a
`__consumer_offsets` partition (Kafka's GroupMetadata pending transactional offsets and
GroupMetadataManager.doLoadGroupsAndOffsets), on hand-built batches."""

import struct

from minibroker.coordinator.group import log_format
from minibroker.coordinator.group.log_format import OffsetValue
from minibroker.coordinator.group.state import Group, GroupSettings, PartitionReplay
from minibroker.protocol.record_batch import (
    CONTROL_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
    scan_valid_batches,
)
from minibroker.protocol.records import Record, encode_batch

SETTINGS = GroupSettings(initial_rebalance_delay_ms=0)
T0 = ("t", 0)
T1 = ("t", 1)


def value(offset: int, at: int = 0) -> OffsetValue:
    return OffsetValue(offset, -1, "", at)


def empty_group() -> Group:
    return Group("g", SETTINGS, 0)


def txn_commit(group: Group, producer_id: int, offsets: dict, at: int) -> None:
    group.prepare_txn_offset_commit(producer_id, offsets)
    group.on_txn_offset_commit_append(producer_id, offsets, at)


def test_pending_offsets_are_invisible_until_the_commit_marker():
    group = empty_group()
    group.on_offset_commit_append({T0: value(5)}, 10)
    group.prepare_txn_offset_commit(7, {T0: value(9), T1: value(3)})
    # Pending from the moment it is prepared (before the write completes).
    assert group.has_pending_txn_offset(T0) and group.has_pending_offsets_from(7)
    group.on_txn_offset_commit_append(7, {T0: value(9), T1: value(3)}, 20)
    assert group.offsets == {T0: value(5)}
    assert group.complete_txn_offset_commit(7, commit=True) == 2
    assert group.offsets == {T0: value(9), T1: value(3)}
    assert not group.has_pending_offsets_from(7) and not group.has_pending_txn_offset(T0)


def test_an_abort_marker_drops_the_pending_offsets():
    group = empty_group()
    group.on_offset_commit_append({T0: value(5)}, 10)
    txn_commit(group, 7, {T0: value(9)}, 20)
    assert group.complete_txn_offset_commit(7, commit=False) == 0
    assert group.offsets == {T0: value(5)}
    assert group.pending_txn_offsets == {}


def test_a_later_plain_commit_wins_over_an_earlier_transactional_one():
    group = empty_group()
    txn_commit(group, 7, {T0: value(9), T1: value(4)}, 20)
    group.on_offset_commit_append({T0: value(11)}, 30)  # written after the txn's record
    group.complete_txn_offset_commit(7, commit=True)
    assert group.offsets == {T0: value(11), T1: value(4)}


def test_a_transactional_commit_written_later_wins_over_a_plain_one():
    group = empty_group()
    group.on_offset_commit_append({T0: value(5)}, 10)
    txn_commit(group, 7, {T0: value(9)}, 20)
    group.complete_txn_offset_commit(7, commit=True)
    assert group.offsets[T0] == value(9)


def test_a_failed_write_is_no_longer_pending_and_a_marker_applies_only_what_was_written():
    group = empty_group()
    replaced = group.prepare_txn_offset_commit(7, {T0: value(9)})
    group.fail_pending_txn_offset_commit(7, {T0: value(9)}, replaced)
    assert not group.has_pending_offsets_from(7)
    # A failed commit gives back the pending offset it replaced.
    txn_commit(group, 7, {T0: value(3)}, 20)
    replaced = group.prepare_txn_offset_commit(7, {T0: value(4)})
    group.fail_pending_txn_offset_commit(7, {T0: value(4)}, replaced)
    assert group.pending_txn_offsets[7][T0].value == value(3)
    assert group.pending_txn_offsets[7][T0].record_offset == 20
    group.complete_txn_offset_commit(7, commit=False)
    group.prepare_txn_offset_commit(8, {T0: value(9)})  # never written
    assert group.complete_txn_offset_commit(8, commit=True) == 0
    assert group.offsets == {}


def test_expiry_keeps_offsets_a_transaction_holds():
    group = empty_group()
    group.on_offset_commit_append({T0: value(5, at=0), T1: value(5, at=0)}, 10)
    txn_commit(group, 7, {T0: value(9)}, 20)
    assert group.expired_offsets(10**9, 1000) == [T1]
    group.complete_txn_offset_commit(7, commit=False)
    assert sorted(group.expired_offsets(10**9, 1000)) == [T0, T1]


def test_removed_offsets_take_the_pending_ones_with_them():
    group = empty_group()
    group.on_offset_commit_append({T0: value(5)}, 10)
    txn_commit(group, 7, {T0: value(9), T1: value(1)}, 20)
    group.remove_offsets([T0])
    assert group.offsets == {}
    assert group.pending_txn_keys() == {T1}
    group.remove_offsets([T1])
    assert group.pending_txn_offsets == {}


# -- replay of hand-built logs -------------------------------------------------------------------


class LogBuilder:
    """Batches as a leader would have written them, offsets assigned in order."""

    def __init__(self) -> None:
        self.data = b""
        self.next_offset = 0

    def _add(self, records, **batch) -> int:
        base = self.next_offset
        self.data += encode_batch(
            [Record(base + i, 1000, key, val) for i, (key, val) in enumerate(records)],
            base_offset=base,
            **batch,
        )
        self.next_offset += len(records)
        return base

    def commit(self, group: str, partition: tuple[str, int], offset: int | None) -> int:
        key = log_format.offset_key(group, *partition)
        val = None if offset is None else log_format.offset_value(value(offset, 1000))
        return self._add([(key, val)])

    def txn_commit(self, producer_id: int, group: str, offsets: dict) -> int:
        records = [
            (log_format.offset_key(group, *p), log_format.offset_value(value(o, 1000)))
            for p, o in offsets.items()
        ]
        return self._add(
            records,
            attributes=TRANSACTIONAL_FLAG_MASK,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=0,
        )

    def marker(self, producer_id: int, commit: bool) -> int:
        # Kafka's EndTransactionMarker: key version 0 + type, value version 0 + coordinator
        # epoch, in a batch with the transactional and control attributes.
        key = struct.pack(">hh", 0, 1 if commit else 0)
        val = struct.pack(">hi", 0, 5)
        return self._add(
            [(key, val)],
            attributes=TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK,
            producer_id=producer_id,
            producer_epoch=0,
        )

    def replay(self) -> PartitionReplay:
        replay = PartitionReplay()
        for start, header in scan_valid_batches(self.data):
            replay.batch(header, memoryview(self.data)[start : start + header.size])
        return replay


def loaded(replay: PartitionReplay, group_id: str = "g") -> Group:
    group = Group(group_id, SETTINGS, 0)
    replay.fill(group)
    return group


def test_a_committed_transaction_is_applied_and_an_aborted_one_dropped():
    log = LogBuilder()
    log.commit("g", T0, 5)
    log.txn_commit(7, "g", {T0: 9, T1: 2})
    log.txn_commit(8, "g", {T1: 100})
    log.marker(8, commit=False)
    log.marker(7, commit=True)
    group = loaded(log.replay())
    assert {k: v.offset for k, v in group.offsets.items()} == {T0: 9, T1: 2}
    assert group.pending_txn_offsets == {}


def test_a_transaction_without_its_marker_stays_pending_and_completes_later():
    log = LogBuilder()
    log.commit("g", T0, 5)
    at = log.txn_commit(7, "g", {T0: 9})
    replay = log.replay()
    group = loaded(replay)
    assert group.offsets[T0].offset == 5
    assert group.has_pending_offsets_from(7)
    assert group.pending_txn_offsets[7][T0].record_offset == at
    # The marker the transaction coordinator still sends completes it in memory.
    group.complete_txn_offset_commit(7, commit=True)
    assert group.offsets[T0].offset == 9


def test_replay_keeps_the_later_record_when_plain_and_transactional_commits_mix():
    log = LogBuilder()
    log.txn_commit(7, "g", {T0: 9})
    log.commit("g", T0, 11)  # after the transaction's record, before its marker
    log.marker(7, commit=True)
    assert loaded(log.replay()).offsets[T0].offset == 11


def test_a_group_with_only_pending_offsets_is_loaded_and_tombstones_drop_pending_ones():
    log = LogBuilder()
    log.txn_commit(7, "other", {T0: 1})
    log.txn_commit(7, "g", {T0: 9, T1: 4})
    log.commit("g", T0, None)  # OffsetDelete / DeleteGroups of T0
    replay = log.replay()
    assert replay.group_ids() == {"g", "other"}
    group = loaded(replay)
    assert group.pending_txn_keys() == {T1}
    log.marker(7, commit=True)
    replay = log.replay()
    assert {k: v.offset for k, v in loaded(replay).offsets.items()} == {T1: 4}
    assert loaded(replay, "other").offsets[T0].offset == 1


def test_control_record_key_types():
    assert log_format.read_control_type(struct.pack(">hh", 0, 1)) == log_format.CONTROL_COMMIT
    assert log_format.read_control_type(struct.pack(">hh", 0, 0)) == log_format.CONTROL_ABORT
