"""Replication throttles (KIP-73) on a 3-broker cluster of real processes, set by Kafka 4.4's own
kafka-reassign-partitions (--execute --throttle, then --verify, which removes the throttle) and
refused by the brokers with INVALID_CONFIG when malformed (confluent-kafka's AdminClient and
kafka-configs).

A partition holding DATA bytes on brokers 1 and 2 gains a replica on broker 3 under a throttle of
RATE bytes/s. Broker 3's copy is watched through its own /metrics (kafka_log_log_size): the
copy cannot be done faster than DATA / RATE / 2 (unthrottled it takes well under a second
here). Meanwhile an acks=all producer with min.insync.replicas=2 goes on writing: its records
are acknowledged only while broker 2, the in-sync follower, keeps up, which it does since
in-sync replication is never throttled.

The brokers measure the throttle over replication.quota.window.num=2 windows of 1 s instead
of Kafka's 11: with Kafka's, a catch-up gets (11 - 1) x RATE bytes through before the rate is
held (Kafka's Rate counts at least window.num - 1 whole windows), which would make this test
ten times the data or ten times as long.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from minibroker.tools.launcher import Cluster, free_port
from tests.cluster.conftest import BROKERS, CLUSTER_OVERRIDES, _check_clean_stop
from tests.conftest import scrape, wait_for
from tests.java.test_tools import CONFIGS, REASSIGN

TOPIC = "throttled"
RATE = 1024 * 1024  # bytes/s
RECORD = 16 * 1024
DATA = 8 * 1024 * 1024
LOG_SIZE = "kafka_log_log_size"
BROKER, TOPIC_TYPE = ConfigResource.Type.BROKER, ConfigResource.Type.TOPIC
CATCH_UP_TIMEOUT = 90.0


@pytest.fixture(scope="module")
def throttle_cluster(tmp_path_factory) -> Iterator[tuple[Cluster, dict[int, int]]]:
    ports = {node: free_port() for node in range(1, BROKERS + 1)}
    started = Cluster.start(
        tmp_path_factory.mktemp("throttle-cluster"),
        brokers=BROKERS,
        overrides={
            **CLUSTER_OVERRIDES,
            "replication.quota.window.num": 2,
            "replication.quota.window.size.seconds": 1,
        },
        node_overrides={node: {"metrics.port": port} for node, port in ports.items()},
    )
    yield started, ports
    errors = [
        f"{node.kind} {node.node_id}: {line}"
        for node in started.nodes
        for line in node.stderr_path.read_text(errors="replace").splitlines()
        if "UNKNOWN_SERVER_ERROR" in line or "unsupported request" in line
    ]
    _check_clean_stop(started)
    assert not errors, "\n".join(errors[:20])


def log_size(port: int) -> float:
    return scrape(port).get((LOG_SIZE, (("partition", "0"), ("topic", TOPIC))), 0.0)


def _alter(admin: AdminClient, resource: ConfigResource) -> KafkaException | None:
    try:
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    except KafkaException as refused:
        return refused
    return None


def test_bad_throttle_values_are_refused_with_kafkas_codes(throttle_cluster):
    """As Kafka 4.4 answers (measured with bench.kafka_ref): a rate that is not a LONG of at
    least 0 INVALID_REQUEST, a malformed replica list INVALID_CONFIG; nothing stored."""
    cluster, _ = throttle_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("throttle-bad", 1, 3)])["throttle-bad"].result(timeout=30)
    set_op = AlterConfigOpType.SET
    for code, kind, name, key, value, message in (
        ("INVALID_REQUEST", BROKER, "1", "leader.replication.throttled.rate", "fast",
         "Invalid value fast for configuration leader.replication.throttled.rate: "
         "Not a number of type LONG"),
        ("INVALID_REQUEST", BROKER, "2", "follower.replication.throttled.rate", "-5",
         "Invalid value -5 for configuration follower.replication.throttled.rate: "
         "Value must be at least 0"),
        ("INVALID_CONFIG", TOPIC_TYPE, "throttle-bad", "follower.replication.throttled.replicas",
         "0:x", "Invalid value [0:x] for configuration follower.replication.throttled.replicas"),
        ("INVALID_CONFIG", TOPIC_TYPE, "throttle-bad", "leader.replication.throttled.replicas",
         "*,0:1", "Invalid value [*, 0:1] for configuration leader.replication.throttled.replicas"),
    ):  # fmt: skip
        entry = ConfigEntry(key, value, incremental_operation=set_op)
        refused = _alter(admin, ConfigResource(kind, name, incremental_configs=[entry]))
        assert refused is not None, (key, value)
        assert refused.args[0].name() == code, refused
        assert message in refused.args[0].str(), refused
    # Nothing was stored, and good values are taken.
    good = ConfigResource(
        ConfigResource.Type.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("leader.replication.throttled.rate", "2048", incremental_operation=set_op)
        ],
    )
    assert _alter(admin, good) is None
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")])
    (configs,) = [f.result(timeout=30) for f in described.values()]
    assert configs["leader.replication.throttled.rate"].value == "2048"
    delete = ConfigResource(
        ConfigResource.Type.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry(
                "leader.replication.throttled.rate",
                None,
                incremental_operation=AlterConfigOpType.DELETE,
            )
        ],
    )
    assert _alter(admin, delete) is None


def _batch(bootstrap: str, plan: str) -> list[dict]:
    b = ["--bootstrap-server", bootstrap]
    return [
        {"name": "reassign-execute", "main": REASSIGN,
         "args": [*b, "--execute", "--reassignment-json-file", plan, "--throttle", str(RATE)]},
        {"name": "configs-broker-throttled", "main": CONFIGS,
         "args": [*b, "--describe", "--entity-type", "brokers", "--entity-name", "3"]},
        {"name": "configs-topic-throttled", "main": CONFIGS,
         "args": [*b, "--describe", "--entity-type", "topics", "--entity-name", TOPIC]},
        {"name": "configs-bad-rate", "main": CONFIGS,
         "args": [*b, "--alter", "--entity-type", "brokers", "--entity-name", "2",
                  "--add-config", "follower.replication.throttled.rate=fast"]},
        {"name": "reassign-verify", "main": REASSIGN,
         "args": [*b, "--verify", "--reassignment-json-file", plan],
         "until": "Clearing topic-level throttles", "timeout_s": CATCH_UP_TIMEOUT},
        {"name": "configs-broker-cleared", "main": CONFIGS,
         "args": [*b, "--describe", "--entity-type", "brokers", "--entity-name", "3"]},
        {"name": "configs-topic-cleared", "main": CONFIGS,
         "args": [*b, "--describe", "--entity-type", "topics", "--entity-name", TOPIC]},
    ]  # fmt: skip


def test_a_throttled_reassignment_catches_up_near_the_throttle_while_in_sync_replication_keeps_up(
    java, throttle_cluster, tmp_path
):
    cluster, ports = throttle_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(
        TOPIC, num_partitions=1, replica_assignment=[[1, 2]], config={"min.insync.replicas": "2"}
    )
    admin.create_topics([topic])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    phase = time.monotonic()
    for _ in range(DATA // RECORD):
        producer.produce(TOPIC, os.urandom(RECORD), partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    copied = log_size(ports[1])
    assert copied >= DATA
    print(f"produced {copied:.0f} bytes in {time.monotonic() - phase:.1f} s")

    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": TOPIC, "partition": 0,
                                                  "replicas": [1, 2, 3]}]})
    )  # fmt: skip
    batch, answers_path = tmp_path / "batch.json", tmp_path / "answers.json"
    batch.write_text(json.dumps(_batch(cluster.bootstrap, str(plan))))
    tool = subprocess.Popen(
        java.command("ToolBatch", str(batch), str(answers_path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Broker 3's copy, sampled from its own metrics; acks=all records written meanwhile.
    samples: list[tuple[float, float]] = []
    follower_rates: list[float] = []
    leader_rates: list[float] = []
    acked: list[float] = []
    failed: list[str] = []

    def delivered(error, _message) -> None:
        if error is None:
            acked.append(time.monotonic())
        else:
            failed.append(str(error))

    deadline = time.monotonic() + CATCH_UP_TIMEOUT + 60
    try:
        while time.monotonic() < deadline:
            follower = scrape(ports[3])
            size = follower.get((LOG_SIZE, (("partition", "0"), ("topic", TOPIC))), 0.0)
            samples.append((time.monotonic(), size))
            follower_rates.append(follower[("kafka_server_followerreplication_byte_rate", ())])
            leader_rates.append(scrape(ports[1])[("kafka_server_leaderreplication_byte_rate", ())])
            if size >= copied:
                break
            producer.produce(TOPIC, b"in sync", partition=0, on_delivery=delivered)
            producer.poll(0.1)
        else:
            pytest.fail(f"broker 3 copied {samples[-1][1]:.0f} of {copied:.0f} bytes")
        assert producer.flush(30) == 0
        out, err = tool.communicate(timeout=CATCH_UP_TIMEOUT + 120)
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait()
    assert tool.returncode == 0, err[-4000:]
    answers = {a["name"]: a for a in json.loads(answers_path.read_text())}
    print({name: answer["ms"] for name, answer in answers.items()})

    started = next(t for t, size in samples if size > 0)
    finished = samples[-1][0]
    seconds = finished - started
    rate = copied / seconds
    print(
        f"copied {copied:.0f} bytes in {seconds:.2f} s: {rate / 1024:.0f} KiB/s under a "
        f"throttle of {RATE / 1024:.0f} KiB/s; {len(acked)} acks=all records meanwhile"
    )
    # The copy is held near the throttle: not in much less than DATA / RATE seconds.
    assert seconds >= copied / RATE * 0.5, (seconds, rate)
    # ... and not starved either (a generous bound: two busy cores).
    assert seconds <= copied / RATE * 3, (seconds, rate)
    # In-sync replication is not throttled: acks=all records (min.insync.replicas=2) were
    # acknowledged all along, before broker 3 caught up.
    assert not failed, failed[:5]
    assert sum(1 for t in acked if t < finished) >= 5, (len(acked), seconds)

    # The tool set the throttle on every broker of the move and the replica lists...
    assert answers["reassign-execute"]["exit"] == 0, answers["reassign-execute"]
    assert "The inter-broker throttle limit was set to" in answers["reassign-execute"]["stdout"]
    throttled = answers["configs-broker-throttled"]["stdout"]
    assert f"leader.replication.throttled.rate={RATE}" in throttled, throttled
    assert f"follower.replication.throttled.rate={RATE}" in throttled, throttled
    topic_configs = answers["configs-topic-throttled"]["stdout"]
    assert "leader.replication.throttled.replicas=0:1,0:2" in topic_configs, topic_configs
    assert "follower.replication.throttled.replicas=0:3" in topic_configs, topic_configs
    bad = answers["configs-bad-rate"]
    assert bad["exit"] != 0, bad
    assert "Invalid value fast" in bad["stdout"] + bad["stderr"], bad
    # ... and --verify, once the move completed, removed both.
    verified = answers["reassign-verify"]
    assert "Reassignment of partition throttled-0 is completed" in verified["stdout"], verified
    assert "replication.throttled" not in answers["configs-broker-cleared"]["stdout"]
    assert "replication.throttled" not in answers["configs-topic-cleared"]["stdout"]
    # Broker 3 is in the ISR, with every record.
    wait_for(lambda: _isr(admin) == [1, 2, 3], 30, "broker 3 joining the ISR")
    # The quotas counted the copy (Kafka's FollowerReplication byte-rate on broker 3,
    # LeaderReplication on broker 1), near the throttle; the throttle is gone now.
    assert 0 < max(follower_rates) <= 3 * RATE, max(follower_rates)
    assert 0 < max(leader_rates) <= 3 * RATE, max(leader_rates)
    assert scrape(ports[3])[("kafka_server_followerreplication_throttled_rate", ())] == -1
    # The throttle did the holding back (not a slow machine): broker 1 as the leader, broker 3
    # as the follower, or both.
    held_back = {
        (node, side): scrape(ports[node])[(f"minibroker_{side}replication_throttled_total", ())]
        for node, side in ((1, "leader"), (3, "follower"))
    }
    print(f"held back: {held_back}")
    assert sum(held_back.values()) > 0, held_back


def _isr(admin: AdminClient) -> list[int]:
    (description,) = admin.describe_topics(TopicCollection([TOPIC])).values()
    (partition,) = description.result(timeout=30).partitions
    return sorted(node.id for node in partition.isr)
