"""The Java client (kafka-clients 4.x) with `group.protocol=consumer` (KIP-848, its
AsyncKafkaConsumer) on a 3-broker minibroker cluster: programs/ConsumerProtocolChecks.java runs
two members of one group over a topic of 6 partitions and prints what it saw."""

from __future__ import annotations

import pytest

PARTITIONS = 6
RECORDS = 600


@pytest.fixture(scope="module")
def answers(java, java_cluster) -> dict:
    return java.json("ConsumerProtocolChecks", java_cluster.bootstrap, "mb", "3")


def test_two_java_members_share_the_partitions_and_read_every_record_once(answers):
    assert "error" not in answers, answers
    assert answers["read"] == RECORDS
    assert answers["read_twice"] == 0
    assert answers["split"] is True
    assert sum(answers["assignment_sizes"]) == PARTITIONS
    assert all(size > 0 for size in answers["assignment_sizes"])
    assert answers["group_type"] == "Consumer"  # GroupType.CONSUMER
    assert answers["members"] == 2
    assert answers["committed_sum"] == RECORDS
