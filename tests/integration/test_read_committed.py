"""Transactions in a real broker's log, driven by hand: a transactional producer id from
InitProducerId, its partition added with AddPartitionsToTxn (the leader checks it with the
coordinator, KIP-890), transactional batches produced, and the COMMIT and ABORT markers
written by the test with WriteTxnMarkers as the transaction coordinator sends them (the
transaction's timeout is long enough that the coordinator never ends it itself). Then
read_committed consumers (a raw Fetch, confluent-kafka, kafka-python) see exactly the
committed records and stop at the last stable offset, read_uncommitted ones see everything,
ListOffsets read_committed answers the LSO, DescribeProducers shows the open transaction,
and bad input gets Kafka's codes: a stale producer epoch on a marker, WriteTxnMarkers from
a client listener."""

import datetime
import threading
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.produce.v7.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)

from minibroker.security.authorizer.acls import Operation, ResourceType
from minibroker.testing import Cluster
from minibroker.testing.cluster import INTER_BROKER_LISTENER
from tests.conftest import SHARED_BROKER, create_topic, exchange
from tests.integration.authz import binding, on_cluster
from tests.integration.test_inter_node_listener import two_listeners  # noqa: F401 (fixture)
from tests.unit.batch_factory import make_batch

TOPIC = "txn"
TRANSACTIONAL = 0x10

# The tests that need only a broker run on the worker's shared broker, each on a topic and a
# transactional id of its own; the kill -9 test kills its broker, so it takes a fresh one
# (tests/conftest.py's `broker`); the others need two listeners or an authorizer. The shared
# broker refuses WriteTxnMarkers on its client listener, as Kafka does: the tests write their
# markers on its inter-broker listener, as a transaction coordinator would.
pytestmark = SHARED_BROKER


@pytest.fixture
def shared(kafka_broker: Cluster) -> Cluster:
    """The worker's shared broker (the pytest plugin's `kafka_broker`)."""
    return kafka_broker


def init_producer_id(bootstrap: str, transactional_id: str = "t") -> tuple[int, int]:
    """A transactional producer's id and epoch from the transaction coordinator (the one
    broker), with a timeout long enough that it never aborts the transaction itself: the
    test writes the markers."""
    found = exchange(bootstrap, FindCoordinatorRequest(key=transactional_id, key_type=1))
    assert found.error_code == ErrorCode.none
    response = exchange(
        bootstrap,
        InitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout=datetime.timedelta(minutes=15),
        ),
    )
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


def add_partition(
    bootstrap: str, transactional_id: str, producer: tuple[int, int], topic: str = TOPIC
) -> None:
    """AddPartitionsToTxn for the topic's partition 0, so that the leader's KIP-890 check
    with the coordinator passes."""
    response = exchange(
        bootstrap,
        AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=producer[0],
            v3_and_below_producer_epoch=producer[1],
            v3_and_below_topics=(AddPartitionsToTxnTopic(name=topic, partitions=(0,)),),
        ),
    )
    (topic,) = response.results_by_topic_v3_and_below
    assert [r.partition_error_code for r in topic.results_by_partition] == [ErrorCode.none]


def produce(
    bootstrap,
    records,
    *,
    producer=(-1, -1),
    sequence=-1,
    transactional_id=None,
    txn_bit=None,
    add=True,
    topic=TOPIC,
):
    producer_id, epoch = producer
    if add and transactional_id is not None and txn_bit is not False:
        add_partition(bootstrap, transactional_id, producer, topic)
    batch = make_batch(
        [(None, value) for value in records],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        attributes=TRANSACTIONAL if (transactional_id if txn_bit is None else txn_bit) else 0,
    )
    response = exchange(
        bootstrap,
        ProduceRequest(
            transactional_id=transactional_id,
            acks=-1,
            timeout=datetime.timedelta(seconds=5),
            topic_data=(
                TopicProduceData(
                    name=topic, partition_data=(PartitionProduceData(index=0, records=batch),)
                ),
            ),
        ),
    )
    (answer,) = response.responses[0].partition_responses
    return answer


def write_marker(bootstrap, producer, commit: bool, *, coordinator_epoch=0, topic=TOPIC):
    producer_id, epoch = producer
    response = exchange(
        bootstrap,
        WriteTxnMarkersRequest(
            markers=(
                WritableTxnMarker(
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    transaction_result=commit,
                    topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=(0,)),),
                    coordinator_epoch=coordinator_epoch,
                ),
            )
        ),
    )
    ((partition,),) = [topic.partitions for topic in response.markers[0].topics]
    return partition.error_code


def raw_fetch(bootstrap, isolation_level: int, topic: str = TOPIC):
    response = exchange(
        bootstrap,
        FetchRequest(
            max_wait=datetime.timedelta(milliseconds=0),
            min_bytes=0,
            isolation_level=isolation_level,
            topics=(
                FetchTopic(
                    topic=topic,
                    partitions=(
                        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        ),
    )
    return response.responses[0].partitions[0]


def list_latest(bootstrap, isolation_level: int, topic: str = TOPIC) -> int:
    response = exchange(
        bootstrap,
        ListOffsetsRequest(
            replica_id=-1,
            isolation_level=isolation_level,
            topics=(
                ListOffsetsTopic(
                    name=topic,
                    partitions=(ListOffsetsPartition(partition_index=0, timestamp=-1),),
                ),
            ),
        ),
    )
    return response.topics[0].partitions[0].offset


def confluent_values(
    bootstrap: str, isolation: str, expected: int, topic: str = TOPIC
) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == message.error()._PARTITION_EOF:
                    if len(values) >= expected:
                        break
                    continue
                pytest.fail(str(message.error()))
            values.append(message.value())
    finally:
        consumer.close()
    return values


def kafka_python_values(bootstrap: str, isolation: str, topic: str = TOPIC) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    try:
        consumer.assign([KafkaTopicPartition(topic, 0)])
        consumer.seek(KafkaTopicPartition(topic, 0), 0)
        return [message.value for message in consumer]
    finally:
        consumer.close()


def transactional_topic(shared, name: str):
    """A one-partition topic and a transactional id of the test's own on the shared broker, the
    id's producer id and epoch, and the address to write markers to: the broker's inter-broker
    listener, as a transaction coordinator does (the client listener refuses WriteTxnMarkers)."""
    bootstrap = shared.bootstrap_servers
    topic, tid = f"txn-rc-{name}", f"txn-rc-{name}-tid"
    create_topic(bootstrap, topic, 1)
    producer = init_producer_id(bootstrap, tid)
    return bootstrap, shared.proxy(1, INTER_BROKER_LISTENER).address, topic, tid, producer


def test_read_committed_sees_exactly_the_committed_records(shared):
    bootstrap, markers, topic, tid, producer = transactional_topic(shared, "committed")

    def transactional(values, sequence):
        answer = produce(
            bootstrap,
            values,
            producer=producer,
            sequence=sequence,
            transactional_id=tid,
            topic=topic,
        )
        assert answer.error_code == ErrorCode.none
        return answer.base_offset

    assert transactional([b"a1", b"a2"], 0) == 0  # 0-1
    assert write_marker(markers, producer, True, topic=topic) == ErrorCode.none  # 2
    assert produce(bootstrap, [b"plain"], topic=topic).error_code == ErrorCode.none  # 3
    assert transactional([b"b1", b"b2"], 2) == 4  # 4-5
    assert write_marker(markers, producer, False, topic=topic) == ErrorCode.none  # 6
    assert transactional([b"c1"], 4) == 7
    assert write_marker(markers, producer, True, topic=topic) == ErrorCode.none  # 8
    # A transaction left open: read_committed stops before it.
    assert transactional([b"d1"], 5) == 9

    committed = raw_fetch(bootstrap, 1, topic=topic)
    assert committed.error_code == ErrorCode.none
    assert (committed.high_watermark, committed.last_stable_offset) == (10, 9)
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [
        (producer[0], 4)
    ]
    uncommitted = raw_fetch(bootstrap, 0, topic=topic)
    assert uncommitted.aborted_transactions is None
    assert len(uncommitted.records) > len(committed.records)
    assert list_latest(bootstrap, 1, topic=topic) == 9
    assert list_latest(bootstrap, 0, topic=topic) == 10

    described = exchange(
        bootstrap,
        DescribeProducersRequest(topics=(TopicRequest(name=topic, partition_indexes=(0,)),)),
    )
    (state,) = described.topics[0].partitions[0].active_producers
    assert (state.producer_id, state.current_txn_start_offset, state.last_sequence) == (
        producer[0],
        9,
        5,
    )

    expected = [b"a1", b"a2", b"plain", b"c1"]
    assert confluent_values(bootstrap, "read_committed", 4, topic=topic) == expected
    assert kafka_python_values(bootstrap, "read_committed", topic=topic) == expected
    everything = [b"a1", b"a2", b"plain", b"b1", b"b2", b"c1", b"d1"]
    assert confluent_values(bootstrap, "read_uncommitted", 7, topic=topic) == everything
    assert kafka_python_values(bootstrap, "read_uncommitted", topic=topic) == everything

    # The open transaction aborted: read_committed reaches the end and skips d1.
    assert write_marker(markers, producer, False, topic=topic) == ErrorCode.none  # 10
    assert raw_fetch(bootstrap, 1, topic=topic).last_stable_offset == 11
    assert kafka_python_values(bootstrap, "read_committed", topic=topic) == expected


def test_a_marker_with_a_stale_epoch_is_invalid_producer_epoch(shared):
    bootstrap, markers, topic, tid, producer = transactional_topic(shared, "stale-epoch")
    producer_id, epoch = producer
    # Transactional batches need a transactional id (Kafka's TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
    refused = produce(
        bootstrap, [b"x"], producer=(producer_id, epoch), sequence=0, txn_bit=True, topic=topic
    )
    assert refused.error_code == ErrorCode.transactional_id_authorization_failed
    produce(
        bootstrap,
        [b"x"],
        producer=(producer_id, epoch),
        sequence=0,
        transactional_id=tid,
        topic=topic,
    )
    assert (
        write_marker(markers, (producer_id, epoch + 1), False, coordinator_epoch=2, topic=topic)
        == ErrorCode.none
    )
    assert (
        write_marker(markers, (producer_id, epoch), True, coordinator_epoch=2, topic=topic)
        == ErrorCode.invalid_producer_epoch
    )
    assert (
        write_marker(markers, (producer_id, epoch + 1), True, coordinator_epoch=1, topic=topic)
        == ErrorCode.transaction_coordinator_fenced
    )
    assert write_marker(markers, (producer_id, epoch + 1), True, topic="nowhere") == (
        ErrorCode.unknown_topic_or_partition
    )
    # Nothing else disturbed: the partition still takes and serves records.
    assert produce(bootstrap, [b"after"], topic=topic).error_code == ErrorCode.none
    assert raw_fetch(bootstrap, 1, topic=topic).last_stable_offset == 3


def test_write_txn_markers_from_a_client_listener_is_refused(two_listeners):  # noqa: F811
    broker, internal = two_listeners
    create_topic(broker.bootstrap, TOPIC, 1)
    producer = init_producer_id(broker.bootstrap)
    produce(broker.bootstrap, [b"x"], producer=producer, sequence=0, transactional_id="t")
    assert write_marker(broker.bootstrap, producer, False) == (
        ErrorCode.cluster_authorization_failed
    )
    assert raw_fetch(broker.bootstrap, 1).last_stable_offset == 0  # still open
    assert write_marker(internal, producer, False) == ErrorCode.none
    assert raw_fetch(broker.bootstrap, 1).last_stable_offset == 2


def test_after_kill_9_recovery_rebuilds_the_txnindex(broker):  # its own broker: kills it
    bootstrap = broker.bootstrap
    create_topic(bootstrap, TOPIC, 1)
    producer = init_producer_id(bootstrap)
    produce(bootstrap, [b"a"], producer=producer, sequence=0, transactional_id="t")  # 0
    assert write_marker(bootstrap, producer, False) == ErrorCode.none  # 1
    produce(bootstrap, [b"b"], producer=producer, sequence=1, transactional_id="t")  # 2
    assert write_marker(bootstrap, producer, True) == ErrorCode.none  # 3
    produce(bootstrap, [b"c"], producer=producer, sequence=2, transactional_id="t")  # 4, open
    before = raw_fetch(bootstrap, 1)
    assert [(t.producer_id, t.first_offset) for t in before.aborted_transactions] == [
        (producer[0], 0)
    ]
    directory = broker.log_dir / f"{TOPIC}-0"
    (index,) = directory.glob("*.txnindex")
    written = index.read_bytes()
    broker.kill()
    index.unlink()  # lost with the crash: recovery must rebuild it from the log
    broker.restart()
    broker.wait_ready()
    assert index.read_bytes() == written
    after = raw_fetch(bootstrap, 1)
    assert [(t.producer_id, t.first_offset) for t in after.aborted_transactions] == [
        (producer[0], 0)
    ]
    assert after.last_stable_offset == 4  # the open transaction is still open
    assert kafka_python_values(bootstrap, "read_committed") == [b"b"]


def test_transactional_produce_needs_write_on_the_transactional_id(secured):
    broker = secured(
        [
            on_cluster(Operation.CREATE),
            binding(TOPIC, Operation.WRITE),
            binding(TOPIC, Operation.READ),
            binding("allowed", Operation.WRITE, resource_type=ResourceType.TRANSACTIONAL_ID),
        ]
    )
    bootstrap = broker.bootstrap
    create_topic(bootstrap, TOPIC, 1)
    producer = init_producer_id(bootstrap, "allowed")
    refused = produce(
        bootstrap, [b"x"], producer=producer, sequence=0, transactional_id="other", add=False
    )
    assert refused.error_code == ErrorCode.transactional_id_authorization_failed
    accepted = produce(bootstrap, [b"x"], producer=producer, sequence=0, transactional_id="allowed")
    assert accepted.error_code == ErrorCode.none and accepted.base_offset == 0
    assert raw_fetch(bootstrap, 1).last_stable_offset == 0  # the transaction is open


# A read_committed fetch parked on an open transaction waits this long at most.
MARKER_WAIT_S = 60


def test_a_waiting_read_committed_fetch_returns_when_the_marker_lands(shared):
    bootstrap, markers, topic, tid, producer = transactional_topic(shared, "waiting")
    produce(bootstrap, [b"v"], producer=producer, sequence=0, transactional_id=tid, topic=topic)
    answer = {}

    def wait_for_records():
        started = time.monotonic()
        response = exchange(
            bootstrap,
            FetchRequest(
                max_wait=datetime.timedelta(seconds=MARKER_WAIT_S),
                min_bytes=1,
                isolation_level=1,
                topics=(
                    FetchTopic(
                        topic=topic,
                        partitions=(
                            FetchPartition(
                                partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            ),
            timeout=MARKER_WAIT_S + 15,
        )
        answer["partition"] = response.responses[0].partitions[0]
        answer["seconds"] = time.monotonic() - started

    reader = threading.Thread(target=wait_for_records)
    reader.start()
    time.sleep(1)
    assert "partition" not in answer  # parked: nothing committed yet
    assert write_marker(markers, producer, True, topic=topic) == ErrorCode.none
    reader.join(MARKER_WAIT_S + 15)
    assert answer["partition"].records and answer["partition"].last_stable_offset == 2
    # Woken by the marker, not at the max_wait: the wide gap between the two (the marker is
    # written after one second) is what keeps this from depending on the machine's speed.
    assert answer["seconds"] < MARKER_WAIT_S / 2, answer["seconds"]
