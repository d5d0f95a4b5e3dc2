"""The pure config model: where a described value comes from, in Kafka's precedence order,
the IncrementalAlterConfigs operations, validation, the controller's decisions, and the
compression.type recompression of the append path."""

from types import SimpleNamespace

import pytest

from minibroker.common import config_model
from minibroker.common.config_model import (
    APPEND,
    DEFAULT_CONFIG,
    DELETE,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    SET,
    STATIC_BROKER_CONFIG,
    SUBTRACT,
    BrokerLayers,
    ConfigChangeError,
    DynamicBrokerConfigs,
)
from minibroker.controller import configs as controller_configs
from minibroker.controller.state import ControllerState, TopicState
from minibroker.protocol.errors import Error
from minibroker.protocol.record_batch import read_header
from minibroker.protocol.records import GZIP, NONE, ZSTD, Record, decode_records, encode_batch
from minibroker.storage.log import LogConfig, PartitionLog


def layers(static=None, default=None, broker=None) -> BrokerLayers:
    return BrokerLayers(static or {}, default or {}, broker or {})


def topic_entry(overrides=None, **layer_args) -> dict:
    (entry,) = config_model.describe_topic(
        overrides or {}, layers(**layer_args), include_synonyms=True, keys=["retention.ms"]
    )
    return entry


def chain(entry: dict) -> list[tuple[str, str, int]]:
    return [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]]


def test_every_kafka_topic_config_is_described_with_its_type():
    described = config_model.describe_topic({}, layers(), include_synonyms=False)
    names = [entry["name"] for entry in described]
    assert len(names) == len(set(names)) == 36
    assert {"compression.type", "local.retention.ms", "remote.storage.enable"} <= set(names)
    types = {entry["name"]: entry["config_type"] for entry in described}
    assert types["cleanup.policy"] == config_model.LIST
    assert types["retention.ms"] == config_model.LONG
    assert all(entry["synonyms"] == [] for entry in described)


def test_a_topic_config_without_anything_set_is_kafkas_default():
    entry = topic_entry()
    assert (entry["value"], entry["config_source"]) == ("604800000", DEFAULT_CONFIG)
    assert chain(entry) == [("log.retention.hours", "168", DEFAULT_CONFIG)]


def test_a_broker_property_in_hours_gives_the_topic_value_in_ms():
    entry = topic_entry(static={"log.retention.hours": "2"})
    assert (entry["value"], entry["config_source"]) == ("7200000", STATIC_BROKER_CONFIG)
    assert chain(entry) == [
        ("log.retention.hours", "2", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG),
    ]


def test_synonyms_are_listed_in_kafkas_precedence_order():
    entry = topic_entry(
        {"retention.ms": "5"},
        static={"log.retention.minutes": "3"},
        default={"log.retention.ms": "20"},
        broker={"log.retention.ms": "10"},
    )
    assert (entry["value"], entry["config_source"]) == ("5", DYNAMIC_TOPIC_CONFIG)
    assert chain(entry) == [
        ("retention.ms", "5", DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "10", DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "20", DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.minutes", "3", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG),
    ]
    without_override = topic_entry(default={"log.retention.ms": "20"})
    assert (without_override["value"], without_override["config_source"]) == (
        "20",
        DYNAMIC_DEFAULT_BROKER_CONFIG,
    )


def test_broker_describe_sources_read_only_and_the_cluster_default():
    broker_layers = layers(
        static={"log.dirs": "/data", "log.retention.hours": "5"},
        default={"log.retention.ms": "100"},
    )
    described = {
        entry["name"]: entry
        for entry in config_model.describe_broker(broker_layers, include_synonyms=True)
    }
    assert (described["log.dirs"]["value"], described["log.dirs"]["read_only"]) == ("/data", True)
    retention_ms = described["log.retention.ms"]
    assert (retention_ms["config_source"], retention_ms["read_only"]) == (
        DYNAMIC_DEFAULT_BROKER_CONFIG,
        False,
    )
    # The more precise synonym set dynamically is not a source of log.retention.hours.
    hours = described["log.retention.hours"]
    assert chain(hours) == [
        ("log.retention.hours", "5", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG),
    ]
    assert hours["read_only"]
    unset = described["log.retention.minutes"]
    assert (unset["value"], unset["config_source"]) == (None, DEFAULT_CONFIG)

    cluster = config_model.describe_broker(
        broker_layers, include_synonyms=True, cluster_default=True
    )
    assert [(e["name"], e["value"], e["config_source"]) for e in cluster] == [
        ("log.retention.ms", "100", DYNAMIC_DEFAULT_BROKER_CONFIG)
    ]


def test_incremental_operations():
    altered = config_model.incrementally_altered(
        {"retention.ms": "1", "segment.ms": "9"},
        [
            ("cleanup.policy", APPEND, "compact"),
            ("retention.ms", DELETE, None),
            ("max.message.bytes", SET, "100"),
        ],
    )
    assert altered == {
        "segment.ms": "9",
        "cleanup.policy": "delete,compact",
        "max.message.bytes": "100",
    }
    assert (
        config_model.incrementally_altered(altered, [("cleanup.policy", SUBTRACT, "delete")])[
            "cleanup.policy"
        ]
        == "compact"
    )
    with pytest.raises(ConfigChangeError) as not_a_list:
        config_model.incrementally_altered({}, [("retention.ms", APPEND, "1")])
    assert not_a_list.value.error == Error.INVALID_CONFIG
    assert "because its type is not LIST" in not_a_list.value.message
    for operations in (
        [("retention.ms", SET, "1"), ("retention.ms", SET, "2")],
        [("retention.ms", SET, None)],
        [("retention.ms", 7, "1")],
    ):
        with pytest.raises(ConfigChangeError) as refused:
            config_model.incrementally_altered({}, operations)
        assert refused.value.error == Error.INVALID_REQUEST


def test_validation_of_topic_and_dynamic_broker_configs():
    config_model.validate_topic_overrides({"compression.type": "zstd", "preallocate": "true"})
    for bad in ({"no.such": "1"}, {"retention.ms": "soon"}, {"compression.gzip.level": "12"}):
        with pytest.raises(ConfigChangeError) as refused:
            config_model.validate_topic_overrides(bad)
        assert refused.value.error == Error.INVALID_CONFIG

    config_model.validate_broker_overrides(
        {"log.retention.ms": "5", "log.cleanup.policy": "compact"}
    )
    with pytest.raises(ConfigChangeError) as static:
        config_model.validate_broker_overrides({"log.dirs": "/x", "log.retention.hours": "1"})
    assert static.value.error == Error.INVALID_REQUEST
    assert static.value.message == (
        "Cannot update these configs dynamically: Set(log.dirs, log.retention.hours)"
    )
    with pytest.raises(ConfigChangeError) as bad_value:
        config_model.validate_broker_overrides({"message.max.bytes": "big"})
    assert bad_value.value.error == Error.INVALID_REQUEST
    assert "message.max.bytes" in bad_value.value.message


def test_dynamic_broker_configs_make_the_topic_defaults():
    dynamic = DynamicBrokerConfigs(2, LogConfig(retention_ms=1000, segment_bytes=4096))
    assert dynamic.replace("", {"log.retention.ms": "50"}).retention_ms == 50
    defaults = dynamic.replace("2", {"log.retention.ms": "70", "message.max.bytes": "10"})
    assert (defaults.retention_ms, defaults.max_message_bytes, defaults.segment_bytes) == (
        70,
        10,
        4096,
    )
    assert dynamic.concerns_this_broker("") and dynamic.concerns_this_broker("2")
    assert not dynamic.concerns_this_broker("3")
    assert dynamic.replace("2", {}).retention_ms == 50


def resource(resource_type, name, *configs, operation=SET):
    return SimpleNamespace(
        resource_type=resource_type,
        resource_name=name,
        configs=[
            SimpleNamespace(name=key, value=value, config_operation=operation)
            for key, value in configs
        ],
    )


def test_controller_decisions():
    state = ControllerState(topics={"t": TopicState("t", None, [], {"retention.ms": "1"})})
    results, changed = controller_configs.alter_configs(
        state,
        [
            resource(config_model.TOPIC_RESOURCE, "t", ("segment.ms", "5")),
            resource(config_model.TOPIC_RESOURCE, "missing", ("segment.ms", "5")),
            resource(config_model.BROKER_RESOURCE, "", ("log.retention.ms", "9")),
        ],
        incremental=False,
        validate_only=False,
    )
    assert [r["error_code"] for r in results] == [
        Error.NONE,
        Error.UNKNOWN_TOPIC_OR_PARTITION,
        Error.NONE,
    ]
    # Legacy AlterConfigs replaces the whole set.
    assert state.topics["t"].configs == {"segment.ms": "5"}
    assert state.broker_configs == {"": {"log.retention.ms": "9"}}
    assert changed == [(config_model.TOPIC_RESOURCE, "t"), (config_model.BROKER_RESOURCE, "")]

    results, changed = controller_configs.alter_configs(
        state,
        [resource(config_model.BROKER_RESOURCE, "", ("log.retention.ms", None), operation=DELETE)],
        incremental=True,
        validate_only=True,
    )
    assert results[0]["error_code"] == Error.NONE and changed == []
    assert state.broker_configs == {"": {"log.retention.ms": "9"}}
    controller_configs.alter_configs(
        state,
        [resource(config_model.BROKER_RESOURCE, "", ("log.retention.ms", None), operation=DELETE)],
        incremental=True,
        validate_only=False,
    )
    assert state.broker_configs == {}

    twice = [resource(config_model.TOPIC_RESOURCE, "t"), resource(config_model.TOPIC_RESOURCE, "t")]
    results, _ = controller_configs.alter_configs(
        state, twice, incremental=True, validate_only=False
    )
    assert [r["error_code"] for r in results] == [Error.INVALID_REQUEST] * 2


def test_compression_type_recompresses_only_batches_in_another_codec(tmp_path):
    records = [
        Record(i, 1_700_000_000_000 + i, b"k", b"value %d" % i, (("h", b"v"),)) for i in range(3)
    ]
    log = PartitionLog.open(
        tmp_path / "squeezed-0", LogConfig(compression_type="gzip"), now_ms=0, needs_recovery=False
    )
    log.append_as_leader(encode_batch(records), leader_epoch=0, now_ms=0)
    log.append_as_leader(encode_batch(records, codec=GZIP), leader_epoch=0, now_ms=0)
    stored = log.read(0, max_bytes=1 << 20)
    first = read_header(stored, 0)
    second = read_header(stored, first.size)
    assert (first.compression, second.compression) == (GZIP, GZIP)
    assert [(r.key, r.value, r.headers) for r in decode_records(stored[: first.size])] == [
        (r.key, r.value, r.headers) for r in records
    ]
    assert LogConfig().recompression_codec is None
    assert LogConfig(compression_type="uncompressed").recompression_codec == NONE
    assert LogConfig(compression_type="zstd").recompression_codec == ZSTD
