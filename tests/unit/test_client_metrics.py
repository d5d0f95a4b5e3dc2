"""Kafka's ClientMetricsManager rules (KIP-714) as the pure core common/client_metrics.py
keeps them, with time passed in; the OTLP decoding of common/otlp_metrics.py."""

import gzip
import json
import uuid
from types import SimpleNamespace

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)

from minibroker.common import client_metrics, otlp_metrics
from minibroker.common.client_metrics import (
    ClientMetadata,
    ClientMetricsManager,
    java_uuid_hash,
    subscription_id,
)
from minibroker.common.config_model import ConfigChangeError
from minibroker.controller import configs as controller_configs
from minibroker.controller import store, zk_layout
from minibroker.controller.state import ControllerState
from minibroker.protocol.errors import Error
from minibroker.protocol.records import compress

ZERO = uuid.UUID(int=0)
CLIENT = ClientMetadata(
    client_id="app-1",
    software_name="apache-kafka-java",
    software_version="4.4.0",
    source_address="10.0.0.7",
    source_port=50123,
)


def _ids():
    counter = iter(range(100, 10_000))
    return lambda: uuid.UUID(int=next(counter))


def _manager(**subscriptions) -> ClientMetricsManager:
    manager = ClientMetricsManager(telemetry_max_bytes=100, new_id=_ids())
    for name, configs in subscriptions.items():
        manager.update_subscriptions(name, configs)
    return manager


def _payload(*metrics: Metric) -> bytes:
    data = MetricsData(
        resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=list(metrics))])]
    )
    return data.SerializeToString()


def _sum(name: str, value: int, *, delta: bool, node: str = "1") -> Metric:
    temporality = (
        AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
        if delta
        else AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    )
    metric = Metric(name=name)
    metric.sum.is_monotonic = True
    metric.sum.aggregation_temporality = temporality
    metric.sum.data_points.append(
        NumberDataPoint(
            as_int=value,
            attributes=[KeyValue(key="node.id", value=AnyValue(string_value=node))],
        )
    )
    return metric


def _gauge(name: str, value: float) -> Metric:
    metric = Metric(name=name)
    metric.gauge.data_points.append(NumberDataPoint(as_double=value))
    return metric


# -- subscriptions' configs --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configs", "error"),
    [
        ({"interval.ms": "99"}, Error.INVALID_REQUEST),
        ({"interval.ms": "3600001"}, Error.INVALID_REQUEST),
        ({"interval.ms": "often"}, Error.INVALID_CONFIG),
        ({"colour": "red"}, Error.INVALID_REQUEST),
        ({"match": "client_colour=red"}, Error.INVALID_CONFIG),
        ({"match": "client_id"}, Error.INVALID_CONFIG),
        ({"match": "client_id=a=b"}, Error.INVALID_CONFIG),
        ({"match": "client_id=("}, Error.INVALID_CONFIG),
    ],
)
def test_bad_subscription_configs_are_refused_with_kafkas_codes(configs, error):
    with pytest.raises(ConfigChangeError) as refused:
        client_metrics.validate("sub", configs)
    assert refused.value.error == error


def test_good_configs_and_an_empty_name():
    client_metrics.validate(
        "sub", {"metrics": "a.,b", "interval.ms": "100", "match": "client_id=app-.*"}
    )
    with pytest.raises(ConfigChangeError) as refused:
        client_metrics.validate("", {"metrics": "*"})
    assert refused.value.error == Error.INVALID_REQUEST


def test_describe_lists_only_the_configs_set():
    entries = client_metrics.describe({"metrics": "a.", "interval.ms": "1000"}, None)
    assert [(e["name"], e["value"], e["config_source"]) for e in entries] == [
        ("metrics", "a.", client_metrics.CLIENT_METRICS_CONFIG),
        ("interval.ms", "1000", client_metrics.CLIENT_METRICS_CONFIG),
    ]
    assert [e["name"] for e in client_metrics.describe({"metrics": "a."}, ["interval.ms"])] == []


# -- GetTelemetrySubscriptions -----------------------------------------------------------------


def test_a_client_without_subscription_gets_the_default_interval_and_no_metrics():
    answer = _manager().get_subscriptions(ZERO, CLIENT, now_ms=1000)
    assert answer["error_code"] == Error.NONE
    assert answer["client_instance_id"] == uuid.UUID(int=100)
    assert answer["push_interval"] == client_metrics.DEFAULT_INTERVAL_MS
    assert answer["requested_metrics"] == ()
    assert answer["accepted_compression_types"] == (4, 3, 1, 2)
    assert answer["delta_temporality"] is True
    assert answer["telemetry_max_bytes"] == 100


def test_matching_subscriptions_union_their_metrics_and_take_the_lowest_interval():
    manager = _manager(
        a={"metrics": "org.apache.kafka.producer.", "interval.ms": "5000"},
        b={
            "metrics": "org.apache.kafka.consumer.",
            "interval.ms": "1000",
            "match": "client_id=app-.*",
        },
        c={"metrics": "x.", "interval.ms": "100", "match": "client_software_name=librdkafka"},
    )
    answer = manager.get_subscriptions(None, CLIENT, now_ms=0)
    assert answer["requested_metrics"] == (
        "org.apache.kafka.consumer.",
        "org.apache.kafka.producer.",
    )
    assert answer["push_interval"] == 1000
    instance = answer["client_instance_id"]
    expected = subscription_id(
        frozenset({"org.apache.kafka.consumer.", "org.apache.kafka.producer."}), 1000, instance
    )
    assert answer["subscription_id"] == expected


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("client_id=app-1", True),
        ("client_id=app", False),  # the whole value must match
        ("client_software_version=4\\.4\\..*", True),
        ("client_source_address=10\\.0\\.0\\.7", True),
        ("client_source_port=50123", True),
        ("client_source_port=1", False),
        ("client_instance_id=00000000-0000-0000-0000-000000000064", True),
    ],
)
def test_match_selectors(selector, matches):
    manager = _manager(s={"metrics": "*", "interval.ms": "1000", "match": selector})
    answer = manager.get_subscriptions(ZERO, CLIENT, now_ms=0)
    assert (answer["requested_metrics"] == ("*",)) is matches


def test_a_star_subscription_asks_for_everything():
    manager = _manager(a={"metrics": "a.,b."}, b={"metrics": "*"})
    assert manager.get_subscriptions(ZERO, CLIENT, now_ms=0)["requested_metrics"] == ("*",)


def test_subscription_id_is_crc32c_of_metrics_and_interval_xor_the_instance_hash():
    instance = uuid.UUID(int=(5 << 64) | 3)
    assert java_uuid_hash(instance) == 5 ^ 3
    assert subscription_id(frozenset({"a"}), 1000, instance) != subscription_id(
        frozenset({"a"}), 2000, instance
    )
    assert -(2**31) <= subscription_id(frozenset({"a", "b"}), 1, instance) < 2**31


def test_an_early_get_is_throttled_and_a_changed_subscription_changes_the_id():
    manager = _manager(a={"metrics": "a.", "interval.ms": "1000"})
    first = manager.get_subscriptions(ZERO, CLIENT, now_ms=10_000)
    instance = first["client_instance_id"]
    early = manager.get_subscriptions(instance, CLIENT, now_ms=10_999)
    assert early["error_code"] == Error.THROTTLING_QUOTA_EXCEEDED
    manager.update_subscriptions("a", {"metrics": "b.", "interval.ms": "1000"})
    later = manager.get_subscriptions(instance, CLIENT, now_ms=11_000)
    assert later["error_code"] == Error.NONE
    assert later["client_instance_id"] == instance
    assert later["requested_metrics"] == ("b.",)
    assert later["subscription_id"] != first["subscription_id"]
    manager.update_subscriptions("a", {})
    assert manager.subscriptions == {}


# -- PushTelemetry -----------------------------------------------------------------------------


def _subscribed(interval: int = 1000):
    manager = _manager(a={"metrics": "*", "interval.ms": str(interval)})
    answer = manager.get_subscriptions(ZERO, CLIENT, now_ms=0)
    return manager, answer["client_instance_id"], answer["subscription_id"]


def _push(manager, instance, subscription, now_ms, payload=b"", compression=0, terminating=False):
    return manager.push(
        instance,
        subscription,
        terminating,
        compression,
        payload,
        CLIENT,
        now_ms,
        otlp_metrics.decode,
    )[0]


def test_pushes_one_interval_apart_are_taken_earlier_ones_throttled():
    manager, instance, subscription = _subscribed()
    # The first push after a Get is taken whenever it comes (clients jitter the interval).
    assert _push(manager, instance, subscription, 10) == Error.NONE
    assert _push(manager, instance, subscription, 1009) == Error.THROTTLING_QUOTA_EXCEEDED
    assert _push(manager, instance, subscription, 1010) == Error.NONE
    # A terminating push is taken early; nothing after it is.
    assert _push(manager, instance, subscription, 1011, terminating=True) == Error.NONE
    assert _push(manager, instance, subscription, 5000) == Error.INVALID_REQUEST


def test_bad_pushes_get_kafkas_codes():
    manager, instance, subscription = _subscribed()
    assert _push(manager, ZERO, subscription, 0) == Error.INVALID_REQUEST
    assert _push(manager, None, subscription, 0) == Error.INVALID_REQUEST
    assert _push(manager, instance, subscription + 1, 0) == Error.UNKNOWN_SUBSCRIPTION_ID
    assert _push(manager, instance, subscription, 1000, compression=5) == (
        Error.UNSUPPORTED_COMPRESSION_TYPE
    )
    assert _push(manager, instance, subscription, 2000, payload=b"x" * 101) == (
        Error.TELEMETRY_TOO_LARGE
    )
    assert _push(manager, instance, subscription, 3000, payload=b"junk", compression=1) == (
        Error.INVALID_RECORD
    )
    # An instance this broker never saw (another broker's): its subscription id is unknown.
    assert _push(manager, uuid.UUID(int=77), subscription, 0) == Error.UNKNOWN_SUBSCRIPTION_ID


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_pushed_metrics_become_series_in_every_compression(codec):
    manager, instance, subscription = _subscribed()
    payload = compress(codec, _payload(_gauge("org.apache.kafka.producer.queue.size", 3.5)))
    assert _push(manager, instance, subscription, 10, payload, codec) == Error.NONE
    (pushed,) = manager.pushed(now_ms=10)
    assert pushed.series == {("org_apache_kafka_producer_queue_size", ()): ("gauge", 3.5)}


def test_delta_sums_add_up_cumulative_ones_replace():
    manager, instance, subscription = _subscribed()
    name = "org.apache.kafka.producer.record.send.total"
    key = ("org_apache_kafka_producer_record_send_total", (("node_id", "1"),))
    for now, value in ((10, 5), (1010, 7)):
        payload = _payload(_sum(name, value, delta=True))
        assert _push(manager, instance, subscription, now, payload) == Error.NONE
    (pushed,) = manager.pushed(now_ms=1010)
    assert pushed.series[key] == ("counter", 12.0)
    assert _push(manager, instance, subscription, 2010, _payload(_sum(name, 4, delta=False))) == (
        Error.NONE
    )
    assert pushed.series[key] == ("counter", 4.0)


def test_histograms_keep_buckets_and_sum():
    manager, instance, subscription = _subscribed()
    metric = Metric(name="org.apache.kafka.client.latency")
    metric.histogram.aggregation_temporality = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
    point = metric.histogram.data_points.add()
    point.bucket_counts.extend([1, 2, 3])
    point.explicit_bounds.extend([10.0, 100.0])
    point.sum = 250.0
    assert _push(manager, instance, subscription, 10, gzip.compress(_payload(metric)), 1) == (
        Error.NONE
    )
    (pushed,) = manager.pushed(now_ms=10)
    assert pushed.series[("org_apache_kafka_client_latency", ())] == (
        "histogram",
        ([10.0, 100.0], [1, 2, 3], 250.0),
    )


def test_a_client_that_stops_pushing_is_dropped_after_three_intervals():
    manager, instance, subscription = _subscribed(interval=1000)
    payload = _payload(_gauge("g", 1.0))
    assert _push(manager, instance, subscription, 100, payload) == Error.NONE
    assert [i.instance_id for i in manager.pushed(now_ms=3100)] == [instance]
    assert manager.pushed(now_ms=3101) == []
    # Kafka's instance expiry: max(60 s, 3 x the interval) after its last request.
    manager.expire(60_099)
    assert instance in manager.instances
    manager.expire(60_100)
    assert instance not in manager.instances


def test_otlp_names_become_prometheus_names():
    assert otlp_metrics.prometheus_name("org.apache.kafka.producer.node.request.latency.avg") == (
        "org_apache_kafka_producer_node_request_latency_avg"
    )
    assert otlp_metrics.prometheus_name("1.x-y") == "_1_x_y"


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_a_payload_that_decompresses_past_the_bound_is_invalid(codec, monkeypatch):
    monkeypatch.setattr(otlp_metrics, "MAX_DECOMPRESSED_BYTES", 1000)
    manager, instance, subscription = _subscribed()
    manager.telemetry_max_bytes = 10_000
    bomb = compress(codec, b"\0" * 5000)
    assert len(bomb) < 1000
    assert _push(manager, instance, subscription, 10, bomb, codec) == Error.INVALID_RECORD


# -- the controller's side ---------------------------------------------------------------------


def _resource(name: str, *configs: tuple[str, str | None, int]):
    return SimpleNamespace(
        resource_type=client_metrics.CLIENT_METRICS_RESOURCE,
        resource_name=name,
        configs=[SimpleNamespace(name=k, value=v, config_operation=op) for k, v, op in configs],
    )


def test_the_controller_stores_pushes_and_persists_subscriptions(tmp_path):
    state = ControllerState()
    results, changed = controller_configs.alter_configs(
        state,
        [
            _resource("subs", ("metrics", "a.", 0), ("interval.ms", "1000", 0)),
            _resource("bad", ("interval.ms", "1", 0)),
            _resource("", ("metrics", "a.", 0)),
        ],
        incremental=True,
        validate_only=False,
    )
    assert [r["error_code"] for r in results] == [
        Error.NONE,
        Error.INVALID_REQUEST,
        Error.INVALID_REQUEST,
    ]
    assert state.client_metrics_configs == {"subs": {"metrics": "a.", "interval.ms": "1000"}}
    assert changed == [(client_metrics.CLIENT_METRICS_RESOURCE, "subs")]
    # metrics is a LIST: APPEND works on it, not on interval.ms.
    results, _ = controller_configs.alter_configs(
        state,
        [_resource("subs", ("metrics", "b.", 2))],
        incremental=True,
        validate_only=False,
    )
    assert state.client_metrics_configs["subs"]["metrics"] == "a.,b."
    (pushed,) = controller_configs.pushed_configs(state, changed)
    assert pushed["resource_type"] == client_metrics.CLIENT_METRICS_RESOURCE
    assert {c["name"]: c["value"] for c in pushed["configs"]}["metrics"] == "a.,b."
    assert (client_metrics.CLIENT_METRICS_RESOURCE, "subs") in (
        controller_configs.resources_of_broker(state, 1)
    )
    # Saved and read back, in the JSON file and in ZooKeeper's layout.
    restored = zk_layout.state_from_znodes(zk_layout.state_znodes(state, {}), 0)
    assert restored.client_metrics_configs == state.client_metrics_configs
    assert store._state_from_json(
        json.dumps(store._state_to_dict(state)), tmp_path
    ).client_metrics_configs == (state.client_metrics_configs)
    # Deleting every config deletes the subscription.
    controller_configs.alter_configs(
        state,
        [_resource("subs", ("metrics", None, 1), ("interval.ms", None, 1))],
        incremental=True,
        validate_only=False,
    )
    assert state.client_metrics_configs == {}
