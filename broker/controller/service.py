"""The controller's trio shell: requests in, decisions persisted, then brokers told.

Every decision comes from the pure transitions in ``state.py``. The shell's order is always
the same: apply the transition, ``store.save`` (so a restarted controller never forgets what it
told anyone), then queue LeaderAndIsr / StopReplica / UpdateMetadata on the per-broker
channels. A channel delivers its requests to one broker in order, reconnecting and retrying
while the broker is live, and drops them once the broker is fenced: when it registers again
it is sent its full state anyway.

Liveness: brokers heartbeat every broker.heartbeat.interval.ms; one whose last heartbeat is
older than broker.session.timeout.ms is fenced, which moves leadership to the ISR.
"""

import copy
import dataclasses
import logging
import random
from collections import deque
from pathlib import Path

import trio

from minibroker.cluster.node_connection import CONNECTION_ERRORS, NodeConnection
from minibroker.common.config import BrokerConfig
from minibroker.common.config_model import (
    TOPIC_RESOURCE,
    BrokerLayers,
    describe_topic,
    dynamic_topic_defaults,
)
from minibroker.common.metrics import BrokerMetrics
from minibroker.common.names import CONTROLLER_CLIENT_ID
from minibroker.controller import acls as acl_transitions
from minibroker.controller import configs as config_transitions
from minibroker.controller import scram_credentials as scram_transitions
from minibroker.controller import state as transitions
from minibroker.controller.state import (
    ControllerError,
    ControllerState,
    PartitionChange,
    TopicState,
)
from minibroker.controller.store import ControllerStore
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Authorizer
from minibroker.security.listeners import ClientSecurity, client_security
from minibroker.security.scram import ScramCredentials
from minibroker.storage.log import LogConfig
from minibroker.storage.producer_ids import ProducerIdAllocator

log = logging.getLogger("controller")

STATE_FILE = "controller-state.json"
# How long the controller tries to connect to a broker whose connection closed; a refusal
# within it means the broker process is gone.
PROBE_TIMEOUT_S = 1.0
PROBE_DELAY_S = 0.25
# How long a controlled shutdown waits for the other brokers to hear of the new leaders.
CONTROLLED_SHUTDOWN_DELIVERY_S = 2.0
CHANNEL_REQUEST_TIMEOUT_S = 10.0
CHANNEL_RETRY_BACKOFF_S = 0.2

# How long an AlterConfigs answer waits for the live brokers to apply the change.
CONFIG_DELIVERY_S = 5.0


class LocalStore:
    """The single controller's store: the JSON state file and the producer-id block file in
    its log dir, behind the awaitable interface the ZooKeeper store has. Local writes are
    short and stay on the loop, as they always did."""

    def __init__(self, directory: Path) -> None:
        self._state = ControllerStore(directory / STATE_FILE)
        self._producer_ids = ProducerIdAllocator(directory)

    async def load(self) -> ControllerState:
        return self._state.load()

    async def save(self, state: ControllerState) -> None:
        self._state.save(state)

    async def allocate_producer_id_block(self) -> tuple[int, int]:
        return self._producer_ids.allocate_block()


class _Queued:
    """A request waiting in a channel: the request itself, or for UpdateMetadata a builder
    called when it is sent; the events of everyone waiting for its delivery."""

    def __init__(self, request, build, delivered: trio.Event, even_if_fenced: bool) -> None:
        self.request = request
        self.build = build
        self.waiting = [delivered]
        self.even_if_fenced = even_if_fenced


class BrokerChannel:
    """Controller-to-broker requests for one broker, delivered in order.

    UpdateMetadata carries the whole cluster picture, so only the newest one matters: an
    UpdateMetadata still queued when another is queued is dropped, the new one taking its
    waiters, and it is built when it is sent, from the state as it is then. A burst of
    decisions (a thousand ISR changes after a restart) then costs one UpdateMetadata per
    broker instead of one full picture per decision."""

    def __init__(self, service: "ControllerService", node_id: int) -> None:
        self._service = service
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

    def enqueue_metadata(self, build, even_if_fenced: bool = False) -> trio.Event:
        """Queue an UpdateMetadata that ``build()`` makes when it is sent (see the class)."""
        delivered = trio.Event()
        item = _Queued(None, build, delivered, even_if_fenced)
        for queued in list(self._queue):
            if queued.build is not None:
                self._queue.remove(queued)
                item.waiting += queued.waiting
                item.even_if_fenced |= queued.even_if_fenced
        self._queue.append(item)
        self._work.set()
        return delivered

    async def run(self) -> None:
        connection: NodeConnection | None = None
        address = None
        while True:
            if not self._queue:
                self._work = trio.Event()
                await self._work.wait()
                continue
            await self._service.all_saved()
            item = self._queue.popleft()
            even_if_fenced = item.even_if_fenced
            request = item.request if item.build is None else item.build()
            attempts = 0
            while True:
                broker = self._service.state.brokers.get(self.node_id)
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
                        connection = await NodeConnection.connect(
                            *address,
                            CONTROLLER_CLIENT_ID,
                            self._service.security_for(broker.listeners),
                        )
                    with trio.fail_after(CHANNEL_REQUEST_TIMEOUT_S):
                        response = await connection.request(request)
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


class ControllerService:
    """The single controller: owns the ControllerState and tells brokers what it decides."""

    def __init__(
        self,
        config: BrokerConfig,
        cluster_id: str,
        clock_ms,
        metrics: BrokerMetrics,
        rng: random.Random | None = None,
        authorizer: Authorizer | None = None,
        store=None,
    ) -> None:
        """``store`` is where decisions are saved: the ZooKeeper store of an elected
        controller, or by default the JSON file in the first log dir."""
        self.config = config
        # This node's authorizer, which the controller keeps up to date with the ACLs it
        # decides (the other nodes hear of them by a pushed CreateAcls).
        self.authorizer = authorizer
        self._static_unclean_leader_election = config.unclean_leader_election_enable
        self.metrics = metrics
        self._leaders: dict[tuple[str, int], int] = {}
        self.cluster_id = cluster_id
        self.clock_ms = clock_ms
        self._rng = rng or random.Random()
        self.store = store or LocalStore(Path(config.log_dirs[0]))
        self.state: ControllerState = ControllerState()
        self._channels: dict[int, BrokerChannel] = {}
        self._nursery: trio.Nursery | None = None
        self._client_security: dict[str, ClientSecurity] = {}
        # This node's own credential table, kept current when no broker role gets pushes.
        self.local_scram_credentials: ScramCredentials | None = None
        self._saves_in_flight = 0
        self._all_saved = trio.Event()
        self._all_saved.set()

    @property
    def node_id(self) -> int:
        return self.config.node_id

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Load the persisted state (a new controller epoch) and watch broker liveness."""
        self.state = await self.store.load()
        self._refresh_local_scram_credentials()
        self._apply_dynamic_defaults()
        if self.authorizer is not None:
            self.authorizer.replace_acls(self.state.acls)
        now = self.clock_ms()
        for broker in self.state.brokers.values():
            broker.last_heartbeat_ms = now  # a restarted controller gives everyone a session
        log.info(
            "controller %d active at epoch %d with %d topic(s), %d broker(s) known",
            self.node_id,
            self.state.controller_epoch,
            len(self.state.topics),
            len(self.state.brokers),
        )
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            # Decisions saved by the previous controller may not have reached every broker
            # before it stopped: a new controller tells every live broker everything, as
            # Kafka's does when it takes over (brokers ignore what they already applied).
            self._propagate(self._all_partitions())
            # So are the cluster's ACLs and SCRAM credentials: a change saved just before
            # the previous controller died reaches brokers that will not register again.
            self._push_acls()
            self._push_scram_credentials(None)
            nursery.start_soon(self._watch_liveness)
            if self.config.auto_leader_rebalance_enable:
                nursery.start_soon(self._rebalance_leaders)
            task_status.started()

    async def _save(self) -> None:
        """Make the current state durable. While a save is in flight (the ZooKeeper store
        awaits its transaction; the JSON file is written without yielding), the channels
        hold their requests: an UpdateMetadata built from the state then would show brokers
        a decision that a crash could still take back. A failed save (a deposed controller)
        holds them for good."""
        if self._saves_in_flight == 0:
            self._all_saved = trio.Event()
        self._saves_in_flight += 1
        await self.store.save(self.state)
        self._saves_in_flight -= 1
        if self._saves_in_flight == 0:
            self._all_saved.set()

    async def all_saved(self) -> None:
        """Wait until no save is in flight."""
        while self._saves_in_flight:
            await self._all_saved.wait()

    async def _watch_liveness(self) -> None:
        interval = min(self.config.broker_heartbeat_interval_ms, 1000) / 1000
        while True:
            await trio.sleep(interval)
            fenced, changes = transitions.expire_brokers(
                self.state,
                self.clock_ms(),
                self.config.broker_session_timeout_ms,
                self.config.unclean_leader_election_enable,
            )
            if fenced:
                log.warning("fenced broker(s) %s: no heartbeat within the session", fenced)
                await self._save()
                self._propagate(changes)

    def broker_connection_lost(self, node_id: int) -> None:
        """A broker's connection to the controller closed. If the broker's own port now
        refuses connections, its process is gone (a crash, kill -9): fence it at once
        instead of waiting out its session. A broker that is merely slow, paused or cut off
        still accepts (or times out) and keeps its session, so nothing live is fenced."""
        broker = self.state.brokers.get(node_id)
        if broker is None or broker.fenced or self._nursery is None:
            return
        self._nursery.start_soon(self._probe_broker, node_id, broker.broker_epoch)

    async def _probe_broker(self, node_id: int, broker_epoch: int) -> None:
        # A dying process's sockets close one by one: its connection's FIN can arrive while
        # its listening socket still completes handshakes. Probe once it is surely gone.
        await trio.sleep(PROBE_DELAY_S)
        broker = self.state.brokers[node_id]
        try:
            with trio.fail_after(PROBE_TIMEOUT_S):
                address = (await trio.socket.getaddrinfo(broker.host, broker.port))[0]
                with trio.socket.socket(address[0], address[1]) as probe:
                    await probe.connect(address[4])
            return  # it accepts: alive
        except ConnectionRefusedError:
            pass  # nobody listens there: the broker process is gone
        except (OSError, trio.TooSlowError):
            return  # unreachable or slow: the session timeout decides
        current = self.state.brokers.get(node_id)
        if current is None or current.fenced or current.broker_epoch != broker_epoch:
            return  # it re-registered meanwhile, or was fenced already
        log.warning(
            "broker %d closed its connection and %s:%d refuses connections: fenced now",
            node_id,
            broker.host,
            broker.port,
        )
        changes = transitions.fence_broker(
            self.state, node_id, self.config.unclean_leader_election_enable
        )
        await self._save()
        self._propagate(changes)

    async def broker_sessions_changed(self, with_session: set[int]) -> None:
        """ZooKeeper mode: the brokers whose ``/brokers/ids`` znode exists now. A registered
        broker without one lost its ZooKeeper session (it died, or was cut off or paused for
        longer than zookeeper.session.timeout.ms): it is fenced, as ZooKeeper-mode Kafka's
        controller takes a broker's znode going away for its death."""
        gone = [
            node_id
            for node_id, broker in sorted(self.state.brokers.items())
            if not broker.fenced and node_id not in with_session
        ]
        if not gone:
            return
        latest: dict[tuple[str, int], PartitionChange] = {}
        for node_id in gone:
            for change in transitions.fence_broker(
                self.state, node_id, self.config.unclean_leader_election_enable
            ):
                latest[(change.topic, change.partition)] = change
        log.warning("fenced broker(s) %s: their ZooKeeper sessions ended", gone)
        await self._save()
        self._propagate(list(latest.values()))

    async def _rebalance_leaders(self) -> None:
        """Kafka's auto leader rebalance: after failovers, leadership piles up on the brokers
        that stayed up; move it back to each partition's preferred replica when it is in sync."""
        while True:
            await trio.sleep(self.config.leader_imbalance_check_interval_ms / 1000)
            changes = transitions.elect_preferred_leaders(
                self.state, self.config.leader_imbalance_per_broker_percentage
            )
            if changes:
                log.info("moving leadership of %d partition(s) back to preferred", len(changes))
                await self._save()
                self._propagate(changes)

    # -- telling brokers ----------------------------------------------------------------

    def security_for(self, listeners: dict[str, tuple[str, int]]) -> "ClientSecurity":
        """How to connect to a broker's inter-broker listener (the first it registered): with
        this node's settings for that listener name, as Kafka's controller channel does."""
        name = next(iter(listeners), "PLAINTEXT")
        if name not in self._client_security:
            self._client_security[name] = client_security(self.config, name)
        return self._client_security[name]

    def _channel(self, node_id: int) -> BrokerChannel:
        channel = self._channels.get(node_id)
        if channel is None:
            channel = self._channels[node_id] = BrokerChannel(self, node_id)
            self._nursery.start_soon(channel.run)
        return channel

    def _propagate(
        self,
        changes: list[PartitionChange],
        stopped: list[TopicState] = (),
        also_tell: int | None = None,
    ) -> list[trio.Event]:
        """Queue LeaderAndIsr for changed partitions, StopReplica for deleted topics and for
        replicas a reassignment removed, and the full UpdateMetadata for every live broker;
        return the delivery events. ``also_tell`` is a broker that is no longer live but
        still running (a controlled shutdown): it hears of its partitions too, so that it
        stops acting as their leader."""
        per_broker: dict[int, list[PartitionChange]] = {}
        to_stop: dict[int, dict[str, list[int]]] = {}
        for topic in stopped:
            for index, partition in enumerate(topic.partitions):
                for replica in partition.replicas:
                    to_stop.setdefault(replica, {}).setdefault(topic.name, []).append(index)
        for change in changes:
            for replica in change.removed:
                to_stop.setdefault(replica, {}).setdefault(change.topic, []).append(
                    change.partition
                )
            key = (change.topic, change.partition)
            if change.state.leader >= 0 and self._leaders.get(key) != change.state.leader:
                self.metrics.leader_elections.inc()
            self._leaders[key] = change.state.leader
            for replica in change.state.replicas:
                if self.state.is_live(replica) or replica == also_tell:
                    per_broker.setdefault(replica, []).append(change)
        events = []
        for node_id, broker_changes in per_broker.items():
            request = self._leader_and_isr(node_id, broker_changes)
            events.append(
                self._channel(node_id).enqueue(request, even_if_fenced=node_id == also_tell)
            )
        for node_id in sorted(to_stop):
            if self.state.is_live(node_id):
                request = self._stop_replica(node_id, to_stop[node_id])
                events.append(self._channel(node_id).enqueue(request))
        recipients = set(self.state.live_brokers())
        if also_tell is not None:
            recipients.add(also_tell)
        for node_id in sorted(recipients):
            events.append(
                self._channel(node_id).enqueue_metadata(
                    lambda node_id=node_id: self._update_metadata()(node_id),
                    even_if_fenced=node_id == also_tell,
                )
            )
        return events

    def _all_partitions(self) -> list[PartitionChange]:
        return [
            PartitionChange(topic.name, index, partition)
            for topic in self.state.topics.values()
            for index, partition in enumerate(topic.partitions)
        ]

    def _broker_epoch(self, node_id: int) -> int:
        broker = self.state.brokers.get(node_id)
        return broker.broker_epoch if broker else -1

    def _leader_and_isr(self, node_id: int, changes: list[PartitionChange]):
        by_topic: dict[str, list[PartitionChange]] = {}
        for change in changes:
            by_topic.setdefault(change.topic, []).append(change)
        leaders = {change.state.leader for change in changes if change.state.leader >= 0}
        data = {
            "controller_id": self.node_id,
            "is_k_raft_controller": False,
            "controller_epoch": self.state.controller_epoch,
            "broker_epoch": self._broker_epoch(node_id),
            "type_": 0,
            "topic_states": [
                {
                    "topic_name": name,
                    "topic_id": self.state.topics[name].topic_id,
                    "partition_states": [
                        {
                            "partition_index": change.partition,
                            "controller_epoch": self.state.controller_epoch,
                            "leader": change.state.leader,
                            "leader_epoch": change.state.leader_epoch,
                            "isr": tuple(change.state.isr),
                            "partition_epoch": change.state.partition_epoch,
                            "replicas": tuple(change.state.replicas),
                            "adding_replicas": tuple(change.state.adding_replicas),
                            "removing_replicas": tuple(change.state.removing_replicas),
                            "is_new": False,
                            "leader_recovery_state": 0,
                        }
                        for change in topic_changes
                    ],
                }
                for name, topic_changes in by_topic.items()
                if name in self.state.topics
            ],
            "live_leaders": [
                {
                    "broker_id": leader,
                    "host_name": self.state.brokers[leader].host,
                    "port": self.state.brokers[leader].port,
                }
                for leader in sorted(leaders)
                if leader in self.state.brokers
            ],
        }
        return codec.build(codec.request_class(ApiKey.LEADER_AND_ISR, 7), data)

    def _stop_replica(self, node_id: int, partitions: dict[str, list[int]]):
        """StopReplica with delete for these partitions (by topic) of one broker."""
        data = {
            "controller_id": self.node_id,
            "is_k_raft_controller": False,
            "controller_epoch": self.state.controller_epoch,
            "broker_epoch": self._broker_epoch(node_id),
            "topic_states": [
                {
                    "topic_name": name,
                    "partition_states": [
                        {"partition_index": index, "leader_epoch": -2, "delete_partition": True}
                        for index in indexes
                    ],
                }
                for name, indexes in partitions.items()
            ],
        }
        return codec.build(codec.request_class(ApiKey.STOP_REPLICA, 4), data)

    def _update_metadata(self):
        """A builder of the full-picture UpdateMetadata, stamped per broker with its epoch."""
        live = self.state.live_brokers()
        topic_states = [
            {
                "topic_name": topic.name,
                "topic_id": topic.topic_id,
                "partition_states": [
                    {
                        "partition_index": index,
                        "controller_epoch": self.state.controller_epoch,
                        "leader": partition.leader,
                        "leader_epoch": partition.leader_epoch,
                        "isr": tuple(partition.isr),
                        "zk_version": partition.partition_epoch,
                        "replicas": tuple(partition.replicas),
                        "offline_replicas": tuple(r for r in partition.replicas if r not in live),
                    }
                    for index, partition in enumerate(topic.partitions)
                ],
            }
            for topic in self.state.topics.values()
        ]
        live_brokers = [
            {"id_": node_id, "endpoints": _endpoints(self.state.brokers[node_id]), "rack": None}
            for node_id in live
        ]
        request_class = codec.request_class(ApiKey.UPDATE_METADATA, 8)

        def for_broker(node_id: int):
            return codec.build(
                request_class,
                {
                    "controller_id": self.node_id,
                    "is_k_raft_controller": False,
                    "type_": 0,
                    "controller_epoch": self.state.controller_epoch,
                    "broker_epoch": self._broker_epoch(node_id),
                    "topic_states": topic_states,
                    "live_brokers": live_brokers,
                },
            )

        return for_broker

    async def _await_delivery(self, events: list[trio.Event], timeout_s: float) -> bool:
        """Wait until every event is set; False if the timeout came first. A timeout of zero
        or less does not wait and counts as met, as Kafka answers such a request at once."""
        if timeout_s <= 0:
            return True
        with trio.move_on_after(timeout_s):
            for event in events:
                await event.wait()
            return True
        return False

    # -- requests ---------------------------------------------------------------------------

    async def broker_registration(self, request) -> dict:
        if request.cluster_id != self.cluster_id:
            log.error(
                "broker %d tried to join with cluster id %s; this cluster is %s",
                request.broker_id,
                request.cluster_id,
                self.cluster_id,
            )
            return {"error_code": Error.INCONSISTENT_CLUSTER_ID, "broker_epoch": -1}
        listener = request.listeners[0]
        broker_epoch, changes = transitions.register_broker(
            self.state,
            request.broker_id,
            listener.host,
            listener.port,
            str(request.incarnation_id),
            self.clock_ms(),
            unclean_leader_election=self.config.unclean_leader_election_enable,
            listeners={item.name: (item.host, item.port) for item in request.listeners},
        )
        await self._save()
        log.info(
            "broker %d registered at %s:%d with broker epoch %d",
            request.broker_id,
            listener.host,
            listener.port,
            broker_epoch,
        )
        # It knows no ACLs yet after a restart, and may have missed changes while fenced.
        self._push_acls(only_to=request.broker_id)
        # Its cached topic configs and dynamic configs may be stale: the current ones first.
        self._push_configs(
            config_transitions.resources_of_broker(self.state, request.broker_id),
            only_to=request.broker_id,
        )
        # Every credential, replacing what it knew: some may have changed while it was away.
        self._push_scram_credentials(None, only_to=request.broker_id)
        self._propagate(changes)
        return {"error_code": Error.NONE, "broker_epoch": broker_epoch}

    async def broker_heartbeat(self, request) -> dict:
        if request.want_shut_down:
            return await self._controlled_shutdown(request.broker_id, request.broker_epoch)
        alive = transitions.heartbeat(
            self.state, request.broker_id, request.broker_epoch, self.clock_ms()
        )
        if not alive:
            return {
                "error_code": Error.STALE_BROKER_EPOCH,
                "is_caught_up": False,
                "is_fenced": True,
                "should_shut_down": False,
            }
        return {
            "error_code": Error.NONE,
            "is_caught_up": True,
            "is_fenced": False,
            "should_shut_down": False,
        }

    async def _controlled_shutdown(self, node_id: int, broker_epoch: int) -> dict:
        """Move the broker's leadership away, tell every broker (the leaving one included),
        and answer shouldShutDown once they have it, so no partition waits for a session
        timeout to find a new leader."""
        known = self.state.brokers.get(node_id)
        already_fenced = known is not None and known.fenced
        changes = transitions.begin_controlled_shutdown(
            self.state, node_id, broker_epoch, self.config.unclean_leader_election_enable
        )
        if changes is None:
            return {
                "error_code": Error.STALE_BROKER_EPOCH,
                "is_caught_up": False,
                "is_fenced": True,
                "should_shut_down": False,
            }
        if not already_fenced:
            # Even a broker that hosts nothing must leave every broker's metadata, or
            # clients keep being sent to it.
            await self._save()
            events = self._propagate(changes, also_tell=node_id)
            log.info(
                "broker %d is shutting down: %d partition(s) change leader or ISR",
                node_id,
                len(changes),
            )
            # Brokers that are stopping too may never read theirs: the wait is short.
            await self._await_delivery(events, CONTROLLED_SHUTDOWN_DELIVERY_S)
        return {
            "error_code": Error.NONE,
            "is_caught_up": True,
            "is_fenced": True,
            "should_shut_down": True,
        }

    async def alter_partition(self, request) -> dict:
        topics = []
        changes: list[PartitionChange] = []
        for topic in request.topics:
            partitions = []
            for data in topic.partitions:
                before = self._partition_or_none(topic.topic_id, data.partition_index)
                try:
                    new_state = transitions.alter_partition(
                        self.state,
                        topic.topic_id,
                        data.partition_index,
                        request.broker_id,
                        data.leader_epoch,
                        list(data.new_isr),
                        data.partition_epoch,
                        broker_epoch=request.broker_epoch,
                    )
                except ControllerError as error:
                    partitions.append(
                        {
                            "partition_index": data.partition_index,
                            "error_code": int(error.code),
                            "leader_id": -1,
                            "leader_epoch": -1,
                            "isr": (),
                            "leader_recovery_state": 0,
                            "partition_epoch": -1,
                        }
                    )
                    continue
                if new_state.partition_epoch != data.partition_epoch:
                    topic_name = self.state.topic_by_id(topic.topic_id).name
                    changes.append(
                        self._after_isr_change(topic_name, data.partition_index, new_state, before)
                    )
                partitions.append(
                    {
                        "partition_index": data.partition_index,
                        "error_code": Error.NONE,
                        "leader_id": new_state.leader,
                        "leader_epoch": new_state.leader_epoch,
                        "isr": tuple(new_state.isr),
                        "leader_recovery_state": 0,
                        "partition_epoch": new_state.partition_epoch,
                    }
                )
            topics.append({"topic_id": topic.topic_id, "partitions": partitions})
        if changes:
            await self._save()
            # The leader learns the result from this answer; LeaderAndIsr tells it too, in
            # case the answer is lost, and tells the followers.
            self._propagate(changes)
        return {"error_code": Error.NONE, "topics": topics}

    def _partition_or_none(self, topic_id, index: int):
        topic = self.state.topic_by_id(topic_id)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def _after_isr_change(self, name: str, index: int, new_state, before) -> PartitionChange:
        """The change an accepted AlterPartition made. Replicas a completed reassignment
        dropped are to be stopped. With auto.leader.rebalance.enable, a preferred replica that
        is back in the ISR leads again at once, instead of at the next imbalance check (up to
        leader.imbalance.check.interval.seconds later: after a full restart every partition
        would stay led by whichever broker came back first for that long)."""
        removed = tuple(r for r in before.replicas if r not in new_state.replicas) if before else ()
        rejoined = before is not None and new_state.replicas[0] not in before.isr
        if self.config.auto_leader_rebalance_enable and rejoined:
            new_state = transitions.elect_preferred_leader(self.state, name, index) or new_state
        return PartitionChange(name, index, new_state, removed)

    async def elect_leaders(self, request) -> dict:
        """ElectLeaders: PREFERRED or UNCLEAN elections, decided in one step and saved once;
        answered once the brokers were told (within the request's timeout). v0 has no
        election type: it is a preferred election."""
        try:
            election_type = transitions.ElectionType(getattr(request, "election_type", 0))
        except ValueError:
            return {
                "error_code": Error.INVALID_REQUEST,
                "replica_election_results": (),
            }
        targets = (
            None
            if request.topic_partitions is None
            else [(entry.topic, list(entry.partitions)) for entry in request.topic_partitions]
        )
        results, changes = transitions.elect_leaders(self.state, election_type, targets)
        if changes:
            await self._save()
            log.info(
                "%s election moved the leadership of %d partition(s)",
                election_type.name.lower(),
                len(changes),
            )
            events = self._propagate(changes)
            await self._await_delivery(events, request.timeout.total_seconds())
        return {
            "error_code": Error.NONE,
            "replica_election_results": [
                {
                    "topic": name,
                    "partition_result": [
                        {"partition_id": index, "error_code": code, "error_message": message}
                        for index, code, message in outcomes
                    ],
                }
                for name, outcomes in results
            ],
        }

    async def alter_partition_reassignments(self, request) -> dict:
        """AlterPartitionReassignments (KIP-455): start, replace or cancel reassignments.
        Answered once the decision is saved and sent, as Kafka answers once it is committed;
        the reassignment itself completes later, when the new replicas are in the ISR."""
        responses = []
        changes: list[PartitionChange] = []
        for topic in request.topics:
            partitions = []
            for entry in topic.partitions:
                target = None if entry.replicas is None else list(entry.replicas)
                result = {
                    "partition_index": entry.partition_index,
                    "error_code": Error.NONE,
                    "error_message": None,
                }
                try:
                    change = transitions.alter_reassignment(
                        self.state, topic.name, entry.partition_index, target
                    )
                except ControllerError as error:
                    result.update(error_code=int(error.code), error_message=error.message)
                else:
                    changes.append(change)
                    log.info(
                        "%s-%d: %s; replicas %s, adding %s, removing %s",
                        topic.name,
                        entry.partition_index,
                        "reassignment cancelled" if target is None else f"reassigning to {target}",
                        change.state.replicas,
                        change.state.adding_replicas,
                        change.state.removing_replicas,
                    )
                partitions.append(result)
            responses.append({"name": topic.name, "partitions": partitions})
        if changes:
            await self._save()
            self._propagate(changes)
        return {"error_code": Error.NONE, "error_message": None, "responses": responses}

    async def list_partition_reassignments(self, request) -> dict:
        targets = (
            None
            if request.topics is None
            else [(topic.name, list(topic.partition_indexes)) for topic in request.topics]
        )
        return {
            "error_code": Error.NONE,
            "error_message": None,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {
                            "partition_index": index,
                            "replicas": tuple(partition.replicas),
                            "adding_replicas": tuple(partition.adding_replicas),
                            "removing_replicas": tuple(partition.removing_replicas),
                        }
                        for index, partition in ongoing
                    ],
                }
                for name, ongoing in transitions.list_reassignments(self.state, targets)
            ],
        }

    async def create_topics(self, request) -> dict:
        """Create the request's topics in one decision: the state is saved once and the
        brokers get one LeaderAndIsr and one UpdateMetadata each, however many topics (a
        thousand topics used to mean a thousand full-state writes and full-cluster
        UpdateMetadata rounds, long enough to starve heartbeats). The answer waits for the
        brokers to apply it, within the request's timeout; topics they had not applied by
        then answer REQUEST_TIMED_OUT, as Kafka's do (they are created nonetheless)."""
        results = []
        names = [topic.name for topic in request.topics]
        # validate_only works on a copy, taken once for the whole request.
        target = copy.deepcopy(self.state) if request.validate_only else self.state
        changes: list[PartitionChange] = []
        created_any = False
        for topic in request.topics:
            if names.count(topic.name) > 1:
                results.append(
                    _topic_error(topic.name, Error.INVALID_REQUEST, "Duplicate topic in request")
                )
                continue
            result, topic_changes = self._create_one(
                target, topic, with_configs=request.__version__ >= 5
            )
            results.append(result)
            changes += topic_changes
            created_any = created_any or result["error_code"] == Error.NONE
            await trio.lowlevel.checkpoint()  # heartbeats and other requests get their turn
        if request.validate_only or not created_any:
            return {"topics": results}
        await self._save()
        created = [r["name"] for r in results if r["error_code"] == Error.NONE]
        log.info(
            "created %d topic(s) (%d partitions): %s",
            len(created),
            len(changes),
            ", ".join(created[:5]) + (f" and {len(created) - 5} more" if len(created) > 5 else ""),
        )
        # The new topics' configs reach their brokers just before the LeaderAndIsr that
        # creates their replicas, so the brokers need not ask for them.
        self._push_configs([(TOPIC_RESOURCE, name) for name in created])
        events = self._propagate(changes)
        if not await self._await_delivery(events, request.timeout.total_seconds()):
            for result in results:
                if result["error_code"] == Error.NONE:
                    result.update(
                        error_code=Error.REQUEST_TIMED_OUT,
                        error_message="created, but not every broker had applied it within"
                        f" the request's timeout of {request.timeout.total_seconds():g} s",
                    )
        return {"topics": results}

    def _create_one(
        self, target: ControllerState, topic, *, with_configs: bool
    ) -> tuple[dict, list[PartitionChange]]:
        configs = {config.name: config.value for config in topic.configs}
        try:
            LogConfig.from_topic_configs(LogConfig(), configs)
        except ValueError as error:
            return _topic_error(topic.name, Error.INVALID_CONFIG, str(error)), []
        assignments = (
            {a.partition_index: list(a.broker_ids) for a in topic.assignments}
            if topic.assignments
            else None
        )
        try:
            created, changes = transitions.create_topic(
                target,
                topic.name,
                topic.num_partitions,
                topic.replication_factor,
                configs,
                assignments,
                default_partitions=self.config.num_partitions,
                default_replication_factor=self.config.default_replication_factor,
                rng=self._rng,
            )
        except ControllerError as error:
            return _topic_error(topic.name, int(error.code), error.message), []
        log.debug(
            "created topic %s: %d partition(s), replicas %s",
            created.name,
            len(created.partitions),
            [p.replicas for p in created.partitions],
        )
        result = {
            "name": created.name,
            "topic_id": created.topic_id,
            "error_code": Error.NONE,
            "error_message": None,
            "num_partitions": len(created.partitions),
            "replication_factor": len(created.partitions[0].replicas),
            # Every config of the new topic and where its value comes from (v5+), as Kafka's
            # controller describes them with its own properties.
            "configs": (
                describe_topic(configs, self._config_layers(), include_synonyms=False)
                if with_configs
                else ()
            ),
        }
        return result, changes

    async def create_partitions(self, request) -> dict:
        """CreatePartitions, decided like CreateTopics: one save, one round of LeaderAndIsr
        and UpdateMetadata, answered once the brokers applied it (within the timeout)."""
        target = copy.deepcopy(self.state) if request.validate_only else self.state
        results = []
        changes: list[PartitionChange] = []
        names = [topic.name for topic in request.topics]
        for topic in request.topics:
            result = {"name": topic.name, "error_code": Error.NONE, "error_message": None}
            if names.count(topic.name) > 1:
                result.update(error_code=Error.INVALID_REQUEST, error_message="Duplicate topic")
            else:
                assignments = (
                    [list(a.broker_ids) for a in topic.assignments]
                    if topic.assignments is not None
                    else None
                )
                try:
                    changes += transitions.create_partitions(
                        target, topic.name, topic.count, assignments, self._rng
                    )
                except ControllerError as error:
                    result.update(error_code=int(error.code), error_message=error.message)
            results.append(result)
        if changes and not request.validate_only:
            await self._save()
            log.info(
                "created %d partition(s) of %s", len(changes), sorted({c.topic for c in changes})
            )
            events = self._propagate(changes)
            if not await self._await_delivery(events, request.timeout.total_seconds()):
                for result in results:
                    if result["error_code"] == Error.NONE:
                        result["error_code"] = Error.REQUEST_TIMED_OUT
        return {"results": results}

    async def delete_topics(self, request) -> dict:
        if hasattr(request, "topic_names"):
            targets = [(name, None) for name in request.topic_names]
        else:
            targets = [(topic.name, topic.topic_id) for topic in request.topics]
        if not self.config.delete_topic_enable:
            # Kafka's answer: INVALID_REQUEST to clients too old to know the newer code.
            error = (
                Error.TOPIC_DELETION_DISABLED if request.__version__ >= 3 else Error.INVALID_REQUEST
            )
            return {
                "responses": [
                    {"name": name, "topic_id": topic_id, "error_code": error}
                    for name, topic_id in targets
                ]
            }
        results = []
        stopped: list[TopicState] = []
        for name, topic_id in targets:
            if name is None and topic_id is not None:
                found = self.state.topic_by_id(topic_id)
                if found is None:
                    results.append(
                        {"name": None, "topic_id": topic_id, "error_code": Error.UNKNOWN_TOPIC_ID}
                    )
                    continue
                name = found.name
            try:
                removed = transitions.delete_topic(self.state, name)
            except ControllerError as error:
                results.append(
                    {
                        "name": name,
                        "topic_id": topic_id,
                        "error_code": int(error.code),
                        "error_message": error.message,
                    }
                )
                continue
            stopped.append(removed)
            results.append({"name": name, "topic_id": removed.topic_id, "error_code": Error.NONE})
        if stopped:
            await self._save()
            log.info(
                "deleted %d topic(s): %s",
                len(stopped),
                ", ".join(t.name for t in stopped[:5]) + (" ..." if len(stopped) > 5 else ""),
            )
            events = self._propagate([], stopped=stopped)
            if not await self._await_delivery(events, request.timeout.total_seconds()):
                for result in results:
                    if result["error_code"] == Error.NONE:
                        result["error_code"] = Error.REQUEST_TIMED_OUT
        return {"responses": results}

    async def alter_configs(self, request, *, incremental: bool) -> dict:
        """AlterConfigs (or IncrementalAlterConfigs): decided, saved, then pushed to every
        live broker, which applies it to its logs at once; answered once they have it
        (within a few seconds: the change is saved and reaches late brokers anyway)."""
        results, changed = config_transitions.alter_configs(
            self.state,
            request.resources,
            incremental=incremental,
            validate_only=request.validate_only,
        )
        if changed:
            await self._save()
            self._apply_dynamic_defaults()
            log.info("configs changed: %s", ", ".join(f"{t}:{name!r}" for t, name in changed))
            events = self._push_configs(changed)
            await self._await_delivery(events, CONFIG_DELIVERY_S)
        return {"responses": results}

    def _push_configs(self, resources, only_to: int | None = None) -> list[trio.Event]:
        """Tell brokers the current configs of ``resources`` (an AlterConfigs of complete
        sets, sent on the controller's channel so it stays ordered with LeaderAndIsr): a
        topic's to the live brokers that hold a replica of it, broker configs to every live
        broker; with ``only_to``, to that broker alone."""
        events = []
        for node_id in [only_to] if only_to is not None else self.state.live_brokers():
            pushed = config_transitions.pushed_configs(
                self.state, config_transitions.concerning(self.state, resources, node_id)
            )
            if pushed:
                request = codec.build(
                    codec.request_class(ApiKey.ALTER_CONFIGS, 2),
                    {"resources": pushed, "validate_only": False},
                )
                events.append(self._channel(node_id).enqueue(request))
        return events

    async def create_acls(self, request) -> dict:
        """CreateAcls: decided, saved, applied here and pushed to every live broker;
        answered once they have them (or after a few seconds), so that the client's next
        request meets the new ACLs on any broker."""
        results, changed = acl_transitions.create_acls(self.state, request.creations)
        if changed:
            await self._acls_changed()
        return {"results": results}

    async def delete_acls(self, request) -> dict:
        """DeleteAcls: as CreateAcls."""
        results, changed = acl_transitions.delete_acls(self.state, request.filters)
        if changed:
            await self._acls_changed()
        return {"filter_results": results}

    async def _acls_changed(self) -> None:
        await self._save()
        log.info("ACLs changed: %d binding(s) now", len(self.state.acls))
        if self.authorizer is not None:
            self.authorizer.replace_acls(self.state.acls)
        await self._await_delivery(self._push_acls(), CONFIG_DELIVERY_S)

    def _push_acls(self, only_to: int | None = None) -> list[trio.Event]:
        """Tell brokers the whole ACL set (a CreateAcls on the controller's channel, which
        they take as a replacement of theirs), so each authorizes on its own. A node that is
        the controller too has them already; without an authorizer there is nothing to tell."""
        if self.authorizer is None:
            return []
        request = codec.build(
            codec.request_class(ApiKey.CREATE_ACLS, 3),
            {"creations": acl_transitions.pushed_acls(self.state)},
        )
        recipients = [only_to] if only_to is not None else self.state.live_brokers()
        return [
            self._channel(node_id).enqueue(request)
            for node_id in recipients
            if node_id != self.node_id
        ]

    async def alter_user_scram_credentials(self, request) -> dict:
        """Decided, saved, pushed to every live broker, answered once they have it (as
        configs are: a late broker gets every credential when it registers)."""
        results, changed = scram_transitions.alter(self.state, request)
        if changed:
            await self._save()
            log.info("SCRAM credentials changed for %s", ", ".join(sorted({u for u, _ in changed})))
            self._refresh_local_scram_credentials()
            events = self._push_scram_credentials(changed)
            await self._await_delivery(events, CONFIG_DELIVERY_S)
        return {"results": results}

    async def describe_user_scram_credentials(self, request) -> dict:
        return scram_transitions.describe(self.state, request)

    def _push_scram_credentials(self, pairs, only_to: int | None = None) -> list[trio.Event]:
        """Tell brokers the credentials of ``pairs`` (all of them when None)."""
        request = codec.build(
            codec.request_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0),
            scram_transitions.push_request_data(self.state, pairs),
        )
        targets = [only_to] if only_to is not None else self.state.live_brokers()
        return [self._channel(node_id).enqueue(request) for node_id in targets]

    def _refresh_local_scram_credentials(self) -> None:
        """A controller-only node authenticates its own SASL listeners from the state."""
        local = self.local_scram_credentials
        if local is None or self.config.is_broker:
            return
        local.forget_stored()
        for user, credentials in self.state.scram_credentials.items():
            for mechanism, record in credentials.items():
                local.store(mechanism, user, scram_transitions.from_record(record))

    def _config_layers(self) -> BrokerLayers:
        return BrokerLayers(
            self.config.properties,
            self.state.broker_configs.get("", {}),
            self.state.broker_configs.get(str(self.node_id), {}),
        )

    def _apply_dynamic_defaults(self) -> None:
        """The controller decides unclean elections: a cluster-wide dynamic
        unclean.leader.election.enable overrides its own property, as in Kafka."""
        dynamic = dynamic_topic_defaults(
            self.state.broker_configs.get("", {}),
            self.state.broker_configs.get(str(self.node_id), {}),
        )
        unclean = dynamic.get("unclean.leader.election.enable")
        if unclean is None:
            enabled = self._static_unclean_leader_election
        else:
            enabled = unclean.strip().lower() == "true"
        if enabled != self.config.unclean_leader_election_enable:
            self.config = dataclasses.replace(self.config, unclean_leader_election_enable=enabled)

    async def allocate_producer_ids(self, request) -> dict:
        if not transitions.heartbeat(
            self.state, request.broker_id, request.broker_epoch, self.clock_ms()
        ):
            return {
                "error_code": Error.STALE_BROKER_EPOCH,
                "producer_id_start": -1,
                "producer_id_len": 0,
            }
        start, length = await self.store.allocate_producer_id_block()
        return {"error_code": Error.NONE, "producer_id_start": start, "producer_id_len": length}

    def metadata(self, request) -> dict:
        """Metadata as a controller-only node answers it: live brokers and the cluster id.

        Brokers use it to learn the cluster id before their first registration.
        """
        live = self.state.live_brokers()
        return {
            "brokers": [
                {
                    "node_id": node_id,
                    "host": self.state.brokers[node_id].host,
                    "port": self.state.brokers[node_id].port,
                }
                for node_id in live
            ],
            "cluster_id": self.cluster_id,
            "controller_id": live[0] if live else -1,
            "topics": (),
        }


def _endpoints(broker) -> list[dict]:
    """A broker's listeners for UpdateMetadata, the inter-broker one first."""
    listeners = broker.listeners or {"PLAINTEXT": (broker.host, broker.port)}
    return [
        {"port": port, "host": host, "listener": name, "security_protocol": 0}
        for name, (host, port) in listeners.items()
    ]


def _topic_error(name: str, error: int, message: str) -> dict:
    return {
        "name": name,
        "topic_id": None,
        "error_code": error,
        "error_message": message,
        "num_partitions": -1,
        "replication_factor": -1,
    }
