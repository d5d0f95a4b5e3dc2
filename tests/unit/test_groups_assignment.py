"""The consumer protocol's assignment, as `minibroker groups` decodes it."""

import struct

from minibroker.tools.groups import decode_assignment


def assignment(topics: dict[str, list[int]], user_data: bytes | None = b"", version: int = 0):
    data = struct.pack(">hi", version, len(topics))
    for topic, partitions in topics.items():
        data += struct.pack(">h", len(topic)) + topic.encode()
        data += struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
    if user_data is None:
        return data + struct.pack(">i", -1)
    return data + struct.pack(">i", len(user_data)) + user_data


def test_every_topic_and_partition_whatever_the_version_and_user_data():
    data = assignment({"a": [0, 2], "bb": [1]}, b"sticky", version=3)
    assert decode_assignment(data) == [("a", 0), ("a", 2), ("bb", 1)]
    assert decode_assignment(assignment({"a": [5]}, None)) == [("a", 5)]


def test_empty_and_malformed():
    assert decode_assignment(b"") == []
    assert decode_assignment(assignment({})) == []
    assert decode_assignment(assignment({"topic": [1, 2]})[:-9]) is None  # cut short
    assert decode_assignment(b"\x00\x00\x00\x00\x00\x01\x00\x09ab") is None
