"""Kafka Streams 4.4 with `group.protocol=streams` (KIP-1071) on a 3-broker minibroker cluster:
the broker assigns the tasks (StreamsGroupHeartbeat), creates the application's repartition
and changelog topics itself (the MISSING_INTERNAL_TOPICS path), and the admin client describes
the group (StreamsGroupDescribe).

One word count application (programs/StreamsGroupInstance.java), at least once: a first
instance counts the first lines; a second instance joins and the six tasks (two subtopologies
over three partitions) are split between them, as StreamsGroupDescribe shows; more lines are
counted by both; the second instance is stopped and its tasks move back to the first, which
counts the last lines. The output's last count per word is the exact count of every line.

On the same cluster: Kafka 4.4's kafka-streams-groups.sh, `minibroker groups` and the
streams-group-count metric on a running and then stopped word count
(test_kafka_streams_groups_tool), and the word count with exactly_once_v2 and standby tasks
through a SIGKILL of an instance (test_exactly_once_with_a_standby_taking_over_a_killed_instance;
the longer form beside Apache Kafka is `python -m faults.streams_eos`).
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from minibroker.tools.launcher import free_port
from tests.cluster.conftest import BROKERS, create_replicated_topic
from tests.java.conftest import JAVA_TIMEOUT, SENDING, minibroker_cluster
from tests.java.test_apps import _expected, _lines, _produce

# The word count's tasks: subtopology 0 (the source to the repartition topic) and subtopology 1
# (the repartition topic to the counts), each over the input's three partitions.
TASKS = {f"{sub}_{partition}" for sub in (0, 1) for partition in range(3)}
# Subtopology 1 holds the counts' store: only its tasks have standbys.
STATEFUL = {f"1_{partition}" for partition in range(3)}


@pytest.fixture(scope="module")
def streams_cluster(tmp_path_factory):
    """The module's 3-broker cluster, each broker with its /metrics port (``metrics_ports``),
    and streams groups allowed a 6 s session timeout and a 1 s heartbeat interval (Kafka's
    minimums are 45 s and 5 s; the defaults stay Kafka's), which a group asks for with its own
    configs."""
    ports = {node: free_port() for node in range(1, BROKERS + 1)}
    with minibroker_cluster(
        tmp_path_factory.mktemp("streams-cluster"),
        overrides={
            "group.streams.min.session.timeout.ms": 6000,
            "group.streams.min.heartbeat.interval.ms": 1000,
        },
        node_overrides={node: {"metrics.port": port} for node, port in ports.items()},
    ) as started:
        started.metrics_ports = ports
        yield started


class Instance:
    """One application instance as a child JVM, stopped by closing its standard input."""

    def __init__(self, java, bootstrap: str, app_id: str, work: Path, *guarantee: str):
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.log = work / "streams.log"
        self.client_id = ""  # its stream thread's consumer's, which holds its process id
        self.process = subprocess.Popen(
            java.command(
                "StreamsGroupInstance", "run", bootstrap, app_id, f"in-{app_id}",
                f"out-{app_id}", str(work / "state"), *guarantee,
            ),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log.open("w"), text=True,
        )  # fmt: skip

    def wait_for(self, prefix: str) -> str:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            assert not line.startswith("ERROR"), line + self.log.read_text()[-4000:]
            if line.startswith("CLIENT "):
                self.client_id = line.split()[1]
            if line.startswith(prefix):
                return line
        raise AssertionError(f"instance ended before {prefix!r}:\n{self.log.read_text()[-4000:]}")

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        closed = self.wait_for("CLOSED")
        assert closed.strip() == "CLOSED NOT_RUNNING", closed
        assert self.process.wait(JAVA_TIMEOUT) == 0

    def kill(self) -> None:
        """SIGKILL (kill -9) to the JVM, which is the child process itself."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _describe(java, bootstrap: str, app_id: str) -> dict:
    return java.json("StreamsGroupInstance", "describe", bootstrap, app_id)


def _wait_for_assignment(
    java, bootstrap: str, app_id: str, members: int, standbys: bool = False
) -> dict:
    """StreamsGroupDescribe until the group is Stable with ``members`` members that own every
    task between them, each task once, and with ``standbys`` also a standby of every task on
    a member other than its owner (or fail at the deadline with the last answer)."""
    deadline = time.monotonic() + 120
    described: dict = {}
    while time.monotonic() < deadline:
        described = _describe(java, bootstrap, app_id)
        owned = [task for member in described["members"] for task in member["active"]]
        if (
            described["state"].upper() == "STABLE"
            and len(described["members"]) == members
            and sorted(owned) == sorted(TASKS)
            and (not standbys or _standbys_apart(described))
        ):
            return described
        time.sleep(0.5)
    raise AssertionError(f"no stable assignment to {members} members: {json.dumps(described)}")


def _standbys_apart(described: dict) -> bool:
    standby = [task for member in described["members"] for task in member["standby"]]
    return sorted(standby) == sorted(STATEFUL) and all(
        not set(member["active"]) & set(member["standby"]) for member in described["members"]
    )


def _wait_for_counts(bootstrap: str, topic: str, expected: dict[str, int]) -> dict[str, int]:
    """Read the output topic from the start until the last count per word is `expected` (or
    the deadline passes); the counts read."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    counts: dict[str, int] = {}
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and counts != expected:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            counts[message.key().decode()] = struct.unpack(">q", message.value())[0]
    finally:
        consumer.close()
    return counts


def test_word_count_with_the_streams_protocol(java, streams_cluster, tmp_path):
    bootstrap = streams_cluster.bootstrap
    app_id = "streams-wc"
    create_replicated_topic(streams_cluster, f"in-{app_id}", 3)
    create_replicated_topic(streams_cluster, f"out-{app_id}", 3)
    first, second, third = _lines(200, 3), _lines(200, 4), _lines(200, 5)
    _produce(bootstrap, f"in-{app_id}", first)
    a = Instance(java, bootstrap, app_id, tmp_path / "a")
    b = None
    try:
        a.wait_for("RUNNING")
        # The first member of the new group waited for group.streams.initial.rebalance.delay.ms
        # (Kafka's 3000), told so by the ASSIGNMENT_DELAYED status, which Kafka Streams logs.
        delayed = "Assignment delayed due to the configured initial rebalance delay."
        assert delayed in a.log.read_text(errors="replace")
        assert _wait_for_counts(bootstrap, f"out-{app_id}", _expected(first)) == _expected(first)
        alone = _wait_for_assignment(java, bootstrap, app_id, 1)
        assert set(alone["members"][0]["active"]) == TASKS

        # A second instance joins: the tasks are split between the two processes.
        b = Instance(java, bootstrap, app_id, tmp_path / "b")
        b.wait_for("RUNNING")
        both = _wait_for_assignment(java, bootstrap, app_id, 2)
        split = [set(member["active"]) for member in both["members"]]
        assert all(len(tasks) == 3 for tasks in split), split
        assert split[0] | split[1] == TASKS
        assert both["group_epoch"] > alone["group_epoch"]
        _produce(bootstrap, f"in-{app_id}", second)
        expected = _expected(first + second)
        assert _wait_for_counts(bootstrap, f"out-{app_id}", expected) == expected

        # The second instance stops: its tasks move back to the first.
        b.stop()
        b = None
        back = _wait_for_assignment(java, bootstrap, app_id, 1)
        assert set(back["members"][0]["active"]) == TASKS
        _produce(bootstrap, f"in-{app_id}", third)
        expected = _expected(first + second + third)
        assert _wait_for_counts(bootstrap, f"out-{app_id}", expected) == expected
        a.stop()
    finally:
        a.kill()
        if b is not None:
            b.kill()
    # The broker created the internal topics the topology needs.
    listed = streams_cluster_topics(bootstrap)
    assert {f"{app_id}-counts-changelog", f"{app_id}-words-repartition"} <= listed


def streams_cluster_topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


STREAMS_GROUPS = "org.apache.kafka.tools.streams.StreamsGroupCommand"


def _tool_step(name: str, bootstrap: str, *args: str, until: str | None = None) -> dict:
    step = {"name": name, "main": STREAMS_GROUPS, "args": ["--bootstrap-server", bootstrap, *args]}
    if until is not None:
        step |= {"until": until, "timeout_s": 60.0}
    return step


def _wait_for_step(log: Path, name: str, tools: subprocess.Popen) -> None:
    """Until the tools' JVM starts step ``name`` (ToolBatch logs "minibroker-tool <name>" to
    the request log before each step): the steps before it are done."""
    deadline = time.monotonic() + JAVA_TIMEOUT
    marker = f"minibroker-tool {name}\n"
    while not log.exists() or marker not in log.read_text(errors="replace"):
        assert tools.poll() is None, f"the tools' JVM ended before step {name}"
        assert time.monotonic() < deadline, f"step {name} never started"
        time.sleep(0.1)


def _tool_ok(answers: dict, name: str, error: str | None = None) -> str:
    """The step's standard output; it ended well and printed no error (or just ``error``:
    the tool prints some refusals and notes as "Error: ..." and exits 0)."""
    answer = answers[name]
    assert answer["exit"] == 0 and "exception" not in answer, (name, answer)
    errors = [line for line in answer["stdout"].splitlines() if line.startswith("Error:")]
    assert errors == ([f"Error: {error}"] if error else []), (name, answer)
    return answer["stdout"]


def _rows(stdout: str, first: str) -> list[dict[str, str]]:
    """The rows of a table the tool printed whose header starts with ``first``, by column."""
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    at = next(index for index, line in enumerate(lines) if line[0] == first)
    return [dict(zip(lines[at], line, strict=False)) for line in lines[at + 1 :]]


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _streams_groups_by_state(cluster) -> dict[str, float]:
    """kafka_server_group_coordinator_metrics_streams_group_count over the cluster's brokers."""
    totals: dict[str, float] = {}
    for port in cluster.metrics_ports.values():
        for (name, labels), value in _scrape(port).items():
            if name == "kafka_server_group_coordinator_metrics_streams_group_count":
                state = dict(labels)["state"]
                totals[state] = totals.get(state, 0.0) + value
    return totals


def _minibroker_groups(bootstrap: str, *describe: str) -> str:
    from minibroker.tools import groups

    out = io.StringIO()
    assert groups.run(bootstrap, describe[0] if describe else None, 30.0, out) == 0
    return out.getvalue()


def test_kafka_streams_groups_tool(java, streams_cluster, tmp_path):
    """Kafka 4.4's kafka-streams-groups.sh (StreamsGroupCommand, unchanged) on a running word
    count: list, describe (members, state, offsets, each also --verbose), a reset refused
    while the instance runs; once it stopped: the group Empty, its input offsets reset to the
    earliest (`minibroker groups` then shows them at 0), the group and its internal topics
    deleted. `minibroker groups` and the streams-group-count metric see the group too."""
    bootstrap = streams_cluster.bootstrap
    app_id = "streams-tool"
    source = f"in-{app_id}"
    create_replicated_topic(streams_cluster, source, 3)
    create_replicated_topic(streams_cluster, f"out-{app_id}", 3)
    lines = _lines(60, 3)
    _produce(bootstrap, source, lines)
    b = bootstrap
    gate = f"gate-{app_id}"
    group = ["--group", app_id]
    reset = [
        "--reset-offsets", *group, "--input-topic", source, "--to-earliest", "--execute",
    ]  # fmt: skip
    batch = [
        # While the instance runs and owns every task.
        _tool_step("list", b, "--list", until=app_id),
        _tool_step("list-state", b, "--list", "--state"),
        _tool_step("members", b, "--describe", *group, "--members"),
        _tool_step("members-verbose", b, "--describe", *group, "--members", "--verbose"),
        _tool_step("state", b, "--describe", *group, "--state"),
        _tool_step("state-verbose", b, "--describe", *group, "--state", "--verbose"),
        _tool_step("offsets", b, "--describe", *group, "--offsets"),
        _tool_step("offsets-verbose", b, "--describe", *group, "--offsets", "--verbose"),
        _tool_step("reset-refused", b, *reset),
        # Once the instance stopped (the test stops it when this step starts).
        _tool_step("left", b, "--describe", *group, "--state", until="Empty"),
        _tool_step("reset", b, *reset),
        # Until the test has looked at the reset group (it then creates the gate topic).
        {
            "name": "checked",
            "main": "org.apache.kafka.tools.TopicCommand",
            "args": ["--bootstrap-server", b, "--list"],
            "until": gate,
            "timeout_s": 60.0,
        },
        _tool_step("delete", b, "--delete", *group, "--delete-all-internal-topics"),
        _tool_step("list-after", b, "--list"),
    ]
    batch_path, answers_path = tmp_path / "batch.json", tmp_path / "answers.json"
    batch_path.write_text(json.dumps(batch))
    # The module's other tests' groups count too: the change is what is checked.
    before_metric = _streams_groups_by_state(streams_cluster)
    a = Instance(java, bootstrap, app_id, tmp_path / "a")
    tools = None
    try:
        a.wait_for("RUNNING")
        expected = _expected(lines)
        assert _wait_for_counts(bootstrap, f"out-{app_id}", expected) == expected
        alone = _wait_for_assignment(java, bootstrap, app_id, 1)
        listed = _minibroker_groups(bootstrap)
        described = _minibroker_groups(bootstrap, app_id)
        running_metric = _streams_groups_by_state(streams_cluster)
        command = java.command("ToolBatch", str(batch_path), str(answers_path))
        log = java.request_log.files[-1]
        tools = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _wait_for_step(log, "left", tools)
        a.stop()
        _wait_for_step(log, "checked", tools)
        reset_groups = _minibroker_groups(bootstrap, app_id)
        empty_metric = _streams_groups_by_state(streams_cluster)
        create_replicated_topic(streams_cluster, gate, 1)  # the tool goes on to --delete
        _, stderr = tools.communicate(timeout=JAVA_TIMEOUT)
        assert tools.returncode == 0, stderr[-4000:]
    finally:
        a.kill()
        if tools is not None and tools.poll() is None:
            tools.kill()
    answers = {answer["name"]: answer for answer in json.loads(answers_path.read_text())}
    for name, answer in answers.items():
        print(f"--- {name}: exit {answer['exit']}\n{answer['stdout']}{answer['stderr'][-2000:]}")
    print(listed, described, reset_groups, running_metric, empty_metric, sep="\n")

    assert gate in _tool_ok(answers, "checked").split()
    assert app_id in _tool_ok(answers, "list").split()
    listed_states = _rows(_tool_ok(answers, "list-state"), "GROUP")
    assert {r["GROUP"]: r["STATE"] for r in listed_states}[app_id] == "Stable", listed_states
    member_id = alone["members"][0]["member_id"]
    members = _tool_ok(answers, "members")
    assert member_id in members and alone["members"][0]["process_id"] in members, members
    verbose = _tool_ok(answers, "members-verbose")
    assert member_id in verbose and "streams" in verbose, verbose
    (state,) = _rows(_tool_ok(answers, "state"), "GROUP")
    assert state["STATE"] == "Stable" and state["#MEMBERS"] == "1", state
    (state,) = _rows(_tool_ok(answers, "state-verbose"), "GROUP")
    assert state["GROUP-EPOCH"] == str(alone["group_epoch"]), state
    # Every partition of the input and of the repartition topic, consumed to its end.
    offsets = _rows(_tool_ok(answers, "offsets"), "GROUP")
    assert {(r["TOPIC"], r["PARTITION"]) for r in offsets} == {
        (topic, str(p)) for topic in (source, f"{app_id}-words-repartition") for p in range(3)
    }, offsets
    assert {r["OFFSET-LAG"] for r in offsets} == {"0"}, offsets
    verbose_offsets = _rows(_tool_ok(answers, "offsets-verbose"), "GROUP")
    assert {
        (r["TOPIC"], r["PARTITION"], r["CURRENT-OFFSET"] == r["LOG-END-OFFSET"])
        for r in verbose_offsets
    } == {(r["TOPIC"], r["PARTITION"], True) for r in offsets}, verbose_offsets
    refused = _tool_ok(
        answers,
        "reset-refused",
        f"Assignments can only be reset if the group '{app_id}' is inactive, but the current "
        "state is Stable.",
    )
    assert not _rows(refused, "GROUP"), refused
    (left,) = _rows(
        _tool_ok(answers, "left", f"Streams group '{app_id}' has no active members."), "GROUP"
    )
    assert left["STATE"] == "Empty" and left["#MEMBERS"] == "0", left
    reset_out = _rows(_tool_ok(answers, "reset"), "GROUP")
    assert {(r["TOPIC"], r["NEW-OFFSET"]) for r in reset_out} == {(source, "0")}, reset_out
    assert f"Deletion of requested streams groups ('{app_id}') was successful." in _tool_ok(
        answers, "delete"
    )
    assert app_id not in _tool_ok(answers, "list-after").split()
    internal = {f"{app_id}-counts-changelog", f"{app_id}-words-repartition"}
    assert not internal & streams_cluster_topics(bootstrap)

    # minibroker groups: the streams group, its member and its committed offsets.
    assert any(line.split()[:1] == [app_id] and "streams" in line for line in listed.splitlines())
    assert "type streams" in described and member_id in described, described
    committed = {
        (r["TOPIC"], r["PARTITION"]): r["CURRENT-OFFSET"] for r in _rows(reset_groups, "TOPIC")
    }
    assert {committed[(source, str(p))] for p in range(3)} == {"0"}, reset_groups
    repartition = f"{app_id}-words-repartition"
    assert {committed[(repartition, str(p))] for p in range(3)} != {"0"}, reset_groups
    # The metrics: the group is Stable while the instance runs, Empty once it left.
    stable, empty = before_metric.get("Stable", 0.0), before_metric.get("Empty", 0.0)
    assert (running_metric["Stable"], running_metric["Empty"]) == (stable + 1, empty), (
        before_metric,
        running_metric,
    )
    assert (empty_metric["Stable"], empty_metric["Empty"]) == (stable, empty + 1), empty_metric

    sent = sorted(
        {(m.group(2), int(m.group(3))) for m in SENDING.finditer(log.read_text(errors="replace"))}
    )
    print("kafka-streams-groups sent:", ", ".join(f"{name} v{version}" for name, version in sent))


def _set_group_configs(bootstrap: str, group_id: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs (SET) on the GROUP resource, as kafka-configs.sh --entity-type
    groups sends it."""
    from kio.schema.errors import ErrorCode

    from minibroker.protocol.versions import ApiKey
    from minibroker.tools import wire

    resource = {
        "resource_type": 32,  # GROUP
        "resource_name": group_id,
        "configs": [
            {"name": name, "value": value, "config_operation": 0} for name, value in configs.items()
        ],
    }
    with wire.connect(bootstrap.split(",")[0], 10, exact=True) as client:
        answer = client.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [resource], "validate_only": False}
        )
    assert answer.responses[0].error_code == ErrorCode.none, answer


def _read_committed(bootstrap: str, topic: str, expected: dict[str, int]) -> dict[str, list[int]]:
    """Every committed record of ``topic`` (read_committed, from the start) until the last
    value per key is ``expected``, as key -> the values in offset order per partition (a
    word's updates all go to one partition). A value is read as its last 8 bytes (a Long, or
    a timestamped store's changelog value: timestamp then Long)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    updates: dict[str, list[int]] = {}
    deadline = time.monotonic() + 120
    try:
        while (
            time.monotonic() < deadline
            and {word: values[-1] for word, values in updates.items()} != expected
        ):
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            value = struct.unpack(">q", message.value()[-8:])[0]
            updates.setdefault(message.key().decode(), []).append(value)
    finally:
        consumer.close()
    return updates


def test_exactly_once_with_a_standby_taking_over_a_killed_instance(java, streams_cluster, tmp_path):
    """The word count with processing.guarantee=exactly_once_v2 and one standby replica per
    task (the group's streams.num.standby.replicas=1): two instances, one killed with SIGKILL
    while it holds open transactions; its tasks go to the other instance, which held their
    standbys; lines produced meanwhile are counted. Every word's committed updates in the
    output are 1, 2, ..., its count, each once (no duplicate and no lost update), and the
    changelog's last value per word is the same count. (The killed instance's restart and a
    third and fourth instance: `python -m faults.streams_eos`, beside Apache Kafka.)"""
    bootstrap = streams_cluster.bootstrap
    app_id = "streams-eos"
    create_replicated_topic(streams_cluster, f"in-{app_id}", 3)
    create_replicated_topic(streams_cluster, f"out-{app_id}", 3)
    # A killed member is fenced after 6 s (the broker's minimum is lowered for this cluster).
    _set_group_configs(
        bootstrap,
        app_id,
        {
            "streams.num.standby.replicas": "1",
            "streams.session.timeout.ms": "6000",
            "streams.heartbeat.interval.ms": "1000",
        },
    )
    first, second = _lines(150, 6), _lines(150, 7)
    _produce(bootstrap, f"in-{app_id}", first)
    eos = "exactly_once_v2"
    a = Instance(java, bootstrap, app_id, tmp_path / "a", eos)
    b = Instance(java, bootstrap, app_id, tmp_path / "b", eos)
    try:
        a.wait_for("RUNNING")
        b.wait_for("RUNNING")
        both = _wait_for_assignment(java, bootstrap, app_id, 2, standbys=True)
        expected = _expected(first)
        assert _wait_for_counts(bootstrap, f"out-{app_id}", expected) == expected
        by_process = {member["process_id"]: member for member in both["members"]}
        assert len(by_process) == 2, both
        # The victim is the instance that owns stateful tasks (both may).
        (a_process,) = [p for p in by_process if p in a.client_id]
        if not set(by_process[a_process]["active"]) & STATEFUL:
            a, b = b, a
            (a_process,) = [p for p in by_process if p in a.client_id]
        (b_process,) = set(by_process) - {a_process}

        # kill -9 of that instance: the survivor's standbys become its active tasks.
        a.kill()
        _produce(bootstrap, f"in-{app_id}", second)
        alone = _wait_for_assignment(java, bootstrap, app_id, 1)
        assert [m["process_id"] for m in alone["members"]] == [b_process], alone
        moved = set(by_process[a_process]["active"]) & STATEFUL
        assert moved and moved <= set(by_process[b_process]["standby"]), by_process
        expected = _expected(first + second)
        assert _wait_for_counts(bootstrap, f"out-{app_id}", expected) == expected
        b.stop()
    finally:
        a.kill()
        b.kill()
    output = _read_committed(bootstrap, f"out-{app_id}", expected)
    assert {word: values[-1] for word, values in output.items()} == expected
    duplicated = {
        word: values for word, values in output.items() if values != list(range(1, len(values) + 1))
    }
    assert not duplicated, dict(list(duplicated.items())[:5])
    changelog = _read_committed(bootstrap, f"{app_id}-counts-changelog", expected)
    assert {word: values[-1] for word, values in changelog.items()} == expected
