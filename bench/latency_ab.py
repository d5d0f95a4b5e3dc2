"""The latency row for two code trees and Apache Kafka, alternating: `python -m bench.latency_ab`.

`python -m bench.latency_ab [--baseline REF] [--after REF] [--runs N] [--warmup N] [--row ROW]`
measures the row (`latency` by default, or `latency-3`, `latency-noisy`) as `python -m bench`
does, on minibroker at `--baseline` (by default the commit this branch left `main` at) and at
`--after` (by default HEAD; both staged as the package `minibroker` and put first on the
node's PYTHONPATH, as bench.io_stalls stages its baseline, so that editing the tree while it
runs changes neither), and on Apache Kafka when its jars are cached, in turn, `--runs` times,
each after `--warmup` untimed runs of the workload on the same started system (1: as
`--warm`). Each run prints the end-to-end p50/p99/p99.9, on the single-broker rows the
broker's CPU seconds during the timed run (`/proc`, as the resources row reads it), the
machine's 1-minute load average when it started and the hypervisor's steal share during
it; a run that fails is reported and left out; then the medians, and each tree's over
Kafka's.

What it is for: a change to minibroker's latency path, measured against its own baseline and
against the reference in the same command, on a shared machine where the absolute figures
move with the load. Not part of `python -m bench`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.io_stalls import REPO, node_environment, stage_baseline
from bench.kafka_ref import missing_reason
from bench.procfs import machine_ticks, steal_share
from bench.rows import REAL_SIZES, rows
from bench.targets import KAFKA, MINIBROKER, BenchError, start
from minibroker.tools.launcher import BrokerStartError

LATENCY_ROWS = ("latency", "latency-3", "latency-noisy")
FIGURES = ("p50_ms", "p99_ms", "p999_ms")


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def measure(row, system: str, pythonpath: str | None, work: Path, run: int, warmups: int):
    """The row once on a fresh target of `system` (minibroker from `pythonpath`)."""
    with node_environment(pythonpath):
        target = start(system, row.brokers, work, {}, (), False)
    try:
        for attempt in range(warmups + 1):
            topic = f"ab-{row.name}-{run}-{attempt}"
            target.create_topic(topic, row.partitions, row.replication_factor, row.topic_configs)
            single = row.brokers == 1
            before = target.usage() if single else None
            figures = row.measure(target, topic, work)
            if before is not None:
                figures["cpu_s"] = target.usage().cpu_seconds - before.cpu_seconds
        return figures
    finally:
        target.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="git ref (default: the merge base with main)")
    parser.add_argument("--after", default="HEAD", help="git ref (default HEAD)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    parser.add_argument("--row", choices=LATENCY_ROWS, default="latency")
    arguments = parser.parse_args()
    if arguments.baseline is None:
        arguments.baseline = subprocess.run(
            ["git", "-C", str(REPO), "merge-base", "HEAD", "main"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    (row,) = [row for row in rows(REAL_SIZES) if row.name == arguments.row]
    with tempfile.TemporaryDirectory(prefix="latency-ab-") as work_dir:
        work = Path(work_dir)
        trees = {
            f"{name} {ref}": (MINIBROKER, str(stage_baseline(ref, work / name)))
            for name, ref in (("before", arguments.baseline), ("after", arguments.after))
        }
        if missing_reason("kafka") is None:
            trees["kafka"] = (KAFKA, None)
        else:
            print(f"Apache Kafka left out: {missing_reason('kafka')}", file=sys.stderr)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for run in range(arguments.runs):
            for name, (system, pythonpath) in trees.items():
                load = load_average()
                ticks = machine_ticks()
                started = time.strftime("%H:%M:%S", time.gmtime())
                try:
                    figures = measure(row, system, pythonpath, work, run, arguments.warmup)
                except (BenchError, BrokerStartError) as error:
                    # Reported and left out of the medians; the other runs go on.
                    first_line = str(error).splitlines()[0]
                    print(f"{started} run {run + 1} {name}: FAILED {first_line}", flush=True)
                    continue
                figures["load"] = load
                figures["steal"] = steal_share(ticks, machine_ticks())  # the hypervisor's share
                results[name].append(figures)
                shown = ", ".join(f"{key} {value:,.2f}" for key, value in figures.items())
                print(f"{started} run {run + 1} {name}: {shown}", flush=True)
        print("medians:")
        medians = {
            name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
            for name, runs in results.items()
            if runs
        }
        for name, median in medians.items():
            print(f"  {name}: " + ", ".join(f"{key} {value:,.2f}" for key, value in median.items()))
        if "kafka" in medians:
            for name in medians:
                if name != "kafka":
                    ratios = (
                        f"{key} {medians[name][key] / medians['kafka'][key]:.3g}" for key in FIGURES
                    )
                    print(f"  {name} / kafka: " + ", ".join(ratios))


if __name__ == "__main__":
    main()
