"""What operators' admin clients ask a broker itself: DescribeCluster and DeleteRecords.

DescribeCluster answers from the broker's metadata, as Metadata does (this broker is named as
the controller, since clients cannot reach the controller itself; in ZooKeeper mode the
elected controller). DeleteRecords
goes to each partition's leader, which moves its log start offset; the followers move theirs
on their next fetch, and whole segments below it go at the next retention pass. Kafka answers
only once every replica has moved (DelayedDeleteRecords); here the leader's move is the
answer, and a follower elected before it caught up may serve the deleted records again until
it does.

With an authorizer, Kafka's rules: DescribeCluster needs DESCRIBE on the cluster
(CLUSTER_AUTHORIZATION_FAILED), DeleteRecords DELETE on each topic
(TOPIC_AUTHORIZATION_FAILED).

DescribeCluster v1+ names the endpoint type it wants (KIP-919): BROKER (1), answered on a
broker's listeners, or CONTROLLER (2), answered on the controller's listener, with the
controllers, as an admin client with ``bootstrap.controllers`` (the tools'
``--bootstrap-controller``) asks it; Kafka's AuthHelper.computeDescribeClusterResponse and
ControllerApis.handleDescribeCluster. Sent to the other kind of endpoint it is answered
MISMATCHED_ENDPOINT_TYPE, an unknown type UNSUPPORTED_ENDPOINT_TYPE. On the controller Kafka
asks ALTER on the cluster (not DESCRIBE, as a broker does). minibroker's one controller is the
one node answered, its endpoint the one advertised for the listener the request came in on,
and the controller id its own. Where it departs: a combined node with one listener (minibroker's
default, which Kafka has no counterpart for) serves both endpoint types on it.
"""

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import (
    authorized_operations,
    cluster_allowed,
    topic_allowed,
    wait_for_cluster_acls,
)
from minibroker.apis.metadata import brokers_on_listener, controller_id_for_clients
from minibroker.common.config import BrokerConfig
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import CLUSTER_NAME, Operation, ResourceType

# Kafka's "operations not requested" marker for authorized-operations fields.
_OPERATIONS_OMITTED = -(2**31)


def _describe_cluster_error(request, error: Error) -> dict:
    return {"error_code": error, "cluster_id": "", "brokers": (), "endpoint_type": 1}


def _describe_cluster_failure(error: Error, message: str | None) -> dict:
    return {
        "error_code": error,
        "error_message": message,
        "endpoint_type": BROKER_ENDPOINT,
        "cluster_id": "",
        "controller_id": -1,
        "brokers": (),
        "cluster_authorized_operations": _OPERATIONS_OMITTED,
    }


BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2


def endpoint_types(config: BrokerConfig, listener_name: str) -> set[int]:
    """What a listener serves, as Kafka's socket servers split them: a controller's listener
    (controller.listener.names) the controller's endpoint, the others a broker's. A node that
    is only a controller serves it on each of its listeners; a combined node whose one
    listener carries everything (no controller.listener.names) serves both."""
    types = set()
    kraft_controller = config.is_controller
    if kraft_controller and (
        not config.is_broker
        or listener_name in config.controller_listener_names
        or (not config.controller_listener_names and listener_name == config.listeners[0].name)
    ):
        types.add(CONTROLLER_ENDPOINT)
    if config.is_broker and listener_name not in config.controller_listener_names:
        types.add(BROKER_ENDPOINT)
    return types


def _describe_controllers(ctx: RequestContext, operations: int) -> dict:
    """The controllers, as ControllerRegistrationsPublisher.describeClusterControllers
    lists them for the listener the request came in on: here the one controller, this node."""
    listener = ctx.config.advertised_for(ctx.listener_name)
    return {
        "error_code": Error.NONE,
        "error_message": None,
        "endpoint_type": CONTROLLER_ENDPOINT,
        "cluster_id": ctx.cluster_id,
        "controller_id": ctx.config.node_id,
        "brokers": [
            {
                "broker_id": ctx.config.node_id,
                "host": listener.host,
                "port": listener.port,
                "rack": None,
                "is_fenced": False,
            }
        ],
        "cluster_authorized_operations": operations,
    }


@api(
    ApiKey.DESCRIBE_CLUSTER,
    versions=(0, 2),
    roles=Role.BOTH,
    error_response=_describe_cluster_error,
)
async def handle_describe_cluster(ctx: RequestContext, request) -> dict:
    """Anyone may describe the cluster, as in Kafka; DESCRIBE on the cluster only decides
    whether asked-for authorized operations are shown: none (0) without it, else the
    principal's operations on the cluster (KIP-430, Kafka's AuthHelper.authorizedOperations).

    v2 (KIP-1073): each broker's IsFenced, false for every broker listed: a broker's metadata
    holds the live brokers only, so IncludeFencedBrokers adds none (a fenced broker is known
    to the controller alone).

    The endpoint type (v1+, see the module's docstring) decides which nodes are answered."""
    wanted = getattr(request, "endpoint_type", BROKER_ENDPOINT)
    if wanted not in (BROKER_ENDPOINT, CONTROLLER_ENDPOINT):
        return _describe_cluster_failure(
            Error.UNSUPPORTED_ENDPOINT_TYPE, f"Unsupported endpoint type {wanted}"
        )
    served = endpoint_types(ctx.config, ctx.listener_name)
    if wanted not in served:
        have = "CONTROLLER" if CONTROLLER_ENDPOINT in served else "BROKER"
        want = "CONTROLLER" if wanted == CONTROLLER_ENDPOINT else "BROKER"
        return _describe_cluster_failure(
            Error.MISMATCHED_ENDPOINT_TYPE,
            f"The request was sent to an endpoint of type {have}, but we wanted an endpoint"
            f" of type {want}",
        )
    asked = getattr(request, "include_cluster_authorized_operations", False)
    operations = _OPERATIONS_OMITTED
    if wanted == CONTROLLER_ENDPOINT:
        await wait_for_cluster_acls(ctx)
        if not cluster_allowed(ctx, Operation.ALTER):
            return _describe_cluster_failure(Error.CLUSTER_AUTHORIZATION_FAILED, None)
        if asked:
            operations = authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
        return _describe_controllers(ctx, operations)
    if asked:
        operations = (
            authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
            if cluster_allowed(ctx, Operation.DESCRIBE)
            else 0
        )
    return {
        "error_code": Error.NONE,
        "error_message": None,
        "endpoint_type": getattr(request, "endpoint_type", 1),
        "cluster_id": ctx.cluster_id,
        "controller_id": controller_id_for_clients(ctx),
        "brokers": [
            {
                "broker_id": b["node_id"],
                "host": b["host"],
                "port": b["port"],
                "rack": b["rack"],
                "is_fenced": False,
            }
            for b in brokers_on_listener(ctx, ctx.replica_manager)
        ],
        "cluster_authorized_operations": operations,
    }


def _delete_before(ctx: RequestContext, topic: str, index: int, offset: int) -> dict:
    def answer(error: Error, low_watermark: int = -1) -> dict:
        return {"partition_index": index, "low_watermark": low_watermark, "error_code": error}

    if not topic_allowed(ctx, Operation.DELETE, topic):
        return answer(Error.TOPIC_AUTHORIZATION_FAILED)
    partition, error = ctx.replica_manager.leader_partition(topic, index)
    if error != Error.NONE:
        return answer(error)
    assert partition is not None  # leader_partition answers Error.NONE with the partition
    error, low_watermark = ctx.replica_manager.delete_records(partition, offset)
    return answer(error, low_watermark)


def _delete_records_error(request, error: Error) -> dict:
    return {
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "low_watermark": -1,
                        "error_code": error,
                    }
                    for p in topic.partitions
                ],
            }
            for topic in request.topics
        ]
    }


@api(
    ApiKey.DELETE_RECORDS, versions=(0, 2), roles=Role.BROKER, error_response=_delete_records_error
)
async def handle_delete_records(ctx: RequestContext, request) -> dict:
    return {
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    _delete_before(ctx, topic.name, p.partition_index, p.offset)
                    for p in topic.partitions
                ],
            }
            for topic in request.topics
        ]
    }
