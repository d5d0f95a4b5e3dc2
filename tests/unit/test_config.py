"""Configuration by Kafka's property names."""

from pathlib import Path

import pytest

from minibroker.common.config import (
    BrokerConfig,
    ConfigError,
    Listener,
    load_config,
    parse_properties,
)


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


def test_a_segments_reserve_is_8_mib_unless_set():
    assert BrokerConfig.from_properties({}).log_segment_reserve_max_bytes == 8 << 20
    config = BrokerConfig.from_properties({"log.segment.reserve.max.bytes": "0"})
    assert config.log_segment_reserve_max_bytes == 0


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
        "log.segment.reserve.max.bytes=-1",
    ],
)
def test_invalid_value_names_the_key(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [override])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("num.partitions=many", "Invalid value many for configuration num.partitions: "
         "Not a number of type INT"),
        ("num.partitions=2147483648", "Invalid value 2147483648 for configuration "
         "num.partitions: Not a number of type INT"),
        ("log.retention.ms=1e3", "Invalid value 1e3 for configuration log.retention.ms: "
         "Not a number of type LONG"),
        ("log.cleaner.min.cleanable.ratio=half", "Invalid value half for configuration "
         "log.cleaner.min.cleanable.ratio: Not a number of type DOUBLE"),
        ("auto.create.topics.enable=maybe", "Invalid value maybe for configuration "
         "auto.create.topics.enable: Expected value to be either true or false"),
        ("num.partitions=0", "Invalid value 0 for configuration num.partitions: "
         "must be at least 1"),
    ],
)  # fmt: skip
def test_a_bad_value_reads_as_kafkas_config_exception(override, message):
    """Kafka's ConfigException: which key, what value, what was expected (never Python's
    `invalid literal for int() with base 10`)."""
    with pytest.raises(ConfigError) as raised:
        load_config(None, [override])
    assert str(raised.value) == message


def test_unknown_keys_are_kept_not_fatal():
    config = BrokerConfig.from_properties({"num.io.threads": "8"})
    assert config.unknown == {"num.io.threads": "8"}


def test_zookeeper_connect_turns_the_zookeeper_mode_on():
    config = BrokerConfig.from_properties({"zookeeper.connect": "a:2181,b:2182/minibroker"})
    assert config.zookeeper_mode and config.is_broker and not config.is_controller
    assert config.zookeeper_session_timeout_ms == 18_000
    assert not BrokerConfig.from_properties({}).zookeeper_mode


@pytest.mark.parametrize(
    "properties",
    [
        {"zookeeper.connect": "no-port"},
        {"zookeeper.connect": "a:2181/bad path"},
        {"zookeeper.connect": "a:2181", "process.roles": "broker"},
        {"zookeeper.connect": "a:2181", "controller.quorum.voters": "0@a:9093"},
        {"zookeeper.connect": "a:2181", "controller.listener.names": "CONTROLLER"},
    ],
)
def test_zookeeper_mode_refuses_bad_or_mixed_settings(properties):
    with pytest.raises(ConfigError):
        BrokerConfig.from_properties(properties)


def test_a_key_alone_is_an_empty_value_and_an_override_needs_key_equals_value():
    """java.util.Properties: a line with no separator is a key with an empty value (Kafka
    then ignores the unknown key); an override on the command line must be key=value."""
    assert parse_properties(["just-a-word"]) == {"just-a-word": ""}
    with pytest.raises(ConfigError):
        load_config(None, ["novalue"])


def test_properties_separators_are_equals_colon_or_white_space():
    """java.util.Properties.load: the key ends at the first unescaped `=`, `:` or white
    space; white space around the separator is dropped; escapes are decoded."""
    text = [
        "num.partitions 4",
        "node.id:\t7",
        "  log.dirs   =   /tmp/a b  ",
        "listeners  PLAINTEXT://127.0.0.1:9092",
        "key\\ with\\=odd\\:chars = v\\u00e9\\n",
        "default.replication.factor=1:2",
    ]
    assert parse_properties(text) == {
        "num.partitions": "4",
        "node.id": "7",
        "log.dirs": "/tmp/a b  ",
        "listeners": "PLAINTEXT://127.0.0.1:9092",
        "key with=odd:chars": "v\u00e9\n",
        "default.replication.factor": "1:2",
    }


def test_a_properties_file_is_iso_8859_1_as_kafka_reads_it(tmp_path):
    """Kafka loads server.properties with Properties.load(InputStream): ISO-8859-1, so a
    byte that is not UTF-8 is a character, never an error."""
    path = tmp_path / "server.properties"
    path.write_bytes(b"# caf\xe9 comment\nnode.id 5\nsasl.password=p\xe4ss\\u00fc\n")
    config = load_config(path, [])
    assert config.node_id == 5
    assert config.properties["sasl.password"] == "p\u00e4ss\u00fc"


def test_a_malformed_unicode_escape_is_a_config_error_naming_the_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("node.id=\\u12x4\n")
    with pytest.raises(ConfigError, match="server.properties: malformed properties"):
        load_config(path, [])


# The settings of Kafka's own config/kraft/server.properties (3.x) that minibroker reads.
KAFKA_KRAFT_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
offsets.topic.replication.factor=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_kafkas_own_kraft_server_properties_are_accepted(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(KAFKA_KRAFT_PROPERTIES)
    config = load_config(path, [])
    assert config.listeners[0] == Listener("PLAINTEXT", "", 9092)  # every interface
    assert config.advertised[0] == Listener("PLAINTEXT", "localhost", 9092)
    assert config.advertised[1].host, "an empty host is advertised by this machine's name"
    assert config.security_protocol("SSL") == "SSL"
    assert config.controller.port == 9093


def test_a_port_out_of_range_is_refused():
    with pytest.raises(ConfigError, match="listeners.*99999"):
        load_config(None, ["listeners=PLAINTEXT://127.0.0.1:99999"])


def test_a_listener_name_the_protocol_map_does_not_map_is_refused():
    """Kafka: "No security protocol defined for listener FOO"; the message says what to set."""
    with pytest.raises(ConfigError, match="FOO.*listener.security.protocol.map=FOO:PLAINTEXT"):
        load_config(None, ["listeners=FOO://127.0.0.1:9300"])
    with pytest.raises(ConfigError, match="advertised.listeners.*BAR"):
        load_config(None, ["advertised.listeners=BAR://127.0.0.1:9300"])
    mapped = load_config(
        None,
        ["listeners=FOO://127.0.0.1:9300", "listener.security.protocol.map=FOO:PLAINTEXT"],
    )
    assert mapped.security_protocol("FOO") == "PLAINTEXT"
    # Without an explicit map, the controller's listener is PLAINTEXT, as Kafka maps
    # controller.listener.names; with one, it must be mapped like any other.
    load_config(None, ["listeners=CONTROLLER://127.0.0.1:9090", "process.roles=controller"])
    with pytest.raises(ConfigError, match="CONTROLLER"):
        load_config(
            None,
            [
                "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9090",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT",
            ],
        )


def test_properties_lines_continue_after_a_backslash_and_keep_a_trailing_hash():
    """java.util.Properties: an odd number of trailing backslashes joins the next line (its
    leading blanks dropped), an even number is a literal backslash; a # after a value is part
    of the value (the README's sample keeps comments on lines of their own)."""
    text = [
        "listener.name.sasl_ssl.plain.sasl.jaas.config=org.PlainLoginModule required \\",
        '    username="admin" password="a" \\',
        '    user_alice="b";',
        "# a comment ending in a backslash does not continue \\",
        "ssl.key.password=secret # not a comment",
        "path=C:\\\\",
        "next=1",
    ]
    assert parse_properties(text) == {
        "listener.name.sasl_ssl.plain.sasl.jaas.config": (
            'org.PlainLoginModule required username="admin" password="a" user_alice="b";'
        ),
        "ssl.key.password": "secret # not a comment",
        "path": "C:\\",  # an escaped backslash is one backslash
        "next": "1",
    }


def test_the_share_lock_duration_lies_within_its_bounds():
    config = BrokerConfig.from_properties({})
    assert config.group_share_record_lock_duration_ms == 30_000
    assert config.group_share_max_share_sessions == 2000
    with pytest.raises(ConfigError, match=r"group\.share\.record\.lock\.duration\.ms"):
        BrokerConfig.from_properties({"group.share.record.lock.duration.ms": "5000"})
    short = BrokerConfig.from_properties(
        {
            "group.share.min.record.lock.duration.ms": "1000",
            "group.share.record.lock.duration.ms": "2000",
        }
    )
    assert short.group_share_record_lock_duration_ms == 2000


def test_the_streams_group_properties_have_kafkas_defaults_and_checks():
    """Kafka 4.4's group.streams.* (GroupCoordinatorConfig): defaults, ConfigDef's atLeast,
    then verifyStreamsGroupConfigs' checks with its messages."""
    config = BrokerConfig.from_properties({})
    assert (
        config.group_streams_session_timeout_ms,
        config.group_streams_min_session_timeout_ms,
        config.group_streams_max_session_timeout_ms,
        config.group_streams_heartbeat_interval_ms,
        config.group_streams_min_heartbeat_interval_ms,
        config.group_streams_max_heartbeat_interval_ms,
        config.group_streams_max_size,
        config.group_streams_num_standby_replicas,
        config.group_streams_max_standby_replicas,
        config.group_streams_initial_rebalance_delay_ms,
    ) == (45000, 45000, 60000, 5000, 5000, 15000, 2**31 - 1, 0, 2, 3000)
    bounds = config.group_bounds
    assert (bounds.streams_min_session_timeout_ms, bounds.streams_max_standby_replicas) == (
        45000,
        2,
    )
    with pytest.raises(ConfigError, match=r"group\.streams\.max\.size: must be at least 1"):
        BrokerConfig.from_properties({"group.streams.max.size": "0"})
    for properties, message in (
        (
            {"group.streams.session.timeout.ms": "30000"},
            "group.streams.session.timeout.ms must be greater than or equal to "
            "group.streams.min.session.timeout.ms",
        ),
        (
            {"group.streams.heartbeat.interval.ms": "20000"},
            "group.streams.heartbeat.interval.ms must be less than or equal to "
            "group.streams.max.heartbeat.interval.ms",
        ),
        (
            {
                "group.streams.min.session.timeout.ms": "1000",
                "group.streams.session.timeout.ms": "5000",
            },
            "group.streams.heartbeat.interval.ms must be less than "
            "group.streams.session.timeout.ms",
        ),
        (
            {"group.streams.num.standby.replicas": "3"},
            "group.streams.num.standby.replicas must be less than or equal to "
            "group.streams.max.standby.replicas",
        ),
    ):
        with pytest.raises(ConfigError) as refused:
            BrokerConfig.from_properties(properties)
        assert str(refused.value) == message
    small = BrokerConfig.from_properties(
        {
            "group.streams.min.session.timeout.ms": "6000",
            "group.streams.session.timeout.ms": "6000",
            "group.streams.min.heartbeat.interval.ms": "1000",
            "group.streams.heartbeat.interval.ms": "2000",
            "group.streams.max.size": "3",
            "group.streams.max.standby.replicas": "4",
            "group.streams.num.standby.replicas": "3",
        }
    )
    assert small.group_streams_session_timeout_ms == 6000
    assert small.group_streams_max_size == 3
    assert small.group_bounds.streams_max_standby_replicas == 4


def test_the_rest_catalog_takes_icebergs_property_names_as_they_are():
    """iceberg.catalog.type=rest: iceberg.rest.catalog.<name> by the Iceberg REST catalog
    property names pyiceberg takes, handed on unchanged (header.* and rest.* included)."""
    config = BrokerConfig.from_properties(
        {
            "iceberg.catalog.type": "REST",
            "iceberg.rest.catalog.uri": " https://catalog.example:8181/api/catalog ",
            "iceberg.rest.catalog.warehouse": "lake",
            "iceberg.rest.catalog.credential": "client:secret",
            "iceberg.rest.catalog.scope": "PRINCIPAL_ROLE:ALL",
            "iceberg.rest.catalog.header.X-Iceberg-Access-Delegation": "vended-credentials",
        }
    )
    assert config.iceberg_catalog_type == "rest"
    assert config.iceberg_rest_catalog == {
        "uri": "https://catalog.example:8181/api/catalog",
        "warehouse": "lake",
        "credential": "client:secret",
        "scope": "PRINCIPAL_ROLE:ALL",
        "header.X-Iceberg-Access-Delegation": "vended-credentials",
    }
    assert config.unknown == {}
    # The SQL catalog stays the default, with no REST properties.
    assert BrokerConfig.from_properties({}).iceberg_catalog_type == "sql"
    assert BrokerConfig.from_properties({}).iceberg_rest_catalog == {}


def test_the_s3_file_io_takes_pyicebergs_property_names():
    """iceberg.catalog.s3.<name>: pyiceberg's s3.<name> FileIO properties, for either catalog;
    a name pyiceberg does not take is refused by name."""
    config = BrokerConfig.from_properties(
        {
            "iceberg.catalog.warehouse": "s3://lake/warehouse",
            "iceberg.catalog.s3.endpoint": " http://127.0.0.1:9000 ",
            "iceberg.catalog.s3.access-key-id": "id",
            "iceberg.catalog.s3.secret-access-key": "secret",
            "iceberg.catalog.s3.region": "us-east-1",
        }
    )
    assert config.iceberg_file_io == {
        "s3.endpoint": "http://127.0.0.1:9000",
        "s3.access-key-id": "id",
        "s3.secret-access-key": "secret",
        "s3.region": "us-east-1",
    }
    assert config.unknown == {}
    with pytest.raises(ConfigError, match="unknown property iceberg.catalog.s3.endpiont"):
        BrokerConfig.from_properties({"iceberg.catalog.s3.endpiont": "http://x"})


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"iceberg.catalog.type": "hive"}, "iceberg.catalog.type.*must be sql or rest"),
        ({"iceberg.catalog.type": "rest"}, "needs iceberg.rest.catalog.uri"),
        (
            {"iceberg.catalog.type": "rest", "iceberg.rest.catalog.uri": "catalog:8181"},
            "iceberg.rest.catalog.uri.*must be an http",
        ),
        (
            {"iceberg.catalog.type": "rest", "iceberg.rest.catalog.uri": "ftp://catalog/"},
            "must be an http",
        ),
        (
            {"iceberg.rest.catalog.uri": "http://catalog:8181/"},
            "iceberg.rest.catalog.uri is set but iceberg.catalog.type is sql",
        ),
        (
            {
                "iceberg.catalog.type": "rest",
                "iceberg.rest.catalog.uri": "http://catalog:8181/",
                "iceberg.rest.catalog.endpoint": "http://catalog:8181/",
            },
            "unknown property iceberg.rest.catalog.endpoint.*uri",
        ),
        (
            {
                "iceberg.catalog.type": "rest",
                "iceberg.rest.catalog.uri": "http://catalog:8181/",
                "iceberg.catalog.warehouse": "file:///tmp/w",
            },
            "iceberg.catalog.warehouse is the SQL catalog's.*iceberg.rest.catalog.warehouse",
        ),
        (
            {
                "iceberg.catalog.type": "rest",
                "iceberg.rest.catalog.uri": "http://catalog:8181/",
                "iceberg.rest.catalog.credential": "a:b",
                "iceberg.rest.catalog.token": "t",
            },
            "one of iceberg.rest.catalog.credential.*and iceberg.rest.catalog.token",
        ),
    ],
)
def test_a_catalog_config_that_cannot_work_is_refused_saying_why(properties, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties(properties)
