"""Follower fetching (KIP-392): which replica a consumer should read a partition from.

A pure core, tested without sockets (tests/unit/test_replica_selector.py). The leader, for a
consumer's fetch (replica id -1, Fetch v11+, which carries the consumer's ``client.rack`` as
``rack_id``) on a broker with ``replica.selector.class`` set, asks
``find_preferred_read_replica``; when the answer is another replica, the fetch response names
it (``preferred_read_replica``) instead of carrying records, and the client fetches from that
replica until an error, a leader change or its lease (librdkafka: 5 minutes) sends it back to
the leader.

Kafka's rules, from ReplicaManager.findPreferredReadReplica and the clients'
RackAwareReplicaSelector (Apache Kafka 4.x):

- only the leader chooses, and only for consumers (a follower's fetch never gets a preferred
  replica);
- the candidates are the leader and every follower in the ISR whose log covers the fetch
  offset (log start <= fetch offset <= log end, as the leader last saw them in that follower's
  fetches): an out-of-sync follower may lag for ever, and a consumer sent to it would lag too;
- a replica's rack is its broker's endpoint on the client's listener, from the metadata of
  live (unfenced) brokers; a replica without one (its broker is fenced or stopped, or lacks the
  listener) has no rack and is never chosen;
- RackAwareReplicaSelector: a client without a rack reads from the leader; otherwise among the
  candidates in the client's rack the leader if it is one of them, else the most caught-up
  (largest log end offset, then the shortest time since it last caught up, then the largest
  broker id, ReplicaView.comparator); no candidate in the client's rack: the leader;
- the leader is never named as the preferred read replica: choosing it means "read here".

Departure: Kafka loads any class implementing ReplicaSelector; minibroker has the one
selector Kafka ships (by its class name; ``RackAwareReplicaSelector`` alone is accepted too)
and refuses any other name at start (common/config.py), rather than when the first fetch
arrives.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from minibroker.common.config_model import RACK_AWARE_REPLICA_SELECTOR


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """Kafka's ReplicaView: one candidate replica as the leader sees it. ``rack`` is None
    for a broker without a rack; ``has_endpoint`` is False for a replica whose broker the
    client cannot reach (Kafka's Node.noNode())."""

    node_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int
    has_endpoint: bool = True


@dataclass(frozen=True, slots=True)
class FollowerState:
    """What the leader knows of one follower replica (Kafka's ReplicaState snapshot)."""

    node_id: int
    in_sync: bool
    log_start_offset: int
    log_end_offset: int
    last_caught_up_ms: int


class ReplicaSelector(Protocol):
    """Kafka's org.apache.kafka.common.replica.ReplicaSelector: choose among ``replicas``
    (the leader included) for a client in ``client_rack``; None: no preference."""

    def select(
        self, client_rack: str | None, replicas: Sequence[ReplicaView], leader: ReplicaView
    ) -> ReplicaView | None: ...


def _most_caught_up(replica: ReplicaView) -> tuple[int, int, int]:
    """Kafka's ReplicaView.comparator as a max() key: log end offset, then the shorter time
    since the replica last caught up, then the larger broker id."""
    return (replica.log_end_offset, -replica.time_since_last_caught_up_ms, replica.node_id)


class RackAwareReplicaSelector:
    """Kafka's RackAwareReplicaSelector: a replica in the client's rack, the leader when it is
    in that rack or when none is; the leader for a client without a rack."""

    def select(
        self, client_rack: str | None, replicas: Sequence[ReplicaView], leader: ReplicaView
    ) -> ReplicaView | None:
        if not client_rack:
            return leader
        same_rack = [replica for replica in replicas if replica.rack == client_rack]
        if not same_rack:
            return leader
        if any(replica.node_id == leader.node_id for replica in same_rack):
            return leader
        return max(same_rack, key=_most_caught_up)


# The selectors by class name: common/config.py checks replica.selector.class at start and
# gives the full name of one of these.
_SELECTORS: Mapping[str, type[RackAwareReplicaSelector]] = {
    RACK_AWARE_REPLICA_SELECTOR: RackAwareReplicaSelector,
}


def replica_selector_for(class_name: str | None) -> ReplicaSelector | None:
    """The selector ``replica.selector.class`` names (Kafka's createReplicaSelector); None
    when it is unset: consumers read from the leader only."""
    if not class_name:
        return None
    return _SELECTORS[class_name]()


def find_preferred_read_replica(
    selector: ReplicaSelector,
    *,
    client_rack: str | None,
    fetch_offset: int,
    now_ms: int,
    leader_id: int,
    leader_log_end_offset: int,
    followers: Iterable[FollowerState],
    racks: Mapping[int, str | None],
) -> int | None:
    """Kafka's ReplicaManager.findPreferredReadReplica on the leader: the broker the client
    should fetch from instead, or None when the leader serves it.

    ``racks`` maps each replica whose broker has an endpoint on the client's listener (a live
    broker) to its rack; ``now_ms`` and the followers' ``last_caught_up_ms`` are on the same
    clock. A follower is a candidate when it is in the ISR and its log covers the fetch
    offset; an unknown log start (-1, no fetch seen yet) does not exclude it, as in Kafka.
    """
    candidates = [
        ReplicaView(
            follower.node_id,
            racks.get(follower.node_id),
            follower.log_end_offset,
            now_ms - follower.last_caught_up_ms,
            follower.node_id in racks,
        )
        for follower in followers
        if follower.in_sync
        and follower.log_end_offset >= fetch_offset
        and follower.log_start_offset <= fetch_offset
    ]
    leader = ReplicaView(
        leader_id, racks.get(leader_id), leader_log_end_offset, 0, leader_id in racks
    )
    candidates.append(leader)
    selected = selector.select(client_rack, candidates, leader)
    if selected is None or not selected.has_endpoint or selected.node_id == leader_id:
        return None
    return selected.node_id
