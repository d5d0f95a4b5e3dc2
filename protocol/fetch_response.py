"""A hand-written Fetch response encoder for the data path.

kio's generic writer copies every record set into one buffer; for Fetch, where the records
are most of the response, that is a copy of everything a consumer or follower reads, done in
Python-driven steps. This encoder writes the small fields itself and hands back the response
as a list of chunks in which each partition's records appear as the very object read from the
log, so the socket sends them without another copy (a FileRecords, on a plaintext connection,
is only measured here: the server sends it with sendfile).

It covers the responses the broker builds in the common case, read_committed's aborted
transactions included; anything else (a diverging epoch for a follower, the current leader
and node endpoints of Fetch v16+) returns None and the caller falls back to kio.
tests/unit/test_fetch_response.py proves the bytes identical to kio's for every supported
version.
"""

import struct
from typing import Any

from minibroker.protocol.buffers import Buffer
from minibroker.protocol.framing import encode_uvarint
from minibroker.protocol.versions import FIRST_FLEXIBLE_VERSION, ApiKey

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
# partition_index, error_code, high_watermark, last_stable_offset (, log_start_offset: v5+)
_PARTITION_HEAD = struct.Struct(">ihqq")
_PARTITION_HEAD_V5 = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset
# A partition with no records and no aborted transaction at v11+ (flexible), whole: the
# five fixed fields, aborted_transactions (0: null, 1: empty), preferred_read_replica, the
# records' compact length (1: empty) and the partition's tagged fields (none). Most of a
# sessionless fetch of many partitions is such entries (issue 40: the latency row's 64).
_EMPTY_PARTITION_V11 = struct.Struct(">ihqqqBiBB")
_FLEXIBLE_FROM = FIRST_FLEXIBLE_VERSION[ApiKey.FETCH]
FIRST_TOPIC_ID_VERSION = 13


def _has_defaults_only(partition: dict[str, Any]) -> bool:
    """True when nothing outside this encoder's fast path is set on the partition."""
    diverging = partition.get("diverging_epoch")
    return partition.get("current_leader") is None and (
        diverging is None
        or (diverging.get("epoch", -1) == -1 and diverging.get("end_offset", -1) == -1)
    )


def encode_fetch_response(version: int, data: dict[str, Any]) -> list[Buffer] | None:
    """The Fetch response body as chunks (bytes and record objects), or None to use kio."""
    responses = data["responses"]
    if data.get("node_endpoints"):
        return None
    flexible = version >= _FLEXIBLE_FROM
    whole_empty = flexible and version >= 11  # _EMPTY_PARTITION_V11's layout
    chunks: list[Buffer] = []
    out = bytearray()

    def array_length(count: int) -> None:
        out.extend(encode_uvarint(count + 1) if flexible else _INT32.pack(count))

    out += _INT32.pack(0)  # throttle_time_ms
    if version >= 7:
        out += _INT16.pack(int(data.get("error_code", 0)))
        out += _INT32.pack(data.get("session_id", 0))
    array_length(len(responses))
    for topic in responses:
        if version >= FIRST_TOPIC_ID_VERSION:
            topic_id = topic["topic_id"]
            out += topic_id.bytes if topic_id is not None else bytes(16)  # None: the zero id
        else:
            name = topic["topic"].encode()
            out += encode_uvarint(len(name) + 1) if flexible else _INT16.pack(len(name))
            out += name
        partitions = topic["partitions"]
        array_length(len(partitions))
        for partition in partitions:
            if (
                "current_leader" in partition or "diverging_epoch" in partition
            ) and not _has_defaults_only(partition):
                return None  # (nothing sent yet: the caller encodes it all with kio)
            records = partition["records"]
            if (
                whole_empty
                and records is not None
                and not len(records)
                and not (aborted := partition.get("aborted_transactions"))
            ):
                out += _EMPTY_PARTITION_V11.pack(
                    partition["partition_index"],
                    int(partition["error_code"]),
                    partition["high_watermark"],
                    partition["last_stable_offset"],
                    partition["log_start_offset"],
                    0 if aborted is None else 1,
                    partition["preferred_read_replica"],
                    1,
                    0,
                )
                continue
            if version >= 5:  # the five fixed fields in one pack (most of an idle partition)
                out += _PARTITION_HEAD_V5.pack(
                    partition["partition_index"],
                    int(partition["error_code"]),
                    partition["high_watermark"],
                    partition["last_stable_offset"],
                    partition["log_start_offset"],
                )
            else:
                out += _PARTITION_HEAD.pack(
                    partition["partition_index"],
                    int(partition["error_code"]),
                    partition["high_watermark"],
                    partition["last_stable_offset"],
                )
            aborted = partition.get("aborted_transactions")
            if aborted is None:
                out += b"\x00" if flexible else _INT32.pack(-1)  # aborted_transactions: null
            else:
                array_length(len(aborted))
                for txn in aborted:
                    out += _ABORTED.pack(txn["producer_id"], txn["first_offset"])
                    if flexible:
                        out += b"\x00"  # aborted transaction tagged fields
            if version >= 11:
                out += _INT32.pack(partition["preferred_read_replica"])
            if records is None:
                out += b"\x00" if flexible else _INT32.pack(-1)
            else:
                size = len(records)
                out += encode_uvarint(size + 1) if flexible else _INT32.pack(size)
                if size:
                    chunks.append(bytes(out))
                    chunks.append(records)
                    out = bytearray()
            if flexible:
                out += b"\x00"  # partition tagged fields
        if flexible:
            out += b"\x00"  # topic tagged fields
    if flexible:
        out += b"\x00"  # response tagged fields
    chunks.append(bytes(out))
    return chunks
