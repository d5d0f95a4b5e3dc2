"""How long the event loop goes without coming back to the scheduler, and why.

minibroker serves every client from one trio thread: whatever holds that thread (a garbage
collection, a disk sync, a large response built in one step) delays every request at once, and
shows as tail latency. Kafka has no such single point (its network and I/O threads are pools),
so it has no metric for it; Node.js's event-loop lag and asyncio's slow-callback warning are
the models here. Issue 40.

Three parts:

- :class:`StallMeter` (pure, time passed in): a pulse that should come back every
  ``interval`` seconds; the time it comes back late is the stall, observed into the histogram
  ``minibroker_event_loop_stall_seconds{kind}``: ``busy`` when the thread used the CPU for at
  least half of that time (the loop ran code), ``waiting`` otherwise (a blocking system call,
  or the OS did not schedule the process: a loaded machine);
- :class:`StallWatchdog`: a daemon thread that wakes every ``warn / 2`` and, when the pulse is
  overdue by more than ``event.loop.stall.warn.ms``, takes the event loop thread's stack
  (``sys._current_frames``) and logs it once for that stall: the code that was running. A
  thread runs while the loop's thread is in Python code (the interpreter switches threads every
  5 ms) or waiting on I/O, so it sees every stall but one spent inside a single C call that holds
  the GIL; the garbage collector is one, so it is measured by itself:
- :class:`GcPauses`: ``gc.callbacks`` time each collection, into
  ``minibroker_gc_pause_seconds{generation}``; a stall that the watchdog could not see while it
  happened is named by its collection here.

Departure: trio's Instrument hooks (before/after_task_step) would time each task step exactly,
but they run on every step of every task, on the data path; a pulse every ``interval`` costs one
wake-up per interval whatever the load.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time
import traceback
from dataclasses import dataclass

import trio
from prometheus_client import Histogram

log = logging.getLogger("loop")

PULSE_INTERVAL_S = 0.01


@dataclass
class StallMeter:
    """The pulse's arithmetic: ``expect(now, cpu)`` when the pulse goes to sleep for
    ``interval``, ``arrived(now, cpu)`` when it runs again, which answers the stall (how much
    later than due it ran, never negative) and whether the thread was ``busy`` meanwhile: it
    used the CPU for at least half the time since the pulse slept (the loop was running code),
    else it was waiting (in a system call such as an fsync, or not scheduled by the OS).
    ``cpu`` is the thread's CPU time (``time.thread_time``). ``overdue(now)``: how late the
    pulse is now (0 if not due yet)."""

    interval: float
    due: float | None = None
    worst: float = 0.0
    _slept_at: float = 0.0
    _cpu_at: float = 0.0

    def expect(self, now: float, cpu: float = 0.0) -> None:
        self.due = now + self.interval
        self._slept_at, self._cpu_at = now, cpu

    def arrived(self, now: float, cpu: float = 0.0) -> tuple[float, bool]:
        if self.due is None:
            return 0.0, False
        stall = max(0.0, now - self.due)
        self.worst = max(self.worst, stall)
        self.due = None
        busy = (cpu - self._cpu_at) * 2 >= now - self._slept_at
        return stall, busy

    def overdue(self, now: float) -> float:
        due = self.due
        return 0.0 if due is None else max(0.0, now - due)


class GcPauses:
    """Times every garbage collection through ``gc.callbacks`` (the start and stop phases),
    into a histogram by generation; ``last`` is the last pause (generation, seconds)."""

    def __init__(self, histogram: Histogram) -> None:
        self._histogram = histogram
        self._children = {generation: histogram.labels(str(generation)) for generation in range(3)}
        self._started = 0.0
        self.last: tuple[int, float] | None = None

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        generation = int(info.get("generation", 2))
        self._children.get(generation, self._histogram.labels(str(generation))).observe(pause)
        self.last = (generation, pause)

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


class StallWatchdog:
    """The thread that names a stall while it lasts (see the module's docstring)."""

    def __init__(self, meter: StallMeter, warn_s: float, loop_thread_id: int) -> None:
        self.meter = meter
        self.warn_s = warn_s
        self.loop_thread_id = loop_thread_id
        self.reported: list[str] = []  # the stacks logged, newest last (kept: the last 20)
        self._reported_due: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-stall-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        period = max(self.warn_s / 2, 0.001)
        while not self._stop.wait(period):
            due = self.meter.due
            late = self.meter.overdue(time.perf_counter())
            if late <= self.warn_s or due is None or due == self._reported_due:
                continue
            self._reported_due = due  # once per stall
            frame = sys._current_frames().get(self.loop_thread_id)
            stack = "".join(traceback.format_stack(frame, limit=12)) if frame else "(no frame)"
            self.reported = [*self.reported[-19:], stack]
            log.warning(
                "the event loop has not come back to the scheduler for %.0f ms"
                " (event.loop.stall.warn.ms=%.0f); it is running:\n%s",
                late * 1000,
                self.warn_s * 1000,
                stack,
            )


class LoopStalls:
    """The three parts wired for one node: ``run`` is the pulse task (in the node's nursery);
    the watchdog and the gc callback live as long as it does."""

    def __init__(
        self,
        stall_histogram: Histogram,
        gc_histogram: Histogram,
        warn_ms: int,
        interval: float = PULSE_INTERVAL_S,
    ) -> None:
        self.meter = StallMeter(interval)
        self._stalls = stall_histogram
        self.gc = GcPauses(gc_histogram)
        self.warn_s = warn_ms / 1000
        self.watchdog: StallWatchdog | None = None

    async def run(self) -> None:
        self.gc.install()
        if self.warn_s > 0:
            self.watchdog = StallWatchdog(self.meter, self.warn_s, threading.get_ident())
            self.watchdog.start()
        meter = self.meter
        busy_stall = self._stalls.labels("busy").observe
        waiting_stall = self._stalls.labels("waiting").observe
        clock, cpu = time.perf_counter, time.thread_time
        try:
            while True:
                meter.expect(clock(), cpu())
                await trio.sleep(meter.interval)
                stall, busy = meter.arrived(clock(), cpu())
                (busy_stall if busy else waiting_stall)(stall)
        finally:
            self.gc.remove()
            if self.watchdog is not None:
                self.watchdog.stop()
