"""`minibroker groups`: list a cluster's consumer groups, or describe one, as
kafka-consumer-groups.sh does.

It is a client of the wire protocol only (minibroker.tools.wire's blocking client, kio's
schemas, no trio and nothing of the broker's own state), so it reads a Kafka cluster as well as
a minibroker one:

- list: Metadata from the bootstrap broker names every broker; ListGroups goes to each of them
  (a broker lists only the groups it coordinates, which is why Kafka's admin client asks them
  all), and a DescribeGroups on the same connection adds each group's assignor and size;
- describe: FindCoordinator names the group's coordinator; DescribeGroups gives the members and
  their assignments (the consumer protocol's assignment, decoded here), OffsetFetch the
  committed offsets, and ListOffsets (latest) to each partition's leader the log end offsets.
  Lag is log end minus committed, as kafka-consumer-groups.sh computes it.

Groups of the consumer protocol (KIP-848), which ListGroups v5 lists with the type
`consumer` and DescribeGroups answers as Dead, are described by ConsumerGroupDescribe
(their state, server-side assignor, members and assignments), as kafka-consumer-groups.sh
does.

Streams groups (KIP-1071, Kafka Streams with `group.protocol=streams`), which ListGroups v5
lists with the type `streams` and DescribeGroups answers as Dead, are described by
StreamsGroupDescribe, as kafka-streams-groups.sh does: their state, server-side assignor,
members and each member's tasks (active, standby, warm-up, as `subtopology:[partitions]`); a
partition's CONSUMER-ID is the member whose active task reads it (the task's subtopology's
source and repartition source topics, at the task's partition).

Share groups (KIP-932), which ListGroups v5 lists with the type `share` and DescribeGroups
answers as Dead, are described by ShareGroupDescribe (state, the `simple` assignor, members and
their partitions; a partition several members share names them all) and
DescribeShareGroupOffsets (each share partition's start offset, shown as START-OFFSET, and from
v1 its lag as the broker counts it), as kafka-share-groups.sh does; OffsetFetch answers a share
group GROUP_ID_NOT_FOUND.

Both views name a group's facts alike, in kafka-consumer-groups.sh's words (`--list --type`
and `--describe --state`): its TYPE (classic, consumer for the consumer protocol, streams
for a streams group, share for a share group), its STATE, its PROTOCOL-TYPE (the classic
protocol's type: `consumer` for consumers, `connect` for Connect workers; `consumer` for a
consumer-protocol group, `streams` for a streams group, `share` for a share group) and its
ASSIGNMENT-STRATEGY (a classic group's chosen protocol, i.e. its client-side assignor, as
DescribeGroups gives it in every state; a server-side assignor otherwise).

Exit status: 0 when everything asked for was answered; 1 when a broker could not be reached,
answered with an error, or the group does not exist.
"""

from __future__ import annotations

import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from minibroker.protocol.errors import Error
from minibroker.protocol.offsets import LATEST
from minibroker.protocol.versions import ApiKey
from minibroker.tools import wire

CLIENT_ID = "minibroker-groups"
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
RETRY_INTERVAL_S = 0.2

# The versions this tool speaks, lowest and highest; each request goes at the highest the
# broker also offers. OffsetFetch from v2 (null topics: all of them) to v7 (v8 has a
# layout for several groups).
VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.METADATA: (1, 12),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    # Groups of the consumer protocol (KIP-848), which DescribeGroups answers as Dead.
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 0),
    # Streams groups (KIP-1071), which DescribeGroups answers as Dead too.
    ApiKey.STREAMS_GROUP_DESCRIBE: (0, 1),
    # Share groups (KIP-932), which DescribeGroups answers as Dead too; their offsets are
    # each share partition's start offset (DescribeShareGroupOffsets), not OffsetFetch's.
    ApiKey.SHARE_GROUP_DESCRIBE: (0, 1),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),
    ApiKey.OFFSET_FETCH: (2, 7),
    ApiKey.LIST_OFFSETS: (1, 7),
}
# Answers that mean "ask again shortly": the coordinator is being elected or is loading.
RETRIABLE = {
    Error.COORDINATOR_NOT_AVAILABLE,
    Error.COORDINATOR_LOAD_IN_PROGRESS,
    Error.NOT_COORDINATOR,
    Error.LEADER_NOT_AVAILABLE,
    Error.NOT_LEADER_OR_FOLLOWER,
}


class GroupsError(Exception):
    """What went wrong, in words fit for the user; the command prints it and exits 1."""


def _error(code: Any) -> Error:
    value = int(getattr(code, "value", code))
    try:
        return Error(value)
    except ValueError:
        return Error.UNKNOWN_SERVER_ERROR


class Connection:
    """One synchronous connection to one node (a wire.WireClient): ApiVersions on connect,
    then requests at the highest version both sides speak; every failure is a GroupsError.
    A tool speaking other APIs subclasses it with its own ``spoken``."""

    # API key -> (lowest, highest) version this tool speaks.
    spoken: dict[int, tuple[int, int]] = VERSIONS

    def __init__(self, address: str, deadline: float) -> None:
        self.address = address
        self.deadline = deadline
        host, port = wire.parse_address(address)  # a ValueError, printed as it is
        if deadline <= time.monotonic():
            raise GroupsError(f"{address}: no answer in time")
        try:
            self._client = wire.connect(
                (host, port),
                deadline=deadline,
                client_id=CLIENT_ID,
                max_response_bytes=MAX_RESPONSE_BYTES,
            )
        except OSError as error:
            raise GroupsError(f"cannot connect to {address}: {error}") from error
        self._client.address = address
        try:
            self.versions = self._api_versions()
        except BaseException:
            self._client.close()
            raise

    def _api_versions(self) -> dict[int, int]:
        """The version to use for each API of the class's ``spoken`` the node offers."""
        versions = self.spoken
        offered = self._talk(self._client.api_versions)
        chosen = {}
        for key, (low, high) in offered.items():
            if key in versions:
                mine_low, mine_high = versions[key]
                if max(low, mine_low) <= min(high, mine_high):
                    chosen[key] = min(high, mine_high)
        return chosen

    def _talk(self, exchange: Callable[[], Any]) -> Any:
        try:
            return exchange()
        except TimeoutError as error:
            raise GroupsError(f"{self.address}: no answer in time") from error
        except wire.WireError as error:
            raise GroupsError(f"{self.address}: {_without_address(error, self.address)}") from error
        except OSError as error:
            raise GroupsError(f"{self.address}: {error}") from error

    def request(self, api_key: ApiKey, data: dict[str, Any]) -> Any:
        """Send a request described as a dict (codec.build fills in what a version lacks or
        defaults) and return the decoded response entity."""
        version = self.versions.get(api_key)
        if version is None:
            raise GroupsError(f"{self.address} does not offer {api_key.name}")
        return self._talk(lambda: self._client.request(api_key, version, data))

    def version(self, api_key: ApiKey) -> int:
        return self.versions[api_key]

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _without_address(error: Exception, address: str) -> str:
    """The error's words, without the address that the GroupsError puts in front anyway."""
    return str(error).removeprefix(f"{address}: ")


def connect_any(bootstrap: str, deadline: float) -> Connection:
    """A connection to the first address of `bootstrap` (host:port[,host:port...]) that
    answers, as clients treat bootstrap.servers."""
    problems = []
    for address in (part.strip() for part in bootstrap.split(",") if part.strip()):
        try:
            return Connection(address, deadline)
        except GroupsError as error:
            problems.append(str(error))
    raise GroupsError("; ".join(problems) or f"no address in {bootstrap!r}")


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass
class Cluster:
    """What Metadata said: brokers by id and each partition's leader."""

    brokers: dict[int, Broker]
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)


def metadata(conn: Connection, topics: list[str] | None) -> Cluster:
    """Metadata of `topics` (None: no topics, brokers only), never creating a topic."""
    response = conn.request(
        ApiKey.METADATA,
        {
            "topics": [{"name": topic, "topic_id": None} for topic in topics or ()],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    brokers = {
        int(b.node_id): Broker(int(b.node_id), b.host, int(b.port)) for b in response.brokers
    }
    leaders = {}
    for topic in response.topics:
        for partition in topic.partitions:
            leaders[(str(topic.name), int(partition.partition_index))] = int(partition.leader_id)
    return Cluster(brokers, leaders)


# -- the consumer protocol ----------------------------------------------------------------------


def decode_assignment(data: bytes) -> list[tuple[str, int]] | None:
    """ConsumerProtocolAssignment (every version): version i16, an array of (topic string,
    array of i32 partitions), user data bytes. None when the bytes are not one."""
    if not data:
        return []
    try:
        pos = 2
        (topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        assigned: list[tuple[str, int]] = []
        for _ in range(max(topics, 0)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if length < 0 or pos + length > len(data):
                return None
            topic = bytes(data[pos : pos + length]).decode()
            pos += length
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            partitions = struct.unpack_from(f">{max(count, 0)}i", data, pos)
            pos += 4 * max(count, 0)
            assigned.extend((topic, partition) for partition in partitions)
        return assigned
    except (struct.error, UnicodeDecodeError):
        return None


# -- list -----------------------------------------------------------------------------------------


CLASSIC, CONSUMER, STREAMS, SHARE = "classic", "consumer", "streams", "share"


@dataclass(frozen=True)
class ListedGroup:
    group_id: str
    coordinator: int
    group_type: str
    state: str
    protocol_type: str
    assignment_strategy: str
    members: int


def list_groups(bootstrap: str, timeout: float) -> tuple[list[ListedGroup], list[str]]:
    """Every group of the cluster, and the brokers that could not be asked (as messages)."""
    deadline = time.monotonic() + timeout
    with connect_any(bootstrap, deadline) as conn:
        cluster = metadata(conn, None)
    groups: list[ListedGroup] = []
    problems: list[str] = []
    for broker in sorted(cluster.brokers.values(), key=lambda b: b.node_id):
        try:
            with Connection(broker.address, deadline) as conn:
                groups.extend(_groups_of(conn, broker.node_id))
        except GroupsError as error:
            problems.append(f"broker {broker.node_id}: {error}")
    return sorted(groups, key=lambda g: g.group_id), problems


def _groups_of(conn: Connection, node_id: int) -> list[ListedGroup]:
    while True:
        response = conn.request(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": []})
        error = _error(response.error_code)
        if error == Error.NONE:
            break
        if error != Error.COORDINATOR_LOAD_IN_PROGRESS:  # Kafka's answer while it loads
            raise GroupsError(f"ListGroups answered {error.name}")
        _wait_or_fail(conn.deadline, f"ListGroups answered {error.name} until the deadline")
    listed = {str(g.group_id): g for g in response.groups}
    if not listed:
        return []
    described = {}
    if ApiKey.DESCRIBE_GROUPS in conn.versions:
        answer = conn.request(
            ApiKey.DESCRIBE_GROUPS,
            {"groups": list(listed), "include_authorized_operations": False},
        )
        described = {
            str(g.group_id): g for g in answer.groups if _error(g.error_code) == Error.NONE
        }
    consumer_protocol = [
        group_id
        for group_id, entry in listed.items()
        if getattr(entry, "group_type", "") == "consumer"
    ]
    streams_groups = [
        group_id
        for group_id, entry in listed.items()
        if getattr(entry, "group_type", "") == STREAMS
    ]
    share_groups = [
        group_id for group_id, entry in listed.items() if getattr(entry, "group_type", "") == SHARE
    ]
    streams = _described_all(conn, ApiKey.STREAMS_GROUP_DESCRIBE, streams_groups)
    shares = _described_all(conn, ApiKey.SHARE_GROUP_DESCRIBE, share_groups)
    modern = _described_all(conn, ApiKey.CONSUMER_GROUP_DESCRIBE, consumer_protocol)
    groups = []
    for group_id, entry in listed.items():
        if group_id in shares:
            group = shares[group_id]
            groups.append(
                ListedGroup(
                    group_id,
                    node_id,
                    SHARE,
                    group.group_state,
                    SHARE,
                    group.assignor_name or "",
                    len(group.members),
                )
            )
            continue
        if group_id in streams:
            group = streams[group_id]
            groups.append(
                ListedGroup(
                    group_id,
                    node_id,
                    STREAMS,
                    group.group_state,
                    STREAMS,
                    getattr(group, "assignor_name", "") or "",
                    len(group.members),
                )
            )
            continue
        if group_id in modern:
            group = modern[group_id]
            groups.append(
                ListedGroup(
                    group_id,
                    node_id,
                    CONSUMER,
                    group.group_state,
                    "consumer",
                    group.assignor_name,
                    len(group.members),
                )
            )
            continue
        detail = described.get(group_id)
        state = getattr(entry, "group_state", "") or (detail.group_state if detail else "")
        groups.append(
            ListedGroup(
                group_id,
                node_id,
                CLASSIC,
                state or "?",
                entry.protocol_type or "",
                (detail.protocol_data if detail else "") or "",
                len(detail.members) if detail else 0,
            )
        )
    return groups


# -- describe -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[tuple[str, int]] | None
    # A streams group member's tasks, as text (the ASSIGNMENT column); None for consumers.
    tasks: str | None = None


@dataclass(frozen=True)
class PartitionView:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    consumer: str | None
    # A share partition's lag as DescribeShareGroupOffsets v1 gives it (KIP-1226: the
    # records not yet acknowledged past the start offset), which log end minus start is not.
    reported_lag: int | None = None

    @property
    def lag(self) -> int | None:
        if self.reported_lag is not None:
            return self.reported_lag
        if self.committed is None or self.log_end is None:
            return None
        return self.log_end - self.committed


@dataclass
class GroupView:
    group_id: str
    coordinator: Broker
    group_type: str
    state: str
    protocol_type: str
    assignment_strategy: str
    members: list[MemberView]
    partitions: list[PartitionView]


def find_coordinator(conn: Connection, group_id: str) -> Broker:
    version = conn.version(ApiKey.FIND_COORDINATOR)
    while True:
        if version >= 4:
            response = conn.request(
                ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": [group_id]}
            )
            answer = response.coordinators[0]
        else:
            answer = conn.request(ApiKey.FIND_COORDINATOR, {"key": group_id, "key_type": 0})
        error = _error(answer.error_code)
        if error == Error.NONE:
            return Broker(int(answer.node_id), answer.host, int(answer.port))
        if error not in RETRIABLE:
            raise GroupsError(f"FindCoordinator for {group_id!r} answered {error.name}")
        _wait_or_fail(conn.deadline, f"no coordinator for {group_id!r} ({error.name})")


def _wait_or_fail(deadline: float, what: str) -> None:
    if time.monotonic() + RETRY_INTERVAL_S >= deadline:
        raise GroupsError(what)
    time.sleep(RETRY_INTERVAL_S)


def describe_group(bootstrap: str, group_id: str, timeout: float) -> GroupView:
    """The group's members, assignments, committed offsets, log end offsets and lag."""
    deadline = time.monotonic() + timeout
    with connect_any(bootstrap, deadline) as conn:
        coordinator = find_coordinator(conn, group_id)
    while True:
        with Connection(coordinator.address, deadline) as conn:
            try:
                group, committed = _describe_at(conn, group_id)
                break
            except _Moved as moved:
                error = moved.error
        # The coordinator moved (or is loading): ask again where the group lives.
        _wait_or_fail(deadline, f"the coordinator of {group_id!r} answers {error.name}")
        with connect_any(bootstrap, deadline) as conn:
            coordinator = find_coordinator(conn, group_id)

    members = []
    owner: dict[tuple[str, int], str] = {}
    consumer = group.protocol_type == "consumer"
    committed, lags = committed if isinstance(committed, tuple) else (committed, {})
    for member in group.members:
        if isinstance(member, MemberView):  # a consumer-protocol, streams or share group's
            members.append(member)
            for topic_partition in member.assignment or ():
                # A share group's partition may be read by several members at once.
                held = owner.get(topic_partition)
                owner[topic_partition] = f"{held},{member.member_id}" if held else member.member_id
            continue
        assignment = decode_assignment(bytes(member.member_assignment)) if consumer else None
        for topic_partition in assignment or ():
            owner[topic_partition] = str(member.member_id)
        members.append(
            MemberView(
                str(member.member_id),
                getattr(member, "group_instance_id", None),
                member.client_id,
                member.client_host,
                assignment,
            )
        )
    if not members and not committed and group.group_state in ("Dead", ""):
        raise GroupsError(f"consumer group {group_id!r} does not exist")

    wanted = sorted(set(committed) | set(owner))
    log_ends = log_end_offsets(bootstrap, wanted, deadline) if wanted else {}
    partitions = [
        PartitionView(
            topic,
            index,
            committed.get((topic, index)),
            log_ends.get((topic, index)),
            owner.get((topic, index)),
            lags.get((topic, index)),
        )
        for topic, index in wanted
    ]
    return GroupView(
        group_id,
        coordinator,
        group.group_type if isinstance(group, _ModernGroup) else CLASSIC,
        group.group_state,
        group.protocol_type,
        group.protocol_data or "",
        members,
        partitions,
    )


class _Moved(Exception):
    def __init__(self, error: Error) -> None:
        self.error = error


@dataclass
class _ModernGroup:
    """A consumer-protocol group (KIP-848) as ConsumerGroupDescribe gives it, in the shape
    describe_group reads a DescribeGroups entry in."""

    group_state: str
    protocol_type: str
    protocol_data: str
    members: list[MemberView]
    group_type: str = CONSUMER


def _described_all(conn: Connection, api_key: ApiKey, group_ids: list[str]) -> dict:
    """Group id -> group of one ConsumerGroupDescribe or StreamsGroupDescribe for
    ``group_ids``, those answered without an error; empty when there are none or the broker
    does not serve the API."""
    if not group_ids or api_key not in conn.versions:
        return {}
    answer = conn.request(api_key, {"group_ids": group_ids, "include_authorized_operations": False})
    return {str(g.group_id): g for g in answer.groups if _error(g.error_code) == Error.NONE}


def _described(conn: Connection, api_key: ApiKey, group_id: str):
    """The group of a ConsumerGroupDescribe or StreamsGroupDescribe answer for ``group_id``;
    None when the broker does not serve the API or the group is not of that type (or
    unknown); _Moved when the coordinator moved."""
    if api_key not in conn.versions:
        return None
    answer = conn.request(
        api_key, {"group_ids": [group_id], "include_authorized_operations": False}
    )
    group = answer.groups[0]
    error = _error(group.error_code)
    if error in RETRIABLE:
        raise _Moved(error)
    return group if error == Error.NONE else None


def _describe_modern(conn: Connection, group_id: str) -> _ModernGroup | None:
    """ConsumerGroupDescribe, for a group DescribeGroups calls Dead (Kafka 4 answers so for a
    consumer-protocol group); None if it is not one either."""
    group = _described(conn, ApiKey.CONSUMER_GROUP_DESCRIBE, group_id)
    if group is None:
        return None
    return _ModernGroup(group.group_state, "consumer", group.assignor_name, _members_of(group))


def _members_of(group) -> list[MemberView]:
    """The members of a ConsumerGroupDescribe or ShareGroupDescribe group, with the topic
    partitions assigned to each (a share member has no instance id)."""
    return [
        MemberView(
            str(member.member_id),
            getattr(member, "instance_id", None),
            member.client_id,
            member.client_host,
            [
                (str(topic.topic_name), int(partition))
                for topic in member.assignment.topic_partitions
                for partition in topic.partitions
            ],
        )
        for member in group.members
    ]


def _tasks_text(assignment) -> str:
    """A streams member's tasks as kafka-streams-groups.sh prints them (ACTIVE: 0:[0,1]; ...)."""
    parts = []
    for kind, tasks in (
        ("ACTIVE", assignment.active_tasks),
        ("STANDBY", assignment.standby_tasks),
        ("WARMUP", assignment.warmup_tasks),
    ):
        if tasks:
            listed = " ".join(
                f"{t.subtopology_id}:[{','.join(str(int(p)) for p in t.partitions)}]" for t in tasks
            )
            parts.append(f"{kind}: {listed};")
    return " ".join(parts) or "(none)"


def _describe_streams(conn: Connection, group_id: str) -> _ModernGroup | None:
    """StreamsGroupDescribe, for a group DescribeGroups calls Dead (Kafka 4 answers so for a
    streams group); None if it is not one. A member's "assignment" is the partitions its
    active tasks read: each task's subtopology's source and repartition source topics."""
    group = _described(conn, ApiKey.STREAMS_GROUP_DESCRIBE, group_id)
    if group is None:
        return None
    sources: dict[str, list[str]] = {}
    for sub in group.topology.subtopologies if group.topology is not None else ():
        sources[str(sub.subtopology_id)] = [str(t) for t in sub.source_topics] + [
            str(t.name) for t in sub.repartition_source_topics
        ]
    members = [
        MemberView(
            str(member.member_id),
            member.instance_id,
            member.client_id,
            member.client_host,
            sorted(
                (topic, int(partition))
                for task in member.assignment.active_tasks
                for partition in task.partitions
                for topic in sources.get(str(task.subtopology_id), ())
            ),
            _tasks_text(member.assignment),
        )
        for member in group.members
    ]
    return _ModernGroup(
        group.group_state, STREAMS, group.assignor_name or "", members, group_type=STREAMS
    )


def _describe_share(conn: Connection, group_id: str) -> _ModernGroup | None:
    """ShareGroupDescribe, for a group DescribeGroups calls Dead (Kafka 4 answers so for a
    share group); None if it is not one."""
    group = _described(conn, ApiKey.SHARE_GROUP_DESCRIBE, group_id)
    if group is None:
        return None
    members = _members_of(group)
    return _ModernGroup(group.group_state, SHARE, group.assignor_name or "", members, SHARE)


def _share_offsets(conn: Connection, group_id: str):
    """A share group's start offsets (the "committed" column) and, from v1, lags, as
    kafka-share-groups.sh --describe shows them: DescribeShareGroupOffsets of every share
    partition the group has initialized."""
    if ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS not in conn.versions:
        return {}, {}
    answer = conn.request(
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, {"groups": [{"group_id": group_id, "topics": None}]}
    )
    (group,) = answer.groups
    error = _error(group.error_code)
    if error in RETRIABLE:
        raise _Moved(error)
    if error != Error.NONE:
        raise GroupsError(f"DescribeShareGroupOffsets of {group_id!r} answered {error.name}")
    starts, lags = {}, {}
    for topic in group.topics:
        for partition in topic.partitions:
            if _error(partition.error_code) != Error.NONE or int(partition.start_offset) < 0:
                continue
            key = (str(topic.topic_name), int(partition.partition_index))
            starts[key] = int(partition.start_offset)
            lag = getattr(partition, "lag", None)
            if lag is not None and int(lag) >= 0:
                lags[key] = int(lag)
    return starts, lags


def _describe_at(conn: Connection, group_id: str):
    described = conn.request(
        ApiKey.DESCRIBE_GROUPS, {"groups": [group_id], "include_authorized_operations": False}
    )
    group = described.groups[0]
    error = _error(group.error_code)
    if error == Error.NONE and group.group_state == "Dead":
        share = _describe_share(conn, group_id)
        if share is not None:
            return share, _share_offsets(conn, group_id)
        group = _describe_modern(conn, group_id) or _describe_streams(conn, group_id) or group
    if error in RETRIABLE:
        raise _Moved(error)
    if error == Error.GROUP_ID_NOT_FOUND:
        raise GroupsError(f"consumer group {group_id!r} does not exist")
    if error != Error.NONE:
        raise GroupsError(f"DescribeGroups of {group_id!r} answered {error.name}")
    fetched = conn.request(
        ApiKey.OFFSET_FETCH, {"group_id": group_id, "topics": None, "require_stable": False}
    )
    error = _error(fetched.error_code) if hasattr(fetched, "error_code") else Error.NONE
    if error in RETRIABLE:
        raise _Moved(error)
    if error != Error.NONE:
        raise GroupsError(f"OffsetFetch of {group_id!r} answered {error.name}")
    committed = {}
    for topic in fetched.topics:
        for partition in topic.partitions:
            if _error(partition.error_code) == Error.NONE and int(partition.committed_offset) >= 0:
                committed[(str(topic.name), int(partition.partition_index))] = int(
                    partition.committed_offset
                )
    return group, committed


def log_end_offsets(
    bootstrap: str, partitions: list[tuple[str, int]], deadline: float
) -> dict[tuple[str, int], int]:
    """ListOffsets (latest, read_uncommitted: the high watermark) to each partition's leader;
    a partition whose leader cannot be asked is left out (printed as "-")."""
    with connect_any(bootstrap, deadline) as conn:
        cluster = metadata(conn, sorted({topic for topic, _ in partitions}))
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for key in partitions:
        by_leader.setdefault(cluster.leaders.get(key, -1), []).append(key)
    ends: dict[tuple[str, int], int] = {}
    for leader, keys in by_leader.items():
        broker = cluster.brokers.get(leader)
        if broker is None:
            continue
        topics: dict[str, list[int]] = {}
        for topic, index in keys:
            topics.setdefault(topic, []).append(index)
        try:
            with Connection(broker.address, deadline) as conn:
                response = conn.request(
                    ApiKey.LIST_OFFSETS,
                    {
                        "replica_id": -1,
                        "isolation_level": 0,
                        "topics": [
                            {
                                "name": topic,
                                "partitions": [
                                    {
                                        "partition_index": index,
                                        "current_leader_epoch": -1,
                                        "timestamp": LATEST,
                                    }
                                    for index in indexes
                                ],
                            }
                            for topic, indexes in topics.items()
                        ],
                    },
                )
        except GroupsError:
            continue
        for topic in response.topics:
            for partition in topic.partitions:
                if _error(partition.error_code) == Error.NONE:
                    ends[(str(topic.name), int(partition.partition_index))] = int(partition.offset)
    return ends


# -- output ---------------------------------------------------------------------------------------


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(),
            file=out,
        )


def _dash(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def print_list(groups: list[ListedGroup], out: TextIO) -> None:
    if not groups:
        print("no consumer groups", file=out)
        return
    rows = [
        [
            "GROUP",
            "COORDINATOR",
            "TYPE",
            "STATE",
            "PROTOCOL-TYPE",
            "ASSIGNMENT-STRATEGY",
            "MEMBERS",
        ]
    ]
    rows += [
        [
            g.group_id,
            str(g.coordinator),
            g.group_type,
            g.state,
            _dash(g.protocol_type),
            _dash(g.assignment_strategy),
            str(g.members),
        ]
        for g in groups
    ]
    _table(rows, out)


def _assignment_text(assignment: list[tuple[str, int]] | None) -> str:
    if assignment is None:
        return "-"
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    return (
        ", ".join(
            f"{topic}:{','.join(map(str, sorted(parts)))}"
            for topic, parts in sorted(by_topic.items())
        )
        or "(none)"
    )


def print_group(view: GroupView, out: TextIO) -> None:
    members = f"{len(view.members)} member{'' if len(view.members) == 1 else 's'}"
    print(
        f"GROUP {view.group_id}: type {view.group_type}, state {view.state}, protocol type"
        f" {_dash(view.protocol_type)}, assignment strategy {_dash(view.assignment_strategy)},"
        f" {members}, coordinator {view.coordinator.node_id} ({view.coordinator.address})",
        file=out,
    )
    print(file=out)
    if view.members:
        rows = [["MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"]]
        rows += [
            [
                m.member_id,
                _dash(m.group_instance_id),
                m.client_id,
                m.host,
                m.tasks if m.tasks is not None else _assignment_text(m.assignment),
            ]
            for m in view.members
        ]
        _table(rows, out)
    else:
        print("no active members", file=out)
    print(file=out)
    if view.partitions:
        # A share group has no committed offsets: each share partition's start offset, as
        # kafka-share-groups.sh --describe names it.
        offset = "START-OFFSET" if view.group_type == SHARE else "CURRENT-OFFSET"
        rows = [["TOPIC", "PARTITION", offset, "LOG-END-OFFSET", "LAG", "CONSUMER-ID"]]
        rows += [
            [
                p.topic,
                str(p.partition),
                _dash(p.committed),
                _dash(p.log_end),
                _dash(p.lag),
                _dash(p.consumer),
            ]
            for p in view.partitions
        ]
        _table(rows, out)
    else:
        print("no committed offsets and no assigned partitions", file=out)


def run(bootstrap: str, describe: str | None, timeout: float, out: TextIO = sys.stdout) -> int:
    """The command: print the list, or one group; errors go to stderr, and the exit status."""
    try:
        if describe is None:
            groups, problems = list_groups(bootstrap, timeout)
            print_list(groups, out)
            for problem in problems:
                print(f"minibroker groups: {problem}", file=sys.stderr)
            return 1 if problems else 0
        print_group(describe_group(bootstrap, describe, timeout), out)
        return 0
    except (GroupsError, ValueError) as error:
        print(f"minibroker groups: {error}", file=sys.stderr)
        return 1
