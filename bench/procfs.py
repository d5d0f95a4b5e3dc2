"""CPU time and peak memory of a process, read from /proc (Linux only, like the harness)."""

from __future__ import annotations

import os
from pathlib import Path

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | str) -> float:
    """User plus system time of the whole process (every thread, living or exited) so far.

    Fields 14 and 15 of /proc/<pid>/stat, counted after the command name, which is in
    parentheses and may itself contain spaces.
    """
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    user_ticks, system_ticks = int(fields[11]), int(fields[12])
    return (user_ticks + system_ticks) / CLOCK_TICKS_PER_SECOND


def peak_rss_bytes(pid: int | str) -> int:
    """VmHWM: the largest resident set the process has had since it started."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM")


def machine_ticks() -> tuple[int, int]:
    """The machine's CPU ticks so far, (steal, all), from /proc/stat's first line: steal is
    time a virtual CPU wanted to run while the hypervisor ran something else. On this
    project's VM it is what makes a "quiet" machine noisy (issue 40: 29-32% of the time in
    runs whose latency was 5-10x a quiet run's), so the harness prints it with each run."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(field) for field in fields[:8]]  # user..steal (guest time is inside user)
    return ticks[7], sum(ticks)


def steal_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of the machine's CPU time stolen between two ``machine_ticks``."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0
