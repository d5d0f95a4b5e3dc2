"""`minibroker dev`: a local cluster in one command, a controller and brokers on 127.0.0.1
(or, with `--zookeeper`, brokers that elect their controller through ZooKeeper).

It runs the same launcher as the tests, so what a developer pokes at by hand is exactly what
the cluster tests exercise. It supervises rather than serves: it starts the nodes, says where
they are, and stops them all in order on Ctrl-C, SIGTERM or SIGHUP (a closed terminal).

A node that dies on its own does not end the session: killing a broker to watch failover is
the first thing people do with a local cluster. The supervisor says which node died, with
what, and the end of its log; the others keep running; Enter (or `--restart-dead`, at once)
starts the dead nodes again on their ports and data, and they rejoin.

Nodes die with the supervisor however it ends (Linux's parent-death signal), a second
supervisor over the same data refuses before starting anything, and output to a closed pipe
(`minibroker dev | tee log`, then Ctrl-C) does not break the shutdown.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

from minibroker.tools.launcher import (
    CONTROLLER_NODE_ID,
    BrokerProcess,
    BrokerStartError,
    Cluster,
    ZooKeeperServer,
    zookeeper_installed,
)
from minibroker.tools.wire import answers_api_versions

SCHEMA_REGISTRY_PORT = 8081
CONTROLLER_PORT = 9090
# How often the supervisor looks for nodes that died; a signal interrupts the wait at once.
LIVENESS_CHECK_SECONDS = 0.5
# Topics created without a replication factor (kcat, auto-creation) get one replica per
# broker up to Kafka's usual 3, so that a dev cluster shows replication and survives a kill.
MAX_DEFAULT_REPLICATION_FACTOR = 3
LOCK_FILE = ".minibroker-dev.lock"
ZOOKEEPER_CHROOT = "/minibroker"
RESTART_READY_TIMEOUT = 60.0
# A node that dies again this soon after --restart-dead started it counts as crashing; after
# a few such restarts in a row it is left down, with its log, instead of restarted for ever.
CRASH_WINDOW_SECONDS = 10.0
MAX_QUICK_RESTARTS = 3

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _StopRequested(Exception):
    """Ctrl-C, SIGTERM or SIGHUP arrived: stop the cluster and leave."""


def _ignore_stop_signals() -> None:
    """From here on a second Ctrl-C must not abandon nodes half-way through their shutdown."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


# Modules whose code must not be interrupted by an exception: subprocess.Popen.poll takes
# its _waitpid_lock with acquire(False) a few bytecodes before the try that releases it, so
# a _StopRequested raised there leaks the lock and every later Popen.wait on that node spins
# for ever (seen: a supervisor hung after Ctrl-C with its node an unreaped zombie).
_UNINTERRUPTIBLE_FILES = tuple(
    os.path.realpath(str(module.__file__)) for module in (subprocess, threading)
)
# How soon a stop that arrived inside such code is delivered again.
_STOP_RETRY_SECONDS = 0.02
_pending_stop: str | None = None


def _inside_uninterruptible_code(frame) -> bool:
    while frame is not None:
        if os.path.realpath(frame.f_code.co_filename) in _UNINTERRUPTIBLE_FILES:
            return True
        frame = frame.f_back
    return False


def _request_stop(signum, frame) -> None:
    """The handler of the stop signals: raises _StopRequested in the main thread wherever it
    is (a wait for a node to start, the watch loop's sleep), except inside subprocess or
    threading code, where it is delivered again a moment later (SIGALRM)."""
    global _pending_stop
    if signum != signal.SIGALRM:
        _ignore_stop_signals()
        _pending_stop = signal.Signals(signum).name
    if _pending_stop is None:
        return
    if _inside_uninterruptible_code(frame):
        signal.signal(signal.SIGALRM, _request_stop)
        signal.setitimer(signal.ITIMER_REAL, _STOP_RETRY_SECONDS)
        return
    signal.setitimer(signal.ITIMER_REAL, 0)
    name, _pending_stop = _pending_stop, None
    raise _StopRequested(name)


def say(text: str, error: bool = False) -> None:
    """Print, and keep going when the reader went away (a pipe closed by Ctrl-C or a
    terminal that was closed): the nodes must still be stopped cleanly."""
    stream = sys.stderr if error else sys.stdout
    try:
        print(text, file=stream, flush=True)
    except OSError:
        devnull = open(os.devnull, "w")  # noqa: SIM115 - replaces the dead stream for good
        if error:
            sys.stderr = devnull
        else:
            sys.stdout = devnull


def made_by_dev(folder: Path) -> bool:
    """Whether `folder` is where a `minibroker dev` keeps (or kept) its cluster's data: its
    lock file, or its nodes' folders (broker-N with a meta.properties)."""
    return (folder / LOCK_FILE).exists() or any(folder.glob("broker-*/meta.properties"))


def _lock_data_dir(base_dir: Path):
    """Hold a lock on the data directory for as long as this supervisor runs; None if
    another `minibroker dev` holds it."""
    base_dir.mkdir(parents=True, exist_ok=True)
    lock = open(base_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held open until exit
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        owner = lock.read().strip() or "?"
        lock.close()
        raise BrokerStartError(
            f"another minibroker dev (pid {owner}) is running with its data under {base_dir}:"
            f" stop it first (Ctrl-C in its terminal; started with `&`: `kill %1` in its shell,"
            f" or `kill {owner}`), or run this one with another --data and other ports"
        ) from None
    lock.truncate(0)
    lock.write(str(os.getpid()))
    lock.flush()
    return lock


# The key of the local ZooKeeper's port among the nodes' ports.
ZOOKEEPER_NODE = -1


def _check_ports_free(ports: dict[str, int]) -> None:
    """``ports`` by what they are for ("the controller's port"): all must be bindable."""
    for purpose, port in ports.items():
        with socket.socket() as probe:
            # As the nodes' listeners do: connections of a node stopped a moment ago, still
            # in TIME_WAIT, must not make its port look taken.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                raise BrokerStartError(_port_in_use(port, purpose)) from None


def _port_in_use(port: int, purpose: str) -> str:
    """Why a port is taken, as far as can be told: a Kafka node answering ApiVersions there
    is most likely a node of an earlier `minibroker dev` still running (the README's two
    commands, then its tour), and the message says how to stop it."""
    choose = "or choose other ports with --first-port and --controller-port"
    if not answers_api_versions(("127.0.0.1", port), 2.0):
        return f"127.0.0.1:{port}, {purpose}, is in use by another program; {choose}"
    return (
        f"127.0.0.1:{port}, {purpose}, is in use by a Kafka node, most likely of another"
        f" `minibroker dev` still running: stop it first (Ctrl-C in its terminal; started"
        f" with `&`: `kill %1` in its shell), {choose}"
    )


def _check_data_matches_mode(base_dir: Path, zookeeper: bool, local_zookeeper: bool) -> None:
    """Refuse data that another mode's cluster made: the brokers' meta.properties name its
    cluster, which the new controller (or a new local ZooKeeper) does not know, and each
    broker would stop at once. Say what to do instead."""
    if not any(base_dir.glob("broker-*/meta.properties")):
        return
    made_on_zookeeper = (base_dir / "zookeeper" / "data").is_dir()
    if zookeeper and local_zookeeper and not made_on_zookeeper:
        made_by, flag, other = "`minibroker dev` (with a controller)", " --zookeeper", "zookeeper"
    elif not zookeeper and made_on_zookeeper:
        made_by, flag, other = "`minibroker dev --zookeeper`", "", "kraft"
    else:
        return
    raise BrokerStartError(
        f"the data under {base_dir} belongs to the cluster {made_by} made there, which this"
        f" mode cannot join: use another data directory (`minibroker dev{flag} --data"
        f" {base_dir}-{other}`), or remove {base_dir} to start afresh (its topics are lost)"
    )


def run_dev(
    base_dir: Path,
    brokers: int = 3,
    first_port: int = 9092,
    controller_port: int = CONTROLLER_PORT,
    schema_registry_port: int = SCHEMA_REGISTRY_PORT,
    overrides: dict[str, str] | None = None,
    restart_dead: bool = False,
    secure: bool = False,
    zookeeper: bool = False,
    zookeeper_port: int = 2181,
) -> int:
    """Run a controller and `brokers` brokers on `first_port` onwards, with their data under
    `base_dir`, until Ctrl-C, SIGTERM or SIGHUP; return the exit status: 0 when every node
    stopped cleanly, 1 when the cluster could not start or a node did not stop cleanly.
    `overrides` (server properties) go to every node. With `secure`, every broker also gets
    a SASL_SSL listener at its port + 100 (see dev_secure). With `zookeeper`, there is no
    controller process: the brokers elect one through the ZooKeeper that `zookeeper.connect`
    names, or through a local one started on `zookeeper_port` (data under `base_dir`).
    Every broker serves the schema registry, broker n on `schema_registry_port` + n - 1
    (0: none; not in the ZooKeeper mode yet)."""
    base_dir = Path(base_dir)
    properties: dict[str, object] = {
        "default.replication.factor": min(brokers, MAX_DEFAULT_REPLICATION_FACTOR),
    }
    if str((overrides or {}).get("iceberg.catalog.type", "sql")).strip().lower() != "rest":
        # One Iceberg catalog and warehouse for the cluster (docs/iceberg-topics.md): each
        # partition's leader writes its topic's one table, whichever broker it is. (A REST
        # catalog is one for the cluster already, and takes no SQL catalog settings.)
        properties["iceberg.catalog.uri"] = (
            f"sqlite:///{(base_dir / 'iceberg' / 'catalog.db').resolve()}"
        )
        properties["iceberg.catalog.warehouse"] = (
            (base_dir / "iceberg" / "warehouse").resolve().as_uri()
        )
    zookeeper_connect = (overrides or {}).get("zookeeper.connect")
    zookeeper = zookeeper or zookeeper_connect is not None
    ports = {} if zookeeper else {CONTROLLER_NODE_ID: controller_port}
    if zookeeper and zookeeper_connect is None:
        if not zookeeper_installed():
            say("minibroker dev: --zookeeper needs ZooKeeper (apt-get install zookeeper)", True)
            return 1
        ports[ZOOKEEPER_NODE] = zookeeper_port
    ports.update({node_id: first_port + node_id - 1 for node_id in range(1, brokers + 1)})
    registry_ports = (
        {node_id: schema_registry_port + node_id - 1 for node_id in range(1, brokers + 1)}
        if schema_registry_port and not zookeeper
        else {}
    )
    try:
        lock = _lock_data_dir(base_dir)
        _check_data_matches_mode(base_dir, zookeeper, zookeeper_connect is None)
        purposes = {
            (
                "the controller's port"
                if node_id == CONTROLLER_NODE_ID
                else "ZooKeeper's port"
                if node_id == ZOOKEEPER_NODE
                else f"broker {node_id}'s port"
            ): port
            for node_id, port in ports.items()
        }
        for node_id, port in registry_ports.items():
            purposes[f"broker {node_id}'s schema registry port"] = port
        secure_dev = None
        if secure:
            from minibroker.tools.dev_secure import SECURE_PORT_OFFSET, prepare

            secure_dev = prepare(base_dir)
            properties.update(secure_dev.broker_properties())
            for node_id in range(1, brokers + 1):
                purposes[f"broker {node_id}'s SASL_SSL port"] = ports[node_id] + SECURE_PORT_OFFSET
        properties.update(overrides or {})
        # Given to the launcher on its own, which writes it into every broker's properties.
        properties.pop("zookeeper.connect", None)
        _check_ports_free(purposes)
    except BrokerStartError as refused:
        say(f"minibroker dev: {refused}", error=True)
        return 1
    say(
        f"minibroker dev: starting {'' if zookeeper else 'a controller and '}{brokers} broker(s)"
        f"{' on ZooKeeper' if zookeeper else ''} under {base_dir}"
    )
    previous_handlers = {signum: signal.signal(signum, _request_stop) for signum in STOP_SIGNALS}
    # Belt and braces for the background check in _watch: a read of the terminal from the
    # background fails (EIO) instead of stopping the supervisor and with it the restarts.
    previous_handlers[signal.SIGTTIN] = signal.signal(signal.SIGTTIN, signal.SIG_IGN)
    previous_handlers[signal.SIGALRM] = signal.getsignal(signal.SIGALRM)  # stop re-delivery
    local_zookeeper = None
    try:
        if zookeeper and zookeeper_connect is None:
            local_zookeeper = ZooKeeperServer.start(
                base_dir / "zookeeper" / "data", ports.pop(ZOOKEEPER_NODE), die_with_parent=True
            )
            zookeeper_connect = local_zookeeper.connect_string(ZOOKEEPER_CHROOT)
        return _supervise(
            base_dir,
            brokers,
            ports,
            properties,
            restart_dead,
            zookeeper_connect,
            secure_dev,
            registry_ports,
        )
    except BrokerStartError as error:
        say(f"minibroker dev: ZooKeeper did not start: {error}", error=True)
        return 1
    except _StopRequested as stop:
        say(f"minibroker dev: {stop} while starting ZooKeeper")
        return 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if local_zookeeper is not None:
            local_zookeeper.stop()
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
        lock.close()


def _supervise(
    base_dir: Path,
    brokers: int,
    ports: dict[int, int],
    properties: dict[str, object],
    restart_dead: bool,
    zookeeper_connect: str | None,
    secure_dev=None,
    registry_ports: dict[int, int] | None = None,
) -> int:
    cluster: Cluster | None = None
    try:
        extra = None
        if secure_dev is not None:
            from minibroker.tools.dev_secure import SECURE_LISTENER, SECURE_PORT_OFFSET

            extra = {SECURE_LISTENER: SECURE_PORT_OFFSET}
        cluster = Cluster.start(
            base_dir,
            brokers=brokers,
            overrides=properties,
            ports=ports,
            die_with_parent=True,
            broker_listeners=extra,
            zookeeper_connect=zookeeper_connect,
            schema_registry=registry_ports or False,
        )
        say(_banner(cluster, restart_dead, zookeeper_connect, secure_dev))
        _watch(cluster, restart_dead)
    except BrokerStartError as error:
        say(f"minibroker dev: the cluster did not start: {error}", error=True)
        return 1
    except _StopRequested as stop:
        _ignore_stop_signals()
        if cluster is None:
            say(f"minibroker dev: {stop} while starting; the nodes started so far were killed")
            return 1
        say(f"minibroker dev: {stop}, stopping the cluster")
    return _stop(cluster)


def _banner(
    cluster: Cluster, restart_dead: bool, zookeeper_connect: str | None, secure_dev=None
) -> str:
    lines = ["minibroker dev: the cluster is ready", ""]
    if zookeeper_connect is not None:
        lines.append(f"  zookeeper     {zookeeper_connect}  (every broker may be controller)")
    for node in cluster.nodes:
        name = f"{node.kind} {node.node_id}"
        lines.append(
            f"  {name:<13} {node.bootstrap:<16} pid {node.pid:<8} data {node.log_dir}"
            f"  log {node.stderr_path}"
        )
    first = next(iter(cluster.brokers.values())).bootstrap
    lines += [
        "",
        f"  bootstrap servers: {cluster.bootstrap}",
        f"  try:  echo hello | kcat -P -b {first} -t demo",
        f"        kcat -C -b {cluster.bootstrap} -t demo -e",
        "",
    ]
    registry_urls = [url for node in cluster.brokers.values() if (url := node.schema_registry_url)]
    if registry_urls:
        lines += [
            f"  schema registry: {registry_urls[0]}  (every broker serves it:"
            f" {','.join(registry_urls)})",
            f"  try:  curl {registry_urls[0]}/subjects",
            "",
        ]
    if secure_dev is not None:
        secure_bootstrap = ",".join(
            f"127.0.0.1:{port}"
            for broker in cluster.brokers.values()
            for port in broker.extra_listeners.values()
        )
        lines += [secure_dev.client_help(secure_bootstrap), ""]
    lines += [
        "A node that dies is "
        + ("started again at once." if restart_dead else "reported; Enter starts it again.")
        + " Ctrl-C stops every node cleanly (in the background, `minibroker dev &`:"
        + f" `kill %1` or `kill {os.getpid()}`).",
    ]
    return "\n".join(lines)


def _watch(cluster: Cluster, restart_dead: bool) -> None:
    """Report nodes that die and start them again when asked, until a stop signal (which
    raises _StopRequested from its handler)."""
    reported: set[int] = set()
    interactive = not restart_dead and _stdin_takes_input()
    restarted_at: dict[int, float] = {}
    quick_restarts: dict[int, int] = {}
    given_up: set[int] = set()
    while True:
        dead = [node for node in cluster.nodes if not node.running]
        for node in dead:
            if node.node_id not in reported:
                reported.add(node.node_id)
                _report_death(node, restart_dead, interactive)
                if time.monotonic() - restarted_at.get(node.node_id, -1e9) < CRASH_WINDOW_SECONDS:
                    quick_restarts[node.node_id] = quick_restarts.get(node.node_id, 0) + 1
                else:
                    quick_restarts[node.node_id] = 0
                if restart_dead and quick_restarts[node.node_id] >= MAX_QUICK_RESTARTS:
                    given_up.add(node.node_id)
                    say(
                        f"minibroker dev: {node.kind} {node.node_id} keeps dying right after"
                        " it starts; it is left down (see its log).",
                        error=True,
                    )
        # Waiting for Enter is also the pause between liveness checks. In the background
        # (`minibroker dev &`) the terminal is the shell's: reading it would stop this
        # supervisor (SIGTTIN, "Stopped (tty input)"), so it only looks once in front again.
        asked = False
        if interactive and _in_foreground():
            asked = _enter_pressed()
        else:
            time.sleep(LIVENESS_CHECK_SECONDS)
        if dead and (restart_dead or asked):
            for node in dead:
                if restart_dead and node.node_id in given_up:
                    continue
                _restart(node)
                restarted_at[node.node_id] = time.monotonic()
                reported.discard(node.node_id)


def _stdin_takes_input() -> bool:
    """Whether someone can press Enter: stdin is a terminal or a pipe (not /dev/null)."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (ValueError, OSError, AttributeError):
        return False
    return stat.S_ISCHR(mode) and os.isatty(sys.stdin.fileno()) or stat.S_ISFIFO(mode)


def _in_foreground() -> bool:
    """Whether this process may read its terminal: stdin is not a terminal (a pipe), or this
    process group is the terminal's foreground group (not `minibroker dev &`)."""
    try:
        fd = sys.stdin.fileno()
        if not os.isatty(fd):
            return True
        return os.tcgetpgrp(fd) == os.getpgrp()
    except (ValueError, OSError, AttributeError):
        return True  # no controlling terminal: reading cannot stop this process


def _enter_pressed() -> bool:
    """Wait up to one liveness period for a line on stdin; True when one arrived."""
    try:
        ready, _, _ = select.select([sys.stdin], [], [], LIVENESS_CHECK_SECONDS)
    except (ValueError, OSError):
        time.sleep(LIVENESS_CHECK_SECONDS)
        return False
    if not ready:
        return False
    try:
        line = sys.stdin.readline()
    except OSError:  # EIO: sent to the background between the check and the read
        return False
    if not line:  # end of input: nobody will press Enter any more
        time.sleep(LIVENESS_CHECK_SECONDS)
        return False
    return True


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _report_death(node: BrokerProcess, restart_dead: bool, interactive: bool) -> None:
    command = " ".join(node.command())
    if restart_dead:
        then = "starting it again."
    elif interactive and not _in_foreground():
        then = (
            "this supervisor runs in the background: bring it back with `fg` and press Enter"
            f" to start it again (or run it yourself:\n  {command}\n). `kill %1` (its job)"
            " stops every node cleanly."
        )
    elif interactive:
        then = f"press Enter to start it again (or run it yourself:\n  {command}\n)."
    else:
        then = f"start it again with:\n  {command}"
    say(
        f"minibroker dev: {node.kind} {node.node_id} ({node.bootstrap}) died with"
        f" {_describe_exit(node.exit_code)}; the other nodes keep running. The end of its log"
        f" ({node.stderr_path}):\n{node.log_tail()}\n"
        f"minibroker dev: {then}",
        error=True,
    )


def _restart(node: BrokerProcess) -> None:
    node.restart()
    try:
        node.wait_ready(RESTART_READY_TIMEOUT)
    except BrokerStartError as error:
        say(f"minibroker dev: {node.kind} {node.node_id} did not come back: {error}", error=True)
        return
    say(f"minibroker dev: {node.kind} {node.node_id} is running again (pid {node.pid})")


def _stop(cluster: Cluster) -> int:
    """Stop every node still running; 0 when they all exited cleanly."""
    dead_before = {node.node_id for node in cluster.nodes if node.started and not node.running}
    try:
        exit_codes = cluster.stop()
    except BrokerStartError as hung:
        say(f"minibroker dev: a node did not stop: {hung}", error=True)
        return 1
    unclean = [
        node
        for node in cluster.nodes
        if node.node_id not in dead_before and exit_codes.get(node.node_id, 0) != 0
    ]
    for node in unclean:
        say(
            f"minibroker dev: {node.kind} {node.node_id} exited with"
            f" {_describe_exit(exit_codes[node.node_id])} on shutdown; see {node.stderr_path}",
            error=True,
        )
    if unclean:
        return 1
    say("minibroker dev: every node stopped cleanly")
    return 0
