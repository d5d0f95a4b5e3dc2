"""One group of the next-generation consumer group protocol (KIP-848), as Kafka 4 runs it.

Pure state with time passed in (milliseconds), like the classic group (state.py), tested
without sockets or sleeping (tests/unit/test_consumer_group.py). The service (service.py)
calls `consumer_heartbeat` from ConsumerGroupHeartbeat and `expire` from its timer, and
writes the records each returns to `__consumer_offsets` (consumer_log_format.py) before answering.

The rules are Kafka's GroupMetadataManager.consumerGroupHeartbeat, ConsumerGroup,
ConsumerGroupMember and CurrentAssignmentBuilder:

- the group has an epoch, bumped whenever a member joins, leaves or is fenced, changes its
  subscription or server assignor, or the subscribed topics' metadata changes (new
  partitions, a topic created or deleted, or, with racks, the racks of a partition's
  replicas: KIP-1101's topic hash, Kafka's Utils.computeTopicHash, covers each partition's
  sorted replica racks); the target assignment is recomputed by the
  server-side assignor (assignors.py) when the group epoch passes the assignment epoch;
- each member has an epoch and converges to its target one heartbeat at a time
  (CurrentAssignmentBuilder): partitions it must give up are first revoked
  (UNREVOKED_PARTITIONS, at its current epoch), and a partition is handed to a member only
  once its previous owner no longer holds it (UNRELEASED_PARTITIONS until then); a member
  reaches the target epoch when it has nothing left to revoke;
- a member that does not heartbeat within `group.consumer.session.timeout.ms` is fenced
  (removed, group epoch bumped), as is one that does not revoke within its rebalance timeout;
  a heartbeat with a member epoch the coordinator does not expect is FENCED_MEMBER_EPOCH,
  except the previous epoch with owned partitions within the assignment (a lost response);
- epoch -1 leaves; a static member (instance id) leaving with -2 keeps its partitions until
  its session expires or a new incarnation with the same instance id joins and takes them;
- a member subscribes by topic names or by a regular expression (RE2/J, full match, internal
  topics left out), whose matching topics count as subscribed.

Departures: a member that heartbeats with epoch 0 under a member id the group still has
rejoins from scratch (its partitions are released) instead of FENCED_MEMBER_EPOCH, as KIP-848
describes the rejoin after a fence (the client keeps its member id); the subscription
metadata and the regular expressions are recomputed at every heartbeat (Kafka refreshes them
on an interval and in the background), so new partitions, new matching topics and deleted
topics reach the assignment at the next heartbeat; patterns are matched with Python's `re`
(RE2/J's constructs only: what RE2/J lacks is INVALID_REGULAR_EXPRESSION), not RE2's
linear-time engine.
"""

import base64
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import cast

from minibroker.common.names import INTERNAL_TOPICS
from minibroker.coordinator.group import assignors
from minibroker.coordinator.group.consumer_log_format import (
    ClassicMemberMetadata,
    CurrentAssignmentValue,
    GroupEpochValue,
    MemberMetadataValue,
    RecordKey,
    RecordKind,
    TargetAssignmentEpochValue,
    TargetMemberValue,
    freeze,
    thaw,
)
from minibroker.coordinator.group.embedded_protocol import (
    EmbeddedProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    version_of,
)
from minibroker.coordinator.group.state import (
    Group,
    GroupSettings,
    GroupState,
    JoinOutcome,
    JoinRequest,
    JoinResult,
    Member,
    SyncResult,
)
from minibroker.protocol.errors import Error

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

# topic id -> partitions
Partitions = dict[uuid.UUID, set[int]]
# Each partition's replica racks, by partition index: the racks of the brokers holding its
# replicas, sorted, one entry per replica that has a rack (Kafka's partitionRacks, sorted as
# computeTopicHash sorts them).
PartitionRacks = tuple[tuple[str, ...], ...]
# A topic name -> (topic id, partition count), or None if the topic does not exist.
TopicLookup = Callable[[str], tuple[uuid.UUID, int] | None]
# The consumer groups' lookup may add the topic's partition racks (the service's does), which
# only serve to notice a change.
TopicFacts = tuple[uuid.UUID, int] | tuple[uuid.UUID, int, PartitionRacks]
ConsumerTopicLookup = Callable[[str], TopicFacts | None]
# A record to write: its key, and its value (None: a tombstone).
Record = tuple[RecordKey, object | None]
# Every topic name in the cluster (regular expressions are resolved against them).
TopicNames = Callable[[], Iterable[str]]
# Kafka's internal topics, never matched by a regular expression (Topic.isInternal).


class MemberState(Enum):
    """Kafka's MemberState, with its byte in the current assignment record."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ConsumerSettings:
    """The broker's group.consumer.* settings."""

    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = assignors.ASSIGNORS
    # group.consumer.migration.policy: disabled, upgrade, downgrade or bidirectional.
    migration_policy: str = "bidirectional"

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("downgrade", "bidirectional")

    @property
    def upgrade_enabled(self) -> bool:
        return self.migration_policy in ("upgrade", "bidirectional")


class HeartbeatError(Exception):
    def __init__(self, error: Error, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


@dataclass(frozen=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat, as its fields arrive (None: unchanged since the last one)."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Partitions | None = None
    client_id: str = ""
    client_host: str = ""
    # The request's version: from v1 the client chooses its member id (KIP-1082).
    api_version: int = 0


@dataclass
class HeartbeatResult:
    error: Error = Error.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    # The partitions the member may use now; None when unchanged and not asked for.
    assignment: Partitions | None = None


def validate(request: HeartbeatRequest, group_id: str, known_assignors: Iterable[str]) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""

    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(Error.INVALID_REQUEST, message)

    if group_id == "":
        raise invalid("GroupId can't be empty.")
    if request.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if request.rack_id == "":
        raise invalid("RackId can't be empty.")
    if request.api_version >= 1 and request.member_id == "":
        raise invalid("MemberId can't be empty.")
    if request.subscribed_topic_regex:
        compile_regex(request.subscribed_topic_regex)
    epoch = request.member_epoch
    if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if request.member_id == "":
            raise invalid("MemberId can't be empty.")
    elif epoch == 0:
        if request.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.owned is None or request.owned:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if not request.subscribed_topic_names and not request.subscribed_topic_regex:
            raise invalid(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if request.member_id == "":
            raise invalid("MemberId can't be empty.")
        if request.instance_id is None:
            raise invalid("InstanceId can't be null.")
    else:
        raise invalid("MemberEpoch is invalid.")
    known = list(known_assignors)
    if request.server_assignor is not None and request.server_assignor not in known:
        raise HeartbeatError(
            Error.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {request.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(known)}.",
        )


# What RE2/J (Kafka's regular expressions) does not have, and Python's `re` does: refused, so
# that a pattern Kafka refuses is refused here too and no backtracking construct gets in.
_NOT_RE2 = re.compile(r"\(\?[=!]|\(\?<[=!]|\(\?P=|\\[1-9]|\(\?\(")


def compile_regex(pattern: str) -> re.Pattern[str]:
    """A subscription's regular expression (Kafka's RE2/J syntax, which Python's `re` reads
    for what both have); INVALID_REGULAR_EXPRESSION otherwise."""
    if _NOT_RE2.search(pattern):
        raise HeartbeatError(
            Error.INVALID_REGULAR_EXPRESSION,
            f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: "
            "lookarounds, backreferences and conditionals are not supported.",
        )
    try:
        return re.compile(pattern)
    except re.error as error:
        raise HeartbeatError(
            Error.INVALID_REGULAR_EXPRESSION,
            f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {error}.",
        ) from None


def new_member_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): URL-safe base64 of 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


@dataclass
class ConsumerMember:
    """Kafka's ConsumerGroupMember."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)
    session_deadline_ms: int = 0
    # While revoking (UNREVOKED_PARTITIONS): when the member is fenced if it has not.
    rebalance_deadline_ms: int | None = None
    # A member that uses the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside this
    # consumer group: its session timeout and JoinGroup protocols (None: the consumer protocol).
    classic: ClassicMemberMetadata | None = None
    # A classic member told to rejoin (REBALANCE_IN_PROGRESS): fenced if it has not by then
    # (Kafka's consumer group join timeout).
    join_deadline_ms: int | None = None
    # A classic member answered on JoinGroup: fenced if its SyncGroup has not come by then
    # (Kafka's consumer group sync timeout).
    sync_deadline_ms: int | None = None

    def metadata_value(self) -> MemberMetadataValue:
        return MemberMetadataValue(
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            tuple(self.subscribed_topic_names),
            self.subscribed_topic_regex,
            self.rebalance_timeout_ms,
            self.server_assignor,
            self.classic,
        )

    @property
    def session_timeout_ms(self) -> int | None:
        """A classic member's own session timeout (None: the group's)."""
        return self.classic.session_timeout_ms if self.classic is not None else None

    @property
    def protocol_name(self) -> str:
        """A classic member's protocol: the first it names (Kafka's JoinGroup answer)."""
        assert self.classic is not None and self.classic.protocols
        return self.classic.protocols[0][0]

    def assignment_value(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(
            self.member_epoch,
            self.previous_member_epoch,
            self.state.value,
            freeze(self.assigned),
            freeze(self.pending_revocation),
        )

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == epoch

    # Read by the classic DescribeGroups and admin paths that list members.
    @property
    def group_instance_id(self) -> str | None:
        return self.instance_id


def _owns_any(owned: Partitions | None, partitions: Partitions) -> bool:
    """Kafka's ownsRevokedPartitions: None (not reported) counts as still owning."""
    if owned is None:
        return True
    return any(owned.get(topic, set()) & parts for topic, parts in partitions.items())


def _is_subset(owned: Partitions | None, target: Partitions) -> bool:
    if owned is None:
        return False
    return all(parts <= target.get(topic, set()) for topic, parts in owned.items() if parts)


class ConsumerGroup(Group):
    """A consumer-protocol group. It is a `state.Group` for its committed offsets (the same
    rules for plain and transactional commits); the membership is this protocol's. Its state
    is a ConsumerGroupState, whose Empty, Stable and Dead answer `is_` for the classic
    GroupState of the same name, so the offset paths treat both group types alike."""

    protocol = "consumer"

    def __init__(
        self,
        group_id: str,
        settings: GroupSettings,
        consumer: ConsumerSettings,
        now_ms: int,
    ) -> None:
        super().__init__(group_id, settings, now_ms)
        self.consumer = consumer
        self.protocol_type = "consumer"
        self._set_state(ConsumerGroupState.EMPTY)
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}  # type: ignore[assignment]
        self.static_members: dict[str, str] = {}
        # member id -> its target partitions
        self.target: dict[str, Partitions] = {}
        # subscribed topic name -> (topic id, partitions[, the partitions' racks])
        self.subscription_metadata: dict[str, TopicFacts] = {}
        # Each subscribed regular expression -> the topics it matches (Kafka's
        # resolvedRegularExpressions), resolved again at each heartbeat.
        self.regex_topics: dict[str, frozenset[str]] = {}
        # The consumer-protocol member whose leaving makes the group classic again (online
        # downgrade): set instead of fencing it; the service then calls `to_classic`.
        self.downgrade_leaving: str | None = None

    # -- queries -------------------------------------------------------------------------------

    @property
    def consumer_state(self) -> ConsumerGroupState:
        return cast(ConsumerGroupState, self.state)

    def _set_state(self, state: ConsumerGroupState) -> None:
        # `state` holds a ConsumerGroupState here: ListGroups and the admin paths read its
        # name (.value) alike for both group types.
        self.state = cast(GroupState, state)

    def is_(self, state: GroupState | ConsumerGroupState) -> bool:
        return bool(self.state.value == state.value)

    @property
    def is_empty(self) -> bool:
        return not self.members

    def next_deadline_ms(self) -> int | None:
        deadlines = [m.session_deadline_ms for m in self.members.values()]
        deadlines += [
            m.rebalance_deadline_ms
            for m in self.members.values()
            if m.rebalance_deadline_ms is not None
        ]
        deadlines += [
            m.join_deadline_ms for m in self.members.values() if m.join_deadline_ms is not None
        ]
        deadlines += [
            m.sync_deadline_ms for m in self.members.values() if m.sync_deadline_ms is not None
        ]
        return min(deadlines, default=None)

    def member_topics(self, member: ConsumerMember) -> set[str]:
        """The topics a member subscribes to: by name, and those its regex matches."""
        topics = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            topics |= self.regex_topics.get(member.subscribed_topic_regex, frozenset())
        return topics

    def subscribed_topics(self) -> set[str] | None:
        return {name for m in self.members.values() for name in self.member_topics(m)}

    def preferred_assignor(self) -> str:
        """Kafka's computePreferredServerAssignor: the one most members name, else the
        first configured."""
        named = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        if named:
            return max(sorted(named), key=named.__getitem__)
        return self.consumer.assignors[0]

    def partition_epochs(self) -> dict[tuple[uuid.UUID, int], int]:
        """Kafka's currentPartitionEpoch: who holds each partition (assigned or being
        revoked), by member epoch."""
        epochs: dict[tuple[uuid.UUID, int], int] = {}
        for member in self.members.values():
            for held in (member.assigned, member.pending_revocation):
                for topic, parts in held.items():
                    for partition in parts:
                        epochs[(topic, partition)] = member.member_epoch
        return epochs

    def _update_state(self, now_ms: int) -> None:
        """Kafka's ConsumerGroup.maybeUpdateGroupState."""
        if self.consumer_state == ConsumerGroupState.DEAD:
            return
        if not self.members:
            state = ConsumerGroupState.EMPTY
        elif self.group_epoch > self.assignment_epoch:
            state = ConsumerGroupState.ASSIGNING
        elif any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            state = ConsumerGroupState.RECONCILING
        else:
            state = ConsumerGroupState.STABLE
        if state != self.consumer_state:
            self._set_state(state)
            self.state_timestamp_ms = now_ms

    # -- records ---------------------------------------------------------------------------------

    def _persisted(self) -> dict[RecordKey, object]:
        """What the group's records hold, by key (the diff of two of these is what a change
        writes)."""
        view: dict[RecordKey, object] = {}
        if self.group_epoch > 0 or self.members:
            view[RecordKey(RecordKind.GROUP_METADATA, self.group_id)] = GroupEpochValue(
                self.group_epoch
            )
            view[RecordKey(RecordKind.TARGET_METADATA, self.group_id)] = TargetAssignmentEpochValue(
                self.assignment_epoch
            )
        for member_id, member in self.members.items():
            view[RecordKey(RecordKind.MEMBER_METADATA, self.group_id, member_id)] = (
                member.metadata_value()
            )
            view[RecordKey(RecordKind.CURRENT_ASSIGNMENT, self.group_id, member_id)] = (
                member.assignment_value()
            )
        for member_id, partitions in self.target.items():
            view[RecordKey(RecordKind.TARGET_MEMBER, self.group_id, member_id)] = TargetMemberValue(
                freeze(partitions)
            )
        return view

    @staticmethod
    def _diff(before: dict[RecordKey, object], after: dict[RecordKey, object]) -> list[Record]:
        """Records in Kafka's order: tombstones of members first (current assignment, target,
        metadata, as Kafka's removeMember), then the new values, epochs last."""
        order = {
            RecordKind.CURRENT_ASSIGNMENT: 0,
            RecordKind.TARGET_MEMBER: 1,
            RecordKind.MEMBER_METADATA: 2,
        }
        gone: list[Record] = [(key, None) for key in before if key not in after]
        gone.sort(key=lambda r: order.get(r[0].kind, 3))
        put_order = {
            RecordKind.MEMBER_METADATA: 0,
            RecordKind.GROUP_METADATA: 1,
            RecordKind.TARGET_MEMBER: 2,
            RecordKind.TARGET_METADATA: 3,
            RecordKind.CURRENT_ASSIGNMENT: 4,
        }
        changed: list[Record] = [
            (key, value) for key, value in after.items() if before.get(key) != value
        ]
        changed.sort(key=lambda r: put_order[r[0].kind])
        return gone + changed

    def tombstones(self) -> list[Record]:
        """Every record of the group, deleted (DeleteGroups, an expired empty group)."""
        return self._diff(self._persisted(), {})

    def restore_records(self, values: dict[RecordKey, object], now_ms: int) -> None:
        """Rebuild the group from its records as replayed from the log (Kafka's replay of
        each record kind); members come back with fresh sessions."""
        for key, value in values.items():
            if key.kind == RecordKind.GROUP_METADATA:
                assert isinstance(value, GroupEpochValue)
                self.group_epoch = value.epoch
            elif key.kind == RecordKind.TARGET_METADATA:
                assert isinstance(value, TargetAssignmentEpochValue)
                self.assignment_epoch = value.assignment_epoch
        for key, value in values.items():
            if key.kind == RecordKind.MEMBER_METADATA and key.member_id is not None:
                assert isinstance(value, MemberMetadataValue)
                restored = ConsumerMember(
                    key.member_id,
                    instance_id=value.instance_id,
                    rack_id=value.rack_id,
                    client_id=value.client_id,
                    client_host=value.client_host,
                    subscribed_topic_names=tuple(value.subscribed_topic_names),
                    subscribed_topic_regex=value.subscribed_topic_regex,
                    rebalance_timeout_ms=value.rebalance_timeout_ms,
                    server_assignor=value.server_assignor,
                    classic=value.classic,
                )
                restored.session_deadline_ms = now_ms + (
                    restored.session_timeout_ms or self.consumer.session_timeout_ms
                )
                self.members[restored.member_id] = restored
                if restored.instance_id is not None:
                    self.static_members[restored.instance_id] = restored.member_id
        for key, value in values.items():
            member = self.members.get(key.member_id or "")
            if key.kind == RecordKind.CURRENT_ASSIGNMENT and member is not None:
                assert isinstance(value, CurrentAssignmentValue)
                member.member_epoch = value.member_epoch
                member.previous_member_epoch = value.previous_member_epoch
                try:
                    member.state = MemberState(value.state)
                except ValueError:
                    member.state = MemberState.UNKNOWN
                member.assigned = thaw(value.assigned)
                member.pending_revocation = thaw(value.pending_revocation)
                if member.state == MemberState.UNREVOKED_PARTITIONS:
                    member.rebalance_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
            elif key.kind == RecordKind.TARGET_MEMBER and key.member_id is not None:
                assert isinstance(value, TargetMemberValue)
                self.target[key.member_id] = thaw(value.partitions)
        self._set_state(ConsumerGroupState.EMPTY)
        self._update_state(now_ms)

    # -- heartbeat -------------------------------------------------------------------------------

    def consumer_heartbeat(
        self,
        request: HeartbeatRequest,
        topics: ConsumerTopicLookup,
        now_ms: int,
        topic_names: TopicNames | None = None,
    ) -> tuple[HeartbeatResult, list[Record]]:
        """One ConsumerGroupHeartbeat (validated with `validate`): the answer and the records
        to write before it is given. On an error nothing changed."""
        before = self._persisted()
        try:
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                result = self._leave(request, now_ms)
            else:
                result = self._heartbeat(request, topics, now_ms, topic_names)
        except HeartbeatError as error:
            return HeartbeatResult(error.error, error.message), []
        self._update_state(now_ms)
        return result, self._diff(before, self._persisted())

    def _is_full(self, member_id: str) -> bool:
        return len(self.members) >= self.consumer.max_size and (
            member_id == "" or member_id not in self.members
        )

    def _check_epoch(self, member: ConsumerMember, request: HeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid."""
        received = request.member_epoch
        if received > member.member_epoch:
            raise HeartbeatError(
                Error.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({received}) than the "
                f"one known by the group coordinator ({member.member_epoch}). The member "
                "must abandon all its partitions and rejoin.",
            )
        if received < member.member_epoch and not (
            received == member.previous_member_epoch and _is_subset(request.owned, member.assigned)
        ):
            raise HeartbeatError(
                Error.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({received}) than the "
                f"one known by the group coordinator ({member.member_epoch}). The member "
                "must abandon all its partitions and rejoin.",
            )

    def _member_for(self, request: HeartbeatRequest, member_id: str) -> ConsumerMember:
        """Kafka's getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember (without changing
        the group: the caller adds what this returns)."""
        joining = request.member_epoch == 0
        instance_id = request.instance_id
        if instance_id is None:
            member = self.members.get(member_id)
            if member is None:
                if not joining:
                    raise HeartbeatError(
                        Error.UNKNOWN_MEMBER_ID,
                        f"Member {member_id} is not a member of group {self.group_id}.",
                    )
                return ConsumerMember(member_id)
            if joining:
                return self._rejoined(member)
            self._check_epoch(member, request)
            return member
        existing_id = self.static_members.get(instance_id)
        existing = self.members.get(existing_id) if existing_id is not None else None
        if joining:
            if existing is None:
                return ConsumerMember(member_id)
            if existing.member_id == member_id:
                return self._rejoined(existing)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise HeartbeatError(
                    Error.UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} cannot join "
                    f"the group because the instance id is owned by {existing.member_id} "
                    "member.",
                )
            # The new incarnation takes over the old one's place, partitions and target.
            replacement = ConsumerMember(
                member_id,
                instance_id=instance_id,
                rack_id=existing.rack_id,
                client_id=existing.client_id,
                client_host=existing.client_host,
                subscribed_topic_names=existing.subscribed_topic_names,
                subscribed_topic_regex=existing.subscribed_topic_regex,
                rebalance_timeout_ms=existing.rebalance_timeout_ms,
                server_assignor=existing.server_assignor,
                assigned={t: set(p) for t, p in existing.assigned.items()},
            )
            del self.members[existing.member_id]
            target = self.target.pop(existing.member_id, None)
            if target is not None:
                self.target[member_id] = target
            return replacement
        if existing is None:
            raise HeartbeatError(Error.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise HeartbeatError(
                Error.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} was fenced by "
                f"member {existing.member_id}.",
            )
        self._check_epoch(existing, request)
        return existing

    @staticmethod
    def _rejoined(member: ConsumerMember) -> ConsumerMember:
        """A known member joining again with epoch 0 (after FENCED_MEMBER_EPOCH or
        UNKNOWN_MEMBER_ID the client drops its partitions and rejoins with its member id):
        it starts over without partitions (see the module's departures)."""
        member.member_epoch = 0
        member.previous_member_epoch = 0
        member.state = MemberState.STABLE
        member.assigned = {}
        member.pending_revocation = {}
        member.rebalance_deadline_ms = None
        return member

    def _admit(
        self,
        member: ConsumerMember,
        new: bool,
        before_subscription: tuple[object, ...],
        topics: ConsumerTopicLookup,
        topic_names: TopicNames | None,
    ) -> None:
        """Put a member's updated fields in the group, whichever protocol it heartbeats with:
        the group epoch moves when the member is new, its subscription or assignor changed,
        or the subscribed topics' metadata did; then a new target assignment if the epoch
        moved past the last one (Kafka's consumerGroupHeartbeat and
        classicGroupJoinToConsumerGroup share these steps)."""
        bump = new or before_subscription != (
            member.subscribed_topic_names,
            member.subscribed_topic_regex,
            member.server_assignor,
        )
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        if self._refresh_subscription_metadata(topics, topic_names):
            bump = True
        if bump:
            self.group_epoch += 1
        if self.group_epoch > self.assignment_epoch:
            self._compute_target()

    def _heartbeat(
        self,
        request: HeartbeatRequest,
        topics: ConsumerTopicLookup,
        now_ms: int,
        topic_names: TopicNames | None,
    ) -> HeartbeatResult:
        if self._is_full(request.member_id):
            raise HeartbeatError(
                Error.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of "
                f"{self.consumer.max_size} members.",
            )
        member_id = request.member_id or new_member_id()
        member = self._member_for(request, member_id)
        new = member.member_id not in self.members
        before_assigned = {t: set(p) for t, p in member.assigned.items()}
        before_subscription = (
            member.subscribed_topic_names,
            member.subscribed_topic_regex,
            member.server_assignor,
        )
        # 1. The member's fields, as given (None and -1: unchanged).
        if request.instance_id is not None:
            member.instance_id = request.instance_id
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.server_assignor is not None:
            member.server_assignor = request.server_assignor
        if request.subscribed_topic_names is not None:
            member.subscribed_topic_names = tuple(request.subscribed_topic_names)
        if request.subscribed_topic_regex is not None:
            # An empty one is none (the client subscribes by names).
            member.subscribed_topic_regex = request.subscribed_topic_regex or None
        member.client_id = request.client_id
        member.client_host = request.client_host
        # 2. A new target assignment when the group epoch moved past it.
        self._admit(member, new, before_subscription, topics, topic_names)
        # 3. Reconcile the member towards its target.
        self._reconcile(member, request.owned, now_ms)
        member.session_deadline_ms = now_ms + self.consumer.session_timeout_ms
        full_request = request.member_epoch == 0 or (
            request.rebalance_timeout_ms != -1
            and request.subscribed_topic_names is not None
            and request.owned is not None
        )
        changed = before_assigned != member.assigned
        return HeartbeatResult(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.consumer.heartbeat_interval_ms,
            assignment=(
                {t: set(p) for t, p in member.assigned.items()} if full_request or changed else None
            ),
        )

    def _resolve_regexes(self, topic_names: TopicNames | None) -> None:
        """Kafka's regular expression refresh: each subscribed pattern against every topic
        (full match, internal topics left out). Without ``topic_names`` the previous
        resolution stands."""
        patterns = {
            m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex
        }
        if topic_names is None:
            self.regex_topics = {p: t for p, t in self.regex_topics.items() if p in patterns}
            return
        names = [name for name in topic_names() if name not in INTERNAL_TOPICS]
        resolved: dict[str, frozenset[str]] = {}
        for pattern in patterns:
            try:
                compiled = compile_regex(pattern)
            except HeartbeatError:
                resolved[pattern] = frozenset()
                continue
            resolved[pattern] = frozenset(name for name in names if compiled.fullmatch(name))
        self.regex_topics = resolved

    def _refresh_subscription_metadata(
        self, topics: ConsumerTopicLookup, topic_names: TopicNames | None = None
    ) -> bool:
        """The subscribed topics' ids, partition counts and partition racks; True when they
        changed (Kafka compares its metadata hash of the same facts)."""
        self._resolve_regexes(topic_names)
        names = sorted({n for m in self.members.values() for n in self.member_topics(m)})
        metadata = {}
        for name in names:
            found = topics(name)
            if found is not None:
                metadata[name] = found
        if metadata == self.subscription_metadata:
            return False
        self.subscription_metadata = metadata
        return True

    def prime_metadata(self, topics: ConsumerTopicLookup, topic_names: TopicNames | None) -> None:
        """Right after a load: the subscribed topics as they are now, taken as the ones the
        target was computed for (Kafka keeps them in a record; without it, the first heartbeat
        would see them all as new and bump the group epoch)."""
        self._refresh_subscription_metadata(topics, topic_names)

    def refresh_metadata(
        self, topics: ConsumerTopicLookup, now_ms: int, topic_names: TopicNames | None = None
    ) -> list[Record]:
        """The topics changed (created, deleted, partitions added): bump the group epoch if
        the group's subscribed topics did, so the next heartbeat computes a new target."""
        before = self._persisted()
        if self.members and self._refresh_subscription_metadata(topics, topic_names):
            self.group_epoch += 1
            self._update_state(now_ms)
        return self._diff(before, self._persisted())

    def _compute_target(self) -> None:
        """Kafka's updateTargetAssignment: run the assignor over every member."""
        ids = {name: found[0] for name, found in self.subscription_metadata.items()}
        counts = {found[0]: found[1] for found in self.subscription_metadata.values()}
        subscriptions = {
            member_id: {ids[name] for name in self.member_topics(member) if name in ids}
            for member_id, member in self.members.items()
        }
        self.target = assignors.assign(
            self.preferred_assignor(), subscriptions, counts, self.target
        )
        self.assignment_epoch = self.group_epoch

    def _reconcile(self, member: ConsumerMember, owned: Partitions | None, now_ms: int) -> None:
        """Kafka's maybeReconcile with CurrentAssignmentBuilder.build."""
        target_epoch = self.assignment_epoch
        if member.is_reconciled_to(target_epoch):
            return
        before = (member.member_epoch, member.state, freeze(member.assigned))
        target = self.target.get(member.member_id, {})
        if member.state == MemberState.STABLE:
            self._next_assignment(member, member.member_epoch, target, owned)
        elif member.state == MemberState.UNREVOKED_PARTITIONS:
            if not _owns_any(owned, member.pending_revocation):
                self._next_assignment(member, member.member_epoch + 1, target, owned)
        elif member.state == MemberState.UNRELEASED_PARTITIONS:
            self._next_assignment(member, member.member_epoch, target, owned)
        else:  # UNKNOWN: only a member that gave up everything carries on
            if owned is None or any(owned.values()):
                raise HeartbeatError(
                    Error.FENCED_MEMBER_EPOCH,
                    "The consumer group member is in a unknown state. The member must "
                    "abandon all its partitions and rejoin.",
                )
            self._next_assignment(member, target_epoch, target, owned)
        if (member.member_epoch, member.state, freeze(member.assigned)) != before:
            if member.state == MemberState.UNREVOKED_PARTITIONS:
                member.rebalance_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
            else:
                member.rebalance_deadline_ms = None

    def _next_assignment(
        self,
        member: ConsumerMember,
        member_epoch: int,
        target: Partitions,
        owned: Partitions | None,
    ) -> None:
        """CurrentAssignmentBuilder.computeNextAssignment."""
        epochs = self.partition_epochs()
        unreleased = False
        assigned: Partitions = {}
        revoking: Partitions = {}
        pending: Partitions = {}
        for topic in set(target) | set(member.assigned):
            wanted = target.get(topic, set())
            current = member.assigned.get(topic, set())
            keep = current & wanted
            give_up = current - keep
            to_add = set()
            for partition in wanted - keep:
                holder = epochs.get((topic, partition), -1)
                if holder != -1 and not (
                    partition in member.assigned.get(topic, set())
                    or partition in member.pending_revocation.get(topic, set())
                ):
                    unreleased = True
                else:
                    to_add.add(partition)
            if keep:
                assigned[topic] = keep
            if give_up:
                revoking[topic] = give_up
            if to_add:
                pending[topic] = to_add
        if revoking and _owns_any(owned, revoking):
            member.state = MemberState.UNREVOKED_PARTITIONS
            self._set_epoch(member, member_epoch)
            member.assigned = assigned
            member.pending_revocation = revoking
            return
        for topic, parts in pending.items():
            assigned.setdefault(topic, set()).update(parts)
        member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        self._set_epoch(member, self.assignment_epoch)
        member.assigned = assigned
        member.pending_revocation = {}

    @staticmethod
    def _set_epoch(member: ConsumerMember, epoch: int) -> None:
        """ConsumerGroupMember.Builder.updateMemberEpoch."""
        if epoch != member.member_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = epoch

    # -- leaving and fencing ---------------------------------------------------------------------

    def _leave(self, request: HeartbeatRequest, now_ms: int) -> HeartbeatResult:
        """Kafka's consumerGroupLeave."""
        result = HeartbeatResult(member_id=request.member_id, member_epoch=request.member_epoch)
        if request.instance_id is None:
            member = self.members.get(request.member_id)
            if member is None:
                raise HeartbeatError(
                    Error.UNKNOWN_MEMBER_ID,
                    f"Member {request.member_id} is not a member of group {self.group_id}.",
                )
            self._fence_or_downgrade(member)
            return result
        existing_id = self.static_members.get(request.instance_id)
        member = self.members.get(existing_id) if existing_id is not None else None
        if member is None:
            raise HeartbeatError(
                Error.UNKNOWN_MEMBER_ID, f"Instance id {request.instance_id} is unknown."
            )
        if member.member_id != request.member_id:
            raise HeartbeatError(
                Error.FENCED_INSTANCE_ID,
                f"Static member {request.member_id} with instance id {request.instance_id} "
                f"was fenced by member {member.member_id}.",
            )
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # Gone for now: its partitions stay its own until its session expires.
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            member.pending_revocation = {}
            member.rebalance_deadline_ms = None
            result.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            return result
        self._fence_or_downgrade(member)
        return result

    def _fence_or_downgrade(self, member: ConsumerMember) -> None:
        if self._downgrades_without(member):
            self.downgrade_leaving = member.member_id
        else:
            self._fence(member)

    def _downgrades_without(self, member: ConsumerMember) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember: the last consumer-protocol
        member goes, classic members remain, the policy allows a downgrade and they fit in a
        classic group."""
        others = [m for m in self.members.values() if m is not member]
        return (
            member.classic is None
            and bool(others)
            and all(m.classic is not None for m in others)
            and self.consumer.downgrade_enabled
            and len(others) <= self.settings.max_size
        )

    def _fence(self, member: ConsumerMember) -> None:
        """Kafka's consumerGroupFenceMember: the member, its target and its partitions go;
        the group epoch is bumped so the others are given its partitions."""
        self._remove_member(member)
        self.group_epoch += 1

    def downgrade_still_valid(self, now_ms: int) -> tuple[bool, list[Record]]:
        """Just before the service downgrades the group: whether `downgrade_leaving` still
        makes it classic (a consumer-protocol member may have joined while a write was
        awaited). If not, that member is fenced as usual and the records to write returned."""
        leaving = self.members.get(self.downgrade_leaving or "")
        if leaving is not None and self._downgrades_without(leaving):
            return True, []
        self.downgrade_leaving = None
        if leaving is None:
            return False, []
        before = self._persisted()
        self._fence(leaving)
        self._update_state(now_ms)
        return False, self._diff(before, self._persisted())

    def _remove_member(self, member: ConsumerMember) -> None:
        """Kafka's removeMember, without the group epoch bump."""
        del self.members[member.member_id]
        self.target.pop(member.member_id, None)
        if member.instance_id is not None and (
            self.static_members.get(member.instance_id) == member.member_id
        ):
            del self.static_members[member.instance_id]
        self._resolve_regexes(None)
        names = {n for m in self.members.values() for n in self.member_topics(m)}
        self.subscription_metadata = {
            name: found for name, found in self.subscription_metadata.items() if name in names
        }

    def expire(self, now_ms: int) -> list[Record]:  # type: ignore[override]
        """Fence the members whose session expired or that did not revoke in time."""
        before = self._persisted()
        for member in list(self.members.values()):
            revoke_late = (
                member.rebalance_deadline_ms is not None
                and member.rebalance_deadline_ms <= now_ms
                and member.state == MemberState.UNREVOKED_PARTITIONS
            )
            join_late = any(
                deadline is not None and deadline <= now_ms
                for deadline in (member.join_deadline_ms, member.sync_deadline_ms)
            )
            if member.session_deadline_ms <= now_ms or revoke_late or join_late:
                if self._downgrades_without(member):
                    self.downgrade_leaving = member.member_id
                    break
                self._fence(member)
        self._update_state(now_ms)
        return self._diff(before, self._persisted())

    # -- migration between the protocols (Kafka 4's online upgrade and downgrade) ----------------

    @classmethod
    def from_classic(
        cls,
        classic: Group,
        consumer: ConsumerSettings,
        topics: ConsumerTopicLookup,
        now_ms: int,
    ) -> "tuple[ConsumerGroup, list[Record]]":
        """Kafka's ConsumerGroup.fromClassicGroup (online upgrade): the group epoch and the
        target assignment epoch are the classic generation; each classic member stays, as a
        member using the classic protocol, at that epoch, Stable, its last assignment (read
        from its ConsumerProtocolAssignment) both its current and its target assignment. The
        records are Kafka's createConsumerGroupRecords. Raises EmbeddedProtocolError for a
        malformed subscription or assignment. Departure: a member with no assignment yet (a
        group converted mid-rebalance) starts with none, where Kafka fails to parse it."""
        group = cls(classic.group_id, classic.settings, consumer, now_ms)
        group.group_epoch = group.assignment_epoch = classic.generation
        for old in classic.members.values():
            metadata = old.metadata(classic.protocol_name) or (
                old.protocols[0][1] if old.protocols else b""
            )
            subscription = decode_subscription(metadata)
            assigned = _by_id(decode_assignment(old.assignment) if old.assignment else {}, topics)
            member = ConsumerMember(
                old.member_id,
                instance_id=old.group_instance_id,
                rack_id=subscription.rack_id,
                client_id=old.client_id,
                client_host=old.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                rebalance_timeout_ms=old.rebalance_timeout_ms,
                member_epoch=classic.generation,
                previous_member_epoch=classic.generation,
                assigned=assigned,
                classic=ClassicMemberMetadata(old.session_timeout_ms, tuple(old.protocols)),
                session_deadline_ms=now_ms + old.session_timeout_ms,
            )
            group.members[member.member_id] = member
            if member.instance_id is not None:
                group.static_members[member.instance_id] = member.member_id
            group.target[member.member_id] = {t: set(p) for t, p in assigned.items()}
        group.prime_metadata(topics, None)
        group._update_state(now_ms)
        return group, group._diff({}, group._persisted())

    def to_classic(self, now_ms: int) -> Group:
        """Kafka's ClassicGroup.fromConsumerGroup (online downgrade, once the last
        consumer-protocol member leaves, `downgrade_leaving`): a Stable classic group at the
        group epoch with the remaining members, each given its target assignment encoded in
        its subscription's version; then, as Kafka's convertToClassicGroup, a rebalance is
        prepared so that they rejoin."""
        classic = Group(self.group_id, self.settings, now_ms)
        classic.generation = self.group_epoch
        classic.protocol_type = "consumer"
        for member in self.members.values():
            if member.member_id == self.downgrade_leaving or member.classic is None:
                continue
            classic.members[member.member_id] = Member(
                member.member_id,
                member.instance_id,
                member.client_id,
                member.client_host,
                member.rebalance_timeout_ms,
                member.classic.session_timeout_ms,
                "consumer",
                list(member.classic.protocols),
                session_deadline_ms=now_ms + member.classic.session_timeout_ms,
            )
            if member.instance_id is not None:
                classic.static_members[member.instance_id] = member.member_id
        classic.protocol_name = classic._select_protocol()
        for member_id, old in classic.members.items():
            try:
                version = version_of(old.metadata(classic.protocol_name))
            except EmbeddedProtocolError:
                version = 0
            old.assignment = encode_assignment(
                self._by_name(self.target.get(member_id, {})), version
            )
        classic.state = GroupState.STABLE
        classic.state_timestamp_ms = now_ms
        return classic

    def _by_name(self, partitions: Partitions) -> dict[str, set[int]]:
        names = {found[0]: name for name, found in self.subscription_metadata.items()}
        return {names[t]: set(p) for t, p in partitions.items() if t in names and p}

    # -- the classic APIs on a consumer group ----------------------------------------------------
    #
    # Kafka's classicGroupJoinToConsumerGroup, classicGroupSyncToConsumerGroup,
    # classicGroupHeartbeatToConsumerGroup and classicGroupLeaveToConsumerGroup: a consumer
    # (protocol type `consumer`) on the classic protocol is a member of a consumer group like
    # any other; its JoinGroup is its heartbeat with a full subscription, answered at once with
    # its member epoch as the generation and no leader (it computes no assignment), and its
    # SyncGroup hands it its current assignment computed by the server-side assignor. It is
    # told to rejoin (REBALANCE_IN_PROGRESS on Heartbeat) when the group epoch moved past its
    # own, when it must revoke partitions, or when partitions it waits for were released.

    def _supports_classic(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's ConsumerGroup.supportsClassicProtocols: the consumer protocol type and a
        protocol every classic member supports."""
        if protocol_type != "consumer":
            return False
        names = {name for name, _ in protocols}
        classic = [m for m in self.members.values() if m.classic is not None]
        if not self.members:
            return bool(names)
        return any(
            all(name in {n for n, _ in m.classic.protocols} for m in classic if m.classic)
            for name in names
        )

    def classic_join(
        self,
        request: JoinRequest,
        topics: ConsumerTopicLookup,
        now_ms: int,
        topic_names: TopicNames | None = None,
    ) -> tuple[JoinResult, list[Record]]:
        """A JoinGroup (Kafka's classicGroupJoinToConsumerGroup): the answer and the records
        to write before it is given. On an error nothing changed."""
        before = self._persisted()
        member_id = request.member_id or new_member_id()
        if self._is_full(member_id):
            return JoinResult(Error.GROUP_MAX_SIZE_REACHED, member_id=request.member_id), []
        if not self._supports_classic(request.protocol_type, request.protocols):
            return JoinResult(Error.INCONSISTENT_GROUP_PROTOCOL, member_id=request.member_id), []
        instance_id = request.group_instance_id
        if request.member_id == "" and instance_id is None and request.require_known_member_id:
            return JoinResult(Error.MEMBER_ID_REQUIRED, member_id=member_id), []
        try:
            subscription = decode_subscription(request.protocols[0][1])
        except EmbeddedProtocolError:
            # Kafka throws an IllegalStateException ("Malformed embedded consumer protocol in
            # subscription deserialization."): UNKNOWN_SERVER_ERROR.
            return JoinResult(Error.UNKNOWN_SERVER_ERROR, member_id=request.member_id), []
        # The member: found, new, or a static member's new incarnation taking over.
        if instance_id is None:
            member = self.members.get(member_id) or ConsumerMember(member_id)
        else:
            existing_id = self.static_members.get(instance_id)
            existing = self.members.get(existing_id) if existing_id is not None else None
            if existing is None:
                member = ConsumerMember(member_id)
            elif existing.member_id == member_id:
                member = existing
            elif request.member_id != "":
                return JoinResult(Error.FENCED_INSTANCE_ID, member_id=request.member_id), []
            else:
                member = ConsumerMember(
                    member_id,
                    member_epoch=existing.member_epoch,
                    previous_member_epoch=existing.previous_member_epoch,
                    state=existing.state,
                    assigned={t: set(p) for t, p in existing.assigned.items()},
                    pending_revocation={t: set(p) for t, p in existing.pending_revocation.items()},
                    subscribed_topic_names=existing.subscribed_topic_names,
                    server_assignor=existing.server_assignor,
                )
                del self.members[existing.member_id]
                target = self.target.pop(existing.member_id, None)
                if target is not None:
                    self.target[member_id] = target
        new = member.member_id not in self.members
        before_subscription = (
            member.subscribed_topic_names,
            member.subscribed_topic_regex,
            member.server_assignor,
        )
        member.instance_id = instance_id if instance_id is not None else member.instance_id
        if subscription.rack_id is not None:
            member.rack_id = subscription.rack_id
        if request.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.subscribed_topic_names = tuple(sorted(set(subscription.topics)))
        member.subscribed_topic_regex = None
        member.client_id = request.client_id
        member.client_host = request.client_host
        member.classic = ClassicMemberMetadata(request.session_timeout_ms, tuple(request.protocols))
        member.join_deadline_ms = None
        self._admit(member, new, before_subscription, topics, topic_names)
        self._reconcile(member, _by_id(subscription.owned, topics), now_ms)
        member.session_deadline_ms = now_ms + request.session_timeout_ms
        member.sync_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
        self._update_state(now_ms)
        answer = JoinResult(
            Error.NONE,
            generation=member.member_epoch,
            protocol_type="consumer",
            protocol_name=member.protocol_name,
            leader="",
            member_id=member.member_id,
        )
        return answer, self._diff(before, self._persisted())

    def _classic_member(
        self, member_id: str, instance_id: str | None
    ) -> tuple[ConsumerMember | None, Error]:
        """Kafka's validateConsumerGroupMember and throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = self.members.get(member_id)
        else:
            known = self.static_members.get(instance_id)
            member = self.members.get(known) if known is not None else None
            if member is not None and member.member_id != member_id:
                return None, Error.FENCED_INSTANCE_ID
        if member is None or member.classic is None:
            return None, Error.UNKNOWN_MEMBER_ID
        return member, Error.NONE

    def classic_sync(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        now_ms: int,
    ) -> SyncResult:
        """A SyncGroup (Kafka's classicGroupSyncToConsumerGroup): the member's current
        assignment as a ConsumerProtocolAssignment in its subscription's version."""
        member, error = self._classic_member(member_id, instance_id)
        if member is None:
            return SyncResult(error)
        if generation != member.member_epoch:
            return SyncResult(Error.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != "consumer") or (
            protocol_name is not None and protocol_name != member.protocol_name
        ):
            return SyncResult(Error.INCONSISTENT_GROUP_PROTOCOL)
        if (
            self.group_epoch > member.member_epoch
            and member.state != MemberState.UNREVOKED_PARTITIONS
        ):
            member.join_deadline_ms = member.join_deadline_ms or (
                now_ms + max(member.rebalance_timeout_ms, 0)
            )
            return SyncResult(Error.REBALANCE_IN_PROGRESS)
        assert member.classic is not None
        member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        member.sync_deadline_ms = None
        try:
            version = version_of(member.classic.protocols[0][1])
        except EmbeddedProtocolError:
            version = 0
        return SyncResult(
            Error.NONE,
            protocol_type,
            protocol_name,
            encode_assignment(self._by_name(member.assigned), version),
        )

    def _waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Kafka's waitingOnUnreleasedPartition: a partition of its target still held by
        another member."""
        epochs = self.partition_epochs()
        for topic, parts in self.target.get(member.member_id, {}).items():
            for partition in parts - member.assigned.get(topic, set()):
                if epochs.get((topic, partition), -1) != -1:
                    return True
        return False

    def classic_heartbeat(
        self, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> Error:
        """A Heartbeat (Kafka's classicGroupHeartbeatToConsumerGroup)."""
        member, error = self._classic_member(member_id, instance_id)
        if member is None:
            return error
        if generation != member.member_epoch:
            return Error.ILLEGAL_GENERATION
        assert member.classic is not None
        member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        if (
            member.member_epoch < self.group_epoch
            or member.state == MemberState.UNREVOKED_PARTITIONS
            or (
                member.state == MemberState.UNRELEASED_PARTITIONS
                and not self._waiting_on_unreleased(member)
            )
        ):
            if member.join_deadline_ms is None:
                member.join_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
            return Error.REBALANCE_IN_PROGRESS
        return Error.NONE

    def classic_leave(
        self, members: Iterable[tuple[str, str | None]], now_ms: int
    ) -> tuple[list[Error], list[Record]]:
        """A LeaveGroup (Kafka's classicGroupLeaveToConsumerGroup): each classic member named
        goes, and the group epoch is bumped once. Kafka does not downgrade the group here."""
        before = self._persisted()
        errors = []
        removed = False
        for member_id, instance_id in members:
            if instance_id is None:
                member = self.members.get(member_id)
            else:
                known = self.static_members.get(instance_id)
                member = self.members.get(known) if known is not None else None
                if member is not None and member_id and member.member_id != member_id:
                    errors.append(Error.FENCED_INSTANCE_ID)
                    continue
            if member is None or member.classic is None:
                errors.append(Error.UNKNOWN_MEMBER_ID)
                continue
            self._remove_member(member)
            removed = True
            errors.append(Error.NONE)
        if removed:
            self.group_epoch += 1
            self._update_state(now_ms)
        return errors, self._diff(before, self._persisted())

    # The generic classic entry points (the service calls the classic_* ones above).

    def join(self, request: JoinRequest, now_ms: int) -> JoinOutcome:
        return None, JoinResult(Error.INCONSISTENT_GROUP_PROTOCOL, member_id=request.member_id)

    def sync(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        assignments: dict[str, bytes],
        now_ms: int,
    ) -> tuple[Member | None, SyncResult | None, bool]:
        answer = self.classic_sync(member_id, instance_id, generation, None, None, now_ms)
        return None, answer, False

    def heartbeat(
        self, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> Error:
        return self.classic_heartbeat(member_id, instance_id, generation, now_ms)

    def leave(self, member_id: str, instance_id: str | None, now_ms: int) -> Error:
        return Error.UNKNOWN_MEMBER_ID

    def unload(self) -> None:
        self._set_state(ConsumerGroupState.DEAD)

    def mark_dead(self, now_ms: int) -> None:
        self._set_state(ConsumerGroupState.DEAD)
        self.state_timestamp_ms = now_ms

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
        """Kafka 4: a consumer group's offsets expire once it has been empty for the
        retention period (as a classic group with a protocol)."""
        if self.members or self.consumer_state == ConsumerGroupState.DEAD:
            return []
        if self.state_timestamp_ms + retention_ms <= now_ms:
            pending = self.pending_txn_keys()
            return [key for key in self.offsets if key not in pending]
        return []

    # -- offsets ---------------------------------------------------------------------------------

    def validate_offset_commit(self, member_id: str, member_epoch: int) -> Error:
        """Kafka's ConsumerGroup.validateOffsetCommit: an epoch below zero commits only to an
        empty group (admin, manual assignment); else the member must exist and name its
        current epoch (STALE_MEMBER_EPOCH otherwise)."""
        if member_epoch < 0 and not self.members:
            return Error.NONE
        member = self.members.get(member_id)
        if member is None:
            return Error.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            # A classic member commits with its generation (Kafka: ILLEGAL_GENERATION).
            return Error.ILLEGAL_GENERATION if member.classic else Error.STALE_MEMBER_EPOCH
        return Error.NONE

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> Error:
        """Kafka's validateOffsetFetch: only a member asking with its epoch is checked."""
        if member_epoch < 0 and not member_id:
            return Error.NONE
        member = self.members.get(member_id or "")
        if member is None:
            return Error.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return Error.STALE_MEMBER_EPOCH
        return Error.NONE


def _by_id(partitions: dict[str, set[int]], topics: ConsumerTopicLookup) -> Partitions:
    """Partitions by topic name, by topic id (unknown topics and partitions left out)."""
    out: Partitions = {}
    for name, parts in partitions.items():
        found = topics(name)
        if found is None:
            continue
        topic_id, count = found[0], found[1]
        valid = {p for p in parts if 0 <= p < count}
        if valid:
            out.setdefault(topic_id, set()).update(valid)
    return out


def is_consumer_group(group: Group | None) -> bool:
    return isinstance(group, ConsumerGroup)


__all__ = [
    "ConsumerGroup",
    "ConsumerGroupState",
    "ConsumerMember",
    "ConsumerSettings",
    "GroupState",
    "HeartbeatError",
    "HeartbeatRequest",
    "HeartbeatResult",
    "MemberState",
    "validate",
]
