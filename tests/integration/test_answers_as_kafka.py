"""Answers the clients' own test suites found wrong, asked of one minibroker process and of
Apache Kafka 4.4 (one KRaft node, bench/kafka_ref.py; skipped with the reason when there is no
JVM) with the same raw requests, and compared with each other:

- IncrementalAlterConfigs of Kafka's per-broker SASL reconfigurables (librdkafka 0081): taken
  for a broker, refused at the cluster default with Kafka's message;
- DescribeConfigs of the cluster default: the cluster-wide min.insync.replicas of Kafka 4.1+
  (KIP-966), which is also where a topic's value comes from (confluent-kafka's
  test_incremental_alter_configs counts it among a topic's non-default entries);
- Produce of a keyless record to a compacted topic (librdkafka 0011): INVALID_RECORD with
  Kafka's message. Departure: Kafka also names the record in record_errors, minibroker does
  not (see storage/log.py check_keys_for_compaction);
- OffsetCommit to a classic group completing a rebalance (librdkafka 0113): the member and
  the generation are checked before the state (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, then
  REBALANCE_IN_PROGRESS).

- DescribeTopicPartitions (issue 34): pages by the cursor and the partition limit, an unknown
  topic, a cursor naming a topic not asked for, the (empty) eligible leader replicas;
- UpdateFeatures v2 (issue 34): a level out of range, an unknown feature, a downgrade asked as
  an upgrade (with Kafka's messages), a validate-only disable; and the finalized levels of the
  features minibroker implements in ApiVersions v4.
- The versions Kafka 4 removed (KIP-896, issue 34): a valid request at each (the requests of
  test_kafka44_versions.REMOVED) closes its connection; ApiVersions at a version neither knows
  is answered in the v0 layout with UNSUPPORTED_VERSION and ApiVersions' own range (KIP-511);
  Produce is advertised from v0 (KAFKA-18659); Metadata v0, which Kafka 4 kept, is answered.

The EndTxn v5 abort of an empty transaction is compared the same way in
test_transactions_v2.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from bench.kafka_ref import KafkaCluster, missing_reason
from minibroker.common.config_model import BROKER_RESOURCE, TOPIC_RESOURCE
from minibroker.protocol import codec
from minibroker.protocol.versions import ApiKey
from minibroker.tools import wire
from minibroker.tools.launcher import BrokerProcess
from tests.conftest import BROKER_READY_TIMEOUT, exchange, wait_for
from tests.integration.test_groups_bad_input import Session, join, sync
from tests.integration.test_kafka44_versions import (
    REMOVED,
    UNKNOWN_API_VERSIONS,
    api_versions_at,
    sent_at,
)
from tests.unit.batch_factory import make_batch

COMPACTED = "compacted-answers"
PAGED = "paged-answers"
IMPLEMENTED_FEATURES = {
    "eligible.leader.replicas.version",
    "group.version",
    "kraft.version",
    "metadata.version",
    "transaction.version",
}
GROUP = "answers-group"
DYNAMIC_DEFAULT_BROKER_CONFIG = 3


@dataclass
class Target:
    name: str
    bootstrap: str
    node_id: int


@pytest.fixture(scope="module")
def minibroker(tmp_path_factory) -> Iterator[Target]:
    started = BrokerProcess.start(node_id=1, log_dir=Path(tmp_path_factory.mktemp("mb")) / "data")
    try:
        started.wait_ready(BROKER_READY_TIMEOUT)
        yield Target("minibroker", started.bootstrap, 1)
    finally:
        if started.running:
            assert started.stop() == 0, started.log_tail()


@pytest.fixture(scope="module")
def kafka(tmp_path_factory) -> Iterator[Target]:
    if (reason := missing_reason("kafka")) is not None:
        pytest.skip(f"Apache Kafka reference: {reason}")
    started = KafkaCluster.start(tmp_path_factory.mktemp("kafka"), nodes=1)
    try:
        yield Target("kafka", started.bootstrap, started.nodes[0].node_id)
    finally:
        started.stop()


@pytest.fixture(scope="module")
def answers(minibroker, kafka) -> dict[str, dict]:
    """Every target's answers to the same requests, asked once per module."""
    return {target.name: ask(target) for target in (minibroker, kafka)}


def call(target: Target, api_key: ApiKey, version: int, **data):
    return exchange(target.bootstrap, codec.build(codec.request_class(api_key, version), data))


def alter(target: Target, resource_name: str, name: str, value: str) -> tuple[int, str | None]:
    (answer,) = call(
        target,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        resources=[
            {
                "resource_type": BROKER_RESOURCE,
                "resource_name": resource_name,
                "configs": [{"name": name, "config_operation": 0, "value": value}],
            }
        ],
        validate_only=False,
    ).responses
    return answer.error_code.value, answer.error_message


def described(target: Target, resource_type: int, name: str, keys=None) -> list[tuple]:
    (result,) = call(
        target,
        ApiKey.DESCRIBE_CONFIGS,
        4,
        resources=[
            {"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}
        ],
        include_synonyms=True,
        include_documentation=False,
    ).results
    return [
        (c.name, c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms])
        for c in result.configs
    ]


def settled(answer, done, timeout: float = 10.0):
    """``answer()`` once ``done`` holds of it, or its last answer after ``timeout`` (for the
    comparison to show, rather than fail here)."""
    deadline = time.monotonic() + timeout
    while not done(result := answer()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return result


def commits_during_a_rebalance(target: Target) -> list[int]:
    """A member commits while its group completes a rebalance (librdkafka 0113): with its old
    generation, as an unknown member, then with the current generation; then once synced."""
    session = Session(target.bootstrap)
    try:

        def commit(generation: int, member_id: str) -> int:
            answer = session.send(
                ApiKey.OFFSET_COMMIT,
                8,
                {
                    "group_id": GROUP,
                    "generation_id_or_member_epoch": generation,
                    "member_id": member_id,
                    "topics": [
                        {
                            "name": COMPACTED,
                            "partitions": [{"partition_index": 0, "committed_offset": 1}],
                        }
                    ],
                },
            )
            return answer.topics[0].partitions[0].error_code.value

        # FindCoordinator creates __consumer_offsets; its coordinator may still be loading
        # it a moment after (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS).
        wait_for(
            lambda: (
                session.send(
                    ApiKey.FIND_COORDINATOR, 2, {"key": GROUP, "key_type": 0}
                ).error_code.value
                == 0
            ),
            60,
            "the group coordinator",
            0.5,
        )
        joined = wait_for(
            lambda: (answer := join(session, GROUP)).error_code.value == 0 and answer,
            60,
            "a JoinGroup answer",
            0.5,
        )
        member, first = joined.member_id, joined.generation_id
        sync(session, GROUP, first, member, [(member, b"a")])
        join(session, GROUP, member_id=member)  # the leader rejoins: CompletingRebalance
        answers = [commit(first, member), commit(first + 1, "stranger"), commit(first + 1, member)]
        sync(session, GROUP, first + 1, member, [(member, b"a")])
        return [*answers, commit(first + 1, member)]
    finally:
        session.close()


def pages(target: Target, names, limit=2000, cursor=None):
    """A DescribeTopicPartitions answer as (topics: name, error, partitions with their ELR
    lists, internal), next cursor."""
    answer = call(
        target,
        ApiKey.DESCRIBE_TOPIC_PARTITIONS,
        0,
        topics=[{"name": name} for name in names],
        response_partition_limit=limit,
        cursor=cursor,
    )
    topics = [
        (
            t.name,
            t.error_code.value,
            t.is_internal,
            [
                (p.partition_index, p.eligible_leader_replicas, p.last_known_elr)
                for p in t.partitions
            ],
        )
        for t in answer.topics
    ]
    cursor = answer.next_cursor
    return topics, None if cursor is None else (cursor.topic_name, cursor.partition_index)


def update_features(target: Target, feature: str, level: int, kind: int, validate_only=False):
    answer = call(
        target,
        ApiKey.UPDATE_FEATURES,
        2,
        timeout=30_000,
        feature_updates=[{"feature": feature, "max_version_level": level, "upgrade_type": kind}],
        validate_only=validate_only,
    )
    return answer.error_code.value, answer.error_message


def finalized_features(target: Target) -> dict[str, int]:
    answer = call(
        target, ApiKey.API_VERSIONS, 4, client_software_name="t", client_software_version="1"
    )
    return {
        f.name: f.max_version_level
        for f in answer.finalized_features
        if f.name in IMPLEMENTED_FEATURES
    }


def removed_versions(target: Target) -> dict[str, str]:
    """What each removed version's request gets: "closed" or "answered"."""
    return {
        f"{key.name} v{version}": "closed"
        if sent_at(target.bootstrap, key, version) == "closed"
        else "answered"
        for key, version in REMOVED
    }


def metadata_v0(target: Target, topic: str) -> list[tuple]:
    """Metadata v0 of one topic: name, error, partitions with their errors and replica counts."""
    answer = call(target, ApiKey.METADATA, 0, topics=[{"name": topic}])
    return [
        (
            t.name,
            t.error_code.value,
            sorted(
                (p.partition_index, p.error_code.value, len(p.replica_nodes)) for p in t.partitions
            ),
        )
        for t in answer.topics
    ]


def produce_advertised(target: Target) -> tuple[int, int]:
    with wire.connect(target.bootstrap, 10) as client:
        return client.api_versions()[ApiKey.PRODUCE]


def ask(target: Target) -> dict:
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    made = NewTopic(COMPACTED, 1, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([made])[COMPACTED].result(30)
    admin.create_topics([NewTopic(PAGED, 3, 1)])[PAGED].result(30)
    named = [PAGED, "paged-missing"]
    broker = str(target.node_id)
    kerberos = "sasl.kerberos.min.time.before.relogin"

    def produced():
        answer = call(
            target,
            ApiKey.PRODUCE,
            9,
            transactional_id=None,
            acks=-1,
            timeout=10_000,
            topic_data=[
                {
                    "name": COMPACTED,
                    "partition_data": [
                        {"index": 0, "records": make_batch([(b"k", b"v"), (None, b"v")])}
                    ],
                }
            ],
        )
        partition = answer.responses[0].partition_responses[0]
        if partition.error_code.value in (3, 6):  # the new topic's leader not known yet
            return None
        return partition.error_code.value, partition.base_offset, partition.error_message

    return {
        "alter_broker": alter(target, broker, kerberos, "58000"),
        "alter_broker_factor": alter(target, broker, "sasl.login.refresh.window.factor", "0.7"),
        # Kafka's broker applies the change when its metadata reaches it, a moment later.
        "described_broker": settled(
            lambda: described(target, BROKER_RESOURCE, broker, [kerberos]),
            lambda entries: bool(entries) and entries[0][1] == "58000",
        ),
        "alter_cluster": alter(target, "", kerberos, "58000"),
        "alter_bad_type": alter(target, broker, kerberos, "abc"),
        "cluster_default": described(target, BROKER_RESOURCE, ""),
        "topic_min_isr": described(target, TOPIC_RESOURCE, COMPACTED, ["min.insync.replicas"]),
        "keyless": wait_for(produced, 30, "a Produce answer", 0.2),
        "commits_during_a_rebalance": commits_during_a_rebalance(target),
        # Kafka's broker knows the new topic once its metadata reaches it.
        "dtp_first_page": settled(
            lambda: pages(target, named, limit=2), lambda answer: answer[0][0][1] == 0
        ),
        "dtp_next_page": pages(target, named, limit=2, cursor={"topic_name": PAGED,
                                                               "partition_index": 2}),
        "dtp_bad_cursor": pages(target, [PAGED], cursor={"topic_name": "other",
                                                         "partition_index": 0}),
        "features_out_of_range": update_features(target, "group.version", 5, 1),
        "features_unknown": update_features(target, "nosuch.version", 1, 1),
        "features_downgrade_as_upgrade": update_features(target, "transaction.version", 1, 1),
        "features_validate_only": update_features(target, "group.version", 0, 2, True),
        "features_finalized": finalized_features(target),
        "removed_versions": removed_versions(target),
        "api_versions_unknown": api_versions_at(target.bootstrap, UNKNOWN_API_VERSIONS),
        "produce_advertised": produce_advertised(target),
        "metadata_v0": metadata_v0(target, PAGED),
    }  # fmt: skip


@pytest.mark.parametrize(
    "question",
    [
        "alter_broker",
        "alter_broker_factor",
        "described_broker",
        "alter_cluster",
        "alter_bad_type",
        "cluster_default",
        "topic_min_isr",
        "keyless",
        "commits_during_a_rebalance",
        "dtp_first_page",
        "dtp_next_page",
        "dtp_bad_cursor",
        "features_out_of_range",
        "features_unknown",
        "features_downgrade_as_upgrade",
        "features_validate_only",
        "features_finalized",
        "removed_versions",
        "api_versions_unknown",
        "produce_advertised",
        "metadata_v0",
    ],
)
def test_answered_as_kafka_4_4_answers(answers, question):
    assert answers["minibroker"][question] == answers["kafka"][question]


def test_what_the_answers_are(answers):
    """The answers themselves (so that both being wrong the same way cannot pass)."""
    mine = answers["minibroker"]
    assert mine["alter_broker"] == (0, None)
    assert mine["alter_cluster"][0] == 42  # INVALID_REQUEST
    assert [entry[:3] for entry in mine["cluster_default"]] == [
        ("min.insync.replicas", "1", DYNAMIC_DEFAULT_BROKER_CONFIG)
    ]
    assert mine["topic_min_isr"][0][:3] == (
        "min.insync.replicas",
        "1",
        DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert mine["keyless"][0] == 87  # INVALID_RECORD
    # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, then NONE.
    assert mine["commits_during_a_rebalance"] == [22, 25, 27, 0]
    assert mine["dtp_first_page"] == ([(PAGED, 0, False, [(0, (), ()), (1, (), ())])], (PAGED, 2))
    assert mine["dtp_next_page"] == ([(PAGED, 0, False, [(2, (), ())]),
                                      ("paged-missing", 3, False, [])], None)  # fmt: skip
    assert mine["dtp_bad_cursor"] == ([(PAGED, 42, False, [])], None)  # INVALID_REQUEST
    assert mine["features_out_of_range"][0] == 95  # INVALID_UPDATE_VERSION
    assert mine["features_validate_only"] == (0, None)
    assert set(mine["removed_versions"].values()) == {"closed"}
    assert mine["api_versions_unknown"] == (9, 35, [(18, 0, 5)])  # UNSUPPORTED_VERSION
    assert mine["produce_advertised"] == (0, 13)
    assert mine["metadata_v0"] == [(PAGED, 0, [(0, 0, 1), (1, 0, 1), (2, 0, 1)])]
    assert mine["features_finalized"] == {
        "eligible.leader.replicas.version": 1,
        "group.version": 1,
        "metadata.version": 33,
        "transaction.version": 2,
    }
