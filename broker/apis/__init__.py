"""One module per API family; each handler is ``async def handle(ctx, request)``.

A handler returns the version-neutral description of its response (see protocol.codec.build),
a kio response entity of the request's version (forwarded answers), or None when the request
gets no response (Produce with acks=0).

Each handler states its API's facts beside it with :func:`api` (Kafka keeps them in one
message definition per API, ``listeners`` and all, and in ``ApiKeys``: ``clusterAction``,
``forwardable``); apis.registry gathers them, and dispatch, ApiVersions and the inter-node
rules are built from them.
"""

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from minibroker.common.config import BrokerConfig
from minibroker.protocol.errors import Error
from minibroker.protocol.framing import RequestHeader
from minibroker.protocol.versions import ApiKey
from minibroker.security.scram import ScramCredentials

if TYPE_CHECKING:
    from minibroker.common.metrics import BrokerMetrics
    from minibroker.common.quota_manager import BrokerQuotas
    from minibroker.controller.service import ControllerService
    from minibroker.coordinator.group.service import GroupCoordinator
    from minibroker.coordinator.share.service import ShareCoordinator
    from minibroker.coordinator.transaction.service import TransactionCoordinator
    from minibroker.replication.replica_manager import ReplicaManager
    from minibroker.replication.share_partition_manager import SharePartitionManager
    from minibroker.schema_registry.service import SchemaRegistryService
    from minibroker.security.authenticator import SaslSession
    from minibroker.security.authorizer.acls import Authorizer


class CloseConnection(Exception):
    """The request must be answered by closing the connection (Kafka's way for acks=0)."""


@dataclass(slots=True)
class Connection:
    """What the server knows of one client connection, shared by its requests."""

    # The peer as Kafka shows it in DescribeGroups: "/127.0.0.1".
    host: str = ""
    # The peer's port, and the client's software as its ApiVersions v3+ named it (KIP-511):
    # what client-metrics subscriptions match (KIP-714's client_source_port and
    # client_software_name/version).
    port: int | None = None
    software_name: str | None = None
    software_version: str | None = None
    # Set when a broker registers or heartbeats on it: its lifecycle connection to the
    # controller, whose closing hints that the broker died (see ControllerService).
    broker_id: int | None = None
    # Who is asking, as Kafka's KafkaPrincipal prints it ("User:alice"). A connection that
    # has not authenticated (a PLAINTEXT listener, or SSL without a client certificate) is
    # Kafka's anonymous user; authentication (TLS, SASL) replaces it.
    principal: str = "User:ANONYMOUS"
    # On a SASL listener: its authentication state (security.authenticator.SaslSession).
    sasl: "SaslSession | None" = None
    # KIP-219: how long the connection's channel stays muted after the response just sent
    # (a quota's throttle time, set by dispatch, honoured by the connection's read loop).
    throttle_ms: int = 0
    # A plaintext connection: large Fetch reads are answered as FileRecords, which the
    # server sends with sendfile; TLS must encrypt the bytes, so it gets them read.
    zero_copy: bool = False


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
    # The SCRAM credentials this node authenticates with (security.scram.ScramCredentials).
    scram_credentials: ScramCredentials = field(default_factory=ScramCredentials)
    # What ApiVersions lists on this listener (apis.registry.advertised_versions): ``supported``
    # less, on a client listener, the APIs only nodes send.
    advertised: dict[int, tuple[int, int]] = field(default_factory=dict)
    # The transaction coordinator (None on a controller-only node).
    transactions: "TransactionCoordinator | None" = None
    # The broker's client quota managers (None on a controller-only node).
    quotas: "BrokerQuotas | None" = None
    # The share coordinator (KIP-932's share state; None on a controller-only node).
    share_coordinator: "ShareCoordinator | None" = None
    # The share partitions of share groups (None on a controller-only node).
    shares: "SharePartitionManager | None" = None
    # The schema registry's service when this broker runs it (schema validation on produce).
    schema_registry: "SchemaRegistryService | None" = None

    @property
    def version(self) -> int:
        return self.header.api_version

    # The node's parts as the handlers that need them see them. Dispatch accepts only the
    # APIs of the node's roles (``supported``), so a Role.BROKER API runs only where this node
    # is a broker, and a node that is not a broker is a controller: these name the invariant
    # once instead of each handler re-testing for None.

    @property
    def replica_manager(self) -> "ReplicaManager":
        """``replicas``, in the handler of a Role.BROKER API."""
        assert self.replicas is not None, "a broker's API served by a controller-only node"
        return self.replicas

    @property
    def group_coordinator(self) -> "GroupCoordinator":
        """``coordinator``, in the handler of a Role.BROKER API (a broker starts both)."""
        assert self.coordinator is not None, "a broker's API served by a controller-only node"
        return self.coordinator

    @property
    def transaction_coordinator(self) -> "TransactionCoordinator":
        """``transactions``, in the handler of a Role.BROKER API (a broker starts it)."""
        assert self.transactions is not None, "a broker's API served by a controller-only node"
        return self.transactions

    @property
    def share_state_coordinator(self) -> "ShareCoordinator":
        """``share_coordinator``, in the handler of a Role.BROKER API (a broker starts it)."""
        assert self.share_coordinator is not None, "a broker's API served by a non-broker"
        return self.share_coordinator

    @property
    def share_partition_manager(self) -> "SharePartitionManager":
        """``shares``, in the handler of a Role.BROKER API (a broker starts it)."""
        assert self.shares is not None, "a broker's API served by a controller-only node"
        return self.shares

    @property
    def controller_service(self) -> "ControllerService":
        """``controller``, where ``replicas`` is None: a node that is not a broker is a
        controller. (Not so in a Role.CONTROLLER API's handler: a ZooKeeper-mode broker serves
        those, and holds a ControllerService only while it is the elected controller.)"""
        assert self.controller is not None, "a node that is neither broker nor controller"
        return self.controller


async def wait_until_ready(ctx: RequestContext) -> None:
    """Hold a client's request until this broker has joined the cluster (and so holds its
    ACLs, configs and credentials): for the APIs that the controller also uses to push them,
    which dispatch cannot hold back for everyone (see Api.held_until_ready)."""
    if ctx.replicas is not None and not ctx.replicas.ready.is_set():
        await ctx.replicas.ready.wait()


class Role(enum.Flag):
    """The node roles that serve an API (Kafka's message definitions: ``listeners``).

    A ZooKeeper-mode broker serves the controller's APIs as well, since any broker may be
    elected (see node.server)."""

    BROKER = enum.auto()
    CONTROLLER = enum.auto()
    BOTH = BROKER | CONTROLLER


class Senders(enum.Enum):
    """Who may send an API.

    NODES: only the cluster's own nodes (Kafka's ``clusterAction`` APIs). Dispatch holds
    them behind the inter-node rules (apis/inter_node.py) and ApiVersions leaves them out on
    client listeners. CLIENTS_AND_NODES: a client form and a node form (a follower's Fetch,
    ListOffsets and OffsetForLeaderEpoch with a replica id; the controller's pushes of configs,
    ACLs and SCRAM credentials); the handler tells them apart and puts the node form behind
    the inter-node rules, each refusing it in the API's own way.
    """

    CLIENTS = enum.auto()
    NODES = enum.auto()
    CLIENTS_AND_NODES = enum.auto()


Handler = Callable[["RequestContext", Any], Awaitable[Any]]
# The version-neutral response to a request whose handler failed: ``error`` everywhere it
# fits (see apis/errors.py for when dispatch answers with it).
ErrorResponse = Callable[[Any, Error], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Api:
    """One API's facts, stated once, beside its handler (see :func:`api`).

    ``versions``: the range this node serves and advertises (inside what kio has schemas for);
    ``controller_decides``: a broker forwards it to the controller, which decides it
    (apis.forwarding.decided_by_controller; Kafka's ``forwardable``), so both roles serve it;
    ``held_until_ready``: a broker holds the request until it has joined the cluster (those
    the controller also uses to push state, or that authenticate a connection, are not held;
    their handlers wait where they must, see apis.authorization.wait_for_cluster_acls);
    ``kraft_only``: an API of the KRaft metadata quorum, which a ZooKeeper-mode node does not
    serve (Kafka's message definitions list no ``zkBroker`` listener for it);
    ``advertised_from``: the lowest version ApiVersions lists when it is below the lowest
    served one. Kafka 4 keeps Produce v0-v2 in its ApiVersions answer and refuses them
    otherwise (``ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION``, KAFKA-18659): librdkafka
    before 2.1 turns compression on only when a broker's Produce range starts at v0. A
    request below ``versions`` is refused as any version not served is (apis/dispatch.py).
    """

    key: ApiKey
    versions: tuple[int, int]
    handler: Handler
    error_response: ErrorResponse
    roles: Role
    senders: Senders = Senders.CLIENTS
    controller_decides: bool = False
    held_until_ready: bool = True
    kraft_only: bool = False
    advertised_from: int | None = None

    def __post_init__(self) -> None:
        low, high = self.versions
        assert 0 <= low <= high, f"{self.key.name}: bad version range {self.versions}"
        assert self.advertised_from is None or 0 <= self.advertised_from < low, (
            f"{self.key.name}: advertised_from must be below the lowest served version"
        )
        assert not self.controller_decides or self.roles == Role.BOTH, (
            f"{self.key.name}: the controller decides it, so brokers (to forward) and the "
            "controller serve it"
        )
        assert not (self.senders is Senders.NODES and self.held_until_ready), (
            f"{self.key.name}: the cluster's own requests are never held until ready"
        )


def api(
    key: ApiKey,
    *,
    versions: tuple[int, int],
    roles: Role,
    error_response: ErrorResponse,
    senders: Senders = Senders.CLIENTS,
    controller_decides: bool = False,
    held_until_ready: bool | None = None,
    kraft_only: bool = False,
    advertised_from: int | None = None,
) -> Callable[[Handler], Handler]:
    """Declare the decorated handler as the one that serves ``key`` (see :class:`Api`).

    The handler is returned unchanged, carrying its declaration as ``__api__``; ``held_until
    _ready`` defaults to true except for the APIs only nodes send."""

    def declare(handler: Handler) -> Handler:
        held = senders is not Senders.NODES if held_until_ready is None else held_until_ready
        declaration = Api(
            key,
            versions,
            handler,
            error_response,
            roles,
            senders,
            controller_decides,
            held,
            kraft_only,
            advertised_from,
        )
        setattr(handler, "__api__", declaration)  # noqa: B010 (mypy: functions have no slots)
        return handler

    return declare


def declarations_of(module) -> list[Api]:
    """The APIs a handler module declares, in the order of its handlers."""
    return [
        value.__api__
        for value in vars(module).values()
        if callable(value)
        and getattr(value, "__module__", None) == module.__name__
        and isinstance(getattr(value, "__api__", None), Api)
    ]
