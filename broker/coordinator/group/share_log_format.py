"""The share group records in `__consumer_offsets`, in Kafka 4.4's layouts.

Pure bytes in, bytes out (group-coordinator's common/message/ShareGroup*.json). As for the
consumer group records (consumer_log_format.py, whose encoding helpers and reader this
reuses), each key is a version i16 naming the kind and non-flexible fields (group id, and
member id for the member records); each value is a version i16 (0) and a flexible struct:

- 10 ShareGroupMemberMetadata (group, member): rack id, client id, client host, subscribed
  topic names;
- 11 ShareGroupMetadata (group): the group epoch and the metadata hash;
- 12 ShareGroupTargetAssignmentMetadata (group): the assignment epoch, and the assignment
  timestamp as tagged field 0 (default 0: absent);
- 13 ShareGroupTargetAssignmentMember (group, member): the member's target partitions;
- 14 ShareGroupCurrentMemberAssignment (group, member): member epoch, previous member epoch,
  state, assigned partitions.

- 15 ShareGroupStatePartitionMetadata (group; a non-member key): the topics whose share
  partitions' state is initializing and initialized (topic id, name, partitions) and the
  topics whose state is being deleted (topic id, name), see share_offsets.py.
"""

import struct
import uuid
from dataclasses import dataclass
from enum import IntEnum

from minibroker.coordinator.group.consumer_log_format import (
    FrozenPartitions,
    _compact_string,
    _Reader,
    _string,
    _topic_partitions,
)
from minibroker.coordinator.group.log_format import RecordFormatError
from minibroker.protocol.framing import encode_uvarint as _uvarint

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class ShareRecordKind(IntEnum):
    """The key version of each share group record."""

    MEMBER_METADATA = 10
    GROUP_METADATA = 11
    TARGET_METADATA = 12
    TARGET_MEMBER = 13
    CURRENT_ASSIGNMENT = 14
    STATE_PARTITION_METADATA = 15


SHARE_KINDS = frozenset(int(kind) for kind in ShareRecordKind)
_MEMBER_KINDS = (
    ShareRecordKind.MEMBER_METADATA,
    ShareRecordKind.TARGET_MEMBER,
    ShareRecordKind.CURRENT_ASSIGNMENT,
)


@dataclass(frozen=True)
class ShareRecordKey:
    kind: ShareRecordKind
    group: str
    member_id: str | None = None


@dataclass(frozen=True)
class ShareGroupMetadataValue:
    epoch: int
    metadata_hash: int


@dataclass(frozen=True)
class ShareMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True)
class ShareTargetMetadataValue:
    assignment_epoch: int
    assignment_timestamp_ms: int = 0


@dataclass(frozen=True)
class ShareTargetMemberValue:
    partitions: FrozenPartitions


@dataclass(frozen=True)
class StatePartitionTopic:
    """TopicPartitionsInfo (id, name, partitions), or TopicInfo (no partitions)."""

    topic_id: uuid.UUID
    name: str
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True)
class ShareStatePartitionMetadataValue:
    initializing: tuple[StatePartitionTopic, ...] = ()
    initialized: tuple[StatePartitionTopic, ...] = ()
    deleting: tuple[StatePartitionTopic, ...] = ()


@dataclass(frozen=True)
class ShareCurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState: always STABLE (0) for a share group member
    assigned: FrozenPartitions


ShareValue = (
    ShareGroupMetadataValue
    | ShareMemberMetadataValue
    | ShareTargetMetadataValue
    | ShareTargetMemberValue
    | ShareCurrentAssignmentValue
    | ShareStatePartitionMetadataValue
)


def encode_key(key: ShareRecordKey) -> bytes:
    out = _I16.pack(key.kind) + _string(key.group)
    if key.kind in _MEMBER_KINDS:
        out += _string(key.member_id or "")
    return out


def encode_value(value: ShareValue) -> bytes:
    out = _I16.pack(0)
    if isinstance(value, ShareGroupMetadataValue):
        out += _I32.pack(value.epoch) + _I64.pack(value.metadata_hash)
    elif isinstance(value, ShareMemberMetadataValue):
        out += (
            _compact_string(value.rack_id)
            + _compact_string(value.client_id)
            + _compact_string(value.client_host)
            + _uvarint(len(value.subscribed_topic_names) + 1)
            + b"".join(_compact_string(name) for name in value.subscribed_topic_names)
        )
    elif isinstance(value, ShareTargetMetadataValue):
        out += _I32.pack(value.assignment_epoch)
        if value.assignment_timestamp_ms != 0:
            tagged = _uvarint(0) + _uvarint(8) + _I64.pack(value.assignment_timestamp_ms)
            return out + _uvarint(1) + tagged
    elif isinstance(value, ShareTargetMemberValue):
        out += _topic_partitions(value.partitions)
    elif isinstance(value, ShareStatePartitionMetadataValue):
        for topics in (value.initializing, value.initialized):
            out += _uvarint(len(topics) + 1)
            for topic in topics:
                out += topic.topic_id.bytes + _compact_string(topic.name)
                out += _uvarint(len(topic.partitions) + 1)
                out += b"".join(_I32.pack(p) for p in topic.partitions)
                out += _uvarint(0)
        out += _uvarint(len(value.deleting) + 1)
        for topic in value.deleting:
            out += topic.topic_id.bytes + _compact_string(topic.name) + _uvarint(0)
    else:
        out += (
            _I32.pack(value.member_epoch)
            + _I32.pack(value.previous_member_epoch)
            + _I8.pack(value.state)
            + _topic_partitions(value.assigned)
        )
    return out + _uvarint(0)  # tagged fields


def read_key(data: bytes) -> ShareRecordKey:
    reader = _Reader(data)
    version = reader.i16()
    if version not in SHARE_KINDS:
        raise RecordFormatError(f"not a share group record key (version {version})")
    kind = ShareRecordKind(version)
    group = reader.string()
    member = reader.string() if kind in _MEMBER_KINDS else None
    return ShareRecordKey(kind, group, member)


def read_value(kind: ShareRecordKind, data: bytes) -> ShareValue:
    reader = _Reader(data)
    version = reader.i16()
    if version != 0:
        raise RecordFormatError(f"unknown {kind.name} value version {version}")
    value: ShareValue
    if kind == ShareRecordKind.GROUP_METADATA:
        value = ShareGroupMetadataValue(reader.i32(), reader.i64())
    elif kind == ShareRecordKind.MEMBER_METADATA:
        rack_id = reader.compact_string()
        client_id = reader.compact_string() or ""
        client_host = reader.compact_string() or ""
        names = tuple(reader.compact_string() or "" for _ in range(max(reader.uvarint() - 1, 0)))
        value = ShareMemberMetadataValue(rack_id, client_id, client_host, names)
    elif kind == ShareRecordKind.TARGET_METADATA:
        epoch = reader.i32()
        timestamp = 0
        for _ in range(reader.uvarint()):
            tag, size = reader.uvarint(), reader.uvarint()
            if tag == 0 and size == 8:
                timestamp = reader.i64()
            else:
                reader.raw(size)
        return ShareTargetMetadataValue(epoch, timestamp)
    elif kind == ShareRecordKind.TARGET_MEMBER:
        value = ShareTargetMemberValue(reader.topic_partitions())
    elif kind == ShareRecordKind.CURRENT_ASSIGNMENT:
        value = ShareCurrentAssignmentValue(
            reader.i32(), reader.i32(), reader.i8(), reader.topic_partitions()
        )
    elif kind == ShareRecordKind.STATE_PARTITION_METADATA:

        def topics(with_partitions: bool) -> tuple[StatePartitionTopic, ...]:
            out = []
            for _ in range(max(reader.uvarint() - 1, 0)):
                topic_id = uuid.UUID(bytes=reader.raw(16))
                name = reader.compact_string() or ""
                parts: tuple[int, ...] = ()
                if with_partitions:
                    parts = tuple(reader.i32() for _ in range(max(reader.uvarint() - 1, 0)))
                reader.tagged_fields()
                out.append(StatePartitionTopic(topic_id, name, parts))
            return tuple(out)

        value = ShareStatePartitionMetadataValue(topics(True), topics(True), topics(False))
    else:
        raise RecordFormatError(f"{kind.name} records are not read")
    reader.tagged_fields()
    return value
