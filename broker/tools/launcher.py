"""Start, stop and disturb broker processes on this machine.

One launcher serves the integration tests, `minibroker dev` and the benchmarks, so that all of
them run the broker exactly as an operator would: a separate process started from the command
line, judged ready only when it answers a real Kafka request. It is deliberately synchronous
(plain subprocesses, and the blocking wire client of minibroker.tools.wire; no trio) so that
pytest fixtures and scripts can use it directly.

`BrokerProcess` runs one node: a single broker that is its own controller (no
`process.roles`), or one role of a cluster. `Cluster` runs a controller and N brokers, KRaft
style, or N brokers on ZooKeeper (`zookeeper_connect`), and answers questions about leaders
and ISRs the way a client would: by Metadata. `ZooKeeperServer` runs a local ZooKeeper from
the Debian package for the ZooKeeper mode.

No node outlives the interpreter that launched it: whatever it left running when it exits (an
interrupted teardown, a KeyboardInterrupt, a test run stopped by SIGTERM, which the suite turns
into a KeyboardInterrupt) is stopped then by `stop_leftover_processes`, an atexit hook. Only a
launcher killed outright (SIGKILL) leaves nodes behind, unless they were started
`die_with_parent` (as `minibroker dev` starts them) or from the fork server, which go with it.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import (
    MetadataResponse,
    MetadataResponsePartition,
)
from kio.schema.types import TopicName

from minibroker.tools.forkserver import ForkedProcess, fork_server
from minibroker.tools.forkserver import terminate_with_parent as _terminate_with_parent
from minibroker.tools.wire import answers_api_versions, connect

READINESS_CLIENT_ID = "minibroker-launcher"
LOG_TAIL_LINES = 25

BROKER_ROLE = "broker"
CONTROLLER_ROLE = "controller"
CONTROLLER_NODE_ID = 0
CLUSTER_READY_TIMEOUT = 60.0
METADATA_TIMEOUT = 5.0
POLL_INTERVAL = 0.05


# Every node process this interpreter started as a subprocess (forked nodes go with the fork
# server), for stop_leftover_processes.
_LAUNCHED: list[subprocess.Popen[bytes]] = []
LEFTOVER_STOP_TIMEOUT = 10.0


def _launched(process: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    _LAUNCHED[:] = [p for p in _LAUNCHED if p.poll() is None]
    _LAUNCHED.append(process)
    return process


@atexit.register
def stop_leftover_processes() -> list[int]:
    """SIGTERM every node process this interpreter started that still runs, SIGKILL those
    still running after LEFTOVER_STOP_TIMEOUT seconds; their pids. Runs at exit."""
    running = [p for p in _LAUNCHED if p.poll() is None]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
            process.send_signal(signal.SIGCONT)  # a paused node would hold the SIGTERM
    deadline = time.monotonic() + LEFTOVER_STOP_TIMEOUT
    for process in running:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    _LAUNCHED.clear()
    return [process.pid for process in running]


class BrokerStartError(RuntimeError):
    """The broker exited or stayed silent instead of becoming ready."""


# Ports handed out by free_port, machine-wide, so that two launchers (pytest-xdist workers, two
# test runs side by side) never give the same port to two nodes in the moment between the
# choice and the node's bind. A port is held this long: a node binds its port within seconds.
PORT_REGISTRY = Path(tempfile.gettempdir()) / "minibroker-ports.json"
PORT_RESERVATION_SECONDS = 120.0
FREE_PORT_ATTEMPTS = 256
# The lowest port free_port hands out. Ports are chosen from here up to the kernel's ephemeral
# range (net.ipv4.ip_local_port_range), never inside it: a client's outgoing connection takes
# its local port from that range, so a port chosen there can be taken by any client between the
# choice and the node's bind ("Address already in use", seen in CI at 39516 and 60926).
FIRST_CHOSEN_PORT = 10000
# Not the module `random`: a test that seeds it (the fault tests do) would make every worker
# try the same ports in the same order.
_PORT_RANDOM = random.SystemRandom()


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now, that no other
    launcher on this machine handed out in the last PORT_RESERVATION_SECONDS, and that no
    outgoing connection can take (it lies below the kernel's ephemeral range)."""
    return free_ports(1)


def free_ports(count: int, *offsets: int) -> int:
    """The first of `count` consecutive free ports (as free_port's), with the same run free at
    each of `offsets` from it too (`minibroker dev --secure` puts its SASL_SSL listeners at a
    fixed offset); the whole run is reserved.

    The choice is recorded in PORT_REGISTRY under an exclusive lock, and a port another
    launcher recorded recently is passed over. Without the registry, two processes asking at
    the same moment could both be told the same port (it is free for both until one of the
    nodes binds it), which pytest-xdist's workers did.
    """
    try:
        registry = open(PORT_REGISTRY, "a+")  # noqa: SIM115 - closed below
    except OSError:
        return _choose_ports(count, offsets, {})
    with registry:
        fcntl.flock(registry, fcntl.LOCK_EX)
        registry.seek(0)
        now = time.time()
        try:
            held = {int(port): until for port, until in json.loads(registry.read()).items()}
        except ValueError:
            held = {}
        held = {port: until for port, until in held.items() if until > now}
        first = _choose_ports(count, offsets, held)
        for port in _run(first, count, offsets):
            held[port] = now + PORT_RESERVATION_SECONDS
        registry.seek(0)
        registry.truncate()
        registry.write(json.dumps(held))
        registry.flush()
    return first


def _run(first: int, count: int, offsets: tuple[int, ...]) -> list[int]:
    return [p + offset for offset in (0, *offsets) for p in range(first, first + count)]


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _choose_ports(count: int, offsets: tuple[int, ...], held: Mapping[int, float]) -> int:
    low, _high = _ephemeral_range()
    top = low - count - max(offsets, default=0)
    if top <= FIRST_CHOSEN_PORT:  # an unusual range: the kernel's choice, as before
        return _kernel_port()
    for _ in range(FREE_PORT_ATTEMPTS):
        first = _PORT_RANDOM.randrange(FIRST_CHOSEN_PORT, top)
        run = _run(first, count, offsets)
        if not any(port in held for port in run) and all(map(_bindable, run)):
            return first
    raise OSError(
        f"no {count} free consecutive port(s) below {low} after {FREE_PORT_ATTEMPTS} tries"
    )


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _kernel_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class BrokerProcess:
    """One node process and the configuration it was started with, so it can be restarted
    on the same port and log directory (which is what crash-recovery tests need).

    `role` is `process.roles`: None for a single broker that is its own controller (the
    default, no cluster around it), BROKER_ROLE or CONTROLLER_ROLE for one node of a cluster.
    """

    def __init__(
        self,
        node_id: int,
        log_dir: Path,
        port: int,
        overrides: Mapping[str, object],
        role: str | None = None,
        die_with_parent: bool = False,
        extra_listeners: Mapping[str, int] | None = None,
        advertised_ports: Mapping[str, int] | None = None,
    ):
        self.node_id = node_id
        self.log_dir = Path(log_dir)
        self.port = port
        self.overrides = dict(overrides)
        self.role = role
        # Listeners besides the PLAINTEXT one, by name (e.g. a SASL_SSL inter-broker
        # listener): their ports stay the same across restarts, as the PLAINTEXT port does.
        self.extra_listeners = dict(extra_listeners or {})
        # Where clients are told each listener is, by name, when that is not where it listens
        # (minibroker.testing puts a proxy in front of every listener).
        self.advertised_ports = dict(advertised_ports or {})
        self.stderr_path = self.log_dir.parent / f"{self.kind}-{node_id}.log"
        self.paused = False
        # `minibroker dev` sets this: its nodes get SIGTERM when it exits, however it exits.
        self.die_with_parent = die_with_parent
        # Added to the node's environment at its next launch (a test runs a node under
        # libfaketime this way).
        self.extra_env: dict[str, str] = {}
        # Forked from the fork server (minibroker.tools.forkserver), its imports already done,
        # instead of started as a new interpreter; not with extra_env or die_with_parent,
        # which need a process of its own from the start.
        self.fork = False
        # The schema registry's HTTP port (schema.registry.listeners), when it serves one.
        self.schema_registry_port: int | None = None
        self._process: subprocess.Popen[bytes] | ForkedProcess | None = None

    @classmethod
    def start(
        cls,
        node_id: int,
        log_dir: Path,
        port: int | None = None,
        overrides: dict[str, object] | None = None,
        role: str | None = None,
    ) -> BrokerProcess:
        """Launch a node; call `wait_ready` before talking to it."""
        broker = cls(node_id, log_dir, port or free_port(), overrides or {}, role)
        broker._launch()
        return broker

    @property
    def kind(self) -> str:
        """What the node is called in logs and messages: "controller" or "broker"."""
        return CONTROLLER_ROLE if self.role == CONTROLLER_ROLE else BROKER_ROLE

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def schema_registry_url(self) -> str | None:
        if self.schema_registry_port is None:
            return None
        return f"http://127.0.0.1:{self.schema_registry_port}"

    @property
    def pid(self) -> int:
        return self._running_process().pid

    @property
    def exit_code(self) -> int | None:
        """The process's exit status once it has exited (negative: killed by that signal)."""
        return None if self._process is None else self._process.poll()

    @property
    def started(self) -> bool:
        """Whether the node was ever launched (it may have exited since)."""
        return self._process is not None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def properties(self) -> dict[str, str]:
        """The full set of `--override` properties: ours first, the caller's win.

        A controller-only node listens on a CONTROLLER listener and advertises nothing to
        clients, as in KRaft; every other node serves clients on PLAINTEXT.
        """
        properties = {"node.id": str(self.node_id)}
        if self.role is not None:
            properties["process.roles"] = self.role
        if self.role == CONTROLLER_ROLE:
            properties["listeners"] = f"CONTROLLER://{self.bootstrap}"
        else:
            ports = {"PLAINTEXT": self.port, **self.extra_listeners}
            properties["listeners"] = ",".join(
                f"{name}://127.0.0.1:{port}" for name, port in ports.items()
            )
            properties["advertised.listeners"] = ",".join(
                f"{name}://127.0.0.1:{self.advertised_ports.get(name, port)}"
                for name, port in ports.items()
            )
        if self.schema_registry_port is not None and self.role != CONTROLLER_ROLE:
            properties["schema.registry.listeners"] = self.schema_registry_url or ""
        properties["log.dirs"] = str(self.log_dir)
        properties.update({key: str(value) for key, value in self.overrides.items()})
        return properties

    def command(self) -> list[str]:
        """The command line that runs this node, as the launcher runs it."""
        command = [sys.executable, "-m", "minibroker", "serve"]
        for key, value in self.properties().items():
            command += ["--override", f"{key}={value}"]
        return command

    def _launch(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        command = self.command()
        # Appending keeps the log of a killed incarnation next to the one of its restart.
        with open(self.stderr_path, "ab") as stderr:
            stderr.write(f"--- launcher: {' '.join(command)}\n".encode())
            stderr.flush()
            if self.fork and not self.extra_env and not self.die_with_parent:
                # command is [python, -m, minibroker, serve, ...]: the node's own arguments.
                self._process = fork_server().spawn(command[3:], self.stderr_path, {})
                self.paused = False
                return
            # A process group of its own keeps a terminal's Ctrl-C away from the node: the
            # launcher's owner (pytest, `minibroker dev`) decides when and how it stops, so a
            # Ctrl-C becomes an orderly SIGTERM instead of every node dying at once.
            self._process = _launched(
                subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=stderr,
                    stderr=stderr,
                    env={**os.environ, "PYTHONUNBUFFERED": "1", **self.extra_env},
                    process_group=0,
                    preexec_fn=_terminate_with_parent(os.getpid())
                    if self.die_with_parent
                    else None,
                )
            )
        self.paused = False

    def _running_process(self) -> subprocess.Popen[bytes] | ForkedProcess:
        if self._process is None:
            raise RuntimeError(f"broker {self.node_id} was never started")
        return self._process

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last whole lines of the node's output, for messages that explain a failure."""
        try:
            with open(self.stderr_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 200 * lines))
                data = log.read()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(data.decode(errors="replace").splitlines()[-lines:])

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until the broker answers ApiVersions v0 correctly (30 s by default: a restart
        on 2 cores under the parallel suite's load took more than 15, in the fresh-clone CI run
        of 48e8f49).

        A listening socket alone is not enough: the broker must read a frame and answer it, which
        is the first thing every Kafka client does.
        """
        process = self._running_process()
        deadline = time.monotonic() + timeout
        while True:
            exit_code = process.poll()
            if exit_code is not None:
                raise BrokerStartError(
                    f"{self.kind} {self.node_id} exited with code {exit_code} before it was"
                    f" ready; log tail:\n{self.log_tail()}"
                )
            if self._answers_api_versions(deadline):
                return
            if time.monotonic() >= deadline:
                raise BrokerStartError(
                    f"{self.kind} {self.node_id} did not answer ApiVersions on {self.bootstrap}"
                    f" within {timeout}s; log tail:\n{self.log_tail()}"
                )
            time.sleep(POLL_INTERVAL)

    def _answers_api_versions(self, deadline: float) -> bool:
        remaining = max(0.1, min(2.0, deadline - time.monotonic()))
        return answers_api_versions(("127.0.0.1", self.port), remaining, READINESS_CLIENT_ID)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM (a clean shutdown) and wait; return the exit code, 0 when clean.

        A broker that ignores SIGTERM is killed and reported, so a hung shutdown fails a test
        instead of hanging it.
        """
        self.terminate()
        process = self._running_process()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise BrokerStartError(
                f"{self.kind} {self.node_id} ignored SIGTERM for {timeout}s and was killed;"
                f" log tail:\n{self.log_tail()}"
            ) from None
        return process.wait()

    def terminate(self) -> None:
        """Send SIGTERM without waiting, so that several nodes can shut down side by side."""
        process = self._running_process()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            # A paused node would hold the SIGTERM until it is continued.
            process.send_signal(signal.SIGCONT)
            self.paused = False

    def kill(self) -> int:
        """SIGKILL, as a crash: no shutdown code runs. Returns the exit code (-9)."""
        process = self._running_process()
        if process.poll() is None:
            process.kill()
        return process.wait()

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing, like a stalled machine."""
        self._running_process().send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self._running_process().send_signal(signal.SIGCONT)
        self.paused = False

    def restart(self) -> None:
        """Stop the broker if it still runs, then start it again on the same port and log
        directory; call `wait_ready` before talking to it."""
        if self.running:
            self.stop()
        self._launch()


def request_metadata(
    port: int,
    topics: Iterable[str] | None = None,
    timeout: float = METADATA_TIMEOUT,
    host: str = "127.0.0.1",
) -> MetadataResponse:
    """Ask the node on `host`:`port` for Metadata v12 (all topics when `topics` is None),
    never creating a topic. Raises OSError when the node cannot be reached, goes silent or
    answers with something else (wire.WireError)."""
    request = MetadataRequest(
        topics=None
        if topics is None
        else tuple(MetadataRequestTopic(topic_id=None, name=TopicName(name)) for name in topics),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with connect((host, port), timeout, client_id=READINESS_CLIENT_ID) as client:
        return client.call(request)


# The Debian package's server jar; its manifest names the jars it needs.
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# A short tick lets tests ask for short sessions: ZooKeeper grants between 2 and 20 ticks
# unless told otherwise, and the broker's zookeeper.session.timeout.ms must be in range.
ZOOKEEPER_TICK_MS = 200


def zookeeper_installed() -> bool:
    return ZOOKEEPER_JAR.is_file() and shutil.which("java") is not None


class ZooKeeperServer:
    """One standalone ZooKeeper server process (the Debian package's), on a port and a data
    directory of its own, so it can be stopped, killed and started again on the same data."""

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        die_with_parent: bool = False,
        host: str = "127.0.0.1",
        command_prefix: tuple[str, ...] = (),
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        # The fault harness runs it in a network namespace of its own: the address it
        # listens on there, and the `ip netns exec` that puts it there.
        self.host = host
        self.command_prefix = command_prefix
        self.log_path = self.data_dir.parent / "zookeeper.log"
        # `minibroker dev` sets this, as for its brokers.
        self.die_with_parent = die_with_parent
        self._process: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(
        cls, data_dir: Path, port: int | None = None, die_with_parent: bool = False
    ) -> ZooKeeperServer:
        server = cls(data_dir, port, die_with_parent)
        server.launch()
        server.wait_ready()
        return server

    def connect_string(self, chroot: str = "/minibroker") -> str:
        """What brokers take as `zookeeper.connect`."""
        return f"{self.host}:{self.port}{chroot}"

    def launch(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir.parent / "zoo.cfg"
        config.write_text(
            f"tickTime={ZOOKEEPER_TICK_MS}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "admin.enableServer=false\n"
            "maxSessionTimeout=60000\n"
        )
        with open(self.log_path, "ab") as output:
            self._process = _launched(
                subprocess.Popen(
                    [
                        *self.command_prefix,
                        "java",
                        "-cp",
                        str(ZOOKEEPER_JAR),
                        ZOOKEEPER_MAIN,
                        str(config),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=output,
                    process_group=0,
                    preexec_fn=_terminate_with_parent(os.getpid())
                    if self.die_with_parent
                    else None,
                )
            )

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until the server accepts connections; BrokerStartError if it does not."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((self.host, self.port), timeout=1.0):
                    return
            except OSError:
                if not self.running or time.monotonic() >= deadline:
                    raise BrokerStartError(
                        f"ZooKeeper on port {self.port} is not accepting connections;"
                        f" see {self.log_path}"
                    ) from None
                time.sleep(POLL_INTERVAL)

    def stop(self, timeout: float = 20.0) -> None:
        if self.running:
            assert self._process is not None  # running
            self._process.terminate()
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def kill(self) -> None:
        if self.running:
            assert self._process is not None  # running
            self._process.kill()
            self._process.wait()


def _broker_processes(
    base_dir: Path,
    brokers: int,
    shared: Mapping[str, object],
    ports: Mapping[int, int],
    die_with_parent: bool,
    broker_listeners: Mapping[str, int | None] | None,
    role: str | None = None,
    advertised_ports: Mapping[int, Mapping[str, int]] | None = None,
    listener_ports: Mapping[int, Mapping[str, int]] | None = None,
    schema_registry: bool | Mapping[int, int] = False,
    node_overrides: Mapping[int, Mapping[str, object]] | None = None,
) -> dict[int, BrokerProcess]:
    """Brokers 1..`brokers` (not launched yet), each on its port from `ports` or a free one,
    with its data in `base_dir/broker-<id>`; `node_overrides` adds a broker's own properties
    to the shared ones (its `broker.rack`, say)."""
    processes = {}
    for node_id in range(1, brokers + 1):
        port = ports.get(node_id) or free_port()
        processes[node_id] = BrokerProcess(
            node_id,
            base_dir / f"broker-{node_id}",
            port,
            {**shared, **(node_overrides or {}).get(node_id, {})},
            role=role,
            die_with_parent=die_with_parent,
            extra_listeners={
                **_extra_listeners(broker_listeners, port),
                **(listener_ports or {}).get(node_id, {}),
            },
            advertised_ports=(advertised_ports or {}).get(node_id),
        )
        if schema_registry is not False:
            chosen = {} if schema_registry is True else schema_registry
            processes[node_id].schema_registry_port = chosen.get(node_id) or free_port()
    return processes


def _extra_listeners(
    broker_listeners: Mapping[str, int | None] | None, port: int
) -> dict[str, int]:
    """A broker's extra listeners: each at its port plus an offset, or a free port."""
    return {
        name: free_port() if offset is None else port + offset
        for name, offset in (broker_listeners or {}).items()
    }


class Cluster:
    """A controller and N brokers as separate processes, KRaft style; or, given
    `zookeeper_connect`, N brokers on ZooKeeper, each of which may be elected controller
    (`controller` is then None).

    The controller is node 0 and listens on a CONTROLLER listener; brokers are nodes 1..N and
    find it through `controller.quorum.voters`. Every question about leadership is answered by
    Metadata from a broker, exactly what a client would be told, so tests judge the cluster by
    its behaviour rather than by its internals.
    """

    def __init__(self, controller: BrokerProcess | None, brokers: dict[int, BrokerProcess]):
        self.controller = controller
        self.brokers = brokers

    @classmethod
    def start(
        cls,
        base_dir: Path,
        brokers: int = 3,
        overrides: Mapping[str, object] | None = None,
        ports: Mapping[int, int] | None = None,
        timeout: float = CLUSTER_READY_TIMEOUT,
        die_with_parent: bool = False,
        broker_listeners: Mapping[str, int | None] | None = None,
        zookeeper_connect: str | None = None,
        advertised_ports: Mapping[int, Mapping[str, int]] | None = None,
        listener_ports: Mapping[int, Mapping[str, int]] | None = None,
        all_at_once: bool = False,
        single_node: bool = False,
        fork: bool = False,
        schema_registry: bool | Mapping[int, int] = False,
        node_overrides: Mapping[int, Mapping[str, object]] | None = None,
    ) -> Cluster:
        """Start the controller, then the brokers, and return once the cluster is ready.

        `overrides` go to every node, as one shared server.properties would (the controller
        needs the broker session timeout, for instance). `ports` maps node ids (0 is the
        controller) to ports; free ports are picked for the rest. Data lives in
        `base_dir/controller` and `base_dir/broker-<id>`, each node's output next to it in
        `<kind>-<id>.log`. If anything fails or is interrupted, every node started so far is
        killed before the error propagates, so that no process outlives a failed start.
        `broker_listeners` names listeners every broker adds next to the PLAINTEXT one that
        the readiness checks use (a secured inter-broker listener, say), each on its broker's
        port plus an offset, or on a free port when the offset is None; `listener_ports`
        (node id -> {listener name: port}) gives a broker's extra listeners their ports.

        `advertised_ports` maps node ids to {listener name: port}: where the other nodes and
        clients are told to reach that listener instead of the port it binds (a proxy in front
        of it; for the controller, node 0, the port brokers find in controller.quorum.voters,
        under the name "CONTROLLER"). `all_at_once` launches the brokers together with the
        controller instead of after it answers (brokers retry their registration until it
        does), which saves the controller's start-up time. `single_node` (with brokers=1)
        starts one node that is its own controller, and no controller process. `fork`
        forks the nodes from the fork server (minibroker.tools.forkserver) instead of
        starting an interpreter each: the imports are paid once. `schema_registry` serves
        the schema registry on every broker (True: on free ports; or node id -> port, free
        ports for the others); not in the ZooKeeper mode yet. `node_overrides` (broker id ->
        properties) adds a broker's own properties to `overrides` (a `broker.rack` each).
        """
        base_dir = Path(base_dir)
        ports = dict(ports or {})
        advertised_ports = advertised_ports or {}
        if single_node:
            if brokers != 1 or zookeeper_connect is not None:
                raise ValueError("single_node is one broker that is its own controller")
            cluster = cls(
                None,
                _broker_processes(
                    base_dir,
                    1,
                    overrides or {},
                    ports,
                    die_with_parent,
                    broker_listeners,
                    None,
                    advertised_ports,
                    listener_ports,
                    schema_registry,
                    node_overrides,
                ),
            )
            cluster._launch(timeout, fork=fork)
            return cluster
        if zookeeper_connect is not None:
            return cls._start_on_zookeeper(
                base_dir,
                brokers,
                overrides,
                ports,
                timeout,
                die_with_parent,
                zookeeper_connect,
                broker_listeners,
                advertised_ports,
                listener_ports,
                fork,
                node_overrides,
            )
        controller_port = ports.get(CONTROLLER_NODE_ID) or free_port()
        voter_port = advertised_ports.get(CONTROLLER_NODE_ID, {}).get("CONTROLLER", controller_port)
        shared = {
            **(overrides or {}),
            "controller.quorum.voters": f"{CONTROLLER_NODE_ID}@127.0.0.1:{voter_port}",
        }
        controller = BrokerProcess(
            CONTROLLER_NODE_ID,
            base_dir / CONTROLLER_ROLE,
            controller_port,
            shared,
            role=CONTROLLER_ROLE,
            die_with_parent=die_with_parent,
        )
        cluster = cls(
            controller,
            _broker_processes(
                base_dir,
                brokers,
                shared,
                ports,
                die_with_parent,
                broker_listeners,
                BROKER_ROLE,
                advertised_ports,
                listener_ports,
                schema_registry,
                node_overrides,
            ),
        )
        cluster._launch(timeout, all_at_once, fork)
        return cluster

    @classmethod
    def _start_on_zookeeper(
        cls,
        base_dir,
        brokers,
        overrides,
        ports,
        timeout,
        die_with_parent,
        zookeeper_connect,
        broker_listeners,
        advertised_ports=None,
        listener_ports=None,
        fork=False,
        node_overrides=None,
    ) -> Cluster:
        shared = {**(overrides or {}), "zookeeper.connect": zookeeper_connect}
        cluster = cls(
            None,
            _broker_processes(
                base_dir,
                brokers,
                shared,
                ports,
                die_with_parent,
                broker_listeners,
                advertised_ports=advertised_ports,
                listener_ports=listener_ports,
                node_overrides=node_overrides,
            ),
        )
        cluster._launch(timeout, fork=fork)
        return cluster

    def _launch(self, timeout: float, all_at_once: bool = False, fork: bool = False) -> None:
        """Launch the controller (if any) and wait until it answers (unless `all_at_once`),
        then the brokers, until the cluster is ready; if anything fails or is interrupted,
        kill every node started so far before the error propagates, so that no process
        outlives a failed start."""
        launched: list[BrokerProcess] = []
        for node in self.nodes:
            node.fork = fork
        try:
            if self.controller is not None:
                self.controller._launch()
                launched.append(self.controller)
                if not all_at_once:
                    self.controller.wait_ready(timeout)
            for broker in self.brokers.values():
                broker._launch()
                launched.append(broker)
            if all_at_once and self.controller is not None:
                self.controller.wait_ready(timeout)
            self.wait_ready(timeout)
        except BaseException:
            for node in launched:
                node.kill()
            raise

    @property
    def nodes(self) -> list[BrokerProcess]:
        """The controller (if there is one of its own) first, then the brokers by id."""
        controller = [] if self.controller is None else [self.controller]
        return [*controller, *self.brokers.values()]

    @property
    def bootstrap(self) -> str:
        """Every broker's address, as clients' bootstrap.servers takes them."""
        return ",".join(broker.bootstrap for broker in self.brokers.values())

    def wait_ready(self, timeout: float = CLUSTER_READY_TIMEOUT) -> None:
        """Block until every running broker answers ApiVersions and its Metadata lists every
        running broker: only then can a client bootstrapped from any of them see the whole
        cluster. Raises BrokerStartError naming what is missing."""
        deadline = time.monotonic() + timeout
        running = [broker for broker in self.brokers.values() if broker.running]
        for broker in running:
            broker.wait_ready(max(0.1, deadline - time.monotonic()))
        expected = {broker.node_id for broker in running}
        for broker in running:
            listed: set[int] = set()
            while listed != expected:
                try:
                    response = request_metadata(broker.port)
                    listed = {entry.node_id for entry in response.brokers}
                except OSError:
                    listed = set()
                if listed == expected:
                    break
                if not broker.running or time.monotonic() >= deadline:
                    raise BrokerStartError(
                        f"Metadata from broker {broker.node_id} lists brokers {sorted(listed)},"
                        f" not {sorted(expected)}, after {timeout}s; log tail:\n"
                        f"{broker.log_tail()}"
                    )
                time.sleep(POLL_INTERVAL)

    def stop(self) -> dict[int, int]:
        """SIGTERM every node and wait; return each node's exit code by node id.

        The brokers stop side by side (one after another would move leadership around at
        every step), then the controller, so that brokers can still reach it while they shut
        down. A node that hangs is killed after the others were stopped, and reported by a
        BrokerStartError.
        """
        exit_codes: dict[int, int] = {}
        hung: list[str] = []
        controller = [] if self.controller is None else [self.controller]
        for group in (list(self.brokers.values()), controller):
            for node in group:
                if node.started:
                    node.terminate()
            for node in group:
                if not node.started:
                    continue
                try:
                    exit_codes[node.node_id] = node.stop()
                except BrokerStartError as error:
                    hung.append(str(error))
                    exit_codes[node.node_id] = node.kill()
        if hung:
            raise BrokerStartError("\n".join(hung))
        return exit_codes

    def metadata(
        self, topics: Iterable[str] | None = None, via: int | None = None
    ) -> MetadataResponse | None:
        """Metadata from broker `via`, or from the first running, unpaused broker that answers;
        None when none does. A paused broker is skipped because it would only time out."""
        candidates = [self.brokers[via]] if via is not None else self.brokers.values()
        for broker in candidates:
            if not broker.running or broker.paused:
                continue
            try:
                return request_metadata(broker.port, topics)
            except OSError:
                continue
        return None

    def partition_metadata(
        self, topic: str, partition: int, via: int | None = None
    ) -> MetadataResponsePartition | None:
        """What Metadata says about one partition (leader, leader epoch, replicas, ISR), or
        None while no reachable broker knows it."""
        response = self.metadata([topic], via)
        if response is None:
            return None
        for entry in response.topics:
            if entry.name != topic or entry.error_code != 0:
                continue
            for state in entry.partitions:
                if state.partition_index == partition:
                    return state
        return None

    def leader_of(self, topic: str, partition: int, via: int | None = None) -> int | None:
        """The leader's node id as Metadata reports it (-1 while the partition is offline), or
        None while no reachable broker knows the partition."""
        state = self.partition_metadata(topic, partition, via)
        return None if state is None else int(state.leader_id)

    def isr_of(self, topic: str, partition: int, via: int | None = None) -> frozenset[int] | None:
        """The ISR as Metadata reports it, or None while no reachable broker knows it."""
        state = self.partition_metadata(topic, partition, via)
        return None if state is None else frozenset(int(node) for node in state.isr_nodes)

    def wait_for_isr(
        self, topic: str, partition: int, expected: Iterable[int], timeout: float = 30.0
    ) -> float:
        """Block until every running, unpaused broker's Metadata reports exactly `expected` as
        the ISR; return the seconds it took. Raises TimeoutError with each broker's last view.

        Asking every broker, not just one, matters: a broker that was paused or restarted may
        still answer from its old metadata for a moment, and clients bootstrapped from it would
        act on that.
        """
        wanted = frozenset(expected)
        started = time.monotonic()
        deadline = started + timeout
        while True:
            views = {
                broker.node_id: self.isr_of(topic, partition, via=broker.node_id)
                for broker in self.brokers.values()
                if broker.running and not broker.paused
            }
            if views and all(isr == wanted for isr in views.values()):
                return time.monotonic() - started
            if time.monotonic() >= deadline:
                seen = {
                    node: sorted(isr) if isr is not None else "unknown"
                    for node, isr in views.items()
                }
                raise TimeoutError(
                    f"ISR of {topic}-{partition} by broker: {seen}, not {sorted(wanted)},"
                    f" after {timeout}s"
                )
            time.sleep(POLL_INTERVAL)
