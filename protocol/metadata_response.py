"""A hand-written Metadata response encoder.

A Metadata request for every topic is answered with an entry per partition of the cluster, and
kio's generic writer costs tens of microseconds per partition in Python: at 5,000 partitions
(211,849 bytes) a broker spent 0.4-0.5 s building and writing the answer, where Kafka 4.4 takes
13-20 ms (docs/benchmarks/index.md, issue 39). This writes the same bytes directly from the
handler's description (broker/apis/metadata.py), each partition in one ``struct`` call whose
layout is cached by its replica, ISR and offline-replica counts.

The layout is Kafka's MetadataResponse.json (which kio's schema classes mirror, v0-v12, and
protocol.schemas' v13), field by field:

- the response: ThrottleTimeMs (v3+), Brokers, ClusterId (nullable, v2+), ControllerId (v1+),
  Topics, ClusterAuthorizedOperations (v8-v10), ErrorCode (v13);
- a broker: NodeId, Host, Port, Rack (nullable, v1+);
- a topic: ErrorCode, Name (nullable from v12), TopicId (v10+, null written as the zero
  uuid), IsInternal (v1+), Partitions, TopicAuthorizedOperations (v8+);
- a partition: ErrorCode, PartitionIndex, LeaderId, LeaderEpoch (v7+), ReplicaNodes,
  IsrNodes, OfflineReplicas (v5+).

From v9 (flexible) strings and arrays are compact and every structure ends with its tagged
fields; Metadata's response defines none, so each is the empty set (one zero byte).

A field the description leaves out takes kio's default (``codec.build``'s rule: the schema
default, null for a nullable field, an empty array, zero throttle time). Anything this encoder
does not take as a plain description (kio entities in place of dicts, a null name before v12,
which kio refuses too, a value out of its field's range) returns None, and the caller encodes
with kio, so the answer (or kio's failure) stays what it was. Departure: kio turns an error
code through its ErrorCode enum and fails on a code it lacks; this writes any int16.
tests/unit/test_metadata_response.py proves the bytes identical to kio's at every version.
"""

import datetime
import struct
from typing import Any

from minibroker.protocol.framing import encode_uvarint
from minibroker.protocol.versions import FIRST_FLEXIBLE_VERSION, ApiKey

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_BROKER_HEAD = struct.Struct(">i")
_TOPIC_OPERATIONS = struct.Struct(">i")
_FLEXIBLE_FROM = FIRST_FLEXIBLE_VERSION[ApiKey.METADATA]
_ZERO_ID = bytes(16)
# Kafka's "authorized operations not requested" (MetadataResponse.json's default).
_OPERATIONS_OMITTED = -(2**31)
_TRUE, _FALSE = b"\x01", b"\x00"

# A partition's struct by layout (leader epoch written, offline replicas written, flexible)
# and then by its replica, ISR and offline counts: the struct and the three array lengths as
# its arguments (int32 counts, or compact lengths as bytes). Bounded by the cluster's
# replication factors; cleared should a cluster ever produce more shapes than _MAX_PLANS.
_PartitionPlan = tuple[struct.Struct, int | bytes, int | bytes, int | bytes]
_PARTITION_PLANS: dict[tuple[bool, bool, bool], dict[tuple[int, int, int], _PartitionPlan]] = {}
_MAX_PLANS = 1024


def _partition_plan(
    plans: dict[tuple[int, int, int], _PartitionPlan],
    epoch: bool,
    offline: bool,
    flexible: bool,
    key: tuple[int, int, int],
) -> _PartitionPlan:
    fmt = ">hii" + ("i" if epoch else "")
    counts: list[int | bytes] = []
    for count in key if offline else key[:2]:
        if flexible:
            length = encode_uvarint(count + 1)
            fmt += f"{len(length)}s{count}i"
            counts.append(length)
        else:
            fmt += f"i{count}i"
            counts.append(count)
    if flexible:
        fmt += "x"  # the partition's tagged fields: none
    while len(counts) < 3:
        counts.append(0)
    if len(plans) >= _MAX_PLANS:
        plans.clear()
    plan = plans[key] = (struct.Struct(fmt), counts[0], counts[1], counts[2])
    return plan


def _throttle_ms(value: Any) -> int:
    """kio's i32Timedelta as codec.build makes it from milliseconds or a timedelta."""
    delta: datetime.timedelta = value
    if not isinstance(value, datetime.timedelta):
        delta = datetime.timedelta(milliseconds=value)
    return round(delta.total_seconds() * 1000)


def encode_metadata_response(version: int, data: dict[str, Any]) -> bytes | None:
    """The Metadata v0-v13 response body for the handler's description, or None to use kio."""
    try:
        return _encode(version, data)
    except (TypeError, AttributeError, KeyError, ValueError, OverflowError, struct.error):
        return None


def _encode(version: int, data: dict[str, Any]) -> bytes:
    flexible = version >= _FLEXIBLE_FROM
    out = bytearray()

    def length(count: int) -> bytes:
        return encode_uvarint(count + 1) if flexible else _INT32.pack(count)

    def string(text: str) -> bytes:
        encoded = text.encode()
        if flexible:
            return encode_uvarint(len(encoded) + 1) + encoded
        return _INT16.pack(len(encoded)) + encoded

    def nullable_string(text: str | None) -> bytes:
        if text is None:
            return b"\x00" if flexible else b"\xff\xff"
        return string(text)

    if version >= 3:
        out += _INT32.pack(_throttle_ms(data.get("throttle_time", 0)))
    brokers = data.get("brokers", ())
    out += length(len(brokers))
    for broker in brokers:
        out += _BROKER_HEAD.pack(broker["node_id"])
        out += string(broker["host"])
        out += _INT32.pack(broker["port"])
        if version >= 1:
            out += nullable_string(broker.get("rack"))
        if flexible:
            out += b"\x00"
    if version >= 2:
        out += nullable_string(data.get("cluster_id"))
    if version >= 1:
        out += _INT32.pack(data.get("controller_id", -1))

    epoch = version >= 7
    offline = version >= 5
    plans = _PARTITION_PLANS.setdefault((epoch, offline, flexible), {})
    topics = data.get("topics", ())
    out += length(len(topics))
    for topic in topics:
        out += _INT16.pack(topic["error_code"])
        if version >= 12:
            out += nullable_string(topic.get("name"))
        else:
            out += string(topic["name"])
        if version >= 10:
            topic_id = topic.get("topic_id")
            out += _ZERO_ID if topic_id is None else topic_id.bytes
        if version >= 1:
            out += _TRUE if topic.get("is_internal", False) else _FALSE
        partitions = topic.get("partitions", ())
        out += length(len(partitions))
        if epoch:  # v7+: every field
            for partition in partitions:
                replicas = partition.get("replica_nodes", ())
                isr = partition.get("isr_nodes", ())
                offlines = partition.get("offline_replicas", ())
                key = (len(replicas), len(isr), len(offlines))
                layout, replica_count, isr_count, offline_count = plans.get(key) or _partition_plan(
                    plans, epoch, offline, flexible, key
                )
                out += layout.pack(
                    partition["error_code"],
                    partition["partition_index"],
                    partition["leader_id"],
                    partition.get("leader_epoch", -1),
                    replica_count,
                    *replicas,
                    isr_count,
                    *isr,
                    offline_count,
                    *offlines,
                )
        else:  # v0-v6: no leader epoch, offline replicas from v5
            for partition in partitions:
                replicas = partition.get("replica_nodes", ())
                isr = partition.get("isr_nodes", ())
                offlines = partition.get("offline_replicas", ()) if offline else ()
                key = (len(replicas), len(isr), len(offlines))
                layout, replica_count, isr_count, offline_count = plans.get(key) or _partition_plan(
                    plans, epoch, offline, flexible, key
                )
                out += layout.pack(
                    partition["error_code"],
                    partition["partition_index"],
                    partition["leader_id"],
                    replica_count,
                    *replicas,
                    isr_count,
                    *isr,
                    *((offline_count, *offlines) if offline else ()),
                )
        if version >= 8:
            out += _TOPIC_OPERATIONS.pack(
                topic.get("topic_authorized_operations", _OPERATIONS_OMITTED)
            )
        if flexible:
            out += b"\x00"
    if 8 <= version <= 10:
        out += _INT32.pack(data.get("cluster_authorized_operations", _OPERATIONS_OMITTED))
    if version >= 13:
        out += _INT16.pack(data.get("error_code", 0))
    if flexible:
        out += b"\x00"
    return bytes(out)
