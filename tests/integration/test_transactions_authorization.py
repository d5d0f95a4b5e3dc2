"""Kafka's ACL rules for the transaction APIs, on a broker with an authorizer: DESCRIBE on the
transactional id to find its coordinator, describe or list it; WRITE on it to initialize, add
partitions or offsets and end a transaction; WRITE on each topic added; READ on the group of
AddOffsetsToTxn. Every connection is User:ANONYMOUS (see authz.py)."""

import datetime

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation, ResourceType
from tests.conftest import exchange, wait_for
from tests.integration.authz import binding, on_cluster

TXN = ResourceType.TRANSACTIONAL_ID


def txn_acl(name: str, operation: Operation):
    return binding(name, operation, resource_type=TXN)


def request(api_key: ApiKey, version: int, **data):
    return codec.build(codec.request_class(api_key, version), data)


def find(broker, transactional_id: str) -> Error:
    answer = exchange(
        broker.bootstrap, request(ApiKey.FIND_COORDINATOR, 1, key=transactional_id, key_type=1)
    )
    return Error(answer.error_code.value)


def init(broker, transactional_id: str):
    return exchange(
        broker.bootstrap,
        request(
            ApiKey.INIT_PRODUCER_ID,
            3,
            transactional_id=transactional_id,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        ),
    )


def test_transaction_apis_follow_the_acls(secured):
    broker = secured(
        [
            on_cluster(Operation.CREATE),
            binding("paid", Operation.WRITE),
            binding("unpaid", Operation.DESCRIBE),
            txn_acl("allowed", Operation.WRITE),
            txn_acl("allowed", Operation.DESCRIBE),
            txn_acl("seen", Operation.DESCRIBE),
            binding("g", Operation.READ, resource_type=ResourceType.GROUP),
        ]
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("paid", "unpaid")]).values():
        future.result(15)

    assert find(broker, "forbidden") == Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    wait_for(lambda: find(broker, "allowed") == Error.NONE, 20, "the coordinator", 0.2)
    # DESCRIBE alone finds the coordinator but may not initialize.
    assert find(broker, "seen") == Error.NONE
    assert init(broker, "seen").error_code.value == Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    answer = wait_for(
        lambda: (a := init(broker, "allowed")).error_code.value == Error.NONE and a,
        20,
        "InitProducerId",
        0.2,
    )
    producer_id, epoch = int(answer.producer_id), int(answer.producer_epoch)

    added = exchange(
        broker.bootstrap,
        request(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            3,
            v3_and_below_transactional_id="allowed",
            v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[
                {"name": "paid", "partitions": [0]},
                {"name": "unpaid", "partitions": [0]},
            ],
        ),
    )
    assert {
        (t.name, int(p.partition_index)): Error(p.partition_error_code.value)
        for t in added.results_by_topic_v3_and_below
        for p in t.results_by_partition
    } == {
        ("paid", 0): Error.OPERATION_NOT_ATTEMPTED,
        ("unpaid", 0): Error.TOPIC_AUTHORIZATION_FAILED,
    }

    def add_offsets(transactional_id: str, group: str) -> Error:
        answer = exchange(
            broker.bootstrap,
            request(
                ApiKey.ADD_OFFSETS_TO_TXN,
                3,
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=epoch,
                group_id=group,
            ),
        )
        return Error(answer.error_code.value)

    assert add_offsets("allowed", "other") == Error.GROUP_AUTHORIZATION_FAILED
    assert add_offsets("seen", "g") == Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert add_offsets("allowed", "g") == Error.NONE

    def end(transactional_id: str) -> Error:
        answer = exchange(
            broker.bootstrap,
            request(
                ApiKey.END_TXN,
                3,
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=epoch,
                committed=False,
            ),
        )
        return Error(answer.error_code.value)

    assert end("seen") == Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    listed = exchange(broker.bootstrap, request(ApiKey.LIST_TRANSACTIONS, 0, state_filters=[]))
    assert [s.transactional_id for s in listed.transaction_states] == ["allowed"]

    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "forbidden"})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(20)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
