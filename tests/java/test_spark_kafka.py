"""Spark's built-in Kafka connector (spark-sql-kafka-0-10 4.2.0 from the Maven cache, on
spark.jars; pyspark 4.3.0, whose own connector release Maven Central does not serve) against a
minibroker broker: `write.format("kafka")`, `read.format("kafka")`, and a `readStream` into a
`writeStream`, as a Spark user writes them (spark_kafka_job.py, in its own process so that its
SparkSession is the only one of its JVM).

The broker is the pytest plugin's `kafka_broker`, module-scoped, with `num.partitions=3` (the
partitions of the topics it creates on first use, read at start)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.kafka_ref import classpath, missing_reason
from minibroker.testing import Cluster

JOB = Path(__file__).resolve().parent / "spark_kafka_job.py"


@pytest.fixture(scope="module")
def spark_jars() -> str:
    if (reason := missing_reason("spark")) is not None:
        pytest.skip(f"Spark's Kafka connector: {reason}")
    pytest.importorskip("pyspark", reason="pip install -e '.[spark]' installs pyspark")
    return classpath("spark").replace(":", ",")


# The plugin fails the test that closes the broker if it does not shut down cleanly.
pytestmark = pytest.mark.minibroker(scope="module", server_properties={"num.partitions": 3})


def test_format_kafka_batch_and_streaming(spark_jars, kafka_broker: Cluster, tmp_path):
    done = subprocess.run(
        [sys.executable, str(JOB), kafka_broker.bootstrap_servers, spark_jars, str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},  # the driver on loopback only
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    rows = sorted([f"k{i % 10}", f"value {i}"] for i in range(100))
    assert result["batch"] == rows
    # Keyed rows spread over the auto-created topic's three partitions.
    assert result["batch_partitions"] == [0, 1, 2]
    assert result["stream"] == sorted([key, value.upper()] for key, value in rows)
