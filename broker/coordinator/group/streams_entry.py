"""A streams group as the group coordinator keeps it beside classic and consumer groups.

Pure, like state.py: a `state.Group` for what every group type shares (committed and
transactional offsets, their expiry, the Dead state the admin paths read), with the streams
group's membership in the pure core it holds (streams_group.StreamsGroup, KIP-1071). The
service (service.py) keeps one map of groups, so a group id is of one type at a time, as in
Kafka's GroupMetadataManager.

The rules taken from Kafka 4.4's StreamsGroup: validateOffsetCommit (an epoch below zero
commits only to an empty group; otherwise the member must exist, UNKNOWN_MEMBER_ID, and name
its current epoch, STALE_MEMBER_EPOCH; a TxnOffsetCommit that names no member and no
generation is free), validateOffsetFetch (only a member asking with its epoch is checked),
isSubscribedToTopic (the topology's source and repartition source topics, for OffsetDelete),
and the classic protocol's requests to a streams group: JoinGroup is
INCONSISTENT_GROUP_PROTOCOL while the group has members (the service turns an empty streams
group into a classic group first, Kafka's classicGroupJoinToClassicGroup), SyncGroup,
Heartbeat and LeaveGroup UNKNOWN_MEMBER_ID.

Departure: the offsets of an empty streams group expire as a consumer group's do (once the
group has been empty for the retention period; Kafka 4.4 the same).
"""

from typing import cast

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
from minibroker.coordinator.group.streams_group import StreamsGroup, StreamsGroupState
from minibroker.protocol.errors import Error


class StreamsGroupEntry(Group):
    """A streams group: offsets as any group, membership as `self.streams`."""

    protocol = "streams"

    def __init__(self, streams: StreamsGroup, settings: GroupSettings, now_ms: int) -> None:
        super().__init__(streams.group_id, settings, now_ms)
        self.streams = streams
        self.protocol_type = "streams"
        self._dead = False
        self.refresh_state(now_ms)

    # -- state -------------------------------------------------------------------------------

    def refresh_state(self, now_ms: int) -> None:
        """Mirror the core's state in `state` (its name is what ListGroups shows; Empty,
        Stable and Dead answer `is_` like the classic states of the same name)."""
        state = StreamsGroupState.DEAD if self._dead else self.streams.state
        if state.value != self.state.value:
            self.state_timestamp_ms = now_ms
        self.state = cast(GroupState, state)

    def is_(self, state) -> bool:
        return bool(self.state.value == state.value)

    @property
    def is_empty(self) -> bool:
        return not self.streams.members

    def next_deadline_ms(self) -> int | None:
        return None if self._dead else self.streams.next_deadline_ms()

    def subscribed_topics(self) -> set[str] | None:
        topology = self.streams.topology
        if topology is None or not self.streams.members:
            return set()
        topics: set[str] = set()
        for sub in topology.subtopologies:
            topics.update(sub.source_topics)
            topics.update(info.name for info in sub.repartition_source_topics)
        return topics

    def unload(self) -> None:
        self._dead = True
        self.state = cast(GroupState, StreamsGroupState.DEAD)

    def mark_dead(self, now_ms: int) -> None:
        self._dead = True
        self.state = cast(GroupState, StreamsGroupState.DEAD)
        self.state_timestamp_ms = now_ms

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
        if self.streams.members or self._dead:
            return []
        if self.state_timestamp_ms + retention_ms <= now_ms:
            pending = self.pending_txn_keys()
            return [key for key in self.offsets if key not in pending]
        return []

    # -- offsets -----------------------------------------------------------------------------

    def validate_offset_commit(self, member_id: str, member_epoch: int) -> Error:
        """Kafka's StreamsGroup.validateOffsetCommit."""
        if self._dead:
            return Error.COORDINATOR_NOT_AVAILABLE
        if member_epoch < 0 and not self.streams.members:
            return Error.NONE
        member = self.streams.members.get(member_id)
        if member is None:
            return Error.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return Error.STALE_MEMBER_EPOCH
        return Error.NONE

    def validate_classic_offset_commit(
        self, member_id: str, instance_id: str | None, generation: int, transactional: bool
    ) -> Error:
        """OffsetCommit and TxnOffsetCommit (the service asks every non-consumer group this):
        the member epoch rules; a transactional commit naming no member (v0-v2) is free."""
        if transactional and generation < 0 and member_id == "" and instance_id is None:
            return Error.COORDINATOR_NOT_AVAILABLE if self._dead else Error.NONE
        return self.validate_offset_commit(member_id, generation)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> Error:
        """Kafka's StreamsGroup.validateOffsetFetch."""
        if member_epoch < 0 and not member_id:
            return Error.NONE
        member = self.streams.members.get(member_id or "")
        if member is None:
            return Error.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return Error.STALE_MEMBER_EPOCH
        return Error.NONE

    # -- the classic protocol's requests -----------------------------------------------------

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
        return None, SyncResult(Error.UNKNOWN_MEMBER_ID), False

    def heartbeat(
        self, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> Error:
        return Error.UNKNOWN_MEMBER_ID

    def leave(self, member_id: str, instance_id: str | None, now_ms: int) -> Error:
        return Error.UNKNOWN_MEMBER_ID

    def expire(self, now_ms: int) -> bool:  # type: ignore[override]
        return False
