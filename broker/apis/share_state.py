"""The share coordinator's state APIs: InitializeShareGroupState (83), ReadShareGroupState
(84), WriteShareGroupState (85), DeleteShareGroupState (86), ReadShareGroupStateSummary (87).

Kafka's KafkaApis.handle{Initialize,Read,Write,Delete}ShareGroupState(Request) and
handleReadShareGroupStateSummaryRequest, at Kafka 4.4's versions (Write and ReadSummary v1
carry KIP-1226's DeliveryCompleteCount). Kafka's ApiKeys mark them ``clusterAction``: only
brokers send them (a partition leader's persister, or the group coordinator initializing and
deleting a share group's state), so they are inter-node APIs here (Senders.NODES: accepted on
an inter-node listener and, under an authorizer, with CLUSTER_ACTION on the cluster; anyone
else is answered CLUSTER_AUTHORIZATION_FAILED, see apis/inter_node.py).

Each partition of a request is one share partition's key (group, topic id, partition),
answered by the share coordinator (coordinator/share/service.py) with Kafka's codes:
NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS when this broker does not serve the key now;
UNKNOWN_TOPIC_OR_PARTITION for a topic or partition this cluster does not have, or a key never
initialized; FENCED_STATE_EPOCH and FENCED_LEADER_EPOCH; INVALID_REQUEST for a null topic
id, a negative partition or an empty group id. The partitions of one request are served one
after another (Kafka sends one key per request; a request with several is served whole).
"""

import uuid

from minibroker.apis import RequestContext, Role, Senders, api
from minibroker.coordinator.share.state import SharePartitionKey
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.replication.share_partition import RecordState, StateBatch


def _key(group: str, topic_id: uuid.UUID | None, partition: int) -> SharePartitionKey:
    return SharePartitionKey(group, topic_id or uuid.UUID(int=0), partition)


def _results(request, answer) -> dict:
    """The response's ``results``: one entry per topic, ``answer(topic, partition)`` each."""
    return {
        "results": [
            {
                "topic_id": topic.topic_id,
                "partitions": [answer(topic, partition) for partition in topic.partitions],
            }
            for topic in request.topics
        ]
    }


def _error_response(request, error: Error) -> dict:
    return _results(
        request,
        lambda topic, partition: {
            "partition": partition.partition,
            "error_code": error,
            "error_message": None,
            "state_epoch": -1,
            "leader_epoch": -1,
            "start_offset": -1,
            "state_batches": (),
        },
    )


def _message(error: Error) -> str | None:
    return None if error == Error.NONE else error.name


async def _each(request, serve) -> dict:
    answers: dict[tuple[int, int], dict] = {}
    for t, topic in enumerate(request.topics):
        for p, partition in enumerate(topic.partitions):
            answers[(t, p)] = await serve(topic, partition)
    return {
        "results": [
            {
                "topic_id": topic.topic_id,
                "partitions": [answers[(t, p)] for p in range(len(topic.partitions))],
            }
            for t, topic in enumerate(request.topics)
        ]
    }


@api(
    ApiKey.INITIALIZE_SHARE_GROUP_STATE,
    versions=(0, 0),
    roles=Role.BROKER,
    senders=Senders.NODES,
    error_response=_error_response,
)
async def handle_initialize(ctx: RequestContext, request) -> dict:
    coordinator = ctx.share_state_coordinator

    async def serve(topic, partition) -> dict:
        error = await coordinator.initialize(
            _key(request.group_id, topic.topic_id, partition.partition),
            partition.state_epoch,
            partition.start_offset,
        )
        return {
            "partition": partition.partition,
            "error_code": error,
            "error_message": _message(error),
        }

    return await _each(request, serve)


@api(
    ApiKey.READ_SHARE_GROUP_STATE,
    versions=(0, 0),
    roles=Role.BROKER,
    senders=Senders.NODES,
    error_response=_error_response,
)
async def handle_read(ctx: RequestContext, request) -> dict:
    coordinator = ctx.share_state_coordinator

    async def serve(topic, partition) -> dict:
        answer = await coordinator.read(
            _key(request.group_id, topic.topic_id, partition.partition), partition.leader_epoch
        )
        state = answer.state
        return {
            "partition": partition.partition,
            "error_code": answer.error,
            "error_message": _message(answer.error),
            "state_epoch": state.state_epoch if state else -1,
            "start_offset": state.start_offset if state else -1,
            "state_batches": [
                {
                    "first_offset": batch.first_offset,
                    "last_offset": batch.last_offset,
                    "delivery_state": int(batch.delivery_state),
                    "delivery_count": batch.delivery_count,
                }
                for batch in (state.batches if state else ())
            ],
        }

    return await _each(request, serve)


@api(
    ApiKey.WRITE_SHARE_GROUP_STATE,
    versions=(0, 1),
    roles=Role.BROKER,
    senders=Senders.NODES,
    error_response=_error_response,
)
async def handle_write(ctx: RequestContext, request) -> dict:
    coordinator = ctx.share_state_coordinator

    async def serve(topic, partition) -> dict:
        try:
            batches = tuple(
                StateBatch(
                    int(batch.first_offset),
                    int(batch.last_offset),
                    RecordState(int(batch.delivery_state)),
                    int(batch.delivery_count),
                )
                for batch in partition.state_batches
            )
        except ValueError:
            error = Error.INVALID_REQUEST  # a delivery state Kafka does not persist
        else:
            if any(b.first_offset > b.last_offset for b in batches):
                error = Error.INVALID_REQUEST
            else:
                error = await coordinator.write(
                    _key(request.group_id, topic.topic_id, partition.partition),
                    state_epoch=partition.state_epoch,
                    leader_epoch=partition.leader_epoch,
                    start_offset=partition.start_offset,
                    batches=batches,
                    delivery_complete_count=getattr(partition, "delivery_complete_count", -1),
                )
        return {
            "partition": partition.partition,
            "error_code": error,
            "error_message": _message(error),
        }

    return await _each(request, serve)


@api(
    ApiKey.DELETE_SHARE_GROUP_STATE,
    versions=(0, 0),
    roles=Role.BROKER,
    senders=Senders.NODES,
    error_response=_error_response,
)
async def handle_delete(ctx: RequestContext, request) -> dict:
    coordinator = ctx.share_state_coordinator

    async def serve(topic, partition) -> dict:
        error = await coordinator.delete(
            _key(request.group_id, topic.topic_id, partition.partition)
        )
        return {
            "partition": partition.partition,
            "error_code": error,
            "error_message": _message(error),
        }

    return await _each(request, serve)


@api(
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
    versions=(0, 1),
    roles=Role.BROKER,
    senders=Senders.NODES,
    error_response=_error_response,
)
async def handle_read_summary(ctx: RequestContext, request) -> dict:
    coordinator = ctx.share_state_coordinator

    async def serve(topic, partition) -> dict:
        answer = await coordinator.read_summary(
            _key(request.group_id, topic.topic_id, partition.partition), partition.leader_epoch
        )
        summary = answer.summary
        return {
            "partition": partition.partition,
            "error_code": answer.error,
            "error_message": _message(answer.error),
            "state_epoch": summary.state_epoch if summary else -1,
            "leader_epoch": summary.leader_epoch if summary else -1,
            "start_offset": summary.start_offset if summary else -1,
            "delivery_complete_count": summary.delivery_complete_count if summary else -1,
        }

    return await _each(request, serve)
