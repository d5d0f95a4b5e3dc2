"""The transaction checker: a history of transactional writes and a read_committed read of
everything afterwards, judged in the spirit of Jepsen's Kafka analyses (Kafka 0.11's
exactly-once claims, Redpanda 21.10, Bufstream 0.1).

A pure function of its input, so that its unit tests (tests/unit/test_txn_checker.py) can feed
it a history with each violation and see it found. What it judges, as Kafka promises it for a
consumer with ``isolation.level=read_committed``:

- **aborted read**: a record of an aborted transaction (or one never committed: every
  transaction of the workload ends, so an open one at the end is a bug of the broker's LSO)
  is visible;
- **torn transaction**: some but not all records of a committed (or of an unknown, when any
  of it is visible) transaction are visible (Kafka: a transaction is atomic across
  partitions);
- **lost write**: a record of a committed transaction is not visible;
- **duplicate**: one value visible twice. The workload never writes a value twice (a retried
  transaction writes new values, the consume-transform-produce stage derives its output from
  one input record), so every copy is a violation: within one producer epoch the broker's
  sequence check must drop it, across epochs it is the transaction that must not commit twice;
- **phantom**: a visible value no attempt wrote;
- **offset mismatch**: in the consume-transform-produce stage, a committed transaction's
  offsets (sent with ``send_offsets_to_transaction``) are not one past the last input record it
  consumed on each partition, or the committed transactions on an input partition do not
  consume its read_committed records exactly once, each one where the previous one's offsets
  pointed (an input skipped or processed twice), or the group's offsets read at the end differ
  from the last committed transaction's.

A transaction whose commit's outcome is unknown (the client's commit failed with a retriable
or fatal error at a time the coordinator may have decided) counts as committed when any of its
records is visible and as aborted when none is; it must be atomic either way.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

COMMITTED = "committed"
ABORTED = "aborted"
UNKNOWN = "unknown"
OUTCOMES = (COMMITTED, ABORTED, UNKNOWN)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Write:
    """One record a transaction attempted to write."""

    topic: str
    partition: int
    value: bytes


@dataclass(frozen=True)
class Record:
    """One record as a read_committed consumer returned it."""

    topic: str
    partition: int
    offset: int
    value: bytes


@dataclass
class Transaction:
    """One attempted transaction: `txn` is unique in the history (transactional id and a
    counter), `outcome` what the client was told. For a consume-transform-produce
    transaction, `consumed` is the input records it read and `offsets` the offsets it sent to
    the transaction for its group (next offset to read, per input partition)."""

    txn: str
    transactional_id: str
    outcome: str
    writes: list[Write] = field(default_factory=list)
    consumed: list[Record] = field(default_factory=list)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r} is none of {OUTCOMES}")


@dataclass
class Verdict:
    """The violations found, each a list of readable lines; `clean` when there is none."""

    transactions: int = 0
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    visible: int = 0
    aborted_reads: list[str] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    phantoms: list[str] = field(default_factory=list)
    offset_mismatches: list[str] = field(default_factory=list)

    KINDS = ("aborted_reads", "torn", "lost", "duplicates", "phantoms", "offset_mismatches")

    @property
    def clean(self) -> bool:
        return not any(getattr(self, kind) for kind in self.KINDS)

    def counts(self) -> dict[str, int]:
        return {kind: len(getattr(self, kind)) for kind in self.KINDS}

    def summary(self, examples: int = 5) -> str:
        lines = [
            f"{self.transactions} transactions ({self.committed} committed, {self.aborted}"
            f" aborted, {self.unknown} unknown), {self.visible} records visible to"
            " read_committed; violations: "
            + ", ".join(f"{kind} {count}" for kind, count in self.counts().items())
        ]
        for kind in self.KINDS:
            for line in getattr(self, kind)[:examples]:
                lines.append(f"  {kind}: {line}")
        return "\n".join(lines)


def check(
    transactions: list[Transaction],
    read: list[Record],
    group_offsets: dict[TopicPartition, int] | None = None,
) -> Verdict:
    """Judge `transactions` against `read`, a read_committed read of every topic they wrote
    (and of the consume-transform-produce stage's input), made after every transaction
    ended. `group_offsets`, when given, are the stage's group's committed offsets read at the
    end (OffsetFetch)."""
    verdict = Verdict(transactions=len(transactions))
    writer: dict[bytes, tuple[Transaction, Write]] = {}
    for transaction in transactions:
        for write in transaction.writes:
            if write.value in writer:
                raise ValueError(f"the history writes {write.value!r} twice: values must be unique")
            writer[write.value] = (transaction, write)

    seen: dict[bytes, list[Record]] = defaultdict(list)
    for record in read:
        seen[record.value].append(record)
    verdict.visible = len(read)

    for value, copies in seen.items():
        if len(copies) > 1:
            where = ", ".join(f"{c.topic}-{c.partition}@{c.offset}" for c in copies)
            verdict.duplicates.append(f"{value!r} at {where}")
        found = writer.get(value)
        if found is None:
            verdict.phantoms.append(
                f"{value!r} at {copies[0].topic}-{copies[0].partition}@{copies[0].offset}"
            )
            continue
        transaction, write = found
        for copy in copies:
            if (copy.topic, copy.partition) != (write.topic, write.partition):
                verdict.phantoms.append(
                    f"{value!r} of {transaction.txn} written to {write.topic}-{write.partition}"
                    f" but read at {copy.topic}-{copy.partition}@{copy.offset}"
                )

    committed: list[Transaction] = []
    for transaction in transactions:
        visible = [w for w in transaction.writes if w.value in seen]
        missing = [w for w in transaction.writes if w.value not in seen]
        outcome = transaction.outcome
        if outcome == UNKNOWN:
            verdict.unknown += 1
            outcome = COMMITTED if visible else ABORTED
        elif outcome == COMMITTED:
            verdict.committed += 1
        else:
            verdict.aborted += 1
        if outcome == ABORTED:
            if visible and transaction.outcome == ABORTED:
                verdict.aborted_reads.append(
                    f"{transaction.txn}: {len(visible)} of its {len(transaction.writes)}"
                    f" records visible, e.g. {visible[0].value!r}"
                )
            continue
        committed.append(transaction)
        if visible and missing:
            verdict.torn.append(
                f"{transaction.txn} ({transaction.outcome}): {len(visible)} of"
                f" {len(transaction.writes)} records visible, missing e.g."
                f" {missing[0].value!r} on {missing[0].topic}-{missing[0].partition}"
            )
        if transaction.outcome == COMMITTED:
            for write in missing:
                verdict.lost.append(
                    f"{write.value!r} of committed {transaction.txn} on"
                    f" {write.topic}-{write.partition}"
                )

    _check_offsets(committed, read, group_offsets, verdict)
    return verdict


def _check_offsets(
    committed: list[Transaction],
    read: list[Record],
    group_offsets: dict[TopicPartition, int] | None,
    verdict: Verdict,
) -> None:
    """Kafka's exactly-once for consume-transform-produce: the offsets a committed transaction
    commits are one past what it consumed, and the committed transactions on an input
    partition consume its records exactly once, back to back."""
    stage = [t for t in committed if t.consumed or t.offsets]
    for transaction in stage:
        consumed_partitions: dict[TopicPartition, int] = {}
        for record in transaction.consumed:
            key = (record.topic, record.partition)
            consumed_partitions[key] = max(consumed_partitions.get(key, -1), record.offset)
        if set(consumed_partitions) != set(transaction.offsets):
            verdict.offset_mismatches.append(
                f"{transaction.txn} consumed from {sorted(consumed_partitions)} but committed"
                f" offsets for {sorted(transaction.offsets)}"
            )
            continue
        for key, last in consumed_partitions.items():
            if transaction.offsets[key] != last + 1:
                verdict.offset_mismatches.append(
                    f"{transaction.txn} consumed {key[0]}-{key[1]} up to offset {last} but"
                    f" committed offset {transaction.offsets[key]}"
                )

    inputs: dict[TopicPartition, list[Record]] = defaultdict(list)
    input_partitions = {key for t in stage for key in t.offsets}
    for record in read:
        if (record.topic, record.partition) in input_partitions:
            inputs[(record.topic, record.partition)].append(record)
    for key in sorted(input_partitions):
        available = sorted(inputs[key], key=lambda r: r.offset)
        chain = sorted((t for t in stage if key in t.offsets), key=lambda t: t.offsets[key])
        start = 0
        last_offset = None
        for transaction in chain:
            end = transaction.offsets[key]
            if end == last_offset:
                verdict.offset_mismatches.append(
                    f"{transaction.txn} committed {key[0]}-{key[1]} offset {end} again"
                )
            expected = [r.offset for r in available if start <= r.offset < end]
            got = sorted(r.offset for r in transaction.consumed if (r.topic, r.partition) == key)
            if got != expected:
                twice = sorted((Counter(got) - Counter(expected)).elements())
                skipped = sorted((Counter(expected) - Counter(got)).elements())
                verdict.offset_mismatches.append(
                    f"{transaction.txn} committed {key[0]}-{key[1]} offsets [{start}, {end})"
                    f" but consumed {len(got)} of its {len(expected)} records"
                    f" (not there or consumed before: {twice[:5]}; skipped: {skipped[:5]})"
                )
            start = end
            last_offset = end
        if group_offsets is not None and chain:
            final = chain[-1].offsets[key]
            if group_offsets.get(key) != final:
                verdict.offset_mismatches.append(
                    f"the group's committed offset for {key[0]}-{key[1]} is"
                    f" {group_offsets.get(key)}, the last committed transaction's {final}"
                )
