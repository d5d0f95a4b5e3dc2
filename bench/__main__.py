"""`python -m bench`: measure minibroker against librdkafka's mock cluster and print one table.

Run it from the repository root (the `bench` package is not installed with the broker). A full
run writes the table, the machine and the command to BENCHMARKS.md; `--smoke` (tiny sizes, one
run, a few seconds per row) and `--only` print to stdout only, unless `--write` is given.
Progress and failures go to stderr; the exit status is 1 when any measurement failed.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

from bench.report import section, write_benchmarks
from bench.rows import REAL_SIZES, SMOKE_SIZES, rows, run_row

DEFAULT_RUNS = 3


def main() -> int:
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
        help="write BENCHMARKS.md (default: only for a full run without --smoke or --only)",
    )
    arguments = parser.parse_args()
    runs = arguments.runs or (1 if arguments.smoke else DEFAULT_RUNS)
    write = arguments.write
    if write is None:
        write = not arguments.smoke and not arguments.only
    selected = [
        row
        for row in rows(SMOKE_SIZES if arguments.smoke else REAL_SIZES)
        if not arguments.only or row.name in arguments.only
    ]

    with tempfile.TemporaryDirectory(prefix="minibroker-bench-") as work_dir:
        results = [run_row(row, runs, Path(work_dir)) for row in selected]

    command = shlex.join(["python", "-m", "bench", *sys.argv[1:]])
    content = section(command, results, runs)
    print(content)
    if write:
        write_benchmarks(content)
    return 1 if any(result.failures for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
