"""A Kafka client connection from this node to another: fetchers and controller channels.

Requests on one connection are answered in order, so a lock around send-then-receive keeps
the pairing trivial; callers that need parallelism open more connections (one per fetcher,
one per controller-to-broker channel), as Kafka's inter-broker clients do.
"""

import trio

from protocol import codec
from protocol.framing import FrameDecoder, FrameError, frame_request, parse_response_header

MAX_RESPONSE_BYTES = 256 * 1024 * 1024
# What a broken or unresponsive connection raises; whoever catches it drops the connection.
CONNECTION_ERRORS = (OSError, trio.BrokenResourceError, trio.TooSlowError, FrameError)
RECEIVE_SIZE = 256 * 1024


class NodeConnection:
    """One TCP connection to a Kafka node, speaking whole requests and responses."""

    def __init__(self, stream: trio.SocketStream, client_id: str) -> None:
        self._stream = stream
        self._client_id = client_id
        self._decoder = FrameDecoder(MAX_RESPONSE_BYTES)
        self._correlation_id = 0
        self._lock = trio.Lock()

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str) -> "NodeConnection":
        stream = await trio.open_tcp_stream(host, port)
        return cls(stream, client_id)

    async def request(self, request):
        """Send a kio request entity and return the decoded response entity.

        Raises OSError/trio errors when the connection breaks and FrameError when the peer
        answers out of order; either way the caller should drop this connection.
        """
        api_key, version = request.__api_key__, request.__version__
        frame, offset = await self.request_body(api_key, version, codec.encode_entity(request))
        return codec.decode_response(api_key, version, frame, offset)

    async def request_body(self, api_key: int, version: int, body: bytes) -> tuple[bytearray, int]:
        """Send an encoded request body; return the response frame and where its body starts
        (for the hand-written codecs of the data path). Errors as for `request`."""
        async with self._lock:
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
