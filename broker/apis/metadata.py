"""Metadata: brokers, cluster id, controller and topics with their partitions.

A single broker leads every partition and is its own controller. Topics requested by name
that do not exist are created when the request allows it (v4+, always before) and the broker's
auto.create.topics.enable is on, as Kafka does.
"""

from protocol.errors import Error

from ..replica_manager import TopicError, topic_name_error
from . import RequestContext

# Kafka's "operations not requested" marker for authorized-operations fields.
_OPERATIONS_OMITTED = -(2**31)


def _topic_entry(ctx: RequestContext, info) -> dict:
    node = ctx.config.node_id
    partitions = []
    for index in range(info.num_partitions):
        partition = ctx.replicas.partition(info.name, index)
        partitions.append(
            {
                "error_code": Error.NONE,
                "partition_index": index,
                "leader_id": node,
                "leader_epoch": partition.leader_epoch if partition else 0,
                "replica_nodes": (node,),
                "isr_nodes": (node,),
                "offline_replicas": (),
            }
        )
    return {
        "error_code": Error.NONE,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": False,
        "partitions": partitions,
        "topic_authorized_operations": _OPERATIONS_OMITTED,
    }


def _error_entry(name, topic_id, error: Error) -> dict:
    return {
        "error_code": error,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": (),
        "topic_authorized_operations": _OPERATIONS_OMITTED,
    }


def _resolve(ctx: RequestContext, requested, allow_auto_create: bool) -> dict:
    name = getattr(requested, "name", None)
    topic_id = getattr(requested, "topic_id", None)
    if name is None and topic_id is not None and topic_id.int != 0:
        info = ctx.replicas.topic_by_id(topic_id)
        if info is None:
            return _error_entry(None, topic_id, Error.UNKNOWN_TOPIC_ID)
        return _topic_entry(ctx, info)
    info = ctx.replicas.topic(name)
    if info is None and allow_auto_create:
        if topic_name_error(name) is not None:
            return _error_entry(name, None, Error.INVALID_TOPIC_EXCEPTION)
        try:
            info = ctx.replicas.auto_create_topic(name)
        except TopicError as error:
            return _error_entry(name, None, error.error)
    if info is None:
        return _error_entry(name, None, Error.UNKNOWN_TOPIC_OR_PARTITION)
    return _topic_entry(ctx, info)


async def handle(ctx: RequestContext, request) -> dict:
    allow_auto_create = getattr(request, "allow_auto_topic_creation", True)
    if request.topics is None:
        topics = [_topic_entry(ctx, info) for info in ctx.replicas.topics().values()]
    else:
        topics = [_resolve(ctx, requested, allow_auto_create) for requested in request.topics]
    listener = ctx.config.advertised[0]
    return {
        "brokers": [{"node_id": ctx.config.node_id, "host": listener.host, "port": listener.port}],
        "cluster_id": ctx.cluster_id,
        "controller_id": ctx.config.node_id,
        "topics": topics,
        "cluster_authorized_operations": _OPERATIONS_OMITTED,
    }
