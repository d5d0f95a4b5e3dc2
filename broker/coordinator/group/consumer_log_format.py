"""The consumer group protocol's records in `__consumer_offsets`, in Kafka 4's layouts.

Pure bytes in, bytes out (group-coordinator/src/main/resources/common/message/*.json). Each
key is a version i16 (which names the record kind) and non-flexible fields; each value is a
version i16 (0) and a flexible struct (compact strings and arrays, tagged fields):

- 3 ConsumerGroupMetadata (group): the group epoch;
- 5 ConsumerGroupMemberMetadata (group, member): instance id, rack id, client id and host,
  subscribed topic names and regex, rebalance timeout, server assignor;
- 6 ConsumerGroupTargetAssignmentMetadata (group): the assignment epoch;
- 7 ConsumerGroupTargetAssignmentMember (group, member): the member's target partitions;
- 8 ConsumerGroupCurrentMemberAssignment (group, member): member epoch, previous epoch,
  state, assigned partitions and partitions pending revocation.

Departure: ConsumerGroupPartitionMetadata (4) is not written (the subscribed topics'
metadata is recomputed from the cluster's at load and at each heartbeat, as Kafka 4.1 does
with its metadata hash); one found in the log is skipped. The member metadata's
ClassicMemberMetadata (tag 0: the session timeout and JoinGroup protocols of a member that
uses the classic protocol inside a consumer group, after an online migration) is written and
read as Kafka's generated code does (a nullable tagged struct: size + 1, a presence varint 1,
the struct).
"""

import struct
import uuid
from dataclasses import dataclass, replace
from enum import IntEnum

from minibroker.coordinator.group.log_format import RecordFormatError, RecordReader
from minibroker.protocol.framing import encode_uvarint as _uvarint

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# topic id -> sorted partitions, sorted by topic id: comparable and hashable.
FrozenPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


class RecordKind(IntEnum):
    """The key version of each consumer group record."""

    GROUP_METADATA = 3
    PARTITION_METADATA = 4
    MEMBER_METADATA = 5
    TARGET_METADATA = 6
    TARGET_MEMBER = 7
    CURRENT_ASSIGNMENT = 8


KINDS = frozenset(int(kind) for kind in RecordKind)


@dataclass(frozen=True)
class RecordKey:
    kind: RecordKind
    group: str
    member_id: str | None = None


@dataclass(frozen=True)
class GroupEpochValue:
    epoch: int


@dataclass(frozen=True)
class ClassicMemberMetadata:
    """Kafka's ConsumerGroupMemberMetadataValue.ClassicMemberMetadata: a member that joined
    with JoinGroup (classic protocol) inside a consumer group."""

    session_timeout_ms: int
    # (protocol name, metadata: a ConsumerProtocolSubscription), in the member's order.
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True)
class TargetAssignmentEpochValue:
    assignment_epoch: int


@dataclass(frozen=True)
class TargetMemberValue:
    partitions: FrozenPartitions


@dataclass(frozen=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: FrozenPartitions
    pending_revocation: FrozenPartitions


def freeze(partitions: dict[uuid.UUID, set[int]]) -> FrozenPartitions:
    return tuple(
        (topic, tuple(sorted(parts)))
        for topic, parts in sorted(partitions.items(), key=lambda item: item[0].bytes)
        if parts
    )


def thaw(partitions: FrozenPartitions) -> dict[uuid.UUID, set[int]]:
    return {topic: set(parts) for topic, parts in partitions if parts}


# -- writing ---------------------------------------------------------------------------------


def _compact_string(text: str | None) -> bytes:
    if text is None:
        return _uvarint(0)
    data = text.encode()
    return _uvarint(len(data) + 1) + data


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def _topic_partitions(partitions: FrozenPartitions) -> bytes:
    out = _uvarint(len(partitions) + 1)
    for topic, parts in partitions:
        out += topic.bytes + _uvarint(len(parts) + 1)
        out += b"".join(_I32.pack(p) for p in parts)
        out += _uvarint(0)  # tagged fields
    return out


def _compact_bytes(data: bytes) -> bytes:
    return _uvarint(len(data) + 1) + data


def _classic_metadata(classic: ClassicMemberMetadata) -> bytes:
    out = _I32.pack(classic.session_timeout_ms) + _uvarint(len(classic.protocols) + 1)
    for name, metadata in classic.protocols:
        out += _compact_string(name) + _compact_bytes(metadata) + _uvarint(0)
    return out + _uvarint(0)


def encode_key(key: RecordKey) -> bytes:
    out = _I16.pack(key.kind) + _string(key.group)
    if key.kind in (
        RecordKind.MEMBER_METADATA,
        RecordKind.TARGET_MEMBER,
        RecordKind.CURRENT_ASSIGNMENT,
    ):
        out += _string(key.member_id or "")
    return out


def encode_value(value: object) -> bytes:
    out = _I16.pack(0)
    if isinstance(value, GroupEpochValue):
        out += _I32.pack(value.epoch)
    elif isinstance(value, TargetAssignmentEpochValue):
        out += _I32.pack(value.assignment_epoch)
    elif isinstance(value, MemberMetadataValue):
        out += (
            _compact_string(value.instance_id)
            + _compact_string(value.rack_id)
            + _compact_string(value.client_id)
            + _compact_string(value.client_host)
            + _uvarint(len(value.subscribed_topic_names) + 1)
            + b"".join(_compact_string(name) for name in value.subscribed_topic_names)
            + _compact_string(value.subscribed_topic_regex)
            + _I32.pack(value.rebalance_timeout_ms)
            + _compact_string(value.server_assignor)
        )
        if value.classic is not None:
            struct_data = _classic_metadata(value.classic)
            # One tagged field: tag 0, size (+1: nullable), presence, the struct.
            tagged = _uvarint(0) + _uvarint(len(struct_data) + 1) + b"\x01" + struct_data
            return out + _uvarint(1) + tagged
    elif isinstance(value, TargetMemberValue):
        out += _topic_partitions(value.partitions)
    elif isinstance(value, CurrentAssignmentValue):
        out += (
            _I32.pack(value.member_epoch)
            + _I32.pack(value.previous_member_epoch)
            + _I8.pack(value.state)
            + _topic_partitions(value.assigned)
            + _topic_partitions(value.pending_revocation)
        )
    else:
        raise TypeError(f"not a consumer group record value: {value!r}")
    return out + _uvarint(0)  # tagged fields


# -- reading ---------------------------------------------------------------------------------


class _Reader(RecordReader):
    """log_format's reader of __consumer_offsets records, with the flexible versions' types
    that the consumer group records use (varints, compact strings, tagged fields)."""

    def string(self) -> str:
        """A non-nullable STRING (null read as empty)."""
        return self.nullable_string() or ""

    def tagged_fields(self) -> None:
        self.skip_tagged()

    def compact_bytes(self) -> bytes:
        return self.raw(self.uvarint() - 1)

    def member_tagged_fields(self) -> ClassicMemberMetadata | None:
        """The member metadata's tagged fields: ClassicMemberMetadata (tag 0), others
        skipped."""
        classic = None
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            if tag != 0:
                self.raw(size)
                continue
            if self.i8() == -1:
                continue
            session_timeout_ms = self.i32()
            protocols = []
            for _ in range(max(self.uvarint() - 1, 0)):
                name = self.compact_string() or ""
                protocols.append((name, self.compact_bytes()))
                self.tagged_fields()
            self.tagged_fields()
            classic = ClassicMemberMetadata(session_timeout_ms, tuple(protocols))
        return classic

    def topic_partitions(self) -> FrozenPartitions:
        count = self.uvarint() - 1
        out = []
        for _ in range(max(count, 0)):
            topic = uuid.UUID(bytes=self.raw(16))
            parts = tuple(self.i32() for _ in range(max(self.uvarint() - 1, 0)))
            self.tagged_fields()
            out.append((topic, parts))
        return tuple(out)


def read_key(data: bytes) -> RecordKey:
    reader = _Reader(data)
    version = reader.i16()
    if version not in KINDS:
        raise RecordFormatError(f"not a consumer group record key (version {version})")
    kind = RecordKind(version)
    group = reader.string()
    member = None
    if kind in (
        RecordKind.MEMBER_METADATA,
        RecordKind.TARGET_MEMBER,
        RecordKind.CURRENT_ASSIGNMENT,
    ):
        member = reader.string()
    return RecordKey(kind, group, member)


def read_value(kind: RecordKind, data: bytes) -> object:
    reader = _Reader(data)
    version = reader.i16()
    if version != 0:
        raise RecordFormatError(f"unknown {kind.name} value version {version}")
    value: object
    if kind == RecordKind.GROUP_METADATA:
        value = GroupEpochValue(reader.i32())
    elif kind == RecordKind.TARGET_METADATA:
        value = TargetAssignmentEpochValue(reader.i32())
    elif kind == RecordKind.MEMBER_METADATA:
        instance_id = reader.compact_string()
        rack_id = reader.compact_string()
        client_id = reader.compact_string() or ""
        client_host = reader.compact_string() or ""
        names = tuple(reader.compact_string() or "" for _ in range(max(reader.uvarint() - 1, 0)))
        value = MemberMetadataValue(
            instance_id,
            rack_id,
            client_id,
            client_host,
            names,
            reader.compact_string(),
            reader.i32(),
            reader.compact_string(),
        )
        classic = reader.member_tagged_fields()
        if classic is not None:
            value = replace(value, classic=classic)
        return value
    elif kind == RecordKind.TARGET_MEMBER:
        value = TargetMemberValue(reader.topic_partitions())
    elif kind == RecordKind.CURRENT_ASSIGNMENT:
        value = CurrentAssignmentValue(
            reader.i32(),
            reader.i32(),
            reader.i8(),
            reader.topic_partitions(),
            reader.topic_partitions(),
        )
    else:
        raise RecordFormatError(f"{kind.name} records are not read")
    reader.tagged_fields()
    return value
