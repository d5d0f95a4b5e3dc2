"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455): moving partitions
to other brokers, decided and tracked by the controller; brokers forward both. v1 may forbid a
change of replication factor (INVALID_REPLICATION_FACTOR for such a partition). With an
authorizer, Kafka's rules: ALTER on the cluster to reassign, DESCRIBE to list
(CLUSTER_AUTHORIZATION_FAILED)."""

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import cluster_allowed
from minibroker.apis.forwarding import ForwardingFailed, decided_by_controller
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation


def _alter_error(request, error: Error, message: str | None = None) -> dict:
    return {
        "allow_replication_factor_change": getattr(
            request, "allow_replication_factor_change", True
        ),
        "error_code": error,
        "error_message": message,
        "responses": [
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": entry.partition_index,
                        "error_code": error,
                        "error_message": message,
                    }
                    for entry in topic.partitions
                ],
            }
            for topic in request.topics
        ],
    }


@api(
    ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    versions=(0, 1),
    roles=Role.BOTH,
    controller_decides=True,
    error_response=_alter_error,
)
async def handle_alter(ctx: RequestContext, request):
    if not cluster_allowed(ctx, Operation.ALTER):
        return _alter_error(request, Error.CLUSTER_AUTHORIZATION_FAILED)

    def refused(failure: ForwardingFailed) -> dict:
        return _alter_error(request, failure.error, str(failure))

    return await decided_by_controller(ctx, request, "alter_partition_reassignments", refused)


def _list_error(request, error: Error) -> dict:
    return {"error_code": error, "topics": ()}


@api(
    ApiKey.LIST_PARTITION_REASSIGNMENTS,
    versions=(0, 0),
    roles=Role.BOTH,
    controller_decides=True,
    error_response=_list_error,
)
async def handle_list(ctx: RequestContext, request):
    if not cluster_allowed(ctx, Operation.DESCRIBE):
        return {"error_code": Error.CLUSTER_AUTHORIZATION_FAILED, "error_message": None}

    def refused(failure: ForwardingFailed) -> dict:
        return {"error_code": failure.error, "error_message": str(failure), "topics": ()}

    return await decided_by_controller(ctx, request, "list_partition_reassignments", refused)
