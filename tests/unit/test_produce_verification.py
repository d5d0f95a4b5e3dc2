"""KIP-890 part 1 in the Produce handler (Kafka's ReplicaManager.appendRecords with
transaction verification): a transactional partition whose producer has no transaction open
there at this epoch is verified with the coordinator; the refused ones get Kafka's codes
(INVALID_TXN_STATE; the coordinator's retriable errors as NOT_ENOUGH_REPLICAS), the others
are not asked about again once their transaction is open."""

from types import SimpleNamespace

import pytest

from minibroker.apis.produce import _verify
from minibroker.protocol.errors import Error
from minibroker.replication.replica_manager import AppendOrigin
from tests.unit.batch_factory import make_batch
from tests.unit.replication_harness import TOPIC, PartitionProduceData, leader_and_isr, make_broker

TRANSACTIONAL = 0x10


class StubCoordinator:
    def __init__(self, answers: dict) -> None:
        self.answers = answers
        self.asked: list[tuple] = []
        self.added: list[bool] = []

    async def verify_transaction(
        self, transactional_id, producer_id, producer_epoch, partitions, add=False
    ):
        self.asked.append((transactional_id, producer_id, producer_epoch, list(partitions)))
        self.added.append(add)
        return {key: self.answers.get(key, Error.NONE) for key in partitions}


@pytest.fixture
async def replicas(tmp_path, nursery, autojump_clock):
    broker = make_broker(tmp_path, 1)
    broker.announced_topic_configs[TOPIC] = {"min.insync.replicas": "1"}
    await nursery.start(broker.run)
    await broker.apply_leader_and_isr(leader_and_isr(1, 1, [1], [1]))
    yield broker
    broker.log_manager.close()


def partition_data(sequence: int, epoch: int = 0) -> PartitionProduceData:
    batch = make_batch(
        1, producer_id=3, producer_epoch=epoch, base_sequence=sequence, attributes=TRANSACTIONAL
    )
    return PartitionProduceData(0, memoryview(bytearray(batch)))


async def test_verification_refusals_and_skips(replicas, autojump_clock):
    coordinator = StubCoordinator({(TOPIC, 0): Error.INVALID_TXN_STATE})
    ctx = SimpleNamespace(replica_manager=replicas, transaction_coordinator=coordinator, version=9)
    refused = await _verify(ctx, "tx", [(TOPIC, [partition_data(0)])])
    assert refused[(TOPIC, 0)]["error_code"] == Error.INVALID_TXN_STATE
    assert coordinator.asked == [("tx", 3, 0, [(TOPIC, 0)])]
    assert coordinator.added == [False]

    # A fenced producer's Produce is INVALID_PRODUCER_EPOCH, as Kafka's AddPartitionsToTxnManager
    # answers (librdkafka takes PRODUCER_FENCED on a Produce as merely abortable), and
    # TRANSACTION_ABORTABLE, unknown to these Produce versions, is INVALID_TXN_STATE.
    coordinator.answers = {(TOPIC, 0): Error.PRODUCER_FENCED}
    refused = await _verify(ctx, "tx", [(TOPIC, [partition_data(0)])])
    assert refused[(TOPIC, 0)]["error_code"] == Error.INVALID_PRODUCER_EPOCH
    coordinator.answers = {(TOPIC, 0): Error.TRANSACTION_ABORTABLE}
    refused = await _verify(ctx, "tx", [(TOPIC, [partition_data(0)])])
    assert refused[(TOPIC, 0)]["error_code"] == Error.INVALID_TXN_STATE

    # Produce v11 knows TRANSACTION_ABORTABLE; v12 (TV2) asks the coordinator to add the
    # partition rather than verify it.
    ctx.version = 11
    refused = await _verify(ctx, "tx", [(TOPIC, [partition_data(0)])])
    assert refused[(TOPIC, 0)]["error_code"] == Error.TRANSACTION_ABORTABLE
    assert coordinator.added[-1] is False
    ctx.version = 12
    coordinator.answers = {(TOPIC, 0): Error.CONCURRENT_TRANSACTIONS}
    refused = await _verify(ctx, "tx", [(TOPIC, [partition_data(0)])])
    assert refused[(TOPIC, 0)]["error_code"] == Error.NOT_ENOUGH_REPLICAS
    assert coordinator.added[-1] is True
    ctx.version = 9

    coordinator.answers = {(TOPIC, 0): Error.NOT_COORDINATOR}
    refused = await _verify(ctx, "tx", [(TOPIC, [partition_data(0)])])
    assert refused[(TOPIC, 0)]["error_code"] == Error.NOT_ENOUGH_REPLICAS

    coordinator.answers = {}
    assert await _verify(ctx, "tx", [(TOPIC, [partition_data(0)])]) == {}
    ((appended,),) = await replicas.append_records(
        [(TOPIC, [partition_data(0)])], acks=1, timeout_s=1.0, origin=AppendOrigin.CLIENT
    )
    assert appended["error_code"] == Error.NONE
    # The transaction is open here at epoch 0: no need to ask again...
    coordinator.asked.clear()
    assert await _verify(ctx, "tx", [(TOPIC, [partition_data(1)])]) == {}
    assert coordinator.asked == []
    # ...but a newer epoch is asked about.
    await _verify(ctx, "tx", [(TOPIC, [partition_data(0, epoch=1)])])
    assert coordinator.asked == [("tx", 3, 1, [(TOPIC, 0)])]


def batch_of(producer_id: int, sequence: int, records: int, epoch: int = 0):
    batch = make_batch(
        records,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        attributes=TRANSACTIONAL,
    )
    return PartitionProduceData(0, memoryview(bytearray(batch)))


async def _produce(ctx, replicas, data) -> int:
    """The handler's order: verify, then append what was not refused; the error code."""
    refused = await _verify(ctx, "tx", [(TOPIC, [data])])
    if refused:
        return refused[(TOPIC, 0)]["error_code"]
    ((appended,),) = await replicas.append_records(
        [(TOPIC, [data])], acks=1, timeout_s=1.0, origin=AppendOrigin.CLIENT
    )
    return appended["error_code"]


@pytest.mark.parametrize("version", [9, 12])
async def test_a_batch_that_passed_verification_does_not_overtake_one_that_did_not(
    replicas, version, autojump_clock
):
    """Kafka's VerificationStateEntry (KAFKA-14920). The transaction's first batch (0..4)
    fails its verification with a retriable error; the next one (5..9), in flight behind it,
    passes. Written, it would leave the first to retry OUT_OF_ORDER_SEQUENCE_NUMBER against
    sequence 9 until the transaction timed out (the Java client in CI). It is refused
    (retriable: not the batch the client waits on) until the first is written."""
    coordinator = StubCoordinator({(TOPIC, 0): Error.NOT_COORDINATOR})
    ctx = SimpleNamespace(
        replica_manager=replicas, transaction_coordinator=coordinator, version=version
    )
    first, second = batch_of(7, 0, 5), batch_of(7, 5, 5)
    assert await _produce(ctx, replicas, first) == Error.NOT_ENOUGH_REPLICAS
    coordinator.answers = {}
    assert await _produce(ctx, replicas, second) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert replicas.log_manager.get_log(TOPIC, 0).log_end_offset == 0
    assert await _produce(ctx, replicas, first) == Error.NONE
    assert await _produce(ctx, replicas, second) == Error.NONE
    log = replicas.log_manager.get_log(TOPIC, 0)
    assert log.log_end_offset == 10
    # Written: the transaction is open here, the verification state gone.
    assert log.producer_state.verification(7) is None


async def test_transactions_v2_start_a_producer_with_no_state_at_sequence_zero(
    replicas, autojump_clock
):
    """KAFKA-18202: under transaction protocol v2 (Produce v12), a producer the partition has
    no batches of must start at sequence 0, verified or not (its first batch may have gone to
    the previous leader and failed there); before v2 any sequence starts it, as in Kafka."""
    coordinator = StubCoordinator({})
    ctx = SimpleNamespace(replica_manager=replicas, transaction_coordinator=coordinator, version=12)
    assert await _produce(ctx, replicas, batch_of(8, 5, 5)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert await _produce(ctx, replicas, batch_of(8, 0, 5)) == Error.NONE
    assert await _produce(ctx, replicas, batch_of(8, 5, 5)) == Error.NONE
    ctx.version = 11
    assert await _produce(ctx, replicas, batch_of(9, 5, 5)) == Error.NONE
