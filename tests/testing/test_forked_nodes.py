"""Nodes forked from the launcher's fork server (minibroker.tools.forkserver) behave as the
launcher's own subprocesses: exit codes come back, and no node outlives its launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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


INNER_CONFTEST = """
from tests.conftest import pytest_configure  # noqa: F401  the suite's SIGTERM handling
"""

INNER_TEST = """
import os
import time
from pathlib import Path
from pathlib import Path

import pytest

from minibroker.tools.launcher import BrokerProcess

PIDS = Path({pids!r})


@pytest.fixture
def node(tmp_path):
    started = BrokerProcess.start(1, tmp_path / "fixture")
    yield started
    started.stop()


def test_stopped_from_outside(node, tmp_path):
    unowned = BrokerProcess.start(2, tmp_path / "unowned")  # no fixture stops this one
    PIDS.write_text(f"{{node.pid}} {{unowned.pid}}")
    time.sleep(600)
"""


def test_no_node_outlives_a_test_run_stopped_by_sigterm(tmp_path):
    """A pytest run stopped as `timeout` or a cancelled CI job stops it (SIGTERM to its
    process group) tears down its fixtures (tests/conftest.py turns the SIGTERM into a
    KeyboardInterrupt) and the launcher stops at exit what no fixture owns (issue 41): neither
    node outlives the run."""
    repo = Path(__file__).resolve().parents[2]
    inner = tmp_path / "inner"
    inner.mkdir()
    pids = tmp_path / "pids"
    (inner / "conftest.py").write_text(INNER_CONFTEST)
    (inner / "test_inner.py").write_text(INNER_TEST.format(pids=str(pids)))
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", str(inner)],
        cwd=inner,
        env={**os.environ, "PYTHONPATH": str(repo)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        process_group=0,
    )
    try:
        deadline = time.monotonic() + 120
        while not pids.exists() or len(pids.read_text().split()) != 2:
            assert run.poll() is None, run.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the inner test never started its nodes"
            time.sleep(0.05)
        nodes = [int(pid) for pid in pids.read_text().split()]
        os.killpg(run.pid, signal.SIGTERM)
        output = run.communicate(timeout=120)[0]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    left = [pid for pid in nodes if not _gone(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], output[-3000:]
    assert "KeyboardInterrupt" in output, output[-3000:]
