"""What the controller tells brokers, built from its state (Kafka:
``ControllerBrokerRequestBatch``).

A pure core: no trio, no sockets. The service decides (``state.py``), saves, then hands this
module the changed partitions; :func:`plan` says which broker hears what (LeaderAndIsr for the
replicas of a changed partition, StopReplica for replicas of deleted topics and replicas a
reassignment removed, UpdateMetadata for every live broker), and the builders make the
requests the :mod:`channel_manager` delivers. The config, ACL and SCRAM pushes are built here
too.

Where we depart from Kafka: UpdateMetadata always carries the whole cluster picture (Kafka's
sends only the changed partitions once a broker has the full picture), which lets a channel
keep only the newest one queued; LeaderAndIsr is always of type 0 (incremental), as brokers
here treat any LeaderAndIsr as a list of partitions to become leader or follower of.
"""

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kio.static.protocol import RequestPayload

from minibroker.common.quota_manager import QuotaEntity
from minibroker.controller import acls as acl_transitions
from minibroker.controller import client_quotas as quota_transitions
from minibroker.controller import features as feature_transitions
from minibroker.controller import scram_credentials as scram_transitions
from minibroker.controller.state import BrokerInfo, ControllerState, PartitionChange, TopicState
from minibroker.protocol import codec
from minibroker.protocol.versions import ApiKey


@dataclass
class RequestBatch:
    """Who hears what after a decision: LeaderAndIsr changes and StopReplica partitions (by
    topic) per broker, and the brokers to send the full UpdateMetadata. ``even_if_fenced`` is
    a broker that is no longer live but still running (a controlled shutdown)."""

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
    held a replica of a deleted topic or one a reassignment removed, and the full
    UpdateMetadata to every live broker. ``also_tell`` hears of its partitions and gets the
    UpdateMetadata too, so that a broker in controlled shutdown stops acting as their leader."""
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


def update_metadata(state: ControllerState, controller_id: int) -> Callable[[int], RequestPayload]:
    """A builder of the full-picture UpdateMetadata v8, stamped per broker with its epoch."""
    live = state.live_brokers()
    topic_states = [
        {
            "topic_name": topic.name,
            "topic_id": topic.topic_id,
            "partition_states": [
                {
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
                for index, partition in enumerate(topic.partitions)
            ],
        }
        for topic in state.topics.values()
    ]
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
                "type_": 0,
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
