"""TxnOffsetCommit (key 28, v0-v6): a transactional producer's consumed offsets, committed
with its transaction (KIP-98, the consume-transform-produce loop).

Kafka's KafkaApis.handleTxnOffsetCommitRequest: WRITE on the transactional id is needed
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition), then READ on the group
(GROUP_AUTHORIZATION_FAILED for every partition), then READ on each topic
(TOPIC_AUTHORIZATION_FAILED for that topic's partitions); partitions of unknown topics or
out of range answer UNKNOWN_TOPIC_OR_PARTITION; the rest go to the group coordinator
(GroupCoordinator.commit_transactional_offsets), which checks the group (NOT_COORDINATOR,
and from v3 the member and generation, KIP-447: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
FENCED_INSTANCE_ID), writes the offsets in a transactional batch of the producer and holds
them until the transaction's marker. v0-v1 clients (before Kafka 2.0's KAFKA-7296) are
answered COORDINATOR_NOT_AVAILABLE instead of COORDINATOR_LOAD_IN_PROGRESS, as Kafka does.

As Kafka 3.6+ (KIP-890 part 1, transaction.partition.verification.enable), the group's
`__consumer_offsets` partition must be in the producer's transaction (AddOffsetsToTxn added
it): the transaction coordinator verifies it (``verify_transaction``) before anything is
written, so a late commit of a finished or aborted transaction cannot leave offsets pending
for ever; its error answers every partition, NETWORK_EXCEPTION turned into
COORDINATOR_LOAD_IN_PROGRESS as Kafka's maybeConvertOffsetCommitError does. A node without a
transaction coordinator (before it is wired in) skips the verification.

KIP-890 part 2 (TV2): a client running Kafka's transaction protocol v2 sends TxnOffsetCommit
v5 without AddOffsetsToTxn; the group's offsets partition is then added to the transaction
(the coordinator's ``verify_transaction`` with ``add``, as Kafka's group coordinator asks
AddPartitionsToTxnManager with the ``addPartition`` operation) instead of verified.

v6 (KIP-1319) names each topic by its id, in the request and the answer: an id this broker
does not know is UNKNOWN_TOPIC_ID for the topic's partitions.
"""

from dataclasses import dataclass

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import allowed, group_allowed, topic_allowed
from minibroker.apis.offsets import offset_commit_error
from minibroker.common.names import OFFSETS_TOPIC
from minibroker.coordinator.group.service import TxnCommitRequest
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation, ResourceType

NO_LEADER_EPOCH = -1
# TxnOffsetCommit v5 (TV2) adds the offsets partition to the transaction.
_ADDS_PARTITION = 5

# Kafka's GroupMetadataManager.maybeConvertOffsetCommitError, for a failed verification.
_VERIFY_ERRORS = {
    Error.NETWORK_EXCEPTION: Error.COORDINATOR_LOAD_IN_PROGRESS,
    Error.UNKNOWN_TOPIC_OR_PARTITION: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_ENOUGH_REPLICAS: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_LEADER_OR_FOLLOWER: Error.NOT_COORDINATOR,
}


async def _verify(ctx: RequestContext, request) -> Error:
    """KIP-890's check that the group's offsets partition is in the transaction."""
    verifier = ctx.transaction_coordinator
    if ctx.group_coordinator.check(request.group_id) != Error.NONE:
        return Error.NONE  # (the coordinator answers NOT_COORDINATOR and the like)
    partition = (OFFSETS_TOPIC, ctx.group_coordinator.partition_of(request.group_id))
    outcome = await verifier.verify_transaction(
        request.transactional_id,
        int(request.producer_id),
        int(request.producer_epoch),
        [partition],
        add=ctx.version >= _ADDS_PARTITION,
    )
    error = Error(outcome.get(partition, Error.NONE))
    return _VERIFY_ERRORS.get(error, error)


@dataclass(frozen=True, slots=True)
class _Topic:
    """A request topic by name: v6's named by its id (None when the id is unknown)."""

    name: str | None
    topic_id: object
    partitions: tuple


def _topics(ctx: RequestContext | None, request) -> list[_Topic]:
    topics = []
    for topic in request.topics:
        if not hasattr(topic, "topic_id"):
            topics.append(_Topic(topic.name, None, topic.partitions))
            continue
        known = None
        if ctx is not None and topic.topic_id:
            known = ctx.replica_manager.metadata.topic_by_id(topic.topic_id)
        name = known.name if known is not None else None
        topics.append(_Topic(name, topic.topic_id, topic.partitions))
    return topics


def _answer(topics: list[_Topic], results: dict[tuple[str, int], Error]) -> dict:
    return {
        "topics": [
            {
                "name": topic.name,
                "topic_id": topic.topic_id,
                "partitions": [
                    {
                        "partition_index": partition.partition_index,
                        "error_code": Error.UNKNOWN_TOPIC_ID
                        if topic.name is None
                        else results[(topic.name, partition.partition_index)],
                    }
                    for partition in topic.partitions
                ],
            }
            for topic in topics
        ]
    }


@api(
    ApiKey.TXN_OFFSET_COMMIT,
    versions=(0, 6),
    roles=Role.BROKER,
    error_response=offset_commit_error,
)
async def handle_txn_offset_commit(ctx: RequestContext, request) -> dict:
    topics = _topics(ctx, request)
    offsets = {
        (topic.name, partition.partition_index): (
            partition.committed_offset,
            getattr(partition, "committed_leader_epoch", NO_LEADER_EPOCH),
            partition.committed_metadata or "",
        )
        for topic in topics
        if topic.name is not None
        for partition in topic.partitions
    }
    if not allowed(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return _answer(topics, dict.fromkeys(offsets, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return _answer(topics, dict.fromkeys(offsets, Error.GROUP_AUTHORIZATION_FAILED))
    results: dict[tuple[str, int], Error] = {}
    metadata = ctx.replica_manager.metadata
    for topic in topics:
        if topic.name is None:
            continue  # UNKNOWN_TOPIC_ID (see _answer)
        known = metadata.topic(topic.name)
        for partition in topic.partitions:
            key = (topic.name, partition.partition_index)
            if not topic_allowed(ctx, Operation.READ, topic.name):
                results[key] = Error.TOPIC_AUTHORIZATION_FAILED
            elif known is None or partition.partition_index not in known.partitions:
                results[key] = Error.UNKNOWN_TOPIC_OR_PARTITION
    wanted = {key: value for key, value in offsets.items() if key not in results}
    if wanted and (error := await _verify(ctx, request)) != Error.NONE:
        results |= dict.fromkeys(wanted, error)
        wanted = {}
    if wanted:
        results |= await ctx.group_coordinator.commit_transactional_offsets(
            TxnCommitRequest(
                request.group_id,
                int(request.producer_id),
                int(request.producer_epoch),
                getattr(request, "generation_id", -1),
                getattr(request, "member_id", ""),
                getattr(request, "group_instance_id", None),
                wanted,
            )
        )
    if ctx.version < 2:
        results = {
            key: Error.COORDINATOR_NOT_AVAILABLE
            if error == Error.COORDINATOR_LOAD_IN_PROGRESS
            else error
            for key, error in results.items()
        }
    return _answer(topics, results)
