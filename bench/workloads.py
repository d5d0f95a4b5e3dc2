"""The workloads, each run against one fresh target and returning its figures.

The load comes from librdkafka, a C client, so that the client is not what limits a Python
broker: kcat for bulk produce and consume (it reads a prepared file, so nothing is generated
while the clock runs), confluent-kafka for the paced latency producer and its consumer.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import queue
import string
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from bench import java_producer
from bench.targets import MOCK, BenchError, Kafka, Minibroker, Mock

PARTITIONS = 64
KCAT_TIMEOUT = 600.0
CONSUMER_TIMEOUT = 10.0
LATENCY_DRAIN_TIMEOUT = 10.0
LATENCY_RECORD_BYTES = 1000
MOCK_FETCH_WAIT_MS = 5
# kcat's fetch.wait.max.ms when it reads a topic to its end (kcat_consume).
KCAT_FETCH_WAIT_MS = 10
POLL_SECONDS = 0.05
GROUP_START_TIMEOUT = 30.0
GROUP_REBALANCE_TIMEOUT = 120.0
GROUP_CLOSE_TIMEOUT = 15.0
# Records a group may read between a member's assign and its pause (see group_consume).
MAX_EARLY_FRACTION = 0.01
MB = 1_000_000
GB = 1_000_000_000
READ_CHUNK = 1 << 20
LINES_PER_WRITE = 4096
# Every byte value maps to a letter: random bytes become random printable records, no newlines.
LETTERS = bytes(
    string.ascii_letters[value % len(string.ascii_letters)].encode()[0] for value in range(256)
)

Target = Minibroker | Mock | Kafka


@dataclass(frozen=True)
class Sizes:
    """How much each workload moves; the real run and the smoke run differ only here."""

    produce_records: int
    consume_records: int
    resources_records: int
    restart_records: int
    group_consume_records: int
    tls_records: int
    latency_seconds: float
    latency_warmup_seconds: float
    # The share-consume row: records read by each share group and by the classic group. The
    # mock keeps about 5 MiB per partition (bench.mock_host), and the share groups read one
    # partition: 40,000 x 100 B (4.3 MB with the batches' overhead) fit.
    share_records: int = 40_000
    # The transactional rows (bench/transactions.py).
    txn_records: int = 1_000_000
    # The Spark rows (bench/spark_read.py): records read, streaming latency probes per run.
    spark_records: int = 1_000_000
    spark_probes: int = 10
    # minibroker's nodes forked from the fork server (minibroker.tools.forkserver, the tests'
    # way), its imports paid once, instead of a new interpreter per target: 1.3-1.5 s saved
    # per single node and about 5 s per 3-broker cluster, which was a third of the smoke
    # run's time. What a row measures does not change: the fork runs the same `minibroker
    # serve`. Rows that measure the process itself (its start, its memory) never fork:
    # Row.fresh_process.
    fork_brokers: bool = False
    # Whether the group rows (group-consume, first-rebalance) measure the mock: its built-in
    # 3 s initial delay (12 s when a member misses the window, as in one CI run) was the
    # longest wait of the smoke run, and says nothing about the harness that minibroker's run
    # does not.
    mock_rebalance: bool = True
    # Partitions of every row's topic. The smoke run's 8 keep every workload's shape (more
    # partitions than group members, transactions spread over 4 of them) while sparing it
    # most of the partition creation and clean-stop flushes that 64 cost (about 12 ms per
    # partition each way on these machines, a third of its time).
    partitions: int = PARTITIONS
    # Partitions of the internal topics (__consumer_offsets, __transaction_state) on the
    # broker of every single-node row (the 3-broker rows use neither), None for the broker's
    # default (50, as Kafka's): the smoke run's 8 spare the transactional and group rows the
    # creation of 50 at their first client (about 12 ms each here, as for any partition).
    internal_partitions: int | None = None
    # The streams-join row (bench/streams_pause.py): the seconds of steady state its
    # baseline is taken from before the 4th instance starts, and the seconds it watches
    # after the group reported the 4 members owning every task.
    streams_baseline_seconds: float = 10.0
    streams_tail_seconds: float = 10.0


def record_file(work_dir: Path, count: int, size: int) -> Path:
    """A file of `count` lines of `size` random letters each, made once per shape: kcat -P
    sends each line as one record. No compression is configured on either side, and random
    content would keep any that got turned on from flattering one of them."""
    path = work_dir / f"records-{count}x{size}.txt"
    if not path.exists():
        with open(path, "wb") as out:
            for first in range(0, count, LINES_PER_WRITE):
                lines = min(LINES_PER_WRITE, count - first)
                letters = os.urandom(lines * size).translate(LETTERS)
                out.write(
                    b"".join(
                        letters[line * size : (line + 1) * size] + b"\n" for line in range(lines)
                    )
                )
    return path


def kcat_produce(
    target: Target,
    topic: str,
    records: Path,
    count: int,
    acks: str,
    *settings: str,
    bootstrap: str | None = None,
) -> float:
    """Seconds from kcat's start to its exit, every record acknowledged (checked afterwards,
    off the clock, by the partitions' end offsets). `bootstrap` (with `settings` to match)
    sends through another listener than the target's plaintext one."""
    command = [
        "kcat",
        "-b",
        bootstrap or target.bootstrap,
        "-P",
        "-t",
        topic,
        "-X",
        f"acks={acks}",
        "-X",
        "linger.ms=5",
        # librdkafka's default, spelled out so that a change of defaults cannot move the figures.
        "-X",
        "batch.size=1000000",
        *(argument for setting in settings for argument in ("-X", setting)),
    ]
    with open(records, "rb") as stdin:
        started = time.monotonic()
        try:
            finished = subprocess.run(
                command, stdin=stdin, capture_output=True, timeout=KCAT_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired as timeout:
            raise target.failure(
                f"{' '.join(command)} still running after {KCAT_TIMEOUT}s; stderr:\n"
                f"{(timeout.stderr or b'').decode(errors='replace')[-2000:]}"
            ) from None
        elapsed = time.monotonic() - started
    if finished.returncode != 0:
        raise target.failure(
            f"{' '.join(command)} exited with {finished.returncode}; stderr:\n"
            f"{finished.stderr.decode(errors='replace')[-2000:]}"
        )
    stored = sum(end_offsets(target, topic))
    if stored != count:
        raise target.failure(
            f"kcat produced {count} records to {topic} but the end offsets add up to {stored};"
            f" kcat stderr:\n{finished.stderr.decode(errors='replace')[-2000:]}"
        )
    return elapsed


def count_lines(process: subprocess.Popen, deadline: float) -> int:
    """The lines a kcat prints on its stdout pipe until it exits (read in large chunks, never
    decoded), killed if it is still printing at `deadline` (monotonic); waits for its exit."""
    lines = 0
    while chunk := process.stdout.read1(READ_CHUNK):
        lines += chunk.count(b"\n")
        if time.monotonic() > deadline:
            process.kill()
            break
    process.wait()
    return lines


def kcat_consume(
    target: Target, topic: str, *settings: str, bootstrap: str | None = None
) -> tuple[float, int]:
    """Seconds for kcat to read every partition from the beginning to the end, and the number
    of records it printed: one line each, and only a newline (`-f '\\n'`) so that the pipe to
    this process carries as little as possible. `bootstrap` and `settings` as for
    kcat_produce.

    kcat's fetch.wait.max.ms is KCAT_FETCH_WAIT_MS, not librdkafka's 500: kcat -e stops once
    every partition reports its end, which librdkafka learns from an empty fetch answer, and
    a broker holds that answer for the whole wait, whatever the system. With 500, each read
    ended with half a second of nothing. Reading from one minibroker broker: 0.54 s against
    0.05 s for 20,000 x 100 B in 8 partitions (the smoke run's size), and a median of 1.22 s
    against 0.76 s for 1,000,000 x 100 B in 64 (the full run's consume row; three reads
    each, alternating): a fixed cost on every system that pulled their read figures, and
    the ratios between them, toward each other. While data flows the wait does not matter:
    a fetch is answered as soon as there is a byte to return."""
    command = [
        "kcat",
        "-b",
        bootstrap or target.bootstrap,
        "-C",
        "-t",
        topic,
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        "\\n",
        "-X",
        f"fetch.wait.max.ms={KCAT_FETCH_WAIT_MS}",
        *(argument for setting in settings for argument in ("-X", setting)),
    ]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = count_lines(process, started + KCAT_TIMEOUT)
    elapsed = time.monotonic() - started
    stderr = process.stderr.read().decode(errors="replace")
    process.stdout.close()
    process.stderr.close()
    if process.returncode != 0:
        raise target.failure(
            f"{' '.join(command)} exited with {process.returncode} after {lines} records;"
            f" stderr:\n{stderr[-2000:]}"
        )
    return elapsed, lines


def new_consumer(target: Target, topic: str, **settings: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": target.bootstrap,
            # The constructor insists on a group id; assign() without commits never talks to a
            # group coordinator, which minibroker does not offer yet.
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            **settings,
        }
    )


def end_offsets(target: Target, topic: str) -> list[int]:
    """Each partition's high watermark, asked of the leaders (not a cached value)."""
    consumer = new_consumer(target, topic)
    try:
        return [
            consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=CONSUMER_TIMEOUT, cached=False
            )[1]
            for partition in range(target.topics[topic])
        ]
    except Exception as error:
        raise target.failure(f"ListOffsets on {topic}: {error}") from error
    finally:
        consumer.close()


def produce_throughput(
    target: Target,
    topic: str,
    records: Path,
    count: int,
    size: int,
    acks: str,
    replication_factor: int = 1,
    configs: dict[str, str] | None = None,
    java: bool = False,
) -> dict[str, float]:
    """kcat producing the prepared records, then (with `java`, when a JVM and Kafka's jars are
    here) the Java client's ProducerPerformance producing as many of the same size to a second
    topic made like the first (bench.java_producer). Not on the mock: the Java producer never gets
    past its first Metadata there (it waits in ProducerMetadata.awaitUpdate until
    max.block.ms, 60 s, and gives up)."""
    seconds = kcat_produce(target, topic, records, count, acks)
    figures = {"records_per_s": count / seconds, "mb_per_s": count * size / seconds / MB}
    if java and java_producer.unavailable() is None and not isinstance(target, Mock):
        java_topic = f"{topic}-java"
        target.create_topic(java_topic, target.topics[topic], replication_factor, configs or {})
        try:
            rate = java_producer.java_produce(target.bootstrap, java_topic, count, size, acks)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            raise target.failure(f"the Java producer on {java_topic}: {error}") from error
        stored = sum(end_offsets(target, java_topic))
        if stored != count:
            raise target.failure(
                f"ProducerPerformance sent {count} records to {java_topic} but the end offsets"
                f" add up to {stored}"
            )
        figures["java_records_per_s"] = rate
        figures["java_mb_per_s"] = rate * size / MB
    return figures


def consume_throughput(
    target: Target, topic: str, records: Path, count: int, size: int
) -> dict[str, float]:
    """kcat reading the whole topic from the beginning, after an untimed produce.

    The produce spreads records evenly (no sticky partitioning): by default librdkafka sends
    every record of a 10 ms window to one random partition, several MB at these rates, and
    the mock, which keeps only 5 MiB per partition, then drops the oldest records of the
    partitions that drew several windows (it served 808,335 of 1,000,000 that way).
    """
    kcat_produce(target, topic, records, count, "1", "sticky.partitioning.linger.ms=0")
    seconds, read = kcat_consume(target, topic)
    if read != count:
        raise target.failure(f"kcat read {read} of the {count} records of {topic}")
    return {"records_per_s": count / seconds, "mb_per_s": count * size / seconds / MB}


def resource_usage(
    target: Target, topic: str, records: Path, count: int, size: int
) -> dict[str, float]:
    """CPU seconds per GB moved (produced plus consumed) and the peak RSS afterwards.

    The mock keeps only about 5 MiB per partition, so it serves fewer records back than it
    took; the bytes it actually served are what count for it.
    """
    before = target.usage()
    kcat_produce(target, topic, records, count, acks="1")
    _, read = kcat_consume(target, topic)
    after = target.usage()
    moved = (count + read) * size
    return {
        "cpu_s_per_gb": (after.cpu_seconds - before.cpu_seconds) / (moved / GB),
        "peak_rss_mib": after.peak_rss_bytes / (1 << 20),
    }


def restart_time(
    target: Target, topic: str, records: Path, count: int, size: int
) -> dict[str, float]:
    """Seconds from a restart's launch until every partition is served again, after `count`
    records were produced and the node was stopped cleanly (SIGTERM). minibroker and Kafka
    have a restart to measure; the mock keeps its data in its process's memory."""
    if not isinstance(target, Minibroker | Kafka):
        raise target.failure("the mock has no log to restart from")
    kcat_produce(target, topic, records, count, "1")
    log_bytes = target.log_bytes()
    seconds, served = target.restart_until_served(topic, target.topics[topic])
    if served != count:
        raise target.failure(f"after the restart {topic} serves {served} of {count} records")
    return {"restart_s": seconds, "log_gb": log_bytes / GB}


def percentile(ordered: list[int], fraction: float) -> int:
    """Nearest-rank percentile of an ascending list."""
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@dataclass(frozen=True)
class Neighbour:
    """A second producer on the same target during a latency run (the `latency-noisy` row):
    `rate_bytes` per second of `record_bytes` records, acks=1, batched over `linger_ms`, to a
    topic of its own with as many partitions as the measured one (replication factor 1: the
    row has one broker)."""

    rate_bytes: float
    record_bytes: int
    linger_ms: float


def latency_producer(
    target: Target,
    topic: str,
    rate: float,
    size: int,
    stderr: IO[str],
    *,
    seconds: float | None = None,
    acks: str = "1",
    linger_ms: float | None = None,
) -> subprocess.Popen[str]:
    """A `bench.latency_producer` process (until SIGTERM when `seconds` is None)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.latency_producer",
            target.bootstrap,
            topic,
            f"--rate={rate}",
            f"--size={size}",
            f"--acks={acks}",
            *([] if seconds is None else [f"--seconds={seconds}"]),
            *([] if linger_ms is None else [f"--linger-ms={linger_ms}"]),
        ],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


@contextlib.contextmanager
def noisy_neighbour(target: Target, topic: str, neighbour: Neighbour | None):
    """Run `neighbour` (nothing when None) for the duration of the block, into `topic`-noise;
    after the block it is stopped (SIGTERM), and must have had every record it sent
    acknowledged, and sent some."""
    if neighbour is None:
        yield
        return
    noise = f"{topic}-noise"
    target.create_topic(noise, target.topics[topic], 1, {})
    with tempfile.TemporaryFile(mode="w+") as stderr:
        process = latency_producer(
            target,
            noise,
            neighbour.rate_bytes / neighbour.record_bytes,
            neighbour.record_bytes,
            stderr,
            linger_ms=neighbour.linger_ms,
        )
        try:
            yield
        except BaseException:
            process.kill()
            process.communicate()
            raise
        process.terminate()
        delivered = producer_result(process, stderr, target)
        if not delivered:
            raise target.failure("the noisy neighbour had no record acknowledged")


def end_to_end_latency(
    target: Target,
    topic: str,
    rate_bytes: float,
    seconds: float,
    warmup_seconds: float,
    acks: str = "1",
    neighbour: Neighbour | None = None,
) -> dict[str, float]:
    """Produce-to-consume latency at a fixed rate: a paced producer in its own process
    (`bench.latency_producer`) writes its send time into each value; a consumer here, assigned
    to every partition, subtracts it from the time the record reached the application.

    Records sent during the first `warmup_seconds` are left out: connections and the first
    fetches are being set up then. `acks` is the latency producer's ("all" on the replicated
    row); with a `neighbour`, another producer writes bulk batches to another topic of the
    same target from before the consumer's warm-up until every latency record has arrived.

    The consumer keeps librdkafka's fetch.wait.max.ms (500) against minibroker, as a Kafka
    user would: a broker must answer a waiting fetch as soon as data arrives. The mock never
    does (it holds an empty fetch for the whole wait, as its source says), so against the mock
    the wait is 5 ms: its figures then measure its data path, plus up to 5 ms, instead of a
    shortcut it took. Shorter waits only made it busier on these 2 cores (p99 got worse).
    """
    settings = {"fetch.wait.max.ms": MOCK_FETCH_WAIT_MS} if target.system == MOCK else {}
    with noisy_neighbour(target, topic, neighbour):
        consumer = new_consumer(target, topic, **settings)
        try:
            partitions = range(target.topics[topic])
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            # The consumer is fetching before the first record is sent (for as long as the
            # records left out at the start: 1 s in the full run).
            warm_until = time.monotonic() + warmup_seconds
            while time.monotonic() < warm_until:
                consumer.poll(POLL_SECONDS)
            rate = rate_bytes / LATENCY_RECORD_BYTES
            # A file, not a pipe, for its stderr: librdkafka may log more than a pipe holds
            # while nobody reads it, and a blocked producer would distort the very latency
            # measured.
            with tempfile.TemporaryFile(mode="w+") as stderr, harness_collector_paused():
                producer = latency_producer(
                    target, topic, rate, LATENCY_RECORD_BYTES, stderr, seconds=seconds, acks=acks
                )
                samples = collect_latencies(consumer, producer, stderr, target, seconds)
        finally:
            consumer.close()
    first_send = min(sent for sent, _ in samples)
    measured = sorted(
        latency for sent, latency in samples if sent >= first_send + warmup_seconds * 1e9
    )
    if not measured:
        raise target.failure("no latency sample after the warm-up")
    return {
        "p50_ms": percentile(measured, 0.50) / 1e6,
        "p99_ms": percentile(measured, 0.99) / 1e6,
        "p999_ms": percentile(measured, 0.999) / 1e6,
    }


@contextlib.contextmanager
def harness_collector_paused():
    """The measuring process's own cyclic garbage collector kept out of a latency
    measurement: a young process's first full collection (every object its imports made)
    held the consumer's poll loop for 36-59 ms at 1.37 s into the first run of every fresh
    `python -m bench` process, against every system alike (issue 40: the cold command's run
    1 p99.9 was this). Everything before is collected once and frozen; the samples are
    tuples of ints, which reference counting frees, so nothing piles up meanwhile."""
    gc.collect()
    gc.freeze()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.unfreeze()


def collect_latencies(
    consumer: Consumer,
    producer: subprocess.Popen[str],
    stderr: IO[str],
    target: Target,
    seconds: float,
) -> list[tuple[int, int]]:
    """(send time, latency) in nanoseconds for every record, until the producer has exited and
    every record it had acknowledged has arrived.

    One record per poll: `consume(n, timeout)` would hold records back until n arrived or the
    timeout passed, and that wait would count as latency.
    """
    samples: list[tuple[int, int]] = []
    expected: int | None = None
    deadline = time.monotonic() + seconds + 60.0
    while expected is None or len(samples) < expected:
        message = consumer.poll(POLL_SECONDS)
        if message is not None:
            received = time.time_ns()
            if message.error() is not None:
                producer.kill()
                raise target.failure(f"consumer error: {message.error()}")
            (sent,) = struct.unpack_from(">q", message.value())
            samples.append((sent, received - sent))
        if expected is None and producer.poll() is not None:
            expected = producer_result(producer, stderr, target)
            deadline = time.monotonic() + LATENCY_DRAIN_TIMEOUT
        if time.monotonic() > deadline:
            producer.kill()
            raise target.failure(
                f"consumer received {len(samples)} of {expected} records"
                f" {LATENCY_DRAIN_TIMEOUT}s after the producer finished"
            )
    return samples


def producer_result(producer: subprocess.Popen[str], stderr: IO[str], target: Target) -> int:
    """The number of records the latency producer had acknowledged; any failure is an error."""
    stdout, _ = producer.communicate()
    if producer.returncode != 0:
        stderr.seek(0)
        raise target.failure(
            f"latency producer exited with {producer.returncode}:\n{stderr.read()[-2000:]}"
        )
    return int(stdout.split()[0])


class GroupMembers:
    """`count` group members (`bench.group_member` processes) of one group, started and
    ready (their Consumers exist) but not yet subscribed: `go` subscribes them all at once,
    `lines` yields what they report as (time received, member index, line). With `module`
    `bench.share_member`, share group members (subscribed, not yet polling: `go` starts
    their polls)."""

    def __init__(
        self,
        target: Target,
        topic: str,
        group: str,
        count: int,
        consume: bool,
        module: str = "bench.group_member",
    ):
        self.target = target
        self.events: queue.Queue[tuple[float, int, str | None]] = queue.Queue()
        # Files, not pipes: nobody reads a member's stderr until something has failed.
        self.stderr = [tempfile.TemporaryFile(mode="w+") for _ in range(count)]  # noqa: SIM115
        self.processes = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    module,
                    target.bootstrap,
                    topic,
                    group,
                    *(["--consume"] if consume else []),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
            for stderr in self.stderr
        ]
        for index, process in enumerate(self.processes):
            threading.Thread(target=self._read, args=(index, process), daemon=True).start()
        ready: set[int] = set()
        try:
            for _, index, line in self.lines(time.monotonic() + GROUP_START_TIMEOUT):
                if line != "ready":
                    raise self.failure(f"member {index} said {line!r} before it was ready")
                ready.add(index)
                if len(ready) == count:
                    break
        except BaseException:
            self.close()
            raise

    def _read(self, index: int, process: subprocess.Popen[str]) -> None:
        for line in process.stdout:
            self.events.put((time.monotonic(), index, line.rstrip("\n")))
        self.events.put((time.monotonic(), index, None))

    def go(self) -> float:
        """Tell every member to subscribe; return when that was."""
        return self.send("go")

    def send(self, command: str) -> float:
        """Send every member `command`; return when that was (a clock's start)."""
        started = time.monotonic()
        for process in self.processes:
            process.stdin.write(command + "\n")
            process.stdin.flush()
        return started

    def lines(self, deadline: float):
        while True:
            try:
                received, index, line = self.events.get(
                    timeout=max(0.0, deadline - time.monotonic())
                )
            except queue.Empty:
                raise self.failure("the group members did not get there in time") from None
            if line is None:
                raise self.failure(f"member {index} exited with {self.processes[index].wait()}")
            if line.startswith("error "):
                raise self.failure(f"member {index}: {line}")
            yield received, index, line

    def failure(self, what: str) -> BenchError:
        tails = []
        for index, stderr in enumerate(self.stderr):
            stderr.seek(0)
            tails.append(f"--- member {index} stderr:\n{stderr.read()[-1500:]}")
        return self.target.failure(what + "\n" + "\n".join(tails))

    def close(self) -> None:
        """End of input: each member closes its consumer (leaving the group) and exits."""
        for process in self.processes:
            with contextlib.suppress(OSError):  # a member that already died
                process.stdin.close()
        for process in self.processes:
            try:
                process.wait(GROUP_CLOSE_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            process.stdout.close()
        for stderr in self.stderr:
            stderr.close()

    def __enter__(self) -> GroupMembers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def warm_up_coordinator(target: Target, topic: str) -> None:
    """Commit an offset for another group until it succeeds: minibroker creates and loads
    `__consumer_offsets` on the first FindCoordinator (as Kafka does), once per cluster; the
    group rows measure groups, not that."""
    consumer = new_consumer(target, topic, **{"group.id": f"warm-up-{topic}"})
    deadline = time.monotonic() + GROUP_START_TIMEOUT
    try:
        while True:
            try:
                consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
                return
            except KafkaException as error:
                if time.monotonic() > deadline:
                    raise target.failure(f"no group coordinator: {error}") from error
                time.sleep(POLL_SECONDS)
    finally:
        consumer.close()


class Formation:
    """What each member holds, from their `assigned` and `revoked` lines: the group is
    formed when every member holds partitions and together they hold each one exactly once."""

    def __init__(self, members: int, partitions: int):
        self.holding: list[set[int]] = [set() for _ in range(members)]
        self.partitions = partitions

    def update(self, index: int, line: str) -> bool:
        kind, _, rest = line.partition(" ")
        if kind == "assigned":
            self.holding[index] = {int(p) for p in rest.split(",")} if rest else set()
        elif kind == "revoked":
            self.holding[index] = set()
        held = sum(map(len, self.holding))
        return all(self.holding) and held == len(set().union(*self.holding)) == self.partitions


def group_consume_throughput(
    target: Target, topic: str, records: Path, count: int, size: int, members: int
) -> dict[str, float]:
    """`members` subscribed consumers of one group, each in its own process, reading the
    whole topic from the beginning (the group has no committed offsets yet), after an untimed
    produce spread evenly as in the consume row.

    The group forms off the clock: members hold their partitions paused until every member
    has its share, so that the figure is the group's reading speed and not how long each
    system waits for members to join (the first-rebalance row measures that). The clock runs
    from the resume until, for every partition, a member has read up to its end offset;
    heartbeats and auto-commits (every 5 s) happen meanwhile, as in any group."""
    kcat_produce(target, topic, records, count, "1", "sticky.partitioning.linger.ms=0")
    ends = end_offsets(target, topic)
    warm_up_coordinator(target, topic)
    positions = [0] * target.topics[topic]

    def advance(line: str) -> None:
        for entry in line[3:].split(","):
            partition, position = entry.split(":")
            positions[int(partition)] = max(positions[int(partition)], int(position))

    formation = Formation(members, target.topics[topic])
    with GroupMembers(target, topic, f"bench-{topic}", members, consume=True) as group:
        for _, index, line in group.lines(group.go() + GROUP_REBALANCE_TIMEOUT):
            if line.startswith("at "):
                # A fetch that completed between a member's assign and its pause: a record or
                # a few, delivered before the clock; the rate below counts only the rest.
                advance(line)
            elif formation.update(index, line):
                break
        early = sum(positions)
        if early > count * MAX_EARLY_FRACTION:
            raise group.failure(f"{early} records were read before the group was formed")
        started = group.send("start")
        for received, index, line in group.lines(started + KCAT_TIMEOUT):
            if not line.startswith("at "):
                raise group.failure(f"the group rebalanced while reading: member {index} {line}")
            advance(line)
            if all(position >= end for position, end in zip(positions, ends, strict=True)):
                seconds = received - started
                break
    read = count - early
    return {
        "records_per_s": read / seconds,
        "mb_per_s": read * size / seconds / MB,
        "early_records": early,
    }


def first_rebalance_time(target: Target, topic: str, members: int) -> dict[str, float]:
    """Seconds from `members` consumers subscribing at once (processes and Consumers already
    there) until each holds a non-empty assignment and together they hold every partition
    exactly once: the group's first complete rebalance, as its members see it."""
    warm_up_coordinator(target, topic)
    formation = Formation(members, target.topics[topic])
    with GroupMembers(target, topic, f"bench-{topic}", members, consume=False) as group:
        started = group.go()
        for received, index, line in group.lines(started + GROUP_REBALANCE_TIMEOUT):
            if formation.update(index, line):
                return {"rebalance_s": received - started}
    raise AssertionError("unreachable: lines() ends only by raising")


def tls_cost(
    target: Target, topic: str, records: Path, count: int, size: int, ca_path: Path
) -> dict[str, float]:
    """Produce then consume the same records over the PLAINTEXT listener and over the SSL
    one of the same broker: each direction's SSL / plaintext throughput, and the broker's CPU
    seconds per GB moved each way."""
    tls_settings = ("security.protocol=SSL", f"ssl.ca.location={ca_path}")
    figures: dict[str, float] = {}
    for name, bootstrap, settings in (
        ("plaintext", None, ()),
        ("ssl", target.listener_bootstrap("SSL"), tls_settings),
    ):
        this_topic = f"{topic}-{name}"
        target.create_topic(this_topic, target.topics[topic], 1, {})
        before = target.usage()
        produce_s = kcat_produce(
            target, this_topic, records, count, "1", *settings, bootstrap=bootstrap
        )
        consume_s, read = kcat_consume(target, this_topic, *settings, bootstrap=bootstrap)
        after = target.usage()
        if read != count:
            raise target.failure(f"kcat read {read} of the {count} records of {this_topic}")
        figures[f"{name}_produce_rps"] = count / produce_s
        figures[f"{name}_consume_rps"] = count / consume_s
        moved_gb = 2 * count * size / GB
        figures[f"{name}_cpu_s_per_gb"] = (after.cpu_seconds - before.cpu_seconds) / moved_gb
    figures["produce_ratio"] = figures["ssl_produce_rps"] / figures["plaintext_produce_rps"]
    figures["consume_ratio"] = figures["ssl_consume_rps"] / figures["plaintext_consume_rps"]
    return figures


# The share-consume row: share consumers on one partition, against a classic group on four.
SHARE_MEMBERS = (1, 2, 4)
CLASSIC_SHARE_MEMBERS = 4
SHARE_COMMIT_TIMEOUT = 60.0
# The share groups' probe records while they form (share_consume).
PROBE_INTERVAL = 0.1
PROBE_TIMEOUT = 1.0


def share_consume(
    target: Target, topic: str, group: str, records: Path, count: int, members: int
) -> dict[str, float]:
    """`members` share consumers (`bench.share_member` processes, explicit acknowledgement) of
    a new share group read `count` records of `records` from `topic` (one partition).

    The group forms off the clock: the members subscribe and poll while the harness produces
    a probe record every PROBE_INTERVAL s until each member has acknowledged one (or, after
    PROBE_TIMEOUT s, at least one has: the first fetch to wait may take every probe). Then the
    members stop polling (`hold`), the records are produced (kcat, untimed) and the clock runs
    from the `go` until every record has been acknowledged and every member's commit_sync has
    been answered. The share group keeps Kafka's `share.auto.offset.reset=latest` (the mock
    serves no group configs and starts a share partition at its end), so it reads exactly the
    records produced after it formed. Also returned: deliveries beyond `count` (records
    delivered again: none expected, nothing is released and no lock expires) and the smallest
    member's share over the largest's."""
    from confluent_kafka import Producer

    with GroupMembers(target, topic, group, members, False, module="bench.share_member") as group_:
        group_.send("warm")
        producer = Producer({"bootstrap.servers": target.bootstrap, "linger.ms": 0})
        probes = 0
        probed: set[int] = set()
        deadline = time.monotonic() + PROBE_TIMEOUT
        while len(probed) < members and (not probed or time.monotonic() < deadline):
            producer.produce(topic, value=b"probe")
            producer.flush(CONSUMER_TIMEOUT)
            probes += 1
            with contextlib.suppress(BenchError):
                for _, index, line in group_.lines(time.monotonic() + PROBE_INTERVAL):
                    if not line.startswith("at "):
                        raise group_.failure(f"member {index} said {line!r} while warming")
                    probed.add(index)
            if time.monotonic() > deadline + GROUP_START_TIMEOUT:
                raise group_.failure(f"no member received any of {probes} probe records")
        group_.send("hold")
        held: set[int] = set()
        for _, index, line in group_.lines(time.monotonic() + SHARE_COMMIT_TIMEOUT):
            if line == "held":
                held.add(index)
            elif not line.startswith("at "):
                raise group_.failure(f"member {index} said {line!r} while holding")
            if len(held) == members:
                break
        kcat_produce_more(target, topic, records, count, probes)
        acknowledged = [0] * members
        started = group_.go()
        committed: dict[int, int] = {}
        for _, index, line in group_.lines(started + KCAT_TIMEOUT):
            if not line.startswith("at "):
                raise group_.failure(f"member {index} said {line!r} while reading")
            acknowledged[index] = int(line[3:])
            if sum(acknowledged) >= count:
                group_.send("commit")
                break
        for received, index, line in group_.lines(time.monotonic() + SHARE_COMMIT_TIMEOUT):
            if line.startswith("at "):
                continue
            kind, total, failed = line.split()
            if kind != "committed" or failed != "0":
                raise group_.failure(f"member {index}: {line}")
            committed[index] = int(total)
            if len(committed) == members:
                seconds = received - started
                break
    delivered = sum(committed.values())
    return {
        "seconds": seconds,
        "redelivered": delivered - count,
        "spread": min(committed.values()) / max(1, max(committed.values())),
        "probes": probes,
        "probed_members": len(probed),
    }


def kcat_produce_more(target: Target, topic: str, records: Path, count: int, before: int) -> None:
    """kcat_produce into a topic that already holds `before` records: checks the end offset
    adds up to both."""
    command = ["kcat", "-b", target.bootstrap, "-P", "-t", topic, "-X", "acks=1"]
    command += ["-X", "linger.ms=5"]
    with open(records, "rb") as stdin:
        finished = subprocess.run(
            command, stdin=stdin, capture_output=True, timeout=KCAT_TIMEOUT, check=False
        )
    stored = sum(end_offsets(target, topic))
    if finished.returncode != 0 or stored != count + before:
        raise target.failure(
            f"{' '.join(command)} exited with {finished.returncode}, {stored} records stored"
            f" (expected {count + before}); stderr:\n"
            f"{finished.stderr.decode(errors='replace')[-2000:]}"
        )


def share_consume_throughput(
    target: Target, topic: str, records: Path, count: int, size: int
) -> dict[str, float]:
    """Records/s through one partition shared by 1, 2 and 4 confluent-kafka ShareConsumers of
    a share group (KIP-932) acknowledging each record explicitly, each group on a topic of its
    own holding the same `count` records (produced first, untimed); then, as the reference, a
    classic group of 4 on a topic of 4 partitions (group_consume_throughput: the group formed
    off the clock). The first share group's probes (share_consume, off the clock) are also
    what makes the share coordinator create and load `__share_group_state` (Kafka and
    minibroker create it at the first share group's first use, once per cluster), so no
    measured read pays for it."""
    figures: dict[str, float] = {}
    for members in SHARE_MEMBERS:
        share_topic = f"{topic}-share-{members}"
        target.create_topic(share_topic, 1, 1, {})
        measured = share_consume(
            target, share_topic, f"bench-{share_topic}", records, count, members
        )
        figures[f"share_{members}_rps"] = count / measured["seconds"]
        figures[f"share_{members}_probed_members"] = measured["probed_members"]
        figures[f"share_{members}_redelivered"] = measured["redelivered"]
        figures[f"share_{members}_spread"] = measured["spread"]
    classic_topic = f"{topic}-classic"
    target.create_topic(classic_topic, CLASSIC_SHARE_MEMBERS, 1, {})
    classic = group_consume_throughput(
        target, classic_topic, records, count, size, CLASSIC_SHARE_MEMBERS
    )
    figures["classic_rps"] = classic["records_per_s"]
    return figures
