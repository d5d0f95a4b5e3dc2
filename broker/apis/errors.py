"""The answer to a request whose handler failed: every part of it carries the error.

Kafka answers a request that raised in its handler with the API's error response
(UNKNOWN_SERVER_ERROR, or KAFKA_STORAGE_ERROR for a disk failure) instead of closing the
connection, so the client retries and, for the controller's channels, the next command is not
held behind a request that can never succeed. This builds that response from the request.
"""

from typing import Any

from minibroker.apis.fetch import partition_entry
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey


def topic_key(topic) -> dict:
    return {"name": getattr(topic, "name", None), "topic_id": getattr(topic, "topic_id", None)}


def error_response(api_key: int, request, error: Error) -> dict[str, Any]:
    """A version-neutral response to ``request`` with ``error`` everywhere it fits."""
    if api_key == ApiKey.PRODUCE:
        return {
            "responses": [
                {
                    "name": topic.name,
                    "partition_responses": [
                        {"index": data.index, "error_code": error, "base_offset": -1}
                        for data in topic.partition_data
                    ],
                }
                for topic in request.topic_data
            ]
        }
    if api_key == ApiKey.FETCH:
        return {
            "error_code": error,
            "session_id": 0,
            "responses": [
                {
                    "topic": getattr(topic, "topic", None),
                    "topic_id": getattr(topic, "topic_id", None),
                    "partitions": [
                        partition_entry(p.partition, error, records=None) for p in topic.partitions
                    ],
                }
                for topic in request.topics
            ],
        }
    if api_key == ApiKey.LIST_OFFSETS:
        return {
            "topics": [
                {
                    "name": topic.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": error,
                            "timestamp": -1,
                            "offset": -1,
                        }
                        for p in topic.partitions
                    ],
                }
                for topic in request.topics
            ]
        }
    if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
        return {
            "topics": [
                {
                    "topic": topic.topic,
                    "partitions": [
                        {"error_code": error, "partition": p.partition, "end_offset": -1}
                        for p in topic.partitions
                    ],
                }
                for topic in request.topics
            ]
        }
    if api_key == ApiKey.METADATA:
        return {"brokers": (), "controller_id": -1, "topics": ()}
    if api_key == ApiKey.CREATE_TOPICS:
        return {
            "topics": [
                {
                    "name": topic.name,
                    "topic_id": None,
                    "error_code": error,
                    "error_message": None,
                    "num_partitions": -1,
                    "replication_factor": -1,
                }
                for topic in request.topics
            ]
        }
    if api_key == ApiKey.DELETE_TOPICS:
        names = getattr(request, "topic_names", None)
        topics = (
            [{"name": n} for n in names]
            if names is not None
            else [topic_key(t) for t in request.topics]
        )
        return {"responses": [{**t, "error_code": error} for t in topics]}
    if api_key == ApiKey.DESCRIBE_CONFIGS:
        return {
            "results": [
                {
                    "error_code": error,
                    "resource_type": r.resource_type,
                    "resource_name": r.resource_name,
                    "configs": (),
                }
                for r in request.resources
            ]
        }
    if api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        return {
            "responses": [
                {
                    "error_code": error,
                    "resource_type": r.resource_type,
                    "resource_name": r.resource_name,
                }
                for r in request.resources
            ]
        }
    if api_key == ApiKey.DESCRIBE_LOG_DIRS:
        return {"error_code": error, "results": ()}
    if api_key == ApiKey.FIND_COORDINATOR and hasattr(request, "coordinator_keys"):
        return {
            "coordinators": [
                {"key": key, "error_code": error, "node_id": -1, "host": "", "port": -1}
                for key in request.coordinator_keys
            ]
        }
    if api_key == ApiKey.OFFSET_COMMIT:
        return {
            "topics": [
                {
                    "name": topic.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": error}
                        for p in topic.partitions
                    ],
                }
                for topic in request.topics
            ]
        }
    if api_key == ApiKey.OFFSET_FETCH:
        if hasattr(request, "groups"):
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
    if api_key == ApiKey.DESCRIBE_GROUPS:
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
    if api_key == ApiKey.CREATE_PARTITIONS:
        return {
            "results": [
                {"name": topic.name, "error_code": error, "error_message": None}
                for topic in request.topics
            ]
        }
    if api_key == ApiKey.DELETE_RECORDS:
        return {
            "topics": [
                {
                    "name": topic.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "low_watermark": -1,
                            "error_code": error,
                        }
                        for p in topic.partitions
                    ],
                }
                for topic in request.topics
            ]
        }
    if api_key == ApiKey.DELETE_GROUPS:
        return {
            "results": [
                {"group_id": group_id, "error_code": error} for group_id in request.groups_names
            ]
        }
    if api_key == ApiKey.ELECT_LEADERS:
        return {
            "error_code": error,
            "replica_election_results": [
                {
                    "topic": entry.topic,
                    "partition_result": [
                        {"partition_id": index, "error_code": error, "error_message": None}
                        for index in entry.partitions
                    ],
                }
                for entry in request.topic_partitions or ()
            ],
        }
    if api_key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        return {
            "error_code": error,
            "error_message": None,
            "responses": [
                {
                    "name": topic.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": error,
                            "error_message": None,
                        }
                        for p in topic.partitions
                    ],
                }
                for topic in request.topics
            ],
        }
    if api_key == ApiKey.CREATE_ACLS:
        return {"results": [{"error_code": error} for _ in request.creations]}
    if api_key == ApiKey.DELETE_ACLS:
        return {"filter_results": [{"error_code": error} for _ in request.filters]}
    # The rest carry one top-level error code; these fields complete their required parts.
    return {
        "error_code": error,
        "topics": (),
        "partition_errors": (),
        "api_keys": (),
        "producer_id": -1,
        "producer_epoch": -1,
        "producer_id_start": -1,
        "producer_id_len": 0,
        "broker_epoch": -1,
        "is_caught_up": False,
        "is_fenced": True,
        "should_shut_down": False,
        "generation_id": -1,
        "leader": "",
        "member_id": "",
        "protocol_name": "",
        "assignment": b"",
        "members": (),
        "groups": (),
        "node_id": -1,
        "host": "",
        "port": -1,
        "cluster_id": "",
        "brokers": (),
        "endpoint_type": 1,
        "mechanisms": (),
        "auth_bytes": b"",
        "session_lifetime": 0,
    }
