"""The share-group checker: a history of share-consumer deliveries and acknowledgements, the
records a producer had acknowledged, and the final state read afterwards (each share
partition's start offset, the dead-letter queue's records), judged as KIP-932 and KIP-1191
promise them (Kafka 4.4's SharePartition: a record is acquired by one consumer at a time, its
delivery count grows with each acquisition, ACCEPT and REJECT are final once their
ShareAcknowledge is answered, a record acquired `share.delivery.count.limit` times is archived
instead of being delivered again, and an archived record of a group with a DLQ is written to
it at least once).

A pure function of its input, as faults/txn_checker.py is, so that its unit tests
(tests/unit/test_share_checker.py) can feed it a history with each violation. Violations, by
kind:

- **lost**: a record the producer was told was written is, at the end, not final: at or
  after its share partition's start offset (DescribeShareGroupOffsets) once the consumers
  have drained the topic; or final without having been accepted and without being in the
  DLQ (when the group has one): neither accepted nor archived;
- **dlq_missing**: a record whose REJECT was acknowledged, or that was delivered up to the
  limit and never accepted, is not in the DLQ (KIP-1191: written at least once);
- **redelivered_after_accept**: a record delivered again (a delivery with a higher delivery
  count) after an ACCEPT of it was acknowledged, or an acknowledged ACCEPT of a record the
  DLQ also holds: accepted twice, or accepted and archived;
- **redelivered_after_reject**: a record delivered again after its REJECT was acknowledged;
- **over_limit**: a delivery (or a DLQ record's ``__dlq.errors.delivery.count``) above
  ``share.delivery.count.limit``;
- **phantom**: a delivery or a DLQ record whose value is not the one the producer wrote at
  that offset.

An acknowledgement counts as acknowledged only when its commit's answer said so (the
acknowledgement commit callback, no error); one whose answer failed or never came may or may
not have been applied, so it counts as a possible acceptance for **lost** and is not held
against later deliveries. A record in the DLQ twice is at-least-once (reported, not judged).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

ACCEPT = "accept"
RELEASE = "release"
REJECT = "reject"
ACK_TYPES = (ACCEPT, RELEASE, REJECT)

Position = tuple[int, int]  # (partition, offset) of the workload's topic


@dataclass(frozen=True)
class Delivery:
    """One record a share consumer's poll returned."""

    partition: int
    offset: int
    value: bytes
    delivery_count: int
    consumer: str = ""


@dataclass
class Ack:
    """One acknowledgement sent (acknowledge then commit_sync); `confirmed` when the commit's
    answer named its offset without an error, False when it failed or never came."""

    partition: int
    offset: int
    kind: str
    delivery_count: int
    confirmed: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ACK_TYPES:
            raise ValueError(f"acknowledgement {self.kind!r} is none of {ACK_TYPES}")


@dataclass(frozen=True)
class DeadLetter:
    """One record of the DLQ topic, by its ``__dlq.errors.*`` headers."""

    partition: int  # the source partition
    offset: int  # the source offset
    delivery_count: int
    value: bytes | None = None  # the original's, when the group copies records


@dataclass
class ShareVerdict:
    produced: int = 0
    deliveries: int = 0
    acks: Counter = field(default_factory=Counter)  # (kind, confirmed) -> count
    dead_letters: int = 0
    dead_letters_twice: int = 0
    # Records not final when the consumers had not drained the topic: not judged (the run
    # is reported unfinished instead).
    undrained: int = 0
    lost: list[str] = field(default_factory=list)
    dlq_missing: list[str] = field(default_factory=list)
    redelivered_after_accept: list[str] = field(default_factory=list)
    redelivered_after_reject: list[str] = field(default_factory=list)
    over_limit: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)

    KINDS = (
        "lost",
        "dlq_missing",
        "redelivered_after_accept",
        "redelivered_after_reject",
        "over_limit",
        "phantom",
    )

    @property
    def clean(self) -> bool:
        return not any(getattr(self, kind) for kind in self.KINDS)

    def counts(self) -> dict[str, int]:
        return {kind: len(getattr(self, kind)) for kind in self.KINDS}

    def summary(self, examples: int = 5) -> str:
        acks = ", ".join(
            f"{kind} {self.acks[(kind, True)]} acknowledged"
            f" + {self.acks[(kind, False)]} unconfirmed"
            for kind in ACK_TYPES
        )
        lines = [
            f"{self.produced} records produced, {self.deliveries} deliveries; acknowledgements:"
            f" {acks}; {self.dead_letters} DLQ records ({self.dead_letters_twice} records there"
            f" more than once: at least once, not judged); {self.undrained} records not final"
            " in an undrained topic (not judged); violations: "
            + ", ".join(f"{kind} {count}" for kind, count in self.counts().items())
        ]
        for kind in self.KINDS:
            for line in getattr(self, kind)[:examples]:
                lines.append(f"  {kind}: {line}")
        return "\n".join(lines)


def check(
    produced: dict[Position, bytes],
    deliveries: list[Delivery],
    acks: list[Ack],
    start_offsets: dict[int, int],
    dead_letters: list[DeadLetter] | None,
    delivery_limit: int,
    drained: bool = True,
) -> ShareVerdict:
    """Judge a share-group history. `produced`: every position the producer was told was
    written, with its value; `start_offsets`: each share partition's start offset read after
    the consumers drained the topic (-1 or absent: the partition has no state, so nothing of
    it is final); `dead_letters`: the DLQ topic read to its end, or None when the group has
    no DLQ (then the **lost** and **dlq_missing** checks of archived records are not made);
    `drained` False when the consumers stopped before every start offset reached its high
    watermark: the records not final then are counted as undrained, not as lost."""
    verdict = ShareVerdict(produced=len(produced), deliveries=len(deliveries))
    by_position: dict[Position, list[Delivery]] = defaultdict(list)
    for delivery in deliveries:
        position = (delivery.partition, delivery.offset)
        by_position[position].append(delivery)
        if delivery.delivery_count > delivery_limit:
            verdict.over_limit.append(
                f"{position} delivered with count {delivery.delivery_count} to"
                f" {delivery.consumer or 'a consumer'} (limit {delivery_limit})"
            )
        wrote = produced.get(position)
        if wrote is not None and wrote != delivery.value:
            verdict.phantom.append(
                f"{position} delivered as {delivery.value!r}, written as {wrote!r}"
            )

    acks_at: dict[Position, list[Ack]] = defaultdict(list)
    for ack in acks:
        acks_at[(ack.partition, ack.offset)].append(ack)
        verdict.acks[(ack.kind, ack.confirmed)] += 1

    in_dlq: Counter = Counter()
    for letter in dead_letters or []:
        position = (letter.partition, letter.offset)
        in_dlq[position] += 1
        if letter.delivery_count > delivery_limit:
            verdict.over_limit.append(
                f"{position} in the DLQ with delivery count {letter.delivery_count}"
                f" (limit {delivery_limit})"
            )
        wrote = produced.get(position)
        if letter.value is not None and wrote is not None and wrote != letter.value:
            verdict.phantom.append(
                f"{position} in the DLQ as {letter.value!r}, written as {wrote!r}"
            )
    verdict.dead_letters = sum(in_dlq.values())
    verdict.dead_letters_twice = sum(1 for count in in_dlq.values() if count > 1)

    for position in sorted(produced):
        partition, offset = position
        seen = by_position.get(position, [])
        sent = acks_at.get(position, [])
        accepted = [a for a in sent if a.kind == ACCEPT and a.confirmed]
        rejected = [a for a in sent if a.kind == REJECT and a.confirmed]
        if accepted:
            first = min(a.delivery_count for a in accepted)
            again = [d for d in seen if d.delivery_count > first]
            if again or len(accepted) > 1:
                verdict.redelivered_after_accept.append(
                    f"{position} accepted (acknowledged) at delivery {first}, then delivered"
                    f" again at {sorted(d.delivery_count for d in again)}"
                    f" ({len(accepted)} acknowledged acceptances)"
                )
            if in_dlq[position] and dead_letters is not None:
                verdict.redelivered_after_accept.append(
                    f"{position} accepted (acknowledged) at delivery {first}, and in the DLQ"
                )
        if rejected:
            first = min(a.delivery_count for a in rejected)
            again = [d for d in seen if d.delivery_count > first]
            if again:
                verdict.redelivered_after_reject.append(
                    f"{position} rejected (acknowledged) at delivery {first}, then delivered"
                    f" again at {sorted(d.delivery_count for d in again)}"
                )
        start = start_offsets.get(partition, -1)
        if (start < 0 or offset >= start) and not drained:
            verdict.undrained += 1
            continue
        if start < 0 or offset >= start:
            verdict.lost.append(
                f"{position} not final: the share partition's start offset is {start}"
                f" ({len(seen)} deliveries, acknowledgements {[a.kind for a in sent]})"
            )
            continue
        if dead_letters is None:
            continue
        if any(a.kind == ACCEPT for a in sent) or in_dlq[position]:
            continue  # accepted (or possibly: an unconfirmed ACCEPT), or archived
        # Final, never accepted: archived, so in the DLQ (at least once).
        if rejected or any(d.delivery_count >= delivery_limit for d in seen):
            verdict.dlq_missing.append(
                f"{position} {'rejected (acknowledged)' if rejected else 'at the delivery limit'},"
                " not in the DLQ"
            )
        else:
            verdict.lost.append(
                f"{position} before the start offset {start} but neither accepted nor in the DLQ"
                f" ({len(seen)} deliveries, acknowledgements {[a.kind for a in sent]})"
            )
    return verdict
