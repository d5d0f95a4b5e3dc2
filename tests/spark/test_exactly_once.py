"""The exactly-once sink (`exactlyOnce=true`): a streaming query whose task fails once and whose
driver is killed with SIGKILL after a micro-batch's transactions committed but before Spark
logged the batch's commit, restarted from its checkpoint, leaves every row exactly once for a
read_committed reader; a batch write too; contradicting options are refused by name."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.spark.conftest import SPARK_TIMEOUT, create_topic, produce, wait_until


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value of the topic as a consumer with `isolation` reads it, up to the end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eos-check-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        ended: set[int] = set()
        while len(ended) < partitions:
            message = consumer.poll(10)
            assert message is not None, f"{topic}: no end of partition within 10 s"
            error = message.error()
            if error is None:
                values.append(message.value())
                ended.discard(message.partition())
            elif error.code() == KafkaError._PARTITION_EOF:
                ended.add(message.partition())
            else:
                raise AssertionError(str(error))
    finally:
        consumer.close()
    return values


def test_exactly_once_options_are_checked(spark, spark_broker):
    from minibroker.spark.options import OptionError, write_options

    base = {"kafka.bootstrap.servers": spark_broker.bootstrap, "topic": "t"}
    for options, message in [
        ({"kafka.transactional.id": "mine"}, "kafka.transactional.id is not supported"),
        ({"exactlyOnce": "true", "kafka.acks": "1"}, "kafka.acks=1 contradicts exactlyOnce=true"),
        (
            {"exactlyOnce": "true", "kafka.enable.idempotence": "false"},
            "kafka.enable.idempotence=false contradicts exactlyOnce=true",
        ),
        ({"exactlyOnce": "yes"}, "option exactlyOnce must be true or false"),
        ({"exactlyOnce": "true", "transactionalIdPrefix": "a b"}, "transactionalIdPrefix must"),
    ]:
        with pytest.raises(OptionError, match=message):
            write_options({**base, **options})
    assert write_options(base).exactly_once is False  # off by default
    # Through Spark, once: the query fails with the message naming the option.
    writer = spark.createDataFrame([("a",)], "value string").write.format("minibroker")
    for name, value in {**base, "transactionalIdPrefix": "mine"}.items():
        writer = writer.option(name, value)
    with pytest.raises(Exception, match="transactionalIdPrefix needs exactlyOnce=true"):
        writer.mode("append").save()


def test_exactly_once_warns_that_read_uncommitted_readers_see_failed_attempts(
    spark_broker, caplog, monkeypatch
):
    """The warning is logged where Spark builds the writer (its Python planner worker, whose
    log goes to the driver's stderr); here the data source is built in this process."""
    from pyspark.sql.types import StringType, StructField, StructType

    from minibroker.spark import source

    monkeypatch.setattr(source, "_warned", False)
    schema = StructType([StructField("value", StringType())])
    base = {"kafka.bootstrap.servers": spark_broker.bootstrap, "topic": "t"}
    with caplog.at_level(logging.WARNING, logger="minibroker_spark"):
        source.DefaultSource(base).writer(schema, False)
        source.DefaultSource(base).streamWriter(schema, False)
        assert caplog.text == ""  # at least once (the default): nothing to warn about
        source.DefaultSource({**base, "exactlyOnce": "true"}).streamWriter(schema, False)
    assert "exactlyOnce=true" in caplog.text, caplog.text
    assert "read_uncommitted readers" in caplog.text, caplog.text
    assert "kafka.isolation.level=read_committed" in caplog.text, caplog.text


def test_exactly_once_stream_without_a_checkpoint_is_refused_by_name(spark, spark_broker):
    """The transactional ids and the committed batch ids live with the query's checkpoint: a
    query without one is refused before it starts, naming checkpointLocation."""
    query = (
        spark.readStream.format("rate")
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("minibroker")
        .option("kafka.bootstrap.servers", spark_broker.bootstrap)
        .option("topic", "eos-no-checkpoint")
        .option("exactlyOnce", "true")
    )
    with pytest.raises(Exception, match="checkpointLocation"):
        started = query.start()
        started.stop()


def test_batch_write_exactly_once(spark, spark_broker):
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, "eos-batch", 2)
    rows = [(f"k{i % 7}", f"b{i:04d}") for i in range(400)]
    (
        spark.createDataFrame(rows, "key string, value string")
        .repartition(3)
        .write.format("minibroker")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "eos-batch")
        .option("exactlyOnce", "true")
        .option("transactionalIdPrefix", "eos-batch-test")
        .mode("append")
        .save()
    )
    values = read_all(bootstrap, "eos-batch", 2, "read_committed")
    assert Counter(values) == Counter(value.encode() for _, value in rows)


KILLER = """
import os
import signal

from minibroker.spark.source import DefaultSource, StreamWriter


class KillingWriter(StreamWriter):
    # Spark calls commit() on the driver after every task of the batch succeeded (their
    # transactions are committed) and before it writes the batch to its commit log.
    def commit(self, messages, batchId):
        if batchId == int(os.environ["EOS_KILL_AT_BATCH"]):
            # The driver's whole process group (the JVM, its Python workers), as the test's
            # kill -9 of the group would; Spark starts this worker in a group of its own.
            os.killpg(int(os.environ["EOS_DRIVER_GROUP"]), signal.SIGKILL)
        super().commit(messages, batchId)


class KillingSource(DefaultSource):
    @classmethod
    def name(cls):
        return "minibroker-killing"

    def streamWriter(self, schema, overwrite):
        return KillingWriter(super().streamWriter(schema, overwrite).options)
"""

DRIVER = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["EOS_DRIVER_GROUP"] = str(os.getpgid(0))  # inherited by the JVM and its workers
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.functions import col, udf
from eos_killer import KillingSource

bootstrap, source, sink, checkpoint = sys.argv[1:5]
# local[2,3]: a failed task is tried up to 3 times, as on a cluster.
spark = (
    SparkSession.builder.master("local[2,3]").config("spark.ui.enabled", "false")
    .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    # A busy machine starts Python workers slowly: wait for them longer than 15 s.
    .config("spark.python.authenticate.socketTimeout", "120s")
    .config("spark.python.unix.domain.socket.enabled", "true")  # as conftest's session
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
spark.dataSource.register(KillingSource)


@udf("binary")
def fail_first_attempt(value):
    if value == b"boom" and TaskContext.get().attemptNumber() == 0:
        raise RuntimeError("injected failure of the first attempt")
    return value


query = (
    spark.readStream.format("minibroker").option("kafka.bootstrap.servers", bootstrap)
    .option("subscribe", source).option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "1500").load()
    .select(fail_first_attempt(col("value")).alias("value"))
    .writeStream.format("minibroker-killing").option("kafka.bootstrap.servers", bootstrap)
    .option("topic", sink).option("exactlyOnce", "true")
    .option("checkpointLocation", checkpoint)
    .trigger(processingTime="0 seconds").start()
)
query.awaitTermination()
"""


def test_stream_exactly_once_through_a_failed_task_and_a_killed_driver(
    spark, spark_broker, tmp_path
):
    """Micro-batch 1 holds a row that fails its task's first attempt (retried: the retry
    fences the failed attempt's transaction, which is aborted); the driver is killed with
    SIGKILL inside Spark's commit of batch 2, after every task of batch 2 committed its
    transaction. The restarted query replays batch 2: each task finds the batch recorded in its
    transactional id's group and writes nothing. read_committed sees every row once."""
    bootstrap = spark_broker.bootstrap
    source, sink = "eos-in", "eos-out"
    create_topic(bootstrap, source, 3)
    create_topic(bootstrap, sink, 3)
    records = [{"value": b"e%05d" % i, "partition": i % 3} for i in range(4500)]
    # Offset 750 of partition 0: in batch 1 (500 rows per partition per batch).
    records.insert(3 * 750, {"value": b"boom", "partition": 0})
    produce(bootstrap, source, records)
    expected = Counter(record["value"] for record in records)

    checkpoint = tmp_path / "checkpoint"
    (tmp_path / "eos_killer.py").write_text(KILLER)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {
        **os.environ,
        "EOS_KILL_AT_BATCH": "2",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()]),
    }
    log = tmp_path / "driver.log"
    driver = subprocess.Popen(
        [sys.executable, str(script), bootstrap, source, sink, str(checkpoint)],
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),  # noqa: SIM115
        start_new_session=True,
        env=env,
    )
    try:
        wait_until(
            lambda: driver.poll() is not None, 3 * SPARK_TIMEOUT, "the driver to kill itself"
        )
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert driver.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    assert "injected failure of the first attempt" in log.read_text(), "no task failed"
    committed = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    planned = sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    assert (committed, planned) == ([0, 1], [0, 1, 2])
    # Batch 2's transactions are committed although Spark never logged the batch.
    batch_2_end = json.loads((checkpoint / "offsets" / "2").read_text().splitlines()[-1])
    assert len(read_all(bootstrap, sink, 3, "read_committed")) == sum(batch_2_end[source].values())

    restarted = (
        spark.readStream.format("minibroker")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .load()
        .select("value")
        .writeStream.format("minibroker")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert restarted.awaitTermination(SPARK_TIMEOUT)
    assert restarted.exception() is None, restarted.exception()

    seen = Counter(read_all(bootstrap, sink, 3, "read_committed"))
    duplicates = {value: n for value, n in seen.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} rows twice, e.g. {list(duplicates)[:5]}"
    assert seen == expected
    # A read_uncommitted reader also sees what the failed attempt sent before it was aborted
    # (as much as reached the broker): never less, and only rows that also committed.
    uncommitted = Counter(read_all(bootstrap, sink, 3, "read_uncommitted"))
    aborted = uncommitted - seen
    assert all(uncommitted[value] >= n for value, n in seen.items()), "a committed row is missing"
    print(f"read_uncommitted sees {sum(aborted.values())} rows of aborted attempts")


def test_a_task_replayed_after_its_commit_writes_nothing_and_fences_zombies(spark_broker):
    """The task's Kafka side without Spark: a second attempt of a committed batch writes
    nothing, one planned with other rows fails, another query's record under the same id is
    ignored, and an attempt still open when a newer one starts can no longer commit."""
    import pyarrow as pa
    from confluent_kafka import KafkaError, KafkaException, Producer

    from minibroker.spark.transactions import (
        ReplanError,
        TaskWrite,
        transactional_settings,
        write_transactionally,
    )

    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, "eos-task", 1)
    kafka = {"bootstrap.servers": bootstrap}

    def rows(*values: bytes) -> list[pa.RecordBatch]:
        return [pa.record_batch([pa.array(list(values), pa.binary())], names=["value"])]

    task = TaskWrite("eos-task-test-0", "query-1", batch_id=4)
    first = write_transactionally(kafka, rows(b"a", b"b"), "eos-task", task)
    assert (first.records, first.replayed) == (2, False)
    again = write_transactionally(kafka, rows(b"b", b"a"), "eos-task", task)
    assert (again.records, again.replayed) == (2, True)
    with pytest.raises(ReplanError, match="committed with 2 rows"):
        write_transactionally(kafka, rows(b"a", b"b", b"c"), "eos-task", task)

    # A zombie: an older attempt of the next batch, still holding an open transaction.
    zombie = Producer(transactional_settings(kafka, task.transactional_id))
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("eos-task", b"zombie")
    zombie.flush(30)
    later = TaskWrite(task.transactional_id, "query-1", batch_id=5)
    assert write_transactionally(kafka, rows(b"c"), "eos-task", later).replayed is False
    with pytest.raises(KafkaException) as raised:
        zombie.produce("eos-task", b"zombie again")
        zombie.commit_transaction(30)
    # Fenced, not any failure: librdkafka 2.x turns the broker's INVALID_PRODUCER_EPOCH (its
    # Produce) or PRODUCER_FENCED (EndTxn) into the fatal _FENCED (seen: "transactional
    # producer fenced by newer producer instance"); the broker's own codes are accepted too.
    fenced = raised.value.args[0]
    assert fenced.fatal(), fenced
    assert fenced.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), fenced
    # Another query under the same transactional id does not count as a replay.
    other = TaskWrite(task.transactional_id, "query-2", batch_id=5)
    assert write_transactionally(kafka, rows(b"d"), "eos-task", other).replayed is False

    assert sorted(read_all(bootstrap, "eos-task", 1, "read_committed")) == [b"a", b"b", b"c", b"d"]
    assert b"zombie" in read_all(bootstrap, "eos-task", 1, "read_uncommitted")
