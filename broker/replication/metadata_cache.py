"""The broker's picture of the cluster, as the controller last told it (UpdateMetadata).

Metadata requests from clients are answered from here; so are the questions handlers ask
about topics this broker does not host (which broker leads it, which id a topic has). An
UpdateMetadata of type INCREMENTAL (1) is merged in, as Kafka's ZkMetadataCache merges every
UpdateMetadata: its partitions replace those the cache has, a partition with leader -2
(LeaderDuringDelete) is forgotten, and a topic whose id changed is replaced whole; any other
(FULL, 2, or UNKNOWN, 0) replaces the whole picture. The live brokers are replaced by every
one. See controller/broker_requests.py for when the controller sends which.
"""

import uuid
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class PartitionMetadata:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    # KIP-966: the controller's eligible leader replicas and last-known ELR (empty while
    # ``eligible.leader.replicas.version`` is 0), for DescribeTopicPartitions.
    eligible_leader_replicas: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)


# UpdateMetadata v8's Type (KIP-866) for a request that carries only what changed.
UPDATE_METADATA_INCREMENTAL = 1
# Kafka's LeaderAndIsr.LeaderDuringDelete: a partition of a deleted topic.
LEADER_DURING_DELETE = -2


def _partition(state) -> PartitionMetadata:
    """An UpdateMetadata partition state as the cache keeps it."""
    return PartitionMetadata(
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        replicas=tuple(state.replicas),
        isr=tuple(state.isr),
        offline_replicas=tuple(state.offline_replicas),
        eligible_leader_replicas=tuple(getattr(state, "eligible_leader_replicas", ())),
        last_known_elr=tuple(getattr(state, "last_known_elr", ())),
    )


class MetadataCache:
    """Live brokers and topics from the latest UpdateMetadata."""

    def __init__(self) -> None:
        # Inter-broker endpoints (the first each broker registered), for fetchers.
        self.brokers: dict[int, BrokerEndpoint] = {}
        # Every listener of every broker, for answering clients on the listener they used.
        self.listeners: dict[int, dict[str, BrokerEndpoint]] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self._topics_by_id: dict[uuid.UUID, TopicMetadata] = {}
        # Every broker's rack as it last registered, dead brokers included (Kafka's cluster
        # image keeps a fenced broker's registration, rack and all): partition racks do not
        # change when a broker merely stops.
        self.racks: dict[int, str | None] = {}
        # The node the last UpdateMetadata came from (its controller_id), -1 before any: in
        # ZooKeeper mode the elected controller, which Metadata names to clients.
        self.controller_id = -1

    def update(self, request) -> None:
        """Take an UpdateMetadata request in: merged when INCREMENTAL, else replacing every
        topic (see the module)."""
        brokers = {}
        listeners = {}
        for broker in request.live_brokers:
            endpoint = broker.endpoints[0]
            rack = broker.rack
            brokers[broker.id_] = BrokerEndpoint(broker.id_, endpoint.host, endpoint.port, rack)
            listeners[broker.id_] = {
                item.listener: BrokerEndpoint(broker.id_, item.host, item.port, rack)
                for item in broker.endpoints
            }
        incremental = getattr(request, "type_", 0) == UPDATE_METADATA_INCREMENTAL
        if incremental:
            topics = self._merged(request.topic_states)
        else:
            topics = {
                topic_state.topic_name: TopicMetadata(
                    topic_state.topic_name,
                    topic_state.topic_id,
                    {
                        state.partition_index: _partition(state)
                        for state in topic_state.partition_states
                        if state.leader != LEADER_DURING_DELETE
                    },
                )
                for topic_state in request.topic_states
            }
        self.controller_id = request.controller_id
        self.racks.update({node: endpoint.rack for node, endpoint in brokers.items()})
        self.brokers = brokers
        self.listeners = listeners
        self.topics = topics
        if not incremental:
            self._topics_by_id = {topic.topic_id: topic for topic in topics.values()}

    def _merged(self, topic_states) -> dict[str, TopicMetadata]:
        """The topics with an incremental UpdateMetadata's topic states merged in; keeps
        ``_topics_by_id`` in step. Costs in proportion to the topics it names (and the
        partitions of those), not to every topic known."""
        topics = dict(self.topics)
        for topic_state in topic_states:
            name = topic_state.topic_name
            known = topics.get(name)
            if known is not None and known.topic_id == topic_state.topic_id:
                partitions = dict(known.partitions)
            else:
                partitions = {}  # new, or deleted and made again: the old one goes whole
            for state in topic_state.partition_states:
                if state.leader == LEADER_DURING_DELETE:
                    partitions.pop(state.partition_index, None)
                else:
                    partitions[state.partition_index] = _partition(state)
            if known is not None:
                self._topics_by_id.pop(known.topic_id, None)
                del topics[name]
            if partitions:
                topics[name] = TopicMetadata(name, topic_state.topic_id, partitions)
                self._topics_by_id[topic_state.topic_id] = topics[name]
        return topics

    def remember_broker(self, endpoint: BrokerEndpoint) -> None:
        """Learn a leader's address from LeaderAndIsr before the next UpdateMetadata arrives."""
        self.brokers.setdefault(endpoint.node_id, endpoint)

    def endpoints_for(self, listener_name: str) -> list[BrokerEndpoint]:
        """Live brokers as a client on ``listener_name`` must see them; brokers without that
        listener are left out, as Kafka does."""
        return [
            by_name[listener_name]
            for _, by_name in sorted(self.listeners.items())
            if listener_name in by_name
        ]

    def partition_racks(self, topic: TopicMetadata) -> tuple[tuple[str, ...], ...]:
        """Each partition's replica racks, by partition index: the rack of every replica's
        broker that has one, sorted (Kafka's KRaftCoordinatorMetadataImage.partitionRacks, as
        Utils.computeTopicHash sorts them); () for a cluster without racks."""
        if not any(self.racks.values()):
            return ()
        racks = []
        for index in sorted(topic.partitions):
            found = (self.racks.get(node) for node in topic.partitions[index].replicas)
            racks.append(tuple(sorted(rack for rack in found if rack is not None)))
        return tuple(racks)

    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def topic_ids(self) -> set[uuid.UUID]:
        """The ids of the topics known with partitions (a topic being deleted has none)."""
        return {topic_id for topic_id, topic in self._topics_by_id.items() if topic.partitions}

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._topics_by_id.get(topic_id)
