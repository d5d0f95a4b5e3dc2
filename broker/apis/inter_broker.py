"""LeaderAndIsr, UpdateMetadata and StopReplica: the controller's commands to a broker.

Only the configured controller may send them (CLUSTER_AUTHORIZATION_FAILED otherwise), and
never with an older controller epoch than one already seen (STALE_CONTROLLER_EPOCH): a
restarted controller starts a new epoch, so a request from its previous life is refused.
"""

from minibroker.apis import RequestContext
from minibroker.protocol.errors import Error


async def handle_leader_and_isr(ctx: RequestContext, request) -> dict:
    error = ctx.replicas.check_controller(request)
    if error != Error.NONE:
        return {"error_code": error, "topics": ()}
    results = await ctx.replicas.apply_leader_and_isr(request)
    topics = []
    for topic_state in request.topic_states:
        topics.append(
            {
                "topic_id": topic_state.topic_id,
                "partition_errors": [
                    {
                        "partition_index": state.partition_index,
                        "error_code": results[(topic_state.topic_name, state.partition_index)],
                    }
                    for state in topic_state.partition_states
                ],
            }
        )
    return {"error_code": Error.NONE, "topics": topics}


async def handle_update_metadata(ctx: RequestContext, request) -> dict:
    error = ctx.replicas.check_controller(request)
    if error == Error.NONE:
        ctx.replicas.apply_update_metadata(request)
    return {"error_code": error}


async def handle_stop_replica(ctx: RequestContext, request) -> dict:
    error = ctx.replicas.check_controller(request)
    if error != Error.NONE:
        return {"error_code": error, "partition_errors": ()}
    results = await ctx.replicas.apply_stop_replica(request)
    return {
        "error_code": Error.NONE,
        "partition_errors": [
            {"topic_name": topic, "partition_index": index, "error_code": code}
            for topic, index, code in results
        ],
    }
