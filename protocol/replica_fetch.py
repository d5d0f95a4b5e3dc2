"""The replica fetcher's Fetch, written and read by hand: v18 by topic id, v12 by name.

A follower sends a Fetch for every partition it follows, as often as the leader answers, and
the answer carries every record it replicates. Through kio, each round trip built a request
entity from a description, serialised it, and decoded the response into entities with the
records copied out of the frame: Python work on every partition of every fetch, on a path
that runs on every broker. Here the request is written straight from the fetcher's numbers,
and the response is read into small tuples whose records are views into the received frame,
so the log appends exactly the bytes that arrived.

Two versions, as Kafka's ReplicaFetcherThread sends them (MetadataVersion.fetchRequestVersion
and AbstractFetcherThread's fallback): v18, what a Kafka 4.1-IV1+ follower sends, when every
partition of the fetch has a topic id: topics by id (v13), the follower's id and broker epoch
in the tagged ReplicaState (v15, KIP-903: the leader passes the epoch on in AlterPartition, so
the controller refuses an ISR member that restarted since), and each partition's known high
watermark in the tagged HighWatermark (v18, KIP-1166: a leader whose high watermark is ahead
answers at once instead of parking the fetch). v12, by name with ReplicaId in the body, when a
partition has no topic id. The v17 ReplicaDirectoryId is not sent (optional: Kafka's
follower sends it for JBOD directory assignment, which minibroker's controller does not
track). tests/unit/test_replica_fetch.py proves both byte-identical to the codec's encoding
(kio's for v12, protocol/schemas.py's v18) and the responses read as it reads them.
"""

import struct
import uuid
from collections.abc import Mapping
from typing import Any, NamedTuple

from minibroker.protocol.buffers import Buffer
from minibroker.protocol.framing import FrameError, encode_uvarint
from minibroker.protocol.versions import SENT_VERSIONS, ApiKey

# The versions the code below writes and reads: compact (flexible) encodings, diverging_epoch
# as tag 0 of each partition; v18 by topic id, v12 by name. The unit tests pin both.
REPLICA_FETCH_VERSION = SENT_VERSIONS[ApiKey.FETCH]
REPLICA_FETCH_VERSION_BY_NAME = 12
# Fetch v18's HighWatermark default: "the feature is not supported" (not written).
HIGH_WATERMARK_UNKNOWN = 2**63 - 1

_REQUEST_HEAD = struct.Struct(">iiiibii")  # replica_id .. session_epoch (v12)
_REQUEST_HEAD_V15 = struct.Struct(">iiibii")  # max_wait_ms .. session_epoch (v15+)
_REPLICA_STATE = struct.Struct(">iqb")  # replica_id, replica_epoch, no tags
_HIGH_WATERMARK_TAG = struct.Struct(">bbq")  # tag 1, size 8, the offset
_REPLICA_STATE_TAG = 1
_PARTITION_REQUEST = struct.Struct(">iiqiqi")
_RESPONSE_HEAD = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PARTITION_HEAD = struct.Struct(">ihqqq")  # index, error, high watermark, LSO, log start
_INT32 = struct.Struct(">i")
_EPOCH_END_OFFSET = struct.Struct(">iq")
_ABORTED_TRANSACTION_BYTES = 16  # producer_id int64, first_offset int64 (then tags)
_DIVERGING_EPOCH_TAG = 0
_NO_TAGS = b"\x00"


class ReplicaFetchPartition(NamedTuple):
    """Where a follower stands in one partition, as the Fetch request tells its leader."""

    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int
    # Fetch v18 (KIP-1166); not part of v12's request.
    high_watermark: int = HIGH_WATERMARK_UNKNOWN


class FetchedPartition(NamedTuple):
    """One partition of the leader's answer; `records` is a view into the response frame."""

    topic: Any  # the topic's name (v12) or, when read without names for the ids, its id
    partition_index: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    diverging_epoch: int
    diverging_end_offset: int
    records: memoryview | None


class ReplicaFetchResponse(NamedTuple):
    error_code: int
    partitions: list[FetchedPartition]
    session_id: int = 0


def _compact_string(text: str) -> bytes:
    encoded = text.encode()
    return encode_uvarint(len(encoded) + 1) + encoded


def encode_replica_fetch_request(
    *,
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    topics: Mapping[Any, list[ReplicaFetchPartition]],
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Mapping[Any, list[int]] | None = None,
    version: int = REPLICA_FETCH_VERSION_BY_NAME,
    replica_epoch: int = -1,
) -> bytes:
    """The Fetch request body a follower sends: read_uncommitted, no rack, no cluster id.
    Without a session (id 0, epoch -1) the leader answers every partition each time; in one
    (KIP-227), ``topics`` are the partitions added or changed and ``forgotten`` those to drop.
    ``topics`` and ``forgotten`` are keyed by topic name at v12 and by topic id
    (``uuid.UUID``) at v18, which also carries ``replica_epoch`` and each partition's
    ``high_watermark``."""
    by_id = version >= 13
    if by_id:
        out = bytearray(
            _REQUEST_HEAD_V15.pack(max_wait_ms, min_bytes, max_bytes, 0, session_id, session_epoch)
        )
    else:
        out = bytearray(
            _REQUEST_HEAD.pack(
                replica_id, max_wait_ms, min_bytes, max_bytes, 0, session_id, session_epoch
            )
        )
    out += encode_uvarint(len(topics) + 1)
    for topic, partitions in topics.items():
        out += topic.bytes if by_id else _compact_string(topic)
        out += encode_uvarint(len(partitions) + 1)
        for partition in partitions:
            out += _PARTITION_REQUEST.pack(*partition[:6])
            if by_id and partition.high_watermark != HIGH_WATERMARK_UNKNOWN:
                out += b"\x01" + _HIGH_WATERMARK_TAG.pack(1, 8, partition.high_watermark)
            else:
                out += _NO_TAGS
        out += _NO_TAGS
    forgotten = forgotten or {}
    out += encode_uvarint(len(forgotten) + 1)
    for topic, indexes in forgotten.items():
        out += topic.bytes if by_id else _compact_string(topic)
        out += encode_uvarint(len(indexes) + 1)
        for index in indexes:
            out += _INT32.pack(index)
        out += _NO_TAGS
    out += encode_uvarint(1)  # rack_id: ""
    if by_id:  # one tagged field: ReplicaState (tag 1), a struct with its own empty tags
        out += b"\x01" + bytes((_REPLICA_STATE_TAG, _REPLICA_STATE.size))
        out += _REPLICA_STATE.pack(replica_id, replica_epoch, 0)
    else:
        out += _NO_TAGS
    return bytes(out)


class _Reader:
    """Sequential reads over one response frame; running off its end is a FrameError."""

    def __init__(self, frame: memoryview, offset: int) -> None:
        self.frame = frame
        self.pos = offset

    def take(self, size: int) -> int:
        start = self.pos
        self.pos += size
        if self.pos > len(self.frame):
            raise FrameError("Fetch response ends inside a field")
        return start

    def unpack(self, layout: struct.Struct) -> tuple[Any, ...]:
        return layout.unpack_from(self.frame, self.take(layout.size))

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.frame[self.take(1)]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise FrameError("varint longer than 5 bytes in a Fetch response")

    def compact_string(self) -> str:
        size = self.uvarint() - 1
        if size < 0:
            raise FrameError("null topic name in a Fetch response")
        start = self.take(size)
        return str(self.frame[start : start + size], "utf-8")

    def compact_bytes(self) -> memoryview | None:
        size = self.uvarint() - 1
        if size < 0:
            return None
        start = self.take(size)
        return self.frame[start : start + size]

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())


def decode_replica_fetch_response(
    frame: Buffer,
    offset: int,
    version: int = REPLICA_FETCH_VERSION_BY_NAME,
    names: Mapping[Any, str] | None = None,
) -> ReplicaFetchResponse:
    """Read a Fetch response body (v12, or v18 by topic id) that starts at `offset` of
    `frame`. At v18 each topic id is given as its name in ``names`` (the fetcher's own map
    of what it asked for); an id not in it, or with no ``names``, is given as the id."""
    reader = _Reader(memoryview(frame), offset)
    _throttle, error_code, session_id = reader.unpack(_RESPONSE_HEAD)
    partitions: list[FetchedPartition] = []
    by_id = version >= 13
    for _ in range(reader.uvarint() - 1):
        if by_id:
            start = reader.take(16)
            topic: Any = uuid.UUID(bytes=bytes(reader.frame[start : start + 16]))
            if names is not None:
                topic = names.get(topic, topic)
        else:
            topic = reader.compact_string()
        for _ in range(reader.uvarint() - 1):
            index, error, high_watermark, _lso, log_start = reader.unpack(_PARTITION_HEAD)
            aborted = reader.uvarint() - 1
            for _ in range(max(aborted, 0)):
                reader.take(_ABORTED_TRANSACTION_BYTES)
                reader.skip_tags()
            reader.take(_INT32.size)  # preferred_read_replica
            records = reader.compact_bytes()
            diverging_epoch = diverging_end_offset = -1
            for _ in range(reader.uvarint()):
                tag, size = reader.uvarint(), reader.uvarint()
                if tag == _DIVERGING_EPOCH_TAG:
                    field = _Reader(reader.frame[: reader.pos + size], reader.pos)
                    diverging_epoch, diverging_end_offset = field.unpack(_EPOCH_END_OFFSET)
                reader.take(size)
            partitions.append(
                FetchedPartition(
                    topic,
                    index,
                    error,
                    high_watermark,
                    log_start,
                    diverging_epoch,
                    diverging_end_offset,
                    records,
                )
            )
        reader.skip_tags()
    reader.skip_tags()
    return ReplicaFetchResponse(error_code, partitions, session_id)
