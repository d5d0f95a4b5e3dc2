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
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from kio.static.primitive import i32, i32Timedelta

from minibroker.testing import Cluster
from tests.conftest import (
    coordinator_ready,
    create_topic,
    describe_consumer_group,
    exchange,
    produce_numbers,
    wait_for,
)

PARTITIONS = 4
RECORDS = 200


# One broker for the module (the tests use distinct topics and groups); the plugin fails the
# module's last test if the broker does not shut down cleanly.
pytestmark = pytest.mark.minibroker(
    scope="module",
    server_properties={
        "offsets.topic.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
        "group.consumer.heartbeat.interval.ms": 500,
        "group.consumer.migration.policy": "disabled",
    },
)


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


def test_a_live_classic_group_is_not_upgraded(kafka_broker: Cluster):
    group, topic = "migration-off-classic", "migration-off-classic"
    create_topic(kafka_broker.bootstrap_servers, topic, PARTITIONS)
    coordinator_ready(kafka_broker.bootstrap_servers, group)
    produce_numbers(kafka_broker.bootstrap_servers, topic, 0, RECORDS)
    classic = member(kafka_broker.bootstrap_servers, group, topic, "classic")
    seen: dict = {}
    try:
        read([classic], seen, RECORDS)
        answer = exchange(
            kafka_broker.bootstrap_servers,
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


def test_a_classic_member_joins_a_consumer_group_but_no_downgrade(kafka_broker: Cluster):
    group, topic = "migration-off-mixed", "migration-off-mixed"
    create_topic(kafka_broker.bootstrap_servers, topic, PARTITIONS)
    coordinator_ready(kafka_broker.bootstrap_servers, group)
    produce_numbers(kafka_broker.bootstrap_servers, topic, 0, RECORDS // 2)
    modern: Consumer | None = member(kafka_broker.bootstrap_servers, group, topic, "consumer")
    classic: Consumer | None = None
    seen: dict = {}
    try:
        assert modern is not None
        read([modern], seen, RECORDS // 2)
        classic = member(kafka_broker.bootstrap_servers, group, topic, "classic")
        both = [modern, classic]

        def shared() -> bool:
            read(both, seen, 0)
            owned = [tp.partition for c in both for tp in c.assignment()]
            return sorted(owned) == list(range(PARTITIONS)) and all(c.assignment() for c in both)

        wait_for(shared, 60, "the partitions shared by both protocols' members", interval=0)
        produce_numbers(kafka_broker.bootstrap_servers, topic, RECORDS // 2, RECORDS // 2)
        read(both, seen, RECORDS)
        described = describe_consumer_group(kafka_broker.bootstrap_servers, group)
        assert described.error_code.value == 0 and len(described.members) == 2
        modern.close()
        modern = None
        # The last consumer-protocol member left: with the policy disabled the group stays a
        # consumer group, its classic member on its own.
        wait_for(
            lambda: (
                read([classic], seen, 0) is None
                and len(describe_consumer_group(kafka_broker.bootstrap_servers, group).members) == 1
                and len(classic.assignment()) == PARTITIONS
            ),
            60,
            "the classic member alone in the consumer group",
            interval=0,
        )
        assert describe_consumer_group(kafka_broker.bootstrap_servers, group).error_code.value == 0
    finally:
        for consumer in (modern, classic):
            if consumer is not None:
                consumer.close()
    assert len(seen) == RECORDS
    assert all(len(readers) == 1 for readers in seen.values())
