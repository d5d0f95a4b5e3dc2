"""The event loop's stalls from file-system work, before and after a change, in one command:
`python -m bench.io_stalls [--baseline REF] [--runs N] [--partitions P] [--seconds S]`.

Issue 40: a directory fsync, a file's creation or a tree's removal on the event loop stalls
every client. Two code trees run side by side, run by run alternating, on the same machine:
the baseline (`--baseline`, a git ref of this repository, by default where HEAD left
`main`, staged as the package `minibroker` and put first on the node's PYTHONPATH) and this
tree. For each, a fresh
single node with `/metrics` and `event.loop.stall.warn.ms=5` goes through three scenarios:

- **create**: a topic of P partitions (500) by CreateTopics, until every partition's leader
  answers ListOffsets (the node's LeaderAndIsr to itself makes the directories and files);
- **delete**: the same topic deleted, until its directories are gone (StopReplica);
- **roll**: the latency row's workload (end-to-end at 10 MB/s, `bench.workloads`) for S
  seconds on a topic with 1 MiB segments and 16 MiB retention.bytes, with the broker's
  log.flush.offset.checkpoint.interval.ms, replica.high.watermark.checkpoint.interval.ms and
  log.retention.check.interval.ms at 1 s: segment rolls, the flushes of rolled segments, the
  checkpoint files and retention's deletions, all the time.

Meanwhile another client sends ApiVersions back to back on its own connection and times each
round trip. Printed per run and scenario: the loop's stalls (minibroker_event_loop_stall_seconds,
node/loop_stalls.py, busy and waiting together) over 5, 10 and 50 ms, their p99 and their
largest (the upper bound of the histogram's highest non-empty bucket), the other client's
worst round trip (exact: the longest any client waited) and, for roll, the workload's
p99/p99.9; then medians per tree, and the stalls over 5 ms by the code the loop was running
(the watchdog's stacks, as bench/loop_stalls.py counts them).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench import creation_stall
from bench.loop_stalls import FRAME, scrape
from bench.rows import LATENCY_RATE_BYTES
from bench.targets import MINIBROKER, start, wait_until_served
from bench.workloads import end_to_end_latency
from minibroker.tools.launcher import free_port

REPO = Path(__file__).resolve().parents[1]
STALL_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
ADMIN_TIMEOUT_S = 180
ROLL_TOPIC_CONFIGS = {"segment.bytes": str(1 << 20), "retention.bytes": str(16 << 20)}
ROLL_BROKER_SETTINGS = {
    "log.flush.offset.checkpoint.interval.ms": "1000",
    "replica.high.watermark.checkpoint.interval.ms": "1000",
    "log.retention.check.interval.ms": "1000",
}


def stage_baseline(ref: str, into: Path) -> Path:
    """`ref`'s package laid out as the wheel has it (as .ci/check-architecture does): the
    directory to put first on PYTHONPATH."""
    source = into / "source"
    source.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True
    ).stdout
    archive_path = into / "baseline.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(source, filter="data")
    stage = into / "stage"
    package = stage / "minibroker"
    shutil.copytree(source / "broker", package)
    shutil.copytree(source / "protocol", package / "protocol")
    shutil.copytree(source / "storage", package / "storage")
    shutil.copytree(source / "minibroker_spark", package / "spark")
    return stage


def imported_from(pythonpath: str | None) -> str:
    env = {**os.environ}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(
        [sys.executable, "-c", "import minibroker.storage.log_manager as m; print(m.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
    ).stdout.strip()


@contextmanager
def node_environment(pythonpath: str | None) -> Iterator[None]:
    """The baseline's package first on the path of the node started inside (the launcher
    passes its environment on); restored before any client process starts."""
    saved = os.environ.get("PYTHONPATH")
    if pythonpath:
        os.environ["PYTHONPATH"] = pythonpath
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


class Pinger(creation_stall.Pinger):
    """creation_stall's ApiVersions pinger, with the worst round trip since a given one."""

    def worst_since(self, first: int) -> float:
        return max(self.round_trips[first:], default=float("nan")) * 1000


def causes(log: str) -> Counter[str]:
    """bench.loop_stalls.causes, with this tree's storage/ and protocol/ counted as
    minibroker's own code too (the staged baseline has them under /minibroker/, this tree
    at the repository's root): the innermost frame of ours in each stack the watchdog
    logged."""
    found: Counter[str] = Counter()
    root = str(REPO) + "/"
    for warning in log.split("the event loop has not come back")[1:]:
        frames = FRAME.findall(warning.split("\n20", 1)[0])
        ours = [
            f
            for f in frames
            if "/minibroker/" in f[0] or (f[0].startswith(root) and "/.venv/" not in f[0])
        ]
        path, line, function = (ours or frames or [("?", "0", "?")])[-1]
        found[f"{function} ({Path(path).parent.name}/{Path(path).name}:{line})"] += 1
    return found


def stall_figures(before: dict, after: dict) -> dict[str, float]:
    """Stalls between two scrapes: over 5/10/50 ms, p99 and max (bucket upper bounds, ms)."""

    def delta(name: str, labels: tuple) -> float:
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    total = 0.0
    below = dict.fromkeys(STALL_BOUNDS, 0.0)
    for kind in ("busy", "waiting"):
        total += delta("minibroker_event_loop_stall_seconds_count", (("kind", kind),))
        for bound in STALL_BOUNDS:
            labels = (("kind", kind), ("le", repr(float(bound))))
            below[bound] += delta("minibroker_event_loop_stall_seconds_bucket", labels)
    figures = {
        "stalls": total,
        ">5ms": total - below[0.005],
        ">10ms": total - below[0.01],
        ">50ms": total - below[0.05],
    }
    p99 = next((b for b in STALL_BOUNDS if below[b] >= 0.99 * total), float("inf"))
    largest = next((b for b in STALL_BOUNDS if below[b] >= total), float("inf"))
    figures["p99_ms"] = p99 * 1000
    figures["max_ms<="] = largest * 1000
    return figures


def run_once(
    pythonpath: str | None, args: argparse.Namespace, work_dir: Path
) -> tuple[dict[str, dict[str, float]], Counter[str]]:
    results: dict[str, dict[str, float]] = {}
    named: Counter[str] = Counter()
    metrics_port = free_port()
    settings = {
        "metrics.port": str(metrics_port),
        "event.loop.stall.warn.ms": "5",
        **ROLL_BROKER_SETTINGS,
    }
    with node_environment(pythonpath):
        target = start(MINIBROKER, 1, work_dir, settings)
    pinger: Pinger | None = None
    try:
        assert target.node is not None
        node = target.node
        log_start = node.stderr_path.stat().st_size
        pinger = Pinger(node.port)
        pinger.start()

        def measured(name: str, action: Callable[[], dict[str, float] | None]) -> None:
            assert pinger is not None
            first = len(pinger.round_trips)
            before = scrape(metrics_port)
            started = time.monotonic()
            extra = action() or {}
            seconds = time.monotonic() - started
            after = scrape(metrics_port)
            results[name] = {
                "s": seconds,
                **stall_figures(before, after),
                "ping_max_ms": pinger.worst_since(first),
                **extra,
            }

        admin = AdminClient({"bootstrap.servers": target.bootstrap})
        big = "big"

        def create() -> None:
            admin.create_topics([NewTopic(big, args.partitions, 1)])[big].result(ADMIN_TIMEOUT_S)
            wait_until_served(target.bootstrap, big, args.partitions, target.failure)

        def delete() -> None:
            admin.delete_topics([big])[big].result(ADMIN_TIMEOUT_S)
            deadline = time.monotonic() + ADMIN_TIMEOUT_S
            while any(node.log_dir.glob(f"{big}-*")):
                if time.monotonic() > deadline:
                    raise target.failure("the topic's directories were not deleted")
                time.sleep(0.01)

        def roll() -> dict[str, float]:
            target.create_topic("rolls", 1, 1, ROLL_TOPIC_CONFIGS)
            latency = end_to_end_latency(target, "rolls", LATENCY_RATE_BYTES, args.seconds, 1.0)
            return {"p99_e2e_ms": latency["p99_ms"], "p999_e2e_ms": latency["p999_ms"]}

        measured("create", create)
        measured("delete", delete)
        measured("roll", roll)
        with open(node.stderr_path, errors="replace") as log:
            log.seek(log_start)
            named = causes(log.read())
    finally:
        if pinger is not None:
            pinger.stop.set()
            pinger.join(10)
        target.close()
    return results, named


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline",
        default=None,
        help="git ref of the 'before' tree (default: where HEAD left main, git merge-base)",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    if args.baseline is None:
        args.baseline = subprocess.run(
            ["git", "-C", str(REPO), "merge-base", "HEAD", "main"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="io-stalls-") as work:
        stage = stage_baseline(args.baseline, Path(work) / "baseline")
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", args.baseline],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        trees = {f"before ({args.baseline} {commit})": str(stage), f"after (HEAD {head}+)": None}
        for name, pythonpath in trees.items():
            print(f"{name}: the node imports {imported_from(pythonpath)}", flush=True)
        results: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in trees}
        named: dict[str, Counter[str]] = {name: Counter() for name in trees}
        for run in range(args.runs):
            for name, pythonpath in trees.items():
                figures, found = run_once(pythonpath, args, Path(work))
                results[name].append(figures)
                named[name] += found
                for scenario, values in figures.items():
                    shown = "  ".join(f"{key} {value:.1f}" for key, value in values.items())
                    print(f"run {run + 1} {name:24s} {scenario:6s} {shown}", flush=True)
        for scenario in ("create", "delete", "roll"):
            for name, runs in results.items():
                keys = runs[0][scenario].keys()
                medians = "  ".join(
                    f"{key} {statistics.median(r[scenario][key] for r in runs):.1f}" for key in keys
                )
                print(f"median {name:24s} {scenario:6s} {medians}")
        for name, found in named.items():
            print(f"stalls over 5 ms by the code the loop was running ({name}, all runs):")
            for cause, count in found.most_common(15):
                print(f"  {count:5d}  {cause}")


if __name__ == "__main__":
    main()
