"""ElectLeaders: preferred or unclean leader elections, decided by the controller.

On the controller node it is handled there; a broker forwards it and relays the answer. When
the controller cannot be reached every partition named gets REQUEST_TIMED_OUT (retriable).
With an authorizer it needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED), as in Kafka.
"""

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import cluster_allowed
from minibroker.apis.forwarding import ForwardingFailed, decided_by_controller
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation


def _error_response(request, error: Error, message: str | None = None) -> dict:
    return {
        "error_code": error,
        "replica_election_results": [
            {
                "topic": entry.topic,
                "partition_result": [
                    {"partition_id": index, "error_code": error, "error_message": message}
                    for index in entry.partitions
                ],
            }
            for entry in request.topic_partitions or ()
        ],
    }


@api(
    ApiKey.ELECT_LEADERS,
    versions=(0, 2),
    roles=Role.BOTH,
    controller_decides=True,
    error_response=_error_response,
)
async def handle_elect_leaders(ctx: RequestContext, request):
    if not cluster_allowed(ctx, Operation.ALTER):
        return _error_response(request, Error.CLUSTER_AUTHORIZATION_FAILED)

    def refused(failure: ForwardingFailed) -> dict:
        return _error_response(request, failure.error, str(failure))

    return await decided_by_controller(ctx, request, "elect_leaders", refused)
