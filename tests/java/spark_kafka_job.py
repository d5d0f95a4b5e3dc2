"""Spark's built-in Kafka connector, format("kafka") (spark-sql-kafka-0-10 from the Maven
cache, on spark.jars), against a Kafka-protocol cluster, exactly as a Spark user writes it:
a batch write and read, then a streaming read into a streaming write. Run as its own process
(`python tests/java/spark_kafka_job.py <bootstrap> <jars> <work dir>`) so that its SparkSession,
with the connector's jars, is the only one of its JVM; prints one JSON line with what it read.
"""

from __future__ import annotations

import json
import os
import sys
import time

from pyspark.sql import SparkSession

TIMEOUT = 120.0


def main() -> None:
    bootstrap, jars, work = sys.argv[1:4]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("spark-kafka-connector")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    result: dict[str, object] = {"spark": spark.version}

    # Batch: write 100 keyed rows to `batch-in`, read them back.
    rows = [(f"k{i % 10}", f"value {i}") for i in range(100)]
    (
        spark.createDataFrame(rows, "key string, value string")
        .write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "spark-batch")
        .save()
    )
    read = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "spark-batch")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("cast(key as string) k", "cast(value as string) v", "partition", "offset")
        .collect()
    )
    result["batch"] = sorted([row.k, row.v] for row in read)
    result["batch_partitions"] = sorted({row.partition for row in read})

    # Streaming: `spark-batch` upper-cased into `spark-stream` by a streaming query, until
    # it has written every row; then read `spark-stream` back in batch.
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "spark-batch")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "upper(cast(value as string)) as value")
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "spark-stream")
        .option("checkpointLocation", os.path.join(work, "checkpoint"))
        .start()
    )
    deadline = time.monotonic() + TIMEOUT
    streamed: list = []
    while time.monotonic() < deadline:
        query.processAllAvailable()
        streamed = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "spark-stream")
            .load()
            .selectExpr("cast(key as string) k", "cast(value as string) v")
            .collect()
        )
        if len(streamed) >= len(rows):
            break
    query.stop()
    result["stream"] = sorted([row.k, row.v] for row in streamed)
    print(json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
