"""Group configs (KIP-848's GROUP config resources) against a real broker process:
confluent-kafka's AdminClient sets, describes and deletes them; raw requests check Kafka's
answers to bad input and that ConsumerGroupHeartbeat answers with the group's heartbeat
interval and fences with its session timeout; a confluent-kafka consumer with
`group.protocol=consumer` heartbeats at the group's interval once it is changed; the configs
survive a restart.

The broker's bounds are narrowed (group.consumer.min/max.*) so that the tests can use short
timeouts; its default heartbeat interval stays Kafka's 5000 ms and its session 20000 ms, far
from the groups' own values, so that each test sees which one applies.
"""

from __future__ import annotations

import datetime
import logging
import re
import time

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from kio.static.primitive import i32, i32Timedelta

from minibroker.protocol.versions import ApiKey
from minibroker.testing import Cluster
from minibroker.tools import wire
from tests.conftest import (
    coordinator_ready,
    create_topic,
    describe_consumer_group,
    exchange,
    wait_for,
)

GROUP = 32  # ConfigResource type GROUP
INVALID_CONFIG, INVALID_REQUEST = 40, 42
SET, DELETE, APPEND = 0, 1, 2
BROKER_HEARTBEAT_MS = 5000
BROKER_SESSION_MS = 20000
OVERRIDES = {
    "offsets.topic.num.partitions": 2,
    "group.consumer.heartbeat.interval.ms": BROKER_HEARTBEAT_MS,
    "group.consumer.session.timeout.ms": BROKER_SESSION_MS,
    "group.consumer.min.heartbeat.interval.ms": 200,
    "group.consumer.max.heartbeat.interval.ms": 6000,
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.max.session.timeout.ms": 30000,
}


# One broker for the module (the restart test has its own); the plugin fails the test that
# closes a broker that does not shut down cleanly.
pytestmark = pytest.mark.minibroker(scope="module", server_properties=OVERRIDES)


@pytest.fixture
def broker(kafka_broker: Cluster) -> Cluster:
    """The plugin's broker, under the name the helpers below take."""
    return kafka_broker


def admin(broker: Cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def alter(broker: Cluster, group: str, *entries: tuple[str, str | None, AlterConfigOpType]):
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=operation)
            for name, value, operation in entries
        ],
    )
    client = admin(broker)  # kept until the answer: a collected client fails its futures
    (future,) = client.incremental_alter_configs([resource]).values()
    return future.result(timeout=20)


def describe(broker: Cluster, group: str) -> dict:
    client = admin(broker)
    (future,) = client.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
    return future.result(timeout=20)


def refusal(broker: Cluster, group: str, name: str, value: str) -> tuple[str, str]:
    with pytest.raises(KafkaException) as refused:
        alter(broker, group, (name, value, AlterConfigOpType.SET))
    error = refused.value.args[0]
    return error.name(), error.str()


def wire_request(broker: Cluster, api_key: int, version: int, data: dict):
    with wire.connect(broker.bootstrap_servers, 10, exact=True) as client:
        return client.request(api_key, version, data)


def group_resource(name: str, configs: list[dict]) -> dict:
    return {"resource_type": GROUP, "resource_name": name, "configs": configs}


def test_admin_client_sets_describes_and_deletes_group_configs(broker: Cluster):
    group = "gc-admin"
    before = describe(broker, group)
    heartbeat = before["consumer.heartbeat.interval.ms"]
    # The broker's own property is the default, as Kafka reports it (its synonym, set in
    # the broker's properties: STATIC_BROKER_CONFIG).
    assert heartbeat.value == str(BROKER_HEARTBEAT_MS)
    assert heartbeat.source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert "group.consumer.heartbeat.interval.ms" in heartbeat.synonyms
    assert before["share.auto.offset.reset"].value == "latest"
    assert before["share.auto.offset.reset"].source == ConfigSource.DEFAULT_CONFIG.value
    assert "consumer.assignor.offload.enable" not in before  # internal, not set

    alter(
        broker,
        group,
        ("consumer.heartbeat.interval.ms", "1500", AlterConfigOpType.SET),
        ("consumer.session.timeout.ms", "6000", AlterConfigOpType.SET),
    )
    after = describe(broker, group)
    assert after["consumer.heartbeat.interval.ms"].value == "1500"
    assert after["consumer.heartbeat.interval.ms"].source == ConfigSource.GROUP_CONFIG.value
    assert list(after["consumer.session.timeout.ms"].synonyms) == [
        "consumer.session.timeout.ms",
        "group.consumer.session.timeout.ms",
    ]
    assert after["consumer.session.timeout.ms"].value == "6000"
    # Another group is not touched.
    assert describe(broker, "gc-other")["consumer.heartbeat.interval.ms"].value == "5000"

    alter(broker, group, ("consumer.heartbeat.interval.ms", None, AlterConfigOpType.DELETE))
    deleted = describe(broker, group)
    assert deleted["consumer.heartbeat.interval.ms"].value == str(BROKER_HEARTBEAT_MS)
    assert (
        deleted["consumer.heartbeat.interval.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    )
    assert deleted["consumer.session.timeout.ms"].value == "6000"
    # As in Kafka, the session must stay above the interval, the broker's when the group
    # has none.
    with pytest.raises(KafkaException, match="must be greater than consumer.heartbeat"):
        alter(broker, group, ("consumer.session.timeout.ms", "5000", AlterConfigOpType.SET))


def test_bad_group_configs_get_kafkas_errors(broker: Cluster):
    group = "gc-bad"
    assert refusal(broker, group, "consumer.nope", "1") == (
        "INVALID_CONFIG",
        "Unknown group config name: consumer.nope",
    )
    assert refusal(broker, group, "consumer.session.timeout.ms", "60000") == (
        "INVALID_CONFIG",
        "consumer.session.timeout.ms must be in the range 1000 to 30000 inclusive.",
    )
    assert refusal(broker, group, "consumer.heartbeat.interval.ms", "100") == (
        "INVALID_CONFIG",
        "consumer.heartbeat.interval.ms must be in the range 200 to 6000 inclusive.",
    )
    assert refusal(broker, group, "consumer.heartbeat.interval.ms", "0") == (
        "INVALID_CONFIG",
        "Invalid value 0 for configuration consumer.heartbeat.interval.ms: Value must be at "
        "least 1",
    )
    assert refusal(broker, group, "consumer.session.timeout.ms", "soon") == (
        "INVALID_CONFIG",
        "Invalid value soon for configuration consumer.session.timeout.ms: Not a number of "
        "type INT",
    )
    # The session must exceed the interval (here: the broker's default interval, 5000).
    assert refusal(broker, group, "consumer.session.timeout.ms", "5000") == (
        "INVALID_CONFIG",
        "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms",
    )
    assert refusal(broker, group, "share.delivery.count.limit", "11") == (
        "INVALID_CONFIG",
        "share.delivery.count.limit must be in the range 2 to 10 inclusive.",
    )
    # Nothing of that was stored.
    described = describe(broker, group)
    assert {e.source for e in described.values()} <= {
        ConfigSource.DEFAULT_CONFIG.value,
        ConfigSource.STATIC_BROKER_CONFIG.value,
    }


def test_wire_answers_for_group_resources(broker: Cluster):
    """What the admin client does not let through: the empty group name, APPEND, the
    legacy AlterConfigs (which Kafka allows on groups, replacing the whole set), and
    validate_only."""
    session = {"name": "consumer.session.timeout.ms", "value": "7000"}
    empty = wire_request(
        broker,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [group_resource("", [{**session, "config_operation": SET}])],
            "validate_only": False,
        },
    )
    assert (empty.responses[0].error_code, empty.responses[0].error_message) == (
        INVALID_REQUEST,
        "Default group resources are not allowed.",
    )
    described = wire_request(
        broker,
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": GROUP, "resource_name": "", "configuration_keys": None}
            ],
            "include_synonyms": True,
        },
    )
    assert (described.results[0].error_code, described.results[0].error_message) == (
        INVALID_REQUEST,
        "Group name must not be empty",
    )
    appended = wire_request(
        broker,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [group_resource("gc-wire", [{**session, "config_operation": APPEND}])],
            "validate_only": False,
        },
    )
    assert (appended.responses[0].error_code, appended.responses[0].error_message) == (
        INVALID_CONFIG,
        "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST.",
    )
    checked = wire_request(
        broker,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [group_resource("gc-wire", [{**session, "config_operation": SET}])],
            "validate_only": True,
        },
    )
    assert checked.responses[0].error_code == 0
    assert describe(broker, "gc-wire")["consumer.session.timeout.ms"].value == "20000"
    alter(broker, "gc-wire", ("consumer.heartbeat.interval.ms", "900", AlterConfigOpType.SET))
    legacy = wire_request(
        broker,
        ApiKey.ALTER_CONFIGS,
        2,
        {"resources": [group_resource("gc-wire", [session])], "validate_only": False},
    )
    assert legacy.responses[0].error_code == 0
    replaced = describe(broker, "gc-wire")
    assert replaced["consumer.session.timeout.ms"].value == "7000"
    # The legacy request replaces the group's whole set: the interval is the broker's again.
    assert (
        replaced["consumer.heartbeat.interval.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    )


def heartbeat(bootstrap: str, group: str, topic: str, member_id: str = "", epoch: int = 0):
    answer = exchange(
        bootstrap,
        ConsumerGroupHeartbeatRequest(
            group_id=group,
            member_id=member_id,
            member_epoch=i32(epoch),
            rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            subscribed_topic_names=(topic,) if epoch == 0 else None,
            topic_partitions=() if epoch == 0 else None,
        ),
    )
    assert answer.error_code == 0, answer
    return answer


def interval_ms(answer) -> int:
    return int(answer.heartbeat_interval / datetime.timedelta(milliseconds=1))


def test_heartbeat_answers_with_the_groups_interval(broker: Cluster):
    """ConsumerGroupHeartbeat tells a member the group's heartbeat interval: the broker's
    until the group has its own, that one from the member's next heartbeat, the broker's
    again once it is deleted."""
    group = topic = "gc-interval"
    create_topic(broker.bootstrap_servers, topic, 1)
    coordinator_ready(broker.bootstrap_servers, group)
    joined = heartbeat(broker.bootstrap_servers, group, topic)
    assert interval_ms(joined) == BROKER_HEARTBEAT_MS
    member, epoch = joined.member_id, joined.member_epoch

    alter(broker, group, ("consumer.heartbeat.interval.ms", "1200", AlterConfigOpType.SET))
    answer = wait_for(
        lambda: (
            interval_ms(a := heartbeat(broker.bootstrap_servers, group, topic, member, epoch))
            == 1200
            and a
        ),
        10,
        "the group's heartbeat interval in the answer",
        interval=0.2,
    )
    assert answer.member_id == member
    alter(broker, group, ("consumer.heartbeat.interval.ms", None, AlterConfigOpType.DELETE))
    wait_for(
        lambda: (
            interval_ms(heartbeat(broker.bootstrap_servers, group, topic, member, epoch))
            == BROKER_HEARTBEAT_MS
        ),
        10,
        "the broker's heartbeat interval again",
        interval=0.2,
    )


def members(bootstrap: str, group: str) -> list[str]:
    entry = describe_consumer_group(bootstrap, group)
    assert entry.error_code == 0, entry
    return [m.member_id for m in entry.members]


def test_the_groups_session_timeout_fences_a_silent_member(broker: Cluster):
    """A member that stops heartbeating is fenced after its group's session timeout (1.5 s),
    while a member of a group without one keeps the broker's (20 s)."""
    short, long, topic = "gc-session-short", "gc-session-long", "gc-session"
    create_topic(broker.bootstrap_servers, topic, 1)
    alter(
        broker,
        short,
        ("consumer.session.timeout.ms", "1500", AlterConfigOpType.SET),
        ("consumer.heartbeat.interval.ms", "500", AlterConfigOpType.SET),
    )
    for group in (short, long):
        coordinator_ready(broker.bootstrap_servers, group)
    started = time.monotonic()
    fenced = heartbeat(broker.bootstrap_servers, short, topic).member_id
    kept = heartbeat(broker.bootstrap_servers, long, topic).member_id
    assert members(broker.bootstrap_servers, short) == [fenced]
    wait_for(lambda: not members(broker.bootstrap_servers, short), 15, "the silent member fenced")
    assert time.monotonic() - started >= 1.0
    assert members(broker.bootstrap_servers, long) == [kept]


class _HeartbeatTimes(logging.Handler):
    """When librdkafka logged each ConsumerGroupHeartbeat it sent (debug=cgrp,protocol)."""

    SENT = re.compile(r"Sent ConsumerGroupHeartbeatRequest")

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.SENT.search(record.getMessage()):
            self.times.append(time.monotonic())


def test_confluent_consumer_heartbeats_at_the_groups_interval(broker: Cluster):
    """A librdkafka consumer (group.protocol=consumer) of a live group heartbeats every 5 s,
    the broker's interval; once the group's interval is set to 400 ms it heartbeats that often
    from its next heartbeat on."""
    group = topic = "gc-librdkafka"
    create_topic(broker.bootstrap_servers, topic, 1)
    times = _HeartbeatTimes()
    logger = logging.getLogger("gc-librdkafka")
    logger.addHandler(times)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": group,
            "group.protocol": "consumer",
            "debug": "protocol",
            "logger": logger,
        }
    )
    try:
        consumer.subscribe([topic])

        def heartbeats_after(moment: float) -> list[float]:
            consumer.poll(0.05)
            return [t for t in times.times if t > moment]

        wait_for(lambda: len(heartbeats_after(0)) >= 2, 20, "the consumer's first heartbeats")
        # At the broker's interval: no third heartbeat within 3 s of the second.
        second = times.times[1]
        while time.monotonic() < second + 3:
            consumer.poll(0.05)
        assert [t for t in times.times if second < t < second + 3] == []
        alter(broker, group, ("consumer.heartbeat.interval.ms", "400", AlterConfigOpType.SET))
        changed = time.monotonic()
        # The next heartbeat (within the old 5 s) learns 400 ms; then they come that often.
        beats = wait_for(
            lambda: len(b := heartbeats_after(changed)) >= 6 and b,
            20,
            "heartbeats at the group's interval",
            interval=0.01,
        )
        gaps = [later - earlier for earlier, later in zip(beats[1:], beats[2:], strict=False)]
        assert max(gaps) < 2.5, gaps
    finally:
        consumer.close()
        logger.removeHandler(times)


@pytest.mark.minibroker(scope="function", server_properties=OVERRIDES)
def test_group_configs_survive_a_restart(broker: Cluster):
    """The controller keeps the group configs (in its state file): after a restart the
    broker describes them and answers heartbeats with them."""
    group = topic = "gc-restart"
    alter(broker, group, ("consumer.heartbeat.interval.ms", "700", AlterConfigOpType.SET))
    assert broker.stop(1) == 0, broker.node(1).log_tail()
    broker.restart(1)

    # The controller pushes the group configs at the broker's registration, which can come
    # after the listener answers (as for dynamic broker configs; the README's "Topic
    # configs on brokers" says so): read until the push has arrived.
    def restored():
        described = describe(broker, group)["consumer.heartbeat.interval.ms"]
        return (described.value, described.source) == ("700", ConfigSource.GROUP_CONFIG.value)

    wait_for(restored, 20.0, "the group config after the restart", 0.2)
    create_topic(broker.bootstrap_servers, topic, 1)
    coordinator_ready(broker.bootstrap_servers, group)
    assert interval_ms(heartbeat(broker.bootstrap_servers, group, topic)) == 700
