"""Every command of the README and of the documentation site (docs/), run as written, or
listed with the reason it is not.

Each fenced block of every page (tests/readme.py finds them by page and heading) is one of:
run here, in RUN_SECTIONS (each shell command by RUN, or in SKIPPED with the reason) or
RUN_BLOCKS; skipped with its whole section, in SKIPPED_SECTIONS, with the reason and the test
that runs those commands instead; or a block that is not a command (NOT_COMMANDS: a
`text` listing or a `mermaid` picture). test_every_docs_command_is_run_or_skipped_for_a_reason
fails on a block in none of these, on a fence without a language and on a stale entry, so a
new command on any page is never silently left untested.

The sections run here (the README's "Two commands" and "A short tour", Consumer groups' KIP-848
snippet on the tour's cluster, Getting started's
cluster by hand, Security's TLS and ACL sections) run in that order, in a fresh directory (the
test's temporary cwd, with this test's virtualenv linked as `.venv`), inside a network
namespace of its own, so the pages' fixed addresses (127.0.0.1:9090, 9092-9094, ZooKeeper's
2181) are free and nothing else on the machine is touched; kcat is the one on PATH. Commands
that run until stopped are run the way a user runs them: started, waited for, then stopped
with Ctrl-C (SIGINT), or with `kill %1` (SIGTERM) for the backgrounded `minibroker dev`, and
must report a clean stop.

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
from tests.readme import Block, blocks, page_blocks, pages, shell_commands

VENV = Path(sys.executable).parent.parent
STARTUP = 60.0
README = "README.md"
SECURITY = "docs/security.md"

# Run here, in this order: (page, heading).
RUN_SECTIONS = [
    (README, "Two commands"),
    (README, "A short tour"),
    ("docs/consumer-groups.md", "The consumer group protocol (KIP-848)"),
    ("docs/schema-registry.md", "Turning it on"),
    ("docs/share-groups.md", "Trying it"),
    ("docs/getting-started.md", "A cluster by hand"),
    (SECURITY, "TLS and SASL listeners"),
    (SECURITY, "ACLs"),
]

# Commands of the run sections that are not run, wherever they appear.
SKIPPED = {
    "python3 -m venv .venv": "the test runs in a virtualenv already, linked as .venv",
    ".venv/bin/pip install -q -e .": "installed: the test runs from an editable install",
    ".venv/bin/pip install -q -e '.[test,spark,docs,iceberg]'": "installed: the test runs with"
    " these extras",
    ".venv/bin/minibroker iceberg --bootstrap 127.0.0.1:9092": "the tour makes no Iceberg"
    " topic: tests/integration/test_iceberg_cli.py runs the command against a broker with"
    " three and checks each column",
    "apt-get update": "system installs: .ci/run does them before the tests",
    "apt-get install -y --no-install-recommends kcat docker-compose prometheus iproute2"
    " faketime openjdk-17-jdk-headless maven zookeeper fiu-utils curl": "system installs: .ci/run"
    " does them",
    "java/fetch.sh": "the Java artifacts: .ci/run fetches them before the tests",
    ".venv/bin/pytest": "the whole test suite (this test is part of it)",
}

# Sections whose blocks are not run here, each with the reason and what runs them instead.
SKIPPED_SECTIONS = {
    ("docs/schema-registry.md", "TLS and authentication"): "a broker with certificates and"
    " SCRAM users: tests/integration/test_schema_registry_security.py starts one with these"
    " properties (its https listener, BASIC, minibroker.scram.users) and runs confluent-kafka's"
    " SchemaRegistryClient with ssl.ca.location and basic.auth.user.info against it",
    ("docs/schema-registry.md", "Schema validation on produce"): "needs Java and the pinned"
    " artifacts: tests/java/test_tools.py's test_schema_validation_commands_of_the_docs runs"
    " these two commands as written against its cluster and checks that an unframed record is"
    " then refused with INVALID_RECORD (tests/cluster/test_schema_registry.py checks the"
    " registered ids with confluent-kafka's serializers)",
    (README, "Documentation"): "the docs extra and `mkdocs serve` (a server until Ctrl-C):"
    " tests/unit/test_docs_site.py builds the same site with `mkdocs build --strict`",
    ("docs/testing.md", "Running the suite"): "the test suite itself, or parts of it (this test"
    " is one); its install commands are the README's, skipped there",
    ("docs/testing.md", "Running in parallel"): "the test suite itself, in parallel or in one"
    " process (this test is in the suite); tests/unit/test_parallel.py checks what `-n auto`"
    " means and which files share a worker",
    ("docs/testing.md", "Test tiers"): "the fast tier of the test suite (this test is in"
    ' the suite); tests/unit/test_test_tiers.py checks what `-m "not slow"` selects',
    ("docs/benchmarks/index.md", "Running"): "benchmark runs take minutes to hours;"
    " tests/bench/test_smoke.py runs `python -m bench --smoke`",
    ("docs/compatibility.md", "Running the suite"): "confluent-kafka-python's schema-registry"
    " tests, fetched from its git history and run by hand (minutes); the page records the"
    " results",
    ("docs/compatibility.md", "How to run"): "librdkafka's own suite, built from its sources"
    " and run by hand (minutes); the page records its results",
    ("docs/compatibility.md", "librdkafka 0001-0150 (2026-12-03)"): "librdkafka's whole"
    " suite against two trees (the baseline and main), built from its sources and run by hand"
    " (half an hour and more); the page records its results",
    ("docs/compatibility.md", "confluent-kafka-python's integration tests"): "confluent-kafka"
    "-python's own integration tests, fetched from its git history and run by hand against"
    " two trees (minutes); the page records the results",
    ("docs/compose-and-metrics.md", "Running a cluster with docker compose"): "no Docker"
    " engine on CI machines: tests/deploy/test_deploy.py, test_secure_compose.py and"
    " test_zookeeper_compose.py run these services with their compose commands and files in"
    " network namespaces, and produce and consume as these commands do",
    ("docs/compose-and-metrics.md", "Client telemetry (KIP-714)"): "needs Java and the pinned"
    " artifacts: tests/java/test_telemetry.py runs these kafka-client-metrics commands and a"
    " Java producer's push; tests/integration/test_telemetry.py a librdkafka producer's",
    ("docs/faults.md", "Frame fuzzer"): "a full fuzz run takes long:"
    " tests/integration/test_fuzz.py is the CI-sized run",
    ("docs/java.md", "Kafka's command-line tools"): "needs Java and the pinned artifacts:"
    " tests/java/test_tools.py runs `minibroker kafka` (topics, console producer and consumer)"
    " and these tools' main classes (and every other tool) against a cluster",
    ("docs/operations.md", "Follower fetching"): "a broker property, not a command:"
    " tests/cluster/test_follower_fetching.py starts brokers in three racks with it and checks"
    " that a consumer with client.rack reads from its rack's follower",
    ("docs/operations.md", "Replication throttles"): "needs Java, the pinned artifacts and"
    " several MB to copy: tests/java/test_replication_throttle.py runs kafka-reassign-partitions"
    " --execute --throttle and --verify against a 3-broker cluster and measures the copy",
    ("docs/operations.md", "The metadata quorum"): "needs Java and the pinned artifacts:"
    " tests/java/test_tools.py runs kafka-metadata-quorum describe --status and --replication"
    " through a broker and through the controller against a cluster and checks their output",
    ("docs/operations.md", "The request log"): "needs Java and the pinned artifacts:"
    " tests/java/test_tools.py runs this kafka-configs command (and its --delete-config)"
    " against its cluster and checks broker 1's request log (test_kafka_configs_switches_the"
    "_request_log)",
    ("docs/operations.md", "Racks"): "needs Java, the pinned artifacts and brokers in racks:"
    " tests/java/test_tools.py runs kafka-reassign-partitions --generate on its cluster in two"
    " racks and checks that the plan spans both",
    ("docs/configuration.md", "Kafka's own config files"): "Kafka's files listen on fixed"
    " ports 9092 and 9093: tests/integration/test_cli.py starts them, vendored unchanged in"
    " tests/fixtures/kafka_config, with only the ports and log.dirs changed, and produces and"
    " consumes through them",
    ("docs/share-groups.md", "The kafka-share-groups tool"): "needs Java and the pinned"
    " artifacts: tests/java/test_share_groups_tool.py runs kafka-share-groups' main class with"
    " these options around confluent-kafka share consumers",
    ("docs/quotas-and-limits.md", "Quotas"): "needs Java and the pinned artifacts:"
    " tests/java/test_tools.py runs kafka-configs' client quota commands",
    ("docs/spark.md", "Install and the demo"): "needs Java and pyspark, and is slow:"
    " tests/spark/test_demo.py runs the demo command and the read-and-write snippet as written",
    ("docs/spark.md", "How Spark finds the source"): "needs Java and pyspark:"
    " tests/spark/test_job_script.py runs examples/spark_job.py, which this block shows"
    " (test_the_docs_show_the_job_as_it_is checks they are the same)",
    ("docs/spark.md", "Reading fewer columns"): "needs Java and pyspark:"
    " tests/spark/test_demo.py runs the snippet as written",
    ("docs/spark.md", "Spark's own Kafka connector"): "needs Java, pyspark and the connector's"
    " jars: tests/java/test_spark_kafka.py runs Spark's connector (its own session setup)",
    ("docs/iceberg-topics.md", "Turning it on"): "a topic created with these configs on a"
    " running broker: tests/integration/test_iceberg_topics.py creates one (with a short"
    " target lag) with confluent-kafka's AdminClient and reads its table",
    ("docs/iceberg-topics.md", "Data files in object storage"): "needs an S3 server:"
    " tests/integration/test_iceberg_s3.py starts moto's and a broker with these properties"
    " (pointed at it)",
    ("docs/iceberg-topics.md", "The `minibroker iceberg` command"): "needs a broker with"
    " Iceberg topics: tests/integration/test_iceberg_cli.py runs the command against one and"
    " checks each column",
    ("docs/iceberg-topics.md", "Reading the table with pyiceberg"): "needs a broker that has"
    " written the table: tests/integration/test_iceberg_topics.py runs this snippet as written"
    " (its catalog path pointed at the test's broker) and checks it reads every row",
    ("docs/iceberg-topics.md", "A REST catalog"): "needs Java and Iceberg's REST catalog"
    " server (java/fetch.sh): tests/java/test_iceberg_rest_catalog.py starts a broker with"
    " these properties and runs the reading snippet as written (both pointed at the server it"
    " starts) and checks it reads every row",
    ("docs/iceberg-topics.md", "Reading the table with Spark"): "needs Java, pyspark, Iceberg's"
    " Spark runtime (java/fetch.sh) and a broker that has written the tables:"
    " tests/spark/test_iceberg_read.py runs this snippet as written (its paths pointed at the"
    " test's broker) in the Spark tests' session and checks what Spark reads",
    ("docs/iceberg-topics.md", "Reading typed columns and dead letters"): "needs a broker with"
    " the schema registry that has written both tables: tests/integration/"
    "test_iceberg_typed_topics.py runs this snippet as written (its catalog path pointed at"
    " the test's broker) and checks the rows it reads",
    ("docs/pytest-plugin.md", "The fixtures"): "tests/testing/test_readme_section.py runs"
    " this fixture test as written, with the example suite",
    ("docs/pytest-plugin.md", "Faults, and the Cluster without pytest"): "tests/testing/"
    "test_readme_section.py runs this script as written",
    ("docs/pytest-plugin.md", "The example suite"): "tests/testing/test_readme_section.py"
    " checks these two commands and runs the example suite in this test's environment",
}

# Blocks of the run sections that are not commands, or are used by another block's run.
SKIPPED_BLOCKS = {
    (SECURITY, "TLS and SASL listeners", "properties"): "a sample naming files under"
    " /etc/minibroker, which the test does not write (its parsing: tests/unit/test_config.py)",
    (SECURITY, "ACLs", "properties"): "used as the server.properties of the ACL snippet's node",
}

# Languages of blocks that are not commands.
NOT_COMMANDS = {"text", "mermaid"}

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


def consumer_protocol_snippet(shell: Shell, block: Block) -> None:
    """On the tour's cluster (still running): the three orders, read by a KIP-848 member; the
    group is then a `consumer` group with its offset committed, as the page says."""
    out = shell.run(f"{VENV}/bin/python -", stdin=block.text).stdout.splitlines()
    assert out == ["[b'order-1', b'order-2', b'order-3']"], out
    described = shell.run(".venv/bin/minibroker groups --describe billing").stdout
    assert "GROUP billing: type consumer, state Empty" in described, described
    assert "assignment strategy uniform" in described, described
    assert re.search(r"^orders\s+0\s+3\s+3\s+0\s", described, re.M), described


def schema_registry_snippet(shell: Shell, block: Block) -> None:
    """On the tour's cluster, whose brokers serve the registry: three payments through
    confluent-kafka's Avro serializer and deserializer, and the subject registered."""
    out = shell.run(f"{VENV}/bin/python -", stdin=block.text).stdout.splitlines()
    assert out == [
        "[{'id': 'p0', 'amount': 0.0}, {'id': 'p1', 'amount': 10.0}, {'id': 'p2', 'amount': 20.0}]",
        "['payments-value']",
    ], out


def share_groups_snippet(shell: Shell, block: Block) -> None:
    """On the tour's cluster: ten jobs taken by two members of the share group `workers`,
    each once; then `minibroker groups` lists the group as a share group and describes its
    share partition with its start offset at the log end, as the page says."""
    out = shell.run(f"{VENV}/bin/python -", stdin=block.text).stdout.splitlines()
    assert out == [str([f"job-{n}" for n in range(10)])], out
    listed = shell.run(".venv/bin/minibroker groups").stdout
    assert re.search(r"^workers\s+\d+\s+share\s+\w+\s+share\s+simple\s", listed, re.M), listed
    described = shell.run(".venv/bin/minibroker groups --describe workers").stdout
    assert "GROUP workers: type share" in described, described
    assert re.search(r"^work-queue\s+0\s+10\s+10\s+0\s", described, re.M), described


def incompatible_schema(shell: Shell, command: str) -> None:
    """The page's curl to broker 3 (not the writer unless it leads `_schemas`): 409."""
    out = shell.run(command).stdout
    assert out.startswith('{"error_code":409,"message":"Schema being registered is'), out
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in out, out


INCOMPATIBLE_SCHEMA = (
    "curl -s -X POST -H 'Content-Type: application/vnd.schemaregistry.v1+json'"
    " http://127.0.0.1:8083/subjects/payments-value/versions -d "
    r"""'{"schema": "{\"type\": \"record\", \"name\": \"Payment\", \"fields\": ["""
    r"""{\"name\": \"id\", \"type\": \"string\"}, {\"name\": \"amount\", """
    r"""\"type\": \"double\"}, {\"name\": \"currency\", \"type\": \"string\"}]}"}'"""
)
RUN[INCOMPATIBLE_SCHEMA] = incompatible_schema


def acl_snippet(shell: Shell, block: Block) -> None:
    """As the text says: nodes started with the authorizer (the README's properties, with
    allow.everyone.if.no.acl.found=true), the snippet, then `orders` takes records and
    `payments-eu` refuses them."""
    kill_background_dev(shell)
    (properties,) = [b.text for b in blocks("ACLs", SECURITY) if b.lang == "properties"]
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


RUN_BLOCKS: dict[tuple[str, str, str], Callable[[Shell, Block], None]] = {
    (README, "A short tour", "python"): kafka_python_snippet,
    ("docs/consumer-groups.md", "The consumer group protocol (KIP-848)", "python"): (
        consumer_protocol_snippet
    ),
    (SECURITY, "ACLs", "python"): acl_snippet,
    ("docs/schema-registry.md", "Turning it on", "python"): schema_registry_snippet,
    ("docs/share-groups.md", "Trying it", "python"): share_groups_snippet,
}


def handler(command: str) -> Callable[[Shell, str], None] | None:
    if command in RUN:
        return RUN[command]
    return cluster_by_hand if command.startswith(BY_HAND) else None


def inventory() -> dict[str, list[tuple[Block, str]]]:
    """Every block of every page, with what becomes of it: "run" (all or some of it is run
    here), "skipped" (with a reason), "not a command"; and "unaccounted" for a block in none
    of the lists, with the command or key that is missing."""
    found: dict[str, list[tuple[Block, str]]] = {
        "run": [],
        "skipped": [],
        "not a command": [],
        "unaccounted": [],
    }
    for page in pages():
        for block in page_blocks(page):
            where = (page, block.section)
            if not block.lang:
                found["unaccounted"].append((block, "a fence without a language"))
            elif block.lang in NOT_COMMANDS:
                found["not a command"].append((block, block.lang))
            elif where in SKIPPED_SECTIONS:
                found["skipped"].append((block, SKIPPED_SECTIONS[where]))
            elif where not in RUN_SECTIONS:
                found["unaccounted"].append((block, f"section {where} is neither run nor skipped"))
            elif block.lang == "sh":
                commands = shell_commands(block)
                missing = [c for c in commands if not handler(c) and c not in SKIPPED]
                if missing:
                    found["unaccounted"].append((block, f"not run: {missing}"))
                elif any(handler(c) for c in commands):
                    found["run"].append((block, ", ".join(commands)))
                else:
                    found["skipped"].append((block, "; ".join(SKIPPED[c] for c in commands)))
            elif (*where, block.lang) in RUN_BLOCKS:
                found["run"].append((block, RUN_BLOCKS[(*where, block.lang)].__name__))
            elif (*where, block.lang) in SKIPPED_BLOCKS:
                found["skipped"].append((block, SKIPPED_BLOCKS[(*where, block.lang)]))
            else:
                found["unaccounted"].append((block, f"not run: {(*where, block.lang)}"))
    return found


def test_every_docs_command_is_run_or_skipped_for_a_reason():
    found = inventory()
    unaccounted = [f"{b.page} / {b.section}: {why}" for b, why in found["unaccounted"]]
    assert not unaccounted, "\n".join(unaccounted)
    commands = {
        command
        for page in pages()
        for block in page_blocks(page)
        if block.lang == "sh" and (page, block.section) in RUN_SECTIONS
        for command in shell_commands(block)
    }
    keys = {(b.page, b.section, b.lang) for b in (b for b, _ in found["run"] + found["skipped"])}
    sections = {(b.page, b.section) for b in (b for b, _ in found["run"] + found["skipped"])}
    assert not (set(RUN) | set(SKIPPED)) - commands, "stale entries: on no page"
    assert not (set(RUN_BLOCKS) | set(SKIPPED_BLOCKS)) - keys, "stale block entries"
    assert not set(SKIPPED_SECTIONS) - sections, "stale section entries: no such block"
    assert not set(RUN_SECTIONS) - sections, "a run section without blocks"
    assert sum(1 for command in commands if command.startswith(BY_HAND)) == 2
    # What the docs test covers, for the record (pytest -s shows it).
    print({kind: len(entries) for kind, entries in found.items()})


@pytest.mark.skipif(not zookeeper_installed(), reason="apt-get install zookeeper")
def test_the_docs_as_written(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / ".venv").symlink_to(VENV)
    shell = Shell(cwd)
    try:
        for page, heading in RUN_SECTIONS:
            for block in page_blocks(page):
                if block.section != heading:
                    continue
                if block.lang == "sh":
                    for command in shell_commands(block):
                        if (run := handler(command)) is not None:
                            run(shell, command)
                elif (key := (page, heading, block.lang)) in RUN_BLOCKS:
                    RUN_BLOCKS[key](shell, block)
        kill_background_dev(shell)
    finally:
        shell.close()
