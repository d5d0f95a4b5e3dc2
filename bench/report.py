"""The table, the machine it was measured on, and its place in BENCHMARKS.md.

BENCHMARKS.md belongs to people too (the methodology, the step-by-step performance history);
the harness rewrites only what lies between its two markers, and appends them at the end the
first time.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
from pathlib import Path

import confluent_kafka

from bench.rows import Line, RowResult
from bench.startup import KAFKA
from bench.targets import MINIBROKER, MOCK

BEGIN_MARKER = "<!-- bench:begin (written by python -m bench; edits here are overwritten) -->"
END_MARKER = "<!-- bench:end -->"
REPOSITORY = Path(__file__).resolve().parent.parent
BENCHMARKS = REPOSITORY / "BENCHMARKS.md"


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory() -> str:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
    return "unknown"


def _kcat_librdkafka() -> str:
    """kcat's own librdkafka (the Debian package links the system one, not the wheel's)."""
    version = subprocess.run(["kcat", "-V"], capture_output=True, text=True).stdout
    kcat = re.search(r"^Version (\S+)", version, re.M)
    librdkafka = re.search(r"librdkafka (\S+)", version)
    return (
        f"kcat {kcat.group(1) if kcat else '?'}"
        f" with librdkafka {librdkafka.group(1) if librdkafka else '?'}"
    )


def _commit() -> str:
    """The commit measured, marked when the work tree had uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPOSITORY), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPOSITORY), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} (with uncommitted changes)" if dirty else head


def machine() -> list[tuple[str, str]]:
    return [
        ("date", datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")),
        ("commit", _commit()),
        ("CPUs (nproc)", str(len(os.sched_getaffinity(0)))),
        ("CPU model", _cpu_model()),
        ("memory", _memory()),
        ("kernel", platform.release()),
        ("python", platform.python_version()),
        (
            "librdkafka",
            f"{confluent_kafka.libversion()[0]} (confluent-kafka {confluent_kafka.__version__}:"
            f" the mock and the latency clients); {_kcat_librdkafka()} (bulk produce/consume)",
        ),
    ]


def _cell(result: RowResult, system: str, line: Line) -> str:
    if system == KAFKA and system not in result.row.systems:
        return ""  # the Kafka column is for the rows that measure it
    if system in result.failures:
        return "failed"
    if system in result.not_served:
        return "not served"
    if system in result.skipped:
        return "skipped"
    value = result.median(system, line.key)
    if value is None:
        return "n/a"
    text = line.fmt.format(value)
    if line.extra_key is not None:
        text += f" ({line.extra_fmt.format(result.median(system, line.extra_key))})"
    return text


def _ratio(result: RowResult, line: Line) -> str:
    ours, theirs = result.median(MINIBROKER, line.key), result.median(MOCK, line.key)
    if ours is None or theirs is None or theirs == 0:
        return "n/a"
    return f"{ours / theirs:.2f}"


def table(results: list[RowResult], runs: int) -> str:
    """The markdown table: medians of `runs` runs per system, and minibroker / mock; an
    Apache Kafka column when a row measured it (the startup rows)."""
    kafka = any(KAFKA in result.row.systems for result in results)
    lines = [
        "| row | workload | metric | minibroker | mock | minibroker / mock |"
        + (" Apache Kafka |" if kafka else ""),
        "|---|---|---|---:|---:|---:|" + ("---:|" if kafka else ""),
    ]
    for result in results:
        for line in result.row.lines:
            lines.append(
                f"| {result.row.name} | {result.row.workload} | {line.metric}"
                f" | {_cell(result, MINIBROKER, line)} | {_cell(result, MOCK, line)}"
                f" | {_ratio(result, line)} |"
                + (f" {_cell(result, KAFKA, line)} |" if kafka else "")
            )
    failures = [
        f"- {result.row.name}, {system}: {message.splitlines()[0]}"
        for result in results
        for system, message in result.failures.items()
    ]
    skips = [
        f"- {result.row.name}, {system} skipped: {message}"
        for result in results
        for system, message in result.skipped.items()
    ]
    text = "\n".join(lines) + "\n"
    if skips:
        text += "\n" + "\n".join(skips) + "\n"
    if failures:
        text += "\nFailures (the full client error and log tails went to stderr):\n\n"
        text += "\n".join(failures) + "\n"
    runs_note = (
        f"Medians of {runs} run{'s' if runs != 1 else ''} per system. A ratio above 1 means"
        " minibroker moves more per second; for latency, times, CPU and memory, below 1 means it"
        " does better."
    )
    return f"{runs_note}\n\n{text}"


def section(command: str, results: list[RowResult], runs: int) -> str:
    described = "\n".join(f"- {key}: {value}" for key, value in machine())
    return f"Command: `{command}`\n\n{described}\n\n{table(results, runs)}"


def write_benchmarks(content: str, path: Path = BENCHMARKS) -> None:
    """Put `content` between the markers, leaving the rest of the file as it was."""
    block = f"{BEGIN_MARKER}\n{content}{END_MARKER}"
    text = path.read_text() if path.exists() else ""
    begin, end = text.find(BEGIN_MARKER), text.find(END_MARKER)
    if begin != -1 and end > begin:
        text = text[:begin] + block + text[end + len(END_MARKER) :]
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + block + "\n"
    path.write_text(text)
