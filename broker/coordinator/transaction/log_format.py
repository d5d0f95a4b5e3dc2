"""The records of `__transaction_state`, in Kafka's own key and value layouts.

Kafka's TransactionLog (core/.../coordinator/transaction/TransactionLog.scala) with the message
definitions TransactionLogKey and TransactionLogValue. Pure bytes in, bytes out, so Kafka's
tools read what minibroker writes and minibroker loads what Kafka wrote.

- key v0: the transactional id (a version-prefixed TransactionLogKey).
- value v0 (not flexible) and v1 (flexible, KIP-915/KIP-890): producer id, producer epoch,
  transaction timeout, state id, the partitions of the transaction (null when Empty), the
  last update and start timestamps; v1 adds the tagged fields PreviousProducerId (tag 0),
  NextProducerId (tag 1) and ClientTransactionVersion (tag 2). Both are read.

What is written is value v1 (Kafka 4 with ``transaction.version`` 1 or 2), its tagged fields
on the wire only when they differ from their defaults: ClientTransactionVersion 2 for a
change made by a TV2 client, NextProducerId in a TV2 decision that exhausted the epoch, and
PreviousProducerId once a TV2 completion moved to that next id (see state.py).
A null value (a tombstone) is an expired transactional id.
"""

import struct
from dataclasses import dataclass

from minibroker.protocol.field_reader import FieldReader
from minibroker.protocol.framing import encode_uvarint as _uvarint

KEY_VERSION = 0
VALUE_VERSION = 1  # Kafka's TransactionVersion.TV_1.transactionLogValueVersion()

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2


class TxnRecordFormatError(ValueError):
    """A key or value minibroker cannot read (unknown version, truncated)."""


@dataclass(frozen=True)
class TxnLogValue:
    """One TransactionLogValue; ``partitions`` is topic -> partition ids, in write order."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int  # TransactionState id (state.TxnState)
    partitions: tuple[tuple[str, tuple[int, ...]], ...]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return _uvarint(len(data) + 1) + data


def key(transactional_id: str) -> bytes:
    """TransactionLogKey v0, version-prefixed (MessageUtil.toVersionPrefixedBytes)."""
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def value(record: TxnLogValue, version: int = VALUE_VERSION) -> bytes:
    """TransactionLogValue of ``version`` (0 or 1), version-prefixed. Partitions are null when
    there are none, as Kafka writes an Empty transaction."""
    head = _I16.pack(version) + _I64.pack(record.producer_id) + _I16.pack(record.producer_epoch)
    head += _I32.pack(record.timeout_ms) + _I8.pack(record.state)
    parts = bytearray()
    if version == 0:
        if not record.partitions:
            parts += _I32.pack(-1)
        else:
            parts += _I32.pack(len(record.partitions))
            for topic, ids in record.partitions:
                parts += _string(topic) + _I32.pack(len(ids))
                parts += b"".join(_I32.pack(i) for i in ids)
    elif version == 1:
        if not record.partitions:
            parts += _uvarint(0)
        else:
            parts += _uvarint(len(record.partitions) + 1)
            for topic, ids in record.partitions:
                parts += _compact_string(topic) + _uvarint(len(ids) + 1)
                parts += b"".join(_I32.pack(i) for i in ids)
                parts += _uvarint(0)  # the partition entry's tagged fields
    else:
        raise TxnRecordFormatError(f"unknown transaction log value version {version}")
    tail = _I64.pack(record.last_update_ms) + _I64.pack(record.start_ms)
    if version == 1:
        tags: list[tuple[int, bytes]] = []
        if record.previous_producer_id != -1:
            tags.append((_TAG_PREVIOUS_PRODUCER_ID, _I64.pack(record.previous_producer_id)))
        if record.next_producer_id != -1:
            tags.append((_TAG_NEXT_PRODUCER_ID, _I64.pack(record.next_producer_id)))
        if record.client_transaction_version != 0:
            tags.append(
                (_TAG_CLIENT_TRANSACTION_VERSION, _I16.pack(record.client_transaction_version))
            )
        tail += _uvarint(len(tags))
        for tag, data in tags:
            tail += _uvarint(tag) + _uvarint(len(data)) + data
    return head + bytes(parts) + tail


class _Reader(FieldReader):
    error = TxnRecordFormatError

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise TxnRecordFormatError("null string")
        return text

    def compact_string(self) -> str:
        text = super().compact_string()
        if text is None:
            raise TxnRecordFormatError("null string")
        return text

    def skip_tags(self) -> dict[int, bytes]:
        return self.tagged()


def read_key(data: bytes) -> str:
    """The transactional id of a key (Kafka's readTxnRecordKey; other versions are unknown)."""
    reader = _Reader(data)
    version = reader.i16()
    if version != KEY_VERSION:
        raise TxnRecordFormatError(f"unknown transaction log key version {version}")
    return reader.string()


def read_value(data: bytes) -> TxnLogValue:
    """A TransactionLogValue v0 or v1 (Kafka's readTxnRecordValue)."""
    reader = _Reader(data)
    version = reader.i16()
    if version not in (0, 1):
        raise TxnRecordFormatError(f"unknown transaction log value version {version}")
    producer_id = reader.i64()
    epoch = reader.i16()
    timeout_ms = reader.i32()
    state = reader.i8()
    partitions: list[tuple[str, tuple[int, ...]]] = []
    if version == 0:
        count = reader.i32()
        for _ in range(max(count, 0)):
            topic = reader.string()
            ids = tuple(reader.i32() for _ in range(max(reader.i32(), 0)))
            partitions.append((topic, ids))
    else:
        count = reader.uvarint() - 1
        for _ in range(max(count, 0)):
            topic = reader.compact_string()
            ids = tuple(reader.i32() for _ in range(max(reader.uvarint() - 1, 0)))
            reader.skip_tags()
            partitions.append((topic, ids))
    last_update_ms = reader.i64()
    start_ms = reader.i64()
    previous, following, client_version = -1, -1, 0
    if version == 1:
        tags = reader.skip_tags()
        try:
            if _TAG_PREVIOUS_PRODUCER_ID in tags:
                (previous,) = _I64.unpack(tags[_TAG_PREVIOUS_PRODUCER_ID])
            if _TAG_NEXT_PRODUCER_ID in tags:
                (following,) = _I64.unpack(tags[_TAG_NEXT_PRODUCER_ID])
            if _TAG_CLIENT_TRANSACTION_VERSION in tags:
                (client_version,) = _I16.unpack(tags[_TAG_CLIENT_TRANSACTION_VERSION])
        except struct.error:
            raise TxnRecordFormatError("bad tagged field") from None
    return TxnLogValue(
        producer_id,
        epoch,
        timeout_ms,
        state,
        tuple(partitions),
        last_update_ms,
        start_ms,
        previous,
        following,
        client_version,
    )
