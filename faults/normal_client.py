"""The well-behaved client that runs beside the fuzzer, in its own process (so the fuzzer's
Python does not steal its GIL and its timings are the broker's).

It loops: produce one record with confluent-kafka (acks=all) and wait for its delivery, then
consume with an assigned consumer until that very record arrives; the time from send to
receipt is one round trip. When the stop file appears it reads the whole partition back with
a fresh consumer and checks that every produced record is there exactly once, in order.
It prints one JSON object on stdout.

    python -m faults.normal_client BOOTSTRAP TOPIC STOP_FILE [HANG_SECONDS]

A round trip over HANG_SECONDS (5 s unless given) is counted as a hang. Without a stop file
it still stops by itself: when the process that started it is gone, or after MAX_RUN_S.
"""

from __future__ import annotations

import json
import os
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

ROUND_TRIP_TIMEOUT = 30.0
HANG_SECONDS = 5.0
MAX_RUN_S = 6 * 3600.0


def _consumer(bootstrap: str, topic: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "normal-client-reader",  # required; assign() keeps groups out of it
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.wait.max.ms": 50,
            "socket.timeout.ms": 20000,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    return consumer


def main(bootstrap: str, topic: str, stop_file: str, hang_seconds: float = HANG_SECONDS) -> dict:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "socket.timeout.ms": 20000,
            "message.timeout.ms": int(ROUND_TRIP_TIMEOUT * 1000),
        }
    )
    consumer = _consumer(bootstrap, topic)
    round_trips: list[float] = []
    errors: list[str] = []
    produced: list[bytes] = []
    sequence = 0
    parent = os.getppid()
    give_up = time.monotonic() + MAX_RUN_S
    while not os.path.exists(stop_file):
        if os.getppid() != parent or time.monotonic() > give_up:
            errors.append("stopped without a stop file: its starter is gone, or MAX_RUN_S")
            break
        value = f"normal-{sequence}".encode()
        delivered: list = []
        started = time.monotonic()
        producer.produce(
            topic, value=value, partition=0, on_delivery=lambda e, m, d=delivered: d.append(e)
        )
        producer.flush(ROUND_TRIP_TIMEOUT)
        if not delivered or delivered[0] is not None:
            errors.append(f"record {sequence}: delivery {delivered or 'timed out'}")
            break
        produced.append(value)
        received = False
        while time.monotonic() - started < ROUND_TRIP_TIMEOUT:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                errors.append(f"consumer: {message.error()}")
                continue
            if message.value() == value:
                received = True
                break
        elapsed = time.monotonic() - started
        round_trips.append(elapsed)
        if not received:
            errors.append(f"record {sequence} not consumed within {ROUND_TRIP_TIMEOUT}s")
            break
        sequence += 1
    consumer.close()

    # Read everything back with a fresh consumer: every produced record exactly once, in order.
    reader = _consumer(bootstrap, topic)
    read_back: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(read_back) < len(produced) and time.monotonic() < deadline:
        for message in reader.consume(num_messages=1000, timeout=0.5):
            if message.error() is None:
                read_back.append(message.value())
    reader.close()
    if read_back != produced:
        errors.append(f"read back {len(read_back)} records, produced {len(produced)}; they differ")

    ordered = sorted(round_trips)
    return {
        "produced": len(produced),
        "read_back": len(read_back),
        "round_trips": len(round_trips),
        "round_trip_max_s": ordered[-1] if ordered else None,
        "round_trip_median_s": ordered[len(ordered) // 2] if ordered else None,
        "round_trip_p99_s": ordered[int(len(ordered) * 0.99)] if ordered else None,
        "hang_seconds": hang_seconds,
        "round_trips_over_hang_seconds": sum(1 for t in round_trips if t > hang_seconds),
        "errors": errors,
    }


if __name__ == "__main__":
    try:
        hang = float(sys.argv[4]) if len(sys.argv) > 4 else HANG_SECONDS
        result = main(*sys.argv[1:4], hang_seconds=hang)
    except KafkaException as failure:
        result = {"errors": [f"client failed: {failure}"]}
    print(json.dumps(result), flush=True)
