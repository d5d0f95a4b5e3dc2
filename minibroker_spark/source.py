"""The Spark side: a Python data source named `minibroker` with Spark's Kafka source schema and
options, batch and streaming, reading and writing.

Plans (which partitions, which offsets) are made on the driver with an AdminClient; each Spark
task reads one offset range with a consumer of its own (kept in the Python worker's pool for
the next task of that partition, as Spark's connector keeps its consumers), or writes its rows
with its own producer.
Streaming offsets are Spark's Kafka source's JSON, `{"topic":{"0":42}}`, kept in Spark's
checkpoint: no consumer group and no committed offsets are involved.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from minibroker.spark import kafka, transactions
from minibroker.spark.kafka import OffsetRange, TopicPartition
from minibroker.spark.options import (
    EXACTLY_ONCE,
    FAIL_ON_DATA_LOSS,
    OptionError,
    ReadOptions,
    WriteOptions,
    include_headers,
    read_options,
    write_options,
)
from minibroker.spark.transactions import TaskWrite, write_transactionally

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

try:  # pyspark >= 4.2
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    _READ_LIMITS = True
except ImportError:  # pragma: no cover - older pyspark: no read limits, no availableNow
    _READ_LIMITS = False  # ReadAllAvailable and ReadMaxRows are not defined then

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


log = logging.getLogger("minibroker_spark")

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def read_columns(schema: StructType, include_headers: bool) -> tuple[str, ...]:
    """The columns a read builds: Spark's Python Data Source API has no column pruning (every
    batch must carry the whole schema), so a query that needs fewer columns says so with a
    schema of its own, `spark.read.format("minibroker").schema("value binary")`: any subset of
    the Kafka source's columns, with their types, in any order. Spark's Kafka source refuses a
    user schema; here it is how a query reads only what it uses."""
    full = kafka_schema(include_headers=True)
    types = {field.name: field.dataType for field in full.fields}
    names = ", ".join(types)
    if not schema.fields:
        raise OptionError(f"the schema names no column: give one or more of {names}")
    for field in schema.fields:
        if field.name not in types:
            raise OptionError(
                f"column {field.name!r} is not a column of the Kafka source (columns: {names})"
            )
        if field.dataType != types[field.name]:
            raise OptionError(
                f"column {field.name} must be {types[field.name].simpleString()},"
                f" not {field.dataType.simpleString()}"
            )
    columns = tuple(field.name for field in schema.fields)
    if len(set(columns)) != len(columns):
        raise OptionError(f"the schema names a column twice: {', '.join(columns)}")
    return columns


def encode_offsets(offsets: dict[TopicPartition, int]) -> dict:
    """Spark's Kafka source offset JSON: topics sorted by name, partitions by number. Spark
    compares offsets as JSON text, so the order must never depend on how they were found."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = int(offset)
    return result


def decode_offsets(offsets: dict) -> dict[TopicPartition, int]:
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in offsets.items()
        for partition, offset in partitions.items()
    }


class RangePartition(InputPartition):
    """One Spark task's input: an offset range of one topic partition."""

    def __init__(self, offset_range: OffsetRange):
        super().__init__(offset_range)
        self.range = offset_range


class DefaultSource(DataSource):
    """`spark.read.format("minibroker")`, `readStream`, `write`, `writeStream`."""

    @classmethod
    def name(cls) -> str:
        return "minibroker"

    def schema(self) -> StructType:
        # Spark asks for the schema of a write too (with no topic selection); only a read
        # is checked here.
        return kafka_schema(include_headers(self.options) if self._reading() else False)

    def _reading(self) -> bool:
        lowered = {str(k).lower() for k in self.options}
        return bool(lowered & {"subscribe", "subscribepattern", "assign"})

    def reader(self, schema: StructType) -> DataSourceReader:
        options = read_options(self.options, streaming=False)
        columns = read_columns(schema, options.include_headers)
        kafka.check_settings(options.kafka, reading=True)
        return BatchReader(options, columns)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = read_options(self.options, streaming=True)
        columns = read_columns(schema, options.include_headers)
        kafka.check_settings(options.kafka, reading=True)
        return StreamReader(options, columns)

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        if overwrite:
            raise OptionError("a topic cannot be overwritten: use mode('append')")
        options = write_options(self.options)
        check_write_schema(schema, options.topic)
        kafka.check_settings(options.kafka, reading=False)
        if options.exactly_once:
            transactions.check_settings(options.kafka)
        _warn_readers(options)
        return BatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        options = write_options(self.options)
        check_write_schema(schema, options.topic)
        kafka.check_settings(options.kafka, reading=False)
        if options.exactly_once:
            transactions.check_settings(options.kafka)
        _warn_readers(options)
        return StreamWriter(options)


def _read(options: ReadOptions, columns: tuple[str, ...], partition: InputPartition):
    if not isinstance(partition, RangePartition):
        # Spark plans one empty InputPartition(None) when there is nothing to read.
        return iter(())
    return kafka.read_range(
        options.kafka,
        partition.range,
        kafka.arrow_schema(options.include_headers, columns),
        options.fail_on_data_loss,
        options.poll_timeout_ms,
    )


class BatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions, columns: tuple[str, ...]):
        self.options = options
        self.columns = columns

    def partitions(self) -> list[RangePartition]:
        options = self.options
        timeout = options.poll_timeout_ms / 1000
        admin = kafka.admin_client(options.kafka)
        topics = kafka.list_partitions(admin, options.selection, options.fail_on_data_loss, timeout)
        tps = [(topic, p) for topic, parts in topics.items() for p in parts]
        starts = kafka.resolve_offsets(admin, options, options.starting, tps, starting=True)
        ends = kafka.resolve_offsets(admin, options, options.ending, tps, starting=False)
        ranges = []
        for tp in tps:
            start, end = starts[tp], ends[tp]
            if start > end:
                raise OptionError(
                    f"{tp[0]}-{tp[1]}: the starting offset {start} ({options.starting.option})"
                    f" is after the ending offset {end} ({options.ending.option})"
                )
            ranges.append(OffsetRange(tp[0], tp[1], start, end))
        planned = kafka.split_ranges(ranges, options.min_partitions)
        return [RangePartition(r) for r in planned]

    def read(self, partition: InputPartition):
        # Spark hands back (unpickled in its worker) the partitions planned above.
        return _read(self.options, self.columns, cast(RangePartition, partition))


def rate_limit(
    start: dict[TopicPartition, int], latest: dict[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """About `limit` records over all partitions, shared in proportion to each partition's
    backlog (Spark's Kafka source's rule, KafkaMicroBatchStream.rateLimit, rounding
    included: a share is rounded down, but one below a record is rounded up to a record, so
    a batch can hold one more than the limit for each such partition)."""
    sizes = {tp: latest[tp] - start[tp] for tp in latest if latest[tp] > start[tp]}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    result = dict(latest)
    for tp, size in sizes.items():
        share = limit * size / total
        step = int(share) if share >= 1 else (1 if share > 0 else 0)
        result[tp] = min(latest[tp], start[tp] + step)
    return result


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over offset ranges. Spark keeps the offsets in its checkpoint; a restart
    replays the last planned batch with exactly the same ranges, which is what makes a file sink
    exactly once."""

    def __init__(self, options: ReadOptions, columns: tuple[str, ...]):
        self.options = options
        self.columns = columns
        self._admin: AdminClient | None = None
        self._target: dict[TopicPartition, int] | None = None
        self._initial: dict | None = None
        # The latest offsets latestOffset just asked the broker for: Spark asks
        # reportLatestOffset right after it, in the same trigger.
        self._just_seen: dict[TopicPartition, int] | None = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_admin"] = None
        return state

    @property
    def admin(self):
        if self._admin is None:
            self._admin = kafka.admin_client(self.options.kafka)
        return self._admin

    @property
    def _timeout(self) -> float:
        return self.options.poll_timeout_ms / 1000

    def _partitions(self) -> list[TopicPartition]:
        # A topic that does not exist yet is not an error in a stream: it is read from its
        # first offset once it is created (Spark's behaviour for subscribe).
        topics = kafka.list_partitions(
            self.admin, self.options.selection, fail_on_data_loss=False, timeout=self._timeout
        )
        return [(topic, p) for topic, parts in topics.items() for p in parts]

    def initialOffset(self) -> dict:
        """Resolved once per query run. Spark asks again on every trigger until a first batch
        is committed, and once more when it plans that batch (MicroBatchExecution's
        getStartOffset and runBatch): with startingOffsets latest, a record produced in
        between made the second answer later than the first batch's end, and the batch ran
        backwards ("offset went from 1 back to 0"). Spark's Kafka source resolves its initial
        offsets once too (KafkaMicroBatchStream.getOrCreateInitialPartitionOffsets) and keeps
        them in the checkpoint's `sources/` directory for a restart before the first batch
        commits; a Python source is not given the checkpoint's location, so a restart
        resolves them again (see partitions())."""
        if self._initial is None:
            self._initial = self._resolve_initial()
        return self._initial

    def _resolve_initial(self) -> dict:
        options = self.options
        tps = self._partitions()
        if options.fail_on_data_loss and options.selection.option == "subscribe":
            missing = set(options.selection.topics) - {topic for topic, _ in tps}
            if missing:
                raise OptionError(
                    f"option subscribe: topic(s) {', '.join(sorted(missing))} do not exist"
                    f" (with {FAIL_ON_DATA_LOSS}=false the stream waits for them)"
                )
        offsets = kafka.resolve_offsets(self.admin, options, options.starting, tps, starting=True)
        return encode_offsets(offsets)

    def _latest(self) -> dict[TopicPartition, int]:
        return kafka.latest_offsets(
            self.admin, self.options.kafka, self._partitions(), self._timeout
        )

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def getDefaultReadLimit(self):
        if self.options.max_offsets_per_trigger and _READ_LIMITS:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable() if _READ_LIMITS else None

    def reportLatestOffset(self):
        """For the query's progress only: a broker that cannot answer right now is no reason
        to fail the query. Spark calls it right after latestOffset in every trigger
        (MicroBatchExecution.constructNextBatch): the offsets latestOffset has just read are
        the answer, without a second Metadata and ListOffsets round trip."""
        seen, self._just_seen = self._just_seen, None
        if seen is not None:
            return encode_offsets(seen)
        try:
            return encode_offsets(self._latest())
        except Exception as error:  # noqa: BLE001 - progress reporting must not fail a query
            log.info("latest offsets for progress unavailable: %s", error)
            return None

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        begin = decode_offsets(start) if start is not None else {}
        if self._target is not None:
            latest = self._target
        else:
            latest = self._just_seen = self._latest()
        gone = [tp for tp in begin if tp not in latest and self._target is None]
        if gone:
            self._report_data_loss(f"partitions {', '.join(f'{t}-{p}' for t, p in gone)} are gone")
        new = [tp for tp in latest if tp not in begin]
        earliest_new = kafka.earliest_offsets(self.admin, self.options.kafka, new, self._timeout)
        from_offsets = {**earliest_new, **begin}
        end: dict[TopicPartition, int] = {}
        for tp, offset in from_offsets.items():
            newest = latest.get(tp, offset)
            if newest < offset:
                # A new leader's high watermark can trail the old one's for a moment (it
                # learns the followers' positions on their next fetch): never go back.
                log.info("%s-%s: latest %s is behind %s; waiting", tp[0], tp[1], newest, offset)
            end[tp] = max(offset, newest)
        max_rows = None
        if _READ_LIMITS and isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif limit is None and self.options.max_offsets_per_trigger:
            max_rows = self.options.max_offsets_per_trigger
        if max_rows is not None:
            end = rate_limit(from_offsets, end, max_rows)
        # New partitions enter the offsets only once they have something to read, so that an
        # empty batch keeps `end == start` and Spark plans nothing.
        for tp in new:
            if end[tp] == earliest_new[tp] and tp not in begin:
                del end[tp]
        return encode_offsets(end)

    def _report_data_loss(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise kafka._data_loss(message)
        log.warning("%s; continuing without them (%s=false)", message, FAIL_ON_DATA_LOSS)

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begin = decode_offsets(start)
        until = decode_offsets(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            earliest = kafka.earliest_offsets(self.admin, self.options.kafka, new, self._timeout)
            for tp in new:
                if earliest[tp] != 0:
                    self._report_data_loss(
                        f"added partition {tp[0]}-{tp[1]} starts at {earliest[tp]}, not 0"
                    )
                begin[tp] = earliest[tp]
        ranges = []
        for tp, stop in until.items():
            first = begin[tp]
            if stop < first:
                message = f"{tp[0]}-{tp[1]}'s offset went from {first} back to {stop}"
                if start == self._initial:
                    # Only a batch planned by an earlier run of the query ends before this
                    # run's initial offsets: its first batch, replayed after a restart.
                    message += (
                        " (the query's first batch, planned before a restart, is replayed from"
                        f" initial offsets resolved again from {self.options.starting.option},"
                        " which are not kept across restarts)"
                    )
                self._report_data_loss(message)
                continue
            ranges.append(OffsetRange(tp[0], tp[1], first, stop))
        planned = kafka.split_ranges(ranges, self.options.min_partitions)
        return [RangePartition(r) for r in planned]

    def read(self, partition: InputPartition):
        # Spark hands back (unpickled in its worker) the partitions planned above.
        return _read(self.options, self.columns, cast(RangePartition, partition))

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in Kafka."""

    def stop(self) -> None:
        self._admin = None


def check_write_schema(schema: StructType, topic_option: str | None) -> None:
    """The columns Spark's Kafka sink takes, with its types: value (required), key, topic
    (unless the topic option is set), partition, headers."""
    fields = {field.name.lower(): field.dataType for field in schema.fields}
    text_or_bytes = (StringType, BinaryType)
    if "value" not in fields:
        raise OptionError("the data to write has no 'value' column")
    for column in ("key", "value"):
        if column in fields and not isinstance(fields[column], text_or_bytes):
            raise OptionError(f"column {column} must be string or binary, not {fields[column]}")
    if topic_option is None:
        if "topic" not in fields:
            raise OptionError("no topic: set the option topic or add a 'topic' column")
        if not isinstance(fields["topic"], StringType):
            raise OptionError(f"column topic must be a string, not {fields['topic']}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError(f"column partition must be an int, not {fields['partition']}")
    if "headers" in fields:
        headers = fields["headers"]
        element = getattr(headers, "elementType", None)
        names = [f.name for f in getattr(element, "fields", [])]
        if names != ["key", "value"]:
            raise OptionError(
                f"column headers must be array<struct<key:string,value:binary>>, not {headers}"
            )


@dataclass
class WriteCommit(WriterCommitMessage):
    records: int
    # Exactly-once writes only: the task found its micro-batch already committed by an
    # earlier attempt and wrote nothing (`records` is what that attempt wrote).
    replayed: bool = False


def _select(batches, kafka_params, topic_option):
    """Columns by lower-cased name, since Spark may keep the user's case."""
    for batch in batches:
        renamed = batch.rename_columns([name.lower() for name in batch.schema.names])
        yield renamed


# Spark's local properties, set by MicroBatchExecution on every task of a micro-batch.
_BATCH_ID = "streaming.sql.batchId"
_QUERY_ID = "sql.streaming.queryId"


def _task_write(options: WriteOptions, write_id: str | None) -> TaskWrite:
    """The transactional id and batch of this task. A streaming task's come from Spark's local
    properties (the query id survives restarts from the checkpoint); a batch write's from the
    id the driver drew for this write (`write_id`), with batch 0."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # pragma: no cover - write() always runs in a task
        raise RuntimeError("an exactly-once write must run in a Spark task")
    partition = context.partitionId()
    if write_id is None:
        query_id = context.getLocalProperty(_QUERY_ID)
        batch_id = context.getLocalProperty(_BATCH_ID)
        if not query_id or batch_id is None:
            raise RuntimeError(
                f"{EXACTLY_ONCE}: Spark did not give this task its query and micro-batch"
                f" ({_QUERY_ID}, {_BATCH_ID}); continuous processing is not supported"
            )
        prefix = options.transactional_id_prefix or f"minibroker-spark-{query_id}"
        return TaskWrite(f"{prefix}-{partition}", query_id, int(batch_id))
    prefix = options.transactional_id_prefix or "minibroker-spark"
    return TaskWrite(f"{prefix}-{write_id}-{partition}", write_id, 0)


def _write(options: WriteOptions, iterator, write_id: str | None) -> WriteCommit:
    batches = _select(iterator, options.kafka, options.topic)
    if not options.exactly_once:
        return WriteCommit(kafka.produce_batches(options.kafka, batches, options.topic))
    task = _task_write(options, write_id)
    result = write_transactionally(options.kafka, batches, options.topic, task)
    return WriteCommit(result.records, replayed=result.replayed)


_warned = False


def _warn_readers(options: WriteOptions) -> None:
    """Once per Python process (Spark builds the stream writer again for every commit)."""
    global _warned
    if options.exactly_once and not _warned:
        _warned = True
        log.warning(
            "%s=true: only readers with isolation.level=read_committed see each row once;"
            ' read_uncommitted readers (the default of format("minibroker") and of Spark\'s'
            " Kafka source: set kafka.isolation.level=read_committed) also see the rows of"
            " failed attempts",
            EXACTLY_ONCE,
        )


class BatchWriter(DataSourceArrowWriter):
    """`df.write.format("minibroker")`: every task produces its rows with its own idempotent,
    acks=all producer and returns once all of them are acknowledged. Records are visible to
    readers as soon as they are acknowledged: abort cannot take them back, so a failed and
    retried task can write some rows twice (at least once, as Spark's Kafka sink).

    With exactlyOnce=true each task writes in one Kafka transaction under the transactional
    id `<prefix>-<write id>-<partition>` (minibroker.spark.transactions): a retried or
    speculative attempt fences the older one and skips a partition already committed, so
    read_committed readers see each row once. A job that fails after some tasks committed
    keeps those tasks' rows; running the write again is a new write."""

    def __init__(self, options: WriteOptions):
        self.options = options
        # Drawn on the driver, pickled to every task: all attempts of this write share it.
        self.write_id = uuid.uuid4().hex[:16]

    def write(self, iterator) -> WriteCommit:
        return _write(self.options, iterator, self.write_id)

    def commit(self, messages) -> None:
        total = sum(m.records for m in messages if m is not None)
        log.info("wrote %d records", total)

    def abort(self, messages) -> None:
        written = sum(m.records for m in messages if m is not None)
        if self.options.exactly_once:
            log.warning("write aborted; %d records of committed tasks stay", written)
        else:
            log.warning("write aborted; %d records were already acknowledged and stay", written)


class StreamWriter(DataSourceStreamArrowWriter):
    """`writeStream.format("minibroker")`: as BatchWriter, per micro-batch. A micro-batch that
    is re-run after a failure (or a restart before its commit) produces its rows again: at
    least once, as Spark's Kafka sink.

    With exactlyOnce=true, each task of micro-batch B writes in one transaction under
    `<prefix>-<partition>` (prefix: transactionalIdPrefix, or minibroker-spark-<query id>)
    and commits B's id in it; a replay of B (restart from the checkpoint, retried task) skips
    the tasks that committed. commit() has nothing left to do: the tasks committed."""

    def __init__(self, options: WriteOptions):
        self.options = options

    def write(self, iterator) -> WriteCommit:
        return _write(self.options, iterator, None)

    def commit(self, messages, batchId: int) -> None:
        done = [m for m in messages if m is not None]
        total = sum(m.records for m in done)
        replayed = sum(1 for m in done if m.replayed)
        if replayed:
            log.info(
                "batch %d: %d records, %d of %d tasks already committed before (replay)",
                batchId,
                total,
                replayed,
                len(done),
            )
        else:
            log.info("batch %d: wrote %d records", batchId, total)

    def abort(self, messages, batchId: int) -> None:
        written = sum(m.records for m in messages if m is not None)
        if self.options.exactly_once:
            log.warning(
                "batch %d aborted; %d records of tasks that committed stay, and a replay of the"
                " batch skips those tasks",
                batchId,
                written,
            )
        else:
            log.warning("batch %d aborted; %d acknowledged records stay", batchId, written)
