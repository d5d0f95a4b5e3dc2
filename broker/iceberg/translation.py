"""The Iceberg writer's pure core: which offsets to write next, when to commit, what a commit
must find in the table, and the records of a read turned into rows. No I/O, no trio, no
pyiceberg; time is passed in (as controller/state.py and h11 are built).

Where the issue is silent this follows Redpanda's Iceberg Topics (its datalake translator:
committed records only, control batches and aborted transactions never land, a commit at least
every ``iceberg.target.lag.ms``) and Apache Iceberg's table spec (a snapshot's summary is "a
string map of summary metadata about the snapshot's change", kept with the snapshot).

Exactly once. The table itself holds how far each partition has been written: every commit
records in its snapshot's summary, under ``minibroker.translation``, the topic id and the next
offset of every partition the table has rows of (the committing partitions' advanced, the
others' carried forward from the snapshot the commit is based on). A commit is conditional: it
is applied only if the table's current snapshot still holds, for each partition it writes, the
offset the writer started from (``conflicts``), and the catalog's optimistic concurrency (the
commit requires the table's current snapshot to be still the one that was checked) makes the
check and the commit one atomic step. So a writer that lost its partition (an old leader
finishing a commit) adds nothing twice, and a new leader or a restarted broker resumes from
what the table says (``table_offsets``), never from state of its own.

Departures from Redpanda, and why: Redpanda's translator writes Parquet files as records
arrive and a coordinator commits them per topic; here nothing is buffered between commits
(the log is the buffer): when a commit is due the leader reads its partitions from the table's
offsets to their last stable offset and writes them in one snapshot, so a broker that stops
loses nothing it would have to rebuild. Redpanda keeps the translated offsets in its own
coordinator state; here they live in the table's snapshots, where every engine can see them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from minibroker.protocol.buffers import Buffer
from minibroker.protocol.control_batch import read_control_marker
from minibroker.protocol.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    read_header,
    scan_valid_batches,
)
from minibroker.protocol.records import RecordError, decode_records

# The snapshot summary property that carries the translated offsets.
SUMMARY_KEY = "minibroker.translation"
# The timestamp_type column, as Spark's Kafka source has it (Kafka's TimestampType ids).
CREATE_TIME_TYPE = 0
LOG_APPEND_TIME_TYPE = 1
# A commit reads at most this many bytes of record batches, over all its partitions (the memory
# bound of what goes to the writer, service._read); what is left is committed next, at once.
MAX_COMMIT_BYTES = 32 * 1024 * 1024
# A failed commit (catalog unreachable, a disk error) is retried after this long, doubling.
RETRY_FIRST_MS = 1_000
RETRY_MAX_MS = 30_000


class TableStopped(Exception):
    """The topic was deleted (its tables are about to be dropped): the writer stops before
    its next write to the table, the dead-letter table or the catalog."""


# -- rows ------------------------------------------------------------------------------------


Header = tuple[str, bytes | None]


@dataclass
class Rows:
    """The key_value table's columns (Redpanda's key_value mode, flattened): one list per
    column, in offset order per partition."""

    partition: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    timestamp_ms: list[int] = field(default_factory=list)
    timestamp_type: list[int] = field(default_factory=list)
    key: list[bytes | None] = field(default_factory=list)
    value: list[bytes | None] = field(default_factory=list)
    headers: list[list[Header]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offset)

    def extend(self, other: Rows) -> None:
        self.partition += other.partition
        self.offset += other.offset
        self.timestamp_ms += other.timestamp_ms
        self.timestamp_type += other.timestamp_type
        self.key += other.key
        self.value += other.value
        self.headers += other.headers


class AbortedTransactions:
    """The consumer's side of read_committed, as Kafka's clients do it (CompletedFetch's
    abortedProducerIds, consumeAbortedTransactionsUpTo, containsAbortMarker, isBatchAborted):
    the aborted transactions a read returned, (producer id, first offset), become active as
    batches reach their first offset; a transactional batch of an active one is skipped until
    that producer's ABORT marker. Control batches are never records."""

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        self._waiting = sorted(aborted, key=lambda entry: entry[1], reverse=True)
        self._producers: set[int] = set()

    def _consume_up_to(self, offset: int) -> None:
        while self._waiting and self._waiting[-1][1] <= offset:
            self._producers.add(self._waiting.pop()[0])

    def skips(self, header: BatchHeader, batch: Buffer) -> bool:
        """Whether the batch holds no records to translate (a control batch, or a batch of
        an aborted transaction)."""
        if header.producer_id >= 0:
            self._consume_up_to(header.last_offset)
            if header.is_control:
                try:
                    commit, _ = read_control_marker(batch)
                except RecordError:
                    commit = True  # not a transaction marker: nothing to forget
                if not commit:
                    self._producers.discard(header.producer_id)
            elif header.is_transactional and header.producer_id in self._producers:
                return True
        return header.is_control


@dataclass(frozen=True)
class ReadChunk:
    """One read of a partition (ReplicaManager.read_records with read_committed): whole
    batches and the aborted transactions overlapping them, (producer id, first offset)."""

    records: bytes
    aborted: tuple[tuple[int, int], ...] = ()


def end_of_chunk(records: Buffer) -> int | None:
    """The offset after the last whole batch of a read, from the batch headers alone (no
    record decoded, no CRC computed: the shell calls it on the event loop); None for none."""
    position = 0
    last = None
    while position + HEADER_SIZE <= len(records):
        header = read_header(records, position)
        if position + header.size > len(records):
            break
        last = header.last_offset
        position += header.size
    return None if last is None else last + 1


def translate(partition: int, chunks: Sequence[ReadChunk], start: int, end: int) -> Rows:
    """The rows of the committed records in [start, end) of a partition's reads: batches
    checked (CRC) and decoded, control batches and aborted transactions left out, records
    before ``start`` (a read that began inside a batch) or from ``end`` on dropped. A
    LogAppendTime batch's records carry its max timestamp, as Kafka's consumers show them.
    RecordError when a batch does not decode."""
    rows = Rows()
    for chunk in chunks:
        aborted = AbortedTransactions(chunk.aborted)
        view = memoryview(chunk.records)
        for position, header in scan_valid_batches(view):
            if header.base_offset >= end:
                break
            batch = view[position : position + header.size]
            if aborted.skips(header, batch) or header.last_offset < start:
                continue
            append_time = header.uses_log_append_time
            timestamp_type = LOG_APPEND_TIME_TYPE if append_time else CREATE_TIME_TYPE
            for record in decode_records(batch):
                if record.offset < start:
                    continue
                if record.offset >= end:
                    break
                rows.partition.append(partition)
                rows.offset.append(record.offset)
                rows.timestamp_ms.append(header.max_timestamp if append_time else record.timestamp)
                rows.timestamp_type.append(timestamp_type)
                rows.key.append(record.key)
                rows.value.append(record.value)
                rows.headers.append(list(record.headers))
    return rows


# -- the offsets kept in the table -------------------------------------------------------------


def encode_summary(topic_id: str, offsets: Mapping[int, int]) -> dict[str, str]:
    """The snapshot summary properties of a commit: the topic id (a topic deleted and made
    again under the same name is another topic) and each partition's next offset."""
    value = {
        "topic-id": topic_id,
        "next-offsets": {str(index): offset for index, offset in sorted(offsets.items())},
    }
    return {SUMMARY_KEY: json.dumps(value, separators=(",", ":"))}


def decode_summary(properties: Mapping[str, str], topic_id: str) -> dict[int, int] | None:
    """The next offsets a snapshot's summary holds for ``topic_id``: None when it has no
    translation property (a snapshot made by another engine: look at its parent), {} when
    it is another topic's (an older topic of the same name: its offsets are not ours)."""
    text = properties.get(SUMMARY_KEY)
    if text is None:
        return None
    try:
        value = json.loads(text)
        if value.get("topic-id") != topic_id:
            return {}
        return {int(index): int(offset) for index, offset in value["next-offsets"].items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def table_offsets(summaries: Iterable[Mapping[str, str]], topic_id: str) -> dict[int, int]:
    """The next offset of each partition the table holds, from its snapshots' summaries,
    newest first (the current snapshot, then its parents): the newest with the translation
    property decides. {} for a table that has none (every partition starts at its log start)."""
    for properties in summaries:
        offsets = decode_summary(properties, topic_id)
        if offsets is not None:
            return offsets
    return {}


@dataclass(frozen=True)
class PartitionCommit:
    """One partition's part of a commit: the table must hold ``expected`` as its next offset
    (None: no row of it yet), and will hold ``next_offset``; ``start`` is where its read
    began (``expected``, or the log start offset when retention removed records before they
    were written); ``complete``: the read reached what was committed in the log."""

    index: int
    leader_epoch: int
    expected: int | None
    start: int
    next_offset: int
    complete: bool = True


@dataclass(frozen=True)
class CommitPlan:
    topic_id: str
    partitions: tuple[PartitionCommit, ...]


def conflicts(offsets: Mapping[int, int], plan: CommitPlan) -> dict[int, int | None]:
    """The plan's partitions whose next offset in the table is not the one the plan starts
    from (another writer committed them), with what the table holds: the commit must not be
    made. Empty: it may."""
    return {
        part.index: offsets.get(part.index)
        for part in plan.partitions
        if offsets.get(part.index) != part.expected
    }


def committed_offsets(offsets: Mapping[int, int], plan: CommitPlan) -> dict[int, int]:
    """The next offsets the commit records: the plan's advanced, every other carried."""
    merged = dict(offsets)
    for part in plan.partitions:
        merged[part.index] = part.next_offset
    return merged


@dataclass(frozen=True)
class CommitOutcome:
    """What a commit attempt did: ``rows`` written per partition in one snapshot (none and no
    snapshot when the reads held no record to write), or the partitions that conflicted
    (nothing written), or the error that stopped it (nothing written, as far as the table
    shows: a commit whose outcome is unknown is found out by the next one's check); and the
    records it wrote to the dead-letter table (value_schema_id_prefix)."""

    rows: Mapping[int, int] = field(default_factory=dict)
    snapshot: bool = False
    conflicts: Mapping[int, int | None] = field(default_factory=dict)
    error: str | None = None
    # value_schema_id_prefix: records written to the dead-letter table, per partition.
    dead_letters: Mapping[int, int] = field(default_factory=dict)


# -- when to read, when to commit --------------------------------------------------------------


@dataclass
class PartitionProgress:
    """One partition led here: what the table holds of it and what is waiting."""

    index: int
    leader_epoch: int
    # The table's next offset for this partition as last read or written (None: no row yet):
    # the value the next commit must find.
    stored: int | None
    # The next offset to translate (the table holds everything before it that is a record).
    position: int
    log_start_offset: int = 0
    # The log's end for translation (its last stable offset) when last observed.
    end_offset: int = 0
    # When records past ``position`` were first seen committed in the log (None: none).
    waiting_since_ms: int | None = None

    @property
    def lag_records(self) -> int:
        """Offsets committed in the log and not yet in the table (markers and aborted
        records included: they are offsets the table has not passed)."""
        return max(0, self.end_offset - self.position)


class TopicTranslation:
    """The partitions of one topic led here, and the decisions of the writer that serves
    them: which partitions to read and from where, when a commit is due (``iceberg.target.
    lag.ms`` after records became committed in the log, at once for a read cut short by the
    memory bound, later after a failure), and how each outcome moves the positions."""

    def __init__(self, topic_id: str, target_lag_ms: int) -> None:
        self.topic_id = topic_id
        self.target_lag_ms = target_lag_ms
        self.partitions: dict[int, PartitionProgress] = {}
        self.retry_at_ms: int | None = None
        self.failures = 0
        self.last_error: str | None = None

    def add(
        self,
        index: int,
        leader_epoch: int,
        stored: Mapping[int, int],
        log_start_offset: int,
        now_ms: int,
    ) -> int:
        """A partition this broker now leads, with the table's offsets as just read; returns
        how many offsets retention removed before they were translated (0 normally)."""
        held = stored.get(index)
        progress = PartitionProgress(
            index, leader_epoch, held, held if held is not None else log_start_offset
        )
        self.partitions[index] = progress
        return self._clamp(progress, log_start_offset)

    def drop(self, index: int) -> None:
        """A partition no longer led here (or at a new epoch): forget it; the next writer
        starts from what the table holds."""
        self.partitions.pop(index, None)

    def _clamp(self, progress: PartitionProgress, log_start_offset: int) -> int:
        progress.log_start_offset = log_start_offset
        if progress.position < log_start_offset:
            skipped = log_start_offset - progress.position
            progress.position = log_start_offset
            return skipped
        return 0

    def observe(self, index: int, end_offset: int, log_start_offset: int, now_ms: int) -> int:
        """The partition's log as it is now: its last stable offset and log start. Returns the
        offsets retention removed before they were translated (0 normally)."""
        progress = self.partitions[index]
        skipped = self._clamp(progress, log_start_offset)
        progress.end_offset = end_offset
        if end_offset > progress.position:
            if progress.waiting_since_ms is None:
                progress.waiting_since_ms = now_ms
        else:
            progress.waiting_since_ms = None
        return skipped

    def next_deadline_ms(self) -> int | None:
        """When the next commit is due (None: nothing waits)."""
        waiting = [
            p.waiting_since_ms + self.target_lag_ms
            for p in self.partitions.values()
            if p.waiting_since_ms is not None
        ]
        if not waiting:
            return None
        due = min(waiting)
        return due if self.retry_at_ms is None else max(due, self.retry_at_ms)

    def due(self, now_ms: int) -> bool:
        deadline = self.next_deadline_ms()
        return deadline is not None and now_ms >= deadline

    def to_read(self) -> list[PartitionProgress]:
        """The partitions with committed records past their position: a commit reads these
        from ``position`` to ``end_offset``."""
        return [p for p in self.partitions.values() if p.end_offset > p.position]

    def plan(self, read_ends: Mapping[int, int]) -> CommitPlan:
        """The commit of what was read: each partition from its position to ``read_ends``
        (the offset after the last batch read, or the end it was read to)."""
        parts = []
        for index, read_end in sorted(read_ends.items()):
            progress = self.partitions[index]
            if read_end <= progress.position:
                continue
            parts.append(
                PartitionCommit(
                    index,
                    progress.leader_epoch,
                    progress.stored,
                    progress.position,
                    read_end,
                    complete=read_end >= progress.end_offset,
                )
            )
        return CommitPlan(self.topic_id, tuple(parts))

    def apply(self, plan: CommitPlan, outcome: CommitOutcome, now_ms: int) -> None:
        """Move the positions by what the commit did."""
        if not plan.partitions and outcome.error is None:
            # Records were seen but none could be read (the log moved under the read): look
            # again a little later rather than at once.
            self.retry_at_ms = now_ms + RETRY_FIRST_MS
            return
        if outcome.error is not None:
            self.failures += 1
            self.last_error = outcome.error
            self.retry_at_ms = now_ms + min(RETRY_MAX_MS, RETRY_FIRST_MS << (self.failures - 1))
            return
        self.failures = 0
        self.retry_at_ms = None
        self.last_error = None
        if outcome.conflicts:
            # Another writer moved these partitions: start again from what the table holds.
            # The others keep their positions and are committed at once, on their own.
            for index, held in outcome.conflicts.items():
                progress = self.partitions.get(index)
                if progress is None:
                    continue
                progress.stored = held
                progress.position = max(
                    held if held is not None else progress.log_start_offset,
                    progress.log_start_offset,
                )
            return
        for part in plan.partitions:
            progress = self.partitions.get(part.index)
            if progress is None or progress.leader_epoch != part.leader_epoch:
                continue
            if outcome.snapshot:
                progress.stored = part.next_offset
            # Without a snapshot the range held no record: the position moves past it, the
            # table's offset does not (a restart reads it again and again finds nothing).
            progress.position = part.next_offset
            if part.complete and progress.end_offset <= progress.position:
                progress.waiting_since_ms = None

    def lag_ms(self, now_ms: int) -> int:
        """How long the oldest committed record not yet in the table has waited."""
        waiting = [
            p.waiting_since_ms for p in self.partitions.values() if p.waiting_since_ms is not None
        ]
        return max(0, now_ms - min(waiting)) if waiting else 0
