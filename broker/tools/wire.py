"""One synchronous client of the Kafka wire protocol, for the tools, the tests, the benchmarks
and the fault injectors.

Kafka's own counterpart is the blocking half of ``org.apache.kafka.clients.NetworkClient``
as ``kafka.admin.ConsumerGroupCommand`` and ``kafka.tools.*`` use it through
``NetworkClientUtils.sendAndReceive``: one request at a time on one connection, the answer
matched to the request by its correlation id. The rule kept from it: a response whose
correlation id is not the one asked for is a broken connection (``NetworkClient`` throws
``CorrelationIdMismatchException``), never an answer to trust.

Where it departs, and why: there is no pipelining, no reconnection and no metadata cache.
Its users are a health check (``minibroker probe``), ``minibroker groups``, the launcher's
readiness probe (``minibroker dev``, the tests' fixtures), the benchmarks and the tests that
send malformed bytes on purpose; each of them asks, waits for the answer, and gives up on
failure. It is plain sockets, no trio, so that pytest fixtures and scripts call it directly.
The broker's own node-to-node client is ``minibroker.cluster.node_connection`` (on trio).

Framing, request headers and the schemas come from ``minibroker.protocol``, as the broker uses
them. ApiVersions v0 is framed and read by hand (``api_versions``): a readiness probe must
judge any node, whatever versions it offers, and v0 is the version every Kafka broker answers.

Errors: every failure of the peer is an ``OSError``, so that ``except OSError`` means "that
node did not answer properly": ``TimeoutError`` when it stays silent, ``WireError`` (a
``ConnectionError``) when it closes mid-frame, sends a frame of an impossible size, answers
with another correlation id (``CorrelationIdMismatch``) or with bytes that do not decode.
"""

from __future__ import annotations

import socket
import struct
import time
from functools import cache
from typing import Any

from kio.serial import entity_reader

from minibroker.protocol import codec
from minibroker.protocol.framing import FrameError, frame_request, parse_response_header
from minibroker.protocol.versions import ApiKey

DEFAULT_CLIENT_ID = "minibroker-wire"
# The largest response frame accepted; a larger declared size means the stream is not Kafka.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# A response frame holds at least its correlation id.
MIN_RESPONSE_BYTES = 4

_SIZE = struct.Struct(">i")
# ApiVersions v0 response: correlation id, error code, api count; then (key, min, max) each.
_API_VERSIONS_V0_HEAD = struct.Struct(">ihi")
_API_VERSIONS_V0_ENTRY = struct.Struct(">hhh")


class WireError(ConnectionError):
    """The peer sent bytes that are not the answer asked for; the connection is unusable."""


class CorrelationIdMismatch(WireError):
    """An answer with another correlation id than the request's (Kafka's
    ``CorrelationIdMismatchException``)."""

    def __init__(self, expected: int, received: int, what: str = "response") -> None:
        super().__init__(f"{what} answered with correlation id {received}, not {expected}")
        self.expected = expected
        self.received = received


class ApiVersionsError(WireError):
    """ApiVersions v0 answered with an error, or with bytes that are not its answer."""


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` or `[v6-address]:port` -> (host, port); raises ValueError otherwise."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not host:port")
    return host.removeprefix("[").removesuffix("]"), int(port)


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api {api_key}"


@cache
def _response_reader(api_key: int, api_version: int):
    return entity_reader(codec.response_class(api_key, api_version))


def decode_response(
    api_key: int, api_version: int, frame: bytes, *, exact: bool = False
) -> tuple[int, Any]:
    """A response frame (without its size) -> (correlation id, kio response entity).

    The header is v1 for flexible versions, v0 otherwise and always v0 for ApiVersions. With
    ``exact`` the body must use every byte of the frame: a response with stray bytes is
    malformed even though a lenient reader (Kafka's clients among them) would accept it.
    Raises WireError when the bytes do not decode.
    """
    what = f"response {_api_name(api_key)} v{api_version}"
    flexible = codec.response_uses_flexible_header(api_key, api_version)
    try:
        correlation_id, offset = parse_response_header(frame, flexible_header=flexible)
        body, size = _response_reader(api_key, api_version)(frame, offset)
    except (FrameError, ValueError, struct.error, LookupError) as error:
        raise WireError(f"cannot decode {what}: {error}") from error
    except Exception as error:  # kio raises what its readers raise
        raise WireError(f"cannot decode {what}: {error!r}") from error
    if exact and offset + size != len(frame):
        raise WireError(f"{what}: a frame of {len(frame)} bytes, the body ends at {offset + size}")
    return correlation_id, body


def api_versions_v0_request(correlation_id: int, client_id: str | None) -> bytes:
    """ApiVersions v0 framed with request header v1 (v0 has an empty body)."""
    return frame_request(ApiKey.API_VERSIONS, 0, correlation_id, client_id, b"")


def parse_api_versions_v0(frame: bytes, correlation_id: int) -> dict[int, tuple[int, int]]:
    """A complete ApiVersions v0 answer -> {api key: (lowest, highest version)}.

    Complete means: our correlation id, error 0, at least one api, and an api list that
    accounts for every byte (v0 has no throttle time and no tagged fields). Raises
    CorrelationIdMismatch or ApiVersionsError otherwise.
    """
    if len(frame) < _API_VERSIONS_V0_HEAD.size:
        if len(frame) >= 4:
            (received,) = _SIZE.unpack_from(frame)
            if received != correlation_id:
                raise CorrelationIdMismatch(correlation_id, received, "ApiVersions")
        raise ApiVersionsError("not a Kafka ApiVersions answer")
    received, error_code, count = _API_VERSIONS_V0_HEAD.unpack_from(frame)
    if received != correlation_id:
        raise CorrelationIdMismatch(correlation_id, received, "ApiVersions")
    if error_code != 0 or count <= 0 or len(frame) != 10 + _API_VERSIONS_V0_ENTRY.size * count:
        raise ApiVersionsError(f"ApiVersions failed (error code {error_code})")
    versions = {}
    for index in range(count):
        key, low, high = _API_VERSIONS_V0_ENTRY.unpack_from(frame, 10 + 6 * index)
        versions[key] = (low, high)
    return versions


class WireClient:
    """One connection to one node, one request at a time.

    ``timeout`` bounds each socket operation; ``deadline`` (a ``time.monotonic()`` value)
    bounds everything done on the connection, for callers that have a budget for a whole
    conversation (``minibroker groups``, ``minibroker probe``). Correlation ids count up from
    1 unless the caller picks its own. ``exact`` makes every decoded response prove it used
    all of its frame (the tests want that; tools reading a real Kafka do not need it).
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        client_id: str | None = DEFAULT_CLIENT_ID,
        deadline: float | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        exact: bool = False,
        address: str | None = None,
    ) -> None:
        self.sock = sock
        self.client_id = client_id
        self.deadline = deadline
        self.max_response_bytes = max_response_bytes
        self.exact = exact
        self.address = address if address is not None else _peer_name(sock)
        self._last_correlation_id = 0

    # -- connection ---------------------------------------------------------------------------

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _arm(self) -> None:
        """Bound the next socket operation by the deadline, if there is one."""
        if self.deadline is None:
            return
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{self.address}: no answer in time")
        self.sock.settimeout(remaining)

    def next_correlation_id(self) -> int:
        self._last_correlation_id += 1
        return self._last_correlation_id

    # -- raw frames (the tests that send malformed bytes use these) ---------------------------

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are: a frame, part of one, or anything else."""
        self._arm()
        self.sock.sendall(data)

    def send_request(
        self, api_key: int, api_version: int, body: bytes, *, correlation_id: int | None = None
    ) -> int:
        """Frame ``body`` behind the request header its version calls for (v2 when flexible,
        else v1) and send it; returns the correlation id used. ``body`` is sent as given, so
        it may be any bytes at all."""
        if correlation_id is None:
            correlation_id = self.next_correlation_id()
        self.send_raw(frame_request(api_key, api_version, correlation_id, self.client_id, body))
        return correlation_id

    def _receive_exactly(self, count: int, what: str) -> bytes:
        received = bytearray()
        while len(received) < count:
            self._arm()
            chunk = self.sock.recv(min(count - len(received), 1 << 20))
            if not chunk:
                raise WireError(
                    f"{self.address}: closed the connection after {len(received)} of the"
                    f" {count} bytes of {what}"
                )
            received += chunk
        return bytes(received)

    def receive_frame(self) -> bytes:
        """One response frame, without its size. Raises WireError when the peer closes before
        the frame is whole or declares a size no response has."""
        (size,) = _SIZE.unpack(self._receive_exactly(4, "a frame size"))
        if not MIN_RESPONSE_BYTES <= size <= self.max_response_bytes:
            raise WireError(f"{self.address}: a response of {size} bytes is not a Kafka response")
        return self._receive_exactly(size, f"a frame of {size} bytes")

    def receive_response(
        self, api_key: int, api_version: int, *, correlation_id: int | None = None
    ) -> tuple[int, Any]:
        """Receive and decode one response -> (correlation id, entity); with
        ``correlation_id``, an answer carrying another one raises CorrelationIdMismatch."""
        received, body = decode_response(
            api_key, api_version, self.receive_frame(), exact=self.exact
        )
        if correlation_id is not None and received != correlation_id:
            raise CorrelationIdMismatch(correlation_id, received, _api_name(api_key))
        return received, body

    # -- requests -----------------------------------------------------------------------------

    def request(
        self,
        api_key: int,
        api_version: int,
        data: Any,
        *,
        correlation_id: int | None = None,
    ) -> Any:
        """Send one request and return its decoded response entity.

        ``data`` is a kio request entity of that key and version, or a version-neutral dict
        (``codec.build`` drops the fields the version lacks and defaults the ones left out).
        """
        if isinstance(data, dict):
            data = codec.build(codec.request_class(api_key, api_version), data)
        sent = self.send_request(
            api_key, api_version, codec.encode_entity(data), correlation_id=correlation_id
        )
        _, body = self.receive_response(api_key, api_version, correlation_id=sent)
        return body

    def call(self, request: Any, *, correlation_id: int | None = None) -> Any:
        """``request`` for a kio request entity, whose class names its key and version."""
        return self.request(
            request.__api_key__, request.__version__, request, correlation_id=correlation_id
        )

    def api_versions(self, *, correlation_id: int | None = None) -> dict[int, tuple[int, int]]:
        """ApiVersions v0, framed and read by hand: {api key: (lowest, highest version)}.

        Raises ApiVersionsError unless the answer is complete and without error, which is
        what the launcher's readiness probe calls "ready"."""
        if correlation_id is None:
            correlation_id = self.next_correlation_id()
        self.send_raw(api_versions_v0_request(correlation_id, self.client_id))
        return parse_api_versions_v0(self.receive_frame(), correlation_id)


def _peer_name(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except (OSError, ValueError):
        return "the peer"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def connect(
    address: str | tuple[str, int],
    timeout: float | None = None,
    *,
    deadline: float | None = None,
    client_id: str | None = DEFAULT_CLIENT_ID,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
    exact: bool = False,
) -> WireClient:
    """A WireClient on a new TCP connection to ``address`` (``host:port`` or a (host, port)
    pair). ``timeout`` bounds the connect and each later socket operation; ``deadline``, when
    given, bounds all of them together (and the connect by what is left of it)."""
    if isinstance(address, str):
        host, port = parse_address(address)
        name = address.strip()
    else:
        host, port = address
        name = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    connect_timeout = timeout
    if deadline is not None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{name}: no answer in time")
        connect_timeout = remaining if timeout is None else min(timeout, remaining)
    sock = socket.create_connection((host, port), timeout=connect_timeout)
    sock.settimeout(timeout)
    return WireClient(
        sock,
        client_id=client_id,
        deadline=deadline,
        max_response_bytes=max_response_bytes,
        exact=exact,
        address=name,
    )


def answers_api_versions(
    address: str | tuple[str, int], timeout: float, client_id: str | None = DEFAULT_CLIENT_ID
) -> bool:
    """Whether the node at ``address`` answers ApiVersions v0 completely and without error
    within ``timeout`` seconds: the readiness test of the launcher (a listening socket alone
    proves nothing; the node must read a frame and answer it, the first thing every Kafka
    client does)."""
    deadline = time.monotonic() + timeout
    try:
        with connect(
            address, timeout, deadline=deadline, client_id=client_id, max_response_bytes=1 << 20
        ) as client:
            client.api_versions()
            return True
    except OSError:
        return False
