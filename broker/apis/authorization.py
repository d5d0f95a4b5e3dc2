"""The authorization checks handlers make, as Kafka's AuthHelper does them.

Every check is ``allowed(ctx, operation, resource_type, name)`` on the requesting connection's
principal and host. Without an authorizer (no ``authorizer.class.name``) everything is
allowed, and the handlers on the produce and fetch paths test ``ctx.authorizer is None``
before calling anything here, so an unsecured broker pays one attribute test per request.

A controller-only node receives client requests forwarded by brokers, which authorized the
client already and re-send the request under their own principal: there, a principal with
CLUSTER_ACTION on the cluster (a broker) passes as well.
"""

from ..authorizer.acls import CLUSTER_NAME, Operation, ResourceType
from . import RequestContext


def allowed(ctx: RequestContext, operation: Operation, resource_type: int, name: str) -> bool:
    authorizer = ctx.authorizer
    if authorizer is None:
        return True
    principal = ctx.connection.principal
    host = ctx.connection.host.removeprefix("/")
    if authorizer.authorize(principal, host, operation, resource_type, name):
        return True
    return ctx.replicas is None and authorizer.authorize(
        principal, host, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    )


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
