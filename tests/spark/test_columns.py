"""Reading only some columns: Spark's Python Data Source API has no column pruning, so a query
names the columns it reads with a schema of its own (`.schema("value binary")`), and the
source builds only those. What it builds must still be exactly what was produced, on a
multi-partition topic with compressed batches, in the order the schema gives; a schema that
is not a subset of the Kafka source's fails naming the column. The batch builder is also
checked directly on messages with offset gaps (what transaction markers and compaction leave),
where offsets cannot be counted from the first one."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, Message

from minibroker.spark import kafka
from minibroker.spark.kafka import arrow_schema
from tests.spark.conftest import SPARK_TIMEOUT, create_topic, produce

PARTITIONS = 3


def read(spark, bootstrap: str, schema: str | None, **options):
    reader = spark.read.format("minibroker").option("kafka.bootstrap.servers", bootstrap)
    if schema is not None:
        reader = reader.schema(schema)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


@pytest.fixture(scope="module")
def topic(spark_broker):
    """3 partitions, lz4-compressed batches, keys on most records; what was stored where."""
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, "columns", PARTITIONS)
    records = [
        {"value": f"value-{i}".encode(), "key": None if i % 7 == 0 else f"k{i % 13}".encode()}
        for i in range(2000)
    ]
    stored = produce(bootstrap, "columns", records, {"compression.type": "lz4"})
    assert {partition for partition, _ in stored} == set(range(PARTITIONS))
    return stored


def test_value_only_reads_every_value(spark, spark_broker, topic):
    df = read(spark, spark_broker.bootstrap, "value binary", subscribe="columns")
    assert df.columns == ["value"]
    values = sorted(bytes(row["value"]) for row in df.collect())
    assert values == sorted(record["value"] for record in topic.values())


def test_chosen_columns_in_the_schema_order_are_right(spark, spark_broker, topic):
    df = read(
        spark,
        spark_broker.bootstrap,
        "offset long, timestamp timestamp, partition int, key binary, timestampType int",
        subscribe="columns",
    )
    assert df.columns == ["offset", "timestamp", "partition", "key", "timestampType"]
    rows = df.collect()
    assert len(rows) == len(topic)
    for row in rows:
        record = topic[(row["partition"], row["offset"])]
        assert (bytes(row["key"]) if row["key"] is not None else None) == record["key"]
        millis = row["timestamp"].replace(tzinfo=datetime.UTC).timestamp() * 1000
        assert round(millis) == record["timestamp"]
        assert row["timestampType"] == 0  # CreateTime
    # A count over a pruned schema counts the records, as over the full one.
    assert read(spark, spark_broker.bootstrap, "partition int", subscribe="columns").count() == (
        len(topic)
    )


def test_a_stream_reads_only_the_schemas_columns(spark, spark_broker, topic, tmp_path):
    query = (
        spark.readStream.format("minibroker")
        .schema("partition int, offset long, value binary")
        .option("kafka.bootstrap.servers", spark_broker.bootstrap)
        .option("subscribe", "columns")
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(SPARK_TIMEOUT), "the availableNow query did not finish"
    assert query.exception() is None, query.exception()
    df = spark.read.parquet(str(tmp_path / "out"))
    assert df.columns == ["partition", "offset", "value"]
    rows = df.collect()
    assert len(rows) == len(topic)
    assert {(r["partition"], r["offset"]): bytes(r["value"]) for r in rows} == {
        position: record["value"] for position, record in topic.items()
    }


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ("value string", "column value must be binary, not string"),
        ("value binary, payload binary", "column 'payload' is not a column of the Kafka source"),
    ],
)
def test_a_schema_that_is_not_kafkas_is_named(spark, spark_broker, schema, named):
    with pytest.raises(Exception, match=named):
        read(spark, spark_broker.bootstrap, schema, subscribe="columns").collect()


def message(offset: int, timestamp_type: int = 1) -> Message:
    return Message(
        topic="t",
        partition=2,
        offset=offset,
        key=b"k%d" % offset if offset % 2 else None,
        value=b"v%d" % offset,
        timestamp=(timestamp_type, 1_700_000_000_000 + offset),
        headers=[("h", b"%d" % offset)] if offset % 3 == 0 else None,
    )


@pytest.mark.parametrize("offsets", [[5, 6, 7, 8], [5, 7, 8, 11], [0], [3, 4, 9]])
def test_batches_carry_each_message_where_offsets_have_gaps(offsets):
    messages = [message(offset) for offset in offsets]
    full = kafka._to_batch(messages, "t", 2, arrow_schema(include_headers=True))
    assert full.schema == arrow_schema(include_headers=True)
    assert full.column("offset").to_pylist() == offsets
    assert full.column("value").to_pylist() == [b"v%d" % o for o in offsets]
    assert full.column("key").to_pylist() == [b"k%d" % o if o % 2 else None for o in offsets]
    assert full.column("partition").to_pylist() == [2] * len(offsets)
    assert full.column("topic").to_pylist() == ["t"] * len(offsets)
    stamps = full.column("timestamp").cast(pa.int64()).to_pylist()
    assert stamps == [(1_700_000_000_000 + o) * 1000 for o in offsets]
    assert full.column("timestampType").to_pylist() == [0] * len(offsets)
    assert full.column("headers").to_pylist() == [
        [{"key": "h", "value": b"%d" % o}] if o % 3 == 0 else None for o in offsets
    ]
    chosen = arrow_schema(False, ["timestamp", "offset"])
    pruned = kafka._to_batch(messages, "t", 2, chosen)
    assert pruned.schema.names == ["timestamp", "offset"]
    assert pruned.column("offset").to_pylist() == offsets
    log_append = kafka._to_batch([message(o, 2) for o in offsets], "t", 2, chosen)
    assert log_append.column("timestamp").equals(pruned.column("timestamp"))
    types = kafka._to_batch([message(o, 2) for o in offsets], "t", 2, arrow_schema(False))
    assert types.column("timestampType").to_pylist() == [1] * len(offsets)


def test_an_error_event_among_records_is_seen():
    """An end-of-partition event mixed with records (librdkafka hands both in one consume)
    sends the read down the path that handles it."""
    eof = Message(topic="t", partition=2, offset=9, error=KafkaError(KafkaError._PARTITION_EOF))
    records = [message(offset) for offset in range(5, 9)]
    assert kafka._only_records(records)
    assert not kafka._only_records([*records, eof])
    assert not kafka._only_records([eof])
