"""One module per API family; each exposes ``async def handle(ctx, request) -> dict | None``.

A handler returns the version-neutral description of its response (see protocol.codec.build),
or None when the request gets no response (Produce with acks=0).
"""

from dataclasses import dataclass

from protocol.framing import RequestHeader

from ..config import BrokerConfig
from ..replica_manager import ReplicaManager


class CloseConnection(Exception):
    """The request must be answered by closing the connection (Kafka's way for acks=0)."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler knows besides its request: who asked, and the broker it runs in."""

    header: RequestHeader
    replicas: ReplicaManager
    config: BrokerConfig
    cluster_id: str

    @property
    def version(self) -> int:
        return self.header.api_version
