"""controller_mutation_rate in a cluster whose brokers forward CreateTopics and DeleteTopics to
a separate controller: the broker that receives the request applies the client's quota (pushed
to it by the controller) before forwarding, counting the partitions of a topic to delete from
its own metadata; each broker keeps its own bucket (see README "Quotas" for why here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import CLUSTER_OVERRIDES, CONVERGENCE_TIMEOUT, _check_clean_stop
from tests.conftest import exchange, wait_for
from tests.integration.test_client_quotas import alter, entity, setting

MUTATION_RATE = 2.0  # the bucket holds quota.window.num (2) x 1 s x 2 = 4 partitions


@pytest.fixture
def quota_cluster(tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster.start(
        tmp_path, brokers=3, overrides={**CLUSTER_OVERRIDES, "quota.window.num": 2}
    )
    yield started
    _check_clean_stop(started)


def create_topics(bootstrap: str, sizes: dict[str, int]):
    request = codec.build(
        codec.request_class(ApiKey.CREATE_TOPICS, 7),
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": (),
                    "configs": (),
                }
                for name, partitions in sizes.items()
            ],
            "timeout": 10_000,
            "validate_only": False,
        },
    )
    return exchange(bootstrap, request, client_id="mutator", timeout=20.0)


def test_the_receiving_broker_applies_the_mutation_quota(quota_cluster):
    first, second, third = (quota_cluster.brokers[node] for node in (1, 2, 3))
    answer = alter(
        first.bootstrap,
        [
            {
                "entity": entity(client_id="mutator"),
                "ops": [setting("controller_mutation_rate", MUTATION_RATE)],
            }
        ],
    )
    # Answered once every live broker has it (the controller's push).
    assert [entry.error_code for entry in answer.entries] == [Error.NONE]
    created = create_topics(second.bootstrap, {"big-0": 4, "big-1": 40, "big-2": 1})
    assert [(t.name, t.error_code) for t in created.topics] == [
        ("big-2", Error.THROTTLING_QUOTA_EXCEEDED),
        ("big-0", Error.NONE),
        ("big-1", Error.NONE),
    ], created
    # -40 / 2 per second: long enough that the checks below all come before it is over.
    assert created.throttle_time.total_seconds() == 20.0

    def knows_big_1() -> bool:
        metadata = exchange(
            third.bootstrap,
            codec.build(
                codec.request_class(ApiKey.METADATA, 12),
                {
                    "topics": [{"name": "big-1", "topic_id": None}],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            ),
        )
        return [len(t.partitions) for t in metadata.topics if t.error_code == 0] == [40]

    wait_for(knows_big_1, CONVERGENCE_TIMEOUT, "the third broker to learn big-1's partitions")
    # The third broker has its own bucket (full: 4). Deleting big-1 takes its 40 partitions,
    # counted from the third broker's metadata: accepted, then throttled for 18 s.
    delete = codec.build(
        codec.request_class(ApiKey.DELETE_TOPICS, 6),
        {"topics": [{"name": "big-1", "topic_id": None}], "timeout": 10_000},
    )
    deleted = exchange(third.bootstrap, delete, client_id="mutator", timeout=20.0)
    assert [r.error_code for r in deleted.responses] == [Error.NONE], deleted
    assert deleted.throttle_time.total_seconds() == 18.0
    # The second broker's bucket is still below zero: it refuses at once.
    refused = create_topics(second.bootstrap, {"big-3": 1})
    assert [t.error_code for t in refused.topics] == [Error.THROTTLING_QUOTA_EXCEEDED]
