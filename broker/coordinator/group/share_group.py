"""One share group (KIP-932) as the group coordinator runs it for ShareGroupHeartbeat v1.

It lives in coordinator/group/ because Kafka's does: share groups are groups of the group
coordinator (``org.apache.kafka.coordinator.group.modern.share.ShareGroup`` and
``GroupMetadataManager.shareGroupHeartbeat``, records in ``__consumer_offsets``, one group id
namespace with the classic and consumer groups); the share coordinator (``__share_group_state``)
keeps only the share partitions' delivery state. Pure state with time passed in
(milliseconds), tested without I/O (tests/unit/test_share_group.py). It reuses the consumer
group protocol's pieces: its HeartbeatError, its Partitions and ConsumerTopicLookup types, its
freeze/thaw of partition sets, and the assignors module (``simple`` is there).

The rules, Kafka 4.4's:

- the member id is chosen by the client (v1) and must not be empty; epoch 0 joins (the
  subscription by topic names must be given), a positive epoch heartbeats, -1 leaves; any
  other epoch is INVALID_REQUEST;
- a heartbeat of a member the group does not have (epoch > 0, or -1) is UNKNOWN_MEMBER_ID;
  one whose epoch is not the member's is FENCED_MEMBER_EPOCH; a new member past
  ``group.share.max.size`` is GROUP_MAX_SIZE_REACHED; epoch 0 from a member the group
  already has answers its current epoch and assignment (a join whose answer was lost);
- the group epoch is bumped when a member joins, leaves or is fenced, changes its
  subscribed topic names, or when the subscribed topics' partitions change (a topic created,
  deleted or grown: compared through a hash of their metadata, as ShareGroupMetadata's
  MetadataHash); the target assignment is then recomputed by the ``simple`` assignor, which
  may give a partition to several members;
- there is no revocation (partitions are shared, a member losing one only stops fetching
  it): a member goes straight to the target assignment and its epoch to the assignment
  epoch (Kafka's ShareGroupAssignmentBuilder); the heartbeat answers the assignment on
  joining, on a full request (the subscription sent) or when the member's partitions changed;
- a member that does not heartbeat within ``group.share.session.timeout.ms`` is fenced
  (removed, group epoch bumped);
- what changed is returned as records in Kafka's layouts (ShareGroupMetadata 11,
  ShareGroupMemberMetadata 10, ShareGroupTargetAssignmentMetadata 12,
  ShareGroupTargetAssignmentMember 13, ShareGroupCurrentMemberAssignment 14), tombstones for a
  member removed (their bytes: share_log_format.py), and ``replay`` rebuilds the group from
  them.

The group also holds ``state_partitions`` (share_offsets.ShareStatePartitions, Kafka's
ShareGroupStatePartitionMetadataInfo: which share partitions have state), written as its
ShareGroupStatePartitionMetadata record (15) by the service, which decides when it changes;
``replay`` reads it back and ``tombstones`` deletes it with the group.

Departures: the metadata hash is a BLAKE2b of the subscribed topics' names, ids and partition
counts, not Kafka's Murmur3 of the same (it is compared only with itself, never across
brokers of different kinds); the group is not a ``Group`` of state.py (listing, describing
and deleting share groups are the service's).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from minibroker.coordinator.group import assignors
from minibroker.coordinator.group.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    ConsumerTopicLookup,
    HeartbeatError,
    Partitions,
)
from minibroker.coordinator.group.consumer_log_format import freeze, thaw
from minibroker.coordinator.group.share_log_format import (
    ShareCurrentAssignmentValue,
    ShareGroupMetadataValue,
    ShareMemberMetadataValue,
    ShareRecordKey,
    ShareRecordKind,
    ShareStatePartitionMetadataValue,
    ShareTargetMemberValue,
    ShareTargetMetadataValue,
)
from minibroker.coordinator.group.share_offsets import ShareStatePartitions
from minibroker.protocol.errors import Error

ShareRecord = tuple[ShareRecordKey, object | None]


class ShareGroupState(Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ShareSettings:
    """The broker's group.share.* settings (Kafka 4.4's defaults)."""

    heartbeat_interval_ms: int = 5_000
    session_timeout_ms: int = 45_000
    max_size: int = 200


@dataclass(frozen=True)
class ShareHeartbeatRequest:
    """A ShareGroupHeartbeat v1 (None: unchanged since the last one)."""

    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass
class ShareHeartbeatResult:
    error: Error = Error.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    # The member's partitions; None when unchanged.
    assignment: Partitions | None = None


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: Partitions = field(default_factory=dict)
    deadline_ms: int = 0


def validate(request: ShareHeartbeatRequest, group_id: str) -> None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid."""

    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(Error.INVALID_REQUEST, message)

    if group_id == "":
        raise invalid("GroupId can't be empty.")
    if request.rack_id == "":
        raise invalid("RackId can't be empty.")
    if request.member_id == "":
        raise invalid("MemberId can't be empty.")
    epoch = request.member_epoch
    if epoch == 0:
        if not request.subscribed_topic_names:
            raise invalid("SubscribedTopicNames must be set in first request.")
    elif epoch < 0 and epoch != LEAVE_GROUP_MEMBER_EPOCH:
        raise invalid(f"MemberEpoch is {epoch}, but must be greater than or equal to -1.")


def metadata_hash(topics: Iterable[str], lookup: ConsumerTopicLookup) -> int:
    """A signed 64-bit hash of the subscribed topics' names, ids, partition counts and, with
    racks, each partition's sorted replica racks (Kafka 4.4's Utils.computeTopicHash covers
    the same facts, KIP-1101; with xxh3 and its own layout, so the values differ)."""
    digest = hashlib.blake2b(digest_size=8)
    for name in sorted(set(topics)):
        found = lookup(name)
        if found is None:
            continue
        topic_id, count = found[0], found[1]
        digest.update(f"{name}\0{topic_id}\0{count}\0".encode())
        if len(found) > 2 and any(found[2]):
            digest.update(repr(found[2]).encode())
    return int.from_bytes(digest.digest(), "big", signed=True)


class ShareGroup:
    """A share group: members, the group epoch, the target assignment."""

    def __init__(self, group_id: str, settings: ShareSettings | None = None) -> None:
        self.group_id = group_id
        self.settings = settings or ShareSettings()
        self.members: dict[str, ShareMember] = {}
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.metadata_hash = 0
        self.target: dict[str, Partitions] = {}
        self.state_partitions = ShareStatePartitions()

    # -- reading --------------------------------------------------------------------------

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def next_deadline_ms(self) -> int | None:
        return min((m.deadline_ms for m in self.members.values()), default=None)

    # -- the heartbeat ----------------------------------------------------------------------

    def heartbeat(
        self, request: ShareHeartbeatRequest, topics: ConsumerTopicLookup, now_ms: int
    ) -> tuple[ShareHeartbeatResult, list[ShareRecord]]:
        """Kafka's shareGroupHeartbeat: the answer and the records to write before it."""
        before = self._persisted()
        try:
            validate(request, self.group_id)
            if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                result = self._leave(request, topics)
            else:
                result = self._heartbeat(request, topics, now_ms)
        except HeartbeatError as error:
            return ShareHeartbeatResult(error.error, error.message), []
        return result, self._diff(before, self._persisted())

    def _heartbeat(
        self, request: ShareHeartbeatRequest, topics: ConsumerTopicLookup, now_ms: int
    ) -> ShareHeartbeatResult:
        member = self.members.get(request.member_id)
        joining = request.member_epoch == 0
        created = member is None
        if member is None:
            if not joining:
                raise HeartbeatError(
                    Error.UNKNOWN_MEMBER_ID,
                    f"Member {request.member_id} is not a member of group {self.group_id}.",
                )
            if len(self.members) >= self.settings.max_size:
                raise HeartbeatError(
                    Error.GROUP_MAX_SIZE_REACHED,
                    f"The share group has reached its maximum capacity of "
                    f"{self.settings.max_size} members.",
                )
            member = ShareMember(request.member_id)
            self.members[member.member_id] = member
            self.group_epoch += 1
        elif not joining and request.member_epoch != member.member_epoch:
            raise HeartbeatError(
                Error.FENCED_MEMBER_EPOCH,
                f"The share group member has a smaller or larger member epoch "
                f"({request.member_epoch}) than the one known by the group coordinator "
                f"({member.member_epoch}). The member must abandon all its partitions and "
                "rejoin.",
            )
        changed = False
        if request.subscribed_topic_names is not None and (
            tuple(request.subscribed_topic_names) != member.subscribed_topic_names
        ):
            member.subscribed_topic_names = tuple(request.subscribed_topic_names)
            changed = True
        if request.rack_id is not None and request.rack_id != member.rack_id:
            member.rack_id = request.rack_id
        member.client_id = request.client_id
        member.client_host = request.client_host
        if changed and not created:
            self.group_epoch += 1
        self._refresh_metadata(topics)
        if self.group_epoch > self.assignment_epoch:
            self._compute_target(topics)
        member.deadline_ms = now_ms + self.settings.session_timeout_ms
        previous_assignment = member.assigned
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
            member.assigned = self.target.get(member.member_id, {})
        # Kafka: on joining, on a full request (the subscription sent), or when it changed.
        send = (
            joining
            or request.subscribed_topic_names is not None
            or previous_assignment != member.assigned
        )
        return ShareHeartbeatResult(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            assignment={t: set(p) for t, p in member.assigned.items()} if send else None,
        )

    def _leave(
        self, request: ShareHeartbeatRequest, topics: ConsumerTopicLookup
    ) -> ShareHeartbeatResult:
        member = self.members.get(request.member_id)
        if member is None:
            raise HeartbeatError(
                Error.UNKNOWN_MEMBER_ID,
                f"Member {request.member_id} is not a member of group {self.group_id}.",
            )
        self._remove(member, topics)
        return ShareHeartbeatResult(
            member_id=request.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH
        )

    def _remove(self, member: ShareMember, topics: ConsumerTopicLookup) -> None:
        del self.members[member.member_id]
        self.group_epoch += 1
        self._refresh_metadata(topics)
        self._compute_target(topics)

    def expire(
        self, topics: ConsumerTopicLookup, now_ms: int
    ) -> tuple[list[str], list[ShareRecord]]:
        """Fence the members whose session expired: their ids and the records to write."""
        before = self._persisted()
        fenced = sorted(m.member_id for m in self.members.values() if m.deadline_ms <= now_ms)
        for member_id in fenced:
            self._remove(self.members[member_id], topics)
        return fenced, self._diff(before, self._persisted())

    def _refresh_metadata(self, topics: ConsumerTopicLookup) -> None:
        new_hash = metadata_hash(self.subscribed_topics(), topics)
        if new_hash != self.metadata_hash:
            self.metadata_hash = new_hash
            # One bump per change: not again if this heartbeat already bumped the epoch.
            if self.members and self.group_epoch <= self.assignment_epoch:
                self.group_epoch += 1

    def _compute_target(self, topics: ConsumerTopicLookup) -> None:
        ids: dict[str, uuid.UUID] = {}
        counts: dict[uuid.UUID, int] = {}
        for name in self.subscribed_topics():
            found = topics(name)
            if found is not None:
                ids[name], counts[found[0]] = found[0], found[1]
        subscriptions = {
            m.member_id: {ids[t] for t in m.subscribed_topic_names if t in ids}
            for m in self.members.values()
        }
        self.target = assignors.simple(subscriptions, counts)
        self.assignment_epoch = self.group_epoch

    # -- records ----------------------------------------------------------------------------

    def _persisted(self) -> dict[ShareRecordKey, object]:
        g = self.group_id
        records: dict[ShareRecordKey, object] = {
            ShareRecordKey(ShareRecordKind.GROUP_METADATA, g): ShareGroupMetadataValue(
                self.group_epoch, self.metadata_hash
            ),
            ShareRecordKey(ShareRecordKind.TARGET_METADATA, g): ShareTargetMetadataValue(
                self.assignment_epoch
            ),
        }
        for m in self.members.values():
            records[ShareRecordKey(ShareRecordKind.MEMBER_METADATA, g, m.member_id)] = (
                ShareMemberMetadataValue(
                    m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names
                )
            )
            records[ShareRecordKey(ShareRecordKind.CURRENT_ASSIGNMENT, g, m.member_id)] = (
                ShareCurrentAssignmentValue(
                    m.member_epoch, m.previous_member_epoch, 0, freeze(m.assigned)
                )
            )
        for member_id, partitions in self.target.items():
            records[ShareRecordKey(ShareRecordKind.TARGET_MEMBER, g, member_id)] = (
                ShareTargetMemberValue(freeze(partitions))
            )
        return records

    @staticmethod
    def _diff(
        before: dict[ShareRecordKey, object], after: dict[ShareRecordKey, object]
    ) -> list[ShareRecord]:
        """Kafka's order: a removed member's current assignment, target and metadata
        tombstones, then the changed values (members' metadata, group epoch, target, current
        assignments)."""
        order = {
            ShareRecordKind.CURRENT_ASSIGNMENT: 0,
            ShareRecordKind.TARGET_MEMBER: 1,
            ShareRecordKind.MEMBER_METADATA: 2,
        }
        removed = sorted(
            (k for k in before if k not in after),
            key=lambda k: (order.get(k.kind, 3), k.member_id or ""),
        )
        put_order = {
            ShareRecordKind.MEMBER_METADATA: 0,
            ShareRecordKind.GROUP_METADATA: 1,
            ShareRecordKind.TARGET_MEMBER: 2,
            ShareRecordKind.TARGET_METADATA: 3,
            ShareRecordKind.CURRENT_ASSIGNMENT: 4,
        }
        changed = sorted(
            (k for k, v in after.items() if before.get(k) != v),
            key=lambda k: (put_order.get(k.kind, 5), k.member_id or ""),
        )
        return [(k, None) for k in removed] + [(k, after[k]) for k in changed]

    def state_partitions_record(self, value: ShareStatePartitions) -> ShareRecord:
        """The ShareGroupStatePartitionMetadata record of ``value``."""
        key = ShareRecordKey(ShareRecordKind.STATE_PARTITION_METADATA, self.group_id)
        return key, value.value()

    def tombstones(self) -> list[ShareRecord]:
        """Kafka's createGroupTombstoneRecords, in its order: each member's current
        assignment, target assignment, the target's epoch, each member's subscription, the
        state partition metadata, the group epoch."""
        order = {
            ShareRecordKind.CURRENT_ASSIGNMENT: 0,
            ShareRecordKind.TARGET_MEMBER: 1,
            ShareRecordKind.TARGET_METADATA: 2,
            ShareRecordKind.MEMBER_METADATA: 3,
            ShareRecordKind.STATE_PARTITION_METADATA: 4,
            ShareRecordKind.GROUP_METADATA: 5,
        }
        keys = list(self._persisted())
        keys.append(ShareRecordKey(ShareRecordKind.STATE_PARTITION_METADATA, self.group_id))
        keys.sort(key=lambda k: (order[k.kind], k.member_id or ""))
        return [(k, None) for k in keys]

    @classmethod
    def replay(
        cls,
        group_id: str,
        records: Iterable[ShareRecord],
        now_ms: int,
        settings: ShareSettings | None = None,
    ) -> ShareGroup:
        """Rebuild the group from its records (last value per key wins, None deletes); every
        member's session starts again at ``now_ms`` (Kafka schedules the session timers of
        a loaded group anew)."""
        values: dict[ShareRecordKey, object] = {}
        for key, value in records:
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
        group = cls(group_id, settings)
        for key, value in values.items():
            if isinstance(value, ShareGroupMetadataValue):
                group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash
            elif isinstance(value, ShareTargetMetadataValue):
                group.assignment_epoch = value.assignment_epoch
            elif isinstance(value, ShareTargetMemberValue) and key.member_id is not None:
                group.target[key.member_id] = thaw(value.partitions)
            elif isinstance(value, ShareMemberMetadataValue) and key.member_id is not None:
                member = group.members.setdefault(key.member_id, ShareMember(key.member_id))
                member.rack_id, member.client_id = value.rack_id, value.client_id
                member.client_host = value.client_host
                member.subscribed_topic_names = value.subscribed_topic_names
            elif isinstance(value, ShareStatePartitionMetadataValue):
                group.state_partitions = ShareStatePartitions.from_value(value, now_ms)
            elif isinstance(value, ShareCurrentAssignmentValue) and key.member_id is not None:
                member = group.members.setdefault(key.member_id, ShareMember(key.member_id))
                member.member_epoch = value.member_epoch
                member.previous_member_epoch = value.previous_member_epoch
                member.assigned = thaw(value.assigned)
        for member in group.members.values():
            member.deadline_ms = now_ms + group.settings.session_timeout_ms
        return group
