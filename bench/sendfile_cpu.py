"""What sendfile saves on the consume path: the broker's CPU while kcat reads a topic from
the beginning, with zero-copy reads on and off (MINIBROKER_SENDFILE, read when a node
starts), runs alternating in one command.

`python -m bench.sendfile_cpu [--records N] [--size B] [--runs R]`: each run starts a fresh
single node, produces N records of B bytes into 64 partitions with kcat (untimed), then
measures the node's CPU seconds (user + system, /proc) and kcat's time while kcat consumes
everything; the figure is CPU seconds per GB consumed. The resources row of `python -m bench`
counts produce and consume together, which dilutes what only the read path changes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench.procfs import cpu_seconds
from bench.targets import Minibroker
from bench.workloads import GB, PARTITIONS, kcat_consume, kcat_produce, record_file


def one_run(work_dir: Path, records: Path, count: int, size: int, sendfile: bool) -> dict:
    os.environ["MINIBROKER_SENDFILE"] = "1" if sendfile else "0"
    target = Minibroker(1, work_dir)
    try:
        target.create_topic("consumed", PARTITIONS, 1, {})
        kcat_produce(target, "consumed", records, count, "1", "sticky.partitioning.linger.ms=0")
        before = cpu_seconds(target.node.pid)
        seconds, read = kcat_consume(target, "consumed")
        cpu = cpu_seconds(target.node.pid) - before
        if read != count:
            raise target.failure(f"kcat read {read} of {count} records")
        return {"cpu_s_per_gb": cpu / (count * size / GB), "consume_s": seconds}
    finally:
        target.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results: dict[bool, list[dict]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="bench-sendfile-") as work:
        work_dir = Path(work)
        records = record_file(work_dir, args.records, args.size)
        for run in range(args.runs):
            for sendfile in (False, True):
                figures = one_run(work_dir, records, args.records, args.size, sendfile)
                results[sendfile].append(figures)
                print(
                    f"run {run + 1} sendfile={'on ' if sendfile else 'off'}"
                    f" cpu {figures['cpu_s_per_gb']:.3f} s/GB consumed,"
                    f" kcat {figures['consume_s']:.2f} s",
                    file=sys.stderr,
                )
    medians = {
        key: {name: statistics.median(run[name] for run in runs) for name in runs[0]}
        for key, runs in results.items()
    }
    off, on = medians[False], medians[True]
    print(f"{args.records:,} x {args.size} B, {args.runs} runs each, alternating; medians:")
    print("| | sendfile off | sendfile on | on / off |")
    print("|---|---:|---:|---:|")
    print(
        f"| broker CPU s per GB consumed | {off['cpu_s_per_gb']:.3f} | {on['cpu_s_per_gb']:.3f}"
        f" | {on['cpu_s_per_gb'] / off['cpu_s_per_gb']:.2f} |"
    )
    print(
        f"| kcat consume time, s | {off['consume_s']:.2f} | {on['consume_s']:.2f}"
        f" | {on['consume_s'] / off['consume_s']:.2f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
