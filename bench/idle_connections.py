"""What does an idle connection cost the broker, and does connections.max.idle.ms take it back?
`python -m bench.idle_connections [--connections 10000] [--idle-ms 5000] [--tls]`

One broker with `connections.max.idle.ms` set; the bench opens that many plaintext connections
that send nothing (each counts as idle from its accept), reads the broker's resident memory
(VmRSS) before and after, then waits for the broker to close them all and reads it again. It
prints the memory per idle connection, how late the last one was closed, and what
the per-request bookkeeping of the idle timer costs (timeit, in this process). Not run in CI.

With `--tls` the connections go to a SASL_SSL listener (a throwaway trustme CA): each
completes its TLS handshake and then sends nothing, so it holds the broker's TLS state but
never authenticates; the broker must close it `connections.max.idle.ms` after its accept
(the authentication deadline, README "Connection limits"). Issue 24's check: 5,000 of them
(`--connections 5000 --tls`), closed at the deadline, and the memory back.
"""

from __future__ import annotations

import argparse
import resource
import select
import socket
import ssl
import tempfile
import time
import timeit
from pathlib import Path

from minibroker.node.connection_limits import IdleConnections
from minibroker.node.server import TRIM_CHECK_INTERVAL_MS
from minibroker.tools.launcher import BrokerProcess, free_port

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret";'
)


def tls_setup(work_dir: Path) -> tuple[dict[str, object], ssl.SSLContext, int]:
    """Broker properties for a SASL_SSL listener beside PLAINTEXT, a client context trusting
    its CA, and the listener's port."""
    import trustme

    ca = trustme.CA()
    broker_pem = work_dir / "broker.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(broker_pem))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    port = free_port()
    overrides: dict[str, object] = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(broker_pem),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
    }
    return overrides, context, port


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
    parser.add_argument("--tls", action="store_true", help="unauthenticated SASL_SSL clients")
    args = parser.parse_args()
    limit = raise_descriptor_limit(args.connections + 1000)
    if limit < args.connections + 100:
        raise SystemExit(f"RLIMIT_NOFILE allows {limit} descriptors: too few")
    work_dir = Path(tempfile.mkdtemp(prefix="idle-connections-"))
    overrides: dict[str, object] = {"connections.max.idle.ms": args.idle_ms}
    context = None
    if args.tls:
        tls_overrides, context, tls_port = tls_setup(work_dir)
        overrides.update(tls_overrides)
        plain_port = free_port()
        overrides["listeners"] = (
            f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{tls_port}"
        )
        node = BrokerProcess.start(1, work_dir / "data", port=plain_port, overrides=overrides)
    else:
        node = BrokerProcess.start(1, work_dir / "data", overrides=overrides)
    sockets: list[socket.socket] = []
    try:
        node.wait_ready(30)
        time.sleep(1.0)
        before = rss_bytes(node.pid)
        host, port = node.bootstrap.rsplit(":", 1)
        if context is not None:
            port = str(tls_port)
        started = time.monotonic()
        for _ in range(args.connections):
            sock = socket.create_connection((host, int(port)), timeout=30)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=host)  # the handshake
            sockets.append(sock)
        opened_s = time.monotonic() - started
        time.sleep(min(1.0, args.idle_ms / 4000))
        held = rss_bytes(node.pid)
        # Every socket becomes readable (EOF) when the broker closes it. A TLS socket is also
        # readable when the broker's TLS 1.3 session tickets arrive: reading consumes them
        # and gives no data (SSLWantReadError), and the socket is still open.
        poller = select.poll()
        by_fd = {sock.fileno(): sock for sock in sockets}
        for sock in sockets:
            sock.setblocking(False)
            poller.register(sock, select.POLLIN)
        remaining = len(sockets)
        deadline = started + args.idle_ms / 1000 + 120
        first_closed_s = None
        while remaining and time.monotonic() < deadline:
            for fd, _ in poller.poll(1000):
                try:
                    if by_fd[fd].recv(1):
                        raise RuntimeError("the broker sent data to an idle connection")
                except (ssl.SSLWantReadError, BlockingIOError):
                    continue
                except OSError:  # reset, or a TLS connection closed without close_notify
                    pass
                poller.unregister(fd)
                remaining -= 1
                if first_closed_s is None:
                    first_closed_s = time.monotonic() - started
        closed_s = time.monotonic() - started
        # The broker gives freed memory back once a check interval passes with no more
        # closures (TRIM_CHECK_INTERVAL_MS; two checks at most).
        time.sleep(2 * TRIM_CHECK_INTERVAL_MS / 1000 + 1.0)
        after = rss_bytes(node.pid)
    finally:
        for sock in sockets:
            sock.close()
        node.stop()
    per_connection = (held - before) / args.connections
    kind = "unauthenticated SASL_SSL" if args.tls else "plaintext"
    print(f"{args.connections:,} idle {kind} connections, connections.max.idle.ms={args.idle_ms}")
    print(f"opened in {opened_s:.1f} s")
    print(f"broker RSS: {before / 2**20:.1f} MiB before, {held / 2**20:.1f} MiB held")
    print(f"  {per_connection / 1024:.1f} KiB per idle connection")
    if first_closed_s is not None:
        print(
            f"first closed {first_closed_s - args.idle_ms / 1000:+.1f} s from the first one's"
            " deadline"
        )
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
    seconds = timeit.timeit(lambda: (idle.remove(key), idle.touch(key, 1e9)), number=calls)
    print(f"idle bookkeeping per request (remove + touch): {seconds / calls * 1e6:.2f} us")


if __name__ == "__main__":
    main()
