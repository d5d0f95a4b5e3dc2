"""Many partitions (issue 39): a 3-broker cluster holding N partitions with 3 replicas each,
minibroker and Apache Kafka 4.4 side by side.
`python -m bench.many_partitions [--partitions 20000] [--systems minibroker,kafka]`

On each system, from a fresh cluster:

- creation: N/100 topics of 100 partitions (RF=3) made through the controller by
  confluent-kafka's AdminClient, `--batch` (10) topics per CreateTopics request, one request at
  a time; timed until the last request is answered (`create_s`) and until every broker's
  Metadata shows every partition led with its full ISR (`in_sync_s`). Then 10 records go to
  every partition (acks=all), as `bench.cluster_restart` writes them.
- memory: each process's RSS (VmRSS from /proc) before the topics and after the records,
  divided by the replicas the broker holds (N for RF=3 on 3 brokers). For Kafka also the live
  heap (the total of `jcmd PID GC.class_histogram`, which runs a full GC first) before and
  after, since its RSS is mostly heap G1 has touched, garbage included. minibroker's cluster has
  a controller process of its own (KRaft's separate controller); Kafka's nodes are combined
  broker+controller nodes, so the cluster totals are compared too.
- idle CPU: each process's CPU time over 20 s with no client, once every partition is in
  sync and written (`idle_cpu_pct`, % of one core): what holding the partitions costs (the
  followers' fetches every replica.fetch.wait.max.ms, timers).
- Metadata latency: one Metadata v12 request for all topics on one connection to the first
  broker, from the request sent to the whole response read (not decoded), median of 5 after
  one untimed request.
- a full restart: every node stopped (SIGTERM side by side, minibroker's controller last),
  every node started on the same data; timed until every broker answers (`answering_s`), until
  every partition is led and its ISR full on every broker's Metadata (`restart_in_sync_s`, the
  figure the target compares), and until every leader is the preferred replica as well
  (`restart_whole_s`, when it happens within `--preferred-wait` seconds more: Kafka moves
  leaders back only at its leader.imbalance.check.interval.seconds, 300).
- minibroker in ZooKeeper mode (`--zk-failover`, on by default with minibroker, or alone as
  the system `minibroker-zk`): a second
  cluster of 3 brokers on a local ZooKeeper holding the same partitions; the active
  controller (a leader too) is killed with SIGKILL, and the clock runs until ZooKeeper names a
  new one (`zk_elected_s`) and until the two survivors' Metadata show every partition led by a
  live broker (`zk_all_led_s`), as `bench.zk_failover` measures a failover (there by producing
  to every partition; with thousands of partitions Metadata is the cheaper witness).

Kafka runs with Kafka's own default heap (`-Xmx1G -Xms1G`, kafka-server-start.sh's
KAFKA_HEAP_OPTS) unless `--kafka-heap` says otherwise, G1 as kafka-run-class.sh sets it.
`--profile DIR` runs py-spy on minibroker's controller and brokers during the creation and
the restart, and on the two survivors of the ZooKeeper-mode failover from the kill until every
partition is led, and prints where their time went (raw profiles in DIR). The failover's
`zk_elected_to_led_s` is the time from the election to every partition led: the new
controller's own work (issue 39 found it growing faster than the partitions).

Not a test and not part of `python -m bench`. The limit on open files matters here: every
partition's active segment holds a file descriptor on both systems, so a broker holding N
replicas needs N descriptors and more (RLIMIT_NOFILE is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.cluster_restart import RECORDS_PER_PARTITION, views, wait_whole
from bench.profile_row import print_shares, py_spy, summarize
from minibroker.tools.launcher import Cluster, ZooKeeperServer, zookeeper_installed
from minibroker.tools.wire import connect

BROKERS = 3
REPLICATION_FACTOR = 3
PARTITIONS_PER_TOPIC = 100
KAFKA_DEFAULT_HEAP = ("-Xmx1G", "-Xms1G")
TIMEOUT_S = 1800.0
# A node still running this long after SIGTERM is killed (and its exit code says so).
STOP_TIMEOUT_S = 300.0
POLL_S = 0.5
METADATA_RUNS = 5
METADATA_API_KEY = 3
METADATA_VERSION = 12
# The idle CPU is measured over this long, once every partition is in sync and written.
IDLE_CPU_S = 20.0


# -- /proc and the JVM ------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    """VmRSS: the resident set now."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmRSS")


def jvm_live_heap_bytes(pid: int) -> int:
    """The bytes of live objects: `jcmd PID GC.class_histogram` (a full GC first), its Total."""
    output = subprocess.run(
        ["jcmd", str(pid), "GC.class_histogram"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    for line in reversed(output.splitlines()):
        if line.strip().startswith("Total"):
            return int(line.split()[-1])
    raise RuntimeError(f"jcmd {pid} GC.class_histogram printed no Total:\n{output[-500:]}")


def jvm_heap_used_bytes(pid: int) -> int:
    """G1's used heap as `jcmd PID GC.heap_info` prints it ("used NNNK")."""
    output = subprocess.run(
        ["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    for line in output.splitlines():
        if "used" in line and "heap" in line:
            # " garbage-first heap   total 1048576K, used 263466K [0x..., 0x...)"
            used = line.split("used")[1].split()[0]
            return int(used.rstrip("K")) * 1024
    raise RuntimeError(f"jcmd {pid} GC.heap_info printed no used heap:\n{output[-500:]}")


# -- one system as the bench sees it ----------------------------------------------------------


class System:
    """What the measurements need of a cluster: its nodes (node_id, port, pid), how to stop and
    start all of them, and the processes whose memory counts."""

    name: str
    bootstrap: str

    def brokers(self) -> list:
        raise NotImplementedError

    def processes(self) -> dict[str, int]:
        """Process name -> pid, every process of the cluster."""
        raise NotImplementedError

    def stop_all(self) -> dict[str, int]:
        raise NotImplementedError

    def start_all(self) -> None:
        raise NotImplementedError

    def wait_ready(self, timeout: float) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class MinibrokerSystem(System):
    name = "minibroker"

    def __init__(self, work_dir: Path):
        self.cluster = Cluster.start(
            work_dir,
            brokers=BROKERS,
            overrides={"default.replication.factor": REPLICATION_FACTOR},
            timeout=120,
        )
        self.bootstrap = self.cluster.bootstrap

    def brokers(self) -> list:
        return list(self.cluster.brokers.values())

    def processes(self) -> dict[str, int]:
        return {f"{node.kind}-{node.node_id}": node.pid for node in self.cluster.nodes}

    def stop_all(self) -> dict[str, int]:
        """SIGTERM the brokers side by side, then the controller (as Cluster.stop), waiting up
        to STOP_TIMEOUT_S for each: a shutdown with many partitions may take longer than the
        launcher's 20 s."""
        codes = {}
        controller = [self.cluster.controller] if self.cluster.controller else []
        for group in (self.brokers(), controller):
            for node in group:
                node.terminate()
            for node in group:
                try:
                    codes[f"{node.kind}-{node.node_id}"] = node._running_process().wait(
                        STOP_TIMEOUT_S
                    )
                except subprocess.TimeoutExpired:
                    codes[f"{node.kind}-{node.node_id}"] = node.kill()
        return codes

    def start_all(self) -> None:
        for node in self.cluster.nodes:
            node._launch()

    def wait_ready(self, timeout: float) -> None:
        self.cluster.wait_ready(timeout)

    def close(self) -> None:
        for node in self.cluster.nodes:
            if node.running:
                node.kill()


class KafkaSystem(System):
    name = "kafka"

    def __init__(self, work_dir: Path, heap: tuple[str, ...]):
        from bench.kafka_ref import KafkaCluster, missing_reason

        reason = missing_reason("kafka")
        if reason is not None:
            raise RuntimeError(f"Apache Kafka cannot start: {reason}")
        self.heap = heap
        self.cluster = KafkaCluster.start(work_dir, BROKERS, heap=heap)
        self.bootstrap = self.cluster.bootstrap

    def brokers(self) -> list:
        return list(self.cluster.nodes)

    def processes(self) -> dict[str, int]:
        return {f"kafka-{node.node_id}": node.process.pid for node in self.cluster.nodes}

    def stop_all(self) -> dict[str, int]:
        codes = self.cluster.stop(timeout=STOP_TIMEOUT_S)
        return {f"kafka-{node}": code for node, code in codes.items()}

    def start_all(self) -> None:
        for node in self.cluster.nodes:
            self.cluster.launch(node)

    def wait_ready(self, timeout: float) -> None:
        self.cluster.wait_ready(timeout)

    def close(self) -> None:
        self.cluster.kill()


# -- the measurements -------------------------------------------------------------------------


def topic_names(partitions: int) -> list[str]:
    if partitions % PARTITIONS_PER_TOPIC:
        raise SystemExit(f"--partitions must be a multiple of {PARTITIONS_PER_TOPIC}")
    return [f"many-{index:04d}" for index in range(partitions // PARTITIONS_PER_TOPIC)]


def create_in_batches(bootstrap: str, names: list[str], batch: int) -> list[float]:
    """CreateTopics of `batch` topics a request, one request at a time; each request's
    seconds."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 300000})
    seconds = []
    for start in range(0, len(names), batch):
        began = time.monotonic()
        futures = admin.create_topics(
            [
                NewTopic(name, PARTITIONS_PER_TOPIC, REPLICATION_FACTOR)
                for name in names[start : start + batch]
            ],
            request_timeout=600,
            operation_timeout=600,
        )
        for future in futures.values():
            future.result(900)
        seconds.append(time.monotonic() - began)
        print(
            f"  CreateTopics {start // batch + 1}: {batch} topics in {seconds[-1]:.2f} s",
            flush=True,
        )
    return seconds


def produce(bootstrap: str, names: list[str]) -> None:
    """RECORDS_PER_PARTITION records to every partition, as bench.cluster_restart writes
    them but with acks=1 (see below) and a longer wait."""
    # acks=1: librdkafka sends a Produce request per partition, which a broker answers one
    # after another on a connection (as Kafka does), so with acks=all each waited for the
    # followers' next fetch and at 2,000 partitions hundreds were still queued after 60 s.
    # The records are replicated all the same: the bench waits for full ISRs after.
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 1000,
            "request.timeout.ms": 300000,
            "message.timeout.ms": int(TIMEOUT_S * 1000),
        }
    )
    for name in names:
        for partition in range(PARTITIONS_PER_TOPIC):
            for number in range(RECORDS_PER_PARTITION):
                while True:
                    try:
                        producer.produce(name, value=b"x%d" % number, partition=partition)
                        break
                    except BufferError:  # the local queue is full: let deliveries drain it
                        producer.poll(0.5)
            producer.poll(0)
    left = producer.flush(TIMEOUT_S)
    if left:
        raise RuntimeError(f"{left} records still undelivered after {TIMEOUT_S} s")


def metadata_latency(port: int, runs: int = METADATA_RUNS) -> tuple[float, int]:
    """(median seconds, response bytes) of a Metadata v12 request for all topics, the response
    read whole but not decoded; one untimed request first."""
    # topics null (a compact nullable array: length + 1, so 0), allow_auto_topic_creation and
    # include_topic_authorized_operations false, no tagged fields.
    body = bytes([0, 0, 0, 0])
    with connect(("127.0.0.1", port), 120) as client:
        client.send_request(METADATA_API_KEY, METADATA_VERSION, body)
        size = len(client.receive_frame())
        seconds = []
        for _ in range(runs):
            began = time.perf_counter()
            client.send_request(METADATA_API_KEY, METADATA_VERSION, body)
            size = len(client.receive_frame())
            seconds.append(time.perf_counter() - began)
    return statistics.median(seconds), size


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu_percent(processes: dict[str, int], seconds: float) -> dict[str, float]:
    """Each process's CPU over ``seconds`` with no client, as % of one core: the cost of
    holding the partitions (followers' fetches, timers), what a Metadata request waits
    behind on minibroker's one event loop."""
    before = {name: cpu_seconds(pid) for name, pid in processes.items()}
    began = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - began
    return {
        name: round((cpu_seconds(pid) - before[name]) / elapsed * 100, 1)
        for name, pid in processes.items()
    }


def node_id(process_name: str) -> int:
    """ "broker-2" -> 2, "kafka-3" -> 3, "controller-0" -> 0."""
    return int(process_name.rsplit("-", 1)[1])


def replicas_held(brokers: Iterable) -> dict[int, int]:
    """Broker id -> the replicas it holds, from the first broker's Metadata."""
    view = next(v for v in views(brokers).values() if v)
    held: dict[int, int] = {}
    for _, replicas, _ in view.values():
        for node in replicas:
            held[node] = held.get(node, 0) + 1
    return held


class Profiler:
    """py-spy record on some processes until stopped (`--profile`)."""

    def __init__(self, out: Path | None, phase: str, processes: dict[str, int]):
        self.out = out
        self.phase = phase
        self.spies: dict[str, subprocess.Popen] = {}
        if out is None:
            return
        out.mkdir(parents=True, exist_ok=True)
        for name, pid in processes.items():
            self.spies[name] = subprocess.Popen(
                [py_spy(), "record", "--pid", str(pid), "--rate", "100", "--format", "raw",
                 "--nonblocking", "--output", str(out / f"{phase}-{name}.txt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip

    def stop(self) -> None:
        for spy in self.spies.values():
            spy.send_signal(signal.SIGINT)
        for spy in self.spies.values():
            try:
                spy.wait(60)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
        for name in self.spies:
            path = self.out / f"{self.phase}-{name}.txt"
            if path.exists():
                total, own, inclusive = summarize(path.read_text(), 12)
                print(f"\n[{self.phase}] {name}: {total} busy samples at 100/s ({path})")
                print_shares(total, own, inclusive)


def measure(
    system_factory: Callable[[Path], System],
    work_dir: Path,
    partitions: int,
    batch: int,
    preferred_wait: float,
    profile: Path | None,
) -> dict[str, object]:
    names = topic_names(partitions)
    system = system_factory(work_dir)
    figures: dict[str, object] = {"system": system.name}
    try:
        time.sleep(5)  # let start-up work settle before the first RSS
        processes = system.processes()
        rss_before = {name: rss_bytes(pid) for name, pid in processes.items()}
        heap_before = {}
        if isinstance(system, KafkaSystem):
            heap_before = {name: jvm_live_heap_bytes(pid) for name, pid in processes.items()}
            figures["kafka_heap_options"] = " ".join(system.heap)

        print(f"{system.name}: creating {len(names)} topics x {PARTITIONS_PER_TOPIC}", flush=True)
        profiler = Profiler(profile, f"{system.name}-create", processes)
        began = time.monotonic()
        try:
            requests = create_in_batches(system.bootstrap, names, batch)
            figures["create_s"] = time.monotonic() - began
            figures["create_request_s"] = {
                "first": requests[0],
                "last": requests[-1],
                "median": statistics.median(requests),
            }
            in_sync = wait_whole(
                lambda: views(system.brokers(), timeout=60),
                partitions,
                began,
                began + TIMEOUT_S,
                preferred=False,
                poll_s=POLL_S,
            )
        finally:
            profiler.stop()
        figures["in_sync_s"] = in_sync["full_isr_s"]
        print(f"{system.name}: created in {figures['create_s']:.1f} s, in sync after"
              f" {figures['in_sync_s']:.1f} s; producing", flush=True)  # fmt: skip
        produce(system.bootstrap, names)
        wait_whole(
            lambda: views(system.brokers(), timeout=60),
            partitions,
            time.monotonic(),
            time.monotonic() + TIMEOUT_S,
            preferred=False,
            poll_s=POLL_S,
        )

        time.sleep(5)
        held = replicas_held(system.brokers())
        figures["replicas_held"] = held
        rss_after = {name: rss_bytes(pid) for name, pid in processes.items()}
        figures["rss_mib"] = {
            name: [round(rss_before[name] / 2**20, 1), round(rss_after[name] / 2**20, 1)]
            for name in processes
        }
        figures["rss_kib_per_replica"] = {
            name: round((rss_after[name] - rss_before[name]) / 1024 / held[node_id(name)], 2)
            for name in processes
            if node_id(name) in held
        }
        figures["open_fds"] = {
            name: len(os.listdir(f"/proc/{pid}/fd")) for name, pid in processes.items()
        }
        figures["cluster_rss_kib_per_partition"] = round(
            sum(rss_after[n] - rss_before[n] for n in processes) / 1024 / partitions, 2
        )
        if heap_before:
            heap_after = {name: jvm_live_heap_bytes(pid) for name, pid in processes.items()}
            figures["heap_used_mib_after"] = {
                name: round(jvm_heap_used_bytes(pid) / 2**20, 1) for name, pid in processes.items()
            }
            figures["live_heap_mib"] = {
                name: [round(heap_before[name] / 2**20, 1), round(heap_after[name] / 2**20, 1)]
                for name in processes
            }
            figures["live_heap_kib_per_replica"] = {
                name: round(
                    (heap_after[name] - heap_before[name]) / 1024 / held[node_id(name)],
                    2,
                )
                for name in processes
            }
        figures["idle_cpu_pct"] = idle_cpu_percent(processes, IDLE_CPU_S)
        latency, size = metadata_latency(system.brokers()[0].port)
        figures["metadata_all_topics_ms"] = round(latency * 1000, 1)
        figures["metadata_bytes"] = size
        print(f"{system.name}: {json.dumps(figures)}", flush=True)

        print(f"{system.name}: full restart", flush=True)
        stop_began = time.monotonic()
        figures["stop_exit_codes"] = system.stop_all()
        figures["stop_s"] = round(time.monotonic() - stop_began, 1)
        started = time.monotonic()
        system.start_all()
        profiler = Profiler(profile, f"{system.name}-restart", system.processes())
        try:
            system.wait_ready(TIMEOUT_S)
            figures["answering_s"] = round(time.monotonic() - started, 1)
            restart = wait_whole(
                lambda: views(system.brokers(), timeout=60),
                partitions,
                started,
                started + TIMEOUT_S,
                preferred=False,
                poll_s=POLL_S,
            )
            figures["restart_in_sync_s"] = round(restart["full_isr_s"], 1)
            if "whole_s" in restart:
                figures["restart_whole_s"] = round(restart["whole_s"], 1)
            elif preferred_wait > 0:
                try:
                    whole = wait_whole(
                        lambda: views(system.brokers(), timeout=60),
                        partitions,
                        started,
                        time.monotonic() + preferred_wait,
                        preferred=True,
                        poll_s=POLL_S,
                    )
                    figures["restart_whole_s"] = round(whole["whole_s"], 1)
                except TimeoutError:
                    figures["restart_whole_s"] = f"> {time.monotonic() - started:.0f}"
        finally:
            profiler.stop()
    finally:
        system.close()
    return figures


def zk_failover(
    work_dir: Path,
    partitions: int,
    batch: int,
    session_timeout_ms: int,
    profile: Path | None = None,
) -> dict:
    """minibroker on ZooKeeper: the active controller killed; seconds until a new one is named
    and until every partition is led by a live broker in the survivors' Metadata
    (`zk_elected_to_led_s` is the difference, the new controller's own work). With
    ``profile``, py-spy records the two survivors from the kill until every partition is led
    (the phase `minibroker-zk-failover`)."""
    import json as json_module

    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    names = topic_names(partitions)
    chroot = "/minibroker"
    zookeeper = ZooKeeperServer.start(work_dir / "zookeeper" / "data")
    cluster = None
    zk = None
    try:
        cluster = Cluster.start(
            work_dir,
            brokers=BROKERS,
            overrides={
                "default.replication.factor": REPLICATION_FACTOR,
                "zookeeper.session.timeout.ms": session_timeout_ms,
            },
            zookeeper_connect=zookeeper.connect_string(chroot),
            timeout=120,
        )
        zk = KazooClient(hosts=zookeeper.connect_string(chroot))
        zk.start(30)

        def controller() -> int | None:
            try:
                return json_module.loads(zk.get("/controller")[0])["brokerid"]
            except NoNodeError:
                return None

        began = time.monotonic()
        create_in_batches(cluster.bootstrap, names, batch)
        created = time.monotonic() - began
        brokers = list(cluster.brokers.values())
        wait_whole(lambda: views(brokers, 60), partitions, began, began + TIMEOUT_S, False, POLL_S)
        in_sync = time.monotonic() - began
        victim = controller()
        survivors = [broker for broker in brokers if broker.node_id != victim]
        live = {broker.node_id for broker in survivors}
        profiler = Profiler(
            profile,
            "minibroker-zk-failover",
            {f"broker-{broker.node_id}": broker.pid for broker in survivors},
        )
        killed_at = time.monotonic()
        cluster.brokers[victim].kill()
        deadline = killed_at + TIMEOUT_S
        try:
            return _await_failover(
                controller, victim, survivors, live, partitions, killed_at, deadline, {
                    "zk_create_s": round(created, 1),
                    "zk_in_sync_s": round(in_sync, 1),
                    "zk_session_timeout_ms": session_timeout_ms,
                },
            )  # fmt: skip
        finally:
            profiler.stop()
    finally:
        if zk is not None:
            zk.stop()
            zk.close()
        if cluster is not None:
            for node in cluster.nodes:
                if node.running:
                    node.kill()
        zookeeper.stop()


def _await_failover(controller, victim, survivors, live, partitions, killed_at, deadline, figures):
    """Poll until ZooKeeper names a controller other than ``victim`` and every partition is
    led by a ``live`` broker in each survivor's Metadata; the figures with the seconds."""
    elected = None
    while time.monotonic() < deadline:
        now = time.monotonic() - killed_at
        if elected is None and controller() not in (None, victim):
            elected = now
            print(f"  new controller {controller()} after {now:.1f} s", flush=True)
        found = views(survivors, 60)
        if elected is not None and all(
            view is not None
            and len(view) == partitions
            and all(leader in live for leader, _, _ in view.values())
            for view in found.values()
        ):
            all_led = time.monotonic() - killed_at
            return {
                **figures,
                "zk_elected_s": round(elected, 1),
                "zk_all_led_s": round(all_led, 1),
                "zk_elected_to_led_s": round(all_led - elected, 1),
            }
        time.sleep(POLL_S)
    raise TimeoutError(f"not every partition led {TIMEOUT_S} s after the controller died")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.many_partitions", description=__doc__)
    parser.add_argument("--partitions", type=int, default=20000)
    parser.add_argument("--systems", default="minibroker,kafka")
    parser.add_argument("--batch", type=int, default=10, help="topics per CreateTopics request")
    parser.add_argument(
        "--kafka-heap", default=" ".join(KAFKA_DEFAULT_HEAP), help="Kafka's KAFKA_HEAP_OPTS"
    )
    parser.add_argument(
        "--preferred-wait",
        type=float,
        default=0.0,
        help="after the restart, seconds more to wait for every leader to be preferred",
    )
    parser.add_argument(
        "--zk-failover",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="minibroker on ZooKeeper: the controller killed (with minibroker in --systems)",
    )
    parser.add_argument("--session-timeout-ms", type=int, default=18000)
    parser.add_argument("--profile", type=Path, help="py-spy minibroker's nodes into this dir")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--keep", action="store_true", help="keep the data and node logs")
    args = parser.parse_args()
    systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(
        f"{args.partitions} partitions (RF {REPLICATION_FACTOR}, {BROKERS} brokers), commit"
        f" {commit}, load average {os.getloadavg()}, RLIMIT_NOFILE"
        f" {resource.getrlimit(resource.RLIMIT_NOFILE)}",
        flush=True,
    )
    results = []
    base = Path(tempfile.mkdtemp(prefix="many-partitions-"))
    try:
        for name in systems:
            if name == "minibroker-zk":  # the ZooKeeper-mode failover alone
                load = os.getloadavg()
                figures = {"system": name}
                figures.update(
                    zk_failover(
                        base / name,
                        args.partitions,
                        args.batch,
                        args.session_timeout_ms,
                        args.profile,
                    )
                )
                figures["load_average"] = [list(load), list(os.getloadavg())]
                print(f"{name}: {json.dumps(figures)}", flush=True)
                results.append(figures)
                continue
            if name == "minibroker":
                factory = MinibrokerSystem
                profile = args.profile
            elif name == "kafka":
                heap = tuple(args.kafka_heap.split())

                def factory(work_dir: Path, heap=heap) -> System:
                    return KafkaSystem(work_dir, heap)

                profile = None
            else:
                raise SystemExit(f"unknown system {name!r}: minibroker, kafka or minibroker-zk")
            load = os.getloadavg()
            figures = measure(
                factory, base / name, args.partitions, args.batch, args.preferred_wait, profile
            )
            if name == "minibroker" and args.zk_failover:
                if zookeeper_installed():
                    figures.update(
                        zk_failover(
                            base / "minibroker-zk",
                            args.partitions,
                            args.batch,
                            args.session_timeout_ms,
                            args.profile,
                        )
                    )
                else:
                    figures["zk_failover"] = "skipped: no ZooKeeper installed"
            figures["load_average"] = [list(load), list(os.getloadavg())]
            print(f"{name}: {json.dumps(figures)}", flush=True)
            results.append(figures)
    finally:
        if not args.keep:
            subprocess.run(["rm", "-rf", str(base)], check=False)
    summary = {
        "partitions": args.partitions,
        "commit": commit,
        "records_per_partition": RECORDS_PER_PARTITION,
        "results": results,
    }
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
