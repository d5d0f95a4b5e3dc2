"""`minibroker kafka <tool> [args...]`: Apache Kafka's own command-line tools, from the pinned
Kafka 4.4 artifacts that java/fetch.sh resolves, without Kafka's distribution.

Each tool name is mapped to the main class its script in Kafka's bin/ starts
(`kafka-topics.sh` -> org.apache.kafka.tools.TopicCommand, ...), and the tool is run as
bin/kafka-run-class.sh runs it: `java` from JAVA_HOME or PATH, the tools' heap (-Xmx256M) and
JVM options, warnings and errors to stderr (Kafka's config/tools-log4j2.yaml), the arguments
as given. This process becomes the JVM (exec), so stdin, stdout, signals and the exit code are
the tool's own. A tool is named as Kafka's script (`kafka-topics.sh`), without `.sh`, or
without the `kafka-` prefix (`topics`).

The class path is build/java/clients.classpath, written by java/fetch.sh in minibroker's
source checkout (kafka-clients, kafka-tools and kafka-streams 4.4 from Maven Central); the
environment variable MINIBROKER_JAVA_DIR names another folder holding it (a regular install
has no checkout). Departure: only the client-side tools; the scripts that start or format a
Kafka server, ZooKeeper, Connect or MirrorMaker are not mapped (minibroker is the server).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

# Kafka 4.4's bin/*.sh scripts and the class each one starts (kafka-run-class.sh <class>).
TOOLS = {
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-client-metrics": "org.apache.kafka.tools.ClientMetricsCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-delegation-tokens": "org.apache.kafka.tools.DelegationTokenCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-groups": "org.apache.kafka.tools.GroupsCommand",
    "kafka-jmx": "org.apache.kafka.tools.JmxTool",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-replica-verification": "org.apache.kafka.tools.ReplicaVerificationTool",
    "kafka-share-consumer-perf-test": "org.apache.kafka.tools.ShareConsumerPerformance",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-streams-application-reset": "org.apache.kafka.tools.StreamsResetter",
    "kafka-streams-groups": "org.apache.kafka.tools.streams.StreamsGroupCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-share-consumer": "org.apache.kafka.tools.VerifiableShareConsumer",
}
# kafka-run-class.sh's defaults for a tool: KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS.
JVM_OPTIONS = [
    "-Xmx256M",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]
LOG4J2_CONFIG = Path(__file__).with_name("kafka-tools-log4j2.properties")
CLASSPATH_FILE = "clients.classpath"
JAVA_DIR_VARIABLE = "MINIBROKER_JAVA_DIR"
FETCH_HINT = (
    "run java/fetch.sh in minibroker's source checkout (it needs a JDK 17+ and Maven: "
    "apt-get install openjdk-17-jdk-headless maven), or set MINIBROKER_JAVA_DIR to the "
    "folder holding clients.classpath"
)


class ToolError(Exception):
    """What stops a tool from starting: one line for the user, exit code 2."""


def tool_class(name: str) -> str:
    """The main class of the tool `name` (kafka-topics.sh, kafka-topics or topics)."""
    base = name.removesuffix(".sh")
    for candidate in (base, f"kafka-{base}"):
        if candidate in TOOLS:
            return TOOLS[candidate]
    raise ToolError(f"unknown tool {name!r}: one of {', '.join(TOOLS)}")


def java_executable() -> str | None:
    """`java` under JAVA_HOME, else on PATH (kafka-run-class.sh's order); None without one."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def java_dir() -> Path:
    """Where java/fetch.sh wrote the class paths: MINIBROKER_JAVA_DIR, else build/java of the
    source checkout this package runs from."""
    chosen = os.environ.get(JAVA_DIR_VARIABLE)
    if chosen:
        return Path(chosen)
    # broker/tools/kafka_tools.py in a checkout: the checkout is two folders up from broker/.
    return Path(__file__).resolve().parents[2] / "build" / "java"


def tools_classpath() -> str:
    """The class path of Kafka's tools, or a ToolError saying how to get it."""
    folder = java_dir()
    path = folder / CLASSPATH_FILE
    if path.is_file():
        text = path.read_text(encoding="utf-8").strip()
        if text:
            return text
    missing = folder / "clients.missing"
    if missing.is_file():
        reason = missing.read_text(encoding="utf-8", errors="replace").strip()
        raise ToolError(f"Kafka's tools are not resolved ({reason}): {FETCH_HINT}")
    raise ToolError(f"Kafka's tools are not here ({path} does not exist): {FETCH_HINT}")


def command(name: str, args: list[str]) -> list[str]:
    """The java command line that runs the tool `name` with `args`."""
    main = tool_class(name)
    java = java_executable()
    if java is None:
        raise ToolError(
            "no Java runtime (JAVA_HOME or java on PATH): apt-get install openjdk-17-jre-headless"
        )
    return [
        java,
        *JVM_OPTIONS,
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
        "-cp",
        tools_classpath(),
        main,
        *args,
    ]


def usage() -> str:
    return (
        "usage: minibroker kafka TOOL [ARGS...]\n"
        "Run one of Apache Kafka's command-line tools (Kafka 4.4, from the artifacts of "
        "java/fetch.sh) with its own arguments, e.g.\n"
        "  minibroker kafka kafka-topics --bootstrap-server 127.0.0.1:9092 --list\n"
        "TOOL is a script of Kafka's bin/ with or without .sh and the kafka- prefix:\n  "
        + "\n  ".join(TOOLS)
    )


def run(argv: list[str]) -> int:
    """`minibroker kafka TOOL ARGS...`: exec the tool's JVM (returns only on an error)."""
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    try:
        line = command(argv[0], argv[1:])
    except ToolError as error:
        print(f"minibroker kafka: {error}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(line[0], line)
    except OSError as error:
        print(f"minibroker kafka: cannot start {line[0]}: {error}", file=sys.stderr)
        return 2
    return 0  # not reached
