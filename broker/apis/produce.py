"""Produce: validate batch headers, stamp offsets, append as bytes; acks=-1 waits for the ISR.

Records are never decoded here. Each partition's batches are checked (magic, length, CRC-32C,
max.message.bytes, idempotent producer sequence) and appended in one write by the partition
log; a partition whose batches are refused gets its error code and nothing of it is stored.

The handler decides (acks, authorization, auto-creation, the message format of v0-v2); the
replica manager's append_records does the rest, for clients as for the group coordinator.
acks=-1 is Kafka's DelayedProduce: refused with NOT_ENOUGH_REPLICAS before appending when the
ISR is smaller than min.insync.replicas; after appending, the request parks in the purgatory
until the high watermark passes every partition's last offset (or leadership is lost, or the
ISR shrank below the minimum: NOT_ENOUGH_REPLICAS_AFTER_APPEND), or answers REQUEST_TIMED_OUT
for the partitions still waiting at its timeout.

Produce v0-v2 are served only so that librdkafka before 2.1 (Debian's kcat) compresses with
gzip, snappy and lz4: it enables those codecs only when a broker's Produce range includes v0.
Their batches must be v2 like the others (UNSUPPORTED_FOR_MESSAGE_FORMAT otherwise).
"""

from minibroker.apis import CloseConnection, RequestContext, Role, api
from minibroker.apis.authorization import may_create_topic, topic_allowed
from minibroker.apis.topics import create_topic_with_defaults
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.replication.replica_manager import AppendOrigin, append_result
from minibroker.security.authorizer.acls import Operation

VALID_ACKS = (-1, 0, 1)
# Produce v0-v2 may carry the old message formats; byte 16 of a batch is its magic.
MAGIC_OFFSET = 16


def _old_format(data) -> dict | None:
    """Produce v0-v2: a partition whose first batch is not v2 is refused before anything is
    appended (Kafka validates a Produce request's records when it reads the request)."""
    records = data.records
    if records is not None and len(records) > MAGIC_OFFSET and records[MAGIC_OFFSET] != 2:
        return append_result(
            data.index,
            Error.UNSUPPORTED_FOR_MESSAGE_FORMAT,
            "only record batches v2 (magic 2) are stored; message format "
            "v0 and v1 are not supported",
        )
    return None


async def _ensure_topic(ctx: RequestContext, name: str) -> None:
    """Auto-create a produced-to topic (with an authorizer, only for a principal that may
    create it); if that fails its partitions answer UNKNOWN_TOPIC."""
    if (
        ctx.replica_manager.metadata.topic(name) is None
        and ctx.config.auto_create_topics_enable
        and may_create_topic(ctx, name)
    ):
        await create_topic_with_defaults(ctx, name)


def _error_response(request, error: Error) -> dict:
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


@api(ApiKey.PRODUCE, versions=(0, 9), roles=Role.BROKER, error_response=_error_response)
async def handle(ctx: RequestContext, request) -> dict | None:
    """Decide what may be appended (acks, WRITE on each topic, no transactions, v2 batches
    on Produce v0-v2); the replica manager's append_records appends it and waits for acks=-1.
    """
    acks_valid = request.acks in VALID_ACKS
    responses = []
    # Per topic appended: its response entry, and for Produce v0-v2 its refused partitions.
    appending: list[tuple[dict, list[dict | None] | None]] = []
    entries = []
    for topic in request.topic_data:
        # Kafka's order: WRITE on the topic first; nothing of a refused topic is appended.
        authorized = ctx.authorizer is None or topic_allowed(ctx, Operation.WRITE, topic.name)
        if acks_valid and request.transactional_id is None and authorized:
            await _ensure_topic(ctx, topic.name)
        response = {"name": topic.name, "partition_responses": ()}
        responses.append(response)
        if not acks_valid:
            refusal, message = Error.INVALID_REQUIRED_ACKS, None
        elif not authorized:
            refusal, message = Error.TOPIC_AUTHORIZATION_FAILED, None
        elif request.transactional_id is not None:
            refusal = Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            message = "transactions are not supported by minibroker yet"
        else:
            partition_data = topic.partition_data
            refused = None
            if ctx.version < 3:
                refused = [_old_format(data) for data in partition_data]
                partition_data = [
                    d for d, r in zip(partition_data, refused, strict=True) if r is None
                ]
            appending.append((response, refused))
            entries.append((topic.name, partition_data))
            continue
        response["partition_responses"] = [
            append_result(data.index, refusal, message) for data in topic.partition_data
        ]
    if entries:
        results = await ctx.replica_manager.append_records(
            entries,
            acks=request.acks,
            timeout_s=request.timeout.total_seconds(),
            origin=AppendOrigin.CLIENT,
        )
        for (response, refused), appended in zip(appending, results, strict=True):
            if refused is not None:
                rest = iter(appended)
                appended = [entry if entry is not None else next(rest) for entry in refused]
            response["partition_responses"] = appended
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
