"""Kafka's own command-line tools (kafka-tools 4.4) against a 3-broker minibroker cluster.

Each tool is started through the main class its bin/*.sh script starts (kafka-topics.sh runs
org.apache.kafka.tools.TopicCommand, kafka-configs.sh org.apache.kafka.tools.ConfigCommand, ...)
with the arguments a user types. A JVM start costs seconds on this 2-core machine, so one JVM
(programs/ToolBatch.java) runs the whole sequence, each tool's main() in turn with Kafka's
Exit.exit trapped, and reports each tool's exit code and output; the tests judge those as a user
reading the terminal would, against what Kafka's tools print on Kafka.

The cluster has Kafka's StandardAuthorizer with User:ANONYMOUS (every PLAINTEXT client) as a super
user, so kafka-acls has ACLs to add, list and remove while every other tool is allowed all.
kafka-metadata-quorum describes minibroker's quorum as it is (apis/quorum.py): one voter, the
controller, and the brokers as observers, through a broker (--bootstrap-server) and from the
controller itself (--bootstrap-controller). The brokers are in racks (RACKS), so that
kafka-reassign-partitions --generate plans rack-aware, from the racks DescribeCluster gives it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from tests.java.conftest import SENDING, minibroker_cluster, newest_both_know

TOPIC = "tools-a"
MOVED = "tools-r"
PERF_TOPIC = "tools-perf"
GROUP = "tools-g"
LINES = [f"k{i}:line {i}" for i in range(1, 7)]
PERF_RECORDS = 2000
MARKER = re.compile(r"^minibroker-tool (\S+)$", re.MULTILINE)

RACK_TOPIC = "tools-rack"
# Brokers 1 and 2 share a rack, broker 3 is alone in its own: a rack-aware plan for replication
# factor 2 puts broker 3 in every partition.
RACKS = {1: {"broker.rack": "rack-a"}, 2: {"broker.rack": "rack-a"}, 3: {"broker.rack": "rack-b"}}

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}

TOPICS = "org.apache.kafka.tools.TopicCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
ACLS = "org.apache.kafka.tools.AclCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
FEATURES = "org.apache.kafka.tools.FeatureCommand"

# Which bin/*.sh each main class stands for, for the request summary.
SCRIPTS = {
    TOPICS: "kafka-topics",
    "org.apache.kafka.tools.ConsoleProducer": "kafka-console-producer",
    "org.apache.kafka.tools.consumer.ConsoleConsumer": "kafka-console-consumer",
    GROUPS: "kafka-consumer-groups",
    CONFIGS: "kafka-configs",
    ACLS: "kafka-acls",
    GET_OFFSETS: "kafka-get-offsets",
    "org.apache.kafka.tools.DeleteRecordsCommand": "kafka-delete-records",
    REASSIGN: "kafka-reassign-partitions",
    "org.apache.kafka.tools.LeaderElectionCommand": "kafka-leader-election",
    "org.apache.kafka.tools.LogDirsCommand": "kafka-log-dirs",
    "org.apache.kafka.tools.BrokerApiVersionsCommand": "kafka-broker-api-versions",
    "org.apache.kafka.tools.ProducerPerformance": "kafka-producer-perf-test",
    "org.apache.kafka.tools.ConsumerPerformance": "kafka-consumer-perf-test",
    "org.apache.kafka.tools.MetadataQuorumCommand": "kafka-metadata-quorum",
    FEATURES: "kafka-features",
}


def _batch(bootstrap: str, controller: str, files) -> list[dict]:
    b = ["--bootstrap-server", bootstrap]
    c = ["--bootstrap-controller", controller]
    acl = ["--allow-principal", "User:alice", "--operation", "Read", "--topic", TOPIC]

    def step(name: str, main: str, *args: str, **extra) -> dict:
        return {"name": name, "main": main, "args": list(args), **extra}

    return [
        step("topics-create", TOPICS, *b, "--create", "--topic", TOPIC, "--partitions", "2",
             "--replication-factor", "3", "--config", "retention.ms=3600000"),
        step("topics-create-moved", TOPICS, *b, "--create", "--topic", MOVED,
             "--replica-assignment", "1:2"),
        step("topics-list", TOPICS, *b, "--list"),
        step("topics-describe", TOPICS, *b, "--describe", "--topic", TOPIC),
        step("topics-alter", TOPICS, *b, "--alter", "--topic", TOPIC, "--partitions", "3"),
        # Two partitions an answer: the 4.4 AdminClient pages with DescribeTopicPartitions'
        # cursor (KIP-966), two requests for the three partitions.
        step("topics-describe-altered", TOPICS, *b, "--describe", "--topic", TOPIC,
             "--partition-size-limit-per-response", "2"),
        step("console-producer", "org.apache.kafka.tools.ConsoleProducer", *b, "--topic", TOPIC,
             "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
             stdin="".join(f"{line}\n" for line in LINES)),
        step("console-consumer", "org.apache.kafka.tools.consumer.ConsoleConsumer", *b,
             "--topic", TOPIC, "--from-beginning", "--max-messages", str(len(LINES)),
             "--timeout-ms", "30000", "--group", GROUP,
             "--formatter-property", "print.key=true",
             "--formatter-property", "key.separator=:"),
        step("groups-list", GROUPS, *b, "--list"),
        step("groups-describe", GROUPS, *b, "--describe", "--group", GROUP),
        step("groups-reset", GROUPS, *b, "--reset-offsets", "--group", GROUP, "--topic", TOPIC,
             "--to-earliest", "--execute"),
        step("groups-describe-reset", GROUPS, *b, "--describe", "--group", GROUP),
        step("groups-delete", GROUPS, *b, "--delete", "--group", GROUP),
        step("groups-list-deleted", GROUPS, *b, "--list"),
        step("configs-topic-alter", CONFIGS, *b, "--alter", "--entity-type", "topics",
             "--entity-name", TOPIC, "--add-config", "retention.ms=7200000,cleanup.policy=compact"),
        step("configs-topic-describe", CONFIGS, *b, "--describe", "--entity-type", "topics",
             "--entity-name", TOPIC),
        # docs/operations.md's request log, on for broker 1 around the broker config steps.
        step("request-log-on", CONFIGS, *b, "--alter", "--entity-type", "broker-loggers",
             "--entity-name", "1", "--add-config", "kafka.request.logger=DEBUG"),
        step("configs-broker-alter", CONFIGS, *b, "--alter", "--entity-type", "brokers",
             "--entity-name", "1", "--add-config", "log.retention.ms=86400000"),
        step("configs-broker-describe", CONFIGS, *b, "--describe", "--entity-type", "brokers",
             "--entity-name", "1"),
        step("configs-broker-delete", CONFIGS, *b, "--alter", "--entity-type", "brokers",
             "--entity-name", "1", "--delete-config", "log.retention.ms"),
        step("configs-broker-describe-deleted", CONFIGS, *b, "--describe", "--entity-type",
             "brokers", "--entity-name", "1"),
        step("request-log-off", CONFIGS, *b, "--alter", "--entity-type", "broker-loggers",
             "--entity-name", "1", "--delete-config", "kafka.request.logger"),
        step("configs-quota-alter", CONFIGS, *b, "--alter", "--add-config",
             "producer_byte_rate=1048576,consumer_byte_rate=2097152", "--entity-type", "users",
             "--entity-name", "alice"),
        step("configs-quota-alter-default", CONFIGS, *b, "--alter", "--add-config",
             "request_percentage=50", "--entity-type", "users", "--entity-name", "alice",
             "--entity-type", "clients", "--entity-default"),
        step("configs-quota-describe", CONFIGS, *b, "--describe", "--entity-type", "users",
             "--entity-name", "alice"),
        step("configs-quota-describe-defaults", CONFIGS, *b, "--describe", "--entity-type",
             "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-default"),
        step("configs-quota-negative", CONFIGS, *b, "--alter", "--add-config",
             "producer_byte_rate=-5", "--entity-type", "users", "--entity-name", "alice"),
        step("configs-quota-delete", CONFIGS, *b, "--alter", "--delete-config",
             "consumer_byte_rate", "--entity-type", "users", "--entity-name", "alice"),
        step("configs-quota-describe-deleted", CONFIGS, *b, "--describe", "--entity-type",
             "users", "--entity-name", "alice"),
        step("acls-add", ACLS, *b, "--add", *acl),
        step("acls-list", ACLS, *b, "--list", "--topic", TOPIC),
        step("acls-remove", ACLS, *b, "--remove", "--force", *acl),
        step("acls-list-removed", ACLS, *b, "--list", "--topic", TOPIC),
        step("get-offsets", GET_OFFSETS, *b, "--topic", TOPIC),
        step("delete-records", "org.apache.kafka.tools.DeleteRecordsCommand", *b,
             "--offset-json-file", str(files["delete"])),
        step("get-offsets-earliest", GET_OFFSETS, *b, "--topic", TOPIC, "--time", "-2"),
        step("reassign-generate", REASSIGN, *b, "--generate", "--topics-to-move-json-file",
             str(files["move"]), "--broker-list", "2,3"),
        step("topics-create-rack", TOPICS, *b, "--create", "--topic", RACK_TOPIC,
             "--partitions", "6", "--replication-factor", "2"),
        step("reassign-generate-racks", REASSIGN, *b, "--generate",
             "--topics-to-move-json-file", str(files["move-rack"]), "--broker-list", "1,2,3"),
        step("reassign-execute", REASSIGN, *b, "--execute", "--reassignment-json-file",
             str(files["reassign"])),
        step("reassign-verify", REASSIGN, *b, "--verify", "--reassignment-json-file",
             str(files["reassign"]), until="is completed", timeout_s=30),
        # Broker 3 has two log dirs (JBOD): its new replica of tools-r-0 moves to the second
        # and back (AlterReplicaLogDirs), so one of the two is a real move whichever dir it
        # was placed in; --verify waits for "Reassignment of replica ... completed".
        *(
            step(f"reassign-log-dir-{which}{verb}", REASSIGN, *b, f"--{verb or 'execute'}",
                 "--reassignment-json-file", str(files[f"log-dir-{which}"]),
                 **({"until": "completed successfully", "timeout_s": 30} if verb else {}))
            for which in ("b", "a")
            for verb in ("", "verify")
        ),
        step("topics-describe-moved", TOPICS, *b, "--describe", "--topic", MOVED),
        step("leader-election", "org.apache.kafka.tools.LeaderElectionCommand", *b,
             "--election-type", "preferred", "--topic", MOVED, "--partition", "0"),
        step("topics-describe-elected", TOPICS, *b, "--describe", "--topic", MOVED),
        step("log-dirs", "org.apache.kafka.tools.LogDirsCommand", *b, "--describe",
             "--topic-list", TOPIC),
        step("broker-api-versions", "org.apache.kafka.tools.BrokerApiVersionsCommand", *b),
        step("producer-perf-test", "org.apache.kafka.tools.ProducerPerformance", "--topic",
             PERF_TOPIC, "--num-records", str(PERF_RECORDS), "--record-size", "100",
             "--throughput", "-1", "--command-property", f"bootstrap.servers={bootstrap}"),
        step("consumer-perf-test", "org.apache.kafka.tools.ConsumerPerformance", *b, "--topic",
             PERF_TOPIC, "--num-records", str(PERF_RECORDS), "--timeout", "30000"),
        step("metadata-quorum", "org.apache.kafka.tools.MetadataQuorumCommand", *b,
             "describe", "--status"),
        step("metadata-quorum-replication", "org.apache.kafka.tools.MetadataQuorumCommand", *b,
             "describe", "--replication"),
        step("metadata-quorum-controller", "org.apache.kafka.tools.MetadataQuorumCommand", *c,
             "describe", "--status"),
        step("metadata-quorum-controller-replication",
             "org.apache.kafka.tools.MetadataQuorumCommand", *c, "describe", "--replication"),
        step("features-describe", FEATURES, *b, "describe"),
        step("features-disable", FEATURES, *b, "disable", "--feature", "group.version"),
        step("features-describe-disabled", FEATURES, *b, "describe"),
        step("features-upgrade-dry-run", FEATURES, *b, "upgrade", "--feature",
             "group.version=1", "--dry-run"),
        step("features-describe-dry-run", FEATURES, *b, "describe"),
        step("features-upgrade-out-of-range", FEATURES, *b, "upgrade", "--feature",
             "group.version=5"),
        step("features-upgrade-unknown", FEATURES, *b, "upgrade", "--feature",
             "nosuch.version=1"),
        step("features-downgrade-as-upgrade", FEATURES, *b, "upgrade", "--feature",
             "transaction.version=1"),
        step("features-downgrade", FEATURES, *b, "downgrade", "--feature",
             "transaction.version=1"),
        step("features-upgrade", FEATURES, *b, "upgrade", "--feature", "group.version=1",
             "--feature", "transaction.version=2"),
        step("features-describe-upgraded", FEATURES, *b, "describe"),
        step("topics-delete", TOPICS, *b, "--delete", "--topic", TOPIC),
        step("topics-list-deleted", TOPICS, *b, "--list"),
    ]  # fmt: skip


def _jbod_dirs(base: Path) -> list[Path]:
    """Broker 3's two log dirs."""
    return [base / "broker-3", base / "broker-3-b"]


@pytest.fixture(scope="module")
def tools_cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("tools-cluster")
    jbod = {**RACKS[3], "log.dirs": ",".join(str(d) for d in _jbod_dirs(base))}
    with minibroker_cluster(base, AUTHORIZER, node_overrides={**RACKS, 3: jbod}) as started:
        started.jbod_dirs = _jbod_dirs(base)
        yield started


@pytest.fixture(scope="module")
def tools_run(java, tools_cluster, tmp_path_factory) -> dict:
    """Every tool's answer by step name, and the request log of the run split by step."""
    work = tmp_path_factory.mktemp("tools")
    names = ("delete", "move", "move-rack", "reassign", "log-dir-a", "log-dir-b", "batch")
    files = {name: work / f"{name}.json" for name in names}
    files["delete"].write_text(
        json.dumps({"partitions": [{"topic": TOPIC, "partition": 0, "offset": 1}], "version": 1})
    )
    files["move"].write_text(json.dumps({"topics": [{"topic": MOVED}], "version": 1}))
    files["move-rack"].write_text(json.dumps({"topics": [{"topic": RACK_TOPIC}], "version": 1}))
    # tools-r-0 from replicas [1, 2] to [3, 1]: broker 3 must copy the partition.
    files["reassign"].write_text(
        json.dumps({"version": 1, "partitions": [{"topic": MOVED, "partition": 0,
                                                  "replicas": [3, 1]}]})
    )  # fmt: skip
    for which, directory in zip("ab", tools_cluster.jbod_dirs, strict=True):
        files[f"log-dir-{which}"].write_text(
            json.dumps({"version": 1, "partitions": [{"topic": MOVED, "partition": 0,
                        "replicas": [3, 1], "log_dirs": [str(directory), "any"]}]})
        )  # fmt: skip
    assert tools_cluster.controller is not None
    batch = _batch(tools_cluster.bootstrap, tools_cluster.controller.bootstrap, files)
    files["batch"].write_text(json.dumps(batch))
    answers_path = work / "answers.json"
    done = java.run("ToolBatch", str(files["batch"]), str(answers_path))
    assert done.returncode == 0, done.stderr[-4000:]
    answers = {answer["name"]: answer for answer in json.loads(answers_path.read_text())}
    requests, by_step = _requests(java.request_log.files[-1], batch)
    return {"answers": answers, "requests": requests, "steps": by_step}


def _requests(log: Path, batch: list[dict]) -> tuple[dict[str, Counter], dict[str, Counter]]:
    """The requests of a ToolBatch run, by (API, version): by tool (bin/*.sh) and by step."""
    mains = {step["name"]: step["main"] for step in batch}
    requests: dict[str, Counter] = {}
    by_step: dict[str, Counter] = {}
    pieces = MARKER.split(log.read_text(errors="replace"))
    for name, text in zip(pieces[1::2], pieces[2::2], strict=True):
        counts = requests.setdefault(SCRIPTS[mains[name]], Counter())
        step_counts = by_step.setdefault(name, Counter())
        for match in SENDING.finditer(text):
            counts[(match.group(2), int(match.group(3)))] += 1
            step_counts[(match.group(2), int(match.group(3)))] += 1
    return requests, by_step


def _kafka_batch(bootstrap: str) -> list[dict]:
    """The steps run against Apache Kafka 4.4 too, to compare the requests each tool sends
    there (one Kafka node: replication factor 1). The group gets its offsets from
    --reset-offsets, not from a console consumer, to keep the run short: the describe that
    follows asks the same of a group with committed offsets and no members."""
    b = ["--bootstrap-server", bootstrap]
    return [
        {"name": "topics-create", "main": TOPICS, "args": [*b, "--create", "--topic", TOPIC,
         "--partitions", "2", "--replication-factor", "1", "--config", "retention.ms=3600000"]},
        {"name": "topics-describe", "main": TOPICS, "args": [*b, "--describe", "--topic", TOPIC]},
        {"name": "configs-topic-describe", "main": CONFIGS, "args": [*b, "--describe",
         "--entity-type", "topics", "--entity-name", TOPIC]},
        {"name": "configs-broker-describe", "main": CONFIGS, "args": [*b, "--describe",
         "--entity-type", "brokers", "--entity-name", "1"]},
        {"name": "groups-reset", "main": GROUPS, "args": [*b, "--reset-offsets", "--group",
         GROUP, "--topic", TOPIC, "--to-earliest", "--execute"]},
        {"name": "groups-describe", "main": GROUPS, "args": [*b, "--describe", "--group", GROUP]},
    ]  # fmt: skip


@pytest.fixture(scope="module")
def kafka_tools_run(java, kafka_reference, tmp_path_factory) -> dict:
    """_kafka_batch's steps against Apache Kafka 4.4 (bench/kafka_ref.py, one node), in one
    ToolBatch JVM: each step's answer and its requests (kept out of the session's minibroker
    request log)."""
    work = tmp_path_factory.mktemp("kafka-tools")
    batch = _kafka_batch(kafka_reference.bootstrap)
    batch_path, answers_path = work / "batch.json", work / "answers.json"
    batch_path.write_text(json.dumps(batch))
    done = java.run("ToolBatch", str(batch_path), str(answers_path), log_requests=False)
    assert done.returncode == 0, done.stderr[-4000:]
    assert java.last_log is not None
    answers = {answer["name"]: answer for answer in json.loads(answers_path.read_text())}
    _, by_step = _requests(java.last_log, batch)
    return {"answers": answers, "steps": by_step}


@pytest.fixture(scope="module")
def tools(tools_run) -> dict:
    return tools_run["answers"]


def ok(tools: dict, name: str) -> str:
    """The step's standard output, after checking it exited 0."""
    answer = tools[name]
    assert answer["exit"] == 0, (name, answer)
    return answer["stdout"]


def test_kafka_topics(tools):
    assert "Created topic tools-a." in ok(tools, "topics-create")
    assert {TOPIC, MOVED} <= set(ok(tools, "topics-list").split())
    described = ok(tools, "topics-describe")
    assert re.search(
        # The cluster-wide min.insync.replicas default is listed (DYNAMIC_DEFAULT_BROKER_CONFIG
        # is not a default to TopicCommand), as Kafka 4.1+ reports it (KIP-966).
        r"Topic: tools-a\tTopicId: \S{22}\tPartitionCount: 2\tReplicationFactor: 3\t"
        r"Configs: min.insync.replicas=1,retention.ms=3600000",
        described,
    ), described
    assert len(re.findall(r"Partition: \d\tLeader: [123]\tReplicas: \d,\d,\d\tIsr: \d,\d,\d",
                          described)) == 2  # fmt: skip
    ok(tools, "topics-alter")
    altered = ok(tools, "topics-describe-altered")
    assert "PartitionCount: 3" in altered
    # Every partition once, in order, across the pages the cursor joined.
    assert re.findall(r"Partition: (\d)\tLeader:", altered) == ["0", "1", "2"], altered
    ok(tools, "topics-delete")
    assert TOPIC not in ok(tools, "topics-list-deleted").split()


def test_kafka_topics_describe_pages_with_describe_topic_partitions(tools_run):
    """The 4.4 AdminClient describes topics with DescribeTopicPartitions when the broker
    advertises it (no Metadata fallback), one request per page of two partitions."""
    steps = tools_run["steps"]
    assert steps["topics-describe"][("DESCRIBE_TOPIC_PARTITIONS", 0)] == 1, steps["topics-describe"]
    paged = steps["topics-describe-altered"]
    assert paged[("DESCRIBE_TOPIC_PARTITIONS", 0)] == 2, paged


# What `kafka-features describe` prints for these features against a new Apache Kafka 4.4
# cluster (bench/kafka_ref.py, one node), less the epoch; kraft.version there is supported up to
# 1 (a dynamic quorum, KIP-853), which minibroker's one static controller is not.
KAFKA_44_FEATURES = {
    "eligible.leader.replicas.version": ("0", "1", "1"),
    "group.version": ("0", "1", "1"),
    "kraft.version": ("0", "1", "0"),
    "metadata.version": ("3.3-IV3", "4.4-IV2", "4.4-IV2"),
    "share.version": ("0", "2", "2"),
    "streams.version": ("0", "1", "1"),
    "transaction.version": ("0", "2", "2"),
}
FEATURE_LINE = re.compile(
    r"^Feature: (\S+)\s+SupportedMinVersion: (\S+)\s+SupportedMaxVersion: (\S+)\s+"
    r"FinalizedVersionLevel: (\S+)\s+Epoch: (\d+)$"
)


def features_described(text: str) -> tuple[dict[str, tuple[str, str, str]], int]:
    """Each feature's supported range and finalized level, and the one epoch of them all."""
    rows = [FEATURE_LINE.match(line) for line in text.splitlines() if line.strip()]
    assert rows and all(rows), text
    epochs = {int(row.group(5)) for row in rows}
    assert len(epochs) == 1, text
    return {row.group(1): row.groups()[1:4] for row in rows}, epochs.pop()


def test_kafka_features(tools):
    """`kafka-features describe` prints what it prints against a new Kafka 4.4 cluster for the
    features minibroker implements; disable, upgrade (--dry-run too) and downgrade go through
    UpdateFeatures to the controller, each change under a newer epoch; out-of-range, unknown
    features and a downgrade asked as an upgrade are refused with Kafka's words."""
    described, epoch = features_described(ok(tools, "features-describe"))
    assert described == {
        **KAFKA_44_FEATURES,
        "kraft.version": ("0", "0", "0"),
    }
    assert ok(tools, "features-disable").strip() == "group.version was disabled."
    disabled, disabled_epoch = features_described(ok(tools, "features-describe-disabled"))
    assert disabled["group.version"] == ("0", "1", "0") and disabled_epoch > epoch
    dry_run = ok(tools, "features-upgrade-dry-run").strip()
    assert dry_run == "group.version can be upgraded to 1."
    assert features_described(ok(tools, "features-describe-dry-run")) == (
        disabled,
        disabled_epoch,
    )
    for name, words in [
        (
            "features-upgrade-out-of-range",
            "Could not upgrade group.version to 5. The update failed for all features since the "
            "following feature had an error: Invalid update version 5 for feature group.version. "
            "Local controller 0 only supports versions 0-1",
        ),
        (
            "features-upgrade-unknown",
            "Invalid update version 1 for feature nosuch.version. Local"
            " controller 0 does not support this feature.",
        ),
        (
            "features-downgrade-as-upgrade",
            "Can't downgrade the version of this feature without setting the upgrade type to "
            "either safe or unsafe downgrade.",
        ),
    ]:
        answer = tools[name]
        assert answer["exit"] == 1, (name, answer)
        assert words in answer["stdout"] + answer["stderr"], (name, answer)
    assert "transaction.version was downgraded to 1." in ok(tools, "features-downgrade")
    upgraded = ok(tools, "features-upgrade")
    assert "group.version was upgraded to 1." in upgraded
    assert "transaction.version was upgraded to 2." in upgraded
    final, final_epoch = features_described(ok(tools, "features-describe-upgraded"))
    assert final == described and final_epoch == disabled_epoch + 2


def test_console_producer_and_consumer(tools):
    ok(tools, "console-producer")
    consumed = ok(tools, "console-consumer").splitlines()
    assert sorted(line for line in consumed if line.startswith("k")) == sorted(LINES)
    assert f"Processed a total of {len(LINES)} messages" in tools["console-consumer"]["stderr"]


def _group_rows(text: str) -> dict[int, list[str]]:
    rows = [line.split() for line in text.splitlines() if line.startswith(GROUP)]
    return {int(row[2]): row for row in rows}


def test_kafka_consumer_groups(tools):
    assert GROUP in ok(tools, "groups-list").split()
    described = _group_rows(ok(tools, "groups-describe"))
    assert sorted(described) == [0, 1, 2]
    # Every partition consumed to its end: CURRENT-OFFSET == LOG-END-OFFSET, LAG 0, and the
    # six records are all there.
    assert all(row[3] == row[4] and row[5] == "0" for row in described.values()), described
    assert sum(int(row[4]) for row in described.values()) == len(LINES)
    reset = _group_rows(ok(tools, "groups-reset"))
    assert {partition: row[3] for partition, row in reset.items()} == {0: "0", 1: "0", 2: "0"}
    after = _group_rows(ok(tools, "groups-describe-reset"))
    assert all(row[3] == "0" and row[5] == row[4] for row in after.values()), after
    assert "Deletion of requested consumer groups ('tools-g') was successful." in ok(
        tools, "groups-delete"
    )
    assert GROUP not in ok(tools, "groups-list-deleted").split()


def test_kafka_configs(tools):
    assert "Completed updating config for topic tools-a." in ok(tools, "configs-topic-alter")
    described = ok(tools, "configs-topic-describe")
    assert (
        "retention.ms=7200000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=7200000"
        in described
    )
    assert (
        "cleanup.policy=compact sensitive=false"
        " synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact" in described
    )
    assert "Completed updating config for broker 1." in ok(tools, "configs-broker-alter")
    broker = ok(tools, "configs-broker-describe")
    assert (
        "log.retention.ms=86400000 sensitive=false"
        " synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=86400000" in broker
    )
    ok(tools, "configs-broker-delete")
    assert "log.retention.ms" not in ok(tools, "configs-broker-describe-deleted")


def test_kafka_configs_switches_the_request_log(tools, tools_cluster):
    """docs/operations.md's request log: kafka-configs --entity-type broker-loggers sets
    kafka.request.logger to DEBUG on broker 1 (IncrementalAlterConfigs on BROKER_LOGGER) and
    deletes it again; meanwhile broker 1 logged the tool's requests (apis/request_log.py)."""
    from minibroker.apis import request_log

    for name in ("request-log-on", "request-log-off"):
        assert "Completed updating config for broker-logger 1." in ok(tools, name), tools[name]
    text = tools_cluster.brokers[1].stderr_path.read_text(errors="replace")
    logged = request_log.parse(text)
    apis = {entry["requestHeader"]["requestApiKeyName"] for entry in logged}
    assert {"DESCRIBE_CONFIGS", "INCREMENTAL_ALTER_CONFIGS"} <= apis, apis
    changed = [
        entry
        for entry in logged
        if entry["requestHeader"]["requestApiKeyName"] == "INCREMENTAL_ALTER_CONFIGS"
    ]
    # The broker config set between on and off, its value hidden in the log.
    assert any(
        config == {"name": "log.retention.ms", "configOperation": 0, "value": "[hidden]"}
        for entry in changed
        for resource in entry["request"]["resources"]
        for config in resource["configs"]
    ), changed


def test_kafka_configs_client_quotas(tools):
    """kafka-configs' quota commands (AlterClientQuotas, DescribeClientQuotas), with Kafka's
    answer to a negative rate."""
    assert "Completed updating config for user alice." in ok(tools, "configs-quota-alter")
    ok(tools, "configs-quota-alter-default")
    described = ok(tools, "configs-quota-describe")
    assert "Quota configs for user-principal 'alice' are " in described, described
    assert (
        "consumer_byte_rate=2097152.0" in described and "producer_byte_rate=1048576.0" in described
    )
    defaults = ok(tools, "configs-quota-describe-defaults")
    assert "request_percentage=50.0" in defaults, defaults
    negative = tools["configs-quota-negative"]
    assert negative["exit"] != 0
    assert (
        "Quota producer_byte_rate must be greater than 0" in negative["stderr"] + negative["stdout"]
    )
    ok(tools, "configs-quota-delete")
    remaining = ok(tools, "configs-quota-describe-deleted")
    assert "consumer_byte_rate" not in remaining and "producer_byte_rate=1048576.0" in remaining


def test_kafka_acls(tools):
    added = ok(tools, "acls-add")
    assert "principal=User:alice, host=*, operation=READ, permissionType=ALLOW" in added
    listed = ok(tools, "acls-list")
    assert "ResourcePattern(resourceType=TOPIC, name=tools-a, patternType=LITERAL)" in listed
    assert "principal=User:alice, host=*, operation=READ, permissionType=ALLOW" in listed
    ok(tools, "acls-remove")
    assert "User:alice" not in ok(tools, "acls-list-removed")


def test_get_offsets_and_delete_records(tools):
    latest = dict(line.rsplit(":", 1) for line in ok(tools, "get-offsets").split())
    assert set(latest) == {"tools-a:0", "tools-a:1", "tools-a:2"}
    assert sum(int(offset) for offset in latest.values()) == len(LINES)
    assert "partition: tools-a-0\tlow_watermark: 1" in ok(tools, "delete-records")
    earliest = dict(line.rsplit(":", 1) for line in ok(tools, "get-offsets-earliest").split())
    assert earliest == {"tools-a:0": "1", "tools-a:1": "0", "tools-a:2": "0"}


def test_kafka_reassign_partitions_and_leader_election(tools):
    generated = ok(tools, "reassign-generate")
    current, proposed = (
        json.loads(line) for line in generated.splitlines() if line.startswith("{")
    )
    assert current["partitions"][0]["replicas"] == [1, 2]
    assert sorted(proposed["partitions"][0]["replicas"]) == [2, 3]
    assert "Successfully started partition reassignment for tools-r-0" in ok(
        tools, "reassign-execute"
    )
    assert "Reassignment of partition tools-r-0 is completed." in ok(tools, "reassign-verify")
    moved = ok(tools, "topics-describe-moved")
    assert re.search(r"Partition: 0\tLeader: [13]\tReplicas: 3,1\tIsr: (3,1|1,3)\t", moved), moved
    elected = ok(tools, "leader-election")
    assert (
        "Successfully completed leader election (PREFERRED) for partitions tools-r-0" in elected
        or "Valid replica already elected for partitions tools-r-0" in elected
    ), elected
    assert "Partition: 0\tLeader: 3\tReplicas: 3,1" in ok(tools, "topics-describe-elected")


def test_kafka_log_dirs(tools, tools_cluster):
    text = ok(tools, "log-dirs")
    described = json.loads(next(line for line in text.splitlines() if line.startswith("{")))
    assert sorted(broker["broker"] for broker in described["brokers"]) == [1, 2, 3]
    for broker in described["brokers"]:
        assert all(log_dir["error"] is None for log_dir in broker["logDirs"])
        assert sorted(
            p["partition"] for log_dir in broker["logDirs"] for p in log_dir["partitions"]
        ) == ["tools-a-0", "tools-a-1", "tools-a-2"]
    (jbod,) = (broker for broker in described["brokers"] if broker["broker"] == 3)
    assert sorted(d["logDir"] for d in jbod["logDirs"]) == sorted(
        str(d) for d in tools_cluster.jbod_dirs
    )


def test_kafka_reassign_partitions_moves_a_replica_between_log_dirs(tools, tools_cluster):
    """kafka-reassign-partitions with `log_dirs` (AlterReplicaLogDirs, then DescribeLogDirs
    until the move is done): broker 3's replica of tools-r-0 to its second log dir and back."""
    second, first = (str(d) for d in reversed(tools_cluster.jbod_dirs))
    for which, directory in (("b", second), ("a", first)):
        started = ok(tools, f"reassign-log-dir-{which}")
        assert (
            f"Successfully started moving log directory to {directory} for replica tools-r-0"
            " with broker 3" in started
        ), started
        verified = ok(tools, f"reassign-log-dir-{which}verify")
        assert "completed successfully" in verified, verified
    assert (tools_cluster.jbod_dirs[0] / f"{MOVED}-0").is_dir()
    assert not (tools_cluster.jbod_dirs[1] / f"{MOVED}-0").exists()


def test_kafka_broker_api_versions(tools):
    text = ok(tools, "broker-api-versions")
    racks = re.findall(r"^127\.0\.0\.1:\d+ \(id: ([123]) rack: ([^\s)]+)", text, re.MULTILINE)
    assert sorted(racks) == [("1", "rack-a"), ("2", "rack-a"), ("3", "rack-b")], text
    # Kafka 4 also advertises Produce from v0 (librdkafka needs it, KAFKA-18659).
    assert re.search(r"Produce\(0\): 0 to \d+ \[usable: \d+\]", text), text
    assert "Fetch(1): 4 to" in text
    assert "DescribeQuorum(55): 0 to 2 [usable: 2]" in text
    assert "UnregisterController(94): UNSUPPORTED" in text  # one controller, never removed


def test_perf_tests(tools):
    produced = ok(tools, "producer-perf-test")
    assert re.search(rf"^{PERF_RECORDS} records sent, ", produced, re.MULTILINE), produced
    consumed = ok(tools, "consumer-perf-test").splitlines()
    header, row = consumed[-2].split(", "), consumed[-1].split(", ")
    assert dict(zip(header, row, strict=True))["data.consumed.in.nMsg"] == str(PERF_RECORDS)


def test_kafka_metadata_quorum(tools, tools_cluster):
    """`kafka-metadata-quorum describe --status` and `--replication` (DescribeQuorum v2 through
    a broker, forwarded to the controller): the controller, node 0, is the one voter and the
    leader, with its CONTROLLER endpoint; the three brokers are caught-up observers."""
    status = dict(
        line.split(":", 1) for line in ok(tools, "metadata-quorum").splitlines() if ":" in line
    )
    status = {key.strip(): value.strip() for key, value in status.items()}
    assert status["LeaderId"] == "0", status
    assert int(status["LeaderEpoch"]) >= 1 and int(status["HighWatermark"]) >= 1, status
    assert status["MaxFollowerLag"] == "0", status
    port = tools_cluster.controller.port
    assert json.loads(status["CurrentVoters"]) == [
        {"id": 0, "endpoints": [f"CONTROLLER://127.0.0.1:{port}"]}
    ]
    assert sorted(o["id"] for o in json.loads(status["CurrentObservers"])) == [1, 2, 3]
    rows = [line.split() for line in ok(tools, "metadata-quorum-replication").splitlines()]
    assert rows[0][:3] == ["NodeId", "DirectoryId", "LogEndOffset"], rows
    by_node = {int(row[0]): row for row in rows[1:] if row}
    assert by_node[0][-1] == "Leader" and sorted(by_node) == [0, 1, 2, 3], rows
    assert all(by_node[n][-1] == "Observer" and by_node[n][3] == "0" for n in (1, 2, 3)), rows


def test_kafka_metadata_quorum_from_the_controller(tools, tools_run, tools_cluster):
    """`--bootstrap-controller` (KIP-919): the admin client talks to the controller only,
    DescribeCluster with the CONTROLLER endpoint type (the controller lists itself), then
    DescribeQuorum; what it prints is what the brokers' forwarding gave."""
    status = dict(
        line.split(":", 1)
        for line in ok(tools, "metadata-quorum-controller").splitlines()
        if ":" in line
    )
    status = {key.strip(): value.strip() for key, value in status.items()}
    port = tools_cluster.controller.port
    assert status["LeaderId"] == "0" and status["MaxFollowerLag"] == "0", status
    assert json.loads(status["CurrentVoters"]) == [
        {"id": 0, "endpoints": [f"CONTROLLER://127.0.0.1:{port}"]}
    ]
    assert sorted(o["id"] for o in json.loads(status["CurrentObservers"])) == [1, 2, 3]
    rows = [
        line.split() for line in ok(tools, "metadata-quorum-controller-replication").splitlines()
    ]
    by_node = {int(row[0]): row for row in rows[1:] if row}
    assert by_node[0][-1] == "Leader" and sorted(by_node) == [0, 1, 2, 3], rows
    sent = tools_run["steps"]["metadata-quorum-controller"]
    assert {api for api, _ in sent} >= {"DESCRIBE_CLUSTER", "DESCRIBE_QUORUM"}, sent
    assert "METADATA" not in {api for api, _ in sent}, sent


def test_kafka_reassign_partitions_generate_is_rack_aware(tools):
    """`--generate` over brokers 1, 2 (rack-a) and 3 (rack-b) for a topic of six partitions
    at replication factor 2: the tool reads the racks from DescribeCluster and plans as
    Kafka's rack-aware assignment does, each partition in both racks, so broker 3 in each
    (a rack-unaware plan puts 1 and 2 together in some partition)."""
    assert f"Created topic {RACK_TOPIC}." in ok(tools, "topics-create-rack")
    current, proposed = (
        json.loads(line)
        for line in ok(tools, "reassign-generate-racks").splitlines()
        if line.startswith("{")
    )
    for plan in (current, proposed):  # the controller placed them so too
        assert len(plan["partitions"]) == 6, plan
        for partition in plan["partitions"]:
            replicas = partition["replicas"]
            assert len(set(replicas)) == 2 and 3 in replicas, plan
    # Which brokers lead in the proposed plan is the tool's own (random) choice: a CI run saw
    # only 1 and 3 first, so it is not asserted.


def test_tool_requests(tools_run, request_log):
    """Every request each tool sent, by API and version (the README's table), each at the
    newest version Kafka 4.4's tools and minibroker both know (issue 34, see
    conftest.newest_both_know); none was cut off by a closed connection (an
    UNKNOWN_SERVER_ERROR answer fails the cluster fixture)."""
    requests = tools_run["requests"]
    for script, counts in sorted(requests.items()):
        print(f"{script}: " + ", ".join(f"{api} v{version}" for api, version in sorted(counts)))
    assert set(requests) == set(SCRIPTS.values())
    assert all(requests[script] for script in SCRIPTS.values()), requests
    newest = newest_both_know()
    lower = {
        (script, api, version, newest.get(api))
        for script, counts in requests.items()
        for api, version in counts
        if api not in newest or version < newest[api]
    }
    assert lower == set(), sorted(lower)
    assert request_log.cancelled() == []


def _versions(counts: Counter) -> dict[str, list[int]]:
    found: dict[str, set[int]] = {}
    for api, version in counts:
        found.setdefault(api, set()).add(version)
    return {api: sorted(versions) for api, versions in found.items()}


def test_tool_requests_as_against_kafka(tools_run, kafka_tools_run):
    """Issue 34: kafka-topics --create and --describe, kafka-configs --describe (a topic, a
    broker) and kafka-consumer-groups --reset-offsets and --describe, the same commands run
    against Apache Kafka 4.4: the request log of each, printed side by side with minibroker's,
    and every API both sides were sent at the same (newest) version. An API only one side was
    sent is printed, not failed: the two clusters differ (three brokers against one node, a
    group that had a consumer against one that did not)."""
    differing = {}
    print("requests by step: versions sent to minibroker | to Apache Kafka 4.4")
    for name, theirs_counts in kafka_tools_run["steps"].items():
        assert kafka_tools_run["answers"][name]["exit"] == 0, kafka_tools_run["answers"][name]
        mine = _versions(tools_run["steps"][name])
        theirs = _versions(theirs_counts)
        assert mine and theirs, name
        print(f"  {name}")
        for api in sorted(set(mine) | set(theirs)):
            print(f"    {api:32} {mine.get(api, '-')!s:12} | {theirs.get(api, '-')}")
            if api in mine and api in theirs and max(mine[api]) != max(theirs[api]):
                differing[(name, api)] = (mine[api], theirs[api])
    assert set(kafka_tools_run["steps"]) == {step["name"] for step in _kafka_batch("")}
    assert differing == {}, differing


TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"
TXN_TOPIC = "tools-txn"


def _producer_rows(text: str) -> list[list[str]]:
    """describe-producers' table rows (ProducerId first), without the header."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    assert lines and lines[0][0] == "ProducerId", text
    return lines[1:]


def test_kafka_transactions_describe_producers_and_find_hanging_on_a_follower(java, tools_cluster):
    """`kafka-transactions describe-producers --broker-id <follower>` and `find-hanging
    --broker-id N` answer from any replica, as on Kafka: with a broker id the admin client
    sends DescribeProducers to that broker, which answers for its own replica, leader or
    follower (Kafka's ReplicaManager.activeProducerState). An open transaction of a
    librdkafka producer is seen alike by the leader and a follower, and find-hanging (which
    asks broker N about every partition it hosts, the internal topics' included) finds it
    open at its coordinator, so not hanging, and exits 0 with its header alone."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = tools_cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TXN_TOPIC, 1, 3)])[TXN_TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tools-txn-id"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(TXN_TOPIC, value=b"open %d" % i)
    assert producer.flush(30) == 0  # acks=all: every replica has the batch
    try:
        partition = admin.list_topics(TXN_TOPIC, timeout=10).topics[TXN_TOPIC].partitions[0]
        follower = next(r for r in partition.replicas if r != partition.leader)
        base = ["--bootstrap-server", bootstrap]
        where = ["--topic", TXN_TOPIC, "--partition", "0"]
        leader = java.run(TRANSACTIONS, *base, "describe-producers", *where)
        assert leader.returncode == 0, leader.stderr[-3000:]
        (row,) = _producer_rows(leader.stdout)
        assert row[-1] == "0", row  # CurrentTransactionStartOffset: the open transaction
        on_follower = java.run(
            TRANSACTIONS, *base, "describe-producers", *where, "--broker-id", str(follower)
        )
        assert on_follower.returncode == 0, on_follower.stderr[-3000:]
        assert _producer_rows(on_follower.stdout) == [row]
        hanging = java.run(
            TRANSACTIONS, *base, "find-hanging", "--broker-id", str(follower),
            "--max-transaction-timeout", "0",
        )  # fmt: skip
        assert hanging.returncode == 0, hanging.stderr[-3000:]
        assert "Exception" not in hanging.stdout + hanging.stderr, hanging.stderr[-3000:]
        assert hanging.stdout.split() == [
            "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
            "StartOffset", "LastTimestamp", "Duration(min)",
        ]  # fmt: skip
    finally:
        producer.abort_transaction(30)


def _minibroker_kafka(*args: str, stdin: str | None = None, env: dict | None = None):
    """`minibroker kafka ARGS...` as a user types it (the venv's console script)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "minibroker"
    return subprocess.run(
        [str(script), "kafka", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_minibroker_kafka_runs_kafkas_tools(tools_cluster):
    """`minibroker kafka kafka-topics ...`, `console-producer` and `kafka-console-consumer.sh`
    run Kafka 4.4's TopicCommand, ConsoleProducer and ConsoleConsumer with the arguments as
    typed: the topic is created with 2 partitions and RF 3, the lines read back, and the
    tool's exit code is the command's (an unknown topic: exit 1, as kafka-topics.sh), its
    stdout the tool's own (Kafka's tools log to stderr)."""
    b = ["--bootstrap-server", tools_cluster.bootstrap]
    topic = "tools-cli"
    created = _minibroker_kafka(
        "kafka-topics", *b, "--create", "--topic", topic, "--partitions", "2",
        "--replication-factor", "3",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr[-3000:]
    assert created.stdout.strip() == f"Created topic {topic}."
    # One partition an answer: the tool follows DescribeTopicPartitions' cursor.
    described = _minibroker_kafka(
        "topics", *b, "--describe", "--topic", topic, "--partition-size-limit-per-response", "1"
    )
    assert described.returncode == 0, described.stderr[-3000:]
    assert "PartitionCount: 2\tReplicationFactor: 3" in described.stdout, described.stdout
    assert re.findall(r"Partition: (\d)\tLeader:", described.stdout) == ["0", "1"]
    lines = ["k1:one", "k2:two", "k3:three"]
    produced = _minibroker_kafka(
        "console-producer", *b, "--topic", topic, "--reader-property", "parse.key=true",
        "--reader-property", "key.separator=:", stdin="".join(f"{line}\n" for line in lines),
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr[-3000:]
    consumed = _minibroker_kafka(
        "kafka-console-consumer.sh", *b, "--topic", topic, "--from-beginning",
        "--max-messages", "3", "--timeout-ms", "30000", "--formatter-property",
        "print.key=true", "--formatter-property", "key.separator=:",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr[-3000:]
    assert sorted(consumed.stdout.split()) == sorted(lines)
    assert "Processed a total of 3 messages" in consumed.stderr
    features = _minibroker_kafka("kafka-features", *b, "describe")
    assert features.returncode == 0, features.stderr[-3000:]
    described, _ = features_described(features.stdout)
    assert set(described) == set(KAFKA_44_FEATURES)
    unknown = _minibroker_kafka("kafka-topics", *b, "--describe", "--topic", "no-such-topic")
    assert unknown.returncode == 1
    assert "Topic 'no-such-topic' does not exist as expected" in unknown.stdout


def test_minibroker_kafka_without_the_artifacts_says_how_to_fetch_them(tmp_path):
    """No class path (MINIBROKER_JAVA_DIR naming an empty folder): one line saying to run
    java/fetch.sh, exit 2, no traceback; an unknown tool is named with the known ones."""
    missing = _minibroker_kafka(
        "kafka-topics", "--list", env={"MINIBROKER_JAVA_DIR": str(tmp_path)}
    )
    assert missing.returncode == 2
    assert missing.stderr.startswith("minibroker kafka: Kafka's tools are not here (")
    assert "run java/fetch.sh" in missing.stderr and "Traceback" not in missing.stderr
    assert missing.stderr.count("\n") == 1
    (tmp_path / "clients.missing").write_text("mvn could not resolve java/clients/pom.xml: x\n")
    unresolved = _minibroker_kafka("topics", "--list", env={"MINIBROKER_JAVA_DIR": str(tmp_path)})
    assert unresolved.returncode == 2
    assert "(mvn could not resolve java/clients/pom.xml: x)" in unresolved.stderr
    unknown = _minibroker_kafka("kafka-nonsense")
    assert unknown.returncode == 2
    assert "unknown tool 'kafka-nonsense': one of kafka-acls," in unknown.stderr


def test_schema_validation_commands_of_the_docs(tools_cluster):
    """docs/schema-registry.md's "Schema validation on produce" commands, as written (the
    venv's `minibroker` and this cluster's bootstrap put in): the topic is created and the
    config set, and a record that is not in Confluent's wire format is then refused with
    INVALID_RECORD. The page once had `kafka-topics --create --config
    confluent.value.schema.validation=true`, which Kafka's TopicCommand refuses before sending
    ("Unknown topic config name"); this test runs what the page says."""
    import shlex

    from confluent_kafka import KafkaError, Producer

    from tests.readme import blocks, shell_commands

    page = "docs/schema-registry.md"
    (block,) = [b for b in blocks("Schema validation on produce", page) if b.lang == "sh"]
    commands = shell_commands(block)
    assert commands, block
    for command in commands:
        words = shlex.split(command.replace("127.0.0.1:9092", tools_cluster.bootstrap))
        assert words[:2] == [".venv/bin/minibroker", "kafka"], words
        done = _minibroker_kafka(*words[2:])
        assert done.returncode == 0, (command, done.stdout, done.stderr[-3000:])
    producer = Producer({"bootstrap.servers": tools_cluster.bootstrap, "acks": "all"})
    errors: list[KafkaError] = []
    producer.produce("orders", value=b"not framed", on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(30) == 0
    assert len(errors) == 1 and errors[0] is not None, errors
    assert errors[0].code() == KafkaError.INVALID_RECORD, errors[0]
