"""The server side of a TLS connection, on ssl.SSLObject and memory BIOs over a trio socket.

trio's SSLStream would do, but it decrypts one TLS record (16 KiB at most) per receive_some
and returns it as new bytes, which the frame decoder then copies again: a 1 MB produce request
costs about 64 trips through trio and two copies. Here ciphertext is received in large chunks
(`recv_into` a reused buffer) and every record already received is decrypted straight into
the frame's own buffer (``SSLObject.read(n, buffer)``) in one call; a response's buffers are
encrypted into the outgoing BIO and sent with one ``send_all``.

One task uses a connection at a time (the server's loop: receive a request, send its answer),
so no locking is needed. TLS 1.3 session tickets and any other handshake message produced
while reading are flushed after each read.
"""

import contextlib
import socket
import ssl
from typing import cast

import trio

# Ciphertext received per system call; large enough for a big produce request's records to
# arrive in a few calls.
CIPHERTEXT_CHUNK = 256 * 1024
# What a connection receives into at first (one TLS record and its overhead): it grows to
# CIPHERTEXT_CHUNK once a receive fills it. It is given back after the handshake and taken
# again only once the socket is readable, so idle or unauthenticated connections, which a
# client can open by the thousand, hold no receive buffer while they wait (and no
# FRAME_START_PLAINTEXT buffer until they send).
FIRST_CIPHERTEXT_CHUNK = 17 * 1024
# Acknowledge received data at once (Linux only; the kernel clears it, so it is set after each
# receive). librdkafka leaves Nagle's algorithm on and writes a request as several TLS
# records: its second send waits for the ACK of the first, which a delayed ACK holds back
# 40 ms. Measured with kcat consuming 1M x 100 B in 1 MB fetches over SSL: 7.5 s without,
# 2.2 s with. (Over plain TCP librdkafka writes a request in one sendmsg.)
QUICKACK = getattr(socket, "TCP_QUICKACK", None)
# Plaintext encrypted before it is sent; a large response goes out in pieces this size.
SEND_CHUNK = 256 * 1024
# The most plaintext receive_some decrypts. The server uses it until a frame's size is known,
# and what it returns is copied twice more (into the frame decoder, then into a large frame's
# own buffer), so it stops at one TLS record's worth: a produce request's size is in its
# first record, and the rest is decrypted straight into the frame by receive_into. (At
# 256 KiB, up to a quarter of every 1 MB produce request took the extra copies.)
FRAME_START_PLAINTEXT = 16 * 1024


class TlsStream:
    """A server-side TLS connection over ``transport`` (a trio.SocketStream)."""

    def __init__(self, transport: trio.SocketStream, context: ssl.SSLContext) -> None:
        self.transport = transport
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._chunk: bytearray | None = bytearray(FIRST_CIPHERTEXT_CHUNK)
        self._scratch: bytearray | None = None

    @property
    def socket(self):
        return self.transport.socket

    def getpeercert(self) -> dict | None:
        return self._ssl.getpeercert()

    async def do_handshake(self) -> None:
        """Run the handshake; a peer that is not a TLS client, or whose certificate does not
        verify, raises trio.BrokenResourceError with the ssl error as its cause."""
        while True:
            try:
                self._ssl.do_handshake()
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise trio.BrokenResourceError(
                        "connection closed during the TLS handshake"
                    ) from None
                continue
            except ssl.SSLError as error:
                await self._flush_quietly()  # the alert tells the client why
                raise trio.BrokenResourceError(f"TLS handshake failed: {error}") from error
            await self._flush()
            self._chunk = None  # taken again when the client sends (see _fill)
            return

    async def _fill(self) -> bool:
        """Receive ciphertext into the incoming BIO; False when the peer closed. A reset
        connection raises trio.BrokenResourceError, as trio's own streams do."""
        sock = self.transport.socket
        try:
            if self._chunk is None:
                await trio.lowlevel.wait_readable(sock)
                self._chunk = bytearray(FIRST_CIPHERTEXT_CHUNK)
            received = await sock.recv_into(self._chunk)
        except OSError as error:
            raise trio.BrokenResourceError(f"connection lost: {error}") from error
        if QUICKACK is not None:
            self.transport.socket.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
        if not received:
            self._incoming.write_eof()
            return False
        self._incoming.write(memoryview(self._chunk)[:received])
        if received == len(self._chunk) < CIPHERTEXT_CHUNK:
            self._chunk = bytearray(CIPHERTEXT_CHUNK)  # data is flowing: fewer receives
        return True

    async def _flush(self) -> None:
        if self._outgoing.pending:
            await self.transport.send_all(self._outgoing.read())

    async def _flush_quietly(self) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._flush()

    async def receive_into(self, target: memoryview) -> int:
        """Decrypt into ``target`` every byte already received (at least one, waiting for
        it); 0 when the peer closed the connection."""
        filled = 0
        try:
            while filled < len(target):
                try:
                    # Given a buffer, read returns the count read into it (typeshed types
                    # only the bytes it returns without one).
                    read = cast(int, self._ssl.read(len(target) - filled, target[filled:]))
                    if not read:  # the peer closed without close_notify
                        break
                    filled += read
                except ssl.SSLWantReadError:
                    if filled:
                        break
                    await self._flush()
                    if not await self._fill():
                        return 0
        except ssl.SSLZeroReturnError:
            pass  # close_notify: what was decrypted before it still counts
        except ssl.SSLError as error:
            raise trio.BrokenResourceError(f"TLS error: {error}") from error
        await self._flush()
        return filled

    async def receive_some(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of plaintext, and at most FRAME_START_PLAINTEXT (b"" when the
        peer closed)."""
        if self._scratch is None:
            self._scratch = bytearray(FRAME_START_PLAINTEXT)
        view = memoryview(self._scratch)[: min(max_bytes, len(self._scratch))]
        received = await self.receive_into(view)
        return bytes(view[:received])

    async def send_buffers(self, buffers: list) -> None:
        """Encrypt a response given as buffers and send it, a chunk at a time so that the
        client decrypts the start of a large Fetch response while the rest is encrypted.
        The buffers are joined first: written one by one, a Fetch response's small pieces
        (headers between record sets) would each become a TLS record of its own, which
        costs the client a decryption call each."""
        response = memoryview(b"".join(buffers))
        for start in range(0, len(response), SEND_CHUNK):
            try:
                self._ssl.write(response[start : start + SEND_CHUNK])
            except ssl.SSLError as error:
                raise trio.BrokenResourceError(f"TLS error: {error}") from error
            await self._flush()

    async def aclose(self) -> None:
        await self.transport.aclose()
