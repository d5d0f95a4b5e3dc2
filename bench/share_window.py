"""The share-consume workload over a longer window (issue 35), minibroker and Apache Kafka 4.4
alternating: `python -m bench.share_window [--records 200000] [--runs 3]`.

The `share-consume` row of `python -m bench` reads 40,000 records per share group, all the
librdkafka mock keeps of one partition (about 5 MiB), so at 100,000 records/s its clock runs
for about 0.4 s and the group's start and last commit weigh on the figure. This command runs
the same workload (`bench.workloads.share_consume_throughput`: share groups of 1, 2 and 4
confluent-kafka ShareConsumers in explicit mode on one partition, then a classic group of 4 on
4 partitions; one fresh single node per system and run) with `--records` records and without
the mock, and prints each run's figures and the medians' ratios. Not part of `python -m bench`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.rows import SMALL
from bench.targets import KAFKA, MINIBROKER, start
from bench.workloads import record_file, share_consume_throughput

SYSTEMS = (MINIBROKER, KAFKA)
LINES = ("share_1_rps", "share_2_rps", "share_4_rps", "classic_rps")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    arguments = parser.parse_args(argv)
    figures: dict[str, list[dict[str, float]]] = {system: [] for system in SYSTEMS}
    with tempfile.TemporaryDirectory(prefix="share-window-") as work:
        work_dir = Path(work)
        records = record_file(work_dir, arguments.records, SMALL)
        for run in range(arguments.runs):
            for system in SYSTEMS:
                run_dir = work_dir / f"{system}-{run}"
                run_dir.mkdir()
                target = start(system, 1, run_dir, {"group.initial.rebalance.delay.ms": "0"})
                try:
                    measured = share_consume_throughput(
                        target, "share-window", records, arguments.records, SMALL
                    )
                finally:
                    target.close()
                figures[system].append(measured)
                shown = ", ".join(
                    f"{name} {value:,.2f}"
                    for name, value in measured.items()
                    if name.endswith(("_rps", "_spread"))
                )
                print(f"run {run + 1}/{arguments.runs} {system}: {shown}", flush=True)
    for line in LINES:
        ours = statistics.median(f[line] for f in figures[MINIBROKER])
        theirs = statistics.median(f[line] for f in figures[KAFKA])
        print(
            f"{line}: minibroker {ours:,.0f}, Apache Kafka {theirs:,.0f},"
            f" minibroker / Kafka {ours / theirs:.2f}"
        )


if __name__ == "__main__":
    main()
