"""The latest offset of a partition, asked of its leader: Kafka 4.4's
``org.apache.kafka.coordinator.group.PartitionMetadataClient`` (``DefaultPartitionMetadataClient``
in the broker), which the group coordinator uses for DescribeShareGroupOffsets' lag (KIP-1226:
the partition's latest offset minus the share partition's start offset minus its delivery
complete count).

Kafka sends a ListOffsets (LATEST_TIMESTAMP, read uncommitted: the high watermark) to each
partition's leader through the broker's inter-broker channel. Here: the high watermark of the
local replica when this broker leads the partition (no request), else a ListOffsets to the
leader the metadata names, over the inter-broker listener, on a connection kept per broker.
Anything that prevents an answer (no leader known, the connection refused, a timeout, an error
code from the leader) is None, and the lag is answered -1 then, as Kafka answers it when its
ListOffsets fails.

``log_end_offset`` asks the same leader for its log end offset instead, as a follower does
(Kafka's ReplicaFetcherThread.fetchLatestOffsetFromLeader: a ListOffsets LATEST with the
broker's own replica id, which the leader answers with its log end, not its high watermark).
The schema registry uses it to know how far `_schemas` goes before it says a schema id is
absent (schema_registry/service.py): everything acknowledged is below a leader's log end, even
a leader elected a moment ago whose high watermark still lags it (Kafka answers a consumer's
LATEST with OFFSET_NOT_AVAILABLE then, which minibroker's ListOffsets does not do yet)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from minibroker.cluster.controller_client import build_request
from minibroker.cluster.node_connection import CONNECTION_ERRORS, BrokerConnections
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.listeners import client_security

if TYPE_CHECKING:
    from minibroker.common.config import BrokerConfig
    from minibroker.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 5.0
LATEST_TIMESTAMP = -1
CONSUMER_REPLICA_ID = -1


class PartitionMetadataClient:
    """``latest_offset(topic, partition)``: the partition's high watermark, from its leader."""

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager) -> None:
        self.config = config
        self.replicas = replicas
        listener = config.inter_broker_listener.name if config.is_broker else None
        self._connections = BrokerConnections(
            lambda broker_id: replicas.metadata.brokers.get(broker_id),
            f"partition-metadata-{config.node_id}",
            client_security(config, listener) if listener is not None else None,
            connect=replicas.connect,
            timeout_s=REQUEST_TIMEOUT_S,
        )
        self.remote_requests = 0

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Holds the connections until cancelled, then closes them."""
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await self._connections.aclose()

    async def latest_offset(self, topic: str, index: int) -> int | None:
        partition, _ = self.replicas.hosted_partition(topic, index)
        if partition is not None and partition.is_leader:
            return partition.high_watermark
        return await self._ask_leader(topic, index, CONSUMER_REPLICA_ID)

    async def log_end_offset(self, topic: str, index: int) -> int | None:
        """The partition's log end offset on its leader (None: no answer), as a follower
        asks it."""
        partition, _ = self.replicas.hosted_partition(topic, index)
        if partition is not None and partition.is_leader:
            return partition.log.log_end_offset
        return await self._ask_leader(topic, index, self.config.node_id)

    async def _ask_leader(self, topic: str, index: int, replica_id: int) -> int | None:
        known = self.replicas.metadata.topic(topic)
        state = known.partitions.get(index) if known is not None else None
        if state is None or state.leader < 0 or state.leader == self.config.node_id:
            return None
        request = build_request(
            ApiKey.LIST_OFFSETS,
            {
                "replica_id": replica_id,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": index,
                                "current_leader_epoch": -1,
                                "timestamp": LATEST_TIMESTAMP,
                            }
                        ],
                    }
                ],
            },
        )
        self.remote_requests += 1
        try:
            response = await self._connections.request(state.leader, request)
        except CONNECTION_ERRORS as problem:
            log.info("latest offset of %s-%d, broker %d: %s", topic, index, state.leader, problem)
            return None
        (answer,) = response.topics[0].partitions
        if answer.error_code.value != Error.NONE:
            return None
        return int(answer.offset)
