"""A Kafka client connection from this node to another: fetchers and controller channels.

Requests on one connection are answered in order, so a lock around send-then-receive keeps
the pairing trivial; callers that need parallelism open more connections (one per fetcher,
one per controller-to-broker channel), as Kafka's inter-broker clients do.

A connection to a TLS listener is wrapped in trio's SSLStream; on a SASL listener it logs in
(SaslHandshake v1, then SaslAuthenticate) before it is handed out, with the node's own
credentials (broker.security.ClientSecurity).

Re-authentication (KIP-368), as Kafka's SaslClientAuthenticator does it: when the server
answers the login with a session lifetime (its ``connections.max.reauth.ms``), the connection
logs in again, on the same socket, once 85-95% of that lifetime has passed (the jitter keeps
a broker's connections from re-authenticating at once). Kafka's client starts it from its
network thread when the time comes and nothing is in flight; here it is done before the next
request is sent, under the same lock, which is the same thing for the server: a session is
judged when a request arrives, and a SaslHandshake is accepted even after it has expired.
"""

import random
import ssl
from typing import TYPE_CHECKING, Any

import trio

from minibroker.protocol import codec, sasl
from minibroker.protocol.errors import Error
from minibroker.protocol.framing import (
    FrameDecoder,
    FrameError,
    frame_request,
    parse_response_header,
)
from minibroker.protocol.versions import SENT_VERSIONS, ApiKey

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from minibroker.security.listeners import ClientSecurity

MAX_RESPONSE_BYTES = 256 * 1024 * 1024
# What a broken or unresponsive connection raises; whoever catches it drops the connection.
# trio's ClosedResourceError is among them: a task that shares a connection finds it closed
# when another task dropped it after a failure of its own (a timeout, a broken stream).
CONNECTION_ERRORS = (
    OSError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.TooSlowError,
    FrameError,
)
# Connecting to another node, with its TLS handshake and SASL login.
CONNECT_TIMEOUT_S = 10.0
RECEIVE_SIZE = 256 * 1024


def describe_connection_error(error: BaseException, security: "ClientSecurity | None") -> str:
    """What went wrong connecting to another node, in words: trio's BrokenResourceError of a
    failed TLS handshake says nothing itself, its cause (ssl's error) does; a certificate
    that is not trusted, on a listener without a trust store, adds what to set."""
    cause = error.__cause__ or error.__context__
    if isinstance(cause, ssl.SSLError):
        reason = getattr(cause, "verify_message", None) or cause.reason or str(cause)
        text = f"the TLS handshake failed: {reason}"
        if (
            isinstance(cause, ssl.SSLCertVerificationError)
            and security is not None
            and security.missing_trust_store
        ):
            text += f" ({security.missing_trust_store})"
        return text
    if isinstance(error, trio.TooSlowError):
        return f"no connection within {CONNECT_TIMEOUT_S:g} s"
    text = str(error)
    if isinstance(error, trio.BrokenResourceError):
        return f"the connection broke{': ' + text if text else ''}"
    return text or type(error).__name__


class AuthenticationFailed(OSError):
    """The other node refused this node's SASL login; retried like a broken connection, as
    Kafka's clients retry, and logged with the server's message."""


class NodeConnection:
    """One TCP connection to a Kafka node, speaking whole requests and responses."""

    def __init__(self, stream: trio.abc.Stream, client_id: str) -> None:
        self._stream = stream
        self._client_id = client_id
        self._decoder = FrameDecoder(MAX_RESPONSE_BYTES)
        self._correlation_id = 0
        self._lock = trio.Lock()
        self._security: ClientSecurity | None = None
        # trio time at which to re-authenticate (KIP-368); None: the session does not expire.
        self.reauthenticate_at: float | None = None
        self.reauthentications = 0

    @classmethod
    async def connect(
        cls, host: str, port: int, client_id: str, security: "ClientSecurity | None" = None
    ) -> "NodeConnection":
        """Connect, then the TLS handshake and SASL login the security asks for, all within
        CONNECT_TIMEOUT_S (trio.TooSlowError, one of CONNECTION_ERRORS): a peer that was
        paused or cut off must not hold a controller channel or a fetcher for as long as TCP
        takes to give up."""
        with trio.fail_after(CONNECT_TIMEOUT_S):
            stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
            try:
                if security is not None and security.ssl_context is not None:
                    tls = trio.SSLStream(stream, security.ssl_context, server_hostname=host)
                    stream = tls
                    await tls.do_handshake()
                connection = cls(stream, client_id)
                if security is not None and security.mechanism is not None:
                    connection._security = security
                    async with connection._lock:
                        await connection._authenticate(security)
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
        return connection

    async def _authenticate(self, security: "ClientSecurity") -> None:
        """Log in (or in again); the caller holds the lock."""
        assert security.mechanism is not None  # connect() logs in only with a mechanism
        handshake = await self._request_locked(
            _build(ApiKey.SASL_HANDSHAKE, {"mechanism": security.mechanism})
        )
        if handshake.error_code.value != Error.NONE:
            raise AuthenticationFailed(
                f"SASL mechanism {security.mechanism} refused ({handshake.error_code.name}); "
                f"the listener enables {', '.join(handshake.mechanisms)}"
            )
        if security.mechanism == sasl.PLAIN:
            token = sasl.plain_client_token(security.username, security.password)
            _, lifetime = await self._sasl_step(token)
        else:
            scram = sasl.ScramClient(security.mechanism, security.username, security.password)
            server_first, _ = await self._sasl_step(scram.first())
            try:
                client_final = scram.final(server_first)
            except (sasl.SaslAuthenticationError, KeyError, ValueError) as error:
                raise AuthenticationFailed(
                    f"SCRAM server's first message refused: {error}"
                ) from None
            server_final, lifetime = await self._sasl_step(client_final)
            try:
                scram.verify(server_final)
            except (sasl.SaslAuthenticationError, KeyError, ValueError) as error:
                raise AuthenticationFailed(f"SCRAM server verification failed: {error}") from None
        self.reauthenticate_at = None
        if lifetime > 0:
            # SaslClientAuthenticator: 85% of the lifetime plus up to 10% of jitter.
            share = 0.85 + random.random() * 0.10
            self.reauthenticate_at = trio.current_time() + lifetime * share

    async def _sasl_step(self, token: bytes) -> tuple[bytes, float]:
        """One SaslAuthenticate; its reply token and the session lifetime in seconds (0:
        none, or not told yet)."""
        response = await self._request_locked(
            _build(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token})
        )
        if response.error_code.value != Error.NONE:
            raise AuthenticationFailed(
                f"{response.error_code.name}: {response.error_message or 'no message'}"
            )
        lifetime = getattr(response, "session_lifetime", None)
        seconds = lifetime.total_seconds() if lifetime is not None else 0.0
        return bytes(response.auth_bytes), seconds

    async def _maybe_reauthenticate(self) -> None:
        """KIP-368: log in again once the session is due (the caller holds the lock)."""
        if self.reauthenticate_at is None or trio.current_time() < self.reauthenticate_at:
            return
        assert self._security is not None  # only a SASL login sets reauthenticate_at
        await self._authenticate(self._security)
        self.reauthentications += 1

    async def request(self, request):
        """Send a kio request entity and return the decoded response entity.

        Raises OSError/trio errors when the connection breaks and FrameError when the peer
        answers out of order; either way the caller should drop this connection.
        """
        api_key, version = request.__api_key__, request.__version__
        frame, offset = await self.request_body(api_key, version, codec.encode_entity(request))
        return codec.decode_response(api_key, version, frame, offset)

    async def _request_locked(self, request):
        """`request` for a caller that holds the lock (the SASL login)."""
        api_key, version = request.__api_key__, request.__version__
        frame, offset = await self._exchange(api_key, version, codec.encode_entity(request))
        return codec.decode_response(api_key, version, frame, offset)

    async def request_body(self, api_key: int, version: int, body: bytes) -> tuple[bytearray, int]:
        """Send an encoded request body; return the response frame and where its body starts
        (for the hand-written codecs of the data path). Errors as for `request`."""
        async with self._lock:
            await self._maybe_reauthenticate()
            return await self._exchange(api_key, version, body)

    async def _exchange(self, api_key: int, version: int, body: bytes) -> tuple[bytearray, int]:
        self._correlation_id += 1
        correlation_id = self._correlation_id
        await self._stream.send_all(
            frame_request(api_key, version, correlation_id, self._client_id, body)
        )
        frame = await self._receive_frame()
        flexible = codec.response_uses_flexible_header(api_key, version)
        answered_id, offset = parse_response_header(frame, flexible_header=flexible)
        if answered_id != correlation_id:
            raise FrameError(f"expected correlation id {correlation_id}, got {answered_id}")
        return frame, offset

    async def _receive_frame(self) -> bytearray:
        while (frame := self._decoder.next_frame()) is None:
            data = await self._stream.receive_some(RECEIVE_SIZE)
            if not data:
                raise trio.BrokenResourceError("connection closed by peer")
            self._decoder.feed(data)
        return frame

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self._stream)


def _build(api_key: int, data: dict):
    return codec.build(codec.request_class(api_key, SENT_VERSIONS[api_key]), data)


class BrokerConnections:
    """One connection to each other broker, opened on first use and kept, shared by the
    tasks of one sender: Kafka's channel managers for inter-broker requests
    (TransactionMarkerChannelManager, the share coordinator's persister) each hold a
    NetworkClient with a connection per destination node; this is that cache.

    ``endpoint(broker_id)`` gives the broker's endpoint on the listener to use (an object with
    ``host`` and ``port``, as the metadata cache's BrokerEndpoint), or None when it is not
    known. Tasks asking for the same broker at once wait for one connect. A
    request that fails (an error, a timeout, a cancellation) closes its connection, which is
    forgotten unless another task already replaced it: the next request connects again. The
    connections are closed by ``aclose``.
    """

    def __init__(
        self,
        endpoint: "Callable[[int], Any]",
        client_id: str,
        security: "ClientSecurity | None",
        *,
        connect: "Callable[..., Awaitable[NodeConnection]]" = NodeConnection.connect,
        timeout_s: float,
    ) -> None:
        self._endpoint = endpoint
        self._client_id = client_id
        self._security = security
        self._connect = connect
        self.timeout_s = timeout_s
        self._open: dict[int, NodeConnection] = {}
        self._connecting: dict[int, trio.Lock] = {}

    async def request(self, broker_id: int, request):
        """One request to ``broker_id`` and its answer, within ``timeout_s``
        (trio.TooSlowError after it); on any failure the connection is closed, then the error
        raised."""
        connection = None
        try:
            connection = await self.connection(broker_id)
            with trio.fail_after(self.timeout_s):
                return await connection.request(request)
        except BaseException:
            await self.discard(broker_id, connection)
            raise

    async def connection(self, broker_id: int) -> NodeConnection:
        lock = self._connecting.setdefault(broker_id, trio.Lock())
        async with lock:
            connection = self._open.get(broker_id)
            if connection is None:
                endpoint = self._endpoint(broker_id)
                if endpoint is None:
                    raise OSError(f"no address known for broker {broker_id}")
                connection = await self._connect(
                    endpoint.host, endpoint.port, self._client_id, self._security
                )
                self._open[broker_id] = connection
            return connection

    async def discard(self, broker_id: int, connection: NodeConnection | None) -> None:
        """After a failed request on ``connection`` (None: it was never opened): close it,
        and forget it unless another task already replaced it with a new one."""
        if connection is None:
            return
        if self._open.get(broker_id) is connection:
            del self._open[broker_id]
        with trio.CancelScope(shield=True):
            await connection.aclose()

    async def aclose(self) -> None:
        while self._open:
            _broker_id, connection = self._open.popitem()
            with trio.CancelScope(shield=True):
                await connection.aclose()
