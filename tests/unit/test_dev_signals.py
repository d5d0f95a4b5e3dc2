"""The `minibroker dev` supervisor's stop signal: raised where it is safe, deferred where an
exception would leak a lock (inside subprocess.Popen.poll, a hang seen in CI)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from minibroker.tools import dev


@pytest.fixture
def restored_signals():
    saved = {s: signal.getsignal(s) for s in (*dev.STOP_SIGNALS, signal.SIGALRM)}
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    for signum, handler in saved.items():
        signal.signal(signum, handler)
    dev._pending_stop = None


def frame_inside_subprocess():
    """A live frame of subprocess.py's own code (list2cmdline iterating our generator)."""
    captured = []

    def arguments():
        captured.append(sys._getframe(1))
        yield "x"

    subprocess.list2cmdline(arguments())
    return captured[0]


def test_a_stop_outside_subprocess_code_is_raised_at_once(restored_signals):
    with pytest.raises(dev._StopRequested, match="SIGINT"):
        dev._request_stop(signal.SIGINT, sys._getframe())
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # a second Ctrl-C is ignored


def test_a_stop_inside_popen_code_is_delivered_again_outside_it(restored_signals):
    inside = frame_inside_subprocess()
    assert dev._inside_uninterruptible_code(inside)
    dev._request_stop(signal.SIGTERM, inside)  # deferred: no exception here
    assert dev._pending_stop == "SIGTERM"
    deadline = time.monotonic() + 10
    with pytest.raises(dev._StopRequested, match="SIGTERM"):
        while time.monotonic() < deadline:
            time.sleep(0.01)  # SIGALRM re-delivers the stop here, outside subprocess code
    assert dev._pending_stop is None
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_stops_sent_at_a_loop_of_popen_poll_leave_the_child_waitable(restored_signals):
    """Ctrl-Cs from another process landing anywhere in a loop of Popen.poll (the watch
    loop's node.running): each ends the loop, and wait() still reaps the child after."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for attempt in range(40):
            signal.signal(signal.SIGINT, dev._request_stop)
            killer = subprocess.Popen(
                ["sh", "-c", f"sleep 0.0{attempt % 10}; kill -INT {os.getpid()}"]
            )
            try:
                while True:
                    child.poll()
                    sum(range(300))  # the rest of a watch loop's turn
            except dev._StopRequested:
                pass
            killer.wait()
            # Without the deferral this lock leaks now and then, and wait() spins for ever.
            assert not child._waitpid_lock.locked(), f"Popen's lock leaked at stop {attempt}"
        child.kill()
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        child.kill()
        if child._waitpid_lock.locked():
            child._waitpid_lock.release()  # the leak this test looks for: reap the child anyway
        child.wait()
