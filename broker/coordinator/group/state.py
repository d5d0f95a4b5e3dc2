"""One consumer group's membership, as Kafka's classic group coordinator runs it.

Pure state with time passed in (milliseconds), tested without sockets or sleeping
(tests/unit/test_group_state.py). The service (service.py) calls these transitions from the
request handlers and from its timers, waits for the results they leave on members, and writes
the group to `__consumer_offsets` when a transition asks for it.

The rules reproduced here are Kafka's GroupCoordinator's (3.x, classic protocol):

- a group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable, and back to
  PreparingRebalance whenever a member joins, leaves, changes its protocols or misses its
  session; Dead once deleted or unloaded;
- a new dynamic member is first handed a member id with MEMBER_ID_REQUIRED (KIP-394) and
  must join again with it; static members (group.instance.id, KIP-345) keep their assignment
  across restarts, and an old incarnation is fenced with FENCED_INSTANCE_ID;
- the join phase ends when every member has rejoined or at the rebalance timeout (the largest
  of the members'); a new group's first join waits `group.initial.rebalance.delay.ms`,
  extended for each member that joins meanwhile, up to the rebalance timeout, and then ends
  with the members that joined, not waiting for ids handed out with MEMBER_ID_REQUIRED (at a
  delay of 0 it ends at once, as Kafka's InitialDelayedJoin does on a timer of 0);
- the protocol is chosen by vote among those every member supports, the leader (kept if it
  rejoined) receives the members' metadata and sends the assignment in its SyncGroup, which
  the coordinator makes durable before anyone receives it.
"""

import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from minibroker.coordinator.group import (
    consumer_log_format,
    log_format,
    share_log_format,
    streams_log_format,
)
from minibroker.coordinator.group.log_format import (
    GroupKey,
    GroupValue,
    MemberRecord,
    OffsetKey,
    OffsetValue,
)
from minibroker.protocol.errors import Error
from minibroker.protocol.record_batch import BatchHeader
from minibroker.protocol.records import decode_records

_I16 = struct.Struct(">h")


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class JoinResult:
    error: Error
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    # (member id, group instance id, metadata of the chosen protocol); the leader's only.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    # A restarted static leader of a Stable group: it must not compute a new assignment.
    skip_assignment: bool = False


@dataclass
class SyncResult:
    error: Error
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    session_deadline_ms: int = 0
    # A request parked on this member: the join or sync phase leaves its answer here.
    awaiting_join: bool = False
    join_result: JoinResult | None = None
    awaiting_sync: bool = False
    sync_result: SyncResult | None = None

    def metadata(self, protocol: str | None) -> bytes:
        return next((data for name, data in self.protocols if name == protocol), b"")

    def record(self, protocol: str | None) -> MemberRecord:
        return MemberRecord(
            self.member_id,
            self.group_instance_id,
            self.client_id,
            self.client_host,
            self.rebalance_timeout_ms,
            self.session_timeout_ms,
            self.metadata(protocol),
            self.assignment,
        )


@dataclass
class PendingTxnOffset:
    """A transactional offset commit awaiting its marker (Kafka's
    CommitRecordMetadataAndOffset): ``record_offset`` is None until the record is written."""

    value: OffsetValue
    record_offset: int | None = None


@dataclass(frozen=True)
class GroupSettings:
    """The broker's group.* settings the rules depend on."""

    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2**31 - 1
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000


@dataclass(frozen=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool


def _member_from(request: JoinRequest, member_id: str) -> Member:
    return Member(
        member_id,
        request.group_instance_id,
        request.client_id,
        request.client_host,
        request.rebalance_timeout_ms,
        request.session_timeout_ms,
        request.protocol_type,
        list(request.protocols),
    )


# A JoinGroup's outcome: the member whose answer comes when the join phase ends, or an
# answer now.
JoinOutcome = tuple[Member | None, JoinResult | None]


class Group:
    """A group's members, generation and chosen protocol, and the transitions between them."""

    def __init__(self, group_id: str, settings: GroupSettings, now_ms: int) -> None:
        self.group_id = group_id
        self.settings = settings
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        # Member ids handed out with MEMBER_ID_REQUIRED, and when they lapse.
        self.pending_members: dict[str, int] = {}
        # When the join phase ends at the latest; None outside PreparingRebalance.
        self.join_deadline_ms: int | None = None
        self._initial_join = False
        # The generation whose assignment is being written, awaiting `complete_sync`.
        self.storing_generation: int | None = None
        # Committed offsets: (topic, partition) -> the stored value.
        self.offsets: dict[tuple[str, int], OffsetValue] = {}
        # The `__consumer_offsets` offset of the batch that wrote each committed offset
        # (Kafka's CommitRecordMetadataAndOffset.appendedBatchOffset): the later record wins
        # when a transaction's offsets are committed (see complete_txn_offset_commit).
        self.offset_record_offsets: dict[tuple[str, int], int] = {}
        # TxnOffsetCommits awaiting their transaction's marker: producer id ->
        # (topic, partition) -> the pending offset. Invisible to OffsetFetch until committed.
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], PendingTxnOffset]] = {}

    # -- queries ---------------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state == state

    @property
    def is_empty(self) -> bool:
        return not self.members

    def validate_classic_offset_commit(
        self, member_id: str, instance_id: str | None, generation: int, transactional: bool
    ) -> Error:
        """Kafka 4's ClassicGroup.validateOffsetCommit (OffsetCommit, and TxnOffsetCommit when
        ``transactional``), in its order: a Dead group is COORDINATOR_NOT_AVAILABLE; a
        generation below 0 commits freely to an Empty group (a consumer without group
        management, or the admin client); a request that names a member, an instance or a
        generation must name a current member (UNKNOWN_MEMBER_ID; a static member by its
        instance id, FENCED_INSTANCE_ID when another member id holds it) of the current
        generation (ILLEGAL_GENERATION); one that names none of them commits only to an Empty
        group (UNKNOWN_MEMBER_ID), except a transactional one (TxnOffsetCommit v0-v2 name
        none). Only then, for a non-transactional commit, CompletingRebalance is
        REBALANCE_IN_PROGRESS: a member of an older generation learns ILLEGAL_GENERATION first
        (librdkafka's manual commit during a cooperative rebalance accepts only that)."""
        if self.is_(GroupState.DEAD):
            return Error.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and self.is_(GroupState.EMPTY):
            return Error.NONE
        if generation >= 0 or member_id != "" or instance_id is not None:
            if instance_id is not None:
                known = self.static_members.get(instance_id)
                if known is None:
                    return Error.UNKNOWN_MEMBER_ID
                if known != member_id:
                    return Error.FENCED_INSTANCE_ID
            elif member_id not in self.members:
                return Error.UNKNOWN_MEMBER_ID
            if generation != self.generation:
                return Error.ILLEGAL_GENERATION
        elif not transactional and not self.is_(GroupState.EMPTY):
            return Error.UNKNOWN_MEMBER_ID
        if not transactional and self.is_(GroupState.COMPLETING_REBALANCE):
            return Error.REBALANCE_IN_PROGRESS
        return Error.NONE

    def next_deadline_ms(self) -> int | None:
        """The earliest moment `expire` has something to do."""
        deadlines = [
            member.session_deadline_ms
            for member in self.members.values()
            if not (member.awaiting_join or member.awaiting_sync)
        ]
        deadlines.extend(self.pending_members.values())
        if self.join_deadline_ms is not None:
            deadlines.append(self.join_deadline_ms)
        return min(deadlines, default=None)

    def _candidate_protocols(self) -> set[str]:
        names = None
        for member in self.members.values():
            mine = {name for name, _ in member.protocols}
            names = mine if names is None else names & mine
        return names or set()

    def _supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if self.is_empty:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self._candidate_protocols())

    def _select_protocol(self) -> str:
        """Kafka's vote: each member names its most preferred protocol that every member
        supports; the one named most wins (the first such, on a tie)."""
        candidates = self._candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=votes.__getitem__)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, read from the consumer protocol's subscription
        (version i16, then an array of topic names); None if that cannot be known."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            data = member.metadata(self.protocol_name)
            try:
                count = int.from_bytes(data[2:6], "big", signed=True)
                pos = 6
                for _ in range(count):
                    length = int.from_bytes(data[pos : pos + 2], "big", signed=True)
                    topics.add(data[pos + 2 : pos + 2 + length].decode())
                    pos += 2 + length
            except (UnicodeDecodeError, IndexError):
                return None
        return topics

    # -- transitions -----------------------------------------------------------------------------

    def _transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp_ms = now_ms

    def _new_member_id(self, client_id: str) -> str:
        return f"{client_id}-{uuid.uuid4()}"

    def _touch(self, member: Member, now_ms: int) -> None:
        member.session_deadline_ms = now_ms + member.session_timeout_ms

    def _fence_check(self, member_id: str, instance_id: str | None) -> Error:
        if instance_id is None:
            return Error.NONE
        known = self.static_members.get(instance_id)
        if known is not None and known != member_id:
            return Error.FENCED_INSTANCE_ID
        return Error.NONE

    def join(self, request: JoinRequest, now_ms: int) -> JoinOutcome:
        """A JoinGroup: either an answer now, or the member whose `join_result` the caller
        waits for (set when the join phase completes)."""
        if self.is_(GroupState.DEAD):
            return None, JoinResult(Error.COORDINATOR_NOT_AVAILABLE)
        if not self._supports(request.protocol_type, request.protocols):
            return None, JoinResult(Error.INCONSISTENT_GROUP_PROTOCOL)
        if request.member_id == "":
            return self._join_unknown_member(request, now_ms)
        return self._join_known_member(request, now_ms)

    def _full(self) -> bool:
        return len(self.members) + len(self.pending_members) >= self.settings.max_size

    def _join_unknown_member(self, request: JoinRequest, now_ms: int) -> JoinOutcome:
        instance_id = request.group_instance_id
        if instance_id is not None and instance_id in self.static_members:
            return self._replace_static_member(request, instance_id, now_ms)
        if self._full():
            return None, JoinResult(Error.GROUP_MAX_SIZE_REACHED)
        member_id = self._new_member_id(request.client_id)
        if instance_id is None and request.require_known_member_id:
            self.pending_members[member_id] = now_ms + request.session_timeout_ms
            return None, JoinResult(Error.MEMBER_ID_REQUIRED, member_id=member_id)
        return self._add_member_and_rebalance(request, member_id, now_ms), None

    def _join_known_member(self, request: JoinRequest, now_ms: int) -> JoinOutcome:
        member_id = request.member_id
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            return self._add_member_and_rebalance(request, member_id, now_ms), None
        if (error := self._fence_check(member_id, request.group_instance_id)) != Error.NONE:
            return None, JoinResult(error)
        member = self.members.get(member_id)
        if member is None or self.state == GroupState.EMPTY:
            return None, JoinResult(Error.UNKNOWN_MEMBER_ID)
        changed = member.protocols != request.protocols
        if self.state == GroupState.PREPARING_REBALANCE:
            self._update_member(member, request, now_ms)
            self._await_join(member)
            self._maybe_complete_join(now_ms)
            return member, None
        if not changed and (
            self.state == GroupState.COMPLETING_REBALANCE or member_id != self.leader_id
        ):
            # Nothing new to say: the member missed its answer; give it the same one.
            self._touch(member, now_ms)
            return None, self._join_answer(member)
        self._update_member(member, request, now_ms)
        self._await_join(member)
        self._prepare_rebalance(now_ms)
        return member, None

    def _replace_static_member(
        self, request: JoinRequest, instance_id: str, now_ms: int
    ) -> JoinOutcome:
        """A static member restarted: a new member id takes over its entry and assignment,
        and the old incarnation's parked requests are fenced. As in Kafka (KIP-345), a
        Stable group does not rebalance for it unless the chosen protocol would change; the
        leader then gets the members' metadata with skip_assignment (JoinGroup v9)."""
        old = self.members.pop(self.static_members[instance_id])
        self._answer_parked(old, Error.FENCED_INSTANCE_ID)
        member = _member_from(request, self._new_member_id(request.client_id))
        member.assignment = old.assignment
        self._touch(member, now_ms)
        self.members[member.member_id] = member
        self.static_members[instance_id] = member.member_id
        if self.leader_id == old.member_id:
            self.leader_id = member.member_id
        if self.state == GroupState.STABLE and self._select_protocol() == self.protocol_name:
            answer = self._join_answer(member)
            answer.skip_assignment = member.member_id == self.leader_id
            return None, answer
        self._await_join(member)
        if self.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(now_ms)
        else:
            self._prepare_rebalance(now_ms)
        return member, None

    @staticmethod
    def _await_join(member: Member) -> None:
        """Park the member's JoinGroup: its answer comes when the join phase ends (a previous
        generation's answer must not be taken for it)."""
        member.awaiting_join = True
        member.join_result = None

    def _update_member(self, member: Member, request: JoinRequest, now_ms: int) -> None:
        member.protocols = list(request.protocols)
        member.protocol_type = request.protocol_type
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.client_id = request.client_id
        member.client_host = request.client_host
        self._touch(member, now_ms)

    def _add_member_and_rebalance(
        self, request: JoinRequest, member_id: str, now_ms: int
    ) -> Member:
        member = _member_from(request, member_id)
        member.awaiting_join = True
        self._touch(member, now_ms)
        if self.is_empty:
            self.protocol_type = request.protocol_type
        self.members[member_id] = member
        if request.group_instance_id is not None:
            self.static_members[request.group_instance_id] = member_id
        if self.state == GroupState.PREPARING_REBALANCE:
            if self._initial_join:
                # Kafka's InitialDelayedJoin: each newcomer extends the wait, within bounds.
                limit = self.state_timestamp_ms + max(
                    m.rebalance_timeout_ms for m in self.members.values()
                )
                extended = now_ms + self.settings.initial_rebalance_delay_ms
                self.join_deadline_ms = min(max(self.join_deadline_ms or 0, extended), limit)
            else:
                self._maybe_complete_join(now_ms)
        else:
            self._prepare_rebalance(now_ms)
        return member

    def _prepare_rebalance(self, now_ms: int) -> None:
        if self.state == GroupState.COMPLETING_REBALANCE:
            for member in self.members.values():
                member.assignment = b""
                self._answer_sync(member, SyncResult(Error.REBALANCE_IN_PROGRESS))
        self.storing_generation = None
        was_empty = self.state == GroupState.EMPTY
        initial = was_empty and self.settings.initial_rebalance_delay_ms > 0
        self._initial_join = initial
        self._transition(GroupState.PREPARING_REBALANCE, now_ms)
        if initial:
            self.join_deadline_ms = now_ms + self.settings.initial_rebalance_delay_ms
        elif was_empty:
            # Kafka's InitialDelayedJoin at a delay of 0: the first join ends on its timer at
            # once, with the members that joined, not waiting for ids handed out with
            # MEMBER_ID_REQUIRED (a client that never comes back with its id would otherwise
            # hold the group's first generation for that id's session timeout).
            self.complete_join(now_ms)
        else:
            longest = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
            self.join_deadline_ms = now_ms + longest
            self._maybe_complete_join(now_ms)

    def _maybe_complete_join(self, now_ms: int) -> None:
        if self._initial_join or self.state != GroupState.PREPARING_REBALANCE:
            return
        everyone = all(member.awaiting_join for member in self.members.values())
        if everyone and not self.pending_members:
            self.complete_join(now_ms)

    def complete_join(self, now_ms: int) -> bool:
        """End the join phase: members that did not rejoin are dropped, a new generation
        starts. True when the group became empty (the caller stores it)."""
        # Dynamic members that did not rejoin leave; static ones stay until their session
        # ends, as Kafka keeps them (they may be restarting).
        for member in [m for m in self.members.values() if not m.awaiting_join]:
            if member.group_instance_id is None:
                self._remove(member)
        self.join_deadline_ms = None
        self._initial_join = False
        self.generation += 1
        if self.is_empty:
            self.protocol_name = None
            self.leader_id = None
            self._transition(GroupState.EMPTY, now_ms)
            return True
        self.protocol_name = self._select_protocol()
        rejoined = [m.member_id for m in self.members.values() if m.awaiting_join]
        if self.leader_id not in rejoined and rejoined:
            self.leader_id = rejoined[0]
        self._transition(GroupState.COMPLETING_REBALANCE, now_ms)
        for member in self.members.values():
            member.awaiting_join = False
            member.join_result = self._join_answer(member)
            self._touch(member, now_ms)
        return False

    def _join_answer(self, member: Member) -> JoinResult:
        members = []
        if member.member_id == self.leader_id:
            members = [
                (m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()
            ]
        return JoinResult(
            Error.NONE,
            self.generation,
            self.protocol_type,
            self.protocol_name,
            self.leader_id or "",
            member.member_id,
            members,
        )

    def sync(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        assignments: dict[str, bytes],
        now_ms: int,
    ) -> tuple[Member | None, SyncResult | None, bool]:
        """A SyncGroup: (member to wait on, answer now, whether the caller must store the
        group and then call `complete_sync`). Only the leader's assignments count; a
        follower's are ignored, as Kafka ignores them."""
        if self.is_(GroupState.DEAD):
            return None, SyncResult(Error.COORDINATOR_NOT_AVAILABLE), False
        if (error := self._fence_check(member_id, instance_id)) != Error.NONE:
            return None, SyncResult(error), False
        member = self.members.get(member_id)
        if member is None:
            return None, SyncResult(Error.UNKNOWN_MEMBER_ID), False
        if generation != self.generation:
            return None, SyncResult(Error.ILLEGAL_GENERATION), False
        if self.state == GroupState.EMPTY:
            return None, SyncResult(Error.UNKNOWN_MEMBER_ID), False
        if self.state == GroupState.PREPARING_REBALANCE:
            return None, SyncResult(Error.REBALANCE_IN_PROGRESS), False
        self._touch(member, now_ms)
        if self.state == GroupState.STABLE:
            return None, self._sync_answer(member), False
        member.awaiting_sync = True
        member.sync_result = None
        store = False
        if member_id == self.leader_id and self.storing_generation is None:
            for each in self.members.values():
                each.assignment = assignments.get(each.member_id, b"")
            self.storing_generation = self.generation
            store = True
        return member, None, store

    def complete_sync(self, generation: int, error: Error, now_ms: int) -> None:
        """The group record of `generation` was written (or failed with `error`)."""
        if self.storing_generation != generation or self.generation != generation:
            return
        self.storing_generation = None
        if self.state != GroupState.COMPLETING_REBALANCE:
            return
        if error != Error.NONE:
            for member in self.members.values():
                member.assignment = b""
                self._answer_sync(member, SyncResult(error))
            self._prepare_rebalance(now_ms)
            return
        self._transition(GroupState.STABLE, now_ms)
        for member in self.members.values():
            self._answer_sync(member, self._sync_answer(member))

    def _sync_answer(self, member: Member) -> SyncResult:
        return SyncResult(Error.NONE, self.protocol_type, self.protocol_name, member.assignment)

    def _answer_sync(self, member: Member, result: SyncResult) -> None:
        if member.awaiting_sync:
            member.awaiting_sync = False
            member.sync_result = result

    def _answer_parked(self, member: Member, error: Error) -> None:
        if member.awaiting_join:
            member.awaiting_join = False
            member.join_result = JoinResult(error, member_id=member.member_id)
        self._answer_sync(member, SyncResult(error))

    def heartbeat(
        self, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> Error:
        if self.is_(GroupState.DEAD):
            return Error.COORDINATOR_NOT_AVAILABLE
        if (error := self._fence_check(member_id, instance_id)) != Error.NONE:
            return error
        member = self.members.get(member_id)
        if member is None:
            return Error.UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return Error.ILLEGAL_GENERATION
        if self.state == GroupState.EMPTY:
            return Error.UNKNOWN_MEMBER_ID
        self._touch(member, now_ms)
        if self.state == GroupState.PREPARING_REBALANCE:
            return Error.REBALANCE_IN_PROGRESS
        return Error.NONE

    def leave(self, member_id: str, instance_id: str | None, now_ms: int) -> Error:
        """LeaveGroup of one member, by member id or (static, v3+) by instance id."""
        if self.is_(GroupState.DEAD):
            return Error.COORDINATOR_NOT_AVAILABLE
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is None:
                return Error.UNKNOWN_MEMBER_ID
            if member_id and known != member_id:
                return Error.FENCED_INSTANCE_ID
            member_id = known
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            self._maybe_complete_join(now_ms)
            return Error.NONE
        member = self.members.get(member_id)
        if member is None:
            return Error.UNKNOWN_MEMBER_ID
        self._remove_and_rebalance(member, Error.UNKNOWN_MEMBER_ID, now_ms)
        return Error.NONE

    def _remove(self, member: Member) -> None:
        del self.members[member.member_id]
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)

    def _remove_and_rebalance(self, member: Member, error: Error, now_ms: int) -> None:
        self._answer_parked(member, error)
        self._remove(member)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now_ms)
        elif self.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(now_ms)

    def expire(self, now_ms: int) -> bool:
        """Run every deadline that has passed: sessions, lapsed member ids, the end of the
        join phase. True when the group became empty (the caller stores it)."""
        for member_id, deadline in list(self.pending_members.items()):
            if deadline <= now_ms:
                del self.pending_members[member_id]
                self._maybe_complete_join(now_ms)
        for member in list(self.members.values()):
            # A member parked in JoinGroup or SyncGroup cannot heartbeat (its connection waits
            # for the answer): as in Kafka, its session holds while it waits.
            parked = member.awaiting_join or member.awaiting_sync
            if (
                not parked
                and member.session_deadline_ms <= now_ms
                and member.member_id in self.members
            ):
                self._remove_and_rebalance(member, Error.UNKNOWN_MEMBER_ID, now_ms)
        if (
            self.state == GroupState.PREPARING_REBALANCE
            and self.join_deadline_ms is not None
            and self.join_deadline_ms <= now_ms
        ):
            return self.complete_join(now_ms)
        return False

    def unload(self) -> None:
        """This broker stopped coordinating the group: parked requests learn NOT_COORDINATOR."""
        for member in self.members.values():
            self._answer_parked(member, Error.NOT_COORDINATOR)
        self._transition(GroupState.DEAD, self.state_timestamp_ms)

    def mark_dead(self, now_ms: int) -> None:
        self._transition(GroupState.DEAD, now_ms)

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
        """The committed offsets past offsets.retention.minutes, as Kafka 2.1+ (KIP-211)
        counts it: all of them once the group has been empty for the retention period; for a
        group that only stores offsets (no protocol, manual assignment), each from its own
        commit. A group with members keeps its offsets. An offset a transaction still holds
        pending is not expired (Kafka's cleanupExpiredOffsets), nor is the group removed
        while any transaction holds offsets of it (the service's check)."""
        if self.state != GroupState.EMPTY:
            return []
        pending = self.pending_txn_keys()
        if self.protocol_type is None:
            return [
                key
                for key, value in self.offsets.items()
                if value.commit_timestamp + retention_ms <= now_ms and key not in pending
            ]
        if self.state_timestamp_ms + retention_ms <= now_ms:
            return [key for key in self.offsets if key not in pending]
        return []

    # -- offsets ---------------------------------------------------------------------------------
    #
    # Kafka's GroupMetadata offset rules. A plain OffsetCommit is applied once written; a
    # TxnOffsetCommit (KIP-98) is kept per producer id, pending, until the transaction's
    # COMMIT marker makes it the committed offset or its ABORT marker drops it. When plain
    # and transactional commits of one partition mix, the record written later in the log
    # wins (Kafka's olderThan on appendedBatchOffset), so a reload from the log after
    # compaction gives what memory had.

    def on_offset_commit_append(
        self, offsets: dict[tuple[str, int], OffsetValue], record_offset: int
    ) -> None:
        """Plain offsets written at ``record_offset`` (Kafka's onOffsetCommitAppend)."""
        for key, value in offsets.items():
            known = self.offset_record_offsets.get(key)
            if key not in self.offsets or known is None or known <= record_offset:
                self.offsets[key] = value
                self.offset_record_offsets[key] = record_offset

    def prepare_txn_offset_commit(
        self, producer_id: int, offsets: dict[tuple[str, int], OffsetValue]
    ) -> dict[tuple[str, int], PendingTxnOffset | None]:
        """A TxnOffsetCommit about to be written: pending from now on, so OffsetFetch with
        require_stable already answers UNSTABLE_OFFSET_COMMIT (Kafka's
        prepareTxnOffsetCommit). Returns what it replaced, for
        `fail_pending_txn_offset_commit`."""
        mine = self.pending_txn_offsets.setdefault(producer_id, {})
        replaced = {key: mine.get(key) for key in offsets}
        for key, value in offsets.items():
            mine[key] = PendingTxnOffset(value)
        return replaced

    def on_txn_offset_commit_append(
        self, producer_id: int, offsets: dict[tuple[str, int], OffsetValue], record_offset: int
    ) -> None:
        """The TxnOffsetCommit's batch was written at ``record_offset`` (Kafka's
        onTxnOffsetCommitAppend); a pending offset a newer commit replaced meanwhile stays."""
        mine = self.pending_txn_offsets.get(producer_id)
        if mine is None:
            return  # completed or removed meanwhile
        for key, value in offsets.items():
            pending = mine.get(key)
            if pending is not None and pending.value == value:
                pending.record_offset = record_offset

    def fail_pending_txn_offset_commit(
        self,
        producer_id: int,
        offsets: dict[tuple[str, int], OffsetValue],
        replaced: dict[tuple[str, int], PendingTxnOffset | None],
    ) -> None:
        """The write failed; the client retries (Kafka's failPendingTxnOffsetCommit). What
        the failed commit replaced comes back, as Kafka 4's coordinator reverts its state to
        the snapshot before a failed write: a fenced zombie's commit must not take away the
        pending offset its successor wrote."""
        mine = self.pending_txn_offsets.get(producer_id)
        if mine is None:
            return
        for key, value in offsets.items():
            pending = mine.get(key)
            if pending is None or pending.value != value or pending.record_offset is not None:
                continue  # replaced or written meanwhile
            previous = replaced.get(key)
            if previous is None:
                del mine[key]
            else:
                mine[key] = previous
        if not mine:
            del self.pending_txn_offsets[producer_id]

    def complete_txn_offset_commit(self, producer_id: int, commit: bool) -> int:
        """The transaction's marker was written (Kafka's completePendingTxnOffsetCommit):
        COMMIT makes its offsets the committed ones, unless a plain commit written later in
        the log already replaced one; ABORT drops them. The number of offsets applied.

        Departure: Kafka throws when a pending offset has no record offset yet (the marker
        cannot precede the record it completes); here such an offset is dropped, so a
        marker can never apply an offset that is not in the log."""
        mine = self.pending_txn_offsets.pop(producer_id, None)
        if mine is None or not commit:
            return 0
        applied = 0
        for key, pending in mine.items():
            if pending.record_offset is None:
                continue
            known = self.offset_record_offsets.get(key)
            if key not in self.offsets or known is None or known < pending.record_offset:
                self.offsets[key] = pending.value
                self.offset_record_offsets[key] = pending.record_offset
                applied += 1
        return applied

    def has_pending_offsets_from(self, producer_id: int) -> bool:
        """Kafka's hasPendingOffsetCommitsFromProducer."""
        return producer_id in self.pending_txn_offsets

    def has_pending_txn_offset(self, key: tuple[str, int]) -> bool:
        """Whether a transaction holds an offset of this partition (OffsetFetch with
        require_stable answers UNSTABLE_OFFSET_COMMIT then)."""
        return any(key in mine for mine in self.pending_txn_offsets.values())

    def remove_offsets(self, keys: Iterable[tuple[str, int]]) -> None:
        """Offsets deleted (OffsetDelete, DeleteGroups, a tombstone replayed): the committed
        offset and any transaction's pending one, as Kafka's removeOffsets."""
        for key in keys:
            self.offsets.pop(key, None)
            self.offset_record_offsets.pop(key, None)
            for producer_id, mine in list(self.pending_txn_offsets.items()):
                mine.pop(key, None)
                if not mine:
                    del self.pending_txn_offsets[producer_id]

    def pending_txn_keys(self) -> set[tuple[str, int]]:
        return {key for mine in self.pending_txn_offsets.values() for key in mine}

    # -- persistence ----------------------------------------------------------------------------

    def records(self) -> list[MemberRecord]:
        return [member.record(self.protocol_name) for member in self.members.values()]

    def restore(
        self,
        protocol_type: str,
        generation: int,
        protocol: str | None,
        leader: str | None,
        state_timestamp_ms: int,
        members: tuple[MemberRecord, ...],
        now_ms: int,
    ) -> None:
        """Take the state a group metadata record holds (a newly loaded partition): members
        come back Stable with fresh sessions, so those still alive carry on without a
        rebalance and the others expire, as Kafka loads them."""
        self.protocol_type = protocol_type or None
        self.generation = generation
        self.protocol_name = protocol
        self.leader_id = leader
        self.members = {}
        self.static_members = {}
        for record in members:
            member = Member(
                record.member_id,
                record.group_instance_id,
                record.client_id,
                record.client_host,
                record.rebalance_timeout_ms,
                record.session_timeout_ms,
                protocol_type,
                [(protocol or "", record.subscription)],
                assignment=record.assignment,
            )
            self._touch(member, now_ms)
            self.members[member.member_id] = member
            if member.group_instance_id is not None:
                self.static_members[member.group_instance_id] = member.member_id
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY
        self.state_timestamp_ms = state_timestamp_ms if state_timestamp_ms >= 0 else now_ms


class PartitionReplay:
    """What a `__consumer_offsets` partition holds, read batch by batch from its start
    (Kafka's GroupMetadataManager.doLoadGroupsAndOffsets). Pure: the service feeds it the
    batches it reads.

    Plain offset commits apply at once; those of a transactional batch are held per
    producer id until a control batch of that producer is read: COMMIT applies them (unless a
    plain commit later in the log replaced one), ABORT (or any other marker) drops them. A
    transaction with no marker yet stays pending in the loaded group, to be completed by the
    marker the transaction coordinator still sends. Records of a layout this broker cannot
    read are skipped and listed in ``skipped`` (their offsets), so the partition's other
    groups are still served.
    """

    def __init__(self) -> None:
        # group -> (topic, partition) -> (value, record offset of its batch)
        self.offsets: dict[str, dict[tuple[str, int], tuple[OffsetValue, int]]] = {}
        # producer id -> group -> (topic, partition) -> pending offset
        self.pending: dict[int, dict[str, dict[tuple[str, int], PendingTxnOffset]]] = {}
        self.groups: dict[str, GroupValue | None] = {}
        # The consumer protocol's groups (KIP-848): group -> their records' latest values by
        # key (a tombstone removes its key), rebuilt by ConsumerGroup.restore_records.
        self.consumer: dict[str, dict[consumer_log_format.RecordKey, object]] = {}
        # The streams groups (KIP-1071): group -> their records' latest values by key,
        # rebuilt by streams_group.restore_records.
        self.streams: dict[str, dict[streams_log_format.RecordKey, object]] = {}
        self.skipped: list[tuple[int, str]] = []
        # The share groups (KIP-932): group -> their records' latest values by key, rebuilt
        # by ShareGroup.replay (the coordinator service's).
        self.share: dict[str, dict[share_log_format.ShareRecordKey, object]] = {}

    def batch(self, header: BatchHeader, batch: bytes | memoryview) -> None:
        """One whole batch as read from the log; ``header`` is its parsed header."""
        records = decode_records(batch)
        if header.is_control:
            if not records:
                return
            try:
                kind = log_format.read_control_type(records[0].key)
            except log_format.RecordFormatError as error:
                self.skipped.append((records[0].offset, str(error)))
                return
            self.marker(header.producer_id, kind == log_format.CONTROL_COMMIT)
            return
        transactional = header.is_transactional
        for record in records:
            if record.key is None:
                continue
            try:
                self._record(
                    record.key,
                    record.value,
                    header.base_offset,
                    header.producer_id if transactional else None,
                )
            except log_format.RecordFormatError as error:
                self.skipped.append((record.offset, str(error)))

    def _record(
        self, key_data: bytes, value: bytes | None, batch_offset: int, producer_id: int | None
    ) -> None:
        if len(key_data) >= 2 and _I16.unpack_from(key_data)[0] in share_log_format.SHARE_KINDS:
            self._share_record(key_data, value)
            return
        if len(key_data) >= 2 and _I16.unpack_from(key_data)[0] in consumer_log_format.KINDS:
            self._consumer_record(key_data, value)
            return
        if len(key_data) >= 2 and _I16.unpack_from(key_data)[0] in streams_log_format.KINDS:
            self._streams_record(key_data, value)
            return
        key = log_format.read_key(key_data)
        if isinstance(key, OffsetKey):
            partition = (key.topic, key.partition)
            if producer_id is not None:
                mine = self.pending.setdefault(producer_id, {}).setdefault(key.group, {})
                if value is None:
                    mine.pop(partition, None)
                else:
                    offset = log_format.read_offset_value(value)
                    mine[partition] = PendingTxnOffset(offset, batch_offset)
                return
            committed = self.offsets.setdefault(key.group, {})
            if value is None:
                committed.pop(partition, None)
                # A plain tombstone deletes the transactions' pending offsets too (Kafka 4's
                # OffsetMetadataManager.replay), as DeleteGroups and OffsetDelete do in memory.
                for groups in self.pending.values():
                    groups.get(key.group, {}).pop(partition, None)
            else:
                committed[partition] = (log_format.read_offset_value(value), batch_offset)
        elif isinstance(key, GroupKey):
            if value is None:
                self.groups[key.group] = None
                self.offsets.pop(key.group, None)
            else:
                self.groups[key.group] = log_format.read_group_value(value)

    def _consumer_record(self, key_data: bytes, value: bytes | None) -> None:
        key = consumer_log_format.read_key(key_data)
        if key.kind == consumer_log_format.RecordKind.PARTITION_METADATA:
            return  # recomputed from the cluster's metadata (see consumer_log_format)
        records = self.consumer.setdefault(key.group, {})
        if value is None:
            records.pop(key, None)
            # The group's metadata tombstoned: the group is gone (DeleteGroups, expiry).
            if key.kind == consumer_log_format.RecordKind.GROUP_METADATA and not records:
                del self.consumer[key.group]
        else:
            records[key] = consumer_log_format.read_value(key.kind, value)

    def _share_record(self, key_data: bytes, value: bytes | None) -> None:
        key = share_log_format.read_key(key_data)
        records = self.share.setdefault(key.group, {})
        if value is None:
            records.pop(key, None)
            if key.kind == share_log_format.ShareRecordKind.GROUP_METADATA:
                # The group's metadata tombstoned: the group is gone (DeleteGroups).
                self.share.pop(key.group, None)
        else:
            records[key] = share_log_format.read_value(key.kind, value)

    def _streams_record(self, key_data: bytes, value: bytes | None) -> None:
        key = streams_log_format.read_key(key_data)
        records = self.streams.setdefault(key.group, {})
        if value is None:
            records.pop(key, None)
            if not records:
                del self.streams[key.group]
        else:
            records[key] = streams_log_format.read_value(key.kind, value)

    def streams_records(self, group_id: str) -> dict[streams_log_format.RecordKey, object]:
        """A streams group's records as read (empty for any other group, and for one whose
        metadata record was tombstoned: a deleted group)."""
        records = self.streams.get(group_id, {})
        has_metadata = any(
            key.kind == streams_log_format.RecordKind.GROUP_METADATA for key in records
        )
        return records if has_metadata else {}

    def consumer_records(self, group_id: str) -> dict[consumer_log_format.RecordKey, object]:
        """A consumer protocol group's records as read (empty for any other group)."""
        records = self.consumer.get(group_id, {})
        has_metadata = any(
            key.kind == consumer_log_format.RecordKind.GROUP_METADATA for key in records
        )
        return records if has_metadata else {}

    def marker(self, producer_id: int, commit: bool) -> None:
        """A transaction marker of ``producer_id`` read from the log."""
        groups = self.pending.pop(producer_id, None)
        if groups is None or not commit:
            return
        for group_id, offsets in groups.items():
            committed = self.offsets.setdefault(group_id, {})
            for partition, pending in offsets.items():
                assert pending.record_offset is not None
                known = committed.get(partition)
                if known is None or known[1] < pending.record_offset:
                    committed[partition] = (pending.value, pending.record_offset)

    def group_ids(self) -> set[str]:
        """Every group the partition has something of (Kafka creates a group for offsets
        alone, committed or pending)."""
        ids = {group for group, offsets in self.offsets.items() if offsets}
        ids |= {group for group, value in self.groups.items() if value is not None}
        ids |= {group for group in self.consumer if self.consumer_records(group)}
        ids |= {group for group in self.streams if self.streams_records(group)}
        for groups in self.pending.values():
            ids |= {group for group, offsets in groups.items() if offsets}
        return ids

    def fill(self, group: Group) -> None:
        """Give ``group`` its offsets and pending transactional offsets as read."""
        committed = self.offsets.get(group.group_id, {})
        group.offsets = {key: value for key, (value, _) in committed.items()}
        group.offset_record_offsets = {key: at for key, (_, at) in committed.items()}
        group.pending_txn_offsets = {}
        for producer_id, groups in self.pending.items():
            offsets = groups.get(group.group_id)
            if offsets:
                group.pending_txn_offsets[producer_id] = {
                    key: PendingTxnOffset(p.value, p.record_offset) for key, p in offsets.items()
                }
