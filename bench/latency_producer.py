"""A producer paced at a fixed rate that writes its send time into each record.

It runs in its own process so that the consumer measuring latency never competes with it for
the GIL. Each value starts with `time.time_ns()` (big-endian int64) at the moment of
`produce()`, padded to the record size. The producer waits for metadata before the clock
starts, sends `rate` records per second for `seconds`, flushes, and prints the number of
acknowledged records; a failed delivery makes it exit with 1.

acks=1 (`--acks all` for the replicated row), and librdkafka's default linger.ms=5, spelled
out. With linger.ms=0 the client sends a request for every few records, and a broker that
spends a fixed time per request falls behind at 10,000 records/s: latency then grows for as
long as the run lasts (seconds, not milliseconds), which measures the queue rather than the
broker. Up to 5 ms of each figure is the client's batching, on both systems alike.

The same program is the noisy neighbour of the `latency-noisy` row: another topic, 1 KiB
records, a larger linger (`--linger-ms`) so that its requests are bulk batches, and no end of
its own (`--seconds` left out): it produces until SIGTERM, then flushes and prints as above.
"""

from __future__ import annotations

import argparse
import math
import signal
import struct
import sys
import time

from confluent_kafka import KafkaError, Message, Producer

TICK_SECONDS = 0.0005
METADATA_TIMEOUT = 10.0
FLUSH_TIMEOUT = 30.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("--rate", type=float, required=True, help="records per second")
    parser.add_argument("--size", type=int, required=True, help="bytes per record value")
    parser.add_argument(
        "--seconds", type=float, default=math.inf, help="how long (default: until SIGTERM)"
    )
    parser.add_argument("--acks", default="1", choices=("0", "1", "all"))
    parser.add_argument("--linger-ms", type=float, default=5.0)
    arguments = parser.parse_args()
    stopping = False

    def stop(_signal: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)

    delivered = 0
    failures: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: Message) -> None:
        nonlocal delivered
        if error is None:
            delivered += 1
        else:
            failures.append(error)

    producer = Producer(
        {
            "bootstrap.servers": arguments.bootstrap,
            "acks": arguments.acks,
            "linger.ms": arguments.linger_ms,
            "on_delivery": on_delivery,
        }
    )
    producer.list_topics(arguments.topic, timeout=METADATA_TIMEOUT)
    padding = bytes(arguments.size - 8)
    sent = 0
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < arguments.seconds and not stopping:
        due = int(elapsed * arguments.rate) + 1
        while sent < due:
            value = struct.pack(">q", time.time_ns()) + padding
            try:
                producer.produce(arguments.topic, value)
            except BufferError:
                break  # the queue is full: tried again at the next tick, until `seconds`
            sent += 1
        producer.poll(0)
        time.sleep(TICK_SECONDS)
    remaining = producer.flush(FLUSH_TIMEOUT)
    if failures or remaining:
        print(
            f"{len(failures)} deliveries failed (first: {failures[:1]}), {remaining} unflushed",
            file=sys.stderr,
        )
        sys.exit(1)
    print(delivered)


if __name__ == "__main__":
    main()
