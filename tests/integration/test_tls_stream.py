"""security/tls.py's TlsStream receiving frames as the server does, from a TLS client that writes
them in many small records (as librdkafka writes a produce request): a large frame, decrypted
partly through receive_some until its size is known and then straight into its own buffer,
arrives intact whatever the record boundaries, and so do the small frames after it."""

from __future__ import annotations

import os
import socket
import ssl

import trio
import trustme

from minibroker.protocol.framing import FrameDecoder
from minibroker.security.tls import TlsStream

# Generous: only a receive that waits for bytes that never come reaches it.
RECEIVE_TIMEOUT = 20.0
CLIENT_RECORD = 4096  # the client writes this much plaintext per TLS record
SOCKET_BUFFER = 4 * 1024 * 1024


def _contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


async def _next_frame(stream: TlsStream, decoder: FrameDecoder) -> bytes | None:
    """What BrokerServer._next_frame does on a TLS connection."""
    while (frame := decoder.next_frame()) is None:
        if (target := decoder.unfilled()) is not None:
            with target:
                received = await stream.receive_into(target)
            decoder.filled(received)
        else:
            data = await stream.receive_some(1 << 20)
            received = len(data)
            decoder.feed(data)
        if not received:
            return None
    return bytes(frame)


def _framed(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


async def test_frames_written_in_small_records_arrive_intact():
    server_context, client_context = _contexts()
    # TCP, as the server's connections are (TCP_QUICKACK is set on them). The buffers hold a
    # whole 300 KB frame, so that the client can finish writing one before the server reads.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client_socket = socket.socket()
        client_socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        client_socket.connect(listener.getsockname())
        server_socket, _ = listener.accept()
        server_socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
    server = TlsStream(
        trio.SocketStream(trio.socket.from_stdlib_socket(server_socket)), server_context
    )
    client = trio.SSLStream(
        trio.SocketStream(trio.socket.from_stdlib_socket(client_socket)),
        client_context,
        server_hostname="localhost",
    )
    # (frame, whether the client writes all of it before the server starts reading it): a
    # frame received while it is written arrives a record or two per receive; one already
    # there is decrypted many records per receive_into call.
    frames = [
        (os.urandom(3 * 1024 * 1024 + 17), False),
        (b"a small request after a large one", False),
        (os.urandom(300_001), True),
        (b"x", True),
    ]
    written = [trio.Event() for _ in frames]
    received: list[bytes] = []

    async def serve() -> None:
        await server.do_handshake()
        decoder = FrameDecoder(64 * 1024 * 1024)
        for (_, written_first), event in zip(frames, written, strict=True):
            if written_first:
                await event.wait()
            received.append(await _next_frame(server, decoder))
            # The client sends the next frame only once this one is answered, so each frame
            # is received on its own, from its first record.
            await server.send_buffers([b"ok"])

    with trio.fail_after(RECEIVE_TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            for (frame, _), event in zip(frames, written, strict=True):
                data = _framed(frame)
                for start in range(0, len(data), CLIENT_RECORD):
                    await client.send_all(data[start : start + CLIENT_RECORD])
                event.set()
                assert await client.receive_some(2) == b"ok"
    assert received == [frame for frame, _ in frames]
    await client.aclose()
    await server.aclose()
