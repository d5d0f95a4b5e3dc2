"""Iceberg topics' table maintenance (minibroker.iceberg.maintenance) on a real pyiceberg SQL
catalog in a temporary directory, in process, with the writer of tests/unit/
test_iceberg_table.py: a compaction keeps every row once and the writer's offsets; a
compaction and a writer's append racing each other, whichever commits first, lose no row and
write none twice; expiry keeps the snapshot whose summary holds the offsets, also under
another engine's snapshot, and deletes the files only expired snapshots reached."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa

from minibroker.iceberg import maintenance
from minibroker.iceberg.maintenance import compact, expire, protected_snapshots
from minibroker.iceberg.table import open_catalog
from minibroker.iceberg.translation import SUMMARY_KEY
from tests.unit.test_iceberg_table import (
    TOPIC_ID,
    catalog,  # noqa: F401 (the fixture)
    commit_in_the_window,
    plan,
    reads,
    rows,
    writer,
)

DAY_MS = 24 * 3600 * 1000


def data_files(table) -> set[str]:
    table.table.refresh()
    return {task.file.file_path.rsplit("/", 1)[-1] for task in table.table.scan().plan_files()}


def parquet_on_disk(table) -> set[str]:
    """The Parquet files under the table's location (a local warehouse)."""
    location = urlparse(table.table.location())
    assert location.scheme in ("file", ""), location  # a REST server's may be a bare path
    return {p.name for p in Path(unquote(location.path)).rglob("*.parquet")}


def write_in_commits(table, commits: int, per_commit: int = 3) -> None:
    """``commits`` snapshots, alternating partitions 0 and 1, ``per_commit`` records each."""
    held: dict[int, int] = {}
    for number in range(commits):
        index = number % 2
        start = held.get(index, 0)
        outcome = table.commit(
            plan(index, held.get(index), start, start + per_commit),
            reads(index, start, per_commit),
        )
        assert outcome.snapshot
        held[index] = start + per_commit


def test_compaction_replaces_small_files_and_carries_the_offsets(catalog):  # noqa: F811
    table = writer(catalog)
    write_in_commits(table, 6)
    before_rows, before_offsets = rows(table), table.offsets()
    assert len(data_files(table)) == 6 and before_offsets == {0: 9, 1: 9}
    outcome = compact(table.table, TOPIC_ID, min_input_files=2)
    assert (outcome.removed, outcome.added, outcome.lost_race) == (6, 1, False)
    assert len(data_files(table)) == 1
    assert rows(table) == before_rows
    # The one file holds them by partition and offset (the commits alternated partitions).
    scanned = table.table.scan().to_arrow()
    in_file = list(
        zip(scanned["partition"].to_pylist(), scanned["offset"].to_pylist(), strict=True)
    )
    assert in_file == before_rows
    current = table.table.current_snapshot()
    assert current is not None and current.summary is not None
    assert current.summary.operation.value == "replace"
    assert SUMMARY_KEY in current.summary.additional_properties
    assert table.offsets() == before_offsets
    # The writer carries on from the offsets, on top of the compaction.
    assert table.commit(plan(0, 9, 9, 12), reads(0, 9, 3)).snapshot
    assert rows(table) == sorted(before_rows + [(0, 9), (0, 10), (0, 11)])
    # Too few small files: nothing to do.
    assert compact(table.table, TOPIC_ID, min_input_files=5).removed == 0


def test_a_compaction_is_made_again_on_top_of_a_writers_append_in_its_window(
    catalog,  # noqa: F811
    monkeypatch,
):
    """The writer's append lands while the compaction rewrites: the compaction's commit is
    refused, then made again on top of the append (Iceberg's RewriteFiles retries so), with
    the append's offsets; the appended rows stay in their own file."""
    table, other = writer(catalog), writer(catalog)
    write_in_commits(table, 4)
    write_files = maintenance._dataframe_to_data_files
    appended = []

    def writer_first(**kwargs):
        if not appended:
            appended.append(other.commit(plan(0, 6, 6, 8), reads(0, 6, 2)))
        return write_files(**kwargs)

    monkeypatch.setattr(maintenance, "_dataframe_to_data_files", writer_first)
    # (A REST server's purge of an earlier test's table may leave files in the location.)
    files_before, disk_before = data_files(table), parquet_on_disk(table)
    outcome = compact(table.table, TOPIC_ID, min_input_files=2)
    assert appended[0].snapshot
    assert (outcome.removed, outcome.added, outcome.lost_race) == (4, 1, False)
    assert outcome.rebased == 1
    expected = sorted([(0, o) for o in range(8)] + [(1, o) for o in range(6)])
    assert rows(table) == expected and table.offsets() == {0: 8, 1: 6}
    current = table.table.current_snapshot()
    assert current is not None and current.summary is not None
    assert current.summary.operation.value == "replace"
    # The rewrite of the four and the writer's file; on disk nothing else came.
    after = data_files(table)
    assert len(after) == 2 and not after & files_before
    assert parquet_on_disk(table) - disk_before == after
    # The writer carries on from the offsets the compaction carried.
    assert table.commit(plan(1, 6, 6, 9), reads(1, 6, 3)).snapshot
    assert rows(table) == sorted(expected + [(1, 6), (1, 7), (1, 8)])


def test_a_compaction_loses_to_another_compaction_in_its_window(catalog, monkeypatch):  # noqa: F811
    """Another compaction of the same files lands first (a stale leader of partition 0): the
    files this one replaces are no longer the table's, so it gives up (its files deleted)."""
    table = writer(catalog)
    write_in_commits(table, 4)
    write_files = maintenance._dataframe_to_data_files
    first = []

    def other_compaction_first(**kwargs):
        if not first:
            first.append(None)
            first[0] = compact(writer(catalog).table, TOPIC_ID, min_input_files=2)
        return write_files(**kwargs)

    monkeypatch.setattr(maintenance, "_dataframe_to_data_files", other_compaction_first)
    files_before, disk_before = data_files(table), parquet_on_disk(table)
    rows_before = rows(table)
    outcome = compact(table.table, TOPIC_ID, min_input_files=2)
    assert first[0].removed == 4
    assert outcome.lost_race and outcome.removed == 0
    assert rows(table) == rows_before and table.offsets() == {0: 6, 1: 6}
    after = data_files(table)
    assert len(after) == 1 and not after & files_before
    assert parquet_on_disk(table) - disk_before == after  # the loser's rewrite was deleted


def test_a_writers_append_that_loses_to_a_compaction_is_made_on_top(catalog):  # noqa: F811
    table = writer(catalog)
    write_in_commits(table, 4)
    done = commit_in_the_window(
        table, lambda: compact(writer(catalog).table, TOPIC_ID, min_input_files=2)
    )
    outcome = table.commit(plan(1, 6, 6, 9), reads(1, 6, 3))
    assert done[0].removed == 4 and outcome.snapshot and not outcome.conflicts
    assert rows(table) == sorted([(0, o) for o in range(6)] + [(1, o) for o in range(9)])
    assert table.offsets() == {0: 6, 1: 9}


def test_expiry_keeps_the_offsets_and_deletes_what_only_expired_snapshots_reached(catalog):  # noqa: F811
    table = writer(catalog)
    write_in_commits(table, 6)
    small = data_files(table)
    compact(table.table, TOPIC_ID, min_input_files=2)
    assert small <= parquet_on_disk(table)  # replaced, still reached by the old snapshots
    snapshots = table.table.snapshots()
    assert len(snapshots) == 7
    future = max(s.timestamp_ms for s in snapshots) + 6 * DAY_MS
    outcome = expire(table.table, now_ms=future)
    assert outcome.expired == 6 and outcome.files_deleted == 6
    assert [s.snapshot_id for s in table.table.snapshots()] == [snapshots[-1].snapshot_id]
    assert table.offsets() == {0: 9, 1: 9} and len(rows(table)) == 18
    on_disk = parquet_on_disk(table)
    assert not small & on_disk and data_files(table) <= on_disk
    # Nothing old enough: nothing expired.
    assert expire(table.table).expired == 0


def test_expiry_keeps_the_snapshots_back_to_the_offsets_under_another_engines(catalog):  # noqa: F811
    table = writer(catalog)
    write_in_commits(table, 3)
    with_offsets = table.table.current_snapshot()
    assert with_offsets is not None
    # Another engine appends twice on top: its snapshots carry no offsets.
    extra = pa.Table.from_pylist(
        [
            {
                "partition": 5,
                "offset": 0,
                "timestamp": 0,
                "timestamp_type": 0,
                "key": None,
                "value": b"x",
                "headers": [],
            }
        ],
        schema=table.table.schema().as_arrow(),
    )
    table.table.append(extra)
    table.table.append(extra)
    kept = protected_snapshots(table.table)
    current = table.table.current_snapshot()
    assert current is not None
    assert with_offsets.snapshot_id in kept and current.snapshot_id in kept and len(kept) == 3
    future = current.timestamp_ms + 6 * DAY_MS
    assert expire(table.table, now_ms=future).expired == 2
    assert table.offsets() == {0: 6, 1: 3}


def test_a_typed_table_is_compacted_across_a_schema_evolution(tmp_path):
    """value_schema_id_prefix: files written before and after a new column are rewritten as
    one, the older rows reading the new column as null, every value and ``kafka`` field kept."""
    from tests.unit import test_iceberg_typed_table as typed

    typed_catalog = open_catalog(
        "minibroker", f"sqlite:///{tmp_path}/catalog.db", (tmp_path / "warehouse").as_uri()
    )
    table = typed.writer(typed_catalog)
    for offset in range(4):
        value = [typed.framed(1, {"name": f"u{offset}", "age": offset})]
        outcome = table.commit(
            typed.plan(0, offset or None, offset, offset + 1),
            typed.reads(0, offset, value),
            typed.lookup,
        )
        assert outcome.rows == {0: 1}
    evolved = [typed.framed(2, {"name": "v2", "age": 20, "email": "v2@example.com"})]
    assert table.commit(typed.plan(0, 4, 4, 5), typed.reads(0, 4, evolved), typed.lookup).rows
    before = sorted(typed.scan(typed_catalog), key=lambda row: row["kafka"]["offset"])
    assert len(before) == 5 and before[0]["email"] is None
    outcome = compact(table.table, typed.TOPIC_ID, min_input_files=2)
    assert (outcome.removed, outcome.added) == (5, 1)
    after = typed.scan(typed_catalog)  # in the one file's order: by partition and offset
    assert after == before
    assert table.offsets() == {0: 5}
