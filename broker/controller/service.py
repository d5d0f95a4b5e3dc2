"""The controller's trio shell: requests in, decisions persisted, then brokers told (Kafka:
``KafkaController`` in ZooKeeper mode, ``QuorumController`` in KRaft mode).

Every decision comes from the pure transitions in ``state.py`` (and ``acls.py``,
``configs.py``, ``scram_credentials.py``, ``client_quotas.py``). The shell's order is always
the same: apply the transition, ``save`` (so a restarted controller never forgets what it
told anyone), then queue LeaderAndIsr / StopReplica / UpdateMetadata (``broker_requests.py``)
on the per-broker channels (``channel_manager.py``). The service is split as Kafka's KRaft
controller is:

- :class:`~minibroker.controller.broker_lifecycle.BrokerLifecycleManager` (Kafka:
  ``ClusterControlManager`` and ``BrokerHeartbeatManager``): registration, heartbeats,
  session expiry, fencing, controlled shutdown;
- :class:`~minibroker.controller.replication_control.ReplicationControlManager` (Kafka:
  ``ReplicationControlManager``): topics, partitions, ISR changes, elections, reassignments;
- this module: the state, its saves, telling brokers, and the configs, ACL, SCRAM, quota
  and producer-id verbs (Kafka: ``ConfigurationControlManager``, ``AclControlManager``,
  ``ScramControlManager``, ``ClientQuotaControlManager``, ``ProducerIdControlManager``), each
  a thin method over its pure transition.

The public methods are the interface apis/, node/ and zookeeper.py use.
"""

import dataclasses
import logging
import random
from collections.abc import Sequence
from pathlib import Path

import trio

from minibroker.common.config import BrokerConfig
from minibroker.common.config_model import BrokerLayers, dynamic_topic_defaults
from minibroker.common.metrics import BrokerMetrics
from minibroker.controller import acls as acl_transitions
from minibroker.controller import broker_requests
from minibroker.controller import client_quotas as quota_transitions
from minibroker.controller import configs as config_transitions
from minibroker.controller import features as feature_transitions
from minibroker.controller import scram_credentials as scram_transitions
from minibroker.controller import state as transitions
from minibroker.controller.broker_lifecycle import BrokerLifecycleManager
from minibroker.controller.channel_manager import ConnectionFactory, ControllerChannelManager
from minibroker.controller.replication_control import ReplicationControlManager
from minibroker.controller.state import ControllerState, PartitionChange, TopicState
from minibroker.controller.store import LocalStore
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Authorizer
from minibroker.security.scram import ScramCredentials

log = logging.getLogger("controller")

# How long an AlterConfigs answer waits for the live brokers to apply the change.
CONFIG_DELIVERY_S = 5.0


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
        connect: ConnectionFactory | None = None,
    ) -> None:
        """``store`` is where decisions are saved: the ZooKeeper store of an elected
        controller, or by default the JSON file in the first log dir. ``connect`` opens a
        connection to a broker (by default over the network; tests pass fake brokers)."""
        self.config = config
        # This node's authorizer, which the controller keeps up to date with the ACLs it
        # decides (the other nodes hear of them by a pushed CreateAcls).
        self.authorizer = authorizer
        self._static_unclean_leader_election = config.unclean_leader_election_enable
        self.metrics = metrics
        self._leaders: dict[tuple[str, int], int] = {}
        self.cluster_id = cluster_id
        self.clock_ms = clock_ms
        self.rng = rng or random.Random()
        self.store = store or LocalStore(Path(config.log_dirs[0]))
        self.state: ControllerState = ControllerState()
        self.channels = ControllerChannelManager(
            config,
            lambda node_id: self.state.brokers.get(node_id),
            self.all_saved,
            connect,
            on_response=self._broker_answered,
        )
        self.brokers = BrokerLifecycleManager(self)
        self.replication = ReplicationControlManager(self)
        self._nursery: trio.Nursery | None = None
        # This node's own credential table, kept current when no broker role gets pushes.
        self.local_scram_credentials: ScramCredentials | None = None
        self._saves_in_flight = 0
        # The live brokers as the last UpdateMetadata built from a decision saw them (None:
        # nothing told yet), and the brokers whose next UpdateMetadata must be the full
        # picture (they registered: they may know nothing).
        self._announced_live: tuple[int, ...] | None = None
        self._full_metadata_for: set[int] = set()
        self._all_saved = trio.Event()
        self._all_saved.set()

    @property
    def node_id(self) -> int:
        return self.config.node_id

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Load the persisted state (a new controller epoch) and watch broker liveness."""
        self.state = await self.store.load()
        # KIP-966's min ISR of a topic that sets none (its dynamic cluster default first).
        self.state.default_min_isr = self.config.min_insync_replicas
        # A new cluster (or one saved before features existed) finalizes its features once.
        if feature_transitions.bootstrap(self.state, self.config.transaction_version):
            await self.save()
        self._refresh_local_scram_credentials()
        self._apply_dynamic_defaults()
        if self.authorizer is not None:
            self.authorizer.replace_acls(self.state.acls)
        self.brokers.restart_sessions()
        # Kafka's KafkaController.onControllerFailover reads the live brokers from ZooKeeper
        # (initializeControllerContext: the /brokers/ids children) before it tells anyone
        # anything, and its PartitionStateMachine.startup elects leaders for the partitions
        # whose leader is not among them: so does a controller whose store read the brokers'
        # sessions with the state (ZooKeeperStore.sessions_at_load). Issue 39: the brokers
        # were first told every partition with the dead broker's leaders, and only after the
        # session watch fenced it every moved partition again, two rounds of thousands of
        # partitions on every broker before the dead broker's partitions had leaders.
        sessions = getattr(self.store, "sessions_at_load", None)
        if sessions is not None and self.brokers.fence_without_session(sessions) is not None:
            await self.save()
        log.info(
            "controller %d active at epoch %d with %d topic(s), %d broker(s) known",
            self.node_id,
            self.state.controller_epoch,
            len(self.state.topics),
            len(self.state.brokers),
        )
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.channels.start(nursery)
                # Decisions saved by the previous controller may not have reached every
                # broker before it stopped: a new controller tells every live broker
                # everything, as Kafka's does when it takes over (brokers ignore what they
                # already applied).
                self.propagate(broker_requests.all_partitions(self.state))
                # So are the cluster's ACLs and SCRAM credentials: a change saved just
                # before the previous controller died reaches brokers that will not register
                # again.
                self.push_acls()
                self.push_scram_credentials(None)
                self.push_client_quotas(None)
                self.push_features()
                nursery.start_soon(self.brokers.watch_sessions)
                if self.config.auto_leader_rebalance_enable:
                    nursery.start_soon(self.replication.rebalance_leaders)
                task_status.started()
        finally:
            # A stopped (or deposed) service starts nothing more: a broker connection that
            # closes after this finds no nursery (see broker_connection_lost) instead of one
            # closed to new tasks, whose RuntimeError in the connection's handler would take
            # the whole node down.
            self._nursery = None

    async def save(self) -> None:
        """Make the current state durable. While a save is in flight (the ZooKeeper store
        awaits its transaction; the JSON file is written in a worker thread), the channels
        hold their requests: an UpdateMetadata built from the state then would show brokers
        a decision that a crash could still take back. A failed save (a deposed controller)
        holds them for good."""
        if self._saves_in_flight == 0:
            self._all_saved = trio.Event()
        self._saves_in_flight += 1
        self.state.metadata_offset += 1
        await self.store.save(self.state)
        self._saves_in_flight -= 1
        if self._saves_in_flight == 0:
            self._all_saved.set()

    async def all_saved(self) -> None:
        """Wait until no save is in flight."""
        while self._saves_in_flight:
            await self._all_saved.wait()

    # -- telling brokers ----------------------------------------------------------------

    def propagate(
        self,
        changes: list[PartitionChange],
        stopped: Sequence[TopicState] = (),
        also_tell: int | None = None,
    ) -> list[trio.Event]:
        """Queue LeaderAndIsr for changed partitions, StopReplica for deleted topics and for
        replicas a reassignment removed, and UpdateMetadata for every live broker (see
        ``broker_requests.plan``); return the delivery events. ``also_tell`` is a broker
        that is no longer live but still running (a controlled shutdown): it hears of its
        partitions too, so that it stops acting as their leader.

        The UpdateMetadata is incremental (the changed partitions, the deleted topics), as
        Kafka's ZooKeeper-mode controller sends it, except to a broker that may lack the
        picture: every broker when this controller tells anything first or when the live
        brokers changed (every partition's offline replicas change), and a broker that
        registered (:meth:`send_full_metadata`). Issue 39: the full picture on every
        decision made each of thousands of decisions cost in proportion to every partition
        of the cluster, to build, encode and apply."""
        for change in changes:
            key = (change.topic, change.partition)
            if change.state.leader >= 0 and self._leaders.get(key) != change.state.leader:
                self.metrics.leader_elections.inc()
            self._leaders[key] = change.state.leader
        batch = broker_requests.plan(self.state, changes, stopped, also_tell)
        events = []
        for node_id, broker_changes in batch.leader_and_isr.items():
            request = broker_requests.leader_and_isr(
                self.state, self.node_id, node_id, broker_changes
            )
            events.append(
                self.channels.enqueue(node_id, request, even_if_fenced=node_id == also_tell)
            )
        for node_id, partitions in batch.stop_replica.items():
            request = broker_requests.stop_replica(self.state, self.node_id, node_id, partitions)
            events.append(self.channels.enqueue(node_id, request))
        live = tuple(self.state.live_brokers())
        everyone_full = live != self._announced_live
        self._announced_live = live
        delta = broker_requests.MetadataDelta.of(changes, stopped)
        for node_id in batch.update_metadata:
            full = everyone_full or node_id in self._full_metadata_for
            self._full_metadata_for.discard(node_id)
            events.append(
                self.channels.enqueue_metadata(
                    node_id,
                    lambda delta, node_id=node_id: broker_requests.update_metadata(
                        self.state, self.node_id, delta
                    )(node_id),
                    even_if_fenced=node_id == also_tell,
                    delta=None if full else delta,
                )
            )
        return events

    def send_full_metadata(self, node_id: int) -> None:
        """The next UpdateMetadata ``node_id`` is sent is the full picture (it registered:
        a restarted broker knows nothing)."""
        self._full_metadata_for.add(node_id)

    async def await_delivery(self, events: list[trio.Event], timeout_s: float) -> bool:
        """Wait until every event is set; False if the timeout came first. A timeout of zero
        or less does not wait and counts as met, as Kafka answers such a request at once."""
        if timeout_s <= 0:
            return True
        with trio.move_on_after(timeout_s):
            for event in events:
                await event.wait()
            return True
        return False

    # -- brokers (BrokerLifecycleManager) -----------------------------------------------

    async def broker_registration(self, request) -> dict:
        return await self.brokers.register(request)

    async def broker_heartbeat(self, request) -> dict:
        return await self.brokers.heartbeat(request)

    def _broker_answered(self, node_id: int, request, response) -> None:
        """A broker's answer on its channel: a LeaderAndIsr answered KAFKA_STORAGE_ERROR for
        some partitions means their replicas there are in a failed log dir (Kafka's
        ZooKeeper-mode KafkaController.onBrokerLogDirFailure learns them so, from the
        LeaderAndIsr it sends that broker): they are taken offline
        (BrokerLifecycleManager.replicas_offline)."""
        if getattr(request, "__api_key__", None) != ApiKey.LEADER_AND_ISR:
            return
        error_code = getattr(response, "error_code", None)
        if error_code is None or error_code.value != Error.NONE:
            return
        failed: list[tuple[str, int]] = []
        for topic in getattr(response, "topics", ()):
            known = self.state.topic_by_id(topic.topic_id)
            if known is None:
                continue
            failed += [
                (known.name, answer.partition_index)
                for answer in topic.partition_errors
                if answer.error_code.value == Error.KAFKA_STORAGE_ERROR
            ]
        already = self.state.offline_replicas.get(node_id, set())
        if any(key not in already for key in failed) and self._nursery is not None:
            self._nursery.start_soon(self.brokers.replicas_offline, node_id, failed)

    def broker_connection_lost(self, node_id: int) -> None:
        self.brokers.connection_lost(node_id, self._nursery)

    async def broker_sessions_changed(self, with_session: set[int]) -> None:
        await self.brokers.sessions_changed(with_session)

    # -- topics and partitions (ReplicationControlManager) ------------------------------

    async def create_topics(self, request) -> dict:
        return await self.replication.create_topics(request)

    async def create_partitions(self, request) -> dict:
        return await self.replication.create_partitions(request)

    async def delete_topics(self, request) -> dict:
        return await self.replication.delete_topics(request)

    async def alter_partition(self, request) -> dict:
        return await self.replication.alter_partition(request)

    async def elect_leaders(self, request) -> dict:
        return await self.replication.elect_leaders(request)

    async def alter_partition_reassignments(self, request) -> dict:
        return await self.replication.alter_partition_reassignments(request)

    async def list_partition_reassignments(self, request) -> dict:
        return await self.replication.list_partition_reassignments(request)

    # -- configs, ACLs, SCRAM credentials -----------------------------------------------

    async def alter_configs(self, request, *, incremental: bool) -> dict:
        """AlterConfigs (or IncrementalAlterConfigs): decided, saved, then pushed to every
        live broker, which applies it to its logs at once; answered once they have it
        (within a few seconds: the change is saved and reaches late brokers anyway)."""
        keys = [(resource.resource_type, resource.resource_name) for resource in request.resources]
        min_isr_before = config_transitions.min_isr_settings(self.state, keys)
        results, changed = config_transitions.alter_configs(
            self.state,
            request.resources,
            incremental=incremental,
            validate_only=request.validate_only,
            group_bounds=self.config.group_bounds,
        )
        if changed:
            # Kafka 4.4 clears the ELR of the partitions a min.insync.replicas change
            # concerns in the same batch of records as the config change.
            elr_topics = config_transitions.elr_cleared_topics(
                self.state,
                min_isr_before,
                config_transitions.min_isr_settings(self.state, keys),
            )
            cleared = (
                transitions.clear_eligible_leader_replicas(self.state, elr_topics)
                if elr_topics != set()
                else []
            )
            await self.save()
            if cleared:
                self.propagate(cleared)
            self._apply_dynamic_defaults()
            log.info("configs changed: %s", ", ".join(f"{t}:{name!r}" for t, name in changed))
            events = self.push_configs(changed)
            await self.await_delivery(events, CONFIG_DELIVERY_S)
        return {"responses": results}

    def push_configs(self, resources, only_to: int | None = None) -> list[trio.Event]:
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
                request = broker_requests.configs_push(pushed)
                events.append(self.channels.enqueue(node_id, request))
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
        await self.save()
        log.info("ACLs changed: %d binding(s) now", len(self.state.acls))
        if self.authorizer is not None:
            self.authorizer.replace_acls(self.state.acls)
        await self.await_delivery(self.push_acls(), CONFIG_DELIVERY_S)

    def push_acls(self, only_to: int | None = None) -> list[trio.Event]:
        """Tell brokers the whole ACL set (a CreateAcls on the controller's channel, which
        they take as a replacement of theirs), so each authorizes on its own. A node that is
        the controller too has them already; without an authorizer there is nothing to tell."""
        if self.authorizer is None:
            return []
        request = broker_requests.acls_push(self.state)
        recipients = [only_to] if only_to is not None else self.state.live_brokers()
        return [
            self.channels.enqueue(node_id, request)
            for node_id in recipients
            if node_id != self.node_id
        ]

    async def alter_user_scram_credentials(self, request) -> dict:
        """Decided, saved, pushed to every live broker, answered once they have it (as
        configs are: a late broker gets every credential when it registers)."""
        results, changed = scram_transitions.alter(self.state, request)
        if changed:
            await self.save()
            log.info("SCRAM credentials changed for %s", ", ".join(sorted({u for u, _ in changed})))
            self._refresh_local_scram_credentials()
            events = self.push_scram_credentials(changed)
            await self.await_delivery(events, CONFIG_DELIVERY_S)
        return {"results": results}

    async def describe_user_scram_credentials(self, request) -> dict:
        return scram_transitions.describe(self.state, request)

    def push_scram_credentials(self, pairs, only_to: int | None = None) -> list[trio.Event]:
        """Tell brokers the credentials of ``pairs`` (all of them when None)."""
        request = broker_requests.scram_push(self.state, pairs)
        targets = [only_to] if only_to is not None else self.state.live_brokers()
        return [self.channels.enqueue(node_id, request) for node_id in targets]

    async def alter_client_quotas(self, request) -> dict:
        """AlterClientQuotas (Kafka's ClientQuotaControlManager): decided, saved, pushed to
        every live broker, answered once they have it (a late broker gets every quota when it
        registers)."""
        results, changed = quota_transitions.alter(self.state, request)
        if changed:
            await self.save()
            log.info("client quotas changed for %d entit(ies)", len(changed))
            events = self.push_client_quotas(changed)
            await self.await_delivery(events, CONFIG_DELIVERY_S)
        return {"entries": results}

    async def describe_client_quotas(self, request) -> dict:
        return quota_transitions.describe(self.state, request)

    def push_client_quotas(self, entities, only_to: int | None = None) -> list[trio.Event]:
        """Tell brokers the quotas of ``entities`` (all of them when None)."""
        request = broker_requests.client_quotas_push(self.state, entities)
        targets = [only_to] if only_to is not None else self.state.live_brokers()
        return [self.channels.enqueue(node_id, request) for node_id in targets]

    async def update_features(self, request) -> dict:
        """UpdateFeatures (Kafka's FeatureControlManager): decided, saved, pushed to every
        live broker, answered once they have it. Kafka answers v0 and v1 with the outcome at
        the top and, after a success, a NONE result per feature (createWithErrors)."""
        version = 1 if hasattr(request, "validate_only") else 0
        updates = feature_transitions.updates_of(request, version)
        error, message, changed = feature_transitions.update_features(
            self.state,
            updates,
            validate_only=getattr(request, "validate_only", False),
            node_id=self.node_id,
        )
        if changed:
            await self.save()
            log.info(
                "finalized features now %s (epoch %d)",
                self.state.finalized_features,
                self.state.features_epoch,
            )
            await self.await_delivery(self.push_features(), CONFIG_DELIVERY_S)
            if not transitions.elr_enabled(self.state):
                # Eligible leader replicas off: no partition keeps an ELR nobody maintains.
                cleared = transitions.clear_eligible_leader_replicas(self.state)
                if cleared:
                    await self.save()
                    self.propagate(cleared)
        return {
            "error_code": error,
            "error_message": message,
            "results": [
                {"feature": update.feature, "error_code": Error.NONE, "error_message": None}
                for update in updates
                if error is Error.NONE
            ],
        }

    def push_features(self, only_to: int | None = None) -> list[trio.Event]:
        """Tell brokers the finalized features (all of them, with the epoch)."""
        request = broker_requests.features_push(self.state)
        targets = [only_to] if only_to is not None else self.state.live_brokers()
        return [self.channels.enqueue(node_id, request) for node_id in targets]

    def _refresh_local_scram_credentials(self) -> None:
        """A controller-only node authenticates its own SASL listeners from the state."""
        local = self.local_scram_credentials
        if local is None or self.config.is_broker:
            return
        local.forget_stored()
        for user, credentials in self.state.scram_credentials.items():
            for mechanism, record in credentials.items():
                local.store(mechanism, user, scram_transitions.from_record(record))

    def config_layers(self) -> BrokerLayers:
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
