"""Share groups for members and admins (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe,
and the offsets APIs DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets.

The handlers translate the requests into calls on the group coordinator
(coordinator/group/service.py, whose share groups are coordinator/group/share_group.py) and
shape the answers, as Kafka 4.4's KafkaApis.handleShareGroupHeartbeat and
handleShareGroupDescribe do, in their order:

- ShareGroupHeartbeat (v1, the only version of Kafka 4.1+): UNSUPPORTED_VERSION while the
  cluster's ``share.version`` is 0 (Kafka's isShareGroupProtocolEnabled); READ on the group
  (GROUP_AUTHORIZATION_FAILED); a member id that is empty or longer than 36 characters is
  INVALID_REQUEST ("Invalid member id in the request."); subscribed topics the principal may
  not DESCRIBE are TOPIC_AUTHORIZATION_FAILED; then the coordinator.
- ShareGroupDescribe (v1): UNSUPPORTED_VERSION likewise; DESCRIBE on each group
  (GROUP_AUTHORIZATION_FAILED for that group alone); a group whose members are assigned a
  topic the principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED without members
  ("The group has described topic(s) that the client is not authorized to describe.").

- DescribeShareGroupOffsets (v0-v1), AlterShareGroupOffsets (v0), DeleteShareGroupOffsets
  (v0): see each handler; the coordinator's rules are coordinator/group/service.py's and
  share_offsets.py's.

ShareFetch and ShareAcknowledge (the records) are other modules' (see docs/share-groups.md).
"""

import uuid

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import authorized_operations, group_allowed, topic_allowed
from minibroker.apis.consumer_groups import _topic_partitions
from minibroker.common.features import SHARE_VERSION
from minibroker.coordinator.group.assignors import SIMPLE
from minibroker.coordinator.group.share_group import ShareHeartbeatRequest
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation, ResourceType

# Kafka's "operations not requested" marker for authorized-operations fields.
_OPERATIONS_OMITTED = -(2**31)
# Kafka's KafkaApis.isMemberIdValid: a client-chosen id (a UUID's 36 characters at most).
_MAX_MEMBER_ID_LENGTH = 36


def _enabled(ctx: RequestContext) -> bool:
    return ctx.replica_manager.finalized_features.levels.get(SHARE_VERSION, 0) >= 1


def _heartbeat_error(request, error: Error, message: str | None = None) -> dict:
    return {
        "error_code": error,
        "error_message": message,
        "member_epoch": 0,
        "heartbeat_interval": 0,
    }


@api(
    ApiKey.SHARE_GROUP_HEARTBEAT,
    versions=(1, 1),
    roles=Role.BROKER,
    error_response=_heartbeat_error,
)
async def handle_share_group_heartbeat(ctx: RequestContext, request) -> dict:
    if not _enabled(ctx):
        return _heartbeat_error(request, Error.UNSUPPORTED_VERSION)
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return _heartbeat_error(request, Error.GROUP_AUTHORIZATION_FAILED)
    member_id = request.member_id
    if not member_id or len(member_id) > _MAX_MEMBER_ID_LENGTH:
        return _heartbeat_error(request, Error.INVALID_REQUEST, "Invalid member id in the request.")
    names = request.subscribed_topic_names
    if names and not all(topic_allowed(ctx, Operation.DESCRIBE, name) for name in set(names)):
        return _heartbeat_error(request, Error.TOPIC_AUTHORIZATION_FAILED)
    heartbeat = ShareHeartbeatRequest(
        member_id=member_id,
        member_epoch=request.member_epoch,
        rack_id=request.rack_id,
        subscribed_topic_names=tuple(names) if names is not None else None,
        client_id=ctx.header.client_id or "",
        client_host=ctx.connection.host,
    )
    result = await ctx.group_coordinator.share_heartbeat(request.group_id, heartbeat)
    if result.error != Error.NONE:
        return _heartbeat_error(request, result.error, result.message)
    assignment = None
    if result.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": topic, "partitions": sorted(parts)}
                for topic, parts in sorted(result.assignment.items(), key=lambda i: i[0].bytes)
            ]
        }
    return {
        "error_code": Error.NONE,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        "assignment": assignment,
    }


def _group_error(group_id: str, error: Error, message: str | None = None) -> dict:
    """Kafka's new DescribedGroup with only its id and error set (its other fields at their
    defaults)."""
    return {
        "error_code": error,
        "error_message": message,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": 0,
        "assignment_epoch": 0,
        "assignor_name": "",
        "members": (),
        "authorized_operations": _OPERATIONS_OMITTED,
    }


def _described_group(ctx: RequestContext, group_id: str, include_operations: bool) -> dict:
    if not group_allowed(ctx, Operation.DESCRIBE, group_id):
        return _group_error(group_id, Error.GROUP_AUTHORIZATION_FAILED)
    error, message, group = ctx.group_coordinator.describe_share_group(group_id)
    if error != Error.NONE or group is None:
        return _group_error(group_id, error, message)
    members = [
        {
            "member_id": member.member_id,
            "rack_id": member.rack_id,
            "member_epoch": member.member_epoch,
            "client_id": member.client_id,
            "client_host": member.client_host,
            "subscribed_topic_names": list(member.subscribed_topic_names),
            "assignment": _topic_partitions(ctx, member.assigned),
        }
        for member in group.members.values()
    ]
    metadata = ctx.replica_manager.metadata
    described_topics = {
        topic.name
        for member in group.members.values()
        for topic_id in member.assigned
        if (topic := metadata.topic_by_id(topic_id)) is not None
    }
    if not all(topic_allowed(ctx, Operation.DESCRIBE, name) for name in described_topics):
        return _group_error(
            group_id,
            Error.TOPIC_AUTHORIZATION_FAILED,
            "The group has described topic(s) that the client is not authorized to describe.",
        )
    entry = _group_error(group_id, Error.NONE)
    entry.update(
        group_state=group.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=SIMPLE,
        members=members,
    )
    if include_operations:
        entry["authorized_operations"] = authorized_operations(ctx, ResourceType.GROUP, group_id)
    return entry


def _describe_error(request, error: Error) -> dict:
    return {"groups": [_group_error(group_id, error) for group_id in request.group_ids]}


@api(
    ApiKey.SHARE_GROUP_DESCRIBE,
    versions=(1, 1),
    roles=Role.BROKER,
    error_response=_describe_error,
)
async def handle_share_group_describe(ctx: RequestContext, request) -> dict:
    if not _enabled(ctx):
        return _describe_error(request, Error.UNSUPPORTED_VERSION)
    return {
        "groups": [
            _described_group(ctx, group_id, request.include_authorized_operations)
            for group_id in request.group_ids
        ]
    }


# -- share groups' offsets, for admins: DescribeShareGroupOffsets, AlterShareGroupOffsets,
# DeleteShareGroupOffsets (Kafka 4.4's KafkaApis.handleDescribeShareGroupOffsetsRequest,
# handleAlterShareGroupOffsetsRequest, handleDeleteShareGroupOffsetsRequest) -----------------

_ZERO_UUID = uuid.UUID(int=0)
_TOPIC_AUTHORIZATION_MESSAGE = "Topic authorization failed."
_UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."


def _describe_offsets_group_error(group_id: str, error: Error, message: str | None = None) -> dict:
    return {"group_id": group_id, "topics": (), "error_code": error, "error_message": message}


def _describe_offsets_error(request, error: Error) -> dict:
    return {"groups": [_describe_offsets_group_error(g.group_id, error) for g in request.groups]}


async def _describe_offsets_group(ctx: RequestContext, group) -> dict:
    group_id = group.group_id
    if not group_allowed(ctx, Operation.DESCRIBE, group_id):
        return _describe_offsets_group_error(group_id, Error.GROUP_AUTHORIZATION_FAILED)
    if group.topics is not None and not group.topics:
        return _describe_offsets_group_error(group_id, Error.NONE)
    unauthorized = []
    asked = None
    if group.topics is not None:
        asked = []
        for topic in group.topics:
            if topic_allowed(ctx, Operation.DESCRIBE, topic.topic_name):
                asked.append((topic.topic_name, [int(p) for p in topic.partitions]))
            else:
                unauthorized.append(topic)
    error, message, topics = await ctx.group_coordinator.describe_share_group_offsets(
        group_id, asked
    )
    if error != Error.NONE:
        return _describe_offsets_group_error(group_id, error, message)
    if asked is None:
        # Clients are not allowed to see offsets of topics they may not describe.
        topics = [t for t in topics if topic_allowed(ctx, Operation.DESCRIBE, t[0])]
    answer = [
        {
            "topic_name": name,
            "topic_id": topic_id or _ZERO_UUID,
            "partitions": [
                {
                    "partition_index": index,
                    "start_offset": start,
                    "leader_epoch": epoch,
                    "lag": lag,
                    "error_code": Error.NONE,
                    "error_message": None,
                }
                for index, start, epoch, lag in rows
            ],
        }
        for name, topic_id, rows in topics
    ]
    for topic in unauthorized:
        answer.append(
            {
                "topic_name": topic.topic_name,
                "topic_id": _ZERO_UUID,
                "partitions": [
                    {
                        "partition_index": index,
                        "start_offset": -1,
                        "leader_epoch": 0,
                        "lag": -1,
                        "error_code": Error.TOPIC_AUTHORIZATION_FAILED,
                        "error_message": _TOPIC_AUTHORIZATION_MESSAGE,
                    }
                    for index in topic.partitions
                ],
            }
        )
    return {"group_id": group_id, "topics": answer, "error_code": Error.NONE, "error_message": None}


@api(
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
    versions=(0, 1),
    roles=Role.BROKER,
    error_response=_describe_offsets_error,
)
async def handle_describe_share_group_offsets(ctx: RequestContext, request) -> dict:
    """Each group: UNSUPPORTED_VERSION while share.version is 0; DESCRIBE on the group
    (GROUP_AUTHORIZATION_FAILED); topics null: the group's initialized share partitions,
    without the topics the principal may not DESCRIBE; else the topics asked, a topic it may
    not DESCRIBE answered TOPIC_AUTHORIZATION_FAILED per partition (start offset -1)."""
    if not _enabled(ctx):
        return _describe_offsets_error(request, Error.UNSUPPORTED_VERSION)
    return {"groups": [await _describe_offsets_group(ctx, group) for group in request.groups]}


def _alter_offsets_error(request, error: Error, message: str | None = None) -> dict:
    """Kafka's AlterShareGroupOffsetsRequest.getErrorResponse: the top-level error only."""
    return {"error_code": error, "error_message": message, "responses": ()}


@api(
    ApiKey.ALTER_SHARE_GROUP_OFFSETS,
    versions=(0, 0),
    roles=Role.BROKER,
    error_response=_alter_offsets_error,
)
async def handle_alter_share_group_offsets(ctx: RequestContext, request) -> dict:
    """UNSUPPORTED_VERSION while share.version is 0; READ on the group
    (GROUP_AUTHORIZATION_FAILED); per topic READ (TOPIC_AUTHORIZATION_FAILED) and its
    existence (UNKNOWN_TOPIC_OR_PARTITION) for each of its partitions; then the coordinator,
    whose group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...) is the answer's."""
    if not _enabled(ctx):
        return _alter_offsets_error(request, Error.UNSUPPORTED_VERSION)
    group_id = request.group_id
    if not group_allowed(ctx, Operation.READ, group_id):
        return _alter_offsets_error(request, Error.GROUP_AUTHORIZATION_FAILED)
    metadata = ctx.replica_manager.metadata
    refused: list[dict] = []
    asked: list[tuple[str, list[tuple[int, int]]]] = []
    for topic in request.topics:
        name = topic.topic_name
        error: Error | None = None
        message: str | None = None
        if not topic_allowed(ctx, Operation.READ, name):
            error, message = Error.TOPIC_AUTHORIZATION_FAILED, _TOPIC_AUTHORIZATION_MESSAGE
        elif metadata.topic(name) is None:
            error, message = Error.UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN_TOPIC_MESSAGE
        if error is None:
            asked.append(
                (name, [(int(p.partition_index), int(p.start_offset)) for p in topic.partitions])
            )
            continue
        known = metadata.topic(name)
        refused.append(
            {
                "topic_name": name,
                "topic_id": known.topic_id if known is not None else _ZERO_UUID,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": error,
                        "error_message": message,
                    }
                    for p in topic.partitions
                ],
            }
        )
    error, message, topics = await ctx.group_coordinator.alter_share_group_offsets(group_id, asked)
    if error != Error.NONE:
        return _alter_offsets_error(request, error, message)
    responses = [
        {
            "topic_name": name,
            "topic_id": topic_id or _ZERO_UUID,
            "partitions": [
                {"partition_index": index, "error_code": code, "error_message": text}
                for index, code, text in rows
            ],
        }
        for name, topic_id, rows in topics
    ]
    return {"error_code": Error.NONE, "error_message": None, "responses": refused + responses}


def _delete_offsets_error(request, error: Error, message: str | None = None) -> dict:
    return {"error_code": error, "error_message": message, "responses": ()}


@api(
    ApiKey.DELETE_SHARE_GROUP_OFFSETS,
    versions=(0, 0),
    roles=Role.BROKER,
    error_response=_delete_offsets_error,
)
async def handle_delete_share_group_offsets(ctx: RequestContext, request) -> dict:
    """UNSUPPORTED_VERSION while share.version is 0; DELETE on the group
    (GROUP_AUTHORIZATION_FAILED); READ on each topic (TOPIC_AUTHORIZATION_FAILED for it);
    then the coordinator, whose group-level error is the answer's."""
    if not _enabled(ctx):
        return _delete_offsets_error(request, Error.UNSUPPORTED_VERSION)
    group_id = request.group_id
    if not group_allowed(ctx, Operation.DELETE, group_id):
        return _delete_offsets_error(request, Error.GROUP_AUTHORIZATION_FAILED)
    refused: list[dict] = []
    names: list[str] = []
    for topic in request.topics:
        if topic_allowed(ctx, Operation.READ, topic.topic_name):
            names.append(topic.topic_name)
        else:
            refused.append(
                {
                    "topic_name": topic.topic_name,
                    "topic_id": _ZERO_UUID,
                    "error_code": Error.TOPIC_AUTHORIZATION_FAILED,
                    "error_message": _TOPIC_AUTHORIZATION_MESSAGE,
                }
            )
    error, message, topics = await ctx.group_coordinator.delete_share_group_offsets(group_id, names)
    if error != Error.NONE:
        return _delete_offsets_error(request, error, message)
    responses = [
        {
            "topic_name": name,
            "topic_id": topic_id or _ZERO_UUID,
            "error_code": code,
            "error_message": text,
        }
        for name, topic_id, code, text in topics
    ]
    return {"error_code": Error.NONE, "error_message": None, "responses": refused + responses}
