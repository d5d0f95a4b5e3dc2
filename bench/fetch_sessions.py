"""What do incremental fetch sessions (KIP-227) save? `python -m bench.fetch_sessions
[--partitions 1000] [--fetches 300] [--seconds 10] [--kafka]`

One broker, one topic of that many partitions, and a consumer of all of them that has read
everything (the partitions are idle): the consumer's Fetch v12 carries every partition each
time without a session (session id 0, epoch -1, as before KIP-227), and names none once a
session holds them (epoch 1, 2, ...). The bench prints, for both: the request and response
bytes per fetch; the broker's CPU per fetch for back-to-back fetches (max_wait 0); and the
broker's CPU per second of a consumer polling as the Java client does by default
(fetch.max.wait.ms 500: idle fetches park at the broker until it passes). With --kafka, the
same against Apache Kafka 4.4 (one KRaft node, bench/kafka_ref.py). Not run in CI.
"""

from __future__ import annotations

import argparse
import datetime
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from bench.procfs import cpu_seconds
from minibroker.protocol import codec
from minibroker.tools import wire
from minibroker.tools.launcher import BrokerProcess

TOPIC = "idle"
VERSION = 12


def _request(partitions: int, *, session_id: int, epoch: int, all_partitions: bool, wait_ms):
    topics = ()
    if all_partitions:
        topics = (
            FetchTopic(
                topic=TOPIC,
                partitions=tuple(
                    FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                    for p in range(partitions)
                ),
            ),
        )
    return FetchRequest(
        max_wait=datetime.timedelta(milliseconds=wait_ms),
        min_bytes=1,
        max_bytes=50 << 20,
        session_id=session_id,
        session_epoch=epoch,
        topics=topics,
        forgotten_topics_data=(),
    )


def wait_until_led(bootstrap: str, partitions: int, timeout_s: float = 300) -> None:
    """Until a full fetch of every partition answers no error (a broker applies the
    leadership of 1,000 new partitions in tens of seconds on a busy machine)."""
    deadline = time.monotonic() + timeout_s
    with wire.connect(bootstrap, 30) as client:
        while True:
            request = _request(partitions, session_id=0, epoch=-1, all_partitions=True, wait_ms=0)
            response = client.call(request)
            if all(p.error_code == 0 for t in response.responses for p in t.partitions):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the partitions were not led in time")
            time.sleep(1)


class Consumer:
    """A raw consumer of every partition, with or without a session."""

    def __init__(self, bootstrap: str, partitions: int, sessions: bool) -> None:
        self.client = wire.connect(bootstrap, 30)
        self.partitions = partitions
        self.sessions = sessions
        self.session_id = 0
        self.epoch = 0 if sessions else -1
        self.request_bytes = self.response_bytes = self.fetches = 0

    def fetch(self, wait_ms: int) -> None:
        full = self.session_id == 0
        request = _request(
            self.partitions,
            session_id=self.session_id,
            epoch=self.epoch,
            all_partitions=full,
            wait_ms=wait_ms,
        )
        body = codec.encode_entity(request)
        correlation_id = self.client.send_request(1, VERSION, body)
        frame = self.client.receive_frame()
        _, response = wire.decode_response(1, VERSION, frame)
        assert response.error_code == 0, response.error_code
        if self.sessions:
            if full:
                assert response.session_id != 0, "no session was created"
                self.session_id = response.session_id
            self.epoch += 1
        self.request_bytes += len(body)
        self.response_bytes += len(frame)
        self.fetches += 1
        del correlation_id

    def reset_counts(self) -> None:
        self.request_bytes = self.response_bytes = self.fetches = 0


def measure(node, partitions: int, sessions: bool, fetches: int, seconds: float):
    consumer = Consumer(node.bootstrap, partitions, sessions)
    consumer.fetch(0)  # the full fetch (and the session, if any)
    consumer.fetch(0)
    consumer.reset_counts()
    cpu = cpu_seconds(node.pid)
    for _ in range(fetches):
        consumer.fetch(0)
    busy_cpu = (cpu_seconds(node.pid) - cpu) / fetches
    request_bytes = consumer.request_bytes / consumer.fetches
    response_bytes = consumer.response_bytes / consumer.fetches
    cpu = cpu_seconds(node.pid)
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        consumer.fetch(500)
    idle_cpu = (cpu_seconds(node.pid) - cpu) / (time.monotonic() - started)
    consumer.client.close()
    return request_bytes, response_bytes, busy_cpu, idle_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--fetches", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--kafka", action="store_true", help="measure Apache Kafka 4.4 too (java/fetch.sh jars)"
    )
    args = parser.parse_args()
    print(
        f"a consumer of {args.partitions} idle partitions, Fetch v{VERSION}"
        f" ({args.fetches} back-to-back fetches, then {args.seconds:.0f} s at"
        " fetch.max.wait.ms 500)"
    )
    print(
        f"{'':34} {'request B':>10} {'response B':>11} {'CPU ms/fetch':>13}"
        f" {'CPU ms/s (idle poll)':>21}"
    )
    with tempfile.TemporaryDirectory() as work:
        node = BrokerProcess.start(1, Path(work) / "data")
        try:
            node.wait_ready(30)
            _run("minibroker", node, node.pid, args)
        finally:
            node.stop()
        if args.kafka:
            from bench.kafka_ref import KafkaCluster

            kafka = KafkaCluster.start(Path(work) / "kafka", nodes=1)
            try:
                process = kafka.nodes[0].process
                assert process is not None
                _run("Kafka 4.4", kafka, process.pid, args)
            finally:
                kafka.stop()


class _Pid:
    def __init__(self, bootstrap: str, pid: int) -> None:
        self.bootstrap = bootstrap
        self.pid = pid


def _run(system: str, target, pid: int, args) -> None:
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    admin.create_topics([NewTopic(TOPIC, args.partitions, 1)])[TOPIC].result(120)
    wait_until_led(target.bootstrap, args.partitions)
    for sessions in (False, True):
        request_bytes, response_bytes, busy, idle = measure(
            _Pid(target.bootstrap, pid), args.partitions, sessions, args.fetches, args.seconds
        )
        name = f"{system}, " + ("incremental session" if sessions else "no session (full)")
        print(
            f"{name:34} {request_bytes:>10,.0f} {response_bytes:>11,.0f}"
            f" {busy * 1000:>13.2f} {idle * 1000:>21.1f}"
        )


if __name__ == "__main__":
    main()
