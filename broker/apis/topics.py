"""CreateTopics, DeleteTopics and CreatePartitions: decided by the controller.

On the controller node they are handled there; a broker forwards them and relays the answer.
When the controller cannot be reached, every topic gets REQUEST_TIMED_OUT (retriable), as a
Kafka broker answers when its forwarding times out.

With an authorizer the receiving node checks each topic first, as Kafka's KafkaApis does:
CREATE on the cluster or the topic for CreateTopics, DELETE for DeleteTopics, ALTER for
CreatePartitions. Refused topics answer TOPIC_AUTHORIZATION_FAILED and the controller decides
only the others. Then the client's ``controller_mutation_rate`` (KIP-599): the topics over it
answer THROTTLING_QUOTA_EXCEEDED here (see _mutation_quota for why here).
"""

import dataclasses
import time
from collections.abc import Callable
from typing import TypeVar

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import may_create_topic, topic_allowed
from minibroker.apis.client_quotas import with_throttle_time
from minibroker.apis.forwarding import ForwardingFailed, decided_by_controller
from minibroker.cluster.controller_client import build_request, is_broker_channel
from minibroker.common.names import CONTROLLER_CLIENT_ID
from minibroker.common.quota_manager import principal_user
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation

# A topic as the request names it: a kio entry (CreatableTopic, ...) or, in DeleteTopics
# v0-5, its name.
Item = TypeVar("Item")
# One response entry for a topic of the request: (topic, error, message) -> entry.
Refusal = Callable[[Item, Error, str | None], dict]


async def _decided_by_controller(
    ctx: RequestContext,
    request,
    *,
    method: str,
    items: str,
    results: str,
    refused: Refusal[Item],
):
    """The controller's answer; when it is unreachable, ``refused`` entries for every topic
    (the request's ``items``) under the response's ``results``."""

    def unreachable(failure: ForwardingFailed) -> dict:
        entries = [refused(item, failure.error, str(failure)) for item in getattr(request, items)]
        return {results: entries}

    return await decided_by_controller(ctx, request, method, unreachable)


# KIP-599: the versions from which a client understands THROTTLING_QUOTA_EXCEEDED, so that
# the controller_mutation_rate is applied strictly (older versions: accepted, then throttled).
STRICT_SINCE = {ApiKey.CREATE_TOPICS: 6, ApiKey.DELETE_TOPICS: 5, ApiKey.CREATE_PARTITIONS: 3}
THROTTLED_MESSAGE = "The throttling quota has been exceeded."


@dataclasses.dataclass
class _Mutations:
    """What the controller mutation quota decided for a request: the indexes (in the topics
    it was given) of those refused, the throttle time, and the partitions each accepted topic
    took (to give back for the topics the controller then refuses)."""

    refused: set[int] = dataclasses.field(default_factory=set)
    throttle_ms: int = 0
    taken: list[tuple[object, int]] = dataclasses.field(default_factory=list)


def _mutation_quota(
    ctx: RequestContext, candidates: list, permits: Callable[[Item], int]
) -> _Mutations:
    """Kafka's controller mutation quota (KIP-599, ControllerMutationQuotaManager) for the
    topics the request goes on with: those over the client's ``controller_mutation_rate``
    are refused (only when the request version is strict) and the throttle time is set; the
    throttle mutes the channel as a byte-rate throttle does.

    Kafka enforces it where the request is decided: the broker in ZooKeeper mode (only the
    active controller accepts these requests there), the controller in KRaft mode, with the
    client's principal and client id from the forwarding Envelope. A minibroker broker forwards
    the client's request under its own channel's client id, without the client's principal,
    so the quota is applied here on the node that received it, before forwarding, from the
    quotas every broker has (the controller pushes them). A client that spreads its requests
    over several brokers gets the rate once per broker."""
    quotas = ctx.quotas
    if (
        quotas is None
        or not quotas.mutation.enabled
        or ctx.header.client_id == CONTROLLER_CLIENT_ID
        or is_broker_channel(ctx.header.client_id)
    ):
        return _Mutations()
    strict = ctx.header.api_version >= STRICT_SINCE[ApiKey(ctx.header.api_key)]
    values = [permits(item) for item in candidates]
    accepted, throttle_ms = quotas.mutation.admit(
        principal_user(ctx.connection.principal),
        ctx.header.client_id or "",
        values,
        strict,
        time.monotonic_ns() // 1_000_000,
    )
    if throttle_ms:
        ctx.connection.throttle_ms = max(ctx.connection.throttle_ms, throttle_ms)
    return _Mutations(
        {index for index, ok in enumerate(accepted) if not ok},
        throttle_ms,
        [
            (item, value)
            for item, value, ok in zip(candidates, values, accepted, strict=True)
            if ok and value
        ],
    )


def _give_back(ctx: RequestContext, mutations: _Mutations, entries) -> None:
    """The partitions of the topics the controller refused go back to the client's bucket."""
    if not mutations.taken or ctx.quotas is None:
        return
    errors: dict = {}
    for entry in entries:
        if isinstance(entry, dict):
            name, topic_id, code = entry.get("name"), entry.get("topic_id"), entry["error_code"]
        else:
            name, topic_id, code = entry.name, getattr(entry, "topic_id", None), entry.error_code
        errors[name] = code
        if topic_id is not None:
            errors[topic_id] = code
    refund = 0
    for item, value in mutations.taken:
        name = item if isinstance(item, str) else getattr(item, "name", None)
        key = name if name is not None else getattr(item, "topic_id", None)
        if errors.get(key, Error.NONE) != Error.NONE:
            refund += value
    if refund:
        ctx.quotas.mutation.refund(
            principal_user(ctx.connection.principal),
            ctx.header.client_id or "",
            refund,
            time.monotonic_ns() // 1_000_000,
        )


async def _decided_if_allowed(
    ctx: RequestContext,
    request,
    allowed: Callable[[Item], bool],
    *,
    method: str,
    items: str,
    results: str,
    refused: Refusal[Item],
    permits: Callable[[Item], int],
):
    """As _decided_by_controller, for the topics that ``allowed(topic)``; the others are
    answered TOPIC_AUTHORIZATION_FAILED here. Then the controller mutation quota: the
    ``permits(topic)`` (partitions created or deleted) of the allowed ones count, those over
    it are answered THROTTLING_QUOTA_EXCEEDED here (strict versions) and the answer carries the
    throttle time; the topics the controller refuses give their partitions back."""
    how = {"method": method, "items": items, "results": results}
    every = list(getattr(request, items))
    kept = every if ctx.authorizer is None else [item for item in every if allowed(item)]
    mutations = _mutation_quota(ctx, kept, permits)
    if mutations.refused:
        kept = [item for index, item in enumerate(kept) if index not in mutations.refused]
    if len(kept) == len(every):
        response = await _decided_by_controller(ctx, request, refused=refused, **how)
        entries = response[results] if isinstance(response, dict) else getattr(response, results)
        _give_back(ctx, mutations, entries)
        if mutations.throttle_ms:
            return with_throttle_time(response, mutations.throttle_ms)
        return response
    answers: list = []
    if kept:
        narrowed = dataclasses.replace(request, **{items: tuple(kept)})
        response = await _decided_by_controller(ctx, narrowed, refused=refused, **how)
        if isinstance(response, dict):
            answers = list(response[results])
        else:
            answers = [dataclasses.asdict(entry) for entry in getattr(response, results)]
        _give_back(ctx, mutations, answers)
    kept_ids = {id(item) for item in kept}
    denied = [
        refused(item, Error.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        if ctx.authorizer is not None and not allowed(item)
        else refused(item, Error.THROTTLING_QUOTA_EXCEEDED, THROTTLED_MESSAGE)
        for item in every
        if id(item) not in kept_ids
    ]
    return {results: denied + answers, "throttle_time": mutations.throttle_ms}


def _created_entry(topic, error: Error, message: str | None) -> dict:
    return {
        "name": topic.name,
        "topic_id": None,
        "error_code": error,
        "error_message": message,
        "num_partitions": -1,
        "replication_factor": -1,
    }


def _create_error(request, error: Error) -> dict:
    return {"topics": [_created_entry(topic, error, None) for topic in request.topics]}


@api(
    ApiKey.CREATE_TOPICS,
    versions=(2, 7),
    roles=Role.BOTH,
    controller_decides=True,
    error_response=_create_error,
)
async def handle_create(ctx: RequestContext, request):
    return await _decided_if_allowed(
        ctx,
        request,
        lambda topic: may_create_topic(ctx, topic.name),
        method="create_topics",
        items="topics",
        results="topics",
        refused=_created_entry,
        permits=lambda topic: _partitions_created(ctx, topic),
    )


def _partitions_created(ctx: RequestContext, topic) -> int:
    """What a topic of a CreateTopics counts against the controller mutation quota: its
    partitions (Kafka's rule: the assignments' count, else the number asked for, else the
    broker default)."""
    if topic.assignments:
        return len(topic.assignments)
    return topic.num_partitions if topic.num_partitions > 0 else ctx.config.num_partitions


def _partition_count(ctx: RequestContext, name: str | None) -> int:
    """The partitions a topic has now (0 when this node does not know it)."""
    if name is None:
        return 0
    if ctx.replicas is not None:
        known = ctx.replicas.metadata.topic(name)
        return 0 if known is None else len(known.partitions)
    topic = ctx.controller_service.state.topics.get(name)
    return 0 if topic is None else len(topic.partitions)


def _delete_error(request, error: Error) -> dict:
    names = getattr(request, "topic_names", None)  # v0-5 name topics; v6+ may give ids
    topics = (
        [{"name": name} for name in names]
        if names is not None
        else [{"name": topic.name, "topic_id": topic.topic_id} for topic in request.topics]
    )
    return {"responses": [{**topic, "error_code": error} for topic in topics]}


@api(
    ApiKey.DELETE_TOPICS,
    versions=(1, 6),
    roles=Role.BOTH,
    controller_decides=True,
    error_response=_delete_error,
)
async def handle_delete(ctx: RequestContext, request):
    if hasattr(request, "topic_names"):

        def refused(name, error: Error, message: str | None) -> dict:
            return {"name": name, "topic_id": None, "error_code": error}

        return await _decided_if_allowed(
            ctx,
            request,
            lambda name: topic_allowed(ctx, Operation.DELETE, name),
            method="delete_topics",
            items="topic_names",
            results="responses",
            refused=refused,
            permits=lambda name: _partition_count(ctx, name),
        )

    def refused_topic(topic, error: Error, message: str | None) -> dict:
        return {"name": topic.name, "topic_id": topic.topic_id, "error_code": error}

    def allowed(topic) -> bool:
        name = topic.name or _name_of_id(ctx, topic.topic_id)
        # A topic id nobody knows is the controller's to answer (UNKNOWN_TOPIC_ID).
        return name is None or topic_allowed(ctx, Operation.DELETE, name)

    return await _decided_if_allowed(
        ctx,
        request,
        allowed,
        method="delete_topics",
        items="topics",
        results="responses",
        refused=refused_topic,
        permits=lambda topic: _partition_count(ctx, topic.name or _name_of_id(ctx, topic.topic_id)),
    )


def _name_of_id(ctx: RequestContext, topic_id) -> str | None:
    if topic_id is None:
        return None
    if ctx.replicas is not None:
        known = ctx.replicas.metadata.topic_by_id(topic_id)
        return None if known is None else known.name
    topic = ctx.controller_service.state.topic_by_id(topic_id)
    return None if topic is None else topic.name


def _create_partitions_error(request, error: Error) -> dict:
    return {
        "results": [
            {"name": topic.name, "error_code": error, "error_message": None}
            for topic in request.topics
        ]
    }


@api(
    ApiKey.CREATE_PARTITIONS,
    versions=(0, 3),
    roles=Role.BOTH,
    controller_decides=True,
    error_response=_create_partitions_error,
)
async def handle_create_partitions(ctx: RequestContext, request):
    def refused(topic, error: Error, message: str | None) -> dict:
        return {"name": topic.name, "error_code": error, "error_message": message}

    return await _decided_if_allowed(
        ctx,
        request,
        lambda topic: topic_allowed(ctx, Operation.ALTER, topic.name),
        method="create_partitions",
        items="topics",
        results="results",
        refused=refused,
        # The partitions added (Kafka counts the new count less the current one).
        permits=lambda topic: max(topic.count - _partition_count(ctx, topic.name), 0),
    )


async def create_topic_with_defaults(ctx: RequestContext, name: str) -> Error:
    """Auto-creation (Metadata, Produce): a CreateTopics with this broker's defaults."""
    request = build_request(
        ApiKey.CREATE_TOPICS,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": ctx.config.num_partitions,
                    "replication_factor": ctx.config.default_replication_factor,
                    "assignments": (),
                    "configs": (),
                }
            ],
            "timeout": 10_000,
            "validate_only": False,
        },
    )
    return await create_topics_through_controller(ctx, request)


async def create_topics_through_controller(ctx: RequestContext, request) -> Error:
    """Send a CreateTopics of one topic to the controller (or run it here on the controller
    node) and return that topic's error."""

    def unreachable(failure: ForwardingFailed) -> Error:
        return failure.error

    response = await decided_by_controller(ctx, request, "create_topics", unreachable)
    if isinstance(response, Error):
        return response
    if isinstance(response, dict):
        return Error(response["topics"][0]["error_code"])
    return Error(response.topics[0].error_code.value)
