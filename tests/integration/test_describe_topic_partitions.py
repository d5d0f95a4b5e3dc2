"""DescribeTopicPartitions (75) on the wire: pages by the cursor and the partition limit, as
Kafka 4.4's handler cuts them; unknown, unauthorized and invalid requests answered with Kafka's
codes while the broker keeps serving. (Kafka 4.4's own `kafka-topics --describe`, which pages
with this API, runs in tests/java/test_tools.py.)"""

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from kio.schema.describe_topic_partitions.v0.request import (
    Cursor,
    DescribeTopicPartitionsRequest,
    TopicRequest,
)
from kio.schema.errors import ErrorCode

from minibroker.security.authorizer.acls import Operation, PatternType
from tests.conftest import create_topic, exchange
from tests.integration.authz import binding, on_cluster

A, B, MISSING, SECRET = "dtp-a", "dtp-b", "dtp-missing", "secret"
OMITTED = -(2**31)


def describe(broker, names=(), limit=2000, cursor=None):
    request = DescribeTopicPartitionsRequest(
        topics=tuple(TopicRequest(name=name) for name in names),
        response_partition_limit=limit,
        cursor=None if cursor is None else Cursor(topic_name=cursor[0], partition_index=cursor[1]),
    )
    return exchange(broker.bootstrap, request)


def pages(answer) -> tuple[list[tuple[str, ErrorCode, list[int]]], tuple[str, int] | None]:
    """(name, error, partition indexes) per topic, and the next cursor."""
    topics = [
        (t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in answer.topics
    ]
    cursor = answer.next_cursor
    return topics, (None if cursor is None else (cursor.topic_name, cursor.partition_index))


@pytest.fixture
def cluster(secured):
    """One broker with StandardAuthorizer: the client may create topics and DESCRIBE those
    named dtp-*, not ``secret``."""
    broker = secured(
        [
            on_cluster(Operation.CREATE),
            binding("dtp-", Operation.DESCRIBE, pattern=PatternType.PREFIXED),
        ]
    )
    # The module's tests share its secured broker (tests/integration/conftest.py): the topics
    # are made by the first test and found by the next.
    for name, partitions in ((A, 5), (B, 3), (SECRET, 2)):
        try:
            create_topic(broker.bootstrap, name, partitions)
        except KafkaException as error:
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return broker


def test_cursor_and_limit_page_through_the_topics_in_name_order(cluster):
    # The named topics, out of order, one missing and one not describable.
    names = (B, SECRET, MISSING, A)
    first = describe(cluster, names, limit=4)
    topics, cursor = pages(first)
    assert topics == [
        (A, ErrorCode.none, [0, 1, 2, 3]),
        (SECRET, ErrorCode.topic_authorization_failed, []),
    ]
    assert cursor == (A, 4)
    a, secret = first.topics
    assert a.topic_id != uuid.UUID(int=0) and not a.is_internal
    assert a.topic_authorized_operations != OMITTED
    assert a.topic_authorized_operations & (1 << Operation.DESCRIBE)
    assert not a.topic_authorized_operations & (1 << Operation.WRITE)
    assert secret.topic_id in (None, uuid.UUID(int=0))
    assert secret.topic_authorized_operations == OMITTED
    # No eligible leader replicas (the ISR is full): empty lists, as Kafka answers, not null.
    for partition in a.partitions:
        assert partition.eligible_leader_replicas == ()
        assert partition.last_known_elr == ()
        assert partition.leader_id == 1 and partition.replica_nodes == (1,)
        assert partition.isr_nodes == (1,) and partition.error_code == ErrorCode.none

    # The next page: the rest of A, all of B, which fills the limit; the cursor then names
    # the next topic (the missing one) at partition 0.
    topics, cursor = pages(describe(cluster, names, limit=4, cursor=(A, 4)))
    assert topics == [
        (A, ErrorCode.none, [4]),
        (B, ErrorCode.none, [0, 1, 2]),
        (SECRET, ErrorCode.topic_authorization_failed, []),
    ]
    assert cursor == (MISSING, 0)
    topics, cursor = pages(describe(cluster, names, limit=4, cursor=(MISSING, 0)))
    assert topics == [
        (MISSING, ErrorCode.unknown_topic_or_partition, []),
        (SECRET, ErrorCode.topic_authorization_failed, []),
    ]
    assert cursor is None

    # All topics (none named): only those the client may describe; no error entries.
    topics, cursor = pages(describe(cluster, limit=6))
    assert topics == [(A, ErrorCode.none, [0, 1, 2, 3, 4]), (B, ErrorCode.none, [0])]
    assert cursor == (B, 1)
    topics, cursor = pages(describe(cluster, limit=6, cursor=(B, 1)))
    assert topics == [(B, ErrorCode.none, [1, 2])]
    assert cursor is None
    # A limit below 1 is 1, as Kafka takes max(min(limit, broker limit), 1).
    topics, cursor = pages(describe(cluster, [A], limit=0))
    assert topics == [(A, ErrorCode.none, [0])] and cursor == (A, 1)
    # A cursor past the topic's last partition: the topic with no partitions, no cursor.
    topics, cursor = pages(describe(cluster, [A], cursor=(A, 9)))
    assert topics == [(A, ErrorCode.none, [])] and cursor is None


def test_bad_cursor_is_invalid_request_and_the_broker_keeps_serving(cluster):
    # The cursor's topic must be one of the topics named.
    answer = describe(cluster, [A, B], cursor=(MISSING, 0))
    assert [(t.name, t.error_code) for t in answer.topics] == [
        (A, ErrorCode.invalid_request),
        (B, ErrorCode.invalid_request),
    ]
    assert answer.next_cursor is None
    # A negative partition index.
    answer = describe(cluster, [A], cursor=(A, -1))
    assert [(t.name, t.error_code) for t in answer.topics] == [(A, ErrorCode.invalid_request)]
    answer = describe(cluster, cursor=(A, -1))
    assert answer.topics == ()
    # An invalid topic name is INVALID_TOPIC_EXCEPTION, not unknown.
    topics, _ = pages(describe(cluster, ["dtp-bad name!"]))
    assert topics == [("dtp-bad name!", ErrorCode.invalid_topic_exception, [])]
    # And the broker answers the next request as before.
    topics, cursor = pages(describe(cluster, [B]))
    assert topics == [(B, ErrorCode.none, [0, 1, 2])] and cursor is None
