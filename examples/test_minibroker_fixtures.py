"""An application's tests against minibroker, with the pytest plugin's fixtures.

Installing minibroker installs the plugin (the ``pytest11`` entry point); nothing to import or
configure. Run: ``.venv/bin/pytest examples/test_minibroker_fixtures.py``.

The module shares one broker and one three-broker cluster among its tests (scope="module");
each test uses its own topics. A shared cluster is reset between tests (faults healed, killed
nodes restarted).
"""

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer

# A crashed broker is fenced once its session expires; 3 s instead of Kafka's 9 s keeps the
# failover test short.
pytestmark = pytest.mark.minibroker(
    scope="module",
    server_properties={"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500},
)


def test_confluent_kafka(kafka_broker):
    kafka_broker.create_topic("confluent", partitions=3)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for number in range(10):
        producer.produce("confluent", key=str(number), value=f"order {number}")
    assert producer.flush(10) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "group.id": "billing",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["confluent"])
    received = []
    for _ in range(100):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            received.append(message.value())
        if len(received) == 10:
            break
    consumer.close()
    assert sorted(received) == sorted(f"order {number}".encode() for number in range(10))


def test_kafka_python(kafka_broker):
    kafka_broker.create_topic("kafka-python")
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    producer.send("kafka-python", b"hello").get(timeout=10)
    producer.close()
    consumer = KafkaConsumer(
        "kafka-python",
        bootstrap_servers=kafka_broker.bootstrap_servers,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10000,
    )
    assert next(iter(consumer)).value == b"hello"
    consumer.close()


def test_aiokafka(kafka_broker):
    kafka_broker.create_topic("aiokafka")

    async def round_trip():
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
        await producer.start()
        try:
            await producer.send_and_wait("aiokafka", b"hello")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "aiokafka",
            bootstrap_servers=kafka_broker.bootstrap_servers,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            message = await asyncio.wait_for(consumer.getone(), 10)
        finally:
            await consumer.stop()
        return message.value

    assert asyncio.run(round_trip()) == b"hello"


def test_a_slow_broker(kafka_cluster):
    kafka_cluster.create_topic("slow", replication_factor=1)
    kafka_cluster.add_latency(kafka_cluster.leader_of("slow"), 200)
    producer = Producer(
        {"bootstrap.servers": kafka_cluster.bootstrap_servers, "message.timeout.ms": 100}
    )
    errors = []
    producer.produce("slow", b"late", on_delivery=lambda error, message: errors.append(error))
    producer.flush(10)
    assert errors[0] is not None  # timed out: the application must handle it


def test_writes_survive_the_leader_crashing(kafka_cluster):
    kafka_cluster.create_topic("orders", replication_factor=3, configs={"min.insync.replicas": 2})
    kafka_cluster.wait_until_in_sync("orders")
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all"})
    producer.produce("orders", b"before")
    assert producer.flush(10) == 0
    kafka_cluster.kill(kafka_cluster.leader_of("orders"))
    producer.produce("orders", b"after")
    assert producer.flush(30) == 0  # a new leader took over
