"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4, v8+),
latest tiered (-5, v9+), earliest pending upload (-6, v11+) and by timestamp.

Versions 8 to 11 add only those special timestamps (v10's TimeoutMs is for tiered storage's
asynchronous reads, which minibroker does not have): without tiered storage the earliest local
offset is the log start offset and the two tiered ones are not known (-1, leader epoch -1), as
Kafka answers for a topic without remote.storage.enable. A negative timestamp that is none of
these, or one newer than the request's version, is UNSUPPORTED_VERSION for its partition
(Kafka's ReplicaManager.isListOffsetsTimestampUnsupported).

With an authorizer, a topic the principal may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED;
a follower's request (replica id >= 0) follows the inter-node rules instead. The offsets are
the replica manager's (fetch_offset_for_timestamp), as in Kafka: a read_committed consumer
(isolation_level 1) is answered within the last stable offset, LATEST being the LSO.
"""

from minibroker.apis import RequestContext, Role, Senders, api
from minibroker.apis.authorization import topic_allowed
from minibroker.apis.inter_node import inter_node_allowed
from minibroker.protocol.errors import Error
from minibroker.protocol.offsets import (
    EARLIEST_PENDING_UPLOAD,
    LATEST_TIERED,
    timestamp_unsupported,
)
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation


def _answer(ctx: RequestContext, topic_name: str, requested, request) -> dict:
    entry = {
        "partition_index": requested.partition_index,
        "error_code": Error.NONE,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }
    if timestamp_unsupported(requested.timestamp, ctx.version):
        entry["error_code"] = Error.UNSUPPORTED_VERSION
        return entry
    partition, error = ctx.replica_manager.leader_partition(
        topic_name, requested.partition_index, getattr(requested, "current_leader_epoch", -1)
    )
    if error != Error.NONE:
        entry["error_code"] = error
        return entry
    assert partition is not None  # leader_partition answers Error.NONE with the partition
    timestamp, offset = ctx.replica_manager.fetch_offset_for_timestamp(
        partition,
        requested.timestamp,
        getattr(request, "isolation_level", 0),
        getattr(request, "replica_id", -1),
    )
    # No tiered offset is known: Kafka answers it with leader epoch -1.
    unknown_tiered = requested.timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD)
    leader_epoch = -1 if unknown_tiered else partition.leader_epoch
    entry.update(timestamp=timestamp, offset=offset, leader_epoch=leader_epoch)
    return entry


def _error_response(request, error: Error) -> dict:
    return {
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": error,
                        "timestamp": -1,
                        "offset": -1,
                    }
                    for p in topic.partitions
                ],
            }
            for topic in request.topics
        ]
    }


# A replica id >= 0 is the node form, refused every topic unless the inter-node rules allow it.
@api(
    ApiKey.LIST_OFFSETS,
    versions=(1, 11),
    roles=Role.BROKER,
    senders=Senders.CLIENTS_AND_NODES,
    error_response=_error_response,
)
async def handle(ctx: RequestContext, request) -> dict:
    topics = []
    from_replica = getattr(request, "replica_id", -1) >= 0
    replica_allowed = not from_replica or inter_node_allowed(ctx)
    for topic in request.topics:
        if not replica_allowed or (
            not from_replica and not topic_allowed(ctx, Operation.DESCRIBE, topic.name)
        ):
            refused = [
                {
                    "partition_index": requested.partition_index,
                    "error_code": Error.TOPIC_AUTHORIZATION_FAILED,
                    "timestamp": -1,
                    "offset": -1,
                }
                for requested in topic.partitions
            ]
            topics.append({"name": topic.name, "partitions": refused})
            continue
        seen: set[int] = set()
        partitions = []
        for requested in topic.partitions:
            if requested.partition_index in seen:
                partitions.append(
                    {
                        "partition_index": requested.partition_index,
                        "error_code": Error.INVALID_REQUEST,
                        "timestamp": -1,
                        "offset": -1,
                    }
                )
                continue
            seen.add(requested.partition_index)
            partitions.append(_answer(ctx, topic.name, requested, request))
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}
