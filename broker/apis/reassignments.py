"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455): moving partitions
to other brokers, decided and tracked by the controller; brokers forward both. With an
authorizer, Kafka's rules: ALTER on the cluster to reassign, DESCRIBE to list
(CLUSTER_AUTHORIZATION_FAILED)."""

from minibroker.apis import RequestContext
from minibroker.apis.authorization import cluster_allowed
from minibroker.apis.errors import error_response
from minibroker.apis.forwarding import ForwardingFailed, decided_by_controller
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation


async def handle_alter(ctx: RequestContext, request):
    if not cluster_allowed(ctx, Operation.ALTER):
        return error_response(
            ApiKey.ALTER_PARTITION_REASSIGNMENTS, request, Error.CLUSTER_AUTHORIZATION_FAILED
        )

    def refused(failure: ForwardingFailed) -> dict:
        return {
            "error_code": failure.error,
            "error_message": str(failure),
            "responses": [
                {
                    "name": topic.name,
                    "partitions": [
                        {
                            "partition_index": entry.partition_index,
                            "error_code": failure.error,
                            "error_message": str(failure),
                        }
                        for entry in topic.partitions
                    ],
                }
                for topic in request.topics
            ],
        }

    return await decided_by_controller(ctx, request, "alter_partition_reassignments", refused)


async def handle_list(ctx: RequestContext, request):
    if not cluster_allowed(ctx, Operation.DESCRIBE):
        return {"error_code": Error.CLUSTER_AUTHORIZATION_FAILED, "error_message": None}

    def refused(failure: ForwardingFailed) -> dict:
        return {"error_code": failure.error, "error_message": str(failure), "topics": ()}

    return await decided_by_controller(ctx, request, "list_partition_reassignments", refused)
