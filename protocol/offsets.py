"""The special timestamps of ListOffsets (Kafka's ListOffsetsRequest.EARLIEST_TIMESTAMP,
LATEST_TIMESTAMP and MAX_TIMESTAMP): asked instead of a time, they name an offset."""

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3
