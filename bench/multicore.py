"""What a second core buys minibroker (issue 26): one broker process, against two broker
processes of one cluster on the same machine, against Apache Kafka's single (multi-threaded)
node, runs alternating in one command.

`python -m bench.multicore [--runs 3] [--records 1000000] [--design one|two|kafka ...]`.
Each run starts a fresh target of each design in turn:

- `one`: one minibroker node that is its own controller, as the main table's 1-broker rows.
- `two`: a minibroker cluster of two broker processes and its controller process (the
  launcher's `Cluster`, KRaft style), the topic's 64 partitions created with an explicit
  assignment that gives each broker the leadership of half of them (`split_leaders`), RF=1 so
  that nothing is replicated: the comparison is about CPU, not about replication. kcat gets
  both brokers as bootstrap.
- `kafka`: one Apache Kafka 4 node (KRaft, broker and controller in one JVM), as the main
  table's, with num.network.threads=2 and num.io.threads=2 (bench.kafka_ref).

In each run and for 100 B and 1 KiB records: kcat produces N records with acks=1 and the main
table's produce settings (librdkafka's sticky partitioner: a 10 ms window of records to one
partition, so to one broker, at a time); then N records into a second topic spread evenly
(sticky.partitioning.linger.ms=0, as the main table's consume row prepares its topic, so that
each broker gets half); then consumes that second topic from the beginning (the main table's
consume command). For each step: records/s; the CPU seconds of the broker processes (sum, from
/proc/<pid>/stat, read just before kcat starts and just after it exits) and of the
controller process for `two`; kcat's own CPU seconds (getrusage of the reaped child); and the
whole machine's busy time (/proc/stat), all over kcat's wall time, so that "cores" is CPU
seconds per wall second (2.0 is both cores). For Kafka, its CPU by thread name as well
(/proc/<pid>/task), to show how it spreads its work.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench.procfs import CLOCK_TICKS_PER_SECOND, cpu_seconds
from bench.report import machine
from bench.targets import (
    ADMIN_TIMEOUT,
    BenchError,
    Kafka,
    Minibroker,
    Skipped,
    wait_until_served,
)
from bench.workloads import (
    KCAT_TIMEOUT,
    MB,
    PARTITIONS,
    count_lines,
    end_offsets,
    record_file,
)

ONE = "one"
TWO = "two"
KAFKA = "kafka"
DESIGNS = (ONE, TWO, KAFKA)
DESCRIPTION = {
    ONE: "(a) 1 minibroker process",
    TWO: "(b) 2 minibroker broker processes",
    KAFKA: "(c) Apache Kafka, 1 node",
}
SIZES = (100, 1024)
PRODUCE = "produce"
PRODUCE_EVEN = "produce-even"
CONSUME = "consume"
STEPS = (PRODUCE, PRODUCE_EVEN, CONSUME)
STEP_NAMES = {
    PRODUCE: "produce",
    PRODUCE_EVEN: "produce, spread evenly",
    CONSUME: "consume",
}
# librdkafka's partitioner without stickiness: each record to the next partition's batch.
EVEN = ("sticky.partitioning.linger.ms=0",)
DEFAULT_RUNS = 3
TWO_BROKERS = 2
# Figures that are Kafka's CPU seconds in one group of threads (thread_groups) start with this.
THREAD = "thread:"
TOP_THREAD_GROUPS = 6


def split_leaders(partitions: int, broker_ids: list[int]) -> list[list[int]]:
    """A replica assignment (partition -> [replica]) with replication factor 1 that gives each
    broker the leadership of an equal share of the partitions (shares differing by at most
    one), partition p on broker_ids[p % n]: neighbouring partitions on different brokers, as
    Kafka's own round-robin placement would start them at index 0."""
    if not broker_ids:
        raise ValueError("no brokers to place partitions on")
    return [[broker_ids[partition % len(broker_ids)]] for partition in range(partitions)]


def leader_counts(leaders: list[int]) -> dict[int, int]:
    """How many partitions each broker leads, by broker id."""
    return dict(sorted(Counter(leaders).items()))


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy so far (every core): /proc/stat's first line,
    less idle and iowait."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    # Guest time is counted in user time already.
    return (sum(fields[:8]) - idle) / CLOCK_TICKS_PER_SECOND


def java_thread_names(pid: int) -> dict[int, str]:
    """The Java names of a JVM's threads by their Linux thread id (`jcmd <pid> Thread.print`:
    each thread's line is `"name" #n ... nid=0x<tid> ...`), where /proc's names are cut to 15
    characters (Kafka's network and request handler threads both read "data-plane-kafk"
    there). Empty when jcmd is not there or fails."""
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        return {}
    try:
        printed = subprocess.run(
            [jcmd, str(pid), "Thread.print"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {
        int(match["nid"], 16): match["name"]
        for match in re.finditer(r'^"(?P<name>[^"]*)".*? nid=0x(?P<nid>[0-9a-f]+)', printed, re.M)
    }


def thread_cpu(pid: int, names: dict[int, str] | None = None) -> dict[int, tuple[str, float]]:
    """Each living thread of `pid`: its name (from `names` by thread id, else /proc's comm,
    15 characters at most) and CPU seconds."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # it exited meanwhile
        name = (names or {}).get(int(task.name)) or stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        threads[int(task.name)] = (
            name,
            (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_SECOND,
        )
    return threads


def thread_group(name: str) -> str:
    """A thread name without its numbers: "GC Thread#1" is a "GC Thread", Kafka's
    "data-plane-kafka-network-thread-1-PLAINTEXT-PLAINTEXT-0" a
    "data-plane-kafka-network-thread" and "data-plane-kafka-request-handler-1" a
    "data-plane-kafka-request-handler"."""
    name = re.sub(r"(network-thread)-.*$", r"\1", name)
    return re.sub(r"[#\-_ ]?\d+$", "", name).strip() or name


def thread_groups(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds spent between two thread_cpu readings, by thread group, largest first;
    threads that exited between them are not counted (their time shows only in the process's
    total)."""
    spent: Counter[str] = Counter()
    for tid, (name, seconds) in after.items():
        spent[thread_group(name)] += seconds - before.get(tid, (name, 0.0))[1]
    return {group: seconds for group, seconds in spent.most_common() if seconds > 0}


class Design:
    """A started target of one design, the processes whose CPU counts, and its topics."""

    def __init__(self, design: str, work_dir: Path):
        self.design = design
        self.java_names: dict[int, str] = {}
        self.target: Minibroker | Kafka
        if design == KAFKA:
            self.target = Kafka(1, work_dir)
            self.brokers = {1: self.target.cluster.nodes[0].process.pid}
            self.controller: int | None = None
            # Read once the node is up: its network and request handler threads exist by then.
            self.java_names = java_thread_names(self.brokers[1])
        elif design == TWO:
            self.target = Minibroker(TWO_BROKERS, work_dir)
            self.brokers = {
                node_id: node.pid for node_id, node in self.target.cluster.brokers.items()
            }
            self.controller = self.target.cluster.controller.pid
        else:
            self.target = Minibroker(1, work_dir)
            self.brokers = {1: self.target.node.pid}
            self.controller = None

    def create_topic(self, name: str) -> dict[int, int]:
        """A 64-partition topic, RF=1; for `two`, half the leaders on each broker. Returns the
        partitions each broker leads, as Metadata says once every partition is served."""
        if self.design == TWO:
            # librdkafka wants the partition count with an assignment (and sends -1 on the
            # wire, as Kafka requires).
            topic = NewTopic(
                name, PARTITIONS, replica_assignment=split_leaders(PARTITIONS, sorted(self.brokers))
            )
        else:
            topic = NewTopic(name, PARTITIONS, 1)
        admin = AdminClient({"bootstrap.servers": self.target.bootstrap})
        try:
            admin.create_topics([topic], request_timeout=ADMIN_TIMEOUT)[name].result()
        except Exception as error:
            raise self.target.failure(f"CreateTopics {name}: {error}") from error
        wait_until_served(self.target.bootstrap, name, PARTITIONS, self.target.failure)
        return leader_counts(self.leaders(name))

    def leaders(self, topic: str) -> list[int]:
        admin = AdminClient({"bootstrap.servers": self.target.bootstrap})
        partitions = admin.list_topics(topic, timeout=ADMIN_TIMEOUT).topics[topic].partitions
        return [partitions[index].leader for index in range(PARTITIONS)]

    def largest_share(self, topic: str, count: int) -> float:
        """The largest fraction of `count` records that one broker's partitions of `topic`
        hold, after checking that they hold all of them."""
        ends = end_offsets(self.target, topic)
        if sum(ends) != count:
            raise self.target.failure(f"kcat produced {count} records, end offsets {sum(ends)}")
        held: Counter[int] = Counter()
        for leader, end in zip(self.leaders(topic), ends, strict=True):
            held[leader] += end
        return max(held.values()) / count

    def broker_cpu(self) -> dict[int, float]:
        return {node_id: cpu_seconds(pid) for node_id, pid in self.brokers.items()}

    def threads(self) -> dict[int, tuple[str, float]] | None:
        """Kafka's threads (thread_cpu); None for minibroker, whose CPU is its process's."""
        return thread_cpu(self.brokers[1], self.java_names) if self.design == KAFKA else None

    def controller_cpu(self) -> float:
        return cpu_seconds(self.controller) if self.controller is not None else 0.0

    def close(self) -> None:
        self.target.close()


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_kcat(design: Design, command: list[str], stdin_path: Path | None) -> dict[str, float]:
    """Run one kcat to its exit and measure, over its wall time: the brokers', the
    controller's, kcat's and the machine's CPU seconds. Returns those and, under "lines", the
    records a consuming kcat printed."""
    target = design.target
    with tempfile.TemporaryFile() as stderr, open(stdin_path or os.devnull, "rb") as stdin:
        # Nothing else of this process's children exits while kcat runs (the brokers are
        # reaped only when stopped), so the difference in RUSAGE_CHILDREN is kcat's.
        client_before = children_cpu_seconds()
        machine_before = machine_busy_seconds()
        controller_before = design.controller_cpu()
        brokers_before = design.broker_cpu()
        threads_before = design.threads()
        started = time.monotonic()
        process = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr)
        lines = count_lines(process, started + KCAT_TIMEOUT)
        elapsed = time.monotonic() - started
        brokers_after = design.broker_cpu()
        threads_after = design.threads()
        controller_after = design.controller_cpu()
        machine_after = machine_busy_seconds()
        client_after = children_cpu_seconds()
        process.stdout.close()
        if process.returncode != 0:
            stderr.seek(0)
            raise target.failure(
                f"{shlex.join(command)} exited with {process.returncode}; stderr:\n"
                f"{stderr.read().decode(errors='replace')[-2000:]}"
            )
    figures = {
        "wall_s": elapsed,
        "lines": lines,
        "broker_cpu_s": sum(brokers_after.values()) - sum(brokers_before.values()),
        "controller_cpu_s": controller_after - controller_before,
        "client_cpu_s": client_after - client_before,
        "machine_cpu_s": machine_after - machine_before,
    }
    for node_id in brokers_after:
        figures[f"broker_{node_id}_cpu_s"] = brokers_after[node_id] - brokers_before[node_id]
    if threads_before is not None:
        for group, seconds in thread_groups(threads_before, threads_after).items():
            figures[f"{THREAD}{group}"] = seconds
    return figures


def produce_command(bootstrap: str, topic: str, *settings: str) -> list[str]:
    """bench.workloads.kcat_produce's command: acks=1, linger.ms=5, batch.size=1000000, the
    default (sticky) partitioner unless `settings` say otherwise."""
    return ["kcat", "-b", bootstrap, "-P", "-t", topic,
            "-X", "acks=1", "-X", "linger.ms=5", "-X", "batch.size=1000000",
            *(argument for setting in settings for argument in ("-X", setting))]  # fmt: skip


def consume_command(bootstrap: str, topic: str) -> list[str]:
    """bench.workloads.kcat_consume's command: every partition from the beginning to its end,
    a newline per record."""
    return ["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
            "-f", "\\n"]  # fmt: skip


def measure(design: Design, work_dir: Path, run: int, count: int) -> dict[str, dict[str, float]]:
    """For each size: kcat produces `count` records into a fresh topic with its default
    (sticky) partitioner, as the main table's produce rows; then into a second fresh topic
    spread evenly (as the main table's consume row prepares its topic); then reads the second
    topic from the beginning. Figures by "<step>-<size>", with each step's records/s and the
    largest share of the records that one broker took."""
    results: dict[str, dict[str, float]] = {}
    bootstrap = design.target.bootstrap
    for size in SIZES:
        records = record_file(work_dir, count, size)
        for step, settings in ((PRODUCE, ()), (PRODUCE_EVEN, EVEN)):
            topic = f"multicore-{step}-{size}-{run}"
            leads = design.create_topic(topic)
            if design.design == TWO and sorted(leads.values()) != [PARTITIONS // 2] * 2:
                raise design.target.failure(f"{topic}'s leaders are not split evenly: {leads}")
            figures = run_kcat(design, produce_command(bootstrap, topic, *settings), records)
            figures["max_broker_share"] = design.largest_share(topic, count)
            results[f"{step}-{size}"] = figures
        figures = run_kcat(design, consume_command(bootstrap, topic), None)
        if figures["lines"] != count:
            raise design.target.failure(f"kcat read {figures['lines']} of {count} records")
        figures["max_broker_share"] = results[f"{PRODUCE_EVEN}-{size}"]["max_broker_share"]
        results[f"{CONSUME}-{size}"] = figures
        for step in STEPS:
            figures = results[f"{step}-{size}"]
            figures["records_per_s"] = count / figures["wall_s"]
            figures["mb_per_s"] = count * size / figures["wall_s"] / MB
    return results


def median_figures(runs: list[dict[str, float]]) -> dict[str, float]:
    """The median of each figure, taken separately; a figure missing from a run (a thread
    group that did not run in it) counts as 0 there."""
    keys = {key for run in runs for key in run}
    return {key: statistics.median(run.get(key, 0.0) for run in runs) for key in sorted(keys)}


def cores(figures: dict[str, float], key: str) -> float:
    return figures[key] / figures["wall_s"]


def report(
    medians: dict[str, dict[str, dict[str, float]]],
    count: int,
    runs: int,
) -> str:
    """The table (medians of every figure, each taken separately) and Kafka's threads."""
    lines = [
        f"Medians of {runs} runs per design, runs alternating; {count:,} records per step."
        " cores = CPU seconds / kcat's wall seconds (2.0 = both cores of this machine).",
        "",
        "| step | design | records/s (MB/s) | / (a) | broker CPU s (cores) | kcat CPU s (cores)"
        " | machine busy cores | broker + kcat cores |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for size in SIZES:
        for step in STEPS:
            key = f"{step}-{size}"
            reference = medians.get(ONE, {}).get(key)
            for design in DESIGNS:
                figures = medians.get(design, {}).get(key)
                if figures is None:
                    continue
                ratio = (
                    f"{figures['records_per_s'] / reference['records_per_s']:.2f}"
                    if reference
                    else "n/a"
                )
                broker = f"{figures['broker_cpu_s']:.2f} ({cores(figures, 'broker_cpu_s'):.2f})"
                if design == TWO:
                    broker += (
                        f"; per broker {figures['broker_1_cpu_s']:.2f} /"
                        f" {figures['broker_2_cpu_s']:.2f}; controller"
                        f" {figures['controller_cpu_s']:.2f}"
                    )
                together = cores(figures, "broker_cpu_s") + cores(figures, "client_cpu_s")
                lines.append(
                    f"| {STEP_NAMES[step]} {size} B | {DESCRIPTION[design]}"
                    f" | {figures['records_per_s']:,.0f} ({figures['mb_per_s']:.1f}) | {ratio}"
                    f" | {broker}"
                    f" | {figures['client_cpu_s']:.2f} ({cores(figures, 'client_cpu_s'):.2f})"
                    f" | {cores(figures, 'machine_cpu_s'):.2f} | {together:.2f} |"
                )
    two = medians.get(TWO)
    if two:
        shares = ", ".join(
            f"{STEP_NAMES[step]} {size} B {two[f'{step}-{size}']['max_broker_share']:.0%}"
            for size in SIZES
            for step in (PRODUCE, PRODUCE_EVEN)
        )
        lines += ["", f"(b): the larger broker's share of the records (median): {shares}."]
    kafka = medians.get(KAFKA)
    if kafka:
        lines += [
            "",
            f"(c) Apache Kafka's CPU seconds by thread (JVM thread names, numbers dropped;"
            f" medians; the top {TOP_THREAD_GROUPS}):",
            "",
        ]
        for size in SIZES:
            for step in STEPS:
                figures = kafka[f"{step}-{size}"]
                groups = sorted(
                    ((key[len(THREAD) :], value) for key, value in figures.items()
                     if key.startswith(THREAD)),
                    key=lambda item: -item[1],
                )[:TOP_THREAD_GROUPS]  # fmt: skip
                lines.append(
                    f"- {STEP_NAMES[step]} {size} B: "
                    + ", ".join(f"{name} {seconds:.2f}" for name, seconds in groups)
                )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.multicore", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument(
        "--design",
        action="append",
        choices=DESIGNS,
        help=f"measure only this design (repeatable; default: {', '.join(DESIGNS)})",
    )
    arguments = parser.parse_args()
    designs = [design for design in DESIGNS if design in (arguments.design or DESIGNS)]
    command = shlex.join(["python", "-m", "bench.multicore", *sys.argv[1:]])
    described = machine()
    load_before = os.getloadavg()
    collected: dict[str, list[dict[str, dict[str, float]]]] = {design: [] for design in designs}
    with tempfile.TemporaryDirectory(prefix="bench-multicore-") as work:
        work_dir = Path(work)
        for size in SIZES:
            record_file(work_dir, arguments.records, size)
        for run in range(arguments.runs):
            for name in list(designs):
                try:
                    design = Design(name, work_dir)
                except Skipped as why:
                    print(f"{name} skipped: {why}", file=sys.stderr)
                    designs.remove(name)
                    continue
                try:
                    figures = measure(design, work_dir, run, arguments.records)
                finally:
                    design.close()
                collected[name].append(figures)
                for key, step in figures.items():
                    print(
                        f"run {run + 1}/{arguments.runs} {name} {key}:"
                        f" {step['records_per_s']:,.0f} records/s,"
                        f" broker {step['broker_cpu_s']:.2f} CPU s,"
                        f" kcat {step['client_cpu_s']:.2f} CPU s,"
                        f" machine {step['machine_cpu_s']:.2f} CPU s in {step['wall_s']:.2f} s,"
                        f" load {os.getloadavg()[0]:.1f}",
                        file=sys.stderr,
                    )
            # The table so far after every run, so that a run cut short leaves its figures.
            print_results(command, described, load_before, collected, arguments.records)
    return 0


def print_results(
    command: str,
    described: list[tuple[str, str]],
    load_before: tuple[float, float, float],
    collected: dict[str, list[dict[str, dict[str, float]]]],
    count: int,
) -> None:
    """The command, the machine, the load average and the table of the runs so far."""
    runs = min((len(runs) for runs in collected.values() if runs), default=0)
    medians = {
        design: {key: median_figures([run[key] for run in runs]) for key in runs[0]}
        for design, runs in collected.items()
        if runs
    }
    lines = [f"Command: `{command}`", ""]
    lines += [f"- {key}: {value}" for key, value in described]
    lines.append(
        "- load average (1, 5, 15 min) before: "
        + ", ".join(f"{value:.2f}" for value in load_before)
        + "; now: "
        + ", ".join(f"{value:.2f}" for value in os.getloadavg())
    )
    print("\n".join([*lines, "", report(medians, count, runs), ""]), flush=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as error:
        print(f"FAILED: {error}", file=sys.stderr)
        sys.exit(1)
