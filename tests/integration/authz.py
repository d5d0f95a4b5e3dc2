"""Brokers with an authorizer, for the authorization tests.

The clients under test connect as User:ANONYMOUS on PLAINTEXT, so the ACLs under test name
User:ANONYMOUS or User:*. The ``secured`` fixture (tests/integration/conftest.py) gives a
test the module's broker for its configuration (SecuredBroker, started by the first test that
asks), with the authorizer on and the node's own ACLs seeded into its controller's state, the
way a cluster's ACLs persist: the broker's own connections to itself need CLUSTER_ACTION,
which the seed grants (NODE_ACLS) unless told otherwise. Each broker also has a
SASL_PLAINTEXT listener where User:admin, a super user, grants a test's ACLs before it starts
(waiting until the broker's own copy holds them) and deletes them, by filters naming exactly
those bindings, when it ends, checking that only the node's ACLs are left; so each test sees
only the node's ACLs and its own, and uses topics, groups and users of its own.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
)
from confluent_kafka.admin import ResourceType as AdminResourceType

from minibroker.controller.state import ControllerState
from minibroker.controller.store import STATE_FILE, ControllerStore
from minibroker.security.authorizer import acls as model
from minibroker.tools.launcher import BrokerProcess, free_port
from tests.conftest import BROKER_READY_TIMEOUT, wait_for
from tests.security_setup import PLAIN_JAAS, PLAIN_USERS

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANONYMOUS = "User:ANONYMOUS"
ADMIN = "User:admin"  # a super user on every secured broker, on its SASL_PLAINTEXT listener


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


class SecuredBroker:
    """A broker with StandardAuthorizer, and an admin client for its ACLs."""

    def __init__(self, process: BrokerProcess, sasl_port: int, node_acls):
        self.process = process
        self.node_acls = {confluent(acl) for acl in node_acls}
        self.bootstrap = process.bootstrap
        self.node_id = process.node_id
        self.admin = AdminClient(
            {
                "bootstrap.servers": f"127.0.0.1:{sasl_port}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN",
                "sasl.username": "admin",
                "sasl.password": PLAIN_USERS["admin"],
            }
        )

    def described(self) -> set[AclBinding]:
        """The broker's own copy of the ACLs (DescribeAcls is answered from it)."""
        return set(self.admin.describe_acls(exact_filter(None)).result(15))

    def grant(self, acls) -> None:
        if not acls:
            return
        wanted = [confluent(acl) for acl in acls]
        for future in self.admin.create_acls(wanted).values():
            future.result(15)
        wait_for(lambda: set(wanted) <= self.described(), 15, f"the broker to hold {wanted}")

    def revoke(self, acls) -> None:
        self._delete([confluent(acl) for acl in acls])

    def revoke_all_but_the_nodes(self) -> None:
        """Delete every ACL but the node's own (those a test created with its own client)."""
        self._delete(list(self.described() - self.node_acls))

    def _delete(self, unwanted: list[AclBinding]) -> None:
        if not unwanted:
            return
        filters = [exact_filter(acl) for acl in unwanted]
        for future in self.admin.delete_acls(filters).values():
            future.result(15)
        wait_for(lambda: not set(unwanted) & self.described(), 15, f"the broker to drop {unwanted}")

    def wait_ready(self) -> None:
        self.process.wait_ready(BROKER_READY_TIMEOUT)

    def stop(self) -> int:
        return self.process.stop()

    def restart(self) -> None:
        """Start it again (stopped or not) on the same ports and data, and wait until ready."""
        self.process.restart()
        self.wait_ready()


def confluent(acl: model.AclBinding) -> AclBinding:
    return AclBinding(
        AdminResourceType(acl.resource_type),
        acl.resource_name,
        ResourcePatternType(acl.pattern_type),
        acl.principal,
        acl.host,
        AclOperation(acl.operation),
        AclPermissionType(acl.permission),
    )


def exact_filter(acl: AclBinding | None) -> AclBindingFilter:
    """A filter matching only ``acl`` (every ACL for None)."""
    if acl is None:
        return AclBindingFilter(
            AdminResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    return AclBindingFilter(
        acl.restype,
        acl.name,
        acl.resource_pattern_type,
        acl.principal,
        acl.host,
        acl.operation,
        acl.permission_type,
    )


def check_left_clean(broker: SecuredBroker) -> None:
    assert broker.described() == broker.node_acls, "ACLs left behind for the next test"


def start_secured_broker(directory: Path, overrides=None, node_acls=NODE_ACLS) -> SecuredBroker:
    """A broker with StandardAuthorizer, ``node_acls`` seeded, ``overrides`` on top, a
    PLAINTEXT listener for the clients under test and a SASL_PLAINTEXT one for User:admin.
    Started, not waited for: the caller keeps it (to stop it whatever happens) and then calls
    ``wait_ready``."""
    overrides = dict(overrides or {})
    port, sasl_port = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    super_users = ";".join(
        dict.fromkeys([ADMIN, *filter(None, overrides.pop("super.users", "").split(";"))])
    )
    properties = {
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "listeners": listeners,
        "advertised.listeners": listeners,
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "super.users": super_users,
        **overrides,
    }
    log_dir = directory / "data"
    log_dir.mkdir(parents=True)
    seeded_with(node_acls)(log_dir)
    process = BrokerProcess.start(node_id=1, log_dir=log_dir, port=port, overrides=properties)
    return SecuredBroker(process, sasl_port, node_acls)
