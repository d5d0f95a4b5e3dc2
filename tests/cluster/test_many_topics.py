"""A thousand topics in one CreateTopics and one DeleteTopics: answered within the client's
timeout, and no broker misses a heartbeat meanwhile (nobody is fenced)."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from minibroker.tools.launcher import Cluster

TOPICS = 1000
CLIENT_TIMEOUT_S = 60


def test_a_thousand_topics_created_and_deleted_with_nobody_fenced(cluster: Cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    names = [f"many-{index:04d}" for index in range(TOPICS)]
    created = admin.create_topics(
        [NewTopic(name, 1, 3) for name in names],
        request_timeout=CLIENT_TIMEOUT_S,
        operation_timeout=CLIENT_TIMEOUT_S,
    )
    for future in created.values():
        future.result(timeout=CLIENT_TIMEOUT_S + 10)
    listed = admin.list_topics(timeout=30).topics
    assert set(names) <= set(listed)
    assert all(len(listed[name].partitions[0].replicas) == 3 for name in names)

    deleted = admin.delete_topics(
        names, request_timeout=CLIENT_TIMEOUT_S, operation_timeout=CLIENT_TIMEOUT_S
    )
    for future in deleted.values():
        future.result(timeout=CLIENT_TIMEOUT_S + 10)
    assert not set(names) & set(admin.list_topics(timeout=30).topics)
    controller_log = cluster.controller.stderr_path.read_text()
    assert "fenced" not in controller_log, "a broker missed its heartbeats meanwhile"
