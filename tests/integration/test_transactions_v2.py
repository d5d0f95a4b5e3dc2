"""Kafka's transaction protocol version 2 (KIP-890 part 2) against one broker process, by raw
requests: the ``transaction.version`` feature in ApiVersions, Produce v12 adding its
partition to the transaction (no AddPartitionsToTxn), EndTxn v5 bumping the epoch at every
commit and abort and answering a retry as the original, a read_committed consumer seeing
exactly the committed records, transactional batches of two producers in one Produce
refused with INVALID_PRODUCER_ID_MAPPING, and an abort of a transaction with no partition in
it answered as Apache Kafka 4.4 answers it (the same requests to both; Kafka from
bench/kafka_ref.py, skipped with the reason when there is no JVM). The Java client's TV2 run is in
tests/java/test_transactions.py; TV1 clients on the same broker are
tests/integration/test_transactions_clients.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from bench.kafka_ref import KafkaCluster, missing_reason
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.testing import Cluster
from minibroker.tools.launcher import BrokerProcess
from tests.conftest import (
    SHARED_BROKER,
    confluent_read_all,
    create_topic,
    exchange,
    wait_for,
)
from tests.unit.batch_factory import make_batch

TOPIC = "tv2"
TRANSACTIONAL = 0x10

# The worker's shared broker (tests/conftest.py): nothing here needs settings of its own; the
# topic and the transactional ids are this module's.
pytestmark = SHARED_BROKER


@pytest.fixture
def broker(kafka_broker: Cluster) -> BrokerProcess:
    """The shared broker's process, with the module's topic (created by the first test that
    asks for it)."""
    if kafka_broker.leader_of(TOPIC, 1) is None:
        kafka_broker.create_topic(TOPIC, 2)
    return kafka_broker.node(1)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory) -> Iterator[KafkaCluster]:
    """One Apache Kafka 4.4 node (KRaft), the reference, with the same topic."""
    if (reason := missing_reason("kafka")) is not None:
        pytest.skip(f"Apache Kafka reference: {reason}")
    started = KafkaCluster.start(tmp_path_factory.mktemp("tv2-kafka"), nodes=1)
    try:
        create_topic(started.bootstrap, TOPIC, 2)
        yield started
    finally:
        started.stop()


@pytest.fixture(params=["minibroker", "kafka"])
def either(request) -> BrokerProcess | KafkaCluster:
    """The test against minibroker, then against Apache Kafka 4.4."""
    return request.getfixturevalue("broker" if request.param == "minibroker" else "kafka")


def call(broker: BrokerProcess | KafkaCluster, api_key: ApiKey, version: int, **data):
    return exchange(broker.bootstrap, codec.build(codec.request_class(api_key, version), data))


def init(broker: BrokerProcess, transactional_id: str) -> tuple[int, int]:
    def found():
        answer = call(broker, ApiKey.FIND_COORDINATOR, 1, key=transactional_id, key_type=1)
        return answer.error_code.value == Error.NONE

    wait_for(found, 20, "the transaction coordinator", 0.2)

    def initialized():
        answer = call(
            broker,
            ApiKey.INIT_PRODUCER_ID,
            4,
            transactional_id=transactional_id,
            transaction_timeout=60_000,
            producer_id=-1,
            producer_epoch=-1,
        )
        if answer.error_code.value != Error.NONE:
            return None
        return int(answer.producer_id), int(answer.producer_epoch)

    return wait_for(initialized, 20, "InitProducerId", 0.2)


def produce(broker, transactional_id, batches: dict[int, bytes], version: int = 12) -> dict:
    """One Produce of one batch per partition: {partition: error}."""
    answer = call(
        broker,
        ApiKey.PRODUCE,
        version,
        transactional_id=transactional_id,
        acks=-1,
        timeout=10_000,
        topic_data=[
            {
                "name": TOPIC,
                "partition_data": [
                    {"index": index, "records": batch} for index, batch in batches.items()
                ],
            }
        ],
    )
    return {
        int(p.index): Error(p.error_code.value)
        for topic in answer.responses
        for p in topic.partition_responses
    }


def txn_batch(value: bytes, producer_id: int, epoch: int, sequence: int) -> bytes:
    return make_batch(
        [(None, value)],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        attributes=TRANSACTIONAL,
    )


def end_txn(broker, transactional_id, producer_id, epoch, commit, version=5):
    answer = call(
        broker,
        ApiKey.END_TXN,
        version,
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        committed=commit,
    )
    if version < 5:
        return Error(answer.error_code.value)
    return Error(answer.error_code.value), int(answer.producer_id), int(answer.producer_epoch)


def produce_added(broker, transactional_id, batches) -> dict:
    """Produce v12 until the coordinator has the previous transaction complete (its answer
    meanwhile is NOT_ENOUGH_REPLICAS, a retriable error, as Kafka's)."""

    def attempt():
        result = produce(broker, transactional_id, batches)
        if Error.NOT_ENOUGH_REPLICAS in result.values():
            return None
        return result

    return wait_for(attempt, 20, "a Produce v12 the coordinator accepts", 0.1)


def test_api_versions_finalize_transaction_version_2(broker):
    v4 = call(broker, ApiKey.API_VERSIONS, 4, client_software_name="t", client_software_version="1")
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in v4.api_keys}
    assert ranges[ApiKey.END_TXN] == (0, 5)
    assert ranges[ApiKey.PRODUCE] == (0, 13)
    assert ranges[ApiKey.TXN_OFFSET_COMMIT] == (0, 6)
    supported = {f.name: (f.min_version, f.max_version) for f in v4.supported_features}
    assert supported["transaction.version"] == (0, 2)
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in v4.finalized_features}
    assert finalized["transaction.version"] == (2, 2)
    assert v4.finalized_features_epoch >= 0
    # Before v4 a feature whose minimum is 0 is left out (KAFKA-17492); finalized stays.
    v3 = call(broker, ApiKey.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    assert "transaction.version" not in {f.name for f in v3.supported_features}
    assert "transaction.version" in {f.name for f in v3.finalized_features}


def _log_end_offsets(bootstrap: str, partitions: list[int]) -> dict[int, int]:
    """Each partition's high watermark now, so a read sees only what a test wrote after it
    (the module's broker is shared: another test may have written to the topic first)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{TOPIC}-ends"})
    try:
        return {
            partition: consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=30)[
                1
            ]
            for partition in partitions
        }
    finally:
        consumer.close()


def test_produce_v12_and_end_txn_v5_bump_the_epoch_per_transaction(broker):
    starts = _log_end_offsets(broker.bootstrap, [0, 1])
    producer_id, epoch = init(broker, "tv2-a")
    assert epoch == 0
    # No AddPartitionsToTxn: the leader adds both partitions with the Produce.
    assert produce(
        broker,
        "tv2-a",
        {0: txn_batch(b"c0", producer_id, 0, 0), 1: txn_batch(b"c1", producer_id, 0, 0)},
    ) == {0: Error.NONE, 1: Error.NONE}
    assert end_txn(broker, "tv2-a", producer_id, 0, True) == (Error.NONE, producer_id, 1)

    # A retry with the epoch before the bump: answered as the original once complete.
    def retried():
        answer = end_txn(broker, "tv2-a", producer_id, 0, True)
        return answer if answer[0] != Error.CONCURRENT_TRANSACTIONS else None

    assert wait_for(retried, 20, "the commit's completion", 0.1) == (Error.NONE, producer_id, 1)
    assert end_txn(broker, "tv2-a", producer_id, 0, False)[0] == Error.INVALID_TXN_STATE

    # The next transaction runs at the new epoch, its sequences from 0; it is aborted.
    assert produce_added(broker, "tv2-a", {0: txn_batch(b"a0", producer_id, 1, 0)}) == {
        0: Error.NONE
    }
    assert end_txn(broker, "tv2-a", producer_id, 1, False) == (Error.NONE, producer_id, 2)
    # The old epoch is fenced on the partition and at the coordinator.
    stale = produce_added(broker, "tv2-a", {1: txn_batch(b"z", producer_id, 1, 1)})
    assert stale == {1: Error.INVALID_PRODUCER_EPOCH}
    assert end_txn(broker, "tv2-a", producer_id, 0, True)[0] == Error.PRODUCER_FENCED
    # (epoch 1 is a retry of the abort: the other outcome is INVALID_TXN_STATE)
    assert end_txn(broker, "tv2-a", producer_id, 1, True)[0] in (
        Error.CONCURRENT_TRANSACTIONS,
        Error.INVALID_TXN_STATE,
    )

    # A third transaction, committed.
    assert produce_added(broker, "tv2-a", {1: txn_batch(b"c2", producer_id, 2, 0)}) == {
        1: Error.NONE
    }
    assert end_txn(broker, "tv2-a", producer_id, 2, True) == (Error.NONE, producer_id, 3)

    # read_committed (librdkafka's default) sees the committed records and nothing else.
    messages = confluent_read_all(broker.bootstrap, TOPIC, starts, expected=3)
    assert sorted(m.value() for m in messages) == [b"c0", b"c1", b"c2"]


def test_a_tv1_end_txn_on_the_same_broker_keeps_the_epoch(broker):
    producer_id, epoch = init(broker, "tv2-v1")
    added = call(
        broker,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        3,
        v3_and_below_transactional_id="tv2-v1",
        v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[{"name": TOPIC, "partitions": [0]}],
    )
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert produce(broker, "tv2-v1", {0: txn_batch(b"v1", producer_id, epoch, 0)}, 9) == {
        0: Error.NONE
    }
    assert end_txn(broker, "tv2-v1", producer_id, epoch, True, version=4) == Error.NONE
    # Produce v11 (KIP-890 part 1, TV1) of a partition never added: TRANSACTION_ABORTABLE,
    # which v11 knows; v9 gets INVALID_TXN_STATE.
    late = {1: txn_batch(b"late", producer_id, epoch, 0)}

    def refused(version):
        def attempt():
            result = produce(broker, "tv2-v1", late, version)
            return None if result == {1: Error.NOT_ENOUGH_REPLICAS} else result

        return wait_for(attempt, 20, "a verification after the commit", 0.1)

    assert refused(11) == {1: Error.TRANSACTION_ABORTABLE}
    assert refused(9) == {1: Error.INVALID_TXN_STATE}


def test_transactional_batches_of_two_producers_are_refused(broker):
    first, epoch = init(broker, "tv2-mixed")
    assert produce(
        broker,
        "tv2-mixed",
        {0: txn_batch(b"x", first, epoch, 0), 1: txn_batch(b"y", first + 1000, 0, 0)},
    ) == {0: Error.INVALID_PRODUCER_ID_MAPPING, 1: Error.INVALID_PRODUCER_ID_MAPPING}
    # A batch whose producer id is not the transactional id's is refused by the coordinator.
    assert produce(broker, "tv2-mixed", {0: txn_batch(b"x", first + 1000, 0, 0)}) == {
        0: Error.INVALID_PRODUCER_ID_MAPPING
    }


def test_an_abort_of_an_empty_transaction_bumps_the_epoch_as_kafka_does(either):
    """EndTxn v5 ABORT with no partition in the transaction (a client whose only produce never
    reached a partition, which KIP-890 part 2 makes always legal): Kafka 4's TV2
    endTransaction accepts it from Empty, CompleteAbort and CompleteCommit at the current
    epoch, writes PrepareAbort with no partitions and answers the bumped epoch; a COMMIT
    there is INVALID_TXN_STATE, the epoch before the bump is a retry, an epoch that is neither
    is PRODUCER_FENCED. Answered the same by minibroker and by Apache Kafka 4.4."""
    transactional_id = "tv2-empty-abort"
    producer_id, epoch = init(either, transactional_id)
    assert epoch == 0

    def end(epoch: int, commit: bool) -> tuple[str, int]:
        """(error, epoch) once no longer CONCURRENT_TRANSACTIONS (the previous end completing)."""

        def answered():
            error, answered_id, answered_epoch = end_txn(
                either, transactional_id, producer_id, epoch, commit
            )
            if error == Error.CONCURRENT_TRANSACTIONS:
                return None
            assert answered_id == (producer_id if error == Error.NONE else -1)
            return error.name, answered_epoch

        answer = wait_for(answered, 20, "an EndTxn answer", 0.1)
        if answer[0] == "NONE":
            # Its markers written and its completion too, before the next request: else the
            # next one is judged against PrepareCommit/PrepareAbort (a retry or fenced).
            wait_for(completed, 20, "the transaction's completion", 0.1)
        return answer

    def completed() -> bool:
        described = call(
            either, ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=[transactional_id]
        )
        return described.transaction_states[0].transaction_state in (
            "CompleteCommit",
            "CompleteAbort",
        )

    assert end(0, True) == ("INVALID_TXN_STATE", -1)  # commit from Empty
    assert end(0, False) == ("NONE", 1)  # abort from Empty
    assert end(0, False) == ("NONE", 1)  # its retry
    assert end(0, True) == ("INVALID_TXN_STATE", -1)  # its retry with the other outcome
    assert end(1, False) == ("NONE", 2)  # abort from CompleteAbort
    assert end(2, True) == ("INVALID_TXN_STATE", -1)  # commit from CompleteAbort
    # A transaction with a record, committed; then an empty abort from CompleteCommit.
    assert produce_added(either, transactional_id, {0: txn_batch(b"e", producer_id, 2, 0)}) == {
        0: Error.NONE
    }
    assert end(2, True) == ("NONE", 3)
    assert end(3, True) == ("INVALID_TXN_STATE", -1)  # commit from CompleteCommit
    assert end(2, False) == ("INVALID_TXN_STATE", -1)  # the commit's retry, other outcome
    assert end(3, False) == ("NONE", 4)  # abort from CompleteCommit
    assert end(2, False) == ("PRODUCER_FENCED", -1)
    assert end(9, False) == ("PRODUCER_FENCED", -1)
    # The producer goes on at the new epoch, its sequences from 0.
    assert produce_added(either, transactional_id, {1: txn_batch(b"f", producer_id, 4, 0)}) == {
        1: Error.NONE
    }
    assert end(4, True) == ("NONE", 5)
