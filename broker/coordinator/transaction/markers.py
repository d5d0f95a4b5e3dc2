"""The transaction coordinator's marker channel: WriteTxnMarkers to each partition's leader.

Kafka's TransactionMarkerChannelManager and TransactionMarkerRequestCompletionHandler: once
PrepareCommit or PrepareAbort is in `__transaction_state`, the COMMIT or ABORT marker goes
to the leader of every partition of the transaction (found in the metadata cache), over the
inter-broker listener, this broker included (Kafka also sends to itself through the network
client). The answer's per-partition code decides, as Kafka's completion handler does:

- NONE: that partition is done;
- NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, an unreachable leader or one not known yet:
  retried (the leader is looked up again) until written;
- a partition whose topic is gone from the metadata is dropped (Kafka: its marker cannot be
  written and nothing waits for it);
- UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION: dropped (the partition cannot hold
  markers, as Kafka skips it);
- INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: sending stops and the transaction
  is not completed here (a newer coordinator or producer epoch owns it).

The request is WriteTxnMarkers v2 (KIP-1228), carrying the transaction's client transaction
version (Kafka's TxnMarkerEntry of TransactionMetadata.clientTransactionVersion), to a leader
whose ApiVersions (asked once per connection) lists v2, else v1 without it, as Kafka's
NetworkClient picks the highest version both ends know.

Departure: one connection per broker, one request per transaction at a time, instead of
Kafka's queue that batches the markers of many transactions into one request per broker.
"""

import logging
from collections.abc import Awaitable, Callable

import trio

from minibroker.cluster.node_connection import (
    CONNECTION_ERRORS,
    BrokerConnections,
    NodeConnection,
)
from minibroker.common.config import BrokerConfig
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.replication.replica_manager import ReplicaManager
from minibroker.security.listeners import client_security

log = logging.getLogger("txn-markers")

# Kafka's ApiKeys.WRITE_TXN_MARKERS (its handler is apis/txn_markers.py, the log side's).
WRITE_TXN_MARKERS = 27
API_VERSIONS = 18
# WriteTxnMarkers v2 (KIP-1228) adds each marker's TransactionVersion; v1 is the fallback.
MARKERS_WITH_TRANSACTION_VERSION = 2
MARKERS_BASELINE = 1
RETRY_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0
REQUEST_TIMEOUT_S = 30.0

_RETRIABLE = {
    Error.NOT_LEADER_OR_FOLLOWER,
    Error.UNKNOWN_TOPIC_OR_PARTITION,
    Error.NOT_ENOUGH_REPLICAS,
    Error.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    Error.REQUEST_TIMED_OUT,
    Error.KAFKA_STORAGE_ERROR,
    Error.LEADER_NOT_AVAILABLE,
    Error.FENCED_LEADER_EPOCH,
    Error.COORDINATOR_LOAD_IN_PROGRESS,
    Error.UNKNOWN_SERVER_ERROR,
}
_SKIPPED = {Error.UNSUPPORTED_FOR_MESSAGE_FORMAT, Error.UNSUPPORTED_VERSION}
_FENCED = {Error.INVALID_PRODUCER_EPOCH, Error.TRANSACTION_COORDINATOR_FENCED}

Partition = tuple[str, int]


class MarkersFenced(Exception):
    """A leader refused the marker as stale: a newer coordinator or producer epoch exists."""


class MarkerChannel:
    """Writes one transaction's markers to the leaders of its partitions."""

    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        connect: Callable[..., Awaitable[NodeConnection]] | None = None,
    ) -> None:
        self.config = config
        self.replicas = replicas
        listener = config.inter_broker_listener.name
        self._connections = BrokerConnections(
            lambda broker_id: replicas.metadata.brokers.get(broker_id),
            f"txn-markers-{config.node_id}",
            client_security(config, listener) if config.is_broker else None,
            connect=connect or replicas.connect,
            timeout_s=REQUEST_TIMEOUT_S,
        )
        self.markers_written = 0
        # broker id -> (the connection asked, the highest WriteTxnMarkers version it serves)
        self._marker_versions: dict[int, tuple[NodeConnection, int]] = {}

    async def write(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: set[Partition],
        still_valid: Callable[[], bool],
        transaction_version: int = 0,
    ) -> bool:
        """Write the markers until every partition has it or is gone. False when sending
        stopped: ``still_valid`` turned false (this broker no longer coordinates the id) or a
        leader answered that the marker is stale (MarkersFenced is logged)."""
        remaining = set(partitions)
        backoff = RETRY_BACKOFF_S
        while remaining:
            if not still_valid():
                return False
            by_leader: dict[int, list[Partition]] = {}
            for topic, index in sorted(remaining):
                known = self.replicas.metadata.topic(topic)
                if known is None or index not in known.partitions:
                    log.info("dropping the marker of %s-%d: the partition is gone", topic, index)
                    remaining.discard((topic, index))
                    continue
                leader = known.partitions[index].leader
                if leader >= 0:
                    by_leader.setdefault(leader, []).append((topic, index))
            if not remaining:
                break
            done: set[Partition] = set()
            refusals: list[str] = []
            async with trio.open_nursery() as nursery:
                for leader, group in by_leader.items():
                    nursery.start_soon(
                        self._send_into,
                        (done, refusals),
                        leader,
                        (producer_id, producer_epoch, coordinator_epoch, commit),
                        transaction_version,
                        group,
                    )
            if refusals:
                log.warning(
                    "stopped writing the markers of producer %d: a leader has a newer epoch",
                    producer_id,
                )
                return False
            remaining -= done
            self.markers_written += len(done)
            if remaining:
                await trio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            else:
                break
        return still_valid()

    async def _send_into(
        self,
        into: tuple[set[Partition], list[str]],
        leader: int,
        marker: tuple[int, int, int, bool],
        transaction_version: int,
        group: list[Partition],
    ) -> None:
        done, refusals = into
        try:
            done |= await self._send(leader, *marker, group, transaction_version)
        except MarkersFenced as refusal:
            refusals.append(str(refusal))

    async def _send(
        self,
        leader: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        group: list[Partition],
        transaction_version: int = 0,
    ) -> set[Partition]:
        """One WriteTxnMarkers to ``leader``: the partitions that are done (written, or
        dropped as Kafka drops them)."""
        by_topic: dict[str, list[int]] = {}
        for topic, index in group:
            by_topic.setdefault(topic, []).append(index)
        try:
            version = await self.marker_version(leader)
        except CONNECTION_ERRORS as error:
            log.debug("ApiVersions to broker %d failed: %r", leader, error)
            return set()
        request = codec.build(
            codec.request_class(WRITE_TXN_MARKERS, version),
            {
                "markers": [
                    {
                        "producer_id": producer_id,
                        "producer_epoch": producer_epoch,
                        "transaction_result": commit,
                        "coordinator_epoch": coordinator_epoch,
                        "transaction_version": transaction_version,  # dropped below v2
                        "topics": [
                            {"name": topic, "partition_indexes": indexes}
                            for topic, indexes in by_topic.items()
                        ],
                    }
                ]
            },
        )
        try:
            response = await self._connections.request(leader, request)
        except CONNECTION_ERRORS as error:
            # Transactions share the connection to a leader: one whose request timed out
            # closes it under the others, which find it closed (trio.ClosedResourceError).
            log.debug("markers to broker %d failed: %r", leader, error)
            return set()
        except Exception as error:  # an answer that does not decode: a broker of the past
            log.warning("markers to broker %d failed: %r", leader, error)
            return set()
        done: set[Partition] = set()
        for marker in response.markers:
            for topic in marker.topics:
                for partition in topic.partitions:
                    key = (str(topic.name), int(partition.partition_index))
                    code = Error(partition.error_code.value)
                    if code == Error.NONE or code in _SKIPPED:
                        done.add(key)
                    elif code in _FENCED:
                        raise MarkersFenced(code.name)
                    elif code not in _RETRIABLE:
                        log.warning(
                            "marker of %s-%d answered %s; retrying", key[0], key[1], code.name
                        )
        return done

    async def marker_version(self, broker_id: int) -> int:
        """The WriteTxnMarkers version to send ``broker_id``: 2 when its ApiVersions lists it,
        else 1; asked once per connection (a broker that restarted, upgraded or downgraded,
        is asked again on the new one). An ApiVersions answer that does not decode or lists no
        WriteTxnMarkers gives 1; a broken connection raises one of CONNECTION_ERRORS."""
        connection = await self._connections.connection(broker_id)
        known = self._marker_versions.get(broker_id)
        if known is not None and known[0] is connection:
            return known[1]
        request = codec.build(
            codec.request_class(API_VERSIONS, 3),
            {"client_software_name": "minibroker", "client_software_version": "1"},
        )
        version = MARKERS_BASELINE
        try:
            response = await self._connections.request(broker_id, request)
        except CONNECTION_ERRORS:
            raise
        except Exception as error:  # an answer that does not decode: assume the baseline
            log.warning("ApiVersions to broker %d failed: %r", broker_id, error)
            return MARKERS_BASELINE
        for entry in getattr(response, "api_keys", ()):
            if int(entry.api_key) == WRITE_TXN_MARKERS:
                version = min(int(entry.max_version), MARKERS_WITH_TRANSACTION_VERSION)
        self._marker_versions[broker_id] = (connection, max(version, MARKERS_BASELINE))
        return max(version, MARKERS_BASELINE)

    async def request(self, broker_id: int, request):
        """One request to another broker's inter-broker listener (the coordinator's other
        inter-broker request: KIP-890's verify-only AddPartitionsToTxn); a connection that
        fails is dropped and the error raised."""
        return await self._connections.request(broker_id, request)

    async def aclose(self) -> None:
        await self._connections.aclose()
