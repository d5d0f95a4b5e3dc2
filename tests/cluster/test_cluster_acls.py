"""ACLs on a cluster: decided by the controller, pushed to every broker, given again to a
broker that restarts."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient

from broker.authorizer import acls as model
from broker.launcher import Cluster
from tests.cluster.conftest import CLUSTER_OVERRIDES, CONVERGENCE_TIMEOUT
from tests.conftest import exchange, wait_for
from tests.integration.authz import NODE_ACLS, STANDARD_AUTHORIZER, on_cluster, seeded_with
from tests.integration.test_acl_apis import confluent_binding, describe_everything


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
    seeded = [*NODE_ACLS, on_cluster(model.Operation.ALTER), on_cluster(model.Operation.DESCRIBE)]
    (tmp_path / "controller").mkdir()
    seeded_with(seeded)(tmp_path / "controller")
    overrides = {**CLUSTER_OVERRIDES, "authorizer.class.name": STANDARD_AUTHORIZER}
    cluster = Cluster.start(tmp_path, brokers=3, overrides=overrides)
    try:
        first, second, third = cluster.brokers.values()
        admin = AdminClient({"bootstrap.servers": second.bootstrap})
        created: AclBinding = confluent_binding(
            "orders", AclOperation.WRITE, AclPermissionType.DENY
        )
        for future in admin.create_acls([created]).values():
            future.result(15)
        expected = sorted(
            [
                ("kafka-cluster", model.Operation.CLUSTER_ACTION, model.Permission.ALLOW),
                ("kafka-cluster", model.Operation.ALTER, model.Permission.ALLOW),
                ("kafka-cluster", model.Operation.DESCRIBE, model.Permission.ALLOW),
                ("orders", model.Operation.WRITE, model.Permission.DENY),
            ]
        )
        # The controller answers once the live brokers have the change.
        for broker in (first, second, third):
            assert described(broker.bootstrap) == expected, broker.node_id
        third.stop()
        third.restart()
        cluster.wait_ready()
        wait_for(
            lambda: described(third.bootstrap) == expected,
            CONVERGENCE_TIMEOUT,
            "the restarted broker to hold the cluster's ACLs",
        )
    finally:
        cluster.stop()
