"""Producer id expiration on a real broker (Kafka's producer.id.expiration.ms, checked every
producer.id.expiration.check.interval.ms): DescribeProducers shows an idempotent producer
after its write and no longer shows it once its last write is producer.id.expiration.ms old,
while a producer with a transaction open on the partition stays. The expired producer then
writes again at a sequence that would otherwise be out of order, and is accepted.
producer.id.expiration.ms is also a dynamic broker config."""

import datetime
import time

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v7.request import PartitionProduceData, ProduceRequest, TopicProduceData

from tests.conftest import create_topic, exchange, wait_for
from tests.integration.test_read_committed import TOPIC, add_partition, init_producer_id
from tests.unit.batch_factory import make_batch

TRANSACTIONAL = 0x10
EXPIRATION_MS = 2_000
CHECK_INTERVAL_MS = 200


def idempotent_producer(bootstrap: str) -> tuple[int, int]:
    response = exchange(
        bootstrap,
        InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(milliseconds=-1)
        ),
    )
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


def produce(bootstrap, producer, sequence, *, transactional_id=None) -> tuple[ErrorCode, int]:
    """One batch of two records stamped with the current time (its max timestamp is the
    producer's last write); returns the partition's error code and the timestamp."""
    now_ms = int(time.time() * 1000)
    batch = make_batch(
        2,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=sequence,
        base_timestamp=now_ms,
        attributes=TRANSACTIONAL if transactional_id else 0,
    )
    response = exchange(
        bootstrap,
        ProduceRequest(
            transactional_id=transactional_id,
            acks=-1,
            timeout=datetime.timedelta(seconds=5),
            topic_data=(
                TopicProduceData(
                    name=TOPIC, partition_data=(PartitionProduceData(index=0, records=batch),)
                ),
            ),
        ),
    )
    (answer,) = response.responses[0].partition_responses
    return answer.error_code, now_ms


def described(bootstrap: str) -> dict[int, object]:
    """DescribeProducers (API 61) of the topic's partition 0: producer id -> its state."""
    response = exchange(
        bootstrap,
        DescribeProducersRequest(topics=(TopicRequest(name=TOPIC, partition_indexes=(0,)),)),
    )
    (partition,) = response.topics[0].partitions
    assert partition.error_code == ErrorCode.none
    return {state.producer_id: state for state in partition.active_producers}


def test_an_idle_producer_expires_and_one_with_an_open_transaction_does_not(broker_factory):
    broker = broker_factory(
        {
            "producer.id.expiration.ms": EXPIRATION_MS,
            "producer.id.expiration.check.interval.ms": CHECK_INTERVAL_MS,
        }
    )
    bootstrap = broker.bootstrap
    create_topic(bootstrap, TOPIC, 1)
    transactional = init_producer_id(bootstrap, "keeps-its-state")
    add_partition(bootstrap, "keeps-its-state", transactional)
    error, _ = produce(bootstrap, transactional, 0, transactional_id="keeps-its-state")
    assert error == ErrorCode.none
    idempotent = idempotent_producer(bootstrap)
    error, written_ms = produce(bootstrap, idempotent, 0)
    assert error == ErrorCode.none
    error, _ = produce(bootstrap, idempotent, 5)  # a gap: the state is there
    assert error == ErrorCode.out_of_order_sequence_number

    state = described(bootstrap)
    assert set(state) == {transactional[0], idempotent[0]}
    assert state[idempotent[0]].last_sequence == 1
    assert state[idempotent[0]].last_timestamp == written_ms

    wait_for(
        lambda: idempotent[0] not in described(bootstrap),
        timeout=EXPIRATION_MS / 1000 + 10,
        what="the idempotent producer to expire",
        interval=0.05,
    )
    # Not before its last write was producer.id.expiration.ms old.
    assert int(time.time() * 1000) - written_ms >= EXPIRATION_MS
    # The transaction is still open, so that producer stays however long it is idle.
    assert set(described(bootstrap)) == {transactional[0]}
    assert described(bootstrap)[transactional[0]].current_txn_start_offset == 0

    # With no state left, any sequence is accepted (Kafka: the batches may be gone).
    error, _ = produce(bootstrap, idempotent, 40)
    assert error == ErrorCode.none
    assert described(bootstrap)[idempotent[0]].last_sequence == 41


def test_producer_id_expiration_ms_changes_dynamically(broker_factory):
    broker = broker_factory({"producer.id.expiration.check.interval.ms": CHECK_INTERVAL_MS})
    bootstrap = broker.bootstrap
    create_topic(bootstrap, TOPIC, 1)
    idempotent = idempotent_producer(bootstrap)
    error, written_ms = produce(bootstrap, idempotent, 0)
    assert error == ErrorCode.none
    # Several checks pass under the default (a day): the producer stays.
    time.sleep(3 * CHECK_INTERVAL_MS / 1000)
    assert idempotent[0] in described(bootstrap)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker.node_id))
    resource.add_incremental_config(
        ConfigEntry(
            "producer.id.expiration.ms",
            str(EXPIRATION_MS),
            incremental_operation=AlterConfigOpType.SET,
        )
    )
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(15)
    wait_for(
        lambda: idempotent[0] not in described(bootstrap),
        timeout=EXPIRATION_MS / 1000 + 10,
        what="the producer to expire under the new producer.id.expiration.ms",
        interval=0.05,
    )
    assert int(time.time() * 1000) - written_ms >= EXPIRATION_MS
