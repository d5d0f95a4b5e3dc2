"""Structured Streaming through `format("minibroker")` against a real broker: a query into
Parquet stopped and restarted on its checkpoint holds every offset exactly once, new topics
are picked up, maxOffsetsPerTrigger bounds micro-batches, and a streaming write lands every
row."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from tests.spark.conftest import (
    SPARK_TIMEOUT,
    create_topic,
    offsets_by_partition,
    parquet_rows,
    produce,
    source_end_offsets,
    wait_until,
)


def stream(spark, bootstrap: str, **options):
    reader = spark.readStream.format("minibroker").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def to_parquet(df, tmp_path, name: str, **trigger):
    return (
        df.writeStream.format("parquet")
        .option("path", str(tmp_path / name / "out"))
        .option("checkpointLocation", str(tmp_path / name / "checkpoint"))
        .trigger(**trigger)
        .start()
    )


def assert_exactly_once(rows, ends: dict[int, int], stored: dict[tuple[int, int], dict]):
    """Every offset below each partition's end appears once, with the value stored there."""
    positions = Counter((row["partition"], row["offset"]) for row in rows)
    duplicates = [position for position, count in positions.items() if count > 1]
    assert not duplicates, f"{len(duplicates)} offsets written twice, e.g. {duplicates[:5]}"
    assert offsets_by_partition(rows) == {p: list(range(end)) for p, end in ends.items() if end}
    for row in rows:
        assert bytes(row["value"]) == stored[(row["partition"], row["offset"])]["value"]


def test_stream_into_parquet_stopped_and_restarted_is_exactly_once(spark, spark_broker, tmp_path):
    bootstrap = spark_broker.bootstrap
    topic = "stream-restart"
    create_topic(bootstrap, topic, 3)
    # 1,000 records in each partition: Spark's rate limit gives each floor(400 / 3) = 133.
    # (With the sticky partitioner two partitions could hold a record or two each; Spark
    # gives a partition whose share is below one a whole record, so such a batch held 401.)
    stored = produce(
        bootstrap, topic, [{"value": b"a%05d" % i, "partition": i % 3} for i in range(3000)]
    )
    df = stream(
        spark, bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="400"
    )
    query = to_parquet(df, tmp_path, "restart", processingTime="0 seconds")
    try:
        wait_until(
            lambda: query.exception() or (query.lastProgress or {}).get("batchId", -1) >= 2,
            SPARK_TIMEOUT,
            "three micro-batches",
        )
        assert query.exception() is None, query.exception()
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        # Spark's rate limit: 400 shared over the partitions by backlog, rounding down.
        assert [p["numInputRows"] for p in batches[:3]] == [399, 399, 399], [
            (p["numInputRows"], p["sources"][0]["endOffset"]) for p in batches
        ]
    finally:
        query.stop()  # mid-batch, as like as not
    done_before = sum(source_end_offsets(query).values())
    assert 0 < done_before < 3000

    stored.update(produce(bootstrap, topic, [{"value": b"b%05d" % i} for i in range(1500)]))
    again = to_parquet(
        stream(spark, bootstrap, subscribe=topic, startingOffsets="latest"),
        tmp_path,
        "restart",
        availableNow=True,
    )
    assert again.awaitTermination(SPARK_TIMEOUT), "the availableNow run did not finish"
    assert again.exception() is None, again.exception()
    ends = Counter()
    for partition, offset in stored:
        ends[partition] = max(ends[partition], offset + 1)
    rows = parquet_rows(spark, tmp_path / "restart" / "out")
    assert len(rows) == 4500
    assert_exactly_once(rows, dict(ends), stored)
    # Spark's Kafka source offsets, keys in a fixed order.
    end = again.lastProgress["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    assert end == {topic: {str(p): ends[p] for p in range(3)}}


def test_new_topics_matching_the_pattern_are_picked_up(spark, spark_broker, tmp_path):
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, "grow-1", 2)
    first = produce(bootstrap, "grow-1", [{"value": b"one%d" % i} for i in range(100)])

    def run():
        query = to_parquet(
            stream(spark, bootstrap, subscribePattern="grow-[0-9]+", startingOffsets="earliest"),
            tmp_path,
            "grow",
            availableNow=True,
        )
        assert query.awaitTermination(SPARK_TIMEOUT)
        assert query.exception() is None, query.exception()

    run()
    create_topic(bootstrap, "grow-2", 3)
    second = produce(bootstrap, "grow-2", [{"value": b"two%d" % i} for i in range(90)])
    more = produce(bootstrap, "grow-1", [{"value": b"more%d" % i} for i in range(10)])
    run()
    rows = spark.read.parquet(str(tmp_path / "grow" / "out")).collect()
    seen = Counter((row["topic"], row["partition"], row["offset"]) for row in rows)
    expected = {("grow-1", p, o) for p, o in [*first, *more]}
    expected |= {("grow-2", p, o) for p, o in second}
    assert set(seen) == expected
    assert max(seen.values()) == 1


def test_streaming_write_lands_every_row(spark, spark_broker, tmp_path):
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, "copy-from", 2)
    create_topic(bootstrap, "copy-to", 2)
    stored = produce(
        bootstrap,
        "copy-from",
        [
            {"value": b"c%d" % i, "key": b"k%d" % (i % 9), "headers": [("i", b"%d" % i)]}
            for i in range(1000)
        ],
    )
    source = stream(
        spark, bootstrap, subscribe="copy-from", startingOffsets="earliest", includeHeaders="true"
    )
    query = (
        source.selectExpr("key", "value", "headers")
        .writeStream.format("minibroker")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "copy-to")
        .option("checkpointLocation", str(tmp_path / "copy-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(SPARK_TIMEOUT)
    assert query.exception() is None, query.exception()
    copied = (
        spark.read.format("minibroker")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "copy-to")
        .option("includeHeaders", "true")
        .load()
        .collect()
    )
    assert sorted(
        (bytes(r["key"]), bytes(r["value"]), tuple((h.key, bytes(h.value)) for h in r["headers"]))
        for r in copied
    ) == sorted(
        (record["key"], record["value"], tuple(record["headers"])) for record in stored.values()
    )


DRIVER = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
import minibroker.spark  # before the session: its workers find the source (the README's way)
from pyspark.sql import SparkSession
bootstrap, topic, out, checkpoint = sys.argv[1:5]
spark = (
    SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.python.unix.domain.socket.enabled", "true")  # as conftest's session
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
query = (
    spark.readStream.format("minibroker").option("kafka.bootstrap.servers", bootstrap)
    .option("subscribe", topic).option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "300").load()
    .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
    .trigger(processingTime="0 seconds").start()
)
query.awaitTermination()
"""


def test_stream_whose_driver_is_killed_restarts_exactly_once(spark, spark_broker, tmp_path):
    """The driver process dies (SIGKILL) between and during micro-batches; the query restarted
    from its checkpoint in another process still writes every offset exactly once."""
    import signal
    import subprocess
    import sys

    bootstrap = spark_broker.bootstrap
    topic = "stream-killed"
    create_topic(bootstrap, topic, 3)
    stored = produce(bootstrap, topic, [{"value": b"k%05d" % i} for i in range(6000)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    driver = subprocess.Popen(
        [sys.executable, str(script), bootstrap, topic, str(out), str(checkpoint)],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "driver.log", "wb"),  # noqa: SIM115
        start_new_session=True,
    )
    try:
        commits = checkpoint / "commits"
        wait_until(
            lambda: (
                driver.poll() is not None
                or (
                    commits.is_dir()
                    and len([p for p in commits.iterdir() if p.name.isdigit()]) >= 3
                )
            ),
            # A second Spark JVM (the driver's) beside the session's: slower under load.
            2.5 * SPARK_TIMEOUT,
            "the killed driver's first three micro-batches",
        )
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        # The whole process group: the JVM and its Python workers die with the driver.
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    committed = len([p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()])
    assert committed * 300 < 6000, "the driver finished before it was killed"

    restarted = (
        stream(spark, bootstrap, subscribe=topic)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert restarted.awaitTermination(SPARK_TIMEOUT)
    assert restarted.exception() is None, restarted.exception()
    ends = Counter()
    for partition, offset in stored:
        ends[partition] = max(ends[partition], offset + 1)
    assert_exactly_once(parquet_rows(spark, out), dict(ends), stored)


def test_stream_reports_records_lost_to_retention(spark, spark_broker, tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    bootstrap = spark_broker.bootstrap
    topic = "stream-retention"
    create_topic(bootstrap, topic, 1, {"segment.bytes": "1024", "retention.bytes": "1500"})
    for round_ in range(5):  # separate batches, so that segments roll and old ones go
        produce(bootstrap, topic, [{"value": b"s" * 200 + b"%d" % round_}] * 3)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "stream-retention-probe"})
    try:
        log_start = wait_until(
            lambda: probe.get_watermark_offsets(TopicPartition(topic, 0), cached=False)[0],
            60,
            "retention to delete the first segments",
        )
    finally:
        probe.close()
    from_zero = json.dumps({topic: {"0": 0}})

    strict = to_parquet(
        stream(spark, bootstrap, subscribe=topic, startingOffsets=from_zero),
        tmp_path,
        "strict",
        availableNow=True,
    )
    # awaitTermination raises the query's own failure.
    with pytest.raises(Exception, match="failOnDataLoss"):
        strict.awaitTermination(SPARK_TIMEOUT)
    lenient = to_parquet(
        stream(
            spark, bootstrap, subscribe=topic, startingOffsets=from_zero, failOnDataLoss="false"
        ),
        tmp_path,
        "lenient",
        availableNow=True,
    )
    assert lenient.awaitTermination(SPARK_TIMEOUT)
    assert lenient.exception() is None, lenient.exception()
    offsets = sorted(row["offset"] for row in parquet_rows(spark, tmp_path / "lenient" / "out"))
    assert offsets and offsets[0] >= log_start and offsets == list(range(offsets[0], 15))


def test_latest_on_a_new_topic_plans_its_first_batch_forwards(spark_broker):
    """Spark asks the stream reader for its initial offsets on every trigger until a first
    batch commits, and once more when it plans that batch (MicroBatchExecution's
    getStartOffset, then runBatch). With startingOffsets latest, a record produced in between
    made the second answer later than the batch's end: DataLossError, "offset went from 1 back
    to 0". The calls are made here in Spark's order, on a real broker, without Spark."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from minibroker.spark.source import DefaultSource

    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, "latest-fresh", 1)
    source = DefaultSource(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": "latest-fresh",
            "startingOffsets": "latest",
        }
    )
    reader = source.streamReader(source.schema())
    try:
        start = reader.initialOffset()
        assert start == {"latest-fresh": {"0": 0}}
        end = reader.latestOffset(start, ReadAllAvailable())  # batch 0: nothing yet
        produce(bootstrap, "latest-fresh", [{"value": b"after", "partition": 0}])
        again = reader.initialOffset()  # runBatch's start of batch 0
        assert reader.partitions(again, end) == []  # an empty batch, not a backwards one
        assert again == start == end
        # The next batch reads the record.
        following = reader.latestOffset(end, ReadAllAvailable())
        assert reader.reportLatestOffset() == following  # what latestOffset just read
        [planned] = reader.partitions(end, following)
        assert (planned.range.start, planned.range.end) == (0, 1)
    finally:
        reader.stop()
