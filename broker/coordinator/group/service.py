"""The group coordinator: groups and committed offsets on `__consumer_offsets`, on trio.

As in Kafka, the coordinator of a group is the leader of partition
``abs(hash(group_id)) % partitions`` of `__consumer_offsets` (Java's String.hashCode). Group
metadata and offset commits are records in that partition, appended as leader through the
replica manager's append_records like any produce (Kafka's AppendOrigin.COORDINATOR) and
acknowledged once the ISR has them (acks=all), so the replica fetchers replicate them.
When this broker becomes leader of such a partition it reads the partition back and serves
its groups; when it stops leading it, it forgets them (Kafka's handleGroupImmigration /
handleGroupEmigration, driven by LeaderAndIsr).

Leadership, loading keyed by leader epoch, the writes, the topic's creation and the timers
are the coordinator runtime's (coordinator/runtime.py, Kafka's CoordinatorRuntime, which
Kafka 4's GroupCoordinatorService runs on too); this module gives it a loader (replaying a
partition into groups) and an unloader (forgetting them).

The membership rules are the pure `state.Group`; this shell adds what needs I/O or time:
requests parked until a join or sync phase ends (woken through `Watchers` keyed by group),
one runtime timer per group armed at its next deadline (sessions, join phase), the records
each change writes, and the periodic expiry of old offsets.
"""

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import trio

from minibroker.common.config import BrokerConfig
from minibroker.common.group_configs import consumer_overrides
from minibroker.common.names import OFFSETS_TOPIC
from minibroker.coordinator.group import log_format, streams_log_format
from minibroker.coordinator.group.consumer_group import (
    ConsumerGroup,
    ConsumerSettings,
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResult,
    validate,
)
from minibroker.coordinator.group.consumer_group import Record as ConsumerRecord
from minibroker.coordinator.group.consumer_log_format import RecordKind, encode_key, encode_value
from minibroker.coordinator.group.embedded_protocol import EmbeddedProtocolError
from minibroker.coordinator.group.log_format import GroupValue, OffsetValue
from minibroker.coordinator.group.share_group import (
    ShareGroup,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
    ShareRecord,
    ShareSettings,
)
from minibroker.coordinator.group.share_group import validate as validate_share
from minibroker.coordinator.group.share_log_format import ShareRecordKind
from minibroker.coordinator.group.share_log_format import encode_key as encode_share_key
from minibroker.coordinator.group.share_log_format import encode_value as encode_share_value
from minibroker.coordinator.group.share_offsets import (
    UNINITIALIZED_START_OFFSET,
    InitTopic,
    ShareStatePartitions,
    TopicPartitions,
    plan_alter,
)
from minibroker.coordinator.group.state import (
    Group,
    GroupSettings,
    GroupState,
    JoinRequest,
    JoinResult,
    PartitionReplay,
    SyncResult,
)
from minibroker.coordinator.group.streams_entry import StreamsGroupEntry
from minibroker.coordinator.group.streams_group import (
    StreamsGroup,
    StreamsHeartbeatRequest,
    StreamsHeartbeatResult,
    StreamsSettings,
    restore_records,
)
from minibroker.coordinator.runtime import CoordinatorRuntime, InternalTopic
from minibroker.protocol.errors import Error
from minibroker.protocol.record_batch import (
    NO_PRODUCER_EPOCH,
)
from minibroker.protocol.records import NO_PRODUCER_ID
from minibroker.replication.partition import Partition
from minibroker.replication.purgatory import Watchers
from minibroker.replication.replica_manager import ReplicaManager
from minibroker.replication.share_persister import SharePersister, ShareStateKey

log = logging.getLogger("coordinator")

LOAD_READ_BYTES = 1024 * 1024

# Kafka's mapping of a failed append of offset commits to what clients expect.
_APPEND_ERRORS = {
    Error.UNKNOWN_TOPIC_OR_PARTITION: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_ENOUGH_REPLICAS: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_ENOUGH_REPLICAS_AFTER_APPEND: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_LEADER_OR_FOLLOWER: Error.NOT_COORDINATOR,
    Error.FENCED_LEADER_EPOCH: Error.NOT_COORDINATOR,
    Error.KAFKA_STORAGE_ERROR: Error.NOT_COORDINATOR,
    Error.MESSAGE_TOO_LARGE: Error.INVALID_COMMIT_OFFSET_SIZE,
    Error.RECORD_LIST_TOO_LARGE: Error.INVALID_COMMIT_OFFSET_SIZE,
}


# And of a failed write of a group's metadata (GroupMetadataManager.storeGroup): a timeout
# sends the members back to rebalance; anything unexpected is UNKNOWN_SERVER_ERROR, never a
# code a consumer treats as fatal for the wrong reason.
_STORE_GROUP_ERRORS = {
    Error.UNKNOWN_TOPIC_OR_PARTITION: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_ENOUGH_REPLICAS: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_ENOUGH_REPLICAS_AFTER_APPEND: Error.COORDINATOR_NOT_AVAILABLE,
    Error.COORDINATOR_NOT_AVAILABLE: Error.COORDINATOR_NOT_AVAILABLE,
    Error.NOT_LEADER_OR_FOLLOWER: Error.NOT_COORDINATOR,
    Error.FENCED_LEADER_EPOCH: Error.NOT_COORDINATOR,
    Error.KAFKA_STORAGE_ERROR: Error.NOT_COORDINATOR,
    Error.NOT_COORDINATOR: Error.NOT_COORDINATOR,
    Error.REQUEST_TIMED_OUT: Error.REBALANCE_IN_PROGRESS,
}


def _encoded(records: list[ConsumerRecord]) -> list[tuple[bytes, bytes | None]]:
    return [
        (encode_key(key), None if value is None else encode_value(value)) for key, value in records
    ]


def _encoded_streams(records: list[streams_log_format.Record]) -> list[tuple[bytes, bytes | None]]:
    return [
        (
            streams_log_format.encode_key(key),
            None if value is None else streams_log_format.encode_value(value),
        )
        for key, value in records
    ]


@dataclass(frozen=True)
class CommitRequest:
    group_id: str
    generation: int
    member_id: str
    group_instance_id: str | None
    # (topic, partition) -> (offset, leader epoch, metadata)
    offsets: dict[tuple[str, int], tuple[int, int, str]]


@dataclass(frozen=True)
class TxnCommitRequest:
    """A TxnOffsetCommit: offsets a transactional producer commits in its transaction."""

    group_id: str
    producer_id: int
    producer_epoch: int
    generation: int
    member_id: str
    group_instance_id: str | None
    # (topic, partition) -> (offset, leader epoch, metadata)
    offsets: dict[tuple[str, int], tuple[int, int, str]]


class GroupCoordinator:
    """The groups of the `__consumer_offsets` partitions this broker leads."""

    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self.replicas = replicas
        self.clock_ms = clock_ms or replicas.clock_ms
        self.settings = GroupSettings(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            max_size=config.group_max_size,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
        )
        self.consumer_settings = ConsumerSettings(
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            session_timeout_ms=config.group_consumer_session_timeout_ms,
            max_size=config.group_consumer_max_size,
            assignors=config.group_consumer_assignors,
            migration_policy=config.group_consumer_migration_policy,
        )
        self.groups: dict[str, Group] = {}
        self._changes = Watchers()
        # Producer id -> the groups it holds pending offsets of (Kafka's
        # openGroupsForProducer), so that a marker finds them without a scan of every group.
        # An entry may outlive its group (deleted, unloaded): a marker then finds no group.
        self._producer_groups: dict[int, set[str]] = {}
        self._nursery: trio.Nursery | None = None
        self.rebalances = 0
        # Group epoch bumps of the consumer protocol's groups.
        self.consumer_rebalances = 0
        # Group epoch bumps of the streams groups (KIP-1071).
        self.streams_rebalances = 0
        self.offset_commits = 0
        # Leadership of the `__consumer_offsets` partitions, their loading, writing as the
        # coordinator and the topic's creation: the runtime shared by every coordinator.
        self.runtime = CoordinatorRuntime(
            OFFSETS_TOPIC,
            replicas,
            loader=self._load,
            unloader=self._unload,
            default_partitions=lambda: self.config.offsets_topic_num_partitions,
            topic_spec=self._topic_spec,
            log=log,
        )
        replicas.marker_listeners.append(self._on_marker)
        replicas.topic_deletion_listeners.append(self._on_topics_deleted)
        # Share groups (KIP-932): beside the classic and consumer groups, one id namespace.
        self.share_groups: dict[str, ShareGroup] = {}
        self.share_settings = ShareSettings(
            heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
            session_timeout_ms=config.group_share_session_timeout_ms,
            max_size=config.group_share_max_size,
        )
        self.share_rebalances = 0
        # Where share partitions' state is kept (the share coordinator's persister, set by
        # node/ once it exists): the admin path and the initialization of share partitions
        # need it; without one, neither is done.
        self.share_persister: SharePersister | None = None
        # DescribeShareGroupOffsets' end offsets, asked of each partition's leader (Kafka's
        # PartitionMetadataClient); None: the high watermark of this broker's replica.
        self.latest_offset: Callable[[str, int], Awaitable[int | None]] | None = None
        # One initialization of a share group's partitions at a time (group -> its end).
        self._share_initializing: dict[str, trio.Event] = {}

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._expire_offsets_periodically)
            await nursery.start(self.runtime.run)
            task_status.started()

    # -- which groups are served here ------------------------------------------------------------

    def partition_count(self) -> int:
        return self.runtime.partition_count()

    def partition_of(self, group_id: str) -> int:
        return self.runtime.partition_for(group_id)

    def check(self, group_id: str) -> Error:
        """Whether this broker serves ``group_id`` now: NONE, or the error to answer."""
        return self.runtime.check(group_id)

    def _unload(self, index: int) -> None:
        """The runtime dropped (or is reloading) an offsets partition: forget its groups
        (Kafka's handleGroupEmigration)."""
        self._unload_share_groups(index)
        for group_id in [g for g in self.groups if self.partition_of(g) == index]:
            group = self.groups.pop(group_id)
            group.unload()
            self._notify(group_id)
            log.info(
                "unloaded group %s (no longer leader of %s-%d)", group_id, OFFSETS_TOPIC, index
            )

    async def _load(self, partition: Partition, epoch: int) -> Callable[[], None]:
        """Read the partition (the runtime's read_batches: from its start to its end) and
        return what installs its groups (Kafka's handleGroupImmigration). Transactional
        offset commits are replayed with their markers (see state.PartitionReplay)."""
        started = time.monotonic()
        replay = PartitionReplay()
        async for header, batch in self.runtime.read_batches(partition, epoch):
            replay.batch(header, batch)
            for offset, reason in replay.skipped:
                # A record of a newer layout (Kafka 3.x/4.x flexible values): skipped,
                # so the partition's other groups are still served.
                log.warning("skipping offset %d of %s: %s", offset, OFFSETS_TOPIC, reason)
            replay.skipped.clear()

        def install() -> None:
            self._install(partition, replay, started)
            self._install_share_groups(partition, replay)

        return install

    def _install(self, partition: Partition, replay: PartitionReplay, started: float) -> None:
        now = self.clock_ms()
        for group_id in replay.group_ids():
            group = Group(group_id, self.settings, now)
            value = replay.groups.get(group_id)
            consumer_records = replay.consumer_records(group_id)
            streams_records = replay.streams_records(group_id)
            if streams_records:
                group = self._restore_streams_group(group_id, streams_records, now)
            elif consumer_records:
                group = ConsumerGroup(
                    group_id, self.settings, self.consumer_settings_of(group_id), now
                )
                group.restore_records(consumer_records, now)
                group.prime_metadata(self.consumer_topic_lookup, self.topic_names)
            elif value is not None:
                group.restore(
                    value.protocol_type,
                    value.generation,
                    value.protocol,
                    value.leader,
                    value.current_state_timestamp,
                    value.members,
                    now,
                )
            replay.fill(group)
            for producer_id in group.pending_txn_offsets:
                self._producer_groups.setdefault(producer_id, set()).add(group_id)
            self._add_group(group)
        loaded = sum(1 for g in self.groups if self.partition_of(g) == partition.index)
        log.log(
            logging.INFO if loaded else logging.DEBUG,
            "loaded %d groups of %s-%d in %.0f ms",
            loaded,
            OFFSETS_TOPIC,
            partition.index,
            (time.monotonic() - started) * 1000,
        )

    def _add_group(self, group: Group) -> None:
        self.groups[group.group_id] = group
        self._arm(group)

    def _group(self, group_id: str, create: bool) -> Group | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = Group(group_id, self.settings, self.clock_ms())
            self._add_group(group)
        return group

    # -- timers -----------------------------------------------------------------------------------

    def _notify(self, group_id: str) -> None:
        """The group changed: wake whoever waits on it (parked joins and syncs) and re-arm
        its timer at its new next deadline."""
        self._changes.notify(group_id)
        group = self.groups.get(group_id)
        if group is None:
            self.runtime.cancel(group_id, group_id)
        else:
            self._arm(group)

    def _arm(self, group: Group) -> None:
        """The group's one timer (the runtime's, keyed by the group id, as Kafka's
        GroupMetadataManager keys its session and join timers by group and member), armed
        at the group's next deadline (session, join phase, lapsed member id), re-armed at
        every change and cancelled when the partition is unloaded."""
        deadline_ms = group.next_deadline_ms()
        if deadline_ms is None:
            self.runtime.cancel(group.group_id, group.group_id)
            return
        delay_s = max(deadline_ms - self.clock_ms(), 0) / 1000
        self.runtime.schedule(
            group.group_id, group.group_id, delay_s, partial(self._on_deadline, group)
        )

    async def _on_deadline(self, group: Group) -> None:
        """The group's deadline came: expire what is due."""
        if self.groups.get(group.group_id) is not group:
            return
        if isinstance(group, StreamsGroupEntry):
            await self._expire_streams_group(group)
        elif isinstance(group, ConsumerGroup):
            records = group.expire(self.clock_ms())
            self._notify(group.group_id)
            if records:
                await self._write_consumer_records(group, records)
            if group.downgrade_leaving is not None:
                await self._downgrade(group)
        else:
            generation = group.generation
            group.expire(self.clock_ms())
            self._after_change(group, generation)
        if self.groups.get(group.group_id) is group:
            self._arm(group)

    def _store_empty_group(self, group: Group) -> None:
        """A group left empty by a rebalance is written as such (Kafka does the same), in the
        background: nobody waits for it."""
        assert self._nursery is not None
        self._nursery.start_soon(self._store_group, group, group.generation)

    async def _store_group(self, group: Group, generation: int) -> Error:
        value = GroupValue(
            group.protocol_type or "",
            generation,
            group.protocol_name,
            group.leader_id,
            group.state_timestamp_ms,
            tuple(group.records()),
        )
        error = await self._append(
            group.group_id, [(log_format.group_key(group.group_id), log_format.group_value(value))]
        )
        if error == Error.NONE:
            return error
        return _STORE_GROUP_ERRORS.get(error, Error.UNKNOWN_SERVER_ERROR)

    # -- writing records ----------------------------------------------------------------------

    async def _append(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]]) -> Error:
        error, _ = await self._append_at(group_id, records)
        return error

    async def _append_at(
        self,
        group_id: str,
        records: Sequence[tuple[bytes, bytes | None]],
        *,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> tuple[Error, int]:
        """Write records to the group's partition as the coordinator (the runtime's
        write: append_records with AppendOrigin.COORDINATOR, acks=-1), answered once the ISR
        has them, or at offsets.commit.timeout.ms. Also the offset the batch was written at.
        With a producer id the batch is a transactional one of that producer (a
        TxnOffsetCommit)."""
        error, base_offset = await self.runtime.write(
            group_id,
            records,
            timeout_s=self.config.offsets_commit_timeout_ms / 1000,
            now_ms=self.clock_ms(),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
        )
        return _APPEND_ERRORS.get(error, error), base_offset

    # -- membership ---------------------------------------------------------------------------

    async def join(self, group_id: str, request: JoinRequest) -> JoinResult:
        if (
            not self.settings.min_session_timeout_ms
            <= request.session_timeout_ms
            <= (self.settings.max_session_timeout_ms)
        ):
            return JoinResult(Error.INVALID_SESSION_TIMEOUT, member_id=request.member_id)
        if (error := self.check(group_id)) != Error.NONE:
            return JoinResult(error, member_id=request.member_id)
        if self.share_conflict(group_id):  # Kafka's classicGroupJoin: another type's group
            return JoinResult(Error.INCONSISTENT_GROUP_PROTOCOL, member_id="")
        group = self._group(group_id, create=request.member_id == "")
        if group is None:
            return JoinResult(Error.UNKNOWN_MEMBER_ID, member_id=request.member_id)
        if isinstance(group, ConsumerGroup) and not group.is_empty:
            # A classic member of a consumer group (Kafka's classicGroupJoinToConsumerGroup).
            group.consumer = self.consumer_settings_of(group_id)
            joined, records = group.classic_join(
                request, self.consumer_topic_lookup, self.clock_ms(), self.topic_names
            )
            self._notify(group_id)
            if records:
                error = await self._write_consumer_records(group, records)
                if error != Error.NONE:
                    return JoinResult(error, member_id=request.member_id)
            return joined
        if isinstance(group, ConsumerGroup) and group.is_empty and request.member_id == "":
            # Kafka converts an empty consumer group to a classic one on a JoinGroup.
            group = await self._convert_group(group, Group(group_id, self.settings, 0))
            if group is None:
                return JoinResult(Error.COORDINATOR_NOT_AVAILABLE, member_id=request.member_id)
        moving_back = isinstance(group, StreamsGroupEntry) and group.is_empty
        if moving_back and not group.is_(GroupState.DEAD):
            # An application moving back from the streams protocol: Kafka 4.4's
            # classicGroupJoinToClassicGroup deletes an empty streams group
            # (maybeDeleteEmptyStreamsGroup) and the classic group takes its offsets; a
            # streams group with members answers INCONSISTENT_GROUP_PROTOCOL (its join()).
            converted = await self._convert_group(group, Group(group_id, self.settings, 0))
            if converted is None:
                return JoinResult(Error.COORDINATOR_NOT_AVAILABLE, member_id=request.member_id)
            if request.member_id != "":
                # Kafka: the classic group is not created for a known member id
                # (getOrMaybeCreateClassicGroup), UNKNOWN_MEMBER_ID.
                return JoinResult(Error.UNKNOWN_MEMBER_ID, member_id=request.member_id)
            group = converted
        generation = group.generation
        member, answer = group.join(request, self.clock_ms())
        self._after_change(group, generation)
        if answer is not None:
            static_takeover = (
                answer.error == Error.NONE
                and request.group_instance_id is not None
                and request.member_id == ""
            )
            if static_takeover:
                # A restarted static member took over its entry without a rebalance: the new
                # member id is written before it is answered, as Kafka does, or a coordinator
                # failover would bring back the old id and fence the new one.
                error = await self._store_group(group, group.generation)
                if error != Error.NONE:
                    return JoinResult(error, member_id=request.member_id)
            return answer
        assert member is not None
        while member.join_result is None:
            await self._changes.wait_any([group_id], float("inf"), "JoinGroup")
        return member.join_result

    async def sync(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation: int,
        assignments: dict[str, bytes],
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncResult:
        """A SyncGroup; ``protocol_type`` and ``protocol_name`` (v5+) must match the
        group's when given."""
        if (error := self.check(group_id)) != Error.NONE:
            return SyncResult(error)
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(Error.UNKNOWN_MEMBER_ID)
        if isinstance(group, ConsumerGroup):
            synced = group.classic_sync(
                member_id, instance_id, generation, protocol_type, protocol_name, self.clock_ms()
            )
            self._notify(group_id)
            return synced
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None
            and group.protocol_name is not None
            and protocol_name != group.protocol_name
        ):
            return SyncResult(Error.INCONSISTENT_GROUP_PROTOCOL)
        member, answer, store = group.sync(
            member_id, instance_id, generation, assignments, self.clock_ms()
        )
        self._notify(group_id)
        if answer is not None:
            return answer
        assert member is not None
        if store:
            error = await self._store_group(group, generation)
            group.complete_sync(generation, error, self.clock_ms())
            self._notify(group_id)
        while member.sync_result is None:
            await self._changes.wait_any([group_id], float("inf"), "SyncGroup")
        return member.sync_result

    def heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> Error:
        if (error := self.check(group_id)) != Error.NONE:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return Error.UNKNOWN_MEMBER_ID
        error = group.heartbeat(member_id, instance_id, generation, self.clock_ms())
        self._notify(group_id)
        return error

    async def leave(self, group_id: str, members: Iterable[tuple[str, str | None]]) -> list[Error]:
        """LeaveGroup for each (member id, group instance id); an error for the whole
        request (not coordinator, unknown group) is returned alone."""
        if (error := self.check(group_id)) != Error.NONE:
            return [error]
        group = self.groups.get(group_id)
        if group is None:
            return [Error.UNKNOWN_MEMBER_ID]
        if isinstance(group, ConsumerGroup):
            errors, records = group.classic_leave(members, self.clock_ms())
            self._notify(group_id)
            if records:
                error = await self._write_consumer_records(group, records)
                if error != Error.NONE:
                    return [error]
            return errors
        generation = group.generation
        results = [
            group.leave(member_id, instance_id, self.clock_ms())
            for member_id, instance_id in members
        ]
        self._after_change(group, generation)
        return results

    def _after_change(self, group: Group, generation_before: int) -> None:
        if group.generation != generation_before:
            self.rebalances += 1
            if group.is_(GroupState.EMPTY):
                self._store_empty_group(group)
        self._notify(group.group_id)

    # -- offsets --------------------------------------------------------------------------------

    def _commit_error(self, group: Group | None, request: CommitRequest) -> Error:
        """Kafka's checks before an offset commit is written, in Kafka's order (a classic
        group's are Group.validate_classic_offset_commit); an accepted member's commit keeps its
        session, as a heartbeat would."""
        if group is None:
            return Error.NONE if request.generation < 0 else Error.ILLEGAL_GENERATION
        if group.is_(GroupState.DEAD):
            return Error.COORDINATOR_NOT_AVAILABLE
        if isinstance(group, ConsumerGroup):
            # OffsetCommit v9+ names the member epoch (KIP-848).
            return group.validate_offset_commit(request.member_id, request.generation)
        error = group.validate_classic_offset_commit(
            request.member_id, request.group_instance_id, request.generation, transactional=False
        )
        member = group.members.get(request.member_id)
        if error == Error.NONE and member is not None:
            member.session_deadline_ms = self.clock_ms() + member.session_timeout_ms
        return error

    async def commit(self, request: CommitRequest) -> dict[tuple[str, int], Error]:
        """OffsetCommit: every partition's outcome. Offsets become visible to OffsetFetch
        only once the ISR has them."""
        results: dict[tuple[str, int], Error] = {}
        error = self.check(request.group_id)
        group = self.groups.get(request.group_id) if error == Error.NONE else None
        if error == Error.NONE:
            error = self._commit_error(group, request)
        if error == Error.NONE and self.share_conflict(request.group_id):
            error = Error.GROUP_ID_NOT_FOUND  # Kafka's ShareGroup.validateOffsetCommit
        if error != Error.NONE:
            return dict.fromkeys(request.offsets, error)
        records = []
        accepted: dict[tuple[str, int], OffsetValue] = {}
        now = self.clock_ms()
        for (topic, index), (offset, leader_epoch, metadata) in request.offsets.items():
            known = self.replicas.metadata.topic(topic)
            if known is None or index not in known.partitions:
                results[(topic, index)] = Error.UNKNOWN_TOPIC_OR_PARTITION
            elif len((metadata or "").encode()) > self.config.offset_metadata_max_bytes:
                results[(topic, index)] = Error.OFFSET_METADATA_TOO_LARGE
            else:
                value = OffsetValue(offset, leader_epoch, metadata or "", now)
                accepted[(topic, index)] = value
                key = log_format.offset_key(request.group_id, topic, index)
                records.append((key, log_format.offset_value(value)))
        if not records:
            return results
        error, written_at = await self._append_at(request.group_id, records)
        if error == Error.NONE and self.check(request.group_id) == Error.NONE:
            # (No longer served here: the new coordinator reads the commit from the log.)
            group = self._group(request.group_id, create=True)
            assert group is not None
            group.on_offset_commit_append(accepted, written_at)
            self.offset_commits += len(accepted)
        results.update(dict.fromkeys(accepted, error))
        return results

    # -- transactional offsets -------------------------------------------------------------------

    def _txn_commit_error(self, group: Group, request: TxnCommitRequest) -> Error:
        """Kafka's GroupCoordinator.validateOffsetCommit for a transactional commit: a
        producer that names no member (TxnOffsetCommit v0-v2, or a producer outside any
        group) commits freely; one that names a member or generation (v3+, KIP-447) must be
        the group's current member of that generation."""
        if group.is_(GroupState.DEAD):
            return Error.COORDINATOR_NOT_AVAILABLE
        if isinstance(group, ConsumerGroup):
            return group.validate_offset_commit(request.member_id, request.generation)
        return group.validate_classic_offset_commit(
            request.member_id, request.group_instance_id, request.generation, transactional=True
        )

    async def commit_transactional_offsets(
        self, request: TxnCommitRequest
    ) -> dict[tuple[str, int], Error]:
        """TxnOffsetCommit (Kafka's handleTxnCommitOffsets and storeOffsets with
        isTxnOffsetCommit): the offsets are written in a transactional batch of the
        producer and held pending (invisible to OffsetFetch; require_stable answers
        UNSTABLE_OFFSET_COMMIT) until the transaction's marker completes them (`_on_marker`).
        The caller has answered the partitions of unknown topics. A group that does not
        exist yet is created, as Kafka does."""
        error = self.check(request.group_id)
        if error == Error.NONE and self.share_conflict(request.group_id):
            error = Error.GROUP_ID_NOT_FOUND  # Kafka's ShareGroup.validateOffsetCommit
        if error != Error.NONE:
            return dict.fromkeys(request.offsets, error)
        group = self._group(request.group_id, create=True)
        assert group is not None
        if (error := self._txn_commit_error(group, request)) != Error.NONE:
            return dict.fromkeys(request.offsets, error)
        results: dict[tuple[str, int], Error] = {}
        records = []
        accepted: dict[tuple[str, int], OffsetValue] = {}
        now = self.clock_ms()
        for (topic, index), (offset, leader_epoch, metadata) in request.offsets.items():
            if len((metadata or "").encode()) > self.config.offset_metadata_max_bytes:
                results[(topic, index)] = Error.OFFSET_METADATA_TOO_LARGE
                continue
            value = OffsetValue(offset, leader_epoch, metadata or "", now)
            accepted[(topic, index)] = value
            key = log_format.offset_key(request.group_id, topic, index)
            records.append((key, log_format.offset_value(value)))
        if not records:
            return results
        replaced = group.prepare_txn_offset_commit(request.producer_id, accepted)
        self._producer_groups.setdefault(request.producer_id, set()).add(request.group_id)
        error, written_at = await self._append_at(
            request.group_id,
            records,
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
        )
        if self.groups.get(request.group_id) is group:
            if error == Error.NONE:
                group.on_txn_offset_commit_append(request.producer_id, accepted, written_at)
                self.offset_commits += len(accepted)
            else:
                group.fail_pending_txn_offset_commit(request.producer_id, accepted, replaced)
        results.update(dict.fromkeys(accepted, error))
        return results

    def _on_marker(self, topic: str, index: int, producer_id: int, commit: bool) -> None:
        """A transaction marker was appended as leader to a partition (the replica manager's
        marker listener): on a `__consumer_offsets` partition served here, the producer's
        pending offsets of its groups are committed or dropped (Kafka's
        handleTxnCompletion). A partition still loading reads the marker from its log."""
        if topic != OFFSETS_TOPIC or self.runtime.ownership.check(index) != Error.NONE:
            return
        group_ids = self._producer_groups.get(producer_id, set())
        for group_id in sorted(group_ids):
            if self.partition_of(group_id) != index:
                continue  # (its marker on another offsets partition completes it)
            group_ids.discard(group_id)
            group = self.groups.get(group_id)
            if group is None or not group.has_pending_offsets_from(producer_id):
                continue
            applied = group.complete_txn_offset_commit(producer_id, commit)
            log.debug(
                "%s of producer %d: %d offsets of group %s applied",
                "COMMIT" if commit else "ABORT",
                producer_id,
                applied,
                group.group_id,
            )
        if not group_ids:
            self._producer_groups.pop(producer_id, None)

    def unstable_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """The partitions whose offsets a transaction of the group holds pending (OffsetFetch
        with require_stable answers them UNSTABLE_OFFSET_COMMIT)."""
        group = self.groups.get(group_id)
        return group.pending_txn_keys() if group is not None else set()

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> tuple[Error, dict[tuple[str, int], OffsetValue | None]]:
        """OffsetFetch of one group: the committed offset of each partition asked for (None
        when there is none), or of every partition with one when ``partitions`` is None."""
        if (error := self.check(group_id)) != Error.NONE:
            return error, {}
        if self.share_conflict(group_id):
            return Error.GROUP_ID_NOT_FOUND, {}  # Kafka's ShareGroup.validateOffsetFetch
        group = self.groups.get(group_id)
        committed = group.offsets if group is not None else {}
        if partitions is None:
            return Error.NONE, dict(committed)
        return Error.NONE, {key: committed.get(key) for key in partitions}

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[Error, dict[tuple[str, int], Error]]:
        """OffsetDelete: only for partitions of topics no member subscribes to."""
        if (error := self.check(group_id)) != Error.NONE:
            return error, {}
        group = self.groups.get(group_id)
        if group is None:
            return Error.GROUP_ID_NOT_FOUND, {}
        subscribed = group.subscribed_topics()
        if subscribed is None and not group.is_(GroupState.EMPTY):
            return Error.NON_EMPTY_GROUP, {}
        results: dict[tuple[str, int], Error] = {}
        tombstones = []
        for topic, index in partitions:
            if subscribed is not None and topic in subscribed:
                results[(topic, index)] = Error.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                results[(topic, index)] = Error.NONE
                # Kafka 4 writes a tombstone for a pending transactional offset too.
                if (topic, index) in group.offsets or group.has_pending_txn_offset((topic, index)):
                    tombstones.append((log_format.offset_key(group_id, topic, index), None))
        if tombstones:
            error = await self._append(group_id, tombstones)
            if error != Error.NONE:
                return error, {}
            group.remove_offsets(key for key, e in results.items() if e == Error.NONE)
        return Error.NONE, results

    # -- admin ---------------------------------------------------------------------------------

    def list_groups(self) -> tuple[Error, list[Group]]:
        """Every live group served here; COORDINATOR_LOAD_IN_PROGRESS along with them while a
        partition is still loading (the list is incomplete), as Kafka answers."""
        error = Error.COORDINATOR_LOAD_IN_PROGRESS if self.runtime.is_loading() else Error.NONE
        return error, [g for g in self.groups.values() if not g.is_(GroupState.DEAD)]

    def describe(self, group_id: str) -> tuple[Error, Group | None]:
        if (error := self.check(group_id)) != Error.NONE:
            return error, None
        return Error.NONE, self.groups.get(group_id)

    async def delete_group(self, group_id: str) -> Error:
        """DeleteGroups of one group: it is Dead and gone from memory before its tombstones
        are written (as Kafka does), so nothing can join it meanwhile."""
        if (error := self.check(group_id)) != Error.NONE:
            return error
        if self.share_conflict(group_id):
            return await self.delete_share_group(group_id)
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return Error.GROUP_ID_NOT_FOUND
        if not group.is_(GroupState.EMPTY):
            return Error.NON_EMPTY_GROUP
        self._remove_group(group)
        # Kafka 4's deleteAllOffsets: the offsets transactions hold pending go too (a
        # tombstone each), so a later COMMIT marker finds nothing to apply.
        deleted = sorted(set(group.offsets) | group.pending_txn_keys())
        group.remove_offsets(deleted)
        return await self._append(group_id, self._tombstones(group, deleted))

    def _remove_group(self, group: Group) -> None:
        group.mark_dead(self.clock_ms())
        del self.groups[group.group_id]
        self._notify(group.group_id)

    @staticmethod
    def _tombstones(group: Group, offsets: list[tuple[str, int]], whole: bool = True) -> list:
        records: list[tuple[bytes, bytes | None]] = [
            (log_format.offset_key(group.group_id, t, p), None) for t, p in offsets
        ]
        if whole:
            if isinstance(group, ConsumerGroup):
                records.extend(_encoded(group.tombstones()))
            if isinstance(group, StreamsGroupEntry):
                records.extend(_encoded_streams(group.streams.tombstones()))
            records.append((log_format.group_key(group.group_id), None))
        return records

    async def _expire_offsets_periodically(self) -> None:
        """Kafka's offsets.retention.minutes, checked every
        offsets.retention.check.interval.ms (see Group.expired_offsets); an Empty group left
        with no offsets (every member left without committing, or a join that never
        completed) is deleted too, as Kafka's cleanupGroupMetadata does."""
        while True:
            await trio.sleep(self.config.offsets_retention_check_interval_ms / 1000)
            await self.expire_offsets(self.clock_ms())

    async def expire_offsets(self, now: int) -> None:
        for group in list(self.groups.values()):
            if self.check(group.group_id) != Error.NONE or not group.is_(GroupState.EMPTY):
                continue
            expired = group.expired_offsets(now, self.config.offsets_retention_ms)
            # A group some transaction holds offsets of stays (Kafka's cleanupExpiredOffsets).
            whole = (
                len(expired) == len(group.offsets)
                and not group.pending_members
                and not group.pending_txn_offsets
            )
            if not whole and not expired:
                continue
            if whole:
                self._remove_group(group)
            else:
                group.remove_offsets(expired)
            error = await self._append(group.group_id, self._tombstones(group, expired, whole))
            if error != Error.NONE:
                log.warning("cannot write the expiry of group %s's offsets", group.group_id)
            elif expired:
                log.info("expired %d offsets of group %s", len(expired), group.group_id)

    # -- the offsets topic ------------------------------------------------------------------------

    def _topic_spec(self) -> InternalTopic:
        """Kafka's offsetsTopicConfigs; the replication factor is
        min(offsets.topic.replication.factor, live brokers), so a single node has groups too
        (Kafka would refuse until enough brokers are up)."""
        live = max(len(self.replicas.metadata.brokers), 1)
        return InternalTopic(
            self.config.offsets_topic_num_partitions,
            min(self.config.offsets_topic_replication_factor, live),
            {"segment.bytes": str(self.config.offsets_topic_segment_bytes)},
        )

    # -- the consumer group protocol (KIP-848) ---------------------------------------------------

    def topic_lookup(self, name: str) -> tuple[uuid.UUID, int] | None:
        """A topic's id and partition count as this broker's metadata has them."""
        topic = self.replicas.metadata.topic(name)
        if topic is None or not topic.partitions:
            return None
        return topic.topic_id, len(topic.partitions)

    def consumer_topic_lookup(
        self, name: str
    ) -> tuple[uuid.UUID, int, tuple[tuple[str, ...], ...]] | None:
        """A topic's id, partition count and its partitions' replica racks, for consumer
        groups: a change of any of them bumps the group epoch (KIP-1101, Kafka 4.1+)."""
        topic = self.replicas.metadata.topic(name)
        if topic is None or not topic.partitions:
            return None
        metadata = self.replicas.metadata
        return topic.topic_id, len(topic.partitions), metadata.partition_racks(topic)

    def topic_names(self) -> list[str]:
        """Every topic this broker's metadata knows (regex subscriptions match them)."""
        return list(self.replicas.metadata.topics)

    async def _write_consumer_records(
        self, group: ConsumerGroup, records: list[ConsumerRecord]
    ) -> Error:
        bumped = sum(
            1
            for key, value in records
            if value is not None and key.kind == RecordKind.GROUP_METADATA
        )
        self.consumer_rebalances += bumped
        error = await self._append(group.group_id, _encoded(records))
        if error != Error.NONE:
            log.warning("cannot write consumer group %s's records: %s", group.group_id, error.name)
            return _STORE_GROUP_ERRORS.get(error, Error.UNKNOWN_SERVER_ERROR)
        return Error.NONE

    async def _convert_group(self, old: Group, new: Group) -> Group | None:
        """An empty group changes type (Kafka converts an empty classic group on a
        ConsumerGroupHeartbeat, an empty consumer group and an empty streams group on a
        JoinGroup): the committed offsets carry over; a consumer or streams group's records
        are tombstoned."""
        new.offsets = old.offsets
        new.offset_record_offsets = old.offset_record_offsets
        new.pending_txn_offsets = old.pending_txn_offsets
        if isinstance(old, (ConsumerGroup, StreamsGroupEntry)):
            # Its records go, and an empty classic group's replaces whatever classic record
            # the group had before it became a consumer or streams group.
            empty = GroupValue("", 0, None, None, self.clock_ms(), ())
            records = (
                _encoded(old.tombstones())
                if isinstance(old, ConsumerGroup)
                else _encoded_streams(old.streams.tombstones())
            )
            records.append((log_format.group_key(old.group_id), log_format.group_value(empty)))
            error = await self._append(old.group_id, records)
            if error != Error.NONE or self.groups.get(old.group_id) is not old:
                return None
        old.mark_dead(self.clock_ms())
        self._notify(old.group_id)
        self._add_group(new)
        return new

    async def consumer_heartbeat(self, group_id: str, request: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat (Kafka's GroupCoordinatorService.consumerGroupHeartbeat):
        validated, applied to the group's state machine, and answered once the records the
        change made are in the log (acks=all). Departure: a failed write is answered with its
        error but the change stays in memory (Kafka reverts to the last committed state); the
        log and memory agree again at the next load."""
        try:
            validate(request, group_id, self.consumer_settings.assignors)
        except HeartbeatError as invalid:
            log.info("ConsumerGroupHeartbeat to group %s refused: %s", group_id, invalid.message)
            return HeartbeatResult(invalid.error, invalid.message)
        if (error := self.check(group_id)) != Error.NONE:
            return HeartbeatResult(error)
        if self.share_conflict(group_id):
            return HeartbeatResult(
                Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
            )
        # The group's own configs, read at each heartbeat as Kafka's GroupMetadataManager
        # reads them: a change applies to each member at its next heartbeat (the interval it
        # is told, the session its deadline is set with).
        settings = self.consumer_settings_of(group_id)
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            if request.member_epoch != 0:
                return HeartbeatResult(
                    Error.UNKNOWN_MEMBER_ID, f"Group {group_id} has no member {request.member_id}."
                )
            group = ConsumerGroup(group_id, self.settings, settings, self.clock_ms())
            self._add_group(group)
        elif isinstance(group, StreamsGroupEntry):
            # A group id is of one type (Kafka's castToConsumerGroup).
            return HeartbeatResult(
                Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
            )
        elif not isinstance(group, ConsumerGroup):
            if not group.is_(GroupState.EMPTY) or group.members:
                refusal = self._upgrade_refusal(group)
                if request.member_epoch != 0 or refusal is not None:
                    message = refusal or f"Group {group_id} is not a consumer group."
                    return HeartbeatResult(Error.GROUP_ID_NOT_FOUND, message)
                upgraded = await self._upgrade(group, settings)
                if isinstance(upgraded, HeartbeatResult):
                    return upgraded
                group = upgraded
            else:
                converted = await self._convert_group(
                    group, ConsumerGroup(group_id, self.settings, settings, 0)
                )
                if converted is None:
                    return HeartbeatResult(Error.COORDINATOR_NOT_AVAILABLE)
                assert isinstance(converted, ConsumerGroup)
                group = converted
        group.consumer = settings
        result, records = group.consumer_heartbeat(
            request, self.consumer_topic_lookup, self.clock_ms(), self.topic_names
        )
        self._notify(group_id)
        if records:
            error = await self._write_consumer_records(group, records)
            if error != Error.NONE:
                return HeartbeatResult(error)
        if group.downgrade_leaving is not None:
            await self._downgrade(group)
        return result

    async def _upgrade(
        self, classic: Group, settings: ConsumerSettings
    ) -> "ConsumerGroup | HeartbeatResult":
        """Kafka's convertToConsumerGroup (online upgrade, validateOnlineUpgrade passed):
        the classic group's parked JoinGroup and SyncGroup requests are answered
        REBALANCE_IN_PROGRESS, the consumer group takes its place (members, committed
        offsets) and its records are written. Departure: Kafka tombstones the classic group's
        record; minibroker writes an empty classic group there instead (its replay of a
        classic tombstone drops the group's offsets, as Kafka 3's loader did), which a
        consumer group's records take precedence over at load."""
        group_id = classic.group_id
        try:
            group, records = ConsumerGroup.from_classic(
                classic, settings, self.consumer_topic_lookup, self.clock_ms()
            )
        except EmbeddedProtocolError:
            return HeartbeatResult(
                Error.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade the classic group {group_id} to consumer group because the "
                "embedded consumer protocol is malformed.",
            )
        for member in classic.members.values():
            classic._answer_parked(member, Error.REBALANCE_IN_PROGRESS)
        self._swap(classic, group)
        empty = GroupValue("", 0, None, None, self.clock_ms(), ())
        encoded: list[tuple[bytes, bytes | None]] = [
            (log_format.group_key(group_id), log_format.group_value(empty))
        ]
        encoded += _encoded(records)
        error = await self._append(group_id, encoded)
        if error != Error.NONE:
            return HeartbeatResult(_STORE_GROUP_ERRORS.get(error, Error.UNKNOWN_SERVER_ERROR))
        log.info("upgraded classic group %s to a consumer group", group_id)
        return group

    async def _downgrade(self, group: ConsumerGroup) -> None:
        """Kafka's convertToClassicGroup (online downgrade): the last consumer-protocol
        member left, the classic members remain; the group becomes a classic group (its
        consumer records tombstoned, its classic record written with each member's target
        assignment) and a rebalance is prepared so that the members rejoin."""
        now = self.clock_ms()
        if self.groups.get(group.group_id) is not group:
            return
        valid, fenced = group.downgrade_still_valid(now)
        if not valid:
            if fenced:
                await self._write_consumer_records(group, fenced)
            return
        classic = group.to_classic(now)
        records = _encoded(group.tombstones())
        classic._prepare_rebalance(now)
        self._swap(group, classic)
        value = GroupValue(
            classic.protocol_type or "",
            classic.generation,
            classic.protocol_name,
            classic.leader_id,
            classic.state_timestamp_ms,
            tuple(classic.records()),
        )
        records.append((log_format.group_key(group.group_id), log_format.group_value(value)))
        error = await self._append(group.group_id, records)
        if error != Error.NONE:
            log.warning("cannot write group %s's downgrade: %s", group.group_id, error.name)
        log.info("downgraded consumer group %s to a classic group", group.group_id)

    def _swap(self, old: Group, new: Group) -> None:
        """``new`` takes ``old``'s place (and its committed and pending offsets) at once."""
        new.offsets = old.offsets
        new.offset_record_offsets = old.offset_record_offsets
        new.pending_txn_offsets = old.pending_txn_offsets
        old.mark_dead(self.clock_ms())
        self._add_group(new)
        self._notify(old.group_id)

    def _upgrade_refusal(self, group: Group) -> str | None:
        """Why a classic group with members is not upgraded online on a
        ConsumerGroupHeartbeat (Kafka's validateOnlineUpgrade, its messages in its order), or
        None when it is."""
        reason = None
        if self.config.group_consumer_migration_policy not in ("upgrade", "bidirectional"):
            reason = "online upgrade is disabled"
        elif group.protocol_type != "consumer":
            reason = "the group does not use the consumer embedded protocol"
        elif len(group.members) > self.consumer_settings.max_size:
            reason = "the group size exceeds the consumer group maximum size"
        if reason is None:
            return None
        return f"Cannot upgrade classic group {group.group_id} to consumer group because {reason}."

    def consumer_settings_of(self, group_id: str) -> ConsumerSettings:
        """The broker's group.consumer.* settings with the group's own configs over them
        (consumer.session.timeout.ms, consumer.heartbeat.interval.ms: GROUP resources)."""
        session, heartbeat = consumer_overrides(self.replicas.group_configs.get(group_id, {}))
        policy = self.config.group_consumer_migration_policy
        if (
            session is None
            and heartbeat is None
            and policy == self.consumer_settings.migration_policy
        ):
            return self.consumer_settings
        return replace(
            self.consumer_settings,
            session_timeout_ms=session or self.consumer_settings.session_timeout_ms,
            heartbeat_interval_ms=heartbeat or self.consumer_settings.heartbeat_interval_ms,
            migration_policy=policy,
        )

    def share_settings_of(self, group_id: str) -> ShareSettings:
        """The broker's group.share.* settings with the group's own share.session.timeout.ms
        and share.heartbeat.interval.ms over them (GROUP resources; Kafka's
        GroupMetadataManager.shareGroupSessionTimeoutMs and shareGroupHeartbeatIntervalMs,
        read at each heartbeat: a member's session is timed, and its next heartbeat asked
        for, at the values of the time). Their bounds, the broker's group.share.min/max.*,
        were checked when they were set (group_configs.validate)."""
        session, heartbeat = consumer_overrides(
            self.replicas.group_configs.get(group_id, {}), "share"
        )
        if session is None and heartbeat is None:
            return self.share_settings
        return replace(
            self.share_settings,
            session_timeout_ms=session or self.share_settings.session_timeout_ms,
            heartbeat_interval_ms=heartbeat or self.share_settings.heartbeat_interval_ms,
        )

    def describe_consumer_group(
        self, group_id: str
    ) -> tuple[Error, str | None, ConsumerGroup | None]:
        """ConsumerGroupDescribe of one group: GROUP_ID_NOT_FOUND for an unknown group or a
        classic one, as Kafka answers."""
        if (error := self.check(group_id)) != Error.NONE:
            return error, None, None
        group = self.groups.get(group_id)
        if group is None and self.share_conflict(group_id):
            return Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.", None
        if group is None or group.is_(GroupState.DEAD):
            return Error.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        if not isinstance(group, ConsumerGroup):
            return Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.", None
        return Error.NONE, None, group

    def validate_offset_fetch(
        self, group_id: str, member_id: str | None, member_epoch: int
    ) -> Error:
        """OffsetFetch v9+ from a consumer group member: its epoch must be current."""
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup | StreamsGroupEntry):
            return group.validate_offset_fetch(member_id, member_epoch)
        return Error.NONE

    # -- share groups (KIP-932) -------------------------------------------------------------------
    #
    # Kafka's GroupMetadataManager.shareGroupHeartbeat / shareGroupDescribe on the pure
    # ShareGroup (share_group.py): its records are written to the group's `__consumer_offsets`
    # partition through the runtime (acks=-1) before the heartbeat is answered and replayed
    # when the partition is loaded; one runtime timer per group fences the members whose
    # session (group.share.session.timeout.ms) lapsed. A group id is of one type: a
    # classic or consumer group's id is GROUP_ID_NOT_FOUND to ShareGroupHeartbeat and
    # ShareGroupDescribe, and a share group's id is refused by the classic and consumer
    # protocols (share_conflict). Departure: a failed write is answered with its error but the
    # change stays in memory, as for the consumer groups (see consumer_heartbeat).

    def _share_timer(self, group_id: str) -> str:
        return f"share:{group_id}"

    def share_conflict(self, group_id: str) -> bool:
        """Whether ``group_id`` is a share group's (the classic and consumer protocols then
        refuse it: JoinGroup INCONSISTENT_GROUP_PROTOCOL, ConsumerGroupHeartbeat and the
        offset APIs GROUP_ID_NOT_FOUND, as Kafka answers)."""
        return group_id in self.share_groups

    def _not_share(self, group_id: str) -> bool:
        """Whether a live classic or consumer group holds ``group_id``."""
        group = self.groups.get(group_id)
        return group is not None and not group.is_(GroupState.DEAD)

    async def share_heartbeat(
        self, group_id: str, request: ShareHeartbeatRequest
    ) -> ShareHeartbeatResult:
        """ShareGroupHeartbeat (Kafka's GroupCoordinatorService.shareGroupHeartbeat):
        validated, routed to the group's coordinator, applied to the group and answered once
        its records are in the log."""
        try:
            validate_share(request, group_id)
        except HeartbeatError as invalid:
            return ShareHeartbeatResult(invalid.error, invalid.message)
        if (error := self.check(group_id)) != Error.NONE:
            return ShareHeartbeatResult(error)
        if self._not_share(group_id):
            return ShareHeartbeatResult(
                Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
            )
        group = self.share_groups.get(group_id)
        if group is None:
            if request.member_epoch == -1:
                return ShareHeartbeatResult(
                    Error.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
                )
            if request.member_epoch != 0:
                return ShareHeartbeatResult(
                    Error.UNKNOWN_MEMBER_ID,
                    f"Member {request.member_id} is not a member of group {group_id}.",
                )
            group = ShareGroup(group_id, self.share_settings)
            self.share_groups[group_id] = group
        # The group's share.session.timeout.ms and share.heartbeat.interval.ms, read at each
        # heartbeat as Kafka's shareGroupSessionTimeoutMs / shareGroupHeartbeatIntervalMs.
        group.settings = self.share_settings_of(group_id)
        result, records = group.heartbeat(request, self.consumer_topic_lookup, self.clock_ms())
        self._arm_share(group)
        if records:
            error = await self._write_share_records(group, records)
            if error != Error.NONE:
                return ShareHeartbeatResult(error)
        if result.error == Error.NONE and request.member_epoch != -1:
            await self._initialize_share_partitions(group)
        return result

    # Kafka's maybeCreateInitializeShareGroupStateRequest, persisterInitialize,
    # initializeShareGroupState and uninitializeShareGroupState: the subscribed share
    # partitions without state are recorded as initializing, the persister creates their state
    # (InitializeShareGroupState, the group epoch as state epoch, start offset -1: the leader
    # starts them at share.auto.offset.reset), then they are recorded as initialized (or
    # taken out of initializing when the persister failed, to be tried again).
    #
    # Departure: Kafka does this after answering the heartbeat, and its assignor leaves the
    # partitions still initializing out of the assignment until the next heartbeat. Here the
    # heartbeat that finds partitions to initialize waits for their initialization (at most
    # SHARE_INIT_WAIT_S; it goes on in the service's nursery past that) before it answers, and
    # the assignment is not filtered: a member is not told of a partition whose state the
    # share coordinator has not created yet, in the common case, and the data path's own
    # initialization of a partition it finds without state is the fallback.

    SHARE_INIT_WAIT_S = 10.0

    async def _initialize_share_partitions(self, group: ShareGroup) -> None:
        if self.share_persister is None:
            return
        running = self._share_initializing.get(group.group_id)
        if running is None:
            if not group.state_partitions.to_initialize(
                group.subscribed_topics(), self.topic_lookup, self.clock_ms()
            ):
                return
            running = trio.Event()
            self._share_initializing[group.group_id] = running
            if self._nursery is not None:
                self._nursery.start_soon(self._run_share_initialization, group, running)
            else:
                await self._run_share_initialization(group, running)
        with trio.move_on_after(self.SHARE_INIT_WAIT_S):
            await running.wait()

    async def _run_share_initialization(self, group: ShareGroup, done: trio.Event) -> None:
        try:
            changes = group.state_partitions.to_initialize(
                group.subscribed_topics(), self.topic_lookup, self.clock_ms()
            )
            if changes and self.share_groups.get(group.group_id) is group:
                offsets = {
                    t: dict.fromkeys(e.partitions, UNINITIALIZED_START_OFFSET)
                    for t, e in changes.items()
                }
                await self._initialize_share_state(group, changes, offsets)
        except Exception:  # noqa: BLE001 - logged; the next heartbeat tries again
            log.exception("share group %s: initializing share partitions failed", group.group_id)
        finally:
            if self._share_initializing.get(group.group_id) is done:
                del self._share_initializing[group.group_id]
            done.set()

    async def _initialize_share_state(
        self,
        group: ShareGroup,
        changes: dict[uuid.UUID, InitTopic],
        offsets: dict[uuid.UUID, dict[int, int]],
    ) -> tuple[Error, dict[tuple[uuid.UUID, int], Error]]:
        """Record ``changes`` as initializing, initialize each partition's state at its offset
        in ``offsets`` with the group epoch as state epoch, then record the result: (the error
        of a record write, each partition's persister error)."""
        assert self.share_persister is not None
        persister = self.share_persister
        error = await self._set_state_partitions(
            group, group.state_partitions.with_initializing(changes)
        )
        if error != Error.NONE:
            return error, {}
        results: dict[tuple[uuid.UUID, int], Error] = {}
        epoch = group.group_epoch

        async def one(topic_id: uuid.UUID, index: int, offset: int) -> None:
            key = ShareStateKey(group.group_id, topic_id, index)
            results[(topic_id, index)] = await persister.initialize(key, epoch, offset)

        async with trio.open_nursery() as nursery:
            for topic_id, partitions in offsets.items():
                for index, offset in partitions.items():
                    nursery.start_soon(one, topic_id, index, offset)
        done: TopicPartitions = {}
        failed: TopicPartitions = {}
        for (topic_id, index), result in results.items():
            (done if result == Error.NONE else failed).setdefault(topic_id, set()).add(index)
        if failed:
            log.warning(
                "share group %s: share partitions not initialized: %s",
                group.group_id,
                {str(t): sorted(p) for t, p in failed.items()},
            )
        names = {t: e.name for t, e in changes.items()}
        after = group.state_partitions.with_initialized(done, names, self.clock_ms())
        after = after.without_initializing(failed)
        error = await self._set_state_partitions(group, after)
        return error, results

    async def _set_state_partitions(self, group: ShareGroup, value: ShareStatePartitions) -> Error:
        """Write the group's ShareGroupStatePartitionMetadata record, then keep ``value``."""
        if value == group.state_partitions:
            return Error.NONE
        error = await self._write_share_records(group, [group.state_partitions_record(value)])
        if error == Error.NONE:
            group.state_partitions = value
        return error

    async def _write_share_records(self, group: ShareGroup, records: list[ShareRecord]) -> Error:
        self.share_rebalances += sum(
            1
            for key, value in records
            if value is not None and key.kind == ShareRecordKind.GROUP_METADATA
        )
        encoded = [
            (encode_share_key(key), None if value is None else encode_share_value(value))  # type: ignore[arg-type]
            for key, value in records
        ]
        error = await self._append(group.group_id, encoded)
        if error != Error.NONE:
            log.warning("cannot write share group %s's records: %s", group.group_id, error.name)
            return _STORE_GROUP_ERRORS.get(error, Error.UNKNOWN_SERVER_ERROR)
        return Error.NONE

    def _arm_share(self, group: ShareGroup) -> None:
        """The group's one session timer, at its earliest member deadline."""
        timer = self._share_timer(group.group_id)
        deadline_ms = group.next_deadline_ms()
        if deadline_ms is None or self.share_groups.get(group.group_id) is not group:
            self.runtime.cancel(group.group_id, timer)
            return
        delay_s = max(deadline_ms - self.clock_ms(), 0) / 1000
        self.runtime.schedule(
            group.group_id, timer, delay_s, partial(self._on_share_deadline, group)
        )

    async def _on_share_deadline(self, group: ShareGroup) -> None:
        """Members whose session lapsed are fenced, their partitions go to the others."""
        if self.share_groups.get(group.group_id) is not group:
            return
        fenced, records = group.expire(self.consumer_topic_lookup, self.clock_ms())
        self._arm_share(group)
        if fenced:
            log.info("share group %s: session expired for %s", group.group_id, fenced)
        if records:
            await self._write_share_records(group, records)

    def describe_share_group(self, group_id: str) -> tuple[Error, str | None, ShareGroup | None]:
        """ShareGroupDescribe of one group (Kafka's shareGroupDescribe): GROUP_ID_NOT_FOUND
        for an unknown group or one of another type."""
        if (error := self.check(group_id)) != Error.NONE:
            return error, None, None
        group = self.share_groups.get(group_id)
        if group is None:
            if self._not_share(group_id):
                return Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", None
            return Error.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        return Error.NONE, None, group

    def list_share_groups(self) -> list[ShareGroup]:
        """The share groups served here (ListGroups adds them to the others)."""
        return list(self.share_groups.values())

    async def delete_share_group(self, group_id: str) -> Error:
        """DeleteGroups of a share group (Kafka's GroupCoordinatorService.deleteGroups with
        sharePartitionDeleteRequests and performShareGroupsDeletion): NON_EMPTY_GROUP while it
        has members; else every share partition with state (initialized, initializing, or
        left deleting by an earlier attempt) is recorded as deleting and its state deleted
        through the persister (DeleteShareGroupState); a persister error is the group's
        answer and the group stays (deleting can be tried again); then the group is forgotten
        and its records tombstoned (createGroupTombstoneRecords)."""
        if (error := self.check(group_id)) != Error.NONE:
            return error
        group = self.share_groups.get(group_id)
        if group is None:
            return Error.GROUP_ID_NOT_FOUND
        if group.members:
            return Error.NON_EMPTY_GROUP
        if self.share_persister is not None and not group.state_partitions.is_empty():
            after, to_delete = group.state_partitions.for_group_delete(self._topic_by_id)
            error = await self._set_state_partitions(group, after)
            if error != Error.NONE:
                return error
            errors = await self._delete_share_state(group_id, to_delete)
            failed = next((e for e in errors.values() if e != Error.NONE), None)
            if failed is not None:
                log.warning("share group %s: state not deleted: %s", group_id, failed.name)
                return failed
        if self.share_groups.get(group_id) is not group or group.members:
            return Error.NON_EMPTY_GROUP  # a member joined while the state was deleted
        del self.share_groups[group_id]
        self.runtime.cancel(group_id, self._share_timer(group_id))
        return await self._write_share_records(group, group.tombstones())

    def _on_topics_deleted(self, topic_ids: set[uuid.UUID]) -> None:
        """A topic's deletion (the replica manager's topic_deletion_listeners, Kafka's
        GroupCoordinatorService.onMetadataUpdate with TopicsDelta.deletedTopicIds)."""
        if self._nursery is not None:
            self._nursery.start_soon(self.cleanup_share_group_state, topic_ids)

    async def cleanup_share_group_state(self, topic_ids: set[uuid.UUID]) -> int:
        """Kafka's GroupMetadataManager.maybeCleanupShareGroupState on every share group
        served here: a deleted topic leaves the group's initializing, initialized and deleting
        topics, written as its ShareGroupStatePartitionMetadata record; so a topic made again
        under the name is a new topic to the group (initialized at the next heartbeat, started
        at share.auto.offset.reset) and DescribeShareGroupOffsets no longer lists the old one.
        The state itself is the share coordinator's to delete (its own listener, Kafka's
        ShareCoordinatorShard.maybeCleanupShareState). A topic the metadata has again by then
        (its id back: never in Kafka) is left alone. How many groups changed."""
        changed = 0
        for group in list(self.share_groups.values()):
            gone = {t for t in topic_ids if self.replicas.metadata.topic_by_id(t) is None}
            if (
                self.check(group.group_id) != Error.NONE
                or self.share_groups.get(group.group_id) is not group
            ):
                continue
            after = group.state_partitions.without_topics(gone)
            if after is group.state_partitions:
                continue
            error = await self._set_state_partitions(group, after)
            if error != Error.NONE:
                log.warning(
                    "share group %s: deleted topics not cleaned: %s", group.group_id, error.name
                )
                continue
            changed += 1
            log.info(
                "share group %s: state of deleted topics %s cleaned",
                group.group_id,
                sorted(str(t) for t in gone),
            )
        return changed

    def _topic_by_id(self, topic_id: uuid.UUID) -> tuple[str, int] | None:
        topic = self.replicas.metadata.topic_by_id(topic_id)
        if topic is None or not topic.partitions:
            return None
        return topic.name, len(topic.partitions)

    async def _delete_share_state(
        self, group_id: str, partitions: TopicPartitions
    ) -> dict[uuid.UUID, Error]:
        """DeleteShareGroupState of each partition: per topic, its first error (or NONE)."""
        assert self.share_persister is not None
        persister = self.share_persister
        errors: dict[uuid.UUID, Error] = dict.fromkeys(partitions, Error.NONE)

        async def one(topic_id: uuid.UUID, index: int) -> None:
            error = await persister.delete(ShareStateKey(group_id, topic_id, index))
            if error != Error.NONE and errors[topic_id] == Error.NONE:
                errors[topic_id] = error

        async with trio.open_nursery() as nursery:
            for topic_id, indexes in partitions.items():
                for index in sorted(indexes):
                    nursery.start_soon(one, topic_id, index)
        return errors

    # -- share groups' offsets, for admins (KIP-932) ----------------------------------------
    #
    # Kafka's GroupCoordinatorService.describeShareGroupOffsets / describeShareGroupAllOffsets,
    # alterShareGroupOffsets and deleteShareGroupOffsets, with GroupMetadataManager's
    # bookkeeping (share_offsets.py). The answers are plain tuples; apis/share_groups.py
    # shapes them.

    def _share_group_for_admin(self, group_id: str) -> tuple[Error, str | None, ShareGroup | None]:
        """Kafka's GroupMetadataManager.shareGroup: GROUP_ID_NOT_FOUND for an unknown group
        or one of another type."""
        if (error := self.check(group_id)) != Error.NONE:
            return error, None, None
        group = self.share_groups.get(group_id)
        if group is None:
            if self._not_share(group_id):
                return Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", None
            return Error.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        return Error.NONE, None, group

    async def describe_share_group_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]] | None
    ) -> tuple[
        Error, str | None, list[tuple[str, uuid.UUID | None, list[tuple[int, int, int, int]]]]
    ]:
        """DescribeShareGroupOffsets of one group: (error, message, [(topic, topic id,
        [(partition, start offset, leader epoch, lag)])]).

        With topics (describeShareGroupOffsets): each asked partition's summary; an unknown
        topic is answered with a zero topic id and start offset -1, as Kafka does; the group
        is not looked up. Without (describeShareGroupAllOffsets): the group's initialized share
        partitions (none for an unknown group). A partition the persister cannot answer has
        start offset -1 and leader epoch -1 ("treated as absence of data, rather than an
        error"). Lag (v1, KIP-1226): the partition's end offset minus the start offset minus
        the delivery complete count, -1 when either is unknown or the partition's leader cannot
        be asked its latest offset (``latest_offset``: Kafka's
        PartitionMetadataClient.listLatestOffsets, a ListOffsets to the leader)."""
        if (error := self.check(group_id)) != Error.NONE:
            return error, None, []
        asked: list[tuple[str, uuid.UUID | None, list[int]]] = []
        if topics is None:
            group = self.share_groups.get(group_id)
            if group is not None:
                for known_id, indexes in group.state_partitions.initialized_partitions().items():
                    known = self.replicas.metadata.topic_by_id(known_id)
                    if known is not None:
                        asked.append((known.name, known_id, sorted(indexes)))
        else:
            for wanted, wanted_parts in topics:
                topic = self.replicas.metadata.topic(wanted)
                found_id = topic.topic_id if topic is not None else None
                asked.append((wanted, found_id, list(wanted_parts)))
        answers: list[tuple[str, uuid.UUID | None, list[tuple[int, int, int, int]]]] = []
        for name, topic_id, parts in asked:
            if topic_id is None:
                answers.append(
                    (name, None, [(p, UNINITIALIZED_START_OFFSET, 0, -1) for p in parts])
                )
                continue
            rows = []
            for index in parts:
                rows.append((index, *await self._share_offset(group_id, name, topic_id, index)))
            answers.append((name, topic_id, rows))
        return Error.NONE, None, answers

    async def _share_offset(
        self, group_id: str, name: str, topic_id: uuid.UUID, index: int
    ) -> tuple[int, int, int]:
        """(start offset, leader epoch, lag) as Kafka 4.4's readShareGroupStateSummary and
        computeShareGroupLagAndBuildResponse answer them: a persister error is start offset -1
        and leader epoch 0; the lag is computed only for a start offset and a delivery complete
        count that are not -1, as the end offset minus both."""
        if self.share_persister is None:
            return UNINITIALIZED_START_OFFSET, 0, -1
        summary = await self.share_persister.read_summary(
            ShareStateKey(group_id, topic_id, index), 0
        )
        if summary.error != Error.NONE:
            return UNINITIALIZED_START_OFFSET, 0, -1
        if (
            summary.start_offset == UNINITIALIZED_START_OFFSET
            or summary.delivery_complete_count == -1
        ):
            return summary.start_offset, summary.leader_epoch, -1
        if self.latest_offset is not None:
            end = await self.latest_offset(name, index)
        else:
            partition, _ = self.replicas.hosted_partition(name, index)
            end = partition.high_watermark if partition is not None else None
        if end is None:
            return summary.start_offset, summary.leader_epoch, -1
        lag = end - summary.start_offset - summary.delivery_complete_count
        return summary.start_offset, summary.leader_epoch, lag

    async def alter_share_group_offsets(
        self, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]]
    ) -> tuple[
        Error, str | None, list[tuple[str, uuid.UUID | None, list[tuple[int, Error, str | None]]]]
    ]:
        """AlterShareGroupOffsets (Kafka 4.4's GroupMetadataManager.alterShareGroupOffsets,
        completeAlterShareGroupOffsets and persisterInitialize): an unknown group is created
        (getOrMaybeCreateShareGroup with createIfNotExists, so offsets can be set before the
        first member joins), another type's group is GROUP_ID_NOT_FOUND, a group with
        members NON_EMPTY_GROUP; each partition of a known topic is initialized at its start
        offset with the group epoch as state epoch (its topic recorded as initializing, then
        initialized), any other is UNKNOWN_TOPIC_OR_PARTITION; a partition the persister
        refused carries the persister's error."""
        if (error := self.check(group_id)) != Error.NONE:
            return error, None, []
        group = self.share_groups.get(group_id)
        if group is None:
            if self._not_share(group_id):
                return Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", []
            group = ShareGroup(group_id, self.share_settings)
            self.share_groups[group_id] = group
        if group.members:
            return Error.NON_EMPTY_GROUP, "The group is not empty.", []
        if self.share_persister is None:
            return Error.COORDINATOR_NOT_AVAILABLE, None, []
        plan = plan_alter(topics, self.topic_lookup, self.clock_ms())
        results: dict[tuple[uuid.UUID, int], Error] = {}
        if plan.offsets:
            error, results = await self._initialize_share_state(
                group, plan.initializing, plan.offsets
            )
            if error != Error.NONE:
                return error, None, []
        answers = []
        for name, topic_id, rows in plan.responses:
            shaped = []
            for index, row_error, row_message in rows:
                if row_error == Error.NONE and topic_id is not None:
                    row_error = results.get((topic_id, index), Error.NONE)
                    row_message = None if row_error == Error.NONE else _message(row_error)
                shaped.append((index, row_error, row_message))
            answers.append((name, topic_id, shaped))
        return Error.NONE, None, answers

    async def delete_share_group_offsets(
        self, group_id: str, names: list[str]
    ) -> tuple[Error, str | None, list[tuple[str, uuid.UUID | None, Error, str | None]]]:
        """DeleteShareGroupOffsets (Kafka's initiateDeleteShareGroupOffsets,
        deleteShareGroupOffsetsState and completeDeleteShareGroupOffsets): the group must
        exist, be a share group and be empty; an initialized topic's share partitions' state is
        deleted (the topic recorded as deleting, then forgotten), a topic with no state is
        UNKNOWN_TOPIC_OR_PARTITION; a topic the persister failed to delete carries its error
        and stays deleting."""
        error, message, group = self._share_group_for_admin(group_id)
        if group is None:
            return error, message, []
        if group.members:
            return Error.NON_EMPTY_GROUP, "The group is not empty.", []
        if self.share_persister is None:
            return Error.COORDINATOR_NOT_AVAILABLE, None, []
        after, to_delete, refused = group.state_partitions.for_offsets_delete(
            names, self.topic_lookup
        )
        error = await self._set_state_partitions(group, after)
        if error != Error.NONE:
            return error, None, []
        answers: list[tuple[str, uuid.UUID | None, Error, str | None]] = []
        if to_delete:
            errors = await self._delete_share_state(group_id, to_delete)
            succeeded = [t for t, e in errors.items() if e == Error.NONE]
            error = await self._set_state_partitions(
                group, group.state_partitions.deleted(succeeded)
            )
            if error != Error.NONE:
                return error, None, []
            for topic_id, topic_error in errors.items():
                topic = self.replicas.metadata.topic_by_id(topic_id)
                name = topic.name if topic is not None else None
                answers.append(
                    (
                        name or "",
                        topic_id,
                        topic_error,
                        None if topic_error == Error.NONE else _message(topic_error),
                    )
                )
        answers.extend((name, None, code, text) for name, code, text in refused)
        return Error.NONE, None, answers

    def share_assignment(self, group_id: str, member_id: str) -> set[tuple[uuid.UUID, int]] | None:
        """The share partitions a member of a share group served here is assigned (for the
        data path: ShareFetch may fetch only these), or None when this broker knows no such
        member (not the coordinator, no such group or member)."""
        group = self.share_groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            return None
        return {(topic, index) for topic, parts in member.assigned.items() for index in parts}

    def _install_share_groups(self, partition: Partition, replay: PartitionReplay) -> None:
        now = self.clock_ms()
        for group_id, records in replay.share.items():
            if self.partition_of(group_id) != partition.index or not records:
                continue
            group = ShareGroup.replay(
                group_id, records.items(), now, self.share_settings_of(group_id)
            )
            self.share_groups[group_id] = group
            self._arm_share(group)
            log.info(
                "loaded share group %s (epoch %d, %d members)",
                group_id,
                group.group_epoch,
                len(group.members),
            )

    def _unload_share_groups(self, index: int) -> None:
        for group_id in [g for g in self.share_groups if self.partition_of(g) == index]:
            del self.share_groups[group_id]
            self.runtime.cancel(group_id, self._share_timer(group_id))

    # -- streams groups (KIP-1071) ----------------------------------------------------------------

    def streams_settings_of(self, group_id: str) -> StreamsSettings:
        """The broker's group.streams.* properties with the group's own streams.* configs
        over them (GROUP resources, read at each heartbeat as Kafka's GroupMetadataManager
        reads them: streamsGroupSessionTimeoutMs, streamsGroupHeartbeatIntervalMs, ...);
        group.streams.max.size bounds every streams group (throwIfStreamsGroupIsFull)."""
        overrides = self.replicas.group_configs.get(group_id, {})

        def read(name: str, default: int) -> int:
            try:
                return int(overrides[name].strip()) if name in overrides else default
            except ValueError:
                return default

        base = StreamsSettings()
        config = self.config
        return StreamsSettings(
            heartbeat_interval_ms=read(
                "streams.heartbeat.interval.ms", config.group_streams_heartbeat_interval_ms
            ),
            session_timeout_ms=read(
                "streams.session.timeout.ms", config.group_streams_session_timeout_ms
            ),
            max_size=config.group_streams_max_size,
            num_standby_replicas=read(
                "streams.num.standby.replicas", config.group_streams_num_standby_replicas
            ),
            # Kafka 4.4's StickyTaskAssignor assigns no warm-up tasks, and streams_assignor's
            # warm-ups would wait for a probing rebalance this service does not run yet (a
            # caught-up warm-up is moved only at the next group epoch): off, as in Kafka.
            max_warmup_replicas=0,
            acceptable_recovery_lag=read(
                "streams.acceptable.recovery.lag", base.acceptable_recovery_lag
            ),
            initial_rebalance_delay_ms=read(
                "streams.initial.rebalance.delay.ms",
                config.group_streams_initial_rebalance_delay_ms,
            ),
        )

    def streams_task_offset_interval_ms(self, group_id: str) -> int:
        """streams.task.offset.interval.ms (Kafka's default 60000), told to each member."""
        value = self.replicas.group_configs.get(group_id, {}).get("streams.task.offset.interval.ms")
        try:
            return int(value) if value is not None else 60000
        except ValueError:
            return 60000

    def _restore_streams_group(self, group_id: str, records: dict, now: int) -> StreamsGroupEntry:
        core = restore_records(group_id, self.streams_settings_of(group_id), records, now)
        return StreamsGroupEntry(core, self.settings, now)

    def _topic_partitions(self, name: str) -> int | None:
        topic = self.replicas.metadata.topic(name)
        if topic is None or not topic.partitions:
            return None
        return len(topic.partitions)

    async def _write_streams_records(
        self, group: StreamsGroupEntry, records: list[streams_log_format.Record]
    ) -> Error:
        self.streams_rebalances += sum(
            1
            for key, value in records
            if value is not None and key.kind == streams_log_format.RecordKind.GROUP_METADATA
        )
        error = await self._append(group.group_id, _encoded_streams(records))
        if error != Error.NONE:
            log.warning("cannot write streams group %s's records: %s", group.group_id, error.name)
            return _STORE_GROUP_ERRORS.get(error, Error.UNKNOWN_SERVER_ERROR)
        return Error.NONE

    async def _expire_streams_group(self, group: StreamsGroupEntry) -> None:
        """A member's session or revocation deadline passed: fence it (the runtime's timer,
        Kafka's streams session and rebalance timeouts)."""
        now = self.clock_ms()
        records = group.streams.expire(now)
        group.refresh_state(now)
        self._notify(group.group_id)
        if records:
            await self._write_streams_records(group, records)

    async def streams_heartbeat(
        self, group_id: str, request: StreamsHeartbeatRequest
    ) -> StreamsHeartbeatResult:
        """StreamsGroupHeartbeat (Kafka's GroupMetadataManager.streamsGroupHeartbeat): the
        group's pure core applies it, its records are written (acks=all) before the answer.
        A group id that belongs to a classic or consumer group is GROUP_ID_NOT_FOUND (Kafka's
        castToStreamsGroup), except a classic group that holds only offsets (no protocol, no
        members), which becomes the streams group with its offsets (the migration of an
        application from the classic protocol). Departure, as for consumer groups: a failed
        write is answered with its error but the change stays in memory."""
        if (error := self.check(group_id)) != Error.NONE:
            return StreamsHeartbeatResult(error)
        if self.share_conflict(group_id):
            # Kafka keeps share groups in the same map: castToStreamsGroup refuses them.
            return StreamsHeartbeatResult(
                Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group."
            )
        settings = self.streams_settings_of(group_id)
        now = self.clock_ms()
        group = self.groups.get(group_id)
        created = False
        if group is None or group.is_(GroupState.DEAD):
            if request.member_epoch != 0:
                return StreamsHeartbeatResult(
                    Error.GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found."
                )
            group = StreamsGroupEntry(StreamsGroup(group_id, settings), self.settings, now)
            created = True
        elif not isinstance(group, StreamsGroupEntry):
            convertible = (
                not isinstance(group, ConsumerGroup)
                and group.is_(GroupState.EMPTY)
                and not group.members
                and request.member_epoch == 0
            )
            if not convertible:
                return StreamsHeartbeatResult(
                    Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group."
                )
            entry = StreamsGroupEntry(StreamsGroup(group_id, settings), self.settings, now)
            try:
                entry.streams.heartbeat(request, self._topic_partitions, now)
            except HeartbeatError as refused:
                return StreamsHeartbeatResult(refused.error, refused.message)
            entry = StreamsGroupEntry(StreamsGroup(group_id, settings), self.settings, now)
            self._swap(group, entry)
            group = entry
        group.streams.settings = settings
        try:
            result, records = group.streams.heartbeat(request, self._topic_partitions, now)
        except HeartbeatError as refused:
            # A refused heartbeat changes nothing: a group it would have created is not made.
            log.info("StreamsGroupHeartbeat to group %s refused: %s", group_id, refused.message)
            return StreamsHeartbeatResult(refused.error, refused.message)
        if created:
            self._add_group(group)
        group.refresh_state(now)
        self._notify(group_id)
        if records:
            error = await self._write_streams_records(group, records)
            if error != Error.NONE:
                return StreamsHeartbeatResult(error)
        return result

    def describe_streams_group(
        self, group_id: str
    ) -> tuple[Error, str | None, StreamsGroupEntry | None]:
        """StreamsGroupDescribe of one group: GROUP_ID_NOT_FOUND for an unknown group or one
        of another type, as Kafka answers."""
        if (error := self.check(group_id)) != Error.NONE:
            return error, None, None
        group = self.groups.get(group_id)
        if group is None and self.share_conflict(group_id):
            return Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.", None
        if group is None or group.is_(GroupState.DEAD):
            return Error.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        if not isinstance(group, StreamsGroupEntry):
            return Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.", None
        return Error.NONE, None, group


def _message(error: Error) -> str | None:
    """An error's message for the share admin answers (Kafka sends its Errors.message(); the
    name is what minibroker has)."""
    return None if error == Error.NONE else error.name
