"""The `__share_group_state` records (coordinator/share/log_format.py), Kafka 4.4's layouts."""

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.coordinator.share.log_format import (
    SNAPSHOT,
    UPDATE,
    ShareRecordFormatError,
    ShareSnapshotValue,
    ShareStateKey,
    ShareUpdateValue,
    encode_key,
    encode_value,
    merge,
    read_key,
    read_value,
)
from minibroker.replication.share_partition import (
    Acknowledgement,
    AcknowledgeType,
    AutoOffsetReset,
    RecordState,
    SharePartition,
    ShareSettings,
    StateBatch,
)

TOPIC = uuid.UUID("0123456789abcdef0123456789abcdef")


def test_key_layout() -> None:
    key = ShareStateKey(UPDATE, "g", TOPIC, 7)
    data = encode_key(key)
    assert data == b"\x00\x01" + b"\x00\x01g" + TOPIC.bytes + b"\x00\x00\x00\x07"
    assert read_key(data) == key


def test_update_value_layout() -> None:
    value = ShareUpdateValue(3, 5, 100, (StateBatch(100, 109, RecordState.ACKNOWLEDGED, 1),))
    data = encode_value(value)
    assert data == (
        struct.pack(">hiiq", 0, 3, 5, 100)
        + b"\x02"  # compact array of one
        + struct.pack(">qqbh", 100, 109, 2, 1)
        + b"\x00"  # the batch's tagged fields
        + b"\x00"  # the value's tagged fields
    )
    assert read_value(UPDATE, data) == value


def test_delivery_complete_count_is_tagged_field_zero() -> None:
    value = ShareUpdateValue(0, 0, -1, (), delivery_complete_count=12)
    data = encode_value(value)
    assert data.endswith(b"\x01\x00\x04" + struct.pack(">i", 12))
    assert read_value(UPDATE, data) == value


def test_bad_input_is_refused() -> None:
    with pytest.raises(ShareRecordFormatError):
        read_key(b"\x00\x05\x00\x00")
    with pytest.raises(ShareRecordFormatError):
        read_value(SNAPSHOT, b"\x00\x00\x00")
    with pytest.raises(ShareRecordFormatError):
        read_value(UPDATE, b"\x00\x01" + b"\x00" * 20)
    # Delivery states are 0-4 (4.4's RecordState, ARCHIVING 3 included): 5 is none.
    bad_state = struct.pack(">hiiq", 0, 0, 0, 0) + b"\x02" + struct.pack(">qqbh", 0, 0, 5, 0)
    with pytest.raises(ShareRecordFormatError):
        read_value(UPDATE, bad_state + b"\x00\x00")


batches = st.lists(
    st.builds(
        StateBatch,
        st.integers(0, 2**40),
        st.integers(0, 2**40),
        st.sampled_from([RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED]),
        st.integers(0, 2**15 - 1),
    ),
    max_size=5,
).map(tuple)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(
    st.builds(ShareSnapshotValue, i32, i32, i32, i64, i64, i64, batches, i32)
    | st.builds(ShareUpdateValue, i32, i32, i64, batches, i32),
    st.text(max_size=20),
    i32,
)
def test_round_trip(value: ShareSnapshotValue | ShareUpdateValue, group: str, part: int) -> None:
    kind = SNAPSHOT if isinstance(value, ShareSnapshotValue) else UPDATE
    assert read_value(kind, encode_value(value)) == value
    key = ShareStateKey(kind, group, TOPIC, part)
    assert read_key(encode_key(key)) == key


def test_snapshot_plus_updates_rebuild_the_share_partition() -> None:
    """The failover rule through the records: the share partition's snapshot, then the
    batches each acknowledgement changed, merged as the share coordinator replays them,
    rebuild a share partition that offers again exactly what was not accepted."""
    cfg = ShareSettings(auto_offset_reset=AutoOffsetReset.EARLIEST)
    sp = SharePartition.initialize(cfg, None, 0, 20)
    sp.acquire("m", 10, [(0, 9)], 0)
    state = sp.snapshot()
    snap = ShareSnapshotValue(0, state.state_epoch, 1, state.start_offset, 0, 0, state.batches)
    changed = sp.acknowledge(
        "m",
        [
            Acknowledgement(0, 2, AcknowledgeType.ACCEPT),
            Acknowledgement(5, 5, AcknowledgeType.ACCEPT),
            Acknowledgement(6, 6, AcknowledgeType.REJECT),
        ],
        1,
    )
    update = ShareUpdateValue(0, 1, sp.start_offset, tuple(changed))
    merged = read_value(SNAPSHOT, encode_value(merge(snap, update)))
    assert isinstance(merged, ShareSnapshotValue)
    assert merged.start_offset == 3
    rebuilt = SharePartition.initialize(cfg, merged.state(), 0, 20)
    got = rebuilt.acquire("n", 100, [(3, 12)], 5)
    offered = {o for r in got for o in range(r.first_offset, r.last_offset + 1)}
    assert offered == {3, 4, 7, 8, 9, 10, 11, 12}
    assert {r.delivery_count for r in got if r.first_offset < 10} == {2}


# Bytes written by Kafka 4.4's generated classes (kafka-share-coordinator-4.4.0,
# MessageUtil.toVersionPrefixedBytes / toCoordinatorTypePrefixedBytes), with TOPIC as above.
KAFKA_SNAPSHOT = (
    "0000000000010000000200000003000000000000000a000000000000000b000000000000000c02"
    "000000000000000a000000000000000c0200010001000400000005"
)
KAFKA_UPDATE = "00000000000100000003ffffffffffffffff02000000000000000a000000000000000c0400050000"
KAFKA_SNAPSHOT_KEY = "00000001670123456789abcdef0123456789abcdef00000007"


def test_bytes_are_kafkas() -> None:
    snapshot = ShareSnapshotValue(
        1, 2, 3, 10, 11, 12, (StateBatch(10, 12, RecordState.ACKNOWLEDGED, 1),), 5
    )
    update = ShareUpdateValue(1, 3, -1, (StateBatch(10, 12, RecordState.ARCHIVED, 5),))
    assert encode_value(snapshot).hex() == KAFKA_SNAPSHOT
    assert encode_value(update).hex() == KAFKA_UPDATE
    assert encode_key(ShareStateKey(SNAPSHOT, "g", TOPIC, 7)).hex() == KAFKA_SNAPSHOT_KEY
    assert read_value(SNAPSHOT, bytes.fromhex(KAFKA_SNAPSHOT)) == snapshot
    assert read_value(UPDATE, bytes.fromhex(KAFKA_UPDATE)) == update


def _merge_per_offset(snapshot: ShareSnapshotValue, update: ShareUpdateValue) -> tuple:
    """The merge as it was written first, offset by offset: the reference the range merge
    must agree with."""
    start = update.start_offset if update.start_offset != -1 else snapshot.start_offset
    per_offset: dict[int, tuple[RecordState, int]] = {}
    for batch in snapshot.batches + update.batches:
        for offset in range(max(batch.first_offset, start), batch.last_offset + 1):
            per_offset[offset] = (batch.delivery_state, batch.delivery_count)
    merged: list[StateBatch] = []
    for offset in sorted(per_offset):
        state, count = per_offset[offset]
        last = merged[-1] if merged else None
        if (
            last
            and last.last_offset == offset - 1
            and (last.delivery_state, last.delivery_count)
            == (
                state,
                count,
            )
        ):
            merged[-1] = StateBatch(last.first_offset, offset, state, count)
        else:
            merged.append(StateBatch(offset, offset, state, count))
    return tuple(merged)


_batch = st.builds(
    lambda first, length, state, count: StateBatch(first, first + length, state, count),
    st.integers(0, 60),
    st.integers(0, 12),
    st.sampled_from(list(RecordState)),
    st.integers(0, 3),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_batch, max_size=8),
    st.lists(_batch, max_size=8),
    st.integers(0, 30),
    st.sampled_from([-1, 0, 10, 25, 80]),
)
def test_the_range_merge_agrees_with_a_merge_offset_by_offset(old, new, start, update_start):
    """Overlapping batches in either value, a later one winning, the start offset moving or
    not: the merge by range gives exactly the batches of the merge by offset."""
    snapshot = ShareSnapshotValue(0, 1, 1, start, 0, 0, tuple(old))
    update = ShareUpdateValue(0, 1, update_start, tuple(new))
    assert merge(snapshot, update).batches == _merge_per_offset(snapshot, update)


def test_a_large_batch_acknowledged_in_parts_splits_by_range():
    """A 10,000,000-offset batch acknowledged in two ranges gives three batches (by range:
    a merge offset by offset would build ten million entries for it)."""
    snapshot = ShareSnapshotValue(
        0, 1, 1, 0, 0, 0, (StateBatch(0, 9_999_999, RecordState.AVAILABLE, 1),)
    )
    update = ShareUpdateValue(
        0,
        1,
        -1,
        (
            StateBatch(0, 4_999_999, RecordState.ACKNOWLEDGED, 1),
            StateBatch(9_000_000, 9_999_999, RecordState.ARCHIVED, 1),
        ),
    )
    assert merge(snapshot, update).batches == (
        StateBatch(0, 4_999_999, RecordState.ACKNOWLEDGED, 1),
        StateBatch(5_000_000, 8_999_999, RecordState.AVAILABLE, 1),
        StateBatch(9_000_000, 9_999_999, RecordState.ARCHIVED, 1),
    )
