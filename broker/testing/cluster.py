"""`Cluster`: a real minibroker cluster for an application's tests, with faults on demand.

Kafka's counterpart is the test harness of its own code base (``kafka.testkit.KafkaClusterTestKit``
and ``kafka.integration.KafkaServerTestHarness``): real brokers in the test, a few calls to
kill or restart one. What the harness has, kept: every node is the real server (here a process
started by minibroker.tools.launcher, as `minibroker dev` starts it), readiness is judged by a
Kafka request, and leadership and ISRs are read from Metadata, as a client would read them.
What it adds: faults of the network without root (minibroker.testing.proxy; every listener a
client or another broker reaches is behind a proxy), a paused process (SIGSTOP) beside a killed
one, and errors that say which node and why.

Nodes are named by their ids: brokers 1..N, and the controller 0 when the cluster has a
controller process of its own (KRaft with more than one broker; a single broker is its own
controller, and in the ZooKeeper mode the controller is one of the brokers).
"""

from __future__ import annotations

import datetime
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kio.schema.create_topics.v5.request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from minibroker.testing.proxy import BROKER, CLIENT, Proxy, ProxyHub
from minibroker.tools import launcher
from minibroker.tools.launcher import (
    CONTROLLER_NODE_ID,
    BrokerProcess,
    BrokerStartError,
    ZooKeeperServer,
    free_port,
)
from minibroker.tools.wire import connect

CLIENT_LISTENER = "PLAINTEXT"
INTER_BROKER_LISTENER = "INTERNAL"
CONTROLLER_LISTENER = "CONTROLLER"
SECURE_LISTENER = "SASL_SSL"
ADMIN_CLIENT_ID = "minibroker-testing"
ADMIN_TIMEOUT = 30.0
STARTUP_TIMEOUT = 60.0
POLL_INTERVAL = 0.05
# What a test cluster changes from Kafka's defaults, as Kafka's own test harness and
# testcontainers do: internal topics no larger than the cluster, and no wait before a
# consumer group's first rebalance. Any of them can be set again through server_properties.
MAX_REPLICATION_FACTOR = 3
TEST_DEFAULTS = {"group.initial.rebalance.delay.ms": "0"}
LOG_LINES = 200


class ClusterError(RuntimeError):
    """A fault or a question that the cluster cannot take as asked."""


class UnknownNodeError(ClusterError, KeyError):
    """A node id that is not in the cluster."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class NodeNotRunningError(ClusterError):
    """A fault asked of a node that is not running (killed, stopped, or exited)."""


class ClusterStartError(BrokerStartError):
    """The cluster did not become ready; the message ends with the failing node's log tail."""


class Cluster:
    """A minibroker cluster of ``brokers`` brokers on 127.0.0.1, as a context manager::

        with Cluster(brokers=3) as cluster:
            cluster.create_topic("orders", partitions=3, replication_factor=3)
            producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})

    ``server_properties`` go to every node (Kafka's names, as in server.properties).
    ``data_dir`` holds each node's data and log (a temporary directory, removed on close,
    when not given). ``secure`` adds a SASL_SSL listener to every broker with a throwaway CA
    and users (``secure_bootstrap_servers``, ``client_config(secure=True)``); ``zookeeper``
    runs the ZooKeeper mode on a local ZooKeeper (the Debian package's). ``fork`` (the
    default) forks the nodes from the launcher's fork server, which imported the broker once,
    instead of starting a Python interpreter per node: a node's start drops from about a CPU
    second to a tenth of one. ``schema_registry`` serves the schema registry on every broker
    (``schema_registry_url``; not through a proxy, and not in the ZooKeeper mode yet).
    """

    def __init__(
        self,
        brokers: int = 3,
        *,
        server_properties: Mapping[str, object] | None = None,
        data_dir: str | Path | None = None,
        secure: bool = False,
        zookeeper: bool = False,
        startup_timeout: float = STARTUP_TIMEOUT,
        fork: bool = True,
        schema_registry: bool = False,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"a cluster needs at least one broker, not {brokers}")
        self.broker_count = brokers
        self.server_properties = {
            key: str(value) for key, value in (server_properties or {}).items()
        }
        self.secure = secure
        self.zookeeper = zookeeper
        self.startup_timeout = startup_timeout
        self.fork = fork
        self.schema_registry = schema_registry and not zookeeper
        self._own_data_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self._hub: ProxyHub | None = None
        self._cluster: launcher.Cluster | None = None
        self._zookeeper: ZooKeeperServer | None = None
        self._secure_dev: Any = None
        self._stopped: dict[int, str] = {}  # node id -> how it went down
        self._closed_nodes: list[BrokerProcess] = []  # for logs() after close()
        self.unclean_shutdowns: list[str] = []

    # -- life cycle ---------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Cluster:
        """Start every node and return once clients can use the cluster: every broker
        answers and lists every broker. Raises ClusterStartError (with the log tail of the
        node that failed) and leaves nothing running when it cannot."""
        if self._cluster is not None:
            raise ClusterError("the cluster is already started")
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="minibroker-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._hub = ProxyHub(self._node_pids)
        self._hub.start()
        try:
            self._start_nodes()
        except BaseException:
            self._hub.close()
            self._hub = None
            if self._zookeeper is not None:
                self._zookeeper.kill()
            raise
        return self

    def _start_nodes(self) -> None:
        assert self._hub is not None and self.data_dir is not None
        single = self.broker_count == 1 and not self.zookeeper
        kraft_controller = not single and not self.zookeeper
        # The proxies first: their ports are what the nodes advertise.
        advertised: dict[int, dict[str, int]] = {}
        for node_id in range(1, self.broker_count + 1):
            listeners = {CLIENT_LISTENER: CLIENT, INTER_BROKER_LISTENER: BROKER}
            if self.secure:
                listeners[SECURE_LISTENER] = CLIENT
            advertised[node_id] = {
                name: self._hub.add(node_id, name, kind).port for name, kind in listeners.items()
            }
        if kraft_controller:
            advertised[CONTROLLER_NODE_ID] = {
                CONTROLLER_LISTENER: self._hub.add(
                    CONTROLLER_NODE_ID, CONTROLLER_LISTENER, BROKER
                ).port
            }
        properties = self._properties()
        # Every port chosen before any node starts, so that each proxy knows its target when
        # the first broker connects through it.
        ports = {node_id: free_port() for node_id in advertised}
        listener_ports = {
            node_id: {name: free_port() for name in names if name != CLIENT_LISTENER}
            for node_id, names in advertised.items()
            if node_id != CONTROLLER_NODE_ID
        }
        for proxy in self._hub.proxies:
            named = listener_ports.get(proxy.node_id, {})
            proxy.target_port = named.get(proxy.listener, ports[proxy.node_id])
        zookeeper_connect = None
        if self.zookeeper:
            if not launcher.zookeeper_installed():
                raise ClusterError("zookeeper=True needs ZooKeeper (apt-get install zookeeper)")
            self._zookeeper = ZooKeeperServer.start(self.data_dir / "zookeeper" / "data")
            zookeeper_connect = self._zookeeper.connect_string()
        if single:
            # Its own controller: reached on its inter-broker listener itself, not through a
            # proxy (a cut from the clients must not cut the node from itself).
            internal = listener_ports[1][INTER_BROKER_LISTENER]
            properties["controller.quorum.voters"] = f"1@127.0.0.1:{internal}"
        try:
            self._cluster = launcher.Cluster.start(
                self.data_dir,
                self.broker_count,
                overrides=properties,
                ports=ports,
                timeout=self.startup_timeout,
                listener_ports=listener_ports,
                zookeeper_connect=zookeeper_connect,
                advertised_ports=advertised,
                all_at_once=True,
                single_node=single,
                fork=self.fork,
                schema_registry=self.schema_registry,
            )
        except BrokerStartError as error:
            raise ClusterStartError(
                f"the minibroker cluster in {self.data_dir} did not start: {error}"
            ) from None

    def _properties(self) -> dict[str, object]:
        replication = min(self.broker_count, MAX_REPLICATION_FACTOR)
        properties: dict[str, object] = {
            **TEST_DEFAULTS,
            "offsets.topic.replication.factor": replication,
            "default.replication.factor": replication,
            "listener.security.protocol.map": ",".join(
                f"{name}:{protocol}"
                for name, protocol in (
                    (CLIENT_LISTENER, "PLAINTEXT"),
                    (INTER_BROKER_LISTENER, "PLAINTEXT"),
                    (CONTROLLER_LISTENER, "PLAINTEXT"),
                    *(((SECURE_LISTENER, "SASL_SSL"),) if self.secure else ()),
                )
            ),
        }
        if self.secure:
            from minibroker.tools.dev_secure import prepare

            assert self.data_dir is not None
            self._secure_dev = prepare(self.data_dir)
            secure = self._secure_dev.broker_properties()
            secure.pop("listener.security.protocol.map")
            properties.update(secure)
        properties["inter.broker.listener.name"] = INTER_BROKER_LISTENER
        properties.update(self.server_properties)
        return properties

    def close(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL for one that hangs), close the proxies, and
        remove the data directory if the Cluster made it.

        ``unclean_shutdowns`` then says what went wrong on the way, one line per node with the
        end of its log: a node that exited on its own before (a crash; not one the test
        killed or stopped), one whose exit code on SIGTERM was not 0, one that hung and was
        killed. It is empty after a clean shutdown; the pytest plugin fails the test that
        tears the cluster down otherwise."""
        try:
            if self._cluster is not None:
                self._closed_nodes = nodes = self._cluster.nodes
                self.unclean_shutdowns = [
                    f"{node.kind} {node.node_id} exited with code {node.exit_code} before the"
                    f" cluster was closed; log tail:\n{node.log_tail(10)}"
                    for node in nodes
                    if node.started and not node.running and node.node_id not in self._stopped
                ]
                running = {node.node_id for node in nodes if node.running}
                # Faults would only slow the controlled shutdowns down.
                if self._hub is not None:
                    self.heal()
                for node in nodes:
                    if node.running and node.paused:
                        node.resume()
                try:
                    codes = self._cluster.stop()
                except BrokerStartError as hung:
                    # A node that hung was killed: nothing is left running either way.
                    self.unclean_shutdowns.append(str(hung))
                else:
                    self.unclean_shutdowns += [
                        f"{node.kind} {node.node_id} exited with code {codes[node.node_id]} on"
                        f" SIGTERM; log tail:\n{node.log_tail(10)}"
                        for node in nodes
                        if node.node_id in running and codes.get(node.node_id, 0) != 0
                    ]
        finally:
            self._cluster = None
            if self._hub is not None:
                self._hub.close()
                self._hub = None
            if self._zookeeper is not None:
                self._zookeeper.kill()
                self._zookeeper = None
            if self._own_data_dir and self.data_dir is not None:
                shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- what clients need --------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """Every broker's client address (its proxy), as bootstrap.servers takes them."""
        return self._addresses(CLIENT_LISTENER)

    @property
    def secure_bootstrap_servers(self) -> str:
        """The SASL_SSL addresses of a ``secure`` cluster."""
        if not self.secure:
            raise ClusterError("the cluster was not started with secure=True")
        return self._addresses(SECURE_LISTENER)

    @property
    def schema_registry_urls(self) -> list[str]:
        """Every broker's schema registry address (any of them serves the registry)."""
        if not self.schema_registry:
            raise ClusterError("the cluster was not started with schema_registry=True")
        cluster = self._require_cluster()
        return [url for node in cluster.brokers.values() if (url := node.schema_registry_url)]

    @property
    def schema_registry_url(self) -> str:
        """The schema registry's address, as schema.registry.url takes it (every broker's)."""
        return ",".join(self.schema_registry_urls)

    def client_config(self, secure: bool = False) -> dict[str, str]:
        """librdkafka's (confluent-kafka's) configuration for this cluster; with ``secure``,
        SASL_SSL with SCRAM-SHA-512 as the user ``alice`` and the throwaway CA."""
        if not secure:
            return {"bootstrap.servers": self.bootstrap_servers}
        dev = self._secure_dev
        return {
            "bootstrap.servers": self.secure_bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": dev.passwords["alice"],
            "ssl.ca.location": str(dev.ca_path),
        }

    def _addresses(self, listener: str) -> str:
        hub = self._require_hub()
        return ",".join(
            proxy.address
            for proxy in hub.proxies
            if proxy.listener == listener and proxy.node_id != CONTROLLER_NODE_ID
        )

    @property
    def node_ids(self) -> list[int]:
        """Every node's id: the controller's (0) first when it is a process of its own."""
        return [node.node_id for node in self._require_cluster().nodes]

    @property
    def broker_ids(self) -> list[int]:
        return list(self._require_cluster().brokers)

    def node(self, node_id: int) -> BrokerProcess:
        """The launcher's handle on one node (its pid, port, log file and data directory)."""
        cluster = self._require_cluster()
        for node in cluster.nodes:
            if node.node_id == node_id:
                return node
        raise UnknownNodeError(
            f"no node {node_id!r} in this cluster; its nodes are {self.node_ids}"
            + (" (0 is the controller)" if cluster.controller is not None else "")
        )

    def proxy(self, node_id: int, listener: str = CLIENT_LISTENER) -> Proxy:
        """The proxy in front of one listener of a node (PLAINTEXT, INTERNAL, SASL_SSL, or
        CONTROLLER for the controller)."""
        self.node(node_id)
        for proxy in self._require_hub().of(node_id):
            if proxy.listener == listener:
                return proxy
        raise ClusterError(f"node {node_id} has no {listener} listener")

    # -- admin --------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        configs: Mapping[str, object] | None = None,
        timeout: float = ADMIN_TIMEOUT,
    ) -> None:
        """Create a topic (CreateTopics) and return once every running broker knows a
        leader for each of its partitions. ``replication_factor`` defaults to the
        cluster's (one replica per broker, at most 3). Raises ClusterError with Kafka's
        error name when the cluster refuses."""
        request = CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name=TopicName(name),
                    num_partitions=i32(partitions),
                    replication_factor=i16(
                        -1 if replication_factor is None else replication_factor
                    ),
                    assignments=(),
                    configs=tuple(
                        CreatableTopicConfig(name=key, value=str(value))
                        for key, value in (configs or {}).items()
                    ),
                ),
            ),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=timeout)),
        )
        response = self._admin_request(request, timeout)
        for result in response.topics:
            if result.error_code != 0:
                raise ClusterError(
                    f"CreateTopics {name}: {result.error_code.name}"
                    + (f" ({result.error_message})" if result.error_message else "")
                )
        self._wait(
            lambda: all(
                self.leader_of(name, partition) not in (None, -1) for partition in range(partitions)
            ),
            timeout,
            f"a leader for every partition of {name}",
        )

    def _admin_request(self, request: Any, timeout: float) -> Any:
        """One request to the first running, unpaused broker not cut off from the others
        that takes it, on its listener itself (never through a proxy: the cluster's own
        questions see past the faults)."""
        errors = []
        cluster = self._require_cluster()
        for node in (cluster.brokers[witness] for witness in self._witnesses()):
            try:
                with connect(("127.0.0.1", node.port), timeout, client_id=ADMIN_CLIENT_ID) as c:
                    return c.call(request)
            except OSError as error:
                errors.append(f"broker {node.node_id}: {error}")
        raise ClusterError("no broker answered: " + ("; ".join(errors) or "none is running"))

    def _witnesses(self) -> list[int]:
        """The brokers whose Metadata the cluster's questions trust: running, not paused and
        not cut off from the other nodes (such a broker answers from what it knew before)."""
        hub = self._require_hub()
        return [
            node.node_id
            for node in self._require_cluster().brokers.values()
            if node.running and not node.paused and node.node_id not in hub.isolated
        ]

    def _partition(self, topic: str, partition: int, via: int | None = None) -> Any:
        cluster = self._require_cluster()
        for witness in [via] if via is not None else self._witnesses():
            state = cluster.partition_metadata(topic, partition, via=witness)
            if state is not None:
                return state
        return None

    def leader_of(self, topic: str, partition: int = 0) -> int | None:
        """The partition's leader as Metadata reports it (-1 while it has none), or None
        while no reachable broker knows the partition."""
        state = self._partition(topic, partition)
        return None if state is None else int(state.leader_id)

    def isr_of(self, topic: str, partition: int = 0) -> frozenset[int] | None:
        """The partition's ISR as Metadata reports it, or None while no broker knows it."""
        state = self._partition(topic, partition)
        return None if state is None else frozenset(int(node) for node in state.isr_nodes)

    def replicas_of(self, topic: str, partition: int = 0) -> list[int] | None:
        state = self._partition(topic, partition)
        return None if state is None else [int(node) for node in state.replica_nodes]

    def wait_until_in_sync(
        self, topic: str, partition: int | None = None, timeout: float = ADMIN_TIMEOUT
    ) -> None:
        """Block until every replica of the partition (of every partition of the topic when
        ``partition`` is None) is in its ISR, as every running, unpaused broker reports it.
        Raises TimeoutError with the last views."""
        cluster = self._require_cluster()

        def partitions() -> list[int]:
            if partition is not None:
                return [partition]
            response = cluster.metadata([topic])
            if response is None:
                return []
            return [
                state.partition_index
                for entry in response.topics
                if entry.name == topic and entry.error_code == 0
                for state in entry.partitions
            ]

        def lagging() -> dict[str, object]:
            """What is not in sync yet, by partition and by the broker that says so."""
            indexes = partitions()
            if not indexes:
                return {topic: "unknown"}
            behind: dict[str, object] = {}
            for witness in self._witnesses():
                for index in indexes:
                    state = self._partition(topic, index, via=witness)
                    if state is None:
                        behind[f"{topic}-{index} by broker {witness}"] = "unknown"
                    elif set(state.isr_nodes) != set(state.replica_nodes):
                        behind[f"{topic}-{index} by broker {witness}"] = (
                            f"ISR {sorted(state.isr_nodes)} of replicas"
                            f" {sorted(state.replica_nodes)}"
                        )
            return behind

        deadline = time.monotonic() + timeout
        while behind := lagging():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"not in sync after {timeout}s: {behind}")
            time.sleep(POLL_INTERVAL)

    # -- process faults -----------------------------------------------------------------------

    def kill(self, node_id: int) -> None:
        """SIGKILL the node, as a crash: no shutdown code runs."""
        self._running(node_id, "kill").kill()
        self._stopped[node_id] = "killed"

    def stop(self, node_id: int, timeout: float = 30.0) -> int:
        """Stop the node cleanly (SIGTERM: a broker's controlled shutdown, which moves its
        leaderships away first); return its exit code."""
        node = self._running(node_id, "stop")
        code = node.stop(timeout)
        self._stopped[node_id] = "stopped"
        return code

    def restart(self, node_id: int, timeout: float = STARTUP_TIMEOUT) -> None:
        """Start the node again on its ports and data (stopping it cleanly first if it
        runs), and return once it answers and every broker lists every running broker."""
        node = self.node(node_id)
        if node.running and node.paused:
            node.resume()
        node.restart()
        self._stopped.pop(node_id, None)
        try:
            node.wait_ready(timeout)
            self._require_cluster().wait_ready(timeout)
        except BrokerStartError as error:
            raise ClusterStartError(f"node {node_id} did not come back: {error}") from None

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the node keeps its connections and answers nothing, like a stalled
        machine (a long GC pause, a frozen VM); ``resume`` continues it."""
        node = self._running(node_id, "pause")
        if node.paused:
            raise ClusterError(f"node {node_id} is already paused")
        node.pause()

    def resume(self, node_id: int) -> None:
        node = self._running(node_id, "resume")
        if not node.paused:
            raise ClusterError(f"node {node_id} is not paused")
        node.resume()

    # -- network faults -----------------------------------------------------------------------

    def add_latency(self, node_id: int, ms: float) -> None:
        """Every answer of the node reaches its peer (a client or another broker) ``ms``
        later, so each round trip to it takes that much longer; replaces a previous value."""
        if ms < 0:
            raise ValueError(f"latency must be >= 0 ms, not {ms}")
        self._running(node_id, "add latency to")
        self._require_hub().set_latency(node_id, ms / 1000)

    def limit_bandwidth(self, node_id: int, bytes_per_s: int) -> None:
        """Each connection to the node carries at most ``bytes_per_s`` in each direction."""
        if bytes_per_s <= 0:
            raise ValueError(f"bandwidth must be > 0 bytes/s, not {bytes_per_s}")
        self._running(node_id, "limit the bandwidth of")
        self._require_hub().set_bandwidth(node_id, int(bytes_per_s))

    def drop_connections(self, node_id: int) -> int:
        """Close every open connection to the node (clients reconnect); returns how many."""
        self._running(node_id, "drop the connections of")
        return self._require_hub().drop(node_id)

    def cut_off(self, node_id: int, from_clients: bool = True, from_brokers: bool = True) -> None:
        """Partition the node from the clients, from the other nodes (brokers and
        controller), or both: its connections stop carrying bytes, as across a lost network,
        until ``heal``."""
        if not (from_clients or from_brokers):
            raise ValueError("cut the node off from clients, from brokers, or both")
        self._running(node_id, "cut off")
        self._require_hub().cut(node_id, from_clients, from_brokers)

    def heal(self, node_id: int | None = None) -> None:
        """Remove the network faults of one node, or of every node."""
        hub = self._require_hub()
        for each in [self.node(node_id).node_id] if node_id is not None else self.node_ids:
            hub.heal(each)

    def reset(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Undo every fault: heal the network, resume paused nodes, restart nodes that are
        down; what a shared (module or session) cluster gets between two tests."""
        self.heal()
        for node in self._require_cluster().nodes:
            if node.running and node.paused:
                node.resume()
        for node in self._require_cluster().nodes:
            if not node.running:
                self.restart(node.node_id, timeout)

    # -- logs ---------------------------------------------------------------------------------

    def log_path(self, node_id: int) -> Path:
        return self.node(node_id).stderr_path

    def logs(self, lines: int = LOG_LINES) -> dict[str, str]:
        """The last ``lines`` of every node's log, by "broker-1", "controller-0"..."""
        nodes = self._cluster.nodes if self._cluster is not None else self._closed_nodes
        return {f"{node.kind}-{node.node_id}": node.log_tail(lines) for node in nodes}

    # -- helpers ------------------------------------------------------------------------------

    def _require_cluster(self) -> launcher.Cluster:
        if self._cluster is None:
            raise ClusterError("the cluster is not running: use it inside `with Cluster(...)`")
        return self._cluster

    def _require_hub(self) -> ProxyHub:
        if self._hub is None:
            raise ClusterError("the cluster is not running: use it inside `with Cluster(...)`")
        return self._hub

    def _running(self, node_id: int, what: str) -> BrokerProcess:
        node = self.node(node_id)
        if not node.running:
            how = self._stopped.get(node_id) or f"exited with code {node.exit_code}"
            raise NodeNotRunningError(
                f"cannot {what} node {node_id}: it is not running ({how}); restart({node_id})"
                f" starts it again. Log tail:\n{node.log_tail(10)}"
            )
        return node

    def _node_pids(self) -> dict[int, int]:
        cluster = self._cluster
        if cluster is None:
            return {}
        return {node.pid: node.node_id for node in cluster.nodes if node.running}

    def _wait(self, condition: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(POLL_INTERVAL)

    def __repr__(self) -> str:
        state = "running" if self._cluster is not None else "not running"
        return f"<minibroker Cluster of {self.broker_count} broker(s), {state}>"
