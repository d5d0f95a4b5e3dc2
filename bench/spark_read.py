"""Spark reading a topic through `format("minibroker")`, against one plain confluent-kafka
consumer reading the same records in the same run.

    python -m bench.spark_read [--records 1000000] [--size 100] [--partitions 4] [--runs 3]

One broker (`minibroker serve`, its own controller) in a temporary directory; the topic is
filled once with a librdkafka producer. Then, each `--runs` times (medians reported):

- consumer: one confluent-kafka Consumer in this process, assigned every partition from
  offset 0, consuming until it holds every record (each value touched) -> rows/s;
- spark count: `spark.read.format("minibroker")...load().count()` on local[2] -> rows/s;
- spark parquet: the same DataFrame written to Parquet -> rows/s;

and the ratios spark/consumer. Last, streaming end-to-end latency: a query topic -> Parquet
with a processing-time trigger; single records are produced one at a time and the time until
the file sink commits the batch holding each (Spark's `_spark_metadata` log, which is what
makes a file visible to readers) is measured.
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

from minibroker.tools.launcher import BrokerProcess

TOPIC = "spark-read"
LATENCY_TOPIC = "spark-latency"


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


def spark_session():
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark-read")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def latency(spark, bootstrap: str, work: Path, trigger_ms: int, probes: int) -> list[float]:
    """Produce one record at a time; seconds until the batch holding it is committed to the
    Parquet sink's log."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    producer.produce(LATENCY_TOPIC, b"warm-up")
    producer.flush(10)
    out = work / "latency-out"
    query = (
        spark.readStream.format("minibroker")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", LATENCY_TOPIC)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(work / "latency-checkpoint"))
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


def measure(
    records: int = 1_000_000,
    size: int = 100,
    partitions: int = 4,
    runs: int = 3,
    trigger_ms: int = 1000,
    probes: int = 10,
    log=print,
) -> dict[str, float]:
    """Run everything once and return the figures: medians in rows/s for "consumer",
    "spark count", "spark parquet", their ratios to the consumer ("... ratio"), and the
    streaming latency in seconds ("latency median", "latency max") at `trigger_ms`."""
    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
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
        spark = spark_session()
        df = (
            spark.read.format("minibroker")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", TOPIC)
            .load()
        )
        assert df.count() == records  # warm-up: Python workers, JIT
        figures: dict[str, list[float]] = {"consumer": [], "spark count": [], "spark parquet": []}
        for run in range(runs):
            seconds = consumer_read(bootstrap, TOPIC, partitions, records)
            figures["consumer"].append(records / seconds)
            started = time.perf_counter()
            counted = df.count()
            figures["spark count"].append(records / (time.perf_counter() - started))
            assert counted == records, counted
            target = work / f"parquet-{run}"
            started = time.perf_counter()
            df.write.parquet(str(target))
            figures["spark parquet"].append(records / (time.perf_counter() - started))
            shutil.rmtree(target)
            log(
                f"run {run + 1}: "
                + ", ".join(
                    f"{name} {values[-1] / 1e6:.2f} M rows/s" for name, values in figures.items()
                )
            )
        result = {name: statistics.median(values) for name, values in figures.items()}
        for name in ("spark count", "spark parquet"):
            result[f"{name} ratio"] = result[name] / result["consumer"]
        latencies = sorted(latency(spark, bootstrap, work, trigger_ms, probes))
        result["latency median"] = statistics.median(latencies)
        result["latency max"] = latencies[-1]
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
    parser.add_argument("--probes", type=int, default=10)
    args = parser.parse_args()
    result = measure(
        args.records,
        args.size,
        args.partitions,
        args.runs,
        args.trigger_ms,
        args.probes,
        log=lambda line: print(line, flush=True),
    )
    print()
    print(
        f"batch read of {args.records:,} x {args.size} B, {args.partitions} partitions,"
        f" local[2], median of {args.runs}:"
    )
    print("| read | rows/s | vs one consumer |")
    print("|---|---|---|")
    for name in ("consumer", "spark count", "spark parquet"):
        ratio = result[name] / result["consumer"]
        print(f"| {name} | {result[name] / 1e6:.2f} M | {ratio:.2f}x |")
    print()
    print(
        f"streaming produce -> Parquet committed, trigger {args.trigger_ms} ms,"
        f" {args.probes} probes: median {result['latency median'] * 1000:.0f} ms,"
        f" max {result['latency max'] * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
