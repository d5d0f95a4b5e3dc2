"""group.consumer.migration.policy=disabled on a real broker process: a classic group with
members is not upgraded by a ConsumerGroupHeartbeat (GROUP_ID_NOT_FOUND with Kafka's
reason), a classic consumer joining a consumer group is served all the same (Kafka 4 checks
the policy only to convert a group), and the group stays a consumer group when its last
consumer-protocol member leaves. The migrations themselves: tests/cluster/
test_consumer_protocol_migration.py and tests/unit/test_group_migration_service.py."""

from __future__ import annotations

import datetime

import pytest
from confluent_kafka import Consumer
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from kio.static.primitive import i32, i32Timedelta

from minibroker.tools.launcher import BrokerProcess
from tests.conftest import create_topic, exchange, wait_for
from tests.integration.test_consumer_protocol import coordinator_ready, produce

PARTITIONS = 4
RECORDS = 200


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> BrokerProcess:
    broker = BrokerProcess.start(
        node_id=1,
        log_dir=tmp_path_factory.mktemp("migration-disabled") / "data",
        overrides={
            "offsets.topic.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0,
            "group.consumer.heartbeat.interval.ms": 500,
            "group.consumer.migration.policy": "disabled",
        },
    )
    broker.wait_ready(20.0)
    yield broker
    assert broker.stop() == 0, broker.log_tail()


def member(bootstrap: str, group: str, topic: str, protocol: str) -> Consumer:
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "classic":
        settings.update({"heartbeat.interval.ms": 500, "session.timeout.ms": 6000})
    consumer = Consumer(settings)
    consumer.subscribe([topic])
    return consumer


def read(members: list[Consumer], seen: dict, count: int) -> None:
    def enough() -> bool:
        for consumer in members:
            message = consumer.poll(0.05)
            if message is not None and message.error() is None:
                key = (message.partition(), message.offset())
                seen.setdefault(key, []).append(id(consumer))
                consumer.commit(message=message, asynchronous=False)
        return len(seen) >= count

    wait_for(enough, 60, f"{count} records read", interval=0)


def describe(bootstrap: str, group: str):
    answer = exchange(
        bootstrap,
        ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False),
    )
    return answer.groups[0]


def test_a_live_classic_group_is_not_upgraded(broker: BrokerProcess):
    group, topic = "migration-off-classic", "migration-off-classic"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    coordinator_ready(broker.bootstrap, group)
    produce(broker.bootstrap, topic, 0, RECORDS)
    classic = member(broker.bootstrap, group, topic, "classic")
    seen: dict = {}
    try:
        read([classic], seen, RECORDS)
        answer = exchange(
            broker.bootstrap,
            ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id="",
                member_epoch=i32(0),
                rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                subscribed_topic_names=(topic,),
                topic_partitions=(),
            ),
        )
    finally:
        classic.close()
    assert answer.error_code.value == 69  # GROUP_ID_NOT_FOUND
    assert answer.error_message == (
        f"Cannot upgrade classic group {group} to consumer group because online upgrade is "
        "disabled."
    )


def test_a_classic_member_joins_a_consumer_group_but_no_downgrade(broker: BrokerProcess):
    group, topic = "migration-off-mixed", "migration-off-mixed"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    coordinator_ready(broker.bootstrap, group)
    produce(broker.bootstrap, topic, 0, RECORDS // 2)
    modern: Consumer | None = member(broker.bootstrap, group, topic, "consumer")
    classic: Consumer | None = None
    seen: dict = {}
    try:
        assert modern is not None
        read([modern], seen, RECORDS // 2)
        classic = member(broker.bootstrap, group, topic, "classic")
        both = [modern, classic]

        def shared() -> bool:
            read(both, seen, 0)
            owned = [tp.partition for c in both for tp in c.assignment()]
            return sorted(owned) == list(range(PARTITIONS)) and all(c.assignment() for c in both)

        wait_for(shared, 60, "the partitions shared by both protocols' members", interval=0)
        produce(broker.bootstrap, topic, RECORDS // 2, RECORDS // 2)
        read(both, seen, RECORDS)
        described = describe(broker.bootstrap, group)
        assert described.error_code.value == 0 and len(described.members) == 2
        modern.close()
        modern = None
        # The last consumer-protocol member left: with the policy disabled the group stays a
        # consumer group, its classic member on its own.
        wait_for(
            lambda: (
                read([classic], seen, 0) is None
                and len(describe(broker.bootstrap, group).members) == 1
                and len(classic.assignment()) == PARTITIONS
            ),
            60,
            "the classic member alone in the consumer group",
            interval=0,
        )
        assert describe(broker.bootstrap, group).error_code.value == 0
    finally:
        for consumer in (modern, classic):
            if consumer is not None:
                consumer.close()
    assert len(seen) == RECORDS
    assert all(len(readers) == 1 for readers in seen.values())
