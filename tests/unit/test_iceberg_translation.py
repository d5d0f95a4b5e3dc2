"""Iceberg topics' pure core (minibroker.iceberg.translation) and the topic configs that turn
them on: records of a read turned into rows (committed records only), the offsets kept in the
table's snapshot summaries, the conditional commit's check, and the writer's decisions with
time passed in. No broker, no pyiceberg."""

from __future__ import annotations

import pytest

from minibroker.iceberg.translation import (
    CREATE_TIME_TYPE,
    LOG_APPEND_TIME_TYPE,
    RETRY_FIRST_MS,
    SUMMARY_KEY,
    CommitOutcome,
    CommitPlan,
    PartitionCommit,
    ReadChunk,
    TopicTranslation,
    committed_offsets,
    conflicts,
    decode_summary,
    encode_summary,
    end_of_chunk,
    table_offsets,
    translate,
)
from minibroker.protocol.control_batch import encode_control_batch
from minibroker.protocol.record_batch import (
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    stamp_offsets,
)
from minibroker.protocol.records import GZIP, Record, encode_batch
from minibroker.storage.log import LogConfig, parse_iceberg_partition_spec

TOPIC_ID = "5c1b2a3e-0000-4000-8000-000000000001"


def batch(
    first: int,
    count: int,
    *,
    producer: int = -1,
    transactional: bool = False,
    attributes: int = 0,
    codec: int = 0,
) -> bytes:
    records = [
        Record(
            first + i,
            1_700_000_000_000 + first + i,
            f"k{first + i}".encode(),
            f"v{first + i}".encode(),
            (("h", f"{first + i}".encode()),),
        )
        for i in range(count)
    ]
    return encode_batch(
        records,
        base_offset=first,
        producer_id=producer,
        producer_epoch=0 if producer >= 0 else -1,
        base_sequence=0 if producer >= 0 else -1,
        attributes=attributes | (TRANSACTIONAL_FLAG_MASK if transactional else 0),
        codec=codec,
    )


def marker(offset: int, producer: int, *, commit: bool) -> bytes:
    data = bytearray(
        encode_control_batch(
            producer_id=producer,
            producer_epoch=0,
            coordinator_epoch=0,
            commit=commit,
            timestamp_ms=1_700_000_000_000,
        )
    )
    stamp_offsets(data, 0, offset, 0)
    return bytes(data)


# -- rows ------------------------------------------------------------------------------------


def test_records_become_rows_with_every_column():
    records = encode_batch(
        [
            Record(0, 1_000, b"a", b"1", (("trace", b"x"), ("empty", None))),
            Record(1, 1_005, None, b"2"),
            Record(2, 1_009, b"c", None),
        ]
    )
    rows = translate(3, [ReadChunk(records)], 0, 3)
    assert rows.partition == [3, 3, 3]
    assert rows.offset == [0, 1, 2]
    assert rows.timestamp_ms == [1_000, 1_005, 1_009]
    assert rows.timestamp_type == [CREATE_TIME_TYPE] * 3
    assert rows.key == [b"a", None, b"c"]
    assert rows.value == [b"1", b"2", None]
    assert rows.headers == [[("trace", b"x"), ("empty", None)], [], []]


def test_a_read_that_starts_inside_a_batch_or_runs_past_the_end_keeps_only_the_range():
    records = batch(0, 5) + batch(5, 5)
    rows = translate(0, [ReadChunk(records)], 3, 7)
    assert rows.offset == [3, 4, 5, 6]


def test_compressed_batches_are_decoded():
    records = batch(0, 4, codec=GZIP)
    assert translate(0, [ReadChunk(records)], 0, 4).value == [b"v0", b"v1", b"v2", b"v3"]


def test_log_append_time_batches_carry_their_max_timestamp():
    records = bytearray(batch(0, 3, attributes=TIMESTAMP_TYPE_MASK))
    rows = translate(0, [ReadChunk(bytes(records))], 0, 3)
    assert rows.timestamp_type == [LOG_APPEND_TIME_TYPE] * 3
    assert rows.timestamp_ms == [1_700_000_000_002] * 3


def test_aborted_transactions_and_control_batches_never_become_rows():
    # Producer 7 aborts offsets 2-3 while producer 8 commits 4-5, interleaved, then 7
    # writes again in a new transaction that commits (10-11).
    records = (
        batch(0, 2)
        + batch(2, 2, producer=7, transactional=True)
        + batch(4, 2, producer=8, transactional=True)
        + marker(6, 7, commit=False)
        + marker(7, 8, commit=True)
        + batch(8, 2)
        + batch(10, 2, producer=7, transactional=True)
        + marker(12, 7, commit=True)
    )
    rows = translate(0, [ReadChunk(records, aborted=((7, 2),))], 0, 13)
    assert rows.offset == [0, 1, 4, 5, 8, 9, 10, 11]


def test_without_the_aborted_list_transactional_records_are_kept():
    """The list the read returned decides (as a consumer's): a committed transaction's
    batches land."""
    records = batch(0, 2, producer=7, transactional=True) + marker(2, 7, commit=True)
    assert translate(0, [ReadChunk(records)], 0, 3).offset == [0, 1]


def test_end_of_chunk_is_read_from_headers_and_ignores_a_cut_batch():
    records = batch(0, 3) + batch(3, 2)
    assert end_of_chunk(records) == 5
    assert end_of_chunk(records[:-1]) == 3
    assert end_of_chunk(b"") is None


# -- offsets in the table ----------------------------------------------------------------------


def test_summary_round_trip_and_other_topics():
    properties = encode_summary(TOPIC_ID, {1: 40, 0: 12})
    assert list(properties) == [SUMMARY_KEY]
    assert decode_summary(properties, TOPIC_ID) == {0: 12, 1: 40}
    assert decode_summary(properties, "another-topic-id") == {}
    assert decode_summary({"added-records": "3"}, TOPIC_ID) is None
    assert decode_summary({SUMMARY_KEY: "not json"}, TOPIC_ID) is None


def test_the_newest_snapshot_with_offsets_decides():
    newest_first = [
        {"spark.app.id": "compaction"},  # another engine's snapshot: look at its parent
        encode_summary(TOPIC_ID, {0: 30, 1: 8}),
        encode_summary(TOPIC_ID, {0: 10}),
    ]
    assert table_offsets(newest_first, TOPIC_ID) == {0: 30, 1: 8}
    assert table_offsets([], TOPIC_ID) == {}
    # A topic made again under the same name starts from nothing.
    assert table_offsets([encode_summary("old-id", {0: 99})], TOPIC_ID) == {}


def plan(*parts: PartitionCommit) -> CommitPlan:
    return CommitPlan(TOPIC_ID, parts)


def test_a_commit_must_find_each_partition_where_it_started():
    offsets = {0: 10, 1: 5}
    ok = plan(PartitionCommit(0, 1, 10, 10, 20), PartitionCommit(2, 1, None, 0, 4))
    assert conflicts(offsets, ok) == {}
    assert committed_offsets(offsets, ok) == {0: 20, 1: 5, 2: 4}
    stale = plan(PartitionCommit(0, 1, 8, 8, 20), PartitionCommit(1, 1, 5, 5, 9))
    assert conflicts(offsets, stale) == {0: 10}
    assert conflicts({}, plan(PartitionCommit(0, 1, 3, 3, 9))) == {0: None}


class FakeTable:
    """A table as the catalog keeps it: offsets in the current snapshot, rows appended, and a
    commit applied only if its check passes (the atomic step the catalog gives)."""

    def __init__(self) -> None:
        self.offsets: dict[int, int] = {}
        self.rows: list[tuple[int, int]] = []

    def commit(self, commit_plan: CommitPlan, log: list[int]) -> CommitOutcome:
        found = conflicts(self.offsets, commit_plan)
        if found:
            return CommitOutcome(conflicts=found)
        counts = {}
        for part in commit_plan.partitions:
            written = [offset for offset in log if part.start <= offset < part.next_offset]
            self.rows += [(part.index, offset) for offset in written]
            counts[part.index] = len(written)
        self.offsets = committed_offsets(self.offsets, commit_plan)
        return CommitOutcome(rows=counts, snapshot=True)


def test_an_old_leaders_late_commit_adds_nothing_twice():
    """Leadership moves while the old leader's commit is in flight: whichever commits second
    finds the table moved and writes nothing; the loser starts again from the table."""
    table = FakeTable()
    log = list(range(30))
    old = TopicTranslation(TOPIC_ID, target_lag_ms=1000)
    old.add(0, 1, table.offsets, 0, now_ms=0)
    old.observe(0, 20, 0, now_ms=0)
    old_plan = old.plan({0: 20})
    # The new leader (epoch 2) reads the table's offsets and commits first, up to 25.
    new = TopicTranslation(TOPIC_ID, target_lag_ms=1000)
    new.add(0, 2, table.offsets, 0, now_ms=5)
    new.observe(0, 25, 0, now_ms=5)
    new_plan = new.plan({0: 25})
    new.apply(new_plan, table.commit(new_plan, log), now_ms=1005)
    outcome = table.commit(old_plan, log)
    assert outcome.conflicts == {0: 25}
    old.apply(old_plan, outcome, now_ms=1010)
    assert old.partitions[0].position == 25
    assert sorted(table.rows) == [(0, offset) for offset in range(25)]
    # The other order: the old leader's commit lands first, the new one's is refused and
    # starts again from the table, so offsets 20-24 are written once, by the new leader.
    table = FakeTable()
    old = TopicTranslation(TOPIC_ID, target_lag_ms=1000)
    old.add(0, 1, table.offsets, 0, now_ms=0)
    new = TopicTranslation(TOPIC_ID, target_lag_ms=1000)
    new.add(0, 2, table.offsets, 0, now_ms=0)
    old.observe(0, 20, 0, now_ms=0)
    new.observe(0, 25, 0, now_ms=0)
    old_plan, new_plan = old.plan({0: 20}), new.plan({0: 25})
    assert table.commit(old_plan, log).snapshot
    refused = table.commit(new_plan, log)
    new.apply(new_plan, refused, now_ms=1000)
    assert new.partitions[0].position == 20 and new.partitions[0].stored == 20
    again = new.plan({0: 25})
    new.apply(again, table.commit(again, log), now_ms=1001)
    assert sorted(table.rows) == [(0, offset) for offset in range(25)]


# -- when to commit ------------------------------------------------------------------------------


def test_a_commit_is_due_target_lag_after_records_became_committed():
    translation = TopicTranslation(TOPIC_ID, target_lag_ms=5_000)
    translation.add(0, 1, {}, 0, now_ms=0)
    translation.observe(0, 0, 0, now_ms=100)
    assert translation.next_deadline_ms() is None and not translation.due(100)
    translation.observe(0, 3, 0, now_ms=1_000)
    translation.observe(0, 7, 0, now_ms=3_000)  # more records: the deadline stays
    assert translation.next_deadline_ms() == 6_000
    assert not translation.due(5_999)
    assert translation.due(6_000)
    assert translation.lag_ms(4_000) == 3_000
    assert translation.partitions[0].lag_records == 7


def test_a_successful_commit_moves_the_table_offset_and_the_position():
    translation = TopicTranslation(TOPIC_ID, target_lag_ms=1_000)
    translation.add(0, 1, {0: 4}, 0, now_ms=0)
    translation.observe(0, 9, 0, now_ms=0)
    commit = translation.plan({0: 9})
    assert commit.partitions == (PartitionCommit(0, 1, 4, 4, 9, complete=True),)
    translation.apply(commit, CommitOutcome(rows={0: 5}, snapshot=True), now_ms=1_000)
    progress = translation.partitions[0]
    assert (progress.stored, progress.position, progress.waiting_since_ms) == (9, 9, None)
    assert translation.next_deadline_ms() is None


def test_a_range_without_records_moves_the_position_but_not_the_table_offset():
    """Only markers or aborted records: no snapshot is made; a restart reads the range again
    (and again finds nothing), and the next commit still checks the table's offset."""
    translation = TopicTranslation(TOPIC_ID, target_lag_ms=1_000)
    translation.add(0, 1, {0: 4}, 0, now_ms=0)
    translation.observe(0, 6, 0, now_ms=0)
    empty = translation.plan({0: 6})
    translation.apply(empty, CommitOutcome(rows={0: 0}), now_ms=1_000)
    assert (translation.partitions[0].stored, translation.partitions[0].position) == (4, 6)
    translation.observe(0, 10, 0, now_ms=1_000)
    (part,) = translation.plan({0: 10}).partitions
    assert (part.expected, part.start, part.next_offset) == (4, 6, 10)


def test_a_read_cut_by_the_memory_bound_is_committed_again_at_once():
    translation = TopicTranslation(TOPIC_ID, target_lag_ms=1_000)
    translation.add(0, 1, {}, 0, now_ms=0)
    translation.observe(0, 100, 0, now_ms=0)
    first = translation.plan({0: 40})
    assert first.partitions[0].complete is False
    translation.apply(first, CommitOutcome(rows={0: 40}, snapshot=True), now_ms=1_000)
    translation.observe(0, 100, 0, now_ms=1_001)
    assert translation.due(1_001)


def test_a_failed_commit_is_retried_later_and_later():
    translation = TopicTranslation(TOPIC_ID, target_lag_ms=1_000)
    translation.add(0, 1, {}, 0, now_ms=0)
    translation.observe(0, 5, 0, now_ms=0)
    commit = translation.plan({0: 5})
    translation.apply(commit, CommitOutcome(error="catalog unreachable"), now_ms=1_000)
    assert translation.next_deadline_ms() == 1_000 + RETRY_FIRST_MS
    translation.apply(commit, CommitOutcome(error="catalog unreachable"), now_ms=2_000)
    assert translation.next_deadline_ms() == 2_000 + 2 * RETRY_FIRST_MS
    assert translation.failures == 2 and translation.last_error == "catalog unreachable"
    assert translation.partitions[0].position == 0  # nothing moved
    translation.apply(commit, CommitOutcome(rows={0: 5}, snapshot=True), now_ms=5_000)
    assert translation.failures == 0 and translation.partitions[0].stored == 5


def test_records_removed_by_retention_before_they_were_written_are_skipped_and_counted():
    translation = TopicTranslation(TOPIC_ID, target_lag_ms=1_000)
    assert translation.add(0, 1, {0: 10}, 25, now_ms=0) == 15
    progress = translation.partitions[0]
    assert (progress.stored, progress.position) == (10, 25)
    assert translation.observe(0, 40, 30, now_ms=0) == 5
    (part,) = translation.plan({0: 40}).partitions
    assert (part.expected, part.start) == (10, 30)


def test_a_partition_led_again_starts_from_the_table():
    translation = TopicTranslation(TOPIC_ID, target_lag_ms=1_000)
    translation.add(0, 1, {}, 0, now_ms=0)
    translation.add(1, 1, {}, 0, now_ms=0)
    translation.drop(1)
    translation.add(1, 3, {1: 17}, 0, now_ms=0)
    assert translation.partitions[1].position == 17
    assert translation.partitions[1].leader_epoch == 3


# -- the topic configs ---------------------------------------------------------------------------


def test_iceberg_topic_configs():
    config = LogConfig.from_topic_configs(
        LogConfig(),
        {
            "iceberg.mode": "key_value",
            "iceberg.target.lag.ms": "500",
            "iceberg.partition.spec": "(day(timestamp), partition)",
        },
    )
    assert config.iceberg_mode == "key_value"
    assert config.iceberg_target_lag_ms == 500
    typed = LogConfig.from_topic_configs(LogConfig(), {"iceberg.mode": "value_schema_id_prefix"})
    assert typed.iceberg_mode == "value_schema_id_prefix"
    assert typed.iceberg_delete is True
    kept = LogConfig.from_topic_configs(LogConfig(), {"iceberg.delete": "false"})
    assert kept.iceberg_delete is False
    assert LogConfig().iceberg_mode == "disabled"
    assert LogConfig().iceberg_target_lag_ms == 60_000
    assert parse_iceberg_partition_spec("k", LogConfig().iceberg_partition_spec) == (
        ("hour", "timestamp"),
    )


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"iceberg.mode": "avro"}, "one of: disabled, key_value, value_schema_id_prefix"),
        ({"iceberg.target.lag.ms": "0"}, "Value must be at least 1"),
        ({"iceberg.partition.spec": "hour(timestamp)"}, "parenthesized list"),
        ({"iceberg.partition.spec": "(hour(value))"}, "'value' cannot be partitioned on"),
        ({"iceberg.partition.spec": "(hour(partition))"}, "partition takes identity"),
    ],
)
def test_invalid_iceberg_topic_configs_say_why(configs, message):
    with pytest.raises(ValueError, match=message):
        LogConfig.from_topic_configs(LogConfig(), configs)


def test_partition_specs():
    assert parse_iceberg_partition_spec("k", "()") == ()
    assert parse_iceberg_partition_spec("k", " ( hour(timestamp) , timestamp_type ) ") == (
        ("hour", "timestamp"),
        ("identity", "timestamp_type"),
    )
    with pytest.raises(ValueError, match="twice"):
        parse_iceberg_partition_spec("k", "(partition, identity(partition))")


def test_a_due_commit_that_read_nothing_looks_again_a_little_later():
    """Records were seen but the read found none (retention moved the log start under it):
    the writer does not spin on a commit that stays due."""
    translation = TopicTranslation(TOPIC_ID, target_lag_ms=1_000)
    translation.add(0, 1, {}, 0, now_ms=0)
    translation.observe(0, 5, 0, now_ms=0)
    assert translation.due(1_000)
    translation.apply(translation.plan({0: 0}), CommitOutcome(), now_ms=1_000)
    assert not translation.due(1_000)
    assert translation.next_deadline_ms() == 1_000 + RETRY_FIRST_MS
    assert translation.failures == 0
