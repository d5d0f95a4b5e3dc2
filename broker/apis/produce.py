"""Produce: validate batch headers, stamp offsets, append as bytes; acks=-1 waits for the ISR.

Records are never decoded here. Each partition's batches are checked (magic, length, CRC-32C,
max.message.bytes, idempotent producer sequence) and appended in one write by the partition
log; a partition whose batches are refused gets its error code and nothing of it is stored.

The handler decides (acks, authorization, auto-creation); the replica manager's
append_records does the rest, for clients as for the group coordinator.
acks=-1 is Kafka's DelayedProduce: refused with NOT_ENOUGH_REPLICAS before appending when the
ISR is smaller than min.insync.replicas; after appending, the request parks in the purgatory
until the high watermark passes every partition's last offset (or leadership is lost, or the
ISR shrank below the minimum: NOT_ENOUGH_REPLICAS_AFTER_APPEND), or answers REQUEST_TIMED_OUT
for the partitions still waiting at its timeout.

Transactions (Kafka's KafkaApis.handleProduceRequest and ReplicaManager.appendRecords): a
request whose batches are transactional needs a transactional id and, under an authorizer,
WRITE on it (else the whole request answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED). KIP-890
part 1: a partition whose producer has no transaction open there at the batch's epoch is
first verified with the transaction coordinator (``verify_transaction``: was the partition
added to the transaction?), and the partition keeps the lowest sequence it started verifying
until the transaction's first batch is written (Kafka's VerificationStateEntry, see
storage/producer_state.py: a later batch that passed its verification cannot be written ahead
of an earlier one that did not); a partition it refuses gets the error and nothing is appended
for it (INVALID_TXN_STATE for a partition never added; the coordinator's retriable errors
become NOT_ENOUGH_REPLICAS, as Kafka answers produce versions before TV2 so that old clients
retry). A transactional batch of an older producer epoch than the partition's is
INVALID_PRODUCER_EPOCH (the log's producer state, as Kafka since 2.7). Departure: Kafka also
keeps a verification guard between the verification and the append (a transaction that
ended in between is not joined); here the verification and the append are not atomic.

KIP-890 part 2 (Kafka's transaction protocol v2): a client that runs it sends Produce v12
without AddPartitionsToTxn, and the leader adds each such partition to the transaction
itself (AddPartitionsToTxn v5 with verify_only false to the coordinator, Kafka's
``addPartition`` operation) before appending. TRANSACTION_ABORTABLE is answered as such
from Produce v11 (the version that added it); older versions get INVALID_TXN_STATE. As
Kafka's ReplicaManager.handleProduceAppend, transactional batches of more than one producer
(id and epoch) in one request are refused whole with INVALID_PRODUCER_ID_MAPPING.

Produce v0-v2 (KIP-896: gone from Kafka 4) are advertised but not served, as Kafka 4.4
(``ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION``, KAFKA-18659): librdkafka before 2.1
(Debian's kcat) compresses with gzip, snappy and lz4 only when a broker's Produce range
includes v0, and sends v3 or newer itself. A Produce v0-v2 request closes its connection
(apis/dispatch.py), as on Kafka 4.4.
"""

import struct

import trio

from minibroker.apis import CloseConnection, RequestContext, Role, api
from minibroker.apis.authorization import allowed, may_create_topic, topic_allowed
from minibroker.apis.topics import create_topic_with_defaults
from minibroker.protocol.errors import Error, error_name
from minibroker.protocol.record_batch import ATTRIBUTES_OFFSET, TRANSACTIONAL_FLAG_MASK
from minibroker.protocol.versions import ApiKey
from minibroker.replication.replica_manager import AppendOrigin, append_result
from minibroker.schema_registry import produce_validation
from minibroker.security.authorizer.acls import Operation, ResourceType

VALID_ACKS = (-1, 0, 1)
# The low byte of a batch's attributes (i16 at ATTRIBUTES_OFFSET) holds the transactional bit.
_ATTRIBUTES_LOW = ATTRIBUTES_OFFSET + 1
_PRODUCER = struct.Struct(">qh")  # producerId, producerEpoch
_BASE_SEQUENCE = struct.Struct(">i")  # baseSequence, after producerEpoch
_BASE_SEQUENCE_OFFSET = 53
_PRODUCER_ID_OFFSET = 43
_BATCH_LENGTH = struct.Struct(">i")
_BATCH_LENGTH_OFFSET = 8
# Produce v11 knows TRANSACTION_ABORTABLE; v12 clients (TV2) leave adding partitions to the
# leader.
_KNOWS_ABORTABLE = 11
_ADDS_PARTITIONS = 12
# The coordinator's retriable answers to a verification, which produce versions before
# TV2 see as NOT_ENOUGH_REPLICAS (Kafka's ReplicaManager: clients retry it without a
# metadata refresh).
_RETRIABLE_VERIFICATION_ERRORS = frozenset(
    {
        51,  # CONCURRENT_TRANSACTIONS
        13,  # NETWORK_EXCEPTION
        Error.COORDINATOR_LOAD_IN_PROGRESS,
        Error.COORDINATOR_NOT_AVAILABLE,
        Error.NOT_COORDINATOR,
    }
)


def _transactional_producer(data) -> tuple[int, int] | None:
    """(producer id, epoch) of a partition's first batch if it is transactional (Kafka's
    ProduceRequest looks at each partition's first batch), from its header bytes."""
    records = data.records
    if records is None or len(records) < _BASE_SEQUENCE_OFFSET + _BASE_SEQUENCE.size:
        return None
    if not records[_ATTRIBUTES_LOW] & TRANSACTIONAL_FLAG_MASK:
        return None
    producer_id, epoch = _PRODUCER.unpack_from(records, _PRODUCER_ID_OFFSET)
    return producer_id, epoch


def _batch_producers(data) -> set[tuple[int, int]]:
    """(producer id, epoch) of every transactional batch of a partition's records, from
    the batch headers (Kafka's handleProduceAppend looks at every batch)."""
    records = data.records
    found: set[tuple[int, int]] = set()
    if records is None:
        return found
    position, size = 0, len(records)
    while position + _PRODUCER_ID_OFFSET + _PRODUCER.size <= size:
        if records[position + _ATTRIBUTES_LOW] & TRANSACTIONAL_FLAG_MASK:
            found.add(_PRODUCER.unpack_from(records, position + _PRODUCER_ID_OFFSET))
        (length,) = _BATCH_LENGTH.unpack_from(records, position + _BATCH_LENGTH_OFFSET)
        if length <= 0:
            break  # the log refuses it (CORRUPT_MESSAGE)
        position += _BATCH_LENGTH_OFFSET + _BATCH_LENGTH.size + length
    return found


async def _verify(
    ctx: RequestContext, transactional_id: str, entries: list[tuple[str, list]]
) -> dict[tuple[str, int], dict]:
    """KIP-890: the refusals of the partitions whose transaction the coordinator does not
    confirm (part 1), or, for Produce v12 (part 2), to which it could not add them, as
    response entries keyed by (topic, index)."""
    coordinator = ctx.transaction_coordinator
    to_verify: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for topic, partition_data in entries:
        for data in partition_data:
            producer = _transactional_producer(data)
            if producer is None:
                continue
            partition, error = ctx.replica_manager.leader_partition(topic, data.index)
            if partition is None or error != Error.NONE:
                continue  # append_records answers it
            (sequence,) = _BASE_SEQUENCE.unpack_from(data.records, _BASE_SEQUENCE_OFFSET)
            if not ctx.replica_manager.maybe_start_transaction_verification(
                partition, *producer, sequence, supports_epoch_bump=ctx.version >= _ADDS_PARTITIONS
            ):
                continue
            to_verify.setdefault(producer, []).append((topic, data.index))
    refused: dict[tuple[str, int], dict] = {}
    for (producer_id, epoch), partitions in to_verify.items():
        answers = await coordinator.verify_transaction(
            transactional_id, producer_id, epoch, partitions, add=ctx.version >= _ADDS_PARTITIONS
        )
        for key, error in answers.items():
            if error == Error.NONE:
                continue
            message = None
            if error == Error.PRODUCER_FENCED:
                # Kafka's AddPartitionsToTxnManager answers a fenced producer's Produce
                # with INVALID_PRODUCER_EPOCH, which librdkafka treats as fatal (fenced);
                # PRODUCER_FENCED on a Produce is only abortable there (librdkafka's test
                # 0103 "produce after fence").
                error = Error.INVALID_PRODUCER_EPOCH
            elif error == Error.TRANSACTION_ABORTABLE and ctx.version < _KNOWS_ABORTABLE:
                # Not known to Produce versions before v11 (KIP-890).
                error = Error.INVALID_TXN_STATE
            if error == Error.INVALID_TXN_STATE:
                message = "Partition was not added to the transaction"
            elif error in _RETRIABLE_VERIFICATION_ERRORS:
                message = (
                    "Unable to verify the partition has been added to the transaction. "
                    f"Underlying error: {error_name(error)}"
                )
                error = Error.NOT_ENOUGH_REPLICAS
            refused[key] = append_result(key[1], error, message)
    return refused


async def _validate_schemas(
    ctx: RequestContext,
    name: str,
    partition_data,
    refused: list[dict | None],
    key_check: bool,
    value_check: bool,
    timeout_s: float,
) -> None:
    """Confluent Server's schema validation (schema_registry/produce_validation.py): a
    partition whose records do not all carry a schema id registered for the topic's subject
    is refused with INVALID_RECORD, naming the first such record, and nothing of it is
    appended.

    The ids are looked up in this broker's copy of `_schemas` (a dict lookup: no network
    round trip when the id is known, the common case). An id the copy does not hold is
    refused only once the copy has applied `_schemas` up to its end as its leader knows it
    (``SchemaRegistryService.caught_up_to_end``, the rule of the Iceberg writer's
    find_schema): a copy that lags (a leader just restarted, a follower that has not fetched
    yet) would otherwise refuse records whose schema was registered before they were
    produced. When that end cannot be known within ``timeout_s`` (the produce request's
    timeout, at most the registry's read timeout), or the leader of `_schemas` does not
    answer, the partition gets NOT_ENOUGH_REPLICAS and nothing of it is appended: retriable,
    as Kafka answers a produce that meets a temporary condition outside the partition
    (ReplicaManager's answer for a transaction verification the coordinator could not make,
    so that clients retry), where INVALID_RECORD is final. Confluent Server asks its
    registry over HTTP and caches the answers; how it answers an unreachable registry is not
    documented."""
    service = ctx.schema_registry
    for slot, data in enumerate(partition_data):
        if refused[slot] is not None or not data.records:
            continue
        if service is None:
            refused[slot] = append_result(
                data.index,
                Error.INVALID_RECORD,
                f"Topic {name} validates schemas, and this broker does not run the schema"
                " registry (schema.registry.listeners)",
            )
            continue
        records = bytes(data.records)

        def check(records: bytes = records) -> tuple[int, str] | None:
            return produce_validation.first_invalid(
                records,
                name,
                key_check,
                value_check,
                service.registry.ids_of,
            )

        found = check()
        if found is not None and "is not registered" in found[1]:
            # The registry's own modules are loaded already: this broker runs it.
            from minibroker.schema_registry.service import READ_TIMEOUT_S
            from minibroker.schema_registry.state import RegistryError

            limit = max(0.0, min(timeout_s, READ_TIMEOUT_S))
            undecided = None
            try:
                with trio.move_on_after(limit) as waited:
                    await service.caught_up_to_end(limit)
                if waited.cancelled_caught:
                    undecided = "the leader of _schemas did not say where it ends in time"
            except RegistryError as error:
                undecided = error.message
            if undecided is not None:
                refused[slot] = append_result(
                    data.index,
                    Error.NOT_ENOUGH_REPLICAS,
                    f"Cannot validate yet: {found[1]} in this broker's copy of the schema"
                    f" registry, which could not be brought up to date ({undecided}); retry",
                )
                continue
            found = check()
        if found is not None:
            refused[slot] = append_result(data.index, Error.INVALID_RECORD, found[1])


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
                "name": getattr(topic, "name", None),
                "topic_id": getattr(topic, "topic_id", None),
                "partition_responses": [
                    {"index": data.index, "error_code": error, "base_offset": -1}
                    for data in topic.partition_data
                ],
            }
            for topic in request.topic_data
        ]
    }


@api(
    ApiKey.PRODUCE,
    versions=(3, 13),
    advertised_from=0,
    roles=Role.BROKER,
    error_response=_error_response,
)
async def handle(ctx: RequestContext, request) -> dict | None:
    """Decide what may be appended (acks, the transactional id, WRITE on each topic, the
    coordinator's verification of transactional partitions); the replica manager's
    append_records appends it and waits for acks=-1.
    """
    if ctx.version >= 13:
        # KIP-516: topics by id. The id's name, as Kafka's handleProduceRequest takes it from
        # the metadata cache; an unknown id stays nameless and is UNKNOWN_TOPIC_ID below.
        for topic in request.topic_data:
            known = (
                ctx.replica_manager.metadata.topic_by_id(topic.topic_id) if topic.topic_id else None
            )
            topic.name = known.name if known is not None else None
    transactional_id = request.transactional_id
    transactional = any(
        _transactional_producer(data) is not None
        for topic in request.topic_data
        for data in topic.partition_data
    )
    if transactional and (
        transactional_id is None
        or not allowed(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
    ):
        if request.acks == 0:
            raise CloseConnection("transactional produce without authorization")
        return _error_response(request, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if transactional_id is not None:
        producers: set[tuple[int, int]] = set()
        for topic in request.topic_data:
            for data in topic.partition_data:
                producers |= _batch_producers(data)
        if len(producers) > 1:
            if request.acks == 0:
                raise CloseConnection("transactional produce of more than one producer")
            return _error_response(request, Error.INVALID_PRODUCER_ID_MAPPING)
    acks_valid = request.acks in VALID_ACKS
    responses = []
    # Per topic appended: its response entry, and its refused partitions (None: appended).
    appending: list[tuple[dict, str, list[dict | None]]] = []
    entries = []
    # The request position of each topic in `appending`.
    position_of: list[int] = []
    for topic_position, topic in enumerate(request.topic_data):
        response = {"name": topic.name, "topic_id": topic.topic_id, "partition_responses": ()}
        responses.append(response)
        if topic.name is None:  # v13: an id this broker does not know
            response["partition_responses"] = [
                append_result(data.index, Error.UNKNOWN_TOPIC_ID) for data in topic.partition_data
            ]
            continue
        # Kafka's order: WRITE on the topic first; nothing of a refused topic is appended.
        authorized = ctx.authorizer is None or topic_allowed(ctx, Operation.WRITE, topic.name)
        if acks_valid and authorized:
            await _ensure_topic(ctx, topic.name)
        if not acks_valid:
            refusal = Error.INVALID_REQUIRED_ACKS
        elif not authorized:
            refusal = Error.TOPIC_AUTHORIZATION_FAILED
        else:
            partition_data = topic.partition_data
            refused: list[dict | None] = [None] * len(partition_data)
            # Confluent Server's schema validation: one lookup for every topic, and records
            # decoded only for the topics that have it.
            key_check, value_check = ctx.replica_manager.schema_validation(
                topic.name, (data.index for data in partition_data)
            )
            if key_check or value_check:
                await _validate_schemas(
                    ctx,
                    topic.name,
                    partition_data,
                    refused,
                    key_check,
                    value_check,
                    request.timeout.total_seconds(),
                )
            appending.append((response, topic.name, refused))
            position_of.append(topic_position)
            entries.append(
                (topic.name, [d for d, r in zip(partition_data, refused, strict=True) if r is None])
            )
            continue
        response["partition_responses"] = [
            append_result(data.index, refusal) for data in topic.partition_data
        ]
    if transactional and transactional_id is not None and entries:
        unverified = await _verify(ctx, transactional_id, entries)
        if unverified:
            for position, (_, name, refused) in enumerate(appending):
                topic_data = request.topic_data[position_of[position]].partition_data
                for slot, data in enumerate(topic_data):
                    if refused[slot] is None and (name, data.index) in unverified:
                        refused[slot] = unverified[(name, data.index)]
                entries[position] = (
                    name,
                    [d for d, r in zip(topic_data, refused, strict=True) if r is None],
                )
    if entries:
        results = await ctx.replica_manager.append_records(
            entries,
            acks=request.acks,
            timeout_s=request.timeout.total_seconds(),
            origin=AppendOrigin.CLIENT,
        )
        for (response, _, refused), appended in zip(appending, results, strict=True):
            rest = iter(appended)
            response["partition_responses"] = [
                entry if entry is not None else next(rest) for entry in refused
            ]
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
