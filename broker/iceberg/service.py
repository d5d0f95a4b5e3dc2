"""Iceberg topics' trio shell: on the leader of each partition of a topic with
``iceberg.mode=key_value`` or ``value_schema_id_prefix``, its committed records written to the
topic's Iceberg table.

Redpanda's Iceberg Topics (docs/iceberg-topics.md says where minibroker differs): the
partition leader translates; here one writer task per topic serves the partitions of it this
broker leads, and each commit is one snapshot covering them.

- Which partitions: every partition led here whose topic's config has ``iceberg.mode`` =
  ``key_value`` or ``value_schema_id_prefix`` (a scan of the replica manager's partitions,
  woken by role changes and every second for config changes); a topic whose config does not
  ask is never read here, so the data path never decodes its records.
- Reading: through the replica manager's read path (``ReplicaManager.read_records``, as
  Fetch and share fetches read), as a read_committed consumer: up to the last stable offset,
  with the aborted transactions of each read, so aborted records never land and control
  batches are skipped (translation.AbortedTransactions, Kafka's consumer logic).
- Writing: the pure core (translation.TopicTranslation) says when a commit is due (at most
  ``iceberg.target.lag.ms`` after records became committed in the log) and from which
  offsets; the batches read (raw, no record decoded here: at most MAX_COMMIT_BYTES per
  commit, the memory bound) go to the writer (writer.py), which decodes them, makes the Arrow
  columns and Parquet files and commits them with pyiceberg, one call at a time per broker. In
  a node the writer is a process of its own (``ProcessWriter``: multiprocessing's 'spawn',
  started with the first Iceberg topic led here, started again if it ends, ended with the
  service), because a worker thread's Python code holds the interpreter's lock and stalled
  the event loop, every client's requests with it (docs/iceberg-topics.md, "What translation
  costs the broker"); where Redpanda translates in its own broker's threads (C++, no such
  lock). In-process tests keep it in a worker thread (``ThreadWriter``). The commit is
  conditional on the table's offsets (exactly once: translation's docstring), which also
  makes a writer process killed mid-commit harmless: its successor's next commit finds what
  landed.
- Leadership: a partition no longer led here (or led at a new epoch) is dropped from its
  writer; a newly led one starts from the offsets the table holds, read again from the
  table. A commit that was in flight when leadership moved is refused by the table if the new
  leader committed first, and the new leader's is refused if the old one did, so nothing
  lands twice.
- Schemas (value_schema_id_prefix): from the schema registry this broker serves, in process
  (``SchemaSource``, wired by the node; the registry's package and this one do not import
  each other): before each commit the registry's copy of ``_schemas`` is brought up to its
  high watermark on the event loop, then the writer asks it for each schema id it has not
  seen while the commit waits (over the writer process's channel, or ``trio.from_thread``
  from the thread: the registry's state is only read on the loop; ids are not resolved before
  sending, which would decode each record's prefix on the loop); a Protobuf schema is built
  by the writer with the registry's own ``protobuf_file``. An id
  the copy does not hold is not yet a dead letter (``find_schema``): the copy's high
  watermark may lag (a broker just restarted, or just elected leader of ``_schemas``, has
  not fetched yet: the records of an id registered before they were produced were sent to
  the dead-letter table by such a leader, and by the next leader to the table as well). The
  copy is first caught up to ``_schemas``' end as its leader knows it
  (``SchemaSource.caught_up_to_end``); only an id still absent then is one, as Confluent's
  deserializers fail only on an id the registry answers 40403 for. When that end cannot be
  known (the leader does not answer, no replica of ``_schemas`` here, a timeout), the commit
  fails with the reason and is retried: nothing is written, the lag grows.
  A broker without the registry (no ``schema.registry.listeners``) cannot translate such a
  topic: its commits fail with that reason, and the lag grows.
- Deletion: when a StopReplica deletes a hosted partition of a topic with ``iceberg.delete``
  (the default), the topic's writer here is stopped first: its task cancelled (a call not yet
  made never runs) and its table told to stop (``TopicTable.stop``, sent to the writer
  process at once: a commit it is running writes nothing more after its next check), and the
  drop waits until the writer task has ended and the writer has answered any call under way;
  then the topic's table and dead-letter table are purged (table.drop_topic_tables), by
  every broker that hosted a replica (the first one does it; the others find them gone). So
  nothing of the topic is written here after its drop: a careful operator's order (stop the
  writers, then drop), where Redpanda's is its own coordinator's. A write already under way
  on this broker when the deletion reaches it finishes first; if another broker dropped the
  tables meanwhile, this broker's own drop, which comes after, purges what that write made
  again (a Parquet file of an append whose catalog commit then failed is an orphan: the
  page's "Not supported yet").
- Failures (no pyiceberg, a catalog that cannot be reached, a disk error, a writer process
  that ended: it is started again on the next call): logged, retried with a growing delay;
  the topic still takes writes, and the lag metrics grow.
- Maintenance (maintenance.py; Spark's ``rewrite_data_files`` and ``expire_snapshots`` are
  Iceberg's counterparts, Redpanda has none to copy): the writer of the broker that leads
  partition 0 compacts the table's small files every ``iceberg.compaction.interval.ms`` and
  expires its old snapshots every ``iceberg.snapshot.expiry.interval.ms``, between its
  commits, in the same writer. One broker per table so that two never rewrite the same
  files; partition 0 because every topic has one and its leadership is already known here.
  A stale leader of partition 0 still compacting is harmless: compactions lose to any commit
  in between, as the writers' own commits do.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from minibroker.common.config import BrokerConfig
from minibroker.iceberg.translation import (
    MAX_COMMIT_BYTES,
    RETRY_FIRST_MS,
    CommitOutcome,
    CommitPlan,
    ReadChunk,
    TableStopped,
    TopicTranslation,
    end_of_chunk,
)
from minibroker.iceberg.writer import ProcessWriter, ThreadWriter
from minibroker.iceberg.writer_process import RemoteError, TableHandle, catalog_settings
from minibroker.protocol.errors import Error
from minibroker.replication.partition import Partition
from minibroker.replication.replica_manager import ReplicaManager, wall_clock_ms
from minibroker.storage.log import ICEBERG_KEY_VALUE, ICEBERG_VALUE_SCHEMA_ID_PREFIX

log = logging.getLogger("iceberg")

# The scan for topics to write: on every role change, and this often for config changes.
SCAN_INTERVAL_S = 1.0
# A writer looks at leadership and its partitions' logs at least this often.
RECHECK_S = 1.0
READ_BYTES = 1024 * 1024
# Table maintenance first runs this long after a broker takes partition 0 (then every
# interval): soon after a restart or a leader change, not during its first commits.
FIRST_MAINTENANCE_MS = 60_000
WRITTEN_MODES = (ICEBERG_KEY_VALUE, ICEBERG_VALUE_SCHEMA_ID_PREFIX)
PROTOBUF = "PROTOBUF"
NO_REGISTRY = (
    "iceberg.mode=value_schema_id_prefix needs the schema registry on the partition leader"
    " (schema.registry.listeners)"
)


class SchemaSource(Protocol):
    """The schemas of the broker's own registry, as the Iceberg writer asks for them."""

    async def caught_up(self) -> None:
        """Wait until the registry's copy has applied `_schemas` up to its own high watermark
        (cheap, local; not a promise that it holds every schema registered so far)."""

    async def caught_up_to_end(self) -> None:
        """Wait until the registry's copy has applied `_schemas` up to its end as its leader
        knows it: then an id it does not hold was not registered. Raises when that cannot be
        known (the commit fails, and is retried)."""

    def schema(self, schema_id: int) -> tuple[str, str, dict[str, str]] | None:
        """(schema type, schema text, its references' texts by name) of an id; None when the
        registry has none. Called on the event loop."""

    def protobuf_file(self, text: str, dependencies: dict[str, str]) -> Any:
        """A PROTOBUF schema built into a FileDescriptor. Pure: called by the writer (in its
        process, sent there by reference: a function of a module, such as a staticmethod)."""


class IcebergService:
    """The writers of the Iceberg topics' partitions led by this broker."""

    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        clock_ms: Callable[[], int] = wall_clock_ms,
        writer: ThreadWriter | ProcessWriter | None = None,
    ) -> None:
        self.config = config
        # Where the blocking calls run: the node gives a ProcessWriter; in-process tests of
        # the service keep them in a worker thread of their own process.
        self.writer = writer if writer is not None else ThreadWriter(catalog_settings(config))
        self.replicas = replicas
        self.clock_ms = clock_ms
        self.translations: dict[str, TopicTranslation] = {}
        self.rows_written: Counter[tuple[str, int]] = Counter()
        self.dead_letters: Counter[tuple[str, int]] = Counter()
        self.commits: Counter[str] = Counter()
        # Maintenance by the leader of partition 0: compaction snapshots, the data files they
        # replaced, snapshots expired.
        self.compactions: Counter[str] = Counter()
        self.compacted_files: Counter[str] = Counter()
        self.expired_snapshots: Counter[str] = Counter()
        # The node sets it when this broker serves the schema registry.
        self.schemas: SchemaSource | None = None
        self._writers: set[str] = set()
        self._changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        replicas.role_listeners.append(self._on_role_change)
        replicas.deletion_listeners.append(self._on_deletion)
        # (topic, topic id) whose tables are being dropped.
        self._dropping: set[tuple[str, str]] = set()
        # Each running writer's cancel scope, the event set when it has ended, and the table
        # it writes (a deletion stops the writer before the drop).
        self._writer_scopes: dict[str, trio.CancelScope] = {}
        self._writer_ended: dict[str, trio.Event] = {}
        self._tables: dict[str, TableHandle] = {}
        # Where the next commit's read starts among the partitions waiting (so the memory
        # bound, MAX_COMMIT_BYTES per commit, starves none).
        self._first_read = 0

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while True:
                    self._start_writers()
                    with trio.move_on_after(SCAN_INTERVAL_S):
                        await self._changed.wait()
                    self._changed = trio.Event()
        finally:
            with trio.CancelScope(shield=True):
                await self.writer.aclose()

    def _on_role_change(self, partition: Partition) -> None:
        self._changed.set()

    def _on_deletion(self, partition: Partition) -> None:
        """A partition of a deleted topic, hosted here: drop the topic's tables if its config
        asks (``iceberg.delete``, on by default as Redpanda's), in a task of its own."""
        config = partition.log.config
        if config.iceberg_mode not in WRITTEN_MODES or not config.iceberg_delete:
            return
        key = (partition.topic, str(partition.topic_id))
        if key in self._dropping or self._nursery is None:
            return
        self._dropping.add(key)
        ended = self._stop_writer(*key)
        self._nursery.start_soon(self._drop_tables, *key, ended)

    def _stop_writer(self, topic: str, topic_id: str) -> trio.Event | None:
        """Stop the topic's writer here, if it writes this topic id: its task cancelled, its
        table told to stop. Returns the event set when the writer has ended (None: none)."""
        translation = self.translations.get(topic)
        scope = self._writer_scopes.get(topic)
        if scope is None or (translation is not None and translation.topic_id != topic_id):
            return None
        table = self._tables.get(topic)
        if table is not None:
            self.writer.stop(table)
            if self._nursery is not None:
                self._nursery.start_soon(self.writer.send_stops)
        scope.cancel()
        return self._writer_ended.get(topic)

    async def _drop_tables(
        self, topic: str, topic_id: str, writer_ended: trio.Event | None = None
    ) -> None:
        try:
            if writer_ended is not None:
                # Nothing of the topic is written here once the drop starts.
                await writer_ended.wait()
            dropped = await self.writer.drop(topic, topic_id)
        except Exception as error:
            log.warning(
                "cannot drop the Iceberg tables of deleted topic %s: %s", topic, _text(error)
            )
            return
        finally:
            self._dropping.discard((topic, topic_id))
        if dropped:
            names = ", ".join(dropped)
            log.info("dropped the Iceberg table(s) of deleted topic %s: %s", topic, names)

    # -- which partitions --------------------------------------------------------------------

    def _led(self, topic: str | None = None) -> dict[str, dict[int, Partition]]:
        """The partitions led here whose topic asks for a table, by topic."""
        found: dict[str, dict[int, Partition]] = {}
        for partition in self.replicas.partitions():
            if topic is not None and partition.topic != topic:
                continue
            if partition.is_leader and partition.log.config.iceberg_mode in WRITTEN_MODES:
                found.setdefault(partition.topic, {})[partition.index] = partition
        return found

    def _start_writers(self) -> None:
        assert self._nursery is not None
        dropping = {topic for topic, _ in self._dropping}
        for topic in self._led():
            if topic not in self._writers and topic not in dropping:
                self._writers.add(topic)
                self._nursery.start_soon(self._write_topic, topic)

    # -- the writer of one topic -------------------------------------------------------------------

    async def _write_topic(self, topic: str) -> None:
        ended = self._writer_ended[topic] = trio.Event()
        try:
            # Cancelled when the topic is deleted (_stop_writer): a call under way in the
            # writer is not abandoned (the worker thread's is waited for; the writer
            # process's next call waits for its answer first), one not yet made never runs.
            with trio.CancelScope() as scope:
                self._writer_scopes[topic] = scope
                await self._translate(topic)
        finally:
            self._writers.discard(topic)
            self.translations.pop(topic, None)
            self._writer_scopes.pop(topic, None)
            self._tables.pop(topic, None)
            self._writer_ended.pop(topic, None)
            ended.set()

    async def _translate(self, topic: str) -> None:
        table: TableHandle | None = None
        translation: TopicTranslation | None = None
        # Whether the failures counted are the table's opening's (a commit's failure reopens
        # the table too: its opening must not clear the commit's count, its backoff and the
        # error minibroker_iceberg_last_error shows).
        open_failing = False
        # When this broker, leading partition 0, next compacts the table and expires its
        # snapshots (None: not yet scheduled).
        maintenance: dict[str, int | None] = {"compaction": None, "expiry": None}
        while True:
            # Every path below awaits, but a loop of the event loop's own must never spin.
            await trio.lowlevel.checkpoint()
            led = self._led(topic).get(topic)
            if not led:
                return
            first = next(iter(led.values()))
            topic_id, config = str(first.topic_id), first.log.config
            if translation is None or translation.topic_id != topic_id:
                # First sight, or the topic was deleted and made again under its name.
                translation = TopicTranslation(topic_id, config.iceberg_target_lag_ms)
                self.translations[topic] = translation
                table = None
            if table is not None and table.mode != config.iceberg_mode:
                table = None  # the mode was changed: the table is opened for the new one
            if table is None:
                try:
                    table = await self.writer.open(
                        topic, topic_id, config.iceberg_partition_spec, config.iceberg_mode
                    )
                except Exception as error:
                    open_failing = True
                    translation.failures += 1
                    translation.last_error = _text(error)
                    log.warning("cannot open the Iceberg table of %s: %s", topic, _text(error))
                    await trio.sleep(
                        min(30.0, RETRY_FIRST_MS / 1000 * 2 ** min(5, translation.failures - 1))
                    )
                    continue
                if open_failing:
                    open_failing = False
                    translation.failures = 0
                    translation.last_error = None
                self._tables[topic] = table
            translation.target_lag_ms = config.iceberg_target_lag_ms
            for index, progress in list(translation.partitions.items()):
                partition = led.get(index)
                if partition is None or partition.leader_epoch != progress.leader_epoch:
                    translation.drop(index)
            new = [index for index in led if index not in translation.partitions]
            if new:
                try:
                    stored = await self.writer.offsets(table)
                except Exception as error:
                    translation.last_error = _text(error)
                    log.warning("cannot read the offsets of %s's table: %s", topic, _text(error))
                    await trio.sleep(RETRY_FIRST_MS / 1000)
                    continue
                # Leadership may have moved while the table was read: look again first.
                led = self._led(topic).get(topic, {})
                for index in new:
                    partition = led.get(index)
                    if partition is None:
                        continue
                    skipped = translation.add(
                        index,
                        partition.leader_epoch,
                        stored,
                        partition.log.log_start_offset,
                        self.clock_ms(),
                    )
                    _warn_skipped(topic, index, skipped)
                    log.info(
                        "writing %s-%d to its Iceberg table from offset %d",
                        topic,
                        index,
                        translation.partitions[index].position,
                    )
                continue
            now = self.clock_ms()
            for index, partition in led.items():
                skipped = translation.observe(
                    index, partition.last_stable_offset, partition.log.log_start_offset, now
                )
                _warn_skipped(topic, index, skipped)
            if translation.due(now):
                reads, ends = await self._read(translation, led)
                plan = translation.plan(ends)
                outcome = await self._commit(table, plan, reads)
                translation.apply(plan, outcome, self.clock_ms())
                self._count(topic, outcome)
                if outcome.error is not None:
                    # Opened again before the next try: the table may have been dropped
                    # (its topic deleted and made again, or by hand).
                    table = None
                continue
            if 0 in led:
                due = await self._maintain(topic, table, config, maintenance, now)
                if due is not None and due <= self.clock_ms():
                    continue
            else:
                maintenance.update(compaction=None, expiry=None)
            deadline = translation.next_deadline_ms()
            wait_s = RECHECK_S if deadline is None else min(RECHECK_S, (deadline - now) / 1000)
            # Partitions with records already waiting need no wake-up on append: their commit
            # is due at the deadline whatever arrives before it.
            idle = [
                led[index].key
                for index, progress in translation.partitions.items()
                if progress.waiting_since_ms is None and index in led
            ]
            if 0 in led:
                pending = [at for at in maintenance.values() if at is not None]
                if pending:
                    wait_s = min(wait_s, (min(pending) - now) / 1000)
            await self.replicas.watchers.wait_any(
                idle, trio.current_time() + max(0.0, wait_s), "Iceberg"
            )

    async def _maintain(
        self, topic: str, table: TableHandle, config: Any, due: dict[str, int | None], now: int
    ) -> int | None:
        """Table maintenance, on the leader of partition 0 only: one broker per table, so two
        brokers never rewrite the same files, and a leader change moves it with partition 0.
        Each task runs every ``iceberg.compaction.interval.ms`` /
        ``iceberg.snapshot.expiry.interval.ms`` (0: never), first FIRST_MAINTENANCE_MS (or
        the interval, if shorter) after this broker took partition 0, in the writer between
        commits (the writer's own commits are never delayed by more than one
        maintenance call). Returns the next time one is due (None: neither is on)."""
        intervals = {
            "compaction": config.iceberg_compaction_interval_ms,
            "expiry": config.iceberg_snapshot_expiry_interval_ms,
        }
        for task, interval in intervals.items():
            if interval <= 0:
                due[task] = None
                continue
            at = due[task]
            if at is None:
                # First sight: soon, not a whole interval on (brokers restarted more often
                # than the interval would never get to it).
                due[task] = now + min(interval, FIRST_MAINTENANCE_MS)
                continue
            if at > now + interval:
                due[task] = now + interval  # the interval was shortened
                continue
            if at > now:
                continue
            due[task] = now + interval
            try:
                if task == "compaction":
                    outcome = await self.writer.compact(table)
                    if outcome.removed:
                        self.compactions[topic] += 1
                        self.compacted_files[topic] += outcome.removed
                        log.info(
                            "compacted %s's Iceberg table: %d small files rewritten as %d"
                            " (made again on top of %d commits that came first)",
                            topic,
                            outcome.removed,
                            outcome.added,
                            outcome.rebased,
                        )
                    elif outcome.lost_race:
                        log.info("%s: a commit came first, compaction tried again later", topic)
                else:
                    expired = await self.writer.expire(table)
                    if expired.expired:
                        self.expired_snapshots[topic] += expired.expired
                        log.info(
                            "expired %d snapshots of %s's Iceberg table (%d files deleted)",
                            expired.expired,
                            topic,
                            expired.files_deleted,
                        )
            except TableStopped:
                return None
            except Exception as error:
                log.warning(
                    "Iceberg table maintenance (%s) of %s failed: %s", task, topic, _text(error)
                )
        pending = [at for at in due.values() if at is not None]
        return min(pending) if pending else None

    async def _read(
        self, translation: TopicTranslation, led: dict[int, Partition]
    ) -> tuple[dict[int, list[ReadChunk]], dict[int, int]]:
        """The waiting partitions' committed batches from their positions, as a
        read_committed consumer reads them, without decoding any; the event loop serves others
        between reads of READ_BYTES. At most MAX_COMMIT_BYTES in all (plus the read that
        crosses it): the memory bound of what goes to the writer (writer.py). A partition left
        out, or read in part, is committed next, at once; the partition read first turns with
        each commit, so none waits for the others' backlog."""
        reads: dict[int, list[ReadChunk]] = {}
        ends: dict[int, int] = {}
        waiting = translation.to_read()
        self._first_read += 1
        turn = self._first_read % len(waiting) if waiting else 0
        total = 0
        for progress in waiting[turn:] + waiting[:turn]:
            partition = led.get(progress.index)
            if partition is None or total >= MAX_COMMIT_BYTES:
                continue
            offset, chunks = progress.position, []
            while offset < progress.end_offset and total < MAX_COMMIT_BYTES:
                entry = self.replicas.read_records(
                    partition,
                    offset,
                    replica_id=-1,
                    last_fetched_epoch=-1,
                    max_bytes=READ_BYTES,
                    min_one_batch=True,
                    record_progress=False,
                    isolation_level=1,
                )
                if entry["error_code"] != Error.NONE:
                    break
                data = bytes(entry["records"] or b"")
                next_offset = end_of_chunk(data)
                if next_offset is None or next_offset <= offset:
                    break
                aborted = tuple(
                    (found["producer_id"], found["first_offset"])
                    for found in entry["aborted_transactions"] or ()
                )
                chunks.append(ReadChunk(data, aborted))
                total += len(data)
                offset = next_offset
                await trio.lowlevel.checkpoint()
            reads[progress.index] = chunks
            ends[progress.index] = offset
        return reads, ends

    async def _commit(
        self, table: TableHandle, plan: CommitPlan, reads: dict[int, list[ReadChunk]]
    ) -> CommitOutcome:
        if not plan.partitions:
            return CommitOutcome()
        try:
            if table.mode == ICEBERG_VALUE_SCHEMA_ID_PREFIX:
                schemas = self.schemas
                if schemas is None:
                    log.warning("Iceberg commit failed: %s", NO_REGISTRY)
                    return CommitOutcome(error=NO_REGISTRY)
                await schemas.caught_up()
                source = schemas

                async def find(schema_id: int) -> tuple[str, str, Any] | None:
                    # On the event loop, asked by the writer while its commit waits (None:
                    # the id is not registered; an exception when that cannot be known fails
                    # the commit); a Protobuf schema is built by the writer.
                    return await find_schema(source, schema_id)

                return await self.writer.commit(table, plan, reads, find, source.protobuf_file)
            return await self.writer.commit(table, plan, reads)
        except TableStopped as error:
            return CommitOutcome(error=str(error))
        except Exception as error:
            log.warning("Iceberg commit failed: %s", _text(error))
            return CommitOutcome(error=_text(error))

    def _count(self, topic: str, outcome: CommitOutcome) -> None:
        if outcome.snapshot:
            self.commits[topic] += 1
            for index, rows in outcome.rows.items():
                self.rows_written[(topic, index)] += rows
        for index, dead in outcome.dead_letters.items():
            self.dead_letters[(topic, index)] += dead
            log.warning(
                "%s-%d: %d records written to the dead-letter table (%s~dlq)",
                topic,
                index,
                dead,
                topic,
            )
        for index, held in outcome.conflicts.items():
            log.warning(
                "%s-%d: the table holds offset %s, not the one this writer started from"
                " (another writer committed): starting again from the table's",
                topic,
                index,
                held,
            )


async def find_schema(source: SchemaSource, schema_id: int) -> tuple[str, str, Any] | None:
    """(schema type, schema text, references' texts) of ``schema_id`` as the registry holds
    it; None only when the id is not registered, known after the registry's copy has caught
    up to `_schemas`' end as its leader knows it (an exception when that cannot be known:
    the record must not become a dead letter). On the event loop."""
    found = source.schema(schema_id)
    if found is None:
        await source.caught_up_to_end()
        found = source.schema(schema_id)
    return found


def _text(error: BaseException) -> str:
    if isinstance(error, ImportError):
        return f"pyiceberg is not installed ({error}): pip install 'minibroker[iceberg]'"
    if isinstance(error, RemoteError):
        return str(error)  # the writer process's error: its type's name and text already
    return f"{type(error).__name__}: {error}"


def _warn_skipped(topic: str, index: int, skipped: int) -> None:
    if skipped:
        log.warning(
            "%s-%d: %d offsets were deleted by retention before they were written to the"
            " Iceberg table",
            topic,
            index,
            skipped,
        )


class IcebergCollector:
    """Iceberg topics' metrics, read at scrape time: rows written and snapshots committed by
    this broker, each led partition's lag behind its log, and failing commits."""

    def __init__(self, service: IcebergService) -> None:
        self.service = service

    def describe(self) -> list:
        return []

    def collect(self):
        service = self.service
        now = service.clock_ms()
        rows = CounterMetricFamily(
            "minibroker_iceberg_rows_written",
            "Rows this broker wrote to Iceberg tables as partition leader.",
            labels=["topic", "partition"],
        )
        for (topic, index), count in sorted(service.rows_written.items()):
            rows.add_metric([topic, str(index)], count)
        yield rows
        dead = CounterMetricFamily(
            "minibroker_iceberg_dead_letters",
            "Records this broker wrote to topics' dead-letter tables (<topic>~dlq) because they"
            " could not be written typed (iceberg.mode=value_schema_id_prefix).",
            labels=["topic", "partition"],
        )
        for (topic, index), count in sorted(service.dead_letters.items()):
            dead.add_metric([topic, str(index)], count)
        yield dead
        commits = CounterMetricFamily(
            "minibroker_iceberg_commits",
            "Iceberg snapshots this broker committed, by topic.",
            labels=["topic"],
        )
        for topic, count in sorted(service.commits.items()):
            commits.add_metric([topic], count)
        yield commits
        lag = GaugeMetricFamily(
            "minibroker_iceberg_lag_records",
            "Offsets committed in a partition's log (up to its last stable offset) and not"
            " yet in its topic's Iceberg table, for the partitions this broker leads.",
            labels=["topic", "partition"],
        )
        lag_seconds = GaugeMetricFamily(
            "minibroker_iceberg_lag_seconds",
            "How long the oldest committed record not yet in the topic's Iceberg table has waited.",
            labels=["topic"],
        )
        failing = GaugeMetricFamily(
            "minibroker_iceberg_commit_failures",
            "Iceberg commits of the topic that failed in a row (0: the last one succeeded).",
            labels=["topic"],
        )
        last_error = GaugeMetricFamily(
            "minibroker_iceberg_last_error",
            "1 with the error of the topic's writer here, while its last attempt (opening the"
            " table, reading its offsets, a commit) failed; no sample once one succeeds"
            " (minibroker iceberg prints it).",
            labels=["topic", "error"],
        )
        for topic, translation in sorted(service.translations.items()):
            for index, progress in sorted(translation.partitions.items()):
                lag.add_metric([topic, str(index)], progress.lag_records)
            lag_seconds.add_metric([topic], translation.lag_ms(now) / 1000)
            failing.add_metric([topic], translation.failures)
            if translation.last_error is not None:
                last_error.add_metric([topic, translation.last_error[:500]], 1)
        yield lag
        yield lag_seconds
        yield failing
        yield last_error
        starts = CounterMetricFamily(
            "minibroker_iceberg_writer_starts",
            "Iceberg writer processes this broker started (more than one: one ended, a crash"
            " or a kill, and another took its place).",
        )
        starts.add_metric([], service.writer.started)
        yield starts
        compactions = CounterMetricFamily(
            "minibroker_iceberg_compactions",
            "Compaction snapshots (replace) this broker committed, as leader of the topic's"
            " partition 0.",
            labels=["topic"],
        )
        compacted = CounterMetricFamily(
            "minibroker_iceberg_compacted_files",
            "Small data files this broker's compactions replaced.",
            labels=["topic"],
        )
        expired = CounterMetricFamily(
            "minibroker_iceberg_expired_snapshots",
            "Snapshots this broker expired from topics' tables.",
            labels=["topic"],
        )
        for topic, count in sorted(service.compactions.items()):
            compactions.add_metric([topic], count)
        for topic, count in sorted(service.compacted_files.items()):
            compacted.add_metric([topic], count)
        for topic, count in sorted(service.expired_snapshots.items()):
            expired.add_metric([topic], count)
        yield compactions
        yield compacted
        yield expired
