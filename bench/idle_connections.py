"""What does an idle connection cost the broker, and does connections.max.idle.ms take it back?
`python -m bench.idle_connections [--connections 10000] [--idle-ms 5000]`

One broker with `connections.max.idle.ms` set; the bench opens that many plaintext connections
that send nothing (each counts as idle from its accept), reads the broker's resident memory
(VmRSS) before and after, then waits for the broker to close them all and reads it again. It
prints the memory per idle connection, how late the last one was closed, and what
the per-request bookkeeping of the idle timer costs (timeit, in this process). Not run in CI.
"""

from __future__ import annotations

import argparse
import resource
import select
import socket
import tempfile
import time
import timeit
from pathlib import Path

from minibroker.node.connection_limits import IdleConnections
from minibroker.tools.launcher import BrokerProcess


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmRSS")


def raise_descriptor_limit(wanted: int) -> int:
    """As many descriptors as the connections need (the broker inherits the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard == resource.RLIM_INFINITY else min(hard, max(soft, wanted))
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_connections")
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--idle-ms", type=int, default=5000)
    args = parser.parse_args()
    limit = raise_descriptor_limit(args.connections + 1000)
    if limit < args.connections + 100:
        raise SystemExit(f"RLIMIT_NOFILE allows {limit} descriptors: too few")
    work_dir = Path(tempfile.mkdtemp(prefix="idle-connections-"))
    node = BrokerProcess.start(
        1, work_dir / "data", overrides={"connections.max.idle.ms": args.idle_ms}
    )
    sockets: list[socket.socket] = []
    try:
        node.wait_ready(30)
        time.sleep(1.0)
        before = rss_bytes(node.pid)
        host, port = node.bootstrap.rsplit(":", 1)
        started = time.monotonic()
        for _ in range(args.connections):
            sockets.append(socket.create_connection((host, int(port)), timeout=30))
        opened_s = time.monotonic() - started
        time.sleep(min(1.0, args.idle_ms / 4000))
        held = rss_bytes(node.pid)
        # Every socket becomes readable (EOF) when the broker closes it.
        poller = select.poll()
        for sock in sockets:
            poller.register(sock, select.POLLIN)
        remaining = len(sockets)
        deadline = started + args.idle_ms / 1000 + 120
        while remaining and time.monotonic() < deadline:
            events = poller.poll(1000)
            for fd, _ in events:
                poller.unregister(fd)
            remaining -= len(events)
        closed_s = time.monotonic() - started
        time.sleep(1.0)
        after = rss_bytes(node.pid)
    finally:
        for sock in sockets:
            sock.close()
        node.stop()
    per_connection = (held - before) / args.connections
    print(
        f"{args.connections:,} idle plaintext connections, connections.max.idle.ms={args.idle_ms}"
    )
    print(f"opened in {opened_s:.1f} s")
    print(f"broker RSS: {before / 2**20:.1f} MiB before, {held / 2**20:.1f} MiB held")
    print(f"  {per_connection / 1024:.1f} KiB per idle connection")
    print(
        f"all closed {closed_s - opened_s - args.idle_ms / 1000:.1f} s after the last one's"
        " deadline" + (f" ({remaining} still open)" if remaining else "")
    )
    print(f"broker RSS after they closed: {after / 2**20:.1f} MiB")
    idle = IdleConnections(600.0)
    keys = [object() for _ in range(args.connections)]
    for index, key in enumerate(keys):
        idle.touch(key, float(index))
    calls = 100_000
    key = keys[0]
    seconds = timeit.timeit(lambda: (idle.busy(key), idle.touch(key, 1e9)), number=calls)
    print(f"idle bookkeeping per request (busy + touch): {seconds / calls * 1e6:.2f} us")


if __name__ == "__main__":
    main()
