"""Retry loops of the benchmark clients, bounded in count and in time (issue 41): a target
that stopped answering ends a row with an error instead of a client that waits for ever."""

from __future__ import annotations

import contextlib
import time

from confluent_kafka import KafkaException, Producer

# A producer whose queue stays full this long has a target that no longer takes records.
QUEUE_FULL_TIMEOUT_S = 120.0
QUEUE_FULL_POLL_S = 0.01
QUEUE_FULL_ATTEMPTS = int(QUEUE_FULL_TIMEOUT_S / QUEUE_FULL_POLL_S)


def produce_when_queued(producer: Producer, topic: str, value: bytes, **kwargs) -> None:
    """producer.produce, polling (serving delivery reports) while the client's queue is full
    (BufferError), at most QUEUE_FULL_ATTEMPTS times and QUEUE_FULL_TIMEOUT_S seconds;
    RuntimeError after that."""
    deadline = time.monotonic() + QUEUE_FULL_TIMEOUT_S
    for _ in range(QUEUE_FULL_ATTEMPTS):
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            if time.monotonic() > deadline:
                break
            producer.poll(QUEUE_FULL_POLL_S)
    raise RuntimeError(
        f"the producer's queue stayed full for {QUEUE_FULL_TIMEOUT_S} s: the target stopped"
        " taking records"
    )


def close_producer(producer: Producer) -> None:
    """Close a (non-transactional) producer at once, whatever its target's state: what it
    still holds is purged first (close flushes until the messages time out otherwise, its
    own timeout not honoured), so its threads and connections end here, not whenever the
    last reference goes (an exception's traceback holds the frame that holds it)."""
    with contextlib.suppress(KafkaException):  # a fatally failed producer raises from flush
        producer.purge()
        producer.flush(0)
    producer.close()
