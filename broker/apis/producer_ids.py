"""InitProducerId: producer ids for the idempotent producer.

kafka-python 3.x turns idempotence on by default and refuses a broker without this API. Ids
come from a block reserved on disk, so they are never reused across restarts. A producer that
sends back its id and epoch (KIP-360, v3+) gets the epoch bumped, which resets its sequences.
Transactional ids are refused: minibroker has no transaction coordinator yet.
"""

from protocol.errors import Error

from . import RequestContext

MAX_EPOCH = 32767


async def handle(ctx: RequestContext, request) -> dict:
    if request.transactional_id is not None:
        return {"error_code": Error.UNSUPPORTED_VERSION, "producer_id": -1, "producer_epoch": -1}
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return {"error_code": Error.NONE, "producer_id": producer_id, "producer_epoch": epoch + 1}
    return {
        "error_code": Error.NONE,
        "producer_id": ctx.replicas.producer_ids.allocate(),
        "producer_epoch": 0,
    }
