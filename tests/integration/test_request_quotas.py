"""request_percentage (KIP-124) and controller_mutation_rate (KIP-599) on one broker, with
real clients: a producer whose requests take more of the broker's thread than its quota is
throttled (librdkafka's throttle events) and held back while a producer without a quota on the
same broker keeps its rate; kafka-python's admin client creating, growing and deleting topics
over a controller_mutation_rate gets THROTTLING_QUOTA_EXCEEDED for the topics that did not
fit, and an older CreateTopics (v5) is accepted and then throttled. Kafka's metrics per quota
entity for both. (kafka-configs sets and describes both: tests/java/test_tools.py.)

The broker measures over ``quota.window.num=2`` windows of one second, as
tests/integration/test_client_quotas.py does, so that a throttle comes within seconds.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic

from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.tools.launcher import BrokerProcess, free_port
from tests.conftest import BROKER_READY_TIMEOUT, create_topic, exchange, scrape

METRICS_PORT = free_port()
# 2% of one thread: 20 ms of the broker's time a second.
REQUEST_PERCENTAGE = 2.0
RUN_SECONDS = 4.0
POLL_PERCENTAGE = 20.0
# Two partitions a second: the bucket holds quota.window.num x 1 s x 2 = 4 partitions.
MUTATION_RATE = 2.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    log_dir = Path(tmp_path_factory.mktemp("request-quotas")) / "data"
    broker = BrokerProcess.start(
        node_id=1, log_dir=log_dir, overrides={"quota.window.num": 2, "metrics.port": METRICS_PORT}
    )
    try:
        broker.wait_ready(BROKER_READY_TIMEOUT)
        yield broker
    finally:
        assert broker.stop() == 0, broker.log_tail()


def set_quota(bootstrap: str, names: dict[str, str | None], key: str, value: float | None):
    request = codec.build(
        codec.request_class(ApiKey.ALTER_CLIENT_QUOTAS, 1),
        {
            "entries": [
                {
                    "entity": [
                        {"entity_type": kind, "entity_name": name} for kind, name in names.items()
                    ],
                    "ops": [{"key": key, "value": value or 0.0, "remove": value is None}],
                }
            ],
            "validate_only": False,
        },
    )
    answer = exchange(bootstrap, request)
    assert [entry.error_code for entry in answer.entries] == [Error.NONE], answer


def produce_one_at_a_time(bootstrap: str, client_id: str, topic: str, seconds: float):
    """Produce one record per request (each waited for) for ``seconds``: the records acked
    and the throttle times the broker answered (librdkafka's throttle events, in seconds)."""
    throttles: list[float] = []
    acked = 0

    def delivered(error, message) -> None:
        nonlocal acked
        if error is None:
            acked += 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 0,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    producer.produce(topic, b"warm-up", on_delivery=delivered)
    producer.flush(10)  # connected and the topic's leader known before the clock starts
    acked = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        producer.produce(topic, b"r" * 100, on_delivery=delivered)
        producer.flush(max(deadline - time.monotonic(), 0.01))
    producer.purge()
    producer.flush(10)
    return acked, throttles


def test_request_percentage_throttles_a_busy_client_and_spares_others(broker):
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "request-quota", 1)
    set_quota(bootstrap, {"client-id": "busy"}, "request_percentage", REQUEST_PERCENTAGE)
    busy, busy_throttles = produce_one_at_a_time(bootstrap, "busy", "request-quota", RUN_SECONDS)
    # Kafka's Request metrics of the entity, while its time is still in the window.
    samples = scrape(METRICS_PORT)
    labels = (("client_id", "busy"), ("user", ""))
    assert samples[("kafka_server_request_request_time", labels)] > 0
    assert samples[("kafka_server_request_throttle_time", labels)] > 0
    assert samples[("kafka_server_request_quota_request_percentage", labels)] == REQUEST_PERCENTAGE
    free, free_throttles = produce_one_at_a_time(bootstrap, "free", "request-quota", RUN_SECONDS)
    print(f"busy: {busy} requests, {len(busy_throttles)} throttled; free: {free} requests")
    assert busy_throttles and max(busy_throttles) > 0
    # Kafka's bound on a request throttle: one sample window (1 s).
    assert max(busy_throttles) <= 1000
    assert not free_throttles
    # The broker holds the busy client back (muted for its throttle times): it gets far fewer
    # requests through than the client without a quota in as long.
    assert free >= 3 * busy, (busy, free)
    set_quota(bootstrap, {"client-id": "busy"}, "request_percentage", None)


def test_a_long_poll_is_not_thread_time(broker):
    """A Fetch waiting for records is parked (Kafka's fetch purgatory), not handled: a
    consumer long-polling an empty topic back to back stays below a request_percentage of
    20%, which its waits (all of its time: 100% of a thread) would pass five times over if they
    counted. (Its first fetch alone can take tens of milliseconds of real work on a loaded
    machine, hence not the 2% of the busy client above.)"""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "request-quota-idle", 1)
    set_quota(bootstrap, {"client-id": "poller"}, "request_percentage", POLL_PERCENTAGE)
    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=250),
        min_bytes=1,
        max_bytes=1 << 20,
        topics=(
            FetchTopic(
                topic="request-quota-idle",
                partitions=(
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    throttles = []
    for _ in range(8):
        started = time.monotonic()
        response = exchange(bootstrap, request, client_id="poller")
        waited = time.monotonic() - started
        assert waited >= 0.2, waited  # it did wait for records
        throttles.append(response.throttle_time.total_seconds())
    assert throttles == [0.0] * 8, throttles
    samples = scrape(METRICS_PORT)
    labels = (("client_id", "poller"), ("user", ""))
    # Two seconds of waiting in the window, measured as a fraction of the quota.
    assert 0 < samples[("kafka_server_request_request_time", labels)] < POLL_PERCENTAGE


def create_topics_v(bootstrap: str, version: int, names: list[str], partitions: int):
    request = codec.build(
        codec.request_class(ApiKey.CREATE_TOPICS, version),
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": (),
                    "configs": (),
                }
                for name in names
            ],
            "timeout": 10_000,
            "validate_only": False,
        },
    )
    return exchange(bootstrap, request, client_id="mutator-old")


def test_controller_mutation_rate_refuses_the_topics_over_it(broker, caplog):
    bootstrap = broker.bootstrap
    set_quota(bootstrap, {"client-id": "mutator"}, "controller_mutation_rate", MUTATION_RATE)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="mutator")
    try:
        # The bucket holds 4 partitions: a topic of 4 goes (0 left), one of 12 goes (-12
        # left: Kafka checks before it records), the third is refused (CreateTopics v7,
        # strict), and the throttle is the 6 s the bucket needs to be back at zero.
        sizes = {"mutation-0": 4, "mutation-1": 12, "mutation-2": 1}
        created = admin.create_topics(
            {name: {"num_partitions": n, "replication_factor": 1} for name, n in sizes.items()},
            raise_errors=False,
        )
    finally:
        admin.close()
    errors = {topic["name"]: topic["error_code"] for topic in created["topics"]}
    assert errors == {
        "mutation-0": Error.NONE,
        "mutation-1": Error.NONE,
        "mutation-2": Error.THROTTLING_QUOTA_EXCEEDED,
    }, created
    # kafka-python logs a response's throttle_time_ms (and sends nothing more to the broker
    # for that long, its KIP-219 side).
    assert "CreateTopicsResponse throttled by broker (6000 ms)" in caplog.text, caplog.text
    samples = scrape(METRICS_PORT)
    labels = (("client_id", "mutator"), ("user", ""))
    assert samples[("kafka_server_controllermutation_mutation_rate", labels)] > 0
    assert samples[("kafka_server_controllermutation_tokens", labels)] < 0
    assert (
        samples[("kafka_server_controllermutation_quota_controller_mutation_rate", labels)]
        == MUTATION_RATE
    )
    assert samples[("kafka_server_controllermutation_throttle_time", labels)] == 6000
    # Still below zero (for seconds): growing a topic (CreatePartitions v3) and deleting one
    # (DeleteTopics v6), sent by the same client id on a connection of its own, are refused.
    grow = codec.build(
        codec.request_class(ApiKey.CREATE_PARTITIONS, 3),
        {
            "topics": [{"name": "mutation-0", "count": 5, "assignments": None}],
            "timeout": 10_000,
            "validate_only": False,
        },
    )
    grown = exchange(bootstrap, grow, client_id="mutator")
    assert [r.error_code for r in grown.results] == [Error.THROTTLING_QUOTA_EXCEEDED], grown
    assert grown.throttle_time.total_seconds() > 0
    delete = codec.build(
        codec.request_class(ApiKey.DELETE_TOPICS, 6),
        {"topics": [{"name": "mutation-0", "topic_id": None}], "timeout": 10_000},
    )
    deleted = exchange(bootstrap, delete, client_id="mutator")
    assert [r.error_code for r in deleted.responses] == [Error.THROTTLING_QUOTA_EXCEEDED]
    # An older CreateTopics (v5 knows no THROTTLING_QUOTA_EXCEEDED): accepted, then throttled.
    set_quota(bootstrap, {"client-id": "mutator-old"}, "controller_mutation_rate", MUTATION_RATE)
    old = create_topics_v(bootstrap, 5, ["mutation-old-0", "mutation-old-1"], 3)
    assert [topic.error_code for topic in old.topics] == [Error.NONE, Error.NONE], old
    assert old.throttle_time.total_seconds() > 0
    # A topic the controller refuses (it exists) gives its partitions back, as Kafka counts
    # only the topics it goes on with: a client retrying it is never throttled.
    set_quota(bootstrap, {"client-id": "retrier"}, "controller_mutation_rate", MUTATION_RATE)
    for _ in range(4):
        retried = codec.build(
            codec.request_class(ApiKey.CREATE_TOPICS, 7),
            {
                "topics": [
                    {
                        "name": "mutation-old-0",
                        "num_partitions": 4,
                        "replication_factor": 1,
                        "assignments": (),
                        "configs": (),
                    }
                ],
                "timeout": 10_000,
                "validate_only": False,
            },
        )
        answer = exchange(bootstrap, retried, client_id="retrier")
        assert [topic.error_code for topic in answer.topics] == [Error.TOPIC_ALREADY_EXISTS]
        assert answer.throttle_time.total_seconds() == 0
    # A client without the quota is not held back.
    free = codec.build(
        codec.request_class(ApiKey.CREATE_TOPICS, 7),
        {
            "topics": [
                {
                    "name": f"unquoted-{i}",
                    "num_partitions": 3,
                    "replication_factor": 1,
                    "assignments": (),
                    "configs": (),
                }
                for i in range(3)
            ],
            "timeout": 10_000,
            "validate_only": False,
        },
    )
    answer = exchange(bootstrap, free)
    assert [topic.error_code for topic in answer.topics] == [Error.NONE] * 3, answer
    assert answer.throttle_time.total_seconds() == 0
