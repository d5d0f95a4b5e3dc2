"""The controller's pure core: cluster metadata as plain data, and the transitions on it.

The controller is the cluster's single metadata authority (one node, no Raft). Everything it
decides lives in a :class:`ControllerState`; every decision is a function here that mutates the
state it is given and returns what changed, or raises :class:`ControllerError` and leaves the
state as it was. Nothing here does I/O, sleeps or reads a clock: time comes in as ``now_ms`` and
randomness as an ``rng``, so the same inputs always give the same state. The trio shell around
it persists the new state (``ControllerStore.save``) before it tells any broker about a
:class:`PartitionChange`, so a broker never acts on a decision the controller could forget.

The rules follow Apache Kafka's KRaft controller (``ReplicationControlManager`` and
``PartitionChangeBuilder``). With eligible leader replicas (KIP-966) off
(``eligible.leader.replicas.version`` 0), Kafka 3.x's:

* Fencing a broker removes it from every ISR, except that an ISR never becomes empty: its last
  member stays, so the partition goes offline (leader -1) and that member, the one replica known
  to hold every committed record, becomes leader again when it returns.
* A new leader is the first replica, in assignment order, that is in the ISR and alive. With
  unclean election allowed and no such replica, it is the first alive replica, and the ISR
  becomes just that replica (committed records may be lost).
* Every leader or ISR change bumps the partition epoch; a leader change (including going
  offline) bumps the leader epoch.
* ElectLeaders and the automatic leader rebalance share one preferred election: the first
  replica leads if it is alive and in the ISR. Reassignments follow KIP-455 as KRaft does
  (``PartitionReassignmentReplicas``): target replicas first, then those being removed, and
  completion once the whole target is in the ISR.

With eligible leader replicas on (level 1, a new cluster's), Kafka 4.4's instead: the ISR may
become empty, replicas that leave an ISR below ``min.insync.replicas`` stay eligible to lead
(the ELR), a leader is elected from the ELR when the ISR is empty, the last-known leader is
kept, and a broker that restarted loses its eligibility (:func:`_elr_change`,
:func:`register_broker`).

One deliberate difference: when the controller itself shrinks an ISR (fencing a follower) it
also bumps the leader epoch, as ZooKeeper-mode Kafka and KRaft before metadata version 3.6 did
(KAFKA-15021). Brokers apply a LeaderAndIsr only when it carries a newer leader epoch, so
without the bump the leader would never learn the smaller ISR: its high watermark would wait
on the dead follower and its own AlterPartition would carry a stale partition epoch forever.
ISR changes a leader asks for itself (:func:`alter_partition`) bump only the partition epoch,
because the leader learns the result from the response.
"""

import base64
import random
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import TypedDict

from minibroker.common.features import ELIGIBLE_LEADER_REPLICAS_VERSION
from minibroker.common.quota_manager import QuotaEntity
from minibroker.protocol.errors import Error, KafkaError
from minibroker.security.authorizer.acls import AclBinding

NO_LEADER = -1

UNCLEAN_LEADER_ELECTION_CONFIG = "unclean.leader.election.enable"
MIN_INSYNC_REPLICAS_CONFIG = "min.insync.replicas"

_TOPIC_NAME_MAX_LENGTH = 249
# The most partitions one CreateTopics may ask for per topic: Kafka's KRaft controller refuses
# a user operation that would write more than 10,000 records (QuorumController's
# MAX_RECORDS_PER_USER_OP). Without a bound, num_partitions=2^31-1 in one small request made
# the controller assign replicas in a loop for ever, in the process that also serves clients.
MAX_PARTITIONS_PER_TOPIC = 10_000
_TOPIC_NAME_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


class ElectionType(IntEnum):
    """ElectLeaders' election_type (Kafka's ``ElectionType``)."""

    PREFERRED = 0
    UNCLEAN = 1


class ControllerError(KafkaError):
    """A refused request: the Kafka error code to answer with (``error``) and a message for
    the client. Raised as ``ControllerError(Error.X, "why")`` by every transition here."""

    def __init__(self, error: Error, message: str) -> None:
        super().__init__(message, error)


@dataclass
class BrokerInfo:
    """A registered broker as the controller knows it.

    ``broker_epoch`` is handed out at registration and grows across all registrations, so a
    request carrying an older epoch is recognisably from a previous life of the broker.
    """

    node_id: int
    host: str
    port: int
    broker_epoch: int
    incarnation_id: str
    fenced: bool
    last_heartbeat_ms: int
    # Every advertised listener by name; ``host``/``port`` are the inter-broker one.
    listeners: dict[str, tuple[str, int]] = field(default_factory=dict)
    rack: str | None = None  # broker.rack (KIP-36)


@dataclass
class PartitionState:
    """Leadership and ISR of one partition.

    Transitions never change a PartitionState in place: they put a new one in the topic's list,
    so the state held by an earlier :class:`PartitionChange` stays what was decided then.
    """

    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int
    # A reassignment in progress (KIP-455): ``replicas`` is the target followed by the
    # replicas being removed; ``adding`` are target replicas that were not replicas before.
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)
    # Eligible leader replicas (KIP-966, kept while ``eligible.leader.replicas.version`` is
    # 1): replicas that left the ISR while it was below min.insync.replicas, so they hold
    # every record committed before, and may lead when the ISR is empty. The last-known ELR
    # is, as Kafka 4.4 keeps it, the last leader of a partition whose ISR became empty.
    eligible_leader_replicas: list[int] = field(default_factory=list)
    last_known_elr: list[int] = field(default_factory=list)

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)


@dataclass
class TopicState:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionState]
    configs: dict[str, str]


class ScramRecord(TypedDict):
    """One SCRAM credential as the controller keeps it (base64 of the bytes)."""

    salt: str
    stored_key: str
    server_key: str
    iterations: int


@dataclass
class ControllerState:
    """Everything the controller decides; what the store persists."""

    controller_epoch: int = 0
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicState] = field(default_factory=dict)
    next_broker_epoch: int = 1
    # Dynamic broker configs by resource name: "" for the cluster default, else a broker id.
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # Group configs (KIP-848's GROUP resources) by group id: each group's overrides.
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # Client-metrics subscriptions (KIP-714, CLIENT_METRICS resources) by name.
    client_metrics_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # The cluster's ACLs, in creation order (see controller/acls.py).
    acls: list[AclBinding] = field(default_factory=list)
    # SCRAM credentials by user, then mechanism name ("SCRAM-SHA-512"): salt, stored key and
    # server key (base64) and iterations, as Kafka keeps them; never a password.
    scram_credentials: dict[str, dict[str, ScramRecord]] = field(default_factory=dict)
    # Client quotas by entity (controller/client_quotas.py), then quota key: the value.
    client_quotas: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)
    # The cluster's finalized feature levels (KIP-584, controller/features.py), None until the
    # controller first finalizes them; and their epoch, one more on every change.
    finalized_features: dict[str, int] | None = None
    features_epoch: int = 0
    # The controller's own ``min.insync.replicas`` (its static config), which a topic without
    # the config and a cluster without a dynamic default use for ELR; not saved (the service
    # sets it at every start).
    default_min_isr: int = 1
    # One more on every save: where the controller's decisions stand, what DescribeQuorum
    # reports as the metadata log's high watermark (there is no log: see apis/quorum.py).
    metadata_offset: int = 0
    # Replicas in a failed log dir of a live broker (see :func:`take_replicas_offline`), by
    # broker id, and the offline log dirs each broker's last heartbeat named (BrokerHeartbeat
    # v1's OfflineLogDirs); not saved: a new controller learns both again from the brokers'
    # heartbeats and LeaderAndIsr answers, as ZooKeeper-mode Kafka's controller re-learns its
    # replicasOnOfflineDirs. A broker that registers again has none.
    offline_replicas: dict[int, set[tuple[str, int]]] = field(default_factory=dict)
    offline_log_dirs: dict[int, frozenset[uuid.UUID]] = field(default_factory=dict)
    # Topics by id, an index :meth:`topic_by_id` keeps (not saved, not compared): rebuilt
    # from ``topics`` when an id is not found in it, and an entry whose topic is no longer in
    # ``topics`` is not believed.
    _topics_by_id: dict[uuid.UUID, TopicState] = field(
        default_factory=dict, repr=False, compare=False
    )

    def is_live(self, node_id: int) -> bool:
        """Registered and not fenced: may lead and may be in an ISR."""
        broker = self.brokers.get(node_id)
        return broker is not None and not broker.fenced

    def replica_online(self, node_id: int, topic: str, index: int) -> bool:
        """Kafka's isReplicaOnline: the broker is live and its replica of ``topic``-``index``
        is not in one of its failed log dirs; only such a replica may lead or join an ISR."""
        return self.is_live(node_id) and (topic, index) not in self.offline_replicas.get(
            node_id, ()
        )

    def online_in(self, topic: str, index: int) -> Callable[[int], bool]:
        """:meth:`replica_online` for one partition, as the elections take it."""
        return lambda node_id: self.replica_online(node_id, topic, index)

    def live_brokers(self) -> list[int]:
        return sorted(node_id for node_id in self.brokers if self.is_live(node_id))

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicState | None:
        """The topic with this id, or None. Found through an index, not by a scan of every
        topic: AlterPartition asks for each partition it names, and with thousands of topics
        a scan made an ISR change of every partition cost topics x partitions (issue 39)."""
        found = self._topics_by_id.get(topic_id)
        if found is not None and self.topics.get(found.name) is found:
            return found
        self._topics_by_id = {topic.topic_id: topic for topic in self.topics.values()}
        return self._topics_by_id.get(topic_id)


@dataclass(frozen=True)
class PartitionChange:
    """A partition whose state the brokers hosting it must be told (by LeaderAndIsr)."""

    topic: str
    partition: int
    state: PartitionState
    # Replicas that no longer belong to the partition (a completed or cancelled
    # reassignment): they are told to stop and delete it.
    removed: tuple[int, ...] = ()


class _Changes:
    """The partitions touched by one transition, each once, with its final state."""

    def __init__(self) -> None:
        self._by_partition: dict[tuple[str, int], PartitionChange] = {}

    def record(
        self, topic: str, partition: int, state: PartitionState, removed: tuple[int, ...] = ()
    ) -> None:
        self._by_partition[(topic, partition)] = PartitionChange(topic, partition, state, removed)

    def extend(self, changes: Iterable[PartitionChange]) -> None:
        for change in changes:
            self._by_partition[(change.topic, change.partition)] = change

    def as_list(self) -> list[PartitionChange]:
        return list(self._by_partition.values())


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules, with Kafka's messages (INVALID_TOPIC_EXCEPTION)."""
    if not name:
        message = "Topic name is illegal, it can't be empty"
    elif name in (".", ".."):
        message = 'Topic name cannot be "." or ".."'
    elif len(name) > _TOPIC_NAME_MAX_LENGTH:
        message = (
            f"Topic name is illegal, it can't be longer than {_TOPIC_NAME_MAX_LENGTH} "
            f"characters, topic name: {name}"
        )
    elif not _TOPIC_NAME_LEGAL.fullmatch(name):
        message = (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    else:
        return
    raise ControllerError(Error.INVALID_TOPIC_EXCEPTION, message)


# --- brokers ------------------------------------------------------------------------------


def register_broker(
    state: ControllerState,
    node_id: int,
    host: str,
    port: int,
    incarnation_id: str,
    now_ms: int,
    *,
    unclean_leader_election: bool = False,
    listeners: dict[str, tuple[str, int]] | None = None,
    rack: str | None = None,
    previous_broker_epoch: int = -1,
) -> tuple[int, list[PartitionChange]]:
    """Register a new or returning broker; returns its new broker epoch and the changes.

    Simplification of KRaft: a registered broker starts unfenced. KRaft keeps it fenced until
    it has caught up with the metadata log; here the controller pushes the metadata to it
    (LeaderAndIsr for every partition it hosts, all of them in the returned changes, changed or
    not), and a follower rejoins the ISR only when its leader adds it by AlterPartition.

    A broker that registers again under a new incarnation while still unfenced has restarted
    faster than its session timeout. The new process may have lost what the old one had not
    flushed, so it is first fenced exactly as if its session had expired (out of every ISR it
    does not hold alone, leadership moved away); KRaft gets the same effect by refusing the
    registration until the old session expires. The same incarnation registering again is a
    retry by a live process and keeps its place.

    With eligible leader replicas on, a returning broker that cannot show a clean shutdown
    first leaves every ISR and ELR it is in (Kafka's ClusterControlManager, which compares
    the registration's PreviousBrokerEpoch with the epoch it knows, and
    ReplicationControlManager.handleBrokerShutdown's unclean branch): its log may lack
    records it had acknowledged, so it may no longer lead without an unclean election. The
    same incarnation registering again never stopped, so it is clean; a new process is clean
    when it sends (BrokerRegistration v3+) the broker epoch its log dirs' clean-shutdown
    markers hold and that epoch is the one this controller knows, as in Kafka 4.4 (a broker
    killed, or one that registered again since, is not).

    Offline partitions that host the broker then elect a leader: it, if it is in their ISR
    (typically the last ISR member coming back) or, with an empty ISR, in their ELR; or with
    unclean election the first alive replica.
    """
    changes = _Changes()
    # Its log dirs were recovered (or it halted again): what failed before is forgotten.
    state.offline_replicas.pop(node_id, None)
    state.offline_log_dirs.pop(node_id, None)
    previous = state.brokers.get(node_id)
    if previous is not None and not previous.fenced and previous.incarnation_id != incarnation_id:
        changes.extend(fence_broker(state, node_id, unclean_leader_election))
    if (
        previous is not None
        and previous.incarnation_id != incarnation_id
        and previous_broker_epoch != previous.broker_epoch
        and elr_enabled(state)
    ):
        changes.extend(_withdraw_unclean_replica(state, node_id, unclean_leader_election))

    broker_epoch = state.next_broker_epoch
    state.next_broker_epoch += 1
    state.brokers[node_id] = BrokerInfo(
        node_id=node_id,
        host=host,
        port=port,
        broker_epoch=broker_epoch,
        incarnation_id=incarnation_id,
        fenced=False,
        last_heartbeat_ms=now_ms,
        listeners=dict(listeners or {}),
        rack=rack,
    )

    for topic in state.topics.values():
        unclean = _unclean_allowed(topic, unclean_leader_election)
        for index, partition in enumerate(topic.partitions):
            if node_id not in partition.replicas:
                continue
            if partition.leader == NO_LEADER:
                rules = _elr_rules(state, topic, partition)
                online = state.online_in(topic.name, index)
                partition = _elect(partition, partition.isr, online, unclean, rules)
                topic.partitions[index] = partition
            changes.record(topic.name, index, partition)
    return broker_epoch, changes.as_list()


def _withdraw_unclean_replica(
    state: ControllerState, node_id: int, unclean_default: bool
) -> list[PartitionChange]:
    """Kafka's handleBrokerUncleanShutdown: ``node_id`` leaves the ISR and the ELR of every
    partition that has it there, and may not be elected by these changes."""
    changes = _Changes()

    def acceptable(replica: int) -> bool:
        return replica != node_id and state.is_live(replica)

    for topic in state.topics.values():
        unclean = _unclean_allowed(topic, unclean_default)
        for index, partition in enumerate(topic.partitions):
            if node_id not in partition.isr and node_id not in partition.eligible_leader_replicas:
                continue
            rules = _elr_rules(state, topic, partition, unclean_shutdown=(node_id,))
            assert rules is not None
            target_isr = [replica for replica in partition.isr if replica != node_id]
            changed = _elr_change(partition, target_isr, acceptable, unclean, rules)
            if changed is not partition:
                topic.partitions[index] = changed
                changes.record(topic.name, index, changed)
    return changes.as_list()


def clear_eligible_leader_replicas(
    state: ControllerState, topics: Iterable[str] | None = None
) -> list[PartitionChange]:
    """Every partition (of ``topics`` only, when given) drops its ELR and last-known ELR, a
    new partition epoch each (Kafka's ReplicationControlManager.removeTopicElrs, the replay
    of a ClearElrRecord). Done when the feature is turned off (``kafka-features downgrade``:
    nothing maintains them any more) and when ``min.insync.replicas`` changes (of a topic:
    its partitions; the cluster-level one: all), which Kafka 4.4 applies at once this way.
    A partition left with an empty ISR keeps no leader until an unclean election, as a
    partition whose last ISR member is gone."""
    changes = _Changes()
    selected = (
        state.topics.values()
        if topics is None
        else [state.topics[name] for name in sorted(set(topics)) if name in state.topics]
    )
    for topic in selected:
        for index, partition in enumerate(topic.partitions):
            if not partition.eligible_leader_replicas and not partition.last_known_elr:
                continue
            changed = replace(
                partition,
                replicas=list(partition.replicas),
                isr=list(partition.isr),
                partition_epoch=partition.partition_epoch + 1,
                eligible_leader_replicas=[],
                last_known_elr=[],
            )
            topic.partitions[index] = changed
            changes.record(topic.name, index, changed)
    return changes.as_list()


def heartbeat(state: ControllerState, node_id: int, broker_epoch: int, now_ms: int) -> bool:
    """Record a heartbeat; False means the broker must register again.

    False for an unknown broker or an epoch other than its current one (Kafka's
    STALE_BROKER_EPOCH: the sender is a previous life of the broker), and for a fenced broker:
    unfencing changes partitions, which only :func:`register_broker` reports.
    """
    broker = state.brokers.get(node_id)
    if broker is None or broker.broker_epoch != broker_epoch or broker.fenced:
        return False
    broker.last_heartbeat_ms = now_ms
    return True


def begin_controlled_shutdown(
    state: ControllerState, node_id: int, broker_epoch: int, unclean_leader_election: bool
) -> list[PartitionChange] | None:
    """A broker asked to shut down (BrokerHeartbeat with wantShutDown, KRaft's controlled
    shutdown): leadership moves to other ISR members and the broker leaves every ISR, while
    it still runs, so its partitions are not offline until its session would expire. A
    partition it holds alone keeps no leader until it returns, as in Kafka. None for a stale
    broker epoch (a previous life of the broker); no changes if it is already fenced."""
    broker = state.brokers.get(node_id)
    if broker is None or broker.broker_epoch != broker_epoch:
        return None
    if broker.fenced:
        return []
    return fence_broker(state, node_id, unclean_leader_election)


def expire_brokers(
    state: ControllerState, now_ms: int, session_timeout_ms: int, unclean_leader_election: bool
) -> tuple[list[int], list[PartitionChange]]:
    """Fence every live broker not heard from for more than ``session_timeout_ms``."""
    expired = [
        node_id
        for node_id in state.live_brokers()
        if now_ms - state.brokers[node_id].last_heartbeat_ms > session_timeout_ms
    ]
    changes = _Changes()
    for node_id in expired:
        changes.extend(fence_broker(state, node_id, unclean_leader_election))
    return expired, changes.as_list()


def fence_broker(state: ControllerState, node_id: int, unclean: bool) -> list[PartitionChange]:
    """Fence a broker: out of every ISR it does not hold alone, and out of leadership.

    ``unclean`` is the cluster default for unclean leader election; a topic's own
    ``unclean.leader.election.enable`` overrides it, as in Kafka.
    """
    broker = state.brokers.get(node_id)
    if broker is None:
        raise ControllerError(Error.INVALID_REQUEST, f"Broker {node_id} is not registered.")
    broker.fenced = True
    changes = _Changes()
    for topic in state.topics.values():
        unclean_for_topic = _unclean_allowed(topic, unclean)
        for index, partition in enumerate(topic.partitions):
            if node_id not in partition.isr and partition.leader != node_id:
                continue
            target_isr = [replica for replica in partition.isr if replica != node_id]
            rules = _elr_rules(state, topic, partition)
            online = state.online_in(topic.name, index)
            changed = _elect(partition, target_isr, online, unclean_for_topic, rules)
            if changed is not partition:
                topic.partitions[index] = changed
                changes.record(topic.name, index, changed)
    return changes.as_list()


def take_replicas_offline(
    state: ControllerState, node_id: int, keys: Iterable[tuple[str, int]], unclean: bool
) -> list[PartitionChange]:
    """Replicas of a live broker that are in a failed log dir (the broker answered
    KAFKA_STORAGE_ERROR for them): Kafka's ZooKeeper-mode KafkaController
    .onReplicasBecomeOffline, whose effect Kafka 4.4's ReplicationControlManager
    .handleDirectoriesOffline has as well. Each such replica is remembered as offline until
    the broker registers again, leaves the ISR and the ELR (its log is gone: it may no longer
    lead, not even uncleanly), and a partition it led elects another leader from the rest of
    its ISR; with eligible leader replicas off, an ISR never becomes empty, so a partition
    whose whole ISR was that replica goes without a leader, as in Kafka. The broker stays
    live and keeps leading and following everything else. Returns the partitions whose state
    changed; unknown partitions and ones the broker holds no replica of are passed by."""
    offline = state.offline_replicas.setdefault(node_id, set())
    changes = _Changes()
    for name, index in keys:
        topic = state.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            continue
        partition = topic.partitions[index]
        if node_id not in partition.replicas or (name, index) in offline:
            continue
        offline.add((name, index))
        if (
            node_id not in partition.isr
            and partition.leader != node_id
            and node_id not in partition.eligible_leader_replicas
        ):
            continue
        target_isr = [replica for replica in partition.isr if replica != node_id]
        rules = _elr_rules(state, topic, partition, unclean_shutdown=(node_id,))
        changed = _elect(
            partition,
            target_isr,
            state.online_in(name, index),
            _unclean_allowed(topic, unclean),
            rules,
        )
        if changed is not partition:
            topic.partitions[index] = changed
            changes.record(name, index, changed)
    return changes.as_list()


# --- topics -------------------------------------------------------------------------------


def assign_replicas(
    broker_ids: list[int],
    num_partitions: int,
    replication_factor: int,
    start_index: int,
    replica_shift: int,
) -> list[list[int]]:
    """Kafka's rack-unaware replica assignment.

    Partition p's first replica (its preferred leader) is broker ``(p + start_index) % n``, so
    leaders go round the brokers. The followers sit at a distance of ``1 + (shift + j) %
    (n - 1)`` from it, and the shift grows by one after every full round of n partitions, so
    the followers of one broker's partitions spread over the others instead of always being
    its neighbours. ``broker_ids`` must be sorted, unique and at least ``replication_factor``.
    """
    count = len(broker_ids)
    assignment = []
    for partition in range(num_partitions):
        if partition > 0 and partition % count == 0:
            replica_shift += 1
        first = (partition + start_index) % count
        replicas = [broker_ids[first]]
        for j in range(replication_factor - 1):
            distance = 1 + (replica_shift + j) % (count - 1)
            replicas.append(broker_ids[(first + distance) % count])
        assignment.append(replicas)
    return assignment


def rack_alternated(racks: dict[int, str | None]) -> list[int]:
    """Kafka's getRackAlternatedBrokerList: the brokers taken one per rack in turn (racks in
    name order, each rack's brokers by id), so that neighbours in the list are on different
    racks while any rack has brokers left."""
    by_rack: dict[str, list[int]] = {}
    for node_id in sorted(racks):
        by_rack.setdefault(racks[node_id] or "", []).append(node_id)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    arranged: list[int] = []
    while len(arranged) < len(racks):
        for queue in queues:
            if queue:
                arranged.append(queue.pop(0))
    return arranged


def assign_replicas_rack_aware(
    racks: dict[int, str | None],
    num_partitions: int,
    replication_factor: int,
    start_index: int,
    replica_shift: int,
) -> list[list[int]]:
    """Kafka's rack-aware replica assignment (AdminUtils.assignReplicasToBrokersRackAware,
    which KRaft's StripedReplicaPlacer keeps the aims of): over the rack-alternated broker list,
    the leaders go round as in :func:`assign_replicas`, and each further replica is the next
    broker at the growing distance whose rack holds no replica of the partition yet (once every
    rack holds one, any broker without one); so a partition's replicas span
    min(replication factor, racks) racks and the leaders and followers spread evenly.

    Departure: Kafka refuses to place when some brokers have a rack and others not (unless
    told to ignore racks); here a broker without ``broker.rack`` counts as one more rack, named
    "", as KRaft's placer treats brokers without a rack, so a cluster being given racks one
    broker at a time keeps creating topics.
    """
    arranged = rack_alternated(racks)
    count = len(arranged)
    rack_count = len({rack or "" for rack in racks.values()})
    assignment = []
    for partition in range(num_partitions):
        if partition > 0 and partition % count == 0:
            replica_shift += 1
        first = (partition + start_index) % count
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader] or ""}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                shift = 1 + (replica_shift * rack_count + k) % (count - 1)
                broker = arranged[(first + shift) % count]
                rack = racks[broker] or ""
                k += 1
                if (rack not in racks_used or len(racks_used) == rack_count) and (
                    broker not in replicas or len(replicas) == count
                ):
                    replicas.append(broker)
                    racks_used.add(rack)
                    break
        assignment.append(replicas)
    return assignment


def create_topic(
    state: ControllerState,
    name: str,
    num_partitions: int,
    replication_factor: int,
    configs: dict[str, str],
    assignments: dict[int, list[int]] | None = None,
    topic_id: uuid.UUID | None = None,
    *,
    default_partitions: int = 1,
    default_replication_factor: int = 1,
    start_index: int | None = None,
    rng: random.Random | None = None,
) -> tuple[TopicState, list[PartitionChange]]:
    """Create a topic, placing its replicas on the live brokers or where ``assignments`` says.

    -1 for ``num_partitions`` / ``replication_factor`` means the defaults. With explicit
    ``assignments`` (partition -> replicas) both must be -1, as in Kafka. Automatic placement
    is :func:`assign_replicas` over the live brokers, starting at ``start_index`` (also the
    first replica shift, as Kafka's fixed start index) or at positions drawn from ``rng``;
    ``rng`` also draws the topic id unless ``topic_id`` is given. Every replica starts in the
    ISR and the first live one leads, at leader and partition epoch 0.
    """
    validate_topic_name(name)
    if name in state.topics:
        raise ControllerError(Error.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    _check_name_collision(state, name)
    if topic_id is not None:
        owner = state.topic_by_id(topic_id)
        if owner is not None:
            raise ControllerError(
                Error.INVALID_REQUEST, f"Topic id {topic_id} is already used by {owner.name}."
            )
    rng = rng if rng is not None else random.Random()

    if assignments:
        if replication_factor != -1:
            raise ControllerError(
                Error.INVALID_REQUEST,
                "A manual partition assignment was specified, but replication factor was not "
                "set to -1.",
            )
        if num_partitions != -1:
            raise ControllerError(
                Error.INVALID_REQUEST,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            )
        replica_lists = _validated_manual_assignment(state, assignments)
    else:
        if replication_factor < -1 or replication_factor == 0:
            raise ControllerError(
                Error.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        if num_partitions < -1 or num_partitions == 0:
            raise ControllerError(
                Error.INVALID_PARTITIONS,
                "Number of partitions was set to an invalid non-positive value.",
            )
        if num_partitions > MAX_PARTITIONS_PER_TOPIC:
            raise ControllerError(
                Error.INVALID_PARTITIONS,
                f"Number of partitions {num_partitions} is more than one request may create"
                f" ({MAX_PARTITIONS_PER_TOPIC}).",
            )
        replica_lists = _automatic_assignment(
            state,
            default_partitions if num_partitions == -1 else num_partitions,
            default_replication_factor if replication_factor == -1 else replication_factor,
            start_index,
            rng,
        )

    partitions = []
    for replicas in replica_lists:
        isr = [replica for replica in replicas if state.is_live(replica)]
        partitions.append(
            PartitionState(
                replicas=list(replicas), isr=isr, leader=isr[0], leader_epoch=0, partition_epoch=0
            )
        )
    topic = TopicState(
        name=name,
        topic_id=topic_id if topic_id is not None else _new_topic_id(state, rng),
        partitions=partitions,
        configs=dict(configs),
    )
    state.topics[name] = topic
    changes = [PartitionChange(name, index, p) for index, p in enumerate(partitions)]
    return topic, changes


def create_partitions(
    state: ControllerState,
    name: str,
    count: int,
    assignments: list[list[int]] | None,
    rng: random.Random | None = None,
) -> list[PartitionChange]:
    """CreatePartitions: grow topic ``name`` to ``count`` partitions, the new ones with the
    topic's replication factor, placed as a new topic's are or as ``assignments`` (one replica
    list per new partition) says. Kafka's errors and messages."""
    topic = state.topics.get(name)
    if topic is None:
        raise ControllerError(
            Error.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
        )
    current = len(topic.partitions)
    if count <= current:
        message = (
            f"Topic already has {current} partitions."
            if count == current
            else f"Topic currently has {current} partitions, which is higher than the requested"
            f" {count}."
        )
        raise ControllerError(Error.INVALID_PARTITIONS, message)
    replication_factor = len(topic.partitions[0].replicas)
    if assignments is not None:
        if len(assignments) != count - current:
            raise _bad_assignment(
                f"Increasing the number of partitions by {count - current} but"
                f" {len(assignments)} assignments provided."
            )
        if any(len(replicas) != replication_factor for replicas in assignments):
            raise _bad_assignment(
                f"Inconsistent replication factor between partitions, {replication_factor}"
                " is expected."
            )
        replica_lists = _validated_manual_assignment(
            state, {index: list(replicas) for index, replicas in enumerate(assignments)}
        )
    else:
        replica_lists = _automatic_assignment(
            state, count - current, replication_factor, None, rng or random.Random()
        )
    changes = []
    for replicas in replica_lists:
        isr = [replica for replica in replicas if state.is_live(replica)]
        partition = PartitionState(
            replicas=list(replicas),
            isr=isr or list(replicas),
            leader=isr[0] if isr else NO_LEADER,
            leader_epoch=0,
            partition_epoch=0,
        )
        topic.partitions.append(partition)
        changes.append(PartitionChange(name, len(topic.partitions) - 1, partition))
    return changes


def delete_topic(state: ControllerState, name: str) -> TopicState:
    """Remove a topic; returns it so the shell can tell its replicas to stop and delete."""
    topic = state.topics.pop(name, None)
    if topic is None:
        raise ControllerError(
            Error.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
        )
    return topic


def _check_name_collision(state: ControllerState, name: str) -> None:
    """Refuse a name equal to an existing one once '.' and '_' are unified, as Kafka does:
    both become '_' in metric names, so such topics would share their metrics."""
    normalized = name.replace(".", "_")
    for existing in state.topics:
        if existing.replace(".", "_") == normalized:
            raise ControllerError(
                Error.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with existing topic: {existing}",
            )


def _validated_manual_assignment(
    state: ControllerState, assignments: dict[int, list[int]]
) -> list[list[int]]:
    """The replica lists by partition index, checked as Kafka's controller checks them."""
    replication_factor = None
    for index in sorted(assignments):
        replicas = assignments[index]
        _validate_replica_list(state, replicas)
        if replication_factor is not None and len(replicas) != replication_factor:
            raise _bad_assignment(
                f"The manual partition assignment includes a partition with {len(replicas)} "
                "replica(s), but this is not consistent with previous partitions, which have "
                f"{replication_factor} replica(s)."
            )
        replication_factor = len(replicas)
        _require_a_live_replica(state, replicas, index)
    if sorted(assignments) != list(range(len(assignments))):
        raise _bad_assignment("partitions should be a consecutive 0-based integer sequence")
    return [assignments[index] for index in range(len(assignments))]


def _validate_replica_list(state: ControllerState, replicas: list[int]) -> None:
    """Kafka's checks of one manual replica list: not empty, registered brokers, no repeats."""
    if not replicas:
        raise _bad_assignment("The manual partition assignment includes an empty replica list.")
    seen = set()
    for broker_id in sorted(replicas):
        if broker_id not in state.brokers:
            raise _bad_assignment(
                f"The manual partition assignment includes broker {broker_id}, but no such "
                "broker is registered."
            )
        if broker_id in seen:
            raise _bad_assignment(
                f"The manual partition assignment includes the broker {broker_id} more than once."
            )
        seen.add(broker_id)


def _require_a_live_replica(state: ControllerState, replicas: list[int], index: int) -> None:
    if not any(state.is_live(broker_id) for broker_id in replicas):
        raise _bad_assignment(
            "All brokers specified in the manual partition assignment for partition "
            f"{index} are fenced or in controlled shutdown."
        )


def _bad_assignment(message: str) -> ControllerError:
    return ControllerError(Error.INVALID_REPLICA_ASSIGNMENT, message)


def _automatic_assignment(
    state: ControllerState,
    num_partitions: int,
    replication_factor: int,
    start_index: int | None,
    rng: random.Random,
) -> list[list[int]]:
    live = state.live_brokers()
    if replication_factor > len(live):
        raise ControllerError(
            Error.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {len(live)}.",
        )
    if start_index is None:
        first, shift = rng.randrange(len(live)), rng.randrange(len(live))
    else:
        first = shift = start_index
    racks = {node_id: state.brokers[node_id].rack for node_id in live}
    if any(rack is not None for rack in racks.values()):
        return assign_replicas_rack_aware(racks, num_partitions, replication_factor, first, shift)
    return assign_replicas(live, num_partitions, replication_factor, first, shift)


def _new_topic_id(state: ControllerState, rng: random.Random) -> uuid.UUID:
    """A random version-4 id, unused, whose Kafka string form does not start with '-'.

    Kafka shows topic ids in URL-safe base64 and never generates one starting with '-', which
    command-line tools would take for an option.
    """
    while True:
        topic_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        dash_first = base64.urlsafe_b64encode(topic_id.bytes).startswith(b"-")
        if not dash_first and state.topic_by_id(topic_id) is None:
            return topic_id


# --- partitions ---------------------------------------------------------------------------


def alter_partition(
    state: ControllerState,
    topic_id_or_name: uuid.UUID | str,
    partition: int,
    leader_id: int,
    leader_epoch: int,
    new_isr: list[int],
    partition_epoch: int,
    broker_epoch: int | None = None,
    isr_broker_epochs: Mapping[int, int] | None = None,
) -> PartitionState:
    """A leader's request to change its ISR (AlterPartition), checked in Kafka's order.

    ``leader_id`` is the sending broker and ``broker_epoch`` its epoch (None skips that check).
    ``isr_broker_epochs`` is AlterPartition v3's NewIsrWithEpochs (KIP-903): for each ISR
    member, the broker epoch the leader last saw it with (a follower's, from its Fetch
    ReplicaState; the leader's own); -1, or a member left out, is not checked, as Kafka skips
    it ("the epoch check is not supported"; v2's NewIsr carries none).
    Refusals: a sender epoch that is not its current one -> STALE_BROKER_EPOCH; an unknown
    topic -> UNKNOWN_TOPIC_ID (by id) or UNKNOWN_TOPIC_OR_PARTITION (by name, or an unknown
    partition); epochs newer than the controller's -> NOT_CONTROLLER (the sender has seen a
    controller that knows more, so it should look for that one); an older leader epoch ->
    FENCED_LEADER_EPOCH; a sender that is not the leader -> INVALID_REQUEST; an older partition
    epoch -> INVALID_UPDATE_VERSION; an ISR with duplicates, non-replicas or without the leader
    -> INVALID_REQUEST; an ISR member that is not registered, is fenced (or shutting down,
    which fences it here), or whose given broker epoch is not its registered one (it restarted
    since the leader saw it, so the log the leader counted may be gone) -> INELIGIBLE_REPLICA
    (Kafka's ReplicationControlManager.ineligibleReplicasForIsr).

    On success the partition has the new ISR and partition epoch + 1, and a reassignment
    whose target replicas are now all in the ISR completes; an ISR equal to the current one
    changes nothing. Returns the partition's state either way.
    """
    if broker_epoch is not None:
        _check_broker_epoch(state, leader_id, broker_epoch)
    topic = _find_topic(state, topic_id_or_name)
    if not 0 <= partition < len(topic.partitions):
        raise ControllerError(
            Error.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
        )
    current = topic.partitions[partition]
    where = f"{topic.name}-{partition}"

    if leader_epoch > current.leader_epoch or partition_epoch > current.partition_epoch:
        raise ControllerError(
            Error.NOT_CONTROLLER,
            f"{where}: the request's epochs ({leader_epoch}, {partition_epoch}) are newer than "
            f"the controller's ({current.leader_epoch}, {current.partition_epoch}).",
        )
    if leader_epoch < current.leader_epoch:
        raise ControllerError(
            Error.FENCED_LEADER_EPOCH,
            f"{where}: leader epoch {leader_epoch} is older than {current.leader_epoch}.",
        )
    if leader_id != current.leader:
        raise ControllerError(
            Error.INVALID_REQUEST,
            f"{where}: broker {leader_id} is not the leader, {current.leader} is.",
        )
    if partition_epoch < current.partition_epoch:
        raise ControllerError(
            Error.INVALID_UPDATE_VERSION,
            f"{where}: partition epoch {partition_epoch} is older than {current.partition_epoch}.",
        )
    if len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(current.replicas):
        raise ControllerError(
            Error.INVALID_REQUEST,
            f"{where}: ISR {new_isr} is not a set of replicas {current.replicas}.",
        )
    if current.leader not in new_isr:
        raise ControllerError(
            Error.INVALID_REQUEST,
            f"{where}: ISR {new_isr} does not include the leader {current.leader}.",
        )
    online = state.online_in(topic.name, partition)
    ineligible = [replica for replica in new_isr if not online(replica)]
    if ineligible:
        raise ControllerError(
            Error.INELIGIBLE_REPLICA,
            f"{where}: ISR {new_isr} includes fenced or unregistered brokers, or replicas"
            f" in a failed log dir: {ineligible}.",
        )
    stale = [
        f"{replica} (requested={given} VS expected={state.brokers[replica].broker_epoch})"
        for replica in new_isr
        if (given := (isr_broker_epochs or {}).get(replica, -1)) != -1
        and given != state.brokers[replica].broker_epoch
    ]
    if stale:
        raise ControllerError(
            Error.INELIGIBLE_REPLICA,
            f"{where}: ISR {new_isr} includes replicas whose broker epoch mismatches: "
            + ", ".join(stale)
            + ".",
        )

    if new_isr == current.isr:
        return current
    rules = _elr_rules(state, topic, current)
    if rules is not None:
        # The leader stays (it is alive and in the new ISR); only the ELR follows the ISR.
        changed = _elr_change(
            current, list(new_isr), online, False, rules, leader_epoch_on_shrink=False
        )
    else:
        changed = replace(
            current,
            replicas=list(current.replicas),
            isr=list(new_isr),
            partition_epoch=current.partition_epoch + 1,
            adding_replicas=list(current.adding_replicas),
            removing_replicas=list(current.removing_replicas),
        )
    # A replica being added that joined the ISR may complete a reassignment.
    changed, _removed = _maybe_complete_reassignment(state, changed)
    topic.partitions[partition] = changed
    return changed


# --- elections ----------------------------------------------------------------------------


def elect_preferred_leaders(
    state: ControllerState, imbalance_percentage: int = 0
) -> list[PartitionChange]:
    """Kafka's automatic leader rebalance (``auto.leader.rebalance.enable``): after failovers,
    leadership piles up on the brokers that stayed up; this moves it back to each partition's
    preferred (first) replica where that replica can lead.

    As Kafka's controller checks it, per preferred broker: when more than
    ``imbalance_percentage`` (``leader.imbalance.per.broker.percentage``) of the partitions it
    should lead are led by another broker or by none, each of them whose preferred replica is
    alive and in the ISR moves to it (so no record is ever lost by it). Below the threshold,
    that broker's partitions stay where they are.
    """
    preferred_of: dict[int, list[tuple[TopicState, int]]] = {}
    for topic in state.topics.values():
        for index, partition in enumerate(topic.partitions):
            preferred_of.setdefault(partition.replicas[0], []).append((topic, index))
    changes = _Changes()
    for broker, owned in preferred_of.items():
        elsewhere = [(t, i) for t, i in owned if t.partitions[i].leader != broker]
        if len(elsewhere) * 100 <= imbalance_percentage * len(owned):
            continue
        for topic, index in elsewhere:
            changed = _preferred_leader(state, topic.partitions[index], topic.name, index)
            if changed is not None:
                topic.partitions[index] = changed
                changes.record(topic.name, index, changed)
    return changes.as_list()


def elect_preferred_leader(state: ControllerState, name: str, index: int) -> PartitionState | None:
    """Move leadership of one partition to its preferred replica if it is not leading and
    can (alive, in the ISR); the new state, or None when nothing changed."""
    topic = state.topics.get(name)
    if topic is None or not 0 <= index < len(topic.partitions):
        return None
    changed = _preferred_leader(state, topic.partitions[index], name, index)
    if changed is not None:
        topic.partitions[index] = changed
    return changed


ElectionOutcome = tuple[int, int, str | None]  # partition, error code (0: elected), message


def elect_leaders(
    state: ControllerState,
    election_type: ElectionType,
    targets: list[tuple[str, list[int]]] | None,
) -> tuple[list[tuple[str, list[ElectionOutcome]]], list[PartitionChange]]:
    """ElectLeaders, as Kafka's controller decides it; the per-topic outcomes and the changes.

    ``targets`` is the request's (topic, partitions) list, or None for every partition: then,
    as in Kafka, partitions that already have the leader asked for are left out of the
    outcomes instead of answering ELECTION_NOT_NEEDED.
    """
    changes = _Changes()
    results: list[tuple[str, list[ElectionOutcome]]] = []
    everything = targets is None
    if targets is None:
        targets = [(name, list(range(len(t.partitions)))) for name, t in state.topics.items()]
    for name, indexes in targets:
        outcomes: list[ElectionOutcome] = []
        for index in indexes:
            try:
                changed = elect_leader(state, name, index, election_type)
            except ControllerError as error:
                if not (everything and error.error == Error.ELECTION_NOT_NEEDED):
                    outcomes.append((index, int(error.error), error.message))
                continue
            changes.record(name, index, changed)
            outcomes.append((index, 0, None))
        results.append((name, outcomes))
    return results, changes.as_list()


def elect_leader(
    state: ControllerState, name: str, index: int, election_type: ElectionType
) -> PartitionState:
    """One partition's election, or the Kafka error why there is none.

    PREFERRED: the first replica leads if it is alive and in the ISR (ELECTION_NOT_NEEDED when
    it leads already, PREFERRED_LEADER_NOT_AVAILABLE when it cannot). UNCLEAN: only for a
    partition without a leader (ELECTION_NOT_NEEDED otherwise): a live ISR member if there is
    one, else the first live replica with an ISR of itself, whatever the topic's
    ``unclean.leader.election.enable`` (the operator asked for it);
    ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is alive.
    """
    topic = state.topics.get(name)
    if topic is None:
        raise ControllerError(Error.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}")
    if not 0 <= index < len(topic.partitions):
        raise ControllerError(
            Error.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {name}-{index}"
        )
    partition = topic.partitions[index]
    if election_type == ElectionType.PREFERRED:
        if partition.leader == partition.replicas[0]:
            raise ControllerError(
                Error.ELECTION_NOT_NEEDED,
                f"Leader election not needed for {name}-{index}: the preferred replica leads",
            )
        changed = _preferred_leader(state, partition, name, index)
        if changed is None:
            raise ControllerError(
                Error.PREFERRED_LEADER_NOT_AVAILABLE,
                f"Failed to elect the preferred replica {partition.replicas[0]} of"
                f" {name}-{index}: it is not alive and in the ISR {partition.isr}",
            )
    else:
        if partition.leader != NO_LEADER:
            raise ControllerError(
                Error.ELECTION_NOT_NEEDED,
                f"Leader election not needed for {name}-{index}: broker {partition.leader} leads",
            )
        rules = _elr_rules(state, topic, partition)
        online = state.online_in(name, index)
        changed = _elect(partition, partition.isr, online, unclean=True, elr=rules)
        if changed.leader == NO_LEADER:
            raise ControllerError(
                Error.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                f"No replica of {name}-{index} ({partition.replicas}) is alive",
            )
    topic.partitions[index] = changed
    return changed


def _preferred_leader(
    state: ControllerState, partition: PartitionState, name: str, index: int
) -> PartitionState | None:
    """The partition led by its preferred replica, or None when that one leads already or
    cannot lead (not alive or in a failed log dir, or not in the ISR: it could lack
    acknowledged records)."""
    preferred = partition.replicas[0]
    if preferred == partition.leader or preferred not in partition.isr:
        return None
    if not state.replica_online(preferred, name, index):
        return None
    return _with_leader_and_isr(partition, preferred, partition.isr)


# --- reassignments (KIP-455) -------------------------------------------------------------


def alter_reassignment(
    state: ControllerState,
    name: str,
    index: int,
    target: list[int] | None,
    allow_replication_factor_change: bool = True,
) -> PartitionChange:
    """AlterPartitionReassignments for one partition: start (or replace) a reassignment to
    ``target``, or cancel the one in progress when ``target`` is None.

    Starting, as Kafka's controller does: the replicas become the target followed by the
    current replicas not in it (``removing``); the target replicas that are new
    (``adding``) are told by LeaderAndIsr and catch up through their fetchers, and join the
    ISR as any follower does. Once every target replica is in the ISR the reassignment
    completes (:func:`_maybe_complete_reassignment`), possibly at once. A new target while
    one is in progress first reverts the old one. Cancelling reverts: the replicas being
    added leave, the original replica list is back.

    Errors: an unknown topic or partition -> UNKNOWN_TOPIC_OR_PARTITION; a target that is
    empty, repeats a broker or names an unregistered one -> INVALID_REPLICA_ASSIGNMENT;
    cancelling with nothing in progress -> NO_REASSIGNMENT_IN_PROGRESS; a target of another
    size than the original replica list when ``allow_replication_factor_change`` is false
    (AlterPartitionReassignments v1) -> INVALID_REPLICATION_FACTOR.
    """
    topic = state.topics.get(name)
    if topic is None or not 0 <= index < len(topic.partitions):
        raise ControllerError(
            Error.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
        )
    current = topic.partitions[index]
    if target is None:
        if not current.reassigning:
            raise ControllerError(
                Error.NO_REASSIGNMENT_IN_PROGRESS,
                f"No ongoing reassignment for partition {name}-{index}",
            )
        reverted = _reverted(state, current)
        removed = tuple(r for r in current.replicas if r not in reverted.replicas)
        topic.partitions[index] = reverted
        return PartitionChange(name, index, reverted, removed)
    _validate_replica_list(state, target)
    _require_a_live_replica(state, target, index)
    base = _reverted(state, current) if current.reassigning else current
    if not allow_replication_factor_change and len(target) != len(base.replicas):
        raise ControllerError(
            Error.INVALID_REPLICATION_FACTOR,
            f"The replication factor is changed from {len(base.replicas)} to {len(target)}",
        )
    removing = sorted(set(base.replicas) - set(target))
    adding = sorted(set(target) - set(base.replicas))
    started = replace(
        base,
        replicas=[*target, *removing],
        isr=list(base.isr),
        adding_replicas=adding,
        removing_replicas=removing,
        partition_epoch=base.partition_epoch + 1,
    )
    removed = tuple(r for r in current.replicas if r not in started.replicas)
    completed, completion_removed = _maybe_complete_reassignment(state, started)
    topic.partitions[index] = completed
    return PartitionChange(name, index, completed, removed + completion_removed)


def list_reassignments(
    state: ControllerState, targets: list[tuple[str, list[int]]] | None
) -> list[tuple[str, list[tuple[int, PartitionState]]]]:
    """The partitions with a reassignment in progress, of every topic (``targets`` None) or
    of the named partitions; unknown topics and partitions are left out, as in Kafka."""
    if targets is None:
        targets = [(name, list(range(len(t.partitions)))) for name, t in state.topics.items()]
    found = []
    for name, indexes in targets:
        topic = state.topics.get(name)
        if topic is None:
            continue
        ongoing = [
            (index, topic.partitions[index])
            for index in indexes
            if 0 <= index < len(topic.partitions) and topic.partitions[index].reassigning
        ]
        if ongoing:
            found.append((name, ongoing))
    return found


def _reverted(state: ControllerState, partition: PartitionState) -> PartitionState:
    """The partition as before its reassignment: the replicas being added leave the replica
    list and the ISR (if that empties the ISR, the first original replica is its only
    member, as Kafka does); a leader that was being added gives way."""
    original = [r for r in partition.replicas if r not in partition.adding_replicas]
    isr = [r for r in partition.isr if r not in partition.adding_replicas] or original[:1]
    leader = partition.leader
    if leader not in isr or not state.is_live(leader):
        leader = next((r for r in original if r in isr and state.is_live(r)), NO_LEADER)
    return _reassignment_state(partition, original, isr, leader, [], [])


def _maybe_complete_reassignment(
    state: ControllerState, partition: PartitionState
) -> tuple[PartitionState, tuple[int, ...]]:
    """Finish a reassignment whose target replicas are all in the ISR: the replicas become the
    target, the ISR loses the removed ones, and a leader being removed hands over to the first
    target replica in the ISR that is alive. Returns the state and the removed replicas."""
    if not partition.reassigning:
        return partition, ()
    removing = set(partition.removing_replicas)
    target = [r for r in partition.replicas if r not in removing]
    isr = [r for r in partition.isr if r not in removing]
    if not isr or not set(target) <= set(isr):
        return partition, ()
    leader = partition.leader
    if leader not in isr or not state.is_live(leader):
        leader = next((r for r in target if r in isr and state.is_live(r)), NO_LEADER)
    completed = _reassignment_state(partition, target, isr, leader, [], [])
    return completed, tuple(sorted(removing))


def _reassignment_state(
    partition: PartitionState,
    replicas: list[int],
    isr: list[int],
    leader: int,
    adding: list[int],
    removing: list[int],
) -> PartitionState:
    """A replica-set change with its epoch bumps: the partition epoch always, the leader epoch
    when the leader changes or the ISR loses a member (the leader must hear of it)."""
    bump = leader != partition.leader or not set(partition.isr) <= set(isr)
    return PartitionState(
        replicas=list(replicas),
        isr=list(isr),
        leader=leader,
        leader_epoch=partition.leader_epoch + (1 if bump else 0),
        partition_epoch=partition.partition_epoch + 1,
        adding_replicas=list(adding),
        removing_replicas=list(removing),
        # Departure: Kafka recomputes the ELR here too; a reassignment keeps the ELR members
        # that stay replicas (a removed replica can never lead).
        eligible_leader_replicas=[r for r in partition.eligible_leader_replicas if r in replicas],
        last_known_elr=[r for r in partition.last_known_elr if r in replicas],
    )


def _check_broker_epoch(state: ControllerState, node_id: int, broker_epoch: int) -> None:
    broker = state.brokers.get(node_id)
    if broker is None:
        raise ControllerError(
            Error.STALE_BROKER_EPOCH, f"No broker registration found for broker id {node_id}"
        )
    if broker.broker_epoch != broker_epoch:
        raise ControllerError(
            Error.STALE_BROKER_EPOCH,
            f"Expected broker epoch {broker.broker_epoch}, but got broker epoch {broker_epoch}",
        )


def _find_topic(state: ControllerState, topic_id_or_name: uuid.UUID | str) -> TopicState:
    if isinstance(topic_id_or_name, uuid.UUID):
        topic = state.topic_by_id(topic_id_or_name)
        if topic is None:
            raise ControllerError(
                Error.UNKNOWN_TOPIC_ID, "This server does not host this topic ID."
            )
        return topic
    topic = state.topics.get(topic_id_or_name)
    if topic is None:
        raise ControllerError(
            Error.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
        )
    return topic


def _unclean_allowed(topic: TopicState, cluster_default: bool) -> bool:
    """The topic's ``unclean.leader.election.enable`` if set, else the cluster's."""
    value = topic.configs.get(UNCLEAN_LEADER_ELECTION_CONFIG)
    return cluster_default if value is None else value.strip().lower() == "true"


def effective_min_isr(state: ControllerState, topic: TopicState, partition: PartitionState) -> int:
    """Kafka's ReplicationControlManager.getTopicEffectiveMinIsr: the topic's
    ``min.insync.replicas``, else the cluster's dynamic default, else the controller's own,
    and never more than the partition's replicas (its target replicas while reassigning)."""
    value = topic.configs.get(MIN_INSYNC_REPLICAS_CONFIG)
    if value is None:
        value = state.broker_configs.get("", {}).get(MIN_INSYNC_REPLICAS_CONFIG)
    try:
        min_isr = int(value) if value is not None else state.default_min_isr
    except ValueError:
        min_isr = state.default_min_isr
    replicas = [r for r in partition.replicas if r not in partition.removing_replicas]
    return max(1, min(min_isr, len(replicas)))


def elr_enabled(state: ControllerState) -> bool:
    """Eligible leader replicas are kept while ``eligible.leader.replicas.version`` is 1
    (Kafka's FeatureControlManager.isElrFeatureEnabled)."""
    return (state.finalized_features or {}).get(ELIGIBLE_LEADER_REPLICAS_VERSION, 0) >= 1


@dataclass(frozen=True)
class _ElrRules:
    """What one partition change needs to apply KIP-966: the effective min ISR and the
    replicas whose last shutdown was unclean (they lose their eligibility)."""

    min_isr: int
    unclean_shutdown: frozenset[int] = frozenset()


def _elr_rules(
    state: ControllerState,
    topic: TopicState,
    partition: PartitionState,
    unclean_shutdown: Iterable[int] = (),
) -> "_ElrRules | None":
    """The KIP-966 rules for a change of ``partition``, or None while the feature is off."""
    if not elr_enabled(state):
        return None
    return _ElrRules(effective_min_isr(state, topic, partition), frozenset(unclean_shutdown))


def _elect(
    partition: PartitionState,
    target_isr: list[int],
    is_live: Callable[[int], bool],
    unclean: bool,
    elr: _ElrRules | None = None,
) -> PartitionState:
    """The partition with ``target_isr`` applied and a leader kept or elected.

    With eligible leader replicas off (``elr`` None), Kafka's PartitionChangeBuilder without
    ELR: an empty target ISR is not applied (the last member stays, see the module
    docstring). The current leader stays if it is still in the ISR and alive; otherwise the
    first replica in assignment order that is; otherwise, with ``unclean``, the first alive
    replica with an ISR of just itself; otherwise no leader. With ELR on, :func:`_elr_change`.
    Returns ``partition`` itself when nothing changes.
    """
    if elr is not None:
        return _elr_change(partition, target_isr, is_live, unclean, elr)
    isr = target_isr or partition.isr
    leader = partition.leader
    if leader not in isr or not is_live(leader):
        leader = next((r for r in partition.replicas if r in isr and is_live(r)), NO_LEADER)
        if leader == NO_LEADER and unclean:
            leader = next((r for r in partition.replicas if is_live(r)), NO_LEADER)
            if leader != NO_LEADER:
                isr = [leader]
    return _with_leader_and_isr(partition, leader, isr)


def _next_elr(partition: PartitionState, target_isr: list[int], rules: _ElrRules) -> list[int]:
    """KIP-966's ELR after the ISR becomes ``target_isr`` (PartitionChangeBuilder
    .maybePopulateTargetElr): empty once the ISR meets min ISR; otherwise the members of the
    current ISR and ELR that are not in the new ISR, less the replicas whose shutdown was
    unclean (their logs may lack what they had acknowledged). In broker id order (Kafka
    collects them through a HashSet, which for small ids is that order)."""
    if len(target_isr) >= rules.min_isr:
        return []
    candidates = set(partition.eligible_leader_replicas) | set(partition.isr)
    return sorted(r for r in candidates if r not in target_isr and r not in rules.unclean_shutdown)


def _elr_change(
    partition: PartitionState,
    target_isr: list[int],
    is_live: Callable[[int], bool],
    unclean: bool,
    rules: _ElrRules,
    *,
    leader_epoch_on_shrink: bool = True,
) -> PartitionState:
    """Kafka 4.4's PartitionChangeBuilder.build with eligible leader replicas on (KIP-966).

    1. The ELR follows the new ISR (:func:`_next_elr`); the ISR may become empty.
    2. Election (electAnyLeader): the current leader stays while it is a valid leader; else
       the first replica in assignment order that is alive and in the ISR, or, when the ISR
       is empty, in the ELR. A leader taken from the ELR leaves it and is the whole ISR: it
       holds every committed record, the others may not. Failing that, with the ISR and the
       ELR both empty, the last-known leader (the last-known ELR's single member) is elected
       as an unclean election would be; and failing that, with ``unclean``, the first alive
       replica. An unclean election makes the ISR that replica and clears the ELR and the
       last-known ELR (nothing is known to be safe any more).
    3. The last-known ELR (maybeUpdateLastKnownLeader, Kafka's default
       ``useLastKnownLeaderInBalancedRecovery``): the leader the partition had when its ISR
       became empty; cleared as soon as the partition has a leader again.

    Departure: Kafka elects the last-known leader even when it is fenced (its check of
    ``isAcceptableLeader`` there only logs); here it must be alive, like every other leader
    this controller elects, so a partition never names a dead broker as its leader.

    Epochs as :func:`_with_leader_and_isr` (the leader epoch also on an ISR shrink, unless
    ``leader_epoch_on_shrink`` is false: AlterPartition's own changes), the partition epoch
    on any change, the ELR lists included.
    """
    isr = list(target_isr)
    elr = _next_elr(partition, isr, rules)

    def valid(replica: int) -> bool:
        return (replica in isr or (not isr and replica in elr)) and is_live(replica)

    leader = partition.leader
    elected_unclean = False
    if not valid(leader):
        leader = next((r for r in partition.replicas if valid(r)), NO_LEADER)
        last_known = partition.last_known_elr
        nothing_eligible = not isr and not elr and len(last_known) == 1
        if leader == NO_LEADER and nothing_eligible and is_live(last_known[0]):
            leader, elected_unclean = last_known[0], True
        if leader == NO_LEADER and unclean:
            leader = next((r for r in partition.replicas if is_live(r)), NO_LEADER)
            elected_unclean = leader != NO_LEADER
    if leader != partition.leader and leader != NO_LEADER:
        if elected_unclean:
            isr = [leader]
        elif leader in elr:
            isr = [leader]
            elr = [r for r in elr if r != leader]
    last_known_elr = list(partition.last_known_elr)
    if elected_unclean:
        elr, last_known_elr = [], []
    if not isr and partition.isr and partition.leader != NO_LEADER:
        if last_known_elr != [partition.leader]:
            last_known_elr = [partition.leader]
    elif leader != NO_LEADER:
        last_known_elr = []
    leader_changed = leader != partition.leader
    if (
        not leader_changed
        and isr == partition.isr
        and elr == partition.eligible_leader_replicas
        and last_known_elr == partition.last_known_elr
    ):
        return partition
    isr_shrank = leader_epoch_on_shrink and not set(partition.isr) <= set(isr)
    return replace(
        partition,
        replicas=list(partition.replicas),
        isr=isr,
        leader=leader,
        leader_epoch=partition.leader_epoch + (1 if leader_changed or isr_shrank else 0),
        partition_epoch=partition.partition_epoch + 1,
        adding_replicas=list(partition.adding_replicas),
        removing_replicas=list(partition.removing_replicas),
        eligible_leader_replicas=elr,
        last_known_elr=last_known_elr,
    )


def _with_leader_and_isr(partition: PartitionState, leader: int, isr: list[int]) -> PartitionState:
    """A controller-made change, with its epoch bumps (see the module docstring); the ELR
    lists stay as they are."""
    leader_changed = leader != partition.leader
    if not leader_changed and isr == partition.isr:
        return partition
    isr_shrank = not set(partition.isr) <= set(isr)
    return replace(
        partition,
        replicas=list(partition.replicas),
        isr=list(isr),
        leader=leader,
        leader_epoch=partition.leader_epoch + (1 if leader_changed or isr_shrank else 0),
        partition_epoch=partition.partition_epoch + 1,
        adding_replicas=list(partition.adding_replicas),
        removing_replicas=list(partition.removing_replicas),
        eligible_leader_replicas=list(partition.eligible_leader_replicas),
        last_known_elr=list(partition.last_known_elr),
    )
