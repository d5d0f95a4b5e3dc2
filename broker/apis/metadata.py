"""Metadata: brokers, cluster id, controller and topics, from the controller's last word.

A broker answers from its metadata cache (UpdateMetadata). As KRaft brokers do, it names a
live broker (itself) as the controller, since clients cannot talk to the controller itself;
in ZooKeeper mode, as ZooKeeper-mode Kafka's brokers do, the elected controller (the sender of
the last UpdateMetadata, which /controller names).
Topics requested by name that do not exist are created through the controller when the
request allows it (v4+, always before) and auto.create.topics.enable is on.

v0 is served, as Kafka 4.4 serves it (KIP-896 kept it): its empty topic list asks for every
topic, as a null list does from v1 (Kafka's MetadataRequest.isAllTopics).

With an authorizer, as Kafka: topics the principal may not DESCRIBE are left out of an
all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when named; auto-creation needs
CREATE on the cluster or the topic (TOPIC_AUTHORIZATION_FAILED otherwise).
"""

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import (
    authorized_operations,
    may_create_topic,
    topic_allowed,
)
from minibroker.apis.topics import create_topic_with_defaults
from minibroker.common.names import INTERNAL_TOPICS
from minibroker.controller.state import ControllerError, validate_topic_name
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.replication.replica_manager import ReplicaManager
from minibroker.security.authorizer.acls import CLUSTER_NAME, Operation, ResourceType

# Kafka's "operations not requested" marker for authorized-operations fields.
_OPERATIONS_OMITTED = -(2**31)


# Topics Kafka marks internal, which clients leave out of pattern subscriptions.


def _topic_entry(topic) -> dict:
    return {
        "error_code": Error.NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": [
            {
                "error_code": (Error.LEADER_NOT_AVAILABLE if partition.leader < 0 else Error.NONE),
                "partition_index": index,
                "leader_id": partition.leader,
                "leader_epoch": partition.leader_epoch,
                "replica_nodes": partition.replicas,
                "isr_nodes": partition.isr,
                "offline_replicas": partition.offline_replicas,
            }
            for index, partition in sorted(topic.partitions.items())
        ],
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


def _valid_name(name: str | None) -> bool:
    try:
        validate_topic_name(name or "")
    except ControllerError:
        return False
    return True


async def _resolve(ctx: RequestContext, requested, allow_auto_create: bool) -> dict:
    cache = ctx.replica_manager.metadata
    name = getattr(requested, "name", None)
    topic_id = getattr(requested, "topic_id", None)
    if name is None and topic_id is not None and topic_id.int != 0:
        topic = cache.topic_by_id(topic_id)
        if topic is None:
            return _error_entry(None, topic_id, Error.UNKNOWN_TOPIC_ID)
        if not topic_allowed(ctx, Operation.DESCRIBE, topic.name):
            return _error_entry(None, topic_id, Error.TOPIC_AUTHORIZATION_FAILED)
        return _topic_entry(topic)
    if name is None:
        # v12 with neither a name nor an id: no topic can have it. Answered as the default
        # broker (auto-creation on, no authorizer) answered it before; the authorizer and
        # the topic cache were handed the None and could fail the whole request.
        return _error_entry(None, None, Error.INVALID_TOPIC_EXCEPTION)
    if not topic_allowed(ctx, Operation.DESCRIBE, name):
        return _error_entry(name, None, Error.TOPIC_AUTHORIZATION_FAILED)
    topic = cache.topic(name)
    if topic is not None:
        return _topic_entry(topic)
    if not (allow_auto_create and ctx.config.auto_create_topics_enable):
        return _error_entry(name, None, Error.UNKNOWN_TOPIC_OR_PARTITION)
    if not _valid_name(name):
        return _error_entry(name, None, Error.INVALID_TOPIC_EXCEPTION)
    if not may_create_topic(ctx, name):
        return _error_entry(name, None, Error.TOPIC_AUTHORIZATION_FAILED)
    error = await create_topic_with_defaults(ctx, name)
    topic = cache.topic(name)
    if topic is not None:
        return _topic_entry(topic)
    if error in (Error.NONE, Error.TOPIC_ALREADY_EXISTS):
        error = Error.LEADER_NOT_AVAILABLE  # created; the controller's word is on its way
    return _error_entry(name, None, error)


def brokers_on_listener(ctx: RequestContext, replicas: ReplicaManager) -> list[dict]:
    """The live brokers' endpoints on the listener this request came in on."""
    brokers = [
        {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
        for b in replicas.metadata.endpoints_for(ctx.listener_name)
    ]
    if not any(b["node_id"] == ctx.config.node_id for b in brokers):
        listener = ctx.config.advertised_for(ctx.listener_name)
        brokers.append(
            {
                "node_id": ctx.config.node_id,
                "host": listener.host,
                "port": listener.port,
                "rack": ctx.config.broker_rack,
            }
        )
    return brokers


def controller_id_for_clients(ctx: RequestContext) -> int:
    """The controller Metadata and DescribeCluster name: in ZooKeeper mode the elected one
    (-1 before this broker has heard from it, Kafka's NO_CONTROLLER_ID), else this broker."""
    if ctx.config.zookeeper_mode:
        return ctx.replica_manager.metadata.controller_id
    return ctx.config.node_id


def _with_authorized_operations(ctx: RequestContext, request, topics: list[dict]) -> None:
    """KIP-430 (v8+): each topic's authorized operations when the client asks for them, as
    Kafka fills them in for every topic entry of the answer, errors included."""
    if ctx.version >= 8 and getattr(request, "include_topic_authorized_operations", False):
        for topic in topics:
            name = topic["name"]
            if name is not None:
                topic["topic_authorized_operations"] = authorized_operations(
                    ctx, ResourceType.TOPIC, name
                )


def _error_response(request, error: Error) -> dict:
    """No brokers, no topics; from v13 on the top-level error code says why (before it,
    Metadata had no error code of its own)."""
    return {"brokers": (), "controller_id": -1, "topics": (), "error_code": error}


# v13 adds only the top-level ErrorCode, NONE in every answer but an error response.
@api(ApiKey.METADATA, versions=(0, 13), roles=Role.BOTH, error_response=_error_response)
async def handle(ctx: RequestContext, request) -> dict:
    if ctx.replicas is None:
        return ctx.controller_service.metadata(request)
    allow_auto_create = getattr(request, "allow_auto_topic_creation", True)
    if ctx.version < 12 and any(topic.name is None for topic in request.topics or ()):
        # v10 and v11 carry topic ids but cannot name a topic by id alone, and their answer
        # cannot hold a null name (encoding it failed). Kafka refuses such a request with
        # INVALID_REQUEST for every topic, a null name answered as "".
        topics = [
            _error_entry(topic.name or "", topic.topic_id, Error.INVALID_REQUEST)
            for topic in request.topics
        ]
    elif request.topics is None or (ctx.version == 0 and not request.topics):
        topics = [
            _topic_entry(topic)
            for topic in ctx.replicas.metadata.topics.values()
            if ctx.authorizer is None or topic_allowed(ctx, Operation.DESCRIBE, topic.name)
        ]
    else:
        topics = [await _resolve(ctx, requested, allow_auto_create) for requested in request.topics]
    _with_authorized_operations(ctx, request, topics)
    cluster_operations = _OPERATIONS_OMITTED
    if getattr(request, "include_cluster_authorized_operations", False):  # v8-v10
        cluster_operations = authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
    return {
        "brokers": brokers_on_listener(ctx, ctx.replicas),
        "cluster_id": ctx.cluster_id,
        "controller_id": controller_id_for_clients(ctx),
        "topics": topics,
        "cluster_authorized_operations": cluster_operations,
    }
