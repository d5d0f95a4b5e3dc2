"""Transactions with the Java client on a 3-broker cluster: its transactional producer
(initTransactions, begin, send, sendOffsetsToTransaction, commit, abort, a zombie fenced;
programs/TxnClient.java) and Kafka Streams' word count with processing.guarantee
exactly_once_v2 through a kill -9 of a broker (programs/WordCount.java), counts exact and every
word's successive counts 1, 2, 3... (no update counted twice or lost).

Kafka 4's Java client runs transaction protocol version 2 (KIP-890 part 2) against a broker
that finalizes the ``transaction.version`` feature at 2, as minibroker does by default: no
AddPartitionsToTxn or AddOffsetsToTxn (Produce v12 and TxnOffsetCommit v5 add the partitions),
EndTxn v5 with an epoch bump per transaction; the transactional producer test checks from the
request log that it did.

Skipped, with the broker's answer, while the cluster refuses transactional ids.
``MINIBROKER_TEST_AGAINST_KAFKA=1`` runs them against Apache Kafka (three KRaft nodes,
bench/kafka_ref.py) instead: the check that the tests ask what Kafka does.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.kafka_ref import KafkaCluster, missing_reason
from faults.txn_workload import transactions_refused
from tests.java.conftest import JAVA_TIMEOUT, RequestLog, minibroker_cluster

AGAINST_KAFKA = os.environ.get("MINIBROKER_TEST_AGAINST_KAFKA") == "1"
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"]
COUNT = 30


@dataclass
class Target:
    bootstrap: str
    name: str
    kill_one: Callable[[], None]
    restart_it: Callable[[], None]

    @property
    def is_minibroker(self) -> bool:
        return self.name == "minibroker"


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Iterator[Target]:
    base = tmp_path_factory.mktemp("java-txn")
    if AGAINST_KAFKA:
        if (reason := missing_reason("kafka")) is not None:
            pytest.skip(f"Apache Kafka reference: {reason}")
        kafka = KafkaCluster.start(base, nodes=3)
        victim = kafka.nodes[2]
        try:
            yield Target(
                kafka.bootstrap,
                "kafka",
                lambda: kafka.kill_node(victim),
                lambda: kafka.restart_node(victim),
            )
        finally:
            kafka.stop()
        return
    # The skip comes after the cluster is stopped: minibroker_cluster's clean-up runs only
    # when its block ends normally.
    with minibroker_cluster(base) as cluster:
        refused = transactions_refused(cluster.bootstrap)
        if refused is None:
            victim = cluster.brokers[max(cluster.brokers)]

            def restart() -> None:
                victim.restart()
                victim.wait_ready()

            yield Target(cluster.bootstrap, "minibroker", victim.kill, restart)
    if refused is not None:
        pytest.skip(f"the cluster does not serve transactions: {refused}")


def create_topics(target: Target, *names: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 3) for name in names])
    for future in futures.values():
        future.result(60)


def test_java_transactional_producer(java, target):
    create_topics(target, "java-txn-in", "java-txn-out")
    result = java.json(
        "TxnClient",
        target.bootstrap,
        "java-txn-in",
        "java-txn-out",
        "java-txn-group",
        str(COUNT),
        log_requests=target.is_minibroker,
    )
    committed = sorted(f"committed-{i}" for i in range(COUNT))
    assert result["input_committed"] == committed
    assert result["input_uncommitted"] == 2 * COUNT  # the aborted records are in the log
    assert result["processed"] == COUNT
    # Each input once in the output: the aborted first batch is invisible, the zombie's
    # record too.
    assert result["output_committed"] == sorted(f"out-{value}" for value in committed)
    # The group's offsets are one past the last record the loop read on each partition: on
    # partition p, n_p committed records at offsets 0..n_p-1 (the COMMIT marker, the aborted
    # records and the ABORT marker come after), so they add up to COUNT.
    assert sum(max(offset, 0) for offset in result["group_offsets"].values()) == COUNT
    assert result["fenced"] in ("ProducerFencedException", "InvalidProducerEpochException")
    if target.is_minibroker:
        # Transaction protocol v2: partitions added by Produce and TxnOffsetCommit (v12+ and
        # v5+; Kafka 4.4's client sends v13 and v6, which name topics by id), every
        # transaction ended with EndTxn v5.
        sent = RequestLog(files=[java.request_log.files[-1]]).sent()
        versions = {(api, version) for api, version in sent}
        assert ("END_TXN", 5) in versions, sorted(versions)
        assert ("PRODUCE", 13) in versions, sorted(versions)
        assert ("TXN_OFFSET_COMMIT", 6) in versions, sorted(versions)
        assert not {api for api, _ in versions} & {"ADD_PARTITIONS_TO_TXN", "ADD_OFFSETS_TO_TXN"}


def _lines(count: int, seed: int) -> list[str]:
    return [
        " ".join(WORDS[(seed + i * 3 + j * 5) % len(WORDS)] for j in range(1 + (i + seed) % 4))
        for i in range(count)
    ]


def _produce(bootstrap: str, topic: str, lines: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i, line in enumerate(lines):
        producer.produce(topic, key=f"line-{i}", value=line)
    assert producer.flush(30) == 0


def test_streams_exactly_once_v2_word_count_through_broker_kill(java, target, tmp_path):
    """Half the lines, the application counting with exactly_once_v2, a broker killed with
    SIGKILL, the other half: the counts come out exact, on the output (read_committed) and in
    the changelog, and every word's counts on the output go 1, 2, 3... without a repeat."""
    app_id = "wordcount-eos"
    create_topics(target, f"in-{app_id}", f"out-{app_id}")
    first, second = _lines(300, 3), _lines(300, 4)
    expected = dict(Counter(word for line in first + second for word in line.split()))
    _produce(target.bootstrap, f"in-{app_id}", first)
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    command = java.command(
        "WordCount", target.bootstrap, app_id, f"in-{app_id}", f"out-{app_id}",
        str(tmp_path / "state"), str(tmp_path / "expected.json"), "150", "exactly_once_v2", "3",
        classpath_module="clients", log_requests=target.is_minibroker,
    )  # fmt: skip
    log = tmp_path / "streams.log"
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log.open("w"), text=True)
    if target.is_minibroker:
        java.request_log.broker_killed.add(java.request_log.files[-1])

    def wait_for(prefix: str) -> str:
        for line in process.stdout:
            if line.startswith(prefix):
                return line
        raise AssertionError(f"WordCount ended before {prefix!r}:\n{log.read_text()[-4000:]}")

    try:
        wait_for("PROGRESS")
        target.kill_one()
        try:
            _produce(target.bootstrap, f"in-{app_id}", second)
            result = json.loads(wait_for("{"))
            assert process.wait(JAVA_TIMEOUT) == 0, log.read_text()[-4000:]
        finally:
            target.restart_it()
    finally:
        if process.poll() is None:
            process.kill()
    assert result["guarantee"] == "exactly_once_v2"
    assert result["counts"] == expected
    assert result["changelog"] == expected
    assert result["irregular"] == []
    assert result["final_state"] == "NOT_RUNNING"
