"""CreateTopics, DeleteTopics and CreatePartitions: decided by the controller.

On the controller node they are handled there; a broker forwards them and relays the answer.
When the controller cannot be reached, every topic gets REQUEST_TIMED_OUT (retriable), as a
Kafka broker answers when its forwarding times out.
"""

from protocol.errors import Error
from protocol.versions import ApiKey

from ..controller_client import build_request
from . import RequestContext
from .forwarding import ForwardingFailed, forward_to_controller


async def _decided_by_controller(ctx: RequestContext, request, method: str, refused):
    """The controller's answer: its ``method`` on the controller node, the forwarded
    request's answer on a broker, ``refused(failure)`` when the controller is unreachable."""
    if ctx.controller is not None:
        return await getattr(ctx.controller, method)(request)
    try:
        return await forward_to_controller(ctx, request)
    except ForwardingFailed as failure:
        return refused(failure)


async def handle_create(ctx: RequestContext, request):
    def refused(failure: ForwardingFailed) -> dict:
        return {
            "topics": [
                {
                    "name": topic.name,
                    "topic_id": None,
                    "error_code": failure.error,
                    "error_message": str(failure),
                    "num_partitions": -1,
                    "replication_factor": -1,
                }
                for topic in request.topics
            ]
        }

    return await _decided_by_controller(ctx, request, "create_topics", refused)


async def handle_delete(ctx: RequestContext, request):
    def refused(failure: ForwardingFailed) -> dict:
        if hasattr(request, "topic_names"):
            targets = [(name, None) for name in request.topic_names]
        else:
            targets = [(topic.name, topic.topic_id) for topic in request.topics]
        return {
            "responses": [
                {"name": name, "topic_id": topic_id, "error_code": failure.error}
                for name, topic_id in targets
            ]
        }

    return await _decided_by_controller(ctx, request, "delete_topics", refused)


async def handle_create_partitions(ctx: RequestContext, request):
    def refused(failure: ForwardingFailed) -> dict:
        return {
            "results": [
                {"name": topic.name, "error_code": failure.error, "error_message": str(failure)}
                for topic in request.topics
            ]
        }

    return await _decided_by_controller(ctx, request, "create_partitions", refused)


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
    try:
        if ctx.controller is not None:
            response = await ctx.controller.create_topics(request)
            return Error(response["topics"][0]["error_code"])
        response = await forward_to_controller(ctx, request)
    except ForwardingFailed as failure:
        return failure.error
    return Error(response.topics[0].error_code.value)
