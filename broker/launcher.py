"""Start, stop and disturb broker processes on this machine.

One launcher serves the integration tests, `minibroker dev` and the benchmarks, so that all of
them run the broker exactly as an operator would: a separate process started from the command
line, judged ready only when it answers a real Kafka request. It is deliberately synchronous
(plain subprocess and sockets, no trio) so that pytest fixtures and scripts can use it directly.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

API_VERSIONS_KEY = 18
READINESS_CLIENT_ID = b"minibroker-launcher"
LOG_TAIL_BYTES = 4000


class BrokerStartError(RuntimeError):
    """The broker exited or stayed silent instead of becoming ready."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now.

    The kernel picks it; another process could take it before the broker binds, which is rare
    enough on a test machine that retrying is not worth the complexity.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _api_versions_v0_frame(correlation_id: int) -> bytes:
    """ApiVersions v0 with request header v1, built by hand so readiness needs no codec."""
    header = struct.pack(">hhih", API_VERSIONS_KEY, 0, correlation_id, len(READINESS_CLIENT_ID))
    payload = header + READINESS_CLIENT_ID
    return struct.pack(">i", len(payload)) + payload


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        chunk = sock.recv(count - len(chunks))
        if not chunk:
            raise ConnectionError("broker closed the connection mid-response")
        chunks += chunk
    return bytes(chunks)


def _is_api_versions_v0_response(payload: bytes, correlation_id: int) -> bool:
    """True for a complete ApiVersions v0 answer: our correlation id, error 0, and an api list
    that accounts for every byte (v0 has no throttle time and no tagged fields)."""
    if len(payload) < 10:
        return False
    received_id, error_code, api_count = struct.unpack_from(">ihi", payload)
    return (
        received_id == correlation_id
        and error_code == 0
        and api_count > 0
        and len(payload) == 10 + 6 * api_count
    )


class BrokerProcess:
    """One broker process and the configuration it was started with, so it can be restarted
    on the same port and log directory (which is what crash-recovery tests need)."""

    def __init__(self, node_id: int, log_dir: Path, port: int, overrides: dict[str, object]):
        self.node_id = node_id
        self.log_dir = Path(log_dir)
        self.port = port
        self.overrides = dict(overrides)
        self.stderr_path = self.log_dir.parent / f"broker-{node_id}.log"
        self._process: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(
        cls,
        node_id: int,
        log_dir: Path,
        port: int | None = None,
        overrides: dict[str, object] | None = None,
    ) -> BrokerProcess:
        """Launch a broker; call `wait_ready` before talking to it."""
        broker = cls(node_id, log_dir, port or free_port(), overrides or {})
        broker._launch()
        return broker

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self._running_process().pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def properties(self) -> dict[str, str]:
        """The full set of `--override` properties: ours first, the caller's win."""
        listener = f"PLAINTEXT://{self.bootstrap}"
        properties = {
            "node.id": str(self.node_id),
            "listeners": listener,
            "advertised.listeners": listener,
            "log.dirs": str(self.log_dir),
        }
        properties.update({key: str(value) for key, value in self.overrides.items()})
        return properties

    def _launch(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "broker", "serve"]
        for key, value in self.properties().items():
            command += ["--override", f"{key}={value}"]
        # Appending keeps the log of a killed incarnation next to the one of its restart.
        with open(self.stderr_path, "ab") as stderr:
            stderr.write(f"--- launcher: {' '.join(command)}\n".encode())
            stderr.flush()
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def _running_process(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise RuntimeError(f"broker {self.node_id} was never started")
        return self._process

    def log_tail(self, limit: int = LOG_TAIL_BYTES) -> str:
        """The end of the broker's stderr, for error messages that explain a failure."""
        try:
            data = self.stderr_path.read_bytes()
        except FileNotFoundError:
            return "(no broker log)"
        return data[-limit:].decode(errors="replace")

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Block until the broker answers ApiVersions v0 correctly.

        A listening socket alone is not enough: the broker must read a frame and answer it, which
        is the first thing every Kafka client does.
        """
        process = self._running_process()
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            exit_code = process.poll()
            if exit_code is not None:
                raise BrokerStartError(
                    f"broker {self.node_id} exited with code {exit_code} before it was ready;"
                    f" log tail:\n{self.log_tail()}"
                )
            attempt += 1
            if self._answers_api_versions(correlation_id=attempt, deadline=deadline):
                return
            if time.monotonic() >= deadline:
                raise BrokerStartError(
                    f"broker {self.node_id} did not answer ApiVersions on {self.bootstrap}"
                    f" within {timeout}s; log tail:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def _answers_api_versions(self, correlation_id: int, deadline: float) -> bool:
        remaining = max(0.1, min(2.0, deadline - time.monotonic()))
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=remaining) as sock:
                sock.sendall(_api_versions_v0_frame(correlation_id))
                (size,) = struct.unpack(">i", _read_exactly(sock, 4))
                if not 0 < size < 1 << 20:
                    return False
                return _is_api_versions_v0_response(_read_exactly(sock, size), correlation_id)
        except OSError:
            return False

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM (a clean shutdown) and wait; return the exit code, 0 when clean.

        A broker that ignores SIGTERM is killed and reported, so a hung shutdown fails a test
        instead of hanging it.
        """
        process = self._running_process()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            # A paused broker would hold the SIGTERM until it is continued.
            process.send_signal(signal.SIGCONT)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise BrokerStartError(
                    f"broker {self.node_id} ignored SIGTERM for {timeout}s and was killed;"
                    f" log tail:\n{self.log_tail()}"
                ) from None
        return process.returncode

    def kill(self) -> int:
        """SIGKILL, as a crash: no shutdown code runs. Returns the exit code (-9)."""
        process = self._running_process()
        if process.poll() is None:
            process.kill()
        return process.wait()

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing, like a stalled machine."""
        self._running_process().send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._running_process().send_signal(signal.SIGCONT)

    def restart(self) -> None:
        """Stop the broker if it still runs, then start it again on the same port and log
        directory; call `wait_ready` before talking to it."""
        if self.running:
            self.stop()
        self._launch()
