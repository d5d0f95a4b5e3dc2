"""The schema registry's bench row (issue 37): registrations and cached look-ups per second
from one client, and the produce throughput of a topic with schema validation against a plain
one, in one run on one broker. `python -m bench.registry_produce`

One broker with its registry on an `http://` listener (no authentication: the cost of TLS,
BASIC and ACLs is bench.registry_security's). From one client:

- registrations of distinct schemas (httpx, one kept-alive connection; each a write through
  `_schemas` with acks=-1), then look-ups of those schemas by id (GET /schemas/ids/{id}), which
  the broker answers from its copy of `_schemas` in memory;
- the same look-ups from a bare socket client on one kept-alive connection (the request
  written whole, the answer read by its Content-Length): what the broker serves when the
  client's own per-request cost is taken out. On a loaded 2-core machine httpx's Python work per
  request is most of what the first figure measures;
- confluent-kafka producers writing the same records (each value in Confluent's wire format
  with the subject's schema id) to two topics of the same partition count, one created with
  `confluent.value.schema.validation=true` and one without, in alternating runs (the machine
  is shared and noisy: alternating makes whatever else it does weigh on both alike); the table
  shows each topic's median records/s and the validating topic's ratio to the plain one. A
  record with an id the subject does not hold is sent to the validating topic first and must
  be refused with INVALID_RECORD, so the row cannot measure a topic whose validation is off.

The validating topic's leader decodes each batch's records to read their schema ids
(produce_validation.first_invalid); the plain topic's never decodes a record.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import tempfile
import time
from pathlib import Path

import httpx
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.registry_security import MEDIA, _measure
from minibroker.tools.launcher import BrokerProcess, free_port

PLAIN, VALIDATED = "registry-bench-plain", "registry-bench-validated"
SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Reading",
        "fields": [{"name": "sensor", "type": "string"}, {"name": "value", "type": "double"}],
    }
)


def _receive(sock: socket.socket) -> bytes:
    data = sock.recv(65536)
    if not data:
        raise RuntimeError("the registry closed the connection")
    return data


def raw_lookups(url: str, schema_id: int, count: int) -> float:
    """GET /schemas/ids/{id} ``count`` times on kept-alive sockets, a new one every 500
    requests (Hypercorn closes a connection after keep_alive_max_requests, 1,000); answers
    per second."""
    host, port = url.removeprefix("http://").split(":")
    request = f"GET /schemas/ids/{schema_id} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    started = time.perf_counter()
    done = 0
    while done < count:
        with socket.create_connection((host, int(port))) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(min(500, count - done)):
                sock.sendall(request)
                buffer = b""
                while b"\r\n\r\n" not in buffer:
                    buffer += _receive(sock)
                head, body = buffer.split(b"\r\n\r\n", 1)
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(f"look-up answered {head.splitlines()[0]!r}")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(body) < length:
                    body += _receive(sock)
                done += 1
    return count / (time.perf_counter() - started)


def framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + payload


def produce(bootstrap: str, topic: str, values: list[bytes]) -> float:
    """Records per second of one confluent-kafka producer writing ``values`` to ``topic``,
    from the first send to the last acknowledgement (acks=all, the client's default)."""
    failures: list[KafkaError] = []

    def delivered(error, _message):
        if error is not None:
            failures.append(error)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 262144})
    started = time.perf_counter()
    for value in values:
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise RuntimeError(f"{topic}: records still unacknowledged after 120 s")
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{topic}: {len(failures)} records refused, first {failures[0]}")
    return len(values) / elapsed


def refused(bootstrap: str, topic: str, value: bytes) -> KafkaError:
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "retries": 0})
    producer.produce(topic, value, on_delivery=lambda error, _m: errors.append(error))
    producer.flush(30)
    if not errors or errors[0] is None:
        raise RuntimeError(f"{topic} took a record with an unregistered schema id")
    return errors[0]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.registry_produce")
    parser.add_argument("--registrations", type=int, default=200)
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes, id included")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    directory = Path(tempfile.mkdtemp(prefix="registry-produce-"))
    kafka_port, registry_port = free_port(), free_port()
    url = f"http://127.0.0.1:{registry_port}"
    process = BrokerProcess.start(
        node_id=1,
        log_dir=directory / "broker",
        port=kafka_port,
        overrides={"schema.registry.listeners": url},
    )
    bootstrap = f"127.0.0.1:{kafka_port}"
    try:
        process.wait_ready(60)
        with httpx.Client(base_url=url, timeout=30) as client:
            registering, looking_up = _measure(client, args.registrations, args.lookups)
            answer = client.post(
                f"/subjects/{VALIDATED}-value/versions",
                content=json.dumps({"schema": SCHEMA}),
                headers={"content-type": MEDIA},
            )
            answer.raise_for_status()
            schema_id = answer.json()["id"]
        bare = raw_lookups(url, schema_id, args.lookups)

        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [
            NewTopic(PLAIN, args.partitions, 1),
            NewTopic(
                VALIDATED,
                args.partitions,
                1,
                config={"confluent.value.schema.validation": "true"},
            ),
        ]
        for future in admin.create_topics(topics).values():
            future.result(60)
        error = refused(bootstrap, VALIDATED, framed(schema_id + 1000, b"x"))
        if error.code() != KafkaError.INVALID_RECORD:
            raise KafkaException(error)

        payload = b"r" * max(0, args.size - 5)
        values = [framed(schema_id, payload) for _ in range(args.records)]
        rates: dict[str, list[float]] = {PLAIN: [], VALIDATED: []}
        for run in range(args.runs):
            order = (PLAIN, VALIDATED) if run % 2 == 0 else (VALIDATED, PLAIN)
            for topic in order:
                rates[topic].append(produce(bootstrap, topic, values))
    finally:
        process.stop()

    plain, validated = statistics.median(rates[PLAIN]), statistics.median(rates[VALIDATED])
    print(f"one minibroker broker, one client; {args.records:,} records of {args.size} B,")
    print(f"{args.partitions} partitions, median of {args.runs} alternating runs")
    print(f"{'registrations/s (httpx)':<44} {registering:>12,.0f}")
    print(f"{'look-ups by id/s (httpx)':<44} {looking_up:>12,.0f}")
    print(f"{'look-ups by id/s (bare socket client)':<44} {bare:>12,.0f}")
    print(f"{'produce, plain topic (records/s)':<44} {plain:>12,.0f}")
    print(f"{'produce, validating topic (records/s)':<44} {validated:>12,.0f}")
    print(f"{'validating / plain':<44} {validated / plain:>12.2f}")
    print("runs (records/s): plain " + ", ".join(f"{r:,.0f}" for r in rates[PLAIN]))
    print("                  validating " + ", ".join(f"{r:,.0f}" for r in rates[VALIDATED]))
    print(f"an unregistered id on the validating topic: {error.name()}")


if __name__ == "__main__":
    main()
