"""The authorization checks handlers make, as Kafka's AuthHelper does them.

Every check is ``allowed(ctx, operation, resource_type, name)`` on the requesting connection's
principal and host. Without an authorizer (no ``authorizer.class.name``) everything is
allowed, and the handlers on the produce and fetch paths test ``ctx.authorizer is None``
before calling anything here, so an unsecured broker pays one attribute test per request.

The controller receives client requests forwarded by brokers, which authorized the client
already and re-send the request under their own principal (minibroker has no Envelope), and
a broker asks it for the cluster's ACLs before it registers: a request on one of a broker's
channels to the controller (its client ids), on an inter-node listener, from a principal with
CLUSTER_ACTION on the cluster passes as well. Whatever node role the controller shares.
"""

from minibroker.apis import RequestContext, wait_until_ready
from minibroker.cluster.controller_client import is_broker_channel
from minibroker.common.config import BrokerConfig
from minibroker.security.authorizer.acls import CLUSTER_NAME, Operation, ResourceType


def allowed(ctx: RequestContext, operation: Operation, resource_type: int, name: str) -> bool:
    authorizer = ctx.authorizer
    if authorizer is None:
        return True
    principal = ctx.connection.principal
    host = ctx.connection.host.removeprefix("/")
    if authorizer.authorize(principal, host, operation, resource_type, name):
        return True
    return (
        ctx.controller is not None
        and is_broker_channel(ctx.header.client_id)
        and on_inter_node_listener(ctx)
        and authorizer.authorize(
            principal, host, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
        )
    )


async def wait_for_cluster_acls(ctx: RequestContext) -> None:
    """Hold an ACL or SCRAM credential request until this node knows the cluster's ACLs: a
    broker learns them when it joins, and judged before with none, a request would meet
    "no ACL found" (open with allow.everyone.if.no.acl.found). The controller holds them
    from its state at once, and must answer a joining broker's DescribeAcls before that
    broker, which may be itself, is ready; the controller's own pushes are not held."""
    if ctx.controller is None:
        await wait_until_ready(ctx)


def inter_node_listeners(config: BrokerConfig) -> frozenset[str] | None:
    """The node's listeners that carry the cluster's own traffic, or None when that is all
    of them: the inter-broker listener (``inter.broker.listener.name``, else the first, as
    the node registers it) and the ``controller.listener.names`` it has."""
    own = {listener.name for listener in config.listeners}
    named = {*config.controller_listener_names, config.inter_broker_listener.name}
    internal = frozenset(named & own)
    return None if internal == own else internal


def is_inter_node_listener(config: BrokerConfig, listener_name: str) -> bool:
    internal = inter_node_listeners(config)
    return internal is None or listener_name in internal


def on_inter_node_listener(ctx: RequestContext) -> bool:
    return is_inter_node_listener(ctx.config, ctx.listener_name)


def cluster_allowed(ctx: RequestContext, operation: Operation) -> bool:
    return allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def topic_allowed(ctx: RequestContext, operation: Operation, topic: str) -> bool:
    return allowed(ctx, operation, ResourceType.TOPIC, topic)


def group_allowed(ctx: RequestContext, operation: Operation, group: str) -> bool:
    return allowed(ctx, operation, ResourceType.GROUP, group)


def any_topic_allowed(ctx: RequestContext, operation: Operation) -> bool:
    """Whether the principal may do ``operation`` on some topic (Kafka's
    authorizeByResourceType)."""
    authorizer = ctx.authorizer
    if authorizer is None:
        return True
    host = ctx.connection.host.removeprefix("/")
    return authorizer.authorize_any(ctx.connection.principal, host, operation, ResourceType.TOPIC)


def may_create_topic(ctx: RequestContext, topic: str) -> bool:
    """CREATE on the cluster or on the topic (Kafka's rule for CreateTopics and
    auto-creation)."""
    return cluster_allowed(ctx, Operation.CREATE) or topic_allowed(ctx, Operation.CREATE, topic)


# Kafka's AclEntry.supportedOperations: what an authorized-operations bit field may hold.
_SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    ),
}


def authorized_operations(ctx: RequestContext, resource_type: int, name: str) -> int:
    """KIP-430's bit field (bit n set: operation code n allowed) of the operations the
    principal may do on a resource, as Kafka's AuthHelper.authorizedOperations: among the
    resource type's supported operations, those the authorizer allows; all of them without
    an authorizer."""
    field = 0
    for operation in _SUPPORTED_OPERATIONS[ResourceType(resource_type)]:
        if allowed(ctx, operation, resource_type, name):
            field |= 1 << operation
    return field
