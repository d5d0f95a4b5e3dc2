"""bench.iceberg_failover's exactly-once check (issue 38): which rows of a table it accepts
beyond the acknowledged records. Only a record the producer sent again under a newer epoch of
its producer id (librdkafka's epoch bump, see ``resent_after_epoch_bump``) is accepted; a
second copy at the same epoch, a copy at a newer epoch written before the acknowledged one, a
row whose value was never acknowledged, a missing row: each is a problem."""

from __future__ import annotations

import pytest

from bench import iceberg_failover as failover

PID = 7


def _outcome(checks):
    return failover.Outcome(
        records=0,
        checks={"t": checks},
        killed=[],
        dead_letter_table=False,
        produce_s=1.0,
        catch_up_s=1.0,
        total_s=2.0,
    )


def _log(epochs: list[int]) -> dict[int, list[tuple[int, int, int, int]]]:
    """Partition 0 with one one-record batch per offset at these epochs; 1 and 2 empty."""
    batches = [(offset, offset, PID, epoch) for offset, epoch in enumerate(epochs)]
    return {0: batches, 1: [], 2: []}


def _values(count: int) -> list[bytes]:
    return [f"v{number}".encode() for number in range(count)]


def test_exactly_once_when_every_row_is_acknowledged():
    values = _values(3)
    acked = {(0, offset): value for offset, value in enumerate(values)}
    positions = [(0, offset) for offset in range(3)]
    checks = failover._check(acked, positions, values, _log([0, 0, 0]))
    assert checks[0].resent == [] and checks[0].extra_count == 0
    assert failover.problems(_outcome(checks)) == []


def test_a_record_sent_again_under_a_newer_epoch_is_accepted_and_counted():
    """v1 written at offset 1 (epoch 0) whose answer the producer did not take as written,
    then sent again after its epoch bump and acknowledged at offset 3 (epoch 1)."""
    log = [b"v0", b"v1", b"v2", b"v1"]
    acked = {(0, 0): b"v0", (0, 2): b"v2", (0, 3): b"v1"}
    positions = [(0, offset) for offset in range(4)]
    checks = failover._check(acked, positions, log, _log([0, 0, 1, 1]))
    assert checks[0].resent == [1]
    assert checks[0].extra_acked_elsewhere == 1
    assert failover.problems(_outcome(checks)) == []


@pytest.mark.parametrize(
    ("epochs", "why"),
    [
        ([0, 0, 0, 0], "the same epoch: the broker's duplicate"),
        ([0, 1, 1, 0], "the copy at the newer epoch is the earlier one"),
    ],
)
def test_other_second_copies_are_problems(epochs, why):
    log = [b"v0", b"v1", b"v2", b"v1"]
    acked = {(0, 0): b"v0", (0, 2): b"v2", (0, 3): b"v1"}
    positions = [(0, offset) for offset in range(4)]
    checks = failover._check(acked, positions, log, _log(epochs))
    assert checks[0].resent == [], why
    assert len(failover.problems(_outcome(checks))) == 1, why


def test_a_row_never_acknowledged_and_a_missing_row_are_problems():
    acked = {(0, 0): b"v0", (0, 1): b"v1"}
    never = failover._check(acked, [(0, 0), (0, 1), (0, 2)], [b"v0", b"v1", b"x"], _log([0, 0, 1]))
    assert never[0].resent == [] and never[0].extra == [2]
    assert len(failover.problems(_outcome(never))) == 1
    missing = failover._check(acked, [(0, 0)], [b"v0"], _log([0, 0]))
    assert missing[0].missing == [1]
    assert len(failover.problems(_outcome(missing))) == 1
