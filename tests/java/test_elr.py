"""Eligible leader replicas (KIP-966) on a 3-broker minibroker cluster, seen by real clients and
by Kafka 4.4's `kafka-topics --describe`.

RF 3, min.insync.replicas 2, acks=all records (confluent-kafka); one follower stalls (SIGSTOP),
the ISR shrinks to two and acks=all still succeeds; the other follower stalls, the ISR is the
leader alone and acks=all is refused (NOT_ENOUGH_REPLICAS: nothing more is acknowledged), while
the stalled follower becomes an eligible leader replica; the leader is killed (SIGKILL), the ISR
empties. The first stalled follower comes back: it missed acknowledged records, so it may not
lead and the partition waits (it stalls again). The second comes back: elected from the ELR,
and `kafka-topics --describe` prints the ELR columns as on Kafka 4.4. Once the first catches up
and rejoins, the ISR meets min ISR, the ELR is empty, and the new leader serves every
acknowledged record (its high watermark stays put while its ISR is below min ISR).

The cluster is this module's own (brokers are stopped and killed), on the cluster tests' short
sessions (1.5 s), so the whole run takes seconds plus one JVM start.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_topic_partitions.v0.request import (
    DescribeTopicPartitionsRequest,
    TopicRequest,
)
from kio.schema.errors import ErrorCode

from tests.cluster.conftest import (
    CONVERGENCE_TIMEOUT,
    produce_acks_all,
    produce_raw,
    read_partitions,
)
from tests.conftest import exchange, wait_for
from tests.java.conftest import minibroker_cluster

TOPIC = "elr"
TOPICS = "org.apache.kafka.tools.TopicCommand"


@pytest.fixture(scope="module")
def elr_cluster(tmp_path_factory):
    with minibroker_cluster(tmp_path_factory.mktemp("elr-cluster")) as started:
        yield started


def partition_view(broker) -> tuple[int, list[int], list[int], list[int]] | None:
    """(leader, ISR, ELR, last-known ELR) of elr-0 as DescribeTopicPartitions answers on this
    broker; None before it knows the topic."""
    request = DescribeTopicPartitionsRequest(
        topics=(TopicRequest(name=TOPIC),), response_partition_limit=10, cursor=None
    )
    (topic,) = exchange(broker.bootstrap, request).topics
    if topic.error_code != ErrorCode.none or not topic.partitions:
        return None
    (p,) = topic.partitions
    return (
        p.leader_id,
        list(p.isr_nodes),
        list(p.eligible_leader_replicas),
        list(p.last_known_elr),
    )


def settles(broker, expected) -> None:
    wait_for(
        lambda: partition_view(broker) == expected,
        CONVERGENCE_TIMEOUT,
        f"elr-0 to be (leader, ISR, ELR, last-known ELR) {expected} on broker {broker.node_id}",
        0.05,
    )


def refused(leader) -> bool:
    """True once the leader refuses acks=all with NOT_ENOUGH_REPLICAS. Its partition may learn
    the smaller ISR a moment after its metadata does: until then the append waits for the
    stalled follower and times out (REQUEST_TIMED_OUT, or NOT_ENOUGH_REPLICAS_AFTER_APPEND),
    unacknowledged. An acknowledgement fails the test."""
    answer = produce_raw(leader, TOPIC, 0, [b"never-acknowledged"], acks=-1, timeout_ms=1000)
    assert answer.error_code in (
        ErrorCode.not_enough_replicas,
        ErrorCode.request_timed_out,
        ErrorCode.not_enough_replicas_after_append,
    ), answer
    return answer.error_code == ErrorCode.not_enough_replicas


def values(label: str, count: int) -> list[tuple[int, bytes]]:
    return [(0, f"{label}-{i}".encode()) for i in range(count)]


def test_a_leader_is_elected_from_the_elr_and_nothing_acknowledged_is_lost(
    elr_cluster, java, tmp_path
):
    cluster = elr_cluster
    one, two, three = (cluster.brokers[node_id] for node_id in (1, 2, 3))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(
        TOPIC, num_partitions=1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"}
    )
    admin.create_topics([topic])[TOPIC].result(30)
    cluster.wait_for_isr(TOPIC, 0, [1, 2, 3], CONVERGENCE_TIMEOUT)

    acknowledged = produce_acks_all(cluster.bootstrap, TOPIC, values("all-three", 50))
    two.pause()  # a stalled follower: its session expires, it leaves the ISR
    settles(one, (1, [1, 3], [], []))  # still at min ISR: no ELR
    acknowledged |= produce_acks_all(one.bootstrap, TOPIC, values("one-and-three", 50))
    three.pause()
    # Below min ISR: broker 3 was in the ISR when it last met min ISR, so it holds every
    # acknowledged record and becomes eligible; broker 2 (out since) does not.
    settles(one, (1, [1], [3], []))
    wait_for(lambda: refused(one), CONVERGENCE_TIMEOUT, "acks=all refused below min ISR")

    one.kill()  # the leader, the last ISR member: no leader, the ISR empties
    two.resume()  # comes back; not eligible, so the partition waits
    two.wait_ready(CONVERGENCE_TIMEOUT)
    settles(two, (-1, [], [1, 3], [1]))
    two.pause()  # again, so that it cannot catch up and refill the ISR before we look
    three.resume()  # an eligible leader replica: elected, alone in the ISR
    three.wait_ready(CONVERGENCE_TIMEOUT)
    settles(three, (3, [3], [1], []))

    # Kafka 4.4's kafka-topics --describe (DescribeTopicPartitions) prints the ELR columns.
    batch = tmp_path / "batch.json"
    answers = tmp_path / "answers.json"
    bootstrap = f"127.0.0.1:{three.port}"
    batch.write_text(
        json.dumps(
            [
                {
                    "name": "topics-describe",
                    "main": TOPICS,
                    "args": ["--bootstrap-server", bootstrap, "--describe", "--topic", TOPIC],
                }
            ]
        )
    )
    done = java.run("ToolBatch", str(batch), str(answers))
    assert done.returncode == 0, done.stderr[-4000:]
    (answer,) = json.loads(answers.read_text())
    assert answer["exit"] == 0, answer
    assert (
        "Partition: 0\tLeader: 3\tReplicas: 1,2,3\tIsr: 3\tElr: 1\tLastKnownElr: \n"
        in answer["stdout"]
    ), answer["stdout"]

    # Broker 2 catches up and rejoins: the ISR meets min ISR again and the ELR is cleared.
    two.resume()
    wait_for(
        lambda: (
            (view := partition_view(three))
            and (view[0], sorted(view[1]), *view[2:]) == (3, [2, 3], [], [])
        ),
        CONVERGENCE_TIMEOUT,
        "broker 2 back in the ISR and the ELR cleared",
    )
    # Read only now: alone in the ISR, below min ISR, broker 3 keeps the high watermark it
    # had as a follower (Kafka 4.4's Partition.maybeIncrementLeaderHW), which may be short of
    # the last acknowledged records if it was paused before their HW reached it; with the ISR
    # back at min ISR it moves, and every acknowledged record is served.
    read = read_partitions(f"127.0.0.1:{three.port}", TOPIC, 1)
    assert {
        offset: value for offset, value in acknowledged.items() if read.get(offset) != value
    } == {}
    assert len(acknowledged) == 100
