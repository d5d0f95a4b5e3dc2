"""Spark reading a topic through `format("minibroker")`, through Spark's own Kafka connector
(`format("kafka")`, spark-sql-kafka-0-10 from java/fetch.sh) and through one plain
confluent-kafka consumer, on the same records in the same run.

    python -m bench.spark_read [--records 1000000] [--size 100] [--partitions 4] [--runs 3]

One broker (`minibroker serve`, its own controller) in a temporary directory; the topic is
filled once with a librdkafka producer. One SparkSession on local[2] with the connector's jars
(when java/fetch.sh resolved them; otherwise the connector's rows are left out, saying why).
Then, each `--runs` times (medians reported), in turn:

- consumer: one confluent-kafka Consumer in this process, assigned every partition from
  offset 0, consuming until it holds every record (each value touched) -> rows/s;
- <source> count: `spark.read.format(<source>)...load().count()` -> rows/s;
- <source> parquet: the same DataFrame written to Parquet -> rows/s;
- <source> value parquet: only the value written to Parquet -> rows/s (Spark's connector:
  `select("value")`; minibroker's: `.schema("value binary")`, how its user reads one column);

for source minibroker and kafka, and the ratios of the medians: minibroker/kafka per row and
count/consumer. Last (unless --probes 0), streaming end-to-end latency for each source: a query
topic -> Parquet with a processing-time trigger; single records are produced one at a time and
the time until the file sink commits the batch holding each (Spark's `_spark_metadata` log,
which is what makes a file visible to readers) is measured.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.kafka_ref import classpath, missing_reason
from bench.retry import produce_when_queued
from minibroker.tools.launcher import BrokerProcess

TOPIC = "spark-read"
LATENCY_TOPIC = "spark-latency"
SOURCES = ("minibroker", "kafka")


def produce(bootstrap: str, topic: str, records: int, size: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": True,
        }
    )
    value = os.urandom(size // 2).hex().encode()[:size]
    for _ in range(records):
        produce_when_queued(producer, topic, value)
    if producer.flush(300) != 0:
        raise RuntimeError("records left undelivered")


def reference_consumer(bootstrap: str) -> Consumer:
    """The plain consumer the Spark rows compare with: no group, the source's fetch tuning."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-spark-reference",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.queue.backoff.ms": 1,
            "queued.max.messages.kbytes": 262144,
        }
    )


def consumer_read(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """Seconds for one consumer to read every record; the same tuning the source uses."""
    consumer = reference_consumer(bootstrap)
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    total_bytes = 0
    deadline = time.monotonic() + 300
    while seen < records:
        batch = consumer.consume(num_messages=10000, timeout=0.2)
        for message in batch:
            if message.error() is None:
                total_bytes += len(message.value())
                seen += 1
        if time.monotonic() > deadline:
            raise RuntimeError(f"consumer read {seen} of {records}")
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def spark_session(jars: str | None):
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark-read")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if jars:
        builder = builder.config("spark.jars", jars)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


class SinkLog:
    """The Parquet sink's log (`_spark_metadata`): which batches are committed, and the values
    of the files each added. Batch N's entry is "N", or "N.compact" every tenth batch (the log
    compacts; a compact entry lists the files of every batch before it too). An entry is
    written whole (a temporary file renamed), after the files it lists."""

    def __init__(self, out: Path):
        self.directory = out / "_spark_metadata"
        self.batches: set[int] = set()
        self.files: set[str] = set()

    def new_batches(self) -> list[Path]:
        """Entries committed since the last call."""
        if not self.directory.is_dir():
            return []
        found = []
        for entry in self.directory.iterdir():
            number = entry.name.split(".")[0]
            if number.isdigit() and int(number) not in self.batches:
                self.batches.add(int(number))
                found.append(entry)
        return found

    def values(self, entries: list[Path]) -> set[bytes]:
        """The values of the files these entries add that no earlier entry added."""
        import json
        from urllib.parse import unquote, urlparse

        import pyarrow.parquet as pq

        values: set[bytes] = set()
        for entry in entries:
            for line in entry.read_text().splitlines()[1:]:  # the first line is the version
                file = json.loads(line)
                if file.get("action") != "add" or file["path"] in self.files:
                    continue
                self.files.add(file["path"])
                path = unquote(urlparse(file["path"]).path)
                values.update(pq.read_table(path, columns=["value"]).column("value").to_pylist())
        return values

    def wait_for(self, payload: bytes, query, clock=time.perf_counter) -> float:
        """`clock`'s time when a committed batch holding `payload` is first seen (polled every
        5 ms; RuntimeError after 60 s or if the query failed)."""
        deadline = time.monotonic() + 60
        while True:
            entries = self.new_batches()
            seen = clock()
            if entries and payload in self.values(entries):
                return seen
            if time.monotonic() > deadline or query.exception():
                raise RuntimeError(f"{payload!r} never committed: {query.exception()}")
            time.sleep(0.005)


def latency(
    spark, source: str, bootstrap: str, work: Path, trigger_ms: int, probes: int
) -> list[float]:
    """Produce one record at a time; seconds until a batch holding it is committed to the
    Parquet sink's log.

    Every call starts a new query (its own output and checkpoint) and waits for its first
    batch, and a probe counts only once the committed batch holds that probe's own record.
    (Before, a second call restarted the first call's query from its checkpoint and began
    probing at once; every probe ended at the next commit of any batch, so a restarted query's
    start-up batch and then each previous probe's batch ended the next probe early: medians of
    65-200 ms against a true 1,000-1,500 ms, only in the runs after the first.)"""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    producer.produce(LATENCY_TOPIC, b"warm-up")
    producer.flush(10)
    out = Path(tempfile.mkdtemp(prefix=f"latency-out-{source}-", dir=work))
    checkpoint = Path(tempfile.mkdtemp(prefix=f"latency-checkpoint-{source}-", dir=work))
    query = (
        spark.readStream.format(source)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", LATENCY_TOPIC)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )
    log = SinkLog(out)
    token = os.urandom(4).hex().encode()
    results = []
    try:
        deadline = time.monotonic() + 120
        while not log.new_batches():  # the warm-up record and whatever came before it
            if time.monotonic() > deadline or query.exception():
                raise RuntimeError(f"no first batch: {query.exception()}")
            time.sleep(0.01)
        for probe in range(probes):
            # Spread the probes over the trigger interval.
            time.sleep(trigger_ms / 1000 * (0.3 + 0.7 * probe / max(1, probes - 1)))
            payload = b"probe-%d-%s" % (probe, token)
            started = time.perf_counter()
            producer.produce(LATENCY_TOPIC, payload)
            producer.flush(10)
            results.append(log.wait_for(payload, query) - started)
    finally:
        query.stop()
    return results


def reader(spark, source: str, bootstrap: str, schema: str | None = None):
    read = spark.read.format(source)
    if schema is not None:
        read = read.schema(schema)
    return (
        read.option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .load()
    )


def timed(records: int, action) -> float:
    started = time.perf_counter()
    action()
    return records / (time.perf_counter() - started)


def consumer_parquet(
    bootstrap: str, topic: str, partitions: int, records: int, path: Path
) -> float:
    """Seconds for one consumer to read every record and write them to one Parquet file with
    pyarrow: the columns of Spark's Kafka schema but headers (key, value, topic, partition,
    offset, timestamp, timestampType), as a program without Spark would."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    consumer = reference_consumer(bootstrap)
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    columns: dict[str, list] = {
        name: [] for name in ("key", "value", "partition", "offset", "timestamp", "type")
    }
    deadline = time.monotonic() + 300
    while len(columns["value"]) < records:
        for message in consumer.consume(num_messages=10000, timeout=0.2):
            if message.error() is None:
                columns["key"].append(message.key())
                columns["value"].append(message.value())
                columns["partition"].append(message.partition())
                columns["offset"].append(message.offset())
                kind, stamp = message.timestamp()
                columns["timestamp"].append(stamp * 1000)
                columns["type"].append(kind - 1)
        if time.monotonic() > deadline:
            raise RuntimeError(f"consumer read {len(columns['value'])} of {records}")
    consumer.close()
    table = pa.table(
        {
            "key": pa.array(columns["key"], pa.binary()),
            "value": pa.array(columns["value"], pa.binary()),
            "topic": pa.array([topic] * records, pa.string()),
            "partition": pa.array(columns["partition"], pa.int32()),
            "offset": pa.array(columns["offset"], pa.int64()),
            "timestamp": pa.array(columns["timestamp"], pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array(columns["type"], pa.int32()),
        }
    )
    pq.write_table(table, path)
    return time.perf_counter() - started


def consumer_latency(bootstrap: str, topic: str, probes: int) -> list[float]:
    """Produce one record at a time; seconds until one consumer, assigned the topic's end,
    holds it (what a program without Spark waits)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-spark-latency",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, high)])
    results = []
    try:
        for probe in range(probes):
            time.sleep(0.1)
            payload = b"consumer-probe-%d" % probe
            started = time.perf_counter()
            producer.produce(topic, payload)
            producer.flush(10)
            deadline = time.monotonic() + 60
            while True:
                message = consumer.poll(0.05)
                if message is not None and message.error() is None and message.value() == payload:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"probe {probe} never consumed")
            results.append(time.perf_counter() - started)
    finally:
        consumer.close()
    return results


class SparkRead:
    """One broker with the topic filled, one SparkSession, and the DataFrames of each source:
    what every measurement of this module (and the Spark rows of `python -m bench`) reads.

    `sources` loses "kafka" (and `left_out` says why) when java/fetch.sh has not resolved
    Spark's connector; ImportError when pyspark is not installed."""

    def __init__(
        self,
        records: int = 1_000_000,
        size: int = 100,
        partitions: int = 4,
        sources: tuple[str, ...] = SOURCES,
        log=print,
    ):
        import pyspark  # noqa: F401  (ImportError before a broker is started)

        self.records, self.partitions, self.size = records, partitions, size
        self.work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
        self.left_out: str | None = None
        jars = None
        if "kafka" in sources:
            reason = missing_reason("spark")
            if reason is None:
                jars = classpath("spark").replace(":", ",")
            else:
                self.left_out = f"Spark's Kafka connector left out: {reason}"
                log(self.left_out)
                sources = tuple(s for s in sources if s != "kafka")
        self.sources = sources
        self.spark = None
        self.broker = BrokerProcess.start(node_id=1, log_dir=self.work / "data")
        try:
            self.broker.wait_ready(30)
            self.bootstrap = self.broker.bootstrap
            admin = AdminClient({"bootstrap.servers": self.bootstrap})
            for topic, count in ((TOPIC, partitions), (LATENCY_TOPIC, 1)):
                new = NewTopic(topic, num_partitions=count, replication_factor=1)
                admin.create_topics([new])[topic].result(30)
            started = time.perf_counter()
            produce(self.bootstrap, TOPIC, records, size)
            log(
                f"produced {records} x {size} B into {partitions} partitions in"
                f" {time.perf_counter() - started:.1f} s"
            )
            self.spark = spark_session(jars)
            self.frames = {source: reader(self.spark, source, self.bootstrap) for source in sources}
            # A query that needs only the value, written as each source's user writes it:
            # Spark's connector prunes the projection itself; the Python Data Source API
            # cannot, so minibroker's source is given the columns as a schema (with the source
            # of the run before that option existed, the select alone).
            self.value_frames = {source: df.select("value") for source, df in self.frames.items()}
            if "minibroker" in self.frames and not os.environ.get("BENCH_SPARK_NO_SCHEMA"):
                self.value_frames["minibroker"] = reader(
                    self.spark, "minibroker", self.bootstrap, "value binary"
                )
            for df in self.frames.values():
                assert df.count() == records  # warm-up: Python workers, JIT
        except BaseException:
            self.close()
            raise

    def consumer(self) -> float:
        """rows/s of one plain confluent-kafka consumer reading every record."""
        return self.records / consumer_read(self.bootstrap, TOPIC, self.partitions, self.records)

    def consumer_parquet(self) -> float:
        target = self.work / "parquet-consumer.parquet"
        try:
            seconds = consumer_parquet(self.bootstrap, TOPIC, self.partitions, self.records, target)
        finally:
            target.unlink(missing_ok=True)
        return self.records / seconds

    def count(self, source: str) -> float:
        """rows/s of `count()` on the source's DataFrame."""
        df = self.frames[source]

        def count():
            counted = df.count()
            assert counted == self.records, counted

        return timed(self.records, count)

    def parquet(self, source: str, value_only: bool = False) -> float:
        """rows/s of writing the source's DataFrame (or only its value) to Parquet."""
        frame = (self.value_frames if value_only else self.frames)[source]
        target = self.work / f"parquet-{source}"
        try:
            return timed(self.records, lambda: frame.write.parquet(str(target)))
        finally:
            shutil.rmtree(target, ignore_errors=True)

    def latency(self, source: str, trigger_ms: int, probes: int) -> list[float]:
        """Seconds per probe: a streaming query topic -> Parquet at `trigger_ms`, or, for
        source "consumer", one plain consumer."""
        if source == "consumer":
            return consumer_latency(self.bootstrap, LATENCY_TOPIC, probes)
        return latency(self.spark, source, self.bootstrap, self.work, trigger_ms, probes)

    def close(self) -> None:
        if self.spark is not None:
            self.spark.stop()
            self.spark = None
        self.broker.stop()
        shutil.rmtree(self.work, ignore_errors=True)


def measure(
    records: int = 1_000_000,
    size: int = 100,
    partitions: int = 4,
    runs: int = 3,
    trigger_ms: int = 1000,
    probes: int = 10,
    sources: tuple[str, ...] = SOURCES,
    log=print,
) -> dict[str, float]:
    """Run everything once and return the figures: medians in rows/s for "consumer" and
    "<source> count|parquet|value parquet", the ratios "<row> ratio" (minibroker over kafka)
    and "<source> count vs consumer", and the streaming latency in seconds
    ("<source> latency median|max") at `trigger_ms`. Spark's connector is left out (and
    `log` says why) when java/fetch.sh has not resolved its jars."""
    bench = SparkRead(records, size, partitions, sources, log)
    sources = bench.sources
    try:
        figures: dict[str, list[float]] = {"consumer": []}
        for run in range(runs):
            figures["consumer"].append(bench.consumer())
            for source in sources:
                figures.setdefault(f"{source} count", []).append(bench.count(source))
                figures.setdefault(f"{source} parquet", []).append(bench.parquet(source))
                figures.setdefault(f"{source} value parquet", []).append(
                    bench.parquet(source, value_only=True)
                )
            log(
                f"run {run + 1}: "
                + ", ".join(
                    f"{name} {values[-1] / 1e6:.2f} M rows/s" for name, values in figures.items()
                )
            )
        result = {name: statistics.median(values) for name, values in figures.items()}
        for source in sources:
            result[f"{source} count vs consumer"] = result[f"{source} count"] / result["consumer"]
        if "kafka" in sources and "minibroker" in sources:
            for row in ("count", "parquet", "value parquet"):
                result[f"{row} ratio"] = result[f"minibroker {row}"] / result[f"kafka {row}"]
        if probes:
            for source in sources:
                latencies = sorted(bench.latency(source, trigger_ms, probes))
                result[f"{source} latency median"] = statistics.median(latencies)
                result[f"{source} latency max"] = latencies[-1]
    finally:
        bench.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--trigger-ms", type=int, default=1000)
    parser.add_argument("--probes", type=int, default=10, help="0: no streaming latency")
    parser.add_argument(
        "--sources", default=",".join(SOURCES), help="comma-separated: minibroker,kafka"
    )
    args = parser.parse_args()
    sources = tuple(s.strip() for s in args.sources.split(",") if s.strip())
    result = measure(
        args.records,
        args.size,
        args.partitions,
        args.runs,
        args.trigger_ms,
        args.probes,
        sources,
        log=lambda line: print(line, flush=True),
    )
    print()
    print(
        f"batch read of {args.records:,} x {args.size} B, {args.partitions} partitions,"
        f" local[2], median of {args.runs}:"
    )
    have_kafka = "kafka count" in result
    print("| read | minibroker rows/s | kafka rows/s | minibroker / kafka |")
    print("|---|---|---|---|")
    for row in ("count", "parquet", "value parquet"):
        mine = result.get(f"minibroker {row}")
        theirs = result.get(f"kafka {row}")
        print(
            f"| {row} | {mine / 1e6:.2f} M |"
            + (f" {theirs / 1e6:.2f} M | {mine / theirs:.2f}x |" if have_kafka else " - | - |")
            if mine
            else f"| {row} | - | {theirs / 1e6:.2f} M | - |"
        )
    print(f"| one confluent-kafka consumer | {result['consumer'] / 1e6:.2f} M | | |")
    for source in ("minibroker", "kafka"):
        if f"{source} count vs consumer" in result:
            print(f"{source} count / consumer: {result[f'{source} count vs consumer']:.2f}x")
    for source in ("minibroker", "kafka"):
        if f"{source} latency median" in result:
            print(
                f"streaming {source} -> Parquet committed, trigger {args.trigger_ms} ms,"
                f" {args.probes} probes: median {result[f'{source} latency median'] * 1000:.0f}"
                f" ms, max {result[f'{source} latency max'] * 1000:.0f} ms"
            )


if __name__ == "__main__":
    main()
