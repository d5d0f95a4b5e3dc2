"""Dead-letter queues of share groups (KIP-1191): the rules, pure (no I/O, no trio).

Kafka 4.4's ``org.apache.kafka.server.share.dlq`` package (kafka-server):
``ShareGroupDLQStateManager`` and its ``ProduceRequestHandler``, fed by
``kafka.server.share.SharePartition.initiateDLQAndArchive``. The trio part that writes is
replication/share_dlq_writer.py.

The rules, Kafka's:

- a share group has a dead-letter queue when the cluster's ``share.version`` is at least 2
  (SharePartition's ``shareGroupDlqEnableSupplier``) and the group config
  ``errors.deadletterqueue.topic.name`` is not empty (``isDLQEnabledForGroup``);
- then a record REJECTed by a consumer, or archived because its delivery count reached
  ``share.delivery.count.limit``, is written to that topic;
- before writing, the topic is checked in this order (``validateDlqTopic``, with its
  messages): the name is empty; it starts with ``__``; the topic exists but its topic config
  ``errors.deadletterqueue.group.enable`` is not ``true``; it does not exist and the broker
  config ``errors.deadletterqueue.auto.create.topics.enable`` is false; the broker config
  ``errors.deadletterqueue.topic.name.prefix`` (default ``dlq.``) is not empty and the name
  does not start with it. Any of these: nothing is written (a failed DLQ write);
- a missing topic is created (``createTopicBuilder``) with the broker's default partitions
  and replication factor (-1, -1) and the topic configs ``errors.deadletterqueue.group.enable
  =true`` and ``message.timestamp.type=CreateTime``;
- the record goes to partition ``source partition % DLQ partitions``;
- each DLQ record has the time of writing as its timestamp, is uncompressed, and carries the
  headers ``__dlq.errors.topic``, ``__dlq.errors.partition``, ``__dlq.errors.offset``,
  ``__dlq.errors.group``, ``__dlq.errors.delivery.count`` and ``__dlq.errors.message`` (all
  UTF-8 text: ``Offset rejected by client.`` or ``Offset delivery count exceeded the
  threshold.``); its key and value are null unless the group config
  ``errors.deadletterqueue.copy.record.enable`` is true, when they are the original record's
  (its headers are not copied: Kafka 4.4 writes only the DLQ headers). A record whose
  original cannot be read any more is written with the headers only, as Kafka does;
- a failed write is retried up to 5 attempts with an exponential backoff from 1 s (x2, at
  most 30 s, 20 % jitter); whatever the outcome, the record stays archived (``Failed to write
  to DLQ, proceeding to ARCHIVED regardless.``).

Departures, and why: see replication/share_dlq_writer.py (the archive is persisted before the
DLQ write, not after through an ARCHIVING state).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from minibroker.protocol.records import Record
from minibroker.replication.share_partition import DeadLetter, DeadLetterReason

HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"

# ShareGroupDLQManager.CLIENT_REJECT and DELIVERY_COUNT_EXCEEDED.
MESSAGES = {
    DeadLetterReason.REJECTED: "Offset rejected by client.",
    DeadLetterReason.DELIVERY_COUNT_LIMIT: "Offset delivery count exceeded the threshold.",
}

TOPIC_NAME_CONFIG = "errors.deadletterqueue.topic.name"
COPY_RECORD_CONFIG = "errors.deadletterqueue.copy.record.enable"
TOPIC_ENABLE_CONFIG = "errors.deadletterqueue.group.enable"

# ShareGroupDLQStateManager's retry settings.
MAX_ATTEMPTS = 5
BACKOFF_MS = 1_000
BACKOFF_MAX_MS = 30_000
BACKOFF_JITTER = 0.2

# The share.version from which share groups have dead-letter queues.
DLQ_SHARE_VERSION = 2


@dataclass(frozen=True)
class GroupDlq:
    """A group's dead-letter queue, from its configs."""

    topic: str
    copy_record: bool


def group_dlq(group_configs: Mapping[str, str], share_version: int) -> GroupDlq | None:
    """The group's DLQ, or None when it has none (no topic name, or share.version below 2)."""
    if share_version < DLQ_SHARE_VERSION:
        return None
    topic = group_configs.get(TOPIC_NAME_CONFIG, "").strip()
    if not topic:
        return None
    copy = group_configs.get(COPY_RECORD_CONFIG, "false").strip().lower() == "true"
    return GroupDlq(topic, copy)


def topic_enabled(topic_configs: Mapping[str, str] | None) -> bool:
    """Whether a topic's configs let it be a DLQ (``errors.deadletterqueue.group.enable``)."""
    if topic_configs is None:
        return False
    return topic_configs.get(TOPIC_ENABLE_CONFIG, "false").strip().lower() == "true"


def validate_dlq_topic(
    group: str,
    topic: str,
    *,
    exists: bool,
    enabled_on_topic: bool,
    auto_create: bool,
    prefix: str,
) -> str | None:
    """Kafka's ``validateDlqTopic``: why ``topic`` cannot be ``group``'s DLQ now, in Kafka's
    words, or None when it can."""
    if not topic:
        return f"Configured DLQ topic name in share group: {group} is empty."
    if topic.startswith("__"):
        return (
            f"Configured DLQ topic name in share group: {group} cannot start with __, "
            f"topic: {topic}."
        )
    if exists and not enabled_on_topic:
        return (
            f"DLQ is not enabled on configured DLQ topic for share group: {group}, topic: {topic}."
        )
    if not exists and not auto_create:
        return (
            "DLQ topic does not exist and auto create is disabled on cluster for share "
            f"group: {group}, topic: {topic}."
        )
    if prefix and not topic.startswith(prefix):
        return (
            "Configured DLQ topic name does not comply with the DLQ topic prefix in share "
            f"group: {group}, topic: {topic}, prefix: {prefix}."
        )
    return None


def created_topic_configs() -> dict[str, str]:
    """The configs a DLQ topic is created with (``createTopicBuilder``)."""
    return {TOPIC_ENABLE_CONFIG: "true", "message.timestamp.type": "CreateTime"}


def dlq_partition(source_partition: int, partitions: int) -> int:
    """The DLQ partition a source partition's dead letters go to."""
    return source_partition % partitions


def dlq_headers(
    group: str, topic: str, partition: int, letter: DeadLetter
) -> tuple[tuple[str, bytes], ...]:
    """The headers of one DLQ record, in Kafka's order."""
    return (
        (HEADER_TOPIC, topic.encode()),
        (HEADER_PARTITION, str(partition).encode()),
        (HEADER_OFFSET, str(letter.offset).encode()),
        (HEADER_GROUP, group.encode()),
        (HEADER_DELIVERY_COUNT, str(letter.delivery_count).encode()),
        (HEADER_MESSAGE, MESSAGES[letter.reason].encode()),
    )


def dlq_records(
    group: str,
    topic: str,
    partition: int,
    letters: Iterable[DeadLetter],
    originals: Mapping[int, Record],
    now_ms: int,
) -> list[Record]:
    """The DLQ records of ``letters`` (offsets 0.. in the batch to append), with the
    original key and value of those in ``originals`` (empty unless the group copies)."""
    records = []
    for position, letter in enumerate(sorted(letters, key=lambda d: d.offset)):
        original = originals.get(letter.offset)
        records.append(
            Record(
                position,
                now_ms,
                original.key if original else None,
                original.value if original else None,
                dlq_headers(group, topic, partition, letter),
            )
        )
    return records


def backoff_ms(attempt: int, rng: random.Random | None = None) -> float:
    """How long to wait before retry number ``attempt`` (1 for the first retry): Kafka's
    ExponentialBackoffManager(1000 ms, x2, 30000 ms, 0.2 jitter)."""
    base = min(BACKOFF_MS * 2 ** (attempt - 1), BACKOFF_MAX_MS)
    jitter = (rng or random).uniform(1 - BACKOFF_JITTER, 1 + BACKOFF_JITTER)
    return base * jitter
