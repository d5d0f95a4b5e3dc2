"""Which listeners carry the cluster's own requests, from the node's configuration."""

import pytest

from minibroker.apis.authorization import inter_node_listeners
from minibroker.common.config import BrokerConfig


@pytest.mark.parametrize(
    ("properties", "internal"),
    [
        ({}, None),
        (
            {
                "listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:19092",
                "inter.broker.listener.name": "INTERNAL",
                "controller.listener.names": "CONTROLLER",
            },
            {"INTERNAL"},
        ),
        # Kafka's combined node: the broker listener is also the inter-broker one.
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                "controller.listener.names": "CONTROLLER",
            },
            None,
        ),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,"
                "CLIENT://127.0.0.1:9094",
                "controller.listener.names": "CONTROLLER",
            },
            {"PLAINTEXT", "CONTROLLER"},
        ),
        ({"listeners": "FIRST://127.0.0.1:9092,SECOND://127.0.0.1:9093"}, {"FIRST"}),
        (
            {
                "process.roles": "controller",
                "listeners": "CONTROLLER://127.0.0.1:9093",
                "controller.listener.names": "CONTROLLER",
            },
            None,
        ),
    ],
)
def test_inter_node_listeners(properties, internal):
    config = BrokerConfig.from_properties(
        {"listener.security.protocol.map": _plaintext(properties), **properties}
    )
    expected = None if internal is None else frozenset(internal)
    assert inter_node_listeners(config) == expected


def _plaintext(properties) -> str:
    names = [entry.split("://")[0] for entry in properties.get("listeners", "").split(",")]
    return ",".join(f"{name}:PLAINTEXT" for name in names if name) or "PLAINTEXT:PLAINTEXT"
