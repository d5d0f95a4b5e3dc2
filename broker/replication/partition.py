"""One partition replica on this broker: its role, ISR, high watermark and followers' progress.

These are the pure replication rules, with time passed in, so they are tested without sockets
or sleeping (tests/unit/test_partition.py). The replica manager wires them to the log, the
purgatory, the fetchers and the controller.

Kafka's rules reproduced here:
- the leader's high watermark is the minimum log end offset over the ISR, and only moves up;
  it does not move at all while the ISR is smaller than min.insync.replicas (KIP-966's first
  part, Kafka 3.7+'s Partition.maybeIncrementLeaderHW / isUnderMinIsr);
- a follower is caught up while its fetch offset reached the leader's log end offset within
  replica.lag.time.max.ms (Kafka's lastCaughtUpTime bookkeeping);
- a follower may rejoin the ISR once its log end offset reaches the high watermark and the start
  offset of the leader's current epoch;
- a follower's high watermark is min(leader's HW, own log end offset).
"""

from dataclasses import dataclass, field
from functools import cached_property

from minibroker.protocol.errors import Error
from minibroker.storage.errors import UnexpectedAppendOffsetError
from minibroker.storage.log import AppendResult, PartitionLog

UNKNOWN_OFFSET = -1


@dataclass
class FollowerProgress:
    """What the leader knows of one follower replica, learnt from its fetch requests."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end_offset: int = UNKNOWN_OFFSET
    # The follower's log start offset, as its fetches carry it (Fetch v5+): follower
    # fetching (KIP-392) sends a consumer only to a follower whose log covers its offset.
    log_start_offset: int = UNKNOWN_OFFSET
    # The follower's broker epoch as its last fetch carried it (Fetch v15+'s
    # ReplicaState.ReplicaEpoch, KIP-903); -1 when it carried none. The leader sends it with
    # the ISR (AlterPartition v3), so that the controller refuses a follower that restarted
    # since this fetch (Kafka's Replica.stateSnapshot.brokerEpoch).
    broker_epoch: int = -1

    def record_fetch(
        self,
        fetch_offset: int,
        leader_end_offset: int,
        now_ms: int,
        log_start_offset: int = UNKNOWN_OFFSET,
        broker_epoch: int = -1,
    ) -> None:
        """Kafka's ReplicaState update: the fetch offset is the follower's log end offset."""
        self.log_start_offset = log_start_offset
        self.broker_epoch = broker_epoch
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.last_fetch_leader_end_offset = leader_end_offset
        self.last_fetch_ms = now_ms
        self.log_end_offset = fetch_offset


@dataclass
class Partition:
    """A replica of ``topic``-``index`` held by broker ``local_id``."""

    topic: str
    topic_id: object
    index: int
    log: PartitionLog
    local_id: int
    high_watermark: int = 0
    leader: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    # An ISR change sent to the controller and not answered yet (Kafka's pending state).
    isr_change_in_flight: bool = False
    # Follower only: the leader's HW minus this log's end, as of the last fetch response.
    fetch_lag: int | None = None
    # A replica whose addition to the ISR is in flight: the HW already waits for it.
    joining: int | None = None

    @cached_property
    def key(self) -> tuple[str, int]:
        """(topic, index): made once (the fetch paths ask for it per partition per request)."""
        return (self.topic, self.index)

    @cached_property
    def request_key(self) -> tuple[object, int]:
        """(topic id, index): a follower's fetch session key at Fetch v13+."""
        return (self.topic_id, self.index)

    @property
    def is_leader(self) -> bool:
        return self.leader == self.local_id

    @property
    def last_stable_offset(self) -> int:
        """Kafka's Partition/UnifiedLog lastStableOffset: min(high watermark, first unstable
        offset), where the first unstable offset is the first offset of the oldest
        transaction still open, or closed by a marker the HW has not passed yet (those are
        forgotten here as the HW passes them, Kafka's onHighWatermarkUpdated)."""
        producers = self.log.producer_state
        if not producers.has_transactions:
            return self.high_watermark
        producers.on_high_watermark_updated(self.high_watermark)
        unstable = producers.first_unstable_offset()
        return self.high_watermark if unstable is None else min(self.high_watermark, unstable)

    def leader_epoch_error(self, requested_epoch: int) -> Error:
        """Kafka's check of the leader epoch a client believes current (-1: not checked)."""
        if requested_epoch == -1 or requested_epoch == self.leader_epoch:
            return Error.NONE
        if requested_epoch > self.leader_epoch:
            return Error.UNKNOWN_LEADER_EPOCH
        return Error.FENCED_LEADER_EPOCH

    def clamp_high_watermark(self) -> None:
        """Keep the HW inside [log start, log end], as Kafka does after truncation or load."""
        self.high_watermark = max(
            self.log.log_start_offset, min(self.high_watermark, self.log.log_end_offset)
        )
        self._forget_replicated_transactions()

    def become_leader(
        self,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
        replicas: list[int],
        now_ms: int,
    ) -> None:
        """Take over: record the epoch's start offset, and forget what followers had fetched.

        Followers still in the ISR count as caught up now, so that they are not shrunk out
        before they had a chance to fetch from the new leader.
        """
        self.leader = self.local_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.isr_change_in_flight = False
        self.joining = None
        # Written with the log's next flush, not now: the entry starts at the log end, so
        # until a batch of this epoch is appended (which carries the epoch, and which
        # recovery reads again) a lost entry changes no answer. A file creation and two
        # fsyncs per partition made a broker taking the lead of 1,000 partitions after a
        # restart spend ten seconds here (BENCHMARKS.md, step 9).
        self.log.leader_epoch_cache.assign(leader_epoch, self.log.log_end_offset, durable=False)
        self.followers = {
            replica: FollowerProgress(last_caught_up_ms=now_ms if replica in isr else 0)
            for replica in replicas
            if replica != self.local_id
        }
        self.clamp_high_watermark()

    def become_follower(
        self,
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
        replicas: list[int],
    ) -> None:
        self.leader = leader
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.followers = {}
        self.isr_change_in_flight = False
        self.joining = None
        self.clamp_high_watermark()

    def change_replicas(self, replicas: list[int], now_ms: int) -> None:
        """The replica set changed under the same leader (a reassignment adding or removing
        replicas): a leader starts tracking the new followers, whose fetches can then move
        them into the ISR, and forgets the removed ones."""
        self.replicas = list(replicas)
        if not self.is_leader:
            return
        self.followers = {
            replica: self.followers.get(replica)
            or FollowerProgress(last_caught_up_ms=now_ms if replica in self.isr else 0)
            for replica in replicas
            if replica != self.local_id
        }

    def record_follower_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        now_ms: int,
        log_start_offset: int = UNKNOWN_OFFSET,
        broker_epoch: int = -1,
    ) -> bool:
        """Note a follower's fetch; True when the high watermark moved as a result."""
        progress = self.followers.get(replica_id)
        if progress is None:
            return False
        progress.record_fetch(
            fetch_offset, self.log.log_end_offset, now_ms, log_start_offset, broker_epoch
        )
        return self.maybe_advance_high_watermark()

    def isr_with_broker_epochs(self, isr: list[int], local_broker_epoch: int) -> list[dict]:
        """AlterPartition v3's NewIsrWithEpochs for ``isr`` (Kafka's
        Partition.addBrokerEpochToIsr): this broker with its own epoch, each follower with
        the epoch its last fetch carried, -1 where none is known (the controller then skips
        that member's check, as Kafka's does)."""
        return [
            {
                "broker_id": replica,
                "broker_epoch": local_broker_epoch
                if replica == self.local_id
                else getattr(self.followers.get(replica), "broker_epoch", -1),
            }
            for replica in isr
        ]

    @property
    def effective_min_isr(self) -> int:
        """Kafka's Partition.effectiveMinIsr: the topic's min.insync.replicas, never more than
        the assigned replicas (a topic of RF 1 with min.insync.replicas=2 is not held)."""
        return min(self.log.config.min_insync_replicas, max(len(self.replicas), 1))

    @property
    def is_under_min_isr(self) -> bool:
        """Kafka's Partition.isUnderMinIsr: a leader whose ISR (the committed one, not the
        joining replica) is smaller than the effective min.insync.replicas."""
        return self.is_leader and len(self.isr) < self.effective_min_isr

    def maybe_advance_high_watermark(self) -> bool:
        """Leader only: HW = min LEO over the ISR; True when it moved (it never moves back).

        As Kafka 4.4's Partition.maybeIncrementLeaderHW (KAFKA-15583, KIP-966), the HW does
        not move while the partition is under min ISR: records written with acks=0 or acks=1
        then stay above the HW, invisible to every consumer, until the ISR is back at
        min.insync.replicas (or the topic's min.insync.replicas is lowered). Kafka applies
        this whatever the eligible.leader.replicas.version feature, and so does this.
        """
        if not self.is_leader or self.is_under_min_isr:
            return False
        offsets = [self.log.log_end_offset]
        members = self.isr if self.joining is None else [*self.isr, self.joining]
        for replica in members:
            if replica != self.local_id:
                progress = self.followers.get(replica)
                offsets.append(progress.log_end_offset if progress else UNKNOWN_OFFSET)
        candidate = min(offsets)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            self._forget_replicated_transactions()
            return True
        return False

    def _forget_replicated_transactions(self) -> None:
        """Kafka's onHighWatermarkUpdated: completed transactions below the HW no longer
        hold the LSO back (done here too, not only when the LSO is read, so that a replica
        nobody reads does not keep them all)."""
        producers = self.log.producer_state
        if producers.has_transactions:
            producers.on_high_watermark_updated(self.high_watermark)

    def append_control_marker(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        now_ms: int,
        transaction_version: int = 0,
    ) -> AppendResult:
        """Leader only: the coordinator's marker, stamped with the current leader epoch
        (see PartitionLog.append_control_marker for its fencing rules)."""
        return self.log.append_control_marker(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            commit=commit,
            leader_epoch=self.leader_epoch,
            now_ms=now_ms,
            transaction_version=transaction_version,
        )

    def append_as_follower(self, records: bytes | memoryview, now_ms: int) -> AppendResult:
        """Append what the leader sent, as Kafka's Partition.appendRecordsToFollowerOrFutureReplica
        does: a follower whose log is empty at an offset that falls inside the leader's first
        batch (the leader's log start moved into the middle of a batch by DeleteRecords, and
        the follower restarted there after OFFSET_OUT_OF_RANGE) starts its log at that
        batch's base offset instead, else no fetch could ever append and it would never
        catch up. Any other batch below the log end is refused (the fetcher truncates)."""
        try:
            return self.log.append_as_follower(records, now_ms=now_ms)
        except UnexpectedAppendOffsetError as unexpected:
            end = self.log.log_end_offset
            if not (
                end == self.log.log_start_offset
                and unexpected.first_offset < end <= unexpected.last_offset
            ):
                raise
            self.log.truncate_fully_and_start_at(unexpected.first_offset)
            return self.log.append_as_follower(records, now_ms=now_ms)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> bool:
        """Follower only: HW = min(leader's HW, own LEO); True when it moved."""
        candidate = min(leader_high_watermark, self.log.log_end_offset)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            self._forget_replicated_transactions()
            return True
        return False

    def lagging_isr_members(self, now_ms: int, lag_time_max_ms: int) -> list[int]:
        """Followers in the ISR that have not caught up within replica.lag.time.max.ms."""
        return [
            replica
            for replica in self.isr
            if replica != self.local_id
            and now_ms - self.followers.get(replica, FollowerProgress()).last_caught_up_ms
            > lag_time_max_ms
        ]

    def _current_epoch_start_offset(self) -> int:
        for epoch, start_offset in reversed(self.log.leader_epoch_cache.entries()):
            if epoch == self.leader_epoch:
                return start_offset
        return self.log.log_end_offset

    def followers_ready_to_join(self) -> list[int]:
        """Replicas outside the ISR whose LEO reached the HW and the current epoch's start."""
        epoch_start = self._current_epoch_start_offset()
        ready = []
        for replica, progress in self.followers.items():
            if replica in self.isr:
                continue
            if (
                progress.log_end_offset >= self.high_watermark
                and progress.log_end_offset >= epoch_start
            ):
                ready.append(replica)
        return ready

    def acks_all_error(self, min_insync_replicas: int) -> Error:
        """Before appending with acks=-1: NOT_ENOUGH_REPLICAS when the ISR is too small."""
        if len(self.isr) < min_insync_replicas:
            return Error.NOT_ENOUGH_REPLICAS
        return Error.NONE

    def acks_all_outcome(self, required_offset: int, min_insync_replicas: int) -> Error | None:
        """After appending with acks=-1: None while waiting, else the answer to give.

        Done when the HW passed the last appended offset; NOT_ENOUGH_REPLICAS_AFTER_APPEND if
        the ISR shrank below min.insync.replicas first; NOT_LEADER_OR_FOLLOWER if leadership
        was lost. (Kafka's checkEnoughReplicasReachOffset. Since the HW stays put below min
        ISR, NOT_ENOUGH_REPLICAS_AFTER_APPEND only answers an ISR that shrank after the HW
        passed the offset; a produce waiting when it shrinks times out instead.)
        """
        if not self.is_leader:
            return Error.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required_offset:
            if len(self.isr) < min_insync_replicas:
                return Error.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return Error.NONE
        return None
