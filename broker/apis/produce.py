"""Produce: validate batch headers, stamp offsets, append as bytes; acks=-1 waits for the ISR.

Records are never decoded here. Each partition's batches are checked (magic, length, CRC-32C,
max.message.bytes, idempotent producer sequence) and appended in one write by the partition
log; a partition whose batches are refused gets its error code and nothing of it is stored.

acks=-1 is Kafka's DelayedProduce: refused with NOT_ENOUGH_REPLICAS before appending when the
ISR is smaller than min.insync.replicas; after appending, the request parks in the purgatory
until the high watermark passes every partition's last offset (or leadership is lost, or the
ISR shrank below the minimum: NOT_ENOUGH_REPLICAS_AFTER_APPEND), or answers REQUEST_TIMED_OUT
for the partitions still waiting at its timeout.

Produce v0-v2 are served only so that librdkafka before 2.1 (Debian's kcat) compresses with
gzip, snappy and lz4: it enables those codecs only when a broker's Produce range includes v0.
Their batches must be v2 like the others (UNSUPPORTED_FOR_MESSAGE_FORMAT otherwise).
"""

import logging

from minibroker.apis import CloseConnection, RequestContext
from minibroker.apis.authorization import may_create_topic, topic_allowed
from minibroker.apis.topics import create_topic_with_defaults
from minibroker.coordinator.service import OFFSETS_TOPIC
from minibroker.protocol.errors import Error
from minibroker.replication.replica_manager import PendingAck
from minibroker.security.authorizer.acls import Operation
from minibroker.storage.errors import StorageError

log = logging.getLogger("produce")

VALID_ACKS = (-1, 0, 1)
# Produce v0-v2 may carry the old message formats; byte 16 of a batch is its magic.
MAGIC_OFFSET = 16


def _result(error: Error, **fields) -> dict:
    return {
        "error_code": error,
        "base_offset": fields.get("base_offset", -1),
        "log_append_time": fields.get("log_append_time", -1),
        "log_start_offset": fields.get("log_start_offset", -1),
        "error_message": fields.get("error_message"),
    }


def _append(ctx: RequestContext, topic: str, data, acks: int, pending: list[PendingAck]) -> dict:
    if topic == OFFSETS_TOPIC:
        # Only the group coordinator writes it; a record it cannot read would cost the
        # partition's groups (Kafka refuses clients the same way).
        return _result(
            Error.INVALID_TOPIC_EXCEPTION,
            error_message=f"{OFFSETS_TOPIC} is internal: clients cannot produce to it",
        )
    partition, error = ctx.replicas.leader_partition(topic, data.index)
    if error != Error.NONE:
        return _result(error)
    if not data.records:
        return _result(Error.CORRUPT_MESSAGE, error_message="no record batches")
    if ctx.version < 3 and len(data.records) > MAGIC_OFFSET and data.records[MAGIC_OFFSET] != 2:
        return _result(
            Error.UNSUPPORTED_FOR_MESSAGE_FORMAT,
            error_message="only record batches v2 (magic 2) are stored; message format "
            "v0 and v1 are not supported",
        )
    min_insync = partition.log.config.min_insync_replicas
    if acks == -1 and (error := partition.acks_all_error(min_insync)) != Error.NONE:
        return _result(
            error,
            error_message=f"ISR {partition.isr} is smaller than min.insync.replicas={min_insync}",
        )
    try:
        appended = partition.log.append_as_leader(
            data.records, leader_epoch=partition.leader_epoch, now_ms=ctx.replicas.clock_ms()
        )
    except StorageError as error:
        log.info("refused produce to %s-%d: %s", topic, data.index, error)
        return _result(error.error, error_message=str(error))
    if not appended.duplicate:
        partition.maybe_advance_high_watermark()
        ctx.replicas.notify(partition)
        ctx.replicas.metrics.messages_in.labels(topic).inc(appended.record_count)
        ctx.replicas.metrics.bytes_in.labels(topic).inc(len(data.records))
    result = _result(
        Error.NONE,
        base_offset=appended.first_offset,
        log_append_time=appended.log_append_time_ms,
        log_start_offset=appended.log_start_offset,
    )
    if acks == -1:
        pending.append(PendingAck(partition, appended.last_offset + 1, result, _result))
    return result


async def _ensure_topic(ctx: RequestContext, name: str) -> None:
    """Auto-create a produced-to topic (with an authorizer, only for a principal that may
    create it); if that fails its partitions answer UNKNOWN_TOPIC."""
    if (
        ctx.replicas.metadata.topic(name) is None
        and ctx.config.auto_create_topics_enable
        and may_create_topic(ctx, name)
    ):
        await create_topic_with_defaults(ctx, name)


async def handle(ctx: RequestContext, request) -> dict | None:
    acks_valid = request.acks in VALID_ACKS
    responses = []
    pending: list[PendingAck] = []
    for topic in request.topic_data:
        # Kafka's order: WRITE on the topic first; nothing of a refused topic is appended.
        authorized = ctx.authorizer is None or topic_allowed(ctx, Operation.WRITE, topic.name)
        if acks_valid and request.transactional_id is None and authorized:
            await _ensure_topic(ctx, topic.name)
        partitions = []
        for data in topic.partition_data:
            if not acks_valid:
                result = _result(Error.INVALID_REQUIRED_ACKS)
            elif not authorized:
                result = _result(Error.TOPIC_AUTHORIZATION_FAILED)
            elif request.transactional_id is not None:
                result = _result(
                    Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    error_message="transactions are not supported by minibroker yet",
                )
            else:
                result = _append(ctx, topic.name, data, request.acks, pending)
            # The same dict a pending acks=-1 entry updates: the response sees its outcome.
            result["index"] = data.index
            partitions.append(result)
        responses.append({"name": topic.name, "partition_responses": partitions})
    if pending:
        await ctx.replicas.wait_for_replication(pending, request.timeout.total_seconds())
    if request.acks == 0:
        failed = any(
            p["error_code"] != Error.NONE
            for topic in responses
            for p in topic["partition_responses"]
        )
        if failed:
            # The producer reads no answer at acks=0; Kafka closes the connection so that it
            # notices the failure and refreshes its metadata.
            raise CloseConnection("produce with acks=0 failed")
        return None
    return {"responses": responses}
