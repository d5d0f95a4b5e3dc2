"""UpdateFeatures (57, KIP-584): ``kafka-features.sh upgrade``, ``downgrade`` and ``disable``.

As Kafka: ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise); a broker forwards
the request to the controller, which decides it (controller/features.py), saves the finalized
levels, pushes them to every live broker and answers once they have them, so the next
ApiVersions from any broker lists the new levels under a newer epoch. The outcome is the
answer's top-level error and message; v0 and v1 also list every requested feature with NONE
when the update succeeded, none when it failed (Kafka's UpdateFeaturesResponse
.createWithErrors); v2 has no such list (its schema is in
protocol/schemas.py, kio 0.6.1 has none).

The controller's push is an UpdateFeatures from the controller's connection (as its pushes
of configs, ACLs and credentials are): every finalized feature at its level, replacing the
broker's, and the features epoch in its ``timeout`` (see controller/broker_requests.py).
"""

import datetime

from minibroker.apis import RequestContext, Role, Senders, api
from minibroker.apis.forwarding import cluster_store_request
from minibroker.common.features import FinalizedFeatures
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation


def _error_response(request, error: Error) -> dict:
    """Kafka's createWithErrors with an error: the error at the top, no per-feature results."""
    return {"error_code": error, "error_message": None, "results": ()}


def _apply_push(ctx: RequestContext, request) -> dict:
    """The controller's word: the finalized levels and their epoch, taken unless older than
    what this broker has (a push delayed behind a newer one)."""
    timeout = request.timeout
    if isinstance(timeout, datetime.timedelta):
        epoch = int(timeout / datetime.timedelta(milliseconds=1))
    else:
        epoch = int(timeout)
    replicas = ctx.replica_manager
    if epoch >= replicas.finalized_features.epoch:
        levels = {
            update.feature: update.max_version_level
            for update in request.feature_updates
            if update.max_version_level > 0
        }
        replicas.finalized_features = FinalizedFeatures(levels, epoch)
    return {"error_code": Error.NONE, "error_message": None, "results": ()}


@api(
    ApiKey.UPDATE_FEATURES,
    versions=(0, 2),
    roles=Role.BOTH,
    senders=Senders.CLIENTS_AND_NODES,
    controller_decides=True,
    held_until_ready=False,
    error_response=_error_response,
)
async def handle(ctx: RequestContext, request):
    def refused(error: Error, message: str) -> dict:
        answer = _error_response(request, error)
        answer["error_message"] = message
        return answer

    return await cluster_store_request(
        ctx, request, "update_features", Operation.ALTER, refused, _apply_push
    )


def finalized(ctx: RequestContext) -> FinalizedFeatures:
    """The finalized features this node answers ApiVersions with: a broker's as the
    controller pushed them, a controller-only node's from its state."""
    if ctx.replicas is not None:
        return ctx.replicas.finalized_features
    controller = ctx.controller
    state = getattr(controller, "state", None)
    if state is None or state.finalized_features is None:
        return FinalizedFeatures()
    return FinalizedFeatures(dict(state.finalized_features), state.features_epoch)
