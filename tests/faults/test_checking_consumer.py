"""The fault harness's checking consumer runs in a process of its own (faults/checking_consumer.py)
so that a librdkafka close that never ends can be ended: here a stand-in process writes one
record and ``end``, then ignores SIGTERM and never exits, as a hung close does. The Workload
must keep the record and kill the process within CONSUMER_CLOSE_S. No broker and no root
needed."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from faults.chaos import Workload

HUNG_CLOSE = """
import signal, sys, time
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
print("2 5 " + b"0000000042".hex(), flush=True)
while not stopping:
    time.sleep(0.01)
print("end", flush=True)
sys.stdout.close()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
while True:  # the close that never ends
    time.sleep(1)
"""


class HungClose(Workload):
    CONSUMER_CLOSE_S = 1.0

    def consumer_command(self) -> list[str]:
        return [sys.executable, "-c", HUNG_CLOSE]


def test_a_checking_consumer_whose_close_hangs_is_killed_and_its_reads_kept(tmp_path: Path):
    workload = HungClose("127.0.0.1:1", tmp_path / "producer.log")
    reader = threading.Thread(target=workload._consume, daemon=True)
    reader.start()
    deadline = time.monotonic() + 30
    while not workload.read and time.monotonic() < deadline:
        time.sleep(0.01)
    assert workload.read == {(2, 5): b"0000000042"}
    process = workload._consumer_process
    assert process is not None
    workload.abandon()  # SIGTERM: the stand-in ends its stream, then hangs
    reader.join(30)
    assert not reader.is_alive()
    assert process.returncode == -9  # killed, not ended by itself
    assert workload.reread_differently == []
