"""Where the CPU goes when kcat produces over SSL: one broker with a PLAINTEXT and an SSL
listener, kcat producing 1M x 100 B (the `tls` row's records and settings) alternately over
each, and for every round the wall time, kcat's CPU seconds per thread (its main thread
reads stdin and batches; librdkafka's broker thread serialises, encrypts and sends) and the
broker's CPU seconds.

    python -m bench.tls_produce_cpu --rounds 3

The figures are seconds on a shared machine: compare the two protocols within one run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bench.procfs import CLOCK_TICKS_PER_SECOND, cpu_seconds
from bench.rows import tls_overrides
from bench.targets import Minibroker
from bench.workloads import record_file

RECORDS = 1_000_000
RECORD_SIZE = 100
POLL_SECONDS = 0.02


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of each living thread of `pid`, by thread name (summed per name)."""
    seconds: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = int(fields[11]) + int(fields[12])
        seconds[name] = seconds.get(name, 0.0) + ticks / CLOCK_TICKS_PER_SECOND
    return seconds


def produce(command: list[str], records: Path) -> tuple[float, dict[str, float]]:
    """Run kcat; its wall seconds and the last CPU seconds seen for each of its threads
    (threads are read while it runs: /proc forgets them when it exits)."""
    threads: dict[str, float] = {}
    with open(records, "rb") as stdin:
        started = time.monotonic()
        process = subprocess.Popen(command, stdin=stdin)
        while process.poll() is None:
            threads.update(thread_cpu_seconds(process.pid))
            time.sleep(POLL_SECONDS)
        elapsed = time.monotonic() - started
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited with {process.returncode}")
    return elapsed, threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tls-cpu-") as work:
        work_dir = Path(work)
        target = Minibroker(1, work_dir, tls_overrides(work_dir), ("SSL",))
        try:
            records = record_file(work_dir, RECORDS, RECORD_SIZE)
            ssl_settings = ["security.protocol=SSL", f"ssl.ca.location={work_dir}/tls/ca.pem"]
            listeners = (
                ("plaintext", target.bootstrap, []),
                ("ssl", target.listener_bootstrap("SSL"), ssl_settings),
            )
            for round_number in range(args.rounds):
                for name, bootstrap, settings in listeners:
                    topic = f"cpu-{round_number}-{name}"
                    target.create_topic(topic, 1, 1, {})
                    command = ["kcat", "-b", bootstrap, "-P", "-t", topic]
                    for setting in ("acks=1", "linger.ms=5", "batch.size=1000000", *settings):
                        command += ["-X", setting]
                    broker_before = cpu_seconds(target.node.pid)
                    elapsed, threads = produce(command, records)
                    broker = cpu_seconds(target.node.pid) - broker_before
                    kcat = ", ".join(f"{thread} {s:.2f}" for thread, s in sorted(threads.items()))
                    print(
                        f"{name:9s} {elapsed:5.2f} s ({RECORDS / elapsed:,.0f} records/s); "
                        f"kcat CPU s: {kcat}; broker CPU {broker:.2f} s; "
                        f"load {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
        finally:
            target.close()


if __name__ == "__main__":
    main()
