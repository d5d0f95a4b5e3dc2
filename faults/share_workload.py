"""The share-group workload of the fault harness, and its final read for the checker
(faults/share_checker.py).

Threads of confluent-kafka 2.16 clients against any Kafka-compatible bootstrap:

- an idempotent acks=all producer writing numbered values (``%010d``) round robin to the 3
  partitions of the workload's topic, at a bounded rate (the consumers keep up, so a run's
  drain is short);
- `consumers` ShareConsumers of one share group in explicit acknowledgement mode. Each record
  is acknowledged by its number: REJECT for one in 20, RELEASE at its first delivery (then
  ACCEPT) for another one in 20, RELEASE at every delivery for one in 200 (a poison record,
  archived at ``share.delivery.count.limit``), ACCEPT for the rest; each poll's
  acknowledgements are committed with commit_sync before the next poll.

Why confluent-kafka's ShareConsumer and not a raw-protocol client: it gives everything the
checker needs. Each delivered Message carries its delivery count (``delivery_count()``,
ShareFetch's AcquiredRecords.DeliveryCount), and the acknowledgement commit callback names, per
partition, the offsets a ShareAcknowledge answer confirmed and its error, so an
acknowledgement counts as acknowledged only when the broker said so; an acknowledgement whose
commit raised or whose callback never came stays unconfirmed.

The group has a DLQ (KIP-1191): a topic of the workload's, RF 3, with
``errors.deadletterqueue.group.enable=true``, named by the group config
``errors.deadletterqueue.topic.name`` with ``errors.deadletterqueue.copy.record.enable``, so
the checker can tell each archived record by the ``__dlq.errors.partition`` and
``__dlq.errors.offset`` headers and compare its value.

At the end (`stop`): the producer stops, the consumers go on until every share partition's
start offset (DescribeShareGroupOffsets, asked of the group coordinator) reaches the
partition's high watermark, or until it has not moved for DRAIN_STALL_S; then they close,
and `verdict` reads the start offsets and the DLQ topic and calls the checker.

`python -m faults.share_workload BOOTSTRAP [--seconds S]` runs it once against any cluster
without faults and prints the checker's verdict.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import threading
import time
import uuid

from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.static.primitive import i8, i32

from faults.share_checker import (
    ACCEPT,
    REJECT,
    RELEASE,
    Ack,
    DeadLetter,
    Delivery,
    ShareVerdict,
    check,
)
from faults.txn_workload import join_all
from minibroker.protocol import share_group_offsets_schemas as offsets_schemas
from minibroker.tools import wire

TOPIC = "share"
DLQ_PREFIX = "dlq."
PARTITIONS = 3
GROUP = "share-workers"
DELIVERY_LIMIT = 3
RATE_PER_S = 100
COMMIT_TIMEOUT_S = 30.0
DRAIN_STALL_S = 90.0
DRAIN_TIMEOUT_S = 300.0
FINAL_READ_STALL_S = 60.0
CLIENT_THREADS_STOP_S = 120.0
ACK_TYPES = {
    ACCEPT: AcknowledgeType.ACCEPT,
    RELEASE: AcknowledgeType.RELEASE,
    REJECT: AcknowledgeType.REJECT,
}


def acknowledgement_for(value: bytes, delivery_count: int) -> str:
    """What the workload answers to a delivery of `value` (a number), by its number."""
    number = int(value)
    if number % 200 == 17:
        return RELEASE  # poison: released until archived at the delivery limit
    if number % 20 == 7:
        return REJECT
    if number % 20 == 3 and delivery_count == 1:
        return RELEASE
    return ACCEPT


class ShareWorkload:
    """The producer and the share consumers, each a thread; `stop` drains; `verdict` reads
    the final state and checks it."""

    def __init__(
        self, bootstrap: str, consumers: int = 3, seed: int = 0, rate: int = RATE_PER_S
    ) -> None:
        self.bootstrap = bootstrap
        self.seed = seed
        self.rate = rate
        self.run_id = uuid.uuid4().hex[:6]
        self.topic = f"{TOPIC}-{self.run_id}"
        self.dlq = f"{DLQ_PREFIX}{self.topic}"
        self.group = f"{GROUP}-{self.run_id}"
        self.produced: dict[tuple[int, int], bytes] = {}
        self.send_failures: list[str] = []
        self.deliveries: list[Delivery] = []
        self.acks: list[Ack] = []
        self.errors: list[str] = []
        # commit_sync calls whose answer named not every partition acknowledged.
        self.unanswered_commits: list[str] = []
        self.drain_stalled: dict[int, tuple[int, int]] = {}
        self._stop_producer = threading.Event()
        self._stop_consumers = threading.Event()
        self._producer = threading.Thread(target=self._produce, name="share-producer", daemon=True)
        self._consumers = [
            threading.Thread(
                target=self._consume, args=(i,), name=f"share-consumer-{i}", daemon=True
            )
            for i in range(consumers)
        ]

    @property
    def topics(self) -> tuple[str, str]:
        return (self.topic, self.dlq)

    def setup(self, replication: int, min_insync: int | None = None) -> None:
        """The topic and the DLQ topic, and the group's configs (set before any member joins:
        a share partition reads them when it is created)."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        try:
            config = {} if min_insync is None else {"min.insync.replicas": str(min_insync)}
            futures = admin.create_topics(
                [
                    NewTopic(self.topic, PARTITIONS, replication, config=config),
                    NewTopic(
                        self.dlq,
                        PARTITIONS,
                        replication,
                        config={**config, "errors.deadletterqueue.group.enable": "true"},
                    ),
                ]
            )
            for future in futures.values():
                future.result(60)
            resource = ConfigResource(
                ResourceType.GROUP,
                self.group,
                incremental_configs=[
                    ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
                    for name, value in {
                        "share.auto.offset.reset": "earliest",
                        "share.delivery.count.limit": str(DELIVERY_LIMIT),
                        "errors.deadletterqueue.topic.name": self.dlq,
                        "errors.deadletterqueue.copy.record.enable": "true",
                    }.items()
                ],
            )
            admin.incremental_alter_configs([resource])[resource].result(timeout=60)
        finally:
            del admin

    # -- running ---------------------------------------------------------------------------

    def start(self) -> None:
        self._producer.start()
        for thread in self._consumers:
            thread.start()

    def final(self) -> int:
        """Acknowledgements confirmed so far (the harness waits for the first ones)."""
        return sum(1 for ack in list(self.acks) if ack.confirmed)

    def stop(self) -> None:
        """Stop the producer, let the consumers drain the topic, then stop them."""
        self._stop_producer.set()
        self._producer.join(CLIENT_THREADS_STOP_S)
        ends = self.drain_targets(self.high_watermarks(self.topic), self.produced)
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        # The highest start offset seen per partition: a describe that fails (its coordinator
        # moving) is no answer, and does not count as progress either.
        best: dict[int, int] = {}
        moved = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - moved < DRAIN_STALL_S:
            for partition, start in self.start_offsets().items():
                if start > best.get(partition, -1):
                    best[partition] = start
                    moved = time.monotonic()
            if all(best.get(p, -1) >= end for p, end in ends.items()):
                break
            time.sleep(0.5)
        else:
            self.drain_stalled = {p: (best.get(p, -1), end) for p, end in ends.items()}
        self._stop_consumers.set()
        join_all(self._consumers, CLIENT_THREADS_STOP_S)

    def abandon(self) -> None:
        self._stop_producer.set()
        self._stop_consumers.set()

    def join(self, timeout: float) -> list[str]:
        return join_all([self._producer, *self._consumers], timeout)

    def _produce(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 300_000,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

        def delivered(error, message):
            if error is not None:
                self.send_failures.append(f"{message.value()!r}: {error}")
            else:
                self.produced[(message.partition(), message.offset())] = message.value()

        number = 0
        started = time.monotonic()
        try:
            while not self._stop_producer.is_set():
                due = int((time.monotonic() - started) * self.rate)
                while number < due:
                    try:
                        producer.produce(
                            self.topic,
                            value=b"%010d" % number,
                            partition=number % PARTITIONS,
                            on_delivery=delivered,
                        )
                    except BufferError:
                        break
                    number += 1
                producer.poll(0.02)
            producer.flush(240)
        finally:
            with contextlib.suppress(KafkaException):
                producer.purge()
                producer.flush(0)
            producer.close()

    def _share_consumer(self, pending: dict[tuple[int, int], Ack]) -> ShareConsumer:
        consumer = ShareConsumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "share.acknowledgement.mode": "explicit",
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

        def committed(offsets, exception):
            if exception is not None:
                self.errors.append(f"acknowledgement commit: {exception}")
                return
            for partition, confirmed in offsets.items():
                if partition.topic != self.topic:
                    continue
                for offset in confirmed:
                    ack = pending.get((partition.partition, offset))
                    if ack is not None:
                        ack.confirmed = True

        consumer.set_acknowledgement_commit_callback(committed)
        consumer.subscribe([self.topic])
        return consumer

    def _consume(self, index: int) -> None:
        name = f"consumer-{index}"
        pending: dict[tuple[int, int], Ack] = {}
        consumer = None
        try:
            while not self._stop_consumers.is_set():
                if consumer is None:
                    try:
                        consumer = self._share_consumer(pending)
                    except KafkaException as failure:
                        failure.__traceback__ = None
                        self.errors.append(f"{name} start: {failure}")
                        time.sleep(0.5)
                        continue
                try:
                    messages = consumer.poll(0.5) or []
                    pending.clear()
                    for message in messages:
                        if message.error() is not None:
                            self.errors.append(f"{name} poll: {message.error()}")
                            continue
                        count = message.delivery_count()
                        delivery = Delivery(
                            message.partition(), message.offset(), message.value(), count, name
                        )
                        self.deliveries.append(delivery)
                        kind = acknowledgement_for(message.value(), count)
                        ack = Ack(message.partition(), message.offset(), kind, count)
                        pending[(ack.partition, ack.offset)] = ack
                        self.acks.append(ack)
                        consumer.acknowledge(message, ACK_TYPES[kind])
                    if pending:
                        self._committed(name, pending, consumer.commit_sync(COMMIT_TIMEOUT_S))
                except KafkaException as failure:
                    # Unconfirmed acknowledgements stay unconfirmed; a new consumer starts over.
                    failure.__traceback__ = None
                    self.errors.append(f"{name}: {failure}")
                    self._close(consumer)
                    consumer = None
        finally:
            self._close(consumer)

    def _committed(self, name: str, pending: dict[tuple[int, int], Ack], results) -> None:
        """commit_sync's answer, per partition (None: the broker confirmed that partition's
        acknowledgements), for the acknowledgements the callback did not already confirm;
        a partition it does not name stays unconfirmed."""
        answered = set()
        for partition, error in (results or {}).items():
            if partition.topic != self.topic:
                continue
            answered.add(partition.partition)
            if error is not None:
                self.errors.append(f"{name} commit {partition.partition}: {error}")
                continue
            for (number, _offset), ack in pending.items():
                if number == partition.partition:
                    ack.confirmed = True
        if missing := {p for p, _ in pending} - answered:
            self.unanswered_commits.append(f"{name}: partitions {sorted(missing)}")

    def _close(self, consumer: ShareConsumer | None) -> None:
        if consumer is not None:
            try:
                consumer.close()
            except Exception as failure:  # noqa: BLE001 - a closing consumer's error is only reported
                failure.__traceback__ = None
                self.errors.append(f"close: {failure}")

    # -- the final state ---------------------------------------------------------------------

    @staticmethod
    def drain_targets(
        high_watermarks: dict[int, int], produced: dict[tuple[int, int], bytes]
    ) -> dict[int, int]:
        """The offset each share partition's start offset must reach before the consumers stop:
        the high watermark read, or one past the last record the producer was told was
        written, whichever is higher. A leader not yet told of its successor (a broker the
        controller could not reach while it failed over) answers ListOffsets with its own,
        older high watermark; the drain once stopped there and left 621 acknowledged records
        of the new leader unread, judged lost (seed 2009, 2026-12-03)."""
        ends = dict(high_watermarks)
        for partition, offset in produced:
            ends[partition] = max(ends.get(partition, -1), offset + 1)
        return ends

    def high_watermarks(self, topic: str) -> dict[int, int]:
        from faults.txn_workload import high_watermark

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"hw-{self.run_id}"})
        try:
            return {
                p: high_watermark(consumer, TopicPartition(topic, p)) for p in range(PARTITIONS)
            }
        finally:
            consumer.close()

    def _call_any(self, request, key_type: int, key: str):
        """Send `request` to the coordinator FindCoordinator names for `key`; None when no
        broker answers."""
        for address in self.bootstrap.split(","):
            try:
                with wire.connect(address, 5.0) as client:
                    found = client.call(
                        FindCoordinatorRequest(key_type=i8(key_type), coordinator_keys=(key,))
                    )
                (coordinator,) = found.coordinators
                if coordinator.error_code != 0:
                    continue
                with wire.connect((str(coordinator.host), int(coordinator.port)), 10.0) as client:
                    return client.call(request)
            except (OSError, wire.WireError, ValueError):
                continue
        return None

    def start_offsets(self) -> dict[int, int]:
        """Each share partition's start offset (DescribeShareGroupOffsets v1 to the group's
        coordinator); partitions not answered cleanly are left out."""
        s = offsets_schemas
        request = s.DescribeShareGroupOffsetsRequestV1(
            groups=(
                s.DescribeRequestGroupV1(
                    group_id=self.group,
                    topics=(
                        s.DescribeRequestTopicV1(
                            topic_name=self.topic,
                            partitions=tuple(i32(p) for p in range(PARTITIONS)),
                        ),
                    ),
                ),
            )
        )
        answer = self._call_any(request, 0, self.group)
        if answer is None:
            return {}
        starts = {}
        for group in answer.groups:
            if group.error_code != 0:
                continue
            for topic in group.topics:
                for partition in topic.partitions:
                    if partition.error_code == 0:
                        starts[int(partition.partition_index)] = int(partition.start_offset)
        return starts

    def final_start_offsets(self, timeout: float = 120.0) -> dict[int, int]:
        deadline = time.monotonic() + timeout
        while True:
            starts = self.start_offsets()
            if len(starts) == PARTITIONS or time.monotonic() > deadline:
                return starts
            time.sleep(0.5)

    def dead_letters(self) -> tuple[list[DeadLetter], int]:
        """Every record of the DLQ topic to its high watermarks, and how many partitions the
        read could not finish."""
        ends = self.high_watermarks(self.dlq)
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"dlq-reader-{self.run_id}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
            }
        )
        letters: list[DeadLetter] = []
        read: dict[int, int] = {p: 0 for p in range(PARTITIONS)}
        try:
            consumer.assign([TopicPartition(self.dlq, p, 0) for p in range(PARTITIONS)])
            last_progress = time.monotonic()
            while (
                any(read[p] < ends[p] for p in read)
                and time.monotonic() - last_progress < FINAL_READ_STALL_S
            ):
                for message in consumer.consume(1000, 0.5):
                    if message.error() is not None:
                        continue
                    read[message.partition()] = message.offset() + 1
                    last_progress = time.monotonic()
                    headers = {k: v.decode() for k, v in message.headers() or []}
                    if headers.get("__dlq.errors.topic") != self.topic:
                        continue
                    letters.append(
                        DeadLetter(
                            int(headers["__dlq.errors.partition"]),
                            int(headers["__dlq.errors.offset"]),
                            int(headers["__dlq.errors.delivery.count"]),
                            message.value(),
                        )
                    )
        finally:
            consumer.close()
        return letters, sum(1 for p in read if read[p] < ends[p])

    def verdict(self) -> tuple[ShareVerdict, int]:
        """The checker's verdict, and how many partitions the final read did not finish (of
        the DLQ, and of the start offsets: a partition whose start offset no describe
        answered counts its records as lost, and the run as unread)."""
        starts = self.final_start_offsets()
        letters, unread = self.dead_letters()
        unread += PARTITIONS - len(starts)
        verdict = check(
            dict(self.produced),
            list(self.deliveries),
            list(self.acks),
            starts,
            letters,
            DELIVERY_LIMIT,
            drained=not self.drain_stalled,
        )
        # An undrained topic is not judged clean: its records not final are not judged.
        return verdict, unread + (PARTITIONS if self.drain_stalled else 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.share_workload", description=__doc__)
    parser.add_argument("bootstrap")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--replication", type=int, default=1)
    args = parser.parse_args(argv)
    workload = ShareWorkload(args.bootstrap, seed=random.randrange(2**31))
    workload.setup(args.replication)
    started = time.monotonic()
    workload.start()
    time.sleep(args.seconds)
    workload.stop()
    verdict, unread = workload.verdict()
    print(f"{time.monotonic() - started:.1f} s")
    print(verdict.summary())
    if workload.drain_stalled:
        print(f"THE DRAIN STALLED: (start offset, high watermark) {workload.drain_stalled}")
    if unread:
        print(f"THE DLQ READ STALLED on {unread} partitions")
    print(f"client errors: {len(workload.errors)}")
    for line in workload.errors[:10]:
        print(f"  {line}")
    return 0 if verdict.clean and not unread else 1


if __name__ == "__main__":
    sys.exit(main())
