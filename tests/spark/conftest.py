"""One local[2] SparkSession for every Spark test, one broker per module, and helpers that
produce records and read what Spark wrote.

The source is found by Spark's own discovery (the `pyspark_minibroker` module), never
registered by hand, so these tests also check that `format("minibroker")` works as documented.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from minibroker.tools.launcher import BrokerProcess
from tests.conftest import BROKER_READY_TIMEOUT, wait_for

if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip(
        "Spark needs a Java runtime (apt-get install openjdk-17-jre-headless)",
        allow_module_level=True,
    )

pyspark = pytest.importorskip("pyspark", reason="pip install -e '.[spark]' installs pyspark")

# Spark's driver binds and dials the address its host name resolves to (on these machines the
# network card's), unless told otherwise; a test talks only to loopback. Set for this process
# and inherited by the drivers the tests start as processes of their own.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

# Every wait for Spark or the broker has this deadline: a broken source fails, never hangs.
SPARK_TIMEOUT = 120.0

REPOSITORY = Path(__file__).resolve().parents[2]
ICEBERG_CATALOG_SOURCE = (
    REPOSITORY / "java/iceberg-spark/src/minibroker/iceberg/spark/IcebergTableCatalog.java"
)


def iceberg_spark_jars() -> tuple[list[str], str | None]:
    """The jars Spark reads Iceberg tables with, for spark.jars (they must be there when the
    session starts; the catalog itself is configured later, with spark.conf.set): Iceberg's
    Spark runtime and SQLite's JDBC driver from the Maven cache (java/fetch.sh), and
    IcebergTableCatalog.java compiled against pyspark's jars (cached in build/java by the
    source's hash). Returns ([], why) when they cannot be had: the Iceberg tests skip with it."""
    import hashlib
    import subprocess
    import zipfile

    from bench.kafka_ref import CLASSPATH_DIR, classpath, missing_reason

    reason = missing_reason("iceberg-spark")
    if reason is not None:
        return [], reason
    if shutil.which("javac") is None:
        return [], "no javac (apt-get install openjdk-17-jdk-headless)"
    runtime = classpath("iceberg-spark")
    source = ICEBERG_CATALOG_SOURCE.read_bytes()
    digest = hashlib.sha256(source + runtime.encode() + pyspark.__version__.encode())
    jar = CLASSPATH_DIR / f"iceberg-spark-catalog-{digest.hexdigest()[:16]}.jar"
    if not jar.exists():
        classes = CLASSPATH_DIR / f"{jar.stem}.classes"
        shutil.rmtree(classes, ignore_errors=True)
        spark_jars = Path(pyspark.__file__).parent / "jars"
        compiled = subprocess.run(
            ["javac", "-nowarn", "-d", str(classes), "-cp", f"{spark_jars}/*:{runtime}"]
            + [str(ICEBERG_CATALOG_SOURCE)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if compiled.returncode != 0:
            return [], f"javac failed on {ICEBERG_CATALOG_SOURCE.name}: {compiled.stderr[-2000:]}"
        partial = jar.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w") as archive:
            for path in sorted(classes.rglob("*.class")):
                archive.write(path, path.relative_to(classes).as_posix())
        partial.rename(jar)
        shutil.rmtree(classes, ignore_errors=True)
    return [str(jar), *runtime.split(":")], None


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    # As the README says: imported before the session starts, so that Spark's discovery (in
    # a worker running this Python) sees `pyspark_minibroker` under the editable install.
    import minibroker.spark  # noqa: F401

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = SparkSession.builder
    jars, _ = iceberg_spark_jars()
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    session = (
        builder.master("local[2]")
        .appName("minibroker-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "60s")
        # Python workers connect back over a Unix socket of their own, not a loopback TCP
        # port: CI saw "Python worker failed to connect back ... Authentication failed", a
        # connection that was not the worker's reaching the port Spark listened on for it
        # (any process on the machine can reach a loopback port; only we reach our socket).
        .config("spark.python.unix.domain.socket.enabled", "true")
        # A busy machine starts Python workers slowly: wait for them longer than 15 s.
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    """A single broker (its own controller) shared by a module's tests; each test uses its
    own topics. Retention is checked every 200 ms so that a test can see records deleted."""
    base = tmp_path_factory.mktemp("spark-broker")
    broker = BrokerProcess.start(
        node_id=1,
        log_dir=base / "data",
        overrides={"log.retention.check.interval.ms": 200, "num.partitions": 3},
    )
    broker.wait_ready(BROKER_READY_TIMEOUT)
    yield broker
    exit_code = broker.stop()
    assert exit_code == 0, broker.log_tail()


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})
    admin.create_topics([new], request_timeout=15)[topic].result(timeout=20)


def produce(
    bootstrap: str, topic: str, records: list[dict], settings: dict | None = None
) -> dict[tuple[int, int], dict]:
    """Produce `records` (dicts of value, key, partition, timestamp, headers), wait for every
    delivery report and return each record by the (partition, offset) it was stored at."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "partitioner": "murmur2_random",
            **(settings or {}),
        }
    )
    stored: dict[tuple[int, int], dict] = {}
    errors: list[str] = []

    def delivered(error, message, record):
        if error is not None:
            errors.append(str(error))
        else:
            stored[(message.partition(), message.offset())] = {
                **record,
                "timestamp": message.timestamp()[1],
            }

    for record in records:
        extra = {k: record[k] for k in ("key", "partition", "timestamp", "headers") if k in record}
        if extra.get("partition") is None:
            extra.pop("partition", None)
        while True:
            try:
                producer.produce(
                    topic,
                    value=record["value"],
                    on_delivery=lambda e, m, r=record: delivered(e, m, r),
                    **extra,
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0, "records still undelivered after 60 s"
    assert not errors, errors[:5]
    return stored


def offsets_by_partition(rows) -> dict[int, list[int]]:
    result: dict[int, list[int]] = {}
    for row in rows:
        result.setdefault(row["partition"], []).append(row["offset"])
    return {partition: sorted(offsets) for partition, offsets in sorted(result.items())}


def wait_until(condition, timeout: float, what: str, interval: float = 0.2):
    """tests.conftest.wait_for, polling less often (Spark's progress moves in batches)."""
    return wait_for(condition, timeout, what, interval)


def source_end_offsets(query) -> dict[tuple[str, int], int]:
    """The end offsets of the query's last finished micro-batch, from its progress."""
    import json

    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return {}
    end = progress["sources"][0]["endOffset"]
    if isinstance(end, str):
        end = json.loads(end)
    return {(t, int(p)): o for t, parts in (end or {}).items() for p, o in parts.items()}


def parquet_rows(spark, path: Path) -> list:
    """What a reader of the sink's output sees: Spark's file sink log decides which files
    count, so files of a batch that never committed are not read."""
    return spark.read.parquet(str(path)).select("topic", "partition", "offset", "value").collect()


# Spark's own bound, not ours: PythonWorkerFactory.createSimpleWorker waits a hard-coded 10 s
# (not a setting in Spark 4.3) for a new Python worker (the Python data source's planner and
# streaming runners start one) to connect back. On 2 cores under the parallel suite's load the
# interpreter's start took longer (the fresh-clone CI run of c3ff680, during a broker kill).
WORKER_START_TIMEOUT = "Python worker failed to connect back"
WORKER_START_RESTARTS = 3


class RestartingQuery:
    """A streaming query that is started again from its checkpoint, as its operator would, when
    it failed because Spark could not start a Python worker in its 10 s (WORKER_START_TIMEOUT),
    at most WORKER_START_RESTARTS times; any other failure is the query's. A restart keeps the
    test's claims: the output must still hold every offset exactly once."""

    def __init__(self, start):
        self._start = start
        self.query = start()
        self.restarts = 0

    def exception(self):
        failure = self.query.exception()
        if (
            failure is not None
            and WORKER_START_TIMEOUT in str(failure)
            and self.restarts < WORKER_START_RESTARTS
        ):
            self.query.stop()
            self.restarts += 1
            print(f"Spark did not start a Python worker in 10 s; restart {self.restarts}")
            self.query = self._start()
            return None
        return failure

    @property
    def lastProgress(self):  # noqa: N802 - StreamingQuery's name
        return self.query.lastProgress

    def awaitTermination(self, timeout: float) -> bool:  # noqa: N802 - StreamingQuery's name
        """StreamingQuery.awaitTermination over the query and its restarts, `timeout` in all:
        raises the query's failure as Spark does, unless it is one to restart after."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.query.awaitTermination(max(0.1, deadline - time.monotonic()))
            except Exception:
                if self.exception() is not None:
                    raise

    def stop(self) -> None:
        self.query.stop()
