"""Everything this package says to Kafka, through confluent-kafka (librdkafka): the topics and
partitions a query selects, offsets (earliest, latest, by timestamp), reading one offset range
into Arrow record batches, and producing rows.

Nothing here knows about the broker in this repository: it is a Kafka client like any other
and works against any Kafka cluster.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import math
import operator
import re
import time
import uuid
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain, repeat

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as KafkaOffsetSpec

from minibroker.spark.options import (
    ASSIGN,
    BY_TIMESTAMP_STRATEGY,
    EARLIEST,
    FAIL_ON_DATA_LOSS,
    LATEST,
    SUBSCRIBE,
    OffsetSpec,
    OptionError,
    ReadOptions,
    TopicSelection,
)

log = logging.getLogger("minibroker_spark")

# Topics the Java consumer leaves out of pattern subscriptions (exclude.internal.topics):
# Kafka's Topic.INTERNAL_TOPICS. A copy of the broker's registry (common/names.py), since the
# Spark source imports nothing of the broker; a unit test keeps the two equal.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
# Settings that concern the connection, not the client's role: admin clients and producers
# get only these, so that consumer settings do not draw librdkafka warnings there.
_CONNECTION_PREFIXES = ("bootstrap.", "security.", "sasl.", "ssl.", "client.", "socket.", "broker.")
METADATA_TIMEOUT = 30.0
CONSUME_BATCH = 10_000

TopicPartition = tuple[str, int]


class DataLossError(RuntimeError):
    """Records a query needs are gone (retention, deletion, truncation) and failOnDataLoss is
    true; the message says which and how to read on without them."""


def _data_loss(message: str) -> DataLossError:
    return DataLossError(
        f"{message}. Some data may have been lost because it is no longer available in Kafka"
        " (deleted by retention, or the topic was deleted). If this is expected, set the option"
        f" {FAIL_ON_DATA_LOSS} to false."
    )


def connection_params(kafka: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in kafka.items() if key.startswith(_CONNECTION_PREFIXES)}


def _client(factory, settings: dict):
    """Build a librdkafka client; a setting librdkafka does not know or refuses is reported as
    the option the user wrote (`kafka.<name>`)."""
    try:
        return factory(settings)
    except (KafkaException, ValueError, TypeError) as error:
        named = re.search(r'"([a-z0-9._-]+)"', str(error))
        if named:
            raise OptionError(f"option kafka.{named.group(1)}: {error}") from None
        raise OptionError(f"a kafka.* option was refused by the Kafka client: {error}") from None


def check_settings(kafka: dict[str, str], reading: bool) -> None:
    """Build (and drop) the client the tasks will build, on the driver, so that a setting
    librdkafka refuses fails the query before any task runs."""
    if reading:
        _client(Consumer, consumer_settings(kafka)).close()
    else:
        _client(Producer, producer_settings(kafka))


def admin_client(kafka: dict[str, str]) -> AdminClient:
    return _client(AdminClient, connection_params(kafka))


def _retrying(what: str, call, timeout: float):
    """Run `call` until it succeeds or `timeout` passes; a leader moving or a broker restarting
    makes metadata and offset requests fail for a moment, which is no reason to fail a query."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KafkaException as error:
            kafka_error = error.args[0] if error.args else None
            retriable = isinstance(kafka_error, KafkaError) and (
                kafka_error.retriable()
                or kafka_error.code()
                in (
                    KafkaError._TRANSPORT,
                    KafkaError._TIMED_OUT,
                    KafkaError._ALL_BROKERS_DOWN,
                    KafkaError.LEADER_NOT_AVAILABLE,
                    KafkaError.NOT_LEADER_FOR_PARTITION,
                    KafkaError.REQUEST_TIMED_OUT,
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                    # A leader elected after the one this client knew (the Java clients'
                    # FencedLeaderEpochException and UnknownLeaderEpochException are
                    # InvalidMetadataExceptions: refresh metadata and retry).
                    KafkaError.FENCED_LEADER_EPOCH,
                    KafkaError.UNKNOWN_LEADER_EPOCH,
                )
            )
            if not retriable or time.monotonic() >= deadline:
                raise RuntimeError(f"{what} failed: {error}") from error
            log.info("%s failed (%s); retrying", what, error)
            time.sleep(0.2)


def list_partitions(
    admin: AdminClient, selection: TopicSelection, fail_on_data_loss: bool, timeout: float
) -> dict[str, list[int]]:
    """The partitions the query selects, by topic, as Metadata lists them now. A topic named
    in `subscribe` or `assign` that does not exist fails the query when failOnDataLoss is
    true (a typo would otherwise read nothing, for ever); with false it is read as empty."""

    def fetch():
        return admin.list_topics(timeout=min(timeout, METADATA_TIMEOUT))

    metadata = _retrying("Metadata", fetch, timeout)
    existing: dict[str, list[int]] = {}
    for name, topic in metadata.topics.items():
        if topic.error is not None and topic.error.code() != KafkaError.NO_ERROR:
            continue
        if name in INTERNAL_TOPICS and selection.option != ASSIGN:
            continue
        if selection.matches(name):
            existing[name] = sorted(topic.partitions)
    if selection.option == SUBSCRIBE:
        missing = [topic for topic in selection.topics if topic not in existing]
        if missing and fail_on_data_loss:
            raise OptionError(
                f"option {SUBSCRIBE}: topic(s) {', '.join(missing)} do not exist (with"
                f" {FAIL_ON_DATA_LOSS}=false a missing topic reads as empty until it is created)"
            )
    if selection.option == ASSIGN:
        chosen = {}
        for topic, partitions in selection.partitions.items():
            known = set(existing.get(topic, ()))
            absent = [p for p in partitions if p not in known]
            if absent and fail_on_data_loss:
                raise OptionError(
                    f"option {ASSIGN}: partition(s) {absent} of topic {topic!r} do not exist"
                    f" (set {FAIL_ON_DATA_LOSS}=false to skip them)"
                )
            chosen[topic] = [p for p in partitions if p in known]
        existing = {topic: parts for topic, parts in chosen.items() if parts}
    return dict(sorted(existing.items()))


def _isolation(kafka: dict[str, str]) -> IsolationLevel:
    if kafka.get("isolation.level") == "read_committed":
        return IsolationLevel.READ_COMMITTED
    return IsolationLevel.READ_UNCOMMITTED


def list_offsets(
    admin: AdminClient,
    kafka: dict[str, str],
    requests: dict[TopicPartition, KafkaOffsetSpec],
    timeout: float,
) -> dict[TopicPartition, int]:
    """ListOffsets for many partitions at once (earliest, latest, or by timestamp: -1 where no
    record has that timestamp or a later one)."""
    if not requests:
        return {}
    result: dict[TopicPartition, int] = {}
    pending = dict(requests)

    def fetch():
        futures = admin.list_offsets(
            {KafkaTopicPartition(t, p): spec for (t, p), spec in pending.items()},
            isolation_level=_isolation(kafka),
            request_timeout=min(timeout, METADATA_TIMEOUT),
        )
        for tp, future in futures.items():
            result[(tp.topic, tp.partition)] = future.result().offset
            pending.pop((tp.topic, tp.partition), None)
        return result

    return _retrying("ListOffsets", fetch, timeout)


def earliest_offsets(admin, kafka, partitions: Iterable[TopicPartition], timeout: float):
    return list_offsets(
        admin, kafka, {tp: KafkaOffsetSpec.earliest() for tp in partitions}, timeout
    )


def latest_offsets(admin, kafka, partitions: Iterable[TopicPartition], timeout: float):
    return list_offsets(admin, kafka, {tp: KafkaOffsetSpec.latest() for tp in partitions}, timeout)


def resolve_offsets(
    admin: AdminClient,
    options: ReadOptions,
    spec: OffsetSpec,
    partitions: list[TopicPartition],
    *,
    starting: bool,
) -> dict[TopicPartition, int]:
    """Concrete offsets for `partitions` as `spec` asks. Partitions a JSON spec leaves out take
    the default (earliest for a start, latest for an end); a JSON naming a partition the query
    does not read fails, naming the option."""
    timeout = options.poll_timeout_ms / 1000
    default_kind = EARLIEST if starting else LATEST
    wanted: dict[TopicPartition, int | str] = {}
    if spec.kind in ("offsets", "timestamps"):
        chosen = set(partitions)
        for topic, by_partition in spec.offsets.items():
            for partition in by_partition:
                if (topic, partition) not in chosen:
                    raise OptionError(
                        f"option {spec.option} names {topic}-{partition}, which this query does"
                        " not read (not selected, or it does not exist)"
                    )
    for tp in partitions:
        topic, partition = tp
        if spec.kind == "earliest":
            wanted[tp] = EARLIEST
        elif spec.kind == "latest":
            wanted[tp] = LATEST
        elif spec.kind == "offsets":
            wanted[tp] = spec.offsets.get(topic, {}).get(partition, default_kind)
        elif spec.kind == "timestamp":
            wanted[tp] = f"ts:{spec.timestamp}"
        else:
            given = spec.offsets.get(topic, {}).get(partition)
            wanted[tp] = default_kind if given is None else f"ts:{given}"
    requests: dict[TopicPartition, KafkaOffsetSpec] = {}
    for tp, want in wanted.items():
        if want == EARLIEST:
            requests[tp] = KafkaOffsetSpec.earliest()
        elif want == LATEST:
            requests[tp] = KafkaOffsetSpec.latest()
        elif isinstance(want, str):
            requests[tp] = KafkaOffsetSpec.for_timestamp(int(want[3:]))
    found = list_offsets(admin, options.kafka, requests, timeout)
    resolved: dict[TopicPartition, int] = {}
    latest_needed = []
    for tp, want in wanted.items():
        if isinstance(want, int) and want >= 0:
            resolved[tp] = want
        elif isinstance(want, str) and found[tp] < 0:
            # No record at or after the timestamp. Spark's ending offset becomes latest; a
            # starting one fails unless the strategy says latest.
            if starting and not options.timestamp_strategy_latest:
                raise OptionError(
                    f"option {spec.option}: no record of {tp[0]}-{tp[1]} has a timestamp at or"
                    f" after {want[3:]} (set {BY_TIMESTAMP_STRATEGY}=latest to start at the end)"
                )
            latest_needed.append(tp)
        else:
            resolved[tp] = found[tp]
    if latest_needed:
        resolved.update(latest_offsets(admin, options.kafka, latest_needed, timeout))
    return resolved


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one topic partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """One range per topic partition, or more when `minPartitions` asks for more tasks than
    there are partitions: large ranges are cut into near-equal pieces in proportion to their
    size, as Spark's KafkaOffsetRangeCalculator does.

    Where we depart: the ranges come largest first (ties in topic-partition order), where
    Spark's connector keeps topic-partition order. Spark starts a stage's tasks in partition
    order as executor slots free up, so with fewer slots than ranges the largest-first order
    (the LPT rule) keeps one slot from finishing alone on a big partition left to the end: 4
    partitions of 227k, 251k, 340k and 182k records on local[2] take 567k records' time in
    partition order, 521k largest first. What a range holds, and so every result, is the
    same; only which Spark partition index reads which range changes."""
    return sorted(_split(ranges, min_partitions), key=lambda r: -r.size)


def _split(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    pieces: list[OffsetRange] = []
    for r in ranges:
        parts = max(1, min(r.size, math.ceil(r.size * min_partitions / total)))
        for index in range(parts):
            start = r.start + r.size * index // parts
            end = r.start + r.size * (index + 1) // parts
            pieces.append(OffsetRange(r.topic, r.partition, start, end))
    return pieces


HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
# Spark's Kafka source columns, in its order, with the Arrow types Spark expects for them.
ARROW_TYPES: dict[str, pa.DataType] = {
    "key": pa.binary(),
    "value": pa.binary(),
    "topic": pa.string(),
    "partition": pa.int32(),
    "offset": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestampType": pa.int32(),
    "headers": pa.list_(pa.field("element", HEADER_TYPE)),
}
COLUMNS = tuple(ARROW_TYPES)


def arrow_schema(include_headers: bool, columns: Iterable[str] | None = None) -> pa.Schema:
    """The Arrow layout Spark expects for the Kafka source's schema (nullability included), or
    for the given subset of its columns, in the given order."""
    if columns is None:
        columns = [c for c in COLUMNS if include_headers or c != "headers"]
    return pa.schema([pa.field(name, ARROW_TYPES[name]) for name in columns])


def _offsets(messages: list) -> np.ndarray:
    count = len(messages)
    first, last = messages[0].offset(), messages[-1].offset()
    if last - first + 1 == count:
        # Offsets only grow within a partition: as many offsets as the span means no gap
        # (no transaction marker, nothing compacted away), the common case.
        return np.arange(first, last + 1, dtype=np.int64)
    return np.fromiter(map(Message.offset, messages), np.int64, count)


def _timestamps(messages: list) -> np.ndarray:
    """(type, milliseconds) per message, one row each."""
    count = len(messages)
    flat = chain.from_iterable(map(Message.timestamp, messages))
    return np.fromiter(flat, np.int64, 2 * count).reshape(count, 2)


def _headers(messages: list, arrow_type: pa.DataType) -> pa.Array:
    values = []
    for message in messages:
        pairs = message.headers()
        values.append(None if not pairs else [{"key": k, "value": v} for k, v in pairs])
    return pa.array(values, arrow_type)


def _to_batch(messages: list, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch of the schema's columns (any subset of the Kafka source's, in any order)
    from consumed messages. Only the columns asked for are built, each with one pass of a C
    loop over the messages (map over the Message method, no Python frame per record);
    offsets, topic and partition need none in the common case."""
    count = len(messages)
    stamps = None
    columns: list[pa.Array] = []
    for name in schema.names:
        if name == "value":
            columns.append(pa.array(list(map(Message.value, messages)), pa.binary()))
        elif name == "key":
            columns.append(pa.array(list(map(Message.key, messages)), pa.binary()))
        elif name == "topic":
            columns.append(pa.repeat(pa.scalar(topic, pa.string()), count))
        elif name == "partition":
            columns.append(pa.repeat(pa.scalar(partition, pa.int32()), count))
        elif name == "offset":
            columns.append(pa.array(_offsets(messages)))
        elif name in ("timestamp", "timestampType"):
            if stamps is None:
                stamps = _timestamps(messages)
            if name == "timestamp":
                columns.append(pa.array(stamps[:, 1] * 1000).cast(ARROW_TYPES["timestamp"]))
            else:
                # librdkafka's types are 1 CreateTime and 2 LogAppendTime, Spark's 0 and 1.
                columns.append(pa.array(np.maximum(stamps[:, 0] - 1, 0).astype(np.int32)))
        else:
            columns.append(_headers(messages, schema.field(name).type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def consumer_settings(kafka: dict[str, str]) -> dict:
    settings = {
        # Assign only, never commit: offsets live in Spark's checkpoint, and no group
        # coordinator is needed. librdkafka's constructor insists on a group id.
        "group.id": f"minibroker-spark-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        # Out-of-range offsets are data loss, reported, never a silent reset.
        "auto.offset.reset": "error",
        # librdkafka waits 1 s by default before refetching a partition whose queue filled up:
        # a range read would stall on it.
        "fetch.queue.backoff.ms": 1,
        "queued.max.messages.kbytes": 262144,
        # One partition per consumer: let one Fetch carry as much of it as the broker gives
        # (librdkafka's default is 1 MiB per partition), so the broker answers fewer requests.
        "max.partition.fetch.bytes": 16 * 1024 * 1024,
        # A read never waits for records to arrive: its range ends at an offset the planning
        # read from the broker. librdkafka's 500 ms long poll only delayed reads: a pooled
        # consumer's next read waited for the fetch its last one left waiting at the log end
        # (4 one-record partitions read in turn by pooled consumers: 440 ms with 500, 3-4 ms
        # with 10; a new consumer's first read is unchanged). Spark's connector keeps the Java
        # consumer's 500 ms and its tasks wait on it.
        "fetch.wait.max.ms": 10,
        "log.connection.close": False,
    }
    settings.update(kafka)
    return settings


def pool_key(kafka: dict[str, str], topic: str, partition: int) -> tuple:
    """Consumers are shared only between reads with the same settings (bootstrap servers,
    security, isolation level, every kafka.* option) of the same topic partition."""
    return (tuple(sorted(kafka.items())), topic, partition)


def _close(consumer) -> None:
    try:
        consumer.close()
    except Exception as error:  # noqa: BLE001 - closing must not fail a read that worked
        log.info("closing a consumer: %s", error)


class ConsumerPool:
    """Idle consumers of this process, by `pool_key`, as Spark's Kafka connector keeps its
    consumers between tasks (KafkaDataConsumer's cache: `spark.kafka.consumer.cache.capacity`
    64, `spark.kafka.consumer.cache.timeout` 5 min). A Spark Python worker runs one task at a
    time and Spark reuses workers (spark.python.worker.reuse), so the next micro-batch's read
    of a partition usually finds the consumer the last one used: no new client, connection,
    Metadata and first Fetch session per task.

    A consumer is in the pool only while no read holds it (taken, never shared), without an
    assignment (it fetches nothing while idle), and at most `idle_seconds`: older ones, and
    the oldest beyond `capacity`, are closed when the pool is next used. Where we depart:
    Spark's cache closes idle consumers from a timer thread; here the pool is a pure structure
    with the time passed in, pruned on use, and emptied at interpreter exit."""

    def __init__(self, capacity: int = 64, idle_seconds: float = 300.0, close=_close):
        self.capacity = capacity
        self.idle_seconds = idle_seconds
        self._close = close
        # key -> [(consumer, idle since)], the most recently returned last.
        self._idle: dict[tuple, list[tuple[object, float]]] = {}

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._idle.values())

    def take(self, key: tuple, now: float):
        """An idle consumer for `key`, or None; prunes the expired ones first."""
        self.prune(now)
        entries = self._idle.get(key)
        if not entries:
            return None
        consumer, _since = entries.pop()
        if not entries:
            del self._idle[key]
        return consumer

    def give_back(self, key: tuple, consumer, now: float) -> None:
        """A read is done with `consumer`: unassigned and kept, or closed if that fails."""
        try:
            consumer.unassign()
        except Exception as error:  # noqa: BLE001 - a consumer that cannot unassign is not kept
            log.info("not keeping a consumer: %s", error)
            self._close(consumer)
            return
        self._idle.setdefault(key, []).append((consumer, now))
        self.prune(now)

    def prune(self, now: float) -> None:
        for key, entries in list(self._idle.items()):
            kept = []
            for consumer, since in entries:
                if now - since < self.idle_seconds:
                    kept.append((consumer, since))
                else:
                    self._close(consumer)
            if kept:
                self._idle[key] = kept
            else:
                del self._idle[key]
        excess = len(self) - self.capacity
        if excess > 0:
            oldest = sorted(
                (
                    (since, key, consumer)
                    for key, entries in self._idle.items()
                    for consumer, since in entries
                ),
                key=operator.itemgetter(0),
            )[:excess]
            for _since, key, consumer in oldest:
                self._idle[key] = [(c, s) for c, s in self._idle[key] if c is not consumer]
                if not self._idle[key]:
                    del self._idle[key]
                self._close(consumer)

    def close_all(self) -> None:
        for entries in self._idle.values():
            for consumer, _since in entries:
                self._close(consumer)
        self._idle.clear()


CONSUMERS = ConsumerPool()
atexit.register(CONSUMERS.close_all)


def read_range(
    kafka: dict[str, str],
    offset_range: OffsetRange,
    schema: pa.Schema,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    """Every record of [start, end) of one partition, in Arrow batches of `schema` (from
    `arrow_schema`: the columns the query reads), with one consumer assigned to exactly that
    range (taken from this process's pool, CONSUMERS, when an earlier read of the partition
    with the same settings left one there, and put back after); returns at the range end.
    Records missing at the start (retention) or an end that cannot be reached are data loss:
    raised when failOnDataLoss, otherwise logged and skipped as Spark's Kafka source does."""
    topic, partition = offset_range.topic, offset_range.partition
    start, end = offset_range.start, offset_range.end
    if start >= end:
        return
    key = pool_key(kafka, topic, partition)
    consumer = CONSUMERS.take(key, time.monotonic())
    if consumer is None:
        consumer = _client(Consumer, consumer_settings(kafka))
    timeout = poll_timeout_ms / 1000
    reusable = False
    try:
        # Every read seeks to its range start, a pooled consumer's too: assign() replaces the
        # assignment and librdkafka drops whatever it fetched for the one before.
        consumer.assign([KafkaTopicPartition(topic, partition, start)])
        position = start
        deadline = time.monotonic() + timeout
        while position < end:
            # consume() returns once it holds num_messages or the timeout passes: asking for no
            # more than the range still holds returns the last records as soon as they are
            # fetched (asking for CONSUME_BATCH made every small range, a streaming
            # micro-batch's, wait the whole timeout).
            wanted = max(1, min(CONSUME_BATCH, end - position))
            batch = None
            with cyclic_gc_paused():
                messages = consumer.consume(num_messages=wanted, timeout=0.2)
                if not messages:
                    if time.monotonic() >= deadline:
                        message = (
                            f"Cannot fetch records in [{position}, {end}) of {topic}-{partition}"
                            f" within kafkaConsumer.pollTimeoutMs={poll_timeout_ms}"
                        )
                        if fail_on_data_loss:
                            raise TimeoutError(message)
                        log.warning("%s; skipping them", message)
                        return
                    continue
                if _only_records(messages):
                    # The common case, a run of records: cut it at the range end.
                    if messages[-1].offset() >= end:
                        messages = messages[: bisect_left(messages, end, key=_offset)]
                        position = end
                    records = messages
                else:
                    records, position = _sort_out(
                        consumer,
                        messages,
                        topic,
                        partition,
                        position,
                        end,
                        fail_on_data_loss,
                        timeout,
                    )
                if records:
                    position = max(position, records[-1].offset() + 1)
                    deadline = time.monotonic() + timeout
                    batch = _to_batch(records, topic, partition, schema)
                # The messages go while the collector is paused: none of them is ever
                # traversed by it.
                del messages, records
            if batch is not None:
                yield batch
        reusable = True
    except GeneratorExit:
        # Spark stopped reading early (a limit): the consumer is sound.
        reusable = True
        raise
    finally:
        if reusable:
            CONSUMERS.give_back(key, consumer, time.monotonic())
        else:
            _close(consumer)


_OUT_OF_RANGE = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)


@contextlib.contextmanager
def cyclic_gc_paused():
    """Python's cyclic garbage collector off for the block (and back on after, if it was on).

    Every librdkafka Message is a GC-tracked object, and a consume() of 10,000 of them sets
    off collections that traverse them again and again as they age through the generations,
    none of which can free anything: Messages hold no cycles, and go by reference count when
    the batch is built. Reading 1M x 100 B with one consumer, perf put 40% of the process's
    samples in the collector (gc_collect_main, visit_decref, visit_reachable,
    Message_traverse); with it paused around consume(), the main thread's CPU fell from
    1.4-1.8 s to 0.75-0.95 s. The block must not yield: the pause covers this module's own
    work only, never the caller's."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _sort_out(
    consumer, messages: list, topic, partition, position, end, fail, timeout
) -> tuple[list, int]:
    """The records of a consume() that also returned events, cut at the range end, and the
    position to go on from: the end of partition is noted, an offset out of range is data
    loss (`_after_out_of_range`), a fatal error is raised, and transport errors and leader
    changes are logged (librdkafka retries them by itself)."""
    records: list = []
    for message in messages:
        error = message.error()
        if error is None:
            if message.offset() >= end:
                return records, end
            records.append(message)
            continue
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            if message.offset() >= end:
                return records, end
        elif code in _OUT_OF_RANGE:
            resume = _after_out_of_range(consumer, topic, partition, position, end, fail, timeout)
            return records, resume
        elif error.fatal():
            raise KafkaException(error)
        else:
            log.info("reading %s-%s: %s", topic, partition, error)
    return records, position


def _only_records(messages: list) -> bool:
    """No error event (end of partition, offset out of range, ...) among the messages; one C
    loop (`is`: a KafkaError refuses `== None`)."""
    return all(map(operator.is_, map(Message.error, messages), repeat(None)))


def _offset(message) -> int:
    return message.offset()


def _after_out_of_range(consumer, topic, partition, position, end, fail, timeout) -> int:
    """The fetch position is not on the broker: records were deleted (the log now starts
    later) or the log was truncated below it. Returns where to continue."""
    low, high = _retrying(
        "ListOffsets",
        lambda: consumer.get_watermark_offsets(
            KafkaTopicPartition(topic, partition), timeout=10, cached=False
        ),
        timeout,
    )
    if position < low:
        message = f"Cannot fetch offset {position} of {topic}-{partition}: the log starts at {low}"
        if fail:
            raise _data_loss(message)
        log.warning("%s; skipping to it", message)
        resume = min(low, end)
    else:
        message = (
            f"Cannot fetch offset {position} of {topic}-{partition}: the log ends at {high},"
            f" before the range end {end}"
        )
        if fail:
            raise _data_loss(message)
        log.warning("%s; skipping the rest of the range", message)
        resume = end
    if resume < end:
        consumer.assign([KafkaTopicPartition(topic, partition, resume)])
    return resume


def producer_settings(kafka: dict[str, str]) -> dict:
    settings = {
        # Idempotence: librdkafka's own retries never duplicate or reorder a record.
        "enable.idempotence": True,
        "acks": "all",
        # Java clients' partitioner: keys land where Spark's Kafka sink would put them.
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 500_000,
        "message.timeout.ms": 120_000,
    }
    settings.update({k: v for k, v in kafka.items() if not k.startswith(("isolation.", "fetch."))})
    return settings


def _bytes(value):
    return value.encode() if isinstance(value, str) else value


def _produce_rows(producer, batches: Iterable[pa.RecordBatch], topic_option, on_delivery, errors):
    """Hand every row of the batches to `producer` (columns topic, key, value, partition,
    headers as Spark's Kafka sink maps them); stops early once a delivery error is reported.
    Returns (rows, bytes of keys and values, the first topic written)."""
    sent = size = 0
    first_topic = None
    for batch in batches:
        columns = batch.schema.names
        count = batch.num_rows
        size += _payload_bytes(batch)
        values = batch.column("value").to_pylist()
        keys = batch.column("key").to_pylist() if "key" in columns else [None] * count
        if topic_option is not None:
            topics = [topic_option] * count
        else:
            topics = batch.column("topic").to_pylist()
        parts = batch.column("partition").to_pylist() if "partition" in columns else None
        headers = batch.column("headers").to_pylist() if "headers" in columns else None
        for row in range(count):
            topic = topics[row]
            if topic is None:
                raise ValueError(
                    "a row has a null topic: set the topic option or give every row a topic"
                )
            if first_topic is None:
                first_topic = topic
            extra = {}
            if parts is not None and parts[row] is not None:
                extra["partition"] = parts[row]
            if headers is not None and headers[row]:
                extra["headers"] = [(h["key"], _bytes(h["value"])) for h in headers[row]]
            while True:
                try:
                    producer.produce(
                        topic,
                        value=_bytes(values[row]),
                        key=_bytes(keys[row]),
                        on_delivery=on_delivery,
                        **extra,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
        producer.poll(0)
        if errors:
            break
    return sent, size, first_topic


def _payload_bytes(batch: pa.RecordBatch) -> int:
    """Bytes of the batch's keys and values (nulls count 0), computed by Arrow."""
    total = 0
    for name in ("key", "value"):
        if name in batch.schema.names:
            total += pc.sum(pc.binary_length(batch.column(name))).as_py() or 0
    return total


def produce_batches(
    kafka: dict[str, str],
    batches: Iterable[pa.RecordBatch],
    topic_option: str | None,
    flush_timeout: float = 300.0,
) -> int:
    """Produce every row of the batches with one idempotent acks=all producer; return the
    count once every record is acknowledged, or raise naming the first delivery error."""
    producer = _client(Producer, producer_settings(kafka))
    errors: list[str] = []
    delivered = 0

    def on_delivery(error, _message):
        nonlocal delivered
        if error is None:
            delivered += 1
        elif len(errors) < 10:
            errors.append(str(error))

    sent, _size, _topic = _produce_rows(producer, batches, topic_option, on_delivery, errors)
    remaining = producer.flush(flush_timeout)
    if errors:
        raise RuntimeError(f"writing to Kafka failed: {'; '.join(errors)}")
    if remaining:
        raise RuntimeError(f"{remaining} records not acknowledged within {flush_timeout}s")
    assert delivered == sent, (delivered, sent)
    return delivered
