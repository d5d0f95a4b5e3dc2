"""The exactly-once sink's Kafka side: one Spark task's rows written in one Kafka transaction,
with a record of which micro-batch the transaction carried committed in that same transaction,
so that a replayed micro-batch finds it and writes nothing.

The design (Kafka's rules it relies on are KIP-98's and KIP-447's):

- Each task writes with the transactional id `<prefix>-<partition>`, `partition` being the
  task's partition of the write (TaskContext.partitionId()). Every attempt of that task, and
  the same task of every later micro-batch, uses the same id: InitProducerId bumps the
  producer epoch, which fences any older attempt still running (its next Produce, AddPartitions
  or EndTxn is refused with PRODUCER_FENCED), and aborts (or completes) whatever transaction
  the older attempt left open. Only after that does the task look at what was committed.
- The transaction carries, besides the rows, an offset commit (TxnOffsetCommit, librdkafka's
  send_offsets_to_transaction) for the consumer group named like the transactional id: offset
  = the micro-batch id, metadata = JSON {query, batch, records, bytes}. The offset becomes
  visible exactly when the rows do (it is materialized on the commit marker), so "the group's
  offset says batch B" and "batch B's rows of this task are committed" are the same fact. The
  offset is committed on partition 0 of the first topic the task wrote (Kafka accepts offset
  commits only for partitions that exist); the lookup lists every offset of the group.
- A task whose group already records this batch (or a later one) of the same query drains its
  input without writing and reports the recorded counts: Spark replays a micro-batch whose
  commit it never logged (driver killed between the tasks' transactions and Spark's commit
  log, a batch aborted after some tasks committed), and those tasks' rows are already there.
  The drained input must have the same rows and bytes as recorded, or the replay was planned
  differently (another partitioning) and the task fails instead of writing duplicates.

Kafka's Java producer would do the same with `transactional.id` and
`sendOffsetsToTransaction`; Flink's exactly-once Kafka sink instead pre-commits on the tasks and
commits from its checkpoint coordinator, which needs a transaction resumed by another producer
(KIP-939, or Flink's reflection into the Java client); librdkafka cannot resume a transaction,
so here each task commits its own, and a micro-batch is exactly once per task, not atomic as a
whole: readers may see some tasks' rows of a batch before the others'.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition

from minibroker.spark.kafka import (
    _client,
    _payload_bytes,
    _produce_rows,
    admin_client,
    connection_params,
    producer_settings,
)

log = logging.getLogger("minibroker_spark")


class ReplanError(RuntimeError):
    """A replayed micro-batch's task holds other rows than the committed attempt wrote."""


@dataclass(frozen=True)
class TaskWrite:
    """Who writes: `transactional_id` (also the group its batch record is committed to), the
    query (a streaming query's id, which survives restarts from its checkpoint, or a batch
    write's own id) and the micro-batch (0 for a batch write)."""

    transactional_id: str
    query_id: str
    batch_id: int


@dataclass(frozen=True)
class BatchRecord:
    """What a committed transaction recorded: its query and batch, rows and bytes written."""

    query_id: str
    batch_id: int
    records: int
    bytes: int


@dataclass(frozen=True)
class TaskResult:
    records: int
    bytes: int
    replayed: bool  # already committed by an earlier attempt; nothing written this time


# librdkafka's default: a transaction open this long (its writer died) is aborted by the
# coordinator, which unblocks read_committed readers of its partitions.
TRANSACTION_TIMEOUT_MS = 60_000


def transactional_settings(kafka: dict[str, str], transactional_id: str) -> dict:
    settings = producer_settings(kafka)
    settings["transactional.id"] = transactional_id
    settings["enable.idempotence"] = True
    settings["acks"] = "all"
    timeout = int(settings.get("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS))
    settings["transaction.timeout.ms"] = timeout
    if "message.timeout.ms" not in kafka:
        # librdkafka refuses a delivery timeout longer than the transaction's.
        settings["message.timeout.ms"] = min(int(settings["message.timeout.ms"]), timeout)
    return settings


def check_settings(kafka: dict[str, str]) -> None:
    """Build (and drop) a transactional producer on the driver, so that settings librdkafka
    refuses together fail the query before any task runs."""
    _client(Producer, transactional_settings(kafka, "minibroker-spark-check"))


# Errors that pass with time (a coordinator loading its partition after a failover or on a
# fresh cluster, a transaction still completing) although librdkafka's admin client does not
# flag all of them retriable.
_TRANSIENT = (
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.UNSTABLE_OFFSET_COMMIT,
    KafkaError.CONCURRENT_TRANSACTIONS,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
)


def _is_retriable(error: KafkaException) -> bool:
    kafka_error = error.args[0] if error.args else None
    return isinstance(kafka_error, KafkaError) and (
        kafka_error.retriable() or kafka_error.code() in _TRANSIENT
    )


def _until(what: str, call, deadline: float):
    """Retry a transactional call while librdkafka says it may be retried (the coordinator
    moved, a previous transaction is still being completed)."""
    while True:
        try:
            return call()
        except KafkaException as error:
            if not _is_retriable(error) or time.monotonic() >= deadline:
                raise RuntimeError(f"{what} failed: {error}") from error
            log.info("%s failed (%s); retrying", what, error)
            time.sleep(0.2)


def committed_record(kafka: dict[str, str], write: TaskWrite, timeout: float) -> BatchRecord | None:
    """The newest batch this query committed under the transactional id, read with
    require_stable (KIP-447: an offset whose transaction is not complete is not answered)."""
    admin = admin_client(kafka)
    group = write.transactional_id
    deadline = time.monotonic() + timeout

    def fetch():
        futures = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], require_stable=True, request_timeout=30
        )
        listed = futures[group].result()
        for tp in listed.topic_partitions or ():
            if tp.error is not None:
                raise KafkaException(tp.error)
        return listed.topic_partitions or []

    newest: BatchRecord | None = None
    for tp in _until(f"OffsetFetch of group {group}", fetch, deadline):
        try:
            data = json.loads(tp.metadata or "")
            record = BatchRecord(
                str(data["query"]), int(data["batch"]), int(data["records"]), int(data["bytes"])
            )
        except (ValueError, KeyError, TypeError):
            continue  # not ours
        if record.query_id != write.query_id:
            log.warning(
                "transactional id %s was used by query %s before this query (%s): ignoring"
                " its batch record; two queries must not share a transactionalIdPrefix",
                group,
                record.query_id,
                write.query_id,
            )
            continue
        if newest is None or record.batch_id > newest.batch_id:
            newest = record
    return newest


def _drain(batches: Iterable[pa.RecordBatch]) -> tuple[int, int]:
    rows = size = 0
    for batch in batches:
        rows += batch.num_rows
        size += _payload_bytes(batch)
    return rows, size


def write_transactionally(
    kafka: dict[str, str],
    batches: Iterable[pa.RecordBatch],
    topic_option: str | None,
    write: TaskWrite,
    timeout: float = 300.0,
) -> TaskResult:
    """Write one task's rows exactly once: fence older attempts, skip a batch already
    committed, otherwise produce every row and the batch record in one transaction."""
    deadline = time.monotonic() + timeout
    producer = _client(Producer, transactional_settings(kafka, write.transactional_id))
    # Fence first, then look: after InitProducerId no older attempt can commit any more, and
    # the transaction it left open is aborted or completed, so what is read next is final.
    _until("InitProducerId", lambda: producer.init_transactions(30), deadline)
    done = committed_record(kafka, write, max(1.0, deadline - time.monotonic()))
    if done is not None and done.batch_id >= write.batch_id:
        rows, size = _drain(batches)
        if done.batch_id == write.batch_id and (rows, size) != (done.records, done.bytes):
            raise ReplanError(
                f"batch {write.batch_id} of {write.transactional_id} was committed with"
                f" {done.records} rows ({done.bytes} bytes) and is replayed with {rows} rows"
                f" ({size} bytes): the replay was planned into other partitions, so exactly once"
                " cannot be kept (keep the write's partitioning the same across restarts)"
            )
        if done.batch_id > write.batch_id:
            log.warning(
                "%s already committed batch %d, after batch %d: skipping",
                write.transactional_id,
                done.batch_id,
                write.batch_id,
            )
        log.info("%s: batch %d already committed", write.transactional_id, write.batch_id)
        return TaskResult(done.records, done.bytes, replayed=True)

    errors: list[str] = []

    def on_delivery(error, _message):
        if error is not None and len(errors) < 10:
            errors.append(str(error))

    producer.begin_transaction()
    try:
        sent, size, first_topic = _produce_rows(
            producer, batches, topic_option, on_delivery, errors
        )
        if errors:
            raise RuntimeError(f"writing to Kafka failed: {'; '.join(errors)}")
        if first_topic is None:
            # Nothing to write: no transaction on the broker (librdkafka begins one locally).
            producer.abort_transaction(30)
            return TaskResult(0, 0, replayed=False)
        record = json.dumps(
            {"query": write.query_id, "batch": write.batch_id, "records": sent, "bytes": size}
        )
        marker = KafkaTopicPartition(first_topic, 0, write.batch_id, record)
        group = _client(Consumer, {**connection_params(kafka), "group.id": write.transactional_id})
        try:
            metadata = group.consumer_group_metadata()
        finally:
            group.close()
        _until(
            "TxnOffsetCommit",
            lambda: producer.send_offsets_to_transaction([marker], metadata, 30),
            deadline,
        )
        # commit_transaction flushes every record first; a delivery error fails it.
        _until("EndTxn(commit)", lambda: producer.commit_transaction(30), deadline)
        if errors:  # pragma: no cover - commit_transaction fails first
            raise RuntimeError(f"writing to Kafka failed: {'; '.join(errors)}")
        return TaskResult(sent, size, replayed=False)
    except BaseException as error:
        _abort(producer, write, error)
        raise


def _abort(producer, write: TaskWrite, cause: BaseException) -> None:
    """Abort the open transaction on a failure (its records stay in the log, marked aborted:
    read_committed readers never see them). A fenced producer cannot abort; the newer attempt
    already did."""
    kafka_error = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
    if isinstance(cause, RuntimeError) and isinstance(cause.__cause__, KafkaException):
        kafka_error = cause.__cause__.args[0] if cause.__cause__.args else None
    if isinstance(kafka_error, KafkaError) and kafka_error.fatal():
        return
    try:
        producer.abort_transaction(30)
    except KafkaException as error:
        log.info("%s: abort after %r failed: %s", write.transactional_id, cause, error)
