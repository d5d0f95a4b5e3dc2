"""The broker's picture of the cluster, as the controller last told it (UpdateMetadata).

Metadata requests from clients are answered from here; so are the questions handlers ask
about topics this broker does not host (which broker leads it, which id a topic has). It is
replaced whole on every UpdateMetadata: the controller always sends the full picture.
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
        """Replace everything with the contents of an UpdateMetadata request."""
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
        topics = {}
        for topic_state in request.topic_states:
            partitions = {
                state.partition_index: PartitionMetadata(
                    leader=state.leader,
                    leader_epoch=state.leader_epoch,
                    replicas=tuple(state.replicas),
                    isr=tuple(state.isr),
                    offline_replicas=tuple(state.offline_replicas),
                    eligible_leader_replicas=tuple(getattr(state, "eligible_leader_replicas", ())),
                    last_known_elr=tuple(getattr(state, "last_known_elr", ())),
                )
                for state in topic_state.partition_states
            }
            topics[topic_state.topic_name] = TopicMetadata(
                topic_state.topic_name, topic_state.topic_id, partitions
            )
        self.controller_id = request.controller_id
        self.racks.update({node: endpoint.rack for node, endpoint in brokers.items()})
        self.brokers = brokers
        self.listeners = listeners
        self.topics = topics
        self._topics_by_id = {topic.topic_id: topic for topic in topics.values()}

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

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._topics_by_id.get(topic_id)
