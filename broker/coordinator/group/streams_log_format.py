"""The streams group records in `__consumer_offsets` (KIP-1071), in Kafka 4.4's layouts.

Pure values and bytes (group-coordinator's common/message/StreamsGroup*.json). Each key is a
version i16 (which names the record kind) and non-flexible strings; each value is a version
i16 (0) and a flexible struct (compact strings and arrays, tagged fields):

- 17 StreamsGroupMetadata (group): the group epoch, the metadata hash, the validated topology
  epoch (tag 0);
- 19 StreamsGroupMemberMetadata (group, member): instance id, rack id, client id and host,
  rebalance timeout, topology epoch, process id, user endpoint, client tags;
- 20 StreamsGroupTargetAssignmentMetadata (group): the assignment epoch (and its timestamp,
  tag 0);
- 21 StreamsGroupTargetAssignmentMember (group, member): active, standby and warm-up tasks;
- 22 StreamsGroupCurrentMemberAssignment (group, member): member epoch, previous epoch,
  state, the three kinds of tasks and the three kinds pending revocation;
- 23 StreamsGroupTopology (group): the topology's epoch and subtopologies.

Departures: the metadata value's LastAssignmentConfigs and description epochs (tags 1 to 3)
and the current assignment's per-task AssignmentEpochs (tag 0) are not written, and skipped
when read; the metadata hash is written as 0 (the configured topology is recomputed from the
cluster's topics instead). The streams group (streams_group.py) returns these values; nothing
writes them to the log yet.
"""

import struct
from dataclasses import dataclass
from enum import IntEnum

from minibroker.coordinator.group.log_format import RecordFormatError, RecordReader
from minibroker.coordinator.group.streams_assignor import TaskId
from minibroker.protocol.framing import encode_uvarint as _uvarint

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

# -- the topology (StreamsGroupTopologyValue) ------------------------------------------------


@dataclass(frozen=True)
class TopicInfo:
    """StreamsGroupTopologyValue.TopicInfo (partitions 0: derived by the coordinator)."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class CopartitionGroup:
    """Indexes into the subtopology's source and repartition source topics."""

    source_topics: tuple[int, ...] = ()
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()


@dataclass(frozen=True)
class Topology:
    """StreamsGroupTopologyValue: what a member sends when it joins."""

    epoch: int
    subtopologies: tuple[Subtopology, ...]


# -- records (Kafka's layouts: group-coordinator's StreamsGroup*Value.json) ------------------


class RecordKind(IntEnum):
    """The key version of each streams group record."""

    GROUP_METADATA = 17
    MEMBER_METADATA = 19
    TARGET_METADATA = 20
    TARGET_MEMBER = 21
    CURRENT_ASSIGNMENT = 22
    TOPOLOGY = 23


@dataclass(frozen=True)
class RecordKey:
    kind: RecordKind
    group: str
    member_id: str | None = None


# ((subtopology id, (partitions...)), ...), sorted: StreamsGroup*Value.TaskIds.
FrozenTasks = tuple[tuple[str, tuple[int, ...]], ...]


def freeze(tasks: set[TaskId]) -> FrozenTasks:
    by_sub: dict[str, list[int]] = {}
    for sub, partition in sorted(tasks):
        by_sub.setdefault(sub, []).append(partition)
    return tuple((sub, tuple(parts)) for sub, parts in by_sub.items())


@dataclass(frozen=True)
class GroupMetadataValue:
    epoch: int
    metadata_hash: int = 0
    validated_topology_epoch: int = -1


@dataclass(frozen=True)
class TopologyValue:
    topology: Topology


@dataclass(frozen=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    topology_epoch: int
    process_id: str
    user_endpoint: tuple[str, int] | None
    client_tags: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int
    assignment_timestamp_ms: int = 0


@dataclass(frozen=True)
class TargetAssignmentMemberValue:
    active: FrozenTasks
    standby: FrozenTasks
    warmup: FrozenTasks


@dataclass(frozen=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    active: FrozenTasks
    standby: FrozenTasks
    warmup: FrozenTasks
    active_pending_revocation: FrozenTasks
    standby_pending_revocation: FrozenTasks
    warmup_pending_revocation: FrozenTasks


Record = tuple[RecordKey, object | None]

# -- writing ---------------------------------------------------------------------------------

_MEMBER_KINDS = (
    RecordKind.MEMBER_METADATA,
    RecordKind.TARGET_MEMBER,
    RecordKind.CURRENT_ASSIGNMENT,
)


def _cs(text: str | None) -> bytes:
    if text is None:
        return _uvarint(0)
    data = text.encode()
    return _uvarint(len(data) + 1) + data


def _array(items: list[bytes]) -> bytes:
    return _uvarint(len(items) + 1) + b"".join(items)


def _strings(names: tuple[str, ...]) -> bytes:
    return _array([_cs(name) for name in names])


def _topic_info(info: TopicInfo) -> bytes:
    configs = [_cs(k) + _cs(v) + _uvarint(0) for k, v in info.configs]
    return (
        _cs(info.name)
        + _I32.pack(info.partitions)
        + _I16.pack(info.replication_factor)
        + _array(configs)
        + _uvarint(0)
    )


def _indexes(values: tuple[int, ...]) -> bytes:
    return _array([_I16.pack(v) for v in values])


def _subtopology(s: Subtopology) -> bytes:
    groups = [
        _indexes(g.source_topics)
        + _indexes(g.source_topic_regex)
        + _indexes(g.repartition_source_topics)
        + _uvarint(0)
        for g in s.copartition_groups
    ]
    return (
        _cs(s.subtopology_id)
        + _strings(s.source_topics)
        + _strings(s.source_topic_regex)
        + _array([_topic_info(i) for i in s.state_changelog_topics])
        + _strings(s.repartition_sink_topics)
        + _array([_topic_info(i) for i in s.repartition_source_topics])
        + _array(groups)
        + _uvarint(0)
    )


def _tasks(tasks: FrozenTasks) -> bytes:
    return _array(
        [_cs(sub) + _array([_I32.pack(p) for p in parts]) + _uvarint(0) for sub, parts in tasks]
    )


def _tagged(fields: list[tuple[int, bytes]]) -> bytes:
    return _uvarint(len(fields)) + b"".join(
        _uvarint(tag) + _uvarint(len(data)) + data for tag, data in fields
    )


def encode_key(key: RecordKey) -> bytes:
    out = _I16.pack(key.kind) + _string(key.group)
    if key.kind in _MEMBER_KINDS:
        out += _string(key.member_id or "")
    return out


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def encode_value(value: object) -> bytes:
    out = _I16.pack(0)
    tagged: list[tuple[int, bytes]] = []
    if isinstance(value, GroupMetadataValue):
        out += _I32.pack(value.epoch) + _I64.pack(value.metadata_hash)
        if value.validated_topology_epoch != -1:
            tagged.append((0, _I32.pack(value.validated_topology_epoch)))
    elif isinstance(value, TopologyValue):
        t = value.topology
        out += _I32.pack(t.epoch) + _array([_subtopology(s) for s in t.subtopologies])
    elif isinstance(value, MemberMetadataValue):
        out += (
            _cs(value.instance_id)
            + _cs(value.rack_id)
            + _cs(value.client_id)
            + _cs(value.client_host)
            + _I32.pack(value.rebalance_timeout_ms)
            + _I32.pack(value.topology_epoch)
            + _cs(value.process_id)
        )
        if value.user_endpoint is None:
            out += _I8.pack(-1)
        else:
            host, port = value.user_endpoint
            out += _I8.pack(1) + _cs(host) + _U16.pack(port) + _uvarint(0)
        out += _array([_cs(k) + _cs(v) + _uvarint(0) for k, v in value.client_tags])
    elif isinstance(value, TargetAssignmentMetadataValue):
        out += _I32.pack(value.assignment_epoch)
        if value.assignment_timestamp_ms != 0:
            tagged.append((0, _I64.pack(value.assignment_timestamp_ms)))
    elif isinstance(value, TargetAssignmentMemberValue):
        out += _tasks(value.active) + _tasks(value.standby) + _tasks(value.warmup)
    elif isinstance(value, CurrentAssignmentValue):
        out += (
            _I32.pack(value.member_epoch)
            + _I32.pack(value.previous_member_epoch)
            + _I8.pack(value.state)
            + _tasks(value.active)
            + _tasks(value.standby)
            + _tasks(value.warmup)
            + _tasks(value.active_pending_revocation)
            + _tasks(value.standby_pending_revocation)
            + _tasks(value.warmup_pending_revocation)
        )
    else:
        raise TypeError(f"not a streams group record value: {value!r}")
    return out + _tagged(tagged)


# -- reading ---------------------------------------------------------------------------------


class _Reader(RecordReader):
    def key_string(self) -> str:
        return self.nullable_string() or ""

    def cs(self) -> str | None:
        return self.compact_string()

    def s(self) -> str:
        return self.cs() or ""

    def strings(self) -> tuple[str, ...]:
        return tuple(self.s() for _ in range(self.count()))

    def indexes(self) -> tuple[int, ...]:
        return tuple(self.i16() for _ in range(self.count()))

    def topic_info(self) -> TopicInfo:
        name, partitions, replication = self.s(), self.i32(), self.i16()
        configs = []
        for _ in range(self.count()):
            configs.append((self.s(), self.s()))
            self.tagged()
        self.tagged()
        return TopicInfo(name, partitions, replication, tuple(configs))

    def subtopology(self) -> Subtopology:
        sub_id = self.s()
        sources, regex = self.strings(), self.strings()
        changelogs = tuple(self.topic_info() for _ in range(self.count()))
        sinks = self.strings()
        repartition = tuple(self.topic_info() for _ in range(self.count()))
        groups = []
        for _ in range(self.count()):
            groups.append(CopartitionGroup(self.indexes(), self.indexes(), self.indexes()))
            self.tagged()
        self.tagged()
        return Subtopology(sub_id, sources, regex, changelogs, sinks, repartition, tuple(groups))

    def tasks(self) -> FrozenTasks:
        out = []
        for _ in range(self.count()):
            sub = self.s()
            out.append((sub, tuple(self.i32() for _ in range(self.count()))))
            self.tagged()
        return tuple(out)


KINDS = frozenset(int(kind) for kind in RecordKind)


def read_key(data: bytes) -> RecordKey:
    reader = _Reader(data)
    version = reader.i16()
    if version not in KINDS:
        raise RecordFormatError(f"not a streams group record key (version {version})")
    kind = RecordKind(version)
    group = reader.key_string()
    member = reader.key_string() if kind in _MEMBER_KINDS else None
    return RecordKey(kind, group, member)


def read_value(kind: RecordKind, data: bytes) -> object:
    reader = _Reader(data)
    version = reader.i16()
    if version != 0:
        raise RecordFormatError(f"unknown {kind.name} value version {version}")
    value: object
    if kind == RecordKind.GROUP_METADATA:
        epoch, metadata_hash = reader.i32(), reader.i64()
        tags = reader.tagged()
        validated = _I32.unpack(tags[0])[0] if len(tags.get(0, b"")) == 4 else -1
        return GroupMetadataValue(epoch, metadata_hash, validated)
    if kind == RecordKind.TARGET_METADATA:
        epoch = reader.i32()
        tags = reader.tagged()
        stamp = _I64.unpack(tags[0])[0] if len(tags.get(0, b"")) == 8 else 0
        return TargetAssignmentMetadataValue(epoch, stamp)
    if kind == RecordKind.TOPOLOGY:
        epoch = reader.i32()
        value = TopologyValue(
            Topology(epoch, tuple(reader.subtopology() for _ in range(reader.count())))
        )
    elif kind == RecordKind.MEMBER_METADATA:
        instance_id, rack_id = reader.cs(), reader.cs()
        client_id, client_host = reader.s(), reader.s()
        rebalance_timeout_ms, topology_epoch = reader.i32(), reader.i32()
        process_id = reader.s()
        endpoint = None
        if reader.i8() >= 0:
            endpoint = (reader.s(), reader.u16())
            reader.tagged()
        client_tags: list[tuple[str, str]] = []
        for _ in range(reader.count()):
            client_tags.append((reader.s(), reader.s()))
            reader.tagged()
        value = MemberMetadataValue(
            instance_id,
            rack_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            topology_epoch,
            process_id,
            endpoint,
            tuple(client_tags),
        )
    elif kind == RecordKind.TARGET_MEMBER:
        value = TargetAssignmentMemberValue(reader.tasks(), reader.tasks(), reader.tasks())
    elif kind == RecordKind.CURRENT_ASSIGNMENT:
        value = CurrentAssignmentValue(
            reader.i32(),
            reader.i32(),
            reader.i8(),
            *(reader.tasks() for _ in range(6)),
        )
    else:
        raise RecordFormatError(f"{kind.name} records are not read")
    reader.tagged()
    return value
