"""The server-side task assignor of streams groups (KIP-1071): Kafka 4.4's StickyTaskAssignor.

A pure function: the group's members (each with its process, client tags, previous tasks and
reported task lags), the topology's tasks (subtopology id -> partition count, and which
subtopologies are stateful) and the group's assignment configs in; each member's active,
standby and warm-up tasks out. The streams group (streams_group.py) runs it when the group
epoch passes the assignment epoch. A task is (subtopology id, partition).

The rules taken from Kafka's StickyTaskAssignor (org.apache.kafka.coordinator.group.streams.
assignor):

- every active task is assigned to exactly one member; each member gets ``tasks // members``
  or one more (Kafka's computeTasksPerMember quota), so the active tasks are balanced within
  one task per member;
- sticky: a member keeps the active tasks it had (its previous target) as far as its quota
  allows; a task two members claim goes to the first (by member id), as Kafka keeps the first
  previous owner it meets;
- the tasks left go first to a member with room that had the task as a standby (warm state),
  the most caught up first (Kafka 4.4 ranks standby candidates by reported offsets), then to
  the least loaded process (tasks per member of the process, Kafka's ProcessState.load) and
  within it the least loaded member;
- standby replicas (``num.standby.replicas``) only for tasks of stateful subtopologies (those
  with state changelog topics), never on a process that already has the task (so never on the
  member with the active task, and never two copies of one task on one process); previous
  standby holders first, within the total-task quota (``ceil((actives + standbys) /
  members)``), then the least loaded member; a copy no process can take is left out (Kafka
  logs a warning and assigns fewer standbys).

Where this departs from Kafka, and why:

- warm-up tasks (``max.warmup.replicas`` and ``acceptable.recovery.lag``): Kafka 4.4's
  StickyTaskAssignor assigns none (the protocol carries them; the classic Streams
  HighAvailabilityTaskAssignor computes them). Here, as the HighAvailabilityTaskAssignor does:
  when a stateful active task would move from a still-present, caught-up member to one that is
  not caught up (its reported lag for the task above ``acceptable.recovery.lag``, or no lag
  reported), the task stays with the caught-up member and the new owner gets it as a warm-up,
  at most ``max.warmup.replicas`` warm-ups in the group; the move happens at a later
  assignment once the new owner reports itself caught up. While warm-ups are out, the active
  balance may exceed one task per member (as in Kafka Streams' classic assignor);
- rack-aware standbys (``rack.aware.assignment.tags``): a new standby goes to the candidate
  sharing the fewest client tags with the processes that already hold the task, then the least
  loaded (the ClientTagAwareStandbyTaskAssignor's aim, spreading copies over racks and zones,
  without its exact order);
- the order is deterministic (sorted member ids and task ids) where Kafka's follows hash maps.
"""

import math
from collections.abc import Mapping, Set
from dataclasses import dataclass, field

# (subtopology id, partition)
TaskId = tuple[str, int]


@dataclass(frozen=True)
class MemberSpec:
    """One member as the assignor sees it (Kafka's AssignmentMemberSpec)."""

    process_id: str
    client_tags: Mapping[str, str] = field(default_factory=dict)
    active: Set[TaskId] = frozenset()
    standby: Set[TaskId] = frozenset()
    warmup: Set[TaskId] = frozenset()
    # The member's lag per stateful task it has state for (changelog end offsets minus its
    # offsets, from the heartbeat's task offsets); a task it has no state for is not here.
    lags: Mapping[TaskId, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AssignmentConfigs:
    """The group's streams.* configs the assignor reads (Kafka's defaults)."""

    num_standby_replicas: int = 0
    max_warmup_replicas: int = 2
    acceptable_recovery_lag: int = 10000


@dataclass
class MemberAssignment:
    active: set[TaskId] = field(default_factory=set)
    standby: set[TaskId] = field(default_factory=set)
    warmup: set[TaskId] = field(default_factory=set)

    def tasks(self) -> set[TaskId]:
        return self.active | self.standby | self.warmup


def all_tasks(partition_counts: Mapping[str, int]) -> list[TaskId]:
    return sorted((sub, p) for sub, count in partition_counts.items() for p in range(count))


def assign(
    members: Mapping[str, MemberSpec],
    partition_counts: Mapping[str, int],
    stateful: Set[str],
    configs: AssignmentConfigs = AssignmentConfigs(),
) -> dict[str, MemberAssignment]:
    """``partition_counts``: subtopology id -> its number of tasks; ``stateful``: the
    subtopologies with state (standby and warm-up tasks are only for their tasks)."""
    ids = sorted(members)
    result = {member: MemberAssignment() for member in ids}
    if not ids:
        return result
    tasks = all_tasks(partition_counts)
    task_set = set(tasks)
    active_owner = _assign_active(members, ids, tasks, task_set)
    _warmups(members, active_owner, stateful, configs, result)
    for task, member in active_owner.items():
        result[member].active.add(task)
    standby_tasks = [task for task in tasks if task[0] in stateful]
    _assign_standby(members, ids, standby_tasks, configs.num_standby_replicas, result)
    return result


def _caught_up(spec: MemberSpec, task: TaskId, acceptable_lag: int) -> bool:
    if task in spec.active:
        return True
    lag = spec.lags.get(task)
    return lag is not None and lag <= acceptable_lag


def _assign_active(
    members: Mapping[str, MemberSpec], ids: list[str], tasks: list[TaskId], task_set: set[TaskId]
) -> dict[TaskId, str]:
    n = len(ids)
    base, extra = divmod(len(tasks), n)
    owner: dict[TaskId, str] = {}
    kept: dict[str, list[TaskId]] = {member: [] for member in ids}
    # 1. Stickiness: previous active tasks, up to base + 1 each (the first claimant wins).
    for member in ids:
        for task in sorted(members[member].active):
            if task in task_set and task not in owner and len(kept[member]) < base + 1:
                owner[task] = member
                kept[member].append(task)
    # Only `extra` members may hold base + 1: the rest give their last task back.
    plus_one = [member for member in ids if len(kept[member]) == base + 1]
    for member in plus_one[extra:]:
        del owner[kept[member].pop()]
    counts = {member: len(kept[member]) for member in ids}
    slots = extra - min(len(plus_one), extra)

    def has_room(member: str) -> bool:
        return counts[member] < base or (counts[member] == base and slots > 0)

    process_members: dict[str, list[str]] = {}
    for member in ids:
        process_members.setdefault(members[member].process_id, []).append(member)

    def process_load(member: str) -> float:
        group = process_members[members[member].process_id]
        return sum(counts[m] for m in group) / len(group)

    def give(task: TaskId, chosen: str) -> None:
        nonlocal slots
        if counts[chosen] == base:
            slots -= 1
        owner[task] = chosen
        counts[chosen] += 1

    # 2. Kafka's second step: a task goes to a member with room that held it as a standby or
    # warm-up (the least lag), before any other task is placed, so that a stateless task
    # cannot take the room of the member that has the state.
    for task in tasks:
        if task in owner:
            continue
        warm = [
            m
            for m in ids
            if has_room(m) and (task in members[m].standby or task in members[m].warmup)
        ]
        if warm:
            give(task, min(warm, key=lambda m: (members[m].lags.get(task, 0), counts[m], m)))
    # 3. The rest: a member with room that reported a lag for the task (the least), else the
    # least loaded process and member.
    for task in tasks:
        if task in owner:
            continue
        roomy = [member for member in ids if has_room(member)]
        warm = [m for m in roomy if task in members[m].lags]
        if warm:
            give(task, min(warm, key=lambda m: (members[m].lags.get(task, 0), counts[m], m)))
        else:
            give(task, min(roomy, key=lambda m: (counts[m], process_load(m), m)))
    return owner


def _warmups(
    members: Mapping[str, MemberSpec],
    owner: dict[TaskId, str],
    stateful: Set[str],
    configs: AssignmentConfigs,
    result: dict[str, MemberAssignment],
) -> None:
    budget = configs.max_warmup_replicas
    previous = {task: m for m in sorted(members) for task in members[m].active}
    for task in sorted(owner):
        if budget <= 0:
            return
        if task[0] not in stateful:
            continue
        new, old = owner[task], previous.get(task)
        if old is None or old == new:
            continue
        if _caught_up(members[new], task, configs.acceptable_recovery_lag):
            continue
        owner[task] = old
        result[new].warmup.add(task)
        budget -= 1


def _assign_standby(
    members: Mapping[str, MemberSpec],
    ids: list[str],
    tasks: list[TaskId],
    replicas: int,
    result: dict[str, MemberAssignment],
) -> None:
    if replicas <= 0 or not tasks:
        return
    total = sum(len(a.active) for a in result.values()) + len(tasks) * replicas
    quota = math.ceil(total / len(ids))
    load = {member: len(result[member].tasks()) for member in ids}
    holders: dict[TaskId, set[str]] = {}  # task -> processes with a copy
    for member in ids:
        for task in result[member].tasks():
            holders.setdefault(task, set()).add(members[member].process_id)
    tags_by_process = {members[m].process_id: members[m].client_tags for m in ids}

    def shared_tags(member: str, task: TaskId) -> int:
        tags = members[member].client_tags
        return sum(
            1
            for process in holders.get(task, ())
            for key, value in tags_by_process[process].items()
            if tags.get(key) == value
        )

    for _ in range(replicas):
        for task in tasks:
            have = holders.setdefault(task, set())
            eligible = [m for m in ids if members[m].process_id not in have]
            if not eligible:
                continue
            previous = [m for m in eligible if task in members[m].standby and load[m] < quota]
            if previous:
                chosen = min(previous, key=lambda m: (members[m].lags.get(task, 0), load[m], m))
            else:
                chosen = min(eligible, key=lambda m: (shared_tags(m, task), load[m], m))
            result[chosen].standby.add(task)
            load[chosen] += 1
            have.add(members[chosen].process_id)
