"""One module per API family; each handler is ``async def handle(ctx, request)``.

A handler returns the version-neutral description of its response (see protocol.codec.build),
a kio response entity of the request's version (forwarded answers), or None when the request
gets no response (Produce with acks=0).
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from minibroker.common.config import BrokerConfig
from minibroker.protocol.framing import RequestHeader

if TYPE_CHECKING:
    from minibroker.apis.sasl import SaslSession
    from minibroker.common.metrics import BrokerMetrics
    from minibroker.controller.service import ControllerService
    from minibroker.coordinator.service import GroupCoordinator
    from minibroker.replication.replica_manager import ReplicaManager
    from minibroker.security.authorizer.acls import Authorizer
    from minibroker.security.scram import ScramCredentials


class CloseConnection(Exception):
    """The request must be answered by closing the connection (Kafka's way for acks=0)."""


@dataclass(slots=True)
class Connection:
    """What the server knows of one client connection, shared by its requests."""

    # The peer as Kafka shows it in DescribeGroups: "/127.0.0.1".
    host: str = ""
    # Set when a broker registers or heartbeats on it: its lifecycle connection to the
    # controller, whose closing hints that the broker died (see ControllerService).
    broker_id: int | None = None
    # Who is asking, as Kafka's KafkaPrincipal prints it ("User:alice"). A connection that
    # has not authenticated (a PLAINTEXT listener, or SSL without a client certificate) is
    # Kafka's anonymous user; authentication (TLS, SASL) replaces it.
    principal: str = "User:ANONYMOUS"
    # On a SASL listener: the connection's authentication state (apis.sasl.SaslSession).
    sasl: "SaslSession | None" = None


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler knows besides its request: who asked, and the node it runs in.

    ``replicas`` and ``coordinator`` are None on a controller-only node and ``controller`` on
    a broker-only one.
    """

    header: RequestHeader
    listener_name: str
    config: BrokerConfig
    cluster_id: str
    supported: dict[int, tuple[int, int]]
    replicas: "ReplicaManager | None"
    controller: "ControllerService | None"
    metrics: "BrokerMetrics"
    coordinator: "GroupCoordinator | None" = None
    connection: Connection = field(default_factory=Connection)
    # None unless authorizer.class.name is set (see apis/authorization.py).
    authorizer: "Authorizer | None" = None
    # The SCRAM credentials this node authenticates with (apis.sasl.ScramCredentials).
    scram_credentials: "ScramCredentials | None" = None

    @property
    def version(self) -> int:
        return self.header.api_version


async def wait_until_ready(ctx: RequestContext) -> None:
    """Hold a client's request until this broker has joined the cluster (and so holds its
    ACLs, configs and credentials): for the APIs that the controller also uses to push them,
    which dispatch cannot hold back for everyone (see dispatch.CLIENT_APIS)."""
    if ctx.replicas is not None and not ctx.replicas.ready.is_set():
        await ctx.replicas.ready.wait()
