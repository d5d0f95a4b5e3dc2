"""`python -m bench`: measure minibroker against librdkafka's mock cluster and Apache Kafka, and
print one table.

Run it from the repository root (the `bench` package is not installed with the broker). A full
run writes the table, the machine and the command to docs/benchmarks/index.md and a chart of
it to docs/benchmarks/benchmarks.png; `--smoke` (tiny sizes, one run, a few seconds per row)
and `--only` print to stdout only, unless `--write` is given. Apache Kafka is a system of
every full run when java/fetch.sh has cached its jars (`--no-kafka` leaves it out); the smoke
run leaves it out unless `--kafka` or MINIBROKER_BENCH_KAFKA=1 asks for it
(JVMs take seconds to start each).
The Spark rows (issue 22: minibroker's Spark source against Spark's connector and one consumer)
are in every full run and left out of the smoke run unless `--spark`, MINIBROKER_BENCH_SPARK=1
or `--only spark-...` asks for them; without pyspark (or the connector's jars) the table says
"skipped" and why.
`--warm` (or `--warmup N`) runs each row's workload once (N times) untimed on the same started
system before each timed measurement, on every system, and leaves out the rows that start their
own system (startup, restart, failover) and the Spark rows; it never writes the main table: a
writing warm run puts its table between docs/benchmarks/index.md's warm markers, and draws no chart.
Progress and failures go to stderr; the exit status is 1 when any measurement failed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from pathlib import Path

from bench.chart import write_chart
from bench.report import CHART, machine, section, write_benchmarks
from bench.rows import REAL_SIZES, SMOKE_SIZES, close_spark, rows, run_row, warm_selection

DEFAULT_RUNS = 3


def parser() -> argparse.ArgumentParser:
    names = [row.name for row in rows(REAL_SIZES)]
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, help=f"runs per system and row (default {DEFAULT_RUNS}; smoke: 1)"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to exercise the harness")
    parser.add_argument(
        "--only", action="append", choices=names, metavar="ROW", help=f"one of {', '.join(names)}"
    )
    parser.add_argument(
        "--write",
        action=argparse.BooleanOptionalAction,
        help="write docs/benchmarks/index.md and benchmarks.png (default: only for a full run"
        " without --smoke or --only)",
    )
    parser.add_argument(
        "--kafka",
        action=argparse.BooleanOptionalAction,
        help="measure Apache Kafka too, when its jars are cached (default: yes, but for --smoke"
        " only with MINIBROKER_BENCH_KAFKA=1)",
    )
    parser.add_argument(
        "--spark",
        action=argparse.BooleanOptionalAction,
        help="run the Spark rows (default: yes, but for --smoke only with MINIBROKER_BENCH_SPARK=1"
        " or --only naming one)",
    )
    warm = parser.add_mutually_exclusive_group()
    warm.add_argument(
        "--warm",
        action="store_true",
        help="before each timed measurement, run the row's workload once, untimed, on the same"
        " started system (rows that start their own system are left out); writes only the"
        " warm block of docs/benchmarks/index.md",
    )
    warm.add_argument(
        "--warmup",
        type=int,
        metavar="N",
        help="as --warm, with N untimed runs before each measurement (0: a cold run)",
    )
    return parser


def warmups_of(arguments: argparse.Namespace) -> int:
    """Untimed runs before each measurement: --warmup N, --warm 1, otherwise none."""
    if arguments.warmup is not None:
        if arguments.warmup < 0:
            raise SystemExit("python -m bench: --warmup must be 0 or more")
        return arguments.warmup
    return 1 if arguments.warm else 0


def main() -> int:
    arguments = parser().parse_args()
    warmups = warmups_of(arguments)
    runs = arguments.runs or (1 if arguments.smoke else DEFAULT_RUNS)
    write = arguments.write
    if write is None:
        write = not arguments.smoke and not arguments.only
    kafka = arguments.kafka
    if kafka is None:
        kafka = not arguments.smoke or os.environ.get("MINIBROKER_BENCH_KAFKA") == "1"
    spark = arguments.spark
    if spark is None:
        spark = (
            not arguments.smoke
            or os.environ.get("MINIBROKER_BENCH_SPARK") == "1"
            or any(name.startswith("spark-") for name in arguments.only or ())
        )
    selected, left_out = warm_selection(
        [
            row
            for row in rows(SMOKE_SIZES if arguments.smoke else REAL_SIZES, kafka, spark)
            if not arguments.only or row.name in arguments.only
        ],
        warmups,
    )
    for name, why in left_out.items():
        print(f"[{name}] left out of a warm run: {why}", file=sys.stderr)

    command = shlex.join(["python", "-m", "bench", *sys.argv[1:]])
    # Described before the first row: the commit measured, not the page's own edits.
    described = machine()
    results = []
    with tempfile.TemporaryDirectory(prefix="minibroker-bench-") as work_dir:
        try:
            for row in selected:
                results.append(run_row(row, runs, Path(work_dir), warmups))
                if write and len(results) < len(selected):
                    # The rows so far, so that a run cut short leaves what it measured.
                    partial = (
                        f"{len(results)} of {len(selected)} rows so far (the run is not over).\n\n"
                    )
                    write_benchmarks(
                        partial + section(command, results, runs, described, warmups, left_out),
                        warm=bool(warmups),
                    )
        finally:
            close_spark()

    content = section(command, results, runs, described, warmups, left_out)
    print(content)
    if write:
        write_benchmarks(content, warm=bool(warmups))
        if not warmups:
            # The chart draws the main (cold) table only.
            write_chart(results, CHART, command)
    return 1 if any(result.failures for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
