"""Nodes forked from the launcher's fork server (minibroker.tools.forkserver) behave as the
launcher's own subprocesses: exit codes come back, and no node outlives its launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from minibroker.testing import Cluster
from minibroker.tools.forkserver import fork_server

ORPHAN_TIMEOUT = 20.0


def test_exit_codes_of_forked_nodes(tmp_path):
    fork_server().wait_ready()  # the broker imported: what bench/startup.py waits for
    with Cluster(brokers=1, data_dir=tmp_path) as cluster:
        node = cluster.node(1)
        assert os.getpgid(node.pid) == node.pid  # a process group of its own, as Popen's
        assert cluster.stop(1) == 0  # a clean SIGTERM shutdown
        cluster.restart(1)
        cluster.kill(1)
        assert node.exit_code == -signal.SIGKILL
    assert fork_server().alive


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_no_node_outlives_a_launcher_that_dies(tmp_path):
    script = f"""
import os
from minibroker.testing import Cluster
cluster = Cluster(brokers=1, data_dir={str(tmp_path)!r}).start()
print(cluster.node(1).pid, flush=True)
os._exit(0)  # no clean-up at all, as a launcher killed with SIGKILL
"""
    finished = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr
    pid = int(finished.stdout.split()[-1])
    deadline = time.monotonic() + ORPHAN_TIMEOUT
    while not _gone(pid):
        assert time.monotonic() < deadline, f"node {pid} outlived its launcher"
        time.sleep(0.05)
