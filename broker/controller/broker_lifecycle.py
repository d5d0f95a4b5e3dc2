"""Brokers joining, staying alive and leaving (Kafka: ``ClusterControlManager`` and
``BrokerHeartbeatManager`` of the KRaft controller; ZooKeeper mode's ``BrokerChangeHandler``
and ``KafkaController.onBrokerFailure``).

Kafka's rules, kept here: a broker registers (BrokerRegistration) and gets a new broker epoch;
it heartbeats every broker.heartbeat.interval.ms; one whose last heartbeat is older than
broker.session.timeout.ms is fenced, which moves the leadership of its partitions to the rest
of their ISR; a broker that asks to shut down (a heartbeat with wantShutDown) is fenced at
once, its leadership moved, and told shouldShutDown once the other brokers have heard.

Where we depart: when a broker's connection to the controller closes and its own port then
refuses connections, its process is gone and it is fenced at once instead of after its session
(:meth:`BrokerLifecycleManager.connection_lost`). In ZooKeeper mode a broker whose
``/brokers/ids`` znode went away is fenced, as ZooKeeper-mode Kafka does.

Every decision comes from ``state.py``; this shell saves it, then tells the brokers through the
controller (:class:`~minibroker.controller.service.ControllerService`).
"""

import logging

import trio

from minibroker.controller import broker_requests
from minibroker.controller import configs as config_transitions
from minibroker.controller import state as transitions
from minibroker.controller.context import ControllerContext
from minibroker.controller.state import PartitionChange
from minibroker.protocol.errors import Error

log = logging.getLogger("controller")

# How long the controller tries to connect to a broker whose connection closed; a refusal
# within it means the broker process is gone.
PROBE_TIMEOUT_S = 1.0
PROBE_DELAY_S = 0.25
# How long a controlled shutdown waits for the other brokers to hear of the new leaders.
CONTROLLED_SHUTDOWN_DELIVERY_S = 2.0

_FENCED = {
    "error_code": Error.STALE_BROKER_EPOCH,
    "is_caught_up": False,
    "is_fenced": True,
    "should_shut_down": False,
}


class BrokerLifecycleManager:
    """Registration, heartbeats, session expiry, fencing and controlled shutdown of the
    brokers, over the controller's state."""

    def __init__(self, controller: ControllerContext) -> None:
        self._controller = controller

    # -- requests -----------------------------------------------------------------------

    async def register(self, request) -> dict:
        """BrokerRegistration: a new broker epoch, saved; the broker then gets the current
        ACLs, configs and SCRAM credentials, and LeaderAndIsr for its partitions."""
        controller = self._controller
        if request.cluster_id != controller.cluster_id:
            log.error(
                "broker %d tried to join with cluster id %s; this cluster is %s",
                request.broker_id,
                request.cluster_id,
                controller.cluster_id,
            )
            return {"error_code": Error.INCONSISTENT_CLUSTER_ID, "broker_epoch": -1}
        listener = request.listeners[0]
        broker_epoch, changes = transitions.register_broker(
            controller.state,
            request.broker_id,
            listener.host,
            listener.port,
            str(request.incarnation_id),
            controller.clock_ms(),
            unclean_leader_election=controller.config.unclean_leader_election_enable,
            listeners={item.name: (item.host, item.port) for item in request.listeners},
            rack=request.rack,
            # BrokerRegistration v3+ (KIP-966); v0, which minibroker's brokers send, has none.
            previous_broker_epoch=getattr(request, "previous_broker_epoch", -1),
        )
        await controller.save()
        log.info(
            "broker %d registered at %s:%d with broker epoch %d",
            request.broker_id,
            listener.host,
            listener.port,
            broker_epoch,
        )
        # It knows no ACLs yet after a restart, and may have missed changes while fenced.
        controller.push_acls(only_to=request.broker_id)
        # Its cached topic configs and dynamic configs may be stale: the current ones first.
        controller.push_configs(
            config_transitions.resources_of_broker(controller.state, request.broker_id),
            only_to=request.broker_id,
        )
        # Every credential, replacing what it knew: some may have changed while it was away.
        controller.push_scram_credentials(None, only_to=request.broker_id)
        # And every client quota, as a snapshot.
        controller.push_client_quotas(None, only_to=request.broker_id)
        # And the finalized features, which its ApiVersions answers list.
        controller.push_features(only_to=request.broker_id)
        # And the whole picture of every partition in its next UpdateMetadata.
        controller.send_full_metadata(request.broker_id)
        controller.propagate(changes)
        return {"error_code": Error.NONE, "broker_epoch": broker_epoch}

    async def heartbeat(self, request) -> dict:
        """BrokerHeartbeat: renews the broker's session, or begins its controlled shutdown."""
        controller = self._controller
        if request.want_shut_down:
            return await self._controlled_shutdown(request.broker_id, request.broker_epoch)
        alive = transitions.heartbeat(
            controller.state, request.broker_id, request.broker_epoch, controller.clock_ms()
        )
        if not alive:
            return dict(_FENCED)
        # BrokerHeartbeat v1's OfflineLogDirs (KIP-858), absent from v0.
        offline = frozenset(d for d in getattr(request, "offline_log_dirs", ()) if d is not None)
        known = controller.state.offline_log_dirs.get(request.broker_id, frozenset())
        if not offline <= known:
            controller.state.offline_log_dirs[request.broker_id] = known | offline
            self._ask_for_offline_replicas(request.broker_id, offline - known)
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
        controller = self._controller
        known = controller.state.brokers.get(node_id)
        already_fenced = known is not None and known.fenced
        changes = transitions.begin_controlled_shutdown(
            controller.state,
            node_id,
            broker_epoch,
            controller.config.unclean_leader_election_enable,
        )
        if changes is None:
            return dict(_FENCED)
        if not already_fenced:
            # Even a broker that hosts nothing must leave every broker's metadata, or
            # clients keep being sent to it.
            await controller.save()
            events = controller.propagate(changes, also_tell=node_id)
            log.info(
                "broker %d is shutting down: %d partition(s) change leader or ISR",
                node_id,
                len(changes),
            )
            # Brokers that are stopping too may never read theirs: the wait is short.
            await controller.await_delivery(events, CONTROLLED_SHUTDOWN_DELIVERY_S)
        return {
            "error_code": Error.NONE,
            "is_caught_up": True,
            "is_fenced": True,
            "should_shut_down": True,
        }

    # -- failed log dirs ----------------------------------------------------------------

    def _ask_for_offline_replicas(self, node_id: int, new_dirs: frozenset) -> None:
        """A live broker's heartbeat names log dirs that failed since its last one (Kafka
        4.4's BrokerLifecycleManager.propagateDirectoryFailure sends that heartbeat at once).

        Kafka 4.4's controller knows which dir holds each replica (AssignReplicasToDirs)
        and takes those of the failed dirs offline at once (handleDirectoriesOffline).
        minibroker's controller commands brokers with LeaderAndIsr, as Kafka's ZooKeeper-mode
        controller did, and learns which replicas failed as that one did on a
        LogDirEventNotification (onBrokerLogDirFailure): it sends the broker a LeaderAndIsr
        for every replica it holds, and the broker answers KAFKA_STORAGE_ERROR for each one
        in a failed dir (ControllerService._broker_answered, then :meth:`replicas_offline`).
        """
        controller = self._controller
        log.warning(
            "broker %d reports failed log dir(s) %s: asking which of its replicas are offline",
            node_id,
            ", ".join(sorted(str(d) for d in new_dirs)),
        )
        hosted = [
            PartitionChange(topic.name, index, partition)
            for topic in controller.state.topics.values()
            for index, partition in enumerate(topic.partitions)
            if node_id in partition.replicas
        ]
        if hosted:
            request = broker_requests.leader_and_isr(
                controller.state, controller.node_id, node_id, hosted
            )
            controller.channels.enqueue(node_id, request)

    async def replicas_offline(self, node_id: int, keys: list[tuple[str, int]]) -> None:
        """Replicas of ``node_id`` that are in a failed log dir (state.take_replicas_offline):
        out of their ISRs, leadership moved to other ISR members, saved, then told; the
        broker stays registered and serves its other replicas (Kafka's rule, KIP-858)."""
        controller = self._controller
        if not controller.state.is_live(node_id):
            return  # fenced meanwhile: its partitions moved already
        changes = transitions.take_replicas_offline(
            controller.state, node_id, keys, controller.config.unclean_leader_election_enable
        )
        log.warning(
            "broker %d: %d replica(s) in a failed log dir are offline; %d partition(s) change"
            " leader or ISR",
            node_id,
            len(keys),
            len(changes),
        )
        if changes:
            await controller.save()
            controller.propagate(changes)

    # -- liveness -----------------------------------------------------------------------

    def restart_sessions(self) -> None:
        """A restarted controller gives every known broker a fresh session."""
        now = self._controller.clock_ms()
        for broker in self._controller.state.brokers.values():
            broker.last_heartbeat_ms = now

    async def watch_sessions(self) -> None:
        """Fence the brokers whose sessions expired (Kafka: the heartbeat manager's
        ``findOneStaleBroker``), checked every heartbeat interval (at most every second).

        Departure: a check that comes more than half a session late is skipped. The
        controller's own loop was held up then (a loaded machine, a long collection), and the
        brokers' heartbeats of that time are still waiting in its sockets: trio runs what
        became ready after a stall in either order, and reading a heartbeat takes several
        steps, so the check ran first and fenced every broker at once. Kafka's quorum
        controller handles heartbeats and its stale-broker scan as events of one queue, in
        the order they came. Seen on a loaded machine (load 6-11): the controller answered no
        heartbeat for over a second, then fenced brokers 1, 2 and 3 together, and every
        leadership moved. The next check, one interval later, fences those still silent."""
        controller = self._controller
        interval = min(controller.config.broker_heartbeat_interval_ms, 1000) / 1000
        session_s = controller.config.broker_session_timeout_ms / 1000
        woke = trio.current_time()
        while True:
            await trio.sleep(interval)
            now = trio.current_time()
            late, woke = now - woke - interval, now
            if late > session_s / 2:
                log.warning(
                    "the session check ran %.0f ms late (the controller was held up): brokers"
                    " are fenced only after the heartbeats that waited meanwhile are read",
                    late * 1000,
                )
                continue
            fenced, changes = transitions.expire_brokers(
                controller.state,
                controller.clock_ms(),
                controller.config.broker_session_timeout_ms,
                controller.config.unclean_leader_election_enable,
            )
            if fenced:
                log.warning("fenced broker(s) %s: no heartbeat within the session", fenced)
                await controller.save()
                controller.propagate(changes)

    def connection_lost(self, node_id: int, nursery: trio.Nursery | None) -> None:
        """A broker's connection to the controller closed. If the broker's own port now
        refuses connections, its process is gone (a crash, kill -9): fence it at once
        instead of waiting out its session. A broker that is merely slow, paused or cut off
        still accepts (or times out) and keeps its session, so nothing live is fenced."""
        broker = self._controller.state.brokers.get(node_id)
        if broker is None or broker.fenced or nursery is None:
            return
        nursery.start_soon(self._probe_broker, node_id, broker.broker_epoch)

    async def _probe_broker(self, node_id: int, broker_epoch: int) -> None:
        controller = self._controller
        # A dying process's sockets close one by one: its connection's FIN can arrive while
        # its listening socket still completes handshakes. Probe once it is surely gone.
        await trio.sleep(PROBE_DELAY_S)
        broker = controller.state.brokers[node_id]
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
        current = controller.state.brokers.get(node_id)
        if current is None or current.fenced or current.broker_epoch != broker_epoch:
            return  # it re-registered meanwhile, or was fenced already
        log.warning(
            "broker %d closed its connection and %s:%d refuses connections: fenced now",
            node_id,
            broker.host,
            broker.port,
        )
        changes = transitions.fence_broker(
            controller.state, node_id, controller.config.unclean_leader_election_enable
        )
        await controller.save()
        controller.propagate(changes)

    async def sessions_changed(self, with_session: set[int]) -> None:
        """ZooKeeper mode: the brokers whose ``/brokers/ids`` znode exists now. A registered
        broker without one lost its ZooKeeper session (it died, or was cut off or paused for
        longer than zookeeper.session.timeout.ms): it is fenced, as ZooKeeper-mode Kafka's
        controller takes a broker's znode going away for its death."""
        controller = self._controller
        changes = self.fence_without_session(with_session)
        if changes is None:
            return
        await controller.save()
        controller.propagate(changes)

    def fence_without_session(self, with_session: set[int]) -> list[PartitionChange] | None:
        """Fence the registered brokers that are not in ``with_session`` (state.fence_broker
        for each, one decision); the changed partitions, or None when every live broker has
        a session. The caller saves, then tells the brokers."""
        controller = self._controller
        gone = [
            node_id
            for node_id, broker in sorted(controller.state.brokers.items())
            if not broker.fenced and node_id not in with_session
        ]
        if not gone:
            return None
        latest: dict[tuple[str, int], PartitionChange] = {}
        for node_id in gone:
            for change in transitions.fence_broker(
                controller.state, node_id, controller.config.unclean_leader_election_enable
            ):
                latest[(change.topic, change.partition)] = change
        log.warning("fenced broker(s) %s: their ZooKeeper sessions ended", gone)
        return list(latest.values())
