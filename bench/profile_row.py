"""Where minibroker's CPU goes during one row of the table: `python -m bench.profile_row ROW`.

It runs the row as `python -m bench --warm --only ROW --runs 1` does for minibroker (a fresh
node or cluster, the row's workload once untimed with `--warmup`, default 1, then the timed
run), with `py-spy record --rate 250 --format raw --nonblocking` attached to every broker
process for the timed run only, and prints for each broker its CPU seconds in that run (from
`/proc`), the samples py-spy took while it was busy, and the functions that hold the most of
them: by their own time (the innermost Python frame, which is also where the time of a system
call made from Python lands) and including what they call. The raw profiles stay in `--out`
(flame graphs: `flamegraph.pl` or speedscope read them).

Needs py-spy (the `bench` extra, or `pip install py-spy`) and the permission to attach (root,
or ptrace allowed).
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from bench import java_producer
from bench.procfs import cpu_seconds
from bench.rows import REAL_SIZES, SMOKE_SIZES, rows
from bench.targets import MINIBROKER, Minibroker, start
from minibroker.tools.launcher import BrokerProcess

# The produce rows' record size and acks, for the Java producer (--java).
JAVA_ROWS = {
    "produce-100": (100, "1"),
    "produce-1k": (1024, "1"),
    "produce-all-100": (100, "all"),
    "produce-all-1k": (1024, "all"),
}
FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
PY_SPY_EXIT_TIMEOUT = 30.0


def frame_name(frame: str) -> str:
    """`function (path/to/file.py:12)` -> `function (file.py)`: lines of one function merged."""
    found = FRAME.match(frame.strip())
    if found is None:
        return frame.strip()
    return f"{found['function']} ({Path(found['file']).name})"


def summarize(raw: str, top: int = 15) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """From py-spy's raw format (one `outermost;...;innermost count` per line): the samples,
    and the `top` functions by own and by inclusive samples (leaving out
    the frames in 90% of the samples or more: the entry point, trio's run loop)."""
    total = 0
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_name(frame) for frame in stack.split(";")]
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    telling = Counter({name: count for name, count in inclusive.items() if count < 0.9 * total})
    return total, own.most_common(top), telling.most_common(top)


def print_shares(total: int, own: list[tuple[str, int]], inclusive: list[tuple[str, int]]) -> None:
    """`summarize`'s two lists as shares of `total` samples, one function a line."""
    print("  own time:")
    for name, count in own:
        print(f"    {count / max(total, 1):6.1%}  {name}")
    print("  including callees:")
    for name, count in inclusive:
        print(f"    {count / max(total, 1):6.1%}  {name}")


def py_spy() -> str:
    """py-spy beside this Python (a virtualenv's bin) or else on the PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy") or "py-spy"


def process_name(node: BrokerProcess) -> str:
    return f"{node.kind}-{node.node_id}"


def main() -> int:
    names = [row.name for row in rows(REAL_SIZES) if row.cold_only is None]
    parser = argparse.ArgumentParser(prog="python -m bench.profile_row", description=__doc__)
    parser.add_argument("row", choices=names, metavar="ROW", help=f"one of {', '.join(names)}")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--smoke", action="store_true", help="the smoke run's sizes")
    parser.add_argument("--out", type=Path, help="directory for the raw profiles (default: tmp)")
    parser.add_argument("--top", type=int, default=15, help="functions listed per broker")
    parser.add_argument(
        "--java",
        action="store_true",
        help="a produce row's Java producer (ProducerPerformance) alone, after the warm-up,"
        " instead of kcat's part",
    )
    arguments = parser.parse_args()
    row = next(
        row
        for row in rows(SMOKE_SIZES if arguments.smoke else REAL_SIZES, kafka=False, spark=False)
        if row.name == arguments.row
    )
    out = arguments.out or Path(tempfile.mkdtemp(prefix="minibroker-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="minibroker-profile-") as work:
        work_dir = Path(work)
        overrides = row.broker_overrides
        if callable(overrides):
            overrides = overrides(work_dir)
        target = start(MINIBROKER, row.brokers, work_dir, overrides, row.extra_listeners)
        assert isinstance(target, Minibroker)
        try:
            topic = f"bench-{row.name}-profiled"
            for warm_up in range(arguments.warmup):
                warm_topic = f"{topic}-warm-{warm_up}"
                target.create_topic(
                    warm_topic, row.partitions, row.replication_factor, row.topic_configs
                )
                (row.warm_up or row.measure)(target, warm_topic, work_dir)
            target.create_topic(topic, row.partitions, row.replication_factor, row.topic_configs)
            nodes = [node for node in target.nodes if node.running]
            before = {process_name(node): cpu_seconds(node.pid) for node in nodes}
            spies = {
                process_name(node): subprocess.Popen(
                    [
                        py_spy(),
                        "record",
                        "--pid",
                        str(node.pid),
                        "--rate",
                        str(arguments.rate),
                        "--format",
                        "raw",
                        "--nonblocking",
                        "--output",
                        str(out / f"{row.name}-{process_name(node)}.txt"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
                for node in nodes
            }
            try:
                if arguments.java:
                    if row.name not in JAVA_ROWS:
                        raise SystemExit(f"--java: {row.name} is not a produce row")
                    size, acks = JAVA_ROWS[row.name]
                    count = (SMOKE_SIZES if arguments.smoke else REAL_SIZES).produce_records
                    rate = java_producer.java_produce(target.bootstrap, topic, count, size, acks)
                    figures = {"java_records_per_s": rate}
                else:
                    figures = row.measure(target, topic, work_dir)
            finally:
                for spy in spies.values():
                    spy.send_signal(signal.SIGINT)
                for spy in spies.values():
                    spy.wait(PY_SPY_EXIT_TIMEOUT)
            after = {process_name(node): cpu_seconds(node.pid) for node in nodes}
        finally:
            target.close()
    print(f"{row.name}, minibroker, after {arguments.warmup} untimed run(s): {figures}")
    for node in spies:
        path = out / f"{row.name}-{node}.txt"
        if not path.exists():
            print(f"{node}: no profile ({spies[node].stderr.read().decode()[-500:]})")
            continue
        total, own, inclusive = summarize(path.read_text(), arguments.top)
        print(
            f"\n{node}: {after[node] - before[node]:.2f} CPU s in the timed run,"
            f" {total} busy samples at {arguments.rate}/s ({path})"
        )
        print_shares(total, own, inclusive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
