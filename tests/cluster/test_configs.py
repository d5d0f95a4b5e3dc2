"""Configs on a cluster: each broker answers for its own broker resource, and a broker that
was down while configs changed applies the current ones when it registers again.

The first two tests share the module's cluster (`shared_cluster`; the second restores the
configs it changes); the one that stops a broker has a fresh one (`cluster`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kio.schema.errors import ErrorCode

from minibroker.common.config_model import BROKER_RESOURCE
from minibroker.common.group_configs import DYNAMIC_GROUP_CONFIG, GROUP_RESOURCE
from minibroker.protocol import codec
from minibroker.protocol.versions import ApiKey
from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import (
    BROKERS,
    CLUSTER_OVERRIDES,
    CONVERGENCE_TIMEOUT,
    _check_clean_stop,
)
from tests.conftest import exchange, wait_for

TIMEOUT = 20


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The cluster of the module's tests that stop no broker (conftest's `cluster`, once)."""
    started = Cluster.start(
        tmp_path_factory.mktemp("configs"), brokers=BROKERS, overrides=CLUSTER_OVERRIDES
    )
    yield started
    _check_clean_stop(started)


def _incremental_alter(bootstrap: str, resource_type: int, name: str, key: str, value: str):
    request = codec.build(
        codec.request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1),
        {
            "resources": [
                {
                    "resource_type": resource_type,
                    "resource_name": name,
                    "configs": [{"name": key, "config_operation": 0, "value": value}],
                }
            ],
            "validate_only": False,
        },
    )
    (answer,) = exchange(bootstrap, request, 1, timeout=TIMEOUT).responses
    return answer


def _group_heartbeat_config(bootstrap: str) -> tuple[str, int]:
    """Group g's consumer.heartbeat.interval.ms as that broker describes it: (value, source)."""
    request = codec.build(
        codec.request_class(ApiKey.DESCRIBE_CONFIGS, 4),
        {
            "resources": [
                {
                    "resource_type": GROUP_RESOURCE,
                    "resource_name": "g",
                    "configuration_keys": ["consumer.heartbeat.interval.ms"],
                }
            ]
        },
    )
    (result,) = exchange(bootstrap, request, 1, timeout=TIMEOUT).results
    (entry,) = result.configs
    return entry.value, entry.config_source


def test_broker_resources_are_answered_by_their_broker(shared_cluster: Cluster):
    cluster = shared_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "2")]).values()
    configs = future.result(TIMEOUT)
    log_dirs = configs["log.dirs"]
    assert log_dirs.source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert log_dirs.value == str(cluster.brokers[2].log_dir)

    # A broker resource naming another broker, sent to broker 1, is refused as Kafka does.
    answer = _incremental_alter(
        cluster.brokers[1].bootstrap, BROKER_RESOURCE, "2", "log.retention.ms", "1000"
    )
    assert answer.error_code == ErrorCode.invalid_request
    assert "expected 1" in answer.error_message


def test_a_broker_resource_changed_through_its_broker_with_a_separate_controller(
    shared_cluster: Cluster,
):
    """confluent-kafka sends a broker resource to that broker, which checks the name and
    forwards the change; the controller (node 0) must not check it against its own id."""
    cluster = shared_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    try:
        _change_brokers_2_and_3(admin)
    finally:
        # Back to no dynamic config on either broker, for the module's other tests.
        for broker, key in (("2", "log.retention.ms"), ("3", "message.max.bytes")):
            restored = ConfigResource(ConfigResource.Type.BROKER, broker)
            restored.add_incremental_config(
                ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
            )
            (future,) = admin.incremental_alter_configs([restored]).values()
            future.result(TIMEOUT)


def _change_brokers_2_and_3(admin: AdminClient) -> None:
    resource = ConfigResource(ConfigResource.Type.BROKER, "2")
    resource.add_incremental_config(
        ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    )
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(TIMEOUT)
    legacy = ConfigResource(
        ConfigResource.Type.BROKER, "3", set_config={"message.max.bytes": "5000"}
    )
    (future,) = admin.alter_configs([legacy]).values()
    future.result(TIMEOUT)
    (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "2")]).values()
    retention = future.result(TIMEOUT)["log.retention.ms"]
    assert (retention.value, retention.source) == (
        "3600000",
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
    )


def test_a_restarted_broker_applies_configs_changed_while_it_was_down(cluster: Cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # One replica, on broker 3: only broker 3 can enforce the topic's max.message.bytes.
    admin.create_topics([NewTopic("on-three", num_partitions=1, replica_assignment=[[3]])])[
        "on-three"
    ].result(TIMEOUT)
    wait_for(lambda: cluster.leader_of("on-three", 0) == 3, CONVERGENCE_TIMEOUT, "broker 3 to lead")
    three = cluster.brokers[3]
    assert three.stop() == 0

    resource = ConfigResource(ConfigResource.Type.TOPIC, "on-three")
    resource.add_incremental_config(
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)
    )
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(TIMEOUT)
    answer = _incremental_alter(
        cluster.brokers[1].bootstrap, BROKER_RESOURCE, "", "log.retention.ms", "3600000"
    )
    assert answer.error_code == ErrorCode.none
    # A group config (KIP-848's GROUP resource), sent to broker 1 and decided by the
    # controller, reaches broker 2 at once and broker 3 when it registers again.
    answer = _incremental_alter(
        cluster.brokers[1].bootstrap, GROUP_RESOURCE, "g", "consumer.heartbeat.interval.ms", "6000"
    )
    assert answer.error_code == ErrorCode.none
    assert _group_heartbeat_config(cluster.brokers[2].bootstrap) == ("6000", DYNAMIC_GROUP_CONFIG)

    three.restart()
    three.wait_ready(TIMEOUT)
    wait_for(lambda: cluster.leader_of("on-three", 0) == 3, CONVERGENCE_TIMEOUT, "broker 3 to lead")
    # A fresh client: the first one may still think broker 3 is gone.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "3")]).values()
    retention = future.result(TIMEOUT)["log.retention.ms"]
    assert (retention.value, retention.source) == (
        "3600000",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
    )

    assert _group_heartbeat_config(three.bootstrap) == ("6000", DYNAMIC_GROUP_CONFIG)

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    outcome = []
    producer.produce("on-three", b"z" * 5000, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT)
    assert outcome[0] is not None and outcome[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
