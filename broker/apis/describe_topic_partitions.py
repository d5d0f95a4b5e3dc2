"""DescribeTopicPartitions (KIP-966): topics and their partitions a page at a time.

As Kafka 4.4 serves it (DescribeTopicPartitionsRequestHandler with KRaftMetadataCache
.getTopicMetadataForDescribeTopicResponse), from this broker's metadata cache:

- the topics named, or every topic when none is named, from the cursor's topic on (names
  compared as Java compares strings: by UTF-16 code unit, which for topic names, ASCII only,
  is byte order), sorted by name;
- at most min(``response_partition_limit``, ``max.request.partition.size.limit``) partitions
  (at least 1) in one answer; ``next_cursor`` names the first topic and partition left out.
  The cursor's partition index is where the cursor's topic starts; the others start at 0;
- a named topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for
  an invalid name), and it takes no room; left out of an all-topics answer;
- DESCRIBE on each topic: a named topic the principal may not describe is answered
  TOPIC_AUTHORIZATION_FAILED (zero topic id, after the others, never counted against the
  limit), and left out of an all-topics answer; every other topic carries its authorized
  operations (KIP-430; there is no flag to ask for them here);
- a cursor whose topic is not among the topics named, or whose partition index is negative:
  INVALID_REQUEST for every topic named (Kafka's InvalidRequestException and the request's
  error response).

Each partition answers its eligible leader replicas and last-known ELR (KIP-966) as the
controller last sent them (UpdateMetadata's tagged fields, protocol/update_metadata_elr.py):
empty lists, not null, while the ``eligible.leader.replicas.version`` feature is 0 or the
partition has none, as Kafka's handler answers its PartitionRegistration's lists. Metadata
does not carry them (Kafka's Metadata has no such field).
"""

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import authorized_operations, topic_allowed
from minibroker.apis.metadata import INTERNAL_TOPICS
from minibroker.controller.state import ControllerError, validate_topic_name
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation, ResourceType

_ZERO_UUID = None  # kio encodes a None uuid as the zero uuid


def _error_response(request, error: Error) -> dict:
    return {
        "topics": [
            {
                "error_code": error,
                "name": topic.name,
                "topic_id": _ZERO_UUID,
                "is_internal": False,
                "partitions": (),
            }
            for topic in request.topics
        ],
        "next_cursor": None,
    }


def _name_error(name: str) -> Error:
    try:
        validate_topic_name(name)
    except ControllerError:
        return Error.INVALID_TOPIC_EXCEPTION
    return Error.UNKNOWN_TOPIC_OR_PARTITION


def _partitions(topic, start: int, room: int) -> tuple[list[dict], int]:
    """The topic's partitions from ``start``, at most ``room`` of them, and the index of the
    next one left out (-1 when none is)."""
    count = len(topic.partitions)
    upper = min(count, start + room)
    entries = []
    for index in range(start, upper):
        partition = topic.partitions.get(index)
        if partition is None:
            continue
        entries.append(
            {
                "error_code": Error.NONE,
                "partition_index": index,
                "leader_id": partition.leader,
                "leader_epoch": partition.leader_epoch,
                "replica_nodes": partition.replicas,
                "isr_nodes": partition.isr,
                "eligible_leader_replicas": partition.eligible_leader_replicas,
                "last_known_elr": partition.last_known_elr,
                "offline_replicas": partition.offline_replicas,
            }
        )
    return entries, (upper if upper < count else -1)


@api(
    ApiKey.DESCRIBE_TOPIC_PARTITIONS,
    versions=(0, 0),
    roles=Role.BROKER,
    error_response=_error_response,
)
async def handle(ctx: RequestContext, request) -> dict:
    cache = ctx.replica_manager.metadata
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    all_topics = not request.topics
    if all_topics:
        names = {name for name in cache.topics if name >= cursor_topic}
    else:
        names = {topic.name for topic in request.topics if topic.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            return _error_response(request, Error.INVALID_REQUEST)
    if cursor is not None and cursor.partition_index < 0:
        return _error_response(request, Error.INVALID_REQUEST)
    refused = []
    allowed = []
    for name in sorted(names):
        if topic_allowed(ctx, Operation.DESCRIBE, name):
            allowed.append(name)
        elif not all_topics:
            refused.append(
                {
                    "error_code": Error.TOPIC_AUTHORIZATION_FAILED,
                    "name": name,
                    "topic_id": _ZERO_UUID,
                    "is_internal": False,
                    "partitions": (),
                }
            )
    remaining = max(
        min(ctx.config.max_request_partition_size_limit, request.response_partition_limit), 1
    )
    topics: list[dict] = []
    next_cursor = None
    for name in allowed:
        if remaining <= 0:
            # Every partition of the topics before fitted: the next answer starts here.
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        topic = cache.topic(name)
        if topic is None:
            if not all_topics:
                topics.append(
                    {
                        "error_code": _name_error(name),
                        "name": name,
                        "topic_id": _ZERO_UUID,
                        "is_internal": name in INTERNAL_TOPICS,
                        "partitions": (),
                    }
                )
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        partitions, next_index = _partitions(topic, start, remaining)
        topics.append(
            {
                "error_code": Error.NONE,
                "name": name,
                "topic_id": topic.topic_id,
                "is_internal": name in INTERNAL_TOPICS,
                "partitions": partitions,
            }
        )
        if next_index != -1:
            next_cursor = {"topic_name": name, "partition_index": next_index}
            break
        remaining -= len(partitions)
    for entry in topics:
        entry["topic_authorized_operations"] = authorized_operations(
            ctx, ResourceType.TOPIC, entry["name"]
        )
    return {"topics": topics + refused, "next_cursor": next_cursor}
