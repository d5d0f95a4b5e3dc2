"""ElectLeaders: preferred or unclean leader elections, decided by the controller.

On the controller node it is handled there; a broker forwards it and relays the answer. When
the controller cannot be reached every partition named gets REQUEST_TIMED_OUT (retriable).
With an authorizer it needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED), as in Kafka.
"""

from minibroker.apis import RequestContext
from minibroker.apis.authorization import cluster_allowed
from minibroker.apis.errors import error_response
from minibroker.apis.forwarding import ForwardingFailed, decided_by_controller
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation


async def handle_elect_leaders(ctx: RequestContext, request):
    if not cluster_allowed(ctx, Operation.ALTER):
        return error_response(ApiKey.ELECT_LEADERS, request, Error.CLUSTER_AUTHORIZATION_FAILED)

    def refused(failure: ForwardingFailed) -> dict:
        return {
            "error_code": failure.error,
            "replica_election_results": [
                {
                    "topic": entry.topic,
                    "partition_result": [
                        {
                            "partition_id": index,
                            "error_code": failure.error,
                            "error_message": str(failure),
                        }
                        for index in entry.partitions
                    ],
                }
                for entry in request.topic_partitions or ()
            ],
        }

    return await decided_by_controller(ctx, request, "elect_leaders", refused)
