"""LeaderAndIsr, UpdateMetadata and StopReplica: the controller's commands to a broker.

Only the configured controller may send them (CLUSTER_AUTHORIZATION_FAILED otherwise), and
never with an older controller epoch than one already seen (STALE_CONTROLLER_EPOCH): a
restarted controller starts a new epoch, so a request from its previous life is refused.
"""

from minibroker.apis import RequestContext, Role, Senders, api
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey


def _leader_and_isr_error(request, error: Error) -> dict:
    return {"error_code": error, "topics": ()}


@api(
    ApiKey.LEADER_AND_ISR,
    versions=(7, 7),
    roles=Role.BROKER,
    senders=Senders.NODES,
    error_response=_leader_and_isr_error,
)
async def handle_leader_and_isr(ctx: RequestContext, request) -> dict:
    error = ctx.replica_manager.check_controller(request)
    if error != Error.NONE:
        return _leader_and_isr_error(request, error)
    results = await ctx.replica_manager.apply_leader_and_isr(request)
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


def _update_metadata_error(request, error: Error) -> dict:
    return {"error_code": error}


@api(
    ApiKey.UPDATE_METADATA,
    versions=(8, 8),
    roles=Role.BROKER,
    senders=Senders.NODES,
    error_response=_update_metadata_error,
)
async def handle_update_metadata(ctx: RequestContext, request) -> dict:
    error = ctx.replica_manager.check_controller(request)
    if error == Error.NONE:
        ctx.replica_manager.apply_update_metadata(request)
    return {"error_code": error}


def _stop_replica_error(request, error: Error) -> dict:
    return {"error_code": error, "partition_errors": ()}


@api(
    ApiKey.STOP_REPLICA,
    versions=(4, 4),
    roles=Role.BROKER,
    senders=Senders.NODES,
    error_response=_stop_replica_error,
)
async def handle_stop_replica(ctx: RequestContext, request) -> dict:
    error = ctx.replica_manager.check_controller(request)
    if error != Error.NONE:
        return _stop_replica_error(request, error)
    results = await ctx.replica_manager.apply_stop_replica(request)
    return {
        "error_code": Error.NONE,
        "partition_errors": [
            {"topic_name": topic, "partition_index": index, "error_code": code}
            for topic, index, code in results
        ],
    }
