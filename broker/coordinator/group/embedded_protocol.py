"""The consumer embedded protocol of classic groups (Kafka's ConsumerProtocol): what a
JoinGroup's protocol metadata and a SyncGroup's assignment hold when the protocol type is
`consumer`. Pure bytes in, bytes out.

The coordinator reads them only to migrate a group between the classic and the consumer
protocol (KIP-848, Kafka's ConsumerGroup.fromClassicGroup and ClassicGroup.fromConsumerGroup)
and to serve classic members of a consumer group, as Kafka's GroupMetadataManager does:

- ConsumerProtocolSubscription v0-v3: version i16, topics [string], user data (nullable
  bytes), v1+ owned partitions [(topic, [i32])], v2+ generation i32, v3+ rack (nullable
  string); a later version is read as v3 (Kafka's forward compatibility);
- ConsumerProtocolAssignment v0-v3 (one layout): version i16, [(topic, [i32])], user data.

Malformed bytes raise `EmbeddedProtocolError` (Kafka's SchemaException).
"""

import struct
from dataclasses import dataclass, field

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

MAX_ASSIGNMENT_VERSION = 3


class EmbeddedProtocolError(ValueError):
    pass


@dataclass(frozen=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    # topic name -> partitions the member owns (v1+; empty before).
    owned: dict[str, set[int]] = field(default_factory=dict)
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.pos = 0

    def _take(self, fmt: struct.Struct) -> int:
        if self.pos + fmt.size > len(self.data):
            raise EmbeddedProtocolError("truncated")
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def raw(self, length: int) -> bytes:
        if length < 0 or self.pos + length > len(self.data):
            raise EmbeddedProtocolError("truncated")
        out = self.data[self.pos : self.pos + length]
        self.pos += length
        return out

    def string(self) -> str | None:
        length = self.i16()
        if length < 0:
            return None
        try:
            return self.raw(length).decode()
        except UnicodeDecodeError:
            raise EmbeddedProtocolError("a string that is not UTF-8") from None

    def count(self) -> int:
        count = self.i32()
        if count > len(self.data):
            raise EmbeddedProtocolError("array longer than the data")
        return max(count, 0)

    def nullable_bytes(self) -> None:
        length = self.i32()
        if length >= 0:
            self.raw(length)

    def topic_partitions(self) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for _ in range(self.count()):
            topic = self.string() or ""
            out.setdefault(topic, set()).update(self.i32() for _ in range(self.count()))
        return out


def version_of(data: bytes) -> int:
    """Kafka's ConsumerProtocol.deserializeVersion."""
    return _Reader(data).i16()


def decode_subscription(data: bytes) -> Subscription:
    reader = _Reader(data)
    version = reader.i16()
    if version < 0:
        raise EmbeddedProtocolError(f"subscription version {version}")
    topics = tuple(reader.string() or "" for _ in range(reader.count()))
    reader.nullable_bytes()
    owned: dict[str, set[int]] = {}
    rack_id = None
    if version >= 1:
        owned = reader.topic_partitions()
    if version >= 2:
        reader.i32()
    if version >= 3:
        rack_id = reader.string()
    return Subscription(version, topics, owned, rack_id)


def decode_assignment(data: bytes) -> dict[str, set[int]]:
    reader = _Reader(data)
    version = reader.i16()
    if version < 0:
        raise EmbeddedProtocolError(f"assignment version {version}")
    assigned = reader.topic_partitions()
    reader.nullable_bytes()
    return {topic: parts for topic, parts in assigned.items() if parts}


def encode_assignment(partitions: dict[str, set[int]], version: int) -> bytes:
    """Kafka's ConsumerProtocol.serializeAssignment: the member's subscription version,
    capped at the highest assignment version (all versions share one layout), user data
    null."""
    version = min(max(version, 0), MAX_ASSIGNMENT_VERSION)
    out = [_I16.pack(version), _I32.pack(len(partitions))]
    for topic in sorted(partitions):
        data = topic.encode()
        parts = sorted(partitions[topic])
        out.append(_I16.pack(len(data)) + data + _I32.pack(len(parts)))
        out.extend(_I32.pack(p) for p in parts)
    out.append(_I32.pack(-1))
    return b"".join(out)
