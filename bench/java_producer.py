"""The Java client beside kcat in the produce rows: Apache Kafka's own producer benchmark,
`org.apache.kafka.tools.ProducerPerformance` (what `bin/kafka-producer-perf-test.sh` runs),
from the kafka-tools jar on the class path java/fetch.sh resolved.

Same record count, record size and acks as kcat's run, to a topic of its own made like the
row's (same partitions, replication and configs); `linger.ms=5` as kcat is given (Kafka 4's
default too), the Java producer's other defaults otherwise (batch.size 16 KiB per partition,
where librdkafka's batch.size is a 1 MB cap per request; idempotence on for acks=all, off for
acks=1). Its payload is random bytes generated once, which changes nothing without
compression. The figure is the tool's own final line ("N records sent, R records/sec"): from
its first send to its last acknowledgement, without the JVM's start, and each run's records
are checked afterwards against the partitions' end offsets, as kcat's are.
"""

from __future__ import annotations

import re
import subprocess

from bench.kafka_ref import KAFKA_HEAP, classpath, java_executable, missing_reason

PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance"
TIMEOUT_S = 600.0
# "1000000 records sent, 245398.3 records/sec (23.40 MB/sec), 52.1 ms avg latency, ..."
FINAL_LINE = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)", re.M)


def unavailable() -> str | None:
    """Why the Java producer cannot run here (no JVM, no cached class path), or None."""
    return missing_reason("kafka")


def java_produce(bootstrap: str, topic: str, count: int, size: int, acks: str) -> float:
    """Records per second that ProducerPerformance reports for `count` records of `size`
    bytes; raises RuntimeError with its output when it fails."""
    command = [
        java_executable(), KAFKA_HEAP, "-cp", classpath("kafka"), PRODUCER_PERFORMANCE,
        "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(count),
        "--record-size", str(size), "--throughput", "-1",
        "--command-property", f"acks={acks}", "linger.ms=5",
    ]  # fmt: skip
    finished = subprocess.run(
        command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    final = FINAL_LINE.findall(finished.stdout)
    if finished.returncode != 0 or not final or int(final[-1][0]) != count:
        raise RuntimeError(
            f"ProducerPerformance exited with {finished.returncode}; output:\n"
            f"{(finished.stdout + finished.stderr)[-2000:]}"
        )
    return float(final[-1][1])
