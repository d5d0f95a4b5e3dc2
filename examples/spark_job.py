"""A Spark job that reads a topic with minibroker's data source and writes it upper-cased to
another: run it as `.venv/bin/python job.py` (no venv to activate, no PYSPARK_PYTHON to set).

tests/spark/test_job_script.py runs this file as written, from a directory of its own.
"""

from pyspark.sql import SparkSession

import minibroker.spark  # noqa: F401  (before the session starts: Spark's workers use this Python)

spark = SparkSession.builder.getOrCreate()

# Columns: key, value, topic, partition, offset, timestamp, timestampType[, headers]
df = (
    spark.read.format("minibroker")  # or spark.readStream
    .option("kafka.bootstrap.servers", "127.0.0.1:9092")
    .option("subscribe", "events")
    .option("startingOffsets", "earliest")
    .load()
)
(
    df.selectExpr("key", "upper(cast(value as string)) as value")
    .write.format("minibroker")
    .option("kafka.bootstrap.servers", "127.0.0.1:9092")
    .option("topic", "shouted")
    .mode("append")
    .save()
)
spark.stop()
