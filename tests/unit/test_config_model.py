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


def types_of(described: list[dict]) -> dict[str, int]:
    return {entry["name"]: entry["config_type"] for entry in described}


def test_every_kafka_topic_config_is_described_with_its_type():
    described = config_model.describe_topic({}, layers(), include_synonyms=False)
    names = [entry["name"] for entry in described]
    # Kafka's 36, Kafka 4.4's errors.deadletterqueue.group.enable (KIP-1191), Confluent
    # Server's two schema validation configs, the four of Iceberg topics (Redpanda's
    # redpanda.iceberg.* without the prefix) and minibroker's two of table maintenance.
    assert len(names) == len(set(names)) == 45
    assert types_of(described)["errors.deadletterqueue.group.enable"] == config_model.BOOLEAN
    assert {"compression.type", "local.retention.ms", "remote.storage.enable"} <= set(names)
    assert {"iceberg.mode", "iceberg.target.lag.ms", "iceberg.partition.spec"} <= set(names)
    assert "iceberg.delete" in names
    assert types_of(described)["iceberg.compaction.interval.ms"] == config_model.LONG
    assert types_of(described)["iceberg.snapshot.expiry.interval.ms"] == config_model.LONG
    types = {entry["name"]: entry["config_type"] for entry in described}
    assert types["iceberg.target.lag.ms"] == config_model.LONG
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
    # With min.insync.replicas, the cluster-wide default Kafka 4.1+ reports (KIP-966).
    assert [(e["name"], e["value"], e["config_source"]) for e in cluster] == [
        ("log.retention.ms", "100", DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("min.insync.replicas", "1", DYNAMIC_DEFAULT_BROKER_CONFIG),
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


def test_the_cluster_wide_min_insync_replicas_is_reported_as_kafka_4_1_does():
    """KIP-966: Kafka 4.1+ reports min.insync.replicas as a cluster-level dynamic default,
    on the cluster default resource and as the source of the brokers' and topics' value
    (Apache Kafka 4.4: ('min.insync.replicas', '1', DYNAMIC_DEFAULT), then its default)."""

    def described(resource_layers, topic=False) -> dict:
        if topic:
            (entry,) = config_model.describe_topic(
                {}, resource_layers, include_synonyms=True, keys=["min.insync.replicas"]
            )
            return entry
        (entry,) = config_model.describe_broker(
            resource_layers, include_synonyms=True, keys=["min.insync.replicas"]
        )
        return entry

    for topic in (False, True):
        entry = described(layers(), topic)
        assert (entry["value"], entry["config_source"], entry["is_default"]) == (
            "1",
            DYNAMIC_DEFAULT_BROKER_CONFIG,
            False,
        )
        assert chain(entry) == [
            ("min.insync.replicas", "1", DYNAMIC_DEFAULT_BROKER_CONFIG),
            ("min.insync.replicas", "1", DEFAULT_CONFIG),
        ]
        # This node's static value is what it enforces, and what it reports there.
        assert chain(described(layers(static={"min.insync.replicas": "2"}), topic)) == [
            ("min.insync.replicas", "2", DYNAMIC_DEFAULT_BROKER_CONFIG),
            ("min.insync.replicas", "2", STATIC_BROKER_CONFIG),
            ("min.insync.replicas", "1", DEFAULT_CONFIG),
        ]
        # A cluster default set dynamically, and a broker's own value, win as before.
        entry = described(layers(default={"min.insync.replicas": "3"}), topic)
        assert (entry["value"], entry["config_source"]) == ("3", DYNAMIC_DEFAULT_BROKER_CONFIG)
        entry = described(layers(broker={"min.insync.replicas": "2"}), topic)
        assert (entry["value"], entry["config_source"]) == ("2", DYNAMIC_BROKER_CONFIG)


def test_a_brokers_security_settings_are_described_passwords_hidden():
    """DescribeConfigs of a broker lists its security settings as Kafka 4.4 does (librdkafka
    0142 reads connections.max.reauth.ms there): read-only or not as Kafka, a PASSWORD with a
    null value and is_sensitive, its synonyms' values hidden too."""
    broker_layers = layers(
        static={
            "connections.max.reauth.ms": "5000",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "ssl.keystore.password": "secret",
        },
        broker={"sasl.kerberos.min.time.before.relogin": "58000"},
    )
    described = {
        entry["name"]: entry
        for entry in config_model.describe_broker(broker_layers, include_synonyms=True)
    }

    def shown(name):
        entry = described[name]
        return (
            entry["value"],
            entry["config_source"],
            entry["read_only"],
            entry["is_sensitive"],
            entry["config_type"],
        )

    assert shown("connections.max.reauth.ms") == ("5000", STATIC_BROKER_CONFIG, True, False, 5)
    assert shown("sasl.enabled.mechanisms") == (
        "PLAIN,SCRAM-SHA-256",
        STATIC_BROKER_CONFIG,
        False,
        False,
        7,
    )
    assert shown("ssl.keystore.password") == (None, STATIC_BROKER_CONFIG, False, True, 9)
    assert chain(described["ssl.keystore.password"]) == [
        ("ssl.keystore.password", None, STATIC_BROKER_CONFIG)
    ]
    assert shown("sasl.jaas.config") == (None, DEFAULT_CONFIG, False, True, 9)
    assert shown("sasl.kerberos.min.time.before.relogin") == (
        "58000",
        DYNAMIC_BROKER_CONFIG,
        False,
        False,
        5,
    )
    assert shown("sasl.login.refresh.window.factor") == ("0.8", DEFAULT_CONFIG, False, False, 6)
    assert described["security.inter.broker.protocol"]["read_only"]


def test_sasl_reconfigurables_are_accepted_per_broker():
    """Kafka's per-broker SASL reconfigurables (DynamicListenerConfig) that minibroker keeps:
    accepted for a broker (librdkafka 0081 sets sasl.kerberos.min.time.before.relogin),
    refused at the cluster default and with a value of the wrong type, in Kafka 4.4's words;
    the settings minibroker's listeners read at start only are refused as such."""
    kept = {
        "sasl.kerberos.min.time.before.relogin": "58000",
        "sasl.login.refresh.window.factor": "0.7",
        "sasl.login.refresh.buffer.seconds": "120",
        "sasl.kerberos.principal.to.local.rules": "DEFAULT",
    }
    config_model.validate_broker_overrides(kept)
    with pytest.raises(ConfigChangeError) as cluster:
        config_model.validate_broker_overrides(kept, cluster_default=True)
    assert (cluster.value.error, cluster.value.message) == (
        Error.INVALID_REQUEST,
        "Cannot update these configs at default cluster level, broker id must be specified: "
        "[sasl.kerberos.min.time.before.relogin, sasl.kerberos.principal.to.local.rules, "
        "sasl.login.refresh.buffer.seconds, sasl.login.refresh.window.factor]",
    )
    for name, bad, kind in (
        ("sasl.kerberos.min.time.before.relogin", "abc", "LONG"),
        ("sasl.login.refresh.window.factor", "x", "DOUBLE"),
        ("sasl.login.refresh.buffer.seconds", "40000", "SHORT"),
    ):
        with pytest.raises(ConfigChangeError) as wrong:
            config_model.validate_broker_overrides({name: bad})
        assert wrong.value.message == (
            f"Invalid value {bad} for configuration {name}: Not a number of type {kind}"
        )
    with pytest.raises(ConfigChangeError) as unsupported:
        config_model.validate_broker_overrides({"sasl.enabled.mechanisms": "PLAIN"})
    assert "does not support changing these configs dynamically" in unsupported.value.message
    with pytest.raises(ConfigChangeError) as static:
        config_model.validate_broker_overrides({"connections.max.reauth.ms": "5000"})
    assert "Cannot update these configs dynamically" in static.value.message
    # Stored with the rest; no topic default comes of them.
    dynamic = DynamicBrokerConfigs(2, LogConfig())
    assert dynamic.replace("2", kept) == LogConfig()


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
