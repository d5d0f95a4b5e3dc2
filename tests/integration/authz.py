"""Brokers with an authorizer and a seeded ACL set, for the authorization tests.

Until authentication exists every connection is User:ANONYMOUS, so the ACLs under test name
User:ANONYMOUS or User:*. The ``secured`` fixture (tests/integration/conftest.py) starts a
broker with the authorizer on and ACLs seeded into its controller's state, the way a
cluster's ACLs persist; the broker's own connections to itself need CLUSTER_ACTION, which the
seed grants (NODE_ACLS) unless told otherwise. Once SASL exists, a test passes its own
principals and ``super.users`` in the same way.
"""

from minibroker.controller.state import ControllerState
from minibroker.controller.store import STATE_FILE, ControllerStore
from minibroker.security.authorizer import acls as model

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANONYMOUS = "User:ANONYMOUS"


def binding(
    name: str,
    operation: model.Operation,
    permission: model.Permission = model.Permission.ALLOW,
    *,
    principal: str = ANONYMOUS,
    resource_type: model.ResourceType = model.ResourceType.TOPIC,
    pattern: model.PatternType = model.PatternType.LITERAL,
) -> model.AclBinding:
    return model.AclBinding(resource_type, name, pattern, principal, "*", operation, permission)


def on_cluster(operation: model.Operation) -> model.AclBinding:
    return binding(model.CLUSTER_NAME, operation, resource_type=model.ResourceType.CLUSTER)


# What the broker's own inter-node connections (User:ANONYMOUS on PLAINTEXT) need.
NODE_ACLS = (on_cluster(model.Operation.CLUSTER_ACTION),)


def seeded_with(acls):
    """A ``prepare`` for broker_factory: the controller state of a new node, holding ``acls``."""

    def seed(log_dir):
        ControllerStore(log_dir / STATE_FILE).save(ControllerState(acls=list(acls)))

    return seed
