"""Produce: validate batch headers, stamp offsets, append as bytes.

Records are never decoded here. Each partition's batches are checked (magic, length, CRC-32C,
max.message.bytes, idempotent producer sequence) and appended in one write by the partition
log; a partition whose batches are refused gets its error code and nothing of it is stored.
acks=-1 behaves as acks=1 while every partition has a single replica; the per-partition
results are computed before any answer is built, so a later DelayedProduce can park here.
"""

import contextlib
import logging

from protocol.errors import Error
from storage.errors import StorageError

from ..replica_manager import TopicError
from . import CloseConnection, RequestContext

log = logging.getLogger("produce")

VALID_ACKS = (-1, 0, 1)


def _partition_result(error: Error, **fields) -> dict:
    return {
        "error_code": error,
        "base_offset": fields.get("base_offset", -1),
        "log_append_time": fields.get("log_append_time", -1),
        "log_start_offset": fields.get("log_start_offset", -1),
        "error_message": fields.get("error_message"),
    }


def _append_partition(ctx: RequestContext, topic_name: str, data) -> dict:
    partition = ctx.replicas.partition(topic_name, data.index)
    if partition is None:
        return _partition_result(Error.UNKNOWN_TOPIC_OR_PARTITION)
    if not data.records:
        return _partition_result(Error.CORRUPT_MESSAGE, error_message="no record batches")
    try:
        result = ctx.replicas.append(partition, data.records)
    except StorageError as error:
        log.info("refused produce to %s-%d: %s", topic_name, data.index, error)
        return _partition_result(Error(error.error_code), error_message=str(error))
    return _partition_result(
        Error.NONE,
        base_offset=result.first_offset,
        log_append_time=result.log_append_time_ms,
        log_start_offset=result.log_start_offset,
    )


def _ensure_topic(ctx: RequestContext, name: str) -> None:
    """Auto-create a produced-to topic; if that fails its partitions answer UNKNOWN_TOPIC."""
    if ctx.replicas.topic(name) is None:
        with contextlib.suppress(TopicError):
            ctx.replicas.auto_create_topic(name)


async def handle(ctx: RequestContext, request) -> dict | None:
    acks_valid = request.acks in VALID_ACKS
    responses = []
    failed = False
    for topic in request.topic_data:
        if acks_valid:
            _ensure_topic(ctx, topic.name)
        partitions = []
        for data in topic.partition_data:
            if not acks_valid:
                result = _partition_result(Error.INVALID_REQUIRED_ACKS)
            elif request.transactional_id is not None:
                result = _partition_result(
                    Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    error_message="transactions are not supported by minibroker yet",
                )
            else:
                result = _append_partition(ctx, topic.name, data)
            failed = failed or result["error_code"] != Error.NONE
            partitions.append({"index": data.index, **result})
        responses.append({"name": topic.name, "partition_responses": partitions})
    if request.acks == 0:
        if failed:
            # The producer reads no answer at acks=0; Kafka closes the connection so that it
            # notices the failure and refreshes its metadata.
            raise CloseConnection("produce with acks=0 failed")
        return None
    return {"responses": responses}
