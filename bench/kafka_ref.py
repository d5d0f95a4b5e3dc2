"""Apache Kafka itself (kafka_2.13 4.x, KRaft), started from the jars java/fetch.sh resolved, as
the reference that tests and benchmarks compare minibroker with.

It starts Kafka exactly as `bin/kafka-storage.sh format` and `bin/kafka-server-start.sh` do,
minus the shell: `java -cp <kafka class path> kafka.tools.StorageTool format ...` once per node,
then `java ... kafka.Kafka server.properties`. Every node is a combined broker and controller
(`process.roles=broker,controller`) on a static quorum (`controller.quorum.voters`), one node or
three, with Kafka's own defaults except: a small heap for a 2-core machine, ports picked free
on 127.0.0.1, data in a given directory, no initial rebalance delay, and internal topics
replicated as widely as the cluster allows. Where Kafka's scripts set JVM options
(kafka-run-class.sh: G1, headless, a 1 GiB heap) this sets the same options with a 512 MiB heap.

Also here: where the class paths are (`classpath`), and why one is missing (`missing_reason`),
for everything that starts a JVM.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from minibroker.tools.launcher import _terminate_with_parent, free_port, request_metadata

REPO_ROOT = Path(__file__).resolve().parent.parent
CLASSPATH_DIR = REPO_ROOT / "build" / "java"
KAFKA_HEAP = "-Xmx512m"
# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS, less the explicit GC pause targets.
JVM_OPTIONS = ["-XX:+UseG1GC", "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"]
READY_TIMEOUT = 90.0


def java_executable() -> str | None:
    """The `java` on PATH or under JAVA_HOME; None when there is no JVM."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def missing_reason(module: str) -> str | None:
    """Why the class path of java/<module>/pom.xml cannot be used; None when it can."""
    if java_executable() is None:
        return "no Java runtime (apt-get install openjdk-17-jdk-headless)"
    path = CLASSPATH_DIR / f"{module}.classpath"
    if path.exists():
        return None
    missing = CLASSPATH_DIR / f"{module}.missing"
    if missing.exists():
        return missing.read_text().strip()
    return f"{path} does not exist: run java/fetch.sh (it resolves java/pom.xml with mvn)"


def classpath(module: str) -> str:
    """The class path java/fetch.sh wrote for java/<module>/pom.xml."""
    reason = missing_reason(module)
    if reason is not None:
        raise FileNotFoundError(reason)
    return (CLASSPATH_DIR / f"{module}.classpath").read_text().strip()


def random_cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A cluster id as `kafka-storage.sh random-uuid` prints it: a UUID, URL-safe base64, and
    never one that starts with "-" (Kafka's Uuid.randomUuid draws again then: such an id reads
    as an option on a command line; `kafka-storage.sh format -t -Vd...` failed so, once in 64
    starts, in a bench run)."""
    for _ in range(1000):  # one draw in 64 starts with "-": 1000 in a row never do
        cluster_id = base64.urlsafe_b64encode(random_bytes()).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id
    raise RuntimeError("random_bytes gave 1000 cluster ids starting with '-'")


@dataclass
class KafkaNode:
    node_id: int
    port: int
    controller_port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen | None = None
    # An SSL listener besides PLAINTEXT (its keystore comes from the cluster's overrides).
    ssl_port: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class KafkaCluster:
    """N combined broker+controller Kafka nodes; `bootstrap` lists them all."""

    base_dir: Path
    nodes: list[KafkaNode] = field(default_factory=list)
    overrides: dict[str, object] = field(default_factory=dict)
    # The JVM's heap options (KAFKA_HEAP_OPTS): KAFKA_HEAP unless a caller wants Kafka's own
    # default, ("-Xmx1G", "-Xms1G") as kafka-server-start.sh sets it.
    heap: tuple[str, ...] = (KAFKA_HEAP,)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def properties(self, node: KafkaNode) -> dict[str, object]:
        voters = ",".join(
            f"{other.node_id}@127.0.0.1:{other.controller_port}" for other in self.nodes
        )
        replication = min(3, len(self.nodes))
        listeners = f"PLAINTEXT://127.0.0.1:{node.port}"
        protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        advertised = listeners
        if node.ssl_port is not None:
            advertised += f",SSL://127.0.0.1:{node.ssl_port}"
            listeners = advertised
            protocols += ",SSL:SSL"
        return {
            "process.roles": "broker,controller",
            "node.id": node.node_id,
            "controller.quorum.voters": voters,
            "listeners": f"{listeners},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": protocols,
            "log.dirs": str(node.data_dir),
            "num.network.threads": 2,
            "num.io.threads": 2,
            "offsets.topic.replication.factor": replication,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": 1,
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            **self.overrides,
        }

    @classmethod
    def start(
        cls,
        base_dir: Path,
        nodes: int = 1,
        overrides: dict[str, object] | None = None,
        ssl: bool = False,
        heap: tuple[str, ...] = (KAFKA_HEAP,),
    ) -> KafkaCluster:
        """Format every node's storage, start the nodes, and return once every node's
        Metadata lists every broker. Kills what it started if that fails. With `ssl`, every
        node has an SSL listener too, configured by `overrides` (ssl.keystore.* and so on).
        `heap`: the JVM's heap options (KAFKA_HEAP_OPTS)."""
        base_dir = Path(base_dir)
        cluster = cls(base_dir, overrides=dict(overrides or {}), heap=tuple(heap))
        for node_id in range(1, nodes + 1):
            node_dir = base_dir / f"kafka-{node_id}"
            node_dir.mkdir(parents=True, exist_ok=True)
            cluster.nodes.append(
                KafkaNode(
                    node_id,
                    free_port(),
                    free_port(),
                    node_dir / "data",
                    node_dir / "kafka.log",
                    ssl_port=free_port() if ssl else None,
                )
            )
        java = java_executable()
        kafka_classpath = classpath("kafka")
        cluster_id = random_cluster_id()
        try:
            for node in cluster.nodes:
                config = node.data_dir.parent / "server.properties"
                config.write_text(
                    "".join(f"{key}={value}\n" for key, value in cluster.properties(node).items())
                )
                # kafka-storage.sh format -t <id> -c server.properties
                subprocess.run(
                    [java, KAFKA_HEAP, "-cp", kafka_classpath, "kafka.tools.StorageTool",
                     "format", "-t", cluster_id, "-c", str(config)],
                    check=True, capture_output=True, timeout=120,
                )  # fmt: skip
                cluster.launch(node)
            cluster.wait_ready()
        except BaseException:
            cluster.kill()
            raise
        return cluster

    def launch(self, node: KafkaNode) -> None:
        """Start `node`'s JVM on its formatted storage (kafka-server-start.sh)."""
        config = node.data_dir.parent / "server.properties"
        with node.log_path.open("ab") as log:
            node.process = subprocess.Popen(
                [java_executable(), *self.heap, *JVM_OPTIONS, "-cp", classpath("kafka"),
                 "kafka.Kafka", str(config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                # SIGTERM when the launching process dies, so no node outlives it.
                preexec_fn=_terminate_with_parent(os.getpid()),
            )  # fmt: skip

    def kill_node(self, node: KafkaNode) -> None:
        """kill -9 of one node."""
        if node.running:
            node.process.kill()
            node.process.wait()

    def restart_node(self, node: KafkaNode) -> None:
        """Start a killed node again on its data and wait until every node lists every
        broker."""
        self.launch(node)
        self.wait_ready()

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        expected = {node.node_id for node in self.nodes}
        for node in self.nodes:
            listed: set[int] = set()
            while listed != expected:
                if not node.running:
                    raise RuntimeError(f"Kafka node {node.node_id} exited:\n{node.log_tail()}")
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"Kafka node {node.node_id} lists brokers {sorted(listed)} after"
                        f" {timeout}s:\n{node.log_tail()}"
                    )
                try:
                    listed = {broker.node_id for broker in request_metadata(node.port).brokers}
                except OSError:
                    listed = set()
                time.sleep(0.2)

    def stop(self, timeout: float = 60.0) -> dict[int, int]:
        """SIGTERM every node (Kafka's controlled shutdown) and wait; kill what hangs."""
        for node in self.nodes:
            if node.running:
                node.process.send_signal(signal.SIGTERM)
        codes = {}
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                codes[node.node_id] = node.process.wait(timeout)
            except subprocess.TimeoutExpired:
                node.process.kill()
                codes[node.node_id] = node.process.wait()
        return codes

    def kill(self) -> None:
        for node in self.nodes:
            if node.running:
                node.process.kill()
                node.process.wait()


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="Start Apache Kafka (KRaft) as a reference.")
    parser.add_argument("--nodes", type=int, default=1)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kafka-ref-") as work:
        started = KafkaCluster.start(Path(work), arguments.nodes)
        print(f"bootstrap.servers={started.bootstrap}  (Ctrl-C stops)", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
        finally:
            print(started.stop())
