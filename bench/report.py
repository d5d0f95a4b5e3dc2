"""The table, the machine it was measured on, and its place in the benchmarks page of the
documentation site (docs/benchmarks/index.md, BENCHMARKS below).

The page belongs to people too (the methodology, the step-by-step performance history);
the harness rewrites only what lies between its two markers, and appends them at the end the
first time.
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import re
import subprocess
from pathlib import Path

import confluent_kafka

from bench.kafka_ref import JVM_OPTIONS, KAFKA_HEAP
from bench.rows import CONSUMER, SPARK_KAFKA, Line, RowResult
from bench.targets import KAFKA, MINIBROKER, MOCK

BEGIN_MARKER = "<!-- bench:begin (written by python -m bench; edits here are overwritten) -->"
END_MARKER = "<!-- bench:end -->"
# A warm run's table (`python -m bench --warm`) has a block of its own, so that it never
# replaces the main table: the two answer different questions.
WARM_BEGIN_MARKER = (
    "<!-- bench:warm:begin (written by python -m bench --warm; edits here are overwritten) -->"
)
WARM_END_MARKER = "<!-- bench:warm:end -->"
REPOSITORY = Path(__file__).resolve().parent.parent
BENCHMARKS = REPOSITORY / "docs" / "benchmarks" / "index.md"
# The chart of the main table, shown on that page.
CHART = BENCHMARKS.with_name("benchmarks.png")


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


def _kafka() -> str:
    """The Kafka jar java/fetch.sh resolved, and how its JVMs run."""
    try:
        from bench.kafka_ref import classpath

        jars = classpath("kafka").split(":")
    except FileNotFoundError as missing:
        return f"not available ({missing})"
    found = [Path(jar).name for jar in jars if re.match(r"kafka_2\.\d+-", Path(jar).name)]
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    java_line = java.splitlines()[0] if java else "java ?"
    return (
        f"{found[0] if found else 'kafka (jar not found in the class path)'}, KRaft, {java_line},"
        f" {KAFKA_HEAP} {' '.join(JVM_OPTIONS)}, num.network.threads=2 num.io.threads=2"
    )


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
        ("Apache Kafka", _kafka()),
    ]


def _cell(result: RowResult, system: str, line: Line) -> str:
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


def ratio(result: RowResult, line: Line, reference: str) -> float | None:
    """minibroker's median over `reference`'s, or None when either is missing."""
    ours, theirs = result.median(MINIBROKER, line.key), result.median(reference, line.key)
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


def format_ratio(value: float | None) -> str:
    """A ratio as the tables show it: two decimals, or two significant digits below 0.1.

    A ratio far below 1 (the first rebalance: 0.03 s against the mock's 12 s) must not read as
    "0.00", which looks like a missing figure."""
    if value is None:
        return "n/a"
    decimals = 2
    if value != 0 and abs(value) < 0.1:
        decimals = 1 - math.floor(math.log10(abs(value)))
    return f"{value:.{decimals}f}"


def _ratio(result: RowResult, line: Line, reference: str) -> str:
    return format_ratio(ratio(result, line, reference))


# Issue 26's targets, as minibroker / Apache Kafka in the same run: the metric's key, whether
# the ratio must be at least or at most the bound, and the bound.
KAFKA_TARGETS: dict[str, tuple[str, float]] = {
    "records_per_s": (">=", 1.0),
    "java_records_per_s": (">=", 1.0),
    "read_committed_rps": (">=", 1.0),
    "cpu_s_per_gb": ("<=", 1.0),
    "p99_ms": ("<=", 1.0),
    "usable_s": ("<=", 0.2),
    "peak_rss_mib": ("<=", 0.25),
    "failover_s": ("<=", 1.0),
    # Issue 36's: a Kafka Streams application's tasks unavailable no longer than on Kafka.
    "streams_pause_s": ("<=", 1.0),
    "classic_pause_s": ("<=", 1.0),
    # Issue 35's: records/s through one partition shared by 1, 2 and 4 share consumers.
    "share_1_rps": (">=", 1.0),
    "share_2_rps": (">=", 1.0),
    "share_4_rps": (">=", 1.0),
}


def kafka_targets(results: list[RowResult]) -> str:
    """Issue 26's targets against Apache Kafka, for the rows of this run that have one ("" when
    none has)."""
    lines = [
        "| row | metric | minibroker / Kafka | target | |",
        "|---|---|---:|---:|---|",
    ]
    for result in results:
        for line in result.row.lines:
            if line.key not in KAFKA_TARGETS:
                continue
            bound_kind, bound = KAFKA_TARGETS[line.key]
            value = ratio(result, line, KAFKA)
            if value is None:
                verdict = "not measured"
            elif (value >= bound) if bound_kind == ">=" else (value <= bound):
                verdict = "met"
            else:
                verdict = "**missed**"
            shown = format_ratio(value)
            lines.append(
                f"| {result.row.name} | {line.metric} | {shown} | {bound_kind} {bound:g} |"
                f" {verdict} |"
            )
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


# Issue 22's targets for the Spark rows: (row, metric key, reference) -> the bound on
# minibroker's source over the reference in the same run.
SPARK_TARGETS: dict[tuple[str, str, str], tuple[str, float]] = {
    ("spark-count", "rows_per_s", SPARK_KAFKA): (">=", 1.0),
    ("spark-count", "rows_per_s", CONSUMER): (">=", 1.0),
    ("spark-parquet", "rows_per_s", SPARK_KAFKA): (">=", 1.0),
    ("spark-latency", "median_ms", SPARK_KAFKA): ("<=", 1.0),
}
SPARK_NAMES = {SPARK_KAFKA: "Spark's connector", CONSUMER: "one consumer"}


def spark_table(results: list[RowResult]) -> str:
    """The Spark rows: minibroker's source, Spark's connector and one plain consumer on the same
    topic, the source's ratios to both, then issue 22's targets ("" when no Spark row ran)."""
    spark = [result for result in results if result.row.spark]
    if not spark:
        return ""
    lines = [
        "| row | workload | metric | minibroker's source | Spark's connector | one consumer"
        " | source / connector | source / consumer |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    targets = [
        "| row | metric | minibroker's source / | ratio | target | |",
        "|---|---|---|---:|---:|---|",
    ]
    for result in spark:
        for line in result.row.lines:
            lines.append(
                f"| {result.row.name} | {result.row.workload} | {line.metric}"
                f" | {_cell(result, MINIBROKER, line)} | {_cell(result, SPARK_KAFKA, line)}"
                f" | {_cell(result, CONSUMER, line)} | {_ratio(result, line, SPARK_KAFKA)}"
                f" | {_ratio(result, line, CONSUMER)} |"
            )
            for reference in (SPARK_KAFKA, CONSUMER):
                bound = SPARK_TARGETS.get((result.row.name, line.key, reference))
                if bound is None:
                    continue
                value = ratio(result, line, reference)
                if value is None:
                    verdict = "not measured"
                elif (value >= bound[1]) if bound[0] == ">=" else (value <= bound[1]):
                    verdict = "met"
                else:
                    verdict = "**missed**"
                shown = format_ratio(value)
                targets.append(
                    f"| {result.row.name} | {line.metric} | {SPARK_NAMES[reference]} | {shown}"
                    f" | {bound[0]} {bound[1]:g} | {verdict} |"
                )
    return (
        "Spark (issue 22), medians per system; all three read the same topic on one minibroker"
        " broker in the same run:\n\n"
        + "\n".join(lines)
        + "\n\nIssue 22's targets, minibroker's source against each in this run:\n\n"
        + "\n".join(targets)
        + "\n"
    )


def warm_note(warmups: int, left_out: dict[str, str]) -> str:
    """What a warm run did before each measurement, and the rows it left out ("" when the run
    was not warm)."""
    if not warmups:
        return ""
    times = "once" if warmups == 1 else f"{warmups} times"
    note = (
        f"**Warm run** (`--warm`): before each timed measurement the row's workload ran {times},"
        " untimed, on the same started system (every system: minibroker, the mock and Apache"
        " Kafka), with the same clients and data, into a topic of its own made like the"
        " measured one (the produce rows' warm-up is kcat's part: the Java producer's figure"
        " follows kcat's records on the same broker in every run, warm or not). The figures are"
        " the timed run's alone: CPU per GB counts only it; peak RSS is the high-water mark of"
        " the whole life of the process, warm-up included.\n"
    )
    if left_out:
        note += "\nLeft out of a warm run:\n\n" + "".join(
            f"- {name}: {why}\n" for name, why in left_out.items()
        )
    return note + "\n"


def table(
    results: list[RowResult], runs: int, warmups: int = 0, left_out: dict[str, str] | None = None
) -> str:
    """The markdown table: medians of `runs` runs per system, minibroker / mock and
    minibroker / Apache Kafka; then issue 26's targets against Kafka; then the Spark rows'
    table of their own (spark_table). A warm run (`warmups` untimed runs before each
    measurement) says so above the table, with the rows it left out."""
    spark = spark_table(results)
    broker = [result for result in results if not result.row.spark]
    lines = [
        "| row | workload | metric | minibroker | mock | Apache Kafka | minibroker / mock"
        " | minibroker / Kafka |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for result in broker:
        for line in result.row.lines:
            lines.append(
                f"| {result.row.name} | {result.row.workload} | {line.metric}"
                f" | {_cell(result, MINIBROKER, line)} | {_cell(result, MOCK, line)}"
                f" | {_cell(result, KAFKA, line)} | {_ratio(result, line, MOCK)}"
                f" | {_ratio(result, line, KAFKA)} |"
            )
    failures = [
        f"- {result.row.name}, {system}: {message.splitlines()[0]}"
        for result in results
        for system, message in result.failures.items()
    ]
    # The same reason for many rows (Kafka left out of a smoke run) is said once.
    reasons: dict[tuple[str, str], list[str]] = {}
    for result in results:
        for system, message in {**result.skipped, **result.not_served}.items():
            reasons.setdefault((system, message.splitlines()[0]), []).append(result.row.name)
    skips = [
        f"- {system}, {', '.join(names)}: {message}" for (system, message), names in reasons.items()
    ]
    text = "\n".join(lines) + "\n" if broker else ""
    if spark:
        text += ("\n" if text else "") + spark
    if skips:
        text += "\nNot measured:\n\n" + "\n".join(skips) + "\n"
    if failures:
        text += "\nFailures (the full client error and log tails went to stderr):\n\n"
        text += "\n".join(failures) + "\n"
    targets = kafka_targets(broker)
    if targets and any(KAFKA in result.row.systems for result in broker):
        text += (
            "\nIssue 26's targets (and issue 36's, streams-join; issue 35's, share-consume),"
            " minibroker / Apache Kafka in this run:\n\n" + targets
        )
    runs_note = (
        f"Medians of {runs} run{'s' if runs != 1 else ''} per system, runs alternating between"
        " systems. A ratio above 1 means minibroker moves more per second; for latency, times,"
        " CPU and memory, below 1 means it does better."
    )
    return f"{warm_note(warmups, left_out or {})}{runs_note}\n\n{text}"


def section(
    command: str,
    results: list[RowResult],
    runs: int,
    described_machine: list[tuple[str, str]] | None = None,
    warmups: int = 0,
    left_out: dict[str, str] | None = None,
) -> str:
    """The command, the machine (as described at the run's start, when given: the date and
    the commit measured) and the table."""
    described = "\n".join(f"- {key}: {value}" for key, value in (described_machine or machine()))
    return f"Command: `{command}`\n\n{described}\n\n{table(results, runs, warmups, left_out)}"


def write_benchmarks(content: str, path: Path = BENCHMARKS, warm: bool = False) -> None:
    """Put `content` between the markers (a warm run's: between the warm ones), leaving the
    rest of the file as it was; a file without them gets them appended at the end."""
    begin_marker, end_marker = (
        (WARM_BEGIN_MARKER, WARM_END_MARKER) if warm else (BEGIN_MARKER, END_MARKER)
    )
    block = f"{begin_marker}\n{content}{end_marker}"
    text = path.read_text() if path.exists() else ""
    begin, end = text.find(begin_marker), text.find(end_marker)
    if begin != -1 and end > begin:
        text = text[:begin] + block + text[end + len(end_marker) :]
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + block + "\n"
    path.write_text(text)
