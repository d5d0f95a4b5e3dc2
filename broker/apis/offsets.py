"""Committed offsets: OffsetCommit, OffsetFetch (one group, or many from v8), OffsetDelete.

The group coordinator (broker/coordinator) stores them in `__consumer_offsets`; these
handlers only translate requests of every version and shape the answers.

With an authorizer, Kafka's rules: committing needs READ on the group
(GROUP_AUTHORIZATION_FAILED for every partition) and on each topic
(TOPIC_AUTHORIZATION_FAILED for that topic's partitions, the others are committed); fetching
needs DESCRIBE on the group, and a topic the principal may not DESCRIBE is refused when named
and left out of an all-topics answer; OffsetDelete needs DELETE on the group and READ on each
topic.
"""

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import group_allowed, topic_allowed
from minibroker.coordinator.group.service import CommitRequest
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation

NO_OFFSET = -1
NO_LEADER_EPOCH = -1


def offset_commit_error(request, error: Error) -> dict:
    """OffsetCommit's answer (and TxnOffsetCommit's, the same shape) with `error` for every
    partition asked, topics by name or, from v10, by id."""
    return {
        "topics": [
            {
                "name": getattr(topic, "name", None),
                "topic_id": getattr(topic, "topic_id", None),
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": error}
                    for p in topic.partitions
                ],
            }
            for topic in request.topics
        ]
    }


@api(ApiKey.OFFSET_COMMIT, versions=(2, 10), roles=Role.BROKER, error_response=offset_commit_error)
async def handle_offset_commit(ctx: RequestContext, request) -> dict:
    # v9 renamed the field (KIP-848); older versions call it generation_id.
    generation: int = (
        request.generation_id_or_member_epoch
        if hasattr(request, "generation_id_or_member_epoch")
        else getattr(request, "generation_id", -1)
    )
    # v10 (KIP-848) names each topic by id: an id this broker does not know is
    # UNKNOWN_TOPIC_ID for the topic's partitions, as Kafka's handleOffsetCommitRequest does.
    names = [_topic_name(ctx, topic) for topic in request.topics]
    offsets = {
        (name, partition.partition_index): (
            partition.committed_offset,
            getattr(partition, "committed_leader_epoch", NO_LEADER_EPOCH),
            partition.committed_metadata,
        )
        for topic, name in zip(request.topics, names, strict=True)
        if name is not None
        for partition in topic.partitions
    }
    results: dict = {}
    if ctx.authorizer is not None:
        if not group_allowed(ctx, Operation.READ, request.group_id):
            results = dict.fromkeys(offsets, Error.GROUP_AUTHORIZATION_FAILED)
        else:
            refused = {name for name in names if name is not None} - {
                name
                for name in names
                if name is not None and topic_allowed(ctx, Operation.READ, name)
            }
            results = {
                key: Error.TOPIC_AUTHORIZATION_FAILED for key in offsets if key[0] in refused
            }
        offsets = {key: value for key, value in offsets.items() if key not in results}
    if offsets:
        results |= await ctx.group_coordinator.commit(
            CommitRequest(
                request.group_id,
                generation,
                request.member_id,
                getattr(request, "group_instance_id", None),
                offsets,
            )
        )
    return {
        "topics": [
            {
                "name": name,
                "topic_id": getattr(topic, "topic_id", None),
                "partitions": [
                    {
                        "partition_index": partition.partition_index,
                        "error_code": Error.UNKNOWN_TOPIC_ID
                        if name is None
                        else results[(name, partition.partition_index)],
                    }
                    for partition in topic.partitions
                ],
            }
            for topic, name in zip(request.topics, names, strict=True)
        ]
    }


def _topic_name(ctx: RequestContext, topic) -> str | None:
    """The topic's name: its own before v10, the name of its id from v10 on (None when this
    broker knows no topic of that id)."""
    if not hasattr(topic, "topic_id"):
        return topic.name
    known = ctx.replica_manager.metadata.topic_by_id(topic.topic_id) if topic.topic_id else None
    return known.name if known is not None else None


def _topic_id(ctx: RequestContext, name: str):
    """The id of a topic this broker knows, else None (the zero id on the wire)."""
    known = ctx.replica_manager.metadata.topics.get(name)
    return known.topic_id if known is not None else None


def _fetched_group(
    ctx: RequestContext,
    group_id: str,
    topics,
    require_stable: bool = False,
    member: tuple[str | None, int] = (None, -1),
) -> dict:
    """One group's committed offsets; ``topics`` None asks for all of them. With
    ``require_stable`` (v7+, KIP-447) a partition whose offset a transaction holds pending
    answers UNSTABLE_OFFSET_COMMIT, as Kafka does; without it, the last committed offset."""
    wanted = None
    unknown_ids: list = []  # v10: topics named by an id this broker does not know
    if topics is not None:
        wanted = []
        for topic in topics:
            name = _topic_name(ctx, topic)
            if name is None:
                unknown_ids.append(topic)
                continue
            wanted += [(name, index) for index in getattr(topic, "partition_indexes", ())]
    if not group_allowed(ctx, Operation.DESCRIBE, group_id):
        error, committed = Error.GROUP_AUTHORIZATION_FAILED, dict.fromkeys(wanted or ())
    else:
        error, committed = ctx.group_coordinator.fetch_offsets(group_id, wanted)
        if error == Error.NONE:
            # v9+ (KIP-848): a consumer group's member names its epoch, which must be current.
            error = ctx.group_coordinator.validate_offset_fetch(group_id, *member)
            if error != Error.NONE:
                committed = {}
    if error != Error.NONE and wanted is not None and ctx.version < 2:
        # v0-1 have no group-level error: every partition carries it.
        committed = dict.fromkeys(wanted)
    by_topic: dict[str, list[dict]] = {}
    described: dict[str, bool] = {}
    unstable = (
        ctx.group_coordinator.unstable_offsets(group_id)
        if require_stable and error == Error.NONE
        else set()
    )
    for (topic, index), value in committed.items():
        partition_error = error if ctx.version < 2 else Error.NONE
        if (topic, index) in unstable:
            partition_error, value = Error.UNSTABLE_OFFSET_COMMIT, None
        if ctx.authorizer is not None and error == Error.NONE:
            if topic not in described:
                described[topic] = topic_allowed(ctx, Operation.DESCRIBE, topic)
            if not described[topic]:
                if wanted is None:
                    continue  # all topics asked for: the refused ones are left out
                partition_error, value = Error.TOPIC_AUTHORIZATION_FAILED, None
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": index,
                "committed_offset": value.offset if value else NO_OFFSET,
                "committed_leader_epoch": value.leader_epoch if value else NO_LEADER_EPOCH,
                "metadata": value.metadata if value else "",
                "error_code": partition_error,
            }
        )
    answered = [
        {"name": topic, "topic_id": _topic_id(ctx, topic), "partitions": partitions}
        for topic, partitions in by_topic.items()
    ]
    if ctx.version >= 10:
        # By id (KIP-848): a committed topic that no longer exists has no id to name it by;
        # an unknown id asked for is UNKNOWN_TOPIC_ID for each of its partitions.
        answered = [topic for topic in answered if topic["topic_id"] is not None]
        if error == Error.NONE:
            answered += [
                {
                    "topic_id": topic.topic_id,
                    "partitions": [
                        {
                            "partition_index": index,
                            "committed_offset": NO_OFFSET,
                            "committed_leader_epoch": NO_LEADER_EPOCH,
                            "metadata": "",
                            "error_code": Error.UNKNOWN_TOPIC_ID,
                        }
                        for index in topic.partition_indexes
                    ],
                }
                for topic in unknown_ids
            ]
    return {"group_id": group_id, "error_code": error, "topics": answered}


def _offset_fetch_error(request, error: Error) -> dict:
    if hasattr(request, "groups"):  # v8+: several groups
        return {
            "groups": [
                {"group_id": group.group_id, "error_code": error, "topics": ()}
                for group in request.groups
            ]
        }
    return {
        "error_code": error,
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": index,
                        "committed_offset": -1,
                        "metadata": "",
                        "error_code": error,
                    }
                    for index in topic.partition_indexes
                ],
            }
            for topic in request.topics or ()
        ],
    }


@api(ApiKey.OFFSET_FETCH, versions=(1, 10), roles=Role.BROKER, error_response=_offset_fetch_error)
async def handle_offset_fetch(ctx: RequestContext, request) -> dict:
    require_stable = bool(getattr(request, "require_stable", False))
    if ctx.version >= 8:
        return {
            "groups": [
                _fetched_group(
                    ctx,
                    group.group_id,
                    group.topics,
                    require_stable,
                    (getattr(group, "member_id", None), getattr(group, "member_epoch", -1)),
                )
                for group in request.groups
            ]
        }
    return _fetched_group(ctx, request.group_id, request.topics, require_stable)


def _offset_delete_error(request, error: Error) -> dict:
    return {"error_code": error, "topics": ()}


@api(ApiKey.OFFSET_DELETE, versions=(0, 0), roles=Role.BROKER, error_response=_offset_delete_error)
async def handle_offset_delete(ctx: RequestContext, request) -> dict:
    if not group_allowed(ctx, Operation.DELETE, request.group_id):
        return {"error_code": Error.GROUP_AUTHORIZATION_FAILED, "topics": ()}
    partitions = [
        (topic.name, partition.partition_index)
        for topic in request.topics
        for partition in topic.partitions
        if topic_allowed(ctx, Operation.READ, topic.name)
    ]
    error, results = await ctx.group_coordinator.delete_offsets(request.group_id, partitions)
    if error != Error.NONE:
        return {"error_code": error, "topics": ()}
    results = {
        **{
            (topic.name, partition.partition_index): Error.TOPIC_AUTHORIZATION_FAILED
            for topic in request.topics
            for partition in topic.partitions
            if not topic_allowed(ctx, Operation.READ, topic.name)
        },
        **results,
    }
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), partition_error in results.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": index, "error_code": partition_error}
        )
    return {
        "error_code": Error.NONE,
        "topics": [
            {"name": topic, "partitions": partitions} for topic, partitions in by_topic.items()
        ],
    }
