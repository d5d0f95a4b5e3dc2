"""The streams-join row: how long a stateful Kafka Streams 4.4 application stops processing
some of its tasks when a fourth instance joins three, with Kafka Streams' own rebalance
protocol (`group.protocol=streams`, KIP-1071: the broker assigns the tasks) and with the
classic one (`group.protocol=classic`: JoinGroup and SyncGroup, the leader instance's
StreamsPartitionAssignor, cooperative), on a 3-broker cluster.

The application is faults.streams_eos's word count (tests/java/programs/
StreamsGroupInstance.java: a repartition topic, the state store "counts" and its changelog,
at_least_once, a 200 ms commit interval, no record cache, so every input word updates its
count in the output at once), with the group's and the brokers' defaults on both systems
(no standby replicas; Kafka Streams' defaults for the classic protocol's heartbeats, the
broker's streams.heartbeat.interval.ms, 5 s, for the streams protocol's). Input and output
topics have 3 partitions (RF=3): tasks 0_0..0_2 split the lines into words, tasks 1_0..1_2
count them. A producer (confluent-kafka) writes LINES_PER_S lines a second throughout.

The measure. The output topic is created with `message.timestamp.type=LogAppendTime`, so
each output record carries the time the broker appended it. Output partition p holds the
counts of task 1_p (the output and the repartition topic have the same partition count and
Kafka's default partitioner on the same key), and task 1_p only gets input from tasks 0_*,
so a gap in partition p's output is a time when task 1_p, or the tasks upstream of it, did
not process. **Tasks unavailable (s)** is the longest interval between two successive
output records of a partition, over the 3 partitions, among the intervals that end after
the fourth instance's JVM is started and begin before the end of the window: the group
reported 4 members owning every task once (StreamsGroupDescribe for the streams protocol,
DescribeGroups' decoded assignments for the classic one, as `minibroker groups` reads them),
plus Sizes.streams_tail_seconds (10 s; 3 in the smoke run) for a late move. The steady-state
figure beside it, in parentheses, is the same longest interval over the
Sizes.streams_baseline_seconds (10 s; 3) before the fourth instance starts: what the input
rate and the producer's batching give when nothing moves. The figure includes what each
protocol takes to hand a task over (revocation, the new owner's restore of its store from
the changelog), and is what an application would see in its output.

Each measurement runs both protocols, one application each (own topics and group id), on
the same started cluster, streams first; runs alternate between minibroker and Apache
Kafka 4.4 (bench/rows.py). The classic protocol's assignor (HighAvailabilityTaskAssignor)
gives the new instance stateless tasks and warm-up replicas of stateful ones, moving a
stateful task only once its warm-up caught up, at a probing rebalance
(probing.rebalance.interval.ms, 10 minutes, after the window); the streams protocol's
sticky assignor of Kafka 4.4 (minibroker's likewise) moves stateful tasks at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.targets import BenchError
from faults.streams_eos import Instance, compile_program, lines
from minibroker.tools import groups

PROTOCOLS = ("streams", "classic")
LINES_PER_S = 50
PARTITIONS = 3
TASKS = {f"{sub}_{partition}" for sub in (0, 1) for partition in range(PARTITIONS)}
DEADLINE_S = 180.0
_compiled: dict[Path, Callable[..., list[str]]] = {}


def program(work_dir: Path) -> Callable[..., list[str]]:
    """faults.streams_eos's compiled program (javac once per bench work directory)."""
    if work_dir not in _compiled:
        _compiled[work_dir] = compile_program(work_dir / "streams-classes")
    return _compiled[work_dir]


class SteadyProducer:
    """LINES_PER_S lines a second of faults.streams_eos's words to ``topic`` until stopped."""

    def __init__(self, bootstrap: str, topic: str):
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        self.topic = topic
        self.lines = lines(1000, 7)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        sent = 0
        while not self.stopped.is_set():
            due = int((time.monotonic() - started) * LINES_PER_S)
            while sent < due:
                self.producer.produce(
                    self.topic, key=f"line-{sent}", value=self.lines[sent % len(self.lines)]
                )
                sent += 1
            self.producer.poll(0)
            self.stopped.wait(1 / LINES_PER_S)

    def stop(self) -> None:
        """Stop producing (lines still unacknowledged are left: the figures come from the
        output written before)."""
        self.stopped.set()
        self.thread.join()
        self.producer.flush(10)


def _owners(bootstrap: str, app: str) -> tuple[int, dict[str, int]]:
    """(members, task -> how many members own it as active) as the group's coordinator
    answers (`minibroker groups`' describe: StreamsGroupDescribe for a streams group, each
    active task as the partitions it reads; DescribeGroups' decoded assignments for a classic
    one): the input's partition p is task 0_p's, the repartition topic's task 1_p's."""
    try:
        view = groups.describe_group(bootstrap, app, 30)
    except groups.GroupsError:
        return 0, {}
    if view.state.upper() != "STABLE":
        return 0, {}
    owned: dict[str, int] = {}
    for member in view.members:
        for topic, partition in member.assignment or ():
            task = f"{0 if topic == f'in-{app}' else 1}_{partition}"
            owned[task] = owned.get(task, 0) + 1
    return len(view.members), owned


def wait_for_owners(bootstrap: str, app: str, members: int) -> None:
    """Until ``members`` members own every task once (the group Stable)."""
    deadline = time.monotonic() + DEADLINE_S
    found: tuple = (0, {})
    while time.monotonic() < deadline:
        found = _owners(bootstrap, app)
        if found[0] == members and found[1] == dict.fromkeys(TASKS, 1):
            return
        time.sleep(0.5)
    raise BenchError(f"{app}: no {members} members owning every task once: {found}")


def output_times(bootstrap: str, topic: str) -> dict[int, list[int]]:
    """Every record's timestamp (LogAppendTime, ms) per partition of ``topic``, up to its
    end offsets."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"pause-reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        times: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + DEADLINE_S
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            times[message.partition()].append(message.timestamp()[1])
            if message.offset() + 1 >= ends[message.partition()]:
                done.add(message.partition())
        if len(done) < PARTITIONS:
            raise BenchError(f"{topic} not read to its end offsets {ends}")
        return times
    finally:
        consumer.close()


def longest_gap(
    times: dict[int, list[int]], start_ms: float, end_ms: float, inside: bool = False
) -> float:
    """The longest interval (s) between two successive timestamps of a partition that ends
    after ``start_ms`` and begins before ``end_ms`` (with ``inside``: that begins at or after
    ``start_ms`` and ends at or before ``end_ms``, the steady state's)."""
    longest = 0
    for stamps in times.values():
        stamps = sorted(stamps)
        for before, after in zip(stamps, stamps[1:], strict=False):
            if inside:
                counted = before >= start_ms and after <= end_ms
            else:
                counted = after > start_ms and before < end_ms
            if counted:
                longest = max(longest, after - before)
    return longest / 1000


def application_pause(
    bootstrap: str,
    protocol: str,
    app: str,
    work: Path,
    command: Callable[..., list[str]],
    baseline_s: float,
    tail_s: float,
) -> tuple[float, float]:
    """One application, three instances then a fourth: (tasks unavailable s, steady s)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [
        NewTopic(f"in-{app}", PARTITIONS, 3),
        NewTopic(f"out-{app}", PARTITIONS, 3, config={"message.timestamp.type": "LogAppendTime"}),
    ]
    for future in admin.create_topics(topics).values():
        future.result(60)
    producer = SteadyProducer(bootstrap, f"in-{app}")
    instances: list[Instance] = []

    def start() -> None:
        name = f"i{len(instances)}"
        instances.append(Instance(command, bootstrap, app, work / name, "at_least_once", protocol))
        instances[-1].wait_for("RUNNING")

    try:
        for _ in range(3):
            start()
        wait_for_owners(bootstrap, app, 3)
        time.sleep(baseline_s)  # the steady state the baseline is taken from
        joined_ms = time.time() * 1000
        start()
        wait_for_owners(bootstrap, app, 4)
        time.sleep(tail_s)
        window_end_ms = time.time() * 1000
        time.sleep(2)  # so that every partition has a record after the window
        producer.stop()
        for instance in instances:
            instance.stop()
    except RuntimeError as error:
        raise BenchError(f"{protocol}: {error}") from error
    finally:
        producer.stopped.set()
        for instance in instances:
            instance.kill()
    times = output_times(bootstrap, f"out-{app}")
    if not all(times.values()):
        raise BenchError(f"{protocol}: an output partition is empty")
    return (
        longest_gap(times, joined_ms, window_end_ms),
        longest_gap(times, joined_ms - baseline_s * 1000, joined_ms, inside=True),
    )


def streams_join_pause(
    bootstrap: str, work_dir: Path, run: str, baseline_s: float, tail_s: float
) -> dict[str, float]:
    """Both protocols on one started cluster: the row's figures."""
    command = program(work_dir)
    figures: dict[str, float] = {}
    for protocol in PROTOCOLS:
        app = f"join-{protocol}-{run}"
        pause, steady = application_pause(
            bootstrap, protocol, app, work_dir / app, command, baseline_s, tail_s
        )
        figures[f"{protocol}_pause_s"] = pause
        figures[f"{protocol}_steady_s"] = steady
    return figures
