"""The workloads, each run against one fresh target and returning its figures.

The load comes from librdkafka, a C client, so that the client is not what limits a Python
broker: kcat for bulk produce and consume (it reads a prepared file, so nothing is generated
while the clock runs), confluent-kafka for the paced latency producer and its consumer.
"""

from __future__ import annotations

import math
import os
import string
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench.targets import MOCK, Minibroker, Mock

PARTITIONS = 64
KCAT_TIMEOUT = 600.0
CONSUMER_TIMEOUT = 10.0
LATENCY_DRAIN_TIMEOUT = 10.0
LATENCY_RECORD_BYTES = 1000
MOCK_FETCH_WAIT_MS = 5
POLL_SECONDS = 0.05
MB = 1_000_000
GB = 1_000_000_000
READ_CHUNK = 1 << 20
LINES_PER_WRITE = 4096
# Every byte value maps to a letter: random bytes become random printable records, no newlines.
LETTERS = bytes(
    string.ascii_letters[value % len(string.ascii_letters)].encode()[0] for value in range(256)
)

Target = Minibroker | Mock


@dataclass(frozen=True)
class Sizes:
    """How much each workload moves; the real run and the smoke run differ only here."""

    produce_records: int
    consume_records: int
    resources_records: int
    restart_records: int
    latency_seconds: float
    latency_warmup_seconds: float


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
    target: Target, topic: str, records: Path, count: int, acks: str, *settings: str
) -> float:
    """Seconds from kcat's start to its exit, every record acknowledged (checked afterwards,
    off the clock, by the partitions' end offsets)."""
    command = [
        "kcat",
        "-b",
        target.bootstrap,
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


def kcat_consume(target: Target, topic: str) -> tuple[float, int]:
    """Seconds for kcat to read every partition from the beginning to the end, and the number
    of records it printed: one line each, and only a newline (`-f '\\n'`) so that the pipe to
    this process carries as little as possible."""
    command = [
        "kcat",
        "-b",
        target.bootstrap,
        "-C",
        "-t",
        topic,
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        "\\n",
    ]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = 0
    deadline = started + KCAT_TIMEOUT
    while chunk := process.stdout.read1(READ_CHUNK):
        lines += chunk.count(b"\n")
        if time.monotonic() > deadline:
            process.kill()
            break
    process.wait()
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
            for partition in range(PARTITIONS)
        ]
    except Exception as error:
        raise target.failure(f"ListOffsets on {topic}: {error}") from error
    finally:
        consumer.close()


def produce_throughput(
    target: Target, topic: str, records: Path, count: int, size: int, acks: str
) -> dict[str, float]:
    seconds = kcat_produce(target, topic, records, count, acks)
    return {"records_per_s": count / seconds, "mb_per_s": count * size / seconds / MB}


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
    records were produced and the node was stopped cleanly (SIGTERM). Only minibroker has a
    restart to measure: the mock keeps its data in its process's memory."""
    if not isinstance(target, Minibroker):
        raise target.failure("the restart row measures minibroker only")
    kcat_produce(target, topic, records, count, "1")
    log_bytes = target.log_bytes()
    seconds, served = target.restart_until_served(topic, PARTITIONS)
    if served != count:
        raise target.failure(f"after the restart {topic} serves {served} of {count} records")
    return {"restart_s": seconds, "log_gb": log_bytes / GB}


def percentile(ordered: list[int], fraction: float) -> int:
    """Nearest-rank percentile of an ascending list."""
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def end_to_end_latency(
    target: Target, topic: str, rate_bytes: float, seconds: float, warmup_seconds: float
) -> dict[str, float]:
    """Produce-to-consume latency at a fixed rate: a paced producer in its own process
    (`bench.latency_producer`) writes its send time into each value; a consumer here, assigned
    to every partition, subtracts it from the time the record reached the application.

    Records sent during the first `warmup_seconds` are left out: connections and the first
    fetches are being set up then.

    The consumer keeps librdkafka's fetch.wait.max.ms (500) against minibroker, as a Kafka
    user would: a broker must answer a waiting fetch as soon as data arrives. The mock never
    does (it holds an empty fetch for the whole wait, as its source says), so against the mock
    the wait is 5 ms: its figures then measure its data path, plus up to 5 ms, instead of a
    shortcut it took. Shorter waits only made it busier on these 2 cores (p99 got worse).
    """
    settings = {"fetch.wait.max.ms": MOCK_FETCH_WAIT_MS} if target.system == MOCK else {}
    consumer = new_consumer(target, topic, **settings)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        # The consumer is fetching before the first record is sent.
        warm_until = time.monotonic() + 1.0
        while time.monotonic() < warm_until:
            consumer.poll(POLL_SECONDS)
        rate = rate_bytes / LATENCY_RECORD_BYTES
        # A file, not a pipe, for its stderr: librdkafka may log more than a pipe holds while
        # nobody reads it, and a blocked producer would distort the very latency measured.
        with tempfile.TemporaryFile(mode="w+") as stderr:
            producer = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.latency_producer",
                    target.bootstrap,
                    topic,
                    f"--rate={rate}",
                    f"--size={LATENCY_RECORD_BYTES}",
                    f"--seconds={seconds}",
                ],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
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
