"""InitProducerId: producer ids for the idempotent producer.

kafka-python 3.x turns idempotence on by default and refuses a broker without this API. Ids
come from blocks the controller allocates (AllocateProducerIds) and persists, so they are
unique across the cluster and never reused across restarts. A producer that sends back its id
and epoch (KIP-360, v3+) gets the epoch bumped, which resets its sequences. Transactional ids
are refused: minibroker has no transaction coordinator yet.
"""

from protocol.errors import Error

from ..controller_client import ControllerUnavailable
from . import RequestContext

MAX_EPOCH = 32767


async def handle(ctx: RequestContext, request) -> dict:
    if request.transactional_id is not None:
        return {"error_code": Error.UNSUPPORTED_VERSION, "producer_id": -1, "producer_epoch": -1}
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return {"error_code": Error.NONE, "producer_id": producer_id, "producer_epoch": epoch + 1}
    try:
        new_id = await ctx.replicas.next_producer_id()
    except ControllerUnavailable:
        # Retriable for the client, as Kafka answers while it cannot reach the controller.
        return {"error_code": Error.REQUEST_TIMED_OUT, "producer_id": -1, "producer_epoch": -1}
    return {"error_code": Error.NONE, "producer_id": new_id, "producer_epoch": 0}
