"""Requests a broker forwards to the controller arrive under the broker's principal (there is
no Envelope): the controller lets them through on a broker's channel, on an inter-node
listener, for a principal with CLUSTER_ACTION, whether or not it is a broker itself (an
elected controller in ZooKeeper mode is one), and nothing else gets that pass."""

import pytest

from minibroker.apis import Connection, RequestContext
from minibroker.apis.authorization import allowed
from minibroker.common.config import BrokerConfig
from minibroker.protocol.framing import RequestHeader
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import (
    CLUSTER_NAME,
    AclBinding,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

BROKER = "User:broker"
LISTENERS = {
    "listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:19092",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}


def context(client_id: str, listener: str, *, controller=True, principal=BROKER):
    authorizer = Authorizer()
    authorizer.replace_acls(
        [
            AclBinding(
                ResourceType.CLUSTER,
                CLUSTER_NAME,
                PatternType.LITERAL,
                BROKER,
                "*",
                Operation.CLUSTER_ACTION,
                Permission.ALLOW,
            )
        ]
    )
    return RequestContext(
        RequestHeader(ApiKey.CREATE_TOPICS, 7, 1, client_id),
        listener,
        BrokerConfig.from_properties(LISTENERS),
        "cluster",
        {},
        replicas=object(),  # a broker too, as an elected controller is
        controller=object() if controller else None,
        metrics=None,
        connection=Connection("/127.0.0.1", principal=principal),
        authorizer=authorizer,
    )


@pytest.mark.parametrize("channel", ["broker-2", "broker-2-forwarding", "broker-12-lifecycle"])
def test_a_brokers_forwarded_request_passes_on_a_controller_that_is_a_broker(channel):
    ctx = context(channel, "INTERNAL")
    assert allowed(ctx, Operation.CREATE, ResourceType.TOPIC, "orders")
    assert allowed(ctx, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)


@pytest.mark.parametrize(
    ("client_id", "listener", "controller", "principal"),
    [
        ("rdkafka", "INTERNAL", True, BROKER),  # the broker's principal, not its channel
        ("broker-2", "EXTERNAL", True, BROKER),  # a client listener
        ("broker-2", "INTERNAL", False, BROKER),  # not the controller: nothing is forwarded
        ("broker-2", "INTERNAL", True, "User:mallory"),  # no CLUSTER_ACTION
    ],
)
def test_nothing_else_gets_the_forwarding_pass(client_id, listener, controller, principal):
    ctx = context(client_id, listener, controller=controller, principal=principal)
    assert not allowed(ctx, Operation.CREATE, ResourceType.TOPIC, "orders")
