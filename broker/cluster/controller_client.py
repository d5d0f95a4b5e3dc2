"""The broker's side of the controller relationship.

Registration and heartbeats keep the broker in the cluster (Kafka's BrokerLifecycleManager);
a second connection carries everything else the broker asks the controller: AlterPartition
from leaders, CreateTopics/DeleteTopics forwarded from clients, topic configs for new
replicas, and blocks of producer ids. Two connections, so that a slow admin request never
delays a heartbeat into a session timeout.
"""

import logging
import re
import uuid
from collections.abc import Callable

import trio

from minibroker.cluster.node_connection import (
    CONNECTION_ERRORS,
    NodeConnection,
    describe_connection_error,
)
from minibroker.common.config import BrokerConfig, Voter
from minibroker.common.names import SCHEMA_REGISTRY_ENDPOINT, SCHEMA_REGISTRY_TLS_ENDPOINT
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import SENT_VERSIONS, ApiKey
from minibroker.security.authorizer.acls import (
    AclBinding,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from minibroker.security.listeners import client_security

log = logging.getLogger("lifecycle")

REQUEST_TIMEOUT_S = 15.0
RETRY_BACKOFF_S = 0.2


class ControllerUnavailable(Exception):
    """The controller could not be reached or did not answer in time."""


# The client ids of a broker's channels to the controller: "broker-<id>" and its
# "-lifecycle", "-forwarding" and "-bootstrap" channels (see ControllerClient).
_BROKER_CHANNEL = re.compile(r"broker-\d+(-lifecycle|-forwarding|-bootstrap)?")


def is_broker_channel(client_id: str | None) -> bool:
    """Whether a request's client id is one of a broker's channels to the controller."""
    return client_id is not None and _BROKER_CHANNEL.fullmatch(client_id) is not None


class Described:
    """A request described version-neutrally (as :func:`build_request` takes it), to be built
    at the newest version both this node and the controller it reaches know: the channel asks
    the controller's ApiVersions once per connection (Kafka's NodeApiVersions, by which its
    AlterPartitionManager sends v3 only to a controller that serves it)."""

    def __init__(self, api_key: int, data: dict) -> None:
        self.api_key = api_key
        self.data = data


class _Channel:
    """One reconnecting connection to the controller, one request at a time.

    The lock spans connecting, the exchange and dropping a broken connection, so a timeout in
    one caller can never close a connection another caller is using.
    """

    def __init__(
        self, config: BrokerConfig, client_id: str, locate: Callable[[], Voter | None] | None
    ) -> None:
        self._config = config
        self._client_id = client_id
        # Where the controller is now: controller.quorum.voters, or in ZooKeeper mode the
        # broker elected last (None while there is none).
        self._locate = locate or (lambda: config.controller)
        self._connection: NodeConnection | None = None
        self._connected_to: Voter | None = None
        # The controller's ApiVersions on this connection (highest version by key), asked
        # before the first Described request on it; None until then.
        self._peer_versions: dict[int, int] | None = None
        self._lock = trio.Lock()
        self._security = client_security(config, config.controller_listener_name)

    def _voter(self) -> Voter:
        voter = self._locate()
        if voter is None:
            raise ControllerUnavailable("no controller is elected at the moment")
        return voter

    async def request(self, request, timeout_s: float = REQUEST_TIMEOUT_S):
        """Send one request and return its answer. A connection kept from earlier requests
        that turns out closed (the controller restarted meanwhile) is replaced once and the
        request sent again, as Kafka's controller channel re-sends after a disconnection."""
        voter = self._voter()
        try:
            with trio.fail_after(timeout_s):
                async with self._lock:
                    reused = self._connection is not None
                    try:
                        return await self._exchange(request)
                    except CONNECTION_ERRORS:
                        await self.aclose()
                        if not reused:
                            raise
                    except BaseException:
                        await self.aclose()
                        raise
                    try:
                        return await self._exchange(request)
                    except BaseException:
                        await self.aclose()
                        raise
        except trio.TooSlowError:
            raise ControllerUnavailable(
                f"controller {voter.host}:{voter.port} did not answer within {timeout_s:g} s"
            ) from None
        except CONNECTION_ERRORS as error:
            reason = describe_connection_error(error, self._security)
            raise ControllerUnavailable(f"controller {voter.host}:{voter.port}: {reason}") from None

    async def _exchange(self, request):
        voter = self._voter()
        if self._connection is not None and self._connected_to != voter:
            await self.aclose()  # another broker was elected controller
        if self._connection is None:
            self._connection = await NodeConnection.connect(
                voter.host, voter.port, self._client_id, self._security
            )
            self._connected_to = voter
            self._peer_versions = None
        if isinstance(request, Described):
            request = build_request(
                request.api_key, request.data, await self._version_for(request.api_key)
            )
        return await self._connection.request(request)

    async def _version_for(self, api_key: int) -> int:
        """The version to send ``api_key`` at on this connection: this node's
        (SENT_VERSIONS), or the controller's highest if that is lower."""
        assert self._connection is not None
        if self._peer_versions is None:
            try:
                response = await self._connection.request(
                    codec.build(
                        codec.request_class(ApiKey.API_VERSIONS, 3),
                        {"client_software_name": "minibroker", "client_software_version": "1"},
                    )
                )
            except CONNECTION_ERRORS:
                raise
            except Exception as error:  # an answer that does not decode: send ours
                log.warning("ApiVersions to the controller failed: %r", error)
                response = None
            self._peer_versions = {
                int(entry.api_key): int(entry.max_version)
                for entry in getattr(response, "api_keys", ())
            }
        ours = SENT_VERSIONS[api_key]
        return min(ours, self._peer_versions.get(api_key, ours))

    async def aclose(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            self._peer_versions = None
            await connection.aclose()


def build_request(api_key: int, data: dict, version: int | None = None):
    """A request at the version this node sends it (or at ``version``), from a
    version-neutral description."""
    chosen = SENT_VERSIONS[api_key] if version is None else version
    return codec.build(codec.request_class(api_key, chosen), data)


class ControllerClient:
    """Registration, heartbeats and requests to the controller, for one broker process."""

    def __init__(
        self,
        config: BrokerConfig,
        cluster_id: str,
        authorizer: Authorizer | None = None,
        locate: Callable[[], Voter | None] | None = None,
        *,
        previous_broker_epoch: int = -1,
        on_registered: Callable[[int], None] | None = None,
    ) -> None:
        self.config = config
        self.cluster_id = cluster_id
        # KIP-966: the broker epoch of this broker's last clean shutdown, from the log dirs'
        # clean-shutdown markers (-1: none, an unclean one), sent with each registration
        # (BrokerRegistration v3+'s PreviousBrokerEpoch) so that the controller keeps a
        # cleanly stopped broker in the ELRs; ``on_registered`` learns each new epoch, for
        # the next clean shutdown's markers (Kafka's BrokerLifecycleManager).
        self.previous_broker_epoch = previous_broker_epoch
        self.on_registered = on_registered
        # A broker-only node's authorizer, which gets the cluster's ACLs before registering.
        self.authorizer = authorizer if not config.is_controller else None
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self._lifecycle = _Channel(config, f"broker-{config.node_id}-lifecycle", locate)
        self._requests = _Channel(config, f"broker-{config.node_id}", locate)
        # Forwarded admin requests wait at the controller for the brokers to apply them, and
        # applying may need the controller (topic configs): they get their own connection.
        self._forwarding = _Channel(config, f"broker-{config.node_id}-forwarding", locate)
        # Set once a controlled shutdown began: heartbeats stop, and a fenced answer no
        # longer means "register again".
        self.shutting_down = False
        # KIP-858: the directory ids of this broker's failed log dirs, in every heartbeat
        # (BrokerHeartbeat v1's OfflineLogDirs); a new one is sent at once.
        self.offline_log_dirs: list[uuid.UUID] = []
        self._heartbeat_now = trio.Event()

    def propagate_directory_failure(self, directory_id: uuid.UUID) -> None:
        """Kafka's BrokerLifecycleManager.propagateDirectoryFailure: a log dir failed; the
        next heartbeat, sent now rather than at the next interval, names it."""
        if directory_id not in self.offline_log_dirs:
            self.offline_log_dirs.append(directory_id)
        self._heartbeat_now.set()

    async def request(self, request, timeout_s: float = REQUEST_TIMEOUT_S):
        """Send a request to the controller; raises ControllerUnavailable."""
        return await self._requests.request(request, timeout_s)

    async def forward(self, request, timeout_s: float = REQUEST_TIMEOUT_S):
        """Relay a client's admin request to the controller; raises ControllerUnavailable."""
        return await self._forwarding.request(request, timeout_s)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Register (retrying until the controller answers), then heartbeat forever."""
        await self._register()
        task_status.started()
        interval = self.config.broker_heartbeat_interval_ms / 1000
        while True:
            with trio.move_on_after(interval):
                await self._heartbeat_now.wait()
            self._heartbeat_now = trio.Event()
            if self.shutting_down:
                continue
            try:
                response = await self._lifecycle.request(
                    self._heartbeat(want_shut_down=False), timeout_s=max(interval * 2, 1.0)
                )
            except ControllerUnavailable as error:
                log.warning("heartbeat failed: %s", error)
                continue
            if self.shutting_down:
                continue
            if response.error_code.value == Error.NOT_CONTROLLER:
                # ZooKeeper mode: that broker is no longer (or not yet) the controller; the
                # next heartbeat goes to the one elected, which knows this broker's epoch.
                continue
            if response.is_fenced or response.error_code.value != Error.NONE:
                log.warning(
                    "controller says this broker is fenced (%s); registering again",
                    response.error_code.name,
                )
                await self._register()

    def _heartbeat(self, want_shut_down: bool):
        return build_request(
            ApiKey.BROKER_HEARTBEAT,
            {
                "broker_id": self.config.node_id,
                "broker_epoch": self.broker_epoch,
                "current_metadata_offset": 0,
                "want_fence": False,
                "want_shut_down": want_shut_down,
                "offline_log_dirs": tuple(self.offline_log_dirs),
            },
        )

    async def shut_down_controlled(self, timeout_s: float) -> bool:
        """Kafka's controlled shutdown (KRaft's wantShutDown heartbeat): ask the controller
        to move this broker's leadership away and wait until it says the rest of the
        cluster knows. True when it did within ``timeout_s``; on False the broker stops
        anyway and its partitions move when its session expires."""
        self.shutting_down = True
        with trio.move_on_after(timeout_s):
            while True:
                try:
                    response = await self._lifecycle.request(
                        self._heartbeat(want_shut_down=True), timeout_s=timeout_s
                    )
                except ControllerUnavailable as error:
                    log.warning("controlled shutdown: %s", error)
                    await trio.sleep(RETRY_BACKOFF_S)
                    continue
                if response.error_code.value != Error.NONE:
                    log.warning("controlled shutdown refused: %s", response.error_code.name)
                    return False
                if response.should_shut_down:
                    return True
                await trio.sleep(RETRY_BACKOFF_S)
        return False

    async def _lifecycle_answer(self, request, waiting_for: str):
        """The controller's answer on the lifecycle channel, asked again every
        RETRY_BACKOFF_S while it cannot be reached (said once in the log)."""
        warned = False
        while True:
            try:
                return await self._lifecycle.request(request)
            except ControllerUnavailable as error:
                if not warned:
                    log.info("waiting for %s: %s", waiting_for, error)
                    warned = True
                await trio.sleep(RETRY_BACKOFF_S)

    async def _load_acls(self, authorizer: Authorizer) -> None:
        """Take the cluster's ACLs from the controller (DescribeAcls) before registering.

        Registering makes the controller send this broker its requests, which the broker
        accepts only from a principal with CLUSTER_ACTION: it must know the ACLs first. Later
        changes come pushed by the controller (apis/acls.py).
        """
        request = build_request(
            ApiKey.DESCRIBE_ACLS,
            {
                "resource_type_filter": ResourceType.ANY,
                "resource_name_filter": None,
                "pattern_type_filter": PatternType.ANY,
                "principal_filter": None,
                "host_filter": None,
                "operation": Operation.ANY,
                "permission_type": Permission.ANY,
            },
        )
        while True:
            response = await self._lifecycle_answer(request, "the controller's ACLs")
            error = response.error_code.value
            if error == Error.NONE:
                break
            if error == Error.SECURITY_DISABLED:
                log.warning("the controller has no authorizer: this broker knows no ACLs")
                return
            log.warning("the controller refused its ACLs: %s; retrying", response.error_code.name)
            await trio.sleep(RETRY_BACKOFF_S)
        bindings = [
            AclBinding(
                resource.resource_type,
                resource.resource_name,
                resource.pattern_type,
                acl.principal,
                acl.host,
                acl.operation,
                acl.permission_type,
            )
            for resource in response.resources
            for acl in resource.acls
        ]
        authorizer.replace_acls(bindings)
        log.info("ACLs from the controller: %d binding(s)", len(bindings))

    def _schema_registry_endpoint(self, default_host: str) -> list[dict]:
        """The schema registry's HTTP address, registered beside the Kafka listeners so
        that other brokers can forward writes to it (minibroker.schema_registry.service)."""
        if not self.config.schema_registry_listeners:
            return []
        listener = self.config.schema_registry_listeners[0]
        host = listener.host
        if host in ("", "0.0.0.0", "::"):
            host = default_host
        name = SCHEMA_REGISTRY_TLS_ENDPOINT if listener.tls else SCHEMA_REGISTRY_ENDPOINT
        return [{"name": name, "host": host, "port": listener.port, "security_protocol": 0}]

    async def _register(self) -> None:
        if self.authorizer is not None:
            await self._load_acls(self.authorizer)
        inter_broker = self.config.inter_broker_listener
        # The inter-broker listener goes first: the controller reaches the broker there.
        listeners = [inter_broker] + [
            listener for listener in self.config.advertised if listener.name != inter_broker.name
        ]
        request = build_request(
            ApiKey.BROKER_REGISTRATION,
            {
                "broker_id": self.config.node_id,
                "cluster_id": self.cluster_id,
                "incarnation_id": self.incarnation_id,
                "listeners": [
                    {
                        "name": listener.name,
                        "host": listener.host,
                        "port": listener.port,
                        "security_protocol": 0,
                    }
                    for listener in listeners
                ]
                + self._schema_registry_endpoint(inter_broker.host),
                "features": (),
                "rack": self.config.broker_rack,
                "is_migrating_zk_broker": False,
                "log_dirs": (),
                "previous_broker_epoch": self.previous_broker_epoch,
            },
        )
        while True:
            response = await self._lifecycle_answer(request, "the controller")
            if response.error_code.value == Error.INCONSISTENT_CLUSTER_ID:
                raise SystemExit(
                    f"the controller refused broker {self.config.node_id}: its cluster id is "
                    f"not {self.cluster_id} (meta.properties belongs to another cluster)"
                )
            if response.error_code.value != Error.NONE:
                log.warning("registration refused: %s; retrying", response.error_code.name)
                await trio.sleep(RETRY_BACKOFF_S)
                continue
            self.broker_epoch = response.broker_epoch
            if self.on_registered is not None:
                self.on_registered(self.broker_epoch)
            log.info("registered with the controller, broker epoch %d", self.broker_epoch)
            return


async def discover_cluster_id(config: BrokerConfig) -> str:
    """Ask the controller for the cluster id (a broker's first start, before meta.properties).

    Kafka has an operator run `kafka-storage format --cluster-id` on every node; here a new
    broker adopts the controller's id, which is what that step achieves on a local cluster.
    """
    channel = _Channel(config, f"broker-{config.node_id}-bootstrap", None)
    request = build_request(
        ApiKey.METADATA,
        {
            "topics": (),
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    warned = False
    while True:
        try:
            response = await channel.request(request, timeout_s=5.0)
        except ControllerUnavailable as error:
            if not warned:
                log.info("waiting for the controller to learn the cluster id: %s", error)
                warned = True
            await trio.sleep(RETRY_BACKOFF_S)
            continue
        if response.cluster_id:
            await channel.aclose()
            return response.cluster_id
        await trio.sleep(RETRY_BACKOFF_S)
