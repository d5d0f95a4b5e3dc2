"""ACLs on a cluster: decided by the controller, pushed to every broker and enforced there,
given again to a broker that restarts."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
)

from minibroker.security.authorizer import acls as model
from minibroker.tools.launcher import Cluster
from tests.cluster.conftest import CLUSTER_OVERRIDES, CONVERGENCE_TIMEOUT
from tests.conftest import exchange, wait_for
from tests.integration.authz import (
    NODE_ACLS,
    STANDARD_AUTHORIZER,
    binding,
    on_cluster,
    seeded_with,
)
from tests.integration.test_acl_apis import confluent_binding, describe_everything


def produce_errors(bootstrap: str, topic: str) -> set[int]:
    """The delivery errors (0: delivered) of one record to each of the topic's partitions."""
    reports = []
    for partition in range(3):
        # A fresh producer each: librdkafka refuses further records to a topic it was told
        # it may not write.
        producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15000})
        producer.produce(
            topic, b"value", partition=partition, on_delivery=lambda e, _: reports.append(e)
        )
        assert producer.flush(20) == 0
    assert len(reports) == 3
    return {0 if error is None else error.code() for error in reports}


def described(bootstrap: str) -> list[tuple]:
    """The ACLs one broker answers DescribeAcls with, from its own copy."""
    response = exchange(bootstrap, describe_everything())
    assert response.error_code.value == 0
    return sorted(
        (resource.resource_name, acl.operation, acl.permission_type)
        for resource in response.resources
        for acl in resource.acls
    )


def test_acls_reach_every_broker_and_a_restarted_one(tmp_path: Path):
    seeded = [
        *NODE_ACLS,
        on_cluster(model.Operation.ALTER),
        on_cluster(model.Operation.DESCRIBE),
        on_cluster(model.Operation.CREATE),
        binding("orders", model.Operation.ALL),
    ]
    (tmp_path / "controller").mkdir()
    seeded_with(seeded)(tmp_path / "controller")
    overrides = {**CLUSTER_OVERRIDES, "authorizer.class.name": STANDARD_AUTHORIZER}
    cluster = Cluster.start(tmp_path, brokers=3, overrides=overrides)
    try:
        first, second, third = cluster.brokers.values()
        admin = AdminClient({"bootstrap.servers": second.bootstrap})
        admin.create_topics([NewTopic("orders", 3, 3)])["orders"].result(15)
        assert produce_errors(first.bootstrap, "orders") == {0}
        created: AclBinding = confluent_binding(
            "orders", AclOperation.WRITE, AclPermissionType.DENY
        )
        for future in admin.create_acls([created]).values():
            future.result(15)
        expected = sorted(
            [(b.resource_name, b.operation, b.permission) for b in seeded]
            + [("orders", model.Operation.WRITE, model.Permission.DENY)]
        )
        # The controller answers once the live brokers have the change, and each enforces it
        # (the three partitions are led by the three brokers).
        for broker in (first, second, third):
            assert described(broker.bootstrap) == expected, broker.node_id
        assert produce_errors(first.bootstrap, "orders") == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
        third.stop()
        third.restart()
        cluster.wait_ready()
        wait_for(
            lambda: described(third.bootstrap) == expected,
            CONVERGENCE_TIMEOUT,
            "the restarted broker to hold the cluster's ACLs",
        )
        assert produce_errors(third.bootstrap, "orders") == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    finally:
        cluster.stop()
