"""How long the event loop goes without coming back to poll for I/O, and why.

minibroker serves every client from one trio thread: whatever holds that thread (a garbage
collection, a disk sync, a large response built in one step) delays every request at once, and
shows as tail latency. Kafka has no such single point (its network and I/O threads are pools),
so it has no metric for it; Node.js's event-loop lag and asyncio's slow-callback warning are
the models here. Issue 40.

Three parts:

- :class:`StallMeter` (pure, time passed in): a *run* of the loop lasts from the end of one
  wait for I/O to the start of the next (trio's ``after_io_wait`` and ``before_io_wait``
  instrument hooks); every task step in between delays whatever arrives on a socket meanwhile.
  A run of ``MIN_STALL_S`` or more is a stall, observed into the histogram
  ``minibroker_event_loop_stall_seconds{kind}``: ``busy`` when the thread used the CPU for at
  least half of it (the loop ran code), ``waiting`` otherwise (a blocking system call, or the
  OS did not schedule the process: a loaded machine);
- :class:`StallWatchdog`: a daemon thread that wakes every ``warn / 2`` and, when the current
  run has lasted more than ``event.loop.stall.warn.ms``, takes the event loop thread's stack
  (``sys._current_frames``) and logs it once for that run: the code that was running. A
  thread runs while the loop's thread is in Python code (the interpreter switches threads every
  5 ms) or waiting on I/O, so it sees every stall but one spent inside a single C call that holds
  the GIL; the garbage collector is one, so it is measured by itself. With the stack it logs
  what the kernel says of that thread at the same moment (:func:`kernel_state`, from
  ``/proc``): running or runnable (``R``: on a CPU or waiting for one, a loaded machine),
  sleeping (``S``, with the kernel function it sleeps in: a futex is another thread holding
  the GIL, or a lock) or in uninterruptible sleep (``D``: the disk or the filesystem's
  journal). A stack in ``os.write`` alone cannot tell these apart;
- :class:`GcPauses`: ``gc.callbacks`` time each collection, into
  ``minibroker_gc_pause_seconds{generation}``; a stall that the watchdog could not see while it
  happened is named by its collection here.

Departures and costs: trio's per-step hooks (before/after_task_step) would time each task step,
but they run on every step of every task, on the data path; the I/O-wait hooks run once per
turn of the scheduler (trio calls only the hooks an instrument overrides), about a microsecond
each, and not at all while the loop waits, so an idle broker does not wake up for them. The
first version of this module slept a pulse task every 10 ms and measured how late it woke:
100 wake-ups a second, which was most of an idle broker's CPU (5.4% of a core against 0.5%
without it, `minibroker serve` idle for 20 s) and missed stalls shorter than its period.
Runs shorter than ``MIN_STALL_S`` are not observed (a busy loop turns thousands of times a
second, and each observation would cost more than the run's own bookkeeping), so the
histogram's count is of stalls of 1 ms or more, not of turns.
"""

from __future__ import annotations

import contextlib
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

# The shortest run of the loop observed as a stall (the histogram's first bucket).
MIN_STALL_S = 0.001
# The thread's CPU time is read at most this often while the loop turns (StallMeter).
CPU_SAMPLE_S = 0.001


@dataclass
class StallMeter:
    """A run's arithmetic: ``started(now, cpu)`` when the loop's wait for I/O returns,
    ``ended(now, cpu)`` when it waits again, which answers the run's length and whether the
    thread was ``busy`` meanwhile: it used the CPU for at least half of the run (the loop was
    running code), else it was waiting (in a system call such as an fsync, or not scheduled by
    the OS). ``cpu`` is the thread's CPU time (``time.thread_time``). ``overdue(now)``: how long
    the current run has lasted (0 while the loop waits for I/O).

    The thread's CPU time is a system call (about a microsecond here, where the clock is
    not), so ``started`` may be told it without ``cpu`` (None) when the last reading is younger
    than ``CPU_SAMPLE_S`` (``needs_cpu``): a stall is then judged over the window from that
    reading to its end, at most ``CPU_SAMPLE_S`` longer than the run itself. Runs under
    ``MIN_STALL_S`` are never judged, so for a busy loop this is one reading a millisecond
    instead of one a turn (thousands a second)."""

    started_at: float | None = None
    worst: float = 0.0
    _cpu_at: float = 0.0
    _cpu_read_at: float = float("-inf")

    def needs_cpu(self, now: float) -> bool:
        return now - self._cpu_read_at >= CPU_SAMPLE_S

    def started(self, now: float, cpu: float | None = 0.0) -> None:
        self.started_at = now
        if cpu is not None:
            self._cpu_at, self._cpu_read_at = cpu, now

    def ended(self, now: float, cpu: float = 0.0) -> tuple[float, bool]:
        started_at = self.started_at
        if started_at is None:
            return 0.0, False
        self.started_at = None
        run = max(0.0, now - started_at)
        self.worst = max(self.worst, run)
        window = max(run, now - self._cpu_read_at)
        busy = (cpu - self._cpu_at) * 2 >= window
        self._cpu_at, self._cpu_read_at = cpu, now  # a reading like any other
        return run, busy

    def overdue(self, now: float) -> float:
        started_at = self.started_at
        return 0.0 if started_at is None else max(0.0, now - started_at)


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


def kernel_state(native_thread_id: int, proc: str = "/proc/self/task") -> str:
    """What the kernel says of a thread of this process right now: its state letter (``R``
    running or runnable, ``S`` sleeping, ``D`` uninterruptible, as in ps(1)) and, when it
    sleeps, the kernel function it sleeps in (``wchan``; "-" when none is given, as for a
    running thread, or when the kernel hides it). "unknown" without /proc (not Linux)."""
    task = f"{proc}/{native_thread_id}"
    try:
        with open(f"{task}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
        with open(f"{task}/wchan") as wchan:
            where = wchan.read().strip()
    except (OSError, IndexError):
        return "unknown"
    return f"{state} in {where if where not in ('', '0') else '-'}"


class StallWatchdog:
    """The thread that names a stall while it lasts (see the module's docstring)."""

    def __init__(
        self,
        meter: StallMeter,
        warn_s: float,
        loop_thread_id: int,
        loop_native_id: int | None = None,
    ) -> None:
        self.meter = meter
        self.warn_s = warn_s
        self.loop_thread_id = loop_thread_id
        self.loop_native_id = loop_native_id
        self.reported: list[str] = []  # the stacks logged, newest last (kept: the last 20)
        self._reported_run: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-stall-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        period = max(self.warn_s / 2, 0.001)
        while not self._stop.wait(period):
            started_at = self.meter.started_at
            late = self.meter.overdue(time.perf_counter())
            if late <= self.warn_s or started_at is None or started_at == self._reported_run:
                continue
            self._reported_run = started_at  # once per stall
            # The kernel's view first: it changes while the stack is formatted.
            native = self.loop_native_id
            kernel = kernel_state(native) if native is not None else "unknown"
            frame = sys._current_frames().get(self.loop_thread_id)
            stack = "".join(traceback.format_stack(frame, limit=12)) if frame else "(no frame)"
            stack = f"{stack}(kernel: {kernel})\n"
            self.reported = [*self.reported[-19:], stack]
            log.warning(
                "the event loop has not come back to poll for I/O for %.0f ms"
                " (event.loop.stall.warn.ms=%.0f); it is running:\n%s",
                late * 1000,
                self.warn_s * 1000,
                stack,
            )


class LoopStalls(trio.abc.Instrument):
    """The three parts wired for one node: ``run`` (a task in the node's nursery) adds this
    instrument to the trio run and keeps it, the watchdog and the gc callback as long as it
    runs."""

    def __init__(self, stall_histogram: Histogram, gc_histogram: Histogram, warn_ms: int) -> None:
        self.meter = StallMeter()
        self._busy = stall_histogram.labels("busy").observe
        self._waiting = stall_histogram.labels("waiting").observe
        self.gc = GcPauses(gc_histogram)
        self.warn_s = warn_ms / 1000
        self.watchdog: StallWatchdog | None = None

    # The two hooks run on every turn of the scheduler (thousands a second on a busy broker,
    # issue 40): the clock is read once a turn and the thread's CPU time at most once a
    # millisecond (StallMeter), with the meter's fields set here rather than through its
    # methods: about 0.4 microseconds a turn against 1.9 (the hooks alone, timeit).
    def after_io_wait(
        self, timeout: float, _clock=time.perf_counter, _cpu=time.thread_time
    ) -> None:
        meter = self.meter
        now = _clock()
        meter.started_at = now
        if now - meter._cpu_read_at >= CPU_SAMPLE_S:
            meter._cpu_at, meter._cpu_read_at = _cpu(), now

    def before_io_wait(
        self, timeout: float, _clock=time.perf_counter, _cpu=time.thread_time
    ) -> None:
        meter = self.meter
        started_at = meter.started_at
        if started_at is None:
            return
        now = _clock()
        if now - started_at < MIN_STALL_S:
            meter.started_at = None
            return
        run, busy = meter.ended(now, _cpu())
        (self._busy if busy else self._waiting)(run)

    async def run(self) -> None:
        self.gc.install()
        if self.warn_s > 0:
            self.watchdog = StallWatchdog(
                self.meter, self.warn_s, threading.get_ident(), threading.get_native_id()
            )
            self.watchdog.start()
        trio.lowlevel.add_instrument(self)
        try:
            await trio.sleep_forever()
        finally:
            # trio removes an instrument whose hook raised (and logs it): gone already then.
            with contextlib.suppress(KeyError):
                trio.lowlevel.remove_instrument(self)
            self.gc.remove()
            if self.watchdog is not None:
                self.watchdog.stop()
