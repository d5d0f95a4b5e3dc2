"""The event loop's stall meter (node/loop_stalls.py): a run's arithmetic, an idle loop left
asleep, and a real stall (the loop's thread held by a blocking call) measured, logged once with
the code that held it, and a garbage collection timed. The stalls here are made by the test, so
what is asserted is a lower bound the stall cannot be under, never a timing of the machine."""

from __future__ import annotations

import gc
import logging
import time

import pytest
import trio
from prometheus_client import CollectorRegistry, Histogram

from minibroker.common.metrics import STALL_BUCKETS
from minibroker.node.loop_stalls import GcPauses, LoopStalls, StallMeter, kernel_state

HOLD_S = 0.3


def _histograms():
    registry = CollectorRegistry()
    stalls = Histogram("stalls", "", ["kind"], buckets=STALL_BUCKETS, registry=registry)
    pauses = Histogram("pauses", "", ["generation"], buckets=STALL_BUCKETS, registry=registry)
    return registry, stalls, pauses


def test_the_meter_measures_runs_between_waits_for_io():
    meter = StallMeter()
    assert meter.ended(5.0) == (0.0, False)  # never started: no run
    assert meter.overdue(5.0) == 0.0  # waiting for I/O
    meter.started(10.0, cpu=1.0)
    assert meter.overdue(10.5) == pytest.approx(0.5)
    run, busy = meter.ended(10.26, cpu=1.2)  # the thread ran code for 0.2 of 0.26 s
    assert run == pytest.approx(0.26) and busy
    assert meter.worst == pytest.approx(0.26)
    assert meter.overdue(12.0) == 0.0  # waiting again
    meter.started(20.0, cpu=3.0)
    run, busy = meter.ended(20.5, cpu=3.01)  # blocked or not scheduled
    assert run == pytest.approx(0.5) and not busy
    assert meter.worst == pytest.approx(0.5)


def test_the_meter_judges_a_run_started_without_a_cpu_reading_from_the_last_one():
    """The thread's CPU time is read at most once per CPU_SAMPLE_S: a run started without it
    is judged over the window from the last reading, which may be a little longer."""
    meter = StallMeter()
    assert meter.needs_cpu(10.0)  # never read
    meter.started(10.0, cpu=1.0)
    assert not meter.needs_cpu(10.0005)
    assert meter.ended(10.0004, cpu=1.0004)[1]
    meter.started(10.0005, cpu=None)  # the reading at 10.0 stands
    assert meter.started_at == 10.0005
    run, busy = meter.ended(10.0105, cpu=1.0102)  # 10.2 ms of CPU in a 10.5 ms window
    assert run == pytest.approx(0.01) and busy
    meter.started(10.02, cpu=None)
    # judged from the end of the last run (a reading too): 4.8 ms of CPU over 19.5 ms
    run, busy = meter.ended(10.03, cpu=1.0150)
    assert run == pytest.approx(0.01) and not busy
    assert not meter.needs_cpu(10.0305)


def test_an_idle_loop_is_not_woken_and_short_runs_are_not_observed():
    """The instrument adds no wake-up: a loop that only sleeps turns about once per sleep, and
    none of its runs (microseconds) is a stall."""
    registry, stalls, pauses = _histograms()
    monitor = LoopStalls(stalls, pauses, warn_ms=0)
    turns = []

    class Turns(trio.abc.Instrument):
        def before_io_wait(self, timeout):
            turns.append(timeout)

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.run)
            await trio.sleep(0.01)
            trio.lowlevel.add_instrument(Turns())
            await trio.sleep(0.3)
            asleep.extend(turns)
            nursery.cancel_scope.cancel()

    asleep: list[float] = []
    # The garbage collector stays off meanwhile: a collection of this pytest process's heap
    # (thousands of tests' objects, CI's run of 2026-12-03 met one) is a real busy run of the
    # loop, measured by GcPauses, not a wake-up this instrument adds.
    gc.disable()
    try:
        trio.run(main)
    finally:
        gc.enable()
    # A 10 ms pulse would have turned the loop about 30 times in those 0.3 s.
    assert len(asleep) <= 3, asleep
    # No run of this loop does a millisecond of work: none is a busy stall. A run the
    # machine did not schedule for a millisecond or more is a "waiting" one, which a loaded
    # machine makes (CI's run of 2026-12-02 22:20 met one): at most one per turn.
    assert registry.get_sample_value("stalls_count", {"kind": "busy"}) == 0
    assert registry.get_sample_value("stalls_count", {"kind": "waiting"}) <= len(asleep) + 1


def _hold_the_loop_thread() -> None:
    time.sleep(HOLD_S)


def test_a_blocked_loop_is_measured_and_named_once(caplog):
    registry, stalls, pauses = _histograms()
    monitor = LoopStalls(stalls, pauses, warn_ms=50)

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.run)
            await trio.sleep(0.05)  # the instrument is in and the watchdog starts
            _hold_the_loop_thread()
            await trio.sleep(0.05)  # the loop waits for I/O again: the run ends
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
    # time.sleep sleeps in the kernel: the watchdog says so beside the stack.
    assert "(kernel: S in " in monitor.watchdog.reported[0], monitor.watchdog.reported[0]


def test_the_kernel_state_of_a_running_and_a_sleeping_thread():
    import threading

    assert kernel_state(threading.get_native_id()).startswith("R in ")  # this one, reading
    asleep = threading.Event()
    ids: list[int] = []

    def sleeper() -> None:
        ids.append(threading.get_native_id())
        asleep.wait(30)

    thread = threading.Thread(target=sleeper)
    thread.start()
    try:
        wait_until = time.monotonic() + 10
        state = "unknown"
        while time.monotonic() < wait_until:  # until it has gone to sleep in the kernel
            state = kernel_state(ids[0]) if ids else "unknown"
            # The state and the wait channel are two reads: a thread seen sleeping in the
            # first can be on its way out of the wait in the second ("S in -", seen under
            # load), so look again.
            if state.startswith("S in ") and state != "S in -":
                break
            time.sleep(0.01)
        assert state.startswith("S in ") and state != "S in -", state  # with its function
    finally:
        asleep.set()
        thread.join()
    assert kernel_state(999_999_999) == "unknown"  # no such thread


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
