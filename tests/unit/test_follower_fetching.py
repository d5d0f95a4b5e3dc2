"""Follower fetching (KIP-392) in the replica manager, in process under trio's MockClock:
what a follower serves a consumer, and the leader's choice of a preferred read replica from
what its followers' fetches told it. The pure rule is tests/unit/test_replica_selector.py;
a real cluster with librdkafka is tests/cluster/test_follower_fetching.py."""

import pytest
import trio

from minibroker.protocol.errors import Error
from minibroker.replication.metadata_cache import BrokerEndpoint
from minibroker.replication.replica_selector import RackAwareReplicaSelector
from tests.unit.batch_factory import make_batch
from tests.unit.replication_harness import TOPIC, append, leader_and_isr, make_broker

LEADER, FOLLOWER = 1, 2
EPOCH = 1
RACKS = {LEADER: "a", FOLLOWER: "b"}
LISTENER = "PLAINTEXT"


def consumer_read(replicas, partition, offset: int, isolation_level: int = 0) -> dict:
    return replicas.read_records(
        partition,
        offset,
        replica_id=-1,
        last_fetched_epoch=-1,
        max_bytes=1 << 20,
        min_one_batch=True,
        record_progress=True,
        isolation_level=isolation_level,
    )


def live_brokers(replicas, racks: dict[int, str]) -> None:
    """The live brokers and their racks, as an UpdateMetadata would leave them."""
    replicas.metadata.listeners = {
        node: {LISTENER: BrokerEndpoint(node, "127.0.0.1", 9000 + node, rack)}
        for node, rack in racks.items()
    }


@pytest.fixture
async def follower(tmp_path, nursery, autojump_clock):
    """Broker 2 following TOPIC-0 (leader 1), its fetcher off: the test writes its log."""
    replicas = make_broker(tmp_path, FOLLOWER)
    await nursery.start(replicas.run)
    replicas.fetchers.add = lambda partition: None
    await replicas.apply_leader_and_isr(leader_and_isr(LEADER, EPOCH, [1, 2], [1, 2]))
    yield replicas
    replicas.log_manager.close()


async def test_a_follower_serves_consumers_up_to_its_own_high_watermark(follower, autojump_clock):
    partition = follower.partitions()[0]
    # Offsets 0-2 and 3-4 replicated; the leader's high watermark it last heard of is 3.
    partition.append_as_follower(make_batch(3, partition_leader_epoch=EPOCH), now_ms=0)
    partition.append_as_follower(
        make_batch(2, base_offset=3, partition_leader_epoch=EPOCH), now_ms=0
    )
    partition.update_follower_high_watermark(3)

    # Consumers without follower fetching (no selector, Fetch < v11) still hear this.
    assert follower.leader_partition(TOPIC, 0)[1] == Error.NOT_LEADER_OR_FOLLOWER
    # With it, the follower's replica at the client's epoch (Kafka's fetchOnlyFromLeader
    # false), and the epoch checks of the leader.
    assert follower.readable_partition(TOPIC, 0, EPOCH) == (partition, Error.NONE)
    assert follower.readable_partition(TOPIC, 0, -1) == (partition, Error.NONE)
    assert follower.readable_partition(TOPIC, 0, EPOCH - 1)[1] == Error.FENCED_LEADER_EPOCH
    assert follower.readable_partition(TOPIC, 0, EPOCH + 1)[1] == Error.UNKNOWN_LEADER_EPOCH
    assert follower.readable_partition(TOPIC, 9)[1] == Error.UNKNOWN_TOPIC_OR_PARTITION

    read = consumer_read(follower, partition, 0)
    assert (read["error_code"], read["high_watermark"]) == (Error.NONE, 3)
    assert bytes(read["records"]) == make_batch(3, partition_leader_epoch=EPOCH)
    committed = consumer_read(follower, partition, 0, isolation_level=1)
    assert (committed["last_stable_offset"], committed["aborted_transactions"]) == (3, [])
    assert bytes(committed["records"]) == make_batch(3, partition_leader_epoch=EPOCH)
    # Past its high watermark, within its log: nothing yet.
    for offset in (3, 4, 5):
        beyond = consumer_read(follower, partition, offset)
        assert (beyond["error_code"], beyond["records"]) == (Error.NONE, b""), offset
    # Past its log end: OFFSET_OUT_OF_RANGE, with its high watermark below the offset, which
    # sends librdkafka back to the leader rather than resetting its position.
    out_of_range = consumer_read(follower, partition, 6)
    assert (out_of_range["error_code"], out_of_range["high_watermark"]) == (
        Error.OFFSET_OUT_OF_RANGE,
        3,
    )
    # Only a leader chooses a preferred read replica.
    follower.replica_selector = RackAwareReplicaSelector()
    live_brokers(follower, RACKS)
    assert follower.preferred_read_replica(partition, "b", 0, LISTENER) is None


@pytest.fixture
async def brokers(tmp_path, nursery, autojump_clock):
    brokers: dict = {}
    brokers[LEADER] = make_broker(tmp_path, LEADER, brokers)
    brokers[FOLLOWER] = make_broker(tmp_path, FOLLOWER, brokers)
    for replicas in brokers.values():
        await nursery.start(replicas.run)
        await replicas.apply_leader_and_isr(leader_and_isr(LEADER, EPOCH, [1, 2], [1, 2]))
    yield brokers
    for replicas in brokers.values():
        replicas.log_manager.close()


async def test_the_leader_sends_a_consumer_to_an_in_sync_follower_of_its_rack(
    brokers, autojump_clock
):
    leader = brokers[LEADER]
    partition = leader.partitions()[0]
    live_brokers(leader, RACKS)
    # An acks=-1 append completes once the follower fetched past it: its log end is known.
    assert (await append(leader, 0, 5))["error_code"] == Error.NONE
    assert partition.followers[FOLLOWER].log_end_offset == 5
    # Its log start came with its fetches (Fetch v5+).
    assert partition.followers[FOLLOWER].log_start_offset == 0

    # No selector configured: the leader serves everyone.
    assert leader.replica_selector is None
    assert leader.preferred_read_replica(partition, "b", 0, LISTENER) is None

    leader.replica_selector = RackAwareReplicaSelector()
    assert leader.preferred_read_replica(partition, "b", 0, LISTENER) == FOLLOWER
    assert leader.preferred_read_replica(partition, "b", 5, LISTENER) == FOLLOWER
    # The follower's log does not reach offset 6 yet; a client in the leader's rack or in
    # none stays; a client on another listener sees no endpoint of the follower there.
    assert leader.preferred_read_replica(partition, "b", 6, LISTENER) is None
    assert leader.preferred_read_replica(partition, "a", 0, LISTENER) is None
    assert leader.preferred_read_replica(partition, "", 0, LISTENER) is None
    assert leader.preferred_read_replica(partition, "b", 0, "SSL") is None
    # The follower's broker stopped (no longer among the live brokers): the leader serves.
    live_brokers(leader, {LEADER: "a"})
    assert leader.preferred_read_replica(partition, "b", 0, LISTENER) is None
    live_brokers(leader, RACKS)
    # Out of the ISR: the leader serves.
    partition.isr = [LEADER]
    assert leader.preferred_read_replica(partition, "b", 0, LISTENER) is None
    partition.isr = [LEADER, FOLLOWER]
    assert leader.preferred_read_replica(partition, "b", 0, LISTENER) == FOLLOWER

    # And the follower, replicating, serves what the leader acknowledged.
    follower = brokers[FOLLOWER]
    following = follower.partitions()[0]
    with trio.fail_after(10):
        while following.high_watermark < 5:
            await trio.sleep(0.01)
    read = consumer_read(follower, following, 0)
    assert (read["error_code"], read["high_watermark"]) == (Error.NONE, 5)
    assert bytes(read["records"]) == bytes(partition.log.read(0, max_bytes=1 << 20))
