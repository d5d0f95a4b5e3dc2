"""A Spark job run as a user runs it: `.venv/bin/python job.py` from a directory of its own,
the virtualenv not activated (not on PATH) and PYSPARK_PYTHON not set.

Spark starts its Python workers with `$PYSPARK_PYTHON`, else `python3` from PATH, which here
is a Python without minibroker (checked below): without `import minibroker.spark` choosing
the job's interpreter for them, the first job fails with DATA_SOURCE_NOT_FOUND and the second
(a session started before the import, then `register(spark)`) with "No module named
'minibroker'". The project is installed editable here (`pip install -e`), as the README's
commands install it, so discovery also needs the folder of `pyspark_minibroker` on the
workers' path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Consumer

from tests.spark.conftest import SPARK_TIMEOUT, create_topic, produce

REPOSITORY = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
JOB = REPOSITORY / "examples" / "spark_job.py"

# The same job with the session started first, then the source registered by hand.
REGISTER_JOB = """\
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
import minibroker.spark

minibroker.spark.register(spark)
df = (
    spark.read.format("minibroker")
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
"""


def user_environment() -> dict[str, str]:
    """The user's shell: PATH without the virtualenv, no PYSPARK_*, no PYTHONPATH. Spark's
    UI is off and Spark binds to loopback (the tests' rule), through variables the job never
    reads."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PYSPARK_") and key not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env["PATH"] = os.pathsep.join(
        entry
        for entry in env.get("PATH", "").split(os.pathsep)
        if entry and not Path(entry).resolve().is_relative_to(VENV.resolve())
    )
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYSPARK_SUBMIT_ARGS"] = "--conf spark.ui.enabled=false pyspark-shell"
    return env


def path_python_lacks_minibroker(env: dict[str, str]) -> bool:
    python = shutil.which("python3", path=env["PATH"])
    if python is None:
        return True
    found = subprocess.run(
        [python, "-c", "import minibroker"], env=env, capture_output=True, timeout=60
    )
    return found.returncode != 0


def run_job(tmp_path: Path, text: str, bootstrap: str, topics: tuple[str, str]) -> str:
    """Run `text` as job.py in a fresh directory, the README's address and topics replaced."""
    assert text.count("127.0.0.1:9092") == 2
    assert text.count('"events"') == 1 and text.count('"shouted"') == 1
    source, target = topics
    cwd = tmp_path / "job"
    cwd.mkdir()
    job = cwd / "job.py"
    job.write_text(
        text.replace("127.0.0.1:9092", bootstrap)
        .replace('"events"', f'"{source}"')
        .replace('"shouted"', f'"{target}"')
    )
    env = user_environment()
    assert path_python_lacks_minibroker(env), "python3 on PATH must be one without minibroker"
    result = subprocess.run(
        [str(VENV / "bin" / "python"), "job.py"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=SPARK_TIMEOUT * 2,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    return result.stderr


def shouted(bootstrap: str, topic: str, expected: int) -> list[tuple[str, str]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    rows: list[tuple[str, str]] = []
    try:
        for _ in range(120):
            for message in consumer.consume(expected, timeout=0.5):
                assert message.error() is None, message.error()
                rows.append((message.key().decode(), message.value().decode()))
            if len(rows) >= expected:
                break
    finally:
        consumer.close()
    return sorted(rows)


def check_job(tmp_path, spark_broker, text: str, name: str) -> None:
    bootstrap = spark_broker.bootstrap
    source, target = f"{name}-events", f"{name}-shouted"
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, target, 2)
    produce(bootstrap, source, [{"value": b"hi %d" % i, "key": b"k%d" % i} for i in range(20)])
    run_job(tmp_path, text, bootstrap, (source, target))
    assert shouted(bootstrap, target, 20) == sorted((f"k{i}", f"HI {i}") for i in range(20))


def test_the_example_job_runs_with_the_venv_python_not_activated(tmp_path, spark_broker):
    """examples/spark_job.py as written: Spark's own discovery finds `format("minibroker")`."""
    check_job(tmp_path, spark_broker, JOB.read_text(), "job")


def test_register_after_the_session_started_runs_the_source_in_this_python(tmp_path, spark_broker):
    """The session (and its JVM) started before minibroker.spark was imported, so its
    workers are `python3` from PATH; `register(spark)` makes the source run in this one."""
    check_job(tmp_path, spark_broker, REGISTER_JOB, "register")


def test_the_docs_show_the_job_as_it_is():
    """docs/spark.md shows examples/spark_job.py's code, which the tests above run: the page
    cannot drift from the file (its docstring aside)."""
    job = JOB.read_text()
    code = job[job.index("from pyspark.sql import SparkSession") :].rstrip("\n")
    page = (REPOSITORY / "docs" / "spark.md").read_text()
    assert f"```python\n{code}\n```" in page
