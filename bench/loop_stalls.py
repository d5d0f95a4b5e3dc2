"""The event loop's stalls and the garbage collector's pauses under the latency row's workload,
for broker settings side by side: `python -m bench.loop_stalls [--seconds S] [--runs N]`.

For each variant (the default, `gc.freeze.after.startup=true`, and
`log.segment.reserve.max.bytes=0`: no blocks reserved ahead of a segment's end) a fresh single
node with `/metrics` runs the latency row (end-to-end at 10 MB/s,
`bench.workloads.end_to_end_latency`);
its `/metrics` is read before and after, and the difference printed: the pulse's stalls
(minibroker_event_loop_stall_seconds, node/loop_stalls.py) over 1, 5, 10 and 50 ms, busy (the
loop ran code) and waiting (a blocking call, or the process not scheduled) apart, the
collector's pauses by generation (count, total, and how many over 5 ms), and the workload's
p50/p99/p99.9. Then the stalls by cause: the broker runs with event.loop.stall.warn.ms=5, and
the stacks its watchdog logged are counted by the innermost frame of minibroker's code and
what the kernel said of the thread then (R: on a CPU or waiting for one; S in a function:
asleep, a futex being the GIL or a lock; D: the disk or the filesystem).
Variants alternate run by run, so both see the same machine (issue 40). Issue 40's 10-minute
soak at 10 MB/s is `--seconds 600 --runs 1 --variants default`.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import urllib.request
from collections import Counter
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.procfs import machine_ticks, steal_share
from bench.rows import LATENCY_RATE_BYTES
from bench.targets import MINIBROKER, start
from bench.workloads import end_to_end_latency
from minibroker.tools.launcher import free_port

VARIANTS = {
    "default": {},
    "gc.freeze": {"gc.freeze.after.startup": "true"},
    # Appends reserving their own blocks in the write system call, as before (storage/segment.py).
    "no-reserve": {"log.segment.reserve.max.bytes": "0"},
}
STALL_BOUNDS = ("0.001", "0.005", "0.01", "0.05")
# The watchdog logs every stall over this (event.loop.stall.warn.ms) with its stack.
WARN_MS = "5"
FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
# minibroker's own code: any file of this repository (broker/, storage/, protocol/, ...) or
# of an installed minibroker.
REPOSITORY = str(Path(__file__).resolve().parents[1]) + "/"
# What the kernel said of the loop's thread at that moment (node/loop_stalls.kernel_state).
KERNEL = re.compile(r"\(kernel: ([^)]*)\)")


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def summarize(before: dict, after: dict) -> dict[str, float]:
    def delta(name: str, labels: tuple = ()) -> float:
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    out: dict[str, float] = {}
    for kind in ("busy", "waiting"):
        total = delta("minibroker_event_loop_stall_seconds_count", (("kind", kind),))
        for bound in STALL_BOUNDS:
            labels = (("kind", kind), ("le", bound))
            below = delta("minibroker_event_loop_stall_seconds_bucket", labels)
            out[f"{kind}>{float(bound) * 1000:g}ms"] = total - below
    for generation in "012":
        labels = (("generation", generation),)
        out[f"gc{generation} count"] = delta("minibroker_gc_pause_seconds_count", labels)
        out[f"gc{generation} ms"] = delta("minibroker_gc_pause_seconds_sum", labels) * 1000
        within = delta(
            "minibroker_gc_pause_seconds_bucket", (("generation", generation), ("le", "0.005"))
        )
        out[f"gc{generation}>5ms"] = out[f"gc{generation} count"] - within
    return out


def _ours(path: str) -> bool:
    in_repository = path.startswith(REPOSITORY) and "/site-packages/" not in path
    return in_repository or "/site-packages/minibroker/" in path


def causes(log: str) -> Counter[str]:
    """The watchdog's warnings in a broker's log, by the innermost frame of minibroker's own
    code in the stack it logged (or the innermost frame, if none is minibroker's)."""
    found: Counter[str] = Counter()
    for warning in log.split("the event loop has not come back")[1:]:
        own = warning.split("\n20", 1)[0]  # up to the log's next line
        frames = FRAME.findall(own)
        ours = [f for f in frames if _ours(f[0])]
        path, line, function = (ours or frames or [("?", "0", "?")])[-1]
        kernel = KERNEL.search(own)
        where = f" [{kernel.group(1)}]" if kernel else ""
        found[f"{function} ({Path(path).name}:{line}){where}"] += 1
    return found


def run_once(
    overrides: dict[str, str], seconds: float, work_dir: Path, keep_log: Path | None = None
) -> tuple[dict[str, float], Counter[str]]:
    port = free_port()
    settings = {**overrides, "metrics.port": str(port), "event.loop.stall.warn.ms": WARN_MS}
    target = start(MINIBROKER, 1, work_dir, settings)
    try:
        topic = "stalls"
        target.create_topic(topic, 1, 1, {})
        assert target.node is not None
        log_start = target.node.stderr_path.stat().st_size
        before = scrape(port)
        ticks = machine_ticks()
        latency = end_to_end_latency(target, topic, LATENCY_RATE_BYTES, seconds, 1.0)
        stolen = steal_share(ticks, machine_ticks())
        after = scrape(port)
        with open(target.node.stderr_path, errors="replace") as log:
            log.seek(log_start)
            text = log.read()
        named = causes(text)
        if keep_log is not None:  # the watchdog's whole stacks, for reading
            with open(keep_log, "a") as kept:
                kept.write(text)
    finally:
        target.close()
    figures = {k: latency[k] for k in ("p50_ms", "p99_ms", "p999_ms")}
    figures["steal %"] = stolen * 100  # the hypervisor's share of the machine meanwhile
    return {**figures, **summarize(before, after)}, named


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, of {', '.join(VARIANTS)} (the soak: --seconds 600 --runs 1"
        " --variants default)",
    )
    parser.add_argument(
        "--keep-log",
        type=Path,
        metavar="FILE",
        help="append each run's broker log (the watchdog's whole stacks) to FILE",
    )
    args = parser.parse_args(argv)
    chosen = {name: VARIANTS[name] for name in args.variants.split(",")}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in chosen}
    named: dict[str, Counter[str]] = {name: Counter() for name in chosen}
    with tempfile.TemporaryDirectory(prefix="loop-stalls-") as work:
        for run in range(args.runs):
            for name, overrides in chosen.items():
                figures, causes_seen = run_once(overrides, args.seconds, Path(work), args.keep_log)
                results[name].append(figures)
                named[name] += causes_seen
                shown = "  ".join(f"{key} {value:.2f}" for key, value in figures.items())
                print(f"run {run + 1} {name:10s} {shown}", flush=True)
    for name, runs in results.items():
        keys = runs[0].keys()
        medians = "  ".join(f"{k} {statistics.median(r[k] for r in runs):.2f}" for k in keys)
        print(f"median {name:10s} {medians}")
    for name, found in named.items():
        print(f"stalls over {WARN_MS} ms by the code the loop was running ({name}, all runs):")
        for cause, count in found.most_common(12):
            print(f"  {count:5d}  {cause}")


if __name__ == "__main__":
    main()
