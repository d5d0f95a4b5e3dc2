"""ElectLeaders: preferred or unclean leader elections, decided by the controller.

On the controller node it is handled there; a broker forwards it and relays the answer. When
the controller cannot be reached every partition named gets REQUEST_TIMED_OUT (retriable).
"""

from . import RequestContext
from .forwarding import ForwardingFailed
from .topics import _decided_by_controller as decided_by_controller


async def handle_elect_leaders(ctx: RequestContext, request):
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
