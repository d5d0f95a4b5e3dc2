"""The special timestamps of ListOffsets (Kafka's ListOffsetsRequest.EARLIEST_TIMESTAMP,
LATEST_TIMESTAMP, MAX_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP and
EARLIEST_PENDING_UPLOAD_TIMESTAMP): asked instead of a time, they name an offset."""

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # KIP-405: the first offset still in local storage (ListOffsets v8+)
LATEST_TIERED = -5  # KIP-1005: the highest offset in tiered storage (v9+)
EARLIEST_PENDING_UPLOAD = -6  # KIP-1023: the first offset not yet in tiered storage (v11+)

# Kafka's ReplicaManager.timestampMinSupportedVersion: the first ListOffsets version that
# may carry each special timestamp. Any other negative timestamp, or one of these at an older
# version, is answered UNSUPPORTED_VERSION for its partition (isListOffsetsTimestampUnsupported).
MIN_LIST_OFFSETS_VERSION = {
    EARLIEST: 1,
    LATEST: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL: 8,
    LATEST_TIERED: 9,
    EARLIEST_PENDING_UPLOAD: 11,
}


def timestamp_unsupported(timestamp: int, version: int) -> bool:
    """Kafka's ReplicaManager.isListOffsetsTimestampUnsupported."""
    return timestamp < 0 and version < MIN_LIST_OFFSETS_VERSION.get(timestamp, 2**15)
