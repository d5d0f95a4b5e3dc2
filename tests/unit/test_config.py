"""Configuration by Kafka's property names."""

from pathlib import Path

import pytest

from broker.config import BrokerConfig, ConfigError, Listener, load_config, parse_properties


def test_defaults_give_a_local_broker():
    config = BrokerConfig.from_properties({})
    assert config.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert config.log_dirs == (Path("data"),)
    assert config.auto_create_topics_enable is True
    assert config.num_partitions == 1


def test_file_then_overrides(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("# comment\nnode.id=3\nnum.partitions = 4\nlog.dirs=/a,/b\n")
    config = load_config(path, ["num.partitions=6", "listeners=PLAINTEXT://0.0.0.0:19092"])
    assert config.node_id == 3
    assert config.num_partitions == 6
    assert config.log_dirs == (Path("/a"), Path("/b"))
    assert config.listeners[0] == Listener("PLAINTEXT", "0.0.0.0", 19092)
    assert config.advertised == config.listeners


def test_most_precise_retention_property_wins():
    config = BrokerConfig.from_properties(
        {"log.retention.ms": "1234", "log.retention.hours": "1", "log.retention.minutes": "2"}
    )
    assert config.log_retention_ms == 1234
    assert BrokerConfig.from_properties({"log.retention.hours": "2"}).log_retention_ms == 7_200_000


@pytest.mark.parametrize(
    "override",
    [
        "num.partitions=zero",
        "num.partitions=0",
        "auto.create.topics.enable=maybe",
        "listeners=localhost:9092",
        "log.message.timestamp.type=Now",
    ],
)
def test_invalid_value_names_the_key(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [override])


def test_unknown_keys_are_kept_not_fatal():
    config = BrokerConfig.from_properties({"zookeeper.connect": "x:2181"})
    assert config.unknown == {"zookeeper.connect": "x:2181"}


def test_malformed_line_and_override():
    with pytest.raises(ConfigError):
        parse_properties(["just-a-word"])
    with pytest.raises(ConfigError):
        load_config(None, ["novalue"])
