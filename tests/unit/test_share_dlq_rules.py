"""The pure rules of share groups' dead-letter queues (replication/share_dlq.py, KIP-1191):
which groups have one, Kafka 4.4's checks of the DLQ topic in its order and words, the DLQ
partition, the records and their headers, the retry backoff. Kafka's own tests of these are
ShareGroupDLQStateManagerTest and SharePartitionTest's DLQ cases."""

import random

import pytest

from minibroker.protocol.records import Record, decode_records, encode_batch
from minibroker.replication.share_dlq import (
    BACKOFF_MAX_MS,
    backoff_ms,
    created_topic_configs,
    dlq_partition,
    dlq_records,
    group_dlq,
    topic_enabled,
    validate_dlq_topic,
)
from minibroker.replication.share_partition import (
    Acknowledgement,
    AcknowledgeType,
    DeadLetter,
    DeadLetterReason,
    SharePartition,
    ShareSettings,
)

NAME = "errors.deadletterqueue.topic.name"
COPY = "errors.deadletterqueue.copy.record.enable"


def test_a_group_has_a_dlq_only_with_a_name_at_share_version_2(autojump_clock):
    assert group_dlq({}, 2) is None
    assert group_dlq({NAME: ""}, 2) is None
    assert group_dlq({NAME: "dlq.a"}, 1) is None  # share.version 1: no DLQs (Kafka's SV_1)
    dlq = group_dlq({NAME: "dlq.a"}, 2)
    assert dlq is not None and (dlq.topic, dlq.copy_record) == ("dlq.a", False)
    dlq = group_dlq({NAME: "dlq.a", COPY: "true"}, 2)
    assert dlq is not None and dlq.copy_record


def test_a_topic_is_a_dlq_only_with_errors_deadletterqueue_group_enable(autojump_clock):
    assert not topic_enabled(None)
    assert not topic_enabled({})
    assert not topic_enabled({"errors.deadletterqueue.group.enable": "false"})
    assert topic_enabled({"errors.deadletterqueue.group.enable": "true"})
    assert created_topic_configs() == {
        "errors.deadletterqueue.group.enable": "true",
        "message.timestamp.type": "CreateTime",
    }


def check(topic, *, exists=True, enabled=True, auto_create=False, prefix="dlq."):
    return validate_dlq_topic(
        "g", topic, exists=exists, enabled_on_topic=enabled, auto_create=auto_create, prefix=prefix
    )


def test_the_dlq_topic_checks_in_kafkas_order_and_words(autojump_clock):
    assert check("dlq.t") is None
    assert check("") == "Configured DLQ topic name in share group: g is empty."
    assert check("__t") == (
        "Configured DLQ topic name in share group: g cannot start with __, topic: __t."
    )
    # Not enabled on an existing topic comes before the prefix.
    assert check("t", enabled=False) == (
        "DLQ is not enabled on configured DLQ topic for share group: g, topic: t."
    )
    assert check("dlq.t", exists=False) == (
        "DLQ topic does not exist and auto create is disabled on cluster for share group: g, "
        "topic: dlq.t."
    )
    assert check("dlq.t", exists=False, enabled=False, auto_create=True) is None
    assert check("t") == (
        "Configured DLQ topic name does not comply with the DLQ topic prefix in share group: "
        "g, topic: t, prefix: dlq.."  # Kafka's "prefix: %s." with the prefix "dlq."
    )
    assert check("t", prefix="") is None  # "" lifts the restriction


@pytest.mark.parametrize(
    ("source", "partitions", "expected"), [(0, 1, 0), (5, 1, 0), (5, 3, 2), (2, 4, 2)]
)
def test_the_dlq_partition_is_the_source_partition_modulo_the_count(
    autojump_clock, source, partitions, expected
):
    assert dlq_partition(source, partitions) == expected


def test_dlq_records_carry_kafkas_headers_and_the_original_only_when_copied(autojump_clock):
    letters = [
        DeadLetter(7, DeadLetterReason.DELIVERY_COUNT_LIMIT, 5),
        DeadLetter(3, DeadLetterReason.REJECTED, 1),
    ]
    originals = {3: Record(3, 1, b"key", b"value", (("h", b"v"),))}
    records = dlq_records("grp", "orders", 4, letters, originals, 1_700_000_000_000)
    decoded = decode_records(encode_batch(records))
    assert [r.offset for r in decoded] == [0, 1]
    first, second = decoded
    assert (first.key, first.value, first.timestamp) == (b"key", b"value", 1_700_000_000_000)
    assert first.headers == (
        ("__dlq.errors.topic", b"orders"),
        ("__dlq.errors.partition", b"4"),
        ("__dlq.errors.offset", b"3"),
        ("__dlq.errors.group", b"grp"),
        ("__dlq.errors.delivery.count", b"1"),
        ("__dlq.errors.message", b"Offset rejected by client."),
    )
    assert (second.key, second.value) == (None, None)  # not copied: headers only
    assert dict(second.headers)["__dlq.errors.offset"] == b"7"
    assert dict(second.headers)["__dlq.errors.delivery.count"] == b"5"
    assert (
        dict(second.headers)["__dlq.errors.message"]
        == b"Offset delivery count exceeded the threshold."
    )


def test_the_backoff_doubles_from_one_second_up_to_thirty_with_jitter(autojump_clock):
    rng = random.Random(7)
    for attempt, base in [(1, 1000), (2, 2000), (3, 4000), (6, 30000), (9, BACKOFF_MAX_MS)]:
        wait = backoff_ms(attempt, rng)
        assert 0.8 * base <= wait <= 1.2 * base, (attempt, wait)


def test_the_share_partition_names_what_it_archived_for_the_dlq(autojump_clock):
    """What the DLQ writer is handed: rejected records and those released at the limit, with
    their delivery counts; accepted and released-below-the-limit ones are not."""
    sp = SharePartition(ShareSettings(delivery_count_limit=2), start_offset=0)
    assert [(r.first_offset, r.last_offset) for r in sp.acquire("m", 10, [(0, 3)], 0)] == [(0, 3)]
    sp.acknowledge(
        "m",
        [
            Acknowledgement(0, 0, AcknowledgeType.ACCEPT),
            Acknowledgement(1, 1, AcknowledgeType.REJECT),
            Acknowledgement(2, 3, AcknowledgeType.RELEASE),
        ],
        1,
    )
    assert [(d.offset, d.reason, d.delivery_count) for d in sp.take_dead_letters()] == [
        (1, DeadLetterReason.REJECTED, 1)
    ]
    sp.acquire("m", 10, [(2, 3)], 2)
    sp.acknowledge("m", [Acknowledgement(2, 3, AcknowledgeType.RELEASE)], 3)
    assert [(d.offset, d.reason, d.delivery_count) for d in sp.take_dead_letters()] == [
        (2, DeadLetterReason.DELIVERY_COUNT_LIMIT, 2),
        (3, DeadLetterReason.DELIVERY_COUNT_LIMIT, 2),
    ]
    assert sp.take_dead_letters() == []
