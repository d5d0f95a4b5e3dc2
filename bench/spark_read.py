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
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300) != 0:
        raise RuntimeError("records left undelivered")


def consumer_read(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """Seconds for one consumer to read every record; the same tuning the source uses."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-spark-reference",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.queue.backoff.ms": 1,
            "queued.max.messages.kbytes": 262144,
        }
    )
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


def latency(
    spark, source: str, bootstrap: str, work: Path, trigger_ms: int, probes: int
) -> list[float]:
    """Produce one record at a time; seconds until the batch holding it is committed to the
    Parquet sink's log."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    producer.produce(LATENCY_TOPIC, b"warm-up")
    producer.flush(10)
    out = work / f"latency-out-{source}"
    query = (
        spark.readStream.format(source)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", LATENCY_TOPIC)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(work / f"latency-checkpoint-{source}"))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )
    log = out / "_spark_metadata"

    def committed() -> int:
        if not log.is_dir():
            return 0
        # Batch N's entry is "N", or "N.compact" every tenth batch (the log compacts).
        return len([p for p in log.iterdir() if p.name.split(".")[0].isdigit()])

    results = []
    try:
        deadline = time.monotonic() + 120
        while committed() < 1:  # the warm-up record
            if time.monotonic() > deadline or query.exception():
                raise RuntimeError(f"no first batch: {query.exception()}")
            time.sleep(0.01)
        for probe in range(probes):
            before = committed()
            # Spread the probes over the trigger interval.
            time.sleep(trigger_ms / 1000 * (0.3 + 0.7 * probe / max(1, probes - 1)))
            started = time.perf_counter()
            producer.produce(LATENCY_TOPIC, b"probe-%d" % probe)
            producer.flush(10)
            deadline = time.monotonic() + 60
            while committed() <= before:
                if time.monotonic() > deadline or query.exception():
                    raise RuntimeError(f"probe {probe} never committed: {query.exception()}")
                time.sleep(0.005)
            results.append(time.perf_counter() - started)
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
    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    jars = None
    if "kafka" in sources:
        reason = missing_reason("spark")
        if reason is None:
            jars = classpath("spark").replace(":", ",")
        else:
            log(f"Spark's Kafka connector left out: {reason}")
            sources = tuple(s for s in sources if s != "kafka")
    broker = BrokerProcess.start(node_id=1, log_dir=work / "data")
    try:
        broker.wait_ready(30)
        bootstrap = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for topic, count in ((TOPIC, partitions), (LATENCY_TOPIC, 1)):
            new = NewTopic(topic, num_partitions=count, replication_factor=1)
            admin.create_topics([new])[topic].result(30)
        started = time.perf_counter()
        produce(bootstrap, TOPIC, records, size)
        log(
            f"produced {records} x {size} B into {partitions} partitions in"
            f" {time.perf_counter() - started:.1f} s"
        )
        spark = spark_session(jars)
        frames = {source: reader(spark, source, bootstrap) for source in sources}
        # A query that needs only the value, written as each source's user writes it: Spark's
        # connector prunes the projection itself; the Python Data Source API cannot, so
        # minibroker's source is given the columns as a schema (with the source of the run
        # before that option existed, the select alone).
        value_frames = {source: df.select("value") for source, df in frames.items()}
        if "minibroker" in frames and not os.environ.get("BENCH_SPARK_NO_SCHEMA"):
            value_frames["minibroker"] = reader(spark, "minibroker", bootstrap, "value binary")
        for df in frames.values():
            assert df.count() == records  # warm-up: Python workers, JIT
        figures: dict[str, list[float]] = {"consumer": []}
        for run in range(runs):
            figures["consumer"].append(
                records / consumer_read(bootstrap, TOPIC, partitions, records)
            )
            for source, df in frames.items():

                def count(df=df):
                    counted = df.count()
                    assert counted == records, counted

                figures.setdefault(f"{source} count", []).append(timed(records, count))
                for name, frame in (("parquet", df), ("value parquet", value_frames[source])):
                    target = work / f"parquet-{run}-{source}"
                    figures.setdefault(f"{source} {name}", []).append(
                        timed(records, lambda f=frame, t=target: f.write.parquet(str(t)))
                    )
                    shutil.rmtree(target)
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
                latencies = sorted(latency(spark, source, bootstrap, work, trigger_ms, probes))
                result[f"{source} latency median"] = statistics.median(latencies)
                result[f"{source} latency max"] = latencies[-1]
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
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
