"""`minibroker dev` as a user runs it: a node killed under it, a second copy, a closed pipe,
a closed terminal, the supervisor itself killed."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from minibroker.tools.dev_secure import SECURE_PORT_OFFSET
from minibroker.tools.launcher import free_port, free_ports, request_metadata, zookeeper_installed
from tests.conftest import run_until_refused, wait_for

START_TIMEOUT = 60.0
NODE_LINE = re.compile(r"^\s+(controller|broker) (\d+)\s+127\.0\.0\.1:(\d+)\s+pid (\d+)")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is as good as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def free_ports_in_a_row(count: int, *offsets: int) -> int:
    """The first of `count` consecutive free ports (the brokers' ports), with the same run free
    at each of `offsets` from it (`--secure`: the SASL_SSL ports, once taken by another process
    and the secure cluster refused to start); all reserved, as free_port's."""
    return free_ports(count, *offsets)


class Dev:
    """A `minibroker dev` process and what it printed."""

    def __init__(
        self, data: Path, *extra: str, stdout=subprocess.PIPE, ports: tuple[int, int] | None = None
    ) -> None:
        self.data = data
        offsets = (SECURE_PORT_OFFSET,) if "--secure" in extra else ()
        self.first_port, self.controller_port = ports or (
            free_ports_in_a_row(3, *offsets),
            free_port(),
        )
        # The schema registry's ports: free ones, not dev's default 8081.
        self.registry_port = free_ports_in_a_row(3)
        if "--schema-registry-port" not in extra:
            extra = (*extra, "--schema-registry-port", str(self.registry_port))
        self.lines: list[str] = []
        self.nodes: dict[str, tuple[int, int]] = {}  # "broker 2" -> (port, pid)
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "minibroker", "dev", "--brokers", "3"),
                *("--data", str(data), "--first-port", str(self.first_port)),
                *("--controller-port", str(self.controller_port), *extra),
            ],
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
        )
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))
            if match := NODE_LINE.match(line):
                kind, node_id, port, pid = match.groups()
                self.nodes[f"{kind} {node_id}"] = (int(port), int(pid))

    def said(self, pattern: str) -> bool:
        return any(re.search(pattern, line) for line in self.lines)

    def wait_said(self, pattern: str, what: str, timeout: float = START_TIMEOUT) -> None:
        wait_for(lambda: self.said(pattern) or self.process.poll() is not None, timeout, what)
        assert self.said(pattern), "\n".join(self.lines)

    def pids(self) -> list[int]:
        return [pid for _port, pid in self.nodes.values()]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=60)


def brokers_listed(port: int) -> set[int]:
    try:
        return {broker.node_id for broker in request_metadata(port).brokers}
    except OSError:
        return set()


def started_dev(data: Path) -> Iterator[Dev]:
    started = Dev(data)
    started.wait_said("the cluster is ready", "the cluster to start")
    yield started
    started.stop()
    assert not [pid for pid in started.pids() if alive(pid)], "nodes outlived `minibroker dev`"


@pytest.fixture
def own_dev(tmp_path):
    """A cluster of the test's own, for a test that ends it (a signal, a killed supervisor)."""
    yield from started_dev(tmp_path / "data")


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    """One cluster for the module's tests that leave it running as they found it (a node
    killed is started again), each start of `minibroker dev` being 3 brokers, a controller and
    their registries: 20-40 s of the CI's 2 cores."""
    yield from started_dev(tmp_path_factory.mktemp("dev") / "data")


def test_the_banner_names_the_schema_registry_and_it_answers(dev):
    url = f"http://127.0.0.1:{dev.registry_port}"
    assert dev.said(f"schema registry: {re.escape(url)}"), "\n".join(dev.lines)
    for port in range(dev.registry_port, dev.registry_port + 3):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/subjects", timeout=30) as answer:
            assert json.load(answer) == []


def test_a_killed_broker_is_reported_and_restarted_on_enter(dev):
    port, pid = dev.nodes["broker 2"]
    os.kill(pid, signal.SIGKILL)
    dev.wait_said(r"broker 2 .* died with signal SIGKILL", "the death to be reported")
    assert dev.said("press Enter to start it again")
    first_port = dev.nodes["broker 1"][0]
    wait_for(lambda: brokers_listed(first_port) == {1, 3}, 30, "the cluster to fence broker 2")
    dev.process.stdin.write("\n")
    dev.process.stdin.flush()
    dev.wait_said("broker 2 is running again", "broker 2 to come back")
    wait_for(lambda: brokers_listed(first_port) == {1, 2, 3}, 30, "broker 2 to rejoin")
    assert dev.process.poll() is None


def test_a_killed_controller_is_restarted_and_the_brokers_carry_on(dev):
    _port, pid = dev.nodes["controller 0"]
    os.kill(pid, signal.SIGKILL)
    dev.wait_said(r"controller 0 .* died with signal SIGKILL", "the death to be reported")
    first_port = dev.nodes["broker 1"][0]
    assert brokers_listed(first_port) == {1, 2, 3}, "brokers keep serving without a controller"
    dev.process.stdin.write("\n")
    dev.process.stdin.flush()
    dev.wait_said("controller 0 is running again", "the controller to come back")
    # A topic can be created again: the brokers found the new controller.
    admin = pytest.importorskip("confluent_kafka.admin")
    client = admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{first_port}"})
    futures = client.create_topics([admin.NewTopic("after-restart", 1, 3)], request_timeout=20)
    futures["after-restart"].result(timeout=30)


def test_a_second_dev_over_the_same_data_refuses_at_once(dev):
    second = subprocess.run(
        [sys.executable, "-m", "minibroker", "dev", "--data", str(dev.data)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert second.returncode == 1
    assert "another minibroker dev" in second.stderr
    # The README's tour after its first command: say how to stop the first cluster.
    pid = dev.process.pid
    assert "stop it first (Ctrl-C in its terminal; started with `&`: `kill %1`" in second.stderr
    assert f"or `kill {pid}`)" in second.stderr
    assert "ready" not in second.stdout


def test_serve_in_the_data_folder_of_dev_is_refused(dev):
    """`minibroker serve` with its default log.dirs (./data) where `minibroker dev` keeps its
    cluster: refused before it writes anything there, saying what to do."""
    data = dev.data
    before = sorted(path.name for path in data.iterdir())
    serve = subprocess.run(
        [
            *(sys.executable, "-m", "minibroker", "serve"),
            *("--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}"),
        ],
        cwd=dev.data.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert serve.returncode == 2, serve.stderr
    assert serve.stderr == (
        "minibroker: data holds the data of a `minibroker dev` cluster (its nodes' folders):"
        " `minibroker serve` keeps its own data elsewhere; choose another folder (--override"
        " log.dirs=DIR) or run `minibroker dev` there\n"
    )
    assert sorted(path.name for path in data.iterdir()) == before
    assert not (data / "meta.properties").exists()


def test_a_port_in_use_is_named_before_anything_starts(dev, tmp_path):
    second = subprocess.run(
        [
            *(sys.executable, "-m", "minibroker", "dev", "--data", str(tmp_path / "other")),
            *("--first-port", str(dev.first_port), "--controller-port", str(free_port())),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert second.returncode == 1
    assert (
        f"127.0.0.1:{dev.first_port}, broker 1's port, is in use by a Kafka node, most likely of"
        " another `minibroker dev` still running: stop it first (Ctrl-C in its terminal;"
        " started with `&`: `kill %1` in its shell), or choose other ports with --first-port"
        " and --controller-port"
    ) in second.stderr


def test_a_port_held_by_another_program_is_named_as_such(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        second = subprocess.run(
            [
                *(sys.executable, "-m", "minibroker", "dev", "--data", str(tmp_path / "d")),
                *("--first-port", str(free_port()), "--controller-port", str(port)),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert second.returncode == 1
    assert (
        f"127.0.0.1:{port}, the controller's port, is in use by another program; or choose"
    ) in second.stderr


def test_nodes_die_with_a_killed_supervisor(own_dev):
    dev = own_dev
    dev.process.kill()
    dev.process.wait(timeout=10)
    wait_for(lambda: not any(alive(pid) for pid in dev.pids()), 30, "the nodes to stop")


def test_a_closed_pipe_does_not_break_the_shutdown(tmp_path):
    """`minibroker dev | tee log`, then Ctrl-C: tee is gone before the supervisor says that
    it is stopping the cluster."""
    reader_r, reader_w = os.pipe()
    started = Dev(tmp_path / "data", stdout=reader_w)
    os.close(reader_w)
    with os.fdopen(reader_r) as reader:
        banner = []
        while not banner or "Ctrl-C stops every node" not in banner[-1]:
            line = reader.readline()
            assert line, f"the supervisor stopped before its banner: {banner}"
            banner.append(line)
    started.process.send_signal(signal.SIGINT)
    exit_code = started.process.wait(timeout=60)
    stderr = "\n".join(started.lines)
    assert "Traceback" not in stderr, stderr
    assert exit_code == 0, stderr
    leftovers = subprocess.run(
        ["pgrep", "-f", f"log.dirs={tmp_path / 'data'}"], capture_output=True, text=True
    )
    assert leftovers.stdout.strip() == "", "nodes outlived `minibroker dev`"


def test_dev_starts_again_at_once_on_the_same_ports_and_sighup_stops_it(tmp_path):
    """The ports of a cluster stopped a moment ago still have connections in TIME_WAIT; they
    must not look taken (the port check once refused them). The second cluster is stopped
    with SIGHUP (a closed terminal), which stops every node cleanly as Ctrl-C does."""
    first = Dev(tmp_path / "data")
    first.wait_said("the cluster is ready", "the cluster to start")
    assert first.stop() == 0, "\n".join(first.lines)
    again = Dev(tmp_path / "data", ports=(first.first_port, first.controller_port))
    try:
        again.wait_said("the cluster is ready", "the cluster to start again")
    except BaseException:
        again.stop()  # the failure above is the one to report, not the stop's exit code
        raise
    again.process.send_signal(signal.SIGHUP)
    assert again.process.wait(timeout=60) == 0, "\n".join(again.lines)
    assert again.said("every node stopped cleanly"), "\n".join(again.lines)
    assert not [pid for pid in again.pids() if alive(pid)], "nodes outlived `minibroker dev`"


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_dev_secure_prints_client_settings_that_work(tmp_path):
    """`minibroker dev --secure`: the printed SASL_SSL bootstrap, password and CA let kcat
    produce and consume, and a wrong password is refused."""
    data = tmp_path / "data"
    dev = Dev(data, "--secure")
    try:
        dev.wait_said("the cluster is ready", "the secure cluster to start")
        text = "\n".join(dev.lines)
        bootstrap = re.search(r"secure bootstrap servers \(SASL_SSL\): (\S+)", text).group(1)
        password = re.search(r"user alice, password (\S+)", text).group(1)
        ca = re.search(r"CA certificate: (\S+)", text).group(1)
        assert Path(ca).is_file() and str(data) in ca
        settings = [
            *("-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512"),
            *("-X", "sasl.username=alice", "-X", f"ssl.ca.location={ca}"),
        ]

        def command(*args, password=password):
            return [
                *("kcat", "-b", bootstrap, "-m", "15", *settings),
                *("-X", f"sasl.password={password}", *args),
            ]

        def kcat(*args, stdin=None):
            return subprocess.run(
                command(*args), input=stdin, capture_output=True, timeout=60, check=False
            )

        produced = kcat("-P", "-t", "demo", stdin=b"hello\nsecure\n")
        assert produced.returncode == 0, produced.stderr.decode()
        consumed = kcat("-C", "-t", "demo", "-o", "beginning", "-e", "-q")
        assert sorted(consumed.stdout.decode().split()) == ["hello", "secure"]
        # Stopped once told: kcat would wait out its whole metadata timeout (-m) first.
        listed, _ = run_until_refused(
            command("-L", password="not-the-password"), "Authentication failed", 60
        )
        assert listed == "", listed
    except BaseException:
        dev.stop()  # the failure above is the one to report, not the stop's exit code
        raise
    assert dev.stop() == 0, "\n".join(dev.lines)


@pytest.mark.skipif(not zookeeper_installed(), reason="ZooKeeper is not installed")
def test_zookeeper_mode_runs_its_own_zookeeper_and_stops_it(tmp_path):
    zookeeper_port = free_port()
    dev = Dev(tmp_path / "data", "--zookeeper", "--zookeeper-port", str(zookeeper_port))
    try:
        dev.wait_said("the cluster is ready", "the cluster to start")
        assert dev.said(rf"zookeeper\s+127\.0\.0\.1:{zookeeper_port}/minibroker")
        assert "controller 0" not in dev.nodes
        first_port = dev.nodes["broker 1"][0]
        assert brokers_listed(first_port) == {1, 2, 3}
        admin = pytest.importorskip("confluent_kafka.admin")
        client = admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{first_port}"})
        futures = client.create_topics([admin.NewTopic("elected", 3, 3)], request_timeout=20)
        futures["elected"].result(timeout=30)
    except BaseException:
        dev.stop()  # the failure above is the one to report, not the stop's exit code
        raise
    assert dev.stop() == 0, "\n".join(dev.lines)
    assert dev.said("every node stopped cleanly")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", zookeeper_port), timeout=2).close()


@pytest.mark.parametrize("first, second", [("kraft", "zookeeper"), ("zookeeper", "kraft")])
def test_data_of_the_other_mode_is_refused_saying_what_to_do(tmp_path, first, second):
    """The README's order (`minibroker dev`, then `minibroker dev --zookeeper`) in one
    directory: the brokers' meta.properties name the first cluster, which the second mode
    cannot join; refused before anything starts, with what to do instead."""
    if "zookeeper" in (first, second) and not zookeeper_installed():
        pytest.skip("ZooKeeper is not installed")
    data = tmp_path / "data"
    (data / "broker-1").mkdir(parents=True)
    (data / "broker-1" / "meta.properties").write_text("cluster.id=first\nnode.id=1\n")
    if first == "zookeeper":
        (data / "zookeeper" / "data").mkdir(parents=True)
    flags = ["--zookeeper", "--zookeeper-port", str(free_port())] if second == "zookeeper" else []
    finished = subprocess.run(
        [
            *(sys.executable, "-m", "minibroker", "dev", "--data", str(data)),
            *("--first-port", str(free_ports_in_a_row(3)), "--controller-port", str(free_port())),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 1
    assert (
        f"use another data directory (`minibroker dev{' --zookeeper' if flags else ''} --data"
        in (finished.stderr)
    )
    assert f"or remove {data} to start afresh" in finished.stderr
    assert "starting" not in finished.stdout


# The session leader of a pseudo-terminal, like a shell: it runs `minibroker dev` in a
# background process group (`minibroker dev &`) and stays in the foreground itself.
_SHELL = """
import fcntl, os, subprocess, sys, termios
os.setsid()
terminal = os.open(sys.argv[1], os.O_RDWR)
fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)
child = subprocess.Popen(sys.argv[3:], stdin=terminal, process_group=0)
with open(sys.argv[2], "w") as pid_file:
    pid_file.write(str(child.pid))
sys.exit(child.wait())
"""


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")


def test_a_backgrounded_dev_is_not_stopped_by_the_terminal_when_a_node_dies(tmp_path):
    """`minibroker dev &` and a kill -9 of a broker: the supervisor must not read the
    terminal from the background (SIGTTIN: "Stopped (tty input)"); it reports the death,
    says how to restart and stop it, and keeps supervising; `kill` stops it cleanly."""
    master, slave = os.openpty()
    pid_path = tmp_path / "dev.pid"
    first_port, controller_port = free_ports_in_a_row(3), free_port()
    log = tmp_path / "dev.log"
    with log.open("w") as output:
        shell = subprocess.Popen(
            [
                *(sys.executable, "-c", _SHELL, os.ttyname(slave), str(pid_path)),
                *(sys.executable, "-m", "minibroker", "dev", "--brokers", "3"),
                *("--data", str(tmp_path / "data"), "--first-port", str(first_port)),
                *("--controller-port", str(controller_port)),
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    dev_pid = int(wait_for(lambda: pid_path.exists() and pid_path.read_text(), 10, "the pid"))
    try:
        wait_for(lambda: "the cluster is ready" in log.read_text(), START_TIMEOUT, "the cluster")
        assert "kill %1" in log.read_text()
        pid = next(
            int(match.group(4))
            for line in log.read_text().splitlines()
            if (match := NODE_LINE.match(line)) and match.group(1, 2) == ("broker", "2")
        )
        os.write(master, b"ls\n")  # the user types at the shell: input waits on the terminal
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: "died with signal SIGKILL" in log.read_text(), 30, "the death report")
        text = log.read_text()
        assert "runs in the background: bring it back with `fg`" in text, text
        for _ in range(6):  # a few liveness periods with input pending on the terminal
            assert not _stopped(dev_pid), "the supervisor was stopped by the terminal"
            time.sleep(0.5)
        assert shell.poll() is None
        os.kill(dev_pid, signal.SIGTERM)
        assert shell.wait(timeout=60) == 0, log.read_text()
        assert "every node stopped cleanly" in log.read_text()
    finally:
        if shell.poll() is None:
            os.kill(dev_pid, signal.SIGKILL)
            shell.kill()
        os.close(master)
        os.close(slave)
