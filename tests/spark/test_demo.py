"""The Spark page of the docs (docs/spark.md) as written: its demo command, run as a user
runs it in a fresh directory (the one demo run of the Spark tests), and its snippets.

tests/integration/test_readme.py runs the other pages and leaves these two blocks here,
where a Java runtime and pyspark are known to be present.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.readme import blocks, shell_commands
from tests.spark.conftest import create_topic, produce

SECTION = "Reading and writing from Spark"
PAGE = "docs/spark.md"
VENV = Path(sys.executable).parent.parent
REPOSITORY = Path(__file__).resolve().parents[2]


def readme_demo_command() -> str:
    (sh,) = [block for block in blocks(SECTION, PAGE) if block.lang == "sh"]
    demo = [command for command in shell_commands(sh) if "minibroker.spark.demo" in command]
    assert demo == [".venv/bin/python -m minibroker.spark.demo --start-broker"], demo
    return demo[0]


def test_the_readme_demo_writes_the_same_windows_to_the_topic_and_parquet(tmp_path):
    """Topic and Parquet hold the same windows, one progress line per finished batch, and
    nothing left in the temporary directory (TMPDIR points at an empty one of our own)."""
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    (cwd / ".venv").symlink_to(VENV)
    result = subprocess.run(
        ["bash", "-c", readme_demo_command()],
        cwd=cwd,
        env={**os.environ, "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-3000:]
    parquet = re.search(r"^window totals in Parquet: +(\d+) rows in (\S+)$", out, re.M)
    topic = re.search(r"^window totals in the topic: +(\d+) records$", out, re.M)
    assert parquet and topic, out
    assert int(parquet[1]) == int(topic[1]) > 0, out
    assert re.search(r"^topic and Parquet agree: +ok$", out, re.M), out
    # The topic query writes with exactlyOnce=true: no window twice for read_committed.
    assert re.search(r"^topic written exactly once: +ok ", out, re.M), out
    assert "MISMATCH" not in out
    per_user = re.findall(r"^  user-\d\d: +(\d+) +(\d+)  ok$", out, re.M)
    assert len(per_user) == 12, out
    # One line per finished micro-batch of each query, nothing while Spark starts up.
    batches = re.findall(r"^  \[(totals-to-\w+)\] batch (\d+): \d+ rows in, \d+ windows", out, re.M)
    assert {name for name, _ in batches} == {"totals-to-parquet", "totals-to-topic"}, out
    assert len(batches) == len(set(batches)), out
    assert "first batch" not in out
    assert list(tmp.iterdir()) == [], "the demo left temporary files behind"
    assert sorted(path.name for path in cwd.iterdir()) == [".venv", "demo-output"]
    assert (cwd / parquet[2]).is_dir()


def test_the_readme_read_and_write_snippet(spark, spark_broker):
    """The snippet as written, with `spark` a session and the README's bootstrap address
    swapped for this module's broker: it upper-cases `events` into `shouted`."""
    # The section's python blocks: minibroker's own source read and write (run here), a read
    # of fewer columns (the next test), Spark's built-in connector (run by
    # tests/java/test_spark_kafka.py, which has its jar) and the whole job that starts its own
    # session (examples/spark_job.py, run by tests/spark/test_job_script.py).
    (snippet,) = [
        block.text
        for block in blocks(SECTION, PAGE)
        if block.lang == "python"
        and '.write.format("minibroker")' in block.text
        and "SparkSession.builder" not in block.text
    ]
    assert snippet.count("127.0.0.1:9092") == 2
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, "events", 2)
    create_topic(bootstrap, "shouted", 2)
    produce(bootstrap, "events", [{"value": b"hi %d" % i, "key": b"k%d" % i} for i in range(50)])
    namespace = {"spark": spark}
    exec(snippet.replace("127.0.0.1:9092", bootstrap), namespace)
    rows = (
        spark.read.format("minibroker")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "shouted")
        .load()
        .selectExpr("cast(key as string) as key", "cast(value as string) as value")
        .collect()
    )
    assert sorted((row["key"], row["value"]) for row in rows) == sorted(
        (f"k{i}", f"HI {i}") for i in range(50)
    )


def test_the_readme_fewer_columns_snippet(spark, spark_broker):
    """The README's read of fewer columns, as written: `values` holds only the values."""
    (snippet,) = [
        block.text
        for block in blocks(SECTION, PAGE)
        if block.lang == "python" and '.schema("value binary")' in block.text
    ]
    bootstrap = spark_broker.bootstrap
    # Its own topic: the module's broker already has the other snippet's `events`.
    create_topic(bootstrap, "readme-values", 2)
    produce(bootstrap, "readme-values", [{"value": b"v%d" % i} for i in range(30)])
    assert snippet.count('"events"') == 1
    namespace = {"spark": spark}
    exec(
        snippet.replace("127.0.0.1:9092", bootstrap).replace('"events"', '"readme-values"'),
        namespace,
    )
    values = namespace["values"]
    assert values.columns == ["value"]
    assert sorted(bytes(row["value"]) for row in values.collect()) == sorted(
        b"v%d" % i for i in range(30)
    )


def test_the_demo_reads_with_sparks_own_connector(tmp_path):
    """`--connector kafka`: every read through Spark's format("kafka") (the jars java/fetch.sh
    resolved), the totals still written exactly once by minibroker's sink, the same checks."""
    from bench.kafka_ref import classpath, missing_reason

    reason = missing_reason("spark")
    if reason is not None:
        pytest.skip(f"Spark's Kafka connector: {reason}")
    jars = classpath("spark").replace(":", ",")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "minibroker.spark.demo",
            "--start-broker",
            "--connector",
            "kafka",
            "--jars",
            jars,
            "--seconds",
            "8",
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-3000:]
    assert 'reading with format("kafka")' in out, out
    assert re.search(r"^topic written exactly once: +ok ", out, re.M), out
    assert re.search(r"^topic and Parquet agree: +ok$", out, re.M), out
    assert "MISMATCH" not in out


def test_the_demo_refuses_the_kafka_connector_without_its_jars():
    result = subprocess.run(
        [sys.executable, "-m", "minibroker.spark.demo", "--connector", "kafka"],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "--connector kafka needs Spark's connector on the class path: --jars" in result.stderr
