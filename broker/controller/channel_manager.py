"""The controller's connections to each broker (Kafka: ``ControllerChannelManager``).

Kafka's controller keeps one queue and one ``RequestSendThread`` per broker; everything it
tells a broker (LeaderAndIsr, UpdateMetadata, StopReplica) goes through that queue, in order,
retried until the broker answers or leaves the cluster. Here a :class:`BrokerChannel` is that
queue and send thread (one trio task), and :class:`ControllerChannelManager` holds one per
broker. The config, ACL and SCRAM pushes use the same channels, so that a broker hears of a
topic's configs before the LeaderAndIsr that creates its replicas.

Where we depart from Kafka: an UpdateMetadata is built when it is sent, from the state as it
is then, and one still queued when another is queued merges with it (see
:meth:`BrokerChannel.enqueue_metadata`); and a channel holds its requests while a save of the
controller's state is in flight, so that no broker acts on a decision a crash could still
take back.
"""

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from minibroker.cluster.node_connection import CONNECTION_ERRORS, NodeConnection
from minibroker.common.config import BrokerConfig
from minibroker.common.names import CONTROLLER_CLIENT_ID
from minibroker.controller.state import BrokerInfo
from minibroker.security.listeners import ClientSecurity, client_security

log = logging.getLogger("controller")

CHANNEL_REQUEST_TIMEOUT_S = 10.0
CHANNEL_RETRY_BACKOFF_S = 0.2


class BrokerConnection(Protocol):
    """What a channel needs of a connection: NodeConnection, or a test's fake."""

    async def request(self, request): ...

    async def aclose(self) -> None: ...


# Opens a connection to a registered broker (the seam tests replace with a fake broker).
ConnectionFactory = Callable[[BrokerInfo], Awaitable[BrokerConnection]]
# Hears each answer a broker gave: (broker id, request, response).
ResponseListener = Callable[[int, object, object], None]


class _Queued:
    """A request waiting in a channel: the request itself, or for UpdateMetadata a builder
    called when it is sent, with what it carries (``delta``: None for the full picture, else
    a MetadataDelta); the events of everyone waiting for its delivery."""

    def __init__(
        self, request, build, delivered: trio.Event, even_if_fenced: bool, delta=None
    ) -> None:
        self.request = request
        self.build = build
        self.delta = delta
        self.waiting = [delivered]
        self.even_if_fenced = even_if_fenced


class BrokerChannel:
    """Controller-to-broker requests for one broker, delivered in order (Kafka: the
    ``ControllerBrokerStateInfo`` queue and its ``RequestSendThread``).

    A request is retried (reconnecting) while the broker is registered and unfenced, and
    dropped once it is fenced: when it registers again it is sent its full state anyway.

    An UpdateMetadata is built when it is sent, from the state as it is then, so an
    UpdateMetadata still queued when another is queued is dropped, the new one taking its
    waiters and carrying what both carry (the full picture if either does, else both
    deltas' partitions). A burst of decisions (a thousand ISR changes after a restart) then
    costs one UpdateMetadata per broker instead of one per decision."""

    def __init__(self, manager: "ControllerChannelManager", node_id: int) -> None:
        self._manager = manager
        self.node_id = node_id
        self._queue: deque[_Queued] = deque()
        self._work = trio.Event()

    def enqueue(self, request, even_if_fenced: bool = False) -> trio.Event:
        """Queue a request; the event is set once it was answered or dropped. Requests to a
        fenced broker are dropped, except ``even_if_fenced`` ones: a broker in controlled
        shutdown is fenced but still running, and must hear that it leads nothing now."""
        delivered = trio.Event()
        self._queue.append(_Queued(request, None, delivered, even_if_fenced))
        self._work.set()
        return delivered

    def enqueue_metadata(self, build, even_if_fenced: bool = False, delta=None) -> trio.Event:
        """Queue an UpdateMetadata that ``build(delta)`` makes when it is sent (see the
        class); ``delta`` None is the full picture, else a MetadataDelta."""
        delivered = trio.Event()
        item = _Queued(None, build, delivered, even_if_fenced, delta)
        for queued in list(self._queue):
            if queued.build is not None:
                self._queue.remove(queued)
                item.waiting += queued.waiting
                item.even_if_fenced |= queued.even_if_fenced
                if item.delta is not None:
                    item.delta = None if queued.delta is None else queued.delta.merged(item.delta)
        self._queue.append(item)
        self._work.set()
        return delivered

    async def run(self) -> None:
        manager = self._manager
        connection: BrokerConnection | None = None
        address = None
        while True:
            if not self._queue:
                self._work = trio.Event()
                await self._work.wait()
                continue
            await manager.all_saved()
            item = self._queue.popleft()
            even_if_fenced = item.even_if_fenced
            request = item.request if item.build is None else item.build(item.delta)
            attempts = 0
            while True:
                broker = manager.broker(self.node_id)
                if broker is None or (broker.fenced and not even_if_fenced):
                    break
                attempts += 1
                if even_if_fenced and attempts > 3:
                    break  # the leaving broker stopped already
                try:
                    if connection is None or address != (broker.host, broker.port):
                        if connection is not None:
                            await connection.aclose()
                        address = (broker.host, broker.port)
                        connection = await manager.connect(broker)
                    with trio.fail_after(CHANNEL_REQUEST_TIMEOUT_S):
                        response = await connection.request(request)
                    if manager.on_response is not None:
                        manager.on_response(self.node_id, request, response)
                    # AlterConfigs has no top-level error code; its pushes are always applied.
                    error_code = getattr(response, "error_code", None)
                    if error_code is not None and error_code.value != 0:
                        log.warning(
                            "broker %d answered %s with %s",
                            self.node_id,
                            type(request).__name__,
                            error_code.name,
                        )
                    break
                except CONNECTION_ERRORS as error:
                    log.debug("channel to broker %d: %r; retrying", self.node_id, error)
                    if connection is not None:
                        await connection.aclose()
                        connection = None
                    await trio.sleep(CHANNEL_RETRY_BACKOFF_S)
            for delivered in item.waiting:
                delivered.set()


class ControllerChannelManager:
    """One :class:`BrokerChannel` per broker, started on first use (Kafka:
    ``ControllerChannelManager``, whose brokers are added as they register; here a channel
    lives as long as the controller, and a fenced broker's channel simply drops requests).

    ``broker(node_id)`` is the broker's registration as the controller knows it now;
    ``all_saved()`` waits until no save of the controller's state is in flight;
    ``connect`` opens a connection to a broker (by default a NodeConnection to its
    inter-broker listener, with this node's security settings for that listener);
    ``on_response`` hears every answer (the controller reads LeaderAndIsr's per-partition
    errors from them, as Kafka's controller does in handleLeaderAndIsrResponse)."""

    def __init__(
        self,
        config: BrokerConfig,
        broker: Callable[[int], BrokerInfo | None],
        all_saved: Callable[[], Awaitable[None]],
        connect: ConnectionFactory | None = None,
        on_response: ResponseListener | None = None,
    ) -> None:
        self._config = config
        self.on_response = on_response
        self.broker = broker
        self.all_saved = all_saved
        self.connect: ConnectionFactory = connect or self._connect
        self._channels: dict[int, BrokerChannel] = {}
        self._client_security: dict[str, ClientSecurity] = {}
        self._nursery: trio.Nursery | None = None

    def start(self, nursery: trio.Nursery) -> None:
        """Channels run their send loops in ``nursery`` (the controller's)."""
        self._nursery = nursery

    def channel(self, node_id: int) -> BrokerChannel:
        channel = self._channels.get(node_id)
        if channel is None:
            assert self._nursery is not None, "the controller is not running"
            channel = self._channels[node_id] = BrokerChannel(self, node_id)
            self._nursery.start_soon(channel.run)
        return channel

    def enqueue(self, node_id: int, request, even_if_fenced: bool = False) -> trio.Event:
        return self.channel(node_id).enqueue(request, even_if_fenced)

    def enqueue_metadata(
        self, node_id: int, build, even_if_fenced: bool = False, delta=None
    ) -> trio.Event:
        return self.channel(node_id).enqueue_metadata(build, even_if_fenced, delta)

    def security_for(self, listeners: dict[str, tuple[str, int]]) -> ClientSecurity:
        """How to connect to a broker's inter-broker listener (the first it registered): with
        this node's settings for that listener name, as Kafka's controller channel does."""
        name = next(iter(listeners), "PLAINTEXT")
        if name not in self._client_security:
            self._client_security[name] = client_security(self._config, name)
        return self._client_security[name]

    async def _connect(self, broker: BrokerInfo) -> BrokerConnection:
        return await NodeConnection.connect(
            broker.host,
            broker.port,
            CONTROLLER_CLIENT_ID,
            self.security_for(broker.listeners),
        )
