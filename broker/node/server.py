"""The broker process: storage, listeners, connections and periodic tasks under one nursery.

Connections are served one request at a time each, in order, as Kafka does (it mutes a
connection while a request is in flight), so a parked Fetch holds only its own connection.
Clients may pipeline: the next request waits in the socket buffer. A frame that cannot be a
request, or an API we do not serve, closes that connection only.

Shutdown (SIGTERM or Ctrl-C): stop accepting, let in-flight requests finish (bounded by a
grace period), then close the log manager, which writes the checkpoints and the clean-shutdown
marker so the next start skips recovery.
"""

import base64
import contextlib
import ctypes
import errno
import functools
import gc
import inspect
import ipaddress
import logging
import math
import os
import signal
import socket
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from minibroker.apis import CloseConnection, Connection, RequestContext
from minibroker.apis.authorization import inter_node_listeners, is_inter_node_listener
from minibroker.apis.dispatch import UnsupportedRequest, dispatch
from minibroker.apis.registry import advertised_versions, served_versions
from minibroker.apis.sasl import raw_step
from minibroker.cluster.controller_client import (
    ControllerClient,
    build_request,
    discover_cluster_id,
)
from minibroker.common.config import BrokerConfig, ConfigError
from minibroker.common.config_model import DYNAMIC_TOPIC_CONFIG, TOPIC_RESOURCE
from minibroker.common.metrics import BrokerMetrics
from minibroker.common.quota_manager import BrokerQuotas
from minibroker.controller.service import ControllerService
from minibroker.controller.zookeeper import ZooKeeperBroker
from minibroker.coordinator.group.service import GroupCoordinator
from minibroker.coordinator.share.service import ShareCoordinator
from minibroker.coordinator.transaction.service import TransactionCoordinator
from minibroker.iceberg.service import IcebergCollector, IcebergService
from minibroker.iceberg.writer import ProcessWriter
from minibroker.iceberg.writer_process import catalog_settings
from minibroker.node.connection_limits import (
    ConnectionQuotas,
    CreationRates,
    IdleConnections,
    MemoryPool,
)
from minibroker.node.loop_stalls import LoopStalls
from minibroker.node.metrics import (
    ClientTelemetryCollector,
    ConnectionCollector,
    QuotaCollector,
    StateCollector,
    serve_metrics,
)
from minibroker.node.share_persister import CoordinatorPersister
from minibroker.protocol.codec import DecodeError
from minibroker.protocol.errors import Error
from minibroker.protocol.framing import FrameDecoder, FrameError, parse_request_header
from minibroker.protocol.produce_request import ACKS_PEEK_BYTES, produce_acks
from minibroker.protocol.versions import ApiKey
from minibroker.replication import log_io
from minibroker.replication.log_cleaner import LogCleanerService
from minibroker.replication.partition_metadata_client import PartitionMetadataClient
from minibroker.replication.replica_manager import ReplicaManager, monotonic_ms, wall_clock_ms
from minibroker.replication.share_dlq_writer import ShareDlqWriter
from minibroker.replication.share_partition_manager import SharePartitionManager
from minibroker.replication.share_persister import InMemoryPersister, SharePersister
from minibroker.security.authenticator import SaslSession
from minibroker.security.authorizer import authorizer_from_config
from minibroker.security.listeners import (
    bootstrap_scram_credentials,
    certificate_principal,
    client_security,
    listener_security,
)
from minibroker.security.principal_mapping import NoMatchingRule
from minibroker.security.tls import TlsStream
from minibroker.storage.file_records import FileRecords, materialize
from minibroker.storage.log import LONG_MAX, LogConfig
from minibroker.storage.log_manager import LogManager
from minibroker.storage.segment import set_reserve_max_bytes

if TYPE_CHECKING:
    from minibroker.schema_registry.service import SchemaRegistryService

log = logging.getLogger("server")

RECEIVE_SIZE = 1024 * 1024
# A plaintext connection receives its small frames into one buffer of this size, kept for
# the connection's life (larger frames go straight into their own, FrameDecoder.unfilled).
RECEIVE_BUFFER_SIZE = 64 * 1024
# At most this many Produce responses are held back to go out in one write with the next
# (_answered_at_once), so at most three go out together; held ones get this long to go out
# when the connection closes. More (8) cost a producer with 5 requests in flight its
# pipeline: its slots come back only once the whole window is served (BENCHMARKS.md 17).
MAX_HELD_RESPONSES = 2
HELD_FLUSH_SECONDS = 1.0
SHUTDOWN_GRACE_SECONDS = 10.0
# A TLS client that does not finish its handshake in this time is dropped, so a stalled or
# plain-text peer cannot hold a connection slot (Kafka bounds it by its idle timeout).
TLS_HANDSHAKE_TIMEOUT_SECONDS = 10.0
# Kafka's sasl.server.max.receive.size default: the largest frame before authentication.
SASL_MAX_RECEIVE_SIZE = 524_288
# What trio's serve_listeners does when accept fails for want of descriptors or memory: the
# error is logged and accepting pauses this long, so the broker neither spins nor stops.
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_PAUSE_SECONDS = 0.1
# Once this many connections have closed since the last time, the broker asks the C allocator
# to give its free pages back to the system (checked every TRIM_CHECK_INTERVAL_MS). A
# connection's buffers and TLS state are malloc'ed in pieces below glibc's mmap threshold, so
# after thousands of connections close (5,000 unauthenticated TLS clients reaching their
# deadline, say) the freed memory stays in the process's heap, fragmented, and RSS does not
# come down. A full garbage collection first frees what only reference cycles still hold (a
# cancelled connection task's exception, its traceback and frames), then malloc_trim(0)
# returns every free page (Kafka's JVM gives heap back on its own schedule; here it is
# explicit). The trim is skipped where the C library has no malloc_trim.
TRIM_AFTER_CLOSED_CONNECTIONS = 1000
TRIM_CHECK_INTERVAL_MS = 5000


def _load_malloc_trim():
    try:
        function = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


_MALLOC_TRIM = _load_malloc_trim()


class _Peer:
    """One accepted connection, as the connection limits see it."""

    __slots__ = ("listener", "address", "scope", "reason", "reserved")

    def __init__(self, listener: str, address: str) -> None:
        self.listener = listener
        self.address = address
        # Cancelled to close the connection (idle, unauthenticated too long, evicted).
        self.scope = trio.CancelScope()
        self.reason = ""
        # Bytes of the memory pool taken for the request being received or answered.
        self.reserved = 0


def normal_address(text: str) -> str:
    """An address as the connection limits count it: an IPv4 client of a dual-stack listener
    (``::ffff:10.0.0.1``) is its IPv4 address."""
    address = ipaddress.ip_address(text)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def resolve_ip_overrides(overrides: dict[str, int]) -> dict[str, int]:
    """max.connections.per.ip.overrides by address: a host name counts for each address it
    resolves to at start (Kafka resolves it once, with InetAddress.getByName)."""
    resolved = {}
    for host, count in overrides.items():
        try:
            resolved[normal_address(host)] = count
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as error:
            raise ConfigError(
                f"invalid value for max.connections.per.ip.overrides: cannot resolve {host}:"
                f" {error}"
            ) from None
        for info in infos:
            resolved[normal_address(str(info[4][0]))] = count
    return resolved


def new_cluster_id() -> str:
    """Kafka's cluster id format: a random UUID as 22 characters of URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def existing_cluster_id(log_dir: Path) -> str | None:
    """The cluster.id recorded in a log dir's meta.properties, if the dir was used before."""
    try:
        lines = (log_dir / "meta.properties").read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "cluster.id":
            return value.strip()
    return None


class BrokerServer:
    """One node: a broker, the controller, or both (``process.roles``).

    Every node locks its log dir and keeps meta.properties; a broker also owns the partition
    logs, the replica manager and its link to the controller; the controller node owns the
    cluster state.
    """

    def __init__(
        self,
        config: BrokerConfig,
        *,
        halt: Callable[[int], None] | None = None,
        share_persister: SharePersister | None = None,
    ) -> None:
        """``share_persister``: where share partitions' state is kept (default: the share
        coordinator's)."""
        self.config = config
        # KIP-932: where share partitions keep their state: the given one (a test's), else
        # the share coordinator's (node/share_persister.py, here or over the wire), made at run.
        self.share_persister: SharePersister | None = share_persister
        # What a failed log dir does to the process (see _log_dir_failed): halt it, as
        # Kafka's Exit.halt; a test of the broker in-process passes its own.
        self._halt = halt if halt is not None else halt_process
        # The event loop's token, for a log dir failure met in a worker thread (a flush, a
        # roll): the replicas are taken offline on the loop (see _log_dir_failed).
        self._trio_token: trio.lowlevel.TrioToken | None = None
        self.cluster_id: str | None = config.cluster_id or existing_cluster_id(config.log_dirs[0])
        # In ZooKeeper mode any broker may be elected controller, so every broker serves the
        # controller's APIs (answering NOT_CONTROLLER while it is not the controller).
        self.supported = served_versions(
            broker=config.is_broker,
            controller=config.is_controller or config.zookeeper_mode,
            zookeeper_mode=config.zookeeper_mode,
        )
        self.advertised = {
            listener.name: advertised_versions(
                self.supported, inter_node_listener=is_inter_node_listener(config, listener.name)
            )
            for listener in config.listeners
        }
        self.log_manager: LogManager | None = None
        self.replicas: ReplicaManager | None = None
        self.controller: ControllerService | None = None
        self.coordinator: GroupCoordinator | None = None
        self.transactions: TransactionCoordinator | None = None
        # KIP-932: the share coordinator, and the persister a SharePartitionManager takes
        # (node/share_persister.py: the share coordinator's, here or over the wire).
        self.share_coordinator: ShareCoordinator | None = None
        self.shares: SharePartitionManager | None = None
        self.share_dlq: ShareDlqWriter | None = None
        self.schema_registry: SchemaRegistryService | None = None
        self.iceberg: IcebergService | None = None
        # The schema registry's sockets (hypercorn's Sockets), bound at start (run) as the
        # Kafka listeners are, served once the broker is up.
        self._registry_sockets: Any = None
        self.metrics = BrokerMetrics()
        # One per node, shared by its controller (which keeps its ACLs) and its handlers.
        self.authorizer = authorizer_from_config(config)
        self.zookeeper: ZooKeeperBroker | None = None
        self._stopping = False
        # Set once the node serves: an error after that is not a failure to start.
        self.serving = False
        self._idle_reads: set[trio.CancelScope] = set()
        self.zero_copy = zero_copy_enabled()
        self.max_held_responses = MAX_HELD_RESPONSES if holding_enabled() else 0
        # Built here so that a missing key store or a bad JAAS line stops the start with the
        # property's name (ConfigError) before anything listens.
        self.listener_security = {
            listener.name: listener_security(config, listener.name) for listener in config.listeners
        }
        self.scram_credentials = bootstrap_scram_credentials(config)
        # The connection limits (connection_limits.py): counts at accept and close, the
        # idle connections, and the bytes of requests held.
        self.connection_quotas = ConnectionQuotas(
            config.max_connections,
            config.max_connections_per_ip,
            resolve_ip_overrides(config.max_connections_per_ip_overrides),
            inter_node_listeners(config) or frozenset(),
        )
        self.idle = (
            IdleConnections(config.connections_max_idle_ms / 1000)
            if config.connections_max_idle_ms >= 0
            else None
        )
        self.pool = (
            MemoryPool(config.queued_max_request_bytes)
            if config.queued_max_request_bytes > 0
            else None
        )
        self.creation_rates = CreationRates(
            config.max_connection_creation_rate,
            config.quota_window_num,
            config.quota_window_size_seconds,
        )
        self._ip_quotas_version = -1
        self._peers: dict[_Peer, None] = {}
        # Connections closed since the allocator last gave memory back (_trim_memory).
        self._closed_since_trim = 0
        self._closed_before = 0  # ... as the previous check saw it
        self._slot_freed = trio.lowlevel.ParkingLot()
        self._pool_freed = trio.lowlevel.ParkingLot()
        # The client quota managers (a broker's), kept up to date by the controller's pushes.
        self.quotas = BrokerQuotas.create(config.quota_window_num, config.quota_window_size_seconds)
        if config.is_broker:
            client_security(config, config.inter_broker_listener.name)
            client_security(config, config.controller_listener_name)
        elif config.inter_broker_listener_name is not None:
            # A controller-only node connects to the brokers' inter-broker listener: its
            # login must be sound at start, not when the first broker registers.
            client_security(config, config.inter_broker_listener_name)

    def _is_share_member(self, group_id: str, member_id: str) -> bool | None:
        """For ShareFetch and ShareAcknowledge: whether ``member_id`` is a member of share group
        ``group_id``, when this broker coordinates the group (its ShareGroupHeartbeats come
        here); None, unknown, when another broker does (the fetch is then allowed, as Kafka's
        SharePartitionManager does not ask the group coordinator)."""
        coordinator = self.coordinator
        if coordinator is None or coordinator.check(group_id) is not Error.NONE:
            return None
        group = coordinator.share_groups.get(group_id)
        return group is not None and member_id in group.members

    def _context(
        self, listener_name: str, connection: Connection, cluster_id: str, header
    ) -> RequestContext:
        return RequestContext(
            header,
            listener_name,
            self.config,
            cluster_id,
            self.supported,
            self.replicas,
            self.controller,
            self.metrics,
            self.coordinator,
            connection,
            self.authorizer,
            self.scram_credentials,
            self.advertised[listener_name],
            self.transactions,
            self.quotas if self.config.is_broker else None,
            share_coordinator=self.share_coordinator,
            shares=self.shares,
            schema_registry=self.schema_registry,
        )

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until SIGTERM/SIGINT (or cancellation), then shut down cleanly."""
        listeners = []
        for listener in self.config.listeners:
            try:
                sockets = await trio.open_tcp_listeners(listener.port, host=listener.host or None)
            except OSError as error:
                raise OSError(
                    error.errno,
                    f"cannot listen on {listener.name}://{listener.host}:{listener.port}:"
                    f" {error.strerror or error}",
                ) from None
            listeners.append((listener.name, sockets))
        if self.config.schema_registry_listeners and self.config.is_broker:
            from minibroker.schema_registry.rest import bind_registry

            self._registry_sockets = bind_registry(self.config)
        if self.config.zookeeper_mode:
            self.zookeeper = ZooKeeperBroker(
                self.config, self._elected_controller, self._controller_changed
            )
            known = self.cluster_id
            self.cluster_id = await self.zookeeper.connect(new_cluster_id)
            if known is not None and known != self.cluster_id:
                raise SystemExit(
                    f"ZooKeeper holds cluster {self.cluster_id}, but meta.properties in"
                    f" {self.config.log_dirs[0]} belongs to cluster {known}: give this broker"
                    " the log.dirs of a broker of that ZooKeeper's cluster, or remove (or move)"
                    f" {self.config.log_dirs[0]} to start it as a new broker"
                )
        elif self.cluster_id is None:
            if self.config.is_controller:
                self.cluster_id = new_cluster_id()
            else:
                self.cluster_id = await discover_cluster_id(self.config)
        set_reserve_max_bytes(self.config.log_segment_reserve_max_bytes)
        self.log_manager = LogManager(
            list(self.config.log_dirs),
            log_config_from(self.config),
            node_id=self.config.node_id,
            cluster_id=self.cluster_id,
            producer_id_expiration_ms=self.config.producer_id_expiration_ms,
        )
        self.log_manager.set_cordoned(self.config.cordoned_log_dirs)
        self.log_manager.open(wall_clock_ms())
        self.log_manager.failures.add_listener(self._log_dir_failed)
        self._trio_token = trio.lowlevel.current_trio_token()
        # The receiver stays open through the clean-up, so a second SIGTERM while the
        # checkpoints are written does not kill the process half-way; trio re-delivers
        # unread signals to the previous handler when the receiver closes, so that handler is
        # made "ignore": once shutting down, further SIGTERMs change nothing.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            try:
                await self._serve(listeners, signals, task_status)
            finally:
                try:
                    if self.replicas is not None:
                        self.replicas.close()
                finally:
                    self.log_manager.close()
                log.info("stopped cleanly; checkpoints and clean-shutdown marker written")

    def _log_dir_failed(self, directory: Path, reason: str) -> None:
        """Kafka's LogManager.handleLogDirFailure and ReplicaManager.handleLogDirFailure,
        called as a log dir goes offline (its logs already refuse every operation:
        storage/log_dir_failure.py).

        With other log dirs still live (KIP-858, Kafka's rule in KRaft mode), the broker goes
        on: the failed dir's partitions stop being fetched and answer KAFKA_STORAGE_ERROR
        (ReplicaManager.handle_log_dir_failure), and the next heartbeat, sent at once, names
        the dir (BrokerHeartbeat v1's OfflineLogDirs, Kafka's BrokerLifecycleManager
        .propagateDirectoryFailure); the controller then moves their leadership to other
        replicas and takes this broker out of their ISRs (controller/broker_lifecycle.py),
        while this broker keeps leading and following its other partitions. A controller
        that cannot be reached meanwhile hears of it with the next heartbeat that gets
        through.

        With no live log dir left, Kafka halts the broker ("Shutdown broker because all log
        dirs in ... have failed", Exit.halt(1)): a broker that can hold no replica serves
        nothing, and a halt rather than a clean shutdown writes no checkpoint and no
        clean-shutdown marker, so the restart recovers every log from what its files hold,
        then truncates by leader epoch and catches up before it rejoins an ISR. The
        controller sees the broker's session end and moves leadership and ISR away.

        As in Kafka 4.4, a failure of the metadata log dir halts the broker whatever else is
        live ("Shutdown broker because the metadata log dir ... has failed"): Kafka's
        metadata.log.dir defaults to the first of log.dirs, and minibroker's first log dir
        holds what stands for it (the broker's topic table; on a node that is also the
        controller, the controller's state). A node with the controller role alone has no
        replicas to take offline and halts too.
        """
        live = self.log_manager.online_log_dirs() if self.log_manager is not None else []
        if self.log_manager is not None and directory == self.log_manager.log_dirs[0] and live:
            log.critical(
                "Shutdown broker because the metadata log dir %s has failed (%s)",
                directory,
                reason,
            )
            self._halt(1)
            return
        if live and self.replicas is not None and self.log_manager is not None:
            # Called where the write failed, which may be a worker thread: the replicas and
            # the heartbeat are the event loop's, so they hear of it there.
            if self._trio_token is not None:
                self._trio_token.run_sync_soon(self._take_log_dir_offline, directory)
            else:
                self._take_log_dir_offline(directory)
            log.critical(
                "log dir %s failed (%s); its partitions are offline on this broker, which"
                " serves the others (live: %s)",
                directory,
                reason,
                ", ".join(map(str, live)),
            )
            return
        if live:
            log.critical(
                "log dir %s failed (%s); halting, as this node serves no replicas to take"
                " offline (live: %s)",
                directory,
                reason,
                ", ".join(map(str, live)),
            )
        else:
            log.critical(
                "Shutdown broker because all log dirs in %s have failed (%s)",
                ", ".join(map(str, self.config.log_dirs)),
                reason,
            )
        self._halt(1)

    def _take_log_dir_offline(self, directory: Path) -> None:
        """On the event loop: the failed dir's replicas stop, and the controller is told."""
        if self.replicas is None or self.log_manager is None:
            return
        self.replicas.handle_log_dir_failure(directory)
        directory_id = self.log_manager.directory_ids.get(directory)
        if directory_id is not None:
            self.replicas.controller.propagate_directory_failure(directory_id)

    async def _serve(self, listeners, signals, task_status) -> None:
        """Run everything until a signal, then drain client connections while the replica
        manager and the controller still run (so parked requests can complete), and only
        then stop those."""
        # start() settles both before it serves.
        assert self.cluster_id is not None and self.log_manager is not None
        cluster_id, log_manager = self.cluster_id, self.log_manager
        async with trio.open_nursery() as control:
            if self.config.is_controller:
                self.controller = ControllerService(
                    # Broker sessions are intervals: a stepped time of day must not expire
                    # every broker at once, nor keep a dead one alive.
                    self.config,
                    cluster_id,
                    monotonic_ms,
                    self.metrics,
                    authorizer=self.authorizer,
                )
                self.controller.local_scram_credentials = self.scram_credentials
                await control.start(self.controller.run)
            controller_client = None
            if self.config.is_broker:
                zookeeper = self.zookeeper
                controller_client = ControllerClient(
                    self.config,
                    cluster_id,
                    self.authorizer,
                    locate=None if zookeeper is None else lambda: zookeeper.controller,
                    previous_broker_epoch=log_manager.previous_broker_epoch,
                    on_registered=lambda epoch: setattr(log_manager, "broker_epoch", epoch),
                )
                self.replicas = ReplicaManager(
                    self.config, log_manager, controller_client, self.metrics
                )
                await control.start(self.replicas.run)
                self.coordinator = GroupCoordinator(self.config, self.replicas)
                await control.start(self.coordinator.run)
                self.transactions = TransactionCoordinator(self.config, self.replicas)
                await control.start(self.transactions.run)
                self.share_coordinator = ShareCoordinator(self.config, self.replicas)
                await control.start(self.share_coordinator.run)
                if self.share_persister is None:
                    persister = CoordinatorPersister(
                        self.config, self.replicas, self.share_coordinator
                    )
                    await control.start(persister.run)
                    self.share_persister = persister
                # The group coordinator initializes and deletes share partitions' state, and
                # reads it for DescribeShareGroupOffsets, through the same persister.
                self.coordinator.share_persister = self.share_persister
                # DescribeShareGroupOffsets' lag: the latest offset, asked of the leader.
                partition_metadata = PartitionMetadataClient(self.config, self.replicas)
                await control.start(partition_metadata.run)
                self.coordinator.latest_offset = partition_metadata.latest_offset
                # Share groups' dead-letter queues (KIP-1191): written off the request path.
                self.share_dlq = ShareDlqWriter(
                    self.config,
                    self.replicas,
                    create_topics=self._create_topics_through_controller(controller_client),
                    topic_configs=self._topic_configs_from_controller(controller_client),
                )
                await control.start(self.share_dlq.run)
                self.shares = SharePartitionManager(
                    self.config,
                    self.replicas,
                    self.share_persister or InMemoryPersister(),
                    is_member=self._is_share_member,
                    dlq=self.share_dlq,
                )
                await control.start(self.shares.run)
                # Iceberg topics (docs/iceberg-topics.md): idle unless a topic asks for a table.
                # Its blocking half (decoding, Parquet, commits) in a process of its own,
                # started with the first Iceberg topic led here (broker/iceberg/writer.py).
                self.iceberg = IcebergService(
                    self.config,
                    self.replicas,
                    writer=ProcessWriter(catalog_settings(self.config)),
                )
                await control.start(self.iceberg.run)
                self.metrics.register(IcebergCollector(self.iceberg))
                if self.config.schema_registry_listeners:
                    await self._start_schema_registry(control, controller_client)
                    assert self.schema_registry is not None
                    # Where `_schemas` ends, asked of its leader as a follower asks it: the
                    # registry's copy catches up to it before it calls a schema id absent.
                    self.schema_registry.leader_log_end = partition_metadata.log_end_offset
            if self.config.is_broker:
                self.metrics.register(QuotaCollector(self.quotas))
                assert self.replicas is not None
                self.metrics.register(ClientTelemetryCollector(self.replicas))
            self.metrics.register(ConnectionCollector(self.connection_quotas, self.pool))
            self.metrics.register(
                StateCollector(
                    self.replicas, lambda: self.controller, self.coordinator, self.transactions
                )
            )
            if self.config.metrics_port is not None:
                await control.start(
                    serve_metrics,
                    self.metrics,
                    self.config.listeners[0].host,
                    self.config.metrics_port,
                )
            control.start_soon(self._periodic_tasks)
            self.loop_stalls = LoopStalls(
                self.metrics.loop_stalls,
                self.metrics.gc_pauses,
                self.config.event_loop_stall_warn_ms,
            )
            control.start_soon(self.loop_stalls.run)
            if self.idle is not None:
                control.start_soon(self._expire_idle_connections, self.idle)
            if self.zookeeper is not None:
                await control.start(self.zookeeper.run)
            if controller_client is not None:
                control.start_soon(controller_client.run)
            async with trio.open_nursery() as connections:
                accepting = trio.CancelScope()
                accepted_all = trio.Event()
                control.start_soon(self._accept, listeners, connections, accepting, accepted_all)
                for listener in self.config.listeners:
                    log.info("listening on %s://%s:%d", listener.name, listener.host, listener.port)
                log.info(
                    "started node %d as %s (cluster %s)",
                    self.config.node_id,
                    "+".join(sorted(self.config.process_roles)),
                    self.cluster_id,
                )
                self.serving = True
                if self.config.gc_freeze_after_startup:
                    # What start-up made (modules, configs, the recovered logs' indexes) is
                    # never scanned again by the cyclic collector (node/loop_stalls.py).
                    gc.collect()
                    gc.freeze()
                task_status.started()
                async for signum in signals:
                    log.info("received %s, shutting down", signal.Signals(signum).name)
                    break
                if controller_client is not None and self._controlled_shutdown_wanted():
                    # Leadership moves away while this broker still answers, so its clients
                    # are told NOT_LEADER_OR_FOLLOWER and find the new leaders at once.
                    timeout_s = min(self.config.broker_session_timeout_ms / 1000, 10.0)
                    if await controller_client.shut_down_controlled(timeout_s):
                        log.info("controlled shutdown: leadership moved to other brokers")
                    else:
                        log.warning("controlled shutdown did not complete; stopping anyway")
                accepting.cancel()
                await accepted_all.wait()  # the listening sockets are closed
                self._stopping = True
                for scope in list(self._idle_reads):
                    scope.cancel()
                connections.cancel_scope.deadline = trio.current_time() + SHUTDOWN_GRACE_SECONDS
            control.cancel_scope.cancel()

    def _create_topics_through_controller(self, controller_client):
        """create_topics(request) -> the first topic's error: a CreateTopics decided by this
        node's controller, or forwarded to the cluster's."""

        async def create_topics(request) -> Error:
            if self.controller is not None:
                response = await self.controller.create_topics(request)
                return Error(response["topics"][0]["error_code"])
            answer = await controller_client.forward(request)
            return Error(answer.topics[0].error_code.value)

        return create_topics

    def _topic_configs_from_controller(self, controller_client):
        """topic_configs(name) -> the topic's overrides as the controller has them (None for
        no such topic): this node's controller's state, or a DescribeConfigs forwarded to
        the cluster's controller, as DescribeConfigs on a broker asks it (apis/configs.py)."""

        async def topic_configs(name: str) -> dict[str, str] | None:
            if self.controller is not None:
                topic = self.controller.state.topics.get(name)
                return dict(topic.configs) if topic is not None else None
            request = build_request(
                ApiKey.DESCRIBE_CONFIGS,
                {
                    "resources": [
                        {
                            "resource_type": TOPIC_RESOURCE,
                            "resource_name": name,
                            "configuration_keys": None,
                        }
                    ],
                    "include_synonyms": False,
                    "include_documentation": False,
                },
            )
            answer = await controller_client.forward(request)
            (result,) = answer.results
            if result.error_code.value != Error.NONE:
                return None
            return {
                c.name: c.value for c in result.configs if c.config_source == DYNAMIC_TOPIC_CONFIG
            }

        return topic_configs

    async def _start_schema_registry(self, control, controller_client) -> None:
        """The schema registry on its own listeners (schema.registry.listeners); its HTTP
        stack and schema libraries are imported only by a broker that serves it."""
        from minibroker.schema_registry.rest import serve_registry
        from minibroker.schema_registry.service import (
            SchemaRegistryCollector,
            SchemaRegistryService,
        )

        assert self.replicas is not None

        create_topics = self._create_topics_through_controller(controller_client)
        self.schema_registry = SchemaRegistryService(
            self.config, self.replicas, create_topics, self.scram_credentials, self.authorizer
        )
        await control.start(self.schema_registry.run)
        self.metrics.register(SchemaRegistryCollector(self.schema_registry))
        if self.iceberg is not None:
            # Iceberg topics with iceberg.mode=value_schema_id_prefix decode values with the
            # schemas of this registry, in process.
            self.iceberg.schemas = self.schema_registry
        bound = await control.start(
            serve_registry,
            self.schema_registry,
            self._registry_sockets,
        )
        log.info("schema registry listening on %s", ", ".join(bound))

    def _elected_controller(self, store, cluster_id: str) -> ControllerService:
        """The controller service this broker runs while ZooKeeper names it controller."""
        controller = ControllerService(
            self.config,
            cluster_id,
            monotonic_ms,
            self.metrics,
            authorizer=self.authorizer,
            store=store,
        )
        controller.local_scram_credentials = self.scram_credentials
        return controller

    def _controller_changed(self, controller: ControllerService | None) -> None:
        self.controller = controller

    def _controlled_shutdown_wanted(self) -> bool:
        """A broker of a cluster moves its leadership away first; a node that is its own
        controller has nowhere to move it."""
        return self.config.controlled_shutdown_enable and not self.config.is_controller

    async def _accept(
        self, listeners, connections, accepting: trio.CancelScope, closed: trio.Event
    ) -> None:
        """Serve every listener until ``accepting`` is cancelled, then close the listening
        sockets and set ``closed``; each connection remembers the listener it came in on.

        The sockets are closed here, after every accept loop has ended, never while one may
        still use them: a loop that a connection has just woken cannot be cancelled any more
        (its wait is over), and it would find its socket closed under it (trio's
        ClosedResourceError, which stopped a broker with exit code 1 on SIGTERM)."""
        try:
            with accepting:
                async with trio.open_nursery() as nursery:
                    for name, sockets in listeners:
                        for socket_listener in sockets:
                            nursery.start_soon(
                                self._accept_loop, name, socket_listener, connections
                            )
        finally:
            with trio.CancelScope(shield=True):
                for _name, sockets in listeners:
                    for socket_listener in sockets:
                        await socket_listener.aclose()
            closed.set()

    async def _accept_loop(self, listener_name: str, socket_listener, connections) -> None:
        """Accept connections on one socket and serve those the connection limits admit."""
        while True:
            try:
                stream = await socket_listener.accept()
            except OSError as error:
                if error.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                log.error("cannot accept a connection on %s: %s", listener_name, error)
                await trio.sleep(ACCEPT_PAUSE_SECONDS)
                continue
            try:
                peer = await self._admit(listener_name, stream, connections)
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            if peer is not None:
                connections.start_soon(self._serve_connection, listener_name, stream, peer)

    async def _admit(self, listener_name: str, stream, connections) -> "_Peer | None":
        """Kafka's ConnectionQuotas.inc for a connection just accepted, in its order: while
        the broker has max.connections, wait with it (so this listener accepts nothing more
        and new clients wait in the kernel's backlog, as Kafka's acceptor blocks), the
        inter-node listeners excepted; then the creation rates; then refuse it if its
        address has max.connections.per.ip. None when it was refused (and is closed, or
        closing)."""
        quotas = self.connection_quotas
        while not quotas.slot_available(listener_name):
            await self._slot_freed.park()
        try:
            address = normal_address(stream.socket.getpeername()[0])
        except (OSError, ValueError):
            await trio.aclose_forcefully(stream)
            return None
        if await self._creation_throttled(listener_name, address, stream, connections):
            return None
        limit = quotas.admit(listener_name, address)
        if limit is not None:
            log.info(
                "refused a connection from %s on %s: the address already has the"
                " configured maximum of %d connections (max.connections.per.ip)",
                address,
                listener_name,
                limit,
            )
            self.metrics.connections_closed.labels(listener_name, "max_connections_per_ip").inc()
            await trio.aclose_forcefully(stream)
            return None
        peer = _Peer(listener_name, address)
        self._peers[peer] = None
        if self.idle is not None:
            self.idle.touch(peer, trio.current_time())
        if quotas.over_limit():
            self._evict_for(peer)
        return peer

    async def _creation_throttled(self, listener_name: str, address: str, stream, connections):
        """Kafka's connection creation rates: past max.connection.creation.rate the acceptor
        waits out the throttle time before it goes on (the inter-node listeners exempt); an
        address past its connection_creation_rate quota has this connection closed after the
        throttle time (and it is not counted). True when the connection is refused."""
        rates = self.creation_rates
        protected = self.connection_quotas.is_protected(listener_name)
        if rates.broker_rate is not None and not protected:
            wait_ms = rates.broker_throttle_ms(monotonic_ms())
            if wait_ms:
                log.debug("max.connection.creation.rate: accepting again in %d ms", wait_ms)
                await trio.sleep(wait_ms / 1000)
        if self.quotas.version != self._ip_quotas_version:
            self._ip_quotas_version = self.quotas.version
            rates.update_ip_quotas(self.quotas.quotas)
        if not rates.ip_quotas:
            return False
        now_ms = monotonic_ms()
        wait_ms = rates.ip_throttle_ms(address, now_ms)
        if not wait_ms:
            return False
        if not protected:
            rates.unrecord_broker(now_ms)
        log.info(
            "refused a connection from %s on %s: over its connection_creation_rate quota;"
            " closing it in %d ms",
            address,
            listener_name,
            wait_ms,
        )
        self.metrics.connections_closed.labels(listener_name, "connection_creation_rate").inc()
        connections.start_soon(_close_later, stream, wait_ms / 1000)
        return True

    def _evict_for(self, newcomer: _Peer) -> None:
        """A connection on an inter-node listener took the broker over max.connections:
        close the least recently active connection of another listener (Kafka's
        closeExcessConnections), an idle one if there is one."""
        quotas = self.connection_quotas
        candidates = list(self.idle.least_recent()) if self.idle is not None else []
        candidates += list(self._peers)
        for peer in candidates:
            if (
                isinstance(peer, _Peer)
                and peer is not newcomer
                and not peer.reason
                and not quotas.is_protected(peer.listener)
            ):
                self._close(peer, "max_connections")
                return

    def _close(self, peer: _Peer, reason: str) -> None:
        peer.reason = reason
        peer.scope.cancel()
        self.metrics.connections_closed.labels(peer.listener, reason).inc()

    def _forget(self, peer: _Peer) -> None:
        """A connection has closed: its count, its idle entry and its memory go back."""
        self._peers.pop(peer, None)
        self._closed_since_trim += 1
        self.connection_quotas.release(peer.listener, peer.address)
        self._slot_freed.unpark_all()
        if self.idle is not None:
            self.idle.remove(peer)
        self._release_memory(peer)

    async def _expire_idle_connections(self, idle: IdleConnections) -> None:
        """Close each connection idle for connections.max.idle.ms (Kafka's Selector does it
        in every poll), sleeping until the least recently active one is due. A connection
        that becomes idle later is due later, so the sleep is never too long."""
        while True:
            now = trio.current_time()
            for peer in idle.expired(now):
                assert isinstance(peer, _Peer)
                log.info(
                    "closing the connection from %s on %s: idle for more than %d ms"
                    " (connections.max.idle.ms)",
                    peer.address,
                    peer.listener,
                    self.config.connections_max_idle_ms,
                )
                self._close(peer, "idle")
            deadline = idle.next_deadline()
            await trio.sleep_until(now + idle.max_idle if deadline is None else deadline)

    def _trim_memory(self, now_ms: int) -> None:
        """Give free heap pages back once many connections have closed: every
        TRIM_AFTER_CLOSED_CONNECTIONS, and at the end of a smaller wave (a tenth of that
        closed, then none for a whole check interval)."""
        closed = self._closed_since_trim
        wave_ended = closed >= TRIM_AFTER_CLOSED_CONNECTIONS // 10 and closed == self._closed_before
        self._closed_before = closed
        if _MALLOC_TRIM is not None and (closed >= TRIM_AFTER_CLOSED_CONNECTIONS or wave_ended):
            self._closed_since_trim = self._closed_before = 0
            gc.collect()
            _MALLOC_TRIM(0)

    async def _reserve_memory(self, peer: _Peer, size: int) -> None:
        """Take a request's declared size from the pool before its body is read, waiting
        while it does not fit (the connection is then not read: its bytes wait in the
        kernel, as Kafka mutes a channel when its memory pool is exhausted)."""
        pool = self.pool
        assert pool is not None
        while not pool.try_allocate(size):
            await self._pool_freed.park()
        peer.reserved = size

    def _release_memory(self, peer: _Peer) -> None:
        if peer.reserved and self.pool is not None:
            self.pool.release(peer.reserved)
            peer.reserved = 0
            self._pool_freed.unpark_all()

    async def _periodic_tasks(self) -> None:
        log_manager = self.log_manager
        assert log_manager is not None  # start() opens it before serving
        async with trio.open_nursery() as nursery:
            if self.replicas is not None:
                nursery.start_soon(
                    self._every,
                    self.config.log_retention_check_interval_ms,
                    self.replicas.run_retention,
                )
            if self.replicas is not None and self.config.log_cleaner_enable:
                cleaner = LogCleanerService(
                    self.config, self.replicas, log_manager, self.metrics, wall_clock_ms
                )
                nursery.start_soon(cleaner.run)
            # The flushes' fsyncs and the checkpoint files' writes run in worker threads
            # (replication/log_io.py), as Kafka runs them on its scheduler threads.
            nursery.start_soon(
                self._every,
                self.config.log_flush_offset_checkpoint_interval_ms,
                functools.partial(log_io.checkpoint, log_manager),
            )
            nursery.start_soon(self._every, TRIM_CHECK_INTERVAL_MS, self._trim_memory)
            # Kafka's PeriodicProducerExpirationCheck (UnifiedLog), one task for every log.
            nursery.start_soon(
                self._every,
                self.config.producer_id_expiration_check_interval_ms,
                log_manager.remove_expired_producers,
            )
            if self.config.log_flush_interval_ms is not None:
                nursery.start_soon(
                    self._every,
                    min(self.config.log_flush_interval_ms, 1000),
                    functools.partial(log_io.flush_due, log_manager),
                )

    async def _every(self, interval_ms: int, task) -> None:
        """Run ``task(now_ms)`` every interval (awaited when it is a coroutine function),
        the next run an interval after the last one ended."""
        while True:
            await trio.sleep(interval_ms / 1000)
            try:
                outcome = task(wall_clock_ms())
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                name = getattr(task, "__name__", None) or getattr(task, "func", task)
                log.exception("periodic task %s failed", name)

    async def _next_frame(
        self, stream, decoder: FrameDecoder, peer: _Peer, receive_buffer: memoryview | None = None
    ) -> bytearray | None:
        """The next request frame, or None when the peer closed or the broker is stopping.

        Large frames (big produce requests) are received straight into their own buffer, from
        the socket or decrypted by the TLS stream. On a plaintext connection, smaller ones are
        received into ``receive_buffer`` (the connection's, reused) and copied once into the
        decoder, with a non-blocking read straight on the socket that waits in trio only when
        nothing has arrived (``_receive_into``): no buffer allocated per read and no pass
        through the scheduler when the next request is already there (the response's send
        gave the other connections their turn). Each chunk received is activity that keeps
        the connection from expiring (connections.max.idle.ms). With queued.max.request.bytes
        a frame's declared size is taken from the memory pool before its body is read, and
        only the bytes of the current frame are received, so what the broker holds is bounded
        by the pool and not by what peers send or say they will send.
        """
        tls = isinstance(stream, TlsStream)
        idle, pool = self.idle, self.pool
        while (frame := decoder.next_frame()) is None:
            if self._stopping:
                return None
            received = 0
            with trio.CancelScope() as reading:
                self._idle_reads.add(reading)
                try:
                    if pool is not None and not peer.reserved and (size := decoder.declared_size()):
                        await self._reserve_memory(peer, size)
                    if (target := decoder.unfilled()) is not None:
                        with target:  # released before the decoder grows the buffer
                            if tls:
                                received = await stream.receive_into(target)
                            else:
                                received = await _receive_into(stream.socket.fileno(), target)
                        decoder.filled(received)
                    elif receive_buffer is not None:
                        wanted = len(receive_buffer)
                        if pool is not None:
                            wanted = min(wanted, decoder.missing())
                        received = await _receive_into(
                            stream.socket.fileno(), receive_buffer[:wanted]
                        )
                        decoder.feed(receive_buffer[:received])
                    else:
                        wanted = RECEIVE_SIZE if pool is None else decoder.missing()
                        data = await stream.receive_some(wanted)
                        received = len(data)
                        decoder.feed(data)
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                    return None
                finally:
                    self._idle_reads.discard(reading)
            if reading.cancelled_caught or not received:
                return None
            if idle is not None:
                idle.touch(peer, trio.current_time())
        return frame

    async def _muted(self, connection: Connection) -> None:
        """KIP-219: after a throttled response, read nothing more from the connection for
        the throttle time (Kafka mutes the channel); a shutdown ends the wait."""
        throttle_s, connection.throttle_ms = connection.throttle_ms / 1000, 0
        with trio.CancelScope() as muted:
            self._idle_reads.add(muted)
            try:
                await trio.sleep(throttle_s)
            finally:
                self._idle_reads.discard(muted)

    async def _serve_connection(self, listener_name: str, stream, peer: _Peer) -> None:
        try:
            with peer.scope:
                await self._serve_requests(listener_name, stream, peer)
            if peer.scope.cancelled_caught and not peer.reason:
                # The scope's deadline: still unauthenticated connections.max.idle.ms after
                # it was accepted.
                log.info(
                    "closing the connection from %s on %s: not authenticated within %d ms"
                    " (connections.max.idle.ms)",
                    peer.address,
                    listener_name,
                    self.config.connections_max_idle_ms,
                )
                self.metrics.connections_closed.labels(
                    listener_name, "authentication_timeout"
                ).inc()
        finally:
            self._forget(peer)

    async def _serve_requests(self, listener_name: str, stream, peer_state: _Peer) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            host, peer, port = "?", "?", None
        idle = self.idle
        decoder = FrameDecoder(self.config.socket_request_max_bytes)
        connection = Connection(f"/{host}", port=port)
        assert self.cluster_id is not None  # start() settles it before serving
        make_context = functools.partial(self._context, listener_name, connection, self.cluster_id)
        security = self.listener_security[listener_name]
        if security.uses_sasl:
            connection.sasl = SaslSession(security, self.scram_credentials)
            # Kafka's bound on what an unauthenticated client may make the broker buffer.
            decoder.max_frame_size = min(decoder.max_frame_size, SASL_MAX_RECEIVE_SIZE)
            decoder.limit_name = "sasl.server.max.receive.size (before authentication)"
            if idle is not None:
                # Kafka has no separate bound on authentication: an unauthenticated
                # connection must authenticate within connections.max.idle.ms of its
                # accept, whatever it sends meanwhile (see the README's Security).
                peer_state.scope.deadline = trio.current_time() + idle.max_idle
        receive_buffer = None
        # Produce responses held back while the next request, a Produce answered at once, was
        # already received: they go out with the next response in one write
        # (_answered_at_once).
        held: list = []
        held_count = 0
        produced = False
        try:
            if security.ssl_context is not None:  # security.uses_tls
                stream = TlsStream(stream, security.ssl_context)
                with trio.move_on_after(TLS_HANDSHAKE_TIMEOUT_SECONDS) as handshake:
                    await stream.do_handshake()
                if handshake.cancelled_caught:
                    raise CloseConnection("TLS handshake timed out")
                if not security.uses_sasl:
                    try:
                        connection.principal = certificate_principal(
                            stream.getpeercert(), security.principal_mapper
                        )
                    except NoMatchingRule as error:
                        # Kafka's principal builder fails the connection's authentication.
                        raise CloseConnection(
                            f"ssl.principal.mapping.rules give no principal: {error}"
                        ) from None
            else:
                connection.zero_copy = self.zero_copy
                receive_buffer = memoryview(bytearray(RECEIVE_BUFFER_SIZE))
            while (
                frame := await self._next_frame(stream, decoder, peer_state, receive_buffer)
            ) is not None:
                if idle is not None:
                    idle.remove(peer_state)
                session = connection.sasl
                if session is not None and session.raw_token_pending:
                    # After a v0 SaslHandshake the tokens come bare, without request headers.
                    reply = raw_step(session, bytes(frame), connection)
                    response: list | None = [len(reply).to_bytes(4, "big"), reply]
                    produced = False
                else:
                    header, body_offset = parse_request_header(frame)
                    if session is not None and not session.allows(header.api_key):
                        raise CloseConnection(
                            f"unexpected request {header.api_key} before SASL authentication"
                            if not session.authenticated
                            else "SASL session expired; only re-authentication is accepted"
                        )
                    response = await dispatch(header, frame, body_offset, make_context)
                    produced = header.api_key == ApiKey.PRODUCE
                hold = (
                    produced
                    and receive_buffer is not None
                    and not connection.throttle_ms
                    and held_count < self.max_held_responses
                    and _answered_at_once(decoder)
                )
                if response is not None and hold:
                    held += response
                    held_count += 1
                elif response is not None or held:
                    buffers = held + response if response is not None else held
                    held, held_count = [], 0
                    try:
                        await _send_buffers(stream, buffers, self.metrics.fetch_sendfile_bytes)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        return  # the client went away
                else:
                    # No response (acks=0) and so no send's checkpoint: the other connections'
                    # turn before the next request, which may be received without waiting.
                    await trio.lowlevel.checkpoint()
                if connection.throttle_ms:
                    await self._muted(connection)
                if session is not None and session.failed:
                    raise CloseConnection("SASL authentication failed")
                if session is not None and session.authenticated:
                    decoder.max_frame_size = self.config.socket_request_max_bytes
                    decoder.limit_name = "socket.request.max.bytes"
                    if peer_state.scope.deadline != math.inf:
                        peer_state.scope.deadline = math.inf
                if peer_state.reserved:
                    self._release_memory(peer_state)
                if idle is not None:
                    idle.touch(peer_state, trio.current_time())
        except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
            # A TLS handshake the peer broke off: a plain-text client, an untrusted or
            # expired certificate. Only this connection is affected.
            log.warning("closing connection from %s: %s", peer, error.__cause__ or error)
        except (FrameError, DecodeError, UnsupportedRequest, CloseConnection) as error:
            log.warning("closing connection from %s: %s", peer, error)
        except Exception:
            log.exception("unexpected error serving %s; closing its connection", peer)
        finally:
            if held:
                # The requests they answer were served: their answers go out before the close
                # (a bounded wait, even when the broker stops).
                with (
                    trio.CancelScope(
                        deadline=trio.current_time() + HELD_FLUSH_SECONDS, shield=True
                    ),
                    contextlib.suppress(
                        trio.BrokenResourceError, trio.ClosedResourceError, OSError
                    ),
                ):
                    await _send_buffers(stream, held)
            await trio.aclose_forcefully(stream)
            if connection.broker_id is not None and self.controller is not None:
                self.controller.broker_connection_lost(connection.broker_id)
            if self.shares is not None and self.shares.sessions.sessions:
                # Kafka's ShareSessionCache drops a closed connection's share sessions, and
                # their members' records become available to the others.
                with trio.CancelScope(
                    deadline=trio.current_time() + HELD_FLUSH_SECONDS, shield=True
                ):
                    await self.shares.connection_closed(connection)


def _answered_at_once(decoder: FrameDecoder) -> bool:
    """Whether the next request is already received whole and is a Produce with acks 0 or
    1, which is served without waiting for anything but the log's write: a Produce response
    may then wait for that request's, and both go out in one write (a pipelining producer's
    responses in one system call instead of one each). Kafka sends each response as soon as
    it is ready; here a response waits for at most MAX_HELD_RESPONSES such requests, each
    served at once (an acks=-1 Produce, waiting for its replicas, or any other request sends
    what is held first). Departure: a Produce to a topic that is auto-created first also
    holds the previous response for the creation."""
    head = decoder.peek(ACKS_PEEK_BYTES)
    return head is not None and produce_acks(head) in (0, 1)


async def _receive_into(fd: int, target: memoryview) -> int:
    """Receive into ``target`` from a non-blocking socket: read at once what has arrived,
    waiting in trio only while nothing has (as trio's recv_into, without its checkpoint
    after a read that did not wait). 0 is the peer's end of stream."""
    while True:
        try:
            return os.readv(fd, [target])
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)


async def _close_later(stream, seconds: float) -> None:
    """Kafka's DelayedCloseSocket: a throttled connection is held, unread, then closed, so
    that a client reconnecting at once does not spin."""
    try:
        await trio.sleep(seconds)
    finally:
        await trio.aclose_forcefully(stream)


# Linux's IOV_MAX: the most buffers one writev takes.
MAX_BUFFERS_PER_WRITE = 1024
# errno values of a sendfile that the file system or kernel cannot do (not of a broken
# socket): such a slice is read and written instead.
_SENDFILE_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})


def halt_process(status: int) -> None:
    """Kafka's Exit.halt: end the process now, without a clean shutdown (no checkpoint, no
    clean-shutdown marker, no handler run), once the log has been written out."""
    logging.shutdown()
    os._exit(status)


def _switched_on(variable: str) -> bool:
    """An on-by-default switch of the environment: off only when set to "0"."""
    return os.environ.get(variable, "1") != "0"


def holding_enabled() -> bool:
    """Whether a Produce response may wait for the next one (_answered_at_once).
    MINIBROKER_HOLD_RESPONSES=0 turns it off, for the benchmark that measures what it saves
    (BENCHMARKS.md 17); Kafka has no such setting."""
    return _switched_on("MINIBROKER_HOLD_RESPONSES")


def zero_copy_enabled() -> bool:
    """Whether plaintext connections send large Fetch reads with sendfile. Kafka always
    does and has no setting; MINIBROKER_SENDFILE=0 turns it off, for the benchmark that
    measures what it saves (BENCHMARKS.md 14) and as a way out on a file system that
    misbehaves under sendfile."""
    return _switched_on("MINIBROKER_SENDFILE")


async def _send_buffers(stream, buffers: list, sendfile_bytes=None) -> None:
    """Send a response given as buffers (a Fetch response's record sets are the objects read
    from the log) with writev, straight on the socket: one system call for the whole response
    when the socket buffer has room, and no pass through the scheduler. Only a full socket
    buffer waits, for writability, in trio.

    A record set read as FileRecords (a large read on a plaintext connection) goes with
    sendfile from the segment file, in its place in the response: the buffers before it are
    written first, then the slices, then the rest (Kafka's FileRecords.writeTo through
    PlaintextTransportLayer.transferFrom). ``sendfile_bytes`` counts what went that way. Its
    descriptors are closed once the response is sent or abandoned. A response cut off half
    way (the peer went away, the file was truncated underneath, the broker stops) leaves the
    connection unusable, and the caller closes it.

    The connection's task is the only writer of its socket, and receiving the next request
    always goes through trio's checkpoints, so bypassing SocketStream.send_all here loses
    neither its conflict detection nor fairness between connections. A peer that went away
    raises trio.BrokenResourceError, as send_all would. A TLS stream encrypts and sends
    the buffers itself (broker.tls), read from the files first if any are slices.
    """
    try:
        if isinstance(stream, TlsStream):
            await stream.send_buffers([materialize(buffer) for buffer in buffers])
            return
        fd = stream.socket.fileno()
        views: list[memoryview] = []
        for buffer in buffers:
            if isinstance(buffer, FileRecords):
                await _write_views(fd, views)
                views = []
                await _send_file_records(fd, buffer)
                if sendfile_bytes is not None:
                    sendfile_bytes.inc(len(buffer))
            elif len(view := memoryview(buffer).cast("B")):
                views.append(view)
        await _write_views(fd, views)
    finally:
        for buffer in buffers:
            if isinstance(buffer, FileRecords):
                buffer.close()
    # Let the other connections run before this one reads its next request, which may be
    # waiting in the buffer already (a pipelining client), as send_all's checkpoint did.
    await trio.lowlevel.checkpoint()


async def _write_views(fd: int, views: list[memoryview]) -> None:
    """Write every view, in order, with as few writev calls as the socket buffer allows."""
    first = 0  # views before this one are sent
    while first < len(views):
        group = views[first : first + MAX_BUFFERS_PER_WRITE]
        try:
            sent = os.writev(fd, group)
        except BlockingIOError:
            sent = 0
        except OSError as error:
            raise trio.BrokenResourceError(f"sending a response: {error!r}") from error
        socket_full = sent < sum(len(view) for view in group)
        while first < len(views) and sent >= len(views[first]):
            sent -= len(views[first])
            first += 1
        if sent:
            views[first] = views[first][sent:]
        if socket_full:
            await trio.lowlevel.wait_writable(fd)


async def _send_file_records(fd: int, records: FileRecords) -> None:
    """Send the slices with sendfile, waiting in trio whenever the socket buffer is full.

    A slice whose file now ends before the slice does (truncated in place after the read)
    cannot be sent whole; as Kafka's FileRecords.writeTo, that closes the connection
    (CloseConnection), since the response's length is already on the wire.
    """
    for file_fd, start, length in records.parts:
        position, end = start, start + length
        while position < end:
            try:
                sent = os.sendfile(fd, file_fd, position, end - position)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(fd)
                continue
            except OSError as error:
                if error.errno not in _SENDFILE_UNSUPPORTED:
                    raise trio.BrokenResourceError(f"sending a response: {error!r}") from error
                data = os.pread(file_fd, end - position, position)
                sent = len(data)
                await _write_views(fd, [memoryview(data)])
            if sent == 0:
                raise CloseConnection(
                    f"a segment file was truncated below {end} while {length} bytes from"
                    f" {start} were being sent"
                )
            position += sent
            if position < end:
                # A short sendfile: the socket buffer is full.
                await trio.lowlevel.wait_writable(fd)


def log_config_from(config: BrokerConfig) -> LogConfig:
    """The topic-level defaults that the broker's log.* properties set (Kafka's mapping)."""
    return LogConfig(
        segment_bytes=config.log_segment_bytes,
        segment_ms=config.log_roll_ms,
        segment_index_bytes=config.log_index_size_max_bytes,
        index_interval_bytes=config.log_index_interval_bytes,
        retention_ms=config.log_retention_ms,
        retention_bytes=config.log_retention_bytes,
        max_message_bytes=config.message_max_bytes,
        message_timestamp_type=config.log_message_timestamp_type,
        delete_retention_ms=config.log_cleaner_delete_retention_ms,
        min_cleanable_dirty_ratio=config.log_cleaner_min_cleanable_ratio,
        min_compaction_lag_ms=config.log_cleaner_min_compaction_lag_ms,
        max_compaction_lag_ms=config.log_cleaner_max_compaction_lag_ms,
        flush_messages=config.log_flush_interval_messages,
        flush_ms=LONG_MAX if config.log_flush_interval_ms is None else config.log_flush_interval_ms,
        min_insync_replicas=config.min_insync_replicas,
        unclean_leader_election_enable=config.unclean_leader_election_enable,
        cleanup_policy=config.log_cleanup_policy,
        compression_type=config.compression_type,
    )
