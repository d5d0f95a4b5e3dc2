"""Kafka Streams' rebalance protocol (KIP-1071): StreamsGroupHeartbeat and StreamsGroupDescribe.

The handlers translate the requests into calls on the group coordinator
(coordinator/group/service.py, whose streams groups are coordinator/group/streams_group.py
held in streams_entry.py) and shape the answers, as Kafka 4.4's KafkaApis does:

- StreamsGroupHeartbeat (v0-v1): UNSUPPORTED_VERSION while the cluster's ``streams.version``
  is 0 (Kafka's isStreamsGroupProtocolEnabled); READ on the group
  (GROUP_AUTHORIZATION_FAILED); with a topology (a joining member), DESCRIBE on every topic it
  names: source, repartition and changelog topics (TOPIC_AUTHORIZATION_FAILED, naming the
  topics). The internal topics the coordinator finds missing (the MISSING_INTERNAL_TOPICS
  status) are created by this broker through the controller with the partition count the
  topology implies and the configs the member sent, if the caller may CREATE them (on the
  cluster or the topic); the topics it may not create are named in the status instead.
- StreamsGroupDescribe (v0-v1): DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED),
  GROUP_ID_NOT_FOUND for a group of another type; v1's topology description answers
  NOT_STORED (1) when asked for, as StreamsGroupTopologyDescriptionUpdate (93) is not served,
  and heartbeats never ask for it (TopologyDescriptionRequired false).

- StreamsGroupTopologyDescriptionUpdate (93, v0; KIP-1331): Kafka 4.4 stores a member's
  topology description only through a broker plugin
  (``group.streams.topology.description.plugin.class``), and without one, its default, answers
  every update UNSUPPORTED_VERSION ("The broker has no streams group topology description
  plugin configured.", GroupCoordinatorService.throwIfStreamsGroupTopologyDescriptionUpdateInvalid)
  after KafkaApis' checks: UNSUPPORTED_VERSION while ``streams.version`` is 0, READ on the
  group (GROUP_AUTHORIZATION_FAILED). minibroker takes no plugins, so it answers as that
  default broker does, and its heartbeats never ask for a description (TopologyDescriptionRequired
  false), so Kafka Streams never sends one.

Departures: the Interactive Queries endpoint map (PartitionsByUserEndpoint) is sent whenever
the member's endpoint information epoch differs from the group epoch, which stands in for
Kafka's separate endpoint epoch; the internal topics are created before the answer (Kafka
creates them asynchronously after it), so the next heartbeat finds them.
"""

from collections.abc import Iterable

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import (
    authorized_operations,
    group_allowed,
    may_create_topic,
    topic_allowed,
)
from minibroker.apis.topics import create_topics_through_controller
from minibroker.cluster.controller_client import build_request
from minibroker.common.features import STREAMS_VERSION
from minibroker.coordinator.group.streams_assignor import TaskId
from minibroker.coordinator.group.streams_group import (
    Status,
    StreamsHeartbeatRequest,
    StreamsHeartbeatResult,
)
from minibroker.coordinator.group.streams_log_format import (
    CopartitionGroup,
    Subtopology,
    TopicInfo,
    Topology,
)
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation, ResourceType

# Kafka's "operations not requested" marker for authorized-operations fields.
_OPERATIONS_OMITTED = -(2**31)
# StreamsGroupDescribeResponse's TopologyDescriptionStatus.
_NOT_REQUESTED = 0
_NOT_STORED = 1


def _heartbeat_error(request, error: Error, message: str | None = None) -> dict:
    return {
        "error_code": error,
        "error_message": message,
        "member_id": request.member_id,
        "member_epoch": -1,
        "heartbeat_interval_ms": 0,
        "acceptable_recovery_lag_legacy": 0,
        "task_offset_interval_ms": 0,
        "endpoint_information_epoch": 0,
    }


def _topic_info(info) -> TopicInfo:
    return TopicInfo(
        info.name,
        int(info.partitions),
        int(info.replication_factor),
        tuple((kv.key, kv.value) for kv in info.topic_configs),
    )


def _topology(topology) -> Topology | None:
    if topology is None:
        return None
    return Topology(
        int(topology.epoch),
        tuple(
            Subtopology(
                s.subtopology_id,
                tuple(s.source_topics),
                tuple(s.source_topic_regex),
                tuple(_topic_info(i) for i in s.state_changelog_topics),
                tuple(s.repartition_sink_topics),
                tuple(_topic_info(i) for i in s.repartition_source_topics),
                tuple(
                    CopartitionGroup(
                        tuple(int(i) for i in g.source_topics),
                        tuple(int(i) for i in g.source_topic_regex),
                        tuple(int(i) for i in g.repartition_source_topics),
                    )
                    for g in s.copartition_groups
                ),
            )
            for s in topology.subtopologies
        ),
    )


def _tasks(task_ids) -> set[TaskId] | None:
    if task_ids is None:
        return None
    return {(t.subtopology_id, int(p)) for t in task_ids for p in t.partitions}


def _offsets(task_offsets) -> dict[TaskId, int] | None:
    if task_offsets is None:
        return None
    return {(t.subtopology_id, int(t.partition)): int(t.offset) for t in task_offsets}


def _task_ids(tasks: Iterable[TaskId] | None) -> list[dict] | None:
    if tasks is None:
        return None
    by_sub: dict[str, list[int]] = {}
    for sub, partition in sorted(tasks):
        by_sub.setdefault(sub, []).append(partition)
    return [{"subtopology_id": sub, "partitions": parts} for sub, parts in by_sub.items()]


def _required_topics(topology: Topology) -> set[str]:
    """Kafka's KafkaApis: the topics a joining member's topology names."""
    names: set[str] = set()
    for s in topology.subtopologies:
        names.update(s.source_topics)
        names.update(s.repartition_sink_topics)
        names.update(i.name for i in s.repartition_source_topics)
        names.update(i.name for i in s.state_changelog_topics)
    return names


async def _create_internal_topic(ctx: RequestContext, info: TopicInfo) -> Error:
    request = build_request(
        ApiKey.CREATE_TOPICS,
        {
            "topics": [
                {
                    "name": info.name,
                    "num_partitions": info.partitions,
                    # 0: the broker's default (default.replication.factor).
                    "replication_factor": info.replication_factor or -1,
                    "assignments": (),
                    "configs": [{"name": k, "value": v} for k, v in info.configs],
                }
            ],
            "timeout": 10_000,
            "validate_only": False,
        },
    )
    return await create_topics_through_controller(ctx, request)


async def _create_internal_topics(ctx: RequestContext, result: StreamsHeartbeatResult) -> None:
    """The MISSING_INTERNAL_TOPICS path: create what the caller may create, and say which
    topics it may not (Kafka's KafkaApis.handleStreamsGroupHeartbeat)."""
    unauthorized = sorted(
        name for name in result.topics_to_create if not may_create_topic(ctx, name)
    )
    for name, info in result.topics_to_create.items():
        if name in unauthorized:
            continue
        error = await _create_internal_topic(ctx, info)
        if error not in (Error.NONE, Error.TOPIC_ALREADY_EXISTS):
            result.statuses.append(
                (
                    Status.MISSING_INTERNAL_TOPICS,
                    f"Internal topic {name} could not be created: {error.name}",
                )
            )
    if unauthorized:
        result.statuses.append(
            (
                Status.MISSING_INTERNAL_TOPICS,
                f"Unauthorized to CREATE on topics {', '.join(unauthorized)}.",
            )
        )


def _endpoints(ctx: RequestContext, group_id: str) -> list[dict]:
    """PartitionsByUserEndpoint: each member endpoint's source topic partitions."""
    _, _, entry = ctx.group_coordinator.describe_streams_group(group_id)
    if entry is None or entry.streams.topology is None:
        return []
    sources = {
        s.subtopology_id: list(s.source_topics) + [i.name for i in s.repartition_source_topics]
        for s in entry.streams.topology.subtopologies
    }

    def partitions(tasks: set[TaskId]) -> list[dict]:
        by_topic: dict[str, set[int]] = {}
        for sub, partition in tasks:
            for topic in sources.get(sub, ()):
                by_topic.setdefault(topic, set()).add(partition)
        return [{"topic": t, "partitions": sorted(p)} for t, p in sorted(by_topic.items())]

    endpoints = []
    for member in entry.streams.members.values():
        if member.user_endpoint is None:
            continue
        host, port = member.user_endpoint
        endpoints.append(
            {
                "user_endpoint": {"host": host, "port": port},
                "active_partitions": partitions(member.assigned.active),
                "standby_partitions": partitions(member.assigned.standby),
            }
        )
    return endpoints


@api(
    ApiKey.STREAMS_GROUP_HEARTBEAT,
    versions=(0, 1),
    roles=Role.BROKER,
    error_response=_heartbeat_error,
)
async def handle_streams_group_heartbeat(ctx: RequestContext, request) -> dict:
    if ctx.replica_manager.finalized_features.levels.get(STREAMS_VERSION, 0) < 1:
        return _heartbeat_error(
            request, Error.UNSUPPORTED_VERSION, "The streams group protocol is not enabled."
        )
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return _heartbeat_error(request, Error.GROUP_AUTHORIZATION_FAILED)
    topology = _topology(request.topology)
    if topology is not None:
        denied = sorted(
            name
            for name in _required_topics(topology)
            if not topic_allowed(ctx, Operation.DESCRIBE, name)
        )
        if denied:
            return _heartbeat_error(
                request,
                Error.TOPIC_AUTHORIZATION_FAILED,
                f"Unauthorized topics {', '.join(denied)}",
            )
    endpoint = request.user_endpoint
    heartbeat = StreamsHeartbeatRequest(
        member_id=request.member_id,
        member_epoch=int(request.member_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=int(request.rebalance_timeout_ms),
        topology=topology,
        process_id=request.process_id,
        user_endpoint=(endpoint.host, int(endpoint.port)) if endpoint is not None else None,
        client_tags=(
            {kv.key: kv.value for kv in request.client_tags}
            if request.client_tags is not None
            else None
        ),
        active=_tasks(request.active_tasks),
        standby=_tasks(request.standby_tasks),
        warmup=_tasks(request.warmup_tasks),
        task_offsets=_offsets(request.task_offsets),
        task_end_offsets=_offsets(request.task_end_offsets),
        shutdown_application=bool(request.shutdown_application),
        client_id=ctx.header.client_id or "",
        client_host=ctx.connection.host,
    )
    coordinator = ctx.group_coordinator
    result = await coordinator.streams_heartbeat(request.group_id, heartbeat)
    if result.error != Error.NONE:
        return _heartbeat_error(request, result.error, result.message)
    if result.topics_to_create:
        await _create_internal_topics(ctx, result)
    statuses = result.statuses
    if ctx.version < 1:
        # MISSING_CLIENT_TAGS is v1's (the v0 client does not know the code).
        statuses = [s for s in statuses if s[0] != Status.MISSING_CLIENT_TAGS]
    group_epoch = _group_epoch(ctx, request.group_id)
    endpoints = None
    if int(request.endpoint_information_epoch) != group_epoch:
        endpoints = _endpoints(ctx, request.group_id)
    lag = result.acceptable_recovery_lag
    return {
        "error_code": Error.NONE,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval_ms": result.heartbeat_interval_ms,
        "acceptable_recovery_lag_legacy": min(lag, 2**31 - 1),
        "acceptable_recovery_lag": lag,
        "task_offset_interval_ms": coordinator.streams_task_offset_interval_ms(request.group_id),
        "status": [{"status_code": int(code), "status_detail": detail} for code, detail in statuses]
        or None,
        "active_tasks": _task_ids(result.active),
        "standby_tasks": _task_ids(result.standby),
        "warmup_tasks": _task_ids(result.warmup),
        "topology_description_required": False,
        "endpoint_information_epoch": group_epoch,
        "partitions_by_user_endpoint": endpoints,
    }


def _group_epoch(ctx: RequestContext, group_id: str) -> int:
    _, _, entry = ctx.group_coordinator.describe_streams_group(group_id)
    return entry.streams.group_epoch if entry is not None else 0


def _described_topic_info(info: TopicInfo) -> dict:
    return {
        "name": info.name,
        "partitions": info.partitions,
        "replication_factor": info.replication_factor,
        "topic_configs": [{"key": k, "value": v} for k, v in info.configs],
    }


def _described_offsets(offsets: dict[TaskId, int]) -> list[dict]:
    return [
        {"subtopology_id": sub, "partition": partition, "offset": offset}
        for (sub, partition), offset in sorted(offsets.items())
    ]


def _assignment(assignment) -> dict:
    return {
        "active_tasks": _task_ids(assignment.active),
        "standby_tasks": _task_ids(assignment.standby),
        "warmup_tasks": _task_ids(assignment.warmup),
    }


def _described_group(ctx: RequestContext, group_id: str, request) -> dict:
    entry: dict = {
        "error_code": Error.NONE,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "topology": None,
        "members": (),
        "authorized_operations": _OPERATIONS_OMITTED,
        "topology_description_status": _NOT_REQUESTED,
    }
    if not group_allowed(ctx, Operation.DESCRIBE, group_id):
        return {**entry, "error_code": Error.GROUP_AUTHORIZATION_FAILED}
    error, message, found = ctx.group_coordinator.describe_streams_group(group_id)
    if error != Error.NONE or found is None:
        return {**entry, "error_code": error, "error_message": message}
    group = found.streams
    topology = None
    if group.topology is not None:
        topology = {
            "epoch": group.topology.epoch,
            "subtopologies": [
                {
                    "subtopology_id": s.subtopology_id,
                    "source_topics": list(s.source_topics),
                    "repartition_sink_topics": list(s.repartition_sink_topics),
                    "state_changelog_topics": [
                        _described_topic_info(i) for i in s.state_changelog_topics
                    ],
                    "repartition_source_topics": [
                        _described_topic_info(i) for i in s.repartition_source_topics
                    ],
                }
                for s in group.topology.subtopologies
            ],
        }
    members = []
    for member in group.members.values():
        endpoint = member.user_endpoint
        members.append(
            {
                "member_id": member.member_id,
                "member_epoch": member.member_epoch,
                "instance_id": member.instance_id,
                "rack_id": member.rack_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "topology_epoch": member.topology_epoch,
                "process_id": member.process_id,
                "user_endpoint": (
                    {"host": endpoint[0], "port": endpoint[1]} if endpoint is not None else None
                ),
                "client_tags": [
                    {"key": k, "value": v} for k, v in sorted(member.client_tags.items())
                ],
                # What the member last reported (Kafka's MemberTaskOffsets).
                "task_offsets": _described_offsets(member.task_offsets),
                "task_end_offsets": _described_offsets(member.task_end_offsets),
                "assignment": _assignment(member.assigned),
                "target_assignment": _assignment(
                    group.target.get(member.member_id, type(member.assigned)())
                ),
                "is_classic": False,
            }
        )
    entry.update(
        group_state=found.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        topology=topology,
        members=members,
        assignor_name="sticky",
    )
    if getattr(request, "include_topology_description", False):
        entry["topology_description_status"] = _NOT_STORED
    if request.include_authorized_operations:
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
                "members": (),
            }
            for group_id in request.group_ids
        ]
    }


@api(
    ApiKey.STREAMS_GROUP_DESCRIBE,
    versions=(0, 1),
    roles=Role.BROKER,
    error_response=_describe_error,
)
async def handle_streams_group_describe(ctx: RequestContext, request) -> dict:
    return {"groups": [_described_group(ctx, group_id, request) for group_id in request.group_ids]}


def _topology_update_error(request, error: Error, message: str | None = None) -> dict:
    return {"error_code": error, "error_message": message}


@api(
    ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE,
    versions=(0, 0),
    roles=Role.BROKER,
    error_response=_topology_update_error,
)
async def handle_streams_group_topology_description_update(ctx: RequestContext, request) -> dict:
    """Kafka 4.4's KafkaApis.handleStreamsGroupTopologyDescriptionUpdate and
    GroupCoordinatorService.streamsGroupTopologyDescriptionUpdate on a broker without a
    topology description plugin (see the module's docstring)."""
    # The messages are those of Kafka's Errors.exception() (getErrorResponse).
    if ctx.replica_manager.finalized_features.levels.get(STREAMS_VERSION, 0) < 1:
        return _topology_update_error(
            request, Error.UNSUPPORTED_VERSION, "The version of API is not supported."
        )
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return _topology_update_error(
            request, Error.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."
        )
    return _topology_update_error(
        request,
        Error.UNSUPPORTED_VERSION,
        "The broker has no streams group topology description plugin configured.",
    )
