"""minibroker.testing.proxy in front of a plain TCP echo server (no broker): each fault as a
peer sees it, in well under a second each."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from minibroker.testing.proxy import BROKER, CLIENT, ProxyHub

NODE = 1


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


@pytest.fixture
def hub() -> Iterator[ProxyHub]:
    # This test process stands for node 2: connections it opens are named as node 2's.
    hub = ProxyHub(lambda: {os.getpid(): 2})
    hub.start()
    yield hub
    hub.close()


def proxied(hub: ProxyHub, target: int, kind: str = CLIENT) -> socket.socket:
    proxy = hub.add(NODE, "PLAINTEXT" if kind == CLIENT else "INTERNAL", kind)
    proxy.target_port = target
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=5)


def round_trip(sock: socket.socket, data: bytes = b"ping") -> float:
    started = time.monotonic()
    sock.sendall(data)
    received = b""
    while len(received) < len(data):
        chunk = sock.recv(65536)
        assert chunk, "the proxy closed the connection"
        received += chunk
    assert received == data
    return time.monotonic() - started


def test_latency_delays_each_answer(hub, echo_port):
    with proxied(hub, echo_port) as sock:
        assert round_trip(sock) < 0.1
        hub.set_latency(NODE, 0.2)
        assert 0.19 <= round_trip(sock) < 1.0
        hub.heal(NODE)
        assert round_trip(sock) < 0.1


def test_bandwidth_limits_each_direction(hub, echo_port):
    with proxied(hub, echo_port) as sock:
        hub.set_bandwidth(NODE, 40_000)
        # 20 kB at 40 kB/s goes out in 2 kB slices 50 ms apart (the echo sends each slice
        # back at once, so the two directions overlap): the last one after 0.45 s.
        assert round_trip(sock, b"x" * 20_000) >= 0.4
        hub.set_bandwidth(NODE, None)
        assert round_trip(sock, b"x" * 20_000) < 0.2


def test_drop_closes_open_connections_and_accepts_new_ones(hub, echo_port):
    proxy_sock = proxied(hub, echo_port)
    with proxy_sock:
        round_trip(proxy_sock)
        assert hub.drop(NODE) == 1
        proxy_sock.settimeout(5)
        assert proxy_sock.recv(10) == b""
    port = hub.of(NODE)[0].port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as again:
        round_trip(again)


def test_a_cut_holds_bytes_until_heal(hub, echo_port):
    with proxied(hub, echo_port) as sock:
        round_trip(sock)
        hub.cut(NODE, from_clients=True, from_brokers=False)
        sock.sendall(b"held")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(10)
        hub.heal(NODE)
        sock.settimeout(5)
        assert sock.recv(10) == b"held"


def test_a_node_cut_from_the_brokers_is_held_on_the_others_proxies(hub, echo_port):
    """The connection comes from this process, which the hub takes for node 2; cutting node 2
    off from the brokers holds it on node 1's inter-broker proxy, and a client cut does not."""
    with proxied(hub, echo_port, kind=BROKER) as sock:
        round_trip(sock)
        hub.cut(2, from_clients=True, from_brokers=False)
        assert round_trip(sock) < 0.5
        hub.cut(2, from_clients=False, from_brokers=True)
        sock.sendall(b"held")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(10)
        hub.heal(2)
        sock.settimeout(5)
        assert sock.recv(10) == b"held"
