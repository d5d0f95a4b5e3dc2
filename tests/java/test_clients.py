"""The Java client (kafka-clients 4.x) against a 3-broker minibroker cluster, and the same program
against Apache Kafka 4.x.

One JVM run (programs/ClientChecks.java) does the producer, consumer-group and AdminClient
checks and prints what it saw; these tests judge those answers against what the program did
(counts it sent, offsets it committed), then against what Kafka answered to the same program.
The answers must agree on semantics: the cluster sizes differ (three brokers here, one Kafka
node), so replica counts are judged against the replication factor each run asked for.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.java.conftest import JAVA_TIMEOUT, RequestLog, newest_both_know

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RECORDS_PER_CODEC = 300
GROUP_RECORDS = 100
REPLICATION = 3
DLQ_LIMIT_MESSAGE = "Offset delivery count exceeded the threshold."


@pytest.fixture(scope="module")
def minibroker_run(java, java_cluster) -> tuple[dict, Path]:
    """ClientChecks' answers from minibroker, and the request log of that run."""
    answers = java.json("ClientChecks", java_cluster.bootstrap, "mb", str(REPLICATION))
    assert java.last_log is not None
    return answers, java.last_log


@pytest.fixture(scope="module")
def kafka_run(java, kafka_reference) -> tuple[dict, Path]:
    """ClientChecks' answers from Apache Kafka 4.4, and the request log of that run (kept out
    of the session's minibroker request log)."""
    answers = java.json("ClientChecks", kafka_reference.bootstrap, "kafka", "1", log_requests=False)
    assert java.last_log is not None
    return answers, java.last_log


@pytest.fixture(scope="module")
def minibroker_answers(minibroker_run) -> dict:
    return minibroker_run[0]


@pytest.fixture(scope="module")
def kafka_answers(kafka_run) -> dict:
    return kafka_run[0]


def test_producer_defaults_every_codec(minibroker_answers):
    """Idempotent acks=all producer (the client's defaults), each codec: every record acked at
    its own offset and read back unchanged."""
    check_producer(minibroker_answers)


def test_consumer_group(minibroker_answers):
    check_consumer_group(minibroker_answers)


def test_admin_client(minibroker_answers):
    check_admin_client(minibroker_answers)


# The checks, shared with test_clients_sasl_ssl.py (the same program over SASL_SSL/SCRAM).


def check_producer(minibroker_answers: dict) -> None:
    for codec in CODECS:
        answer = minibroker_answers["producer"][codec]
        assert answer == {
            "acked": RECORDS_PER_CODEC,
            "distinct_positions": RECORDS_PER_CODEC,
            "read": RECORDS_PER_CODEC,
            "read_equals_sent": True,
        }, (codec, answer)


def check_consumer_group(minibroker_answers: dict) -> None:
    answer = minibroker_answers["consumer"]
    assert "error" not in answer, answer
    assert answer["first_assignment"] == 2
    assert answer["first_consumed"] == GROUP_RECORDS
    assert answer["committed_sum"] == GROUP_RECORDS
    assert answer["rebalanced_sizes"] == [1, 1]
    assert answer["rebalanced_union"] == 2
    assert answer["after_rebalance_records"] == 0
    assert answer["commit_async"] == "ok"
    assert answer["commit_async_committed"] == 40
    assert answer["seek_first_offset"] == 7
    assert answer["offsets_for_times_p0"] == 5
    assert answer["offsets_for_times_p0_timestamp"] == 10
    assert answer["offsets_for_times_p1_after_last"] == "null"
    assert answer["end_offsets"] == [GROUP_RECORDS // 2, GROUP_RECORDS // 2]
    assert answer["beginning_offsets"] == [0, 0]


def check_admin_client(minibroker_answers: dict) -> None:
    admin = minibroker_answers["admin"]
    assert admin["create_topic"] == "ok"
    assert admin["create_existing"]["error"].startswith("TopicExistsException")
    assert admin["list_topics"] is True
    # describeTopics: DescribeTopicPartitions on Kafka 4, Metadata when not advertised.
    partitions = admin["describe_topics"]["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1]
    assert all(
        p["replicas"] == REPLICATION and p["isr"] == REPLICATION and p["has_leader"]
        for p in partitions
    )
    assert admin["describe_topics"]["has_topic_id"] is True
    assert admin["create_partitions"] == 4
    assert admin["describe_cluster"] == {"nodes": 3, "has_controller": True, "has_cluster_id": True}
    assert admin["describe_configs"]["retention.ms"] == "3600000"
    assert admin["describe_configs"]["retention.ms.source"] == "DYNAMIC_TOPIC_CONFIG"
    assert admin["incremental_alter_configs"] == {
        "retention.ms": "7200000",
        "cleanup.policy": "compact",
    }
    assert admin["describe_broker_config"]["has_entries"] is True
    assert admin["list_groups"] == {"listed": True, "state": "Empty"}
    assert admin["describe_group"]["state"] == "Empty"
    assert admin["describe_group"]["type"] == "Classic"
    assert admin["list_group_offsets"] == [40, GROUP_RECORDS // 2]
    assert admin["alter_group_offsets"] == [3, 4]
    assert admin["delete_group_offsets"] is False
    assert admin["list_offsets"] == {
        "earliest": 0,
        "latest": GROUP_RECORDS // 2,
        "max_timestamp_offset": GROUP_RECORDS // 2 - 1,
    }
    assert admin["delete_records"] == {"low_watermark": 10, "earliest_after": 10}
    assert admin["delete_group"] == "ok"
    # No authorizer on this cluster: Kafka answers SECURITY_DISABLED.
    assert admin["describe_acls"]["error"].startswith("SecurityDisabledException")
    assert admin["scram"] == {"mechanism": "SCRAM-SHA-256", "iterations": 8192}
    assert admin["delete_topic"] == "ok"


def _normalised(answers: dict, replication: int, nodes: int) -> dict:
    """The answers with what depends on the cluster's size replaced by whether it matches the
    size asked for, and with exception messages cut to the exception's class."""

    def walk(value):
        if isinstance(value, dict):
            if set(value) == {"error"}:
                return {"error": value["error"].split(":", 1)[0]}
            return {key: walk(item) for key, item in value.items() if key != "timings_ms"}
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    result = walk(answers)
    for partition in result["admin"]["describe_topics"].get("partitions", []):
        partition["replicas"] = partition["replicas"] == replication
        partition["isr"] = partition["isr"] == replication
    result["admin"]["describe_cluster"]["nodes"] = (
        result["admin"]["describe_cluster"]["nodes"] == nodes
    )
    return result


def test_same_answers_as_kafka(minibroker_answers, kafka_answers):
    mine = _normalised(minibroker_answers, REPLICATION, 3)
    theirs = _normalised(kafka_answers, 1, 1)
    differences = {
        f"{section}/{key}": (mine[section].get(key), theirs[section].get(key))
        for section in theirs
        for key in set(theirs[section]) | set(mine[section])
        if mine[section].get(key) != theirs[section].get(key)
    }
    assert differences == {}, differences


def test_request_log(minibroker_run, kafka_run, request_log: RequestLog):
    """Every request the Java client sent appears in the summary; none was cut off by a closed
    connection (an UNKNOWN_SERVER_ERROR answer fails the module's cluster fixture).

    Issue 34: every request of every API that Kafka 4.4's clients sent (every run of
    kafka-clients 4.4.0 in the session: this module's, and the tools', Streams' and the other
    programs' when they ran in the same pytest process) went at the newest version both sides
    know: the newest stable one in kafka-clients 4.4.0's message definitions, or minibroker's
    newest if lower, or the request builder's own cap (NAMED_TOPICS_CAP). And the same
    program's requests to Apache Kafka 4.4 (its request log, printed beside minibroker's) went
    at the same versions as to minibroker, API by API."""
    sent = request_log.sent()
    print("requests sent by the Java clients, by API and version:")
    for (api, version), count in sorted(sent.items()):
        print(f"  {api:32} v{version:<3} {count}")
    for api in (
        "PRODUCE",
        "FETCH",
        "METADATA",
        "JOIN_GROUP",
        "SYNC_GROUP",
        "OFFSET_COMMIT",
        "INIT_PRODUCER_ID",
    ):
        assert any(name == api for name, _ in sent), (api, sorted(sent))
    # The versions minibroker raised to Kafka 4.4's, pinned: every request of these APIs went
    # at the newest version both sides know (counted over the runs of kafka-clients 4.4.0
    # only: on CI's worker the session's log also holds Kafka Connect 4.3.1's, which sends
    # ApiVersions v4).
    lower = {
        (api, version)
        for api, version in request_log.sent(client_version="4.4.0")
        if api in NEWEST_BOTH_KNOW and version != NEWEST_BOTH_KNOW[api]
    }
    assert lower == set(), sorted(lower)
    # Every API, from the client's message definitions and minibroker's declarations.
    newest = newest_both_know()
    lower = {
        (api, version, newest.get(api))
        for api, version in request_log.sent(client_version="4.4.0")
        if api not in newest or version < newest[api]
    }
    assert lower == set(), sorted(lower)
    # The same program against Apache Kafka 4.4.
    mine = versions_by_api(minibroker_run[1])
    theirs = versions_by_api(kafka_run[1])
    print("ClientChecks' requests, by API: versions sent to minibroker | to Apache Kafka 4.4")
    for api in sorted(set(mine) | set(theirs)):
        print(f"  {api:32} {mine.get(api, '-')!s:12} | {theirs.get(api, '-')}")
    assert mine and theirs
    differing = {
        api: (mine[api], theirs[api])
        for api in set(mine) & set(theirs)
        if max(mine[api]) != max(theirs[api])
    }
    assert differing == {}, differing
    assert request_log.cancelled() == []


def versions_by_api(log: Path) -> dict[str, list[int]]:
    versions: dict[str, set[int]] = defaultdict(set)
    for api, version in RequestLog(files=[log]).sent():
        versions[api].add(version)
    return {api: sorted(found) for api, found in versions.items()}


# The newest version of each API that Kafka 4.4's Java client and minibroker both know, as
# the client picks it (see NAMED_TOPICS_CAP).
NEWEST_BOTH_KNOW = {
    "API_VERSIONS": 5,
    "PRODUCE": 13,
    "FETCH": 18,
    "LIST_OFFSETS": 11,
    "METADATA": 13,
    "OFFSET_COMMIT": 9,
    "OFFSET_FETCH": 9,
    "DESCRIBE_GROUPS": 6,
    "DELETE_GROUPS": 3,
    "DESCRIBE_CLUSTER": 2,
    "CONSUMER_GROUP_DESCRIBE": 1,
    "INIT_PRODUCER_ID": 5,
}


FETCH_SENT = re.compile(
    r"Sending FETCH request with header RequestHeader\(apiKey=FETCH, apiVersion=(\d+).*?"
    r" to node (-?\d+): (FetchRequestData\(.*)"
)
SESSION = re.compile(
    r"sessionId=(-?\d+), sessionEpoch=(-?\d+), topics=\[(.*?)\], forgottenTopicsData"
)


def test_consumer_fetches_in_incremental_sessions(java, java_cluster):
    """KIP-227: the Java consumer opens a session on each broker with a full fetch (epoch 0),
    then sends incremental fetches (epoch 1, 2, ...) in it; once it has read everything, the
    incremental fetches name no partition at all. No broker refuses a session (that would
    start it over with a new full fetch). Every Fetch is v18 (KIP-1166's HighWatermark)."""
    partitions = 12
    answer = java.json("SessionConsumer", java_cluster.bootstrap, "fetch-sessions", str(partitions))
    assert answer["read"] == answer["expected"], answer
    log = java.request_log.files[-1].read_text(errors="replace")
    fetches = []
    for line in log.splitlines():
        if (sent := FETCH_SENT.search(line)) and (session := SESSION.search(sent.group(3))):
            # Fetch v18, the newest both Kafka 4.4's client and minibroker know.
            assert sent.group(1) == "18", line[:200]
            node = int(sent.group(2))
            fetches.append((node, int(session.group(1)), int(session.group(2)), session.group(3)))
    assert fetches, "no Fetch in the request log"
    by_node: dict[int, list] = {}
    for node, session_id, epoch, topics in fetches:
        by_node.setdefault(node, []).append((session_id, epoch, topics))
    for node, sent in by_node.items():
        full = [f for f in sent if f[1] == 0]
        assert len(full) == 1 and full[0][0] == 0, (node, full)
        incremental = [f for f in sent if f[1] > 0]
        assert incremental, (node, sent[:3])
        session_ids = {session_id for session_id, _, _ in incremental}
        assert len(session_ids) == 1 and 0 not in session_ids, (node, session_ids)
        epochs = [epoch for _, epoch, _ in incremental]
        assert epochs == list(range(1, len(epochs) + 1)), (node, epochs)
        # The last ones, idle: the session holds the partitions, the request names none.
        assert incremental[-1][2] == "", (node, incremental[-1])


def test_fetch_v16_from_a_follower_names_the_leader_and_its_endpoint(java_cluster):
    """KIP-951 on the module's 3-broker cluster (raw requests, no JVM): Fetch v16 sent to a
    broker that does not lead the partition answers NOT_LEADER_OR_FOLLOWER with the current
    leader and epoch, and the response's node endpoints hold that leader's address."""
    import datetime

    from kio.schema.fetch.v16.request import FetchPartition, FetchRequest, FetchTopic

    from tests.conftest import create_topic, exchange, wait_for

    topic = "leader-discovery"
    create_topic(java_cluster.bootstrap, topic, 1)
    state = wait_for(
        lambda: java_cluster.partition_metadata(topic, 0), 15, "the partition's metadata"
    )
    leader = int(state.leader_id)
    topic_id = java_cluster.metadata([topic]).topics[0].topic_id
    other = next(b for node_id, b in java_cluster.brokers.items() if node_id != leader)
    response = exchange(
        other.bootstrap,
        FetchRequest(
            max_wait=datetime.timedelta(0),
            min_bytes=0,
            topics=(
                FetchTopic(
                    topic_id=topic_id,
                    partitions=(
                        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        ),
    )
    answer = response.responses[0].partitions[0]
    assert answer.error_code.value == 6  # NOT_LEADER_OR_FOLLOWER
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (
        leader,
        state.leader_epoch,
    )
    endpoints = {(e.node_id, e.host, e.port) for e in response.node_endpoints}
    leader_broker = java_cluster.brokers[leader]
    assert {(leader, *leader_broker.bootstrap.rsplit(":", 1))} == {
        (n, h, str(p)) for n, h, p in endpoints
    }


def _throttle_refusals(bootstrap: str, broker_id: int, topic: str) -> list[tuple[str, str]]:
    """(error name, message) of IncrementalAlterConfigs with malformed replication throttles
    (KIP-73), sent by confluent-kafka's AdminClient; ("NONE", "") for an accepted one."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    broker, topic_type = ConfigResource.Type.BROKER, ConfigResource.Type.TOPIC
    answers = []
    for kind, name, key, value in (
        (broker, str(broker_id), "leader.replication.throttled.rate", "fast"),
        (broker, str(broker_id), "follower.replication.throttled.rate", "-5"),
        (topic_type, topic, "follower.replication.throttled.replicas", "0:x"),
        (topic_type, topic, "leader.replication.throttled.replicas", "*,0:1"),
    ):
        entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(kind, name, incremental_configs=[entry])
        try:
            admin.incremental_alter_configs([resource])[resource].result(timeout=60)
            answers.append(("NONE", ""))
        except KafkaException as refused:
            answers.append((refused.args[0].name(), refused.args[0].str()))
    return answers


def test_malformed_replication_throttles_are_refused_as_kafka_refuses_them(
    java_cluster, kafka_reference
):
    """The same codes and messages as Apache Kafka 4.4: INVALID_REQUEST for a rate that is
    not a LONG of at least 0, INVALID_CONFIG for a malformed throttled-replicas list."""
    answers = {}
    for name, bootstrap, broker_id in (
        ("minibroker", java_cluster.bootstrap, 1),
        ("kafka", kafka_reference.bootstrap, kafka_reference.nodes[0].node_id),
    ):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("throttle-refusals", 1, 1)])["throttle-refusals"].result(60)
        answers[name] = _throttle_refusals(bootstrap, broker_id, "throttle-refusals")
    codes = [code for code, _ in answers["kafka"]]
    assert codes == ["INVALID_REQUEST", "INVALID_REQUEST", "INVALID_CONFIG", "INVALID_CONFIG"]
    assert answers["minibroker"] == answers["kafka"]


def _share_consumer_answers(java, bootstraps: dict[str, str]) -> dict[str, dict]:
    """programs/ShareConsumerChecks.java against each system at once (one JVM each, side by
    side: a run is mostly waiting), with the same topic and group names."""
    runs = {}
    for name, bootstrap in bootstraps.items():
        command = java.command(
            "ShareConsumerChecks", bootstrap, "shareq", log_requests=name == "minibroker"
        )
        runs[name] = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    answers = {}
    for name, run in runs.items():
        stdout, stderr = run.communicate(timeout=JAVA_TIMEOUT)
        assert run.returncode == 0, f"{name}: exited {run.returncode}:\n{stderr[-4000:]}"
        answers[name] = json.loads(stdout.strip().splitlines()[-1])
    return answers


def test_kafka_share_consumers_acknowledge_as_against_kafka(java, java_cluster, kafka_reference):
    """Kafka 4.4's KafkaShareConsumer (KIP-932), three of one group in explicit mode and two of
    another in implicit mode (programs/ShareConsumerChecks.java): every record delivered;
    ACCEPTed ones never again; a RELEASEd one again with delivery count 2; REJECTed ones and
    poison ones (RELEASEd at the group's share.delivery.count.limit of 2) archived and in the
    group's dead-letter queue with Kafka's headers and the original key and value (KIP-1191);
    in implicit mode, acquiring in record_limit mode (KIP-1206) with max.poll.records 7, every
    record once and never more than 7 in a poll; no lag left (DescribeShareGroupOffsets v1);
    a record RENEWed (KIP-1222) given to the application again with its delivery count still 1.
    Then the same against Apache Kafka 4.4, with the same answers. The start offsets differ: Kafka's
    SharePartition persists the start offset it had before the acknowledgements it writes (it
    moves it in memory after the write), so Kafka's lags behind until the next write (0, 7, 15,
    28 or 35 of 30 and 40 were seen); minibroker persists the one after them."""
    answers = _share_consumer_answers(
        java, {"minibroker": java_cluster.bootstrap, "kafka": kafka_reference.bootstrap}
    )
    for name, answer in answers.items():
        explicit = answer["explicit"]
        expected = {str(o): [1] if o % 4 in (0, 2) else [1, 2] for o in range(40)}
        assert explicit["deliveries"] == expected, name
        assert (explicit["final"], explicit["late"], explicit["commit_errors"]) == (40, [], []), (
            name
        )
        assert [
            (int(letter["__dlq.errors.offset"]), letter["__dlq.errors.message"], letter["value"])
            for letter in answer["dlq"]
        ] == [
            (o, "Offset rejected by client." if o % 4 == 2 else DLQ_LIMIT_MESSAGE, f"v{o}")
            for o in range(40)
            if o % 4 in (2, 3)
        ], name
        assert answer["implicit"] == {
            "records": 30,
            "more_than_once": [],
            "commit_errors": [],
            "within_record_limit": True,
        }, name
        assert answer["explicit_offsets"]["lag"] == answer["implicit_offsets"]["lag"] == 0, name
        # RENEW keeps the record acquired (its delivery count unchanged), and the client hands
        # it to the application again, which accepts it then.
        renewed = {str(o): [1, 1] for o in range(5)}
        assert answer["renew"] == {"deliveries": renewed, "commit_errors": []}, name
    mine, kafka = answers["minibroker"], answers["kafka"]
    assert mine["explicit_offsets"]["start_offset"] == 40
    assert mine["implicit_offsets"]["start_offset"] == 30
    assert kafka["explicit_offsets"]["start_offset"] <= 40
    compared = ("explicit", "dlq", "implicit", "renew")
    assert {key: mine[key] for key in compared} == {key: kafka[key] for key in compared}
