"""Where a streaming micro-batch's time goes: one-record micro-batches at a processing-time
trigger, per source, with Spark's own progress (`durationMs`), the tasks' timings from Spark's
event log and, optionally, a JFR recording of the driver JVM.

    python -m bench.spark_stream_profile [--sources minibroker,kafka,floor] [--probes 10]
        [--trigger-ms 1000] [--event-log DIR] [--jfr FILE] [--broker minibroker|kafka]

One `minibroker serve` (or, with `--broker kafka`, one Apache Kafka node from
bench.kafka_ref), one SparkSession on local[2] (Spark's connector on spark.jars when
java/fetch.sh resolved it), then for each source in turn a query source -> Parquet, probed as
`bench.spark_read.latency` probes it (one record at a time, produced 0.3-1.0 trigger intervals
after the previous commit), but with each probe's produce time set against the batch that held
it. Source `floor` is a Python data source with no Kafka at all: its offset is the number of
lines of a local file, its read returns them; the probe appends a line. It is the floor of
any Python streaming source under the same trigger and sink.

Printed per source: the probes (latency, which batch, how long after the probe that batch
started), the medians of each `durationMs` entry over the batches with input, and, from the
event log, per batch job: the job's span, its tasks' launch delay, executor deserialize and run
times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.kafka_ref import KafkaCluster, classpath, missing_reason
from bench.spark_read import SinkLog
from minibroker.tools.launcher import BrokerProcess

TOPIC = "stream-profile"


def _floor_source():
    """A Python streaming source without Kafka: offsets are line counts of a file."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceStreamReader,
        InputPartition,
    )

    class FloorPartition(InputPartition):
        def __init__(self, path: str, start: int, end: int):
            super().__init__((start, end))
            self.path, self.start, self.end = path, start, end

    class FloorReader(DataSourceStreamReader):
        def __init__(self, path: str):
            self.path = path

        def _lines(self) -> int:
            with open(self.path, "rb") as f:
                return sum(1 for _ in f)

        def initialOffset(self) -> dict:
            return {"lines": 0}

        def latestOffset(self) -> dict:
            return {"lines": self._lines()}

        def partitions(self, start: dict, end: dict):
            return [FloorPartition(self.path, start["lines"], end["lines"])]

        def read(self, partition):
            with open(partition.path, "rb") as f:
                for number, line in enumerate(f):
                    if partition.start <= number < partition.end:
                        yield (line.rstrip(b"\n"),)

        def commit(self, end: dict) -> None:
            pass

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "floor"

        def schema(self) -> str:
            return "value binary"

        def streamReader(self, schema):
            return FloorReader(self.options["path"])

    return FloorSource


def _ms(stamp: str) -> float:
    """Spark's progress timestamp (`2026-11-28T07:50:01.123Z`) in epoch seconds."""
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def run_query(
    spark, source, bootstrap, work: Path, trigger_ms: int, probes: int, tag: str, options: dict
):
    """Probes as bench.spark_read.latency, with each probe's produce time kept; returns the
    probes [(produced, latency)] and the query's progress list."""
    out = work / f"out-{tag}"
    if source == "floor":
        feed = work / f"floor-input-{tag}"
        feed.write_bytes(b"warm-up\n")

        def send(payload: bytes) -> None:
            with open(feed, "ab") as f:
                f.write(payload + b"\n")

        frame = spark.readStream.format("floor").option("path", str(feed)).load()
    else:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})

        def send(payload: bytes) -> None:
            producer.produce(TOPIC, payload)
            producer.flush(10)

        send(b"warm-up")
        frame = (
            spark.readStream.format(source)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .options(**options.get(source, {}))
            .load()
        )
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(work / f"checkpoint-{tag}"))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )
    log = SinkLog(out)
    token = os.urandom(4).hex().encode()
    results = []
    try:
        deadline = time.monotonic() + 120
        while not log.new_batches():
            if time.monotonic() > deadline or query.exception():
                raise RuntimeError(f"no first batch: {query.exception()}")
            time.sleep(0.01)
        for probe in range(probes):
            time.sleep(trigger_ms / 1000 * (0.3 + 0.7 * probe / max(1, probes - 1)))
            payload = b"probe-%d-%s" % (probe, token)
            produced = time.time()
            send(payload)
            results.append((produced, log.wait_for(payload, query, time.time) - produced))
        time.sleep(0.5)
        progress = [json.loads(p.json) for p in query.recentProgress]
    finally:
        query.stop()
    return results, progress


def report(source: str, probes, progress, event_jobs) -> None:
    with_input = [p for p in progress if p.get("numInputRows", 0) > 0]
    print(f"\n== {source}: {len(progress)} progress entries, {len(with_input)} with input")
    starts = [(_ms(p["timestamp"]), p) for p in progress]
    for produced, took in probes:
        after = [(t, p) for t, p in starts if t >= produced]
        batch = after[0][1] if after else None
        if batch is None:
            print(f"  probe {took * 1000:6.0f} ms: no batch started after it")
            continue
        wait = _ms(batch["timestamp"]) - produced
        print(
            f"  probe {took * 1000:6.0f} ms: batch {batch['batchId']} started {wait * 1000:5.0f}"
            f" ms after it, took {batch['durationMs'].get('triggerExecution')} ms"
            f" ({batch['numInputRows']} rows)"
        )
    keys = sorted({k for p in with_input for k in p["durationMs"]})
    for key in keys:
        values = [p["durationMs"][key] for p in with_input if key in p["durationMs"]]
        print(
            f"  {key:>18}: median {statistics.median(values):7.0f} ms"
            f"  ({min(values)}-{max(values)}, {len(values)} batches)"
        )
    if probes:
        lat = sorted(t for _, t in probes)
        print(f"  latency median {statistics.median(lat) * 1000:.0f} ms, max {lat[-1] * 1000:.0f}")
    if event_jobs:
        spans = [j["span"] for j in event_jobs]
        delays = [d for j in event_jobs for d in j["launch_delay"]]
        runs = [d for j in event_jobs for d in j["run"]]
        deser = [d for j in event_jobs for d in j["deserialize"]]
        tasks = [d for j in event_jobs for d in j["task_span"]]
        print(
            f"  jobs: {len(event_jobs)}, span median {statistics.median(spans):.0f} ms"
            f" ({min(spans)}-{max(spans)}); task launch after job start median"
            f" {statistics.median(delays):.0f} ms; task span (launch to finish) median"
            f" {statistics.median(tasks):.0f} ms; executor run median"
            f" {statistics.median(runs):.0f} ms; deserialize median"
            f" {statistics.median(deser):.0f} ms"
        )


def event_log_jobs(directory: Path, since: float, until: float) -> list[dict]:
    """Jobs of Spark's event log that started in [since, until], with their tasks."""
    jobs: dict[int, dict] = {}
    stage_job: dict[int, int] = {}
    for path in directory.rglob("*"):
        if not path.is_file() or path.name.startswith("."):
            continue
        with open(path) as f:
            for line in f:
                event = json.loads(line)
                kind = event["Event"]
                if kind == "SparkListenerJobStart":
                    started = event["Submission Time"] / 1000
                    if since <= started <= until:
                        jobs[event["Job ID"]] = {
                            "start": started,
                            "launch_delay": [],
                            "run": [],
                            "deserialize": [],
                            "task_span": [],
                        }
                        for stage in event["Stage IDs"]:
                            stage_job[stage] = event["Job ID"]
                elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
                    job = jobs[event["Job ID"]]
                    job["span"] = event["Completion Time"] - job["start"] * 1000
                elif kind == "SparkListenerTaskEnd" and event["Stage ID"] in stage_job:
                    job = jobs[stage_job[event["Stage ID"]]]
                    info, metrics = event["Task Info"], event.get("Task Metrics") or {}
                    job["launch_delay"].append(info["Launch Time"] - job["start"] * 1000)
                    job["task_span"].append(info["Finish Time"] - info["Launch Time"])
                    job["run"].append(metrics.get("Executor Run Time", 0))
                    job["deserialize"].append(metrics.get("Executor Deserialize Time", 0))
    return [j for j in jobs.values() if "span" in j]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sources", default="minibroker,kafka,floor")
    parser.add_argument("--broker", choices=("minibroker", "kafka"), default="minibroker")
    parser.add_argument("--probes", type=int, default=10)
    parser.add_argument("--trigger-ms", type=int, default=1000)
    parser.add_argument("--event-log", help="a directory for Spark's event log (kept)")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        help="source:key=value, a reader option for one source (repeatable)",
    )
    parser.add_argument("--jfr", help="a JFR recording of the driver JVM to this file")
    parser.add_argument(
        "--jfr-settings",
        default="profile",
        help="JFR settings: profile, default or a .jfc file (e.g. with lock-wait thresholds of 0)",
    )
    args = parser.parse_args()
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    options: dict[str, dict[str, str]] = {}
    for option in args.option:
        source, setting = option.split(":", 1)
        key, value = setting.split("=", 1)
        options.setdefault(source, {})[key] = value

    from pyspark.sql import SparkSession

    work = Path(tempfile.mkdtemp(prefix="bench-stream-profile-"))
    event_dir = Path(args.event_log) if args.event_log else work / "events"
    event_dir.mkdir(parents=True, exist_ok=True)
    if args.broker == "kafka":
        broker = KafkaCluster.start(work / "kafka")
    else:
        broker = BrokerProcess.start(node_id=1, log_dir=work / "data")
    spark = None
    try:
        if args.broker == "minibroker":
            broker.wait_ready(30)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[
            TOPIC
        ].result(30)
        os.environ["PYSPARK_PYTHON"] = sys.executable
        builder = (
            SparkSession.builder.master("local[2]")
            .appName("bench-stream-profile")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.eventLog.enabled", "true")
            .config("spark.eventLog.dir", str(event_dir))
            .config("spark.eventLog.compress", "false")
            .config("spark.eventLog.rolling.enabled", "false")
        )
        if "kafka" in sources:
            reason = missing_reason("spark")
            if reason is None:
                builder = builder.config("spark.jars", classpath("spark").replace(":", ","))
            else:
                print(f"kafka left out: {reason}")
                sources = [s for s in sources if s != "kafka"]
        if args.jfr:
            builder = builder.config(
                "spark.driver.extraJavaOptions",
                f"-XX:StartFlightRecording=filename={args.jfr},settings={args.jfr_settings},"
                "dumponexit=true",
            )
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        if "floor" in sources:
            spark.dataSource.register(_floor_source())
        for number, source in enumerate(sources):
            since = time.time()
            probes, progress = run_query(
                spark,
                source,
                broker.bootstrap,
                work,
                args.trigger_ms,
                args.probes,
                str(number),
                options,
            )
            jobs = event_log_jobs(event_dir, since, time.time())
            report(source, probes, progress, jobs)
            print(f"  load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
