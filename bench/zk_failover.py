"""How long a ZooKeeper-mode cluster takes to serve every partition again after its
controller, which also leads partitions, is killed.
`python -m bench.zk_failover [--session-timeout-ms 18000] [--runs 3] [--victim other]`

A local ZooKeeper and 3 brokers (Kafka's other defaults), a topic of 6 partitions with 3
replicas and min.insync.replicas=2. A confluent-kafka producer (acks=all, idempotent) sends
one record to every partition every 10 ms. The active controller (read from /controller) is
killed with SIGKILL; the clock runs from the kill until, for every partition, a record sent
after the kill was acknowledged. It also prints when ZooKeeper named the new controller. The
controller's death is noticed when its ZooKeeper session expires, so the figure is about
zookeeper.session.timeout.ms plus the election, the state load and the clients' retries.
With `--victim other` the broker killed is a leader that is not the controller: the
controller fences it when its connection closes and its port refuses connections.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from bench.retry import close_producer
from minibroker.tools.launcher import Cluster, ZooKeeperServer

TOPIC = "failover"
PARTITIONS = 6
SEND_INTERVAL_S = 0.01
TIMEOUT_S = 120.0
POLL_S = 0.01
CHROOT = "/minibroker"


def _controller(zk: KazooClient) -> int | None:
    try:
        return json.loads(zk.get("/controller")[0])["brokerid"]
    except NoNodeError:
        return None


def _one_run(base: Path, session_timeout_ms: int, victim: str) -> tuple[float | None, float]:
    """(seconds until ZooKeeper named a new controller, None when the controller was not
    the victim; seconds until every partition took a record sent after the kill)."""
    zookeeper = ZooKeeperServer.start(base / "zookeeper" / "data")
    cluster = Cluster.start(
        base,
        brokers=3,
        overrides={"zookeeper.session.timeout.ms": session_timeout_ms},
        zookeeper_connect=zookeeper.connect_string(CHROOT),
    )
    zk = KazooClient(hosts=zookeeper.connect_string(CHROOT))
    zk.start(30)
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[
            TOPIC
        ].result(30)
        return _measure(cluster, zk, victim)
    finally:
        zk.stop()
        zk.close()
        cluster.stop()
        zookeeper.stop()


def _measure(cluster: Cluster, zk: KazooClient, victim: str) -> tuple[float | None, float]:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
            "retry.backoff.ms": 20,
            "message.timeout.ms": int(TIMEOUT_S * 1000),
        }
    )
    killed_at: list[float] = []
    recovered: dict[int, float] = {}
    stop = threading.Event()

    def on_delivery(error, message) -> None:
        sent_at = float(message.value())
        if error is None and killed_at and sent_at > killed_at[0]:
            recovered.setdefault(message.partition(), time.monotonic())

    def send() -> None:
        while not stop.is_set():
            for partition in range(PARTITIONS):
                producer.produce(
                    TOPIC,
                    value=repr(time.monotonic()).encode(),
                    partition=partition,
                    on_delivery=on_delivery,
                )
            producer.poll(SEND_INTERVAL_S)
        producer.flush(TIMEOUT_S)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while (controller := _controller(zk)) is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        time.sleep(1.0)  # the producer is up and acknowledged on every partition
        if victim == "controller":
            killed = controller
        else:
            leaders = {cluster.leader_of(TOPIC, partition) for partition in range(PARTITIONS)}
            killed = min(leaders - {controller})
        killed_at.append(time.monotonic())
        cluster.brokers[killed].kill()
        elected = None
        if killed == controller:
            while _controller(zk) in (None, controller) and time.monotonic() < deadline:
                time.sleep(POLL_S)
            elected = time.monotonic() - killed_at[0]
        while len(recovered) < PARTITIONS and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if len(recovered) < PARTITIONS:
            raise RuntimeError(f"only partitions {sorted(recovered)} recovered in {TIMEOUT_S}s")
        return elected, max(recovered.values()) - killed_at[0]
    finally:
        stop.set()
        sender.join(TIMEOUT_S)
        close_producer(producer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session-timeout-ms", type=int, default=18000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--victim",
        choices=("controller", "other"),
        default="controller",
        help="kill the controller (default) or a leader that is not the controller",
    )
    args = parser.parse_args()
    elections, recoveries = [], []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="zk-failover-") as base:
            elected, recovered = _one_run(Path(base), args.session_timeout_ms, args.victim)
        recoveries.append(recovered)
        if elected is not None:
            elections.append(elected)
        shown = "" if elected is None else f"new controller after {elected:.2f} s, "
        print(f"run {run + 1}: {shown}every partition acknowledging after {recovered:.2f} s")
    shown = "" if not elections else f"median new controller {statistics.median(elections):.2f} s, "
    print(
        f"{args.victim} killed, zookeeper.session.timeout.ms={args.session_timeout_ms}: {shown}"
        f"median every partition produced {statistics.median(recoveries):.2f} s"
        f" ({args.runs} runs)"
    )


if __name__ == "__main__":
    main()
