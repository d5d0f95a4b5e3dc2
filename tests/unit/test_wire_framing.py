"""The blocking wire client's framing edge cases, against a tiny scripted server in the test.

The server is a real listening socket on 127.0.0.1 in a thread: it reads one request frame per
step of its script and answers with whatever bytes the step makes of it (a wrong correlation
id, half a frame, nothing), then closes. The client under test runs in the test's thread.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable

import pytest

from minibroker.protocol import codec
from minibroker.protocol.framing import parse_request_header
from minibroker.protocol.versions import ApiKey
from minibroker.tools import wire

# What one step of the script answers to a request frame (without its size); None: nothing.
Step = Callable[[bytes], bytes | None]


class ScriptedServer:
    """Accepts one connection and plays `script`: one step per request frame received."""

    def __init__(self, script: list[Step], *, linger: float = 0.0) -> None:
        self.script = script
        self.linger = linger  # seconds to keep the connection open after the script
        self.requests: list[bytes] = []
        self._closing = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(10)
        self.port = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            for step in self.script:
                size_bytes = conn.recv(4, socket.MSG_WAITALL)
                if len(size_bytes) < 4:
                    return
                (size,) = struct.unpack(">i", size_bytes)
                frame = conn.recv(size, socket.MSG_WAITALL)
                self.requests.append(frame)
                answer = step(frame)
                if answer:
                    conn.sendall(answer)
            self._closing.wait(self.linger)

    def close(self) -> None:
        self._closing.set()
        self._listener.close()
        self._thread.join(10)


@pytest.fixture
def serve():
    servers: list[ScriptedServer] = []

    def start(*script: Step, linger: float = 0.0) -> ScriptedServer:
        server = ScriptedServer(list(script), linger=linger)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def correlation_of(frame: bytes) -> int:
    return parse_request_header(frame)[0].correlation_id


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def metadata_answer(correlation_id: int, *, trailing: bytes = b"") -> bytes:
    """A Metadata v12 response (header v1: correlation id and an empty tag buffer)."""
    body = codec.encode_response(
        ApiKey.METADATA, 12, {"brokers": [], "cluster_id": "c", "controller_id": 1, "topics": []}
    )
    return framed(struct.pack(">ib", correlation_id, 0) + body + trailing)


def api_versions_answer(correlation_id: int, error_code: int = 0, keys=((3, 0, 12),)) -> bytes:
    payload = struct.pack(">ihi", correlation_id, error_code, len(keys))
    for key in keys:
        payload += struct.pack(">hhh", *key)
    return framed(payload)


METADATA_FIELDS = {
    "topics": [],
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}


def test_request_is_framed_with_the_version_s_header_and_the_answer_decoded(serve):
    server = serve(lambda frame: metadata_answer(correlation_of(frame)))
    with wire.connect(server.address, 5, client_id="edge") as client:
        response = client.request(ApiKey.METADATA, 12, METADATA_FIELDS)
    assert (response.cluster_id, response.controller_id) == ("c", 1)
    (frame,) = server.requests
    header, offset = parse_request_header(frame)
    assert (header.api_key, header.api_version, header.client_id) == (3, 12, "edge")
    assert header.correlation_id == 1
    request = codec.decode_request(3, 12, frame, offset)
    assert request.allow_auto_topic_creation is False


def test_correlation_ids_count_up_on_one_connection(serve):
    answer = lambda frame: metadata_answer(correlation_of(frame))  # noqa: E731
    server = serve(answer, answer, answer)
    with wire.connect(server.address, 5) as client:
        for _ in range(3):
            client.request(ApiKey.METADATA, 12, METADATA_FIELDS)
    assert [correlation_of(frame) for frame in server.requests] == [1, 2, 3]


def test_a_wrong_correlation_id_is_refused(serve):
    server = serve(lambda frame: metadata_answer(correlation_of(frame) + 1))
    with (
        wire.connect(server.address, 5) as client,
        pytest.raises(wire.CorrelationIdMismatch) as raised,
    ):
        client.request(ApiKey.METADATA, 12, METADATA_FIELDS, correlation_id=41)
    assert (raised.value.expected, raised.value.received) == (41, 42)
    assert isinstance(raised.value, OSError)


def test_a_connection_closed_mid_frame_is_a_wire_error(serve):
    server = serve(lambda frame: struct.pack(">i", 100) + b"x" * 10)
    with wire.connect(server.address, 5) as client, pytest.raises(wire.WireError) as raised:
        client.request(ApiKey.METADATA, 12, METADATA_FIELDS)
    assert "closed the connection after 10 of the 100 bytes" in str(raised.value)


def test_a_connection_closed_mid_size_is_a_wire_error(serve):
    server = serve(lambda frame: b"\x00\x00")
    with wire.connect(server.address, 5) as client, pytest.raises(wire.WireError) as raised:
        client.request(ApiKey.METADATA, 12, METADATA_FIELDS)
    assert "after 2 of the 4 bytes of a frame size" in str(raised.value)


@pytest.mark.parametrize("size", [-1, 0, 3, 1 << 20])
def test_an_impossible_frame_size_is_a_wire_error(serve, size):
    server = serve(lambda frame: struct.pack(">i", size), linger=5)
    with (
        wire.connect(server.address, 5, max_response_bytes=(1 << 20) - 1) as client,
        pytest.raises(wire.WireError, match=f"a response of {size} bytes"),
    ):
        client.request(ApiKey.METADATA, 12, METADATA_FIELDS)


# A silent peer holds its connection this long (closing the server ends it at once). The
# 0.3 s timeouts below are told from it by a bound of half of it: a loaded machine makes the
# timeout late by seconds at worst, not by 30.
SILENCE = 60.0


def test_a_silent_peer_times_out(serve):
    server = serve(lambda frame: None, linger=SILENCE)
    started = time.monotonic()
    with wire.connect(server.address, 0.3) as client, pytest.raises(TimeoutError):
        client.request(ApiKey.METADATA, 12, METADATA_FIELDS)
    assert time.monotonic() - started < SILENCE / 2


def test_the_deadline_bounds_the_whole_conversation(serve):
    server = serve(lambda frame: None, linger=SILENCE)
    started = time.monotonic()
    deadline = started + 0.3
    with wire.connect(server.address, SILENCE, deadline=deadline) as client:
        with pytest.raises(TimeoutError):
            client.request(ApiKey.METADATA, 12, METADATA_FIELDS)
        assert time.monotonic() - started < SILENCE / 2
        with pytest.raises(TimeoutError, match="no answer in time"):
            client.send_raw(b"\x00")


def test_exact_refuses_stray_bytes_after_the_body(serve):
    answer = lambda frame: metadata_answer(correlation_of(frame), trailing=b"xyz")  # noqa: E731
    server = serve(answer, answer)
    with wire.connect(server.address, 5) as client:
        assert client.request(ApiKey.METADATA, 12, METADATA_FIELDS).cluster_id == "c"
        client.exact = True
        with pytest.raises(wire.WireError, match="the body ends at"):
            client.request(ApiKey.METADATA, 12, METADATA_FIELDS)


def test_an_undecodable_body_is_a_wire_error(serve):
    server = serve(lambda frame: framed(struct.pack(">ib", correlation_of(frame), 0) + b"\x01"))
    with (
        wire.connect(server.address, 5) as client,
        pytest.raises(wire.WireError, match="cannot decode response METADATA v12"),
    ):
        client.request(ApiKey.METADATA, 12, METADATA_FIELDS)


def test_raw_frames_go_out_as_given(serve):
    server = serve(lambda frame: framed(frame[::-1]))
    with wire.connect(server.address, 5) as client:
        client.send_raw(framed(b"\x01\x02\x03\x04\x05"))
        assert client.receive_frame() == b"\x05\x04\x03\x02\x01"
        # A body of any bytes behind a proper header.
        sent = client.send_request(ApiKey.METADATA, 1, b"\xff\xff", correlation_id=9)
    assert sent == 9
    assert server.requests[0] == b"\x01\x02\x03\x04\x05"


def test_api_versions_v0_is_read_by_hand(serve):
    server = serve(lambda frame: api_versions_answer(correlation_of(frame), keys=((3, 0, 12),)))
    with wire.connect(server.address, 5) as client:
        assert client.api_versions() == {3: (0, 12)}
    header, offset = parse_request_header(server.requests[0])
    assert (header.api_key, header.api_version, offset) == (18, 0, len(server.requests[0]))


@pytest.mark.parametrize(
    ("answer", "error", "message"),
    [
        (lambda cid: api_versions_answer(cid, error_code=35), wire.ApiVersionsError, "code 35"),
        (lambda cid: api_versions_answer(cid, keys=()), wire.ApiVersionsError, "code 0"),
        (lambda cid: api_versions_answer(cid)[:-2], wire.WireError, "closed the connection"),
        (lambda cid: framed(struct.pack(">ih", cid, 0)), wire.ApiVersionsError, "not a Kafka"),
        (lambda cid: api_versions_answer(cid + 5), wire.CorrelationIdMismatch, "id 6, not 1"),
    ],
    ids=["error", "no apis", "truncated", "too short", "wrong correlation id"],
)
def test_an_api_versions_answer_that_is_not_whole_is_refused(serve, answer, error, message):
    server = serve(lambda frame: answer(correlation_of(frame)))
    with wire.connect(server.address, 5) as client, pytest.raises(error, match=message):
        client.api_versions()


def test_readiness_wants_a_whole_api_versions_answer(serve):
    good = serve(lambda frame: api_versions_answer(correlation_of(frame)))
    assert wire.answers_api_versions(good.address, 5)
    failing = serve(lambda frame: api_versions_answer(correlation_of(frame), error_code=35))
    assert not wire.answers_api_versions(failing.address, 5)
    closing = serve(lambda frame: None)
    assert not wire.answers_api_versions(closing.address, 5)


@pytest.mark.parametrize(
    ("address", "parsed"),
    [("localhost:9092", ("localhost", 9092)), ("[::1]:19092", ("::1", 19092))],
)
def test_parse_address(address, parsed):
    assert wire.parse_address(address) == parsed


@pytest.mark.parametrize("address", ["localhost", "localhost:", ":9092", "host:0", "h:65536"])
def test_parse_address_refuses(address):
    with pytest.raises(ValueError, match="is not host:port"):
        wire.parse_address(address)
