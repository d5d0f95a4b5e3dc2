"""The produce path's per-request cost (issue 26): `python -m bench.produce_cost`.

One fresh single-node minibroker, one topic of `--partitions` partitions (RF=1), and a client
that is nothing but a socket: it sends `--requests` ProduceRequests (acks=1, version
`--version`), each of one partition (in turn over the topic's partitions, as librdkafka 2.0.2
sends them: one partition per request) with one uncompressed, non-idempotent record batch of
`--records` records of `--size` bytes, at most `--in-flight` unanswered at a time (the
clients' max.in.flight.requests.per.connection, 5), and checks every answer's error code.
The request bytes are built once (the broker stamps the offsets), so the client's CPU is a
send and a receive per request and the broker's CPU is the whole cost of serving them.

Printed per run: the broker's CPU seconds over the timed requests (/proc/<pid>/stat, read
just before the first and after the last answer), as CPU microseconds per request and CPU
seconds per GB of record batches, the share of it spent in the kernel (system time: the
socket and file system calls), with requests/s and the load average. On a loaded machine
py-spy's samples are not CPU time: it counts a thread that is runnable but not running (as
after a write that woke the client) as busy, in the Python line it stopped at. `--warmup` requests
go first, untimed (the broker's code paths and the segment's first pages warm). `--profile
DIR` attaches py-spy (`record --rate 200 --format raw --nonblocking`, idle samples left out)
to the broker for the timed requests and prints the functions holding the most samples, as
`python -m bench.profile_row` does.

To compare two commits, run this module from each commit's worktree (and venv) alternately:
the broker is started with the Python that runs this module.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.procfs import CLOCK_TICKS_PER_SECOND
from bench.profile_row import PY_SPY_EXIT_TIMEOUT, print_shares, py_spy, summarize
from bench.targets import Minibroker
from minibroker.protocol.framing import encode_uvarint
from minibroker.protocol.records import Record, encode_batch

API_PRODUCE = 0
# Produce v9 is the first flexible version (request header v2, compact strings).
FIRST_FLEXIBLE = 9
TIMESTAMP_MS = 1_700_000_000_000
TOPIC = "produce-cost"


def record_batch(records: int, size: int) -> bytes:
    """One v2 batch of `records` records with a null key and a `size`-byte value, not
    compressed, no producer id (so the same bytes may be sent again and again)."""
    value = bytes(index % 251 for index in range(size))
    return encode_batch(Record(delta, TIMESTAMP_MS, None, value) for delta in range(records))


def produce_request(
    version: int, correlation_id: int, partition: int, batch: bytes, topic_name: str = TOPIC
) -> bytes:
    """A framed ProduceRequest (acks=1, timeout 30 s) of one partition of ``topic_name``."""
    flexible = version >= FIRST_FLEXIBLE
    client_id = b"produce-cost"
    header = struct.pack(">hhih", API_PRODUCE, version, correlation_id, len(client_id)) + client_id
    topic = topic_name.encode()
    if flexible:
        header += b"\x00"  # header tagged fields
        body = b"\x00"  # null transactional id (compact: length + 1 = 0)
        body += struct.pack(">hi", 1, 30_000)
        body += encode_uvarint(2) + encode_uvarint(len(topic) + 1) + topic
        body += encode_uvarint(2) + struct.pack(">i", partition)
        body += encode_uvarint(len(batch) + 1) + batch
        body += b"\x00\x00\x00"  # the partition's, the topic's and the request's tagged fields
    else:
        body = b"" if version < 3 else struct.pack(">h", -1)
        body += struct.pack(">hi", 1, 30_000)
        body += struct.pack(">ih", 1, len(topic)) + topic
        body += struct.pack(">ii", 1, partition)
        body += struct.pack(">i", len(batch)) + batch
    message = header + body
    return struct.pack(">i", len(message)) + message


def _error_code(version: int, frame: bytes) -> int:
    """The first partition's error code of a ProduceResponse frame (after its size)."""
    if version >= FIRST_FLEXIBLE:
        pos = 4 + 1  # correlation id, header tagged fields
        pos += 1  # topics (compact array of one)
        name_length = frame[pos] - 1
        pos += 1 + name_length
        pos += 1  # partitions (compact array of one)
    else:
        pos = 4 + 4
        (name_length,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + name_length + 4
    (error_code,) = struct.unpack_from(">h", frame, pos + 4)
    return error_code


class Client:
    """A blocking socket that keeps up to `in_flight` requests unanswered."""

    def __init__(
        self, bootstrap: str, version: int, batch: bytes, partitions: int, topic: str = TOPIC
    ) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.version = version
        # One request per partition, correlation ids patched in as they go.
        self.requests = [
            bytearray(produce_request(version, 0, partition, batch, topic))
            for partition in range(partitions)
        ]
        self.next_correlation = 0
        self.buffer = bytearray()

    def _send(self) -> None:
        request = self.requests[self.next_correlation % len(self.requests)]
        struct.pack_into(">i", request, 8, self.next_correlation)
        self.next_correlation += 1
        self.sock.sendall(request)

    def _receive(self) -> bytes:
        while True:
            if len(self.buffer) >= 4:
                (size,) = struct.unpack_from(">i", self.buffer)
                if len(self.buffer) >= 4 + size:
                    frame = bytes(self.buffer[4 : 4 + size])
                    del self.buffer[: 4 + size]
                    return frame
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            self.buffer += chunk

    def run(self, count: int, in_flight: int) -> None:
        sent = answered = 0
        while answered < count:
            while sent < count and sent - answered < in_flight:
                self._send()
                sent += 1
            error = _error_code(self.version, self._receive())
            if error != 0:
                raise RuntimeError(f"produce answered error code {error}")
            answered += 1

    def close(self) -> None:
        self.sock.close()


def user_system_seconds(pid: int) -> tuple[float, float]:
    """The process's user and system CPU seconds so far (/proc/<pid>/stat fields 14, 15)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) / CLOCK_TICKS_PER_SECOND, int(fields[12]) / CLOCK_TICKS_PER_SECOND


def measure(arguments: argparse.Namespace, work_dir: Path) -> dict[str, float]:
    batch = record_batch(arguments.records, arguments.size)
    target = Minibroker(1, work_dir)
    try:
        target.create_topic(TOPIC, arguments.partitions, 1, {})
        client = Client(target.bootstrap, arguments.version, batch, arguments.partitions)
        try:
            client.run(arguments.warmup, arguments.in_flight)
            pid = target.node.pid
            spy = None
            if arguments.profile is not None:
                arguments.profile.mkdir(parents=True, exist_ok=True)
                spy = subprocess.Popen(
                    [py_spy(), "record", "--pid", str(pid), "--rate", "200", "--format", "raw"]
                    + ["--nonblocking", "--output", str(arguments.profile / "broker.txt")],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1.0)  # py-spy attaches before the timed requests start
            user_before, system_before = user_system_seconds(pid)
            started = time.monotonic()
            client.run(arguments.requests, arguments.in_flight)
            elapsed = time.monotonic() - started
            user_after, system_after = user_system_seconds(pid)
            user, system = user_after - user_before, system_after - system_before
            cpu = user + system
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(PY_SPY_EXIT_TIMEOUT)
        finally:
            client.close()
    finally:
        target.close()
    gigabytes = arguments.requests * len(batch) / 1e9
    return {
        "batch_bytes": len(batch),
        "cpu_s": cpu,
        "system_share": system / cpu if cpu else 0.0,
        "us_per_request": cpu / arguments.requests * 1e6,
        "cpu_s_per_gb": cpu / gigabytes,
        "requests_per_s": arguments.requests / elapsed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.produce_cost", description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=2_000)
    parser.add_argument("--records", type=int, default=4, help="records per batch (default 4)")
    parser.add_argument("--size", type=int, default=1024, help="value bytes (default 1024)")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--in-flight", type=int, default=5)
    parser.add_argument("--version", type=int, default=7, help="Produce version (default 7)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--profile", type=Path, help="py-spy's raw profile into this directory")
    parser.add_argument("--top", type=int, default=20)
    arguments = parser.parse_args()
    if arguments.profile is not None and arguments.runs != 1:
        parser.error("--profile takes one run")
    revision = subprocess.run(
        ["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print(
        f"produce_cost at {revision} ({sys.executable}): {arguments.requests} requests of one"
        f" partition, {arguments.records} x {arguments.size} B records, Produce"
        f" v{arguments.version}, acks=1, {arguments.in_flight} in flight"
    )
    for run in range(arguments.runs):
        with tempfile.TemporaryDirectory(prefix="minibroker-produce-cost-") as work:
            load = os.getloadavg()
            figures = measure(arguments, Path(work))
        print(
            f"run {run + 1}: {figures['us_per_request']:.1f} CPU us/request,"
            f" {figures['cpu_s_per_gb']:.2f} CPU s/GB ({figures['cpu_s']:.2f} CPU s,"
            f" {figures['system_share']:.0%} in the kernel,"
            f" batch {figures['batch_bytes']} B), {figures['requests_per_s']:,.0f} requests/s,"
            f" load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        )
    if arguments.profile is not None:
        path = arguments.profile / "broker.txt"
        total, own, inclusive = summarize(path.read_text(), arguments.top)
        print(f"\nbroker: {total} samples ({path})")
        print_shares(total, own, inclusive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
