"""The share partitions of the partitions this broker leads, per share group (KIP-932).

Kafka's ``kafka.server.share.SharePartitionManager`` (with ``DelayedShareFetch`` and the
acquisition lock timer of ``SharePartition``): beside the replica manager, whose one read path
(``ReplicaManager.read_records``, as Fetch reads) gives it the log's batches. The rules of
a share partition are the pure ``SharePartition`` (share_partition.py) and those of share
sessions the pure ``ShareSessionCache`` (share_session.py); this module is the thin trio part:
it creates a share partition on the first fetch of a group, locks it while a change is
persisted, runs the acquisition lock timer and parks fetches that found nothing.

- A share partition is created on its group's first ShareFetch of a partition led here: from
  the persister's ReadShareGroupState, or, never initialized (UNKNOWN_TOPIC_OR_PARTITION or a
  start offset of -1), at ``share.auto.offset.reset`` (the group config; ``latest``, the high
  watermark, by default; ``earliest`` the log start; ``by_duration:<ISO-8601 duration>`` the
  first record at or after now minus the duration, found by timestamp, else the partition
  answers OFFSET_NOT_AVAILABLE until one is produced, as Kafka 4.4), which
  InitializeShareGroupState writes.
- Every change (acquisition, acknowledgement, lock expiry, release) is written through the
  SharePersister before the request that made it is answered; a write that fails is undone
  and answered with Kafka's code (``persister_error``: COORDINATOR_NOT_AVAILABLE for the
  retriable coordinator errors, FENCED_STATE_EPOCH, UNKNOWN_TOPIC_OR_PARTITION,
  GROUP_ID_NOT_FOUND, else UNKNOWN_SERVER_ERROR), as Kafka's SharePartition rolls back.
- Acquisition locks expire on a timer (one task, sleeping until the earliest deadline of
  every share partition); expired records become AVAILABLE (or ARCHIVED at the delivery
  limit) and parked fetches of the partition wake.
- A ShareFetch that acquires nothing parks until max_wait (DelayedShareFetch): it wakes when
  the partition is appended to (the replica manager's watchers) or records are released here
  (the same watchers, under the share partition's own key).
- A member that closes its session, or leaves its group (``member_left``, for the group
  coordinator to call), loses its records: they become available to the others.
- A partition that stops being led here drops its share partitions; the next leader builds
  them again from the persister.
- A share partition whose state write is refused with FENCED_STATE_EPOCH or
  UNKNOWN_TOPIC_OR_PARTITION (its state was reset or deleted by an admin: AlterShareGroupOffsets,
  DeleteShareGroupOffsets, DeleteGroups) is dropped, and so are all the share partitions of a
  group whose last share session here ended (Kafka's fencedSharePartitionHandler and
  ShareGroupListener.onGroupEmpty): the next fetch reads the state again, so an admin's
  change to an empty group is what its next members see.
- A share partition the group coordinator initialized without a start offset (-1, Kafka's
  UNINITIALIZED_START_OFFSET) starts at ``share.auto.offset.reset``, written with the state
  epoch it was initialized with. One fetched before the group coordinator initialized it
  (this broker's fallback, see the group coordinator's ``_initialize_share_partitions``) is
  initialized here at state epoch 0; when the group coordinator's initialization (at the
  group epoch) lands between this read and this initialize, the initialize is
  FENCED_STATE_EPOCH and the state is read again (``_INITIALIZE_ATTEMPTS``), rather than the
  fetch answering FENCED_STATE_EPOCH, which librdkafka raises to the application
  (confluent-kafka's test_multi_consumer_overlapping_subscriptions met it). Kafka's leader
  never initializes (its group coordinator leaves partitions out of the assignment until
  they are), so it has no such race.

The group's ``share.*`` configs are read at each acquisition, acknowledgement, release and
lock expiry (``_refresh``), as Kafka 4.4's SharePartition reads them through its
ShareGroupConfigProvider at each use; ``share.auto.offset.reset`` only when a share
partition is first initialized, ``share.isolation.level`` at each ShareFetch.

Departures, and why: an acquisition
is persisted (ACQUIRED as AVAILABLE with its delivery count, see share_partition.py; each
write carries the batches that changed, as Kafka's ShareUpdate). Kafka writes once per
ShareFetch (its acknowledgements) and so does this: a ShareFetch's acknowledgements of a
partition and its acquisition there go in one write (``acquire`` with ``acknowledgements``).

Dead-letter queues (KIP-1191): the records a change archived (REJECTed, or at the delivery
limit) are ARCHIVING when the group has a DLQ, persisted so, then handed to the DLQ writer
(share_dlq_writer.py), which works off the request's path; once it wrote them or gave up, they
are ARCHIVED and persisted (``_dead_letters_written``, Kafka's initiateDLQAndArchive). A share
partition loaded with ARCHIVING records hands them to the writer again (at least once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from minibroker.common.group_configs import share_auto_offset_reset
from minibroker.protocol.errors import Error
from minibroker.protocol.record_batch import HEADER_SIZE, read_header
from minibroker.replication.share_dlq_writer import ShareDlqWriter
from minibroker.replication.share_partition import (
    Acknowledgement,
    AcquiredRange,
    AutoOffsetReset,
    InvalidRecordState,
    SharePartition,
    ShareSettings,
    StateBatch,
)
from minibroker.replication.share_persister import SharePersister, ShareStateKey, WriteState
from minibroker.replication.share_session import ShareSessionCache

if TYPE_CHECKING:
    from minibroker.common.config import BrokerConfig
    from minibroker.replication.partition import Partition
    from minibroker.replication.replica_manager import ReplicaManager

log = logging.getLogger("share")

# is_member(group id, member id): True, False, or None when the group coordinator does not
# know (then the request is served).
IsMember = Callable[[str, str], "bool | None"]

_COORDINATOR_ERRORS = frozenset(
    {Error.NOT_COORDINATOR, Error.COORDINATOR_NOT_AVAILABLE, Error.COORDINATOR_LOAD_IN_PROGRESS}
)


# How many times a share partition's creation reads and initializes its state when the group
# coordinator initialized it in between (FENCED_STATE_EPOCH from the initialize).
_INITIALIZE_ATTEMPTS = 3


def persister_error(error: Error) -> Error:
    """What a partition's answer says when the persister refused (Kafka's
    SharePartition.fetchPersisterError)."""
    if error in _COORDINATOR_ERRORS:
        return Error.COORDINATOR_NOT_AVAILABLE
    if error in (Error.FENCED_STATE_EPOCH, Error.FENCED_LEADER_EPOCH):
        return Error.FENCED_STATE_EPOCH
    if error in (Error.UNKNOWN_TOPIC_OR_PARTITION, Error.GROUP_ID_NOT_FOUND):
        return error
    return Error.UNKNOWN_SERVER_ERROR


def share_watch_key(group_id: str, topic: str, index: int) -> tuple[str, str, str, int]:
    """The purgatory key woken when records of a share partition become available again."""
    return ("share", group_id, topic, index)


@dataclass
class ShareFetchResult:
    """One partition's part of a ShareFetch answer: the log's batches as stored (bytes,
    never decoded) and the ranges acquired in them."""

    error: Error = Error.NONE
    records: bytes = b""
    acquired: list[AcquiredRange] = field(default_factory=list)
    # The code of the acknowledgements the ShareFetch carried for the partition, if any.
    acknowledge_error: Error = Error.NONE


@dataclass
class _Held:
    share: SharePartition
    key: ShareStateKey
    leader_epoch: int
    lock: trio.Lock = field(default_factory=trio.Lock)

    def serves(self, partition: Partition) -> bool:
        """Built for this leadership of this topic: a topic deleted and made again under its
        name is another topic (another id), whose share partition starts afresh."""
        return (
            self.leader_epoch == partition.leader_epoch and self.key.topic_id == partition.topic_id
        )


def _allow_all(group_id: str, member_id: str) -> bool | None:
    return None


def _now_ms() -> int:
    return int(trio.current_time() * 1000)


def _batches(records: bytes) -> list[tuple[int, int, int, int, bool]]:
    """(first offset, last offset, position, size, is control) of each stored batch."""
    return [
        (first, last, position, size, control)
        for first, last, position, size, control, _ in _headers(records)
    ]


def _headers(records: bytes) -> list[tuple[int, int, int, int, bool, int | None]]:
    """`_batches` with the producer id of each transactional batch (None otherwise)."""
    found = []
    position = 0
    view = memoryview(records)
    while position + HEADER_SIZE <= len(records):
        header = read_header(view, position)
        producer = header.producer_id if header.is_transactional else None
        found.append(
            (
                header.base_offset,
                header.last_offset,
                position,
                header.size,
                header.is_control,
                producer,
            )
        )
        position += header.size
    return found


def _aborted_batches(
    headers: Sequence[tuple[int, int, int, int, bool, int | None]],
    aborted_transactions: Sequence[Mapping] | None,
) -> set[int]:
    """The first offsets of the data batches of aborted transactions among ``headers``, from
    the read's aborted transactions (``{"producer_id", "first_offset"}``, read_committed), as
    a read_committed consumer finds them (Kafka's SharePartition
    filterAbortedTransactionalAcquiredRecords, after the client's rule): a producer's
    transactional batches from its aborted transaction's first offset up to its abort marker.
    """
    if not aborted_transactions:
        return set()
    pending = sorted(
        (int(txn["first_offset"]), int(txn["producer_id"])) for txn in aborted_transactions
    )
    aborting: set[int] = set()
    found: set[int] = set()
    for first, _, _, _, control, producer in headers:
        while pending and pending[0][0] <= first:
            aborting.add(pending.pop(0)[1])
        if producer is None or producer not in aborting:
            continue
        if control:
            # The transaction's marker ends it (an abort marker: the aborted list names only
            # aborted transactions).
            aborting.discard(producer)
        else:
            found.add(first)
    return found


class SharePartitionManager:
    """The share partitions of this broker's led partitions, by (group, topic, partition)."""

    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        persister: SharePersister,
        *,
        is_member: IsMember = _allow_all,
        dlq: ShareDlqWriter | None = None,
    ) -> None:
        self.config = config
        self.replicas = replicas
        self.persister = persister
        self.is_member = is_member
        # Where archived records go when their group has a dead-letter queue.
        self.dlq = dlq
        self.sessions = ShareSessionCache(config.group_share_max_share_sessions)
        self._held: dict[tuple[str, str, int], _Held] = {}
        self._timer_changed = trio.Event()
        # One share partition created at a time: two first fetches of a group must not both
        # initialize its state (the second would reset what the first persisted).
        self._creating = trio.Lock()
        replicas.role_listeners.append(self._role_changed)
        replicas.topic_deletion_listeners.append(self._topics_deleted)

    # -- lifecycle ----------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The acquisition lock timer: sleep until the earliest lock deadline (or a new
        acquisition), then release what expired."""
        task_status.started()
        while True:
            deadlines = [
                d for held in self._held.values() if (d := held.share.next_deadline()) is not None
            ]
            self._timer_changed = trio.Event()
            if deadlines:
                with trio.move_on_at(min(deadlines) / 1000):
                    await self._timer_changed.wait()
            else:
                await self._timer_changed.wait()
            await self.expire_locks()

    async def expire_locks(self) -> int:
        """Release the records whose acquisition lock has expired; how many."""
        now = _now_ms()
        released = 0
        for (group, topic, index), held in list(self._held.items()):
            deadline = held.share.next_deadline()
            if deadline is None or deadline > now:
                continue
            async with held.lock:
                self._refresh(held, group)
                expired = held.share.expire_ranges(_now_ms())
                if not expired:
                    continue
                released += sum(last - first + 1 for first, last in expired)
                log.debug("share group %s %s-%d: locks expired on %s", group, topic, index, expired)
                error = await self._persist(held, held.share.batches_in(expired))
                if error is not Error.NONE:
                    # What is persisted already says AVAILABLE for acquired records.
                    log.warning("share group %s: lock expiry not persisted: %s", group, error.name)
                self._hand_over_dead_letters(held, group, topic, index)
            self.replicas.watchers.notify(share_watch_key(group, topic, index))
        return released

    def _role_changed(self, partition: Partition) -> None:
        for key in [k for k in self._held if (k[1], k[2]) == partition.key]:
            held = self._held[key]
            if not partition.is_leader or not held.serves(partition):
                del self._held[key]

    def _topics_deleted(self, topic_ids: set) -> None:
        """Kafka's SharePartitionListener.onDeleted: the share partitions of a deleted topic
        are dropped (their state is the share coordinator's to delete)."""
        for key in [k for k, held in self._held.items() if held.key.topic_id in topic_ids]:
            log.info("share group %s: share partition %s-%d of a deleted topic dropped", *key)
            del self._held[key]

    # -- reading the state --------------------------------------------------------------

    def share_partition(self, group_id: str, topic: str, index: int) -> SharePartition | None:
        held = self._held.get((group_id, topic, index))
        return held.share if held else None

    def member_allowed(self, group_id: str, member_id: str) -> bool:
        return self.is_member(group_id, member_id) is not False

    # -- creation -----------------------------------------------------------------------

    def _settings(self, group_id: str) -> tuple[ShareSettings, int]:
        configs = self.replicas.group_configs.get(group_id, {})
        config = self.config

        def number(name: str, default: int) -> int:
            try:
                return int(configs.get(name, default))
            except ValueError:
                return default

        reset = share_auto_offset_reset(configs.get("share.auto.offset.reset", "latest").strip())
        strategy, duration_ms = reset if reset is not None else ("latest", 0)
        settings = ShareSettings(
            record_lock_duration_ms=number(
                "share.record.lock.duration.ms", config.group_share_record_lock_duration_ms
            ),
            delivery_count_limit=number(
                "share.delivery.count.limit", config.group_share_delivery_count_limit
            ),
            max_record_locks=number(
                "share.partition.max.record.locks", config.group_share_partition_max_record_locks
            ),
            auto_offset_reset=AutoOffsetReset(strategy),
            reset_duration_ms=duration_ms,
            dead_letter_queue=self.dlq is not None and self.dlq.enabled_for(group_id),
            renew_acknowledge_enabled=configs.get("share.renew.acknowledge.enable", "true")
            .strip()
            .lower()
            != "false",
        )
        isolation = configs.get("share.isolation.level", "read_uncommitted").strip().lower()
        return settings, 1 if isolation == "read_committed" else 0

    def _refresh(self, held: _Held, group_id: str) -> None:
        """The group's share.* configs of now, for an existing share partition: Kafka 4.4's
        SharePartition reads share.record.lock.duration.ms, share.delivery.count.limit,
        share.partition.max.record.locks, share.renew.acknowledge.enable and the DLQ topic
        through its ShareGroupConfigProvider at each use (only share.auto.offset.reset is
        read once, at initialization), so a change applies to records in flight from the
        next acquisition, acknowledgement, release or lock expiry on."""
        held.share.settings, _ = self._settings(group_id)

    async def _get_or_create(
        self, group_id: str, partition: Partition
    ) -> tuple[_Held | None, Error]:
        """Kafka's getOrCreateSharePartition and maybeInitialize."""
        topic, index = partition.key
        held = self._held.get((group_id, topic, index))
        if held is not None and held.serves(partition):
            return held, Error.NONE
        async with self._creating:
            return await self._create(group_id, partition)

    async def _create(self, group_id: str, partition: Partition) -> tuple[_Held | None, Error]:
        topic, index = partition.key
        current = self._held.get((group_id, topic, index))
        if current is not None and current.serves(partition):
            return current, Error.NONE  # created while this request waited
        settings, _ = self._settings(group_id)
        key = ShareStateKey(group_id, partition.topic_id, index)  # type: ignore[arg-type]
        leader_epoch = partition.leader_epoch
        log_start = partition.log.log_start_offset
        for attempt in range(_INITIALIZE_ATTEMPTS):
            read = await self.persister.read(key, leader_epoch)
            if read.error is Error.NONE and read.state is not None and read.state.start_offset >= 0:
                share = SharePartition.initialize(
                    settings, read.state, log_start, partition.high_watermark
                )
                break
            if read.error not in (Error.NONE, Error.UNKNOWN_TOPIC_OR_PARTITION):
                return None, persister_error(read.error)
            reset_offset = None
            if settings.auto_offset_reset is AutoOffsetReset.BY_DURATION:
                reset_offset = self._offset_by_duration(partition, settings.reset_duration_ms)
                if reset_offset is None:
                    return None, Error.OFFSET_NOT_AVAILABLE
            share = SharePartition.initialize(
                settings, None, log_start, partition.high_watermark, reset_offset
            )
            state_epoch = read.state.state_epoch if read.state is not None else 0
            share.state_epoch = state_epoch  # its writes carry the epoch it was initialized at
            error = await self.persister.initialize(key, state_epoch, share.start_offset)
            if error is Error.FENCED_STATE_EPOCH and attempt + 1 < _INITIALIZE_ATTEMPTS:
                # The group coordinator initialized the state meanwhile, at the group's epoch
                # (its InitializeShareGroupState came between this read and this initialize):
                # read it again and start from what it holds.
                log.info(
                    "share group %s: %s-%d initialized by the group coordinator meanwhile,"
                    " read again",
                    group_id,
                    topic,
                    index,
                )
                continue
            if error is not Error.NONE:
                return None, persister_error(error)
            read = await self.persister.read(key, leader_epoch)
            if read.error is not Error.NONE:
                return None, persister_error(read.error)
            break
        held = _Held(share, key, leader_epoch)
        if share.dead_letters:
            # Records whose last delivery reached the limit under the old leader: archived
            # now, persisted so (before anyone else sees the share partition), and handed to
            # the DLQ once.
            archived = share.batches_of(letter.offset for letter in share.dead_letters)
            error = await self._persist(held, archived)
            if error is not Error.NONE:
                log.warning("share group %s: archive at load not persisted: %s", group_id, error)
        self._held[(group_id, topic, index)] = held
        self._hand_over_dead_letters(held, group_id, topic, index)
        log.info(
            "share group %s: share partition %s-%d from offset %d",
            group_id,
            topic,
            index,
            share.start_offset,
        )
        return held, Error.NONE

    def _offset_by_duration(self, partition: Partition, duration_ms: int) -> int | None:
        """share.auto.offset.reset=by_duration (KIP-1106): the first offset whose record's
        timestamp is at or after now (the wall clock, Kafka's ``Instant.now()`` at
        initialization) minus the duration, as ListOffsets by timestamp finds it (Kafka's
        ReplicaManagerPartitionMetadataProvider.offsetForTimestamp, read_uncommitted). None
        when no record is that recent: Kafka throws OffsetNotAvailableException there, the
        share partition fails to initialize, the ShareFetch answers the partition
        OFFSET_NOT_AVAILABLE and the next fetch tries again (SharePartitionManager's
        handleInitializationException); so does this. Departure: the lookup stops at the
        high watermark, as ListOffsets does (Kafka's lookup may find a record past it)."""
        # A duration reaching before 1970 finds the first record (as Kafka's search from a
        # negative timestamp does); never one of ListOffsets' negative special timestamps.
        since = max(self.replicas.clock_ms() - duration_ms, 0)
        _, offset = self.replicas.fetch_offset_for_timestamp(partition, since, 0, -1)
        return offset if offset >= 0 else None

    async def _persist(self, held: _Held, batches: list[StateBatch]) -> Error:
        """WriteShareGroupState of what changed (the persister merges it into the state, the
        newer batch winning, and drops what lies below the start offset). A write refused
        because the state was reset or deleted drops the share partition (see the module)."""
        share = held.share
        error = await self.persister.write(
            held.key,
            WriteState(
                share.state_epoch,
                held.leader_epoch,
                share.start_offset,
                tuple(batches),
                share.delivery_complete_count,
            ),
        )
        if error in (Error.FENCED_STATE_EPOCH, Error.UNKNOWN_TOPIC_OR_PARTITION):
            self._drop(held)
        return error

    def _drop(self, held: _Held) -> None:
        for key, current in list(self._held.items()):
            if current is held:
                log.info("share group %s: share partition %s-%d fenced, dropped", *key)
                del self._held[key]

    def _hand_over_dead_letters(self, held: _Held, group: str, topic: str, index: int) -> None:
        """The records the last persisted change archived (ARCHIVING, persisted so) go to the
        group's DLQ writer, which moves them to ARCHIVED once written or given up
        (``_dead_letters_written``); a group without a DLQ (now) has them ARCHIVED at once,
        as at share.version 1. Never waits."""
        letters = held.share.take_dead_letters()
        if not letters:
            return
        offsets = [letter.offset for letter in letters]

        async def written() -> None:
            await self._dead_letters_written(held, group, topic, index, offsets)

        queued = self.dlq is not None and self.dlq.enqueue(
            group, topic, held.key.topic_id, index, letters, written
        )
        if not queued and held.share.dead_letters_written(offsets):
            # ARCHIVING persisted while the group had a DLQ, none now: ARCHIVED, persisted by
            # the next write (the records are done either way for this leader).
            log.info(
                "share group %s: %s-%d %s archived without a DLQ", group, topic, index, offsets
            )

    async def _dead_letters_written(
        self, held: _Held, group: str, topic: str, index: int, offsets: list[int]
    ) -> None:
        """The DLQ write of ``offsets`` is done: ARCHIVING -> ARCHIVED, persisted (Kafka's
        initiateDLQAndArchive completion). On the share partition that archived them even if
        it was dropped since (as Kafka's completion runs on its SharePartition): a write of
        a leader that lost the partition is refused by its leader epoch, and the new leader,
        having read ARCHIVING, writes them to the DLQ again (at least once)."""
        async with held.lock:
            changed = held.share.dead_letters_written(offsets)
            if not changed:
                return
            error = await self._persist(held, changed)
        if error is not Error.NONE:
            log.warning("share group %s: ARCHIVED after the DLQ not persisted: %s", group, error)
        self.replicas.watchers.notify(share_watch_key(group, topic, index))

    def _maybe_group_empty(self, group_id: str) -> None:
        """Kafka's onGroupEmpty: no share session of the group is left here, so its share
        partitions are dropped (read again from the persister by the next fetch)."""
        if any(group == group_id for group, _ in self.sessions.sessions):
            return
        for key in [k for k in self._held if k[0] == group_id]:
            del self._held[key]

    # -- the data path ------------------------------------------------------------------

    async def acquire(
        self,
        group_id: str,
        member_id: str,
        partition: Partition,
        *,
        max_records: int,
        max_bytes: int,
        batch_optimized: bool = True,
        acknowledgements: Sequence[Acknowledgement] | None = None,
    ) -> ShareFetchResult:
        """Read from the share partition's next fetch offset and acquire up to
        ``max_records`` for the member, as the in-flight limit allows (whole log batches when
        ``batch_optimized``: ``SharePartition.acquire``).

        ``acknowledgements``, those a ShareFetch carries for this partition, are applied
        first (all or none, as ``acknowledge``; their code in ``acknowledge_error``), and
        what they and the acquisition changed is persisted in one write: Kafka writes once
        per ShareFetch (the acknowledgements; its acquisitions are not written), and so does
        this, with the acquisitions' delivery counts in the same write. A refused write
        undoes both, each answered with the persister's code."""
        ack_error = Error.NONE
        if acknowledgements is not None:
            current = self._held.get((group_id, partition.topic, partition.index))
            if current is None or not current.serves(partition):
                # As acknowledge answers: nothing acquired here to acknowledge.
                ack_error, acknowledgements = Error.INVALID_RECORD_STATE, None
        held, error = await self._get_or_create(group_id, partition)
        if held is None:
            return ShareFetchResult(error, acknowledge_error=ack_error)
        settings, isolation_level = self._settings(group_id)
        async with held.lock:
            share = held.share
            share.settings = settings
            share.update_log_start_offset(partition.log.log_start_offset)
            expired = share.expire_ranges(_now_ms())
            if expired:
                # Persisted now, so that what expiry archived goes to the DLQ once.
                error = await self._persist(held, share.batches_in(expired))
                if error is not Error.NONE:
                    log.warning(
                        "share group %s: lock expiry not persisted: %s", group_id, error.name
                    )
                self._hand_over_dead_letters(held, group_id, partition.topic, partition.index)
            before = share.clone()
            acked: list[tuple[int, int]] = []
            if acknowledgements is not None:
                try:
                    changed = share.acknowledge(member_id, acknowledgements, _now_ms())
                    acked = [(b.first_offset, b.last_offset) for b in changed]
                except InvalidRecordState as refused:
                    log.debug("share group %s: %s", group_id, refused)
                    ack_error, acknowledgements = Error.INVALID_RECORD_STATE, None
            result = self._read_and_acquire(
                share,
                member_id,
                partition,
                max_records,
                max_bytes,
                batch_optimized,
                isolation_level,
            )
            result.acknowledge_error = ack_error
            if acknowledgements is None and not result.acquired:
                return result
            ranges = acked + [(r.first_offset, r.last_offset) for r in result.acquired]
            error = await self._persist(held, share.batches_in(ranges))
            if error is Error.NONE:
                self._hand_over_dead_letters(held, group_id, partition.topic, partition.index)
            else:
                held.share = before
        if error is not Error.NONE:
            log.warning(
                "share group %s: ShareFetch on %s-%d not persisted: %s",
                group_id,
                partition.topic,
                partition.index,
                error.name,
            )
            code = persister_error(error)
            dropped = self._held.get((group_id, partition.topic, partition.index)) is not held
            if acknowledgements is None or not dropped:
                return ShareFetchResult(
                    code if result.acquired else result.error,
                    acknowledge_error=code if acknowledgements is not None else ack_error,
                )
            # The state was reset or deleted (FENCED_STATE_EPOCH, UNKNOWN_TOPIC_OR_PARTITION:
            # the share partition dropped). The acknowledgements fail with that code, as
            # Kafka's acknowledge does, and the fetch goes on, as Kafka's does, on the share
            # partition read again from the persister.
            again = await self.acquire(
                group_id,
                member_id,
                partition,
                max_records=max_records,
                max_bytes=max_bytes,
                batch_optimized=batch_optimized,
            )
            again.acknowledge_error = code
            return again
        if acknowledgements is not None:
            self.replicas.watchers.notify(
                share_watch_key(group_id, partition.topic, partition.index)
            )
        self._timer_changed.set()
        return result

    def _read_and_acquire(
        self,
        share: SharePartition,
        member_id: str,
        partition: Partition,
        max_records: int,
        max_bytes: int,
        batch_optimized: bool,
        isolation_level: int,
    ) -> ShareFetchResult:
        """Read from the share partition's next fetch offset and acquire in ``share`` (not
        persisted: the caller writes what was acquired). The records answered are the log's
        batches that hold an acquired record (Kafka's ShareFetchUtils.maybeSliceFetchRecords)."""
        if not share.can_acquire():
            return ShareFetchResult()
        fetch_offset = share.next_fetch_offset()
        entry = self.replicas.read_records(
            partition,
            fetch_offset,
            replica_id=-1,
            last_fetched_epoch=-1,
            max_bytes=max_bytes,
            min_one_batch=True,
            record_progress=False,
            isolation_level=isolation_level,
            zero_copy=False,
        )
        if entry["error_code"] != Error.NONE:
            return ShareFetchResult(Error(entry["error_code"]))
        records = bytes(entry["records"] or b"")
        if not records:
            return ShareFetchResult()
        headers = _headers(records)
        batches = [header[:5] for header in headers]
        # Transaction markers are not records: their offsets are gaps. So are the records
        # of aborted transactions under read_committed. Kafka's SharePartition acquires
        # them and archives them at once (persisted ARCHIVED, counted in the lag's
        # delivery-complete count); here they are never acquired, so no state is written
        # for them and the start offset moves past them as past a marker: no client can
        # tell, though the lag may differ from Kafka's until the start offset passes them.
        aborted = _aborted_batches(headers, entry.get("aborted_transactions"))
        fetched = [
            (first, last)
            for first, last, _, _, control in batches
            if not control and first not in aborted
        ]
        acquired = share.acquire(
            member_id, max_records, fetched, _now_ms(), batch_optimized=batch_optimized
        )
        if not acquired:
            return ShareFetchResult()
        first, last = acquired[0].first_offset, acquired[-1].last_offset
        kept = [
            (position, size)
            for base, end, position, size, _ in batches
            if end >= first and base <= last
        ]
        start = kept[0][0]
        stop = kept[-1][0] + kept[-1][1]
        return ShareFetchResult(Error.NONE, records[start:stop], acquired)

    async def acknowledge(
        self,
        group_id: str,
        member_id: str,
        partition: Partition,
        acknowledgements: Sequence[Acknowledgement],
    ) -> Error:
        """Apply a member's acknowledgements of one partition, persisted before answering:
        all or none (INVALID_RECORD_STATE if an offset is not acquired by the member)."""
        topic, index = partition.key
        held = self._held.get((group_id, topic, index))
        if held is None or not held.serves(partition):
            return Error.INVALID_RECORD_STATE
        async with held.lock:
            self._refresh(held, group_id)
            before = held.share.clone()
            try:
                changed = held.share.acknowledge(member_id, acknowledgements, _now_ms())
            except InvalidRecordState as refused:
                log.debug("share group %s: %s", group_id, refused)
                return Error.INVALID_RECORD_STATE
            error = await self._persist(held, changed)
            if error is not Error.NONE:
                held.share = before
                return persister_error(error)
            self._hand_over_dead_letters(held, group_id, topic, index)
        self.replicas.watchers.notify(share_watch_key(group_id, topic, index))
        self._timer_changed.set()
        return Error.NONE

    async def release_member(self, group_id: str, member_id: str) -> int:
        """The member closed its share session or left: its records become available
        (Kafka's releaseSession / releaseAcquiredRecords); how many."""
        released = 0
        for (group, topic, index), held in list(self._held.items()):
            if group != group_id:
                continue
            async with held.lock:
                self._refresh(held, group)
                ranges = held.share.release_member_ranges(member_id)
                if not ranges:
                    continue
                released += sum(last - first + 1 for first, last in ranges)
                error = await self._persist(held, held.share.batches_in(ranges))
                if error is not Error.NONE:
                    log.warning("share group %s: release not persisted: %s", group, error.name)
                self._hand_over_dead_letters(held, group, topic, index)
            self.replicas.watchers.notify(share_watch_key(group, topic, index))
        return released

    async def session_closed(self, group_id: str, member_id: str) -> None:
        """A member closed its share session (final epoch): its records are freed, and the
        group's share partitions dropped if it was the group's last session here."""
        await self.release_member(group_id, member_id)
        self._maybe_group_empty(group_id)

    async def member_left(self, group_id: str, member_id: str) -> None:
        """For the group coordinator: a member left the share group (or was fenced)."""
        removed = self.sessions.remove(group_id, member_id)
        await self.release_member(group_id, member_id)
        if removed is not None:
            self._maybe_group_empty(group_id)

    async def connection_closed(self, connection: object) -> None:
        """The sessions of a closed connection end, and their members' records are freed."""
        for session in self.sessions.remove_connection(connection):
            await self.release_member(session.group_id, session.member_id)
            self._maybe_group_empty(session.group_id)
