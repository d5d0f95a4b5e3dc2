"""The transactional rows' workloads: a confluent-kafka transactional producer committing
every `per_transaction` records, and kcat reading the same data with read_committed and with
read_uncommitted.

librdkafka's mock cluster serves transactions (its own coordinator, markers in its in-memory
log) and Apache Kafka serves them for real (one KRaft node, `__transaction_state` replicated
once, `transaction.state.log.min.isr` 1), so both are columns of these rows. A system that refuses
transactional ids (FindCoordinator or InitProducerId answering
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) raises NotServed: the table says "not served" there
instead of a failure.
"""

from __future__ import annotations

import os
import time

from confluent_kafka import KafkaError, KafkaException, Producer

from bench.retry import produce_when_queued
from bench.targets import BenchError
from bench.workloads import MB, Target, end_offsets, kcat_consume

INIT_TIMEOUT = 30.0
# Partitions each transaction writes: enough that a commit is a real two-phase one across
# several leaders' partitions, few enough that the markers stay a small part of the log (a
# transaction to all 64 partitions would write 64 markers for 1,000 records).
PARTITIONS_PER_TRANSACTION = 4
COMMIT_TIMEOUT = 120.0


class NotServed(BenchError):
    """The system does not serve what the row measures."""


def transactional_produce(
    target: Target, topic: str, count: int, size: int, per_transaction: int
) -> float:
    """Seconds from init_transactions' return to the last commit's: `count` records of `size`
    random bytes, `per_transaction` to a transaction, each transaction's records spread evenly
    over PARTITIONS_PER_TRANSACTION partitions, the next transaction on the next ones (round
    robin, so every partition gets the same share). Checks afterwards, off the clock, that the
    end offsets account for every record plus one COMMIT marker per partition and
    transaction."""
    producer = Producer(
        {
            "bootstrap.servers": target.bootstrap,
            "transactional.id": f"bench-{topic}",
            "linger.ms": 5,
            "batch.size": 1_000_000,
        }
    )
    try:
        producer.init_transactions(INIT_TIMEOUT)
    except KafkaException as failure:
        error = failure.args[0]
        if error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            raise NotServed(f"transactions not served: {error.str()}") from None
        raise target.failure(f"init_transactions: {error}") from None
    payload = os.urandom(size)
    transactions = 0
    partitions = target.topics[topic]
    partitions_written: set[int] = set()
    markers = 0
    started = time.monotonic()
    try:
        for first in range(0, count, per_transaction):
            producer.begin_transaction()
            partitions_written.clear()
            base = transactions * PARTITIONS_PER_TRANSACTION
            for index in range(first, min(count, first + per_transaction)):
                partition = (base + index % PARTITIONS_PER_TRANSACTION) % partitions
                partitions_written.add(partition)
                produce_when_queued(producer, topic, payload, partition=partition)
            producer.commit_transaction(COMMIT_TIMEOUT)
            transactions += 1
            markers += len(partitions_written)
    except KafkaException as failure:
        raise target.failure(
            f"transaction {transactions + 1} of {topic}: {failure.args[0]}"
        ) from None
    elapsed = time.monotonic() - started
    stored = sum(end_offsets(target, topic))
    if stored != count + markers:
        raise target.failure(
            f"{count} records in {transactions} transactions to {topic}, but the end offsets"
            f" add up to {stored}, not {count} records + {markers} markers"
        )
    return elapsed


def transactional_produce_throughput(
    target: Target, topic: str, count: int, size: int, per_transaction: int
) -> dict[str, float]:
    seconds = transactional_produce(target, topic, count, size, per_transaction)
    return {"records_per_s": count / seconds, "mb_per_s": count * size / seconds / MB}


def isolation_consume_throughput(
    target: Target, topic: str, count: int, size: int, per_transaction: int
) -> dict[str, float]:
    """kcat reading the whole topic from the beginning with read_uncommitted and with
    read_committed (each twice, alternating, the better read counting), after an untimed
    transactional produce: both must read every record (all
    committed), and the ratio is read_committed's records/s over read_uncommitted's."""
    transactional_produce(target, topic, count, size, per_transaction)
    rates: dict[str, float] = {}
    # Each twice, alternating, the better read of each counting: the first read of a fresh
    # log is the slower one on both systems (caches), whichever isolation it uses.
    for isolation in ("read_uncommitted", "read_committed") * 2:
        seconds, read = kcat_consume(target, topic, f"isolation.level={isolation}")
        if read != count:
            raise target.failure(
                f"kcat ({isolation}) read {read} of the {count} records of {topic}"
            )
        rates[isolation] = max(rates.get(isolation, 0.0), count / seconds)
    return {
        "committed_ratio": rates["read_committed"] / rates["read_uncommitted"],
        "read_committed_rps": rates["read_committed"],
        "read_uncommitted_rps": rates["read_uncommitted"],
    }
