"""The share group records in __consumer_offsets (coordinator/group/share_log_format.py)."""

import uuid

import pytest

from minibroker.coordinator.group.log_format import RecordFormatError
from minibroker.coordinator.group.share_log_format import (
    ShareCurrentAssignmentValue,
    ShareGroupMetadataValue,
    ShareMemberMetadataValue,
    ShareRecordKey,
    ShareRecordKind,
    ShareTargetMemberValue,
    ShareTargetMetadataValue,
    ShareValue,
    encode_key,
    encode_value,
    read_key,
    read_value,
)

TOPIC = uuid.UUID("0123456789abcdef0123456789abcdef")

# Bytes written by Kafka 4.4's generated classes (kafka-group-coordinator-4.4.0,
# MessageUtil.toVersionPrefixedBytes / toCoordinatorTypePrefixedBytes).
KAFKA: list[tuple[ShareRecordKind, ShareValue, str]] = [
    (
        ShareRecordKind.MEMBER_METADATA,
        ShareMemberMetadataValue(None, "c", "/h", ("t1", "t2")),
        "0000000263032f680303743103743200",
    ),
    (
        ShareRecordKind.GROUP_METADATA,
        ShareGroupMetadataValue(7, -5),
        "000000000007fffffffffffffffb00",
    ),
    (
        ShareRecordKind.TARGET_METADATA,
        ShareTargetMetadataValue(3, 99),
        "0000000000030100080000000000000063",
    ),
    (
        ShareRecordKind.TARGET_MEMBER,
        ShareTargetMemberValue(((TOPIC, (0, 2)),)),
        "0000020123456789abcdef0123456789abcdef0300000000000000020000",
    ),
    (
        ShareRecordKind.CURRENT_ASSIGNMENT,
        ShareCurrentAssignmentValue(4, 3, 0, ((TOPIC, (1,)),)),
        "0000000000040000000300020123456789abcdef0123456789abcdef02000000010000",
    ),
]


@pytest.mark.parametrize(("kind", "value", "kafka"), KAFKA)
def test_values_are_kafkas_bytes(kind: ShareRecordKind, value: ShareValue, kafka: str) -> None:
    assert encode_value(value).hex() == kafka
    assert read_value(kind, bytes.fromhex(kafka)) == value


def test_keys() -> None:
    key = ShareRecordKey(ShareRecordKind.MEMBER_METADATA, "g", "m")
    assert encode_key(key).hex() == "000a00016700016d"  # Kafka's bytes
    assert read_key(encode_key(key)) == key
    group_key = ShareRecordKey(ShareRecordKind.GROUP_METADATA, "g")
    assert read_key(encode_key(group_key)) == group_key
    assert read_value(
        ShareRecordKind.TARGET_METADATA, encode_value(ShareTargetMetadataValue(2))
    ) == (ShareTargetMetadataValue(2))


def test_unknown_input_is_refused() -> None:
    with pytest.raises(RecordFormatError):
        read_key(bytes.fromhex("000300016700016d"))  # a consumer group key
    with pytest.raises(RecordFormatError):
        read_value(ShareRecordKind.GROUP_METADATA, bytes.fromhex("0001"))
    with pytest.raises(RecordFormatError):
        read_value(ShareRecordKind.STATE_PARTITION_METADATA, bytes.fromhex("0000"))
    with pytest.raises(RecordFormatError):
        read_value(ShareRecordKind.GROUP_METADATA, bytes.fromhex("000000"))
