"""The README's "Two commands", "A short tour" and security sections, run as written.

Every shell command and Python snippet of those sections runs in README order, in a fresh
directory (the test's temporary cwd, with this test's virtualenv linked as `.venv`), inside a
network namespace of its own, so the README's fixed addresses (127.0.0.1:9090, 9092-9094,
ZooKeeper's 2181) are free and nothing else on the machine is touched; kcat is the one on PATH.
Commands that run until stopped are run the way a user runs them: started, waited for, then
stopped with Ctrl-C (SIGINT), or with `kill %1` (SIGTERM) for the backgrounded `minibroker dev`,
and must report a clean stop. Commands that cannot run unattended are in SKIPPED with the
reason, and test_every_readme_command_is_run_or_skipped_for_a_reason fails on any command that
is in neither list, so a new README line is never silently skipped.

The Spark section's demo command and snippet are run by tests/spark/test_demo.py (it needs
Java and pyspark and is slow); they are listed in SKIPPED with that reason.

Needs root (network namespaces), `ip`, kcat and ZooKeeper (.ci/run installs them).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from minibroker.tools.launcher import zookeeper_installed
from tests.readme import Block, blocks, shell_commands

VENV = Path(sys.executable).parent.parent
SECTIONS = ["Two commands", "A short tour", "Security: TLS", "Security: ACLs"]
SPARK = "Reading and writing from Spark"
STARTUP = 60.0

SKIPPED = {
    "python3 -m venv .venv": "the test runs in a virtualenv already, linked as .venv",
    ".venv/bin/pip install -q -e .": "installed: the test runs from an editable install",
    ".venv/bin/pip install -q -e '.[test,spark]'": "installed: the test runs with these extras",
    ".venv/bin/pip install -q -e '.[spark]'": "installed: the test runs with these extras",
    "apt-get update": "system installs: .ci/run does them before the tests",
    "apt-get install -y --no-install-recommends kcat docker-compose prometheus iproute2"
    " faketime openjdk-17-jdk-headless maven zookeeper": "system installs: .ci/run does them",
    "java/fetch.sh": "the Java artifacts: .ci/run fetches them before the tests",
    "apt-get install -y --no-install-recommends openjdk-17-jre-headless": "a system install",
    ".venv/bin/pytest": "the whole test suite (this test is part of it)",
    ".venv/bin/python -m minibroker.spark.demo --start-broker": "tests/spark/test_demo.py",
}
# Blocks that are not commands: the TLS sample names files under /etc/minibroker, which the
# test does not write (its parsing is covered by tests/unit/test_config.py); the ACL sample is
# what the ACL snippet's node starts with (see acl_snippet); Spark's snippet needs a session.
SKIPPED_BLOCKS = {
    ("Security: TLS", "properties"): "a sample naming files under /etc/minibroker",
    ("Security: ACLs", "properties"): "used as the server.properties of the ACL snippet's node",
    (SPARK, "python"): "tests/spark/test_demo.py runs it with a Spark session",
}

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("kcat") is None,
    reason="needs root and `ip` (a network namespace of its own) and kcat on PATH",
)


class Job:
    """A command started in the namespace and left running, with what it prints."""

    def __init__(self, shell: Shell, command: str) -> None:
        self.command = command
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [*shell.prefix, "bash", "-c", f"exec {command}"],
            cwd=shell.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, condition: Callable[[], bool], what: str, timeout=STARTUP) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.process.poll() is None, f"{self.command} ended:\n{self.output}"
            assert time.monotonic() < deadline, f"no {what} from {self.command}:\n{self.output}"
            time.sleep(0.2)

    def wait_said(self, text: str) -> None:
        self.wait_for(lambda: text in self.output, repr(text))

    def stop(self, signum=signal.SIGINT) -> str:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        code = self.process.wait(timeout=60)
        assert code == 0, f"{self.command} exited with {code}:\n{self.output}"
        self._reader.join(timeout=10)  # it ends when the pipe closes: every line is read
        return self.output


class Shell:
    """The user's terminal: a fresh directory, a network namespace of its own."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.namespace = f"mbreadme-{secrets.token_hex(3)}"
        subprocess.run(["ip", "netns", "add", self.namespace], check=True, timeout=30)
        subprocess.run(
            ["ip", "-n", self.namespace, "link", "set", "lo", "up"], check=True, timeout=30
        )
        self.prefix = ["ip", "netns", "exec", self.namespace]
        self.jobs: list[Job] = []
        self.background: Job | None = None  # `minibroker dev &`, stopped by `kill %1`

    def run(self, command: str, stdin: str | None = None, timeout=60.0):
        result = subprocess.run(
            [*self.prefix, "bash", "-c", command],
            cwd=self.cwd,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert result.returncode == 0, f"{command}: {result.returncode}\n{result.stderr}"
        return result

    def start(self, command: str) -> Job:
        job = Job(self, command)
        self.jobs.append(job)
        return job

    def wait_broker(self, node_id: int) -> None:
        deadline = time.monotonic() + STARTUP
        while True:
            result = subprocess.run(
                [*self.prefix, "kcat", "-b", "127.0.0.1:9092", "-L", "-m", "3"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            if re.search(rf"broker {node_id} at 127\.0\.0\.1:9092", result.stdout):
                return
            assert time.monotonic() < deadline, result.stdout + result.stderr
            time.sleep(0.3)

    def close(self) -> None:
        for job in self.jobs:
            if job.process.poll() is None:
                job.process.kill()
                job.process.wait(30)
        subprocess.run(["ip", "netns", "del", self.namespace], timeout=30)


# -- what each command must do ------------------------------------------------------------


def foreground_dev(shell: Shell, command: str) -> None:
    """Runs until Ctrl-C: wait for the banner, then Ctrl-C, and a clean stop."""
    job = shell.start(command)
    job.wait_said("the cluster is ready")
    assert "every node stopped cleanly" in job.stop(signal.SIGINT)


def background_dev(shell: Shell, command: str) -> None:
    assert command.endswith(" &")
    shell.background = shell.start(command[: -len(" &")])
    shell.background.wait_said("the cluster is ready")


def kill_background_dev(shell: Shell) -> None:
    """`kill %1`, as the tour says (SIGTERM), before the ports are needed again."""
    if shell.background is not None:
        assert "every node stopped cleanly" in shell.background.stop(signal.SIGTERM)
        shell.background = None


def metadata(shell: Shell, command: str) -> None:
    out = shell.run(command).stdout
    assert re.search(r"^ 3 brokers:$", out, re.M), out
    for node in (1, 2, 3):
        assert f"broker {node} at 127.0.0.1:{9091 + node}" in out, out


def produce_greetings(shell: Shell, command: str) -> None:
    shell.run(command)


def consume_greetings(shell: Shell, command: str) -> None:
    assert shell.run(command).stdout.split() == ["1", "2", "3", "4", "5"]


def offset_by_timestamp(shell: Shell, command: str) -> None:
    out = shell.run(command).stdout
    assert re.search(r"greetings \[0\] offset 0\b", out), out


def group_member(shell: Shell, command: str) -> None:
    """Runs until Ctrl-C: reads 1..5 as a group member, then Ctrl-C leaves the group."""
    job = shell.start(command)
    # kcat's stdout to a pipe is block-buffered: the records show once it exits.
    job.wait_said("Reached end of topic greetings [0] at offset 5")
    records = [line for line in job.stop(signal.SIGINT).splitlines() if not line.startswith("%")]
    assert records == ["1", "2", "3", "4", "5"], job.output


def groups(shell: Shell, command: str) -> None:
    out = shell.run(command).stdout
    assert re.search(r"^readers\b", out, re.M), out


def describe_readers(shell: Shell, command: str) -> None:
    out = shell.run(command).stdout
    # kcat committed after reading 1..5: offset 5 of 5, no lag.
    assert re.search(r"^GROUP readers: type classic, state Empty,", out, re.M), out
    assert re.search(r"^greetings +0 +5 +5 +0 ", out, re.M), out


def cluster_by_hand(shell: Shell, command: str) -> None:
    """The controller, then broker 1 on the tour's data; both stop cleanly on Ctrl-C."""
    kill_background_dev(shell)
    shell.start(command)
    if "node.id=1" in command:
        shell.wait_broker(1)
        for started in shell.jobs[-2:]:
            started.stop(signal.SIGINT)


RUN: dict[str, Callable[[Shell, str], None]] = {
    ".venv/bin/minibroker dev": foreground_dev,
    ".venv/bin/minibroker dev --zookeeper --data data-zk": foreground_dev,
    ".venv/bin/minibroker dev &": background_dev,
    "kcat -b 127.0.0.1:9092 -L": metadata,
    "seq 1 5 | kcat -b 127.0.0.1:9092 -P -t greetings": produce_greetings,
    "kcat -b 127.0.0.1:9092 -C -t greetings -o beginning -e": consume_greetings,
    "kcat -b 127.0.0.1:9092 -Q -t greetings:0:1700000000000": offset_by_timestamp,
    "kcat -b 127.0.0.1:9092 -G readers -X auto.offset.reset=earliest greetings": group_member,
    ".venv/bin/minibroker groups": groups,
    ".venv/bin/minibroker groups --describe readers": describe_readers,
}
BY_HAND = ".venv/bin/minibroker serve --override process.roles="


def kafka_python_snippet(shell: Shell, block: Block) -> None:
    out = shell.run(f"{VENV}/bin/python -", stdin=block.text).stdout.splitlines()
    everything = "[b'1', b'2', b'3', b'4', b'5', b'hello']"
    assert out == [everything, everything], out


def acl_snippet(shell: Shell, block: Block) -> None:
    """As the text says: nodes started with the authorizer (the README's properties, with
    allow.everyone.if.no.acl.found=true), the snippet, then `orders` takes records and
    `payments-eu` refuses them."""
    kill_background_dev(shell)
    (properties,) = [b.text for b in blocks("Security: ACLs") if b.lang == "properties"]
    (shell.cwd / "acl.properties").write_text(properties)
    node = shell.start(
        ".venv/bin/minibroker serve acl.properties --override allow.everyone.if.no.acl.found=true"
        " --override log.dirs=data-acl"
    )
    shell.wait_broker(1)
    shell.run(f"{VENV}/bin/python -", stdin=block.text)
    shell.run("echo one | kcat -b 127.0.0.1:9092 -P -t orders")
    refused = subprocess.run(
        [*shell.prefix, "bash", "-c", "echo one | kcat -b 127.0.0.1:9092 -P -t payments-eu"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0, refused.stderr
    assert "Topic authorization failed" in refused.stderr, refused.stderr
    node.stop(signal.SIGINT)


RUN_BLOCKS: dict[tuple[str, str], Callable[[Shell, Block], None]] = {
    ("A short tour", "python"): kafka_python_snippet,
    ("Security: ACLs", "python"): acl_snippet,
}


def handler(command: str) -> Callable[[Shell, str], None] | None:
    if command in RUN:
        return RUN[command]
    return cluster_by_hand if command.startswith(BY_HAND) else None


def test_every_readme_command_is_run_or_skipped_for_a_reason():
    seen_commands, seen_blocks = set(), set()
    for section in [*SECTIONS, SPARK]:
        for block in blocks(section):
            if block.lang == "sh":
                for command in shell_commands(block):
                    seen_commands.add(command)
                    assert handler(command) or command in SKIPPED, f"not run: {command!r}"
            else:
                key = (section, block.lang)
                seen_blocks.add(key)
                assert key in RUN_BLOCKS or key in SKIPPED_BLOCKS, f"not run: {key}"
    assert not (set(RUN) | set(SKIPPED)) - seen_commands, "stale entries: not in the README"
    assert not (set(RUN_BLOCKS) | set(SKIPPED_BLOCKS)) - seen_blocks, "stale block entries"
    assert sum(1 for command in seen_commands if command.startswith(BY_HAND)) == 2


@pytest.mark.skipif(not zookeeper_installed(), reason="apt-get install zookeeper")
def test_the_readme_as_written(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / ".venv").symlink_to(VENV)
    shell = Shell(cwd)
    try:
        for section in SECTIONS:
            for block in blocks(section):
                if block.lang == "sh":
                    for command in shell_commands(block):
                        if (run := handler(command)) is not None:
                            run(shell, command)
                elif (key := (section, block.lang)) in RUN_BLOCKS:
                    RUN_BLOCKS[key](shell, block)
        kill_background_dev(shell)
    finally:
        shell.close()
