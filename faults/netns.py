"""Hosts of our own in network namespaces: a bridge, one namespace per node, and a leg in
this (the host's) namespace, so processes get addresses of their own and links that can be
cut. The deploy tests run the compose topology on it; the fault harness partitions nodes.

Needs root and iproute2. Names carry a random tag, so runs side by side do not collide;
`close` removes every namespace and hosts file and is safe on a half-built network.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import secrets
import shutil
import subprocess
from pathlib import Path


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=30)


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

    def namespace(self, service: str) -> str:
        return f"{self.tag}-{service}"

    def exec_prefix(self, service: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(service)]

    def _add_namespace(self, name: str) -> None:
        _run("ip", "netns", "add", name)
        self.namespaces.append(name)
        _run("ip", "-n", name, "link", "set", "lo", "up")

    def build(self) -> None:
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
        leg = f"{self.tag}h"
        _run("ip", "-n", bridge, "link", "add", "hostleg", "type", "veth", "peer", "name", leg)
        _run("ip", "-n", bridge, "link", "set", leg, "netns", str(os.getpid()))
        _run("ip", "-n", bridge, "link", "set", "hostleg", "master", "br0", "up")
        _run("ip", "addr", "add", f"{self.host_address}/{prefix}", "dev", leg)
        _run("ip", "link", "set", leg, "up")

    def close(self) -> None:
        for name in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
        self.namespaces.clear()

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
