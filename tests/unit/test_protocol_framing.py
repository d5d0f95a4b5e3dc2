"""Framing, request headers and the response codec, on plain bytes."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsV0
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader

from minibroker.apis.registry import served_versions
from minibroker.protocol import codec, schemas
from minibroker.protocol.framing import (
    LARGE_FRAME_GROWTH,
    FrameDecoder,
    FrameError,
    frame_response_header,
    parse_request_header,
    skip_tagged_fields,
)
from minibroker.protocol.versions import FIRST_FLEXIBLE_VERSION, NEVER_FLEXIBLE

ALL_VERSIONS = served_versions(broker=True, controller=True)


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.binary(max_size=300)
        # Frames past LARGE_FRAME_BYTES take the receive-into-its-own-buffer path.
        | st.integers(70_000, 70_100).map(lambda size: bytes([size % 251]) * size),
        max_size=6,
    ),
    st.integers(min_value=1, max_value=50_000),
)
def test_frames_survive_any_split(payloads, chunk):
    stream = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder(max_frame_size=1 << 20)
    out = []
    for start in range(0, len(stream), chunk):
        decoder.feed(stream[start : start + chunk])
        while (got := decoder.next_frame()) is not None:
            out.append(got)
    assert out == payloads


def test_negative_size_is_refused():
    decoder = FrameDecoder(max_frame_size=100)
    decoder.feed(struct.pack(">i", -5))
    with pytest.raises(FrameError, match="negative"):
        decoder.next_frame()


def test_oversized_frame_is_refused_before_it_arrives():
    decoder = FrameDecoder(max_frame_size=100)
    decoder.feed(struct.pack(">i", 101))
    with pytest.raises(FrameError, match="socket.request.max.bytes"):
        decoder.next_frame()


def test_header_v1_parses_client_id():
    raw = struct.pack(">hhih", 0, 7, 42, 3) + b"abc" + b"BODY"
    header, offset = parse_request_header(raw)
    assert (header.api_key, header.api_version, header.correlation_id) == (0, 7, 42)
    assert header.client_id == "abc"
    assert raw[offset:] == b"BODY"


def test_header_v2_skips_unknown_tagged_fields():
    # Metadata v12 is flexible: header v2 has a tag buffer; two unknown tags here.
    tags = bytes([2, 5, 2]) + b"xy" + bytes([9, 0])
    raw = struct.pack(">hhih", 3, 12, 7, -1) + tags + b"BODY"
    header, offset = parse_request_header(raw)
    assert header.client_id is None
    assert raw[offset:] == b"BODY"


def test_truncated_tag_buffer_is_a_frame_error():
    with pytest.raises(FrameError):
        skip_tagged_fields(bytes([1, 3, 10, 0]), 0)


def test_short_request_is_a_frame_error():
    with pytest.raises(FrameError):
        parse_request_header(b"\x00\x01")


def test_response_headers():
    assert frame_response_header(9, 2, flexible_header=False) == struct.pack(">ii", 6, 9)
    assert frame_response_header(9, 2, flexible_header=True) == struct.pack(">iib", 7, 9, 0)


def test_build_ignores_fields_the_version_lacks_and_defaults_the_rest():
    data = {
        "responses": [
            {
                "name": "t",
                "topic_id": None,  # not in Produce v3: ignored
                "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 5}],
            }
        ]
    }
    response = codec.build(codec.response_class(0, 3), data)
    partition = response.responses[0].partition_responses[0]
    assert partition.base_offset == 5
    assert partition.error_code == ErrorCode.none
    assert partition.log_append_time is None


def test_build_names_a_missing_required_field():
    with pytest.raises(KeyError, match="base_offset"):
        codec.build(
            codec.response_class(0, 3),
            {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0}]}]},
        )


def test_unsupported_api_versions_answer_reads_as_v0():
    from minibroker.apis.api_versions import unsupported_version_response

    body = codec.encode_response(18, 0, unsupported_version_response(ALL_VERSIONS))
    response, size = entity_reader(ApiVersionsV0)(body, 0)
    assert size == len(body)
    assert response.error_code == ErrorCode.unsupported_version
    # As Kafka 4.4 (KIP-511): ApiVersions' own range alone.
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert advertised == {18: ALL_VERSIONS[18]}


def test_every_supported_version_has_kio_schemas():
    for key, (low, high) in ALL_VERSIONS.items():
        for version in range(low, high + 1):
            assert codec.request_class(key, version).__version__ == version
            assert codec.response_class(key, version).__version__ == version


def test_flexible_version_table_agrees_with_kio():
    """The table answers for every version kio (or protocol.schemas) has a schema of,
    served or not."""
    for key, first_flexible in FIRST_FLEXIBLE_VERSION.items():
        # (kio 0.6.1 has no schema at all of the streams groups' APIs, 88 and 89.)
        versions = set(schema_name_map.get(api_key_map.get(key, ""), {}))
        # protocol.schemas adds versions kio 0.6.1 lacks (EndTxn v5, Produce v12, ...).
        added = {version for (api, version) in schemas.REQUESTS if api == key}
        low, high = ALL_VERSIONS[key]
        boundary = {first_flexible - 1, first_flexible} - {-1, NEVER_FLEXIBLE - 1, NEVER_FLEXIBLE}
        assert set(range(low, high + 1)) | boundary <= versions | added
        for version in added:
            assert codec.request_is_flexible(key, version) == (version >= first_flexible)
        # A version with no schema reads as not flexible (header v1), as before.
        assert not codec.request_is_flexible(key, max(versions | added) + 1)
        for version in sorted(versions):
            request = codec.request_class(key, version)
            response = codec.response_class(key, version)
            assert codec.request_is_flexible(key, version) == request.__flexible__, (key, version)
            expected_header = bool(response.__flexible__) and key != 18  # ApiVersions: always v0
            assert codec.response_uses_flexible_header(key, version) == expected_header


def test_a_large_frame_is_received_into_its_own_buffer():
    payload = bytes(range(256)) * 1000  # 256,000 bytes
    decoder = FrameDecoder(max_frame_size=1 << 20)
    decoder.feed(frame(payload)[:5000])
    assert decoder.next_frame() is None
    target = decoder.unfilled()
    assert target is not None and len(target) == len(payload) - 4996
    target[:] = payload[4996:]
    decoder.filled(len(target))
    assert decoder.unfilled() is None
    assert decoder.next_frame() == payload
    decoder.feed(frame(b"after"))
    assert decoder.next_frame() == b"after"


def test_every_served_api_is_in_the_flexible_version_table():
    assert set(ALL_VERSIONS) <= set(FIRST_FLEXIBLE_VERSION)


def test_a_declared_size_is_not_allocated_before_its_bytes_arrive():
    """Found by the frame fuzzer: a peer declaring 100 MiB and sending 1 KiB made the broker
    allocate and zero 100 MiB for as long as it held the connection. The buffer now grows
    with what arrives."""
    decoder = FrameDecoder(max_frame_size=100 << 20)
    decoder.feed(struct.pack(">i", 100 << 20) + bytes(1024))
    assert decoder.next_frame() is None
    with decoder.unfilled() as room:
        assert len(room) <= LARGE_FRAME_GROWTH


def test_a_large_frame_arrives_whole_through_a_growing_buffer():
    payload = bytes(range(251)) * 20_000  # about 5 MB: several growth steps
    wire = frame(payload)
    received_into = FrameDecoder(max_frame_size=8 << 20)
    received_into.feed(wire[:1000])
    position = 1000
    while (got := received_into.next_frame()) is None:
        with received_into.unfilled() as room:
            count = min(len(room), 300_000, len(wire) - position)
            room[:count] = wire[position : position + count]
        received_into.filled(count)
        position += count
    assert got == payload
    fed = FrameDecoder(max_frame_size=8 << 20)
    frames = []
    for start in range(0, len(wire) * 2, 700_000):
        fed.feed((wire * 2)[start : start + 700_000])
        while (got := fed.next_frame()) is not None:
            frames.append(got)
    assert frames == [payload, payload]


def test_peek_shows_a_whole_buffered_frame_without_taking_it():
    decoder = FrameDecoder(1 << 20)
    assert decoder.peek(4) is None
    decoder.feed(b"\x00\x00\x00\x05abc")
    assert decoder.peek(4) is None  # not all of it yet
    decoder.feed(b"de\x00\x00\x00\x02x")
    assert decoder.peek(3) == b"abc"
    assert decoder.peek(100) == b"abcde"
    assert decoder.next_frame() == bytearray(b"abcde")
    assert decoder.peek(4) is None  # the second frame is partial
    decoder.feed(b"y")
    assert decoder.peek(4) == b"xy"
