"""The server-side assignors of the consumer group protocol (KIP-848): `uniform` and `range`.

Pure functions: the members' subscriptions and the subscribed topics' partition counts in,
each member's target partitions out. The consumer group (consumer_group.py) runs the one the
members ask for (ConsumerGroupHeartbeat's ServerAssignor) or the first of
`group.consumer.assignors` (`uniform`).

- ``uniform`` (Kafka's UniformAssignor): every partition of every subscribed topic is
  assigned, as evenly as the subscriptions allow, and a partition stays with its current
  owner whenever the balance permits (sticky). Kafka runs two builders (homogeneous and
  heterogeneous subscriptions); here one greedy procedure serves both: keep what each member
  owns and may still have, give each unassigned partition to the eligible member with the
  fewest partitions, then move partitions from the most to the least loaded eligible member
  until no move narrows the gap. Departure: with heterogeneous subscriptions the result can
  differ from Kafka's (both are balanced within what the subscriptions permit).
- ``range`` (Kafka's RangeAssignor): per topic, the members subscribed to it, sorted by
  member id, each get a contiguous range; the first ``partitions % members`` get one more.
  Departure: Kafka's server-side range assignor is also sticky across epochs; this one
  recomputes the ranges.

Racks: neither reads them, as neither does Kafka 4.4's (javap of UniformAssignor, its two
builders and RangeAssignor finds no call of SubscribedTopicDescriber.racksForPartition nor of
MemberSubscription.rackId; Kafka 3.x's rack-aware uniform builder was removed in 4.0). A change
of a subscribed partition's replica racks still bumps the group epoch (consumer_group.py).
"""

import uuid
from collections.abc import Mapping

# member id -> topic id -> partitions
Assignment = dict[str, dict[uuid.UUID, set[int]]]

UNIFORM = "uniform"
RANGE = "range"
ASSIGNORS = (UNIFORM, RANGE)


def uniform(
    subscriptions: Mapping[str, set[uuid.UUID]],
    partition_counts: Mapping[uuid.UUID, int],
    current: Mapping[str, Mapping[uuid.UUID, set[int]]],
) -> Assignment:
    """``subscriptions``: member id -> the topic ids it subscribes to (only existing topics);
    ``partition_counts``: topic id -> partitions; ``current``: the previous target."""
    members = sorted(subscriptions)
    result: Assignment = {member: {} for member in members}
    if not members:
        return result
    counts = dict.fromkeys(members, 0)
    owner: dict[tuple[uuid.UUID, int], str] = {}
    eligible: dict[uuid.UUID, list[str]] = {
        topic: [m for m in members if topic in subscriptions[m]] for topic in partition_counts
    }
    # 1. Stickiness: keep what a member owns and may still have.
    for member in members:
        for topic, partitions in current.get(member, {}).items():
            if topic not in subscriptions[member] or topic not in partition_counts:
                continue
            for partition in partitions:
                if partition < partition_counts[topic] and (topic, partition) not in owner:
                    owner[(topic, partition)] = member
                    counts[member] += 1
    # 2. Unassigned partitions to the least loaded eligible member.
    for topic in sorted(partition_counts, key=str):
        candidates = eligible[topic]
        if not candidates:
            continue
        for partition in range(partition_counts[topic]):
            if (topic, partition) in owner:
                continue
            chosen = min(candidates, key=lambda m: (counts[m], m))
            owner[(topic, partition)] = chosen
            counts[chosen] += 1
    # 3. Balance: move a partition from a member to a less loaded eligible one while the gap
    # is more than one.
    moved = True
    while moved:
        moved = False
        for key in sorted(owner, key=lambda k: (str(k[0]), k[1])):
            holder = owner[key]
            target = min(eligible[key[0]], key=lambda m: (counts[m], m))
            if counts[holder] - counts[target] > 1:
                owner[key] = target
                counts[holder] -= 1
                counts[target] += 1
                moved = True
    for (topic, partition), member in owner.items():
        result[member].setdefault(topic, set()).add(partition)
    return result


def range_(
    subscriptions: Mapping[str, set[uuid.UUID]],
    partition_counts: Mapping[uuid.UUID, int],
    current: Mapping[str, Mapping[uuid.UUID, set[int]]],
) -> Assignment:
    """Contiguous ranges per topic among the members subscribed to it, by member id."""
    result: Assignment = {member: {} for member in subscriptions}
    for topic, count in partition_counts.items():
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        share, extra = divmod(count, len(members))
        start = 0
        for index, member in enumerate(members):
            size = share + (1 if index < extra else 0)
            if size:
                result[member][topic] = set(range(start, start + size))
            start += size
    return result


def assign(
    name: str,
    subscriptions: Mapping[str, set[uuid.UUID]],
    partition_counts: Mapping[uuid.UUID, int],
    current: Mapping[str, Mapping[uuid.UUID, set[int]]],
) -> Assignment:
    if name == RANGE:
        return range_(subscriptions, partition_counts, current)
    return uniform(subscriptions, partition_counts, current)


SIMPLE = "simple"


def simple(
    subscriptions: Mapping[str, set[uuid.UUID]],
    partition_counts: Mapping[uuid.UUID, int],
) -> Assignment:
    """The share groups' ``simple`` assignor (KIP-932, Kafka's SimpleAssignor): every
    partition of a subscribed topic goes to at least one of its subscribers, and a partition
    may go to several members (share groups share partitions). Per topic, with S subscribers
    (sorted by member id) and P partitions: if S <= P each partition goes to one subscriber,
    round robin; if S > P each subscriber gets one partition, round robin, so each partition
    has S/P members, give or take one. A rotation carried from topic to topic spreads small
    topics over different members. Departure: Kafka's builders also keep a member's current
    partitions when the balance allows (sticky); this one recomputes them, which costs a
    share group nothing but in-flight records released by the member that loses a partition.
    """
    result: Assignment = {member: {} for member in subscriptions}
    rotation = 0
    for topic in sorted(partition_counts, key=lambda t: t.bytes):
        count = partition_counts[topic]
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members or count <= 0:
            continue
        if len(members) <= count:
            for partition in range(count):
                member = members[(partition + rotation) % len(members)]
                result[member].setdefault(topic, set()).add(partition)
        else:
            for index in range(len(members)):
                member = members[(index + rotation) % len(members)]
                result[member].setdefault(topic, set()).add(index % count)
        rotation += count
    return result
