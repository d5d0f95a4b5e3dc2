"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455): moving partitions
to other brokers, decided and tracked by the controller; brokers forward both."""

from . import RequestContext
from .forwarding import ForwardingFailed
from .topics import _decided_by_controller as decided_by_controller


async def handle_alter(ctx: RequestContext, request):
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
    def refused(failure: ForwardingFailed) -> dict:
        return {"error_code": failure.error, "error_message": str(failure), "topics": ()}

    return await decided_by_controller(ctx, request, "list_partition_reassignments", refused)
