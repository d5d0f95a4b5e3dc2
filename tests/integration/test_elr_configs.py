"""Kafka 4.4's refusals of min.insync.replicas changes while eligible leader replicas are on
(KIP-966; ConfigurationControlManager.validateAlterConfig), on the shared broker, a new
cluster and so at eligible.leader.replicas.version 1: a broker's own min.insync.replicas may
not be set (confluent-kafka's AdminClient, incremental and legacy), and the cluster-level
one may not be deleted (a raw IncrementalAlterConfigs and AlterConfigs on the cluster
default "", which kafka-configs --entity-default sends and the Python clients cannot);
both INVALID_CONFIG with Kafka's messages, and the broker goes on answering. (Setting the
cluster-level value is allowed: tests/unit/test_controller_elr.py, which keeps this shared
broker's configs as they were.)
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kio.schema.errors import ErrorCode

from minibroker.common.config_model import BROKER_RESOURCE
from minibroker.protocol import codec
from minibroker.protocol.versions import ApiKey
from minibroker.testing import Cluster
from tests.conftest import SHARED_BROKER, exchange

pytestmark = SHARED_BROKER

TIMEOUT = 15
MIN_ISR = "min.insync.replicas"
BROKER_LEVEL = "Broker-level min.insync.replicas cannot be altered while ELR is enabled."
CLUSTER_LEVEL = "Cluster-level min.insync.replicas cannot be removed while ELR is enabled."
SET, DELETE = 0, 1


def refusal(future) -> KafkaError:
    with pytest.raises(KafkaException) as refused:
        future.result(TIMEOUT)
    return refused.value.args[0]


def cluster_default(bootstrap: str, operation: int, value: str | None, legacy: bool = False):
    """One change of min.insync.replicas on the cluster default (""); the response entry."""
    if legacy:
        configs = [] if value is None else [{"name": MIN_ISR, "value": value}]
        request = codec.build(
            codec.request_class(ApiKey.ALTER_CONFIGS, 2),
            {
                "resources": [
                    {"resource_type": BROKER_RESOURCE, "resource_name": "", "configs": configs}
                ],
                "validate_only": False,
            },
        )
    else:
        request = codec.build(
            codec.request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1),
            {
                "resources": [
                    {
                        "resource_type": BROKER_RESOURCE,
                        "resource_name": "",
                        "configs": [
                            {"name": MIN_ISR, "config_operation": operation, "value": value}
                        ],
                    }
                ],
                "validate_only": False,
            },
        )
    (answer,) = exchange(bootstrap, request, 1).responses
    return answer


def test_min_insync_replicas_refusals_while_elr_is_enabled(kafka_broker: Cluster):
    bootstrap = kafka_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    own = ConfigResource(ConfigResource.Type.BROKER, str(kafka_broker.node(1).node_id))

    own.add_incremental_config(
        ConfigEntry(MIN_ISR, "2", incremental_operation=AlterConfigOpType.SET)
    )
    (future,) = admin.incremental_alter_configs([own]).values()
    error = refusal(future)
    assert (error.code(), error.str()) == (KafkaError.INVALID_CONFIG, BROKER_LEVEL)

    legacy = ConfigResource(
        ConfigResource.Type.BROKER, str(kafka_broker.node(1).node_id), {MIN_ISR: "2"}
    )
    with pytest.deprecated_call():  # confluent-kafka's legacy AlterConfigs
        (future,) = admin.alter_configs([legacy]).values()
    error = refusal(future)
    assert (error.code(), error.str()) == (KafkaError.INVALID_CONFIG, BROKER_LEVEL)

    # Deleting the cluster-level value, explicitly or by replacing the set without it.
    for answer in (
        cluster_default(bootstrap, DELETE, None),
        cluster_default(bootstrap, SET, None, legacy=True),
    ):
        assert (answer.error_code, answer.error_message) == (
            ErrorCode.invalid_config,
            CLUSTER_LEVEL,
        )

    # Nothing changed, and the broker goes on answering.
    (future,) = admin.describe_configs(
        [ConfigResource(ConfigResource.Type.BROKER, own.name)]
    ).values()
    assert future.result(TIMEOUT)[MIN_ISR].value == "1"
