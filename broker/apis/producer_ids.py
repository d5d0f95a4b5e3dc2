"""InitProducerId: producer ids for the idempotent producer.

kafka-python 3.x turns idempotence on by default and refuses a broker without this API. Ids
come from blocks the controller allocates (AllocateProducerIds) and persists, so they are
unique across the cluster and never reused across restarts. A producer that sends back its id
and epoch (KIP-360, v3+) gets the epoch bumped, which resets its sequences. Transactional ids
are refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as FindCoordinator refuses them:
minibroker has no transaction coordinator yet.

With an authorizer, Kafka 3.x's rules: a transactional id needs WRITE on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs IDEMPOTENT_WRITE on the
cluster or WRITE on some topic (CLUSTER_AUTHORIZATION_FAILED).
"""

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import allowed, any_topic_allowed, cluster_allowed
from minibroker.cluster.controller_client import ControllerUnavailable
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation, ResourceType

MAX_EPOCH = 32767


def _refusal(ctx: RequestContext, request) -> Error | None:
    transactional_id = request.transactional_id
    if transactional_id is not None:
        if not allowed(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not (
        cluster_allowed(ctx, Operation.IDEMPOTENT_WRITE) or any_topic_allowed(ctx, Operation.WRITE)
    ):
        return Error.CLUSTER_AUTHORIZATION_FAILED
    return None


def _error_response(request, error: Error) -> dict:
    return {"error_code": error, "producer_id": -1, "producer_epoch": -1}


# v5 (KIP-890) only lets the answer be TRANSACTION_ABORTABLE, which this handler never gives;
# v6 (KIP-939's two-phase commit) is unstable in Kafka 4.4, which does not advertise it.
@api(ApiKey.INIT_PRODUCER_ID, versions=(0, 5), roles=Role.BROKER, error_response=_error_response)
async def handle(ctx: RequestContext, request) -> dict:
    if ctx.authorizer is not None and (refusal := _refusal(ctx, request)) is not None:
        return {"error_code": refusal, "producer_id": -1, "producer_epoch": -1}
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if request.transactional_id is not None:
        if (producer_id == -1) != (epoch == -1):
            return {"error_code": Error.INVALID_REQUEST, "producer_id": -1, "producer_epoch": -1}
        expected = None if producer_id == -1 else (producer_id, epoch)
        timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
        error, new_id, new_epoch = await ctx.transaction_coordinator.init_producer_id(
            request.transactional_id, timeout_ms, expected
        )
        if ctx.version < 4 and error == Error.PRODUCER_FENCED:
            error = Error.INVALID_PRODUCER_EPOCH
        return {"error_code": error, "producer_id": new_id, "producer_epoch": new_epoch}
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return {"error_code": Error.NONE, "producer_id": producer_id, "producer_epoch": epoch + 1}
    try:
        new_id = await ctx.replica_manager.next_producer_id()
    except ControllerUnavailable:
        # Retriable for the client, as Kafka answers while it cannot reach the controller.
        return {"error_code": Error.REQUEST_TIMED_OUT, "producer_id": -1, "producer_epoch": -1}
    return {"error_code": Error.NONE, "producer_id": new_id, "producer_epoch": 0}
