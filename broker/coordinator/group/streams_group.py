"""One streams group (KIP-1071): StreamsGroupHeartbeat's rules, as Kafka 4.4 runs them.

Pure state with time passed in (milliseconds), like the consumer group (consumer_group.py),
tested without sockets or sleeping (tests/unit/test_streams_group.py). The group coordinator
service holds it (streams_entry.py) and serves StreamsGroupHeartbeat (88) and
StreamsGroupDescribe (89) through apis/streams_groups.py; `restore_records` rebuilds a group
from its records when the coordinator loads a `__consumer_offsets` partition.

The rules are Kafka's GroupMetadataManager.streamsGroupHeartbeat, StreamsGroup,
StreamsGroupMember, streams.CurrentAssignmentBuilder and streams.topics.InternalTopicManager:

- the group keeps one topology (its epoch and subtopologies: source topics, repartition sink
  and source topics, state changelog topics, copartition groups), set by the first member and
  replaced by a member that joins with a greater topology epoch (the group epoch is bumped);
  a member that joins with a smaller one is admitted, and every heartbeat of a member whose
  topology epoch is below the group's is answered STALE_TOPOLOGY (Kafka 4.4 never answers
  STREAMS_TOPOLOGY_FENCED, though the code exists); one with
  the same epoch and a different topology is STREAMS_INVALID_TOPOLOGY_EPOCH; a topology that
  breaks Kafka's rules (a repartition or changelog topic that is also a source topic, a
  copartition group pointing at no topic, two subtopologies with one id) is
  STREAMS_INVALID_TOPOLOGY (Kafka's StreamsTopology / TopologyValidator);
- the topology is configured against the cluster's topics (given as input): missing source
  topics are MISSING_SOURCE_TOPICS; source topics of one copartition group with different
  partition counts are INCORRECTLY_PARTITIONED_TOPICS; a repartition source topic without a
  partition count takes the largest of the subtopologies that write to it (RepartitionTopics)
  or of its copartition group (CopartitionedTopicsEnforcer); a changelog topic has one
  partition per task of its subtopology (ChangelogTopics); internal topics that do not exist
  are MISSING_INTERNAL_TOPICS and listed, with their partition counts, in
  `HeartbeatResult.topics_to_create` for the service to create; one that exists with another
  partition count is INCORRECTLY_PARTITIONED_TOPICS. Until the topology is configured, every
  member's target is empty;
- the group epoch is bumped when a member joins, leaves or is fenced, changes its process,
  rack or client tags, when the topology changes, or when the configured partition counts
  change; the target assignment (streams_assignor.py) is recomputed when the group epoch
  passes the assignment epoch;
- each member converges to its target one heartbeat at a time (CurrentAssignmentBuilder):
  tasks it must give up are revoked first (UNREVOKED_TASKS, at its current epoch), an active
  task is handed to it only once no other member still owns it (UNRELEASED_TASKS), and a
  standby or warm-up task only once no other member of its process owns it;
- a heartbeat with an epoch the coordinator does not expect is FENCED_MEMBER_EPOCH, except the
  previous epoch with owned tasks within the assignment (a lost response); an unknown member
  with an epoch above 0 is UNKNOWN_MEMBER_ID; a new member of a full group is
  GROUP_MAX_SIZE_REACHED;
- epoch -1 leaves; a static member (instance id) leaving with -2 keeps its tasks until its
  session expires or a new member with the same instance id joins and takes them over; a new
  member with the instance id of a member still in the group is UNRELEASED_INSTANCE_ID;
- a member that does not heartbeat within the session timeout is fenced, as is one that does
  not revoke within its rebalance timeout;
- a member that asks for the application's shutdown makes every member's answer carry
  SHUTDOWN_APPLICATION until the group is empty.

The initial rebalance delay (group.streams.initial.rebalance.delay.ms, Kafka's streams initial
rebalance timer): when the epoch of a group that was empty rises, its target assignment waits
until the deadline; heartbeats meanwhile carry ASSIGNMENT_DELAYED and, to a member still at
epoch 0, no task lists (Kafka's answer for an unchanged member, which keeps Kafka Streams
joining); `expire` computes the assignment once the deadline has passed.

Departures: a member that joins with epoch 0 under a member id the group still has rejoins
from scratch (as in consumer_group.py); the configured topology is recomputed at every
heartbeat (Kafka caches it under a metadata hash of the topics); the records are values in
Kafka's layouts (StreamsGroupMetadata, StreamsGroupTopology, StreamsGroupMemberMetadata,
StreamsGroupTargetAssignmentMetadata/Member, StreamsGroupCurrentMemberAssignment; their bytes
in streams_log_format.py), returned to the caller, which writes them to `__consumer_offsets`;
after a load the first heartbeat recomputes the configured topology and bumps the group epoch
once (Kafka keeps the metadata hash in the group's record and does not); source topic
regular expressions (SourceTopicRegex) are refused as an invalid topology for now; task
offsets are kept as the member last sent each list (Kafka's MemberTaskOffsets.update, shown by
StreamsGroupDescribe) and taken as lags for the assignor (end offset sum minus offset sum per
task), which is what the assignor's caught-up rule needs.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum

from minibroker.coordinator.group import streams_assignor
from minibroker.coordinator.group.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    HeartbeatError,
)
from minibroker.coordinator.group.streams_assignor import (
    AssignmentConfigs,
    MemberAssignment,
    MemberSpec,
    TaskId,
)
from minibroker.coordinator.group.streams_log_format import (
    CurrentAssignmentValue,
    FrozenTasks,
    GroupMetadataValue,
    MemberMetadataValue,
    Record,
    RecordKey,
    RecordKind,
    Subtopology,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    TopicInfo,
    Topology,
    TopologyValue,
    freeze,
)
from minibroker.protocol.errors import Error

# subtopology id -> partitions
Tasks = dict[str, set[int]]
# A topic name -> its partition count, or None if the topic does not exist.
TopicPartitions = Callable[[str], int | None]


class Status(IntEnum):
    """StreamsGroupHeartbeatResponse's status codes."""

    STALE_TOPOLOGY = 0
    MISSING_SOURCE_TOPICS = 1
    INCORRECTLY_PARTITIONED_TOPICS = 2
    MISSING_INTERNAL_TOPICS = 3
    SHUTDOWN_APPLICATION = 4
    ASSIGNMENT_DELAYED = 5
    MISSING_CLIENT_TAGS = 6


class MemberState(Enum):
    """Kafka's streams MemberState, with its byte in the current assignment record."""

    STABLE = 0
    UNREVOKED_TASKS = 1
    UNRELEASED_TASKS = 2
    UNKNOWN = 127


class StreamsGroupState(Enum):
    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def validate_topology(topology: Topology) -> None:
    """STREAMS_INVALID_TOPOLOGY for what Kafka refuses before looking at the cluster."""

    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(Error.STREAMS_INVALID_TOPOLOGY, message)

    ids = [s.subtopology_id for s in topology.subtopologies]
    if len(set(ids)) != len(ids):
        raise invalid("Subtopology IDs must be unique.")
    sources = {t for s in topology.subtopologies for t in s.source_topics}
    repartition = {t.name for s in topology.subtopologies for t in s.repartition_source_topics}
    changelogs = {t.name for s in topology.subtopologies for t in s.state_changelog_topics}
    sinks = {t for s in topology.subtopologies for t in s.repartition_sink_topics}
    for name in sorted(sources & repartition):
        raise invalid(f"Repartition topic {name} is also a source topic.")
    for name in sorted(changelogs & (sources | repartition)):
        raise invalid(f"Changelog topic {name} is also a source or repartition topic.")
    for name in sorted(sinks - repartition - sources):
        raise invalid(f"Repartition sink topic {name} is not a repartition source topic.")
    for s in topology.subtopologies:
        if s.source_topic_regex:
            raise invalid("SourceTopicRegex is not supported yet by this broker.")
        if not s.source_topics and not s.repartition_source_topics:
            raise invalid(f"Subtopology {s.subtopology_id} has no source topics.")
        for group in s.copartition_groups:
            if any(i < 0 or i >= len(s.source_topics) for i in group.source_topics) or any(
                i < 0 or i >= len(s.repartition_source_topics)
                for i in group.repartition_source_topics
            ):
                raise invalid(
                    f"Copartition group of subtopology {s.subtopology_id} refers to a topic "
                    "that does not exist."
                )
            if group.source_topic_regex:
                raise invalid("SourceTopicRegex is not supported yet by this broker.")


@dataclass
class ConfiguredTopology:
    """Kafka's ConfiguredTopology: the tasks per subtopology once the topics check out."""

    partition_counts: dict[str, int] = field(default_factory=dict)
    stateful: set[str] = field(default_factory=set)
    statuses: list[tuple[Status, str]] = field(default_factory=list)
    # Internal topics to create: name -> its TopicInfo with the partition count to use.
    topics_to_create: dict[str, TopicInfo] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return not self.statuses


def configure(topology: Topology, topics: TopicPartitions) -> ConfiguredTopology:
    """Kafka's InternalTopicManager.configureTopics."""
    result = ConfiguredTopology()
    subs = topology.subtopologies
    missing = sorted({t for s in subs for t in s.source_topics if topics(t) is None})
    if missing:
        result.statuses.append(
            (Status.MISSING_SOURCE_TOPICS, f"Source topics {', '.join(missing)} are missing.")
        )
        return result
    # Repartition source topics: given, or derived from the writers (RepartitionTopics).
    repartition: dict[str, int] = {}
    for s in subs:
        for info in s.repartition_source_topics:
            if info.partitions > 0:
                repartition[info.name] = info.partitions

    def sub_partitions(s: Subtopology) -> int | None:
        counts = [topics(t) or 0 for t in s.source_topics]
        for info in s.repartition_source_topics:
            if info.name not in repartition:
                return None
            counts.append(repartition[info.name])
        return max(counts, default=0)

    explicit = set(repartition)
    progress = True
    while progress:
        progress = False
        for s in subs:
            count = sub_partitions(s)
            if count is None:
                continue
            for sink in s.repartition_sink_topics:
                if sink not in explicit and repartition.get(sink, 0) < count:
                    repartition[sink] = count
                    progress = True
    # Copartition groups (CopartitionedTopicsEnforcer).
    wrong: set[str] = set()
    for s in subs:
        for group in s.copartition_groups:
            names = [s.source_topics[i] for i in group.source_topics]
            source_counts = {topics(t) or 0 for t in names}
            if len(source_counts) > 1:
                wrong.update(names)
                continue
            infos = [s.repartition_source_topics[i] for i in group.repartition_source_topics]
            target = max(source_counts | {repartition.get(i.name, 0) for i in infos}, default=0)
            for info in infos:
                if info.partitions > 0 and info.partitions != target:
                    wrong.add(info.name)
                else:
                    repartition[info.name] = target
    if wrong:
        result.statuses.append(
            (
                Status.INCORRECTLY_PARTITIONED_TOPICS,
                f"Following topics do not have the same number of partitions: {sorted(wrong)}",
            )
        )
        return result
    internal: dict[str, TopicInfo] = {}
    for s in subs:
        count = sub_partitions(s)
        if not count:
            result.statuses.append(
                (
                    Status.MISSING_SOURCE_TOPICS,
                    f"The number of partitions of subtopology {s.subtopology_id} "
                    "could not be determined.",
                )
            )
            return result
        result.partition_counts[s.subtopology_id] = count
        if s.state_changelog_topics:
            result.stateful.add(s.subtopology_id)
        for info in s.repartition_source_topics:
            internal[info.name] = TopicInfo(
                info.name, repartition[info.name], info.replication_factor, info.configs
            )
        for info in s.state_changelog_topics:
            internal[info.name] = TopicInfo(info.name, count, info.replication_factor, info.configs)
    mismatched = sorted(
        name
        for name, info in internal.items()
        if topics(name) is not None and topics(name) != info.partitions
    )
    if mismatched:
        result.statuses.append(
            (
                Status.INCORRECTLY_PARTITIONED_TOPICS,
                f"Internal topics {', '.join(mismatched)} have the wrong number of partitions.",
            )
        )
    result.topics_to_create = {n: i for n, i in sorted(internal.items()) if topics(n) is None}
    if result.topics_to_create:
        result.statuses.append(
            (
                Status.MISSING_INTERNAL_TOPICS,
                f"Internal topics are missing: {sorted(result.topics_to_create)}",
            )
        )
    if not result.ready:
        result.partition_counts.clear()
        result.stateful.clear()
    return result


# -- requests and members --------------------------------------------------------------------


@dataclass(frozen=True)
class StreamsSettings:
    """The broker's group.streams.* settings and the group's streams.* configs (defaults)."""

    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    max_size: int = 2**31 - 1
    num_standby_replicas: int = 0
    max_warmup_replicas: int = 2
    acceptable_recovery_lag: int = 10000
    # group.streams.initial.rebalance.delay.ms / streams.initial.rebalance.delay.ms (the
    # broker's default is Kafka's 3000; 0 here, in the pure core's own default).
    initial_rebalance_delay_ms: int = 0

    def assignment_configs(self) -> AssignmentConfigs:
        return AssignmentConfigs(
            self.num_standby_replicas, self.max_warmup_replicas, self.acceptable_recovery_lag
        )


@dataclass(frozen=True)
class StreamsHeartbeatRequest:
    """A StreamsGroupHeartbeat, as its fields arrive (None: unchanged since the last one)."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: Topology | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: Mapping[str, str] | None = None
    # The tasks the member owns (None: not reported).
    active: set[TaskId] | None = None
    standby: set[TaskId] | None = None
    warmup: set[TaskId] | None = None
    # Per task: the member's changelog offset sum and the end offset sum (lag = end - offset).
    task_offsets: Mapping[TaskId, int] | None = None
    task_end_offsets: Mapping[TaskId, int] | None = None
    shutdown_application: bool = False
    client_id: str = ""
    client_host: str = ""


@dataclass
class StreamsHeartbeatResult:
    error: Error = Error.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    acceptable_recovery_lag: int = 0
    statuses: list[tuple[Status, str]] = field(default_factory=list)
    # The member's tasks now; None when unchanged.
    active: set[TaskId] | None = None
    standby: set[TaskId] | None = None
    warmup: set[TaskId] | None = None
    # Internal topics the coordinator must create (name -> partitions, replication, configs).
    topics_to_create: dict[str, TopicInfo] = field(default_factory=dict)


def validate(request: StreamsHeartbeatRequest, group_id: str) -> None:
    """Kafka's throwIfStreamsGroupHeartbeatRequestIsInvalid."""

    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(Error.INVALID_REQUEST, message)

    if group_id == "":
        raise invalid("GroupId can't be empty.")
    if request.member_id == "":
        raise invalid("MemberId can't be empty.")
    if request.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if request.rack_id == "":
        raise invalid("RackId can't be empty.")
    epoch = request.member_epoch
    if epoch == 0:
        if request.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.topology is None:
            raise invalid("Topology must be non-empty when (re-)joining.")
        if not request.process_id:
            raise invalid("ProcessId can't be empty.")
        if request.active or request.standby or request.warmup:
            raise invalid("Active, standby and warm-up tasks must be empty when (re-)joining.")
        validate_topology(request.topology)
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if request.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid(f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")


@dataclass
class StreamsMember:
    """Kafka's StreamsGroupMember."""

    member_id: str
    process_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = 0
    user_endpoint: tuple[str, int] | None = None
    client_tags: dict[str, str] = field(default_factory=dict)
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: MemberAssignment = field(default_factory=MemberAssignment)
    pending_revocation: MemberAssignment = field(default_factory=MemberAssignment)
    lags: dict[TaskId, int] = field(default_factory=dict)
    # What the member last reported (Kafka's MemberTaskOffsets, kept in memory only, as
    # Kafka's StreamsGroup keeps it): per task, its changelog offset sum and end offset sum.
    task_offsets: dict[TaskId, int] = field(default_factory=dict)
    task_end_offsets: dict[TaskId, int] = field(default_factory=dict)
    session_deadline_ms: int = 0
    rebalance_deadline_ms: int | None = None

    def metadata_value(self) -> MemberMetadataValue:
        return MemberMetadataValue(
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.rebalance_timeout_ms,
            self.topology_epoch,
            self.process_id,
            self.user_endpoint,
            tuple(sorted(self.client_tags.items())),
        )

    def assignment_value(self) -> CurrentAssignmentValue:
        a, p = self.assigned, self.pending_revocation
        return CurrentAssignmentValue(
            self.member_epoch,
            self.previous_member_epoch,
            self.state.value,
            freeze(a.active),
            freeze(a.standby),
            freeze(a.warmup),
            freeze(p.active),
            freeze(p.standby),
            freeze(p.warmup),
        )

    def owned(self) -> set[TaskId]:
        return self.assigned.tasks() | self.pending_revocation.tasks()


def _copy(a: MemberAssignment) -> MemberAssignment:
    return MemberAssignment(set(a.active), set(a.standby), set(a.warmup))


class StreamsGroup:
    """A streams group's membership, topology and assignment (Kafka's StreamsGroup)."""

    def __init__(self, group_id: str, settings: StreamsSettings) -> None:
        self.group_id = group_id
        self.settings = settings
        self.members: dict[str, StreamsMember] = {}
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.topology: Topology | None = None
        self.configured = ConfiguredTopology()
        self.target: dict[str, MemberAssignment] = {}
        self.shutdown_requested = False
        self._configured_key: tuple[tuple[str, int], ...] = ()
        # While set: the first target assignment of a group that was empty waits until then
        # (Kafka's streams initial rebalance timer, not persisted, as Kafka's timers are not).
        self.initial_delay_deadline_ms: int | None = None

    # -- state -----------------------------------------------------------------------------

    @property
    def state(self) -> StreamsGroupState:
        """Kafka's StreamsGroup.maybeUpdateGroupState."""
        if not self.members:
            return StreamsGroupState.EMPTY
        if self.topology is None or not self.configured.ready:
            return StreamsGroupState.NOT_READY
        if self.group_epoch > self.assignment_epoch:
            return StreamsGroupState.ASSIGNING
        if any(
            m.state != MemberState.STABLE or m.member_epoch != self.assignment_epoch
            for m in self.members.values()
        ):
            return StreamsGroupState.RECONCILING
        return StreamsGroupState.STABLE

    def next_deadline_ms(self) -> int | None:
        deadlines = [m.session_deadline_ms for m in self.members.values()]
        deadlines += [
            m.rebalance_deadline_ms
            for m in self.members.values()
            if m.rebalance_deadline_ms is not None
        ]
        if self.initial_delay_deadline_ms is not None:
            deadlines.append(self.initial_delay_deadline_ms)
        return min(deadlines, default=None)

    # -- records ---------------------------------------------------------------------------

    def _persisted(self) -> dict[RecordKey, object]:
        view: dict[RecordKey, object] = {}
        if self.group_epoch > 0 or self.members:
            view[RecordKey(RecordKind.GROUP_METADATA, self.group_id)] = GroupMetadataValue(
                self.group_epoch,
                validated_topology_epoch=self.topology.epoch if self.topology else -1,
            )
            view[RecordKey(RecordKind.TARGET_METADATA, self.group_id)] = (
                TargetAssignmentMetadataValue(self.assignment_epoch)
            )
        if self.topology is not None:
            view[RecordKey(RecordKind.TOPOLOGY, self.group_id)] = TopologyValue(self.topology)
        for member_id, member in self.members.items():
            view[RecordKey(RecordKind.MEMBER_METADATA, self.group_id, member_id)] = (
                member.metadata_value()
            )
            view[RecordKey(RecordKind.CURRENT_ASSIGNMENT, self.group_id, member_id)] = (
                member.assignment_value()
            )
        for member_id, target in self.target.items():
            view[RecordKey(RecordKind.TARGET_MEMBER, self.group_id, member_id)] = (
                TargetAssignmentMemberValue(
                    freeze(target.active), freeze(target.standby), freeze(target.warmup)
                )
            )
        return view

    @staticmethod
    def _diff(before: dict[RecordKey, object], after: dict[RecordKey, object]) -> list[Record]:
        """Member tombstones first (current assignment, target, metadata: Kafka's order),
        then the new values, epochs last."""
        gone_order = {
            RecordKind.CURRENT_ASSIGNMENT: 0,
            RecordKind.TARGET_MEMBER: 1,
            RecordKind.MEMBER_METADATA: 2,
        }
        gone: list[Record] = [(key, None) for key in before if key not in after]
        gone.sort(key=lambda r: gone_order.get(r[0].kind, 3))
        put_order = {
            RecordKind.MEMBER_METADATA: 0,
            RecordKind.TOPOLOGY: 1,
            RecordKind.GROUP_METADATA: 2,
            RecordKind.TARGET_MEMBER: 3,
            RecordKind.TARGET_METADATA: 4,
            RecordKind.CURRENT_ASSIGNMENT: 5,
        }
        changed: list[Record] = [(k, v) for k, v in after.items() if before.get(k) != v]
        changed.sort(key=lambda r: put_order[r[0].kind])
        return gone + changed

    def tombstones(self) -> list[Record]:
        return self._diff(self._persisted(), {})

    # -- the heartbeat ---------------------------------------------------------------------

    def heartbeat(
        self, request: StreamsHeartbeatRequest, topics: TopicPartitions, now_ms: int
    ) -> tuple[StreamsHeartbeatResult, list[Record]]:
        """One StreamsGroupHeartbeat: its answer and the records to write before answering.
        A HeartbeatError leaves the group unchanged."""
        validate(request, self.group_id)
        before = self._persisted()
        if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            result = self._leave(request, topics)
        else:
            result = self._heartbeat(request, topics, now_ms)
        return result, self._diff(before, self._persisted())

    def _check_epoch(self, member: StreamsMember, request: StreamsHeartbeatRequest) -> None:
        """Kafka's throwIfStreamsGroupMemberEpochIsInvalid."""
        received = request.member_epoch
        if received > member.member_epoch:
            raise HeartbeatError(
                Error.FENCED_MEMBER_EPOCH,
                f"The streams group member has a greater member epoch ({received}) than the "
                f"one known by the group coordinator ({member.member_epoch}). The member "
                "must abandon all its tasks and rejoin.",
            )
        if received < member.member_epoch:
            reported = (request.active or set()) | (request.standby or set())
            reported |= request.warmup or set()
            lost_response = (
                received == member.previous_member_epoch
                and request.active is not None
                and reported <= member.assigned.tasks()
            )
            if not lost_response:
                raise HeartbeatError(
                    Error.FENCED_MEMBER_EPOCH,
                    f"The streams group member has a smaller member epoch ({received}) than "
                    f"the one known by the group coordinator ({member.member_epoch}). The "
                    "member must abandon all its tasks and rejoin.",
                )

    def _static_predecessor(self, request: StreamsHeartbeatRequest) -> StreamsMember | None:
        if request.instance_id is None:
            return None
        for member in self.members.values():
            if member.instance_id == request.instance_id and member.member_id != request.member_id:
                return member
        return None

    def _heartbeat(
        self, request: StreamsHeartbeatRequest, topics: TopicPartitions, now_ms: int
    ) -> StreamsHeartbeatResult:
        joining = request.member_epoch == 0
        member = self.members.get(request.member_id)
        predecessor = self._static_predecessor(request) if joining else None
        bump = False
        was_empty = not self.members
        if member is None:
            if not joining:
                raise HeartbeatError(
                    Error.UNKNOWN_MEMBER_ID,
                    f"Member {request.member_id} is not a member of group {self.group_id}.",
                )
            if predecessor is not None and predecessor.member_epoch != (
                LEAVE_GROUP_STATIC_MEMBER_EPOCH
            ):
                raise HeartbeatError(
                    Error.UNRELEASED_INSTANCE_ID,
                    f"Static member {predecessor.member_id} with instance id "
                    f"{request.instance_id} is still in the group.",
                )
            if predecessor is None and len(self.members) >= self.settings.max_size:
                raise HeartbeatError(
                    Error.GROUP_MAX_SIZE_REACHED,
                    f"The streams group has reached its maximum capacity of "
                    f"{self.settings.max_size} members.",
                )
        else:
            if not joining:
                self._check_epoch(member, request)
        statuses: list[tuple[Status, str]] = []
        if joining:
            assert request.topology is not None
            bump = self._accept_topology(request.topology) or bump
        if member is None or joining:
            assert request.process_id is not None
            new = StreamsMember(request.member_id, request.process_id)
            if predecessor is not None:
                # The new incarnation of a static member takes over its assignment.
                new.assigned = _copy(predecessor.assigned)
                if predecessor.member_id in self.target:
                    self.target[request.member_id] = self.target.pop(predecessor.member_id)
                del self.members[predecessor.member_id]
            else:
                if member is not None:
                    self.members.pop(member.member_id)
                    self.target.pop(member.member_id, None)
                bump = True
            member = new
        assert member is not None
        if self._update_metadata(member, request):
            bump = True
        self.members[member.member_id] = member
        if self.topology is not None and member.topology_epoch < self.topology.epoch:
            # Kafka's maybeSetTopologyStaleStatus, at every heartbeat of such a member (Kafka
            # 4.4 never answers STREAMS_TOPOLOGY_FENCED: the member is told, not fenced).
            statuses.append(
                (
                    Status.STALE_TOPOLOGY,
                    f"The member's topology epoch {member.topology_epoch} is behind the "
                    f"group's topology epoch {self.topology.epoch}.",
                )
            )
        if request.shutdown_application:
            self.shutdown_requested = True
        if request.task_offsets is not None or request.task_end_offsets is not None:
            # Kafka's MemberTaskOffsets.update: each list sent replaces the one kept.
            if request.task_offsets is not None:
                member.task_offsets = dict(request.task_offsets)
            if request.task_end_offsets is not None:
                member.task_end_offsets = dict(request.task_end_offsets)
            member.lags = {
                task: max(0, member.task_end_offsets.get(task, offset) - offset)
                for task, offset in member.task_offsets.items()
            }
        # The topology against the cluster: a change in the partition counts bumps the epoch.
        result = StreamsHeartbeatResult()
        if self.topology is not None:
            self.configured = configure(self.topology, topics)
            key = tuple(sorted(self.configured.partition_counts.items()))
            if key != self._configured_key:
                self._configured_key = key
                bump = True
            statuses.extend(self.configured.statuses)
            result.topics_to_create = dict(self.configured.topics_to_create)
        if bump:
            self.group_epoch += 1
            delay = self.settings.initial_rebalance_delay_ms
            if was_empty and delay > 0 and self.initial_delay_deadline_ms is None:
                # Kafka's streamsGroupHeartbeat: the epoch of a group that was empty rose,
                # so its initial rebalance timer is scheduled (if absent).
                self.initial_delay_deadline_ms = now_ms + delay
        delayed = False
        if self.group_epoch > self.assignment_epoch:
            delayed = self._assignment_delayed(now_ms)
            if delayed:
                statuses.append(
                    (
                        Status.ASSIGNMENT_DELAYED,
                        "Assignment delayed due to the configured initial rebalance delay.",
                    )
                )
            else:
                self._compute_target()
        previous = _copy(member.assigned)
        previous_epoch = member.member_epoch
        self._reconcile(member, request, now_ms)
        member.session_deadline_ms = now_ms + self.settings.session_timeout_ms
        if self.shutdown_requested:
            statuses.append(
                (Status.SHUTDOWN_APPLICATION, "A member requested the application to shut down.")
            )
        result.member_id = member.member_id
        result.member_epoch = member.member_epoch
        result.heartbeat_interval_ms = self.settings.heartbeat_interval_ms
        result.acceptable_recovery_lag = self.settings.acceptable_recovery_lag
        result.statuses = statuses
        # A member still at epoch 0 while the first assignment is delayed gets no task lists
        # (Kafka's member is unchanged, so its answer has none): Kafka Streams then stays
        # in its joining state and sends its join's fields again.
        still_joining = delayed and member.member_epoch == 0
        if not still_joining and (
            joining or member.assigned != previous or member.member_epoch != previous_epoch
        ):
            result.active = set(member.assigned.active)
            result.standby = set(member.assigned.standby)
            result.warmup = set(member.assigned.warmup)
        return result

    @property
    def topology_epoch(self) -> int:
        return self.topology.epoch if self.topology is not None else -1

    def _accept_topology(self, topology: Topology) -> bool:
        """Kafka's maybeUpdateTopology: whether the group's topology changed. A smaller
        epoch leaves it (the member is told STALE_TOPOLOGY); the same epoch with another
        topology is STREAMS_INVALID_TOPOLOGY_EPOCH."""
        if self.topology is None or not self.members:
            changed = self.topology != topology
            self.topology = topology
            return changed
        if topology.epoch < self.topology.epoch:
            return False
        if topology.epoch == self.topology.epoch:
            if topology != self.topology:
                raise HeartbeatError(
                    Error.STREAMS_INVALID_TOPOLOGY_EPOCH,
                    f"Topology epoch {topology.epoch} is already used by another topology.",
                )
            return False
        self.topology = topology
        return True

    def _update_metadata(self, member: StreamsMember, request: StreamsHeartbeatRequest) -> bool:
        """Apply what the heartbeat carries; True when the assignment may change."""
        before = (member.process_id, member.rack_id, dict(member.client_tags))
        if request.process_id is not None:
            member.process_id = request.process_id
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.client_tags is not None:
            member.client_tags = dict(request.client_tags)
        if request.instance_id is not None:
            member.instance_id = request.instance_id
        if request.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.user_endpoint is not None:
            member.user_endpoint = request.user_endpoint
        if request.topology is not None:
            member.topology_epoch = request.topology.epoch
        member.client_id = request.client_id or member.client_id
        member.client_host = request.client_host or member.client_host
        return before != (member.process_id, member.rack_id, member.client_tags)

    def _assignment_delayed(self, now_ms: int) -> bool:
        """Whether the initial rebalance delay still holds the target assignment back (once
        it passed, it is cleared)."""
        if self.initial_delay_deadline_ms is None:
            return False
        if now_ms < self.initial_delay_deadline_ms:
            return True
        self.initial_delay_deadline_ms = None
        return False

    def _compute_target(self) -> None:
        specs = {
            member_id: MemberSpec(
                process_id=member.process_id,
                client_tags=member.client_tags,
                active=frozenset(self.target.get(member_id, MemberAssignment()).active),
                standby=frozenset(self.target.get(member_id, MemberAssignment()).standby),
                warmup=frozenset(self.target.get(member_id, MemberAssignment()).warmup),
                lags=member.lags,
            )
            for member_id, member in self.members.items()
        }
        self.target = streams_assignor.assign(
            specs,
            self.configured.partition_counts,
            self.configured.stateful,
            self.settings.assignment_configs(),
        )
        self.assignment_epoch = self.group_epoch

    # -- reconciliation (Kafka's streams CurrentAssignmentBuilder) ---------------------------

    def _reconcile(
        self, member: StreamsMember, request: StreamsHeartbeatRequest, now_ms: int
    ) -> None:
        target = self.target.get(member.member_id, MemberAssignment())
        if member.state == MemberState.UNREVOKED_TASKS:
            still_owned = (request.active or set()) | (request.standby or set())
            still_owned |= request.warmup or set()
            if request.active is None or still_owned & member.pending_revocation.tasks():
                return
            member.pending_revocation = MemberAssignment()
            member.rebalance_deadline_ms = None
        if member.state == MemberState.STABLE and member.member_epoch == self.assignment_epoch:
            return
        a = member.assigned
        keep = MemberAssignment(
            a.active & target.active, a.standby & target.standby, a.warmup & target.warmup
        )
        revoke = MemberAssignment(
            a.active - target.active, a.standby - target.standby, a.warmup - target.warmup
        )
        if revoke.tasks():
            member.assigned = keep
            member.pending_revocation = revoke
            member.state = MemberState.UNREVOKED_TASKS
            member.rebalance_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
            return
        others = [m for m in self.members.values() if m.member_id != member.member_id]
        active_elsewhere = {
            t for m in others for t in m.assigned.active | m.pending_revocation.active
        }
        same_process = {t for m in others if m.process_id == member.process_id for t in m.owned()}
        new = MemberAssignment(
            {t for t in target.active if t in keep.active or t not in active_elsewhere},
            {t for t in target.standby if t in keep.standby or t not in same_process},
            {t for t in target.warmup if t in keep.warmup or t not in same_process},
        )
        member.assigned = new
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
        unreleased = new.tasks() != target.tasks() or new != target
        member.state = MemberState.UNRELEASED_TASKS if unreleased else MemberState.STABLE

    # -- leaving and expiry ----------------------------------------------------------------

    def _leave(
        self, request: StreamsHeartbeatRequest, topics: TopicPartitions
    ) -> StreamsHeartbeatResult:
        member = self.members.get(request.member_id)
        if member is None:
            raise HeartbeatError(
                Error.UNKNOWN_MEMBER_ID,
                f"Member {request.member_id} is not a member of group {self.group_id}.",
            )
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # A static member leaving for a while: it keeps its tasks, no new epoch.
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
        else:
            self._remove(member)
        return StreamsHeartbeatResult(
            member_id=request.member_id, member_epoch=request.member_epoch
        )

    def _remove(self, member: StreamsMember) -> None:
        del self.members[member.member_id]
        self.target.pop(member.member_id, None)
        self.group_epoch += 1
        if not self.members:
            self.shutdown_requested = False
            self.initial_delay_deadline_ms = None
        elif self.initial_delay_deadline_ms is None:
            self._compute_target()

    def expire(self, now_ms: int) -> list[Record]:
        """Fence the members whose session or revocation deadline has passed; once the
        initial rebalance delay has passed, compute the target assignment it held back
        (Kafka's streams initial rebalance timeout)."""
        before = self._persisted()
        for member in list(self.members.values()):
            late_revoke = (
                member.rebalance_deadline_ms is not None and member.rebalance_deadline_ms <= now_ms
            )
            if member.session_deadline_ms <= now_ms or late_revoke:
                self._remove(member)
        if (
            self.initial_delay_deadline_ms is not None
            and not self._assignment_delayed(now_ms)
            and self.members
            and self.group_epoch > self.assignment_epoch
        ):
            self._compute_target()
        return self._diff(before, self._persisted())


def _thaw(tasks: FrozenTasks) -> set[TaskId]:
    return {(sub, partition) for sub, partitions in tasks for partition in partitions}


def restore_records(
    group_id: str, settings: StreamsSettings, values: Mapping[RecordKey, object], now_ms: int
) -> StreamsGroup:
    """A streams group rebuilt from its records' latest values in `__consumer_offsets`
    (Kafka's GroupMetadataManager.replay of the StreamsGroup* records). Each member's
    session starts again at ``now_ms`` (Kafka restarts the session timers on load); the
    configured topology is recomputed at the next heartbeat."""
    group = StreamsGroup(group_id, settings)
    for value in values.values():
        if isinstance(value, GroupMetadataValue):
            group.group_epoch = value.epoch
        elif isinstance(value, TargetAssignmentMetadataValue):
            group.assignment_epoch = value.assignment_epoch
        elif isinstance(value, TopologyValue):
            group.topology = value.topology
    for key, value in values.items():
        if key.member_id is None:
            continue
        member = group.members.get(key.member_id)
        if isinstance(value, MemberMetadataValue):
            member = member or StreamsMember(key.member_id, value.process_id)
            member.process_id = value.process_id
            member.instance_id = value.instance_id
            member.rack_id = value.rack_id
            member.client_id = value.client_id
            member.client_host = value.client_host
            member.rebalance_timeout_ms = value.rebalance_timeout_ms
            member.topology_epoch = value.topology_epoch
            member.user_endpoint = value.user_endpoint
            member.client_tags = dict(value.client_tags)
            group.members[key.member_id] = member
        elif isinstance(value, CurrentAssignmentValue):
            member = member or StreamsMember(key.member_id, "")
            member.member_epoch = value.member_epoch
            member.previous_member_epoch = value.previous_member_epoch
            member.state = MemberState(value.state)
            member.assigned = MemberAssignment(
                _thaw(value.active), _thaw(value.standby), _thaw(value.warmup)
            )
            member.pending_revocation = MemberAssignment(
                _thaw(value.active_pending_revocation),
                _thaw(value.standby_pending_revocation),
                _thaw(value.warmup_pending_revocation),
            )
            group.members[key.member_id] = member
        elif isinstance(value, TargetAssignmentMemberValue):
            group.target[key.member_id] = MemberAssignment(
                _thaw(value.active), _thaw(value.standby), _thaw(value.warmup)
            )
    for member in group.members.values():
        member.session_deadline_ms = now_ms + settings.session_timeout_ms
        if member.state == MemberState.UNREVOKED_TASKS:
            member.rebalance_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
    return group
