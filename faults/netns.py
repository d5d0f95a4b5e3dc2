"""Hosts of our own in network namespaces: a bridge, one namespace per node, and a leg in
this (the host's) namespace, so processes get addresses of their own and links that can be
cut. The deploy tests run the compose topology on it; the fault harness partitions nodes.

Needs root and iproute2. Names carry a random tag, so runs side by side do not collide;
`close` removes every namespace and hosts file and is safe on a half-built network.

Nothing a test sends to a test address may leave the machine (issue 41). With the bridge
gone, the leg and its route go too, and a client left open would follow the default route
off the machine. So, defence in depth:

- every subnet built gets an ``unreachable`` route in this (the host's) namespace, with a
  larger metric than the leg's own route: it takes over only when the leg is gone, and a
  connect to the closed subnet fails at once (EHOSTUNREACH) instead of leaving. The routes
  are marked (``proto 241``, metric ``GUARD_METRIC_BASE`` + the owning pid), removed once
  the process is gone (by a remover its atexit starts), and those of processes that died
  without exiting (kill -9) are swept the next time a network is built;
- a guard (`client_connections`, `guard`) lists the sockets of this process and of its
  descendants in this namespace that are connected, or trying to connect, to a test
  subnet: `Network.check_clients` before the servers stop and `close` record what is still
  open, and tests/conftest.py fails a module whose networks had clients left, or after
  which anything still talks to a closed network, and prints the session's count.
"""

from __future__ import annotations

import atexit
import ipaddress
import json
import os
import random
import secrets
import shutil
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# The mark of the guard's unreachable routes: a routing protocol number of their own, and a
# metric that names the process they belong to (GUARD_METRIC_BASE + its pid; pids stay below
# 2**22), far above the 0 of the leg's kernel route.
GUARD_PROTO = 241
GUARD_METRIC_BASE = 1_000_000_000
_PID_LIMIT = 1 << 22


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=30)


# -- the unreachable routes -----------------------------------------------------------------

_defended: list[ipaddress.IPv4Network] = []  # this process's routes, removed at exit
_exit_registered = False


def _guard_metric(pid: int | None = None) -> int:
    return GUARD_METRIC_BASE + (os.getpid() if pid is None else pid)


def guard_routes() -> list[dict]:
    """The guard's unreachable routes in this namespace (of every process), as iproute2's
    JSON gives them."""
    routes = json.loads(
        subprocess.run(
            ["ip", "-j", "-4", "route", "show", "proto", str(GUARD_PROTO)],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        or "[]"
    )
    return [route for route in routes if route.get("type") == "unreachable"]


def _delete_route(subnet: str, metric: int) -> None:
    subprocess.run(
        ["ip", "route", "del", "unreachable", subnet, "metric", str(metric)],
        capture_output=True,
        timeout=30,
    )


def sweep_stale_routes() -> list[str]:
    """Remove the guard routes whose process is gone (killed before its atexit ran); a
    route of a live process, a test run beside this one, stays. Returns the subnets freed."""
    freed = []
    for route in guard_routes():
        pid = route.get("metric", 0) - GUARD_METRIC_BASE
        if 0 < pid < _PID_LIMIT and not os.path.exists(f"/proc/{pid}"):
            _delete_route(route["dst"], route["metric"])
            freed.append(route["dst"])
    return freed


# How long the remover waits for this process to be gone, at most (then the routes are left
# to the sweep of a later run).
REMOVER_WAIT_S = 3600


def _remove_own_routes() -> None:
    """At exit: the routes are removed once this process is gone, not before. A client
    thread can outlive the interpreter's atexit handlers (a librdkafka handle stuck in a
    call, destroyed only at the very end), and with the routes gone its packets would
    follow the default route off the machine, as they did in a run of this change before
    this remover. So a detached shell removes them once this pid no longer exists (it
    polls once a second, at most REMOVER_WAIT_S times; a route of a process still there
    then is left to a later sweep)."""
    if not _defended:
        return
    pid = os.getpid()
    deletes = " ; ".join(
        f"ip route del unreachable {subnet} metric {_guard_metric()}" for subnet in _defended
    )
    script = (
        f"i=0; while kill -0 {pid} 2>/dev/null && [ $i -lt {REMOVER_WAIT_S} ];"
        f" do sleep 1; i=$((i+1)); done; kill -0 {pid} 2>/dev/null || {{ {deletes} ; }}"
    )
    subprocess.Popen(
        ["sh", "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _defended.clear()


def _defend(subnet: ipaddress.IPv4Network) -> None:
    """An unreachable route for `subnet` until this process exits: under the leg's route
    while the network exists, in its place once it is gone."""
    global _exit_registered
    sweep_stale_routes()
    if not _exit_registered:
        atexit.register(_remove_own_routes)
        _exit_registered = True
    _run(
        "ip",
        "route",
        "replace",
        "unreachable",
        str(subnet),
        "metric",
        str(_guard_metric()),
        "proto",
        str(GUARD_PROTO),
    )
    _defended.append(subnet)


# -- the guard --------------------------------------------------------------------------------

_TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN-SENT",
    "03": "SYN-RECV",
    "04": "FIN-WAIT-1",
    "05": "FIN-WAIT-2",
    "06": "TIME-WAIT",
    "07": "CLOSE",
    "08": "CLOSE-WAIT",
    "09": "LAST-ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
}


@dataclass(frozen=True)
class ClientConnection:
    """A socket of this process or of one of its descendants, connected or connecting to a
    test network's address."""

    pid: int
    process: str  # its command line; for this process, with its librdkafka clients counted
    local: str
    remote: str
    state: str
    network: str  # the network's tag, and the test that built it

    def __str__(self) -> str:
        return (
            f"pid {self.pid} ({self.process}): {self.local} -> {self.remote} {self.state},"
            f" network {self.network}"
        )


def _descendants(root: int) -> list[int]:
    pids = [root]
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
            except OSError:
                continue
            pids += [int(child) for child in children if int(child) not in pids]
    return pids


def _tcp_table(pid: int) -> dict[int, tuple[str, str, str]]:
    """inode -> (local, remote, state) of the IPv4 TCP sockets of `pid`'s namespace."""
    table = {}
    try:
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return table
    for line in lines:
        fields = line.split()
        ends = []
        for end in fields[1:3]:
            address, port = end.split(":")
            ends.append(f"{socket.inet_ntoa(struct.pack('<I', int(address, 16)))}:{int(port, 16)}")
        table[int(fields[9])] = (ends[0], ends[1], _TCP_STATES.get(fields[3], fields[3]))
    return table


def librdkafka_clients(pid: int) -> int:
    """How many librdkafka client instances live in `pid`: each has one thread named
    rdk:main."""
    count = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            if Path(f"/proc/{pid}/task/{task}/comm").read_text().strip() == "rdk:main":
                count += 1
        except OSError:
            continue
    return count


def _describe(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    text = " ".join(part.decode(errors="replace") for part in argv if part)[:160]
    clients = librdkafka_clients(pid)
    if pid == os.getpid():
        text = f"this test process: {text}"
    return f"{text}; {clients} librdkafka clients alive in it" if clients else text


def client_connections(networks: list[Network]) -> list[ClientConnection]:
    """The TCP sockets of this process and its descendants that live in this (the host's)
    network namespace and whose remote address is in one of `networks`, in any state but
    TIME-WAIT (no process holds those): connected, closing, or trying to connect
    (SYN-SENT). A descendant inside a test namespace is the test's server, not a client."""
    if not networks:
        return []
    host = os.stat("/proc/self/ns/net").st_ino
    table = _tcp_table(os.getpid())
    found = []
    for pid in _descendants(os.getpid()):
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino != host:
                continue
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
            except OSError:
                continue
            if not target.startswith("socket:["):
                continue
            entry = table.get(int(target[len("socket:[") : -1]))
            if entry is None or entry[2] in ("TIME-WAIT", "LISTEN"):
                continue
            address = ipaddress.ip_address(entry[1].rpartition(":")[0])
            for network in networks:
                if address in network.subnet:
                    found.append(
                        ClientConnection(
                            pid, _describe(pid), entry[0], entry[1], entry[2], network.label
                        )
                    )
    return found


_networks: list[Network] = []  # every network this process built, in order


def built_networks() -> list[Network]:
    return list(_networks)


def closed_networks() -> list[Network]:
    return [network for network in _networks if network.closed]


def networks_closed() -> int:
    """How many networks this process has closed: a mark for `guard(since=...)`."""
    return len(closed_networks())


def guard(since: int = 0) -> list[ClientConnection]:
    """What the guard finds: the clients that were still connected to a network when it was
    checked or closed (of the networks closed after the first `since`), and every socket
    that talks now to any network this process has closed."""
    closed = closed_networks()
    left = [hit for network in closed[since:] for hit in network.left_open]
    return left + client_connections(closed)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.0.0.0/8 that no route of this machine overlaps, for the bridge."""
    routes = json.loads(
        subprocess.run(
            ["ip", "-j", "-4", "route", "show", "table", "all"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    taken = [
        ipaddress.ip_network(route["dst"], strict=False)
        for route in routes
        if route.get("dst", "default") not in ("default", "")
    ]
    for _ in range(100):
        candidate = ipaddress.ip_network(
            f"10.{random.randint(64, 250)}.{random.randint(0, 255)}.0/24"
        )
        if not any(candidate.overlaps(network) for network in taken):
            return candidate
    raise RuntimeError("no free 10.x.y.0/24 for the test network")


class Network:
    """A network made of namespaces: a bridge in a namespace of its own, one namespace per
    service on it (its name resolves in every namespace), and a leg in this namespace."""

    def __init__(self, services: list[str]) -> None:
        self.tag = f"mb{secrets.token_hex(3)}"
        self.subnet = _free_subnet()
        hosts = self.subnet.hosts()
        self.host_address = next(hosts)
        self.addresses = {service: next(hosts) for service in services}
        self.namespaces: list[str] = []
        # Who built it, for the guard's report: the test (pytest names it in the
        # environment) or the command.
        self.built_by = os.environ.get("PYTEST_CURRENT_TEST", " ".join(sys.argv)[:120])
        self.closed = False
        # Sockets still connected to it when `check_clients` or `close` looked.
        self.left_open: list[ClientConnection] = []

    @property
    def leg(self) -> str:
        """The host's end of the link to the bridge."""
        return f"{self.tag}h"

    @property
    def label(self) -> str:
        return f"{self.tag} {self.subnet} built by {self.built_by}"

    def namespace(self, service: str) -> str:
        return f"{self.tag}-{service}"

    def exec_prefix(self, service: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(service)]

    def _add_namespace(self, name: str) -> None:
        _run("ip", "netns", "add", name)
        self.namespaces.append(name)
        _run("ip", "-n", name, "link", "set", "lo", "up")

    def build(self) -> None:
        _networks.append(self)
        _defend(self.subnet)
        bridge = self.namespace("bridge")
        self._add_namespace(bridge)
        _run("ip", "-n", bridge, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", bridge, "link", "set", "br0", "up")
        prefix = self.subnet.prefixlen
        hosts_lines = ["127.0.0.1 localhost"] + [
            f"{address} {service}" for service, address in self.addresses.items()
        ]
        for index, (service, address) in enumerate(self.addresses.items()):
            name = self.namespace(service)
            self._add_namespace(name)
            port = f"p{index}"
            _run("ip", "-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", port)
            _run("ip", "-n", name, "link", "set", port, "netns", bridge)
            _run("ip", "-n", bridge, "link", "set", port, "master", "br0", "up")
            _run("ip", "-n", name, "addr", "add", f"{address}/{prefix}", "dev", "eth0")
            _run("ip", "-n", name, "link", "set", "eth0", "up")
            hosts_dir = Path("/etc/netns") / name
            hosts_dir.mkdir(parents=True, exist_ok=True)
            (hosts_dir / "hosts").write_text("\n".join(hosts_lines) + "\n")
        # The host's leg: created in the bridge namespace (names there are ours alone), then
        # moved out; deleting the bridge namespace deletes it with its peer.
        leg = self.leg
        _run("ip", "-n", bridge, "link", "add", "hostleg", "type", "veth", "peer", "name", leg)
        _run("ip", "-n", bridge, "link", "set", leg, "netns", str(os.getpid()))
        _run("ip", "-n", bridge, "link", "set", "hostleg", "master", "br0", "up")
        _run("ip", "addr", "add", f"{self.host_address}/{prefix}", "dev", leg)
        _run("ip", "link", "set", leg, "up")

    def check_clients(self) -> list[ClientConnection]:
        """The sockets of this process and its descendants still connected (or connecting)
        to this network, recorded for the guard. Called by the network's owner once its
        clients should be closed and before its servers stop: a client left open holds a
        connection then (with the servers gone it would only retry, unseen)."""
        found = client_connections([self])
        self.left_open += found
        return found

    def close(self) -> None:
        """Delete the namespaces (the host's leg goes with the bridge's); the subnet's
        unreachable route stays until the process exits. What is still connected is
        recorded first."""
        if self in _networks and not self.closed:
            self.check_clients()
        # The leg first, at once (a veth goes with its peer): the kernel destroys a deleted
        # namespace's devices later, in the background, and until then the leg's route
        # would still be there for a client to use.
        if self.namespaces:
            subprocess.run(["ip", "link", "del", self.leg], capture_output=True, timeout=30)
        for name in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
        self.namespaces.clear()
        self.closed = True

    # -- faults ---------------------------------------------------------------------------

    def isolate(self, service: str) -> None:
        """Cut the service off from everyone, clients included (its link goes down)."""
        _run("ip", "-n", self.namespace(service), "link", "set", "eth0", "down")

    def reconnect(self, service: str) -> None:
        _run("ip", "-n", self.namespace(service), "link", "set", "eth0", "up")

    def cut(self, service: str, others: list[str]) -> None:
        """Drop every packet between the service and ``others`` (both ways: its replies to
        them vanish too), while the host's leg, where the clients are, still reaches it."""
        for other in others:
            _run(
                "ip",
                "-n",
                self.namespace(service),
                "route",
                "add",
                "blackhole",
                f"{self.addresses[other]}/32",
            )

    def heal(self, service: str, others: list[str]) -> None:
        for other in others:
            subprocess.run(
                [
                    "ip",
                    "-n",
                    self.namespace(service),
                    "route",
                    "del",
                    "blackhole",
                    f"{self.addresses[other]}/32",
                ],
                capture_output=True,
                timeout=30,
            )
