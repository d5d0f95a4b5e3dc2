"""Group configs (KIP-848's GROUP resources), without sockets: Kafka 4.4's validation and
messages (as a Kafka 4.4 broker answered them), DescribeConfigs entries, the controller's
decision on its state, and both stores (the JSON file and ZooKeeper's znodes)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from minibroker.common import group_configs
from minibroker.common.config_model import (
    DEFAULT_CONFIG,
    INT,
    STATIC_BROKER_CONFIG,
    ConfigChangeError,
)
from minibroker.common.group_configs import DYNAMIC_GROUP_CONFIG, GROUP_RESOURCE, GroupBounds
from minibroker.controller import configs as controller_configs
from minibroker.controller import zk_layout as layout
from minibroker.controller.state import ControllerState
from minibroker.controller.store import ControllerStore
from minibroker.protocol.errors import Error

KAFKA = GroupBounds()  # Kafka's defaults: session 45000..60000, heartbeat 5000..15000


def refused(overrides: dict[str, str], bounds: GroupBounds = KAFKA) -> tuple[Error, str]:
    with pytest.raises(ConfigChangeError) as error:
        group_configs.validate(overrides, bounds)
    return error.value.error, error.value.message


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"foo.bar": "1"}, "Unknown group config name: foo.bar"),
        (
            {"consumer.session.timeout.ms": "1000"},
            "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive.",
        ),
        (
            {"consumer.session.timeout.ms": "100000"},
            "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive.",
        ),
        (
            {"consumer.heartbeat.interval.ms": "15001"},
            "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive.",
        ),
        (
            {"consumer.heartbeat.interval.ms": "abc"},
            "Invalid value abc for configuration consumer.heartbeat.interval.ms: Not a number "
            "of type INT",
        ),
        (
            {"consumer.session.timeout.ms": "50000.0"},
            "Invalid value 50000.0 for configuration consumer.session.timeout.ms: Not a number "
            "of type INT",
        ),
        (
            {"consumer.heartbeat.interval.ms": "-1"},
            "Invalid value -1 for configuration consumer.heartbeat.interval.ms: Value must be "
            "at least 1",
        ),
        (
            {"consumer.assignment.interval.ms": "2000000000"},
            "consumer.assignment.interval.ms must be in the range 0 to 15000 inclusive.",
        ),
        (
            {"share.record.lock.duration.ms": "10"},
            "Invalid value 10 for configuration share.record.lock.duration.ms: Value must be "
            "at least 1000",
        ),
        (
            {"share.partition.max.record.locks": "2000000000"},
            "share.partition.max.record.locks must be in the range 100 to 4000 inclusive.",
        ),
        (
            {"streams.num.standby.replicas": "3"},
            "streams.num.standby.replicas must be less than or equal to 2",
        ),
        (
            {"streams.task.offset.interval.ms": "14999"},
            "streams.task.offset.interval.ms must be greater than or equal to 15000",
        ),
        (
            {"streams.assignor.name": "foo"},
            "streams.assignor.name 'foo' is not a registered task assignor. Registered "
            "assignors are: [sticky].",
        ),
        (
            {"share.isolation.level": "READ_COMMITTED"},
            "Invalid value READ_COMMITTED for configuration share.isolation.level: String must "
            "be one of: read_committed, read_uncommitted",
        ),
        (
            {"share.renew.acknowledge.enable": "maybe"},
            "Invalid value maybe for configuration share.renew.acknowledge.enable: Expected "
            "value to be either true or false",
        ),
        (
            {"share.auto.offset.reset": "by_duration:-PT1H"},
            "Invalid value by_duration:-PT1H for configuration share.auto.offset.reset: Invalid "
            "value `by_duration:-PT1H` for configuration share.auto.offset.reset. The value must "
            "be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        ),
        (
            {"share.auto.offset.reset": "none"},
            "Invalid value none for configuration share.auto.offset.reset: Invalid "
            "value `none` for configuration share.auto.offset.reset. The value must "
            "be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        ),
        (
            {"share.auto.offset.reset": "EARLIEST"},
            "Invalid value EARLIEST for configuration share.auto.offset.reset: Invalid "
            "value `EARLIEST` for configuration share.auto.offset.reset. The value must "
            "be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        ),
        (
            {"share.auto.offset.reset": "by_duration"},
            "Invalid value by_duration for configuration share.auto.offset.reset: Invalid "
            "value `by_duration` for configuration share.auto.offset.reset. The value must "
            "be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        ),
        (
            {"share.auto.offset.reset": "by_duration:P1DT"},
            "Invalid value by_duration:P1DT for configuration share.auto.offset.reset: Invalid "
            "value `by_duration:P1DT` for configuration share.auto.offset.reset. The value must "
            "be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        ),
        (
            {"share.auto.offset.reset": "by_duration:P1W"},
            "Invalid value by_duration:P1W for configuration share.auto.offset.reset: Invalid "
            "value `by_duration:P1W` for configuration share.auto.offset.reset. The value must "
            "be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        ),
        (
            {"share.auto.offset.reset": "by_duration:PT-0.5S"},
            "Invalid value by_duration:PT-0.5S for configuration share.auto.offset.reset: Invalid "
            "value `by_duration:PT-0.5S` for configuration share.auto.offset.reset. The value must "
            "be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        ),
        (
            {"errors.deadletterqueue.topic.name": "__x"},
            "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'",
        ),
        (
            {"streams.rack.aware.assignment.tags": "a,a"},
            "streams.rack.aware.assignment.tags must not contain duplicate tag keys.",
        ),
        (
            {"streams.acceptable.recovery.lag": "x"},
            "Invalid value x for configuration streams.acceptable.recovery.lag: Not a number "
            "of type LONG",
        ),
    ],
)
def test_kafkas_refusals(overrides, message):
    assert refused(overrides) == (Error.INVALID_CONFIG, message)


@pytest.mark.parametrize(
    "overrides",
    [
        {"consumer.session.timeout.ms": " 50000 ", "consumer.heartbeat.interval.ms": "15000"},
        {"consumer.assignment.interval.ms": "0", "consumer.assignor.offload.enable": "TRUE"},
        {"share.auto.offset.reset": "by_duration:PT1H"},
        {"share.auto.offset.reset": "by_duration:P1D"},
        # java.time.Duration's signs and fractions, as Kafka 4.4 accepts them.
        {"share.auto.offset.reset": "by_duration:-PT-1H"},
        {"share.auto.offset.reset": "by_duration:PT1H-30M"},
        {"share.auto.offset.reset": "by_duration:pt1,5s"},
        {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"},
        {"streams.initial.rebalance.delay.ms": "2000000000", "streams.assignor.name": "sticky"},
        {"errors.deadletterqueue.topic.name": "dlq", "streams.rack.aware.assignment.tags": "a,b"},
        {},
    ],
)
def test_kafkas_acceptances(overrides):
    group_configs.validate(overrides, KAFKA)


def test_bounds_are_the_brokers_and_the_session_must_exceed_the_interval():
    bounds = GroupBounds(
        consumer_session_timeout_ms=3000,
        consumer_heartbeat_interval_ms=1000,
        consumer_min_session_timeout_ms=500,
        consumer_max_session_timeout_ms=10000,
        consumer_min_heartbeat_interval_ms=100,
        consumer_max_heartbeat_interval_ms=5000,
    )
    assert refused({"consumer.session.timeout.ms": "400"}, bounds)[1] == (
        "consumer.session.timeout.ms must be in the range 500 to 10000 inclusive."
    )
    # Session and interval: each the group's, or else the broker's.
    assert refused({"consumer.session.timeout.ms": "1000"}, bounds) == (
        Error.INVALID_CONFIG,
        "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms",
    )
    assert refused({"consumer.heartbeat.interval.ms": "3000"}, bounds)[1] == (
        "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"
    )
    group_configs.validate(
        {"consumer.heartbeat.interval.ms": "3000", "consumer.session.timeout.ms": "9000"}, bounds
    )
    group_configs.validate({"consumer.session.timeout.ms": "1001"}, bounds)


def test_share_bounds_are_the_brokers():
    """The share protocol's heartbeat, session and record lock bounds come from the broker
    (group.share.min/max.*: Kafka's GroupCoordinatorConfig and ShareGroupConfig), and the
    session must exceed the broker's heartbeat interval when the group sets only one."""
    bounds = GroupBounds(
        share_session_timeout_ms=6000,
        share_heartbeat_interval_ms=1000,
        share_min_session_timeout_ms=2000,
        share_max_session_timeout_ms=9000,
        share_min_heartbeat_interval_ms=500,
        share_max_heartbeat_interval_ms=3000,
        share_min_record_lock_duration_ms=1500,
        share_max_record_lock_duration_ms=20000,
    )
    group_configs.validate(
        {
            "share.record.lock.duration.ms": "1500",
            "share.session.timeout.ms": "2000",
            "share.heartbeat.interval.ms": "500",
        },
        bounds,
    )
    assert refused({"share.record.lock.duration.ms": "1499"}, bounds)[1] == (
        "share.record.lock.duration.ms must be in the range 1500 to 20000 inclusive."
    )
    assert refused({"share.record.lock.duration.ms": "20001"}, bounds)[1] == (
        "share.record.lock.duration.ms must be in the range 1500 to 20000 inclusive."
    )
    assert refused({"share.session.timeout.ms": "9001"}, bounds)[1] == (
        "share.session.timeout.ms must be in the range 2000 to 9000 inclusive."
    )
    assert refused({"share.heartbeat.interval.ms": "3001"}, bounds)[1] == (
        "share.heartbeat.interval.ms must be in the range 500 to 3000 inclusive."
    )
    assert refused(
        {"share.session.timeout.ms": "2000", "share.heartbeat.interval.ms": "2500"}, bounds
    )[1] == ("share.session.timeout.ms must be greater than share.heartbeat.interval.ms")
    # Only the heartbeat set: the session is the broker's (6000).
    group_configs.validate({"share.heartbeat.interval.ms": "3000"}, bounds)
    # Kafka's defaults: 15000 to 60000.
    assert refused({"share.record.lock.duration.ms": "5000"})[1] == (
        "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."
    )


def test_describe_defaults_overrides_and_synonyms():
    entries = {
        e["name"]: e
        for e in group_configs.describe(
            {"consumer.heartbeat.interval.ms": "6000", "consumer.assignor.offload.enable": "false"},
            {"group.consumer.session.timeout.ms": "50000"},
            include_synonyms=True,
        )
    }
    # Internal configs only when set: 21 listed plus the one set, as Kafka 4.4 answers.
    assert len(entries) == 22 and "streams.num.warmup.replicas" not in entries
    heartbeat = entries["consumer.heartbeat.interval.ms"]
    assert (heartbeat["value"], heartbeat["config_source"], heartbeat["config_type"]) == (
        "6000",
        DYNAMIC_GROUP_CONFIG,
        INT,
    )
    assert heartbeat["synonyms"] == [
        {"name": "consumer.heartbeat.interval.ms", "value": "6000", "source": DYNAMIC_GROUP_CONFIG},
        {"name": "group.consumer.heartbeat.interval.ms", "value": "5000", "source": DEFAULT_CONFIG},
    ]
    session = entries["consumer.session.timeout.ms"]
    assert (session["value"], session["config_source"]) == ("50000", STATIC_BROKER_CONFIG)
    assert [s["source"] for s in session["synonyms"]] == [STATIC_BROKER_CONFIG, DEFAULT_CONFIG]
    reset = entries["share.auto.offset.reset"]
    assert reset["synonyms"] == [
        {"name": "share.auto.offset.reset", "value": "latest", "source": DEFAULT_CONFIG}
    ]
    assert entries["streams.assignor.name"]["value"] == "sticky"
    assert all(not e["read_only"] for e in entries.values())
    only = group_configs.describe(
        {}, {}, include_synonyms=False, keys=["consumer.session.timeout.ms"]
    )
    assert [(e["name"], e["value"], e["synonyms"]) for e in only] == [
        ("consumer.session.timeout.ms", "45000", [])
    ]


def resource(name: str, configs: list[tuple[str, int, str | None]]):
    return SimpleNamespace(
        resource_type=GROUP_RESOURCE,
        resource_name=name,
        configs=[SimpleNamespace(name=n, config_operation=op, value=v) for n, op, v in configs],
    )


def test_the_controller_decides_stores_and_pushes_group_configs():
    state = ControllerState()
    results, changed = controller_configs.alter_configs(
        state,
        [
            resource("g1", [("consumer.heartbeat.interval.ms", 0, "6000")]),
            resource("g2", [("consumer.nope", 0, "1")]),
            resource("", [("consumer.heartbeat.interval.ms", 0, "6000")]),
        ],
        incremental=True,
        validate_only=False,
    )
    assert [(r["error_code"], r["error_message"]) for r in results] == [
        (Error.NONE, None),
        (Error.INVALID_CONFIG, "Unknown group config name: consumer.nope"),
        (Error.INVALID_REQUEST, "Default group resources are not allowed."),
    ]
    assert changed == [(GROUP_RESOURCE, "g1")]
    assert state.group_configs == {"g1": {"consumer.heartbeat.interval.ms": "6000"}}
    # Pushed to every broker, whatever it hosts; and to a broker that (re)registers.
    assert controller_configs.concerning(state, changed, 7) == changed
    assert (GROUP_RESOURCE, "g1") in controller_configs.resources_of_broker(state, 7)
    assert controller_configs.pushed_configs(state, changed) == [
        {
            "resource_type": GROUP_RESOURCE,
            "resource_name": "g1",
            "configs": [{"name": "consumer.heartbeat.interval.ms", "value": "6000"}],
        }
    ]
    # validate_only stores nothing; DELETE of the last config forgets the group.
    controller_configs.alter_configs(
        state,
        [resource("g3", [("consumer.session.timeout.ms", 0, "50000")])],
        incremental=True,
        validate_only=True,
    )
    assert "g3" not in state.group_configs
    _, changed = controller_configs.alter_configs(
        state,
        [resource("g1", [("consumer.heartbeat.interval.ms", 1, None)])],
        incremental=True,
        validate_only=False,
    )
    assert changed == [(GROUP_RESOURCE, "g1")] and state.group_configs == {}
    assert controller_configs.pushed_configs(state, changed)[0]["configs"] == []


def test_the_controllers_bounds_apply():
    state = ControllerState()
    bounds = GroupBounds(
        consumer_min_session_timeout_ms=1000, consumer_min_heartbeat_interval_ms=100
    )
    results, _ = controller_configs.alter_configs(
        state,
        [
            resource(
                "g",
                [
                    ("consumer.session.timeout.ms", 0, "2000"),
                    ("consumer.heartbeat.interval.ms", 0, "500"),
                ],
            )
        ],
        incremental=True,
        validate_only=False,
        group_bounds=bounds,
    )
    assert results[0]["error_code"] == Error.NONE
    results, _ = controller_configs.alter_configs(
        state,
        [resource("g", [("consumer.session.timeout.ms", 0, "2000")])],
        incremental=True,
        validate_only=False,
    )
    assert results[0]["error_code"] == Error.INVALID_CONFIG  # Kafka's default bounds: refused


def test_both_stores_keep_group_configs(tmp_path):
    state = ControllerState(
        group_configs={"g1": {"consumer.session.timeout.ms": "50000"}, "a/b %": {"x": "1"}}
    )
    store = ControllerStore(tmp_path / "state.json")
    store.save(state)
    assert store.load().group_configs == state.group_configs
    znodes = layout.state_znodes(state)
    assert "/config/groups/g1" in znodes and "/config/groups/a%2Fb%20%25" in znodes
    loaded = layout.state_from_znodes(znodes, controller_epoch=1)
    assert loaded.group_configs == state.group_configs
    # Deleting a group's configs deletes its znode.
    writes = layout.plan_writes(znodes, layout.state_znodes(ControllerState(), znodes))
    assert any(w.kind == "delete" and w.path == "/config/groups/g1" for w in writes)


def test_streams_configs_are_held_to_the_brokers_group_streams_bounds():
    """streams.session.timeout.ms, streams.heartbeat.interval.ms and
    streams.num.standby.replicas against the broker's group.streams.min/max.* (Kafka's
    GroupConfig.validateValues), and the session above the interval, each the group's or
    else the broker's group.streams.* default."""
    bounds = GroupBounds(
        streams_session_timeout_ms=8000,
        streams_heartbeat_interval_ms=2000,
        streams_min_session_timeout_ms=6000,
        streams_max_session_timeout_ms=20000,
        streams_min_heartbeat_interval_ms=1000,
        streams_max_heartbeat_interval_ms=4000,
        streams_max_standby_replicas=1,
    )
    assert refused({"streams.session.timeout.ms": "45000"}, bounds) == (
        Error.INVALID_CONFIG,
        "streams.session.timeout.ms must be in the range 6000 to 20000 inclusive.",
    )
    assert refused({"streams.heartbeat.interval.ms": "5000"}, bounds)[1] == (
        "streams.heartbeat.interval.ms must be in the range 1000 to 4000 inclusive."
    )
    assert refused({"streams.num.standby.replicas": "2"}, bounds)[1] == (
        "streams.num.standby.replicas must be less than or equal to 1"
    )
    # The group's session against the broker's interval default (2000).
    low = dataclasses.replace(bounds, streams_min_session_timeout_ms=1000)
    assert refused({"streams.session.timeout.ms": "2000"}, low) == (
        Error.INVALID_CONFIG,
        "streams.session.timeout.ms must be greater than streams.heartbeat.interval.ms",
    )
    group_configs.validate({"streams.session.timeout.ms": "2001"}, low)
    group_configs.validate(
        {"streams.session.timeout.ms": "6000", "streams.heartbeat.interval.ms": "1000"}, bounds
    )
    group_configs.validate({"streams.num.standby.replicas": "1"}, bounds)
    # What Kafka's defaults refuse, these bounds accept.
    assert refused({"streams.session.timeout.ms": "10000"})[1] == (
        "streams.session.timeout.ms must be in the range 45000 to 60000 inclusive."
    )
    group_configs.validate({"streams.session.timeout.ms": "10000"}, bounds)
