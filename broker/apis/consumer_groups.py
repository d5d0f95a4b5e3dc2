"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe.

The handlers translate the requests into calls on the group coordinator
(coordinator/group/service.py, whose consumer groups are coordinator/group/consumer_group.py)
and shape the answers. Kafka's authorization rules: READ on the group to heartbeat
(GROUP_AUTHORIZATION_FAILED), DESCRIBE on the group to describe it.

ConsumerGroupHeartbeat is served at v0-v1 as Kafka 4 serves it: v1 (KIP-1082: the client
chooses its member id; SubscribedTopicRegex) is the one librdkafka 2.12+ sends; kio 0.6.1 has
no schema of it, protocol/consumer_group_heartbeat_v1.py adds one.
"""

import uuid

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import authorized_operations, group_allowed
from minibroker.common.features import GROUP_VERSION
from minibroker.coordinator.group.consumer_group import HeartbeatRequest
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation, ResourceType

# Kafka's "operations not requested" marker for authorized-operations fields.
_OPERATIONS_OMITTED = -(2**31)


def _millis(value) -> int:
    return int(value.total_seconds() * 1000)


def _heartbeat_error(request, error: Error) -> dict:
    return {"error_code": error, "member_epoch": -1, "heartbeat_interval": 0}


def _owned(topic_partitions) -> dict[uuid.UUID, set[int]] | None:
    if topic_partitions is None:
        return None
    owned: dict[uuid.UUID, set[int]] = {}
    for topic in topic_partitions:
        if topic.topic_id is not None:
            owned.setdefault(topic.topic_id, set()).update(topic.partitions)
    return owned


@api(
    ApiKey.CONSUMER_GROUP_HEARTBEAT,
    versions=(0, 1),
    roles=Role.BROKER,
    error_response=_heartbeat_error,
)
async def handle_consumer_group_heartbeat(ctx: RequestContext, request) -> dict:
    if ctx.replica_manager.finalized_features.levels.get(GROUP_VERSION, 0) < 1:
        # The cluster's group.version is 0 (kafka-features disable): the consumer group
        # protocol is off, as Kafka's isConsumerGroupProtocolEnabled answers it.
        return _heartbeat_error(request, Error.UNSUPPORTED_VERSION)
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return {
            "error_code": Error.GROUP_AUTHORIZATION_FAILED,
            "member_epoch": -1,
            "heartbeat_interval": 0,
        }
    names = request.subscribed_topic_names
    heartbeat = HeartbeatRequest(
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=_millis(request.rebalance_timeout),
        subscribed_topic_names=tuple(names) if names is not None else None,
        # An empty regex is none (librdkafka sends "" with a subscription by names).
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=_owned(request.topic_partitions),
        client_id=ctx.header.client_id or "",
        client_host=ctx.connection.host,
        api_version=ctx.version,
    )
    result = await ctx.group_coordinator.consumer_heartbeat(request.group_id, heartbeat)
    if result.error != Error.NONE:
        return {
            "error_code": result.error,
            "error_message": result.message,
            "member_epoch": -1,
            "heartbeat_interval": 0,
        }
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


def _topic_partitions(ctx: RequestContext, partitions: dict[uuid.UUID, set[int]]) -> dict:
    metadata = ctx.replica_manager.metadata
    described = []
    for topic_id, parts in sorted(partitions.items(), key=lambda item: item[0].bytes):
        topic = metadata.topic_by_id(topic_id)
        described.append(
            {
                "topic_id": topic_id,
                "topic_name": topic.name if topic is not None else "",
                "partitions": sorted(parts),
            }
        )
    return {"topic_partitions": described}


def _described_group(ctx: RequestContext, group_id: str, include_operations: bool) -> dict:
    entry: dict = {
        "error_code": Error.NONE,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "",
        "members": (),
        "authorized_operations": _OPERATIONS_OMITTED,
    }
    if not group_allowed(ctx, Operation.DESCRIBE, group_id):
        return {**entry, "error_code": Error.GROUP_AUTHORIZATION_FAILED}
    error, message, group = ctx.group_coordinator.describe_consumer_group(group_id)
    if error != Error.NONE or group is None:
        return {**entry, "error_code": error, "error_message": message}
    members = [
        {
            "member_id": member.member_id,
            "instance_id": member.instance_id,
            "rack_id": member.rack_id,
            "member_epoch": member.member_epoch,
            "client_id": member.client_id,
            "client_host": member.client_host,
            "subscribed_topic_names": list(member.subscribed_topic_names),
            "subscribed_topic_regex": member.subscribed_topic_regex,
            "assignment": _topic_partitions(ctx, member.assigned),
            "target_assignment": _topic_partitions(ctx, group.target.get(member.member_id, {})),
            # v1 (KIP-1099): 0 a member on the classic protocol inside the group, 1 a consumer.
            "member_type": 0 if member.classic is not None else 1,
        }
        for member in group.members.values()
    ]
    entry.update(
        group_state=group.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor(),
        members=members,
    )
    if include_operations:
        entry["authorized_operations"] = authorized_operations(ctx, ResourceType.GROUP, group_id)
    return entry


def _describe_error(request, error: Error) -> dict:
    return {
        "groups": [
            {
                "error_code": error,
                "group_id": group_id,
                "group_state": "",
                "group_epoch": -1,
                "assignment_epoch": -1,
                "assignor_name": "",
                "members": (),
            }
            for group_id in request.group_ids
        ]
    }


@api(
    ApiKey.CONSUMER_GROUP_DESCRIBE,
    versions=(0, 1),
    roles=Role.BROKER,
    error_response=_describe_error,
)
async def handle_consumer_group_describe(ctx: RequestContext, request) -> dict:
    return {
        "groups": [
            _described_group(ctx, group_id, request.include_authorized_operations)
            for group_id in request.group_ids
        ]
    }
