"""protocol.bounds: array counts larger than the request, and null non-nullable arrays, are
refused before kio decodes (kio reserves count * 8 bytes at once and a failed allocation
aborts the process: the frame fuzzer's first find).

Without the check, the huge-count cases below abort the test process itself ("memory
allocation of 34359738352 bytes failed").
"""

import random
import struct
import subprocess
import sys

import pytest

from faults.frames import ValueMaker, encode_request, request_schemas
from minibroker.apis.registry import served_versions
from minibroker.protocol import codec
from minibroker.protocol.bounds import walked_size

SERVED = served_versions(broker=True, controller=True)


def test_the_walk_matches_kio_for_every_request_schema():
    """Random well-formed requests of every key and version kio knows: the walk ends exactly
    where kio's writer did, so it reads the same layout and never refuses a good request."""
    values = ValueMaker(random.Random(14))
    checked = 0
    for _key, _version, cls in request_schemas():
        for _ in range(8):
            try:
                body = encode_request(values.entity(cls))
            except Exception:  # a drawn value kio cannot encode
                continue
            assert walked_size(cls, body) == len(body), cls
            checked += 1
    assert checked > 2000


@pytest.mark.parametrize(
    ("key", "version", "body"),
    [
        (3, 1, struct.pack(">i", 2**31 - 1)),  # Metadata topics: 16 GiB asked of Rust
        (3, 1, struct.pack(">i", 0x10000000)),
        (3, 9, b"\xff\xff\xff\xff\x0f"),  # compact: 2^32 - 2 elements, 32 GiB
        (3, 12, b"\xff\xff\xff\x7f"),
        (42, 2, b"\x80\x80\x80\x80\x08"),  # DeleteGroups
        (1, 12, bytes(25) + b"\xff\xff\xff\xff\x0f"),  # Fetch topics
        (9, 6, b"\x03fz\xff\xff\xff\x7f"),  # OffsetFetch topics, after a string
    ],
)
def test_a_count_larger_than_the_request_is_a_decode_error(key, version, body):
    with pytest.raises(codec.DecodeError, match="elements, but only"):
        codec.decode_request(key, version, body, 0)


@pytest.mark.parametrize(
    ("key", "version", "body"),
    [
        (42, 0, b"\xff\xff\xff\xff"),  # DeleteGroups groups_names: null
        (42, 2, b"\x00\x00"),  # compact null
        (15, 0, b"\xff\xff\xff\xff"),  # DescribeGroups groups
        (16, 4, b"\x00\x00"),  # ListGroups states_filter (not nullable)
    ],
)
def test_a_null_non_nullable_array_is_a_decode_error(key, version, body):
    """kio decodes these as None; handlers then raised TypeError iterating them."""
    with pytest.raises(codec.DecodeError, match="non-nullable"):
        codec.decode_request(key, version, body, 0)


def test_nullable_arrays_stay_null():
    assert codec.decode_request(3, 1, b"\xff\xff\xff\xff", 0).topics is None  # all topics
    assert codec.decode_request(3, 12, b"\x00\x00\x00\x00", 0).topics is None


def test_a_count_that_fits_is_left_to_kio():
    # 3 topics claimed, 3 bytes left: too few for kio, but no huge reservation either.
    with pytest.raises(codec.DecodeError, match="Buffer"):
        codec.decode_request(3, 1, struct.pack(">i", 3) + b"\x00\x01A", 0)


def _metadata_v12_request(*names: str) -> bytes:
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    return codec.encode_entity(
        MetadataRequest(
            topics=tuple(MetadataRequestTopic(topic_id=None, name=name) for name in names),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
    )


def test_unknown_tagged_fields_are_dropped_as_kafka_ignores_them():
    """KIP-482: a tag the schema does not know is skipped, at the top level and inside an
    array's struct, whatever its size; the known fields decode as they were sent."""
    plain = _metadata_v12_request("a", "bc")
    expected = codec.decode_request(3, 12, plain, 0)
    # The top-level tag buffer is the last byte: two unknown tags, one of 200 bytes (its
    # size is a two-byte varint).
    top = plain[:-1] + b"\x02" + b"\x63\x02\xab\xcd" + b"\x64\xc8\x01" + bytes(200)
    assert codec.decode_request(3, 12, top, 0) == expected
    # The first topic struct's tag buffer follows its name "a" (compact string 02 61).
    at = plain.index(b"\x02a") + 2
    nested = plain[:at] + b"\x01\x07\x01\x55" + plain[at + 1 :]
    assert codec.decode_request(3, 12, nested, 0) == expected


def test_a_tagged_field_running_past_the_end_is_still_refused():
    plain = _metadata_v12_request("a")
    cut = plain[:-1] + b"\x01\x63\x10\xab"  # claims 16 bytes, has 1
    with pytest.raises(codec.DecodeError):
        codec.decode_request(3, 12, cut, 0)


# The frame fuzzer's find of the Kafka 4.4 wave (CI run of b025db4, seed 20261122): a Fetch
# v17 whose partition's replica_directory_id (tag 0, a 16-byte uuid) says 17 bytes. kio read
# the uuid and went on one byte early, where the walk had skipped to the size's end: kio then
# read a count the walk never saw and asked Rust for 165,796,695,632 bytes (the broker aborted).
FETCH_V17_TAG_SIZE_17 = bytes.fromhex(
    "000000000000000500009f370000000008000089f803f4b80da4838b09e268b0c375770d321f020000000800"
    "01150c9ade7162d0b670b10000000500000000000059030000f0000100110000000000000000000000000000"
    "000000655423dbce3d0696b2193a398aaed2d7020000800300012af90000000000047f5a0000000600004000"
    "00000005000000070100100b2353f218f67a257e6b85055763d26e0004120b68533e8a5a8f665e1a89ee374a"
    "460200000002000000000000000000000000000000000002e51df816001e2321eb9292054a5bcbb3a09a4ddf"
    "8a01000672616e676502000303667a010d0000000700000000000158d100"
)


def test_a_known_tagged_field_whose_size_is_not_its_values_is_refused():
    """Decoded in a child process: without the check kio aborts the process it runs in."""
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from minibroker.protocol import codec\n"
            "try:\n"
            f"    codec.decode_request(1, 17, bytes.fromhex({FETCH_V17_TAG_SIZE_17.hex()!r}), 0)\n"
            "except codec.DecodeError as error:\n"
            "    print(error)\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert "tagged field 0 says 17 bytes but its value takes 16" in child.stdout, child.stdout
    # The request as the fuzzer drew it, before its bit flip (size 16), decodes.
    tag = bytes.fromhex("010011") + bytes(16)
    assert FETCH_V17_TAG_SIZE_17.count(tag) == 1
    request = codec.decode_request(
        1, 17, FETCH_V17_TAG_SIZE_17.replace(tag, bytes.fromhex("010010") + bytes(16)), 0
    )
    assert request.topics[0].partitions[0].partition == 8  # and the topics after it
