"""DescribeShareGroupOffsets' end offsets (replication/partition_metadata_client.py, Kafka's
PartitionMetadataClient.listLatestOffsets) in process under trio's MockClock, on real replica
managers (tests/unit/replication_harness.py, whose connections answer ListOffsets as the
leader's handler does): the high watermark of a partition led here, a ListOffsets to the leader
elsewhere (a coordinator without a replica of the partition answered lag -1 before: Kafka 4.4's
Java admin showed lag=null where Kafka answered 0), and None where no leader is known."""

import pytest

from minibroker.replication.metadata_cache import BrokerEndpoint, PartitionMetadata, TopicMetadata
from minibroker.replication.partition_metadata_client import PartitionMetadataClient
from tests.unit.replication_harness import TOPIC, TOPIC_ID, append, leader_and_isr, make_broker


@pytest.fixture
async def brokers(tmp_path, nursery, autojump_clock):
    """Broker 1 leads the topic's partition 0 (ISR [1], 7 records appended); broker 2 has no
    replica of it but knows it from the metadata, as a group coordinator elsewhere does."""
    by_id: dict = {}
    leader = make_broker(tmp_path, 1, by_id, properties={"min.insync.replicas": "1"})
    other = make_broker(tmp_path, 2, by_id)
    by_id.update({1: leader, 2: other})
    for replicas in (leader, other):
        await nursery.start(replicas.run)
    leader.announced_topic_configs[TOPIC] = {"min.insync.replicas": "1"}
    await leader.apply_leader_and_isr(leader_and_isr(1, 1, [1], [1]))
    assert (await append(leader, 0, 7))["error_code"] == 0
    other.metadata.topics[TOPIC] = TopicMetadata(
        TOPIC, TOPIC_ID, {0: PartitionMetadata(1, 1, (1,), (1,), ())}
    )
    other.metadata.brokers[1] = BrokerEndpoint(1, "1", 9092, None)
    return leader, other


async def test_the_latest_offset_is_the_leaders_high_watermark(brokers, nursery, autojump_clock):
    leader, other = brokers
    assert leader.hosted_partition(TOPIC, 0)[0].high_watermark == 7
    here = PartitionMetadataClient(leader.config, leader)
    assert await here.latest_offset(TOPIC, 0) == 7
    assert here.remote_requests == 0
    elsewhere = PartitionMetadataClient(other.config, other)
    await nursery.start(elsewhere.run)
    assert await elsewhere.latest_offset(TOPIC, 0) == 7
    assert elsewhere.remote_requests == 1
    # No such partition, no such topic, no leader known: no answer (the lag is -1).
    assert await elsewhere.latest_offset(TOPIC, 3) is None
    assert await elsewhere.latest_offset("nosuch", 0) is None
    other.metadata.topics[TOPIC] = TopicMetadata(
        TOPIC, TOPIC_ID, {0: PartitionMetadata(-1, 2, (1,), (1,), ())}
    )
    assert await elsewhere.latest_offset(TOPIC, 0) is None
