"""`minibroker dev`: a local cluster in one command, a controller and brokers on 127.0.0.1.

It runs the same launcher as the tests, so what a developer pokes at by hand is exactly what
the cluster tests exercise. It supervises rather than serves: it starts the nodes, says where
they are, and stops them all in order on Ctrl-C or SIGTERM; a node that dies on its own ends
the session, because a cluster silently missing a broker misleads whoever is using it.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from .launcher import CONTROLLER_NODE_ID, BrokerProcess, BrokerStartError, Cluster

CONTROLLER_PORT = 9090
# How often the supervisor looks for nodes that died; a signal interrupts the wait at once.
LIVENESS_CHECK_SECONDS = 0.5
# Topics created without a replication factor (kcat, auto-creation) get one replica per
# broker up to Kafka's usual 3, so that a dev cluster shows replication and survives a kill.
MAX_DEFAULT_REPLICATION_FACTOR = 3


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _StopRequested(Exception):
    """Ctrl-C or SIGTERM arrived: stop the cluster and leave."""


def _ignore_stop_signals() -> None:
    """From here on a second Ctrl-C must not abandon nodes half-way through their shutdown."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def _request_stop(signum, frame) -> None:
    _ignore_stop_signals()
    raise _StopRequested(signal.Signals(signum).name)


def run_dev(base_dir: Path, brokers: int = 3, first_port: int = 9092) -> int:
    """Run a controller on 127.0.0.1:9090 and `brokers` brokers on `first_port` onwards, with
    their data under `base_dir`, until Ctrl-C or SIGTERM; return the exit status.

    0 when every node started and then stopped cleanly; 1 when the cluster could not start,
    a node died on its own (the rest are stopped) or a node did not shut down cleanly.
    """
    base_dir = Path(base_dir)
    ports = {CONTROLLER_NODE_ID: CONTROLLER_PORT}
    ports.update({node_id: first_port + node_id - 1 for node_id in range(1, brokers + 1)})
    overrides = {"default.replication.factor": min(brokers, MAX_DEFAULT_REPLICATION_FACTOR)}
    print(f"minibroker dev: starting a controller and {brokers} broker(s) under {base_dir}")

    previous_handlers = {signum: signal.signal(signum, _request_stop) for signum in STOP_SIGNALS}
    try:
        return _supervise(base_dir, brokers, ports, overrides)
    finally:
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)


def _supervise(
    base_dir: Path, brokers: int, ports: dict[int, int], overrides: dict[str, object]
) -> int:
    cluster: Cluster | None = None
    dead: BrokerProcess | None = None
    try:
        cluster = Cluster.start(base_dir, brokers=brokers, overrides=overrides, ports=ports)
        print(_banner(cluster), flush=True)
        dead = _wait_for_a_death(cluster)
        _ignore_stop_signals()
    except BrokerStartError as error:
        print(f"minibroker dev: the cluster did not start: {error}", file=sys.stderr)
        return 1
    except _StopRequested as stop:
        if cluster is None:
            print(f"minibroker dev: {stop} while starting; the nodes started so far were killed")
            return 1
        print(f"minibroker dev: {stop}, stopping the cluster")
    if dead is not None:
        print(
            f"minibroker dev: {dead.kind} {dead.node_id} exited unexpectedly with code"
            f" {dead.exit_code}; its log ({dead.stderr_path}) ends with:\n{dead.log_tail()}",
            file=sys.stderr,
        )
    return _stop(cluster, dead)


def _banner(cluster: Cluster) -> str:
    lines = ["minibroker dev: the cluster is ready", ""]
    for node in cluster.nodes:
        name = f"{node.kind} {node.node_id}"
        lines.append(
            f"  {name:<13} {node.bootstrap:<16} data {node.log_dir}  log {node.stderr_path}"
        )
    first = next(iter(cluster.brokers.values())).bootstrap
    lines += [
        "",
        f"  bootstrap servers: {cluster.bootstrap}",
        f"  try:  echo hello | kcat -P -b {first} -t demo",
        f"        kcat -C -b {cluster.bootstrap} -t demo -e",
        "",
        "Ctrl-C stops every node cleanly.",
    ]
    return "\n".join(lines)


def _wait_for_a_death(cluster: Cluster) -> BrokerProcess:
    """Block until some node exits, and return it; a stop signal interrupts the wait by
    raising _StopRequested from its handler."""
    while True:
        for node in cluster.nodes:
            if not node.running:
                return node
        time.sleep(LIVENESS_CHECK_SECONDS)


def _stop(cluster: Cluster, dead: BrokerProcess | None) -> int:
    """Stop every node; 0 only if none had died and all exited cleanly."""
    try:
        exit_codes = cluster.stop()
    except BrokerStartError as hung:
        print(f"minibroker dev: a node did not stop: {hung}", file=sys.stderr)
        return 1
    unclean = [
        node for node in cluster.nodes if node is not dead and exit_codes.get(node.node_id, 0) != 0
    ]
    for node in unclean:
        print(
            f"minibroker dev: {node.kind} {node.node_id} exited with code"
            f" {exit_codes[node.node_id]} on shutdown; see {node.stderr_path}",
            file=sys.stderr,
        )
    if dead is not None or unclean:
        return 1
    print("minibroker dev: every node stopped cleanly")
    return 0
