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
    partition = ctx.replicas.partition(topic, requested.partition)
    if partition is None or not partition.is_leader:
        known = ctx.replicas.metadata.topic(topic)
        entry["error_code"] = (
            Error.NOT_LEADER_OR_FOLLOWER
            if partition is not None or (known and requested.partition in known.partitions)
            else Error.UNKNOWN_TOPIC_OR_PARTITION
        )
        return entry
    current = requested.current_leader_epoch
    if current not in (-1, partition.leader_epoch):
        entry["error_code"] = (
            Error.UNKNOWN_LEADER_EPOCH
            if current > partition.leader_epoch
            else Error.FENCED_LEADER_EPOCH
        )
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
