"""What `exactlyOnce=true` costs a Spark write: the same micro-batch-sized batch write with and
without the option, alternating, on one broker.

    python -m bench.spark_exactly_once [--rows 1000] [--tasks 2] [--runs 10]

One broker (`minibroker serve`, its own controller), one SparkSession on local[2]. Each run
writes `--rows` rows of 100 B, spread over `--tasks` Spark tasks, to a topic of `--tasks`
partitions with `df.write.format("minibroker")`, once at least once (the default) and once with
exactlyOnce=true (each task: InitProducerId, OffsetFetch, its records in a transaction,
TxnOffsetCommit, EndTxn). First (alone with --task-only) what one task runs, outside Spark,
the same way (task_writes). The medians and their difference are printed (local[2] runs two
tasks at once: with 2 tasks, the difference is what one task's transaction adds); the first
write of each kind is a warm-up and not counted.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.spark_read import spark_session


def measure(rows: int = 1000, tasks: int = 2, runs: int = 10, log=print) -> dict[str, float]:
    """Median seconds of a write with and without exactlyOnce, and their difference."""
    import shutil
    import tempfile
    from pathlib import Path

    from confluent_kafka.admin import AdminClient, NewTopic

    from minibroker.tools.launcher import BrokerProcess

    work = Path(tempfile.mkdtemp(prefix="bench-spark-eos-"))
    broker = BrokerProcess.start(node_id=1, log_dir=work / "data")
    spark = None
    try:
        broker.wait_ready(30)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = "spark-eos"
        admin.create_topics([NewTopic(topic, tasks, 1)])[topic].result(30)
        spark = spark_session(None)
        df = spark.range(rows).selectExpr("lpad(cast(id as string), 100, 'x') as value")
        df = df.repartition(tasks).cache()
        df.count()
        times: dict[str, list[float]] = {"at least once": [], "exactly once": []}
        for run in range(runs + 1):
            for name, extra in (("at least once", {}), ("exactly once", {"exactlyOnce": "true"})):
                writer = (
                    df.write.format("minibroker")
                    .option("kafka.bootstrap.servers", broker.bootstrap)
                    .option("topic", topic)
                    .mode("append")
                )
                for key, value in extra.items():
                    writer = writer.option(key, value)
                started = time.perf_counter()
                writer.save()
                if run:  # the first of each is a warm-up
                    times[name].append(time.perf_counter() - started)
            if run:
                log(
                    f"run {run}: "
                    + ", ".join(
                        f"{name} {values[-1] * 1000:.0f} ms" for name, values in times.items()
                    )
                )
        result = {name: statistics.median(values) for name, values in times.items()}
        # local[2] runs two tasks at a time: with --tasks 2 the difference is what each
        # task's transaction adds to its own time.
        result["difference"] = result["exactly once"] - result["at least once"]
        return result
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def task_writes(rows: int = 500, runs: int = 20, log=print) -> dict[str, float]:
    """What one Spark task runs, outside Spark: `rows` x 100 B as one Arrow batch through
    minibroker_spark.kafka.produce_batches (at least once: its own idempotent producer) and
    through minibroker_spark.transactions.write_transactionally (InitProducerId, OffsetFetch,
    the records, TxnOffsetCommit, EndTxn; a new micro-batch each time), alternating. Median
    seconds of each and their difference: the protocol's cost per task and micro-batch without
    Spark's own scheduling noise."""
    import shutil
    import tempfile
    import uuid
    from pathlib import Path

    import pyarrow as pa
    from confluent_kafka.admin import AdminClient, NewTopic

    from minibroker.spark.kafka import produce_batches
    from minibroker.spark.transactions import TaskWrite, write_transactionally
    from minibroker.tools.launcher import BrokerProcess

    work = Path(tempfile.mkdtemp(prefix="bench-spark-eos-task-"))
    broker = BrokerProcess.start(node_id=1, log_dir=work / "data")
    try:
        broker.wait_ready(30)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = "spark-eos-task"
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        settings = {"bootstrap.servers": broker.bootstrap}
        batch = pa.RecordBatch.from_pydict({"value": pa.array([b"x" * 100] * rows, pa.binary())})
        query = uuid.uuid4().hex
        times: dict[str, list[float]] = {"at least once": [], "exactly once": []}
        for run in range(runs + 1):
            started = time.perf_counter()
            produce_batches(settings, [batch], topic)
            plain = time.perf_counter() - started
            started = time.perf_counter()
            write_transactionally(settings, [batch], topic, TaskWrite(f"eos-{query}", query, run))
            transactional = time.perf_counter() - started
            if run:  # the first of each is a warm-up
                times["at least once"].append(plain)
                times["exactly once"].append(transactional)
                log(
                    f"task run {run}: at least once {plain * 1000:.0f} ms, exactly once"
                    f" {transactional * 1000:.0f} ms"
                )
        result = {name: statistics.median(values) for name, values in times.items()}
        result["difference"] = result["exactly once"] - result["at least once"]
        return result
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--task-only", action="store_true", help="only one task's write, outside Spark"
    )
    args = parser.parse_args()
    log = lambda line: print(line, flush=True)  # noqa: E731
    task = task_writes(args.rows // args.tasks, 2 * args.runs, log)
    print(
        f"one task's write of {args.rows // args.tasks:,} x 100 B outside Spark, median of"
        f" {2 * args.runs}: at least once {task['at least once'] * 1000:.1f} ms, exactly once"
        f" {task['exactly once'] * 1000:.1f} ms; the difference {task['difference'] * 1000:.1f} ms"
    )
    if args.task_only:
        return
    result = measure(args.rows, args.tasks, args.runs, log=log)
    print(
        f"write of {args.rows:,} x 100 B in {args.tasks} tasks, local[2], median of {args.runs}:"
        f" at least once {result['at least once'] * 1000:.0f} ms, exactly once"
        f" {result['exactly once'] * 1000:.0f} ms; the difference"
        f" {result['difference'] * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
