"""Consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups,
DescribeGroups, DeleteGroups.

Each handler translates its request (every version) into a call on the group coordinator
(broker/coordinator) and its answer back into the version-neutral response description.
FindCoordinator creates `__consumer_offsets` (key type 0, groups) or `__transaction_state`
(key type 1, transactional ids) on first use and names the leader of the key's partition, on
the listener the client came in on; key type 2 (SHARE, KIP-932: a share partition's key
"group:topicId:partition") names the share coordinator of that key, the leader of its
partition of `__share_group_state`, created on first use; a key not of that form is
INVALID_REQUEST, and a FindCoordinator older than v6 cannot ask for it (INVALID_REQUEST, as
Kafka's FindCoordinatorRequest.Builder refuses).

With an authorizer, Kafka's rules (GROUP_AUTHORIZATION_FAILED): DESCRIBE on the group (on the
transactional id: TRANSACTIONAL_ID_AUTHORIZATION_FAILED) to find its coordinator and to
describe it, READ to join, sync, heartbeat and leave, DELETE to delete it; ListGroups lists
every group to a principal that may DESCRIBE the cluster, else only the groups it may
DESCRIBE.
"""

from functools import partial

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import (
    allowed,
    authorized_operations,
    cluster_allowed,
    group_allowed,
)
from minibroker.apis.topics import create_topics_through_controller
from minibroker.coordinator.group.consumer_group import ConsumerGroup
from minibroker.coordinator.group.share_group import ShareGroup
from minibroker.coordinator.group.state import Group, JoinRequest, JoinResult
from minibroker.coordinator.group.streams_entry import StreamsGroupEntry
from minibroker.coordinator.share.state import parse_kafka_uuid
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation, ResourceType

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2
# Kafka's "operations not requested" marker for authorized-operations fields.
_OPERATIONS_OMITTED = -(2**31)


def _millis(value) -> int:
    return int(value.total_seconds() * 1000)


async def _find_one(ctx: RequestContext, key_type: int, key: str) -> dict:
    def answer(error: Error, message: str | None = None, node=None) -> dict:
        return {
            "key": key,
            "error_code": error,
            "error_message": message,
            "node_id": node.node_id if node else -1,
            "host": node.host if node else "",
            "port": node.port if node else -1,
        }

    if key_type == TRANSACTION_KEY_TYPE:
        if not allowed(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return answer(Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        runtime = ctx.transaction_coordinator.runtime
    elif key_type == GROUP_KEY_TYPE:
        if not group_allowed(ctx, Operation.DESCRIBE, key):
            return answer(Error.GROUP_AUTHORIZATION_FAILED)
        runtime = ctx.group_coordinator.runtime
    elif key_type == SHARE_KEY_TYPE and ctx.version >= 6:
        # Kafka's KafkaApis.getCoordinator for CoordinatorType.SHARE: only brokers ask
        # (CLUSTER_ACTION on the cluster), and the key must parse as SharePartitionKey.
        if not cluster_allowed(ctx, Operation.CLUSTER_ACTION):
            return answer(Error.CLUSTER_AUTHORIZATION_FAILED)
        if not _share_key_valid(key):
            return answer(
                Error.INVALID_REQUEST,
                f"invalid key {key!r} of key type 2: expected group:topicId:partition",
            )
        runtime = ctx.share_state_coordinator.runtime
    else:
        return answer(Error.INVALID_REQUEST, f"unsupported coordinator key type {key_type}")
    # The coordinator's runtime creates its internal topic on first use and answers which
    # broker leads the key's partition (Kafka's partitionFor, then the partition's leader).
    error = await runtime.ensure_topic(partial(create_topics_through_controller, ctx))
    if error != Error.NONE:
        return answer(error, f"{runtime.topic} is not available yet")
    leader = runtime.leader_for(key)
    if leader is None:
        return answer(Error.COORDINATOR_NOT_AVAILABLE, "the coordinator's partition has no leader")
    node = ctx.replica_manager.metadata.listeners.get(leader, {}).get(ctx.listener_name)
    if node is None:
        return answer(Error.COORDINATOR_NOT_AVAILABLE, "the coordinator is not reachable here")
    return answer(Error.NONE, None, node)


def _share_key_valid(key: str) -> bool:
    """SharePartitionKey.validate of a coordinator key: "group:topicId:partition" with a
    non-empty group (which may itself hold colons), a topic id as Kafka's Uuid.toString writes
    it and a partition >= 0."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        return False
    try:
        parse_kafka_uuid(parts[1])
        return int(parts[2]) >= 0
    except ValueError:
        return False


def _find_coordinator_error(request, error: Error) -> dict:
    if hasattr(request, "coordinator_keys"):  # v4+: one answer per key
        return {
            "coordinators": [
                {"key": key, "error_code": error, "node_id": -1, "host": "", "port": -1}
                for key in request.coordinator_keys
            ]
        }
    return {"error_code": error, "node_id": -1, "host": "", "port": -1}


@api(
    ApiKey.FIND_COORDINATOR,
    versions=(0, 6),
    roles=Role.BROKER,
    error_response=_find_coordinator_error,
)
async def handle_find_coordinator(ctx: RequestContext, request) -> dict:
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    if ctx.version >= 4:
        return {
            "coordinators": [
                await _find_one(ctx, key_type, key) for key in request.coordinator_keys
            ]
        }
    return await _find_one(ctx, key_type, request.key)


def _join_response(ctx: RequestContext, result) -> dict:
    protocol_name = result.protocol_name
    if ctx.version < 7 and protocol_name is None:
        protocol_name = ""  # nullable only from v7
    return {
        "error_code": result.error,
        "generation_id": result.generation,
        "protocol_type": result.protocol_type,
        "protocol_name": protocol_name,
        "leader": result.leader,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "metadata": metadata}
            for member_id, instance_id, metadata in result.members
        ],
    }


def _join_group_error(request, error: Error) -> dict:
    return {
        "error_code": error,
        "generation_id": -1,
        "leader": "",
        "member_id": "",
        "protocol_name": "",
        "members": (),
    }


@api(ApiKey.JOIN_GROUP, versions=(0, 9), roles=Role.BROKER, error_response=_join_group_error)
async def handle_join_group(ctx: RequestContext, request) -> dict:
    if not request.group_id:
        return _join_response(ctx, JoinResult(Error.INVALID_GROUP_ID, member_id=request.member_id))
    if not group_allowed(ctx, Operation.READ, request.group_id):
        refused = JoinResult(Error.GROUP_AUTHORIZATION_FAILED, member_id=request.member_id)
        return _join_response(ctx, refused)
    session_timeout_ms = _millis(request.session_timeout)
    rebalance_timeout = getattr(request, "rebalance_timeout", None)
    join = JoinRequest(
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.header.client_id or "",
        client_host=ctx.connection.host,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=(
            _millis(rebalance_timeout) if rebalance_timeout is not None else session_timeout_ms
        ),
        protocol_type=request.protocol_type,
        protocols=[(protocol.name, protocol.metadata) for protocol in request.protocols],
        require_known_member_id=ctx.version >= 4,
    )
    result = await ctx.group_coordinator.join(request.group_id, join)
    return _join_response(ctx, result)


def _sync_group_error(request, error: Error) -> dict:
    return {"error_code": error, "protocol_name": "", "assignment": b""}


@api(ApiKey.SYNC_GROUP, versions=(0, 5), roles=Role.BROKER, error_response=_sync_group_error)
async def handle_sync_group(ctx: RequestContext, request) -> dict:
    if not request.group_id:
        return {"error_code": Error.INVALID_GROUP_ID, "assignment": b""}
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return {"error_code": Error.GROUP_AUTHORIZATION_FAILED, "assignment": b""}
    result = await ctx.group_coordinator.sync(
        request.group_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        request.generation_id,
        {item.member_id: item.assignment for item in request.assignments},
        getattr(request, "protocol_type", None),
        getattr(request, "protocol_name", None),
    )
    return {
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }


def _heartbeat_error(request, error: Error) -> dict:
    return {"error_code": error}


@api(ApiKey.HEARTBEAT, versions=(0, 4), roles=Role.BROKER, error_response=_heartbeat_error)
async def handle_heartbeat(ctx: RequestContext, request) -> dict:
    if not request.group_id:
        return {"error_code": Error.INVALID_GROUP_ID}
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return {"error_code": Error.GROUP_AUTHORIZATION_FAILED}
    error = ctx.group_coordinator.heartbeat(
        request.group_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        request.generation_id,
    )
    return {"error_code": error}


def _leave_group_error(request, error: Error) -> dict:
    return {"error_code": error, "members": ()}


@api(ApiKey.LEAVE_GROUP, versions=(0, 5), roles=Role.BROKER, error_response=_leave_group_error)
async def handle_leave_group(ctx: RequestContext, request) -> dict:
    if ctx.version >= 3:
        members = [(member.member_id, member.group_instance_id) for member in request.members]
    else:
        members = [(request.member_id, None)]
    if not request.group_id:
        return {"error_code": Error.INVALID_GROUP_ID, "members": ()}
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return {"error_code": Error.GROUP_AUTHORIZATION_FAILED, "members": ()}
    results = await ctx.group_coordinator.leave(request.group_id, members)
    if ctx.version < 3:
        return {"error_code": results[0]}
    if len(results) != len(members):  # an error for the whole request
        return {"error_code": results[0], "members": ()}
    return {
        "error_code": Error.NONE,
        "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "error_code": error}
            for (member_id, instance_id), error in zip(members, results, strict=True)
        ],
    }


def _list_groups_error(request, error: Error) -> dict:
    return {"error_code": error, "groups": ()}


@api(ApiKey.LIST_GROUPS, versions=(0, 5), roles=Role.BROKER, error_response=_list_groups_error)
async def handle_list_groups(ctx: RequestContext, request) -> dict:
    states = {state.lower() for state in getattr(request, "states_filter", ())}
    types = {kind.lower() for kind in getattr(request, "types_filter", ())}
    error, served = ctx.group_coordinator.list_groups()
    listed: list[Group | ShareGroup] = [*served, *ctx.group_coordinator.list_share_groups()]
    if not cluster_allowed(ctx, Operation.DESCRIBE):
        listed = [
            group for group in listed if group_allowed(ctx, Operation.DESCRIBE, group.group_id)
        ]
    groups = [
        {
            "group_id": group.group_id,
            "protocol_type": _protocol_type(group),
            "group_state": group.state.value,
            "group_type": _group_type(group),
        }
        for group in listed
        if (not states or group.state.value.lower() in states)
        and (not types or _group_type(group) in types)
    ]
    return {"error_code": error, "groups": groups}


def _group_type(group) -> str:
    """ListGroups' group type (KIP-848): "consumer" for the consumer protocol's groups,
    "share" for share groups (KIP-932), "streams" for Kafka Streams' (KIP-1071)."""
    if isinstance(group, ShareGroup):
        return "share"
    if isinstance(group, StreamsGroupEntry):
        return "streams"
    return "consumer" if isinstance(group, ConsumerGroup) else "classic"


def _protocol_type(group) -> str:
    """A share group's protocol type is "share" (Kafka's ShareGroup.PROTOCOL_TYPE)."""
    if isinstance(group, ShareGroup):
        return "share"
    return group.protocol_type or ""


def _described(group_id: str, error: Error, group, version: int) -> dict:
    entry = {
        "error_code": error,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": (),
        "authorized_operations": _OPERATIONS_OMITTED,
    }
    if error != Error.NONE:
        return entry
    if group is None or isinstance(group, ConsumerGroup | StreamsGroupEntry):
        # Kafka 4 describes only classic groups here: a consumer or streams group is answered
        # as a group that does not exist (Consumer/StreamsGroupDescribe describe them). Before
        # v6 that is a Dead group; from v6 on GROUP_ID_NOT_FOUND (KIP-1043), with the message
        # of Kafka's GroupIdNotFoundException.
        if version < 6:
            return {**entry, "group_state": "Dead"}
        message = (
            f"Group {group_id} not found."
            if group is None
            else f"Group {group_id} is not a classic group."
        )
        return {**entry, "error_code": Error.GROUP_ID_NOT_FOUND, "error_message": message}
    stable = group.state.value == "Stable"
    return {
        **entry,
        "group_state": group.state.value,
        "protocol_type": group.protocol_type or "",
        "protocol_data": (group.protocol_name or "") if stable else "",
        "members": [
            {
                "member_id": member.member_id,
                "group_instance_id": member.group_instance_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "member_metadata": member.metadata(group.protocol_name) if stable else b"",
                "member_assignment": member.assignment if stable else b"",
            }
            for member in group.members.values()
        ],
    }


def _describe_groups_error(request, error: Error) -> dict:
    return {
        "groups": [
            {
                "error_code": error,
                "group_id": group_id,
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
            }
            for group_id in request.groups
        ]
    }


@api(
    ApiKey.DESCRIBE_GROUPS,
    versions=(0, 6),
    roles=Role.BROKER,
    error_response=_describe_groups_error,
)
async def handle_describe_groups(ctx: RequestContext, request) -> dict:
    groups = []
    for group_id in request.groups:
        if not group_allowed(ctx, Operation.DESCRIBE, group_id):
            groups.append(_described(group_id, Error.GROUP_AUTHORIZATION_FAILED, None, ctx.version))
            continue
        error, group = ctx.group_coordinator.describe(group_id)
        described = _described(group_id, error, group, ctx.version)
        if (
            getattr(request, "include_authorized_operations", False)  # KIP-430, v3+
            and described["error_code"] == Error.NONE
        ):
            described["authorized_operations"] = authorized_operations(
                ctx, ResourceType.GROUP, group_id
            )
        groups.append(described)
    return {"groups": groups}


def _delete_groups_error(request, error: Error) -> dict:
    return {
        "results": [
            {"group_id": group_id, "error_code": error} for group_id in request.groups_names
        ]
    }


# DeleteGroups v3's per-group ErrorMessage (ignorable: older versions leave it out), the
# cause of a refusal as the messages of Kafka's exceptions for the same codes say it.
_DELETE_MESSAGES = {
    Error.NON_EMPTY_GROUP: "The group is not empty.",
    Error.GROUP_ID_NOT_FOUND: "The group id does not exist.",
    Error.GROUP_AUTHORIZATION_FAILED: "Not authorized to access group.",
    Error.NOT_COORDINATOR: "This is not the correct coordinator.",
    Error.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    Error.COORDINATOR_LOAD_IN_PROGRESS: (
        "The coordinator is loading and hence can't process requests."
    ),
    Error.INVALID_GROUP_ID: "The configured groupId is invalid.",
}


@api(ApiKey.DELETE_GROUPS, versions=(0, 3), roles=Role.BROKER, error_response=_delete_groups_error)
async def handle_delete_groups(ctx: RequestContext, request) -> dict:
    results = []
    for group_id in request.groups_names:
        if not group_allowed(ctx, Operation.DELETE, group_id):
            error = Error.GROUP_AUTHORIZATION_FAILED
        else:
            error = await ctx.group_coordinator.delete_group(group_id)
        results.append(
            {
                "group_id": group_id,
                "error_code": error,
                "error_message": _DELETE_MESSAGES.get(error),
            }
        )
    return {"results": results}
