"""The launcher's port choice (minibroker.tools.launcher.free_ports): never a port an outgoing
connection can take, never one another launcher was just given."""

from __future__ import annotations

import socket
from pathlib import Path

from minibroker.tools import launcher


def ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_ports_lie_below_the_ephemeral_range_and_are_bindable():
    low = ephemeral_low()
    for _ in range(50):
        port = launcher.free_port()
        assert launcher.FIRST_CHOSEN_PORT <= port < low
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", port))


def test_a_reserved_run_is_not_handed_out_again(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "PORT_REGISTRY", tmp_path / "ports.json")
    # A narrow window, so that a second choice would meet the first run if it were not held.
    monkeypatch.setattr(launcher, "FIRST_CHOSEN_PORT", ephemeral_low() - 40)
    first = launcher.free_ports(3, 10)
    run = {*range(first, first + 3), *range(first + 10, first + 13)}
    for _ in range(20):
        assert launcher.free_port() not in run
