"""Batch reads and writes through `format("minibroker")` against a real broker process:
what Spark reads is exactly what was produced, the offset and timestamp options select exactly
the records Spark's Kafka source would, writes land every row where Java clients put them, and
bad options fail naming the option."""

from __future__ import annotations

import gc
import json
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from minibroker.spark import kafka
from tests.spark.conftest import create_topic, offsets_by_partition, produce, wait_until

PARTITIONS = 3


def recent_millis() -> int:
    """A timestamp an hour ago: older ones would fall to the broker's 7-day retention."""
    return (int(time.time()) - 3600) * 1000


def read(spark, bootstrap: str, **options):
    reader = spark.read.format("minibroker").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_batch_read_equals_what_was_produced(spark, spark_broker):
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, "batch-all", PARTITIONS)
    base = recent_millis()
    records = [
        {
            "value": f"value-{i}".encode() * (1 + i % 3),
            "key": None if i % 10 == 0 else f"key-{i % 17}".encode(),
            "timestamp": base + i,
            "headers": [("n", str(i).encode()), ("empty", b"")] if i % 4 == 0 else None,
        }
        for i in range(3000)
    ]
    stored = produce(bootstrap, "batch-all", records)

    df = read(spark, bootstrap, subscribe="batch-all", includeHeaders="true")
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    rows = df.selectExpr(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "cast(unix_micros(timestamp) / 1000 as long) as millis",
        "timestampType",
        "headers",
    ).collect()
    assert len(rows) == len(stored)
    seen = {}
    for row in rows:
        assert row["topic"] == "batch-all"
        assert row["timestampType"] == 0  # CreateTime
        headers = None
        if row["headers"] is not None:
            headers = [(h["key"], bytes(h["value"])) for h in row["headers"]]
        seen[(row["partition"], row["offset"])] = {
            "value": bytes(row["value"]),
            "key": None if row["key"] is None else bytes(row["key"]),
            "timestamp": row["millis"],
            "headers": headers,
        }
    assert seen == {
        position: {
            "value": record["value"],
            "key": record["key"],
            "timestamp": record["timestamp"],
            "headers": record["headers"],
        }
        for position, record in stored.items()
    }
    # One Spark partition per topic partition, unless minPartitions asks for more.
    assert df.rdd.getNumPartitions() == PARTITIONS
    split = read(spark, bootstrap, subscribe="batch-all", minPartitions="7")
    assert split.rdd.getNumPartitions() >= 7
    assert sorted(split.select("partition", "offset").collect()) == sorted(
        df.select("partition", "offset").collect()
    )


def test_starting_and_ending_offsets_select_exactly(spark, spark_broker):
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, "batch-range", PARTITIONS)
    produce(
        bootstrap,
        "batch-range",
        [{"value": b"x%d" % i, "partition": i % PARTITIONS} for i in range(300)],
    )  # 100 records per partition
    starting = json.dumps({"batch-range": {"0": 10, "1": -2, "2": 99}})
    ending = json.dumps({"batch-range": {"0": 20, "1": 5, "2": -1}})
    df = read(
        spark, bootstrap, subscribe="batch-range", startingOffsets=starting, endingOffsets=ending
    )
    assert offsets_by_partition(df.collect()) == {
        0: list(range(10, 20)),
        1: list(range(0, 5)),
        2: [99],
    }
    # assign reads only the partitions it names; endingOffsets=latest is the default.
    assigned = read(
        spark,
        bootstrap,
        assign=json.dumps({"batch-range": [1]}),
        startingOffsets=json.dumps({"batch-range": {"1": 95}}),
    )
    assert offsets_by_partition(assigned.collect()) == {1: list(range(95, 100))}
    # subscribePattern matches whole names only.
    create_topic(bootstrap, "batch-range-other", 1)
    produce(bootstrap, "batch-range-other", [{"value": b"o"}])
    pattern = read(spark, bootstrap, subscribePattern="batch-ra.*-other")
    assert [(r["topic"], r["offset"]) for r in pattern.collect()] == [("batch-range-other", 0)]


def test_timestamps_select_exactly(spark, spark_broker):
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, "batch-time", 2)
    base = recent_millis()
    produce(
        bootstrap,
        "batch-time",
        [
            {"value": b"t%d" % i, "partition": p, "timestamp": base + 1000 * i}
            for p in range(2)
            for i in range(50)
        ],
    )
    # The first record at or after the timestamp starts; the ending one is excluded.
    df = read(
        spark,
        bootstrap,
        subscribe="batch-time",
        startingTimestamp=str(base + 10_500),
        endingOffsetsByTimestamp=json.dumps({"batch-time": {"0": base + 20_000}}),
    )
    assert offsets_by_partition(df.collect()) == {0: list(range(11, 20)), 1: list(range(11, 50))}
    per_partition = read(
        spark,
        bootstrap,
        subscribe="batch-time",
        startingOffsetsByTimestamp=json.dumps({"batch-time": {"0": base + 48_000, "1": base}}),
        endingTimestamp=str(base + 3_000),
    )
    # Partition 0 starts at 48 but ends at 3: Spark refuses that as we do; so ask again with
    # an ending that fits both.
    with pytest.raises(Exception, match="startingOffsetsByTimestamp"):
        per_partition.collect()
    fitting = read(
        spark,
        bootstrap,
        subscribe="batch-time",
        startingOffsetsByTimestamp=json.dumps({"batch-time": {"0": base + 48_000, "1": base}}),
    )
    assert offsets_by_partition(fitting.collect()) == {0: [48, 49], 1: list(range(50))}
    # A timestamp after every record: an error naming the option, or latest when asked.
    after = str(base + 10**9)
    with pytest.raises(Exception, match="startingTimestamp"):
        read(spark, bootstrap, subscribe="batch-time", startingTimestamp=after).collect()
    empty = read(
        spark,
        bootstrap,
        subscribe="batch-time",
        startingTimestamp=after,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert empty.count() == 0


def test_records_deleted_by_retention_are_reported(spark, spark_broker):
    bootstrap = spark_broker.bootstrap
    topic = "batch-retention"
    create_topic(bootstrap, topic, 1, {"segment.bytes": "1024", "retention.bytes": "1500"})
    for round_ in range(5):  # separate batches, so that segments roll
        produce(bootstrap, topic, [{"value": b"r" * 200 + b"%d" % round_}] * 3)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "retention-probe"})
    try:
        log_start = wait_until(
            lambda: consumer.get_watermark_offsets(TopicPartition(topic, 0), cached=False)[0],
            60,
            "retention to delete the first segments",
        )
    finally:
        consumer.close()
    starting = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, bootstrap, subscribe=topic, startingOffsets=starting).collect()
    lenient = read(
        spark, bootstrap, subscribe=topic, startingOffsets=starting, failOnDataLoss="false"
    )
    offsets = [row["offset"] for row in lenient.collect()]
    assert offsets and offsets[0] >= log_start and offsets == list(range(offsets[0], 15))


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (Utils.murmur2), for checking where keyed records land."""
    seed, m, r = 0x9747B28C, 0x5BD1E995, 24
    length = len(data)
    h = (seed ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length % 4
    index = length - tail
    if tail == 3:
        h ^= data[index + 2] << 16
    if tail >= 2:
        h ^= data[index + 1] << 8
    if tail >= 1:
        h ^= data[index]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def test_batch_write_lands_every_row(spark, spark_broker):
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, "write-a", PARTITIONS)
    create_topic(bootstrap, "write-b", PARTITIONS)
    df = spark.range(2000).selectExpr(
        "if(id % 2 = 0, 'write-a', 'write-b') as topic",
        "cast(concat('k', id % 50) as string) as key",
        "cast(concat('v', id) as binary) as value",
        "if(id % 100 = 0, 1, null) as partition",
        "if(id % 3 = 0, array(named_struct('key', 'h', 'value', cast(id as string))), null)"
        " as headers",
    )
    (
        df.withColumn("partition", df["partition"].cast("int"))
        .withColumn("headers", df["headers"].cast("array<struct<key:string,value:binary>>"))
        .write.format("minibroker")
        .option("kafka.bootstrap.servers", bootstrap)
        .mode("append")
        .save()
    )
    rows = read(spark, bootstrap, subscribePattern="write-[ab]", includeHeaders="true").collect()
    assert len(rows) == 2000
    by_value = {bytes(row["value"]).decode(): row for row in rows}
    assert sorted(by_value) == sorted(f"v{i}" for i in range(2000))
    for i in range(2000):
        row = by_value[f"v{i}"]
        assert row["topic"] == ("write-a" if i % 2 == 0 else "write-b")
        key = f"k{i % 50}".encode()
        assert bytes(row["key"]) == key
        expected_partition = 1 if i % 100 == 0 else (murmur2(key) & 0x7FFFFFFF) % PARTITIONS
        assert row["partition"] == expected_partition, (i, row)
        if i % 3 == 0:
            assert [(h["key"], bytes(h["value"])) for h in row["headers"]] == [
                ("h", str(i).encode())
            ]
        else:
            assert row["headers"] is None
    # The topic option overrides a topic column, as in Spark's Kafka sink.
    create_topic(bootstrap, "write-c", 1)
    spark.range(10).selectExpr("'write-a' as topic", "cast(id as string) as value").write.format(
        "minibroker"
    ).option("kafka.bootstrap.servers", bootstrap).option("topic", "write-c").mode("append").save()
    assert read(spark, bootstrap, subscribe="write-c").count() == 10


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"subscribe": "no-such-topic"}, "subscribe"),
        ({"subscribe": "batch-bad", "startingOffsets": '{"batch-bad": {"0": 1'}, "startingOffsets"),
        ({"subscribe": "batch-bad", "endingOffsets": '["batch-bad"]'}, "endingOffsets"),
        ({"subscribe": "batch-bad", "kafka.bootstrap.servers": ""}, "kafka.bootstrap.servers"),
        (
            {"subscribe": "batch-bad", "assign": '{"batch-bad": [0]}'},
            "assign, subscribe, subscribePattern",
        ),
        ({"subscribe": "batch-bad", "startingOffsets": "latest"}, "startingOffsets"),
        ({"subscribe": "batch-bad", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"assign": '{"batch-bad": [0]}', "kafka.enable.auto.commit": "true"}, "kafka.enable"),
        ({"assign": '{"batch-bad": [7]}'}, "assign"),
        ({"subscribe": "batch-bad", "kafka.fetch.max.wait.ms": "5"}, "kafka.fetch.max.wait.ms"),
    ],
)
def test_bad_options_fail_naming_the_option(spark, spark_broker, options, named):
    bootstrap = spark_broker.bootstrap
    create_topic_once(bootstrap, "batch-bad")
    reader = spark.read.format("minibroker").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    started = time.monotonic()
    with pytest.raises(Exception) as failure:
        reader.load().collect()
    message = str(failure.value)
    assert f"option {named}" in message or f"options {named}" in message, message[-2000:]
    assert time.monotonic() - started < 30


def test_missing_bootstrap_servers_is_named(spark):
    with pytest.raises(Exception, match="option kafka.bootstrap.servers must be set"):
        spark.read.format("minibroker").option("subscribe", "t").load().collect()


_created: set[str] = set()


def create_topic_once(bootstrap: str, topic: str) -> None:
    if (bootstrap, topic) not in _created:
        create_topic(bootstrap, topic, 1)
        _created.add((bootstrap, topic))


def test_a_pooled_consumer_reads_exactly_each_range(spark_broker, monkeypatch):
    """What one Spark task runs, in this process, without Spark: a later read of the same
    partition takes the consumer the last one left in the pool (minibroker.spark.kafka.
    ConsumerPool) and still reads exactly its own range, later, earlier or overlapping; another
    setting or partition is another consumer; idle ones are closed."""
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, "pooled", 1)
    produce(bootstrap, "pooled", [{"value": b"v%d" % i, "partition": 0} for i in range(6)])
    pool = kafka.ConsumerPool(idle_seconds=60)
    monkeypatch.setattr(kafka, "CONSUMERS", pool)
    settings = {"bootstrap.servers": bootstrap, "isolation.level": "read_committed"}
    schema = kafka.arrow_schema(False, ["offset", "value"])

    def read(start: int, end: int) -> list[tuple[int, bytes]]:
        batches = kafka.read_range(
            settings, kafka.OffsetRange("pooled", 0, start, end), schema, True, 30_000
        )
        rows = []
        for batch in batches:
            # The collector is paused while a batch is made, never while the caller holds it.
            assert gc.isenabled()
            rows += [(row["offset"], row["value"]) for row in batch.to_pylist()]
        return rows

    assert read(0, 4) == [(i, b"v%d" % i) for i in range(4)]
    assert len(pool) == 1
    consumer = pool._idle[kafka.pool_key(settings, "pooled", 0)][0][0]
    # The next micro-batch's range, after more records arrived; then back to an earlier,
    # overlapping range (a replay) and a later one that skips some.
    produce(bootstrap, "pooled", [{"value": b"v%d" % i, "partition": 0} for i in range(6, 9)])
    assert read(4, 9) == [(i, b"v%d" % i) for i in range(4, 9)]
    assert read(2, 5) == [(i, b"v%d" % i) for i in range(2, 5)]
    assert read(7, 8) == [(7, b"v7")]
    assert len(pool) == 1
    assert pool.take(kafka.pool_key(settings, "pooled", 0), 0.0) is consumer
    pool.give_back(kafka.pool_key(settings, "pooled", 0), consumer, 0.0)
    # Another setting or partition is another consumer.
    assert pool.take(kafka.pool_key({**settings, "client.id": "x"}, "pooled", 0), 0.0) is None
    assert pool.take(kafka.pool_key(settings, "pooled", 1), 0.0) is None
    pool.prune(60.0)  # idle for idle_seconds: closed
    assert len(pool) == 0
    with pytest.raises(RuntimeError):
        consumer.assign([])  # closed consumers refuse every call
