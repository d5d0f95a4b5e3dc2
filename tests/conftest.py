"""Fixtures that run real broker processes, and helpers that speak raw Kafka to them.

The integration tests judge the broker the way its users will: through separate processes on
real sockets, with real clients. The raw-socket helpers exist for what clients hide, such as the
exact bytes of the batches a Fetch returns.
"""

from __future__ import annotations

import os
import sys

# Python's bytecode cache on, for this process and the brokers it starts, even where the
# environment sets PYTHONDONTWRITEBYTECODE (these project machines do): without it every test
# run compiles minibroker's modules again in every broker process (about 0.4 s of CPU per
# start) and pytest rewrites every test module again at each collection (23-30 s for the
# whole suite against 6 s). MINIBROKER_TEST_NO_BYTECODE=1 leaves the setting alone.
if not os.environ.get("MINIBROKER_TEST_NO_BYTECODE"):
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import datetime
import gc
import itertools
import json
import re
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import crc32c
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from hypothesis import HealthCheck, settings
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.static.primitive import i8
from prometheus_client.parser import text_string_to_metric_families

from faults import netns
from minibroker.protocol import codec
from minibroker.tools import wire
from minibroker.tools.launcher import BrokerProcess, BrokerStartError, free_port
from minibroker.tools.wire import WireClient
from tests import parallel

# Rule: a test asserts the code's behaviour, not the scheduler's (issue 41). Hypothesis fails
# a test whose example takes longer than a deadline (200 ms by default), or whose examples
# are generated slowly: on a loaded machine that is the scheduler's doing
# (tests/unit/test_fetch_response.py failed so once: 648 ms, then 0.19 ms for the same
# example). Timings belong in bench/. Loaded here, before any test module is imported, so
# every @settings inherits it.
settings.register_profile("minibroker", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("minibroker")

# How long a test's own broker may take to answer ApiVersions: an upper bound, not a wait (a
# broker that answers sooner is used at once). 60 s as the pytest plugin's forked nodes: 20 s
# failed two starts in a fresh-clone CI rehearsal whose tests all ran about twice as slowly as
# the run before it.
BROKER_READY_TIMEOUT = 60.0
TEST_CLIENT_ID = "minibroker-tests"

# --- the test tiers -------------------------------------------------------------------------
#
# Every test is marked by its folder (the markers are registered in pyproject.toml, and
# docs/testing.md's "Test tiers" explains them): tests/unit is the fast tier, `pytest -m "not
# slow"` (in process, on trio's MockClock or plain data, no processes started); every other
# folder's tests are `slow` and marked with what they need. A folder missing here stops the run,
# so that a new folder is put in a tier on purpose. tests/unit/test_test_tiers.py checks the
# tiers as collected.
TESTS = Path(__file__).resolve().parent
FOLDER_MARKS: dict[str, tuple[str, ...]] = {
    "unit": (),
    "integration": ("slow", "cluster"),
    "cluster": ("slow", "cluster"),
    "testing": ("slow", "cluster"),
    "bench": ("slow", "cluster"),
    "deploy": ("slow", "cluster", "root"),
    "faults": ("slow", "cluster", "root"),
    "java": ("slow", "cluster", "java"),
    "spark": ("slow", "cluster", "spark"),
}
# Where a folder's rule is wrong, found by reading what each module starts: a module
# ("unit/test_x.py") or one test ("unit/test_x.py::test_name") with its marks instead, and why.
TIER_EXCEPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "unit/test_packaging.py": (
        ("slow",),
        "copies the working tree and builds a wheel with pip, in a subprocess",
    ),
    "unit/test_packaging.py::test_every_package_folder_is_listed_in_pyproject": (
        (),
        "reads pyproject.toml and the tree, builds nothing",
    ),
    "unit/test_docs_site.py": (("slow",), "runs `mkdocs build --strict` in a subprocess"),
    "unit/test_dev_signals.py::test_stops_sent_at_a_loop_of_popen_poll_leave_the_child_waitable": (
        ("slow",),
        "starts a child and 40 processes that signal this one",
    ),
    "integration/test_tls_stream.py": (
        (),
        "in process: TLS over a loopback socket between two tasks, no broker",
    ),
    "integration/test_readme.py::test_every_docs_command_is_run_or_skipped_for_a_reason": (
        (),
        "reads the pages only (the docs run itself is the module's other test)",
    ),
    "bench/test_multicore.py": ((), "the harness's pure helpers, on made-up figures"),
    "bench/test_report.py": ((), "the report's tables, on made-up figures; the harness's gc pause"),
    "bench/test_warm.py": ((), "the warm run's options and tables, with a stub for the start"),
    "testing/test_proxy.py": (
        ("slow",),
        "the fault proxy in front of an echo server: real sockets and threads, on real time",
    ),
    "spark/test_plan.py": ((), "the data source's pure parts, without Spark or a broker"),
    "spark/test_columns.py::test_batches_carry_each_message_where_offsets_have_gaps": (
        (),
        "Arrow batches from made-up messages",
    ),
    "spark/test_columns.py::test_an_error_event_among_records_is_seen": (
        (),
        "made-up messages only",
    ),
    "deploy/test_deploy.py::test_compose_file_is_valid": (
        ("slow",),
        "`docker-compose config` in a subprocess; no cluster, no root",
    ),
    "deploy/test_deploy.py::test_dockerfile_passes_hadolint": (
        ("slow",),
        "hadolint in a subprocess; no cluster, no root",
    ),
    "deploy/test_secure_compose.py::test_secure_compose_file_is_valid": (
        ("slow",),
        "`docker-compose config` in a subprocess; no cluster, no root",
    ),
    "deploy/test_secure_compose.py::"
    "test_only_the_health_listener_is_plaintext_and_only_on_loopback": (
        (),
        "reads the secured topology's properties files",
    ),
    "deploy/test_zookeeper_compose.py::test_zookeeper_compose_file_is_valid": (
        ("slow",),
        "`docker-compose config` in a subprocess; no cluster, no root",
    ),
    "deploy/test_zookeeper_compose.py::test_every_broker_may_be_controller_through_the_ensemble": (
        (),
        "reads the compose file and the brokers' properties",
    ),
    "java/test_spark_kafka.py": (
        ("slow", "cluster", "java", "spark"),
        "Spark's own Kafka connector: a Spark session and the connector's jars",
    ),
}
# Tests that start Apache Kafka: those using the Java tests' kafka_reference fixture, and
# these modules when the variable runs them against Kafka instead of minibroker.
KAFKA_FIXTURE = "kafka_reference"
KAFKA_WHEN_SET: dict[str, str] = {
    "integration/test_transactions_clients.py": "MINIBROKER_TEST_AGAINST_KAFKA",
    "java/test_transactions.py": "MINIBROKER_TEST_AGAINST_KAFKA",
    "bench/test_smoke.py": "MINIBROKER_BENCH_KAFKA",
}


def _interrupt(signum: int, frame) -> None:
    """SIGTERM as a KeyboardInterrupt (once; a second SIGTERM kills): pytest then tears down
    its fixtures, so a run stopped from outside (`timeout`, a CI job cancelled) stops the
    clusters it started instead of leaving them running (issue 41)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


def tier_marks(item: pytest.Item) -> tuple[str, ...] | None:
    """The tier markers of a test under tests/ (None for one outside it)."""
    try:
        relative = item.path.relative_to(TESTS)
    except ValueError:
        return None
    module = relative.as_posix()
    name = getattr(item, "originalname", item.name)
    exception = TIER_EXCEPTIONS.get(f"{module}::{name}") or TIER_EXCEPTIONS.get(module)
    if exception is not None:
        marks = exception[0]
    elif len(relative.parts) > 1 and relative.parts[0] in FOLDER_MARKS:
        marks = FOLDER_MARKS[relative.parts[0]]
    else:
        raise pytest.UsageError(
            f"{item.nodeid}: tests/{relative.parts[0]} is in no test tier:"
            " add it to FOLDER_MARKS in tests/conftest.py"
        )
    variable = KAFKA_WHEN_SET.get(module)
    if KAFKA_FIXTURE in getattr(item, "fixturenames", ()) or (
        variable is not None and os.environ.get(variable) == "1"
    ):
        marks = (*marks, *(m for m in ("java", "kafka") if m not in marks))
    return marks


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for mark in tier_marks(item) or ():
            item.add_marker(mark)


BrokerFactory = Callable[..., BrokerProcess]


# -- the network guard (issue 41) --------------------------------------------------------------
#
# A client a test leaves open against a network of namespaces (faults/netns.py) goes on
# dialling its addresses after the namespaces are gone. The guard fails the module whose
# networks still had clients connected when their owner checked or closed them, or after
# which any socket of this process or its children talks to a closed test network, and
# says at the end of the session how many it found. Each connection is reported once.

_guard_reported: list[netns.ClientConnection] = []
_guard_leftovers: list[str] = []  # librdkafka clients alive after their module's networks
# Under pytest-xdist each worker guards its own modules (a module runs in one worker); the
# workers' findings come to the controller at their end (workeroutput), for the summary and
# the exit status.
_workers_guard: list[dict] = []


def _new_guard_hits(hits: list[netns.ClientConnection]) -> list[netns.ClientConnection]:
    fresh = [hit for hit in dict.fromkeys(hits) if hit not in _guard_reported]
    _guard_reported.extend(fresh)
    return fresh


@pytest.fixture(autouse=True, scope="module")
def network_guard() -> Iterator[None]:
    """Rule: nothing a test starts outlives it; a client is closed before the network it
    talks to is deleted (issue 41). Autouse and module-scoped, so it is torn down after the
    module's own fixtures, network owners included; a module that built no network costs a
    list lookup.

    Two looks: the sockets (netns.guard), and, in a module that built a network, the
    librdkafka clients of this process: once the network is gone its unreachable route
    refuses a left-open client's connects at once, so no socket of it is left to see, but
    the client's threads are (one rdk:main each)."""
    mark = netns.networks_closed()
    built = len(netns.built_networks())
    clients_before = netns.librdkafka_clients(os.getpid())
    yield
    if not netns.closed_networks():
        return
    problems = [str(hit) for hit in _new_guard_hits(netns.guard(since=mark))]
    if len(netns.built_networks()) > built:
        gc.collect()  # a client only a reference cycle still holds goes now
        alive = netns.librdkafka_clients(os.getpid()) - clients_before
        if alive > 0:
            problems.append(
                f"{alive} librdkafka clients made during this module are still alive in this"
                f" test process (pid {os.getpid()}), after its networks were closed"
            )
            _guard_leftovers.append(problems[-1])
    if problems:
        pytest.fail(
            f"network guard: {len(problems)} clients left talking to test networks"
            " (close every client before its network goes):\n"
            + "\n".join(f"  {problem}" for problem in problems),
            pytrace=False,
        )


def _guard_findings() -> dict:
    """This process's guard findings, as plain data (what a worker sends the controller)."""
    built = netns.built_networks()
    unclosed = [network.label for network in built if not network.closed]
    late = netns.closed_networks() and _new_guard_hits(netns.guard())
    return {
        "built": len(built),
        "still_open": unclosed,
        "reported": [str(hit) for hit in _guard_reported],
        "leftovers": list(_guard_leftovers),
        "failed": bool(unclosed or late),
    }


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The last look: anything that still talks to a closed test network, or a network
    never closed, fails the run (a worker's, through the controller)."""
    findings = _guard_findings()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["network_guard"] = findings
    if findings["failed"] or any(worker["failed"] for worker in _workers_guard):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """The controller: a worker's guard findings, kept for the summary and the exit status."""
    findings = getattr(node, "workeroutput", {}).get("network_guard")
    if findings is not None:
        _workers_guard.append(findings)


# Seconds of setup, call and teardown per worker and per unit of work (tests/parallel.py's
# files and groups), gathered from the reports, for the summary's balance of the workers.
_worker_seconds: dict[str, float] = {}
_unit_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    worker = getattr(getattr(report, "node", None), "gateway", None)
    name = worker.id if worker is not None else "main"
    _worker_seconds[name] = _worker_seconds.get(name, 0.0) + report.duration
    unit = parallel.unit_of(report.nodeid)
    _unit_seconds[unit] = _unit_seconds.get(unit, 0.0) + report.duration


def _balance_summary(terminalreporter) -> None:
    """Where the run's time went: each worker's total and the ten longest units, so that a
    CI log shows which worker is the critical path (docs/testing.md, "Running in parallel")."""
    if len(_worker_seconds) < 2:
        return
    workers = ", ".join(
        f"{name} {seconds / 60:.1f} min" for name, seconds in sorted(_worker_seconds.items())
    )
    terminalreporter.write_line(f"time per worker (setup, call, teardown): {workers}")
    longest = sorted(_unit_seconds.items(), key=lambda item: -item[1])[:10]
    terminalreporter.write_line(
        "longest units: " + ", ".join(f"{unit} {seconds:.0f} s" for unit, seconds in longest)
    )


def pytest_terminal_summary(terminalreporter) -> None:
    _balance_summary(terminalreporter)
    every = [_guard_findings(), *_workers_guard]
    built = sum(findings["built"] for findings in every)
    if not built:
        return
    still_open = [label for findings in every for label in findings["still_open"]]
    reported = [hit for findings in every for hit in findings["reported"]]
    leftovers = [left for findings in every for left in findings["leftovers"]]
    terminalreporter.write_line(
        f"network guard: {len(reported)} connections to closed test networks,"
        f" {len(leftovers)} modules left librdkafka clients alive"
        f" ({built} networks built, {len(still_open)} not closed"
        + (f": {'; '.join(still_open)}" if still_open else "")
        + ")"
    )
    for hit in [*reported, *leftovers]:
        terminalreporter.write_line(f"  {hit}")


# -- parallel runs (tests/parallel.py) ---------------------------------------------------------


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): the measured worker count, or none (see there)."""
    return parallel.worker_count(
        list(config.args), config.invocation_params.dir, config.getoption("markexpr") or ""
    )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadfile` (pyproject's addopts): files, with tests/parallel.py's groups."""
    if config.getoption("dist") == "loadfile":
        return parallel.make_scheduler(config, log)
    return None


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Start brokers with property overrides, e.g. `broker_factory({"log.segment.bytes": 16384})`.

    Every broker still running at teardown must shut down cleanly on SIGTERM with exit code 0:
    a broker that crashes or hangs on the way out fails the test that used it.
    """
    started: list[BrokerProcess] = []

    def start(
        overrides: dict[str, object] | None = None,
        prepare: Callable[[Path], None] | None = None,
    ) -> BrokerProcess:
        """``prepare(log_dir)`` runs before the broker starts (to seed its data)."""
        node_id = len(started) + 1
        log_dir = tmp_path / f"node-{node_id}" / "data"
        if prepare is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            prepare(log_dir)
        broker = BrokerProcess.start(node_id=node_id, log_dir=log_dir, overrides=overrides)
        started.append(broker)
        broker.wait_ready(BROKER_READY_TIMEOUT)
        return broker

    yield start

    unclean = []
    for broker in started:
        if not broker.running:
            continue
        try:
            exit_code = broker.stop()
        except BrokerStartError as hung:
            unclean.append(str(hung))
            continue
        if exit_code != 0:
            unclean.append(f"broker {broker.node_id} exited with {exit_code}:\n{broker.log_tail()}")
    if unclean:
        pytest.fail("unclean broker shutdown\n" + "\n".join(unclean))


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    """One fresh broker with default settings in this test's temporary directory."""
    return broker_factory()


# The shared broker: one broker with default settings per pytest process (each xdist worker
# has its own), started by the project's pytest plugin when the first test that wants it runs
# and stopped at the end of the session, with the plugin's clean-shutdown check. A module
# takes it with `pytestmark = SHARED_BROKER` and the plugin's `kafka_broker` fixture; its
# tests must use topics, groups and transactional ids of their own and restore any dynamic
# config they change, since other modules of the same worker use the same broker.
SHARED_BROKER = pytest.mark.minibroker(scope="session")


def wait_for(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.1):
    """Poll `condition` until it returns something truthy, and return that; fail the test with
    `what` when the deadline passes, so a broken broker fails fast instead of hanging."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def run_until_said(command: list[str], pattern: str, timeout: float) -> tuple[int | None, str, str]:
    """Run a client until it exits or its stderr matches the regular expression ``pattern``
    (then stop it) or ``timeout`` passes; return (its exit code, or None when it was
    stopped, its stdout, its stderr)."""
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    lines: list[str] = []
    told = threading.Event()

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line.decode(errors="replace"))
            if re.search(pattern, lines[-1]):
                told.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while not told.is_set() and process.poll() is None and time.monotonic() < deadline:
        told.wait(0.05)
    exit_code = process.poll()
    if exit_code is None:
        process.kill()
    assert process.stdout is not None
    stdout = process.stdout.read().decode(errors="replace")
    process.wait()
    reader.join(5)
    return exit_code, stdout, "".join(lines)


def run_until_refused(command: list[str], refusal: str, timeout: float) -> tuple[str, str]:
    """Run a client that must be refused (``kcat -L`` with wrong credentials or a bad
    certificate) until its stderr matches the regular expression ``refusal``, then stop it;
    return what it wrote (stdout, stderr). Fails the test when it exits or the timeout
    passes without being told.

    librdkafka logs the broker's refusal the moment it arrives, but kcat then waits out its
    whole metadata timeout (-m) before it gives up. The refusal in its own words, and no
    metadata on stdout (the caller checks), prove the same in a fraction of the time."""
    _, stdout, stderr = run_until_said(command, refusal, timeout)
    assert re.search(refusal, stderr), f"{command[0]} was not refused ({refusal!r}):\n{stderr}"
    return stdout, stderr


def encode(entity: object) -> bytes:
    """Serialize one kio entity (a request body, usually) to bytes."""
    return codec.encode_entity(entity)


def wire_client(sock: socket.socket) -> WireClient:
    """The wire client the tests use on a socket they opened: the tests' client id, and every
    response must use all of its frame."""
    return WireClient(sock, client_id=TEST_CLIENT_ID, exact=True)


def raw_request(
    sock: socket.socket, api_key: int, version: int, body_bytes: bytes, correlation_id: int
) -> None:
    """Send one framed request: size, the header the version calls for, then `body_bytes`."""
    wire_client(sock).send_request(api_key, version, body_bytes, correlation_id=correlation_id)


def read_response(sock: socket.socket, api_key: int, version: int) -> tuple[int, object]:
    """Read one framed response and decode it; return (correlation id, response entity).

    Fails when the body is not consumed exactly: a response with stray bytes is malformed even if
    a lenient reader would accept it.
    """
    return wire_client(sock).receive_response(api_key, version)


def exchange(
    bootstrap: str,
    request: object,
    correlation_id: int = 1,
    timeout: float = 10.0,
    client_id: str = TEST_CLIENT_ID,
) -> object:
    """One request on a fresh connection; return the decoded response body (the correlation
    id of the answer is checked)."""
    with wire.connect(bootstrap, timeout, client_id=client_id, exact=True) as client:
        return client.call(request, correlation_id=correlation_id)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create a topic with confluent-kafka's AdminClient (CreateTopics) and wait for the answer."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)], request_timeout=10
    )
    futures[topic].result(timeout=15)


def topic_id(bootstrap: str, name: str) -> uuid.UUID:
    """The topic's id, from a Metadata v12 answer (asked for that topic alone, not creating it)."""
    response = exchange(
        bootstrap,
        MetadataRequest(
            topics=(MetadataRequestTopic(name=name, topic_id=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    return response.topics[0].topic_id


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET on the GROUP resource, as `kafka-configs --entity-type
    groups` does, with confluent-kafka's AdminClient; raises KafkaException if refused."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in configs.items()
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def produce_numbers(bootstrap: str, topic: str, start: int, count: int) -> None:
    """Produce the numbers start..start+count-1 (each its own key and value, as text) with
    confluent-kafka, and wait until every one is delivered."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    for number in range(start, start + count):
        producer.produce(topic, key=str(number).encode(), value=str(number).encode())
    assert producer.flush(30) == 0


def coordinator_ready(bootstrap: str, group: str) -> None:
    """Wait until FindCoordinator names the group's coordinator (its offsets partition has a
    leader), so that a group's first request is not answered COORDINATOR_NOT_AVAILABLE."""

    def found():
        answer = exchange(
            bootstrap, FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,))
        )
        return answer.coordinators[0].error_code == 0

    wait_for(found, 20, "the group coordinator")


def describe_consumer_group(bootstrap: str, group: str):
    """The group's entry of a ConsumerGroupDescribe answer (KIP-848), asked for that group
    alone; its error code is the caller's to check."""
    answer = exchange(
        bootstrap,
        ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False),
    )
    (entry,) = answer.groups
    return entry


def confluent_read_all(
    bootstrap: str,
    topic: str,
    partition_starts: dict[int, int],
    expected: int,
    timeout: float = 30.0,
    settings: dict | None = None,
) -> list:
    """Read `expected` messages with a confluent-kafka Consumer assigned (no group management)
    to the given partitions from explicit offsets; fail if they do not arrive in time or if a
    message carries an error. ``settings`` are added to the consumer's (a TLS listener's, say)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            # The constructor insists on a group id; assign() and no commits keep the group
            # coordinator out of the picture.
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "socket.timeout.ms": 10000,
            "session.timeout.ms": 6000,
            **(settings or {}),
        }
    )
    messages = []
    try:
        consumer.assign(
            [
                TopicPartition(topic, partition, offset)
                for partition, offset in partition_starts.items()
            ]
        )
        deadline = time.monotonic() + timeout
        while len(messages) < expected:
            if time.monotonic() >= deadline:
                pytest.fail(
                    f"read {len(messages)} of {expected} messages from {topic} in {timeout}s"
                )
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                if message.error() is not None:
                    pytest.fail(f"consumer error on {topic}: {message.error()}")
                messages.append(message)
    finally:
        consumer.close()
    return messages


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """A broker's /metrics on ``port``: {(sample name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """A real Prometheus (the Debian package) started by the test on loopback, given its
    scrape targets with ``start(port, ...)`` (each a /metrics port on 127.0.0.1, scraped every
    second as job ``minibroker``), which returns its HTTP API's base URL; stopped with SIGTERM
    at teardown."""
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    started: list[subprocess.Popen] = []

    def start(*metrics_ports: int) -> str:
        config = tmp_path / "prometheus.yml"
        targets = ", ".join(f"'127.0.0.1:{port}'" for port in metrics_ports)
        config.write_text(
            "global:\n  scrape_interval: 1s\n"
            "scrape_configs:\n  - job_name: minibroker\n"
            f"    static_configs:\n      - targets: [{targets}]\n"
        )
        web = f"127.0.0.1:{free_port()}"
        log = (tmp_path / "prometheus.log").open("w")
        started.append(
            subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address={web}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        return f"http://{web}"

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=30)


def prometheus_query(api: str, query: str) -> list[dict] | None:
    """An instant query to Prometheus' HTTP API (``/api/v1/query``): its result vector, or None
    while Prometheus does not answer yet."""
    encoded = urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(f"{api}/api/v1/query?{encoded}", timeout=5) as answer:
            return json.load(answer)["data"]["result"]
    except OSError:
        return None


BATCH_HEADER_SIZE = 61
COMPRESSION_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def split_batches(records: bytes) -> list[bytes]:
    """Cut a Fetch `records` blob into whole record batches; a trailing partial batch (which a
    broker may send when it hits max_bytes) is dropped, as clients drop it."""
    batches = []
    position = 0
    while position + 12 <= len(records):
        (batch_length,) = struct.unpack_from(">i", records, position + 8)
        end = position + 12 + batch_length
        if end > len(records):
            break
        batches.append(records[position:end])
        position = end
    return batches


def batch_compression(batch: bytes) -> int:
    """The codec id in the low three bits of the batch attributes (int16 at byte 21)."""
    (attributes,) = struct.unpack_from(">h", batch, 21)
    return attributes & 7


def batch_crc_is_valid(batch: bytes) -> bool:
    """CRC-32C over attributes..end, as stored at byte 17: proves the bytes survived intact."""
    (stored,) = struct.unpack_from(">I", batch, 17)
    return crc32c.crc32c(batch[21:]) == stored


def batch_next_offset(batch: bytes) -> int:
    (base_offset,) = struct.unpack_from(">q", batch, 0)
    (last_offset_delta,) = struct.unpack_from(">i", batch, 23)
    return base_offset + last_offset_delta + 1


def fetch_all_batches(
    bootstrap: str, topic: str, partition: int, timeout: float = 20.0
) -> list[bytes]:
    """Every record batch of one partition, from offset 0 to the high watermark, fetched with raw
    Fetch v11 requests (the version kcat uses) so that the bytes are exactly the broker's."""
    batches: list[bytes] = []
    next_offset = 0
    deadline = time.monotonic() + timeout
    for correlation_id in itertools.count(1):
        request = FetchRequest(
            max_wait=datetime.timedelta(milliseconds=100),
            min_bytes=1,
            max_bytes=8 << 20,
            topics=(
                FetchTopic(
                    topic=topic,
                    partitions=(
                        FetchPartition(
                            partition=partition,
                            fetch_offset=next_offset,
                            partition_max_bytes=8 << 20,
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        response = exchange(bootstrap, request, correlation_id)
        assert response.error_code == ErrorCode.none, response
        (answered,) = [part for reply in response.responses for part in reply.partitions]
        assert answered.error_code == ErrorCode.none, answered
        new_batches = split_batches(answered.records or b"")
        batches += new_batches
        if new_batches:
            next_offset = batch_next_offset(new_batches[-1])
        if next_offset >= answered.high_watermark:
            return batches
        if time.monotonic() >= deadline:
            pytest.fail(f"fetched up to {next_offset} of {answered.high_watermark} in {timeout}s")


def assert_round_trip(produced: list[tuple], consumed: list[tuple], partitions: int) -> None:
    """Everything sent comes back exactly once, at the partition and offset the producer was
    told, in send order within each partition. Both lists hold (key, value, partition, offset);
    `produced` is in send order."""
    assert len(consumed) == len(produced)
    sent_at = {(partition, offset): (key, value) for key, value, partition, offset in produced}
    assert len(sent_at) == len(produced), "the producer was given one offset twice"
    received_at = {(partition, offset): (key, value) for key, value, partition, offset in consumed}
    assert received_at == sent_at

    partitions_of_key: dict[bytes, set[int]] = {}
    for key, _, partition, _ in produced:
        partitions_of_key.setdefault(key, set()).add(partition)
    assert all(len(found) == 1 for found in partitions_of_key.values()), "a key was split"

    for partition in range(partitions):
        sent_values = [value for _, value, sent_to, _ in produced if sent_to == partition]
        received = [
            (offset, value) for _, value, came_from, offset in consumed if came_from == partition
        ]
        assert sent_values, f"no key was sent to partition {partition}"
        assert received == list(enumerate(sent_values))
