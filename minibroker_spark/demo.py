"""A worked pipeline: events into a topic, a Structured Streaming job that totals them per user
and 10-second event-time window (with a watermark) into a topic and into Parquet, and a batch
job over the same topic that checks the streamed totals.

    minibroker serve &                                 # or: minibroker dev
    python -m minibroker.spark.demo                    # bootstrap 127.0.0.1:9092
    python -m minibroker.spark.demo --start-broker     # starts its own broker, then the same
    python -m minibroker.spark.demo --connector kafka --jars <jars, comma-separated>

`--connector kafka` reads the topics through Spark's own Kafka connector (`format("kafka")`,
spark-sql-kafka-0-10, whose jars `--jars` puts on Spark's class path; java/fetch.sh resolves
them into build/java/spark.classpath) instead of minibroker's source; the totals are written
by minibroker's sink with exactlyOnce=true either way.

Every run uses topics and an output directory of its own (`demo-output/<run>`), so runs never
mix. It prints one line per finished micro-batch of each query (rows in, windows closed), waits
until both queries have written every window the events make (the Parquet files and the totals
topic then hold the same windows), then prints what it produced and compares; it exits 1 when
anything disagrees. A broker it started, and that broker's data, are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

USERS = [f"user-{n:02d}" for n in range(12)]
KINDS = ["view", "click", "purchase"]
WINDOW = "10 seconds"
WATERMARK = "10 seconds"
# Events arrive up to this late (out of order), inside the watermark.
MAX_LATENESS_MS = 5000


@dataclass
class Summary:
    events: int = 0
    windows_in_parquet: int = 0
    records_in_result_topic: int = 0
    duplicates_in_result_topic: int = 0
    per_user_batch: dict[str, int] = field(default_factory=dict)
    per_user_streamed: dict[str, int] = field(default_factory=dict)


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    futures = admin.create_topics(
        [
            NewTopic(name, num_partitions=count, replication_factor=-1)
            for name, count in topics.items()
        ],
        request_timeout=15,
    )
    for future in futures.values():
        future.result(timeout=30)


def generate(bootstrap: str, topic: str, seconds: float, rate: int, stop: threading.Event) -> int:
    """Send JSON events keyed by user for `seconds` at about `rate` per second, with event
    times up to MAX_LATENESS_MS in the past; then one closing event per partition far ahead in
    event time, which moves the watermark past every real window. Returns the real events sent."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "enable.idempotence": True}
    )
    rng = random.Random(7)
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds and not stop.is_set():
        now_ms = int(time.time() * 1000)
        for _ in range(max(1, rate // 20)):
            user = rng.choice(USERS)
            event = {
                "user": user,
                "kind": rng.choice(KINDS),
                "amount": rng.randint(1, 100),
                "event_time": now_ms - rng.randint(0, MAX_LATENESS_MS),
            }
            producer.produce(topic, key=user, value=json.dumps(event))
            sent += 1
        producer.poll(0)
        time.sleep(0.05)
    producer.flush(30)
    closing = {
        "user": "closing",
        "kind": "tick",
        "amount": 0,
        "event_time": int(time.time() * 1000) + 60_000,
    }
    for partition in range(3):
        producer.produce(topic, key="closing", value=json.dumps(closing), partition=partition)
    if producer.flush(30) != 0:
        raise RuntimeError("events left undelivered")
    return sent


def spark_session(jars: str | None = None):
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # A local run: bind to loopback (and skip Spark's warning about the host name).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("minibroker-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.log.level", "ERROR")
    )
    if jars:
        builder = builder.config("spark.jars", jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not discoverable():
        from minibroker.spark import register

        register(spark)
    return spark


def discoverable() -> bool:
    """Whether Spark's Python workers will find `pyspark_minibroker` by themselves on the
    paths this interpreter sees (a regular install's site-packages, the current directory).
    Under an editable install this says no and the demo registers the source, although
    importing minibroker.spark already put the module's folder on the workers' PYTHONPATH
    (see minibroker.spark): registering it again is harmless."""
    import pkgutil

    paths = [os.getcwd(), *sys.path]
    return any(module.name == "pyspark_minibroker" for module in pkgutil.iter_modules(paths))


def windowed_totals(spark, bootstrap: str, events_topic: str, connector: str = "minibroker"):
    """The streaming job: parse, watermark on event time, total per user and window."""
    from pyspark.sql import functions as F

    schema = "user string, kind string, amount int, event_time long"
    events = (
        spark.readStream.format(connector)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", events_topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
        .select("e.*")
        .withColumn("event_time", F.timestamp_millis("event_time"))
        .withWatermark("event_time", WATERMARK)
    )
    return (
        events.groupBy(F.window("event_time", WINDOW), "user")
        .agg(
            F.count(F.when(F.col("kind") != "tick", 1)).alias("events"),
            F.sum("amount").alias("amount"),
        )
        # Filtering the closing ticks out by user would be pushed below the watermark by the
        # optimizer, and they would no longer move it; their groups count no events instead.
        .where(F.col("events") > 0)
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "user",
            "events",
            "amount",
        )
    )


def run(
    spark,
    bootstrap: str,
    seconds: float,
    rate: int,
    out_dir: Path,
    log=print,
    connector: str = "minibroker",
) -> Summary:
    """`connector`: the format every read goes through, "minibroker" or Spark's "kafka"."""
    from pyspark.sql import functions as F

    run_id = uuid.uuid4().hex[:8]
    events_topic, totals_topic = f"demo-events-{run_id}", f"demo-window-totals-{run_id}"
    create_topics(bootstrap, {events_topic: 3, totals_topic: 3})
    log(
        f"run {run_id}: events -> {events_topic}; totals -> {totals_topic} and {out_dir};"
        f' reading with format("{connector}")'
    )

    totals = windowed_totals(spark, bootstrap, events_topic, connector)
    to_parquet = (
        totals.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out_dir / "windows"))
        .option("checkpointLocation", str(out_dir / "checkpoints" / "parquet"))
        .trigger(processingTime="2 seconds")
        .queryName("totals-to-parquet")
        .start()
    )
    to_topic = (
        totals.select(
            F.col("user").alias("key"),
            F.to_json(F.struct("window_start", "window_end", "user", "events", "amount")).alias(
                "value"
            ),
        )
        .writeStream.format("minibroker")
        .outputMode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", totals_topic)
        # Each micro-batch's windows in Kafka transactions, replays skipped: exactly once for
        # read_committed readers.
        .option("exactlyOnce", "true")
        .option("checkpointLocation", str(out_dir / "checkpoints" / "topic"))
        .trigger(processingTime="2 seconds")
        .queryName("totals-to-topic")
        .start()
    )
    queries = [to_parquet, to_topic]
    summary = Summary()
    stop = threading.Event()
    result: list[int] = []
    generator = threading.Thread(
        target=lambda: result.append(generate(bootstrap, events_topic, seconds, rate, stop)),
        daemon=True,
    )
    progress = Progress(queries, log)
    topic_totals = TopicTotals(bootstrap, totals_topic, partitions=3)
    generator.start()
    try:
        log("waiting for the first micro-batches (Spark plans the queries and starts its workers)")
        while generator.is_alive():
            generator.join(1)
            check_running(queries)
            progress.report()
        if not result:
            raise RuntimeError("the event generator failed")
        summary.events = result[0]
        log(f"generator done: {summary.events} events; waiting for the last windows to close")
        wait_until_written(spark, progress, out_dir / "windows", topic_totals, summary.events)
    finally:
        stop.set()
        topic_totals.close()
        for query in queries:
            query.stop()
        progress.report()  # the batches that finished while the last check ran

    windows = spark.read.parquet(str(out_dir / "windows"))
    summary.windows_in_parquet = windows.count()
    summary.per_user_streamed = {
        row["user"]: row["events"]
        for row in windows.groupBy("user").agg(F.sum("events").alias("events")).collect()
    }
    written = (
        spark.read.format(connector)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", totals_topic)
        .option("kafka.isolation.level", "read_committed")
        .load()
        .select(
            F.get_json_object(F.col("value").cast("string"), "$.window_start").alias("w"), "key"
        )
        .groupBy("w", "key")
        .count()
        .collect()
    )
    summary.records_in_result_topic = sum(row["count"] for row in written)
    summary.duplicates_in_result_topic = sum(row["count"] - 1 for row in written)
    # The batch job: the same events, read as a table, totalled per user.
    batch = (
        spark.read.format(connector)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", events_topic)
        .load()
        .select(F.get_json_object(F.col("value").cast("string"), "$.user").alias("user"))
        .where(F.col("user") != "closing")
        .groupBy("user")
        .count()
    )
    summary.per_user_batch = {row["user"]: row["count"] for row in batch.collect()}
    return summary


def check_running(queries) -> None:
    for query in queries:
        if query.exception() is not None:
            raise RuntimeError(f"{query.name} failed: {query.exception()}")


class Progress:
    """One line per finished micro-batch of each query: rows read, windows the watermark
    closed (append mode writes a window once, when it closes), the watermark after it."""

    def __init__(self, queries, log) -> None:
        self.queries = queries
        self.log = log
        self.last_batch = {query.name: -1 for query in queries}

    def report(self) -> None:
        for query in self.queries:
            for progress in query.recentProgress:
                if progress["batchId"] <= self.last_batch[query.name]:
                    continue
                self.last_batch[query.name] = progress["batchId"]
                closed = sum(op.get("numRowsRemoved", 0) for op in progress["stateOperators"])
                watermark = progress.get("eventTime", {}).get("watermark", "-")
                self.log(
                    f"  [{query.name}] batch {progress['batchId']}: {progress['numInputRows']}"
                    f" rows in, {closed} windows closed, watermark {watermark}"
                )


class TopicTotals:
    """What the topic query has written so far: the totals topic read from its start by a
    plain consumer (assigned partitions, no group joined), its records and their events."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                # The topic query writes in transactions: committed windows only.
                "isolation.level": "read_committed",
                "group.id": f"demo-check-{topic}",  # required by the client; never joined
                "enable.auto.commit": False,
                "log_level": 4,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.records = 0
        self.events = 0

    def read(self) -> int:
        while messages := self.consumer.consume(1000, timeout=0.2):
            for message in messages:
                if message.error() is not None:
                    raise RuntimeError(f"reading the totals topic: {message.error()}")
                value = message.value()
                if value is None:  # the job writes no tombstones; nothing to count
                    continue
                self.records += 1
                self.events += json.loads(value)["events"]
        return self.events

    def close(self) -> None:
        self.consumer.close()


def parquet_events(spark, windows_dir: Path) -> int:
    """The events that the windows committed to Parquet so far account for."""
    if not any(windows_dir.glob("part-*.parquet")):
        return 0
    try:
        rows = spark.read.parquet(str(windows_dir)).selectExpr("sum(events) as n")
        return rows.collect()[0]["n"] or 0
    except Exception:  # no batch committed a file yet: nothing to infer a schema from
        return 0


def wait_until_written(
    spark, progress: Progress, windows_dir: Path, topic_totals: TopicTotals, events: int
) -> None:
    """Until both queries have written windows that account for every event: the closing
    events moved the watermark past every real window, and each query closes them in its
    own micro-batches, so stopping when one of them is done would cut the other short.
    Fails at the deadline, saying how far each got."""
    deadline = time.monotonic() + 180.0
    while True:
        check_running(progress.queries)
        progress.report()
        in_parquet, in_topic = parquet_events(spark, windows_dir), topic_totals.read()
        if in_parquet >= events and in_topic >= events:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"after 180 s the windows account for {in_parquet} of {events} events in"
                f" Parquet and {in_topic} in the topic"
            )
        time.sleep(1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_broker(work: Path) -> tuple[subprocess.Popen, str]:
    """`minibroker serve` on a free port with its data in `work`: a separate process, as a
    user would run it."""
    port = free_port()
    listener = f"PLAINTEXT://127.0.0.1:{port}"
    command = [sys.executable, "-m", "minibroker", "serve", "--override", f"listeners={listener}"]
    command += ["--override", f"advertised.listeners={listener}"]
    command += ["--override", f"log.dirs={work / 'data'}"]
    with open(work / "broker.log", "ab") as log_file:  # the broker keeps its own descriptor
        # Run in `work`, so that whatever the broker leaves in its working directory goes too.
        process = subprocess.Popen(command, stdout=log_file, stderr=log_file, cwd=work)
    bootstrap = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the broker did not start; see {work / 'broker.log'}") from None
            time.sleep(0.1)
    return process, bootstrap


def main() -> None:
    parser = argparse.ArgumentParser(description="minibroker + Spark: a worked pipeline")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--start-broker", action="store_true", help="run a broker of its own")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long events flow")
    parser.add_argument("--rate", type=int, default=400, help="events per second")
    parser.add_argument("--out", type=Path, default=Path("demo-output"))
    parser.add_argument(
        "--connector",
        choices=("minibroker", "kafka"),
        default="minibroker",
        help='read with format("minibroker") or with Spark\'s own connector, format("kafka")',
    )
    parser.add_argument(
        "--jars",
        help="comma-separated jars for spark.jars (Spark's connector, for --connector kafka)",
    )
    args = parser.parse_args()
    if args.connector == "kafka" and not args.jars:
        parser.error(
            "--connector kafka needs Spark's connector on the class path: --jars, comma-separated"
            ' (java/fetch.sh resolves them: --jars "$(tr : , < build/java/spark.classpath)")'
        )

    broker = work = None
    bootstrap = args.bootstrap
    if args.start_broker:
        work = Path(tempfile.mkdtemp(prefix="minibroker-demo-"))
        broker, bootstrap = start_broker(work)
        print(f"started minibroker serve on {bootstrap}")
    agreed = False
    try:
        spark = spark_session(args.jars)
        out = args.out / time.strftime("%Y%m%d-%H%M%S")
        summary = run(spark, bootstrap, args.seconds, args.rate, out, connector=args.connector)
        spark.stop()
        agreed = report(summary, out / "windows")
    finally:
        if broker is not None:
            broker.terminate()
            stopped = broker.wait(30)
            if stopped == 0 and work is not None:
                shutil.rmtree(work)  # the broker's data and log: nothing to keep
            elif work is not None:
                print(f"the broker exited with {stopped}; its log: {work / 'broker.log'}")
    sys.exit(0 if agreed else 1)


def report(summary: Summary, where: Path) -> bool:
    """Print what the run produced; whether the topic, Parquet and the batch job agree."""
    print()
    print(f"events produced:                 {summary.events}")
    print(f"window totals in Parquet:        {summary.windows_in_parquet} rows in {where}")
    print(f"window totals in the topic:      {summary.records_in_result_topic} records")
    once = summary.duplicates_in_result_topic == 0
    print(
        "topic written exactly once:      "
        + ("ok" if once else f"MISMATCH: {summary.duplicates_in_result_topic} windows twice")
        + " (exactlyOnce=true, read with read_committed)"
    )
    same = summary.windows_in_parquet == summary.records_in_result_topic > 0
    print(f"topic and Parquet agree:         {'ok' if same else 'MISMATCH'}")
    print("events per user, streamed windows vs batch job over the topic:")
    for user in sorted(summary.per_user_batch):
        streamed = summary.per_user_streamed.get(user, 0)
        mark = "ok" if streamed == summary.per_user_batch[user] else "MISMATCH"
        print(f"  {user}: {streamed:6d} {summary.per_user_batch[user]:6d}  {mark}")
    return once and same and summary.per_user_streamed == summary.per_user_batch


if __name__ == "__main__":
    main()
