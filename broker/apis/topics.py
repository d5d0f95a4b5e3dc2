"""CreateTopics and DeleteTopics.

Topic-level configs are validated by the storage layer's LogConfig (Kafka's names); an unknown
or malformed one fails that topic with INVALID_CONFIG and a message naming the key.
"""

from protocol.errors import Error

from ..replica_manager import TopicError
from . import RequestContext

# ConfigSource.DYNAMIC_TOPIC_CONFIG in Kafka's DescribeConfigs vocabulary.
_TOPIC_CONFIG_SOURCE = 1


def _create_one(ctx: RequestContext, topic, validate_only: bool) -> dict:
    result = {
        "name": topic.name,
        "topic_id": None,
        "error_code": Error.NONE,
        "error_message": None,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": (),
    }
    configs = {config.name: config.value for config in topic.configs}
    num_partitions = topic.num_partitions
    replication_factor = topic.replication_factor
    if topic.assignments:
        if num_partitions != -1 or replication_factor != -1:
            result["error_code"] = Error.INVALID_REQUEST
            result["error_message"] = (
                "Both numPartitions or replicationFactor and replicasAssignments were set."
            )
            return result
        num_partitions = len(topic.assignments)
        replication_factor = len(topic.assignments[0].broker_ids)
    if any(value is None for value in configs.values()):
        result["error_code"] = Error.INVALID_CONFIG
        result["error_message"] = "Null value not supported for topic configs"
        return result
    try:
        info = ctx.replicas.create_topic(
            topic.name,
            num_partitions,
            replication_factor,
            configs,
            validate_only=validate_only,
        )
    except TopicError as error:
        result["error_code"] = error.error
        result["error_message"] = str(error)
        return result
    result["num_partitions"] = num_partitions if num_partitions != -1 else ctx.config.num_partitions
    result["replication_factor"] = 1
    result["configs"] = [
        {
            "name": name,
            "value": value,
            "read_only": False,
            "config_source": _TOPIC_CONFIG_SOURCE,
            "is_sensitive": False,
        }
        for name, value in sorted(configs.items())
    ]
    if info is not None:
        result["topic_id"] = info.topic_id
    return result


async def handle_create(ctx: RequestContext, request) -> dict:
    seen: dict[str, int] = {}
    for topic in request.topics:
        seen[topic.name] = seen.get(topic.name, 0) + 1
    results = []
    for topic in request.topics:
        if seen[topic.name] > 1:
            results.append(
                {
                    "name": topic.name,
                    "error_code": Error.INVALID_REQUEST,
                    "error_message": "Create topics request from client contains duplicate topic",
                    "num_partitions": -1,
                    "replication_factor": -1,
                }
            )
            continue
        results.append(_create_one(ctx, topic, request.validate_only))
    return {"topics": results}


def _delete_one(ctx: RequestContext, name: str | None, topic_id) -> dict:
    if name is None and topic_id is not None:
        info = ctx.replicas.topic_by_id(topic_id)
        if info is None:
            return {"name": None, "topic_id": topic_id, "error_code": Error.UNKNOWN_TOPIC_ID}
        name = info.name
    result = {"name": name, "topic_id": topic_id, "error_code": Error.NONE, "error_message": None}
    if not ctx.config.delete_topic_enable:
        result["error_code"] = Error.TOPIC_DELETION_DISABLED
        return result
    try:
        ctx.replicas.delete_topic(name)
    except TopicError as error:
        result["error_code"] = error.error
        result["error_message"] = str(error)
    return result


async def handle_delete(ctx: RequestContext, request) -> dict:
    if hasattr(request, "topic_names"):
        targets = [(name, None) for name in request.topic_names]
    else:
        targets = [(topic.name, topic.topic_id) for topic in request.topics]
    return {"responses": [_delete_one(ctx, name, topic_id) for name, topic_id in targets]}
