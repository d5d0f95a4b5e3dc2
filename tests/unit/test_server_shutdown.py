"""The server's listeners at shutdown (node/server.py, BrokerServer._accept): stopping while
clients connect never fails, and every listening socket ends closed.

The race this guards against: a connection arrives, trio wakes the accept loop waiting on
that socket, and in the same scheduler round shutdown cancels the loops and closes the
sockets. The woken loop can no longer be cancelled (its wait is over), so it called accept on
a closed socket and raised trio.ClosedResourceError: the broker exited with 1 on SIGTERM
(seen in CI, tests/spark/test_failover.py, where clients reconnect all the time). In-process,
on real loopback sockets; the accepted connections are collected and closed, not served.
"""

import socket

import trio
import trio.testing

from minibroker.common.config import BrokerConfig
from minibroker.node.server import BrokerServer

ROUNDS = 60


class _Collected:
    """Stands in for the connections nursery: keeps what would be served."""

    def __init__(self) -> None:
        self.streams: list[trio.SocketStream] = []

    def start_soon(self, serve, listener_name, stream, peer) -> None:
        self.streams.append(stream)


async def _stop_while_a_client_connects(server: BrokerServer) -> list[trio.SocketListener]:
    sockets = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = sockets[0].socket.getsockname()[1]
    collected = _Collected()
    accepting = trio.CancelScope()
    closed = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server._accept, [("PLAINTEXT", sockets)], collected, accepting, closed)
        await trio.testing.wait_all_tasks_blocked()
        client = socket.create_connection(("127.0.0.1", port))
        try:
            # One checkpoint: the next scheduler round sees the socket readable and wakes the
            # accept loop, in the same round as the cancellation below (or not: either way).
            await trio.lowlevel.checkpoint()
            accepting.cancel()
            await closed.wait()
        finally:
            client.close()
    for stream in collected.streams:
        await stream.aclose()
    return sockets


def test_stopping_while_clients_connect_closes_every_listener_without_an_error(tmp_path):
    server = BrokerServer(BrokerConfig.from_properties({"log.dirs": str(tmp_path)}))
    server.cluster_id = "cluster"

    async def main() -> None:
        for _ in range(ROUNDS):
            sockets = await _stop_while_a_client_connects(server)
            assert all(listener.socket.fileno() == -1 for listener in sockets)

    trio.run(main)
