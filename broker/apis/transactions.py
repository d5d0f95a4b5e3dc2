"""Transactions: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
ListTransactions.

Each handler translates its request (every version served) into a call on the transaction
coordinator (coordinator/transaction/service.py) and its answer back, as Kafka's KafkaApis does.
Both of Kafka's transaction protocols are served: EndTxn v0-v4 is TV1; EndTxn v5 is TV2
(KIP-890 part 2, Kafka's ``clientTransactionVersion`` from the request version): the
coordinator bumps the epoch and the answer carries the producer id and epoch the client
continues with.

AddPartitionsToTxn v0-v3 come from producers; v4+ (batched, with verify_only) only from
brokers (KIP-890: a partition leader asks the coordinator whether a partition is in the
transaction, or for TV2 adds it, verify_only false): on a client listener or without
CLUSTER_ACTION they are refused with CLUSTER_AUTHORIZATION_FAILED, as Kafka's
authorizeClusterOperation does.

With an authorizer, Kafka's rules: WRITE on the TRANSACTIONAL_ID to add partitions, offsets
or end a transaction (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); WRITE on each topic added
(TOPIC_AUTHORIZATION_FAILED, the other partitions OPERATION_NOT_ATTEMPTED); READ on the group
for AddOffsetsToTxn (GROUP_AUTHORIZATION_FAILED); DESCRIBE on the transactional id to describe
or list it (a listed id the principal may not DESCRIBE is left out, as is a described
transaction's topic it may not DESCRIBE).

Clients older than v2 of AddPartitionsToTxn, AddOffsetsToTxn and EndTxn do not know
PRODUCER_FENCED: they get INVALID_PRODUCER_EPOCH, as Kafka answers them.
"""

import re

from minibroker.apis import RequestContext, Role, Senders, api
from minibroker.apis.authorization import allowed, group_allowed, topic_allowed
from minibroker.apis.inter_node import inter_node_allowed
from minibroker.common.names import INTERNAL_TOPICS, OFFSETS_TOPIC
from minibroker.coordinator.transaction.state import TV_1, TV_2
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation, ResourceType


def _old_fenced(ctx: RequestContext, error: Error) -> Error:
    if ctx.version < 2 and error == Error.PRODUCER_FENCED:
        return Error.INVALID_PRODUCER_EPOCH
    return error


def _topic_results(partitions: dict[tuple[str, int], Error]) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), error in partitions.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": index, "partition_error_code": error}
        )
    return [{"name": topic, "results_by_partition": parts} for topic, parts in by_topic.items()]


def _transactions_of(ctx: RequestContext, request) -> list[tuple[str, int, int, bool, list]]:
    """(transactional id, producer id, epoch, verify only, [(topic, partition)]) for each
    transaction of the request (v0-v3 carry one)."""
    if ctx.version < 4:
        return [
            (
                request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                False,
                [(t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions],
            )
        ]
    return [
        (
            t.transactional_id,
            t.producer_id,
            t.producer_epoch,
            t.verify_only,
            [(topic.name, int(p)) for topic in t.topics for p in topic.partitions],
        )
        for t in request.transactions
    ]


def _add_partitions_error(request, error: Error) -> dict:
    if hasattr(request, "transactions"):
        return {"error_code": error, "results_by_transaction": []}
    return {
        "results_by_topic_v3_and_below": _topic_results(
            {(t.name, int(p)): error for t in request.v3_and_below_topics for p in t.partitions}
        )
    }


async def _add_one(
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    verify_only: bool,
    partitions: list[tuple[str, int]],
) -> dict[tuple[str, int], Error]:
    coordinator = ctx.transaction_coordinator
    if ctx.version < 4 and not allowed(
        ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
    ):
        return dict.fromkeys(partitions, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    failed: dict[tuple[str, int], Error] = {}
    accepted: list[tuple[str, int]] = []
    metadata = ctx.replica_manager.metadata
    for topic, index in partitions:
        if ctx.version < 4 and (
            topic in INTERNAL_TOPICS or not topic_allowed(ctx, Operation.WRITE, topic)
        ):
            failed[(topic, index)] = Error.TOPIC_AUTHORIZATION_FAILED
            continue
        known = metadata.topic(topic)
        if known is None or index not in known.partitions:
            failed[(topic, index)] = Error.UNKNOWN_TOPIC_OR_PARTITION
        else:
            accepted.append((topic, index))
    if failed:
        return failed | dict.fromkeys(accepted, Error.OPERATION_NOT_ATTEMPTED)
    if verify_only:
        return coordinator.verify(transactional_id, producer_id, epoch, accepted)
    # From a broker (v4+), an add is TV2's: a leader adding the partition of a Produce v12.
    error = await coordinator.add_partitions(
        transactional_id, producer_id, epoch, set(accepted), TV_2 if ctx.version >= 4 else TV_1
    )
    return dict.fromkeys(accepted, _old_fenced(ctx, error))


@api(
    ApiKey.ADD_PARTITIONS_TO_TXN,
    versions=(0, 5),
    roles=Role.BROKER,
    senders=Senders.CLIENTS_AND_NODES,
    error_response=_add_partitions_error,
)
async def handle_add_partitions(ctx: RequestContext, request) -> dict:
    if ctx.version >= 4 and not inter_node_allowed(ctx):
        return _add_partitions_error(request, Error.CLUSTER_AUTHORIZATION_FAILED)
    results = []
    for transactional_id, producer_id, epoch, verify_only, partitions in _transactions_of(
        ctx, request
    ):
        answer = await _add_one(ctx, transactional_id, producer_id, epoch, verify_only, partitions)
        results.append(
            {"transactional_id": transactional_id, "topic_results": _topic_results(answer)}
        )
    if ctx.version < 4:
        return {"results_by_topic_v3_and_below": results[0]["topic_results"]}
    return {"error_code": Error.NONE, "results_by_transaction": results}


def _error_only(request, error: Error) -> dict:
    return {"error_code": error}


@api(ApiKey.ADD_OFFSETS_TO_TXN, versions=(0, 4), roles=Role.BROKER, error_response=_error_only)
async def handle_add_offsets(ctx: RequestContext, request) -> dict:
    """The group's `__consumer_offsets` partition joins the transaction (Kafka's
    handleAddOffsetsToTxnRequest), so its TxnOffsetCommit is completed by the markers."""
    transactional_id = request.transactional_id
    if not allowed(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return {"error_code": Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return {"error_code": Error.GROUP_AUTHORIZATION_FAILED}
    partition = (OFFSETS_TOPIC, ctx.group_coordinator.partition_of(request.group_id))
    error = await ctx.transaction_coordinator.add_partitions(
        transactional_id, request.producer_id, request.producer_epoch, {partition}
    )
    return {"error_code": _old_fenced(ctx, error)}


@api(ApiKey.END_TXN, versions=(0, 5), roles=Role.BROKER, error_response=_error_only)
async def handle_end_txn(ctx: RequestContext, request) -> dict:
    """EndTxn v0-v4 (TV1) and v5 (TV2: the epoch bumped, the next producer id and epoch
    answered): answered once the decision is in `__transaction_state`."""
    transactional_id = request.transactional_id
    if not allowed(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return {"error_code": Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    error, producer_id, epoch = await ctx.transaction_coordinator.end_transaction(
        transactional_id,
        request.producer_id,
        request.producer_epoch,
        bool(request.committed),
        TV_2 if ctx.version >= 5 else TV_1,
    )
    return {
        "error_code": _old_fenced(ctx, error),
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }


def _describe_error(request, error: Error) -> dict:
    return {
        "transaction_states": [
            {
                "error_code": error,
                "transactional_id": transactional_id,
                "transaction_state": "",
                "transaction_timeout": 0,
                "transaction_start_time": 0,
                "producer_id": 0,
                "producer_epoch": 0,
            }
            for transactional_id in request.transactional_ids
        ]
    }


@api(
    ApiKey.DESCRIBE_TRANSACTIONS, versions=(0, 0), roles=Role.BROKER, error_response=_describe_error
)
async def handle_describe_transactions(ctx: RequestContext, request) -> dict:
    coordinator = ctx.transaction_coordinator
    states = []
    for transactional_id in request.transactional_ids:
        entry = {
            "error_code": Error.NONE,
            "transactional_id": transactional_id,
            # Kafka's defaults for an entry answered with an error alone.
            "transaction_state": "",
            "transaction_timeout": 0,
            "transaction_start_time": 0,
            "producer_id": 0,
            "producer_epoch": 0,
            "topics": [],
        }
        if not allowed(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            entry["error_code"] = Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            states.append(entry)
            continue
        error, meta = coordinator.describe(transactional_id)
        entry["error_code"] = error
        if meta is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, index in sorted(meta.partitions):
                if topic_allowed(ctx, Operation.DESCRIBE, topic):
                    by_topic.setdefault(topic, []).append(index)
            entry.update(
                transaction_state=meta.state.kafka_name,
                transaction_timeout=meta.timeout_ms,
                transaction_start_time=meta.start_ms,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                topics=[{"topic": t, "partitions": ids} for t, ids in by_topic.items()],
            )
        states.append(entry)
    return {"transaction_states": states}


@api(ApiKey.LIST_TRANSACTIONS, versions=(0, 2), roles=Role.BROKER, error_response=_error_only)
async def handle_list_transactions(ctx: RequestContext, request) -> dict:
    """The transactions this broker coordinates (an admin client asks every broker). v2
    (KIP-1152): with a transactional id pattern, only the ids the whole pattern matches (Java's
    Matcher.matches, here re.fullmatch); a pattern that does not compile is
    INVALID_REGULAR_EXPRESSION; an empty or null one filters nothing."""
    error, unknown, listed = ctx.transaction_coordinator.list_transactions(
        list(request.state_filters),
        [int(p) for p in request.producer_id_filters],
        int(getattr(request, "duration_filter", -1)),
    )
    if pattern_text := getattr(request, "transactional_id_pattern", None):
        try:
            pattern = re.compile(pattern_text)
        except re.error:
            return {"error_code": Error.INVALID_REGULAR_EXPRESSION, "transaction_states": ()}
        listed = [meta for meta in listed if pattern.fullmatch(meta.transactional_id)]
    return {
        "error_code": error,
        "unknown_state_filters": unknown,
        "transaction_states": [
            {
                "transactional_id": meta.transactional_id,
                "producer_id": meta.producer_id,
                "transaction_state": meta.state.kafka_name,
            }
            for meta in listed
            if allowed(
                ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, meta.transactional_id
            )
        ],
    }
