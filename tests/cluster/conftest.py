"""A 3-broker cluster per test, and the helpers the failover tests share.

The cluster runs with timeouts ten to twenty times shorter than Kafka's defaults, so that a
dead broker is fenced, a stalled follower leaves the ISR and a checkpoint is written within
about a second; the rules themselves are Kafka's. Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest
from kio.schema.produce.v8.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v8.response import PartitionProduceResponse

from minibroker.tools.launcher import BrokerProcess, BrokerStartError, Cluster
from tests.conftest import confluent_read_all, exchange, wait_for
from tests.security_setup import SCRAM_JAAS, Certificates
from tests.unit.batch_factory import make_batch

BROKERS = 3
HEARTBEAT_INTERVAL_MS = 200
SESSION_TIMEOUT_MS = 1500
REPLICA_LAG_TIME_MS = 1500
REPLICA_FETCH_WAIT_MS = 500
CHECKPOINT_INTERVAL_MS = 500

CLUSTER_OVERRIDES = {
    "broker.heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
    "broker.session.timeout.ms": SESSION_TIMEOUT_MS,
    "replica.lag.time.max.ms": REPLICA_LAG_TIME_MS,
    "replica.fetch.wait.max.ms": REPLICA_FETCH_WAIT_MS,
    "replica.high.watermark.checkpoint.interval.ms": CHECKPOINT_INTERVAL_MS,
    "group.initial.rebalance.delay.ms": 0,
}

# The tests that fill a log dir mount a tmpfs for it (test_full_disk.py, test_log_dir_failure.py).
NEEDS_TMPFS = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("mount") is None, reason="needs root to mount a tmpfs"
)

# Long enough for a fenced broker, a leader election and a client's metadata refresh on two
# busy cores, short enough that a broken cluster fails the test instead of stalling CI.
CONVERGENCE_TIMEOUT = 30.0
SEGMENT_NAME = re.compile(r"^\d{20}\.log$")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A controller and three brokers with short timeouts, in this test's temporary directory.

    At teardown every node still running must stop on SIGTERM with exit code 0. A node that is
    already gone must have been killed by the test (SIGKILL) or stopped cleanly; any other exit
    is a crash and fails the test.
    """
    started = Cluster.start(tmp_path, brokers=BROKERS, overrides=CLUSTER_OVERRIDES)
    yield started
    _check_clean_stop(started)


def secured_inter_broker_overrides(certificates: Certificates) -> dict[str, str]:
    """Every broker replicates over an INTERNAL SASL_SSL listener (SCRAM-SHA-512, the brokers'
    own login bootstrapped from its JAAS config) while clients keep PLAINTEXT; the controller
    reaches the brokers on INTERNAL too, with the same shared properties."""
    return {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
        "INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.internal.ssl.keystore.type": "PEM",
        "listener.name.internal.ssl.keystore.location": str(certificates.broker_path),
        "listener.name.internal.ssl.truststore.type": "PEM",
        "listener.name.internal.ssl.truststore.location": str(certificates.ca_path),
    }


@pytest.fixture
def sasl_ssl_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """The `cluster` fixture with a SASL_SSL inter-broker listener (see
    secured_inter_broker_overrides); same teardown checks."""
    certificates = Certificates.make(tmp_path / "certs")
    started = Cluster.start(
        tmp_path,
        brokers=BROKERS,
        overrides={**CLUSTER_OVERRIDES, **secured_inter_broker_overrides(certificates)},
        broker_listeners={"INTERNAL": None},
    )
    yield started
    _check_clean_stop(started)


def _check_clean_stop(started: Cluster) -> None:

    print("node logs:", *(str(node.stderr_path) for node in started.nodes), sep="\n  ")
    problems = [
        f"{node.kind} {node.node_id} exited on its own with code {node.exit_code}:\n"
        f"{node.log_tail()}"
        for node in started.nodes
        if node.exit_code not in (None, 0, -signal.SIGKILL)
    ]
    still_running = {node.node_id for node in started.nodes if node.running}
    try:
        exit_codes = started.stop()
    except BrokerStartError as hung:
        problems.append(str(hung))
        exit_codes = {}
    for node in started.nodes:
        if node.node_id in still_running and exit_codes.get(node.node_id, 0) != 0:
            problems.append(
                f"{node.kind} {node.node_id} exited with {exit_codes[node.node_id]} on SIGTERM:\n"
                f"{node.log_tail()}"
            )
    if problems:
        pytest.fail("unclean cluster shutdown\n" + "\n".join(problems))


# What confluent-kafka's admin client may report for a CreateTopics that can succeed when
# sent again (its KafkaError for a topic's result does not always carry the retriable flag).
_RETRIABLE_CREATE = (
    KafkaError.NOT_CONTROLLER,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
)


def create_replicated_topic(
    cluster: Cluster,
    topic: str,
    partitions: int,
    replication_factor: int = BROKERS,
    config: dict[str, str] | None = None,
) -> None:
    """Create a topic with confluent-kafka's AdminClient and wait until every partition has a
    leader and a full ISR, as seen by Metadata.

    A retriable refusal (NOT_CONTROLLER while a controller is being elected, a timeout) is
    retried, as an application would, until CONVERGENCE_TIMEOUT; TOPIC_ALREADY_EXISTS after
    one means that earlier attempt created it."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 10000})
    new_topic = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=replication_factor,
        config=config or {},
    )
    deadline = time.monotonic() + CONVERGENCE_TIMEOUT
    retried = False
    while True:
        try:
            admin.create_topics([new_topic], request_timeout=15)[topic].result(timeout=20)
            break
        except KafkaException as failure:
            error = failure.args[0]
            if retried and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                break
            retriable = error.retriable() or error.code() in _RETRIABLE_CREATE
            if not retriable or time.monotonic() >= deadline:
                raise
            retried = True
            time.sleep(0.5)
    for partition in range(partitions):
        replicas = wait_for(
            lambda partition=partition: replicas_of(cluster, topic, partition),
            CONVERGENCE_TIMEOUT,
            f"{topic}-{partition} in Metadata",
        )
        assert len(replicas) == replication_factor, replicas
        cluster.wait_for_isr(topic, partition, replicas, CONVERGENCE_TIMEOUT)
        assert cluster.leader_of(topic, partition) in replicas


def replicas_of(cluster: Cluster, topic: str, partition: int) -> tuple[int, ...]:
    """The partition's replicas in assignment order (the first is the preferred leader);
    empty while no broker knows the partition."""
    state = cluster.partition_metadata(topic, partition)
    return () if state is None else tuple(int(node) for node in state.replica_nodes)


def wait_for_new_leader(
    cluster: Cluster, topic: str, partition: int, old_leader: int, timeout: float
) -> int:
    """Poll Metadata until the partition has a live leader other than `old_leader`."""

    def new_leader() -> int | None:
        leader = cluster.leader_of(topic, partition)
        return leader if leader not in (None, -1, old_leader) else None

    return wait_for(
        new_leader, timeout, f"a leader other than {old_leader} for {topic}-{partition}", 0.02
    )


def produce_raw(
    broker: BrokerProcess,
    topic: str,
    partition: int,
    values: Iterable[bytes],
    acks: int,
    timeout_ms: int = 10_000,
) -> PartitionProduceResponse:
    """One Produce v8 request holding one batch of `values`, sent to this broker only (no
    client-side retries or leader lookup): the answer is exactly the broker's."""
    request = ProduceRequest(
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(
                    PartitionProduceData(
                        index=partition,
                        records=make_batch([(None, value) for value in values]),
                    ),
                ),
            ),
        ),
    )
    response = exchange(broker.bootstrap, request, timeout=timeout_ms / 1000 + 10)
    (answer,) = [part for reply in response.responses for part in reply.partition_responses]
    return answer


def produce_when_leading(
    broker: BrokerProcess, topic: str, partition: int, values: list[bytes]
) -> int:
    """Produce one batch with acks=1 to this broker as soon as it accepts it: Metadata may name
    it leader a moment before it has applied its LeaderAndIsr. Returns the base offset."""

    def accepted():
        answer = produce_raw(broker, topic, partition, values, acks=1)
        if answer.error_code == ErrorCode.none:
            return answer
        assert answer.error_code == ErrorCode.not_leader_or_follower, answer
        return None

    return wait_for(
        accepted, CONVERGENCE_TIMEOUT, f"broker {broker.node_id} to lead {topic}-{partition}"
    ).base_offset


def produce_acks_all(
    bootstrap: str, topic: str, messages: Iterable[tuple[int, bytes]]
) -> dict[tuple[int, int], bytes]:
    """Send (partition, value) messages with acks=all and wait for every delivery report;
    fail on any delivery error. Returns the value acknowledged at each (partition, offset)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            # Large batches keep the number of acks=all round trips (each waits for the
            # followers' next fetch) small, so that 100,000 messages take seconds.
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "message.timeout.ms": 60000,
        }
    )
    acked: dict[tuple[int, int], bytes] = {}
    errors = []

    def on_delivery(error, message):
        if error is None:
            acked[(message.partition(), message.offset())] = message.value()
        else:
            errors.append(f"{message.value()!r}: {error}")

    for partition, value in messages:
        while True:
            try:
                producer.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                # The local queue is full: serve deliveries to make room.
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(90) == 0, "messages still undelivered after 90s"
    assert errors == [], errors[:10]
    return acked


# What a client refreshes its metadata after and asks again: the leader moved (a preferred
# leader election once a replica is back in the ISR, say) or is being elected.
_RETRIABLE_WATERMARK = (
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
)


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """ListOffsets latest per partition, from each partition's leader: the high watermark.

    get_watermark_offsets fails at once when the leader its metadata names has just handed
    leadership on (the ZooKeeper restart test met NOT_LEADER_FOR_PARTITION while leadership
    moved back to the preferred replicas); a client refreshes its metadata and asks again,
    and so does this, until CONVERGENCE_TIMEOUT."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-watermarks"})
    deadline = time.monotonic() + CONVERGENCE_TIMEOUT
    ends = {}
    try:
        for partition in range(partitions):
            while partition not in ends:
                try:
                    ends[partition] = consumer.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=10, cached=False
                    )[1]
                except KafkaException as failure:
                    retriable = failure.args[0].code() in _RETRIABLE_WATERMARK
                    if not retriable or time.monotonic() >= deadline:
                        raise
                    time.sleep(0.2)
                    with contextlib.suppress(KafkaException):
                        consumer.list_topics(topic, timeout=10)  # a fresh view of the leaders
        return ends
    finally:
        consumer.close()


def read_partitions(bootstrap: str, topic: str, partitions: int) -> dict[tuple[int, int], bytes]:
    """Every record of the topic up to each partition's high watermark, by (partition, offset)."""
    ends = high_watermarks(bootstrap, topic, partitions)
    messages = confluent_read_all(
        bootstrap, topic, dict.fromkeys(range(partitions), 0), sum(ends.values()), timeout=60
    )
    return {(message.partition(), message.offset()): message.value() for message in messages}


def segment_files(broker: BrokerProcess, topic: str, partition: int) -> list[Path]:
    """The partition's `.log` segments on this broker, oldest first."""
    partition_dir = broker.log_dir / f"{topic}-{partition}"
    if not partition_dir.is_dir():
        return []
    return sorted(path for path in partition_dir.iterdir() if SEGMENT_NAME.match(path.name))


def log_sizes(brokers: Iterable[BrokerProcess], topic: str, partition: int) -> dict[int, int]:
    """The partition's log size in bytes on each of these brokers, by node id."""
    sizes = {}
    for broker in brokers:
        sizes[broker.node_id] = 0
        for segment in segment_files(broker, topic, partition):
            # A segment deleted or renamed between listing and stat counts as empty; the caller
            # polls again.
            with contextlib.suppress(FileNotFoundError):
                sizes[broker.node_id] += segment.stat().st_size
    return sizes


def log_bytes(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    """The partition's whole log on this broker: its segments' bytes, oldest first. Replicas
    must agree on these bytes; where a segment rolls is each broker's own business."""
    return b"".join(segment.read_bytes() for segment in segment_files(broker, topic, partition))


def assert_logs_identical(
    cluster: Cluster, topic: str, partition: int, timeout: float = CONVERGENCE_TIMEOUT
) -> int:
    """Once no more records arrive: wait until every replica's log has the leader's size, then
    require the same bytes. Returns the log's size."""
    leader = cluster.brokers[cluster.leader_of(topic, partition)]
    followers = [
        cluster.brokers[node]
        for node in replicas_of(cluster, topic, partition)
        if node != leader.node_id
    ]
    replicas = [leader, *followers]
    deadline = time.monotonic() + timeout
    while len(set((sizes := log_sizes(replicas, topic, partition)).values())) != 1:
        if time.monotonic() >= deadline:
            pytest.fail(
                f"{topic}-{partition}: log sizes by broker {sizes} (leader {leader.node_id})"
                f" still differ after {timeout}s"
            )
        time.sleep(0.1)
    expected = log_bytes(leader, topic, partition)
    for follower in followers:
        actual = log_bytes(follower, topic, partition)
        assert actual == expected, (
            f"{topic}-{partition}: broker {follower.node_id}'s log differs from leader"
            f" {leader.node_id}'s from byte {first_difference(actual, expected)}"
        )
    return len(expected)


def first_difference(left: bytes, right: bytes) -> int:
    """Where two byte strings first differ, for a failure message that points at the spot."""
    for position, (a, b) in enumerate(zip(left, right, strict=False)):
        if a != b:
            return position
    return min(len(left), len(right))


class BackgroundProducer:
    """Sends numbered messages round-robin over the partitions with acks=all from a thread,
    from entering its `with` block until `stop`, and keeps every delivery report.

    Idempotence stays off (librdkafka's default): then a retry after a failover may store a
    message twice, and the test can see and count such duplicates instead of trusting the
    broker's de-duplication. `acked` maps (partition, offset) to the value the broker
    acknowledged there; that is what must never be lost.
    """

    MESSAGES_PER_ROUND = 20
    ROUND_PAUSE_SECONDS = 0.005
    # At most this many messages queued or in flight: the stream waits for acknowledgements
    # beyond it. Unbounded, it outran a cluster on loaded cores (the fresh-clone CI run of
    # 48e8f49 had 68,375 queued), and messages that waited 60 s in the queue timed out
    # (_MSG_TIMED_OUT: not lost, never sent), failing the failover tests for the machine's sake.
    MAX_QUEUED = 2000

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list[str] = []
        self.undelivered = 0
        self._settings = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 100,
            "linger.ms": 5,
        }
        self._topic = topic
        self._partitions = partitions
        self._flush_timeout = 90
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{topic}", daemon=True)

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        """Leaving the block early (a failed assertion) abandons whatever is still queued, so
        the thread does not keep retrying against a cluster being torn down."""
        if exc_type is not None:
            self._flush_timeout = 0
        self._stopping.set()

    def _on_delivery(self, error, message) -> None:
        if error is None:
            self.acked[(message.partition(), message.offset())] = message.value()
        else:
            self.errors.append(f"{message.value()!r}: {error}")

    def _run(self) -> None:
        producer = Producer(self._settings)
        number = 0
        while not self._stopping.is_set():
            for _ in range(self.MESSAGES_PER_ROUND):
                producer.produce(
                    self._topic,
                    value=f"{self._topic}-{number:08d}".encode(),
                    partition=number % self._partitions,
                    on_delivery=self._on_delivery,
                )
                number += 1
            # Serves the delivery reports and paces the stream, so that it spans the test.
            producer.poll(self.ROUND_PAUSE_SECONDS)
            while len(producer) > self.MAX_QUEUED and not self._stopping.is_set():
                producer.poll(0.05)
        self.undelivered = producer.flush(self._flush_timeout)

    def wait_for_acks(self, count: int, timeout: float = CONVERGENCE_TIMEOUT) -> None:
        wait_for(
            lambda: len(self.acked) >= count or self.errors,
            timeout,
            f"{count} acknowledged messages",
        )
        assert not self.errors, self.errors[:10]

    def stop(self) -> None:
        """Stop sending and wait for every outstanding message to be acknowledged or failed."""
        self._stopping.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the producer did not finish flushing"


def lost_and_duplicated(
    acked: dict[tuple[int, int], bytes], stored: dict[tuple[int, int], bytes]
) -> tuple[list[tuple[int, int]], int]:
    """Acknowledged positions that do not hold their acknowledged value any more, and how many
    stored records are extra copies of a value stored elsewhere (retries after a failover)."""
    lost = [position for position, value in acked.items() if stored.get(position) != value]
    copies = Counter(stored.values())
    duplicates = sum(count - 1 for count in copies.values() if count > 1)
    return sorted(lost), duplicates


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Parse a Kafka offset checkpoint file strictly: `0`, the entry count, then one
    `topic partition offset` line per entry, each line ending in a newline."""
    text = path.read_text()
    assert text.endswith("\n"), f"{path} does not end with a newline: {text!r}"
    lines = text[:-1].split("\n")
    assert lines[0] == "0", f"{path}: version line {lines[0]!r}"
    assert lines[1].isdigit() and int(lines[1]) == len(lines) - 2, f"{path}: {lines[:2]}"
    entries = {}
    for line in lines[2:]:
        match = re.fullmatch(r"([a-zA-Z0-9._-]+) (\d+) (\d+)", line)
        assert match, f"{path}: malformed entry {line!r}"
        key = (match.group(1), int(match.group(2)))
        assert key not in entries, f"{path}: {key} listed twice"
        entries[key] = int(match.group(3))
    return entries


def established_connections_to(port: int) -> int:
    """How many established TCP connections (IPv4, this machine) have ``port`` as their local
    port: the connections a listener is serving right now."""
    count = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == "01":  # 01: ESTABLISHED
                count += 1
    return count


def assert_replication_uses(cluster: Cluster, listener: str) -> None:
    """Every running broker serves connections on its ``listener`` (the followers' fetchers
    and the controller's channel), so replication really went through that listener."""
    for broker in cluster.brokers.values():
        if broker.running:
            port = broker.extra_listeners[listener]
            assert established_connections_to(port) > 0, (
                f"no connection to broker {broker.node_id}'s {listener} listener (:{port})"
            )


def coordinator_of(cluster: Cluster, group: str) -> int:
    """The node id FindCoordinator names for the group, asked of any live broker (-1 while
    none answers)."""
    for broker in cluster.brokers.values():
        if not broker.running:
            continue
        answer = exchange(broker.bootstrap, FindCoordinatorRequest(key=group, key_type=0))
        if answer.error_code.value == 0:
            return int(answer.node_id)
    return -1
