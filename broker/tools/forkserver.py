"""A fork server for node processes: the broker's modules imported once, a node forked from it.

A node started as `python -m minibroker serve` spends most of its start-up importing (about
1 CPU second: trio, kio's schemas, the API handlers), which is what a test suite starting
clusters waits for. The fork server is one process, started on first use, that imports the
node's modules once and then forks a child per node that runs `minibroker serve` with its
arguments, its output in its log file, in a process group of its own, exactly as the
launcher's own subprocess would. The same idea as multiprocessing's "forkserver" start
method; no Kafka counterpart (a JVM cannot fork).

The fork server has no threads and has never run trio when it forks, so the child starts
clean. It dies with the process that started it (parent-death signal), and each child with
the fork server, so no node outlives its launcher. Exits are reported back over the pipe, so
`ForkedProcess` answers `poll`, `wait`, `kill` and `send_signal` as `subprocess.Popen` does.

What it cannot do: a different environment at exec time (a node run under libfaketime needs
LD_PRELOAD before the interpreter starts); the launcher starts those nodes as subprocesses.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

# prctl(2): deliver this signal to the calling process when its parent exits.
PR_SET_PDEATHSIG = 1


def terminate_with_parent(parent_pid: int):
    """A preexec_fn asking Linux to SIGTERM the child when the launching thread's process
    exits (Ctrl-C, a closed terminal, SIGKILL alike), so that no node outlives it."""

    def arrange() -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return arrange


class ForkedProcess:
    """A node forked by the fork server, with the part of `subprocess.Popen` the launcher
    uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = threading.Event()

    def _set_exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(f"node {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class ForkServer:
    """The launcher's side: one fork server process and its children by pid."""

    def __init__(self) -> None:
        # The parent-death signal follows the thread that starts the fork server: start it
        # from a thread that lives as long as the nodes (the main thread, in pytest).
        self._process = subprocess.Popen(
            [sys.executable, "-m", "minibroker.tools.forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            process_group=0,
            preexec_fn=terminate_with_parent(os.getpid()),
        )
        self._lock = threading.Lock()
        self._children: dict[int, ForkedProcess] = {}
        self._early_exits: dict[int, int] = {}
        self._replies: list[int] = []
        self._reply = threading.Condition()
        self._imported = threading.Event()
        self._reader = threading.Thread(
            target=self._read, name="minibroker-forkserver", daemon=True
        )
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            message = json.loads(line)
            if "ready" in message:
                self._imported.set()
                continue
            with self._reply:
                if "pid" in message:
                    self._replies.append(message["pid"])
                    self._reply.notify_all()
                elif "exit" in message:
                    child = self._children.get(message["exit"])
                    if child is None:
                        self._early_exits[message["exit"]] = message["code"]
                    else:
                        child._set_exit(message["code"])
        # The fork server is gone: its children got SIGTERM (their parent-death signal).
        self._imported.set()
        with self._reply:
            self._reply.notify_all()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the fork server has imported the broker, so that the next node's start
        is a fork and nothing else (a benchmark starts its clock after this). Nodes can be
        spawned before: their requests wait in the pipe."""
        if not self._imported.wait(timeout):
            raise OSError(f"the minibroker fork server did not finish its imports in {timeout}s")
        if not self.alive:
            raise OSError("the minibroker fork server exited")

    def spawn(self, argv: list[str], log_path: Path, env: dict[str, str]) -> ForkedProcess:
        """Fork a node running `minibroker <argv>`, its output appended to `log_path`."""
        request = json.dumps({"argv": argv, "log": str(log_path), "env": env}) + "\n"
        with self._lock:
            assert self._process.stdin is not None
            self._process.stdin.write(request.encode())
            self._process.stdin.flush()
            deadline = time.monotonic() + 30
            with self._reply:
                while not self._replies:
                    if not self.alive or time.monotonic() > deadline:
                        raise OSError("the minibroker fork server did not answer")
                    self._reply.wait(0.5)
                pid = self._replies.pop(0)
                child = ForkedProcess(pid)
                self._children[pid] = child
                if pid in self._early_exits:
                    child._set_exit(self._early_exits.pop(pid))
        return child


_server: ForkServer | None = None
_server_lock = threading.Lock()


def fork_server() -> ForkServer:
    """This process's fork server, started on first use (and again if it died)."""
    global _server
    with _server_lock:
        if _server is None or not _server.alive:
            _server = ForkServer()
        return _server


# -- the fork server process ----------------------------------------------------------------


def _child(argv: list[str], log: str, env: dict[str, str]) -> None:
    """In the forked child: become the node, as `python -m minibroker <argv>` would."""
    code = 1
    try:
        os.setpgid(0, 0)
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        output = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        nothing = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nothing, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.closerange(3, 1024)
        os.environ.update(env)
        # As `python -m minibroker <argv>`: its __main__ ends in sys.exit(main()).
        sys.argv = ["minibroker", *argv]
        import runpy

        runpy.run_module("minibroker", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _serve() -> None:
    import selectors

    # As python -m minibroker does: kio would import hypothesis for nothing.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    import trio  # noqa: F401 - imported once here, for every node

    import minibroker.node.server  # noqa: F401
    from minibroker.apis.registry import warm_client_schemas

    warm_client_schemas()  # once here, inherited by every node forked

    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    selector = selectors.DefaultSelector()
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "request")
    selector.register(wake_read, selectors.EVENT_READ, "signal")
    pending = b""
    out = sys.stdout

    def say(message: dict) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    while True:
        for key, _ in selector.select():
            if key.data == "signal":
                os.read(wake_read, 4096)
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    say({"exit": pid, "code": os.waitstatus_to_exitcode(status)})
                continue
            data = os.read(sys.stdin.fileno(), 65536)
            if not data:
                return  # the launcher closed the pipe
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                out.flush()
                pid = os.fork()
                if pid == 0:
                    _child(request["argv"], request["log"], request["env"])
                say({"pid": pid})


if __name__ == "__main__":
    _serve()
