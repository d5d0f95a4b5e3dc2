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


async def test_verification_refusals_and_skips(replicas):
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
