"""Which share partitions of a share group have state, and the admin path's decisions (KIP-932).

Kafka's ``ShareGroupStatePartitionMetadataInfo`` and the methods of ``GroupMetadataManager``
that keep it (Kafka 4.4, group-coordinator): per share group, the topics whose share
partitions' state the share coordinator is being asked to create (*initializing*), those it
holds (*initialized*) and those whose state is being deleted (*deleting*). It is written as
the group's ShareGroupStatePartitionMetadata record (key version 15 in `__consumer_offsets`,
share_log_format.py) each time it changes, and replayed on load. Pure data with time passed
in; the service (service.py) writes the records and calls the persister.

The rules, Kafka's:

- ``to_initialize`` (subscribedTopicsChangeMap): the partitions of the subscribed topics that
  are neither initialized nor initializing (an initializing entry older than
  ``group.share.initialize.retry.interval.ms`` counts as not initializing: it is retried);
- ``with_initializing`` (addInitializingTopicsRecords): adds them to initializing (merged with
  what is there) and takes those topics out of deleting;
- ``with_initialized`` (initializeShareGroupState): the persister initialized them: moved from
  initializing to initialized; ``without_initializing`` (uninitializeShareGroupState): it
  failed: taken out of initializing;
- ``for_group_delete`` (shareGroupBuildPartitionDeleteRequest): deleting the group: every
  initialized and initializing topic (and any topic still deleting that the metadata still
  has, all its partitions) is to be deleted; they all move to deleting;
- ``for_offsets_delete`` (sharePartitionsEligibleForOffsetDeletion): DeleteShareGroupOffsets
  of some topics: an initialized topic's partitions are deleted (it moves to deleting), a
  topic already deleting is deleted again (all its partitions), any other known topic is
  UNKNOWN_TOPIC_OR_PARTITION "There is no offset information to delete.", an unknown one
  UNKNOWN_TOPIC_OR_PARTITION; ``deleted`` (completeDeleteShareGroupOffsets) takes the topics
  the persister deleted out of deleting;
- ``without_topics`` (maybeCleanupShareGroupState): deleted topics leave all three;
- ``plan_alter`` (completeAlterShareGroupOffsets): AlterShareGroupOffsets: each partition of a
  known topic below its partition count gets the start offset asked (its topic goes to
  initializing), any other is UNKNOWN_TOPIC_OR_PARTITION.

Departure: Kafka reads topic names from its metadata image when it writes a record (and
"<UNKNOWN>" for a topic that is gone); here the names kept with the entries are written.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from minibroker.coordinator.group.consumer_group import TopicLookup
from minibroker.coordinator.group.share_log_format import (
    ShareStatePartitionMetadataValue,
    StatePartitionTopic,
)
from minibroker.protocol.errors import Error

# Kafka's group.share.initialize.retry.interval.ms default.
INITIALIZE_RETRY_INTERVAL_MS = 30_000
# Kafka's PartitionFactory.UNINITIALIZED_START_OFFSET: the share partition starts where
# share.auto.offset.reset says, when its leader first reads it.
UNINITIALIZED_START_OFFSET = -1

# A topic id -> (name, partition count), or None when the metadata has no such topic.
TopicById = Callable[[uuid.UUID], "tuple[str, int] | None"]
# topic id -> partitions
TopicPartitions = dict[uuid.UUID, set[int]]


@dataclass(frozen=True)
class InitTopic:
    """Kafka's InitMapValue: a topic's name, some of its partitions, when they were added."""

    name: str
    partitions: frozenset[int]
    timestamp_ms: int = 0


def _combine(a: Mapping[uuid.UUID, InitTopic], b: Mapping[uuid.UUID, InitTopic]):
    """Kafka's combineInitMaps: the union of the partitions per topic."""
    combined = dict(a)
    for topic_id, entry in b.items():
        old = combined.get(topic_id)
        if old is None:
            combined[topic_id] = entry
        else:
            combined[topic_id] = InitTopic(
                entry.name,
                old.partitions | entry.partitions,
                max(old.timestamp_ms, entry.timestamp_ms),
            )
    return combined


@dataclass(frozen=True)
class ShareStatePartitions:
    """Kafka's ShareGroupStatePartitionMetadataInfo (immutable: each change is a new one,
    written as a record before it replaces the group's)."""

    initializing: Mapping[uuid.UUID, InitTopic] = field(default_factory=dict)
    initialized: Mapping[uuid.UUID, InitTopic] = field(default_factory=dict)
    deleting: Mapping[uuid.UUID, str] = field(default_factory=dict)

    # -- reading ------------------------------------------------------------------------

    def initialized_partitions(self) -> TopicPartitions:
        """Kafka's initializedShareGroupPartitions (DescribeShareGroupOffsets of all)."""
        return {t: set(entry.partitions) for t, entry in self.initialized.items()}

    def is_empty(self) -> bool:
        return not (self.initializing or self.initialized or self.deleting)

    # -- initializing -------------------------------------------------------------------

    def to_initialize(
        self,
        subscribed: Iterable[str],
        topics: TopicLookup,
        now_ms: int,
        retry_interval_ms: int = INITIALIZE_RETRY_INTERVAL_MS,
    ) -> dict[uuid.UUID, InitTopic]:
        fresh = {
            t: e
            for t, e in self.initializing.items()
            if now_ms - e.timestamp_ms < retry_interval_ms
        }
        known = _combine(self.initialized, fresh)
        changes: dict[uuid.UUID, InitTopic] = {}
        for name in sorted(set(subscribed)):
            found = topics(name)
            if found is None:
                continue
            topic_id, count = found
            have = known[topic_id].partitions if topic_id in known else frozenset()
            missing = frozenset(range(count)) - have
            if missing:
                changes[topic_id] = InitTopic(name, missing, now_ms)
        return changes

    def with_initializing(self, changes: Mapping[uuid.UUID, InitTopic]) -> ShareStatePartitions:
        if not changes:
            return self
        deleting = {t: n for t, n in self.deleting.items() if t not in changes}
        return ShareStatePartitions(
            _combine(self.initializing, changes), dict(self.initialized), deleting
        )

    def with_initialized(
        self, done: Mapping[uuid.UUID, Iterable[int]], names: Mapping[uuid.UUID, str], now_ms: int
    ) -> ShareStatePartitions:
        if not done:
            return self
        added = {
            t: InitTopic(names.get(t, "<UNKNOWN>"), frozenset(parts), now_ms)
            for t, parts in done.items()
        }
        return ShareStatePartitions(
            _subtract(self.initializing, done),
            _combine(self.initialized, added),
            dict(self.deleting),
        )

    def without_initializing(
        self, failed: Mapping[uuid.UUID, Iterable[int]]
    ) -> ShareStatePartitions:
        if not failed or not self.initializing:
            return self
        return ShareStatePartitions(
            _subtract(self.initializing, failed), dict(self.initialized), dict(self.deleting)
        )

    # -- deleting -----------------------------------------------------------------------

    def for_group_delete(
        self, topic_by_id: TopicById
    ) -> tuple[ShareStatePartitions, TopicPartitions]:
        candidates = _combine(self.initialized, self.initializing)
        for topic_id in self.deleting:
            found = topic_by_id(topic_id)
            if found is None:
                continue  # Kafka: logged and ignored
            name, count = found
            candidates = _combine(candidates, {topic_id: InitTopic(name, frozenset(range(count)))})
        after = ShareStatePartitions({}, {}, {t: e.name for t, e in candidates.items()})
        return after, {t: set(e.partitions) for t, e in candidates.items()}

    def for_offsets_delete(
        self, names: Iterable[str], topics: TopicLookup
    ) -> tuple[ShareStatePartitions, TopicPartitions, list[tuple[str, Error, str]]]:
        initialized = dict(self.initialized)
        deleting = dict(self.deleting)
        to_delete: TopicPartitions = {}
        errors: list[tuple[str, Error, str]] = []
        for name in names:
            found = topics(name)
            if found is None:
                errors.append(
                    (
                        name,
                        Error.UNKNOWN_TOPIC_OR_PARTITION,
                        "This server does not host this topic-partition.",
                    )
                )
                continue
            topic_id, count = found
            if topic_id in initialized:
                to_delete[topic_id] = set(initialized.pop(topic_id).partitions)
                deleting[topic_id] = name
            elif topic_id in deleting:
                to_delete[topic_id] = set(range(count))
            else:
                errors.append(
                    (
                        name,
                        Error.UNKNOWN_TOPIC_OR_PARTITION,
                        "There is no offset information to delete.",
                    )
                )
        after = ShareStatePartitions(dict(self.initializing), initialized, deleting)
        return after, to_delete, errors

    def deleted(self, topic_ids: Iterable[uuid.UUID]) -> ShareStatePartitions:
        gone = set(topic_ids)
        return ShareStatePartitions(
            dict(self.initializing),
            dict(self.initialized),
            {t: n for t, n in self.deleting.items() if t not in gone},
        )

    def without_topics(self, topic_ids: Iterable[uuid.UUID]) -> ShareStatePartitions:
        """Kafka's maybeCleanupShareGroupState (GroupCoordinatorService.onMetadataUpdate, on
        a topic's deletion): the deleted topics are taken out of initializing, initialized
        and deleting; ``self`` when the group knew none of them (no record is written)."""
        gone = set(topic_ids)
        if not gone & (set(self.initializing) | set(self.initialized) | set(self.deleting)):
            return self
        return ShareStatePartitions(
            {t: e for t, e in self.initializing.items() if t not in gone},
            {t: e for t, e in self.initialized.items() if t not in gone},
            {t: n for t, n in self.deleting.items() if t not in gone},
        )

    # -- the record ---------------------------------------------------------------------

    def value(self) -> ShareStatePartitionMetadataValue:
        def topics(entries: Mapping[uuid.UUID, InitTopic]) -> tuple[StatePartitionTopic, ...]:
            return tuple(
                StatePartitionTopic(t, e.name, tuple(sorted(e.partitions)))
                for t, e in sorted(entries.items(), key=lambda i: i[0].bytes)
            )

        return ShareStatePartitionMetadataValue(
            initializing=topics(self.initializing),
            initialized=topics(self.initialized),
            deleting=tuple(
                StatePartitionTopic(t, n, ())
                for t, n in sorted(self.deleting.items(), key=lambda i: i[0].bytes)
            ),
        )

    @classmethod
    def from_value(
        cls, value: ShareStatePartitionMetadataValue, now_ms: int
    ) -> ShareStatePartitions:
        """Kafka's replay: every entry's timestamp is the time of the replay."""
        return cls(
            {
                t.topic_id: InitTopic(t.name, frozenset(t.partitions), now_ms)
                for t in value.initializing
            },
            {
                t.topic_id: InitTopic(t.name, frozenset(t.partitions), now_ms)
                for t in value.initialized
            },
            {t.topic_id: t.name for t in value.deleting},
        )


def _subtract(
    entries: Mapping[uuid.UUID, InitTopic], remove: Mapping[uuid.UUID, Iterable[int]]
) -> dict[uuid.UUID, InitTopic]:
    out: dict[uuid.UUID, InitTopic] = {}
    for topic_id, entry in entries.items():
        if topic_id not in remove:
            out[topic_id] = entry
            continue
        left = entry.partitions - frozenset(remove[topic_id])
        if left:
            out[topic_id] = InitTopic(entry.name, left, entry.timestamp_ms)
    return out


@dataclass
class AlterPlan:
    """completeAlterShareGroupOffsets' answer: each topic's partitions' errors (NONE for
    those to initialize), the start offsets to initialize and the topics now initializing."""

    # (topic name, topic id or None, [(partition, error, message)])
    responses: list[tuple[str, uuid.UUID | None, list[tuple[int, Error, str | None]]]]
    offsets: dict[uuid.UUID, dict[int, int]]
    initializing: dict[uuid.UUID, InitTopic]


def plan_alter(
    requested: Iterable[tuple[str, Iterable[tuple[int, int]]]], topics: TopicLookup, now_ms: int
) -> AlterPlan:
    unknown = "This server does not host this topic-partition."
    plan = AlterPlan([], {}, {})
    for name, partitions in requested:
        partitions = list(partitions)
        found = topics(name)
        if found is None:
            plan.responses.append(
                (
                    name,
                    None,
                    [(p, Error.UNKNOWN_TOPIC_OR_PARTITION, unknown) for p, _ in partitions],
                )
            )
            continue
        topic_id, count = found
        answers: list[tuple[int, Error, str | None]] = []
        for index, offset in partitions:
            if 0 <= index < count:
                answers.append((index, Error.NONE, None))
                plan.offsets.setdefault(topic_id, {})[index] = offset
            else:
                answers.append((index, Error.UNKNOWN_TOPIC_OR_PARTITION, unknown))
        good = frozenset(plan.offsets.get(topic_id, {}))
        if good:  # Kafka also adds a topic none of whose partitions exist, with no partitions
            plan.initializing[topic_id] = InitTopic(name, good, now_ms)
        plan.responses.append((name, topic_id, answers))
    return plan
