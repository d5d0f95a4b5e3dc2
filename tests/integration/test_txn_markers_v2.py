"""WriteTxnMarkers v2 (KIP-1228) on the wire, sent to a broker as a transaction coordinator
sends it (a raw request on the shared broker's inter-broker listener, INTERNAL): each
marker carries the TransactionVersion of the transaction it ends, and the leader checks the
producer epoch as Kafka 4.4's ProducerAppendInfo.checkProducerEpoch does. A TV2 marker at the
epoch the transaction's records were written with is INVALID_PRODUCER_EPOCH (a TV2 commit
bumps the epoch, so the coordinator's marker is always newer); at the bumped epoch it is
written, and a retry of it too; a TV1 marker in the same v2 request shape at the records'
epoch is written, as before. ApiVersions lists the version."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.testing import Cluster
from minibroker.testing.cluster import INTER_BROKER_LISTENER as INTER_BROKER
from tests.conftest import SHARED_BROKER, exchange, wait_for
from tests.unit.batch_factory import make_batch

TOPIC = "markers-v2"
TRANSACTIONAL = 0x10
WRITE_TXN_MARKERS = 27

# The worker's shared broker (tests/conftest.py): the topic and transactional ids are this
# module's.
pytestmark = SHARED_BROKER


@pytest.fixture
def broker(kafka_broker: Cluster) -> Broker:
    """The shared broker's client and inter-broker addresses, with the module's topic."""
    if kafka_broker.leader_of(TOPIC, 0) is None:
        kafka_broker.create_topic(TOPIC, 1)
    return Broker(kafka_broker.node(1).bootstrap, kafka_broker.proxy(1, INTER_BROKER).address)


@dataclass(frozen=True)
class Broker:
    bootstrap: str
    inter_broker: str


def call(address: str, api_key: int, version: int, **data):
    return exchange(address, codec.build(codec.request_class(api_key, version), data))


def open_transaction(broker: Broker, transactional_id: str) -> tuple[int, int]:
    """A producer id and epoch with one transactional record on partition 0, added to the
    transaction by Produce v12 (TV2); the transaction's timeout is long enough that the
    coordinator never ends it while the test writes markers."""

    def found():
        answer = call(
            broker.bootstrap, ApiKey.FIND_COORDINATOR, 1, key=transactional_id, key_type=1
        )
        return answer.error_code.value == Error.NONE

    wait_for(found, 20, "the transaction coordinator", 0.2)

    def initialized():
        answer = call(
            broker.bootstrap,
            ApiKey.INIT_PRODUCER_ID,
            4,
            transactional_id=transactional_id,
            transaction_timeout=900_000,
            producer_id=-1,
            producer_epoch=-1,
        )
        if answer.error_code.value != Error.NONE:
            return None
        return int(answer.producer_id), int(answer.producer_epoch)

    producer_id, epoch = wait_for(initialized, 20, "InitProducerId", 0.2)
    batch = make_batch(
        [(None, b"v")],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=0,
        attributes=TRANSACTIONAL,
    )
    answer = call(
        broker.bootstrap,
        ApiKey.PRODUCE,
        12,
        transactional_id=transactional_id,
        acks=-1,
        timeout=10_000,
        topic_data=[{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
    )
    (partition,) = answer.responses[0].partition_responses
    assert partition.error_code.value == Error.NONE
    return producer_id, epoch


def write_marker(broker, producer_id, epoch, transaction_version, *, version=2) -> Error:
    """One WriteTxnMarkers ABORT for partition 0, as the coordinator sends it; the code."""
    answer = call(
        broker.inter_broker,
        WRITE_TXN_MARKERS,
        version,
        markers=[
            {
                "producer_id": producer_id,
                "producer_epoch": epoch,
                "transaction_result": False,
                "coordinator_epoch": 0,
                "transaction_version": transaction_version,
                "topics": [{"name": TOPIC, "partition_indexes": [0]}],
            }
        ],
    )
    assert answer.__version__ == version
    ((partition,),) = [topic.partitions for topic in answer.markers[0].topics]
    assert (str(answer.markers[0].topics[0].name), int(partition.partition_index)) == (TOPIC, 0)
    return Error(partition.error_code.value)


def test_api_versions_lists_write_txn_markers_v2(broker):
    answer = call(
        broker.inter_broker,
        ApiKey.API_VERSIONS,
        3,
        client_software_name="t",
        client_software_version="1",
    )
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
    # v0 went with KIP-896, as on Kafka 4.4.
    assert ranges[WRITE_TXN_MARKERS] == (1, 2)


def test_a_tv2_marker_needs_the_bumped_epoch(broker):
    producer_id, epoch = open_transaction(broker, "markers-v2-tv2")
    # The epoch of the transaction's records: a TV2 marker there is stale.
    assert write_marker(broker, producer_id, epoch, 2) == Error.INVALID_PRODUCER_EPOCH
    # The bumped epoch (as the coordinator's TV2 abort sends it) is written, and so is its
    # retry (no transaction of the producer is open any more).
    assert write_marker(broker, producer_id, epoch + 1, 2) == Error.NONE
    assert write_marker(broker, producer_id, epoch + 1, 2) == Error.NONE
    # An older epoch stays refused whatever the version.
    assert write_marker(broker, producer_id, epoch, 1) == Error.INVALID_PRODUCER_EPOCH


def test_a_tv1_marker_in_v2_keeps_the_older_check(broker):
    producer_id, epoch = open_transaction(broker, "markers-v2-tv1")
    # TransactionVersion 1 in v2, and v1 (which has none: Kafka's default 0), at the epoch
    # of the records: written, as before KIP-1228.
    assert write_marker(broker, producer_id, epoch, 1) == Error.NONE
    assert write_marker(broker, producer_id, epoch, 0, version=1) == Error.NONE
