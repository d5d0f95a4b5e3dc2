"""Kafka framing and request headers, sans-I/O.

A Kafka frame is a 4-byte big-endian size followed by that many bytes. ``FrameDecoder`` takes
whatever the socket gave and hands back whole frames; it never reads from a socket itself, so
it is tested with plain bytes. Request headers are parsed by hand here (they are four fixed
fields and a tag buffer): it is the first thing done for every request and needs no schema.
"""

import struct
from dataclasses import dataclass

from minibroker.protocol import codec

_SIZE = struct.Struct(">i")
# Frames missing at least this much are received straight into their own buffer.
LARGE_FRAME_BYTES = 64 * 1024
# A large frame's buffer grows as its bytes arrive, by at least this much (and doubling), up
# to the declared size: a peer that declares 100 MiB and sends 1 KiB holds about 1 MiB of
# the broker's memory, not 100 MiB (the frame fuzzer measured +100 MiB RSS per such client).
LARGE_FRAME_GROWTH = 1024 * 1024
_HEADER_FIXED = struct.Struct(">hhi")


class FrameError(Exception):
    """The peer sent bytes that cannot be a Kafka request; Kafka closes such a connection."""


class FrameDecoder:
    """Cuts a byte stream into frames of at most ``max_frame_size`` bytes.

    Frames come out as bytearrays the caller owns and may modify (the produce path stamps
    offsets into them in place). Small frames are copied out of the read-ahead buffer; a frame
    larger than what has arrived gets its own buffer, and ``unfilled()`` hands the caller room
    for the part still missing so it can receive straight into it (``recv_into``) instead of
    passing every byte through the read-ahead buffer first. That buffer grows with what
    arrives (``LARGE_FRAME_GROWTH``), so memory follows the bytes a peer sent, not the size
    it declared; the caller must release the view ``unfilled()`` gave before asking again.
    """

    def __init__(self, max_frame_size: int, limit_name: str = "socket.request.max.bytes") -> None:
        # Both may change between frames: a SASL connection has a smaller limit until it
        # has authenticated (sasl.server.max.receive.size).
        self.max_frame_size = max_frame_size
        self.limit_name = limit_name
        self._buffer = bytearray()
        self._start = 0
        self._large: bytearray | None = None
        self._large_size = 0  # the declared size; the buffer may still be shorter
        self._large_filled = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes received from the peer (``unfilled`` is the faster way for large
        frames, but feeding works the same)."""
        while data and (target := self.unfilled()) is not None:
            with target:
                taken = min(len(target), len(data))
                target[:taken] = data[:taken]
            self._large_filled += taken
            data = data[taken:]
        if not data:
            return
        if self._start and self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        self._buffer += data

    def _next_size(self) -> int | None:
        if len(self._buffer) - self._start < 4:
            return None
        size: int
        (size,) = _SIZE.unpack_from(self._buffer, self._start)
        if size < 0:
            raise FrameError(f"negative frame size {size}")
        if size > self.max_frame_size:
            raise FrameError(
                f"frame of {size} bytes is larger than {self.limit_name} ({self.max_frame_size})"
            )
        return size

    def next_frame(self) -> bytearray | None:
        """Return the next complete frame's payload, or None until more bytes arrive.

        Raises FrameError for a negative or oversized length, as Kafka's socket server does
        (it closes the connection rather than trying to resynchronise the stream).
        """
        if self._large is not None:
            if self._large_filled < self._large_size:
                return None
            frame, self._large = self._large, None
            return frame
        size = self._next_size()
        if size is None:
            return None
        begin = self._start + 4
        available = len(self._buffer) - begin
        if available < size:
            if size - available >= LARGE_FRAME_BYTES:
                self._large = bytearray(min(size, available + LARGE_FRAME_GROWTH))
                self._large_size = size
                self._large[:available] = memoryview(self._buffer)[begin:]
                self._large_filled = available
                self._start = len(self._buffer)
            return None
        frame = self._buffer[begin : begin + size]
        self._start = begin + size
        if self._start > 1 << 20:
            del self._buffer[: self._start]
            self._start = 0
        return frame

    def peek(self, count: int) -> bytes | None:
        """The first ``count`` bytes (or fewer, if it is shorter) of the next frame when that
        whole frame is already in the read-ahead buffer, without taking it; None when it is
        not (nothing buffered, a partial frame, a large frame being received)."""
        if self._large is not None:
            return None
        size = self._next_size()
        if size is None:
            return None
        begin = self._start + 4
        if len(self._buffer) - begin < size:
            return None
        return bytes(self._buffer[begin : begin + min(size, count)])

    def declared_size(self) -> int | None:
        """The size of the frame being received, once its size prefix has arrived (None
        before); FrameError if that size is not allowed."""
        if self._large is not None:
            return self._large_size
        return self._next_size()

    def missing(self) -> int:
        """How many more bytes complete the size prefix or, once it is in, the frame: what
        to receive to hold no bytes beyond the current frame."""
        have = len(self._buffer) - self._start
        if self._large is not None:
            return self._large_size - self._large_filled
        if have < 4:
            return 4 - have
        size = self._next_size()
        assert size is not None
        return max(size - (have - 4), 1)

    def unfilled(self) -> memoryview | None:
        """Room for the still-missing part of a large frame, for the caller to receive into
        (all of it, or the next piece when the buffer has not grown to the declared size)."""
        if self._large is None or self._large_filled == self._large_size:
            return None
        if self._large_filled == len(self._large):
            grown = min(self._large_size, max(2 * len(self._large), len(self._large) + 1))
            self._large += bytes(max(grown - len(self._large), LARGE_FRAME_GROWTH))
            del self._large[self._large_size :]
        return memoryview(self._large)[self._large_filled :]

    def filled(self, count: int) -> None:
        """Record that ``count`` bytes were received into ``unfilled()``."""
        self._large_filled += count


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The fields of request header v1/v2 that the broker uses."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def encode_uvarint(value: int) -> bytes:
    """An unsigned varint, as flexible versions write lengths and tag counts."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_uvarint(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise FrameError("truncated varint in request header")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise FrameError("varint too long in request header")


def skip_tagged_fields(data: bytes | bytearray, pos: int) -> int:
    """Skip a tag buffer; unknown tags are ignored, as Kafka ignores them."""
    count, pos = _read_uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        pos += size
    if pos > len(data):
        raise FrameError("tagged field runs past the end of the request header")
    return pos


def parse_request_header(frame: bytes | bytearray) -> tuple[RequestHeader, int]:
    """Parse the request header; return it and the offset where the body starts.

    Header v2 (flexible requests) adds a tag buffer after the client id. Whether a request is
    flexible depends on its key and version; for versions kio has no schema for, the header is
    read as v1, which is all an unsupported-version answer needs (Kafka does the same for
    ApiVersions, whose answer must be readable by any client).
    """
    if len(frame) < _HEADER_FIXED.size + 2:
        raise FrameError(f"request of {len(frame)} bytes is too short for a header")
    api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(frame, 0)
    pos = _HEADER_FIXED.size
    (client_id_length,) = struct.unpack_from(">h", frame, pos)
    pos += 2
    client_id = None
    if client_id_length >= 0:
        if pos + client_id_length > len(frame):
            raise FrameError("client id runs past the end of the request")
        client_id = frame[pos : pos + client_id_length].decode("utf-8", "replace")
        pos += client_id_length
    if codec.request_is_flexible(api_key, api_version):
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def frame_response_header(correlation_id: int, body_size: int, *, flexible_header: bool) -> bytes:
    """The size prefix and response header (v0, or v1 with an empty tag buffer) that go in
    front of a body of ``body_size`` bytes; the body itself is sent as it is."""
    if flexible_header:
        return struct.pack(">iib", body_size + 5, correlation_id, 0)
    return struct.pack(">ii", body_size + 4, correlation_id)


def frame_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: bytes
) -> bytes:
    """A framed request: size, header v1 (or v2 with an empty tag buffer), then the body."""
    client = client_id.encode() if client_id is not None else None
    header = struct.pack(
        ">hhih", api_key, api_version, correlation_id, len(client) if client is not None else -1
    )
    if client is not None:
        header += client
    if codec.request_is_flexible(api_key, api_version):
        header += b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


def parse_response_header(frame: bytes | bytearray, *, flexible_header: bool) -> tuple[int, int]:
    """The correlation id of a response and the offset where its body starts."""
    if len(frame) < 4:
        raise FrameError(f"response of {len(frame)} bytes is too short for a header")
    (correlation_id,) = _SIZE.unpack_from(frame, 0)
    pos = 4
    if flexible_header:
        pos = skip_tagged_fields(frame, pos)
    return correlation_id, pos
