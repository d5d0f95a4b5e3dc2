"""Fixtures for the Java tests: the class paths java/fetch.sh resolved, the Java programs under
tests/java/programs compiled once per session, a 3-broker minibroker cluster per module, Apache
Kafka (bench/kafka_ref.py) as the reference, and the request log every JVM writes.

The tests skip, with the reason, when there is no JVM or when java/fetch.sh could not resolve a
class path (no Maven, Maven Central unreachable, an artifact not served): they never pass
without having run. Every JVM logs the requests its NetworkClient sends to one file per run
(tests/java/log4j2.properties); `request_log` gathers them for the summary test.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import zipfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.kafka_ref import KafkaCluster, classpath, java_executable, missing_reason
from minibroker.apis.registry import APIS
from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import BROKERS, CLUSTER_OVERRIDES, _check_clean_stop

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"
LOG4J2_CONFIG = HERE / "log4j2.properties"
JAVA_TIMEOUT = 240.0

SENDING = re.compile(
    r"Sending (\w+) request with header RequestHeader\(apiKey=(\w+), apiVersion=(\d+)"
)
CLIENT_VERSION = re.compile(r"clientSoftwareVersion='([^']*)'")
CANCELLED = re.compile(r"Cancelled in-flight (\w+) request")
# Kafka Streams' restore consumer is polled only while a task restores (the StateUpdater
# thread then waits for new tasks): a request it sent just before is answered, but the
# answer is read at its next poll, often after its 30 s request timeout, and cut off then
# (Java's Selector reads one response per connection per poll). Not the broker's doing:
# the same happens against Apache Kafka.
IDLE_CLIENT = re.compile(r"-StateUpdater-\d+-restore-consumer, groupId=null\] Cancelled")


@dataclass
class RequestLog:
    """Every request the Java clients sent to minibroker, by (API, version), and every request
    a closed connection cut off. Runs against Apache Kafka log elsewhere."""

    files: list[Path] = field(default_factory=list)
    # Runs that saw a broker killed on purpose: requests in flight to it were cut off.
    broker_killed: set[Path] = field(default_factory=set)

    def sent(self, client_version: str | None = None) -> Counter[tuple[str, int]]:
        """With `client_version` (e.g. "4.4.0"), only the runs whose clients all name that
        version in their ApiVersions requests: the session's log also holds programs on older
        kafka-clients (Kafka Connect 4.3.1), which know older versions."""
        counts: Counter[tuple[str, int]] = Counter()
        for path in self.files:
            if path.exists():
                if client_version is not None and {
                    match.group(1)
                    for match in CLIENT_VERSION.finditer(path.read_text(errors="replace"))
                } - {client_version}:
                    continue
                for match in SENDING.finditer(path.read_text(errors="replace")):
                    counts[(match.group(2), int(match.group(3)))] += 1
        return counts

    def cancelled(self) -> list[str]:
        lines = []
        for path in self.files:
            if path.exists() and path not in self.broker_killed:
                lines += [
                    line
                    for line in path.read_text(errors="replace").splitlines()
                    if CANCELLED.search(line) and not IDLE_CLIENT.search(line)
                ]
        return lines


# Kafka's request builders cap these at v9 when they name topics by name (the classic
# consumer's and the admin client's; v10 names topics by id only), against Apache Kafka as
# well; v10 is sent on the wire in test_kafka44_versions.
NAMED_TOPICS_CAP = {"OFFSET_COMMIT": 9, "OFFSET_FETCH": 9}


def newest_both_know() -> dict[str, int]:
    """Each API's newest version that kafka-clients 4.4.0 and minibroker both know, by
    Kafka's ApiKeys name: the client's from the message definitions in its jar (validVersions;
    with latestVersionUnstable the last is left out, as the client never sends it), capped by
    minibroker's newest and by NAMED_TOPICS_CAP."""
    (jar,) = [
        entry
        for entry in classpath("clients").split(":")
        if Path(entry).name == "kafka-clients-4.4.0.jar"
    ]
    served = {api.key.name: api.versions[1] for api in APIS.values()}
    newest = {}
    with zipfile.ZipFile(jar) as archive:
        for name in archive.namelist():
            if not (name.startswith("common/message/") and name.endswith("Request.json")):
                continue
            text = re.sub(r"^\s*//.*$", "", archive.read(name).decode(), flags=re.MULTILINE)
            message = json.loads(text)
            if message["validVersions"] == "none":
                continue
            high = int(message["validVersions"].split("-")[-1])
            high -= bool(message.get("latestVersionUnstable"))
            api = re.sub(r"(?<!^)(?=[A-Z])", "_", message["name"].removesuffix("Request")).upper()
            if api in served:
                newest[api] = min(high, served[api], NAMED_TOPICS_CAP.get(api, high))
    return newest


@pytest.fixture(scope="session", autouse=True)
def java_available() -> None:
    """Skip every test here, with the reason, when there is no JDK or no clients class path.
    (A fixture, not a module-level skip: pytest cannot skip a conftest given on its command
    line.)"""
    if (reason := missing_reason("clients")) is not None:
        pytest.skip(f"Java client tests: {reason}")
    if shutil.which("javac") is None:
        pytest.skip("Java client tests: no javac (apt-get install openjdk-17-jdk-headless)")


@pytest.fixture(scope="session")
def request_log() -> RequestLog:
    return RequestLog()


@pytest.fixture(scope="session")
def java_classes(tmp_path_factory) -> Path:
    """tests/java/programs/*.java compiled by one javac run: the source launcher (`java
    Program.java`) would compile each program again at each start, seconds on a busy machine."""
    classes = tmp_path_factory.mktemp("java-classes")
    sources = sorted(str(path) for path in PROGRAMS.glob("*.java"))
    compiled = subprocess.run(
        ["javac", "-nowarn", "-d", str(classes), "-cp", classpath("clients"), *sources],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compiled.returncode == 0, compiled.stderr
    return classes


@dataclass
class JavaRunner:
    classes: Path
    log_dir: Path
    request_log: RequestLog
    runs: int = 0
    # The request log file of the last run, logged to the request log or not (a run against
    # Apache Kafka writes one too, for comparison).
    last_log: Path | None = None

    def command(
        self, main: str, *args: str, classpath_module: str = "clients", log_requests: bool = True
    ) -> list[str]:
        """The java command line that runs `main` with the clients' class path and the compiled
        programs; its requests go to the request log when `log_requests` (runs against
        minibroker)."""
        self.runs += 1
        log_path = self.log_dir / f"{main}-{self.runs}.requests.log"
        self.last_log = log_path
        if log_requests:
            self.request_log.files.append(log_path)
        return [
            java_executable(),
            "-Xmx256m",
            f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
            f"-Dkafka.requests.log={log_path}",
            "-cp",
            f"{self.classes}:{classpath(classpath_module)}",
            main,
            *args,
        ]

    def run(
        self, main: str, *args: str, classpath_module: str = "clients", log_requests: bool = True
    ) -> subprocess.CompletedProcess:
        """Run `main` to its end (see `command`)."""
        command = self.command(
            main, *args, classpath_module=classpath_module, log_requests=log_requests
        )
        return subprocess.run(command, capture_output=True, text=True, timeout=JAVA_TIMEOUT)

    def json(self, main: str, *args: str, log_requests: bool = True) -> dict:
        """Run a program that prints one JSON object on its last line, and return it."""
        done = self.run(main, *args, log_requests=log_requests)
        assert done.returncode == 0, f"{main} exited {done.returncode}:\n{done.stderr[-4000:]}"
        lines = done.stdout.strip().splitlines()
        assert lines, f"{main} printed nothing:\n{done.stderr[-4000:]}"
        return json.loads(lines[-1])


@pytest.fixture(scope="session")
def java(java_classes, tmp_path_factory, request_log) -> JavaRunner:
    return JavaRunner(java_classes, tmp_path_factory.mktemp("java-logs"), request_log)


@contextmanager
def minibroker_cluster(
    base_dir: Path,
    overrides: dict[str, object] | None = None,
    broker_listeners: dict[str, int | None] | None = None,
    node_overrides: dict[int, dict[str, object]] | None = None,
) -> Iterator[Cluster]:
    """A controller and three minibroker brokers (the cluster tests' short timeouts, plus
    `overrides`, `broker_listeners` beside PLAINTEXT and each broker's `node_overrides`, see
    Cluster.start); on leaving, a clean stop and no UNKNOWN_SERVER_ERROR or unsupported
    request in any node's log."""
    started = Cluster.start(
        base_dir,
        brokers=BROKERS,
        overrides={**CLUSTER_OVERRIDES, **(overrides or {})},
        broker_listeners=broker_listeners,
        node_overrides=node_overrides,
    )
    yield started
    broker_errors = [
        f"{node.kind} {node.node_id}: {line}"
        for node in started.nodes
        for line in node.stderr_path.read_text(errors="replace").splitlines()
        if "UNKNOWN_SERVER_ERROR" in line or "unsupported request" in line
    ]
    _check_clean_stop(started)
    assert not broker_errors, "\n".join(broker_errors[:20])


@pytest.fixture(scope="session")
def java_cluster(tmp_path_factory) -> Iterator[Cluster]:
    """A 3-broker cluster shared by the modules that take it (test_clients.py and
    test_consumer_protocol.py, which run on one worker: tests/parallel.py's `clusters` group),
    started once per pytest process; each test uses its own topics and groups, and a
    listing is judged by what it contains. Its logs are checked when the session ends."""
    with minibroker_cluster(tmp_path_factory.mktemp("java-cluster")) as started:
        yield started


@pytest.fixture(scope="module")
def kafka_reference(tmp_path_factory) -> Iterator[KafkaCluster]:
    """One Apache Kafka node (KRaft, broker and controller), the reference."""
    if (reason := missing_reason("kafka")) is not None:
        pytest.skip(f"Apache Kafka reference: {reason}")
    started = KafkaCluster.start(tmp_path_factory.mktemp("kafka-reference"), nodes=1)
    yield started
    started.stop()
