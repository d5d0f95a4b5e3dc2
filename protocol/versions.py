"""The one table of API versions minibroker speaks.

ApiVersions advertises exactly this table and dispatch refuses anything outside it, so the two
can never disagree. Every range lies inside what kio 0.6.1 has schemas for.
"""

from enum import IntEnum


class ApiKey(IntEnum):
    """Kafka API keys minibroker knows by name."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22


SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 9),
    ApiKey.FETCH: (4, 13),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (1, 12),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
}


def is_supported(api_key: int, api_version: int) -> bool:
    """Whether dispatch accepts this key at this version."""
    versions = SUPPORTED_VERSIONS.get(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1]
