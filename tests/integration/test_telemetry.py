"""Client telemetry (KIP-714) against a real broker process: a client-metrics subscription set
with confluent-kafka's AdminClient (IncrementalAlterConfigs on a CLIENT_METRICS resource),
described and listed back; a librdkafka producer with its default ``enable.metrics.push``
pushes its metrics and the broker's /metrics shows them labelled by its client instance id;
raw GetTelemetrySubscriptions and PushTelemetry requests with bad input are answered with
Kafka's codes while that producer goes on being served.

One broker for the module (the pytest plugin's `kafka_broker`, module-scoped:
`metrics.port` and `telemetry.max.bytes` are read at start); each test sets the one
subscription it needs before it pushes.
"""

import gzip
import uuid

import pytest
from confluent_kafka import Producer
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.get_telemetry_subscriptions.v0.request import GetTelemetrySubscriptionsRequest
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.list_client_metrics_resources.v0.request import (
    ListClientMetricsResourcesRequest,
)
from kio.schema.push_telemetry.v0.request import PushTelemetryRequest
from kio.static.primitive import i8, i32
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from minibroker.protocol.kafka44_schemas import ListConfigResourcesRequestV1
from minibroker.testing import Cluster
from minibroker.tools.launcher import BrokerProcess, free_port
from tests.conftest import create_topic, exchange, prometheus_query, scrape, wait_for

SUBSCRIPTION = "producers"
CLIENT_METRICS = 16  # the config resource type
TOPIC = "telemetry"
SCRAPED_TOPIC = "telemetry-scraped"
THROTTLING_QUOTA_EXCEEDED = 89
UNKNOWN_SUBSCRIPTION_ID = 117
TELEMETRY_TOO_LARGE = 118
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_REQUEST, INVALID_CONFIG, INVALID_RECORD = 42, 40, 87
METRICS_PORT = free_port()
# The client ids of this module's other tests' producers: their pushed series may still be on
# /metrics when a later test reads it.
OTHER_PRODUCERS = {"scraped"}

# The plugin fails the test that closes the broker if it does not shut down cleanly.
pytestmark = pytest.mark.minibroker(
    scope="module",
    server_properties={"metrics.port": METRICS_PORT, "telemetry.max.bytes": 4096},
)


@pytest.fixture
def metered(kafka_broker: Cluster) -> tuple[BrokerProcess, int]:
    """The module's broker (its node: `.bootstrap`, which the helpers take) and its /metrics
    port."""
    return kafka_broker.node(1), METRICS_PORT


def _alter(bootstrap: str, name: str, configs: dict[str, str]):
    """IncrementalAlterConfigs SET on a CLIENT_METRICS resource (confluent-kafka 2.16's
    AdminClient has no CLIENT_METRICS resource type): the response's one entry."""
    request = IncrementalAlterConfigsRequest(
        resources=(
            AlterConfigsResource(
                resource_type=i8(CLIENT_METRICS),
                resource_name=name,
                configs=tuple(
                    AlterableConfig(name=key, config_operation=i8(0), value=value)
                    for key, value in configs.items()
                ),
            ),
        ),
        validate_only=False,
    )
    (entry,) = exchange(bootstrap, request).responses
    return entry


def _subscribe(bootstrap: str, configs: dict[str, str]) -> None:
    entry = _alter(bootstrap, SUBSCRIPTION, configs)
    assert entry.error_code.value == 0, entry.error_message


def _client_series(port: int) -> dict:
    return {
        key: value
        for key, value in scrape(port).items()
        if key[0].startswith("org_apache_kafka_producer")
    }


def test_librdkafka_producer_pushes_its_metrics_to_prometheus(metered):
    broker, port = metered
    # Before the subscription: the AdminClient that creates the topic is a librdkafka
    # producer handle too (client.id "rdkafka"), which would push its own metrics if it got
    # the subscription while it lives.
    create_topic(broker.bootstrap, TOPIC, 1)
    _subscribe(broker.bootstrap, {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"})

    request = DescribeConfigsRequest(
        resources=(
            DescribeConfigsResource(
                resource_type=i8(CLIENT_METRICS),
                resource_name=SUBSCRIPTION,
                configuration_keys=None,
            ),
        )
    )
    (described,) = exchange(broker.bootstrap, request).results
    assert described.error_code.value == 0
    assert {entry.name: entry.value for entry in described.configs} == {
        "metrics": "org.apache.kafka.producer.",
        "interval.ms": "1000",
    }
    listed = exchange(broker.bootstrap, ListConfigResourcesRequestV1(resource_types=(i8(16),)))
    assert [(r.resource_name, r.resource_type) for r in listed.config_resources] == [
        (SUBSCRIPTION, 16)
    ]
    legacy = exchange(broker.bootstrap, ListClientMetricsResourcesRequest())
    assert [r.name for r in legacy.client_metrics_resources] == [SUBSCRIPTION]

    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "pusher"})
    try:

        def pushed():
            producer.produce(TOPIC, b"v")
            producer.poll(0.1)
            series = _client_series(port)
            return series if any(("client_id", "pusher") in key[1] for key in series) else None

        series = wait_for(pushed, 30, "the producer's pushed metrics on /metrics")
        labels = [dict(key[1]) for key in series]
        instance_ids = {
            label["client_instance_id"] for label in labels if label["client_id"] == "pusher"
        }
        assert len(instance_ids) == 1
        assert uuid.UUID(instance_ids.pop()).int != 0
        assert {label["client_id"] for label in labels} - OTHER_PRODUCERS == {"pusher"}
        names = {key[0] for key in series}
        assert any(name.startswith("org_apache_kafka_producer_") for name in names)
        assert all("." not in name for name in names)

        _bad_pushes_are_refused(broker.bootstrap)

        # The producer is still served and still pushing.
        before = len(producer)
        producer.produce(TOPIC, b"after")
        assert producer.flush(15) == 0 <= before
        wait_for(lambda: _client_series(port), 10, "the producer's series after the bad pushes")
    finally:
        producer.flush(10)


def _get(bootstrap: str, instance: uuid.UUID | None = None):
    return exchange(bootstrap, GetTelemetrySubscriptionsRequest(client_instance_id=instance))


def _push(bootstrap, instance, subscription, compression, metrics, terminating=False) -> int:
    request = PushTelemetryRequest(
        client_instance_id=instance,
        subscription_id=i32(subscription),
        terminating=terminating,
        compression_type=i8(compression),
        metrics=metrics,
    )
    return exchange(bootstrap, request).error_code.value


def _bad_pushes_are_refused(bootstrap: str) -> None:
    """Each from a new client instance: its first push after its Get is never early."""
    got = _get(bootstrap)
    assert got.error_code.value == 0 and got.client_instance_id.int != 0
    assert list(got.requested_metrics) == ["org.apache.kafka.producer."]
    assert got.push_interval.total_seconds() == 1.0
    assert got.telemetry_max_bytes == 4096
    instance, subscription = got.client_instance_id, got.subscription_id
    assert _push(bootstrap, instance, subscription ^ 1, 0, b"") == UNKNOWN_SUBSCRIPTION_ID
    got = _get(bootstrap)
    too_large = b"x" * 4097
    assert _push(bootstrap, got.client_instance_id, got.subscription_id, 0, too_large) == (
        TELEMETRY_TOO_LARGE
    )


def test_bad_pushes_get_kafkas_codes(metered):
    broker, _port = metered
    bootstrap = broker.bootstrap
    _subscribe(bootstrap, {"metrics": "*", "interval.ms": "3600000"})

    def fresh():
        got = _get(bootstrap)
        assert got.error_code.value == 0
        assert list(got.requested_metrics) == ["*"]
        return got.client_instance_id, got.subscription_id

    instance, subscription = fresh()
    # A second Get inside the push interval is throttled (Kafka's validateGetRequest).
    assert _get(bootstrap, instance).error_code.value == THROTTLING_QUOTA_EXCEEDED
    assert _push(bootstrap, instance, subscription ^ 7, 0, b"") == UNKNOWN_SUBSCRIPTION_ID
    # The refused push took the one push the Get allowed: the next is early.
    assert _push(bootstrap, instance, subscription, 0, b"") == THROTTLING_QUOTA_EXCEEDED
    instance, subscription = fresh()
    assert _push(bootstrap, instance, subscription, 0, b"x" * 4097) == TELEMETRY_TOO_LARGE
    instance, subscription = fresh()
    assert _push(bootstrap, instance, subscription, 9, b"") == UNSUPPORTED_COMPRESSION_TYPE
    instance, subscription = fresh()
    assert _push(bootstrap, instance, subscription, 1, b"not gzip") == INVALID_RECORD
    instance, subscription = fresh()
    assert _push(bootstrap, uuid.UUID(int=0), subscription, 0, b"") == INVALID_REQUEST
    good = gzip.compress(MetricsData().SerializeToString())
    assert _push(bootstrap, instance, subscription, 1, good, terminating=True) == 0
    assert _push(bootstrap, instance, subscription, 1, good) == INVALID_REQUEST

    # A bad subscription is refused with ClientMetricsConfigs' codes.
    for configs, code in (
        ({"interval.ms": "10"}, INVALID_REQUEST),
        ({"match": "client_colour=red"}, INVALID_CONFIG),
        ({"match": "client_id=("}, INVALID_CONFIG),
        ({"nonsense": "1"}, INVALID_REQUEST),
    ):
        assert _alter(bootstrap, "bad", configs).error_code.value == code, configs
    assert _alter(bootstrap, "", {"metrics": "*"}).error_code.value == INVALID_REQUEST


def test_a_real_prometheus_scrapes_a_producers_pushed_metrics(metered, prometheus):
    broker, port = metered
    _subscribe(broker.bootstrap, {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"})
    create_topic(broker.bootstrap, SCRAPED_TOPIC, 1)
    api = prometheus(port)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "scraped"})

    def seen():
        producer.produce(SCRAPED_TOPIC, b"v")
        producer.poll(0.1)
        result = prometheus_query(api, '{__name__=~"org_apache_kafka_producer_.+"}')
        return [r["metric"] for r in result or () if r["metric"].get("client_id") == "scraped"]

    try:
        found = wait_for(seen, 60, "Prometheus' query to find the producer's pushed series")
    finally:
        producer.flush(10)
    assert all(uuid.UUID(metric["client_instance_id"]).int != 0 for metric in found)
    assert {metric["job"] for metric in found} == {"minibroker"}
