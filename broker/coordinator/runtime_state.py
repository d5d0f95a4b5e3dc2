"""The coordinator runtime's pure part: which internal partitions this broker coordinates, at
which epoch, in which state, and the timers each coordinator partition has armed.

Kafka's coordinator-common ``CoordinatorRuntime`` (org.apache.kafka.coordinator.common.runtime)
keeps one ``CoordinatorContext`` per partition of a coordinator's internal topic, with the
partition epoch it was loaded at and a ``CoordinatorState`` (INITIAL, LOADING, ACTIVE, FAILED,
CLOSED, with the transitions ``canTransitionFrom`` allows). This module is those contexts and
their rules as plain data, time passed in and no I/O, so that they are tested without sockets;
coordinator/runtime.py is the thin trio service around it (reading the partition, writing
through the replica manager, sleeping until the next timer).

The rules, Kafka's:

- scheduleLoadOperation(tp, epoch): a load at an epoch not newer than the context's is
  ignored; a newer one records the epoch and, from INITIAL or FAILED, starts LOADING; an
  ACTIVE context stays ACTIVE (the state in memory is this log's: a leader whose epoch is
  bumped by an ISR change keeps serving).
- scheduleUnloadOperation(tp, epoch): ignored when the context's epoch is newer than the
  unload's (a stale unload); else the context is CLOSED and forgotten, and its timers with it
  (CoordinatorTimer's keys are cancelled on unload). An unload without an epoch (a deleted
  topic, a stopped replica) always applies.
- a write (scheduleWriteOperation) is accepted only by an ACTIVE context: LOADING answers
  COORDINATOR_LOAD_IN_PROGRESS, anything else NOT_COORDINATOR.

Departures, and why:

- Kafka's unload applies when ``context.epoch < epoch`` (its partition epoch is bumped by
  every leader and ISR change, so a broker that stops leading always sees a newer one);
  minibroker's epoch is the leader epoch, which a StopReplica or a replica going offline
  does not bump, so an unload at the context's own epoch applies too (``<=``).
- A newer epoch seen while LOADING restarts the read at that epoch (Kafka lets the running
  load finish): minibroker's load is a task that checks its epoch between reads, so the
  restart is cheap, and the state a load builds is always that of the newest leadership.
- A context keeps two epochs: ``epoch`` (the newest seen, for the rules above) and
  ``load_epoch`` (the epoch its state was loaded at), which the transaction coordinator
  writes into markers as its coordinator epoch (Kafka's TransactionStateManager keeps it the
  same way: an ISR change does not change the coordinator epoch).
"""

import enum
from dataclasses import dataclass, field

from minibroker.protocol.errors import Error


def java_string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    value = 0
    data = text.encode("utf-16-be")
    for index in range(0, len(data), 2):
        value = (31 * value + int.from_bytes(data[index : index + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def partition_for(key: str, partitions: int) -> int:
    """Kafka's Utils.abs(key.hashCode) % partitions (abs of MIN_VALUE is 0): the partition of
    a coordinator's internal topic that serves ``key`` (a group id, a transactional id, a
    share group's key), as GroupCoordinatorService.partitionFor answers."""
    code = java_string_hash(key)
    return (0 if code == -(2**31) else abs(code)) % partitions


class CoordinatorState(enum.Enum):
    """Kafka's CoordinatorRuntime.CoordinatorState."""

    INITIAL = "initial"
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"

    def can_transition_from(self, state: "CoordinatorState") -> bool:
        if self is CoordinatorState.INITIAL:
            return False
        if self is CoordinatorState.LOADING:
            return state in (CoordinatorState.INITIAL, CoordinatorState.FAILED)
        if self is CoordinatorState.ACTIVE:
            return state in (CoordinatorState.ACTIVE, CoordinatorState.LOADING)
        if self is CoordinatorState.FAILED:
            return state in (CoordinatorState.LOADING, CoordinatorState.ACTIVE)
        return True  # CLOSED


class IllegalStateTransition(Exception):
    pass


@dataclass
class PartitionContext:
    """Kafka's CoordinatorContext, without the coordinator's own state (which the coordinator
    keeps): one partition of the internal topic this broker leads."""

    index: int
    epoch: int = -1
    load_epoch: int = -1
    state: CoordinatorState = CoordinatorState.INITIAL
    # Timer key -> deadline (seconds on the service's clock): CoordinatorTimer's keys.
    timers: dict[str, float] = field(default_factory=dict)

    def transition_to(self, state: CoordinatorState) -> None:
        if not state.can_transition_from(self.state):
            raise IllegalStateTransition(f"partition {self.index}: {self.state} -> {state}")
        self.state = state


class Load(enum.Enum):
    """What a load request asks of the service."""

    START = "start"  # read the partition at the given epoch (any earlier read is abandoned)
    IGNORED = "ignored"  # stale, or already loading or active at this leadership


@dataclass
class Ownership:
    """The partitions of one coordinator's internal topic that this broker coordinates."""

    contexts: dict[int, PartitionContext] = field(default_factory=dict)

    # -- leadership -------------------------------------------------------------------------

    def load(self, index: int, epoch: int) -> Load:
        """scheduleLoadOperation: this broker became (or still is) leader at ``epoch``."""
        context = self.contexts.setdefault(index, PartitionContext(index))
        if epoch <= context.epoch:
            return Load.IGNORED
        context.epoch = epoch
        if context.state is CoordinatorState.ACTIVE:
            return Load.IGNORED
        if context.state is CoordinatorState.LOADING:
            # Departure (see the module's docstring): the read starts again at this epoch.
            context.load_epoch = epoch
            return Load.START
        context.transition_to(CoordinatorState.LOADING)
        context.load_epoch = epoch
        return Load.START

    def unload(self, index: int, epoch: int | None) -> PartitionContext | None:
        """scheduleUnloadOperation: this broker no longer leads the partition. The closed
        context (its timers to cancel) when it applies; None when stale or never loaded."""
        context = self.contexts.get(index)
        if context is None:
            return None
        if epoch is not None and epoch < context.epoch:
            return None
        context.transition_to(CoordinatorState.CLOSED)
        del self.contexts[index]
        return context

    def loading(self, index: int, epoch: int) -> bool:
        """The read at ``epoch`` is still wanted (a load checks between reads)."""
        context = self.contexts.get(index)
        return (
            context is not None
            and context.state is CoordinatorState.LOADING
            and context.load_epoch == epoch
        )

    def complete_load(self, index: int, epoch: int) -> bool:
        """The read at ``epoch`` finished: ACTIVE if it is still the wanted one (the caller
        then installs what it read), else False and what was read is dropped."""
        if not self.loading(index, epoch):
            return False
        self.contexts[index].transition_to(CoordinatorState.ACTIVE)
        return True

    def fail_load(self, index: int, epoch: int) -> bool:
        """The read at ``epoch`` raised: FAILED (writes answer NOT_COORDINATOR until a newer
        epoch loads it again), as Kafka's runtime marks a coordinator whose load failed."""
        if not self.loading(index, epoch):
            return False
        self.contexts[index].transition_to(CoordinatorState.FAILED)
        return True

    # -- serving ----------------------------------------------------------------------------

    def state(self, index: int) -> CoordinatorState | None:
        context = self.contexts.get(index)
        return None if context is None else context.state

    def check(self, index: int) -> Error:
        """Whether a request (or a write) on the partition is served now: NONE when ACTIVE,
        COORDINATOR_LOAD_IN_PROGRESS while LOADING, NOT_COORDINATOR otherwise (Kafka's
        CoordinatorRuntime.withActiveContextOrThrow)."""
        state = self.state(index)
        if state is CoordinatorState.ACTIVE:
            return Error.NONE
        if state is CoordinatorState.LOADING:
            return Error.COORDINATOR_LOAD_IN_PROGRESS
        return Error.NOT_COORDINATOR

    def active_epoch(self, index: int) -> int | None:
        """The epoch the partition's state was loaded at, while ACTIVE (the transaction
        coordinator's coordinator epoch)."""
        context = self.contexts.get(index)
        if context is None or context.state is not CoordinatorState.ACTIVE:
            return None
        return context.load_epoch

    def active(self) -> list[int]:
        return [i for i, c in self.contexts.items() if c.state is CoordinatorState.ACTIVE]

    def any_loading(self) -> bool:
        return any(c.state is CoordinatorState.LOADING for c in self.contexts.values())

    # -- timers (Kafka's CoordinatorTimer: schedule and cancel by key) ----------------------

    def schedule(self, index: int, key: str, deadline: float) -> bool:
        """Arm (or re-arm) timer ``key`` of the partition; False (nothing armed) unless the
        partition is ACTIVE, as Kafka's timer belongs to a loaded coordinator."""
        context = self.contexts.get(index)
        if context is None or context.state is not CoordinatorState.ACTIVE:
            return False
        context.timers[key] = deadline
        return True

    def cancel(self, index: int, key: str) -> None:
        context = self.contexts.get(index)
        if context is not None:
            context.timers.pop(key, None)

    def next_deadline(self) -> float | None:
        deadlines = [d for c in self.contexts.values() for d in c.timers.values()]
        return min(deadlines) if deadlines else None

    def due(self, now: float) -> list[tuple[int, str]]:
        """The timers due at ``now``, removed (each fires once), earliest first."""
        fired = sorted(
            (deadline, index, key)
            for index, context in self.contexts.items()
            for key, deadline in context.timers.items()
            if deadline <= now
        )
        for _, index, key in fired:
            del self.contexts[index].timers[key]
        return [(index, key) for _, index, key in fired]
