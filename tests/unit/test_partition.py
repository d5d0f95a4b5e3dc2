"""The replication rules of one partition replica, with time passed in (no sockets, no sleep)."""

import pytest

from minibroker.protocol.errors import Error
from minibroker.replication.partition import FollowerProgress, Partition
from minibroker.storage.log import LogConfig, PartitionLog
from tests.unit.batch_factory import make_batch

LAG_MS = 1000


@pytest.fixture
def leader(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), now_ms=0, needs_recovery=False)
    partition = Partition("t", None, 0, log, local_id=1)
    partition.become_leader(
        leader_epoch=3, partition_epoch=5, isr=[1, 2, 3], replicas=[1, 2, 3], now_ms=0
    )
    yield partition
    log.close()


def append(partition: Partition, count: int) -> int:
    """Append `count` records as leader; return the new log end offset."""
    partition.log.append_as_leader(make_batch(count), leader_epoch=partition.leader_epoch, now_ms=0)
    return partition.log.log_end_offset


def test_high_watermark_is_the_minimum_log_end_over_the_isr(leader):
    assert append(leader, 10) == 10
    assert not leader.maybe_advance_high_watermark()  # followers' positions are unknown
    assert not leader.record_follower_fetch(2, 10, now_ms=1)
    assert leader.high_watermark == 0
    assert leader.record_follower_fetch(3, 7, now_ms=1)
    assert leader.high_watermark == 7
    assert leader.record_follower_fetch(3, 10, now_ms=2)
    assert leader.high_watermark == 10


def test_high_watermark_never_moves_back(leader):
    append(leader, 10)
    leader.record_follower_fetch(2, 10, now_ms=1)
    leader.record_follower_fetch(3, 10, now_ms=1)
    leader.isr = [1, 2, 3]
    leader.followers[3].log_end_offset = 4  # as after a follower restart
    assert not leader.maybe_advance_high_watermark()
    assert leader.high_watermark == 10


def test_a_shrunk_isr_lets_the_high_watermark_advance(leader):
    append(leader, 5)
    leader.record_follower_fetch(2, 5, now_ms=1)
    assert leader.high_watermark == 0  # waiting on follower 3
    leader.isr = [1, 2]
    assert leader.maybe_advance_high_watermark()
    assert leader.high_watermark == 5


def test_the_high_watermark_is_held_while_the_isr_is_below_min_isr(tmp_path):
    """Kafka 4.4's Partition.maybeIncrementLeaderHW: nothing moves the HW while the ISR is
    smaller than min(min.insync.replicas, replicas) (isUnderMinIsr / effectiveMinIsr)."""
    log = PartitionLog.open(
        tmp_path / "t-0", LogConfig(min_insync_replicas=2), now_ms=0, needs_recovery=False
    )
    partition = Partition("t", None, 0, log, local_id=1)
    partition.become_leader(
        leader_epoch=1, partition_epoch=1, isr=[1], replicas=[1, 2, 3], now_ms=0
    )
    assert partition.is_under_min_isr
    append(partition, 5)
    assert not partition.record_follower_fetch(2, 5, now_ms=1)
    assert not partition.maybe_advance_high_watermark()
    assert partition.high_watermark == 0
    partition.isr = [1, 2]  # the ISR change committed by the controller
    assert not partition.is_under_min_isr
    assert partition.maybe_advance_high_watermark()
    assert partition.high_watermark == 5
    # min.insync.replicas above the replication factor counts as the replication factor.
    single = Partition("u", None, 0, log, local_id=1)
    single.become_leader(leader_epoch=1, partition_epoch=1, isr=[1], replicas=[1], now_ms=0)
    assert single.effective_min_isr == 1 and not single.is_under_min_isr
    log.close()


def test_lagging_followers_by_last_caught_up_time(leader):
    append(leader, 5)
    leader.record_follower_fetch(2, 5, now_ms=500)  # caught up at 500
    leader.record_follower_fetch(3, 2, now_ms=500)  # behind; caught up only at become_leader
    assert leader.lagging_isr_members(now_ms=900, lag_time_max_ms=LAG_MS) == []
    assert leader.lagging_isr_members(now_ms=1001, lag_time_max_ms=LAG_MS) == [3]
    assert leader.lagging_isr_members(now_ms=1501, lag_time_max_ms=LAG_MS) == [2, 3]


def test_fetching_up_to_the_previous_leader_end_counts_as_caught_up():
    # Kafka's rule: reaching the leader's end as of the previous fetch dates catch-up to it.
    progress = FollowerProgress()
    progress.record_fetch(fetch_offset=0, leader_end_offset=10, now_ms=100)
    assert progress.last_caught_up_ms == 0
    progress.record_fetch(fetch_offset=10, leader_end_offset=20, now_ms=200)
    assert progress.last_caught_up_ms == 100
    progress.record_fetch(fetch_offset=20, leader_end_offset=20, now_ms=300)
    assert progress.last_caught_up_ms == 300


def test_a_follower_joins_the_isr_at_the_high_watermark_and_epoch_start(leader):
    append(leader, 4)
    leader.isr = [1, 2]
    leader.record_follower_fetch(2, 4, now_ms=1)
    assert leader.high_watermark == 4
    leader.record_follower_fetch(3, 3, now_ms=1)
    assert leader.followers_ready_to_join() == []
    leader.record_follower_fetch(3, 4, now_ms=2)
    assert leader.followers_ready_to_join() == [3]


def test_acks_all_refused_and_completed(leader):
    leader.isr = [1]
    assert leader.acks_all_error(min_insync_replicas=2) == Error.NOT_ENOUGH_REPLICAS
    leader.isr = [1, 2]
    assert leader.acks_all_error(min_insync_replicas=2) == Error.NONE
    end = append(leader, 3)
    assert leader.acks_all_outcome(end, min_insync_replicas=2) is None
    leader.record_follower_fetch(2, end, now_ms=1)
    assert leader.acks_all_outcome(end, min_insync_replicas=2) == Error.NONE
    leader.isr = [1]
    assert (
        leader.acks_all_outcome(end, min_insync_replicas=2)
        == Error.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    )
    leader.become_follower(2, 4, 6, [2], [1, 2, 3])
    assert leader.acks_all_outcome(end, 1) == Error.NOT_LEADER_OR_FOLLOWER


def test_follower_high_watermark_is_bounded_by_its_own_log(leader):
    append(leader, 6)
    leader.become_follower(2, 4, 6, [1, 2, 3], [1, 2, 3])
    assert leader.update_follower_high_watermark(100)
    assert leader.high_watermark == 6
    assert not leader.update_follower_high_watermark(3)
    assert leader.high_watermark == 6


def test_becoming_leader_records_the_epoch_start(leader):
    append(leader, 2)
    leader.become_follower(2, 4, 6, [1, 2, 3], [1, 2, 3])
    leader.become_leader(7, 8, [1, 2, 3], [1, 2, 3], now_ms=10)
    assert leader.log.leader_epoch_cache.entries()[-1] == (7, 2)
    assert leader.log.end_offset_for_epoch(3) == (3, 2)


def test_the_isr_sent_to_the_controller_carries_each_members_broker_epoch(leader):
    """AlterPartition v3 (KIP-903, Kafka's Partition.addBrokerEpochToIsr): the leader with its
    own broker epoch, each follower with the one its last fetch carried (Fetch v15+'s
    ReplicaState), -1 for a follower whose fetch carried none or that has not fetched."""
    append(leader, 5)
    leader.record_follower_fetch(2, 5, now_ms=1, broker_epoch=41)
    assert leader.isr_with_broker_epochs([1, 2, 3], local_broker_epoch=7) == [
        {"broker_id": 1, "broker_epoch": 7},
        {"broker_id": 2, "broker_epoch": 41},
        {"broker_id": 3, "broker_epoch": -1},
    ]
    # A restarted follower's next fetch carries its new epoch; one fetching at v12 none.
    leader.record_follower_fetch(2, 5, now_ms=2, broker_epoch=44)
    leader.record_follower_fetch(3, 5, now_ms=2)
    assert leader.isr_with_broker_epochs([1, 2, 3], local_broker_epoch=7) == [
        {"broker_id": 1, "broker_epoch": 7},
        {"broker_id": 2, "broker_epoch": 44},
        {"broker_id": 3, "broker_epoch": -1},
    ]
