"""A partition's log: its segments, offsets, appends, reads, recovery, retention and flushing.

The log lives in `<log.dir>/<topic>-<partition>/` as Kafka lays it out: segments named by
their base offset, a `leader-epoch-checkpoint`, and (written by the log manager) a
`partition.metadata`. Appends validate batch headers, stamp offsets into the caller's bytes
and write each append to the active segment in one write; reads return whole batches as
stored.

Where this departs from Kafka (each is also noted where it happens):

- `truncate_to(offset)` removes every batch holding an offset >= `offset` and the log end
  offset becomes the end of what is left, which is `offset` whenever it falls on a batch
  boundary (it always does for replication). Kafka removes the same batches but sets the log
  end offset to `offset` regardless, which can leave a gap.
- A read may span segments, where Kafka stops at the end of the segment it started in.
- Producer state: a `<offset>.snapshot` in Kafka's format is written when a segment is rolled
  and when the log closes; opening or truncating the log loads the latest snapshot at or
  below the log end (and below any segment recovery rescans, whose `.txnindex` the replay
  rebuilds) and replays only the batch headers after it (after a crash, the headers from the
  start of the latest leader epoch the checkpoint knows are read too, for newer epochs).
  Kafka writes the roll's snapshot asynchronously; here it is written with the roll's new
  files (in the roll's worker thread in the broker), and fsynced only when the log closes
  (a torn one fails its CRC and an older one, or a full replay, is used).
- Rolled segments are fsynced by `flush_if_due` (which the log manager runs periodically and
  before each checkpoint) rather than by a background task right after the roll.
- The blocking half of a flush can run in a worker thread (issue 40: one event loop serves
  every client, and an fsync there stalls them all): `begin_flush` (on the log's owner)
  writes the pending index entries and takes descriptors of its own for what must be
  fsynced, `FlushJob.run` (any thread) fsyncs them, the directory and the leader epoch
  checkpoint, and `finish_flush` (on the owner again) moves the recovery point. Appends go
  on meanwhile, as they do while Kafka's scheduler thread runs UnifiedLog.flush outside the
  log's lock; the recovery point only ever moves past what the job fsynced, and not at all
  if the log was truncated meanwhile. `flush` runs the three steps in a row.
- A segment roll's file creations can run in a worker thread too (issue 40; the broker
  leaves that off, replication/log_io.py's ROLLS_IN_THREAD, as measured slower): `begin_roll`
  (on the owner) seals the active segment's indexes and takes the producer state's
  snapshot bytes, `RollJob.run` (any thread) creates the new segment's `.log`, `.index` and
  `.timeindex` and writes the `<offset>.snapshot`, and `finish_roll` (on the owner) makes
  the new segment the active one. The owner appends nothing to the log in between (the
  broker's append paths wait for `roll_in_flight` to clear: replication/log_io.py); a log
  truncated, closed or appended to meanwhile drops the new segment instead, so it never
  holds an offset below its base. `_maybe_roll` still rolls inline (the offsets not fitting
  the indexes' relative offsets, which the broker does not check before an append).
- Retention renames a deleted segment's files to `.deleted` and leaves the unlinking to
  the caller (`take_deleted_files`), which the broker does in a worker thread, as Kafka's
  asyncDeleteSegment hands it to the scheduler (here without file.delete.delay.ms: the
  segment's readers hold descriptors of their own).

Transactions as Kafka's UnifiedLog keeps them: producer state knows each producer's open
transaction, `first_unstable_offset` is the first offset of the oldest one not yet decided
and replicated, the coordinator's COMMIT and ABORT markers are appended with
`append_control_marker` (followers take them through `append_as_follower`, the same
producer-state path), and every ABORT marker adds an entry to the `.txnindex` of the segment
it lands in (storage/transaction_index.py), which `collect_aborted_transactions` reads for
read_committed fetches. Recovery rebuilds the `.txnindex` of every segment it rescans.
"""

import errno
import logging
import os
import re
import shutil
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import wraps
from pathlib import Path
from typing import Any, NamedTuple, TypeVar, cast

from minibroker.protocol.buffers import Buffer, WritableBuffer
from minibroker.protocol.control_batch import encode_control_batch, read_control_marker
from minibroker.protocol.record_batch import (
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    BatchHeader,
    InvalidRecordBatch,
    read_header,
    set_log_append_time,
    stamp_offsets,
    validate_batches,
)
from minibroker.protocol.records import (
    DELETE_HORIZON_FLAG,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    RecordError,
    iter_record_keys,
    read_varint,
    recompress_batch,
)
from minibroker.storage.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache, fsync_directory
from minibroker.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from minibroker.storage.file_records import FileRecords
from minibroker.storage.index import OFFSET_INDEX_SUFFIX, TIME_INDEX_SUFFIX
from minibroker.storage.log_dir_failure import LogDirFailureChannel
from minibroker.storage.producer_state import SNAPSHOT_SUFFIX, CompletedTxn, ProducerStateManager
from minibroker.storage.segment import (
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_LOG_NAME,
    LogSegment,
    segment_file_name,
)
from minibroker.storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn

log = logging.getLogger("storage.log")

LONG_MAX = 2**63 - 1
# A zero-copy read smaller than this is read into bytes: below it a descriptor's dup, close
# and the extra sendfile call cost more than copying the records (see BENCHMARKS.md 14).
ZERO_COPY_MIN_BYTES = 32 * 1024
INT_MAX = 2**31 - 1
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

# Files an interrupted operation may leave in a partition directory (Kafka's suffixes);
# `.swap` files are not simply removed: see _complete_interrupted_swaps.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_LEFTOVER_SUFFIXES = (".tmp", ".deleted", CLEANED_SUFFIX)
_SEGMENT_FILE = re.compile(r"(\d{20})(\.log|\.index|\.timeindex|\.txnindex)(\.swap)?")
_INTEGER = re.compile(r"[+-]?\d+")
_SNAPSHOT_FILE = re.compile(r"(\d{20})\.snapshot")


def _integer(lowest: int, highest: int, type_name: str) -> Callable[[str, str], int]:
    def parse(key: str, text: str) -> int:
        stripped = text.strip()
        if not _INTEGER.fullmatch(stripped) or not -(highest + 1) <= int(stripped) <= highest:
            raise ValueError(
                f"Invalid value {text} for configuration {key}: Not a number of type {type_name}"
            )
        value = int(stripped)
        if value < lowest:
            raise ValueError(
                f"Invalid value {value} for configuration {key}: Value must be at least {lowest}"
            )
        return value

    return parse


def _int(lowest: int = -(INT_MAX + 1)) -> Callable[[str, str], int]:
    return _integer(lowest, INT_MAX, "INT")


def _long(lowest: int = -(LONG_MAX + 1)) -> Callable[[str, str], int]:
    return _integer(lowest, LONG_MAX, "LONG")


def _timestamp_type(key: str, text: str) -> str:
    if text.strip() not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(
            f"Invalid value {text} for configuration {key}: String must be one of: "
            f"{CREATE_TIME}, {LOG_APPEND_TIME}"
        )
    return text.strip()


def _cleanup_policy(key: str, text: str) -> str:
    # An empty list is valid, as Kafka 3.x's ValidList has it (IncrementalAlterConfigs
    # SUBTRACT of the last policy leaves it): neither deleted by retention nor compacted.
    policies = [policy.strip() for policy in text.split(",") if policy.strip()]
    if any(policy not in ("compact", "delete") for policy in policies):
        raise ValueError(
            f"Invalid value {text} for configuration {key}: String must be one of: compact, delete"
        )
    return ",".join(policies)


def _ratio(key: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(
            f"Invalid value {text} for configuration {key}: Not a number of type DOUBLE"
        ) from None
    if not 0.0 <= value <= 1.0:
        bound = "be at least 0.0" if value < 0 else "be no more than 1.0"
        raise ValueError(f"Invalid value {value} for configuration {key}: Value must {bound}")
    return value


def _boolean(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"Invalid value {text} for configuration {key}: Expected true or false")
    return value == "true"


def _one_of(*choices: str) -> Callable[[str, str], str]:
    def parse(key: str, text: str) -> str:
        if text.strip() not in choices:
            raise ValueError(
                f"Invalid value {text} for configuration {key}: String must be one of: "
                + ", ".join(choices)
            )
        return text.strip()

    return parse


def _level(lowest: int, highest: int, default: int | None = None) -> Callable[[str, str], int]:
    """A compression level: between the codec's bounds, or its 'default' marker (gzip's -1)."""
    parse_int = _int()

    def parse(key: str, text: str) -> int:
        value = parse_int(key, text)
        if value != default and not lowest <= value <= highest:
            bounds = f"between {lowest} and {highest}"
            if default is not None:
                bounds += f" or equal to {default}"
            raise ValueError(
                f"Invalid value {value} for configuration {key}: Value must be {bounds}"
            )
        return value

    return parse


# Iceberg topics (docs/iceberg-topics.md), as Redpanda's redpanda.iceberg.mode names its modes.
ICEBERG_DISABLED = "disabled"
ICEBERG_KEY_VALUE = "key_value"
ICEBERG_VALUE_SCHEMA_ID_PREFIX = "value_schema_id_prefix"
ICEBERG_MODES = (ICEBERG_DISABLED, ICEBERG_KEY_VALUE, ICEBERG_VALUE_SCHEMA_ID_PREFIX)
# The columns a partition spec may name, and the transforms each may take: the time
# transforms on the record timestamp, identity on the small integer columns (Iceberg's
# spec, "Partition Transforms"; offset, key, value and headers are never partition sources).
ICEBERG_TIME_TRANSFORMS = ("hour", "day", "month", "year")
_ICEBERG_SPEC_SOURCES = {
    "timestamp": ("identity", *ICEBERG_TIME_TRANSFORMS),
    "partition": ("identity",),
    "timestamp_type": ("identity",),
}
_ICEBERG_SPEC_FIELD = re.compile(r"\s*(?:(\w+)\s*\(\s*(\w+)\s*\)|(\w+))\s*")
DEFAULT_ICEBERG_PARTITION_SPEC = "(hour(timestamp))"


def _iceberg_mode(key: str, text: str) -> str:
    """Redpanda's modes (its value_schema_latest is not one of minibroker's)."""
    mode = text.strip()
    if mode not in ICEBERG_MODES:
        raise ValueError(
            f"Invalid value {text} for configuration {key}: String must be one of: "
            + ", ".join(ICEBERG_MODES)
        )
    return mode


def parse_iceberg_partition_spec(key: str, text: str) -> tuple[tuple[str, str], ...]:
    """Redpanda's redpanda.iceberg.partition.spec syntax, ``(hour(timestamp), partition)``:
    a parenthesized list of ``transform(column)`` or a bare column (identity), ``()`` for
    an unpartitioned table; (transform, column) pairs. ValueError names ``key``."""
    body = text.strip()
    if not (body.startswith("(") and body.endswith(")")):
        raise ValueError(
            f"Invalid value {text} for configuration {key}: a partition spec is a"
            " parenthesized list such as (hour(timestamp))"
        )
    fields: list[tuple[str, str]] = []
    inner = body[1:-1]
    for item in inner.split(",") if inner.strip() else ():
        match = _ICEBERG_SPEC_FIELD.fullmatch(item)
        if match is None:
            raise ValueError(
                f"Invalid value {text} for configuration {key}: {item.strip()!r} is not"
                " transform(column) or column"
            )
        transform, column = (match[1], match[2]) if match[2] else ("identity", match[3])
        allowed = _ICEBERG_SPEC_SOURCES.get(column)
        if allowed is None:
            raise ValueError(
                f"Invalid value {text} for configuration {key}: {column!r} cannot be"
                " partitioned on; one of " + ", ".join(_ICEBERG_SPEC_SOURCES)
            )
        if transform not in allowed:
            raise ValueError(
                f"Invalid value {text} for configuration {key}: {transform}({column}) is not"
                f" supported; {column} takes " + ", ".join(allowed)
            )
        if (transform, column) in fields:
            raise ValueError(
                f"Invalid value {text} for configuration {key}: {transform}({column}) twice"
            )
        fields.append((transform, column))
    return tuple(fields)


def _iceberg_partition_spec(key: str, text: str) -> str:
    parse_iceberg_partition_spec(key, text)
    return text.strip()


def _throttled_replicas(key: str, text: str) -> str:
    """Kafka's throttled-replica lists: empty, the wildcard, or partitionId:brokerId pairs,
    refused with Kafka 4.4's message (ThrottledReplicaListValidator; the value shown as the
    Java list it parsed)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if items == ["*"] or all(re.fullmatch(r"\d+:\d+", item) for item in items):
        return ",".join(items)
    raise ValueError(
        f"Invalid value [{', '.join(items)}] for configuration {key}: {key} must be the "
        "literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


def _message_format_version(key: str, text: str) -> str:
    """Kafka 3.x's MetadataVersion.fromVersionString: a 0.x version is read by its first
    three parts (0.10.0.0 is 0.10.0), a later one by its first two (3.0.1 is 3.0); the
    value is stored and ignored (record batches v2 only)."""
    segments = text.strip().split(".")
    kept = 3 if text.strip().startswith("0.") else 2
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?(-IV\d+)?", ".".join(segments[:kept])):
        raise ValueError(f"Invalid value {text} for configuration {key}: Unknown metadata version")
    return text.strip()


# compression.type's values (Kafka's BrokerCompressionType): "producer" keeps the producer's
# codec; any other makes the leader recompress batches that use another codec.
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
CODEC_BY_COMPRESSION_TYPE = {
    "uncompressed": NONE,
    "gzip": GZIP,
    "snappy": SNAPPY,
    "lz4": LZ4,
    "zstd": ZSTD,
}

# Kafka's topic-level config names -> (LogConfig field, parser with Kafka's validation). The
# field is None for configs that are validated and stored (DescribeConfigs shows them) but
# change nothing here: tiered storage, throttles, preallocation, down-conversion, ...
_TOPIC_CONFIGS: dict[str, tuple[str | None, Callable[[str, str], object]]] = {
    "segment.bytes": ("segment_bytes", _int(14)),
    "segment.ms": ("segment_ms", _long(1)),
    "segment.index.bytes": ("segment_index_bytes", _int(4)),
    "index.interval.bytes": ("index_interval_bytes", _int(0)),
    "retention.ms": ("retention_ms", _long(-1)),
    "retention.bytes": ("retention_bytes", _long()),
    "max.message.bytes": ("max_message_bytes", _int(0)),
    "message.timestamp.type": ("message_timestamp_type", _timestamp_type),
    "flush.messages": ("flush_messages", _long(1)),
    "flush.ms": ("flush_ms", _long(0)),
    "cleanup.policy": ("cleanup_policy", _cleanup_policy),
    "delete.retention.ms": ("delete_retention_ms", _long(0)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _long(0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _long(1)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "min.insync.replicas": ("min_insync_replicas", _int(1)),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _boolean),
    "compression.type": ("compression_type", _one_of(*COMPRESSION_TYPES)),
    "compression.gzip.level": (None, _level(1, 9, -1)),
    "compression.lz4.level": (None, _level(1, 17)),
    "compression.zstd.level": (None, _level(-131072, 22)),
    "segment.jitter.ms": (None, _long(0)),
    "file.delete.delay.ms": (None, _long(0)),
    "preallocate": (None, _boolean),
    "message.format.version": (None, _message_format_version),
    "message.timestamp.difference.max.ms": (None, _long(0)),
    "message.timestamp.before.max.ms": (None, _long(0)),
    "message.timestamp.after.max.ms": (None, _long(0)),
    "leader.replication.throttled.replicas": (None, _throttled_replicas),
    "follower.replication.throttled.replicas": (None, _throttled_replicas),
    "message.downconversion.enable": (None, _boolean),
    "remote.storage.enable": (None, _boolean),
    "local.retention.ms": (None, _long(-2)),
    "local.retention.bytes": (None, _long(-2)),
    "remote.log.copy.disable": (None, _boolean),
    "remote.log.delete.on.disable": (None, _boolean),
    # KIP-1191: the topic may be a share group's dead-letter queue (replication/share_dlq.py
    # reads it from the topic's configs).
    "errors.deadletterqueue.group.enable": (None, _boolean),
    # Confluent Server's schema validation on produce (docs/schema-registry.md): a record's
    # value (key) must carry a schema id registered for the topic's subject.
    "confluent.value.schema.validation": ("value_schema_validation", _boolean),
    "confluent.key.schema.validation": ("key_schema_validation", _boolean),
    # Redpanda's Iceberg topics (redpanda.iceberg.mode, redpanda.iceberg.target.lag.ms,
    # redpanda.iceberg.partition.spec) without the vendor prefix (docs/iceberg-topics.md).
    "iceberg.mode": ("iceberg_mode", _iceberg_mode),
    "iceberg.target.lag.ms": ("iceberg_target_lag_ms", _long(1)),
    "iceberg.partition.spec": ("iceberg_partition_spec", _iceberg_partition_spec),
    "iceberg.delete": ("iceberg_delete", _boolean),
    # Table maintenance by the leader of partition 0 (minibroker.iceberg.maintenance): how
    # often small files are compacted and old snapshots expired; 0 never. Their thresholds
    # are the table's Iceberg properties (history.expire.max-snapshot-age-ms, ...).
    "iceberg.compaction.interval.ms": ("iceberg_compaction_interval_ms", _long(0)),
    "iceberg.snapshot.expiry.interval.ms": ("iceberg_snapshot_expiry_interval_ms", _long(0)),
}
TOPIC_CONFIG_NAMES = frozenset(_TOPIC_CONFIGS)


def validate_topic_config(key: str, text: str, shown_as: str | None = None) -> object:
    """The parsed value of one Kafka topic config; ValueError with Kafka's message if bad,
    naming the config ``shown_as`` (a broker property that sets it) when given."""
    if key not in _TOPIC_CONFIGS:
        raise ValueError(f"Unknown topic config name: {key}")
    return _TOPIC_CONFIGS[key][1](shown_as or key, text)


@dataclass(frozen=True)
class LogConfig:
    """A topic's log settings, under Kafka's defaults; see `from_topic_configs` for names.

    flush_messages and flush_ms at Long.MAX_VALUE mean "leave flushing to the OS", as in
    Kafka; flush_ms may also be given as None for the same thing (the broker-level
    log.flush.interval.ms has no value by default).
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    max_message_bytes: int = 1048588
    message_timestamp_type: str = CREATE_TIME
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    cleanup_policy: str = "delete"
    # The log cleaner's settings (cleanup.policy=compact; see storage/cleaner.py).
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    min_insync_replicas: int = 1
    # Replication settings live here too: they are topic configs like the others, and the
    # controller and the leader read them from the same validated object.
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"
    # confluent.value.schema.validation / confluent.key.schema.validation.
    value_schema_validation: bool = False
    key_schema_validation: bool = False
    # iceberg.mode / iceberg.target.lag.ms (Redpanda's iceberg_target_lag_ms default) /
    # iceberg.partition.spec: read by the Iceberg writer (minibroker.iceberg), never by the
    # data path.
    iceberg_mode: str = ICEBERG_DISABLED
    iceberg_target_lag_ms: int = 60_000
    iceberg_partition_spec: str = DEFAULT_ICEBERG_PARTITION_SPEC
    # iceberg.delete (Redpanda's redpanda.iceberg.delete): drop the topic's tables when the
    # topic is deleted.
    iceberg_delete: bool = True
    # iceberg.compaction.interval.ms / iceberg.snapshot.expiry.interval.ms (0: never).
    iceberg_compaction_interval_ms: int = 3_600_000
    iceberg_snapshot_expiry_interval_ms: int = 3_600_000

    def __post_init__(self) -> None:
        if self.flush_ms is None:
            object.__setattr__(self, "flush_ms", LONG_MAX)

    @property
    def uses_log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def deletes_old_segments(self) -> bool:
        """Whether retention.ms/retention.bytes apply (cleanup.policy includes delete)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def recompression_codec(self) -> int | None:
        """The codec every batch must be stored with (compression.type other than
        producer), or None when batches are stored as the producer compressed them."""
        if self.compression_type == "producer":
            return None
        return CODEC_BY_COMPRESSION_TYPE[self.compression_type]

    @property
    def compacts(self) -> bool:
        """Whether the log cleaner keeps only the latest record per key (compact)."""
        return "compact" in self.cleanup_policy.split(",")

    @classmethod
    def from_topic_configs(
        cls, base: "LogConfig", configs: Mapping[str, str | None]
    ) -> "LogConfig":
        """`base` overridden by Kafka topic configs; ValueError naming the key if one is bad."""
        # Each value has its field's type (_TOPIC_CONFIGS pairs a field with its parser), which
        # mypy cannot follow through the table: replace() checks the names at run time.
        changes: dict[str, Any] = {}
        for key, text in configs.items():
            if key not in _TOPIC_CONFIGS:
                raise ValueError(f"Unknown topic config name: {key}")
            if text is None:
                raise ValueError(f"Null value not supported for topic config {key}")
            field_name, parse = _TOPIC_CONFIGS[key]
            value = parse(key, text)
            if field_name is not None:
                changes[field_name] = value
        config = replace(base, **changes)
        if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
            raise ValueError(
                f"conflict topic config setting min.compaction.lag.ms "
                f"({config.min_compaction_lag_ms}) > max.compaction.lag.ms "
                f"({config.max_compaction_lag_ms})"
            )
        return config


class AppendResult(NamedTuple):
    first_offset: int
    last_offset: int
    # The broker time stamped on the batches under LogAppendTime, else -1.
    log_append_time_ms: int
    log_start_offset: int
    # True when an idempotent producer retried a batch already in the log: nothing was
    # appended and the offsets are those of the original.
    duplicate: bool
    record_count: int


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """`<topic>-<partition>` -> (topic, partition); topics may contain '-' themselves."""
    topic, separator, partition = name.rpartition("-")
    if not separator or not topic or not partition.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


def _record_timestamps(batch: bytes, header: BatchHeader) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of an uncompressed batch.

    Only the cold ListOffsets path decodes records, and only their leading fields (length,
    attributes, timestampDelta, offsetDelta); IndexError/ValueError (RecordError) mean a
    malformed batch.
    """
    pos = HEADER_SIZE
    for _ in range(header.records_count):
        length, pos = read_varint(batch, pos)
        record_end = pos + length
        timestamp_delta, field_pos = read_varint(batch, pos + 1)  # after the attributes
        offset_delta, _ = read_varint(batch, field_pos)
        yield header.base_offset + offset_delta, header.base_timestamp + timestamp_delta
        pos = record_end


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _io(what: str) -> Callable[[_Method], _Method]:
    """Kafka's LocalLog.maybeHandleIOException for a PartitionLog method: refused with
    KAFKA_STORAGE_ERROR, touching no file, once the log's directory is offline; an OSError
    raised inside takes the directory offline (LogDirFailureChannel) and becomes a
    StorageError with KAFKA_STORAGE_ERROR. ``what`` completes Kafka's message "Error while
    <what> <partition> in dir <dir>"."""

    def decorate(method: _Method) -> _Method:
        @wraps(method)
        def guarded(self: "PartitionLog", *args: Any, **kwargs: Any) -> Any:
            reason = self._failures.offline_reason(self._log_dir)
            if reason is not None:
                raise StorageError(f"{self.name}: log dir {self._log_dir} is offline ({reason})")
            try:
                return method(self, *args, **kwargs)
            except OSError as error:
                self._failures.maybe_add_offline_log_dir(
                    self._log_dir, f"Error while {what} {self.name} in dir {self._log_dir}", error
                )
                raise StorageError(
                    f"{self.name}: {what} failed ({error}); log dir {self._log_dir} is offline"
                ) from error

        return cast(_Method, guarded)

    return decorate


def check_keys_for_compaction(name: str, records: Buffer, headers: list[BatchHeader]) -> None:
    """Kafka's LogValidator.validateKey for a compacted topic's producer batches: every
    record needs a key. Refused with InvalidRecordError (INVALID_RECORD) and Kafka's message,
    which names up to three keyless records by their index in the batch; a batch whose
    records cannot be read is CORRUPT_MESSAGE. Departure: Kafka also lists those records in
    the Produce response's record_errors (v8+), which stays empty here; the message carries
    them. Self-contained so that the produce path calls it only for compacted topics."""
    position = 0
    for header in headers:
        batch = records[position : position + header.size]
        position += header.size
        try:
            missing = [
                index for index, (_, key) in enumerate(iter_record_keys(batch)) if key is None
            ]
        except (RecordError, IndexError) as error:
            raise CorruptRecordError(f"{name}: cannot read the records' keys: {error}") from None
        if missing:
            message = f"Compacted topic cannot accept message without key in topic partition {name}"
            shown = ", ".join(
                f"RecordError(batchIndex={index}, message='{message}')" for index in missing[:3]
            )
            raise InvalidRecordError(
                f"One or more records have been rejected due to {len(missing)} record errors "
                f"in total, and only showing the first three errors at most: [{shown}]"
            )


class FlushJob:
    """The blocking half of one log's flush (see the module notes): fsync the descriptors
    `PartitionLog.begin_flush` took, then the partition directory when files were created or
    removed in it, then write the leader epoch checkpoint if the cache had unsaved entries.
    `run` is safe in any thread: it touches no state of the log but the epoch cache's file
    (whose writes are locked and versioned) and closes its own descriptors. An OSError is
    kept in `error` for `PartitionLog.finish_flush` to raise on the log's owner, where the
    log dir is taken offline."""

    def __init__(
        self,
        target: int,
        structure_version: int,
        fds: list[int],
        directory: Path | None,
        epochs: LeaderEpochCache,
        epoch_snapshot: tuple[list[tuple[int, int]], int] | None,
        directory_changes: int = 0,
    ) -> None:
        self.target = target
        # The log's count of directory changes when the job began: its directory fsync
        # covers those (PartitionLog._directory_changes).
        self.directory_changes = directory_changes
        self.structure_version = structure_version
        self.fds = fds
        self.directory = directory
        self.epochs = epochs
        self.epoch_snapshot = epoch_snapshot
        self.error: OSError | None = None
        self.done = False

    def run(self) -> None:
        try:
            for fd in self.fds:
                os.fsync(fd)
            if self.directory is not None:
                fsync_directory(self.directory)
            # The epochs of the flushed batches become durable no later than the batches.
            if self.epoch_snapshot is not None:
                self.epochs.write_snapshot(*self.epoch_snapshot)
        except OSError as error:
            self.error = error
        finally:
            self.close()
            self.done = True

    def close(self) -> None:
        """Close the descriptors (a job that will not run must still give them back)."""
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)


class RollJob:
    """The blocking half of a segment roll (see the module notes): create the new segment's
    files and write the producer snapshot taken on the owner. `run` is safe in any thread:
    it touches only the new segment (no other code has it yet) and the snapshot file of its
    base offset. An OSError is kept in `error` for `PartitionLog.finish_roll` to raise on
    the owner, where the log dir is taken offline."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        max_index_size: int,
        snapshot_path: Path,
        snapshot: bytes,
        log_end_offset: int,
        structure_version: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.snapshot_path = snapshot_path
        self.snapshot = snapshot
        # The log as `begin_roll` left it: `finish_roll` publishes the segment only if it
        # is still so.
        self.log_end_offset = log_end_offset
        self.structure_version = structure_version
        self.segment: LogSegment | None = None
        self.error: OSError | None = None
        self.done = False

    def run(self) -> None:
        try:
            with open(self.snapshot_path, "wb") as file:
                file.write(self.snapshot)
            self.segment = LogSegment(
                self.directory,
                self.base_offset,
                index_interval_bytes=self.index_interval_bytes,
                max_index_size=self.max_index_size,
            )
        except OSError as error:
            self.error = error
        finally:
            self.done = True


class SwapJob:
    """The blocking steps of a log cleaner's swap (PartitionLog.begin_swap): `run` renames
    the cleaned segment's files `.swap` (the .log first: the commit point) and fsyncs the
    directory; `run_last`, after `finish_swap`, fsyncs the directory again. Both are safe
    in any thread: `run` touches only the cleaned segment, which no code of the log has
    yet, and `run_last` only the directory."""

    def __init__(self, directory: Path, cleaned: LogSegment, old: list[LogSegment]) -> None:
        self.directory: Path | None = directory
        self.cleaned = cleaned
        self.old = old
        self.error: OSError | None = None
        self.done = False

    def run(self) -> None:
        try:
            self.cleaned.change_suffix(SWAP_SUFFIX, log_first=True)
            assert self.directory is not None
            fsync_directory(self.directory)
        except OSError as error:
            self.error = error
        finally:
            self.done = True

    def run_last(self) -> None:
        """The directory's fsync after the renames `finish_swap` made (an OSError is
        raised: the caller takes the log dir offline)."""
        if self.directory is not None:
            fsync_directory(self.directory)


class PartitionLog:
    """The segments of one partition and everything offset-related about them.

    Create it with `PartitionLog.open`. Not thread-safe: the broker calls it from one task.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        now_ms: int,
        failures: LogDirFailureChannel | None = None,
    ) -> None:
        self.directory = directory
        self.topic, self.partition = parse_partition_dir_name(directory.name)
        self.config = config
        self._segments: list[LogSegment] = []
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._recovery_point = 0
        self._last_flush_ms = now_ms
        # Files made or removed in the directory since the log opened, and how many of those
        # changes a finished flush made durable with the directory's fsync: two flushes may
        # be in flight at once (a worker thread's and the owner's), and each fsyncs the
        # directory until one that began after the last change has finished.
        self._directory_changes = 0
        self._directory_synced = 0
        self._producers = ProducerStateManager()
        # Kafka's LogDirFailureChannel, shared by every log of the broker (the log manager
        # passes its own); a log opened alone gets one of its own.
        self._failures = failures if failures is not None else LogDirFailureChannel()
        self._log_dir = directory.parent
        self._epochs = LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT)
        # The log cleaner's position: offsets below it were cleaned (Kafka's
        # cleaner-offset-checkpoint entry); None until the first cleaning. A truncation
        # below it pulls it back, as Kafka's maybeTruncateCheckpoint does.
        self.first_dirty_offset: int | None = None
        # Bumped whenever the segments change in a way a cleaning in progress cannot
        # survive (truncation, close, deletion); the cleaner stops when it moves.
        self.structure_version = 0
        self.closed = False
        # Files of segments retention deleted, renamed `.deleted`, for the caller to unlink.
        self._deleted_files: list[Path] = []
        # The roll whose files a worker thread is making (begin_roll to finish_roll).
        self.roll_in_flight: RollJob | None = None

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        now_ms: int,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        needs_recovery: bool,
        failures: LogDirFailureChannel | None = None,
    ) -> "PartitionLog":
        """Load (and if need be recover) the log in `directory`, creating it if missing.

        With `needs_recovery` (no clean shutdown), every segment that may hold offsets at or
        past `recovery_point` is re-read with CRC checks, its indexes rebuilt and its torn
        tail cut; segments after one that had to be cut are deleted. Without it the files
        are trusted, but a missing or inconsistent index is still rebuilt.
        """
        directory.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(directory)
        _complete_interrupted_swaps(directory)
        partition_log = cls(directory, config, now_ms, failures)
        partition_log._load(recovery_point, log_start_offset, needs_recovery)
        return partition_log

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
        )

    def _load(self, recovery_point: int, log_start_offset: int, needs_recovery: bool) -> None:
        base_offsets = sorted(
            int(match.group(1))
            for path in self.directory.iterdir()
            if (match := SEGMENT_LOG_NAME.fullmatch(path.name))
        )
        segments = [self._new_segment(base_offset) for base_offset in base_offsets]
        for position, segment in enumerate(segments):
            later = segments[position + 1 :]
            unflushed = not later or later[0].base_offset > recovery_point
            if needs_recovery and unflushed:
                truncated = segment.recover()
                if truncated:
                    log.warning(
                        "%s: recovery cut %d invalid bytes from %s; deleting %d later segment(s)",
                        self.name,
                        truncated,
                        segment.log_path.name,
                        len(later),
                    )
                    for doomed in later:
                        doomed.delete()
                    del segments[position + 1 :]
                    break
            elif segment.needs_index_rebuild:
                log.warning("%s: rebuilding the indexes of %s", self.name, segment.log_path.name)
                segment.recover()
        self._segments = segments
        if not segments:
            self._segments = [self._new_segment(log_start_offset)]
        self._log_end_offset = self._active.next_offset
        if self._log_end_offset < log_start_offset:
            log.warning(
                "%s: log end offset %d is below the log start offset %d; deleting all segments",
                self.name,
                self._log_end_offset,
                log_start_offset,
            )
            self._replace_all_segments(log_start_offset)
        self._log_start_offset = max(log_start_offset, self._segments[0].base_offset)
        self._recovery_point = (
            min(recovery_point, self._log_end_offset) if needs_recovery else self._log_end_offset
        )
        # Entries at or past the log end (a leader's epoch that got no batch) are cut at every
        # load, so the cut need not be durable (written at the next flush, as Kafka's loader
        # does with truncateFromEndAsyncFlush): fsyncing it made loading 1,000 logs take
        # twice as long.
        self._epochs.truncate_from_end(self._log_end_offset, durable=False)
        self._rebuild_producer_state(recover_epochs=needs_recovery)
        self._epochs.truncate_from_start(self._log_start_offset)

    def _replace_all_segments(self, base_offset: int) -> None:
        for segment in self._segments:
            segment.delete()
        self._segments = [self._new_segment(base_offset)]
        self._log_end_offset = base_offset
        self._directory_changes += 1

    def _with_following(self) -> Iterator[tuple[LogSegment, LogSegment | None]]:
        """Each segment with the one after it (None for the active segment)."""
        return zip(self._segments, [*self._segments[1:], None], strict=True)

    # -- producer-state snapshots ------------------------------------------------------------

    def _snapshot_offsets(self) -> list[int]:
        return sorted(
            int(match.group(1))
            for path in self.directory.iterdir()
            if (match := _SNAPSHOT_FILE.fullmatch(path.name))
        )

    def _snapshot_path(self, offset: int) -> Path:
        return self.directory / segment_file_name(offset, SNAPSHOT_SUFFIX)

    @_io("writing the producer snapshot of")
    def take_snapshot(self, offset: int | None = None, *, sync: bool = False) -> None:
        """Write the producer state as `<offset>.snapshot` (default: the log end), as Kafka's
        ProducerStateManager.takeSnapshot."""
        offset = self._log_end_offset if offset is None else offset
        path = self._snapshot_path(offset)
        with open(path, "wb") as file:
            file.write(self._producers.snapshot_bytes())
            if sync:
                file.flush()
                os.fsync(file.fileno())
        self._directory_changes += 1

    def _delete_snapshots(self, keep: Callable[[int], bool]) -> None:
        for offset in self._snapshot_offsets():
            if not keep(offset):
                self._snapshot_path(offset).unlink(missing_ok=True)

    def _load_latest_snapshot(self, limit: int) -> int | None:
        """Load the latest valid snapshot at or below ``limit``; its offset, or None (the
        state is then empty). Snapshots past the log end or below the log start are
        deleted, as Kafka's truncateAndReload does, and so is one that does not load."""
        self._delete_snapshots(
            lambda offset: self._log_start_offset <= offset <= self._log_end_offset
        )
        for offset in reversed(self._snapshot_offsets()):
            if offset > limit:
                continue
            try:
                self._producers.load_snapshot(self._snapshot_path(offset).read_bytes())
            except (OSError, ValueError) as error:
                log.warning("%s: ignoring snapshot %d: %s", self.name, offset, error)
                self._snapshot_path(offset).unlink(missing_ok=True)
                continue
            self._producers.remove_before(self._log_start_offset)
            return offset
        self._producers.clear()
        return None

    def _epoch_replay_start(self) -> int:
        """After a crash, where the batches of epochs the checkpoint may lack can start:
        the start of the latest epoch it knows (0 if none)."""
        entries = self._epochs.entries()
        return entries[-1][1] if entries else 0

    def _rebuild_producer_state(self, *, recover_epochs: bool = False) -> None:
        """Producer state from the latest usable snapshot and the batch headers after it
        (from every batch header without one); with `recover_epochs` (after a crash),
        also the leader epoch entries the checkpoint file may lack, since the append path
        defers writing them: every batch whose epoch is newer than the latest known one starts
        that epoch, as in Kafka's segment recovery. Older epochs are left alone: the file
        always holds a complete history up to some point, and re-assigning an older epoch
        would cut the entries after it."""
        limit = min(
            [self._log_end_offset]
            + [segment.base_offset for segment in self._segments if segment.txn_index_rebuilding]
        )
        replay_from = self._load_latest_snapshot(limit) or 0
        # Epochs newer than the latest one known can only start at or past its start.
        epochs_from = self._epoch_replay_start() if recover_epochs else LONG_MAX
        scan_from = min(replay_from, epochs_from)
        for segment, following in self._with_following():
            if following is not None and following.base_offset <= scan_from:
                continue
            start = segment.offset_index.lookup(scan_from)[1] if scan_from else 0
            for position, header in segment.batches(start):
                if header.last_offset < scan_from:
                    continue
                if header.last_offset >= max(replay_from, self._log_start_offset) or (
                    header.is_control and header.last_offset >= replay_from
                ):
                    # Markers below the log start still close their transactions.
                    self._record_batch(
                        segment,
                        header,
                        segment.read_at,
                        position,
                        index=segment.txn_index_rebuilding,
                    )
                if header.last_offset >= epochs_from and header.partition_leader_epoch > (
                    self._epochs.latest_epoch if self._epochs.latest_epoch is not None else -1
                ):
                    self._epochs.assign(
                        header.partition_leader_epoch, header.base_offset, durable=False
                    )
            segment.txn_index_rebuilding = False

    def _record_batch(
        self,
        segment: LogSegment,
        header: BatchHeader,
        read_at: Callable[[int, int], Buffer],
        position: int,
        *,
        index: bool,
    ) -> None:
        """Take one appended or replayed batch into the producer state (a control batch's
        marker is read from its bytes, ``read_at(position, size)``); an ABORT marker that
        closes a transaction adds its `.txnindex` entry to ``segment`` with ``index`` (an
        append, or recovery rebuilding that segment's index: Kafka's updateProducers and
        updateTxnIndex)."""
        marker = None
        if header.is_control and header.producer_id >= 0:
            try:
                marker = read_control_marker(read_at(position, header.size))
            except (RecordError, IndexError):
                marker = None
        completed = self._producers.record(header, marker)
        if index and completed is not None and completed.is_aborted:
            self._index_aborted(segment, completed)

    def _index_aborted(self, segment: LogSegment, completed: CompletedTxn) -> None:
        entry = AbortedTxn(
            completed.producer_id,
            completed.first_offset,
            completed.last_offset,
            self._producers.last_stable_offset_of(completed),
        )
        segment.txn_index.append(entry)

    # -- properties ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def _active(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get."""
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        """Everything below this offset has been fsynced."""
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        return self._epochs

    @property
    def producer_state(self) -> ProducerStateManager:
        return self._producers

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch; see LeaderEpochCache.end_offset_for."""
        return self._epochs.end_offset_for(epoch, self._log_end_offset)

    # -- appends ---------------------------------------------------------------------------

    def _intact(self, records: Buffer) -> list[BatchHeader]:
        """Headers of `records` once framing, magic and CRC are checked; nothing is written."""
        try:
            return validate_batches(records)
        except InvalidRecordBatch as error:
            raise CorruptRecordError(f"{self.name}: {error}") from None

    def _validated(self, records: Buffer) -> list[BatchHeader]:
        """Headers of a producer's `records` after the size checks too; nothing is written."""
        headers = self._intact(records)
        for header in headers:
            if header.size > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"The record batch size in the append to {self.name} is {header.size} "
                    f"bytes which exceeds the maximum configured value of "
                    f"{self.config.max_message_bytes}."
                )
        if len(records) > self.config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"Message batch size is {len(records)} bytes in append to partition "
                f"{self.name} which exceeds the maximum configured segment size of "
                f"{self.config.segment_bytes}."
            )
        return headers

    def _check_client_batch(self, header: BatchHeader) -> None:
        """Kafka's LogValidator rules for batches coming from a producer."""
        if header.base_offset != 0:
            raise InvalidRecordError(
                f"The baseOffset of the record batch in the append to {self.name} should be 0, "
                f"but it is {header.base_offset}"
            )
        if header.records_count <= 0:
            raise InvalidRecordError(
                f"Invalid reported count for record batch: {header.records_count}"
            )
        if header.records_count != header.last_offset_delta + 1:
            raise InvalidRecordError(
                f"Inconsistent batch offset range [{header.base_offset}, {header.last_offset}] "
                f"and count of records {header.records_count}"
            )
        if header.is_control:
            raise InvalidRecordError("Clients are not allowed to write control records")
        if header.producer_id >= 0 and header.base_sequence < 0:
            raise InvalidRecordError(
                f"Invalid sequence number {header.base_sequence} in record batch with "
                f"producerId {header.producer_id}"
            )

    def _check_keys_for_compaction(self, records: Buffer, headers: list[BatchHeader]) -> None:
        """Kafka's LogValidator.validateKey: a compacted topic refuses a record without a
        key (INVALID_RECORD, the request's other partitions unaffected). Compaction is a
        topic asking for its records to be read, so the keys are decoded here, for such
        topics only: no other append decodes a record. Kafka names every keyless record of
        the batch (RecordError(batchIndex=...), the record's index in its batch) and refuses
        the batch; so does the message here (the Produce response's record_errors list is
        left empty, see check_keys_for_compaction)."""
        check_keys_for_compaction(self.name, records, headers)

    def _recompressed(self, records: Buffer, headers: list[BatchHeader], codec: int) -> bytes:
        """The producer's batches with every one not already in ``codec`` recompressed: the
        slow path of a topic whose compression.type is not producer, the only one on which
        the broker decodes records (as Kafka's does for such topics)."""
        batches = []
        position = 0
        for header in headers:
            batch = records[position : position + header.size]
            position += header.size
            if header.compression == codec:
                batches.append(bytes(batch))
                continue
            try:
                batches.append(recompress_batch(batch, codec))
            except (RecordError, IndexError) as error:
                message = f"{self.name}: cannot recompress a batch: {error}"
                raise CorruptRecordError(message) from None
        return b"".join(batches)

    @_io("appending records to")
    def append_as_leader(
        self,
        records: bytes | memoryview,
        *,
        leader_epoch: int,
        now_ms: int,
        client: bool = True,
    ) -> AppendResult:
        """Validate, stamp and append a producer's batches; all or nothing.

        Raises a StorageError subclass carrying the Kafka error code when the batches are
        refused (nothing is appended then). An idempotent producer's retry of a batch that
        is already in the log is answered with the original offsets and `duplicate=True`.
        ``client`` False is the group coordinator's append (Kafka's AppendOrigin.COORDINATOR):
        as Kafka's ProducerAppendInfo, its transactional batches are checked for their
        producer epoch only, never for sequences or duplicates (the sequences are not the
        producer's).
        """
        headers = self._validated(records)
        for header in headers:
            self._check_client_batch(header)
        if client and self.config.compacts:
            self._check_keys_for_compaction(records, headers)
        codec = self.config.recompression_codec
        if codec is not None and any(header.compression != codec for header in headers):
            records = self._recompressed(records, headers, codec)
            headers = self._validated(records)
        # A producer's batch behind one that could not be written never gets here: the
        # failed write took the log dir offline, and every later append is refused with
        # KAFKA_STORAGE_ERROR before this check, never as a sequence gap (which would make
        # librdkafka renumber messages already written elsewhere: FAULTS.md, "Duplicates").
        duplicate = self._producers.check_append(headers, check_sequences=client)
        if duplicate is not None:
            return AppendResult(
                duplicate.first_offset,
                duplicate.last_offset,
                duplicate.max_timestamp if self.config.uses_log_append_time else NO_TIMESTAMP,
                self._log_start_offset,
                True,
                duplicate.last_offset - duplicate.first_offset + 1,
            )
        # A writable view (the request frame, from the produce decoder) is stamped where it
        # lies; anything else is copied first.
        buffer: WritableBuffer = (
            records
            if isinstance(records, memoryview) and not records.readonly
            else bytearray(records)
        )
        next_offset = self._log_end_offset
        position = 0
        stamped = []
        for header in headers:
            stamp_offsets(buffer, position, next_offset, leader_epoch)
            if self.config.uses_log_append_time:
                set_log_append_time(buffer, position, now_ms)
            stamped.append(read_header(buffer, position))
            next_offset += header.last_offset_delta + 1
            position += header.size
        self._append(buffer, stamped, now_ms)
        return AppendResult(
            stamped[0].base_offset,
            stamped[-1].last_offset,
            now_ms if self.config.uses_log_append_time else NO_TIMESTAMP,
            self._log_start_offset,
            False,
            sum(header.records_count for header in stamped),
        )

    @_io("appending records to")
    def append_as_follower(self, records: bytes | memoryview, *, now_ms: int) -> AppendResult:
        """Append batches replicated from the leader, keeping their offsets and timestamps.

        The batches must start at or after the log end offset and move forward; otherwise
        UnexpectedAppendOffsetError (the fetcher must truncate first) and nothing is written.
        Sizes are not checked, as Kafka skips them for replication: the leader accepted these
        batches, and a read may span segments, so one fetch can exceed segment.bytes.
        """
        headers = self._intact(records)
        next_allowed = self._log_end_offset
        for header in headers:
            if header.base_offset < next_allowed:
                raise UnexpectedAppendOffsetError(
                    f"{self.name}: replicated batch at offset {header.base_offset} does not "
                    f"follow offset {next_allowed - 1}",
                    first_offset=headers[0].base_offset,
                    last_offset=headers[-1].last_offset,
                )
            next_allowed = header.last_offset + 1
        self._append(records, headers, now_ms)
        return AppendResult(
            headers[0].base_offset,
            headers[-1].last_offset,
            NO_TIMESTAMP,
            self._log_start_offset,
            False,
            sum(header.records_count for header in headers),
        )

    @_io("appending a transaction marker to")
    def append_control_marker(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        leader_epoch: int,
        now_ms: int,
        transaction_version: int = 0,
    ) -> AppendResult:
        """Append a transaction coordinator's COMMIT or ABORT marker as leader (Kafka's
        UnifiedLog.appendAsLeader with origin COORDINATOR of an EndTransactionMarker).

        Refused, with nothing appended, with INVALID_PRODUCER_EPOCH when the producer's
        epoch here is newer, and TRANSACTION_COORDINATOR_FENCED when the last marker of the
        producer here came from a newer coordinator epoch. A marker closes the producer's
        open transaction (if any: a marker for a producer with nothing open is still
        written, as Kafka does, and only moves its epochs); an ABORT adds the transaction
        to the segment's `.txnindex`. The marker's timestamp is the leader's clock.
        ``transaction_version`` is the one WriteTxnMarkers v2 carries (KIP-1228; 0 from v1):
        with 2 the marker's epoch must be newer than the producer's (ProducerState.check_marker).
        """
        self._producers.check_marker(
            producer_id, producer_epoch, coordinator_epoch, transaction_version
        )
        batch = bytearray(
            encode_control_batch(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
                commit=commit,
                timestamp_ms=now_ms,
            )
        )
        stamp_offsets(batch, 0, self._log_end_offset, leader_epoch)
        header = read_header(batch, 0)
        self._append(batch, [header], now_ms)
        return AppendResult(
            header.base_offset,
            header.last_offset,
            NO_TIMESTAMP,
            self._log_start_offset,
            False,
            1,
        )

    # -- transactions ------------------------------------------------------------------------

    @property
    def first_unstable_offset(self) -> int | None:
        """Kafka's firstUnstableOffset: the first offset of the oldest transaction still open
        or closed by a marker the high watermark has not passed (see
        ProducerStateManager.on_high_watermark_updated); None if there is none."""
        return self._producers.first_unstable_offset()

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions whose range overlaps
        [start_offset, upper_bound_offset), from the `.txnindex` of the segment holding
        ``start_offset`` and the later ones until an entry's LSO reaches the bound (Kafka's
        LocalLog.collectAbortedTransactions). No record is read."""
        found: list[tuple[int, int]] = []
        for segment in self._segments[self._segment_index_for(start_offset) :]:
            entries, complete = segment.txn_index.collect(start_offset, upper_bound_offset)
            found.extend((entry.producer_id, entry.first_offset) for entry in entries)
            if complete:
                break
        return found

    def _append(self, data: Buffer, headers: list[BatchHeader], now_ms: int) -> None:
        """Write stamped batches to the active segment (rolling first if needed).

        An OSError anywhere here (the roll, the segment's write, an aborted transaction's
        `.txnindex` entry written after the batch, the flush) propagates to the caller's
        guard (``_io``), which takes the log dir offline: the batch may then be in the file
        while the log end offset here does not count it, and that is safe only because
        nothing reads or writes this log again before a restart recovers it from its files.
        (Before that rule, a follower whose `.txnindex` write failed on a full disk fetched
        the same marker again and wrote it a second time, and rejoined the ISR with a log
        one batch longer than its leader's: issue 42.)
        """
        segment = self._maybe_roll(
            len(data), headers[0].base_offset, headers[-1].last_offset, now_ms
        )
        # The epoch cache is updated before the data, as in Kafka; its file is written
        # when the log flushes (see LeaderEpochCache), and recovery after a crash reads
        # the batches' epochs again.
        for header in headers:
            if header.partition_leader_epoch >= 0:
                self._epochs.assign(
                    header.partition_leader_epoch, header.base_offset, durable=False
                )
        segment.append(data, headers, now_ms)
        position = 0
        for header in headers:
            if header.is_control:
                self._record_batch(
                    segment,
                    header,
                    lambda start, size: data[start : start + size],
                    position,
                    index=True,
                )
            else:
                self._producers.record(header)
            position += header.size
        self._log_end_offset = headers[-1].last_offset + 1
        if self._log_end_offset - self._recovery_point >= self.config.flush_messages:
            self.flush()
            self._last_flush_ms = now_ms

    def roll_due(self, size: int, now_ms: int) -> bool:
        """Whether appending `size` bytes now would roll the active segment because it is
        full, old or its indexes are (what `_maybe_roll` checks, but the offsets' fit)."""
        active = self._active
        too_big = active.size + size > self.config.segment_bytes
        too_old = (
            active.rolling_base_ms is not None
            and now_ms - active.rolling_base_ms > self.config.segment_ms
        )
        return (not active.is_empty and (too_big or too_old)) or active.indexes_full

    def _maybe_roll(
        self, size: int, first_offset: int, last_offset: int, now_ms: int
    ) -> LogSegment:
        """The segment to append to: a new one if the active one is full, old, or out of range."""
        active = self._active
        if self.roll_due(size, now_ms) or not active.can_hold_offset(last_offset):
            return self._roll(first_offset)
        return active

    @_io("rolling a segment of")
    def begin_roll(self) -> RollJob | None:
        """The first step of a roll at the log end (see the module notes), on the owner:
        seal the active segment's indexes, take the producer snapshot's bytes. None when
        there is nothing to roll (the active segment is empty at the log end). The owner
        appends nothing until `finish_roll(job)` after `job.run()`."""
        if self.roll_in_flight is not None:
            raise RuntimeError(f"{self.name}: a roll is already in flight")
        base_offset = self._log_end_offset
        active = self._active
        if active.is_empty and active.base_offset == base_offset:
            return None
        active.seal_indexes()
        job = RollJob(
            self.directory,
            base_offset,
            self.config.index_interval_bytes,
            self.config.segment_index_bytes,
            self._snapshot_path(base_offset),
            self._producers.snapshot_bytes(),
            self._log_end_offset,
            self.structure_version,
        )
        self.roll_in_flight = job
        return job

    @_io("rolling a segment of")
    def finish_roll(self, job: RollJob) -> bool:
        """The last step of a roll, on the owner once the job ran: the new segment becomes
        the active one, unless the log was truncated, closed or appended to meanwhile (the
        segment is then closed and its files left for `take_deleted_files`, unless a
        segment of the log has its base offset). True if it was published. A job that
        failed raises its OSError here, taking the log dir offline."""
        if self.roll_in_flight is job:
            self.roll_in_flight = None
        if not job.done:
            raise RuntimeError(f"{self.name}: finish_roll before the roll job ran")
        if job.error is not None:
            raise job.error
        segment = job.segment
        assert segment is not None
        if (
            not self.closed
            and job.structure_version == self.structure_version
            and job.log_end_offset == self._log_end_offset
            and self._active.base_offset < job.base_offset
        ):
            self._segments.append(segment)
            self._directory_changes += 1
            return True
        if any(kept.base_offset == segment.base_offset for kept in self._segments):
            segment.close_descriptor()  # the files are a live segment's
        else:
            self._deleted_files += segment.delete_later()
            if job.base_offset > self._log_end_offset:
                job.snapshot_path.unlink(missing_ok=True)
        return False

    def _roll(self, base_offset: int) -> LogSegment:
        base_offset = max(base_offset, self._log_end_offset)
        active = self._active
        if active.is_empty and active.base_offset == base_offset:
            return active
        active.seal_indexes()
        # A snapshot that cannot be written is an I/O error like any other (Kafka's roll
        # runs under maybeHandleIOException): the log dir goes offline.
        self.take_snapshot(base_offset)
        segment = self._new_segment(base_offset)
        self._segments.append(segment)
        self._directory_changes += 1
        return segment

    # -- reads -----------------------------------------------------------------------------

    def _check_offset(self, offset: int) -> None:
        if not self._log_start_offset <= offset <= self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"Received request for offset {offset} for partition {self.name}, but we only "
                f"have log segments in the range {self._log_start_offset} to "
                f"{self._log_end_offset}."
            )

    def _segment_index_for(self, offset: int) -> int:
        return max(bisect_right(self._segments, offset, key=lambda s: s.base_offset) - 1, 0)

    @_io("reading")
    def read(
        self,
        start_offset: int,
        *,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> bytes:
        """Whole batches from the one containing `start_offset`, as stored.

        OffsetOutOfRangeError outside [log start offset, log end offset]; b"" at the log end.
        Batches whose base offset is >= `max_offset` (the high watermark, for consumers) are
        not returned. At most `max_bytes` are returned, except that with `min_one_batch` the
        first batch is returned whole however large it is, so that a consumer can always make
        progress. The read continues into later segments while there is room.
        """
        self._check_offset(start_offset)
        if (
            start_offset == self._log_end_offset
            or (max_offset is not None and start_offset >= max_offset)
            or (max_bytes <= 0 and not min_one_batch)
        ):
            # The last case: a fetch's later partitions once its byte budget is spent
            # (no batch fits in nothing); only the offset's range is checked.
            return b""
        chunks = []
        total = 0
        for segment in self._segments[self._segment_index_for(start_offset) :]:
            result = segment.read(
                start_offset, max_bytes - total, max_offset, min_one_batch and total == 0
            )
            if result is None:
                continue
            if result.data:
                chunks.append(result.data)
                total += len(result.data)
            if not result.reached_end or total >= max_bytes:
                break
        return b"".join(chunks)

    @_io("reading")
    def read_file_records(
        self,
        start_offset: int,
        *,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> bytes | FileRecords:
        """``read`` for a zero-copy send: the same batches, located by their headers
        (LogSegment.locate) and, from ZERO_COPY_MIN_BYTES on, returned as FileRecords,
        slices of the segment files that the connection sends with sendfile (Kafka's
        FileRecords.slice). A smaller read is read into bytes, which costs less than the
        descriptors and the extra system calls."""
        self._check_offset(start_offset)
        if (
            start_offset == self._log_end_offset
            or (max_offset is not None and start_offset >= max_offset)
            or (max_bytes <= 0 and not min_one_batch)
        ):
            # The last case: a fetch's later partitions once its byte budget is spent
            # (no batch fits in nothing); only the offset's range is checked.
            return b""
        slices: list[tuple[LogSegment, int, int]] = []
        total = 0
        for segment in self._segments[self._segment_index_for(start_offset) :]:
            located = segment.locate(
                start_offset, max_bytes - total, max_offset, min_one_batch and total == 0
            )
            if located is None:
                continue
            position, length, reached_end = located
            if length:
                slices.append((segment, position, length))
                total += length
            if not reached_end or total >= max_bytes:
                break
        if total < ZERO_COPY_MIN_BYTES:
            return b"".join(
                segment.read_at(position, length) for segment, position, length in slices
            )
        records = FileRecords()
        try:
            for segment, position, length in slices:
                segment.slice_into(records, position, length)
        except OSError as error:
            # Out of descriptors (each slice holds one until it is sent): read instead.
            records.close()
            if error.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            return b"".join(
                segment.read_at(position, length) for segment, position, length in slices
            )
        return records

    @_io("looking up a timestamp in")
    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= `timestamp_ms`.

        The batch is found by its max timestamp (time index, then a header scan). Within it:
        under LogAppendTime every record has the batch's timestamp, so the answer is its
        first offset; uncompressed records are decoded (their timestamp and offset deltas
        only) to give Kafka's exact answer; for a compressed batch the answer is its first
        offset, with its base timestamp if that already reaches `timestamp_ms` and its max
        timestamp otherwise: at worst a consumer starting there re-reads a few older records
        of that batch, and it never misses one. Offsets below the log start are never
        returned. None if no record is that recent.
        """
        for segment in self._segments:
            if segment.max_timestamp < timestamp_ms:
                continue
            for position, header in segment.batches_reaching(timestamp_ms, self._log_start_offset):
                found = self._first_record_reaching(segment, position, header, timestamp_ms)
                if found is not None:
                    return found
        return None

    def _first_record_reaching(
        self, segment: LogSegment, position: int, header: BatchHeader, timestamp_ms: int
    ) -> tuple[int, int] | None:
        """See offset_for_timestamp; None when no record of this batch at or after the log
        start reaches the timestamp (only knowable for uncompressed batches)."""
        first_offset = max(header.base_offset, self._log_start_offset)
        if header.uses_log_append_time:
            return first_offset, header.max_timestamp
        if header.compression == 0:
            try:
                records = _record_timestamps(segment.read_at(position, header.size), header)
                return next(
                    (offset, timestamp)
                    for offset, timestamp in records
                    if offset >= first_offset and timestamp >= timestamp_ms
                )
            except StopIteration:
                return None
            except (IndexError, ValueError):
                log.warning("%s: undecodable records at offset %d", self.name, first_offset)
        # Once the cleaner set a delete horizon, baseTimestamp holds that horizon instead of
        # the first record's timestamp.
        if not header.attributes & DELETE_HORIZON_FLAG and header.base_timestamp >= timestamp_ms:
            return first_offset, header.base_timestamp
        return first_offset, header.max_timestamp

    @_io("reading")
    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3).

        The first such record when the batch can tell (LogAppendTime: its first offset;
        uncompressed: decoded); for a compressed batch its last offset, which is what Kafka
        answered before it started decompressing here. None for a log without timestamps.
        """
        best = None
        for segment in self._segments:
            if segment.max_timestamp >= 0 and (
                best is None or segment.max_timestamp > best.max_timestamp
            ):
                best = segment
        if best is None:
            return None
        found = best.find_batch(best.offset_of_max_timestamp)
        if found is None:
            return best.offset_of_max_timestamp, best.max_timestamp
        position, header = found
        if header.uses_log_append_time:
            return header.base_offset, header.max_timestamp
        if header.compression == 0:
            try:
                for offset, timestamp in _record_timestamps(
                    best.read_at(position, header.size), header
                ):
                    if timestamp == header.max_timestamp:
                        return offset, timestamp
            except (IndexError, ValueError):
                log.warning("%s: undecodable records at offset %d", self.name, header.base_offset)
        return header.last_offset, header.max_timestamp

    # -- truncation and retention ------------------------------------------------------------

    @_io("truncating")
    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding an offset >= `offset`; True if anything was removed.

        The log end offset becomes the end of the last batch left (see the module notes).
        """
        if offset < 0:
            raise ValueError(f"cannot truncate {self.name} to a negative offset ({offset})")
        if offset >= self._log_end_offset:
            # As Kafka does, the epoch cache is cut even when no record is: a broker that
            # became leader and appended nothing before losing leadership has an entry for its
            # epoch at the log end that the new leader's history does not have. Written with
            # the next flush, as Kafka's truncateFromEndAsyncFlush: an entry at the log end is
            # cut again when the log is loaded, and fsyncing here cost a former leader of
            # hundreds of partitions seconds after a restart (BENCHMARKS.md, step 9).
            self._epochs.truncate_from_end(self._log_end_offset, durable=False)
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        self._segments_changed(offset)
        # Segments wholly past the offset are renamed `.deleted` here and unlinked by the
        # caller (take_deleted_files), in a worker thread in the broker, as retention's
        # are: unlinking a large file frees its blocks, a rename does not (issue 40).
        while len(self._segments) > 1 and self._active.base_offset > offset:
            self._deleted_files += self._segments.pop().delete_later()
            self._directory_changes += 1
        self._active.truncate_to(offset)
        self._log_end_offset = self._active.next_offset
        self._recovery_point = min(self._recovery_point, self._log_end_offset)
        self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
        # Written with the next flush (Kafka's truncateFromEndAsyncFlush in
        # UnifiedLog.truncateTo), not here on the loop: until then the file may name epochs
        # past the log end, which loading the log cuts again (`_load`), and the batches the
        # truncation removed come back after a crash only with the epochs that name them.
        self._epochs.truncate_from_end(self._log_end_offset, durable=False)
        self._rebuild_producer_state()
        return True

    @_io("truncating")
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and continue at `offset` (a follower far behind the leader)."""
        self._segments_changed(offset)
        self._replace_all_segments(offset)
        self._log_start_offset = offset
        self._recovery_point = offset
        self._producers.clear()
        self._delete_snapshots(lambda snapshot_offset: False)
        self._epochs.clear()

    @_io("deleting segments of")
    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset forward (DeleteRecords); segments wholly below it are
        removed by the next retention pass. OffsetOutOfRangeError past the log end."""
        if offset > self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"Cannot increment the log start offset to {offset} of partition {self.name} "
                f"since it is larger than the log end offset {self._log_end_offset}"
            )
        if offset <= self._log_start_offset:
            return False
        self._advance_log_start_offset(offset)
        return True

    def _advance_log_start_offset(self, offset: int) -> None:
        self._log_start_offset = offset
        # Written with the next flush, not on the retention pass (or DeleteRecords) that
        # moved the start: see LeaderEpochCache.truncate_from_start.
        self._epochs.truncate_from_start(offset, durable=False)
        self._producers.remove_before(offset)

    @_io("deleting segments of")
    def delete_segments_by_retention(
        self, now_ms: int, *, high_watermark: int | None = None, defer_unlink: bool = False
    ) -> int:
        """Delete old segments as Kafka's retention does; returns how many were deleted.

        With `defer_unlink` the deleted segments' files are only renamed `.deleted`, for
        the caller to unlink (`take_deleted_files`), as the broker does in a worker thread.

        In order: segments wholly below the log start offset, then (when cleanup.policy has
        `delete`) the oldest segments while the log exceeds retention.bytes, then segments
        whose largest timestamp is older than retention.ms. Only segments wholly below the
        high watermark (default: the log end offset) go. The active segment can go too
        when it is due and not empty: a new empty one is rolled first, so the log start
        offset may reach the log end offset, exactly as in Kafka.
        """
        deleted = self._delete_segments_by_retention(now_ms, high_watermark)
        if not defer_unlink:
            for path in self.take_deleted_files():
                path.unlink(missing_ok=True)
        return deleted

    def _delete_segments_by_retention(self, now_ms: int, high_watermark: int | None) -> int:
        upper_bound = self._log_end_offset if high_watermark is None else high_watermark
        deleted = self._delete_oldest_segments(
            lambda segment, following: (
                following is not None and following.base_offset <= self._log_start_offset
            ),
            upper_bound,
        )
        if not self.config.deletes_old_segments:
            return deleted
        if self.config.retention_bytes >= 0:
            excess = self.size_bytes - self.config.retention_bytes

            def over_size(segment: LogSegment, following: LogSegment | None) -> bool:
                nonlocal excess
                if excess - segment.size < 0:
                    return False
                excess -= segment.size
                return True

            if excess > 0:
                deleted += self._delete_oldest_segments(over_size, upper_bound)
        if self.config.retention_ms >= 0:
            deleted += self._delete_oldest_segments(
                lambda segment, following: (
                    now_ms - segment.largest_timestamp() > self.config.retention_ms
                ),
                upper_bound,
            )
        return deleted

    def _delete_oldest_segments(
        self,
        should_delete: Callable[[LogSegment, LogSegment | None], bool],
        upper_bound: int,
    ) -> int:
        deletable = []
        for segment, following in self._with_following():
            end = following.base_offset if following is not None else self._log_end_offset
            last_and_empty = following is None and segment.is_empty
            if last_and_empty or end > upper_bound or not should_delete(segment, following):
                break
            deletable.append(segment)
        if not deletable:
            return 0
        if len(deletable) == len(self._segments):
            self._roll(self._log_end_offset)
        for segment in deletable:
            self._segments.remove(segment)
            self._deleted_files += segment.delete_later()
        self._directory_changes += 1
        if self._segments[0].base_offset > self._log_start_offset:
            self._advance_log_start_offset(self._segments[0].base_offset)
        first_base = self._segments[0].base_offset
        # Renamed with the segments, as Kafka's removeAndMarkSnapshotForDeletion does.
        for offset in self._snapshot_offsets():
            if offset < first_base:
                path = self._snapshot_path(offset)
                doomed = path.with_name(path.name + DELETED_SUFFIX)
                try:
                    os.replace(path, doomed)
                except FileNotFoundError:
                    continue
                self._deleted_files.append(doomed)
        return len(deletable)

    # -- the log cleaner's swap ---------------------------------------------------------------

    @_io("replacing cleaned segments of")
    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment]) -> bool:
        """Put `cleaned` (a segment the log cleaner wrote as `<base>.log.cleaned` etc., with
        the base offset of `old[0]`, flushed) in place of the consecutive segments `old`.

        Crash-safe as Kafka's replaceSegments: the cleaned files are renamed to `.swap` (the
        .log first: its `.swap` is the commit point), the old segments are deleted, then the
        `.swap` suffixes are dropped (the .log last), with the directory fsynced after the
        first and last step. `_complete_interrupted_swaps` finishes the job after a crash
        anywhere in between. Returns False, deleting `cleaned`, when the log changed since
        the cleaning started (closed, truncated, or one of `old` deleted by retention).

        This runs the three steps of a swap in a row (the broker runs the blocking one in
        a worker thread: `begin_swap`, `SwapJob.run`, `finish_swap`); readers never see a
        half-made swap either way."""
        job = self.begin_swap(cleaned, old)
        if job is None:
            return False
        job.run()
        swapped = self.finish_swap(job)
        job.run_last()
        for path in self.take_deleted_files():
            path.unlink(missing_ok=True)
        return swapped

    def _swappable(self, old: list[LogSegment]) -> int | None:
        """Where `old` starts in the segment list, if it can still be replaced."""
        first = next(
            (position for position, segment in enumerate(self._segments) if segment is old[0]),
            None,
        )
        if (
            self.closed
            or first is None
            or self._segments[first : first + len(old)] != old
            or first + len(old) >= len(self._segments)  # the active segment is never replaced
        ):
            return None
        return first

    @_io("replacing cleaned segments of")
    def begin_swap(self, cleaned: LogSegment, old: list[LogSegment]) -> "SwapJob | None":
        """The first step of a swap, on the owner: None (and `cleaned` deleted) when the log
        changed since the cleaning started; else the job whose `run` renames the cleaned
        files `.swap` and fsyncs the directory (in any thread: no code of the log has
        `cleaned` yet), then `finish_swap` on the owner."""
        if self._swappable(old) is None:
            cleaned.delete()
            return None
        return SwapJob(self.directory, cleaned, old)

    @_io("replacing cleaned segments of")
    def finish_swap(self, job: "SwapJob") -> bool:
        """The middle step, on the owner once `job.run()` committed the swap: the old
        segments renamed `.deleted` (for `take_deleted_files`), the `.swap` suffixes
        dropped (the .log last) and `cleaned` put in their place, at once for readers;
        then `job.run_last()` (any thread) fsyncs the directory and the owner unlinks the
        deleted files. If the log changed meanwhile, the cleaned files are renamed
        `.deleted` instead (the .log first, so that no restart completes the swap) and
        False is returned. A failed `run` raises its OSError here (the log dir goes
        offline)."""
        if not job.done:
            raise RuntimeError(f"{self.name}: finish_swap before the swap job ran")
        if job.error is not None:
            raise job.error
        first = self._swappable(job.old)
        if first is None:
            self._deleted_files += job.cleaned.delete_later()
            job.directory = None
            return False
        for segment in job.old:
            self._deleted_files += segment.delete_later()
        job.cleaned.change_suffix("", log_first=False)
        self._segments[first : first + len(job.old)] = [job.cleaned]
        self._directory_changes += 1
        return True

    # -- durability ------------------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync everything below `up_to` (default: the log end) and move the recovery point."""
        self.finish_flush(self._run_inline(self.begin_flush(up_to)))

    @staticmethod
    def _run_inline(job: FlushJob) -> FlushJob:
        job.run()
        return job

    @_io("flushing")
    def begin_flush(self, up_to: int | None = None) -> FlushJob:
        """The first step of a flush (see the module notes), on the log's owner: write the
        pending index entries of every segment holding offsets in [recovery point, `up_to`)
        (default: the log end) and take descriptors of their files; the returned job fsyncs
        them (in any thread), and `finish_flush` must follow on the owner."""
        target = self._log_end_offset if up_to is None else min(up_to, self._log_end_offset)
        fds: list[int] = []
        try:
            for segment, following in self._with_following():
                end = following.base_offset if following is not None else LONG_MAX
                if segment.base_offset < target and end > self._recovery_point:
                    fds += segment.descriptors_to_sync()
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        changes = self._directory_changes
        directory = self.directory if self._directory_synced < changes else None
        return FlushJob(
            target,
            self.structure_version,
            fds,
            directory,
            self._epochs,
            self._epochs.unsaved_snapshot(),
            changes,
        )

    @_io("flushing")
    def finish_flush(self, job: FlushJob) -> None:
        """The last step of a flush, on the log's owner once the job ran: the recovery point
        moves to the job's target, unless the log was truncated, replaced or closed
        meanwhile (its target may then count offsets the job never fsynced); the next flush
        moves it. A job that failed raises its OSError here, taking the log dir offline."""
        if not job.done:
            job.close()
            raise RuntimeError(f"{self.name}: finish_flush before the flush job ran")
        if job.error is not None:
            if self.closed:
                # Closed while the job ran (its directory moved to another log dir by
                # AlterReplicaLogDirs, or deleted): nothing of it is read again, so its
                # failure takes no log dir offline.
                log.warning("%s: flush of a closed log failed: %s", self.name, job.error)
                return
            raise job.error
        if job.directory is not None:
            self._directory_synced = max(self._directory_synced, job.directory_changes)
        if job.structure_version == self.structure_version:
            self._recovery_point = max(self._recovery_point, min(job.target, self._log_end_offset))

    def flush_if_due(self, now_ms: int) -> bool:
        """Flush per flush.messages / flush.ms, and fsync segments rolled since the last flush.

        Returns True if a flush happened.
        """
        job = self.begin_flush_if_due(now_ms)
        if job is None:
            return False
        self.finish_flush(self._run_inline(job))
        return True

    @_io("flushing")
    def begin_flush_if_due(self, now_ms: int) -> FlushJob | None:
        """`begin_flush` if `flush_if_due` would flush, else None."""
        unflushed = self._log_end_offset - self._recovery_point
        if unflushed > 0 and (
            unflushed >= self.config.flush_messages
            or now_ms - self._last_flush_ms >= self.config.flush_ms
        ):
            self._last_flush_ms = now_ms
            return self.begin_flush()
        if self._recovery_point < self._active.base_offset:
            return self.begin_flush(self._active.base_offset)
        return None

    def _segments_changed(self, truncated_to: int | None = None) -> None:
        self.structure_version += 1
        if truncated_to is not None and self.first_dirty_offset is not None:
            self.first_dirty_offset = min(self.first_dirty_offset, truncated_to)

    def close(self) -> None:
        """Close the files (without flushing: the log manager flushes before closing), after
        writing the producer state's snapshot at the log end (Kafka's clean shutdown)."""
        if not self.closed:
            try:
                self.take_snapshot(sync=True)
            except StorageError as error:  # the log dir is (now) offline
                log.warning("%s: cannot write the producer snapshot: %s", self.name, error)
        self.closed = True
        self._segments_changed()
        for segment in self._segments:
            segment.close()

    def delete(self) -> None:
        """Remove the partition's directory and everything in it."""
        self.detach()
        shutil.rmtree(self.directory, ignore_errors=True)

    def detach(self) -> None:
        """Close the log for deletion, writing nothing: its directory is the caller's to
        remove (LogManager removes it in a worker thread; nothing of the log touches it
        after this). Segments still being read keep descriptors of their own."""
        self.closed = True
        self._segments_changed()
        for segment in self._segments:
            segment.close_descriptor()

    def io_failed(self, what: str, error: OSError) -> None:
        """An OSError of this log's files met in another thread: the log dir goes offline
        and StorageError is raised, as `_io` does for the log's own methods."""
        self._failures.maybe_add_offline_log_dir(
            self._log_dir, f"Error while {what} {self.name} in dir {self._log_dir}", error
        )
        raise StorageError(
            f"{self.name}: {what} failed ({error}); log dir {self._log_dir} is offline"
        ) from error

    def take_deleted_files(self) -> list[Path]:
        """The `.deleted` files retention left since the last call, for the caller to unlink
        (in any thread: no file of the log is ever named so)."""
        files, self._deleted_files = self._deleted_files, []
        return files


def _complete_interrupted_swaps(directory: Path) -> None:
    """Finish a segment swap that a crash interrupted, as Kafka's LogLoader does.

    A `<base>.log.swap` is a cleaned segment that was complete when it was renamed: every
    ordinary segment file whose base offset lies between the lowest swap's base offset and
    the highest swap's next offset is one it replaces, and is deleted; then the `.swap`
    suffixes are dropped. An index `.swap` without its `.log.swap` is deleted (the index is
    rebuilt from the log when missing).
    """
    swaps: dict[int, list[Path]] = {}
    for path in directory.iterdir():
        match = _SEGMENT_FILE.fullmatch(path.name)
        if match and match.group(3):
            swaps.setdefault(int(match.group(1)), []).append(path)
    if not swaps:
        return
    lowest, highest = None, None
    for base_offset, paths in sorted(swaps.items()):
        log_swap = directory / segment_file_name(base_offset, LOG_SUFFIX + SWAP_SUFFIX)
        if not log_swap.exists():
            for path in paths:
                log.info("removing %s: its segment was never swapped in", path)
                path.unlink()
            continue
        # An empty cleaned segment still replaces the old one with its base offset.
        next_offset = max(_next_offset_of(log_swap), base_offset + 1)
        lowest = base_offset if lowest is None else min(lowest, base_offset)
        highest = next_offset if highest is None else max(highest, next_offset)
    if lowest is None or highest is None:  # both are set together
        return
    for path in directory.iterdir():
        match = _SEGMENT_FILE.fullmatch(path.name)
        if match and not match.group(3) and lowest <= int(match.group(1)) < highest:
            log.info("removing %s: an interrupted swap replaced it", path)
            path.unlink()
    for path in directory.iterdir():
        match = _SEGMENT_FILE.fullmatch(path.name)
        if match and match.group(3):
            log.info("completing the interrupted swap of %s", path)
            os.replace(path, path.with_name(path.name.removesuffix(SWAP_SUFFIX)))
    fsync_directory(directory)


def _next_offset_of(log_path: Path) -> int:
    """The offset after the last batch of a segment file, from its batch headers (a swap
    file was flushed before it got its name, so its headers are trusted); -1 if empty."""
    next_offset = -1
    with open(log_path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        position = 0
        while position + HEADER_SIZE <= size:
            header = read_header(os.pread(file.fileno(), HEADER_SIZE, position))
            if header.batch_length < MIN_BATCH_LENGTH or position + header.size > size:
                break
            next_offset = header.last_offset + 1
            position += header.size
    return next_offset


def _remove_leftovers(directory: Path) -> None:
    """Delete what interrupted operations leave behind: temp files and orphaned indexes."""
    for path in directory.iterdir():
        orphaned_index = path.suffix in (
            OFFSET_INDEX_SUFFIX,
            TIME_INDEX_SUFFIX,
            TXN_INDEX_SUFFIX,
        ) and not (path.with_suffix(LOG_SUFFIX).exists())
        if path.is_file() and (path.name.endswith(_LEFTOVER_SUFFIXES) or orphaned_index):
            log.info("removing leftover file %s", path)
            path.unlink()
