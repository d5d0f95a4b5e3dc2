"""DescribeProducers: the producers a replica of a partition knows, from its producer state.

Kafka's KafkaApis.handleDescribeProducersRequest and ReplicaManager.activeProducerState
(kafka-transactions.sh describe-producers and find-hanging): per partition, READ on its topic
under an authorizer (TOPIC_AUTHORIZATION_FAILED), then the producer state of this broker's
replica, leader or follower (a follower builds its producer state from the batches it
replicates): each producer's id, epoch, last sequence, last timestamp, the coordinator epoch
of its last marker and the first offset of its open transaction (-1 if none). A partition
with no replica here answers NOT_LEADER_OR_FOLLOWER, an unknown one
UNKNOWN_TOPIC_OR_PARTITION. The admin client asks the leader unless the user names a broker
(`--broker-id`), which then answers for its own replica, as Kafka's does.

As in Kafka, a producer is listed until producer.id.expiration.ms after its last write, unless
it has a transaction open on the partition. Departure: also only until its batches leave the
log by retention (see storage/producer_state.py).
"""

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import topic_allowed
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation


def _partition(index: int, error: Error, producers: list[dict] | None = None) -> dict:
    return {
        "partition_index": index,
        "error_code": error,
        "error_message": None,
        "active_producers": producers or [],
    }


def _error_response(request, error: Error) -> dict:
    return {
        "topics": [
            {
                "name": topic.name,
                "partitions": [_partition(index, error) for index in topic.partition_indexes],
            }
            for topic in request.topics
        ]
    }


@api(ApiKey.DESCRIBE_PRODUCERS, versions=(0, 0), roles=Role.BROKER, error_response=_error_response)
async def handle(ctx: RequestContext, request) -> dict:
    replicas = ctx.replica_manager
    topics = []
    for topic in request.topics:
        if not topic_allowed(ctx, Operation.READ, topic.name):
            partitions = [
                _partition(index, Error.TOPIC_AUTHORIZATION_FAILED)
                for index in topic.partition_indexes
            ]
            topics.append({"name": topic.name, "partitions": partitions})
            continue
        partitions = []
        for index in topic.partition_indexes:
            partition, error = replicas.hosted_partition(topic.name, index)
            if error != Error.NONE or partition is None:
                partitions.append(_partition(index, error))
                continue
            producers = [
                {
                    "producer_id": producer.producer_id,
                    "producer_epoch": producer.producer_epoch,
                    "last_sequence": producer.last_sequence,
                    "last_timestamp": producer.last_timestamp,
                    "coordinator_epoch": producer.coordinator_epoch,
                    "current_txn_start_offset": producer.current_txn_start_offset,
                }
                for producer in replicas.active_producers(partition)
            ]
            partitions.append(_partition(index, Error.NONE, producers))
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}
