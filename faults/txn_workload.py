"""The transactional workload of the fault harness, and its final read for the checker
(faults/txn_checker.py).

Threads of confluent-kafka clients against any Kafka-compatible bootstrap:

- `producers` transactional producers, each with a unique ``transactional.id``, each
  transaction writing 1 to 6 numbered values to random partitions of the input topic, a
  fraction of them aborted on purpose;
- a consume-transform-produce stage of `stage_members` members in one group: a
  read_committed consumer and a transactional producer each; a transaction reads a batch of
  input records, writes one output record per input record (to the same partition number of
  the output topic) and sends the consumed offsets to the transaction
  (``send_offsets_to_transaction``, KIP-447's group metadata), a fraction aborted on purpose
  (the member then seeks back to where the batch began).

Every attempt is recorded as a `Transaction`: committed when commit_transaction returned,
aborted when it was aborted on purpose, or when commit was never asked for, or when
abort_transaction returned after a failed commit; unknown otherwise (the commit was asked for
and its outcome is not known: a timeout, a fatal error, a fenced producer). After a commit
whose outcome is unknown the member (or producer) starts over with new clients, as Kafka's
documentation asks after a fatal error; the new producer's InitProducerId with the same
transactional id fences the old one and aborts whatever it left open.

Values are unique per attempt: ``<transactional id>/<transaction number>/<index>`` for the
producers; the stage's output is ``<stage transaction>|<input value>``, so a retried batch
writes new values and the checker catches an input processed twice by its offsets.

`python -m faults.txn_workload BOOTSTRAP [--seconds S]` runs it once against any cluster
without faults and prints the checker's verdict (the check against Apache Kafka).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from faults.txn_checker import (
    ABORTED,
    COMMITTED,
    UNKNOWN,
    Record,
    Transaction,
    Verdict,
    Write,
    check,
)

INPUT_TOPIC = "txn-in"
OUTPUT_TOPIC = "txn-out"
PARTITIONS = 3
ABORT_FRACTION = 0.2
STAGE_GROUP = "txn-stage"
TRANSACTION_TIMEOUT_MS = 10_000
CLIENT_TIMEOUT_S = 30.0
FINAL_READ_STALL_S = 60.0
STAGE_DRAIN_IDLE_S = 3.0
STAGE_DRAIN_TIMEOUT_S = 120.0
# How long the client threads, told to stop, are waited for before the cluster goes: one
# that is in a commit (CLIENT_TIMEOUT_S), then an abort, ends its clients within it.
CLIENT_THREADS_STOP_S = 4 * CLIENT_TIMEOUT_S
# A thread that cannot get a transactional producer (or the stage's consumer) for this long,
# or this many times in a row, gives up: the cluster is not coming back.
INIT_RETRY_LIMIT_S = 120.0
INIT_RETRY_COUNT = 200
INIT_RETRY_PAUSE_S = 0.5


class InitRetries:
    """The bound of a thread's attempts to get its clients: at most INIT_RETRY_COUNT failures
    in a row, for at most INIT_RETRY_LIMIT_S since the first of them, a pause between two."""

    def __init__(self) -> None:
        self.failures = 0
        self.first_failure = 0.0

    def succeeded(self) -> None:
        self.failures = 0

    def again(self) -> bool:
        """After a failure: pause and say True to try again, or False to give up."""
        if self.failures == 0:
            self.first_failure = time.monotonic()
        self.failures += 1
        if (
            self.failures >= INIT_RETRY_COUNT
            or time.monotonic() - self.first_failure >= INIT_RETRY_LIMIT_S
        ):
            return False
        time.sleep(INIT_RETRY_PAUSE_S)
        return True

    def __str__(self) -> str:
        return (
            f"gave up after {self.failures} failures in a row in"
            f" {time.monotonic() - self.first_failure:.0f} s"
        )


def drop_transactional_producer(producer: Producer | None) -> None:
    """Let go of a transactional producer in bounded time: what it still holds is purged
    and its handle is left to be destroyed with the caller's last reference (the caller
    sets it to None), which librdkafka does at once. Not close(): with a transaction open
    and the cluster gone it aborts first and waits for the cluster, its timeout not honoured
    (more than 90 s measured against a killed broker)."""
    if producer is not None:
        # A fenced or fatally failed producer raises from flush: nothing is left to wait for.
        with contextlib.suppress(KafkaException):
            producer.purge()
            producer.flush(0)


def close_producer(producer: Producer | None, flush_timeout: float = 0.0) -> None:
    """Close a producer (not a transactional one: drop_transactional_producer) in bounded
    time, whatever state its cluster is in: wait at most `flush_timeout` for what it still
    sends, purge the rest (close flushes until the messages time out, its timeout not
    honoured), then close it: its threads end and its connections close, even while a
    traceback or a reference cycle still holds the object."""
    if producer is None:
        return
    with contextlib.suppress(KafkaException):  # a fatally failed producer raises from flush
        if flush_timeout > 0:
            producer.flush(flush_timeout)
        producer.purge()
        producer.flush(0)  # the purged messages' delivery reports
    producer.close()


def join_all(threads: list[threading.Thread], timeout: float) -> list[str]:
    """Join `threads` within `timeout` seconds in all; the names of those still running."""
    deadline = time.monotonic() + timeout
    for thread in threads:
        if thread.ident is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
    return [thread.name for thread in threads if thread.is_alive()]


def java_string_hash(text: str) -> int:
    """Java's String.hashCode made non-negative as Kafka's Utils.abs does: the absolute value,
    and 0 for Integer.MIN_VALUE (whose absolute value is no int). Not ``& 0x7fffffff``, which
    agrees with it only for a non-negative hash: a negative one would name another partition
    of __transaction_state, and kill-coordinator another broker."""
    value = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        value = (31 * value + int(unit, 16)) & 0xFFFFFFFF
    signed = value - (1 << 32) if value >= 1 << 31 else value
    return 0 if signed == -(1 << 31) else abs(signed)


def transactions_refused(bootstrap: str, timeout: float = 20.0) -> str | None:
    """Why the broker does not serve transactions (FindCoordinator for a transactional id or
    InitProducerId answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as minibroker did before
    it served them, or never answered), or None when init_transactions succeeds."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"probe-{uuid.uuid4().hex[:8]}",
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
        }
    )
    try:
        producer.init_transactions(timeout)
    except KafkaException as failure:
        error = failure.args[0]
        if error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            return f"the broker refuses transactional ids: {error.str()}"
        return f"init_transactions failed: {error}"
    finally:
        drop_transactional_producer(producer)
        producer = None
    return None


def create_topics(
    bootstrap: str, topics: tuple[str, ...], replication: int, min_insync: int | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {} if min_insync is None else {"min.insync.replicas": str(min_insync)}
    try:
        futures = admin.create_topics(
            [NewTopic(t, PARTITIONS, replication, config=config) for t in topics]
        )
        for future in futures.values():
            future.result(60)
    finally:
        # An AdminClient has no close: it goes with its last reference. A failed future's
        # traceback holds this frame, so the reference is dropped here, not left to the
        # frame (a failed run's traceback would keep the client dialling for ever).
        del admin


@dataclass
class History:
    """Every attempted transaction, appended from several threads (list.append is atomic)."""

    transactions: list[Transaction] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def committed_records(self) -> int:
        return sum(len(t.writes) for t in self.transactions if t.outcome == COMMITTED)


def _transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "linger.ms": 5,
            "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)
    except KafkaException:
        # Refused: let go of it here, not whenever the exception's traceback goes.
        drop_transactional_producer(producer)
        del producer
        raise
    return producer


def _finish(producer: Producer, attempt: Transaction, abort: bool, history: History) -> bool:
    """Commit (or abort on purpose) and record the outcome; False when the producer must be
    replaced (the outcome is unknown or the producer is unusable).

    Every exception caught here has its traceback cleared: the traceback holds this frame,
    and this frame the producer, so an exception kept by anyone (pytest's log capture kept
    one until the module's end) kept the dropped producer, and its connections, alive after
    its network was gone (issue 41's network guard found it)."""
    if abort:
        attempt.outcome = ABORTED  # commit is never asked for: it cannot commit
        try:
            producer.abort_transaction(CLIENT_TIMEOUT_S)
        except KafkaException as failure:
            failure.__traceback__ = None
            history.errors.append(f"{attempt.txn} abort: {failure.args[0]}")
            return False
        return True
    try:
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        attempt.outcome = COMMITTED
        return True
    except KafkaException as failure:
        failure.__traceback__ = None
        error = failure.args[0]
        history.errors.append(f"{attempt.txn} commit: {error}")
        if error.txn_requires_abort():
            try:
                producer.abort_transaction(CLIENT_TIMEOUT_S)
                attempt.outcome = ABORTED
                return True
            except KafkaException as again:
                again.__traceback__ = None
                history.errors.append(f"{attempt.txn} abort after commit: {again.args[0]}")
        attempt.outcome = UNKNOWN
        return False


class TransactionalWorkload:
    """The producers and the stage, each a thread; `stop` ends every transaction and drains
    the stage; `verdict` reads everything back and checks it."""

    def __init__(
        self,
        bootstrap: str,
        producers: int = 3,
        stage_members: int = 2,
        seed: int = 0,
        abort_fraction: float = ABORT_FRACTION,
    ) -> None:
        self.bootstrap = bootstrap
        self.seed = seed
        self.abort_fraction = abort_fraction
        self.history = History()
        self.run_id = uuid.uuid4().hex[:6]
        self.input_topic = f"{INPUT_TOPIC}-{self.run_id}"
        self.output_topic = f"{OUTPUT_TOPIC}-{self.run_id}"
        self._stop_producers = threading.Event()
        self._stop_stage = threading.Event()
        self._stage_activity = time.monotonic()
        self._producers = [
            threading.Thread(target=self._produce, args=(i,), daemon=True) for i in range(producers)
        ]
        self._stage = [
            threading.Thread(target=self._transform, args=(i,), daemon=True)
            for i in range(stage_members)
        ]

    @property
    def topics(self) -> tuple[str, str]:
        return (self.input_topic, self.output_topic)

    def create_topics(self, replication: int, min_insync: int | None = None) -> None:
        create_topics(self.bootstrap, self.topics, replication, min_insync)

    # -- running ---------------------------------------------------------------------------

    def start(self) -> None:
        for thread in self._producers + self._stage:
            thread.start()

    def stop(self) -> None:
        """Stop the producers, then let the stage consume what is left, then stop it."""
        self._stop_producers.set()
        for thread in self._producers:
            thread.join(180)
        # The stage has consumed what the producers left once it has read nothing for a while
        # (its consumer's position passes aborted data and markers without returning them).
        deadline = time.monotonic() + STAGE_DRAIN_TIMEOUT_S
        while (
            time.monotonic() < deadline
            and time.monotonic() - self._stage_activity < STAGE_DRAIN_IDLE_S
        ):
            time.sleep(0.2)
        self._stop_stage.set()
        for thread in self._stage:
            thread.join(180)

    def abandon(self) -> None:
        """Tell every thread to stop without waiting (the cluster is going away)."""
        self._stop_producers.set()
        self._stop_stage.set()

    def join(self, timeout: float) -> list[str]:
        """Wait, `timeout` seconds in all, for every thread to close its clients; the names
        of those still running."""
        return join_all(self._producers + self._stage, timeout)

    def committed(self) -> int:
        return sum(1 for t in self.history.transactions if t.outcome == COMMITTED)

    def _produce(self, index: int) -> None:
        rng = random.Random(f"{self.seed}/producer/{index}")
        transactional_id = f"txn-producer-{self.run_id}-{index}"
        producer = None
        number = 0
        retries = InitRetries()
        try:
            while not self._stop_producers.is_set():
                if producer is None:
                    try:
                        producer = _transactional_producer(self.bootstrap, transactional_id)
                        retries.succeeded()
                    except KafkaException as failure:
                        self.history.errors.append(f"{transactional_id} init: {failure.args[0]}")
                        if not retries.again():
                            self.history.errors.append(f"{transactional_id}: {retries}")
                            return
                        continue
                attempt = Transaction(f"{transactional_id}/{number}", transactional_id, ABORTED)
                self.history.transactions.append(attempt)
                number += 1
                try:
                    producer.begin_transaction()
                    for position in range(rng.randint(1, 6)):
                        write = Write(
                            self.input_topic,
                            rng.randrange(PARTITIONS),
                            f"{attempt.txn}/{position}".encode(),
                        )
                        attempt.writes.append(write)
                        producer.produce(write.topic, value=write.value, partition=write.partition)
                    abort = rng.random() < self.abort_fraction
                    if abort:
                        # Written to the log first, so that the abort has records to hide
                        # (aborting unsent records only drops them in the client).
                        producer.flush(CLIENT_TIMEOUT_S)
                    keep = _finish(producer, attempt, abort, self.history)
                except KafkaException as failure:
                    # begin or produce refused: commit was never asked for.
                    self.history.errors.append(f"{attempt.txn}: {failure.args[0]}")
                    keep = False
                except BufferError as failure:
                    self.history.errors.append(f"{attempt.txn}: {failure}")
                    keep = _finish(producer, attempt, True, self.history)
                if not keep:
                    # A new producer fences this one and aborts what it left.
                    drop_transactional_producer(producer)
                    producer = None
        finally:
            drop_transactional_producer(producer)
            producer = None

    def _stage_consumer(self) -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"{STAGE_GROUP}-{self.run_id}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "fetch.wait.max.ms": 100,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        consumer.subscribe([self.input_topic])
        return consumer

    def _transform(self, index: int) -> None:
        rng = random.Random(f"{self.seed}/stage/{index}")
        transactional_id = f"txn-stage-{self.run_id}-{index}"
        consumer = producer = None
        number = 0
        retries = InitRetries()
        try:
            while not self._stop_stage.is_set():
                try:
                    if consumer is None:
                        consumer = self._stage_consumer()
                    if producer is None:
                        producer = _transactional_producer(self.bootstrap, transactional_id)
                    retries.succeeded()
                except KafkaException as failure:
                    self.history.errors.append(f"{transactional_id} init: {failure.args[0]}")
                    if not retries.again():
                        self.history.errors.append(f"{transactional_id}: {retries}")
                        return
                    continue
                messages = [m for m in consumer.consume(200, 0.2) if m.error() is None]
                if not messages:
                    continue
                self._stage_activity = time.monotonic()
                attempt = Transaction(f"{transactional_id}/{number}", transactional_id, ABORTED)
                number += 1
                ends: dict[tuple[str, int], int] = {}
                starts: dict[tuple[str, int], int] = {}
                for message in messages:
                    key = (message.topic(), message.partition())
                    attempt.consumed.append(Record(*key, message.offset(), message.value()))
                    ends[key] = max(ends.get(key, -1), message.offset() + 1)
                    starts[key] = min(starts.get(key, message.offset()), message.offset())
                attempt.offsets = dict(ends)
                abort = rng.random() < self.abort_fraction
                keep = True
                self.history.transactions.append(attempt)
                try:
                    producer.begin_transaction()
                    for message in messages:
                        write = Write(
                            self.output_topic,
                            message.partition(),
                            attempt.txn.encode() + b"|" + message.value(),
                        )
                        attempt.writes.append(write)
                        producer.produce(write.topic, value=write.value, partition=write.partition)
                    producer.send_offsets_to_transaction(
                        [TopicPartition(t, p, o) for (t, p), o in ends.items()],
                        consumer.consumer_group_metadata(),
                        CLIENT_TIMEOUT_S,
                    )
                    keep = _finish(producer, attempt, abort, self.history)
                except KafkaException as failure:
                    self.history.errors.append(f"{attempt.txn}: {failure.args[0]}")
                    keep = False
                if keep and attempt.outcome == ABORTED:
                    try:  # read the batch again: its offsets were not committed
                        for (topic, partition), offset in starts.items():
                            consumer.seek(TopicPartition(topic, partition, offset))
                    except KafkaException:
                        keep = False  # revoked meanwhile: start over from the group's offsets
                if not keep:
                    consumer.close()
                    drop_transactional_producer(producer)
                    consumer = producer = None
        finally:
            if consumer is not None:
                consumer.close()
            drop_transactional_producer(producer)
            producer = None

    # -- judging ---------------------------------------------------------------------------

    def group_offsets(self) -> dict[tuple[str, int], int]:
        reader = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"{STAGE_GROUP}-{self.run_id}",
                "enable.auto.commit": False,
            }
        )
        try:
            committed = reader.committed(
                [TopicPartition(self.input_topic, p) for p in range(PARTITIONS)], timeout=30
            )
        finally:
            reader.close()
        return {(self.input_topic, c.partition): c.offset for c in committed if c.offset >= 0}

    def verdict(self, isolation: str = "read_committed") -> tuple[Verdict, int]:
        """The checker's verdict on a read_committed read of both topics, and how many
        partitions the read could not finish. (`isolation` read_uncommitted is the negative
        control: the checker must then find the aborted records.)"""
        read, unread = read_committed_everything(self.bootstrap, self.topics, isolation=isolation)
        return check(self.history.transactions, read, self.group_offsets()), unread


def read_committed_everything(
    bootstrap: str,
    topics: tuple[str, ...],
    stall_s: float = FINAL_READ_STALL_S,
    isolation: str = "read_committed",
) -> tuple[list[Record], int]:
    """Every record of `topics` a read_committed consumer returns, from offset 0 until its
    position reaches each partition's high watermark (all transactions have ended, so the
    last stable offset reaches it too); gives up after `stall_s` without progress and says
    how many partitions it did not finish."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"txn-final-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    partitions = [TopicPartition(t, p, 0) for t in topics for p in range(PARTITIONS)]
    try:
        # High watermarks from a read_uncommitted consumer: librdkafka asks ListOffsets with
        # the consumer's isolation level, and a read_committed one is told the LSO.
        watermarks = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "txn-final-watermarks",
                "isolation.level": "read_uncommitted",  # librdkafka's default: read_committed
            }
        )
        try:
            ends = {(tp.topic, tp.partition): high_watermark(watermarks, tp) for tp in partitions}
        finally:
            watermarks.close()
        consumer.assign(partitions)
        read: list[Record] = []
        last_progress = time.monotonic()
        pending = {key for key, end in ends.items() if end > 0}
        while pending and time.monotonic() - last_progress < stall_s:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    read.append(
                        Record(
                            message.topic(), message.partition(), message.offset(), message.value()
                        )
                    )
                    last_progress = time.monotonic()
            positions = consumer.position([TopicPartition(t, p) for t, p in pending])
            for position in positions:
                if position.offset >= ends[(position.topic, position.partition)]:
                    pending.discard((position.topic, position.partition))
                    last_progress = time.monotonic()
    finally:
        consumer.close()
    return read, len(pending)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.txn_workload", description=__doc__)
    parser.add_argument("bootstrap")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--replication", type=int, default=1)
    parser.add_argument(
        "--final-isolation",
        default="read_committed",
        choices=("read_committed", "read_uncommitted"),
        help="read_uncommitted: a negative control, the checker must report aborted reads",
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    if reason := transactions_refused(args.bootstrap):
        print(f"transactions not served: {reason}", file=sys.stderr)
        return 2
    workload = TransactionalWorkload(args.bootstrap, seed=seed)
    workload.create_topics(args.replication)
    started = time.monotonic()
    workload.start()
    time.sleep(args.seconds)
    workload.stop()
    verdict, unread = workload.verdict(args.final_isolation)
    stage = [t for t in workload.history.transactions if t.txn.startswith("txn-stage-")]
    print(
        f"seed {seed}, {time.monotonic() - started:.1f} s; consume-transform-produce:"
        f" {sum(1 for t in stage if t.outcome == COMMITTED)} of {len(stage)} transactions"
        f" committed, {sum(len(t.consumed) for t in stage if t.outcome == COMMITTED)} inputs"
    )
    print(verdict.summary())
    if unread:
        print(f"THE FINAL READ STALLED on {unread} partitions")
    print(f"client errors: {len(workload.history.errors)}")
    for line in workload.history.errors[:10]:
        print(f"  {line}")
    return 0 if verdict.clean and not unread else 1


if __name__ == "__main__":
    sys.exit(main())


# What a client refreshes its metadata after and asks again: the partition unknown to its
# metadata yet, a leader that moved (or is being elected) since that metadata was read, or a
# request that librdkafka failed locally because the connection it was sent on went away:
# _DESTROY_BROKER when it decommissions a broker handle (librdkafka >= 2.10 drops a broker that
# one metadata response leaves out, and a broker's cache can briefly lag behind a broker that
# has just re-registered after a ZooKeeper fault, as a Kafka broker's can), _TRANSPORT when the
# connection dropped. Neither says anything about the data: the next try asks again.
_WATERMARK_RETRIABLE = (
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError._DESTROY_BROKER,
    KafkaError._TRANSPORT,
)


def high_watermark(consumer: Consumer, partition: TopicPartition, timeout_s: float = 60.0) -> int:
    """The partition's high watermark, asked again (after a metadata refresh) while the
    client's metadata does not know the partition or names a leader that no longer leads it.

    A producer or consumer retries such errors after refreshing its metadata; librdkafka's
    get_watermark_offsets fails at once instead (a broker that was just cut off may answer
    the first metadata request from a stale cache, and one that was deposed answers
    NOT_LEADER_FOR_PARTITION until the client asks the new leader). Each retry is reported on
    stderr with how long the error lasted, so a leader that stays stale is seen."""
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        try:
            high = consumer.get_watermark_offsets(
                partition, timeout=max(1.0, deadline - time.monotonic())
            )[1]
        except KafkaException as error:
            code = error.args[0].code()
            if code not in _WATERMARK_RETRIABLE or time.monotonic() >= deadline:
                raise
            print(
                f"final read: {partition.topic}-{partition.partition}: {error.args[0].name()} after"
                f" {time.monotonic() - started:.1f} s; asking again",
                file=sys.stderr,
            )
            time.sleep(0.5)
            with contextlib.suppress(KafkaException):
                consumer.list_topics(partition.topic, timeout=10)  # a fresh view of the leaders
        else:
            return high
