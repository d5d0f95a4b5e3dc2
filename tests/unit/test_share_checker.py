"""faults/share_checker.py fed crafted share-group histories: a clean one judged clean, and
each violation (lost, dlq_missing, redelivered_after_accept, redelivered_after_reject,
over_limit, phantom) found where it was put, so the checker can fail."""

from __future__ import annotations

import pytest

from faults.share_checker import ACCEPT, REJECT, RELEASE, Ack, DeadLetter, Delivery, check

LIMIT = 3


def clean_history():
    """Partition 0, offsets 0-3: 0 accepted, 1 released once then accepted, 2 rejected into
    the DLQ, 3 a poison record released to the limit and archived into the DLQ (twice: at
    least once)."""
    produced = {(0, o): b"%010d" % o for o in range(4)}
    deliveries = [
        Delivery(0, 0, produced[(0, 0)], 1),
        Delivery(0, 1, produced[(0, 1)], 1),
        Delivery(0, 1, produced[(0, 1)], 2),
        Delivery(0, 2, produced[(0, 2)], 1),
        *[Delivery(0, 3, produced[(0, 3)], count) for count in (1, 2, 3)],
    ]
    acks = [
        Ack(0, 0, ACCEPT, 1, confirmed=True),
        Ack(0, 1, RELEASE, 1, confirmed=True),
        Ack(0, 1, ACCEPT, 2, confirmed=True),
        Ack(0, 2, REJECT, 1, confirmed=True),
        *[Ack(0, 3, RELEASE, count, confirmed=True) for count in (1, 2, 3)],
    ]
    letters = [
        DeadLetter(0, 2, 1, produced[(0, 2)]),
        DeadLetter(0, 3, 3, produced[(0, 3)]),
        DeadLetter(0, 3, 3, produced[(0, 3)]),
    ]
    return produced, deliveries, acks, {0: 4}, letters


def test_a_clean_history_is_clean():
    verdict = check(*clean_history(), LIMIT)
    assert verdict.clean, verdict.summary()
    assert verdict.dead_letters == 3
    assert verdict.dead_letters_twice == 1


def test_an_unconfirmed_accept_is_not_held_against_a_redelivery():
    produced, deliveries, acks, starts, letters = clean_history()
    acks[0].confirmed = False  # its answer never came: it may not have been applied
    deliveries.append(Delivery(0, 0, produced[(0, 0)], 2))
    acks.append(Ack(0, 0, ACCEPT, 2, confirmed=True))
    assert check(produced, deliveries, acks, starts, letters, LIMIT).clean


@pytest.mark.parametrize(
    ("kind", "spoil"),
    [
        # The start offset stops before offset 3: offset 3 is not final.
        ("lost", lambda h: h[3].update({0: 3})),
        # Offset 0 final but never accepted and not in the DLQ.
        ("lost", lambda h: h[2].pop(0)),
        # The rejected record is not in the DLQ.
        ("dlq_missing", lambda h: h[4].pop(0)),
        # The poison record is in no DLQ record.
        ("dlq_missing", lambda h: (h[4].pop(), h[4].pop())),
        # Offset 0 delivered again after its acknowledged acceptance.
        ("redelivered_after_accept", lambda h: h[1].append(Delivery(0, 0, b"%010d" % 0, 2))),
        # Offset 0 both accepted (acknowledged) and in the DLQ.
        ("redelivered_after_accept", lambda h: h[4].append(DeadLetter(0, 0, 1, b"%010d" % 0))),
        # Offset 2 delivered again after its acknowledged rejection.
        ("redelivered_after_reject", lambda h: h[1].append(Delivery(0, 2, b"%010d" % 2, 2))),
        # The poison record delivered a fourth time.
        ("over_limit", lambda h: h[1].append(Delivery(0, 3, b"%010d" % 3, 4))),
        # A DLQ record above the limit.
        ("over_limit", lambda h: h[4].append(DeadLetter(0, 3, 4, b"%010d" % 3))),
        # A delivery of a value the producer did not write there.
        ("phantom", lambda h: h[1].append(Delivery(0, 1, b"other", 1))),
    ],
)
def test_each_violation_is_found(kind, spoil):
    history = clean_history()
    spoil(history)
    verdict = check(*history, LIMIT)
    assert verdict.counts()[kind] >= 1, verdict.summary()
    assert not verdict.clean


def test_without_a_dlq_archived_records_are_not_judged_by_it():
    produced, deliveries, acks, starts, _letters = clean_history()
    assert check(produced, deliveries, acks, starts, None, LIMIT).clean


def test_an_unknown_acknowledgement_type_is_refused():
    with pytest.raises(ValueError):
        Ack(0, 0, "renew", 1)


def test_records_not_final_in_an_undrained_topic_are_counted_apart():
    produced, deliveries, acks, _starts, letters = clean_history()
    stopped_early = {0: 3}  # offset 3 not final: the consumers stopped before the end
    assert check(produced, deliveries, acks, stopped_early, letters, LIMIT).counts()["lost"] == 1
    verdict = check(produced, deliveries, acks, stopped_early, letters, LIMIT, drained=False)
    assert verdict.clean, verdict.summary()
    assert verdict.undrained == 1


def test_the_drain_waits_past_a_stale_leaders_high_watermark():
    # A zombie leader answered ListOffsets with high watermark 8480 on partition 1 while the
    # new leader had acknowledged records up to 9100: the drain must wait for 9101.
    from faults.share_workload import ShareWorkload

    produced = {(1, offset): b"v" for offset in range(8470, 9101)} | {(0, 5): b"v"}
    ends = ShareWorkload.drain_targets({0: 10, 1: 8480, 2: 0}, produced)
    assert ends == {0: 10, 1: 9101, 2: 0}
