"""The log cleaner (storage/cleaner.py) on real partition logs in a temporary directory."""

import os
import time
from dataclasses import replace

import pytest

from minibroker.protocol.record_batch import COMPRESSION_CODEC_MASK, read_header
from minibroker.protocol.records import (
    DELETE_HORIZON_FLAG,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    Record,
    decode_records,
    encode_batch,
)
from minibroker.storage.cleaner import (
    Cleaning,
    CleaningAborted,
    clean_log,
    grab_filthiest,
    log_to_clean,
)
from minibroker.storage.log import LogConfig, PartitionLog
from minibroker.storage.log_manager import LogManager
from minibroker.storage.segment import LogSegment

T0 = 1_700_000_000_000
DAY = 86_400_000


def open_log(path, **config):
    config.setdefault("cleanup_policy", "compact")
    config.setdefault("min_cleanable_dirty_ratio", 0.01)
    return PartitionLog.open(
        path / "compacted-0", LogConfig(**config), now_ms=T0, needs_recovery=False
    )


def reopen(partition_log, *, needs_recovery=True):
    return PartitionLog.open(
        partition_log.directory, partition_log.config, now_ms=T0, needs_recovery=needs_recovery
    )


def produce(partition_log, pairs, *, codec=NONE, timestamp=T0, producer=None):
    records = [Record(i, timestamp + i, key, value) for i, (key, value) in enumerate(pairs)]
    producer_fields = {}
    if producer is not None:
        producer_id, sequence = producer
        producer_fields = {
            "producer_id": producer_id,
            "producer_epoch": 0,
            "base_sequence": sequence,
        }
    batch = encode_batch(records, codec=codec, **producer_fields)
    return partition_log.append_as_leader(batch, leader_epoch=3, now_ms=timestamp)


def stored_batches(partition_log):
    """(header, batch bytes) of every stored batch, in order."""
    data = partition_log.read(partition_log.log_start_offset, max_bytes=1 << 30)
    out = []
    position = 0
    while position < len(data):
        header = read_header(data, position)
        out.append((header, data[position : position + header.size]))
        position += header.size
    return out


def records_of(partition_log):
    return [
        (record.offset, record.key, record.value)
        for _, batch in stored_batches(partition_log)
        for record in decode_records(batch)
    ]


def clean(partition_log, now_ms=T0, upper_bound=None):
    bound = partition_log.log_end_offset if upper_bound is None else upper_bound
    return clean_log(log_to_clean(partition_log, bound, now_ms), now_ms)


def updates(partition_log, rounds, keys=(b"a", b"b", b"c"), **kwargs):
    """One single-record batch per update: value = key + round."""
    for round_number in range(rounds):
        for key in keys:
            produce(partition_log, [(key, key + b"%d" % round_number)], **kwargs)


def roomy(partition_log):
    """Let the cleaner put every segment into one group (segment.bytes raised after the
    segments were written small)."""
    partition_log.config = replace(partition_log.config, segment_bytes=10**6)


def small_segments(batches_per_segment=3):
    size = len(encode_batch([Record(0, T0, b"a", b"a0")]))
    return size * batches_per_segment


def test_only_the_latest_record_per_key_stays_with_its_offset(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments())
    updates(log, 10)  # offsets 0..29, three batches per segment
    produce(log, [(b"z", b"active")])  # the active segment is never cleaned
    before = records_of(log)
    roomy(log)
    stats = clean(log)
    after = records_of(log)
    latest = {key: (offset, key, value) for offset, key, value in before if offset < 30}
    assert after == sorted(latest.values()) + [(30, b"z", b"active")]
    assert [offset for offset, _, _ in after] == [27, 28, 29, 30]
    assert stats.bytes_reclaimed > 0 and stats.records_written == 3
    # The next round starts where this one stopped, and cleaned groups became one segment.
    assert log.first_dirty_offset == 30
    assert log.segment_count == 2
    assert not [p for p in log.directory.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    # Reads and recovery agree with the cleaned files.
    assert records_of(reopen(log)) == after


def test_reads_inside_a_removed_range_start_at_the_next_batch(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments())
    updates(log, 4)
    produce(log, [(b"z", b"z")])
    clean(log)
    for offset in range(0, 9):
        first = read_header(log.read(offset, max_bytes=10_000))
        assert first.base_offset == 9  # the first batch kept
    assert read_header(log.read(10, max_bytes=10_000)).base_offset == 10
    # Offsets still count from the same start: nothing below offset 9 is out of range.
    assert log.log_start_offset == 0


def test_nothing_at_or_past_the_upper_bound_is_cleaned(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments())
    updates(log, 6)  # 18 records, segments at 0, 3, 6, ... 15
    produce(log, [(b"z", b"z")])
    # A high watermark of 7 lies in the segment [6, 9): only [0, 6) may be cleaned.
    to_clean = log_to_clean(log, 7, T0)
    assert to_clean.first_uncleanable_offset == 6
    clean_log(to_clean, T0)
    offsets = [offset for offset, _, _ in records_of(log)]
    assert offsets == list(range(3, 19))  # a, b, c at 0..2 superseded by 3..5
    assert log.first_dirty_offset == 6


def test_keyless_records_are_dropped(tmp_path):
    # Written before the topic compacted (a producer's keyless record to a compacted topic
    # is refused: LogValidator.validateKey), then cleanup.policy changed to compact.
    log = open_log(tmp_path, segment_bytes=small_segments(), cleanup_policy="delete")
    produce(log, [(None, b"no key")])
    log.config = replace(log.config, cleanup_policy="compact")
    produce(log, [(b"a", b"a")])
    produce(log, [(b"b", b"b")])
    produce(log, [(b"z", b"z")])
    stats = clean(log)
    assert [offset for offset, _, _ in records_of(log)] == [1, 2, 3]
    assert stats.records_without_key == 1


def test_tombstones_stay_until_delete_retention_passes_then_go(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments(), delete_retention_ms=DAY)
    produce(log, [(b"a", b"a0")])
    produce(log, [(b"a", None)])  # tombstone
    produce(log, [(b"b", b"b0")])
    produce(log, [(b"z", b"z")])  # rolls: [0, 3) is cleanable
    clean(log, now_ms=T0)
    assert records_of(log)[:2] == [(1, b"a", None), (2, b"b", b"b0")]
    tombstone_batch = stored_batches(log)[0][0]
    assert tombstone_batch.attributes & DELETE_HORIZON_FLAG
    assert tombstone_batch.base_timestamp == T0 + DAY  # the delete horizon
    # Its record keeps its own timestamp.
    assert decode_records(stored_batches(log)[0][1])[0].timestamp == T0

    def more_dirt(round_number):
        produce(log, [(b"y", b"y%d" % round_number)])
        produce(log, [(b"y", b"y%d" % round_number)])
        produce(log, [(b"x", b"x")])  # rolls again

    more_dirt(1)
    clean(log, now_ms=T0 + DAY - 1)
    assert (1, b"a", None) in records_of(log)
    more_dirt(2)
    clean(log, now_ms=T0 + DAY)
    assert all(key != b"a" for _, key, _ in records_of(log))


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed_batches_are_rewritten_with_their_codec(tmp_path, codec):
    log = open_log(tmp_path, segment_bytes=10**6)
    produce(log, [(b"a", b"a1"), (b"b", b"b1"), (b"c", b"c1")], codec=codec)
    produce(log, [(b"a", b"a2")], codec=codec)
    log._roll(log.log_end_offset)
    produce(log, [(b"z", b"z")], codec=codec)
    clean(log)
    (first, first_bytes), (second, second_bytes), _ = stored_batches(log)
    assert first.attributes & COMPRESSION_CODEC_MASK == codec
    assert (first.base_offset, first.last_offset, first.records_count) == (0, 2, 2)
    assert first.partition_leader_epoch == 3
    assert [(r.offset, r.key, r.value) for r in decode_records(first_bytes)] == [
        (1, b"b", b"b1"),
        (2, b"c", b"c1"),
    ]
    # A batch whose records all stay is copied as it was.
    assert second.attributes & COMPRESSION_CODEC_MASK == codec
    assert [(r.offset, r.value) for r in decode_records(second_bytes)] == [(3, b"a2")]


def test_an_idempotent_producers_last_batch_stays_as_an_empty_batch(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments())
    produce(log, [(b"a", b"a0")], producer=(7, 0))
    produce(log, [(b"a", b"a1")], producer=(7, 1))
    produce(log, [(b"a", b"a2")])  # supersedes producer 7's last record
    produce(log, [(b"z", b"z")])
    clean(log)
    headers = [header for header, _ in stored_batches(log)]
    assert [(h.base_offset, h.records_count, h.producer_id) for h in headers] == [
        (1, 0, 7),  # header only: producer 7's last sequence survives
        (2, 1, -1),
        (3, 1, -1),
    ]
    assert headers[0].base_sequence == 1
    entry = reopen(log).producer_state.entry(7)
    assert entry is not None and entry.last_sequence == 1


def test_the_dirtiest_log_due_is_picked(tmp_path):
    quiet = open_log(
        tmp_path / "quiet", segment_bytes=small_segments(), min_cleanable_dirty_ratio=0.5
    )
    produce(quiet, [(b"z", b"z")])
    assert grab_filthiest([(quiet, quiet.log_end_offset)], T0) is None  # nothing but active
    busy = open_log(
        tmp_path / "busy", segment_bytes=small_segments(), min_cleanable_dirty_ratio=0.5
    )
    updates(busy, 3)
    produce(busy, [(b"z", b"z")])
    picked = grab_filthiest([(quiet, 1), (busy, busy.log_end_offset)], T0)
    assert picked is not None and picked.log is busy and picked.cleanable_ratio == 1.0
    clean_log(picked, T0)
    # Everything below the active segment is clean now: not due again.
    assert grab_filthiest([(busy, busy.log_end_offset)], T0) is None
    # Nothing is picked for a topic that does not compact.
    busy.config = LogConfig(segment_bytes=small_segments())
    busy.first_dirty_offset = 0
    assert grab_filthiest([(busy, busy.log_end_offset)], T0) is None


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments(), min_compaction_lag_ms=DAY)
    updates(log, 2, timestamp=T0)
    updates(log, 2, timestamp=T0 + DAY)
    produce(log, [(b"z", b"z")], timestamp=T0 + DAY)
    # At T0 + DAY + 1 only the two segments written at T0 are old enough.
    to_clean = log_to_clean(log, log.log_end_offset, T0 + DAY + 1)
    assert to_clean.first_uncleanable_offset == 6


def test_max_compaction_lag_forces_a_cleaning_below_the_ratio(tmp_path):
    log = open_log(
        tmp_path,
        segment_bytes=small_segments(),
        min_cleanable_dirty_ratio=1.0,
        max_compaction_lag_ms=DAY,
    )
    updates(log, 2)
    produce(log, [(b"z", b"z")])
    assert grab_filthiest([(log, log.log_end_offset)], T0 + DAY) is None
    assert grab_filthiest([(log, log.log_end_offset)], T0 + DAY + 10) is not None


def test_a_truncation_during_a_cleaning_aborts_it_and_leaves_nothing(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments())
    updates(log, 4)
    produce(log, [(b"z", b"z")])
    roomy(log)
    cleaning = Cleaning(log_to_clean(log, log.log_end_offset, T0), T0, max_map_entries=100)
    cleaning.build_offset_map()
    (group,) = cleaning.groups()
    log.truncate_to(7)
    with pytest.raises(CleaningAborted):
        cleaning.clean_group(group)
    assert not [p for p in log.directory.iterdir() if ".cleaned" in p.name]


def test_a_swap_refuses_segments_retention_already_deleted(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments())
    updates(log, 4)
    produce(log, [(b"z", b"z")])
    roomy(log)
    cleaning = Cleaning(log_to_clean(log, log.log_end_offset, T0), T0, max_map_entries=100)
    cleaning.build_offset_map()
    (group,) = cleaning.groups()
    cleaned = cleaning.clean_group(group)
    log.maybe_increment_log_start_offset(3)
    log.delete_segments_by_retention(T0)
    assert not log.replace_segments(cleaned, group)
    assert not cleaned.log_path.exists()
    assert records_of(log)[0][0] == 3


def test_a_full_offset_map_cleans_what_it_mapped_and_leaves_the_rest_dirty(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments())
    updates(log, 4)  # 12 records
    produce(log, [(b"z", b"z")])
    to_clean = log_to_clean(log, log.log_end_offset, T0)
    clean_log(to_clean, T0, max_map_entries=2)
    # Keys a, b mapped from offsets 0..1 and their later versions... the map stopped at c.
    assert log.first_dirty_offset == 2
    assert [offset for offset, _, _ in records_of(log)][:2] == [0, 1]
    clean(log)  # the next rounds get further
    clean(log)
    assert log.first_dirty_offset == 12


class Crash(Exception):
    pass


def _crash_on(monkeypatch, method, call_number, predicate=lambda *args, **kwargs: True):
    original = getattr(LogSegment, method)
    calls = []

    def failing(self, *args, **kwargs):
        if predicate(*args, **kwargs):
            calls.append(1)
            if len(calls) == call_number:
                raise Crash(method)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LogSegment, method, failing)


@pytest.mark.parametrize(
    "stage",
    [
        "before the .swap rename",
        "half-way through the .swap rename",
        "after the .swap rename",
        "after deleting one old segment",
        "after deleting every old segment",
        "during the final rename",
    ],
)
def test_a_crash_in_the_middle_of_a_swap_recovers(tmp_path, monkeypatch, stage):
    log = open_log(tmp_path, segment_bytes=small_segments())
    updates(log, 4)  # segments [0,3) [3,6) [6,9) [9,12), then the active one
    produce(log, [(b"z", b"z")])
    before = records_of(log)
    roomy(log)
    cleaning = Cleaning(log_to_clean(log, log.log_end_offset, T0), T0, max_map_entries=100)
    cleaning.build_offset_map()
    (group,) = cleaning.groups()
    cleaned = cleaning.clean_group(group)
    expected_after = [(9, b"a", b"a3"), (10, b"b", b"b3"), (11, b"c", b"c3"), (12, b"z", b"z")]
    if stage == "before the .swap rename":
        _crash_on(monkeypatch, "change_suffix", 1)
        expected = before
    elif stage == "half-way through the .swap rename":
        # The .log is a .swap already (the commit point), its indexes still .cleaned.
        original_replace = os.replace

        def replace_log_only(source, target):
            if str(target).endswith(".index.swap"):
                raise Crash("rename")
            return original_replace(source, target)

        monkeypatch.setattr("minibroker.storage.segment.os.replace", replace_log_only)
        expected = expected_after
    elif stage == "after the .swap rename":
        # The old segments are deleted by renaming them `.deleted` (unlinked later, in a
        # worker thread in the broker: replication/log_io.py).
        _crash_on(monkeypatch, "delete_later", 1)
        expected = expected_after
    elif stage == "after deleting one old segment":
        _crash_on(monkeypatch, "delete_later", 2)
        expected = expected_after
    elif stage == "after deleting every old segment":
        _crash_on(monkeypatch, "change_suffix", 2)
        expected = expected_after
    else:
        # The indexes lose their suffix, the .log does not: os.replace fails on the .log.
        original_replace = os.replace

        def replace(source, target):
            if str(source).endswith(".log.swap"):
                raise Crash("rename")
            return original_replace(source, target)

        monkeypatch.setattr("minibroker.storage.segment.os.replace", replace)
        expected = expected_after
    with pytest.raises(Crash):
        log.replace_segments(cleaned, group)
    monkeypatch.undo()
    recovered = reopen(log)
    assert records_of(recovered) == expected
    names = sorted(p.name for p in recovered.directory.iterdir())
    assert not [name for name in names if name.endswith((".cleaned", ".swap"))]
    assert [s.base_offset for s in recovered.segments] == (
        [0, 3, 6, 9, 12] if expected is before else [0, 12]
    )
    # The recovered log cleans again, and its indexes find every offset.
    assert read_header(recovered.read(10, max_bytes=100)).base_offset == 10
    clean(recovered)
    assert records_of(recovered) == expected_after


def test_the_log_manager_keeps_the_cleaner_checkpoint(tmp_path):
    manager = LogManager([tmp_path / "data"], LogConfig(), node_id=1, cluster_id="c")
    manager.open(T0)
    partition_log = manager.ensure_log(
        "compacted",
        __import__("uuid").uuid4(),
        0,
        {"cleanup.policy": "compact", "segment.bytes": str(small_segments())},
        now_ms=T0,
    )
    updates(partition_log, 3)
    produce(partition_log, [(b"z", b"z")])
    clean(partition_log)
    assert partition_log.first_dirty_offset == 9
    manager.close()
    text = (tmp_path / "data" / "cleaner-offset-checkpoint").read_text()
    assert text == "0\n1\ncompacted 0 9\n"
    manager = LogManager([tmp_path / "data"], LogConfig(), node_id=1, cluster_id="c")
    manager.open(T0)
    reopened = manager.get_log("compacted", 0)
    assert reopened.first_dirty_offset == 9
    # A truncation below it pulls it back.
    reopened.truncate_to(5)
    assert reopened.first_dirty_offset == 5
    manager.close()


def test_compaction_configs_parse_with_kafkas_rules():
    config = LogConfig.from_topic_configs(
        LogConfig(),
        {
            "cleanup.policy": "compact,delete",
            "delete.retention.ms": "1000",
            "min.cleanable.dirty.ratio": "0.25",
            "min.compaction.lag.ms": "5",
            "max.compaction.lag.ms": "10",
        },
    )
    assert config.compacts and config.deletes_old_segments
    assert (config.delete_retention_ms, config.min_cleanable_dirty_ratio) == (1000, 0.25)
    assert (config.min_compaction_lag_ms, config.max_compaction_lag_ms) == (5, 10)
    for bad in (
        {"min.cleanable.dirty.ratio": "1.5"},
        {"min.cleanable.dirty.ratio": "half"},
        {"delete.retention.ms": "-1"},
        {"min.compaction.lag.ms": "20", "max.compaction.lag.ms": "10"},
    ):
        with pytest.raises(ValueError, match="min.c|delete.retention|max.compaction"):
            LogConfig.from_topic_configs(LogConfig(), bad)


def test_the_broker_properties_set_the_cleaner_and_the_topic_defaults():
    from minibroker.common.config import BrokerConfig
    from minibroker.node.server import log_config_from

    config = BrokerConfig.from_properties(
        {
            "log.cleaner.enable": "false",
            "log.cleaner.backoff.ms": "100",
            "log.cleaner.min.cleanable.ratio": "0.1",
            "log.cleaner.delete.retention.ms": "7",
        }
    )
    assert (config.log_cleaner_enable, config.log_cleaner_backoff_ms) == (False, 100)
    defaults = log_config_from(config)
    assert (defaults.min_cleanable_dirty_ratio, defaults.delete_retention_ms) == (0.1, 7)
    assert BrokerConfig().log_cleaner_enable and BrokerConfig().log_cleaner_backoff_ms == 15000


def test_leader_epochs_are_saved_before_the_batches_that_carry_them_go(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments())
    updates(log, 2)  # leader epoch 3 from offset 0, learnt from the batches, not yet saved
    produce(log, [(b"z", b"z")])
    checkpoint = log.directory / "leader-epoch-checkpoint"
    assert "3 0" not in (checkpoint.read_text() if checkpoint.exists() else "")
    clean(log)
    assert records_of(log)[0][0] == 3  # the batch at offset 0 is gone...
    assert checkpoint.read_text().splitlines()[2:] == ["3 0"]  # ...its epoch start is kept
    assert reopen(log).leader_epoch_cache.end_offset_for(2, 100)[1] == 0


def test_an_index_swap_without_its_log_swap_is_removed(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments())
    updates(log, 2)
    produce(log, [(b"z", b"z")])
    before = records_of(log)
    log.close()
    stray = log.directory / "00000000000000000000.index.swap"
    stray.write_bytes(b"\x00" * 8)
    recovered = reopen(log)
    assert not stray.exists()
    assert records_of(recovered) == before
    assert [s.base_offset for s in recovered.segments] == [0, 3, 6]


def test_compact_and_delete_does_both(tmp_path):
    now = int(time.time() * 1000)
    old = now - 3 * DAY
    log = open_log(tmp_path, segment_bytes=small_segments(), cleanup_policy="compact,delete")
    log.config = replace(log.config, retention_ms=DAY)
    updates(log, 2, timestamp=old)  # [0, 3) [3, 6)
    for segment in log.segments[:2]:  # written three days ago
        segment.set_modified_ms(old)
    updates(log, 2, keys=(b"x", b"y", b"z"), timestamp=now)  # [6, 9) [9, 12)
    produce(log, [(b"w", b"w")], timestamp=now)
    clean(log, now_ms=now)
    assert [offset for offset, _, _ in records_of(log)] == [3, 4, 5, 9, 10, 11, 12]
    # Retention then drops what is older than retention.ms, the emptied segment included
    # (its age is the modification time it kept from the segment it replaced).
    assert log.delete_segments_by_retention(now) == 2
    assert [offset for offset, _, _ in records_of(log)] == [9, 10, 11, 12]
    assert log.log_start_offset == 6


# -- transactions (Kafka's CleanedTransactionMetadata) ------------------------------------------


def produce_txn(partition_log, pairs, producer_id, sequence):
    records = [Record(i, T0 + i, key, value) for i, (key, value) in enumerate(pairs)]
    batch = encode_batch(
        records,
        attributes=0x10,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
    )
    return partition_log.append_as_leader(batch, leader_epoch=3, now_ms=T0)


def end_txn(partition_log, producer_id, commit):
    return partition_log.append_control_marker(
        producer_id=producer_id,
        producer_epoch=0,
        coordinator_epoch=0,
        commit=commit,
        leader_epoch=3,
        now_ms=T0,
    )


def markers_of(partition_log):
    return [
        (header.base_offset, bool(header.attributes & DELETE_HORIZON_FLAG))
        for header, _ in stored_batches(partition_log)
        if header.is_control
    ]


def test_aborted_records_are_removed_and_never_shadow_committed_ones(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments(4))
    produce_txn(log, [(b"k", b"committed")], 1, 0)  # 0
    end_txn(log, 1, True)  # 1
    produce_txn(log, [(b"k", b"aborted")], 2, 0)  # 2
    end_txn(log, 2, False)  # 3
    updates(log, 3, keys=(b"z",))  # rolls: the transactions are cleanable
    assert log.collect_aborted_transactions(0, 4) == [(2, 2)]
    roomy(log)  # one group: the marker's cleaning sees its transaction's batch
    clean(log)
    kept = [(offset, key, value) for offset, key, value in records_of(log) if key == b"k"]
    assert kept == [(0, b"k", b"committed")]
    # The aborted batch stays header-only (its producer's last), so its marker and index
    # entry stay too; the committed transaction's marker stays while its batch does.
    assert markers_of(log) == [(1, False), (3, False)]
    assert log.collect_aborted_transactions(0, 4) == [(2, 2)]
    assert reopen(log, needs_recovery=False).collect_aborted_transactions(0, 4) == [(2, 2)]


def test_markers_get_a_delete_horizon_once_their_transaction_is_gone(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments(6), delete_retention_ms=DAY)
    produce_txn(log, [(b"a", b"a1")], 1, 0)  # 0
    end_txn(log, 1, True)  # 1
    produce_txn(log, [(b"a", b"a2")], 1, 1)  # 2: a1's batch becomes empty and not the last
    end_txn(log, 1, True)  # 3
    updates(log, 4, keys=(b"z",))  # rolls after offset 5
    clean(log, now_ms=T0)
    assert (0, b"a", b"a1") not in records_of(log)
    # This cleaning still traversed the first transaction's batch: its marker stays as is.
    assert markers_of(log)[0] == (1, False)
    # A later one finds no batch of it: the marker gets its delete horizon...
    updates(log, 6, keys=(b"y",))
    clean(log, now_ms=T0)
    assert markers_of(log)[0] == (1, True)
    assert next(h for h, _ in stored_batches(log) if h.is_control).base_timestamp == T0 + DAY
    updates(log, 6, keys=(b"x",))
    clean(log, now_ms=T0 + DAY - 1)
    assert markers_of(log)[0] == (1, True)
    # ...and goes once it passed.
    updates(log, 6, keys=(b"w",))
    clean(log, now_ms=T0 + DAY)
    assert 1 not in [offset for offset, _ in markers_of(log)]
    assert (2, b"a", b"a2") in records_of(log)


def test_nothing_at_or_past_an_open_transaction_is_cleaned(tmp_path):
    log = open_log(tmp_path, segment_bytes=small_segments(3))
    produce_txn(log, [(b"k", b"open")], 1, 0)  # 0, never ended
    updates(log, 3, keys=(b"k",))
    assert log.first_unstable_offset == 0
    clean(log, upper_bound=0)
    assert (0, b"k", b"open") in records_of(log)
