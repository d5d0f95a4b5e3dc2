"""TCP proxies in front of a test cluster's listeners: network faults without root.

Kafka has no such thing of its own; the model is Toxiproxy (Shopify's), which test suites put
between a client and a server to make the network slow, narrow or absent on demand. Here one
trio loop, in a thread of its own, runs every proxy of a cluster; each broker advertises its
proxies' ports instead of its listeners' (``advertised.listeners``), so clients and the other
brokers reach it only through them, while the launcher's readiness checks and the Cluster's
own admin requests go to the listeners directly and see the broker as it is.

The faults, per node:

- latency: every chunk the node sends back is delivered that much later (Toxiproxy's
  ``latency`` toxic on the downstream), so each round trip to the node grows by it;
- bandwidth: each connection carries at most that many bytes per second in each direction;
- drop: every open connection to the node is closed at once (new ones are accepted);
- cut: the connections stop carrying bytes, in both directions, and new ones are accepted
  but carry nothing either, as across a network partition (packets lost, no reset): a peer
  sees its requests time out. What was held is delivered after ``heal``, as TCP would
  retransmit it. Cut off from clients, a node's client listeners go silent; cut off from the
  brokers, so do its inter-broker and controller listeners, and so do the connections it
  opens to the other nodes' ones.

Which node opened a connection to an inter-broker or controller proxy is read from Linux's
``/proc``: the peer's port names a socket in ``/proc/net/tcp``, whose inode is among the open
files of exactly one node process. This is why the cut needs no root and no network namespace,
and why it is Linux only.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

import trio

CLIENT = "client"
BROKER = "broker"
CHUNK_BYTES = 65536
# A bandwidth limit is kept in slices this long, so a large chunk does not go out in one burst.
BANDWIDTH_SLICE_SECONDS = 0.05
QUEUED_CHUNKS = 32
_EOF = b""


@dataclass(eq=False)
class Link:
    """One proxied connection; ``source`` is the node that opened it, when it is a node."""

    proxy: Proxy
    source: int | None
    peer_port: int = 0
    cancel_scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    @property
    def held(self) -> bool:
        hub = self.proxy.hub
        return self.proxy.cut or (
            self.proxy.kind == BROKER and self.source is not None and self.source in hub.isolated
        )


@dataclass(eq=False)
class Proxy:
    """One listening port in front of one listener of one node."""

    hub: ProxyHub
    node_id: int
    listener: str
    kind: str  # CLIENT or BROKER (inter-broker and controller listeners)
    target_port: int
    port: int = 0
    latency: float = 0.0
    bandwidth: int | None = None
    cut: bool = False
    links: set[Link] = field(default_factory=set)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


class ProxyHub:
    """Every proxy of one cluster, served by one trio loop in a daemon thread.

    The methods are called from the test's thread; each one runs on the loop and returns when
    it took effect there. ``node_pids`` answers {pid: node id} for the node processes running
    now, for telling which node opened a connection.
    """

    def __init__(self, node_pids: Callable[[], Mapping[int, int]]) -> None:
        self.node_pids = node_pids
        self.proxies: list[Proxy] = []
        # Nodes cut off from the brokers: connections they open to BROKER proxies are held.
        self.isolated: set[int] = set()
        self._changed: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="minibroker-proxies", daemon=True)

    # -- the loop -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise RuntimeError("the proxy loop did not start") from self._failure

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as error:  # reported by start() or close()
            self._failure = error
            self._ready.set()

    async def _main(self) -> None:
        self._changed = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._ready.set()
            await trio.sleep_forever()

    def close(self) -> None:
        """Close every proxy and every connection through them; stop the loop."""
        if self._token is not None and self._thread.is_alive():
            nursery = self._nursery
            assert nursery is not None
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(nursery.cancel_scope.cancel, trio_token=self._token)
            self._thread.join(10)

    def _call(self, function: Callable[[], object]) -> None:
        """Run ``function`` on the loop and wake every connection that waits on a change."""

        def apply() -> None:
            function()
            assert self._changed is not None
            self._changed.set()
            self._changed = trio.Event()

        assert self._token is not None, "start() first"
        trio.from_thread.run_sync(apply, trio_token=self._token)

    # -- proxies ------------------------------------------------------------------------------

    def add(self, node_id: int, listener: str, kind: str) -> Proxy:
        """A proxy listening on a free port of 127.0.0.1 now; its target is set later
        (``target_port``), once the node's own ports are chosen."""
        proxy = Proxy(self, node_id, listener, kind, target_port=0)
        assert self._token is not None, "start() first"
        trio.from_thread.run(self._open, proxy, trio_token=self._token)
        self.proxies.append(proxy)
        return proxy

    async def _open(self, proxy: Proxy) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        proxy.port = listeners[0].socket.getsockname()[1]
        assert self._nursery is not None
        self._nursery.start_soon(trio.serve_listeners, partial(self._serve, proxy), listeners)

    def of(self, node_id: int) -> list[Proxy]:
        return [proxy for proxy in self.proxies if proxy.node_id == node_id]

    # -- faults (called from the test's thread) -----------------------------------------------

    def set_latency(self, node_id: int, seconds: float) -> None:
        def apply() -> None:
            for proxy in self.of(node_id):
                proxy.latency = seconds

        self._call(apply)

    def set_bandwidth(self, node_id: int, bytes_per_second: int | None) -> None:
        def apply() -> None:
            for proxy in self.of(node_id):
                proxy.bandwidth = bytes_per_second

        self._call(apply)

    def drop(self, node_id: int) -> int:
        """Close every connection to the node's proxies; return how many there were."""
        dropped = []

        def apply() -> None:
            for proxy in self.of(node_id):
                for link in list(proxy.links):
                    link.cancel_scope.cancel()
                    dropped.append(link)

        self._call(apply)
        return len(dropped)

    def cut(self, node_id: int, from_clients: bool, from_brokers: bool) -> None:
        def apply() -> None:
            if from_brokers:
                self._identify_sources()
            for proxy in self.of(node_id):
                if (proxy.kind == CLIENT and from_clients) or (
                    proxy.kind == BROKER and from_brokers
                ):
                    proxy.cut = True
            if from_brokers:
                self.isolated.add(node_id)

        self._call(apply)

    def heal(self, node_id: int) -> None:
        """Remove every fault of the node: latency, bandwidth limit and cuts."""

        def apply() -> None:
            for proxy in self.of(node_id):
                proxy.latency = 0.0
                proxy.bandwidth = None
                proxy.cut = False
            self.isolated.discard(node_id)

        self._call(apply)

    def _identify_sources(self) -> None:
        """Name the node behind every connection to an inter-broker or controller proxy that
        is not named yet (those opened while the cluster started, before its pids were
        known)."""
        pids = dict(self.node_pids())
        for proxy in self.proxies:
            if proxy.kind != BROKER:
                continue
            for link in proxy.links:
                if link.source is None:
                    link.source = connection_owner(link.peer_port, proxy.port, pids)

    # -- connections --------------------------------------------------------------------------

    async def _serve(self, proxy: Proxy, client: trio.SocketStream) -> None:
        source = None
        peer_port = client.socket.getpeername()[1]
        if proxy.kind == BROKER:
            source = await trio.to_thread.run_sync(
                connection_owner, peer_port, proxy.port, dict(self.node_pids())
            )
        link = Link(proxy, source, peer_port)
        async with client:
            try:
                server = await trio.open_tcp_stream("127.0.0.1", proxy.target_port)
            except OSError:
                return  # the node is down: the client sees its connection closed
            proxy.links.add(link)
            try:
                async with server, trio.open_nursery() as nursery:
                    link.cancel_scope = nursery.cancel_scope
                    nursery.start_soon(self._pump, link, client, server, False)
                    nursery.start_soon(self._pump, link, server, client, True)
            finally:
                proxy.links.discard(link)

    async def _pump(
        self, link: Link, source: trio.SocketStream, sink: trio.SocketStream, downstream: bool
    ) -> None:
        """Carry one direction of a connection; its end (EOF or an error) ends both."""
        send, receive = trio.open_memory_channel[tuple[float, bytes]](QUEUED_CHUNKS)

        async def read() -> None:
            async with send:
                while True:
                    try:
                        data = await source.receive_some(CHUNK_BYTES)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        data = _EOF
                    await send.send((trio.current_time(), data))
                    if not data:
                        return

        proxy = link.proxy
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            async with receive:
                async for arrived, data in receive:
                    if downstream and proxy.latency:
                        await trio.sleep_until(arrived + proxy.latency)
                    while link.held:
                        assert self._changed is not None
                        await self._changed.wait()
                    if not data:
                        link.cancel_scope.cancel()
                        return
                    try:
                        await self._send(proxy, sink, data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        link.cancel_scope.cancel()
                        return

    async def _send(self, proxy: Proxy, sink: trio.SocketStream, data: bytes) -> None:
        if proxy.bandwidth is None:
            await sink.send_all(data)
            return
        view = memoryview(data)
        while view:
            rate = proxy.bandwidth or 1
            piece = view[: max(1, int(rate * BANDWIDTH_SLICE_SECONDS))]
            await sink.send_all(piece)
            view = view[len(piece) :]
            await trio.sleep(len(piece) / rate)


def connection_owner(peer_port: int, local_port: int, pids: Mapping[int, int]) -> int | None:
    """The node id (a value of ``pids``, by pid) whose process holds the IPv4 loopback socket
    127.0.0.1:``peer_port`` connected to ``local_port``; None when no node does (a client)."""
    wanted_local = f"0100007F:{peer_port:04X}"
    wanted_remote = f"0100007F:{local_port:04X}"
    inode = None
    try:
        with open("/proc/net/tcp") as table:
            next(table)
            for line in table:
                fields = line.split()
                if fields[1] == wanted_local and fields[2] == wanted_remote:
                    inode = fields[9]
                    break
    except OSError:
        return None
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid, node_id in pids.items():
        directory = f"/proc/{pid}/fd"
        try:
            descriptors = os.listdir(directory)
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                if os.readlink(f"{directory}/{descriptor}") == target:
                    return node_id
            except OSError:
                continue
    return None
