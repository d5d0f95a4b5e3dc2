"""`python -m faults.chaos`: a cluster under faults, checked the way Jepsen checks Kafka.

A controller and three brokers run as processes, each in a network namespace of its own
(faults/netns.py), one broker's log dir on a small tmpfs. From this namespace an idempotent
acks=all producer writes numbered records to a topic of 3 partitions with replication 3 and
min.insync.replicas=2, and a consumer reads every partition from the start, all the time.
Faults are injected one at a time, chosen by a seeded random generator:

- kill: kill -9 of a broker (restarted after a few seconds), or of the controller;
- pause: SIGSTOP of a broker for longer than the session timeout, then SIGCONT;
- partition: a partition leader cut off from the controller and the other brokers while its
  clients still reach it; isolate: the same leader cut off from everyone;
- disk: the tmpfs broker's disk filled up, then freed; disk-read-error: every pread of that
  broker's process fails with EIO (libfiu's POSIX preload, which it always runs under here;
  Debian's fiu-utils), then no longer. (A read-only remount is not among them: Linux refuses
  it, EBUSY, while the broker holds its segments open for writing.) A broker whose log dir
  fails halts, as Kafka's does (exit 1, "all log dirs ... have failed"); the harness
  restarts it once the fault is healed, as the compose file's restart policy does, and the
  restart recovers its logs from their files;
- clock: the controller's time of day stepped a day forward or back (libfaketime, which the
  controller always runs under here; monotonic time is left alone, as NTP leaves it), held
  past the session timeout, then stepped back to the true time: a second jump the other way.

`--zookeeper` runs the ZooKeeper mode instead: a ZooKeeper server (the Debian package's) in a
namespace of its own and three brokers on it, each of which may be elected controller, and no
controller process. Its faults are the broker kinds above (the partitions cut ZooKeeper off
too) and:

- kill-controller: kill -9 of the elected controller broker (restarted after a few seconds);
- kill-zookeeper: kill -9 of ZooKeeper, started again on its data a few seconds later;
- zookeeper-partition: the elected controller cut off from ZooKeeper alone, past its session.

After each fault is healed the cluster must be back to a full ISR everywhere. At the end:
every acknowledged record is in the log at its acknowledged offset (lost otherwise), every
record a consumer read is still there (it read nothing above the high watermark that later
vanished), no value is stored twice under one producer epoch (the producer is idempotent;
copies under two epochs, which librdkafka makes when it bumps its epoch and renumbers
messages it had possibly written, are counted apart: no broker can recognise them), and the
replicas of each partition hold identical bytes. The table gives, per fault kind, the runs,
acknowledged and lost records, duplicates, divergent partitions, the failover time (fault to
the first record acknowledged on a partition the faulty broker led, for a record sent after
the fault) and the time until every ISR was full again. `--seed` replays a run.

`--workload transactional` runs transactional producers and a consume-transform-produce stage
instead (faults/txn_workload.py, judged by faults/txn_checker.py) and adds kill-coordinator:
kill -9 of a transaction coordinator. `--workload share` runs a producer and three share
consumers of one share group with a dead-letter queue, acknowledging explicitly (ACCEPT,
RELEASE, REJECT, poison records RELEASEd to the delivery limit; faults/share_workload.py),
judged by faults/share_checker.py (each record ends accepted or archived, none delivered again
after an acknowledged ACCEPT or REJECT, no delivery count above the limit), and adds
kill-share-coordinator: kill -9 of the broker that is the share coordinator of the workload's
share partition 0.

Needs root (namespaces, tmpfs), iproute2 and libfaketime (Debian's faketime package), or for
``--zookeeper`` the zookeeper package instead of libfaketime.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from kazoo.client import KazooClient
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.static.primitive import i8

from minibroker.controller import zk_layout
from minibroker.coordinator.share.state import SharePartitionKey
from minibroker.protocol.record_batch import HEADER_SIZE, read_header
from minibroker.tools import wire
from minibroker.tools.launcher import ZooKeeperServer, request_metadata, zookeeper_installed

from .netns import Network
from .share_workload import ShareWorkload
from .txn_workload import (
    CLIENT_THREADS_STOP_S,
    TransactionalWorkload,
    close_producer,
    create_topics,
    high_watermark,
    java_string_hash,
    join_all,
    transactions_refused,
)

TOPIC = "chaos"
PARTITIONS = 3
BROKERS = (1, 2, 3)
CONTROLLER = 0
BROKER_PORT = 9092
CONTROLLER_PORT = 9093
SESSION_TIMEOUT_MS = 3000
DISK_BROKER = 3
DISK_SIZE_MB = 64
DISK_KINDS = ("disk", "disk-read-error")
KINDS = ("kill", "kill-controller", "pause", "partition", "isolate", *DISK_KINDS, "clock")
# The transactional workload's own fault: kill -9 of the broker that coordinates one of its
# transactional ids (the leader of its __transaction_state partition).
TXN_FAULTS = ("kill-coordinator",)
TXN_KINDS = (*KINDS, *TXN_FAULTS)
# The share-group workload's own fault: kill -9 of the broker that is the share coordinator
# of the workload's first share partition (the leader of its __share_group_state partition).
SHARE_FAULTS = ("kill-share-coordinator",)
SHARE_KINDS = (*KINDS, *SHARE_FAULTS)
WORKLOADS = ("idempotent", "transactional", "share")
# What a share run's brokers are told besides the cluster's settings: record locks of 10 s
# (Kafka's minimum is 15 s; a record whose consumer lost its connection comes back sooner),
# and 3 partitions (not 50) for each internal topic its groups use, so that a loaded machine
# creates them in seconds: the faults and the checks are the same with 3.
SHARE_OVERRIDES = {
    "offsets.topic.num.partitions": 3,
    "share.coordinator.state.topic.num.partitions": 3,
    "group.share.min.record.lock.duration.ms": 1000,
    "group.share.record.lock.duration.ms": 10_000,
}
TRANSACTION_STATE_TOPIC = "__transaction_state"
TRANSACTION_STATE_PARTITIONS = 50
# The faults only the ZooKeeper mode has, and every kind that mode runs (no clock: there is
# no controller process to run under libfaketime; a broker's clock is not what elects).
ZOOKEEPER_FAULTS = ("kill-controller", "kill-zookeeper", "zookeeper-partition")
ZOOKEEPER_KINDS = (
    "kill",
    "kill-controller",
    "kill-zookeeper",
    "zookeeper-partition",
    "pause",
    "partition",
    "isolate",
    *DISK_KINDS,
)
ZOOKEEPER = -1  # ZooKeeper's place among the node ids, as a fault's target
ZOOKEEPER_PORT = 2181
ZOOKEEPER_CHROOT = "/minibroker"
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
# libfiu (Debian's fiu-utils): the disk broker runs under `fiu-run -x` so that `fiu-ctrl`
# can make its preads fail with EIO while it runs.
FIU_RUN = shutil.which("fiu-run")
FIU_CTRL = shutil.which("fiu-ctrl")
EIO = 5
# What a broker logs as it halts on a failed log dir (Kafka's LogManager line).
LOG_DIRS_FAILED = "have failed"
CLOCK_STEP_SECONDS = 86_400
HOLD_SECONDS = 4.0
RECOVERY_TIMEOUT = 90.0
FINAL_READ_STALL_S = 60.0
START_TIMEOUT = 60.0


def node_name(node_id: int) -> str:
    if node_id == ZOOKEEPER:
        return "zookeeper"
    return "controller" if node_id == CONTROLLER else f"broker-{node_id}"


@dataclass
class Outcome:
    """What a chaos run found: the report, and the counts that must all be zero."""

    text: str
    acknowledged: int
    lost: int
    vanished: int
    duplicates: int  # a value stored twice under one producer epoch: the broker's to catch
    divergent: list[int | str]
    unrecovered: list[str]
    unread: int = 0  # records the final read never got to
    # A value stored twice under two producer epochs: librdkafka renumbered messages whose
    # first send had possibly been written when it bumped its epoch, which no broker can tell
    # from new ones (docs/faults.md). Reported, not judged.
    renumbered: int = 0
    # The transactional and share workloads' checkers (faults/txn_checker.py,
    # faults/share_checker.py): violations by kind.
    violations: dict[str, int] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not (
            any(self.violations.values())
            or self.lost
            or self.vanished
            or self.duplicates
            or self.divergent
            or self.unrecovered
            or self.unread
        )


@dataclass
class Run:
    kind: str
    target: int
    started: float
    healed: float = 0.0
    led: list[int] = field(default_factory=list)  # partitions the target led at the fault
    recovered_in: float | None = None  # fault to every ISR full again (None: never)
    ended: float = 0.0
    died: list[str] = field(default_factory=list)  # nodes whose process ended on its own
    # The disk broker halted on its failed log dir and was restarted (disk kinds only).
    halted: bool = False


class Node:
    """One minibroker process in its namespace."""

    def __init__(
        self,
        node_id: int,
        network: Network,
        data: Path,
        log: Path,
        overrides: dict,
        env: dict[str, str] | None = None,
    ) -> None:
        self.node_id = node_id
        self.network = network
        self.data = data
        self.log = log
        self.overrides = overrides
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen | None = None
        # Run under libfiu's preload, so that faults can be injected in its system calls.
        self.under_fiu = False

    @property
    def address(self) -> str:
        return str(self.network.addresses[node_name(self.node_id)])

    def start(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        properties = {
            **self.overrides,
            "node.id": self.node_id,
            "log.dirs": str(self.data),
        }
        if self.node_id == CONTROLLER:
            properties["process.roles"] = "controller"
            properties["listeners"] = f"CONTROLLER://{self.address}:{CONTROLLER_PORT}"
        else:
            # On ZooKeeper every broker may be elected: no roles to give (the node refuses).
            if "zookeeper.connect" not in properties:
                properties["process.roles"] = "broker"
            properties["listeners"] = f"PLAINTEXT://{self.address}:{BROKER_PORT}"
        command = [
            *self.network.exec_prefix(node_name(self.node_id)),
            *([FIU_RUN, "-x"] if self.under_fiu and FIU_RUN else []),
            sys.executable,
            "-m",
            "broker",
            "serve",
        ]
        for key, value in properties.items():
            command += ["--override", f"{key}={value}"]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                process_group=0,
                env=self.env,
            )

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)

    def fail_preads(self, fail: bool) -> bool:
        """Make every pread of the process fail with EIO, or stop doing so (libfiu's
        posix/io/rw/pread point, through fiu-ctrl); False if the process is gone."""
        if self.process is None or self.process.poll() is not None or not FIU_CTRL:
            return False
        command = (
            f"enable name=posix/io/rw/pread,failinfo={EIO}"
            if fail
            else "disable name=posix/io/rw/pread"
        )
        done = subprocess.run(
            [FIU_CTRL, "-c", command, str(self.process.pid)], capture_output=True, timeout=10
        )
        return done.returncode == 0

    def log_size(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def halted_on_failed_log_dir(self, since: int) -> bool:
        """The process ended with exit code 1 after logging Kafka's "all log dirs ... have
        failed" line past byte ``since`` of its log."""
        if self.process is None or self.process.poll() != 1:
            return False
        with open(self.log, "rb") as log:
            log.seek(since)
            return LOG_DIRS_FAILED.encode() in log.read()

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9


class Workload:
    """The idempotent producer, in a thread, and the checking consumer, in a process of its
    own (faults/checking_consumer.py) read by a thread."""

    # How long the checking consumer's close may take before its process is killed.
    CONSUMER_CLOSE_S = 30.0

    def __init__(self, bootstrap: str, producer_log: Path) -> None:
        self.bootstrap = bootstrap
        # librdkafka's idempotence events (epoch bumps, sequence errors, duplicates it was
        # told of): what explains a duplicate the report finds.
        self.producer_log = producer_log
        # value -> (partition, offset, sent at, acknowledged at)
        self.acked: dict[bytes, tuple[int, int, float, float]] = {}
        self.failed: list[str] = []
        self.read: dict[tuple[int, int], bytes] = {}
        # Positions read twice with different values: a record read, then replaced.
        self.reread_differently: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._abandoned = threading.Event()
        self._consumer_process: subprocess.Popen[str] | None = None
        self._threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._stop_consumer()
        for thread in self._threads:
            thread.join(180)

    def abandon(self) -> None:
        """Tell the clients to stop without waiting for them: the cluster is going away (a
        run that failed before its report), and a producer left running would retry its
        addresses for the rest of the process's life."""
        self._abandoned.set()
        self._stop.set()
        self._stop_consumer()

    def join(self, timeout: float) -> list[str]:
        """Wait, `timeout` seconds in all, for the client threads to close their clients;
        the names of those still running."""
        return join_all(self._threads, timeout)

    def _produce(self) -> None:
        logger = logging.getLogger(f"chaos.producer.{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(logging.FileHandler(self.producer_log))
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 300_000,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 1000,
                "debug": "eos",
            },
            logger=logger,
        )
        number = 0

        def delivered(error, message, sent=None):
            if error is not None:
                self.failed.append(f"{message.value()!r}: {error}")
            else:
                self.acked[message.value()] = (
                    message.partition(),
                    message.offset(),
                    sent,
                    time.monotonic(),
                )

        try:
            while not self._stop.is_set():
                for _ in range(10):
                    sent = time.monotonic()
                    try:
                        producer.produce(
                            TOPIC,
                            value=b"%010d" % number,
                            partition=number % PARTITIONS,
                            on_delivery=lambda e, m, sent=sent: delivered(e, m, sent),
                        )
                    except BufferError:
                        break
                    number += 1
                producer.poll(0.01)
        finally:
            # Abandoned, the cluster is going away: nothing left is waited for.
            close_producer(producer, 0 if self._abandoned.is_set() else 240)

    def _consume(self) -> None:
        """Read what the checking consumer's process reads (faults/checking_consumer.py says
        why a process) until it ends its stream; then wait, CONSUMER_CLOSE_S at most, for
        its consumer's close, and kill it if the close hangs."""
        process = subprocess.Popen(
            self.consumer_command(),
            cwd=Path(__file__).resolve().parent.parent,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._consumer_process = process
        if self._stop.is_set():  # stopped before the process existed
            process.terminate()
        try:
            assert process.stdout is not None
            for line in process.stdout:
                if line == "end\n":
                    break
                partition, offset, value_hex = line.split()
                position, value = (int(partition), int(offset)), bytes.fromhex(value_hex)
                seen = self.read.setdefault(position, value)
                if seen != value:
                    self.reread_differently.append(position)
        finally:
            try:
                process.wait(self.CONSUMER_CLOSE_S)
            except subprocess.TimeoutExpired:
                print(
                    f"the checking consumer's close did not end in {self.CONSUMER_CLOSE_S:.0f} s:"
                    f" its process {process.pid} killed",
                    file=sys.stderr,
                )
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()

    def consumer_command(self) -> list[str]:
        """The checking consumer's command line (run from the source tree's root)."""
        return [
            sys.executable,
            "-m",
            "faults.checking_consumer",
            self.bootstrap,
            TOPIC,
            str(PARTITIONS),
        ]

    def _stop_consumer(self) -> None:
        """SIGTERM to the checking consumer's process: it ends its stream, then closes."""
        process = self._consumer_process
        if process is not None and process.poll() is None:
            process.terminate()


class Chaos:
    def __init__(
        self, base: Path, seed: int, zookeeper: bool = False, workload: str = "idempotent"
    ) -> None:
        self.base = base
        self.seed = seed
        self.workload_kind = workload
        self.txn: TransactionalWorkload | None = None
        self.share: ShareWorkload | None = None
        self.rng = random.Random(seed)
        # The cluster's processes besides the brokers: the controller, or ZooKeeper.
        self.authority = ZOOKEEPER if zookeeper else CONTROLLER
        self.network = Network([node_name(n) for n in (self.authority, *BROKERS)])
        self.zookeeper: ZooKeeperServer | None = None
        self.disk = base / "tmpfs"
        # The controller's time-of-day offset, read by libfaketime on every clock call.
        self.clock_offset = base / "controller-clock-offset"
        self.nodes: dict[int, Node] = {}
        self.runs: list[Run] = []
        # One line per divergent partition: where its replicas first differ, and where
        # their files were copied (keep_evidence).
        self.evidence: list[str] = []
        self.workload: Workload | None = None

    # -- setting up ------------------------------------------------------------------------

    def start(self) -> None:
        self.network.build()
        self.disk.mkdir(parents=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE_MB}m", "tmpfs", str(self.disk)],
            check=True,
        )
        authority = self.network.addresses[node_name(self.authority)]
        if self.authority == ZOOKEEPER:
            self.zookeeper = ZooKeeperServer(
                self.base / "zookeeper" / "data",
                ZOOKEEPER_PORT,
                host=str(authority),
                command_prefix=tuple(self.network.exec_prefix(node_name(ZOOKEEPER))),
            )
            self.zookeeper.launch()
            self.zookeeper.wait_ready(START_TIMEOUT)
            placement = {
                "zookeeper.connect": self.zookeeper.connect_string(ZOOKEEPER_CHROOT),
                "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
            }
        else:
            placement = {
                "controller.quorum.voters": f"{CONTROLLER}@{authority}:{CONTROLLER_PORT}",
            }
        overrides = {
            **placement,
            "broker.session.timeout.ms": SESSION_TIMEOUT_MS,
            "broker.heartbeat.interval.ms": 500,
            "replica.lag.time.max.ms": SESSION_TIMEOUT_MS,
            "default.replication.factor": 3,
            "min.insync.replicas": 2,
            "log.segment.bytes": 4 * 1024 * 1024,
            **(SHARE_OVERRIDES if self.workload_kind == "share" else {}),
        }
        for node_id in BROKERS if self.zookeeper else (CONTROLLER, *BROKERS):
            data = (
                self.disk / "data"
                if node_id == DISK_BROKER
                else self.base / node_name(node_id) / "data"
            )
            log = self.base / f"{node_name(node_id)}.log"
            env = self._faked_clock() if node_id == CONTROLLER else None
            self.nodes[node_id] = Node(node_id, self.network, data, log, overrides, env)
            self.nodes[node_id].under_fiu = node_id == DISK_BROKER and FIU_RUN is not None
            self.nodes[node_id].start()
        wait(lambda: len(self.live_brokers()) == len(BROKERS), START_TIMEOUT, "the brokers")
        create_topics(self.bootstrap, (TOPIC,), 3)
        wait(self.isr_full, START_TIMEOUT, "the topic's ISRs")
        if self.workload_kind == "transactional":
            self.start_transactional()
            return
        if self.workload_kind == "share":
            self.start_share()
            return
        self.workload = Workload(self.bootstrap, self.base / "producer.log")
        self.workload.start()
        wait(lambda: len(self.workload.acked) >= 1000, START_TIMEOUT, "the first records")

    def start_transactional(self) -> None:
        """The transactional workload (faults/txn_workload.py) on two topics of its own, RF 3
        and min.insync.replicas 2; refused with TransactionsNotServed when the cluster does
        not serve transactions."""
        if reason := transactions_refused(self.bootstrap):
            raise TransactionsNotServed(reason)
        self.txn = TransactionalWorkload(self.bootstrap, seed=self.seed)
        self.txn.create_topics(3, 2)
        wait(self.isr_full, START_TIMEOUT, "the workload's topics' ISRs")
        self.txn.start()
        wait(lambda: self.txn.committed() >= 20, START_TIMEOUT, "the first transactions")

    def start_share(self) -> None:
        """The share-group workload (faults/share_workload.py) on a topic and a DLQ topic of
        its own, RF 3 and min.insync.replicas 2."""
        self.share = ShareWorkload(self.bootstrap, seed=self.seed)
        self.share.setup(3, 2)
        wait(self.isr_full, START_TIMEOUT, "the workload's topics' ISRs")
        self.share.start()
        # The group's and the share coordinator's internal topics are created on first use.
        wait(lambda: self.share.final() >= 100, 3 * START_TIMEOUT, "the first acknowledgements")

    def share_coordinator(self) -> int:
        """The broker FindCoordinator (key type 2, Kafka's SharePartitionKey.asCoordinatorKey)
        names as the share coordinator of the workload's share partition 0: the leader of
        its __share_group_state partition; a random broker when it cannot be told."""
        for node_id in self.rng.sample(BROKERS, len(BROKERS)):
            address = self.nodes[node_id].address
            try:
                response = request_metadata(
                    BROKER_PORT, [self.share.topic], timeout=2.0, host=address
                )
                (topic,) = response.topics
                key = SharePartitionKey(self.share.group, topic.topic_id, 0).coordinator_key()
                with wire.connect((address, BROKER_PORT), 5.0) as client:
                    found = client.call(
                        FindCoordinatorRequest(key_type=i8(2), coordinator_keys=(key,))
                    )
            except (OSError, ValueError):
                continue
            (coordinator,) = found.coordinators
            if coordinator.error_code == 0 and int(coordinator.node_id) in BROKERS:
                return int(coordinator.node_id)
        return self.rng.choice(BROKERS)

    def transaction_coordinator(self) -> int:
        """The broker leading the __transaction_state partition of the workload's first
        transactional id (Kafka: abs(String.hashCode) % transaction.state.log.num.partitions);
        a random broker when it cannot be told."""
        transactional_id = f"txn-producer-{self.txn.run_id}-0"
        partition = java_string_hash(transactional_id) % TRANSACTION_STATE_PARTITIONS
        for node_id in self.rng.sample(BROKERS, len(BROKERS)):
            try:
                response = request_metadata(
                    BROKER_PORT,
                    [TRANSACTION_STATE_TOPIC],
                    timeout=2.0,
                    host=self.nodes[node_id].address,
                )
            except OSError:
                continue
            for topic in response.topics:
                for entry in topic.partitions:
                    if entry.partition_index == partition and int(entry.leader_id) in BROKERS:
                        return int(entry.leader_id)
        return self.rng.choice(BROKERS)

    def _faked_clock(self) -> dict[str, str]:
        self.clock_offset.write_text("+0\n")
        return {
            "LD_PRELOAD": str(LIBFAKETIME),
            "FAKETIME_TIMESTAMP_FILE": str(self.clock_offset),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def close(self) -> None:
        """Every client closed while the cluster still answers (their threads are told to
        stop and waited for, a bounded time) and what is still connected recorded for the
        network guard; then the nodes stopped and the namespaces deleted.

        A thread can be stuck in a librdkafka call that ignores its timeout: the stage's
        send_offsets_to_transaction once waited 318 s (timeout 30 s) after its coordinator
        was killed, until the cluster's shutdown answered it. Such a thread is waited for
        again, a bounded time, once the nodes are stopped; the network's close then records
        whatever it still holds."""
        running = self._stop_clients()
        if running:
            print(f"client threads still running at close: {running}", file=sys.stderr)
        else:
            self.network.check_clients()
        for node_id in sorted(self.nodes, reverse=True):  # brokers first, then the controller
            self.nodes[node_id].stop()
        if self.zookeeper is not None:
            self.zookeeper.stop()
        if running and (running := self._stop_clients()):
            print(f"client threads still running with the cluster gone: {running}", file=sys.stderr)
        subprocess.run(["umount", str(self.disk)], capture_output=True)
        self.network.close()

    def _stop_clients(self) -> list[str]:
        """Tell the client threads to stop and wait for them, CLIENT_THREADS_STOP_S each
        workload; the names of those still running."""
        running = []
        if self.workload is not None:
            self.workload.abandon()
            running += self.workload.join(CLIENT_THREADS_STOP_S)
        if self.txn is not None:
            self.txn.abandon()
            running += self.txn.join(CLIENT_THREADS_STOP_S)
        if self.share is not None:
            self.share.abandon()
            running += self.share.join(CLIENT_THREADS_STOP_S)
        return running

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.nodes[n].address}:{BROKER_PORT}" for n in BROKERS)

    # -- the cluster as clients see it -------------------------------------------------------

    @property
    def watched_topics(self) -> list[str]:
        """The topics whose ISRs must be full again after a fault, the workload's first (a
        partition fault cuts off a leader of the first one)."""
        if self.txn is not None:
            return [*self.txn.topics, TOPIC]
        if self.share is not None:
            return [*self.share.topics, TOPIC]
        return [TOPIC]

    def metadata(self):
        for node_id in self.rng.sample(BROKERS, len(BROKERS)):
            try:
                return request_metadata(
                    BROKER_PORT,
                    self.watched_topics,
                    timeout=2.0,
                    host=self.nodes[node_id].address,
                )
            except OSError:
                continue
        return None

    def live_brokers(self) -> set[int]:
        response = self.metadata()
        return set() if response is None else {int(b.node_id) for b in response.brokers}

    def leaders(self) -> dict[int, int]:
        response = self.metadata()
        first = self.watched_topics[0]
        for topic in [] if response is None else response.topics:
            if str(topic.name) == first:
                return {p.partition_index: int(p.leader_id) for p in topic.partitions}
        return {}

    def isr_full(self) -> bool:
        response = self.metadata()
        if response is None or len(response.topics) != len(self.watched_topics):
            return False
        return all(
            not topic.error_code.value
            and len(topic.partitions) == PARTITIONS
            and all(len(p.isr_nodes) == len(BROKERS) and p.leader_id >= 0 for p in topic.partitions)
            for topic in response.topics
        )

    def elected_controller(self) -> int:
        """The broker ZooKeeper's ``/controller`` names (ZooKeeper mode), read with a client
        of its own: a fault may have ended any earlier session."""
        client = KazooClient(hosts=self.zookeeper.connect_string(ZOOKEEPER_CHROOT), timeout=10)
        client.start(START_TIMEOUT)
        try:
            deadline = time.monotonic() + RECOVERY_TIMEOUT
            while not client.exists(zk_layout.CONTROLLER):
                if time.monotonic() > deadline:
                    raise TimeoutError("no broker holds /controller")
                time.sleep(0.1)
            return zk_layout.controller_id_from(client.get(zk_layout.CONTROLLER)[0])
        finally:
            client.stop()
            client.close()

    # -- faults ------------------------------------------------------------------------------

    def inject(self, kind: str) -> Run:
        leaders = self.leaders()
        if kind in ("kill-controller", "zookeeper-partition") and self.zookeeper is not None:
            target = self.elected_controller()
        elif kind in ("kill-controller", "clock"):
            target = CONTROLLER
        elif kind == "kill-zookeeper":
            target = ZOOKEEPER
        elif kind in DISK_KINDS:
            target = DISK_BROKER
        elif kind == "kill-coordinator":
            target = self.transaction_coordinator()
        elif kind == "kill-share-coordinator":
            target = self.share_coordinator()
        elif kind in ("partition", "isolate") and leaders:
            target = leaders[self.rng.randrange(PARTITIONS)]
        else:
            target = self.rng.choice(BROKERS)
        led = [p for p, leader in leaders.items() if leader == target]
        node = self.nodes.get(target)
        others = [service for service in self.network.addresses if service != node_name(target)]
        name = node_name(target)
        log_size = node.log_size() if node is not None else 0
        # Each fault is in effect when `started` is taken: failover counts from there.
        if kind in ("kill", "kill-controller", "kill-coordinator", "kill-share-coordinator"):
            node.kill()
            run = Run(kind, target, time.monotonic(), led=led)
            time.sleep(HOLD_SECONDS)
            node.start()
        elif kind == "kill-zookeeper":
            self.zookeeper.kill()
            run = Run(kind, target, time.monotonic(), led=led)
            time.sleep(HOLD_SECONDS)
            self.zookeeper.launch()
        elif kind == "zookeeper-partition":
            self.network.cut(name, [node_name(ZOOKEEPER)])
            run = Run(kind, target, time.monotonic(), led=led)
            time.sleep(SESSION_TIMEOUT_MS / 1000 + HOLD_SECONDS)
            self.network.heal(name, [node_name(ZOOKEEPER)])
        elif kind == "pause":
            node.signal(signal.SIGSTOP)
            run = Run(kind, target, time.monotonic(), led=led)
            time.sleep(SESSION_TIMEOUT_MS / 1000 + HOLD_SECONDS)
            node.signal(signal.SIGCONT)
        elif kind == "partition":
            self.network.cut(name, others)
            run = Run(kind, target, time.monotonic(), led=led)
            time.sleep(SESSION_TIMEOUT_MS / 1000 + HOLD_SECONDS)
            self.network.heal(name, others)
        elif kind == "isolate":
            self.network.isolate(name)
            run = Run(kind, target, time.monotonic(), led=led)
            time.sleep(SESSION_TIMEOUT_MS / 1000 + HOLD_SECONDS)
            self.network.reconnect(name)
        elif kind == "clock":
            step = self.rng.choice((CLOCK_STEP_SECONDS, -CLOCK_STEP_SECONDS))
            self.clock_offset.write_text(f"{step:+d}\n")
            run = Run(kind, target, time.monotonic(), led=led)
            time.sleep(SESSION_TIMEOUT_MS / 1000 + HOLD_SECONDS)
            self.clock_offset.write_text("+0\n")
        elif kind == "disk-read-error":
            node.fail_preads(True)
            run = Run(kind, target, time.monotonic(), led=led)
            time.sleep(HOLD_SECONDS)
            node.fail_preads(False)  # False: it halted, and a restart starts without it
        else:  # disk: every free byte of the broker's tmpfs taken by a ballast file
            ballast = fill_disk(self.disk)
            run = Run(kind, target, time.monotonic(), led=led)
            time.sleep(HOLD_SECONDS)
            ballast.unlink(missing_ok=True)
        run.healed = time.monotonic()
        deadline = time.monotonic() + RECOVERY_TIMEOUT
        while time.monotonic() < deadline:
            # A broker that halted on its failed log dir is restarted, as the compose
            # file's restart policy does (once per run: a second halt is a death).
            if kind in DISK_KINDS and not run.halted and node.halted_on_failed_log_dir(log_size):
                run.halted = True
                node.start()
            # A node that exited cannot recover by itself: say so instead of waiting.
            run.died = [
                f"{node_name(n)} (exit {node.process.returncode})"
                for n, node in self.nodes.items()
                if node.process is not None and node.process.poll() is not None
            ]
            if self.zookeeper is not None and not self.zookeeper.running:
                run.died.append(f"zookeeper (see {self.zookeeper.log_path})")
            if run.died:
                break
            # Metadata read just after a restart can still show the ISR from before the
            # fault; only a node that is up and named live by the cluster can count.
            if self.live_brokers() == set(BROKERS) and self.isr_full():
                run.recovered_in = time.monotonic() - run.started
                break
            time.sleep(0.1)
        run.ended = time.monotonic()
        self.runs.append(run)
        return run

    # -- judging -------------------------------------------------------------------------------

    def failover_seconds(self, run: Run) -> float | None:
        """Fault to the first acknowledgement, on a partition the target led, of a record
        sent after the fault; None when the target led nothing."""
        if not run.led:
            return None
        acks = [
            acked_at
            for partition, _offset, sent, acked_at in list(self.workload.acked.values())
            if partition in run.led and sent >= run.started
        ]
        return min(acks) - run.started if acks else float("inf")

    def final_log(self) -> tuple[dict[tuple[int, int], bytes], int]:
        """Every record up to each partition's high watermark, read from the leaders, and
        how many of them could not be read (the read gives up only after FINAL_READ_STALL_S
        without progress: a loaded machine reads a long run's log slowly, and a fixed
        deadline once cut the read short and made records look lost)."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "chaos-final",
                "enable.auto.commit": False,
            }
        )
        try:
            ends = {
                p: high_watermark(consumer, TopicPartition(TOPIC, p)) for p in range(PARTITIONS)
            }
            consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
            stored: dict[tuple[int, int], bytes] = {}
            wanted = sum(ends.values())
            below_ends = 0
            last_progress = time.monotonic()
            while below_ends < wanted and time.monotonic() - last_progress < FINAL_READ_STALL_S:
                for message in consumer.consume(1000, 0.5):
                    if message.error() is None:
                        key = (message.partition(), message.offset())
                        if key not in stored and key[1] < ends[key[0]]:
                            below_ends += 1
                            last_progress = time.monotonic()
                        stored[key] = message.value()
        finally:
            consumer.close()
        return stored, wanted - below_ends

    def producer_sequences(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(partition, offset) -> (producer epoch, sequence) of every record, from the batch
        headers in the first broker's log files (records of an idempotent batch carry
        consecutive sequences from its base sequence)."""
        sequences = {}
        for partition in range(PARTITIONS):
            log = self.log_bytes(BROKERS[0], partition)
            position = 0
            while position + HEADER_SIZE <= len(log):
                header = read_header(log, position)
                for delta in range(header.last_offset_delta + 1):
                    sequences[(partition, header.base_offset + delta)] = (
                        header.producer_epoch,
                        header.base_sequence + delta,
                    )
                position += header.size
        return sequences

    def divergent_partitions(self, topic: str = TOPIC) -> list[int]:
        """Partitions whose replicas' logs differ in bytes, once every replica caught up."""
        divergent = []
        for partition in range(PARTITIONS):
            deadline = time.monotonic() + 60
            while True:
                logs = [self.log_bytes(n, partition, topic) for n in BROKERS]
                if len({len(log) for log in logs}) == 1 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            if len(set(logs)) != 1:
                divergent.append(partition)
                self.evidence.append(self.keep_evidence(topic, partition))
        return divergent

    def keep_evidence(self, topic: str, partition: int) -> str:
        """Copy every replica's directory of a divergent partition out of the data dirs
        (the disk broker's tmpfs is unmounted at the end) to `<base>/evidence/`, and say
        where the replicas' logs first differ, batch by batch."""
        target = self.base / "evidence" / f"{topic}-{partition}"
        logs = {}
        for node_id in BROKERS:
            source = self.nodes[node_id].data / f"{topic}-{partition}"
            if source.is_dir():
                shutil.copytree(source, target / node_name(node_id), dirs_exist_ok=True)
            logs[node_name(node_id)] = self.log_bytes(node_id, partition, topic)
        return f"{topic}-{partition}: {first_differing_batch(logs)}; replicas' files in {target}"

    def log_bytes(self, node_id: int, partition: int, topic: str = TOPIC) -> bytes:
        directory = self.nodes[node_id].data / f"{topic}-{partition}"
        return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))

    def report_transactional(self, seed: int) -> Outcome:
        """The transactional workload judged by faults/txn_checker.py, with the replicas of
        its topics compared byte for byte."""
        self.txn.stop()
        verdict, unread = self.txn.verdict()
        divergent = [
            f"{topic}-{p}" for topic in self.txn.topics for p in self.divergent_partitions(topic)
        ]
        lines = [
            f"seed {seed}: {len(self.runs)} fault runs (transactional workload):"
            f" {', '.join(r.kind for r in self.runs)}",
            verdict.summary(),
            f"client errors: {len(self.txn.history.errors)}",
            *[f"  {line}" for line in self.txn.history.errors[:10]],
            f"divergent partitions: {divergent}",
            *[f"  {line}" for line in self.evidence],
        ]
        for node_id, node in sorted(self.nodes.items()):
            text = node.log.read_text(errors="replace") if node.log.exists() else ""
            if errors := traceback_endings(text):
                lines.append(f"{node_name(node_id)} logged {sum(errors.values())} tracebacks:")
                lines += [f"  {count} x {line}" for line, count in errors.most_common(5)]
        if unread:
            lines.append(f"THE FINAL READ STALLED on {unread} partitions: not judged clean")
        return Outcome(
            text="\n".join(lines),
            acknowledged=self.txn.history.committed_records(),
            lost=len(verdict.lost),
            vanished=0,
            duplicates=len(verdict.duplicates),
            divergent=divergent,
            unrecovered=[r.kind for r in self.runs if r.recovered_in is None],
            unread=unread,
            violations=verdict.counts(),
        )

    def report_share(self, seed: int) -> Outcome:
        """The share-group workload judged by faults/share_checker.py, with the replicas of
        its topics compared byte for byte."""
        self.share.stop()
        verdict, unread = self.share.verdict()
        divergent = [
            f"{topic}-{p}" for topic in self.share.topics for p in self.divergent_partitions(topic)
        ]
        lines = [
            f"seed {seed}: {len(self.runs)} fault runs (share workload):"
            f" {', '.join(r.kind for r in self.runs)}",
            verdict.summary(),
            f"sends failed: {len(self.share.send_failures)}",
            f"commits not answered for every partition: {len(self.share.unanswered_commits)}",
            f"client errors: {len(self.share.errors)}",
            *[f"  {line}" for line in self.share.errors[:10]],
            f"divergent partitions: {divergent}",
            *[f"  {line}" for line in self.evidence],
        ]
        given_up = 0
        for node_id, node in sorted(self.nodes.items()):
            text = node.log.read_text(errors="replace") if node.log.exists() else ""
            given_up += text.count("proceeding to ARCHIVED regardless")
            if errors := traceback_endings(text):
                lines.append(f"{node_name(node_id)} logged {sum(errors.values())} tracebacks:")
                lines += [f"  {count} x {line}" for line, count in errors.most_common(5)]
        lines.append(f"DLQ writes given up for good (the brokers' logs): {given_up}")
        if self.share.drain_stalled:
            lines.append(
                "THE DRAIN STALLED: (start offset, high watermark) by partition"
                f" {self.share.drain_stalled}"
            )
        if unread:
            lines.append(f"THE DLQ READ STALLED on {unread} partitions: not judged clean")
        return Outcome(
            text="\n".join(lines),
            acknowledged=len(self.share.produced),
            lost=len(verdict.lost),
            vanished=0,
            duplicates=len(verdict.redelivered_after_accept),
            divergent=divergent,
            unrecovered=[r.kind for r in self.runs if r.recovered_in is None],
            unread=unread,
            violations=verdict.counts(),
        )

    def report(self, seed: int) -> Outcome:
        if self.txn is not None:
            return self.report_transactional(seed)
        if self.share is not None:
            return self.report_share(seed)
        self.workload.stop()
        stored, unread = self.final_log()
        divergent = self.divergent_partitions()
        by_value: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
        for position, value in stored.items():
            by_value[value].append(position)
        lost_by_run: Counter = Counter()
        acked_by_run: Counter = Counter()
        for value, (partition, offset, _sent, acked_at) in self.workload.acked.items():
            run = self.run_at(acked_at)
            acked_by_run[run] += 1
            if stored.get((partition, offset)) != value:
                lost_by_run[run] += 1
        vanished = sum(
            1 for key, value in self.workload.read.items() if stored.get(key) != value
        ) + len(self.workload.reread_differently)
        sequences = self.producer_sequences()
        duplicates = renumbered = 0
        for positions in by_value.values():
            for position in positions[1:]:
                first, again = sequences.get(positions[0]), sequences.get(position)
                if first is not None and again is not None and first[0] != again[0]:
                    renumbered += 1
                else:
                    duplicates += 1
        lines = [
            f"seed {seed}: {len(self.runs)} fault runs, {len(self.workload.acked)} records"
            f" acknowledged, {len(self.workload.failed)} sends failed, {len(stored)} stored,"
            f" {len(self.workload.read)} read by the checking consumer",
            "",
            "| fault | runs | acknowledged | lost | failover median / worst (s) "
            "| full ISR again median / worst (s) | not recovered |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for kind in dict.fromkeys(KINDS + ZOOKEEPER_KINDS):
            runs = [r for r in self.runs if r.kind == kind]
            if not runs:
                continue
            failovers = [f for r in runs if (f := self.failover_seconds(r)) is not None]
            recoveries = [r.recovered_in for r in runs if r.recovered_in is not None]
            lines.append(
                f"| {kind} | {len(runs)} | {sum(acked_by_run[id(r)] for r in runs)}"
                f" | {sum(lost_by_run[id(r)] for r in runs)}"
                f" | {spread(failovers)} | {spread(recoveries)}"
                f" | {sum(1 for r in runs if r.recovered_in is None)} |"
            )
        for kind in dict.fromkeys(KINDS + ZOOKEEPER_KINDS):
            failovers = [
                f
                for r in self.runs
                if r.kind == kind and (f := self.failover_seconds(r)) is not None
            ]
            if failovers:
                lines.append(
                    f"{kind} failovers, sorted (s): "
                    + ", ".join(f"{f:.2f}" for f in sorted(failovers))
                )
        lines += [
            "",
            f"lost outside fault runs: {lost_by_run[None]}; records read then vanished:"
            f" {vanished}; duplicates stored: {duplicates} under one producer epoch,"
            f" {renumbered} under two (renumbered by the client after an epoch bump);"
            f" divergent partitions: {divergent}",
            *[f"  {line}" for line in self.evidence],
        ]
        died = [
            f"run {number} ({run.kind}): {', '.join(run.died)}"
            for number, run in enumerate(self.runs, 1)
            if run.died
        ]
        if died:
            lines.append("NODES THAT DIED ON THEIR OWN (see their logs): " + "; ".join(died))
        lines += self.explanations(by_value, sequences)
        if unread:
            lines.append(
                f"THE FINAL READ STALLED: {unread} records below the high watermarks were not"
                " read, so they count as lost or vanished above; the run is not judged clean"
            )
        return Outcome(
            text="\n".join(lines),
            acknowledged=len(self.workload.acked),
            lost=sum(lost_by_run.values()),
            vanished=vanished,
            duplicates=duplicates,
            renumbered=renumbered,
            divergent=divergent,
            unrecovered=[r.kind for r in self.runs if r.recovered_in is None],
            unread=unread,
        )

    def explanations(
        self,
        by_value: dict[bytes, list[tuple[int, int]]],
        sequences: dict[tuple[int, int], tuple[int, int]],
    ) -> list[str]:
        """What a reader of a failed run needs first: where duplicates are, what the producer
        was told about its sequences, and the tracebacks in the nodes' logs."""
        lines = []
        twice = sorted(
            (positions, value) for value, positions in by_value.items() if len(positions) > 1
        )
        for positions, value in twice[:10]:
            acked = self.workload.acked.get(value)
            where = f"acknowledged at {acked[:2]}" if acked else "never acknowledged"
            copies = ", ".join(
                f"{position} (epoch, sequence {sequences.get(position)})" for position in positions
            )
            lines.append(f"stored twice: {value.decode()} at {copies}, {where}")
        if twice:
            events = [
                line.strip()
                for line in self.workload.producer_log.read_text(errors="replace").splitlines()
                if any(word in line for word in ("ERRSEQ", "DUPSEQ", "bump", "FATAL", "fatal"))
            ]
            lines.append(f"the producer's sequence events ({len(events)}, last 10):")
            lines += [f"  {event}" for event in events[-10:]]
        for node_id, node in sorted(self.nodes.items()):
            text = node.log.read_text(errors="replace") if node.log.exists() else ""
            if errors := traceback_endings(text):
                lines.append(f"{node_name(node_id)} logged {sum(errors.values())} tracebacks:")
                lines += [f"  {count} x {line}" for line, count in errors.most_common(5)]
        return lines

    def run_at(self, moment: float) -> int | None:
        for run in self.runs:
            if run.started <= moment < run.ended:
                return id(run)
        return None


class TransactionsNotServed(RuntimeError):
    """The cluster refuses InitProducerId with a transactional id: the transactional
    workload cannot run."""


def traceback_endings(text: str) -> Counter:
    """The exception line ending each traceback in a log, counted."""
    endings: Counter = Counter()
    in_traceback = False
    for line in text.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            in_traceback = True
        elif in_traceback and line and not line.startswith((" ", "During handling", "The above")):
            endings[line.strip()[:200]] += 1
            in_traceback = False
    return endings


def batch_headers(log: bytes) -> list[tuple[int, int, int, int, int]]:
    """(position, base offset, last offset, leader epoch, CRC) of each batch of a log."""
    headers = []
    position = 0
    while position + HEADER_SIZE <= len(log):
        header = read_header(log, position)
        if header.size <= 0 or position + header.size > len(log):
            break
        headers.append(
            (
                position,
                header.base_offset,
                header.last_offset,
                header.partition_leader_epoch,
                header.crc,
            )
        )
        position += header.size
    return headers


def first_differing_batch(logs: dict[str, bytes]) -> str:
    """Where replicas' logs first differ: the first batch (by its place in the log) whose
    offsets, epoch or CRC are not the same on every replica, or where one log ends."""
    walked = {name: batch_headers(log) for name, log in logs.items()}
    longest = max((len(headers) for headers in walked.values()), default=0)
    for index in range(longest):
        seen = {
            name: headers[index] if index < len(headers) else None
            for name, headers in walked.items()
        }
        if len({entry[1:] if entry else None for entry in seen.values()}) > 1:
            described = ", ".join(
                f"{name} "
                + (
                    "ends"
                    if entry is None
                    else f"offsets {entry[1]}-{entry[2]} epoch {entry[3]} crc {entry[4]:#010x}"
                    f" at byte {entry[0]}"
                )
                for name, entry in seen.items()
            )
            return f"first differing batch is #{index}: {described}"
    sizes = ", ".join(f"{name} {len(log)} bytes" for name, log in logs.items())
    return f"every batch header agrees; the bytes differ ({sizes})"


def fill_disk(directory: Path) -> Path:
    """Take every free byte of the file system holding `directory` with a ballast file
    (written until the disk refuses: the broker may be writing at the same time)."""
    ballast = directory / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    chunk = bytes(1 << 16)
    try:
        while True:
            os.write(fd, chunk)
    except OSError:
        try:
            while True:  # the last few bytes
                os.write(fd, b"\0")
        except OSError:
            pass
    finally:
        os.close(fd)
    return ballast


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    worst = max(values)
    worst_text = "never" if worst == float("inf") else f"{worst:.2f}"
    finite = [v for v in values if v != float("inf")]
    median = f"{statistics.median(finite):.2f}" if finite else "never"
    return f"{median} / {worst_text}"


def wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def run_chaos(
    runs: int,
    seed: int,
    kinds: tuple[str, ...],
    base: Path | None = None,
    zookeeper: bool = False,
    workload: str = "idempotent",
) -> Outcome:
    """Inject `runs` faults of `kinds` (each kind once first, then at random) and judge, on
    a cluster with a controller process or (`zookeeper`) on ZooKeeper, under the idempotent
    producer or the `transactional` workload (raises TransactionsNotServed when the cluster
    refuses transactions)."""
    base = Path(base or tempfile.mkdtemp(prefix="minibroker-chaos-"))
    chaos = Chaos(base, seed, zookeeper, workload)
    try:
        chaos.start()
        for index in range(runs):
            kind = kinds[index % len(kinds)] if index < len(kinds) else chaos.rng.choice(kinds)
            run = chaos.inject(kind)
            recovered = "never" if run.recovered_in is None else f"{run.recovered_in:.2f} s"
            failover = chaos.failover_seconds(run) if chaos.workload is not None else None
            first_ack = (
                "" if failover is None else f", first acknowledgement after {failover:.2f} s"
            )
            # The fault's wall-clock time, to find it in the nodes' logs.
            at = time.time() - (time.monotonic() - run.started)
            clock = time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at % 1 * 1000):03d}"
            halted = ", halted on its failed log dir and restarted" if run.halted else ""
            print(
                f"run {index + 1}/{runs} at {clock}: {kind} on {node_name(run.target)}{halted},"
                f" full ISR again after {recovered}{first_ack}",
                flush=True,
            )
            if run.died:
                print(f"stopping: {', '.join(run.died)} died on its own", flush=True)
                break
        outcome = chaos.report(seed)
        outcome.text += f"\nnode logs and data: {base}"
        return outcome
    finally:
        chaos.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.chaos", description=__doc__)
    parser.add_argument("--runs", type=int, default=12, help="faults to inject (default 12)")
    parser.add_argument("--seed", type=int, default=None, help="replay a run with its seed")
    parser.add_argument(
        "--zookeeper",
        action="store_true",
        help="brokers on ZooKeeper (each may be elected controller) instead of a controller",
    )
    parser.add_argument(
        "--kinds",
        default=None,
        help=f"comma-separated, of {', '.join(KINDS)}; with --zookeeper of"
        f" {', '.join(ZOOKEEPER_KINDS)} (default: all of the mode's)",
    )
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="idempotent",
        help="idempotent: one idempotent producer and a checking consumer (default);"
        " transactional: transactional producers and a consume-transform-produce stage,"
        " judged by faults/txn_checker.py (adds the kill-coordinator fault);"
        " share: a producer and share consumers acknowledging explicitly into a group with a"
        " DLQ, judged by faults/share_checker.py (adds the kill-share-coordinator fault)",
    )
    args = parser.parse_args(argv)
    available = ZOOKEEPER_KINDS if args.zookeeper else KINDS
    if args.workload == "transactional":
        available = (*available, *TXN_FAULTS)
    elif args.workload == "share":
        available = (*available, *SHARE_FAULTS)
    needed = zookeeper_installed() if args.zookeeper else LIBFAKETIME.exists()
    if os.geteuid() != 0 or shutil.which("ip") is None or not needed:
        print(
            "faults.chaos needs root, iproute2 (network namespaces, tmpfs) and libfaketime"
            " (apt-get install faketime), or with --zookeeper the zookeeper package",
            file=sys.stderr,
        )
        return 2
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    kinds = tuple(k for k in (args.kinds or ",".join(available)).split(",") if k)
    unknown = set(kinds) - set(available)
    if unknown:
        parser.error(f"fault kinds this mode does not have: {sorted(unknown)}")
    if "disk-read-error" in kinds and (FIU_RUN is None or FIU_CTRL is None):
        print(
            "the disk-read-error fault needs libfiu's fiu-run and fiu-ctrl"
            " (apt-get install fiu-utils)",
            file=sys.stderr,
        )
        return 2
    print(f"faults.chaos: seed {seed}", flush=True)
    # A SIGTERM unwinds like Ctrl-C, so the nodes, namespaces and tmpfs are cleaned up.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(128 + signal.SIGTERM))
    try:
        outcome = run_chaos(
            args.runs, seed, kinds, zookeeper=args.zookeeper, workload=args.workload
        )
    except TransactionsNotServed as refused:
        print(f"the transactional workload cannot run: {refused}", file=sys.stderr)
        return 2
    print(outcome.text)
    print(f"acknowledged: {outcome.acknowledged}; clean: {outcome.clean}")
    return 0 if outcome.clean else 1


def _exit(code: int) -> None:
    """Exit with `code`. A client thread still stuck in a librdkafka call that ignores its
    timeout (the transactional stage's send_offsets_to_transaction after its coordinator was
    killed; Chaos.close waits for it twice, the second time with the cluster gone) cannot be
    ended in this process, and Python's exit would wait on its client's destruction: the
    process then ends at once (os._exit), which ends every thread and every connection of it.
    Its network was closed already, and its unreachable route sent nothing anywhere."""
    sys.stdout.flush()
    sys.stderr.flush()
    stuck = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if stuck:
        print(f"faults.chaos: ending with client threads still running: {stuck}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    _exit(main())
