"""What the controller tells brokers, built from its state (Kafka:
``ControllerBrokerRequestBatch``).

A pure core: no trio, no sockets. The service decides (``state.py``), saves, then hands this
module the changed partitions; :func:`plan` says which broker hears what (LeaderAndIsr for the
replicas of a changed partition, StopReplica for replicas of deleted topics and replicas a
reassignment removed, UpdateMetadata for every live broker), and the builders make the
requests the :mod:`channel_manager` delivers. The config, ACL and SCRAM pushes are built here
too.

UpdateMetadata, as Kafka's ZooKeeper-mode controller sends it, carries the whole cluster
picture only when a broker may lack it (a new controller, a broker that registered, the live
brokers changed, which changes every partition's offline replicas) and otherwise only the
changed partitions, a deleted topic's partitions with leader -2 (Kafka's
LeaderAndIsr.LeaderDuringDelete): see :class:`MetadataDelta`. With the whole picture on every
decision, each of thousands of decisions cost time in proportion to every partition of the
cluster (issue 39). Where we depart from Kafka: the request's ``type`` (UpdateMetadata v8's
KIP-866 field) says which it is, FULL (2) or INCREMENTAL (1), where Kafka's ZooKeeper
controller sent UNKNOWN (0) for both and its brokers merged every one; a broker here merges
an INCREMENTAL one and replaces its picture with any other. LeaderAndIsr is always of type 0
(incremental), as brokers here treat any LeaderAndIsr as a list of partitions to become
leader or follower of.
"""

import datetime
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kio.static.protocol import RequestPayload

from minibroker.common.quota_manager import QuotaEntity
from minibroker.controller import acls as acl_transitions
from minibroker.controller import client_quotas as quota_transitions
from minibroker.controller import features as feature_transitions
from minibroker.controller import scram_credentials as scram_transitions
from minibroker.controller.state import (
    BrokerInfo,
    ControllerState,
    PartitionChange,
    PartitionState,
    TopicState,
)
from minibroker.protocol import codec
from minibroker.protocol.versions import ApiKey


@dataclass
class RequestBatch:
    """Who hears what after a decision: LeaderAndIsr changes and StopReplica partitions (by
    topic) per broker, and the brokers to send UpdateMetadata. ``even_if_fenced`` is a broker
    that is no longer live but still running (a controlled shutdown)."""

    leader_and_isr: dict[int, list[PartitionChange]] = field(default_factory=dict)
    stop_replica: dict[int, dict[str, list[int]]] = field(default_factory=dict)
    update_metadata: list[int] = field(default_factory=list)
    even_if_fenced: int | None = None


def plan(
    state: ControllerState,
    changes: list[PartitionChange],
    stopped: Sequence[TopicState] = (),
    also_tell: int | None = None,
) -> RequestBatch:
    """The requests for ``changes`` and the deleted topics ``stopped``: LeaderAndIsr to each
    live replica of a changed partition, StopReplica (with delete) to each live broker that
    held a replica of a deleted topic or one a reassignment removed, and UpdateMetadata (full
    or incremental: the service decides) to every live broker. ``also_tell`` hears of its
    partitions and gets the UpdateMetadata too, so that a broker in controlled shutdown stops
    acting as their leader."""
    batch = RequestBatch(even_if_fenced=also_tell)
    to_stop: dict[int, dict[str, list[int]]] = {}
    for topic in stopped:
        for index, partition in enumerate(topic.partitions):
            for replica in partition.replicas:
                to_stop.setdefault(replica, {}).setdefault(topic.name, []).append(index)
    for change in changes:
        for replica in change.removed:
            to_stop.setdefault(replica, {}).setdefault(change.topic, []).append(change.partition)
        for replica in change.state.replicas:
            if state.is_live(replica) or replica == also_tell:
                batch.leader_and_isr.setdefault(replica, []).append(change)
    batch.stop_replica = {
        node_id: to_stop[node_id] for node_id in sorted(to_stop) if state.is_live(node_id)
    }
    recipients = set(state.live_brokers())
    if also_tell is not None:
        recipients.add(also_tell)
    batch.update_metadata = sorted(recipients)
    return batch


def all_partitions(state: ControllerState) -> list[PartitionChange]:
    """Every partition as a change: what a new controller tells every broker."""
    return [
        PartitionChange(topic.name, index, partition)
        for topic in state.topics.values()
        for index, partition in enumerate(topic.partitions)
    ]


def _broker_epoch(state: ControllerState, node_id: int) -> int:
    broker = state.brokers.get(node_id)
    return broker.broker_epoch if broker else -1


def leader_and_isr(
    state: ControllerState, controller_id: int, node_id: int, changes: list[PartitionChange]
) -> RequestPayload:
    """LeaderAndIsr v7 for one broker: its changed partitions and their live leaders."""
    by_topic: dict[str, list[PartitionChange]] = {}
    for change in changes:
        by_topic.setdefault(change.topic, []).append(change)
    leaders = {change.state.leader for change in changes if change.state.leader >= 0}
    data = {
        "controller_id": controller_id,
        "is_k_raft_controller": False,
        "controller_epoch": state.controller_epoch,
        "broker_epoch": _broker_epoch(state, node_id),
        "type_": 0,
        "topic_states": [
            {
                "topic_name": name,
                "topic_id": state.topics[name].topic_id,
                "partition_states": [
                    {
                        "partition_index": change.partition,
                        "controller_epoch": state.controller_epoch,
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
            if name in state.topics
        ],
        "live_leaders": [
            {
                "broker_id": leader,
                "host_name": state.brokers[leader].host,
                "port": state.brokers[leader].port,
            }
            for leader in sorted(leaders)
            if leader in state.brokers
        ],
    }
    return codec.build(codec.request_class(ApiKey.LEADER_AND_ISR, 7), data)


def stop_replica(
    state: ControllerState, controller_id: int, node_id: int, partitions: dict[str, list[int]]
) -> RequestPayload:
    """StopReplica v4 with delete for these partitions (by topic) of one broker."""
    data = {
        "controller_id": controller_id,
        "is_k_raft_controller": False,
        "controller_epoch": state.controller_epoch,
        "broker_epoch": _broker_epoch(state, node_id),
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


# UpdateMetadata v8's Type (KIP-866).
UPDATE_METADATA_INCREMENTAL = 1
UPDATE_METADATA_FULL = 2
# Kafka's LeaderAndIsr.LeaderDuringDelete: in an incremental UpdateMetadata, a partition of a
# deleted topic, which the broker forgets.
LEADER_DURING_DELETE = -2


@dataclass
class MetadataDelta:
    """What an incremental UpdateMetadata carries: the changed partitions (their state as it is
    when the request is built) and the deleted topics (by name: the id and the partition count
    they had). Two deltas queued for one broker merge into one (the union)."""

    partitions: set[tuple[str, int]] = field(default_factory=set)
    deleted: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)

    @classmethod
    def of(
        cls, changes: Sequence[PartitionChange], stopped: Sequence[TopicState] = ()
    ) -> "MetadataDelta":
        return cls(
            {(change.topic, change.partition) for change in changes},
            {topic.name: (topic.topic_id, len(topic.partitions)) for topic in stopped},
        )

    def merged(self, other: "MetadataDelta") -> "MetadataDelta":
        return MetadataDelta(self.partitions | other.partitions, {**self.deleted, **other.deleted})


def _partition_state(
    state: ControllerState, live: set[int], index: int, partition: PartitionState
) -> dict[str, object]:
    return {
        "partition_index": index,
        "controller_epoch": state.controller_epoch,
        "leader": partition.leader,
        "leader_epoch": partition.leader_epoch,
        "isr": tuple(partition.isr),
        "zk_version": partition.partition_epoch,
        "replicas": tuple(partition.replicas),
        "offline_replicas": tuple(r for r in partition.replicas if r not in live),
        # KIP-966, as tagged fields (protocol/update_metadata_elr.py).
        "eligible_leader_replicas": tuple(partition.eligible_leader_replicas),
        "last_known_elr": tuple(partition.last_known_elr),
    }


def _delta_topic_states(
    state: ControllerState, live: set[int], delta: MetadataDelta
) -> list[dict[str, object]]:
    """The topic states of an incremental UpdateMetadata: each changed partition as it is now;
    a deleted topic's partitions with leader -2, or, when a topic of that name exists again,
    the new topic whole (its new id tells the broker to drop the old one)."""
    by_topic: dict[str, set[int]] = {}
    for name, index in delta.partitions:
        by_topic.setdefault(name, set()).add(index)
    topic_states = []
    for name, (topic_id, count) in delta.deleted.items():
        if name in state.topics:
            by_topic[name] = set(range(len(state.topics[name].partitions)))
            continue
        topic_states.append(
            {
                "topic_name": name,
                "topic_id": topic_id,
                "partition_states": [
                    {
                        "partition_index": index,
                        "controller_epoch": state.controller_epoch,
                        "leader": LEADER_DURING_DELETE,
                        "leader_epoch": 0,
                        "isr": (),
                        "zk_version": 0,
                        "replicas": (),
                        "offline_replicas": (),
                    }
                    for index in range(count)
                ],
            }
        )
    for name, indexes in by_topic.items():
        topic = state.topics.get(name)
        if topic is None:
            continue  # deleted since: its deletion is (or was) sent
        topic_states.append(
            {
                "topic_name": name,
                "topic_id": topic.topic_id,
                "partition_states": [
                    _partition_state(state, live, index, topic.partitions[index])
                    for index in sorted(indexes)
                    if index < len(topic.partitions)
                ],
            }
        )
    return topic_states


def update_metadata(
    state: ControllerState, controller_id: int, delta: MetadataDelta | None = None
) -> Callable[[int], RequestPayload]:
    """A builder of UpdateMetadata v8, stamped per broker with its epoch: the full picture
    (type FULL), or with ``delta`` only its partitions and deleted topics (INCREMENTAL). Both
    list every live broker."""
    live = state.live_brokers()
    live_set = set(live)
    if delta is None:
        topic_states = [
            {
                "topic_name": topic.name,
                "topic_id": topic.topic_id,
                "partition_states": [
                    _partition_state(state, live_set, index, partition)
                    for index, partition in enumerate(topic.partitions)
                ],
            }
            for topic in state.topics.values()
        ]
    else:
        topic_states = _delta_topic_states(state, live_set, delta)
    live_brokers = [
        {
            "id_": node_id,
            "endpoints": endpoints(state.brokers[node_id]),
            "rack": state.brokers[node_id].rack,
        }
        for node_id in live
    ]
    request_class = codec.request_class(ApiKey.UPDATE_METADATA, 8)

    def for_broker(node_id: int) -> RequestPayload:
        return codec.build(
            request_class,
            {
                "controller_id": controller_id,
                "is_k_raft_controller": False,
                "type_": UPDATE_METADATA_FULL if delta is None else UPDATE_METADATA_INCREMENTAL,
                "controller_epoch": state.controller_epoch,
                "broker_epoch": _broker_epoch(state, node_id),
                "topic_states": topic_states,
                "live_brokers": live_brokers,
            },
        )

    return for_broker


def endpoints(broker: BrokerInfo) -> list[dict[str, object]]:
    """A broker's listeners for UpdateMetadata, the inter-broker one first."""
    listeners = broker.listeners or {"PLAINTEXT": (broker.host, broker.port)}
    return [
        {"port": port, "host": host, "listener": name, "security_protocol": 0}
        for name, (host, port) in listeners.items()
    ]


# -- pushes: configs, ACLs and SCRAM credentials, on the same channels ---------------------


def configs_push(pushed: list[dict[str, object]]) -> RequestPayload:
    """An AlterConfigs v2 of complete config sets (``configs.pushed_configs``); brokers take
    a pushed AlterConfigs from the controller as a replacement of theirs."""
    return codec.build(
        codec.request_class(ApiKey.ALTER_CONFIGS, 2),
        {"resources": pushed, "validate_only": False},
    )


def acls_push(state: ControllerState) -> RequestPayload:
    """The whole ACL set as a CreateAcls v3, which brokers take as a replacement of theirs."""
    return codec.build(
        codec.request_class(ApiKey.CREATE_ACLS, 3),
        {"creations": acl_transitions.pushed_acls(state)},
    )


def scram_push(state: ControllerState, pairs: set[tuple[str, str]] | None) -> RequestPayload:
    """The credentials of ``pairs`` (all of them when None) as an AlterUserScramCredentials."""
    return codec.build(
        codec.request_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0),
        scram_transitions.push_request_data(state, pairs),
    )


def client_quotas_push(state: ControllerState, entities: set[QuotaEntity] | None) -> RequestPayload:
    """The quotas of ``entities`` (all of them, as a snapshot, when None) as an
    AlterClientQuotas (see controller/client_quotas.py)."""
    return codec.build(
        codec.request_class(ApiKey.ALTER_CLIENT_QUOTAS, 1),
        quota_transitions.push_request_data(state, entities),
    )


def features_push(state: ControllerState) -> RequestPayload:
    """The finalized features as an UpdateFeatures v1 from the controller: every finalized
    feature at its level, as a snapshot that replaces what the broker had, and the epoch in
    ``timeout`` (milliseconds), the one number a request of this API has room for."""
    return codec.build(
        codec.request_class(ApiKey.UPDATE_FEATURES, 1),
        {
            "timeout": datetime.timedelta(milliseconds=state.features_epoch),
            "feature_updates": [
                {
                    "feature": name,
                    "max_version_level": level,
                    "upgrade_type": feature_transitions.UPGRADE,
                }
                for name, level in sorted((state.finalized_features or {}).items())
            ],
            "validate_only": False,
        },
    )
