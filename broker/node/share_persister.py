"""The share persister a broker runs: the share coordinator's, here or over the wire.

Kafka's ``DefaultStatePersister`` with its ``PersisterStateManager`` (server-common): each
operation on a share partition's state goes to the share coordinator of its key. If this
broker serves the key (it leads the key's partition of `__share_group_state`), the local
share coordinator (coordinator/share/service.py) is called directly; else the coordinator is
found with FindCoordinator key type 2 (v6, key "group:topicId:partition", asked of this
broker over its inter-broker listener, which creates `__share_group_state` on first use) and
the state API (InitializeShareGroupState 83, ReadShareGroupState 84, WriteShareGroupState 85,
DeleteShareGroupState 86, ReadShareGroupStateSummary 87) sent to it over its inter-broker
listener.

Retries, as PersisterStateManager's handlers do: NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE and COORDINATOR_LOAD_IN_PROGRESS (and a connection that fails)
find the coordinator again and retry, with an exponential backoff from 100 ms to 1 s, until
a deadline (``deadline_s``, 30 s: Kafka's request.timeout.ms); then the last error is the
answer. Every other code is the answer at once (FENCED_STATE_EPOCH, FENCED_LEADER_EPOCH,
UNKNOWN_TOPIC_OR_PARTITION, ...).

Composed in node/ because it needs both the coordinator layer and the inter-broker client
(cluster/): replication/ (the share partition manager's layer) sees only the SharePersister
protocol of replication/share_persister.py. Departure: Kafka batches the requests of many
share partitions to one coordinator into one request; here one request per operation.
"""

import logging
from collections.abc import Awaitable, Callable

import trio

from minibroker.cluster.controller_client import build_request
from minibroker.cluster.node_connection import (
    CONNECTION_ERRORS,
    BrokerConnections,
    NodeConnection,
)
from minibroker.common.config import BrokerConfig
from minibroker.coordinator.share.service import ShareCoordinator
from minibroker.coordinator.share.state import SharePartitionKey
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.replication.replica_manager import ReplicaManager
from minibroker.replication.share_partition import PersistedState, RecordState, StateBatch
from minibroker.replication.share_persister import (
    ReadResult,
    ShareStateKey,
    SummaryResult,
    WriteState,
)
from minibroker.security.listeners import client_security

log = logging.getLogger("share-persister")

SHARE_KEY_TYPE = 2
RETRIABLE = frozenset(
    {Error.NOT_COORDINATOR, Error.COORDINATOR_NOT_AVAILABLE, Error.COORDINATOR_LOAD_IN_PROGRESS}
)
DEADLINE_S = 30.0
BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0
REQUEST_TIMEOUT_S = 10.0


class CoordinatorPersister:
    """replication.share_persister.SharePersister, on the share coordinator."""

    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        coordinator: ShareCoordinator,
        *,
        connect: Callable[..., Awaitable[NodeConnection]] | None = None,
        deadline_s: float = DEADLINE_S,
    ) -> None:
        self.config = config
        self.replicas = replicas
        self.coordinator = coordinator
        self.deadline_s = deadline_s
        listener = config.inter_broker_listener.name
        self._connections = BrokerConnections(
            lambda broker_id: replicas.metadata.brokers.get(broker_id),
            f"share-persister-{config.node_id}",
            client_security(config, listener) if config.is_broker else None,
            connect=connect or replicas.connect,
            timeout_s=REQUEST_TIMEOUT_S,
        )
        self.remote_requests = 0
        self.local_calls = 0

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Holds the connections until cancelled, then closes them."""
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await self.aclose()

    # -- the five operations ---------------------------------------------------------------

    async def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> Error:
        async def local(shard_key: SharePartitionKey) -> Error:
            return await self.coordinator.initialize(shard_key, state_epoch, start_offset)

        async def remote(node: int) -> Error:
            request = build_request(
                ApiKey.INITIALIZE_SHARE_GROUP_STATE,
                _one(key, {"state_epoch": state_epoch, "start_offset": start_offset}),
            )
            return _code((await self._send(node, request)).results[0].partitions[0])

        return await self._call(key, local, remote, lambda error: error)

    async def read(self, key: ShareStateKey, leader_epoch: int) -> ReadResult:
        async def local(shard_key: SharePartitionKey) -> ReadResult:
            answer = await self.coordinator.read(shard_key, leader_epoch)
            if answer.error != Error.NONE or answer.state is None:
                return ReadResult(answer.error)
            return ReadResult(Error.NONE, answer.state.state(), leader_epoch)

        async def remote(node: int) -> ReadResult:
            request = build_request(
                ApiKey.READ_SHARE_GROUP_STATE, _one(key, {"leader_epoch": leader_epoch})
            )
            partition = (await self._send(node, request)).results[0].partitions[0]
            error = _code(partition)
            if error != Error.NONE:
                return ReadResult(error)
            batches = tuple(
                StateBatch(
                    int(b.first_offset),
                    int(b.last_offset),
                    RecordState(int(b.delivery_state)),
                    int(b.delivery_count),
                )
                for b in partition.state_batches
            )
            state = PersistedState(int(partition.start_offset), int(partition.state_epoch), batches)
            return ReadResult(Error.NONE, state, leader_epoch)

        return await self._call(key, local, remote, ReadResult)

    async def write(self, key: ShareStateKey, state: WriteState) -> Error:
        async def local(shard_key: SharePartitionKey) -> Error:
            return await self.coordinator.write(
                shard_key,
                state_epoch=state.state_epoch,
                leader_epoch=state.leader_epoch,
                start_offset=state.start_offset,
                batches=state.batches,
                delivery_complete_count=state.delivery_complete_count,
            )

        async def remote(node: int) -> Error:
            request = build_request(
                ApiKey.WRITE_SHARE_GROUP_STATE,
                _one(
                    key,
                    {
                        "state_epoch": state.state_epoch,
                        "leader_epoch": state.leader_epoch,
                        "start_offset": state.start_offset,
                        "delivery_complete_count": state.delivery_complete_count,
                        "state_batches": [
                            {
                                "first_offset": b.first_offset,
                                "last_offset": b.last_offset,
                                "delivery_state": int(b.delivery_state),
                                "delivery_count": b.delivery_count,
                            }
                            for b in state.batches
                        ],
                    },
                ),
            )
            return _code((await self._send(node, request)).results[0].partitions[0])

        return await self._call(key, local, remote, lambda error: error)

    async def delete(self, key: ShareStateKey) -> Error:
        async def local(shard_key: SharePartitionKey) -> Error:
            return await self.coordinator.delete(shard_key)

        async def remote(node: int) -> Error:
            request = build_request(ApiKey.DELETE_SHARE_GROUP_STATE, _one(key, {}))
            return _code((await self._send(node, request)).results[0].partitions[0])

        return await self._call(key, local, remote, lambda error: error)

    async def read_summary(self, key: ShareStateKey, leader_epoch: int) -> SummaryResult:
        async def local(shard_key: SharePartitionKey) -> SummaryResult:
            answer = await self.coordinator.read_summary(shard_key, leader_epoch)
            if answer.summary is None:
                return SummaryResult(answer.error)
            s = answer.summary
            return SummaryResult(
                answer.error,
                s.state_epoch,
                s.leader_epoch,
                s.start_offset,
                s.delivery_complete_count,
            )

        async def remote(node: int) -> SummaryResult:
            request = build_request(
                ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, _one(key, {"leader_epoch": leader_epoch})
            )
            p = (await self._send(node, request)).results[0].partitions[0]
            return SummaryResult(
                _code(p),
                int(p.state_epoch),
                int(p.leader_epoch),
                int(p.start_offset),
                int(getattr(p, "delivery_complete_count", -1)),
            )

        return await self._call(key, local, remote, SummaryResult)

    # -- finding the coordinator and retrying -----------------------------------------------

    async def _call(self, key: ShareStateKey, local, remote, failed):
        """Run the operation where the key's coordinator is, retrying the retriable codes
        until the deadline (see the module)."""
        shard_key = SharePartitionKey(key.group, key.topic_id, key.partition)
        deadline = trio.current_time() + self.deadline_s
        backoff = BACKOFF_S
        while True:
            if self.coordinator.check(shard_key) == Error.NONE:
                self.local_calls += 1
                result = await local(shard_key)
            else:
                node, error = await self.find_coordinator(key)
                if node is None:
                    result = failed(error)
                elif node == self.config.node_id:
                    self.local_calls += 1
                    result = await local(shard_key)
                else:
                    try:
                        self.remote_requests += 1
                        result = await remote(node)
                    except CONNECTION_ERRORS as problem:
                        log.info("share coordinator %d unreachable: %s", node, problem)
                        result = failed(Error.COORDINATOR_NOT_AVAILABLE)
            error = result if isinstance(result, Error) else result.error
            if error not in RETRIABLE or trio.current_time() + backoff > deadline:
                return result
            await trio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def find_coordinator(self, key: ShareStateKey) -> tuple[int | None, Error]:
        """FindCoordinator v6, key type 2, asked of this broker (then of the others this
        broker knows, if it cannot be reached): (the coordinator's node id, NONE) or (None,
        the error)."""
        request = build_request(
            ApiKey.FIND_COORDINATOR,
            {
                "key_type": SHARE_KEY_TYPE,
                "coordinator_keys": [
                    SharePartitionKey(key.group, key.topic_id, key.partition).coordinator_key()
                ],
            },
        )
        brokers = [self.config.node_id] + [
            b for b in sorted(self.replicas.metadata.brokers) if b != self.config.node_id
        ]
        for broker in brokers:
            try:
                response = await self._send(broker, request)
            except CONNECTION_ERRORS:
                continue
            (answer,) = response.coordinators
            error = Error(answer.error_code.value)
            if error != Error.NONE:
                return None, error
            return int(answer.node_id), Error.NONE
        return None, Error.COORDINATOR_NOT_AVAILABLE

    # -- connections ------------------------------------------------------------------------

    async def _send(self, broker_id: int, request):
        return await self._connections.request(broker_id, request)

    async def aclose(self) -> None:
        await self._connections.aclose()


def _one(key: ShareStateKey, partition: dict) -> dict:
    """A state request of one share partition."""
    return {
        "group_id": key.group,
        "topics": [
            {"topic_id": key.topic_id, "partitions": [{"partition": key.partition, **partition}]}
        ],
    }


def _code(partition) -> Error:
    return Error(partition.error_code.value)
