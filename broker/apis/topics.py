"""CreateTopics, DeleteTopics and CreatePartitions: decided by the controller.

On the controller node they are handled there; a broker forwards them and relays the answer.
When the controller cannot be reached, every topic gets REQUEST_TIMED_OUT (retriable), as a
Kafka broker answers when its forwarding times out.

With an authorizer the receiving node checks each topic first, as Kafka's KafkaApis does:
CREATE on the cluster or the topic for CreateTopics, DELETE for DeleteTopics, ALTER for
CreatePartitions. Refused topics answer TOPIC_AUTHORIZATION_FAILED and the controller decides
only the others.
"""

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import may_create_topic, topic_allowed
from minibroker.apis.forwarding import ForwardingFailed, decided_by_controller
from minibroker.cluster.controller_client import build_request
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


async def _decided_if_allowed(
    ctx: RequestContext,
    request,
    allowed: Callable[[Item], bool],
    *,
    method: str,
    items: str,
    results: str,
    refused: Refusal[Item],
):
    """As _decided_by_controller, for the topics that ``allowed(topic)``; the others are
    answered TOPIC_AUTHORIZATION_FAILED here."""
    how = {"method": method, "items": items, "results": results}
    every = getattr(request, items)
    if ctx.authorizer is None or all(allowed(item) for item in every):
        return await _decided_by_controller(ctx, request, refused=refused, **how)
    kept = tuple(item for item in every if allowed(item))
    answers: list = []
    if kept:
        narrowed = dataclasses.replace(request, **{items: kept})
        response = await _decided_by_controller(ctx, narrowed, refused=refused, **how)
        if isinstance(response, dict):
            answers = list(response[results])
        else:
            answers = [dataclasses.asdict(entry) for entry in getattr(response, results)]
    denied = [
        refused(item, Error.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        for item in every
        if not allowed(item)
    ]
    return {results: denied + answers}


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
    )


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
