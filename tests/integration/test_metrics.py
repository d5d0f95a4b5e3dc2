"""/metrics on a broker: Kafka's metric names, and values that match what clients did."""

import socket
import urllib.error
import urllib.request

import pytest
from kafka import KafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from broker.launcher import free_port
from tests.conftest import create_topic

TOPIC = "metered"


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


@pytest.fixture
def metered(broker_factory):
    port = free_port()
    broker = broker_factory({"metrics.port": port})
    return broker, port


def test_counters_and_gauges_follow_what_clients_did(metered):
    broker, port = metered
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
    assert samples[("kafka_server_replicamanager_leadercount", ())] == 2
    assert samples[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert samples[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    assert samples[("kafka_controller_kafkacontroller_activebrokercount", ())] == 1
    assert ("process_resident_memory_bytes", ()) in samples


def test_error_codes_are_counted_by_request(metered):
    broker, port = metered
    from tests.integration.test_bad_input import Client
    from tests.unit.batch_factory import make_batch

    client = Client(broker)
    try:
        assert client.produce(make_batch(1), topic="present").error_code == 0
        client.produce(make_batch(1), topic="present", partition=9)
    finally:
        client.close()
    samples = scrape(port)
    key = (
        "kafka_network_requestmetrics_errors_total",
        (("error", "UNKNOWN_TOPIC_OR_PARTITION"), ("request", "Produce")),
    )
    assert samples[key] == 1


def test_other_paths_are_404_and_the_broker_keeps_serving(metered):
    broker, port = metered
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
    assert refused.value.code == 404
    # A scraper that connects and says nothing holds only its own connection.
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        assert scrape(port)[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
