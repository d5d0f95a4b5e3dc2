"""OffsetForLeaderEpoch: where a leader epoch ends in the leader's log.

Clients (kafka-python on a rising leader epoch, librdkafka on a seek with an epoch) use it to
detect that their position is past a truncation point. The leader answers from its leader
epoch cache: the end of an epoch is the start of the next one, the current epoch ends at the
log end offset.
"""

from protocol.errors import Error

from . import RequestContext


def _answer(ctx: RequestContext, topic: str, requested) -> dict:
    entry = {
        "error_code": Error.NONE,
        "partition": requested.partition,
        "leader_epoch": -1,
        "end_offset": -1,
    }
    partition, error = ctx.replicas.leader_partition(
        topic, requested.partition, requested.current_leader_epoch
    )
    if error != Error.NONE:
        entry["error_code"] = error
        return entry
    epoch, end_offset = partition.log.end_offset_for_epoch(requested.leader_epoch)
    entry.update(leader_epoch=epoch, end_offset=end_offset)
    return entry


async def handle(ctx: RequestContext, request) -> dict:
    return {
        "topics": [
            {
                "topic": topic.topic,
                "partitions": [_answer(ctx, topic.topic, p) for p in topic.partitions],
            }
            for topic in request.topics
        ]
    }
