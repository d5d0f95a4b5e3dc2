"""Iceberg topics' table maintenance: small files compacted, old snapshots expired. Blocking
(pyiceberg, Parquet), run by the service's writer (its process) like the commits, by one broker per
table (the leader of the topic's partition 0: service.py).

Iceberg's own counterparts are Spark's ``rewrite_data_files`` (``RewriteDataFilesSparkAction``
with the bin-pack strategy) and ``expire_snapshots`` (``ExpireSnapshotsSparkAction``), with
their defaults: a data file is small below 75 % of ``write.target-file-size-bytes`` (Iceberg's
``min-file-size-bytes`` default), a partition's small files are rewritten when there are at
least ``min-input-files`` (5) of them; a snapshot expires when older than the table property
``history.expire.max-snapshot-age-ms`` (5 days) and not among the
``history.expire.min-snapshots-to-keep`` (1) newest of the branch; the files only expired
snapshots reached are deleted (Iceberg's ``cleanExpiredFiles``).

Where they depart, for exactly once (the writer resumes from the offsets in the newest
snapshot summary that holds them, translation.table_offsets):

- A compaction snapshot carries that summary forward unchanged (``minibroker.translation``:
  the topic id and every partition's next offset, as read from the snapshot it replaces), so
  it is the newest snapshot with the offsets itself; its operation is ``replace`` (Iceberg's
  ``RewriteFiles``: incremental readers skip it, its rows are not new).
- It commits only if the table's current snapshot is still the one it read (pyiceberg's
  ``AssertRefSnapshotId``; the tables have pyiceberg's own retries off, table.py). A commit in
  between (a writer's append) makes it lose (``CommitFailedException``); it is then made again
  on top of the new current snapshot, with that snapshot's offsets, if every file it replaces
  is still the table's and the table has no delete files (as Iceberg's ``RewriteFiles``
  retries against concurrent appends), up to REBASE_ATTEMPTS times; otherwise its new files
  are deleted and it is tried again at the next interval. (Without this, a table written every
  second or so, whose compaction takes longer, mostly lost: bench.iceberg_failover
  --maintenance counted 2 compactions made and 3 and 5 lost per table.) The writer, if it lost
  to the compaction, checks the table's offsets again (the same) and appends on top. No row is
  lost or written twice either way: the rewrite holds exactly the rows of the files it removes,
  and the rows appended in between stay in their own files.
- Expiry never removes the snapshots from the current one back to the newest one holding the
  offsets (inclusive): when another engine committed on top (its snapshots carry no offsets),
  the writer walks back through them to the offsets.
- A table with delete files (another engine's deletes) is not compacted: the rewrite would have
  to apply them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import EMPTY_DICT

from minibroker.iceberg.translation import SUMMARY_KEY, encode_summary, table_offsets

# Iceberg's table properties and their defaults (TableProperties.java).
MAX_SNAPSHOT_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"
MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
MIN_SNAPSHOTS_PROPERTY = "history.expire.min-snapshots-to-keep"
MIN_SNAPSHOTS = 1
TARGET_FILE_SIZE_PROPERTY = "write.target-file-size-bytes"
TARGET_FILE_SIZE = 512 * 1024 * 1024
# RewriteDataFiles' options' defaults (BinPackRewriteFilePlanner).
MIN_FILE_SIZE_RATIO = 0.75
MIN_INPUT_FILES = 5
# A compaction that loses its commit is made again on top of the new snapshot this many times
# (Iceberg's commit.retry.num-retries is 4), then given up until the next interval.
REBASE_ATTEMPTS = 4


@dataclass
class CompactionOutcome:
    """What a compaction did: files removed and added (none: nothing to do, or lost the race)."""

    removed: int = 0
    added: int = 0
    lost_race: bool = False
    # Commits that came first and that the compaction was made again on top of.
    rebased: int = 0


@dataclass
class ExpiryOutcome:
    expired: int = 0
    files_deleted: int = 0
    kept: list[int] = field(default_factory=list)


class _ReplaceFiles(_OverwriteFiles):
    """pyiceberg's overwrite of files, as Iceberg's ``RewriteFiles`` commits it: a ``replace``
    snapshot (pyiceberg 0.12 computes the totals of append, overwrite and delete only: they
    are computed as an overwrite's, then the operation is set)."""

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        self._operation = Operation.OVERWRITE
        try:
            summary = super()._summary(snapshot_properties)
        finally:
            self._operation = Operation.REPLACE
        return Summary(Operation.REPLACE, **summary.additional_properties)


def _summaries(table: Table) -> Iterable[tuple[Snapshot, dict[str, str]]]:
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary
        yield snapshot, ({} if summary is None else dict(summary.additional_properties))
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else table.snapshot_by_id(parent)


def _int_property(table: Table, name: str, default: int) -> int:
    try:
        return int(table.properties.get(name, default))
    except ValueError:
        return default


def compact(
    table: Table,
    topic_id: str,
    min_input_files: int = MIN_INPUT_FILES,
    target_bytes: int | None = None,
    stopped: Callable[[], None] | None = None,
) -> CompactionOutcome:
    """Rewrite each partition's small data files into one (or a few, of the target size) in
    one ``replace`` snapshot carrying the offsets forward, if the table's current snapshot is
    still the one read (module docstring)."""
    table.refresh()
    current = table.current_snapshot()
    if current is None:
        return CompactionOutcome()
    offsets = table_offsets((summary for _, summary in _summaries(table)), topic_id)
    if not offsets:
        return CompactionOutcome()  # not this topic's table (or nothing written yet)
    target = target_bytes or _int_property(table, TARGET_FILE_SIZE_PROPERTY, TARGET_FILE_SIZE)
    spec_id = table.spec().spec_id
    groups: dict[str, list[DataFile]] = {}
    for task in table.scan().plan_files():
        if task.delete_files:
            return CompactionOutcome()
        data_file = task.file
        if (
            data_file.spec_id != spec_id
            or data_file.file_size_in_bytes >= target * MIN_FILE_SIZE_RATIO
        ):
            continue
        groups.setdefault(repr(data_file.partition), []).append(data_file)
    chosen = [files for files in groups.values() if len(files) >= min_input_files]
    if not chosen:
        return CompactionOutcome()
    schema = table.schema()
    scan = ArrowScan(table.metadata, table.io, schema, AlwaysTrue(), case_sensitive=True)
    commit_uuid = uuid.uuid4()
    added: list[DataFile] = []
    replaced = [data_file for files in chosen for data_file in files]
    for files in chosen:
        rows = scan.to_table([FileScanTask(f) for f in files])
        rows = _sorted(rows)
        added += _dataframe_to_data_files(
            table_metadata=table.metadata, df=rows, io=table.io, write_uuid=commit_uuid
        )
    for attempt in range(REBASE_ATTEMPTS + 1):
        try:
            if stopped is not None:
                stopped()  # the topic was deleted meanwhile: TableStopped, nothing committed
        except BaseException:
            _delete(table, added)
            raise
        transaction = table.transaction()
        rewrite = _ReplaceFiles(
            operation=Operation.REPLACE,
            transaction=transaction,
            io=table.io,
            commit_uuid=uuid.uuid4() if attempt else commit_uuid,
            snapshot_properties=encode_summary(topic_id, offsets),
        )
        for data_file in added:
            rewrite.append_data_file(data_file)
        for data_file in replaced:
            rewrite.delete_data_file(data_file)
        try:
            rewrite.commit()
            transaction.commit_transaction()
            return CompactionOutcome(removed=len(replaced), added=len(added), rebased=attempt)
        except CommitFailedException:
            # Refused (the catalog's answer): nothing of it is in the table. Any other failure
            # may have committed (a REST answer that timed out): its files are left.
            pass
        # A commit came first (the writer's append, most often): made again on top of it, as
        # Iceberg's RewriteFiles retries, if the files it replaces are all still the table's.
        rebased = _rebase_offsets(table, topic_id, replaced) if attempt < REBASE_ATTEMPTS else None
        if rebased is None:
            _delete(table, added)
            return CompactionOutcome(lost_race=True)
        offsets = rebased
    raise AssertionError("unreachable")  # the loop returns on its last attempt


def _rebase_offsets(table: Table, topic_id: str, replaced: list[DataFile]) -> dict | None:
    """After a lost commit: the offsets the compaction commits with on top of the table's new
    current snapshot, or None when it may not (a file it replaces is no longer the table's:
    another compaction or engine removed it; the table has delete files; no offsets)."""
    table.refresh()
    live: set[str] = set()
    for task in table.scan().plan_files():
        if task.delete_files:
            return None
        live.add(task.file.file_path)
    if any(data_file.file_path not in live for data_file in replaced):
        return None
    offsets = table_offsets((summary for _, summary in _summaries(table)), topic_id)
    return offsets or None


def _delete(table: Table, files: list[DataFile]) -> None:
    for data_file in files:
        table.io.delete(data_file.file_path)


def _sorted(rows: pa.Table) -> pa.Table:
    """The rows by partition and offset, as the writer appends them (key_value's columns, or
    value_schema_id_prefix's ``kafka`` struct)."""
    names = rows.column_names
    if "partition" in names and "offset" in names:
        keys = pa.table({"p": rows.column("partition"), "o": rows.column("offset")})
    elif "kafka" in names:
        meta = rows.column("kafka").combine_chunks()
        keys = pa.table({"p": meta.field("partition"), "o": meta.field("offset")})
    else:
        return rows
    order = pc.sort_indices(keys, sort_keys=[("p", "ascending"), ("o", "ascending")])
    return rows.take(order)


def protected_snapshots(table: Table) -> set[int]:
    """The snapshots expiry must keep: the current one back to the newest one holding the
    writer's offsets (inclusive), the ``history.expire.min-snapshots-to-keep`` newest of the
    branch, and every branch or tag head."""
    keep_count = max(1, _int_property(table, MIN_SNAPSHOTS_PROPERTY, MIN_SNAPSHOTS))
    kept: set[int] = set()
    offsets_found = False
    for position, (snapshot, summary) in enumerate(_summaries(table)):
        if not offsets_found or position < keep_count:
            kept.add(snapshot.snapshot_id)
        if SUMMARY_KEY in summary:
            offsets_found = True
        if offsets_found and position + 1 >= keep_count:
            break
    kept |= {ref.snapshot_id for ref in table.metadata.refs.values()}
    return kept


def _files_of(table: Table, snapshots: Iterable[Snapshot]) -> tuple[set[str], set[str]]:
    """(data and delete file paths, manifest paths) the snapshots reach."""
    files: set[str] = set()
    manifests: set[str] = set()
    for snapshot in snapshots:
        for manifest in snapshot.manifests(table.io):
            manifests.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                files.add(entry.data_file.file_path)
    return files, manifests


def expire(table: Table, now_ms: int | None = None) -> ExpiryOutcome:
    """Expire the snapshots older than ``history.expire.max-snapshot-age-ms`` that are not
    protected (``protected_snapshots``), then delete the data files, manifests and manifest
    lists only they reached."""
    table.refresh()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    max_age = _int_property(table, MAX_SNAPSHOT_AGE_PROPERTY, MAX_SNAPSHOT_AGE_MS)
    kept = protected_snapshots(table)
    snapshots = table.snapshots()
    old = [s for s in snapshots if s.timestamp_ms < now_ms - max_age and s.snapshot_id not in kept]
    if not old:
        return ExpiryOutcome(kept=sorted(kept))
    staying = [s for s in snapshots if s not in old]
    gone_files, gone_manifests = _files_of(table, old)
    kept_files, kept_manifests = _files_of(table, staying)
    try:
        table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in old]).commit()
    except CommitFailedException:
        return ExpiryOutcome(kept=sorted(kept))  # tried again at the next interval
    deleted = 0
    for path in sorted(gone_files - kept_files):
        table.io.delete(path)
        deleted += 1
    for path in sorted(gone_manifests - kept_manifests):
        table.io.delete(path)
    for snapshot in old:
        if snapshot.manifest_list:
            table.io.delete(snapshot.manifest_list)
    return ExpiryOutcome(expired=len(old), files_deleted=deleted, kept=sorted(kept))
