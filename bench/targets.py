"""The three things measured, behind one small interface: minibroker (one node, or a controller
and three brokers) started by the project's own launcher, librdkafka's mock cluster hosted by
`bench.mock_host`, and Apache Kafka 4 (one KRaft node, or three; `bench.kafka_ref`) when
java/fetch.sh has cached its jars.

Every measurement gets a fresh target, so that no run inherits another's logs, caches or
memory high-water mark, and both systems are started the same way each time.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from bench.procfs import cpu_seconds, peak_rss_bytes
from minibroker.tools.launcher import BrokerProcess, BrokerStartError, Cluster, free_port

MINIBROKER = "minibroker"
MOCK = "mock"
KAFKA = "kafka"
# The order runs alternate in.
SYSTEMS = (MINIBROKER, MOCK, KAFKA)

READY_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0
# A JVM stopped by SIGTERM runs its shutdown hooks (Kafka's controlled shutdown) and then exits
# with 128 + 15, unless something called System.exit(0) first.
CLEAN_JVM_EXITS = (0, 143)
ADMIN_TIMEOUT = 30.0
MOCK_EXIT_TIMEOUT = 10.0
SERVED_POLL_SECONDS = 0.05


class BenchError(RuntimeError):
    """A workload failed: the message says what the client reported and, for minibroker, ends
    with the tail of each node's log."""


class Skipped(Exception):
    """The system cannot be measured on this machine or in this run (why is the message)."""


def wait_until_served(
    bootstrap: str, name: str, partitions: int, failure: Callable[[str], BenchError]
) -> list[int]:
    """Every partition's end offset, once each partition's leader answers ListOffsets.

    CreateTopics answers once the controller has decided; the leaders then create the
    partitions' directories and files (milliseconds each on this machine's disk). The mock
    has its topic in memory as soon as it is made, so measuring from here keeps topic
    creation out of every system's figures.
    """
    wanted = {TopicPartition(name, index): OffsetSpec.latest() for index in range(partitions)}
    deadline = time.monotonic() + ADMIN_TIMEOUT
    while True:
        # A new client each time: one that saw the leader epoch of a stale Metadata answer
        # (the window between a leader change and its UpdateMetadata) keeps sending it,
        # and keeps getting FENCED_LEADER_EPOCH, instead of asking for Metadata again.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.list_offsets(wanted)
        try:
            return [futures[partition].result().offset for partition in wanted]
        except KafkaException as error:
            if time.monotonic() > deadline:
                raise failure(f"{name} not served within {ADMIN_TIMEOUT}s: {error}") from error
        finally:
            # A failed future holds its exception, whose traceback holds this frame, which
            # holds the futures: a cycle that kept every failed attempt's client alive until
            # the cyclic GC ran, its threads reconnecting to a target long stopped (Kafka's
            # first ListOffsets after CreateTopics often fails: two strays per Kafka run).
            del futures, admin
        time.sleep(SERVED_POLL_SECONDS)


def create_with_admin(
    bootstrap: str,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: dict[str, str],
    failure: Callable[[str], BenchError],
) -> None:
    """CreateTopics through AdminClient, then wait until every partition is served."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, partitions, replication_factor, config=configs)
    try:
        admin.create_topics([topic], request_timeout=ADMIN_TIMEOUT)[name].result()
    except Exception as error:
        raise failure(f"CreateTopics {name}: {error}") from error
    wait_until_served(bootstrap, name, partitions, failure)


def disk_bytes(directory: Path) -> int:
    """Bytes allocated on disk to the files under `directory`: Kafka preallocates each active
    segment's index files (10 MiB, sparse), so their length says nothing of what is there."""
    return sum(path.stat().st_blocks * 512 for path in directory.rglob("*") if path.is_file())


@dataclass(frozen=True)
class Usage:
    """Cumulative CPU seconds and peak resident memory of the process that serves the data."""

    cpu_seconds: float
    peak_rss_bytes: int


class Minibroker:
    """A single node (broker and controller in one process) or a 3-broker cluster, with its
    data in a temporary directory that is removed when it stops."""

    system = MINIBROKER

    def __init__(
        self,
        brokers: int,
        work_dir: Path,
        overrides: dict[str, str] | None = None,
        extra_listeners: tuple[str, ...] = (),
        fork: bool = False,
    ):
        self.base_dir = Path(tempfile.mkdtemp(prefix="minibroker-", dir=work_dir))
        self.topics: dict[str, int] = {}  # the partitions of each topic made by create_topic
        self.node: BrokerProcess | None = None
        self.cluster: Cluster | None = None
        self.killed: set[int] = set()
        if brokers == 1:
            self.node = BrokerProcess(
                1,
                self.base_dir / "node-1" / "data",
                free_port(),
                overrides or {},
                extra_listeners={name: free_port() for name in extra_listeners},
            )
            self.node.fork = fork
            self.node._launch()
            try:
                self.node.wait_ready(READY_TIMEOUT)
            except BaseException:
                self.node.kill()
                raise
            self.bootstrap = self.node.bootstrap
        elif overrides:
            raise BenchError("broker overrides are for single-node rows")
        else:
            self.cluster = Cluster.start(
                self.base_dir, brokers=brokers, timeout=READY_TIMEOUT, fork=fork
            )
            self.bootstrap = self.cluster.bootstrap

    @property
    def nodes(self) -> list[BrokerProcess]:
        return [self.node] if self.node is not None else self.cluster.nodes

    def kill_broker(self, node_id: int) -> None:
        """kill -9 of broker `node_id` of the cluster (the failover row); `close` then expects
        no clean exit from it."""
        self.cluster.brokers[node_id].kill()
        self.killed.add(node_id)

    def listener_bootstrap(self, name: str) -> str:
        """Where the single node's listener `name` (besides PLAINTEXT) is."""
        return f"127.0.0.1:{self.node.extra_listeners[name]}"

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        self.topics[name] = partitions
        create_with_admin(
            self.bootstrap, name, partitions, replication_factor, configs, self.failure
        )

    def restart_until_served(self, topic: str, partitions: int) -> tuple[float, int]:
        """Stop the single node cleanly, start it again on the same log directory, and return
        the seconds from the new process's launch until every partition of `topic` answers
        ListOffsets, with the end offsets' sum (the records it serves)."""
        if self.node is None:
            raise BenchError("restarts are measured on a single node only")
        exit_code = self.node.stop()
        if exit_code != 0:
            raise self.failure(f"broker exited with {exit_code} on SIGTERM")
        started = time.monotonic()
        self.node.restart()
        self.node.wait_ready(READY_TIMEOUT)
        end_offsets = self._wait_until_served(topic, partitions)
        return time.monotonic() - started, sum(end_offsets)

    def log_bytes(self) -> int:
        """Bytes on disk in the node's log directory (segments, indexes, checkpoints)."""
        return disk_bytes(self.base_dir)

    def _wait_until_served(self, name: str, partitions: int) -> list[int]:
        return wait_until_served(self.bootstrap, name, partitions, self.failure)

    def usage(self) -> Usage:
        """The single node's usage; a cluster's CPU is spread over four processes and is not
        one of the figures the harness reports."""
        if self.node is None:
            raise BenchError("usage is measured on a single node only")
        return Usage(cpu_seconds(self.node.pid), peak_rss_bytes(self.node.pid))

    def failure(self, what: str) -> BenchError:
        """A BenchError for `what` went wrong, with what each node logged last."""
        return BenchError(f"{what}\n{self.log_tails()}")

    def log_tails(self) -> str:
        return "\n".join(
            f"--- {node.stderr_path} (last lines):\n{node.log_tail()}" for node in self.nodes
        )

    def close(self) -> None:
        """Stop cleanly (a broker that crashes or hangs on the way out is an error worth
        reporting), then remove the data."""
        try:
            if self.node is not None:
                exit_code = self.node.stop()
                if exit_code != 0:
                    raise self.failure(f"broker exited with {exit_code} on SIGTERM")
            else:
                exit_codes = self.cluster.stop()
                unclean = {
                    node: code
                    for node, code in exit_codes.items()
                    if code != 0 and node not in self.killed
                }
                if unclean:
                    raise self.failure(f"nodes exited uncleanly on SIGTERM: {unclean}")
        except BrokerStartError as hung:
            raise BenchError(str(hung)) from hung
        finally:
            for node in self.nodes:
                if node.running:
                    node.kill()
            shutil.rmtree(self.base_dir, ignore_errors=True)


class Mock:
    """librdkafka's mock cluster with `brokers` brokers, in a `bench.mock_host` process.

    Its topics take no configs: the mock has no min.insync.replicas, and answers acks=all as
    soon as the batch is in the leader's in-memory log (its followers are bookkeeping only).
    """

    system = MOCK

    def __init__(self, brokers: int, work_dir: Path):
        self.log_path = Path(tempfile.mkstemp(prefix="mock-", suffix=".log", dir=work_dir)[1])
        self.topics: dict[str, int] = {}  # the partitions of each topic made by create_topic
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bench.mock_host", "--brokers", str(brokers)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        first = self._read_line()
        if not first.startswith("bootstrap "):
            self.close()
            raise BenchError(f"mock host said {first!r}; log:\n{self.log_path.read_text()}")
        self.bootstrap = first.split(" ", 1)[1]

    def _read_line(self) -> str:
        line = self.process.stdout.readline()
        if not line:
            raise BenchError(f"mock host exited; log:\n{self.log_path.read_text()}")
        return line.strip()

    def _ask(self, command: str) -> str:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._read_line()

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        self.topics[name] = partitions
        answer = self._ask(f"topic {name} {partitions} {replication_factor}")
        if answer != "ok":
            raise BenchError(f"mock topic {name}: {answer}")

    def usage(self) -> Usage:
        cpu, rss = self._ask("usage").split()
        return Usage(float(cpu), int(rss))

    def failure(self, what: str) -> BenchError:
        return BenchError(what)

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(MOCK_EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self.log_path.unlink(missing_ok=True)


class Kafka:
    """Apache Kafka 4 (kafka_2.13, KRaft) from the jars java/fetch.sh cached: one combined
    broker+controller node, or three (`bench.kafka_ref.KafkaCluster`), each JVM with the heap
    `bench.kafka_ref.KAFKA_HEAP` (512 MiB, G1) and 2 network and 2 I/O threads for these 2
    cores, Kafka's defaults otherwise (no fsync per write: the page cache, as minibroker). Its
    data lives in a temporary directory that is removed when it stops.

    Raises Skipped when there is no JVM or no cached class path."""

    system = KAFKA

    def __init__(
        self,
        brokers: int,
        work_dir: Path,
        overrides: dict[str, str] | None = None,
        extra_listeners: tuple[str, ...] = (),
    ):
        from bench.kafka_ref import KafkaCluster, missing_reason

        reason = missing_reason("kafka")
        if reason is not None:
            raise Skipped(reason)
        unknown = set(extra_listeners) - {"SSL"}
        if unknown:
            raise BenchError(f"no {sorted(unknown)} listener for Kafka here")
        self.base_dir = Path(tempfile.mkdtemp(prefix="kafka-", dir=work_dir))
        self.topics: dict[str, int] = {}  # the partitions of each topic made by create_topic
        try:
            self.cluster = KafkaCluster.start(
                self.base_dir, brokers, overrides, ssl="SSL" in extra_listeners
            )
        except (RuntimeError, subprocess.SubprocessError) as error:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            raise BenchError(f"Apache Kafka did not start: {error}") from error
        self.bootstrap = self.cluster.bootstrap
        self.killed: set[int] = set()

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        self.topics[name] = partitions
        create_with_admin(
            self.bootstrap, name, partitions, replication_factor, configs, self.failure
        )

    def kill_broker(self, node_id: int) -> None:
        """kill -9 of node `node_id` (broker and controller); `close` then expects no clean
        exit from it."""
        self.cluster.kill_node(next(n for n in self.cluster.nodes if n.node_id == node_id))
        self.killed.add(node_id)

    def listener_bootstrap(self, name: str) -> str:
        """Where the single node's SSL listener is."""
        if name != "SSL" or self._single.ssl_port is None:
            raise BenchError(f"no {name} listener")
        return f"127.0.0.1:{self._single.ssl_port}"

    @property
    def _single(self):
        if len(self.cluster.nodes) != 1:
            raise BenchError("this is measured on a single node only")
        return self.cluster.nodes[0]

    def restart_until_served(self, topic: str, partitions: int) -> tuple[float, int]:
        """As Minibroker.restart_until_served: SIGTERM (Kafka's controlled shutdown, a clean
        stop), then the seconds from the new JVM's launch until every partition of `topic`
        answers ListOffsets, and the end offsets' sum."""
        node = self._single
        node.process.send_signal(signal.SIGTERM)
        exit_code = node.process.wait(STOP_TIMEOUT)
        if exit_code not in CLEAN_JVM_EXITS:
            raise self.failure(f"Kafka exited with {exit_code} on SIGTERM")
        started = time.monotonic()
        self.cluster.launch(node)
        try:
            self.cluster.wait_ready(READY_TIMEOUT)
        except RuntimeError as error:
            raise self.failure(str(error)) from error
        end_offsets = wait_until_served(self.bootstrap, topic, partitions, self.failure)
        return time.monotonic() - started, sum(end_offsets)

    def log_bytes(self) -> int:
        """Bytes on disk in the node's log directory (segments, indexes, checkpoints)."""
        return disk_bytes(self._single.data_dir)

    def usage(self) -> Usage:
        """The JVM's usage (`java` itself is the process started: no wrapper script)."""
        pid = self._single.process.pid
        return Usage(cpu_seconds(pid), peak_rss_bytes(pid))

    def failure(self, what: str) -> BenchError:
        tails = "\n".join(
            f"--- {node.log_path} (last lines):\n{node.log_tail()}" for node in self.cluster.nodes
        )
        return BenchError(f"{what}\n{tails}")

    def close(self) -> None:
        try:
            codes = self.cluster.stop(STOP_TIMEOUT)
            unclean = {
                node: code
                for node, code in codes.items()
                if code not in CLEAN_JVM_EXITS and node not in self.killed
            }
            if unclean:
                raise self.failure(f"Kafka nodes exited uncleanly on SIGTERM: {unclean}")
        finally:
            self.cluster.kill()
            shutil.rmtree(self.base_dir, ignore_errors=True)


def start(
    system: str,
    brokers: int,
    work_dir: Path,
    overrides: dict[str, str] | None = None,
    extra_listeners: tuple[str, ...] = (),
    fork: bool = False,
) -> Minibroker | Mock | Kafka:
    """A fresh target; `overrides` are minibroker properties and `extra_listeners` its
    listeners besides PLAINTEXT. The overrides are Kafka's own property names, so Kafka gets
    them too (the group rows' zero initial rebalance delay, the SSL keystore); the mock has
    its own fixed settings (`bench.mock_host`). `fork` forks minibroker's nodes from the fork
    server (Sizes.fork_brokers)."""
    if system == MINIBROKER:
        return Minibroker(brokers, work_dir, overrides, extra_listeners, fork)
    if system == KAFKA:
        return Kafka(brokers, work_dir, overrides, extra_listeners)
    return Mock(brokers, work_dir)
