"""The event loop's stall meter (node/loop_stalls.py): the pulse's arithmetic, and a real
stall (the loop's thread held by a blocking call) measured, logged once with the code that held
it, and a garbage collection timed. The stalls here are made by the test, so what is asserted is
a lower bound the stall cannot be under, never a timing of the machine."""

from __future__ import annotations

import gc
import logging
import time

import pytest
import trio
from prometheus_client import CollectorRegistry, Histogram

from minibroker.common.metrics import STALL_BUCKETS
from minibroker.node.loop_stalls import GcPauses, LoopStalls, StallMeter

HOLD_S = 0.3


def _histograms():
    registry = CollectorRegistry()
    stalls = Histogram("stalls", "", ["kind"], buckets=STALL_BUCKETS, registry=registry)
    pauses = Histogram("pauses", "", ["generation"], buckets=STALL_BUCKETS, registry=registry)
    return registry, stalls, pauses


def test_the_meter_counts_only_lateness():
    meter = StallMeter(interval=0.01)
    assert meter.arrived(5.0) == (0.0, False)  # never expected: no stall
    meter.expect(10.0, cpu=1.0)
    assert meter.overdue(10.005) == 0.0
    assert meter.overdue(10.5) == pytest.approx(0.49)
    assert meter.arrived(10.008, cpu=1.0)[0] == 0.0  # early is not a stall
    meter.expect(11.0, cpu=2.0)
    stall, busy = meter.arrived(11.26, cpu=2.2)  # the thread ran code for 0.2 of 0.26 s
    assert stall == pytest.approx(0.25) and busy
    assert meter.worst == pytest.approx(0.25)
    assert meter.overdue(12.0) == 0.0  # nothing due after it arrived
    meter.expect(20.0, cpu=3.0)
    stall, busy = meter.arrived(20.51, cpu=3.01)  # blocked or not scheduled
    assert stall == pytest.approx(0.5) and not busy


def _hold_the_loop_thread() -> None:
    time.sleep(HOLD_S)


def test_a_blocked_loop_is_measured_and_named_once(caplog):
    registry, stalls, pauses = _histograms()
    monitor = LoopStalls(stalls, pauses, warn_ms=50)

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.run)
            await trio.sleep(0.05)  # the pulse runs and the watchdog starts
            _hold_the_loop_thread()
            await trio.sleep(0.05)  # the pulse comes back, late
            nursery.cancel_scope.cancel()

    with caplog.at_level(logging.WARNING, logger="loop"):
        trio.run(main)
    assert monitor.meter.worst >= HOLD_S - 0.05
    # time.sleep holds the thread without using the CPU: a waiting stall.
    below = registry.get_sample_value("stalls_bucket", {"kind": "waiting", "le": "0.25"})
    total = registry.get_sample_value("stalls_count", {"kind": "waiting"})
    assert total is not None and total - below >= 1, "the 0.3 s stall is not above 0.25 s"
    assert monitor.watchdog is not None
    assert len(monitor.watchdog.reported) == 1, "one stall, logged once"
    assert "_hold_the_loop_thread" in monitor.watchdog.reported[0]
    assert any("_hold_the_loop_thread" in record.getMessage() for record in caplog.records)


def test_no_warning_below_the_threshold():
    registry, stalls, pauses = _histograms()
    monitor = LoopStalls(stalls, pauses, warn_ms=10_000)

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.run)
            await trio.sleep(0.05)
            _hold_the_loop_thread()
            await trio.sleep(0.05)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert monitor.watchdog is not None and monitor.watchdog.reported == []
    assert monitor.meter.worst >= HOLD_S - 0.05  # still measured


def test_garbage_collections_are_timed_by_generation():
    registry, _, pauses = _histograms()
    timer = GcPauses(pauses)
    timer.install()
    try:
        gc.collect(2)
    finally:
        timer.remove()
    assert timer not in gc.callbacks
    assert registry.get_sample_value("pauses_count", {"generation": "2"}) >= 1
    assert timer.last is not None and timer.last[0] == 2 and timer.last[1] >= 0
