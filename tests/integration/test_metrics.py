"""/metrics on a broker: Kafka's metric names, and values that match what clients did.

One broker for the module (the pytest plugin's `kafka_broker`, module-scoped: `metrics.port`
is read at start), each test on topics and groups of its own; a broker-wide counter or gauge
that another test of the module also moves is judged by its change over the test."""

import socket
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaProducer

from minibroker.testing import Cluster
from minibroker.tools.launcher import BrokerProcess, free_port
from tests.conftest import create_topic, scrape, wait_for

TOPIC = "metered"
METRICS_PORT = free_port()

# The plugin fails the test that closes the broker if it does not shut down cleanly.
pytestmark = pytest.mark.minibroker(
    scope="module", server_properties={"metrics.port": METRICS_PORT}
)


@pytest.fixture
def metered(kafka_broker: Cluster) -> tuple[BrokerProcess, int]:
    """The module's broker (its node: `.bootstrap`, which the helpers take) and its /metrics
    port."""
    return kafka_broker.node(1), METRICS_PORT


def test_counters_and_gauges_follow_what_clients_did(metered):
    broker, port = metered
    leaders_before = scrape(port)[("kafka_server_replicamanager_leadercount", ())]
    create_topic(broker.bootstrap, TOPIC, 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for number in range(300):
        producer.send(TOPIC, value=b"m%d" % number, partition=number % 2)
    producer.flush(timeout=30)
    producer.close()

    samples = scrape(port)
    topic = (("topic", TOPIC),)
    assert samples[("kafka_server_brokertopicmetrics_messagesin_total", topic)] == 300
    assert samples[("kafka_server_brokertopicmetrics_bytesin_total", topic)] > 300 * 2
    produced = samples[("kafka_network_requestmetrics_requests_total", (("request", "Produce"),))]
    assert produced >= 1
    for partition in ("0", "1"):
        labels = (("partition", partition), ("topic", TOPIC))
        assert samples[("kafka_log_log_logendoffset", labels)] == 150
        assert samples[("kafka_cluster_partition_highwatermark", labels)] == 150
        assert samples[("kafka_cluster_partition_laststableoffsetlag", labels)] == 0
    assert samples[("kafka_server_replicamanager_leadercount", ())] == leaders_before + 2
    assert samples[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert samples[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    assert samples[("kafka_controller_kafkacontroller_activebrokercount", ())] == 1
    assert ("process_resident_memory_bytes", ()) in samples
    # The event loop's runs of 1 ms or more (node/loop_stalls.py: the broker's start and the
    # requests above make some) are measured, and garbage collections are timed.
    stalls = sum(
        samples.get(("minibroker_event_loop_stall_seconds_count", (("kind", kind),)), 0)
        for kind in ("busy", "waiting")
    )
    assert stalls >= 1
    assert ("minibroker_gc_pause_seconds_count", (("generation", "0"),)) in samples


def test_an_open_transaction_shows_as_last_stable_offset_lag(metered):
    broker, port = metered
    create_topic(broker.bootstrap, "txn-lag", 1)
    labels = (("partition", "0"), ("topic", "txn-lag"))
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "lag"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for number in range(5):
        producer.produce("txn-lag", b"v%d" % number, partition=0)
    producer.flush(30)
    # Five records past the last stable offset, held back from read_committed consumers.
    assert scrape(port)[("kafka_cluster_partition_laststableoffsetlag", labels)] == 5
    producer.commit_transaction(30)
    wait_for(
        lambda: scrape(port)[("kafka_cluster_partition_laststableoffsetlag", labels)] == 0,
        10,
        "the lag back to 0 after the commit",
    )
    assert scrape(port)[("kafka_cluster_partition_highwatermark", labels)] == 6  # and a marker


def test_error_codes_are_counted_by_request(metered):
    broker, port = metered
    from tests.integration.test_bad_input import Client
    from tests.unit.batch_factory import make_batch

    key = (
        "kafka_network_requestmetrics_errors_total",
        (("error", "UNKNOWN_TOPIC_OR_PARTITION"), ("request", "Produce")),
    )
    before = scrape(port).get(key, 0)
    client = Client(broker)
    try:
        assert client.produce(make_batch(1), topic="present").error_code == 0
        client.produce(make_batch(1), topic="present", partition=9)
    finally:
        client.close()
    assert scrape(port)[key] == before + 1


def test_other_paths_are_404_and_the_broker_keeps_serving(metered):
    broker, port = metered
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
    assert refused.value.code == 404
    # A scraper that connects and says nothing holds only its own connection.
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        assert scrape(port)[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1


def test_group_metrics_and_consumer_lag(metered):
    """The module's only group (the plugin's brokers start with
    group.initial.rebalance.delay.ms=0)."""
    broker, port = metered
    topic, group = "lagged", "lag-watchers"
    create_topic(broker.bootstrap, topic, 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for number in range(200):
        producer.send(topic, value=b"m%d" % number, partition=number % 2)
    producer.flush(timeout=30)

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        read, deadline = 0, time.monotonic() + 30
        while read < 130:
            assert time.monotonic() < deadline, f"the group consumer read only {read} records"
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                read += 1
        consumer.commit(asynchronous=False)
        answer = consumer.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)
        committed = {tp.partition: tp.offset for tp in answer if tp.offset >= 0}
        assert sum(committed.values()) == 130, committed
        # More records after the commit: the lag grows on partition 1.
        for number in range(30):
            producer.send(topic, value=b"late%d" % number, partition=1)
        producer.flush(timeout=30)
        log_end = {0: 100, 1: 130}

        samples = scrape(port)
        for partition in (0, 1):
            labels = (("consumergroup", group), ("partition", str(partition)), ("topic", topic))
            lag = samples.get(("kafka_consumergroup_lag", labels))
            if partition not in committed:
                assert lag is None, samples
                continue
            assert lag == log_end[partition] - committed[partition]
            assert samples[("kafka_consumergroup_current_offset", labels)] == committed[partition]
        groups = "kafka_coordinator_group_groupmetadatamanager_numgroups"
        assert samples[(groups, (("state", "Stable"),))] == 1
        assert samples[(groups, (("state", "Empty"),))] == 0
        assert samples[("kafka_coordinator_group_groupmetadatamanager_nummembers", ())] == 1
        assert samples[("kafka_consumergroup_members", (("consumergroup", group),))] == 1
        offsets = samples[("kafka_coordinator_group_groupmetadatamanager_numoffsets", ())]
        assert offsets == len(committed)
        commits = samples[("kafka_server_group_coordinator_metrics_offset_commit_total", ())]
        assert commits == len(committed)
        rebalances = "kafka_server_group_coordinator_metrics_group_completed_rebalance_total"
        assert samples[(rebalances, ())] >= 1
    finally:
        consumer.close()
        producer.close()

    # The member left: the group is Empty, its offsets and their lag stay.
    def empty() -> dict | None:
        samples = scrape(port)
        return samples if samples[(groups, (("state", "Empty"),))] == 1 else None

    samples = wait_for(empty, 30, "the group to become Empty")
    assert samples[("kafka_coordinator_group_groupmetadatamanager_nummembers", ())] == 0
    for partition, offset in committed.items():
        labels = (("consumergroup", group), ("partition", str(partition)), ("topic", topic))
        assert samples[("kafka_consumergroup_lag", labels)] == log_end[partition] - offset
