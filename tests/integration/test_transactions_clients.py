"""Transactions as the real clients use them, on a 3-broker cluster: confluent-kafka
(librdkafka) init/begin/produce/commit/abort, send_offsets_to_transaction in a
consume-transform-produce loop, read_committed consumers, a zombie producer fenced, an expired
transaction aborted by the coordinator; kafka-python and aiokafka transactional producers and
read_committed consumers.

Every test skips, with the broker's answer, while the cluster refuses transactional ids
(FindCoordinator or InitProducerId answering TRANSACTIONAL_ID_AUTHORIZATION_FAILED): the module
turns itself on once minibroker serves transactions.

``MINIBROKER_TEST_AGAINST_KAFKA=1`` runs the same tests against Apache Kafka (one KRaft node,
bench/kafka_ref.py, needs java/fetch.sh to have run) instead of minibroker: the check that the
tests ask what Kafka does.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from faults.txn_workload import java_string_hash, transactions_refused
from tests.cluster.conftest import CLUSTER_OVERRIDES, _check_clean_stop

AGAINST_KAFKA = os.environ.get("MINIBROKER_TEST_AGAINST_KAFKA") == "1"
PARTITIONS = 3
BROKERS = 3
TRANSACTION_STATE_TOPIC = "__transaction_state"
TRANSACTION_STATE_PARTITIONS = 50  # transaction.state.log.num.partitions, Kafka's default
TIMEOUT = 30.0
# The coordinator looks for expired transactions this often (Kafka's default is 10 s).
TXN_OVERRIDES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}


class Target:
    """What the tests need of the system under test: a bootstrap, its name, and kill -9 and
    restart of a broker by node id."""

    def __init__(
        self,
        bootstrap: str,
        name: str,
        replication: int,
        kill: Callable[[int], None],
        restart: Callable[[int], None],
    ) -> None:
        self.bootstrap = bootstrap
        self.name = name
        self.replication = replication
        self.kill = kill
        self.restart = restart


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Iterator[Target]:
    """Three minibroker brokers and a controller (the cluster tests' short timeouts), or with
    MINIBROKER_TEST_AGAINST_KAFKA=1 three Apache Kafka nodes; skipped while transactional
    ids are refused."""
    base: Path = tmp_path_factory.mktemp("txn-clients")
    if AGAINST_KAFKA:
        from bench.kafka_ref import KafkaCluster, missing_reason

        if (reason := missing_reason("kafka")) is not None:
            pytest.skip(f"Apache Kafka reference: {reason}")
        kafka = KafkaCluster.start(base, nodes=BROKERS, overrides=TXN_OVERRIDES)
        nodes = {node.node_id: node for node in kafka.nodes}
        try:
            yield Target(
                kafka.bootstrap,
                "kafka",
                BROKERS,
                lambda node_id: kafka.kill_node(nodes[node_id]),
                lambda node_id: kafka.restart_node(nodes[node_id]),
            )
        finally:
            kafka.stop()
        return
    from minibroker.tools.launcher import Cluster

    cluster = Cluster.start(base, brokers=BROKERS, overrides={**CLUSTER_OVERRIDES, **TXN_OVERRIDES})

    def restart(node_id: int) -> None:
        cluster.brokers[node_id].restart()
        cluster.brokers[node_id].wait_ready()

    try:
        if reason := transactions_refused(cluster.bootstrap):
            pytest.skip(f"the cluster does not serve transactions: {reason}")
        yield Target(
            cluster.bootstrap,
            "minibroker",
            BROKERS,
            lambda node_id: cluster.brokers[node_id].kill(),
            restart,
        )
    finally:
        _check_clean_stop(cluster)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_topic(target: Target, prefix: str, partitions: int = PARTITIONS) -> str:
    topic = unique(prefix)
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, target.replication)])[topic].result(TIMEOUT)
    return topic


def txn_producer(target: Target, transactional_id: str, **settings: object) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": target.bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **settings,
        }
    )
    producer.init_transactions(TIMEOUT)
    return producer


def read_all(
    target: Target,
    topic: str,
    isolation: str = "read_committed",
    partitions: int = PARTITIONS,
    timeout: float = TIMEOUT,
) -> list[bytes]:
    """Every value of `topic` a consumer with `isolation` returns, read until its position
    reaches each partition's high watermark (which a read_committed consumer passes only once
    the last stable offset got there: every transaction on the partition has ended)."""
    consumer = Consumer(
        {
            "bootstrap.servers": target.bootstrap,
            "group.id": unique("reader"),
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        assigned = [TopicPartition(topic, p, 0) for p in range(partitions)]
        ends = high_watermarks(target, topic, partitions)
        consumer.assign(assigned)
        values: list[bytes] = []
        pending = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout
        while pending:
            assert time.monotonic() < deadline, (
                f"{isolation} read of {topic} stuck: positions"
                f" {consumer.position(assigned)}, high watermarks {ends}, read {len(values)}"
            )
            for message in consumer.consume(1000, 0.2):
                assert message.error() is None, message.error()
                values.append(message.value())
            for position in consumer.position([TopicPartition(topic, p) for p in pending]):
                if position.offset >= ends[position.partition]:
                    pending.discard(position.partition)
        return values
    finally:
        consumer.close()


def high_watermarks(target: Target, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high watermark, asked by a read_uncommitted consumer (librdkafka asks
    ListOffsets with the consumer's isolation level: a read_committed one is told the LSO)."""
    consumer = Consumer(
        {
            "bootstrap.servers": target.bootstrap,
            "group.id": unique("hw"),
            "isolation.level": "read_uncommitted",  # librdkafka's default is read_committed
        }
    )
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


# -- confluent-kafka -------------------------------------------------------------------------


def test_committed_records_are_read_and_aborted_ones_are_not(target):
    topic = new_topic(target, "txn-basic")
    producer = txn_producer(target, unique("basic"))
    for batch, commit in (("first", True), ("aborted", False), ("second", True)):
        producer.begin_transaction()
        for index, value in enumerate(values(batch, 12)):
            producer.produce(topic, value=value, partition=index % PARTITIONS)
        if commit:
            producer.commit_transaction(TIMEOUT)
        else:
            producer.flush(TIMEOUT)  # the aborted records are in the log, then aborted
            producer.abort_transaction(TIMEOUT)
    committed = read_all(target, topic)
    assert sorted(committed) == sorted(values("first", 12) + values("second", 12))
    # read_uncommitted returns the aborted records too: they were written, then aborted.
    everything = read_all(target, topic, "read_uncommitted")
    assert sorted(everything) == sorted(
        values("first", 12) + values("aborted", 12) + values("second", 12)
    )


def test_read_committed_waits_for_an_open_transaction(target):
    topic = new_topic(target, "txn-open", partitions=1)
    producer = txn_producer(target, unique("open"))
    producer.begin_transaction()
    for value in values("open", 5):
        producer.produce(topic, value=value, partition=0)
    producer.flush(TIMEOUT)
    assert sorted(read_all(target, topic, "read_uncommitted", partitions=1)) == values("open", 5)
    consumer = Consumer(
        {
            "bootstrap.servers": target.bootstrap,
            "group.id": unique("open-reader"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        # Several fetches come back empty while the transaction is open (the LSO is its
        # first offset); then the commit makes every record readable.
        early = [m for m in consumer.consume(100, 2.0) if m.error() is None]
        assert early == []
        producer.commit_transaction(TIMEOUT)
        seen: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(seen) < 5 and time.monotonic() < deadline:
            seen += [m.value() for m in consumer.consume(100, 0.2) if m.error() is None]
        assert seen == values("open", 5)
    finally:
        consumer.close()


def test_consume_transform_produce_with_send_offsets_to_transaction(target):
    """A read_committed member of a group reads the input, writes one output per input record
    and commits its offsets in the same transaction; its first transaction is aborted and the
    batch read again. The output holds every input once, and the group's offsets are at the
    end of the input."""
    source = new_topic(target, "ctp-in")
    sink = new_topic(target, "ctp-out")
    plain = Producer({"bootstrap.servers": target.bootstrap})
    inputs = values("in", 60)
    for index, value in enumerate(inputs):
        plain.produce(source, value=value, partition=index % PARTITIONS)
    assert plain.flush(TIMEOUT) == 0
    group = unique("ctp-group")
    consumer = Consumer(
        {
            "bootstrap.servers": target.bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([source])
    producer = txn_producer(target, unique("ctp"))
    processed: list[bytes] = []
    aborted_once = False
    deadline = time.monotonic() + 60
    try:
        while len(processed) < len(inputs):
            assert time.monotonic() < deadline, f"processed {len(processed)} of {len(inputs)}"
            batch = [m for m in consumer.consume(25, 0.5) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for message in batch:
                producer.produce(
                    sink, value=b"out:" + message.value(), partition=message.partition()
                )
            positions: dict[int, int] = {}
            starts: dict[int, int] = {}
            for message in batch:
                positions[message.partition()] = max(
                    positions.get(message.partition(), 0), message.offset() + 1
                )
                starts.setdefault(message.partition(), message.offset())
            producer.send_offsets_to_transaction(
                [TopicPartition(source, p, o) for p, o in positions.items()],
                consumer.consumer_group_metadata(),
                TIMEOUT,
            )
            if not aborted_once:
                producer.abort_transaction(TIMEOUT)
                aborted_once = True
                for partition, offset in starts.items():
                    consumer.seek(TopicPartition(source, partition, offset))
                continue
            producer.commit_transaction(TIMEOUT)
            processed += [m.value() for m in batch]
        committed = consumer.committed(
            [TopicPartition(source, p) for p in range(PARTITIONS)], timeout=TIMEOUT
        )
    finally:
        consumer.close()
    assert sorted(processed) == sorted(inputs)
    assert sorted(read_all(target, sink)) == sorted(b"out:" + v for v in inputs)
    assert {c.partition: c.offset for c in committed} == {
        p: len(inputs) // PARTITIONS for p in range(PARTITIONS)
    }


def test_a_zombie_producer_is_fenced(target):
    topic = new_topic(target, "txn-zombie", partitions=1)
    transactional_id = unique("zombie")
    zombie = txn_producer(target, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(TIMEOUT)
    # A second producer with the same transactional id: InitProducerId bumps the epoch and
    # aborts the zombie's open transaction.
    successor = txn_producer(target, transactional_id)
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(TIMEOUT)
    with pytest.raises(KafkaException) as failure:
        zombie.produce(topic, value=b"zombie-again", partition=0)
        zombie.commit_transaction(TIMEOUT)
    error = failure.value.args[0]
    # Fatal, as on Kafka: a fenced producer must not go on (librdkafka's test 0103, "produce
    # after fence"; PRODUCER_FENCED on a Produce would only make the transaction abortable).
    assert error.fatal(), error
    assert error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), error
    assert read_all(target, topic, partitions=1) == [b"successor"]


def test_an_expired_transaction_is_aborted_by_the_coordinator(target):
    """transaction.timeout.ms 2 s and the producer stalls: the coordinator aborts the
    transaction (bumping the epoch), read_committed sees none of it and the last stable
    offset moves past it; the producer's next commit fails."""
    topic = new_topic(target, "txn-expired", partitions=1)
    producer = txn_producer(target, unique("expired"), **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    for value in values("expired", 4):
        producer.produce(topic, value=value, partition=0)
    producer.flush(TIMEOUT)
    started = time.monotonic()
    # read_all finishes only when the LSO reaches the high watermark: the coordinator has
    # written the ABORT marker without being asked.
    assert read_all(target, topic, partitions=1, timeout=TIMEOUT) == []
    assert time.monotonic() - started < TIMEOUT
    with pytest.raises(KafkaException) as failure:
        producer.commit_transaction(TIMEOUT)
    error = failure.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert read_all(target, topic, partitions=1) == []
    plain = read_all(target, topic, "read_uncommitted", partitions=1)
    assert sorted(plain) == values("expired", 4)


def transaction_coordinator(target: Target, transactional_id: str) -> int:
    """The broker leading the transactional id's __transaction_state partition (Kafka:
    abs(String.hashCode) % 50), from Metadata."""
    partition = java_string_hash(transactional_id) % TRANSACTION_STATE_PARTITIONS
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    deadline = time.monotonic() + TIMEOUT
    while True:
        topics = admin.list_topics(TRANSACTION_STATE_TOPIC, timeout=TIMEOUT).topics
        entry = topics[TRANSACTION_STATE_TOPIC].partitions.get(partition)
        if entry is not None and entry.leader >= 0:
            return entry.leader
        assert time.monotonic() < deadline, f"{TRANSACTION_STATE_TOPIC}-{partition} has no leader"
        time.sleep(0.2)


def test_the_coordinator_killed_before_the_commit(target):
    """A transaction on three partitions is open when its coordinator is killed with
    SIGKILL: the commit goes to the new coordinator (the transaction's state was replicated
    in __transaction_state), read_committed sees all of it and the LSO is not left behind;
    a second transaction by the same producer commits too."""
    topic = new_topic(target, "txn-coordinator-kill")
    transactional_id = unique("coordinator-kill")
    producer = txn_producer(target, transactional_id, **{"transaction.timeout.ms": 60_000})
    producer.begin_transaction()
    for index, value in enumerate(values("before", 9)):
        producer.produce(topic, value=value, partition=index % PARTITIONS)
    producer.flush(TIMEOUT)
    coordinator = transaction_coordinator(target, transactional_id)
    target.kill(coordinator)
    try:
        producer.commit_transaction(60)
        producer.begin_transaction()
        for index, value in enumerate(values("after", 9)):
            producer.produce(topic, value=value, partition=index % PARTITIONS)
        producer.commit_transaction(60)
        assert transaction_coordinator(target, transactional_id) != coordinator
        committed = read_all(target, topic, timeout=60)
    finally:
        target.restart(coordinator)
    assert sorted(committed) == sorted(values("before", 9) + values("after", 9))


# -- kafka-python ----------------------------------------------------------------------------


def test_kafka_python_transactions_and_read_committed(target):
    from kafka import KafkaConsumer, KafkaProducer

    topic = new_topic(target, "kp-txn")
    producer = KafkaProducer(
        bootstrap_servers=target.bootstrap,
        transactional_id=unique("kp"),
        max_block_ms=int(TIMEOUT * 1000),
    )
    try:
        producer.init_transactions()
        for batch, commit in (("kp-commit", True), ("kp-abort", False)):
            producer.begin_transaction()
            for index, value in enumerate(values(batch, 9)):
                producer.send(topic, value=value, partition=index % PARTITIONS)
            producer.flush()
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=target.bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    try:
        consumer.assign([__import__("kafka").TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        seen = [record.value for record in consumer]
    finally:
        consumer.close()
    assert sorted(seen) == sorted(values("kp-commit", 9))
    assert sorted(read_all(target, topic)) == sorted(values("kp-commit", 9))


# -- aiokafka --------------------------------------------------------------------------------


def test_aiokafka_transactions_and_read_committed(target):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    topic = new_topic(target, "aio-txn")

    async def scenario() -> list[bytes]:
        producer = AIOKafkaProducer(
            bootstrap_servers=target.bootstrap, transactional_id=unique("aio")
        )
        await producer.start()
        try:
            async with producer.transaction():
                for index, value in enumerate(values("aio-commit", 9)):
                    await producer.send(topic, value=value, partition=index % PARTITIONS)
            await producer.begin_transaction()
            for index, value in enumerate(values("aio-abort", 9)):
                await producer.send(topic, value=value, partition=index % PARTITIONS)
            await producer.flush()
            await producer.abort_transaction()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=target.bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            partitions = [AioTopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            seen: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT
            while len(seen) < 9 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                seen += [record.value for records in batches.values() for record in records]
            # Nothing more: the aborted records never come.
            batches = await consumer.getmany(timeout_ms=1500)
            seen += [record.value for records in batches.values() for record in records]
            return seen
        finally:
            await consumer.stop()

    seen = asyncio.run(scenario())
    assert sorted(seen) == sorted(values("aio-commit", 9))
    assert sorted(read_all(target, topic)) == sorted(values("aio-commit", 9))
