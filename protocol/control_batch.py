"""Control batches: the COMMIT and ABORT markers that end a transaction on a partition.

Kafka's EndTransactionMarker (clients/.../record/EndTransactionMarker.java and
ControlRecordType): a v2 batch with the transactional and control attribute bits, the
producer's id and epoch, base sequence -1, and one record whose

- key is the control record key: version i16 (0) then type i16 (0 ABORT, 1 COMMIT);
- value is the marker: version i16 (0) then the coordinator epoch i32.

Control batches are never compressed. Kafka 4 reads a marker value of a newer version as
version 0 (its fields are a prefix), and so do we.
"""

import struct

from minibroker.protocol.buffers import Buffer
from minibroker.protocol.record_batch import CONTROL_FLAG_MASK, TRANSACTIONAL_FLAG_MASK
from minibroker.protocol.records import Record, RecordError, decode_records, encode_batch

ABORT, COMMIT = 0, 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
CONTROL_ATTRIBUTES = TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK


def encode_control_batch(
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    timestamp_ms: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One control batch at base offset 0 holding the COMMIT or ABORT marker (Kafka's
    MemoryRecords.withEndTransactionMarker)."""
    record = Record(
        0,
        timestamp_ms,
        _KEY.pack(0, COMMIT if commit else ABORT),
        _VALUE.pack(0, coordinator_epoch),
    )
    return encode_batch(
        [record],
        attributes=CONTROL_ATTRIBUTES,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )


def read_control_marker(batch: Buffer) -> tuple[bool, int]:
    """(commit?, coordinator epoch) of the control batch that starts at ``batch[0]``.

    RecordError (a ValueError) when it holds no transaction marker: no record, a key or
    value too short, or another control type (KRaft's LEADER_CHANGE, which a broker never
    writes to a partition log).
    """
    records = decode_records(batch)
    if not records:
        raise RecordError("a control batch without a record")
    key, value = records[0].key, records[0].value
    if key is None or len(key) < _KEY.size or value is None or len(value) < _VALUE.size:
        raise RecordError("a control record too short to be a transaction marker")
    _, control_type = _KEY.unpack_from(key)
    if control_type not in (ABORT, COMMIT):
        raise RecordError(f"control record type {control_type} is not a transaction marker")
    _, coordinator_epoch = _VALUE.unpack_from(value)
    return control_type == COMMIT, coordinator_epoch
