"""The share groups' DLQ writer (replication/share_dlq_writer.py) in process under trio's
MockClock: a real ReplicaManager on real logs (tests/unit/replication_harness.py) leading the
source topic and a DLQ topic. A dead letter is appended to the DLQ partition through the
replica manager, with the original copied; a DLQ partition whose leader cannot be reached is
tried 5 times with Kafka's backoff, then given up, logged and counted; a group without a DLQ
(or at share.version 1) queues nothing. No sockets, no sleep."""

import logging
import uuid

import pytest
import trio

from minibroker.common.features import SHARE_VERSION, FinalizedFeatures
from minibroker.protocol.errors import Error
from minibroker.protocol.records import decode_records
from minibroker.replication.metadata_cache import PartitionMetadata, TopicMetadata
from minibroker.replication.share_dlq_writer import ShareDlqWriter
from minibroker.replication.share_partition import (
    Acknowledgement,
    AcknowledgeType,
    DeadLetter,
    DeadLetterReason,
    RecordState,
    StateBatch,
)
from minibroker.replication.share_partition_manager import SharePartitionManager
from minibroker.replication.share_persister import InMemoryPersister, ShareStateKey, WriteState
from tests.unit.replication_harness import (
    TOPIC,
    TOPIC_ID,
    append,
    leader_and_isr,
    make_broker,
)

GROUP = "g"
DLQ = "dlq.t"
DLQ_ID = uuid.UUID(int=8)


def known_topic(replicas, name: str, topic_id: uuid.UUID, leader: int) -> None:
    """The topic in the broker's metadata cache, as the controller's UpdateMetadata puts it."""
    replicas.metadata.topics[name] = TopicMetadata(
        name, topic_id, {0: PartitionMetadata(leader, 1, (leader,), (leader,), ())}
    )


@pytest.fixture
async def broker(tmp_path, nursery, autojump_clock):
    replicas = make_broker(tmp_path, 1)
    await nursery.start(replicas.run)
    await replicas.apply_leader_and_isr(leader_and_isr(1, 1, [1], [1]))
    replicas.announced_topic_configs[DLQ] = {"errors.deadletterqueue.group.enable": "true"}
    await replicas.apply_leader_and_isr(leader_and_isr(1, 1, [1], [1], topic=DLQ, topic_id=DLQ_ID))
    known_topic(replicas, TOPIC, TOPIC_ID, 1)
    known_topic(replicas, DLQ, DLQ_ID, 1)
    return replicas


async def drained(writer: ShareDlqWriter) -> None:
    while writer.pending:
        await trio.sleep(0.01)


async def test_a_dead_letter_is_appended_to_the_dlq_partition_led_here(
    broker, nursery, autojump_clock
):
    # Offsets 0-2 of t-0, values v0, v1, v2 (acks=1: the harness's TOPIC wants 2 in sync).
    assert (await append(broker, 0, 3, acks=1))["error_code"] == 0
    broker.group_configs[GROUP] = {
        "errors.deadletterqueue.topic.name": DLQ,
        "errors.deadletterqueue.copy.record.enable": "true",
    }
    writer = ShareDlqWriter(broker.config, broker)
    await nursery.start(writer.run)
    assert writer.enqueue(GROUP, TOPIC, TOPIC_ID, 0, [DeadLetter(1, DeadLetterReason.REJECTED, 1)])
    await drained(writer)
    assert (writer.records_written, writer.failed_requests) == (1, 0)
    dlq, _ = broker.leader_partition(DLQ, 0)
    assert dlq is not None
    entry = broker.read_records(
        dlq,
        0,
        replica_id=-1,
        last_fetched_epoch=-1,
        max_bytes=1 << 20,
        min_one_batch=True,
        record_progress=False,
    )
    (written,) = decode_records(bytes(entry["records"]))
    assert written.value == b"v1"
    assert dict(written.headers) == {
        "__dlq.errors.topic": b"t",
        "__dlq.errors.partition": b"0",
        "__dlq.errors.offset": b"1",
        "__dlq.errors.group": b"g",
        "__dlq.errors.delivery.count": b"1",
        "__dlq.errors.message": b"Offset rejected by client.",
    }


async def test_an_unreachable_dlq_leader_is_tried_five_times_then_given_up(
    broker, nursery, autojump_clock, caplog
):
    far = "dlq.far"
    broker.announced_topic_configs[far] = {"errors.deadletterqueue.group.enable": "true"}
    known_topic(broker, far, uuid.UUID(int=9), leader=2)  # broker 2: no address known
    broker.group_configs[GROUP] = {"errors.deadletterqueue.topic.name": far}
    writer = ShareDlqWriter(broker.config, broker)
    await nursery.start(writer.run)
    started = trio.current_time()
    with caplog.at_level(logging.ERROR, logger="share-dlq"):
        writer.enqueue(
            GROUP, TOPIC, TOPIC_ID, 0, [DeadLetter(0, DeadLetterReason.DELIVERY_COUNT_LIMIT, 5)]
        )
        await drained(writer)
    # Backoffs of 1, 2, 4 and 8 s, each within 20 % jitter, between the five attempts.
    assert 12.0 <= trio.current_time() - started <= 18.0
    assert (writer.requests, writer.failed_requests, writer.records_written) == (5, 5, 0)
    assert "proceeding to ARCHIVED regardless" in caplog.text
    metrics = broker.metrics
    assert metrics.child(metrics.dlq_failed_produce_requests, GROUP)._value.get() == 5


async def test_nothing_is_queued_without_a_dlq_or_below_share_version_2(
    broker, nursery, autojump_clock
):
    writer = ShareDlqWriter(broker.config, broker)
    letter = [DeadLetter(0, DeadLetterReason.REJECTED, 1)]
    assert not writer.enqueue(GROUP, TOPIC, TOPIC_ID, 0, letter)  # no DLQ topic name
    broker.group_configs[GROUP] = {"errors.deadletterqueue.topic.name": DLQ}
    broker.finalized_features = FinalizedFeatures({SHARE_VERSION: 1}, 2)
    assert not writer.enqueue(GROUP, TOPIC, TOPIC_ID, 0, letter)
    broker.finalized_features = FinalizedFeatures({SHARE_VERSION: 2}, 3)
    assert writer.enqueue(GROUP, TOPIC, TOPIC_ID, 0, letter)
    assert writer.pending == 1


async def test_a_record_at_the_limit_under_the_old_leader_is_archived_and_dead_lettered_at_load(
    broker, nursery, autojump_clock
):
    """The old leader persisted offset 0 delivered 5 times (the limit) and died holding its
    lock: the new leader's share partition moves it to ARCHIVING at load, persists that, and
    hands it to the DLQ; once written it is ARCHIVED, persisted, and the start offset moves
    past it; offset 1 is acquired."""
    assert (await append(broker, 0, 2, acks=1))["error_code"] == 0
    broker.group_configs[GROUP] = {"errors.deadletterqueue.topic.name": DLQ}
    persister = InMemoryPersister()
    key = ShareStateKey(GROUP, TOPIC_ID, 0)
    assert await persister.initialize(key, 0, 0) == Error.NONE
    at_limit = (StateBatch(0, 0, RecordState.AVAILABLE, 5),)
    assert await persister.write(key, WriteState(0, 1, 0, at_limit)) == Error.NONE
    writer = ShareDlqWriter(broker.config, broker)
    await nursery.start(writer.run)
    manager = SharePartitionManager(broker.config, broker, persister, dlq=writer)
    partition, _ = broker.leader_partition(TOPIC, 0)
    assert partition is not None
    result = await manager.acquire(GROUP, "m", partition, max_records=10, max_bytes=1 << 20)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in result.acquired] == [
        (1, 1, 1)
    ]
    read = await persister.read(key, 1)
    assert read.state is not None and read.state.start_offset == 0
    assert read.state.batches[0] == StateBatch(0, 0, RecordState.ARCHIVING, 5)
    await drained(writer)
    assert writer.records_written == 1
    read = await persister.read(key, 1)
    assert read.state is not None and read.state.start_offset == 1  # 0 archived, persisted


async def test_a_leader_lost_before_its_dlq_write_leaves_archiving_for_the_next_to_write(
    broker, nursery, autojump_clock
):
    """At least once into the DLQ (Kafka 4.4's ARCHIVING, KIP-1191): a REJECT is persisted as
    ARCHIVING, so the start offset stays; the leader's DLQ writer stops before the write (its
    DLQ partition's leader unreachable, then the leader gone: its writer cancelled); a new
    share partition manager (the next leader) reads ARCHIVING, writes the record to the DLQ,
    then persists ARCHIVED and moves the start offset past it."""
    assert (await append(broker, 0, 2, acks=1))["error_code"] == 0
    far = "dlq.far"
    broker.announced_topic_configs[far] = {"errors.deadletterqueue.group.enable": "true"}
    known_topic(broker, far, uuid.UUID(int=9), leader=2)  # broker 2: no address known
    broker.group_configs[GROUP] = {"errors.deadletterqueue.topic.name": far}
    persister = InMemoryPersister()
    key = ShareStateKey(GROUP, TOPIC_ID, 0)
    assert await persister.initialize(key, 0, 0) == Error.NONE  # from offset 0
    partition, _ = broker.leader_partition(TOPIC, 0)
    assert partition is not None
    with trio.CancelScope() as old_leader:
        async with trio.open_nursery() as old:
            writer = ShareDlqWriter(broker.config, broker)
            await old.start(writer.run)
            manager = SharePartitionManager(broker.config, broker, persister, dlq=writer)
            fetched = await manager.acquire(
                GROUP, "m", partition, max_records=1, max_bytes=1 << 20, batch_optimized=False
            )
            assert [(r.first_offset, r.last_offset) for r in fetched.acquired] == [(0, 0)]
            rejected = [Acknowledgement(0, 0, AcknowledgeType.REJECT)]
            assert await manager.acknowledge(GROUP, "m", partition, rejected) == Error.NONE
            read = await persister.read(key, 1)
            assert read.state is not None and read.state.start_offset == 0
            assert read.state.batches[0] == StateBatch(0, 0, RecordState.ARCHIVING, 1)
            # Two failed attempts, backing off for the third: with Kafka's 20% jitter the
            # second comes at 0.8-1.2 s, the third no sooner than 0.8 + 1.6 = 2.4 s.
            await trio.sleep(1.8)
            assert writer.failed_requests == 2 and writer.pending == 1
            old_leader.cancel()
    assert writer.records_written == 0
    read = await persister.read(key, 1)
    assert read.state is not None and read.state.batches[0].delivery_state is RecordState.ARCHIVING
    # The next leader, whose DLQ partition is reachable (led here).
    broker.group_configs[GROUP] = {"errors.deadletterqueue.topic.name": DLQ}
    writer = ShareDlqWriter(broker.config, broker)
    await nursery.start(writer.run)
    manager = SharePartitionManager(broker.config, broker, persister, dlq=writer)
    fetched = await manager.acquire(GROUP, "n", partition, max_records=10, max_bytes=1 << 20)
    assert [(r.first_offset, r.last_offset) for r in fetched.acquired] == [(1, 1)]
    await drained(writer)
    assert writer.records_written == 1
    read = await persister.read(key, 1)
    assert read.state is not None and read.state.start_offset == 1
    assert manager.share_partition(GROUP, TOPIC, 0).state_of(0) is None
