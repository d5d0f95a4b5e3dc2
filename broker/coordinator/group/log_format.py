"""The records of `__consumer_offsets`, in Kafka's own key and value layouts.

Pure bytes in, bytes out, so a Kafka tool reading the topic (kafka-console-consumer with
Kafka's formatters) sees what it expects and minibroker can load what Kafka wrote. Two record
kinds share the topic, told apart by the key's version:

- offset commit: key v1 (group, topic, partition); value v3 (offset, leader epoch, metadata,
  commit timestamp). Values v0-v3 are read.
- group metadata: key v2 (group); value v3 (protocol type, generation, protocol, leader,
  current state timestamp, members with their subscription and assignment). Values v0-v3
  are read.

A record with a null value (a tombstone) deletes what its key names.

The partition also holds transaction markers (control batches) once transactional offset
commits are written to it: their one record's key is Kafka's EndTransactionMarker key
(version i16, type i16: 0 ABORT, 1 COMMIT), read by ``read_control_type``.
"""

import struct
from dataclasses import dataclass

from minibroker.protocol.field_reader import FieldReader

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


CONTROL_ABORT = 0
CONTROL_COMMIT = 1


class RecordFormatError(ValueError):
    """A key or value minibroker cannot read (unknown version, truncated)."""


@dataclass(frozen=True)
class MemberRecord:
    """A member as the group metadata record stores it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...]


def _string(text: str | None) -> bytes:
    if text is None:
        return _I16.pack(-1)
    data = text.encode()
    return _I16.pack(len(data)) + data


def _bytes(data: bytes) -> bytes:
    return _I32.pack(len(data)) + data


class RecordReader(FieldReader):
    """Reads a record's key or value of __consumer_offsets; bounds-checked (protocol's
    FieldReader, raising RecordFormatError)."""

    error = RecordFormatError

    def string(self) -> str | None:
        return self.nullable_string()

    def bytes(self) -> bytes:
        length = self.i32()
        return b"" if length < 0 else self.raw(length)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(OFFSET_KEY_VERSION) + _string(group) + _string(topic) + _I32.pack(partition)


def group_key(group: str) -> bytes:
    return _I16.pack(GROUP_KEY_VERSION) + _string(group)


def offset_value(value: OffsetValue) -> bytes:
    return (
        _I16.pack(OFFSET_VALUE_VERSION)
        + _I64.pack(value.offset)
        + _I32.pack(value.leader_epoch)
        + _string(value.metadata)
        + _I64.pack(value.commit_timestamp)
    )


def group_value(value: GroupValue) -> bytes:
    members = b"".join(
        _string(member.member_id)
        + _string(member.group_instance_id)
        + _string(member.client_id)
        + _string(member.client_host)
        + _I32.pack(member.rebalance_timeout_ms)
        + _I32.pack(member.session_timeout_ms)
        + _bytes(member.subscription)
        + _bytes(member.assignment)
        for member in value.members
    )
    return (
        _I16.pack(GROUP_VALUE_VERSION)
        + _string(value.protocol_type)
        + _I32.pack(value.generation)
        + _string(value.protocol)
        + _string(value.leader)
        + _I64.pack(value.current_state_timestamp)
        + _I32.pack(len(value.members))
        + members
    )


def read_key(data: bytes) -> OffsetKey | GroupKey:
    reader = RecordReader(data)
    version = reader.i16()
    if version in (0, 1):
        return OffsetKey(reader.string() or "", reader.string() or "", reader.i32())
    if version == 2:
        return GroupKey(reader.string() or "")
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def read_offset_value(data: bytes) -> OffsetValue:
    reader = RecordReader(data)
    version = reader.i16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unknown offset commit value version {version}")
    offset = reader.i64()
    leader_epoch = reader.i32() if version >= 3 else -1
    metadata = reader.string() or ""
    commit_timestamp = reader.i64()
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp)


def read_group_value(data: bytes) -> GroupValue:
    reader = RecordReader(data)
    version = reader.i16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unknown group metadata value version {version}")
    protocol_type = reader.string() or ""
    generation = reader.i32()
    protocol = reader.string()
    leader = reader.string()
    state_timestamp = reader.i64() if version >= 2 else -1
    members = []
    for _ in range(reader.i32()):
        member_id = reader.string() or ""
        instance_id = reader.string() if version >= 3 else None
        client_id = reader.string() or ""
        client_host = reader.string() or ""
        session_timeout = reader.i32()
        rebalance_timeout = session_timeout
        if version >= 1:
            # v1+ writes the rebalance timeout first; v0 has only the session timeout.
            rebalance_timeout, session_timeout = session_timeout, reader.i32()
        members.append(
            MemberRecord(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                reader.bytes(),
                reader.bytes(),
            )
        )
    return GroupValue(protocol_type, generation, protocol, leader, state_timestamp, tuple(members))


def read_control_type(key: bytes | None) -> int:
    """The type of a control record (Kafka's ControlRecordType.parse): 0 ABORT, 1 COMMIT,
    other values for control records this broker does not know (Kafka's UNKNOWN)."""
    if key is None:
        raise RecordFormatError("a control record without a key")
    reader = RecordReader(key)
    version = reader.i16()
    if version < 0:
        raise RecordFormatError(f"control record key version {version}")
    return reader.i16()
