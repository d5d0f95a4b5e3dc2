"""OffsetForLeaderEpoch: where a leader epoch ends in the leader's log.

Clients (kafka-python on a rising leader epoch, librdkafka on a seek with an epoch) use it to
detect that their position is past a truncation point. The leader answers from its leader
epoch cache: the end of an epoch is the start of the next one, the current epoch ends at the
log end offset.

With an authorizer, a topic the principal may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED;
a request from a replica (replica id >= 0) follows the inter-node rules instead.
"""

from minibroker.apis import RequestContext, Role, Senders, api
from minibroker.apis.authorization import topic_allowed
from minibroker.apis.inter_node import inter_node_allowed
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation


def _answer(ctx: RequestContext, topic: str, requested) -> dict:
    entry = {
        "error_code": Error.NONE,
        "partition": requested.partition,
        "leader_epoch": -1,
        "end_offset": -1,
    }
    partition, error = ctx.replica_manager.leader_partition(
        topic, requested.partition, requested.current_leader_epoch
    )
    if error != Error.NONE:
        entry["error_code"] = error
        return entry
    assert partition is not None  # leader_partition answers Error.NONE with the partition
    epoch, end_offset = ctx.replica_manager.last_offset_for_leader_epoch(
        partition, requested.leader_epoch
    )
    entry.update(leader_epoch=epoch, end_offset=end_offset)
    return entry


def _refused(requested) -> dict:
    return {
        "error_code": Error.TOPIC_AUTHORIZATION_FAILED,
        "partition": requested.partition,
        "leader_epoch": -1,
        "end_offset": -1,
    }


def _error_response(request, error: Error) -> dict:
    return {
        "topics": [
            {
                "topic": topic.topic,
                "partitions": [
                    {"error_code": error, "partition": p.partition, "end_offset": -1}
                    for p in topic.partitions
                ],
            }
            for topic in request.topics
        ]
    }


# A replica id >= 0 is the node form, refused every topic unless the inter-node rules allow it.
@api(
    ApiKey.OFFSET_FOR_LEADER_EPOCH,
    versions=(2, 4),
    roles=Role.BROKER,
    senders=Senders.CLIENTS_AND_NODES,
    error_response=_error_response,
)
async def handle(ctx: RequestContext, request) -> dict:
    from_replica = getattr(request, "replica_id", -1) >= 0
    replica_allowed = not from_replica or inter_node_allowed(ctx)
    topics = []
    for topic in request.topics:
        if replica_allowed and (
            from_replica or topic_allowed(ctx, Operation.DESCRIBE, topic.topic)
        ):
            partitions = [_answer(ctx, topic.topic, p) for p in topic.partitions]
        else:
            partitions = [_refused(p) for p in topic.partitions]
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"topics": topics}
