"""Share groups' membership (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe.

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

Only the membership is served: ShareFetch and ShareAcknowledge (the records) are other
modules' (see docs/share-groups.md).
"""

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
