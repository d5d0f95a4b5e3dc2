"""Where a share partition's state is kept: the persister the share partition manager calls.

Kafka's ``org.apache.kafka.server.share.persister.Persister`` (server-common), whose
``DefaultStatePersister`` sends InitializeShareGroupState (83), ReadShareGroupState (84),
WriteShareGroupState (85), DeleteShareGroupState (86) and ReadShareGroupStateSummary (87) to
the share coordinator of the (group, topic id, partition) key, found with FindCoordinator key
type 2 (``"group:topicId:partition"``). The share partition manager on a partition's leader
(replication/) reads a share partition's state through it before the first acquisition and
writes every change before it answers the ShareFetch or ShareAcknowledge that made it.

This module is the interface and an in-memory implementation for the pure tests of the data
path. The implementation a broker runs (the share coordinator's, local or over the wire) is
composed in node/; replication/ never imports coordinator/.

Errors are Kafka's codes, as the APIs answer them: NONE; COORDINATOR_NOT_AVAILABLE,
NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS (retriable: try again);
FENCED_STATE_EPOCH (a write or initialize with a stale state epoch); FENCED_LEADER_EPOCH (a
write from a leader older than the last writer); UNKNOWN_TOPIC_OR_PARTITION (no state: the
partition was never initialized for the group, or was deleted).
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field
from typing import Protocol

from minibroker.protocol.errors import Error
from minibroker.replication.share_partition import PersistedState, StateBatch


@dataclass(frozen=True)
class ShareStateKey:
    """The share coordinator's key: SharePartitionKey (group, topic id, partition)."""

    group: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """FindCoordinator's key of type 2 (SHARE): SharePartitionKey.asCoordinatorKey, the
        topic id as Kafka's Uuid.toString writes it (URL-safe base64, no padding)."""
        topic = base64.urlsafe_b64encode(self.topic_id.bytes).rstrip(b"=").decode()
        return f"{self.group}:{topic}:{self.partition}"


@dataclass(frozen=True)
class ReadResult:
    error: Error
    state: PersistedState | None = None  # None unless error is NONE
    leader_epoch: int = -1


@dataclass(frozen=True)
class WriteState:
    """WriteShareGroupState's partition: the state epoch read, the writer's leader epoch, the
    new start offset (-1: unchanged) and the batches that changed (an update) or all of them
    (``snapshot``: the whole state, as a ShareSnapshot)."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1


@dataclass(frozen=True)
class SummaryResult:
    """ReadShareGroupStateSummary's answer (for DescribeShareGroupOffsets): a share partition
    never initialized is NONE with start offset -1."""

    error: Error
    state_epoch: int = -1
    leader_epoch: int = -1
    start_offset: int = -1
    delivery_complete_count: int = -1


class SharePersister(Protocol):
    """The five operations of KIP-932's persister, one share partition at a time."""

    async def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> Error:
        """InitializeShareGroupState: the partition's state starts at ``start_offset`` with
        ``state_epoch`` and no batches (also what an admin's offset reset writes); with
        ``start_offset`` -1 (the group coordinator's initialization) a state already there is
        kept (coordinator/share/state.py says why)."""
        ...

    async def read(self, key: ShareStateKey, leader_epoch: int) -> ReadResult:
        """ReadShareGroupState: the whole state; records ``leader_epoch`` as the reader's."""
        ...

    async def write(self, key: ShareStateKey, state: WriteState) -> Error: ...

    async def delete(self, key: ShareStateKey) -> Error:
        """DeleteShareGroupState: the state is gone (its records tombstoned)."""
        ...

    async def read_summary(self, key: ShareStateKey, leader_epoch: int) -> SummaryResult:
        """ReadShareGroupStateSummary: the start offset and epochs, nothing recorded."""
        ...


@dataclass
class InMemoryPersister:
    """A persister in one dict, with the epoch rules of Kafka's ShareCoordinatorShard: a write
    with a state epoch below the stored one is FENCED_STATE_EPOCH, one with a leader epoch
    below the stored one FENCED_LEADER_EPOCH; a read or write of an unknown key is
    UNKNOWN_TOPIC_OR_PARTITION. For the pure tests of the data path; not durable."""

    states: dict[ShareStateKey, PersistedState] = field(default_factory=dict)
    leader_epochs: dict[ShareStateKey, int] = field(default_factory=dict)
    delivery_complete_counts: dict[ShareStateKey, int] = field(default_factory=dict)
    writes: int = 0

    async def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> Error:
        current = self.states.get(key)
        if current is not None and state_epoch < current.state_epoch:
            return Error.FENCED_STATE_EPOCH
        if current is not None and start_offset == -1:
            return Error.NONE  # kept, as the share coordinator's shard keeps it
        self.states[key] = PersistedState(start_offset, state_epoch, ())
        self.delivery_complete_counts.pop(key, None)
        return Error.NONE

    async def read(self, key: ShareStateKey, leader_epoch: int) -> ReadResult:
        current = self.states.get(key)
        if current is None:
            return ReadResult(Error.UNKNOWN_TOPIC_OR_PARTITION)
        if leader_epoch < self.leader_epochs.get(key, -1):
            return ReadResult(Error.FENCED_LEADER_EPOCH)
        self.leader_epochs[key] = leader_epoch
        return ReadResult(Error.NONE, current, leader_epoch)

    async def write(self, key: ShareStateKey, state: WriteState) -> Error:
        current = self.states.get(key)
        if current is None:
            return Error.UNKNOWN_TOPIC_OR_PARTITION
        if state.state_epoch < current.state_epoch:
            return Error.FENCED_STATE_EPOCH
        if state.leader_epoch < self.leader_epochs.get(key, -1):
            return Error.FENCED_LEADER_EPOCH
        self.leader_epochs[key] = state.leader_epoch
        if state.delivery_complete_count != -1:
            self.delivery_complete_counts[key] = state.delivery_complete_count
        start = current.start_offset if state.start_offset < 0 else state.start_offset
        self.states[key] = PersistedState(
            start, current.state_epoch, merge_batches(current.batches, state.batches, start)
        )
        self.writes += 1
        return Error.NONE

    async def delete(self, key: ShareStateKey) -> Error:
        self.states.pop(key, None)
        self.leader_epochs.pop(key, None)
        self.delivery_complete_counts.pop(key, None)
        return Error.NONE

    async def read_summary(self, key: ShareStateKey, leader_epoch: int) -> SummaryResult:
        current = self.states.get(key)
        if current is None:
            return SummaryResult(Error.NONE, 0, -1, -1, -1)
        return SummaryResult(
            Error.NONE,
            current.state_epoch,
            self.leader_epochs.get(key, -1),
            current.start_offset,
            self.delivery_complete_counts.get(key, -1),
        )


def merge_batches(
    old: tuple[StateBatch, ...], new: tuple[StateBatch, ...], start_offset: int
) -> tuple[StateBatch, ...]:
    """Kafka's ShareCoordinatorShard merge (PersisterStateBatchCombiner): the newer batch wins
    where batches overlap, and nothing below the start offset is kept."""
    per_offset: dict[int, StateBatch] = {}
    for batch in (*old, *new):
        for offset in range(max(batch.first_offset, start_offset), batch.last_offset + 1):
            per_offset[offset] = batch
    merged: list[StateBatch] = []
    for offset in sorted(per_offset):
        batch = per_offset[offset]
        last = merged[-1] if merged else None
        if (
            last is not None
            and last.last_offset == offset - 1
            and (last.delivery_state, last.delivery_count)
            == (batch.delivery_state, batch.delivery_count)
        ):
            merged[-1] = StateBatch(
                last.first_offset, offset, last.delivery_state, last.delivery_count
            )
        else:
            merged.append(StateBatch(offset, offset, batch.delivery_state, batch.delivery_count))
    return tuple(merged)
