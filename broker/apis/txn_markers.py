"""WriteTxnMarkers: the transaction coordinator's COMMIT and ABORT markers, written by leaders.

Kafka's KafkaApis.handleWriteTxnMarkersRequest: an inter-node API (``clusterAction``: only
on an inter-node listener, and with CLUSTER_ACTION on the cluster under an authorizer;
dispatch answers anyone else CLUSTER_AUTHORIZATION_FAILED, see apis/inter_node.py). Each
marker of the request is written to every partition it names that this broker leads, with
acks=-1 (ReplicaManager.append_txn_markers), and answered per partition with Kafka's codes:
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH (a marker of an
older producer epoch than the partition has seen), TRANSACTION_COORDINATOR_FENCED (an older
coordinator epoch), NOT_ENOUGH_REPLICAS and the acks=-1 outcomes. The markers of one request
are written concurrently, as Kafka appends them all before waiting.

v2 (KIP-1228, Kafka 4.4): each marker carries the TransactionVersion of the transaction it
ends (0 from v1, as Kafka's default); with 2 the leader refuses, INVALID_PRODUCER_EPOCH, a
marker whose producer epoch is not newer than the partition's (a TV2 commit or abort bumps
the epoch), bar a retry of one already written (ProducerState.check_marker).

Departure: Kafka's appends wait up to request.timeout.ms; here up to 30 s, the same default.
"""

import trio

from minibroker.apis import RequestContext, Role, Senders, api
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey

MARKER_TIMEOUT_S = 30.0


def _error_response(request, error: Error) -> dict:
    return {
        "markers": [
            {
                "producer_id": marker.producer_id,
                "topics": [
                    {
                        "name": topic.name,
                        "partitions": [
                            {"partition_index": index, "error_code": error}
                            for index in topic.partition_indexes
                        ],
                    }
                    for topic in marker.topics
                ],
            }
            for marker in request.markers
        ]
    }


@api(
    ApiKey.WRITE_TXN_MARKERS,
    versions=(1, 2),
    roles=Role.BROKER,
    senders=Senders.NODES,
    error_response=_error_response,
)
async def handle(ctx: RequestContext, request) -> dict:
    replicas = ctx.replica_manager
    results: list[dict[tuple[str, int], Error]] = [{} for _ in request.markers]

    async def write(position: int, marker) -> None:
        results[position] = await replicas.append_txn_markers(
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            coordinator_epoch=marker.coordinator_epoch,
            commit=marker.transaction_result,
            partitions=[
                (topic.name, index) for topic in marker.topics for index in topic.partition_indexes
            ],
            timeout_s=MARKER_TIMEOUT_S,
            transaction_version=int(getattr(marker, "transaction_version", 0)),
        )

    async with trio.open_nursery() as nursery:
        for position, marker in enumerate(request.markers):
            nursery.start_soon(write, position, marker)
    return {
        "markers": [
            {
                "producer_id": marker.producer_id,
                "topics": [
                    {
                        "name": topic.name,
                        "partitions": [
                            {
                                "partition_index": index,
                                "error_code": written.get(
                                    (topic.name, index), Error.UNKNOWN_TOPIC_OR_PARTITION
                                ),
                            }
                            for index in topic.partition_indexes
                        ],
                    }
                    for topic in marker.topics
                ],
            }
            for marker, written in zip(request.markers, results, strict=True)
        ]
    }
