"""CreateAcls, DescribeAcls and DeleteAcls with real admin clients, and Kafka's refusals.

The tests with an authorizer share the module's broker (tests/integration/conftest.py's
``secured``): each test's ACLs, those granted for it and those it creates with its own
client, are deleted when it ends, and the broker is checked to hold only the node's own
again, so that a listing holds the test's ACLs alone. The test without one runs on the
worker's shared broker (tests/conftest.py's SHARED_BROKER).
"""

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from minibroker.security.authorizer import acls as model
from minibroker.testing import Cluster
from tests.conftest import SHARED_BROKER, exchange
from tests.integration.authz import ANONYMOUS, on_cluster

pytestmark = SHARED_BROKER


@pytest.fixture
def broker(kafka_broker: Cluster) -> Cluster:
    """The worker's shared broker (no authorizer)."""
    return kafka_broker


@pytest.fixture
def secured(secured):
    """The module's secured broker (tests/integration/conftest.py), from which the ACLs the
    test created with its own client are deleted when it ends, before that fixture checks
    that only the node's own are left."""
    used = []

    def start(*args, **kwargs):
        used.append(secured(*args, **kwargs))
        return used[-1]

    yield start
    for broker in used:
        broker.revoke_all_but_the_nodes()


def confluent_binding(name, operation, permission=AclPermissionType.ALLOW, **changes):
    values = dict(
        restype=ResourceType.TOPIC,
        name=name,
        resource_pattern_type=ResourcePatternType.LITERAL,
        principal=ANONYMOUS,
        host="*",
        operation=operation,
        permission_type=permission,
    )
    values.update(changes)
    return AclBinding(**values)


def every_topic_acl() -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType.TOPIC,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )


def describe_everything(resource_type=model.ResourceType.ANY) -> DescribeAclsRequest:
    return DescribeAclsRequest(
        resource_type_filter=i8(resource_type),
        resource_name_filter=None,
        pattern_type_filter=i8(model.PatternType.ANY),
        principal_filter=None,
        host_filter=None,
        operation=i8(model.Operation.ANY),
        permission_type=i8(model.Permission.ANY),
    )


def test_acl_apis_answer_security_disabled_without_an_authorizer(broker):
    # (librdkafka's describe_acls drops DescribeAcls' top-level error: the raw answer.)
    assert exchange(broker.bootstrap_servers, describe_everything()).error_code == (
        ErrorCode.security_disabled
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    created = admin.create_acls([confluent_binding("t", AclOperation.READ)])
    with pytest.raises(KafkaException) as refused:
        list(created.values())[0].result(15)
    assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_confluent_admin_creates_describes_and_deletes_acls(secured):
    broker = secured(acls=[on_cluster(model.Operation.ALTER)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    read = confluent_binding("orders", AclOperation.READ)
    deny = confluent_binding("orders", AclOperation.WRITE, AclPermissionType.DENY)
    prefixed = confluent_binding(
        "logs-", AclOperation.WRITE, resource_pattern_type=ResourcePatternType.PREFIXED
    )
    for future in admin.create_acls([read, deny, prefixed]).values():
        future.result(15)
    assert sorted(map(str, admin.describe_acls(every_topic_acl()).result(15))) == sorted(
        map(str, [read, deny, prefixed])
    )
    only_orders = AclBindingFilter(
        ResourceType.TOPIC,
        "orders",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert sorted(map(str, admin.describe_acls(only_orders).result(15))) == sorted(
        map(str, [read, deny])
    )
    deny_filter = AclBindingFilter(
        ResourceType.TOPIC,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.DENY,
    )
    deleted = admin.delete_acls([deny_filter])[deny_filter].result(15)
    assert [str(acl) for acl in deleted] == [str(deny)]
    assert sorted(map(str, admin.describe_acls(every_topic_acl()).result(15))) == sorted(
        map(str, [read, prefixed])
    )


def test_kafka_python_admin_creates_describes_and_deletes_acls(secured):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KafkaPythonResourceType

    broker = secured(acls=[on_cluster(model.Operation.ALTER)])
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        pattern = ResourcePattern(KafkaPythonResourceType.GROUP, "readers")
        acl = ACL(ANONYMOUS, "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)
        result = admin.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        groups = ACLFilter(
            None,
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(KafkaPythonResourceType.GROUP, None, ACLResourcePatternType.ANY),
        )
        described, error = admin.describe_acls(groups)
        assert error.errno == 0
        assert described == [acl]
        [(_, deleted, error)] = admin.delete_acls([groups])
        assert error.errno == 0 and deleted == [acl]
        assert admin.describe_acls(groups)[0] == []
    finally:
        admin.close()


def test_acls_survive_a_restart(secured):
    broker = secured(acls=[on_cluster(model.Operation.ALTER)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    kept = confluent_binding("kept", AclOperation.DESCRIBE)
    for future in admin.create_acls([kept]).values():
        future.result(15)
    broker.stop()
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert [str(acl) for acl in admin.describe_acls(every_topic_acl()).result(15)] == [str(kept)]


def test_invalid_bindings_and_filters_get_invalid_request(secured):
    broker = secured(acls=[on_cluster(model.Operation.ALTER)])

    def creation(**changes):
        values = dict(
            resource_type=i8(model.ResourceType.TOPIC),
            resource_name="t",
            resource_pattern_type=i8(model.PatternType.LITERAL),
            principal=ANONYMOUS,
            host="*",
            operation=i8(model.Operation.READ),
            permission_type=i8(model.Permission.ALLOW),
        )
        values.update(changes)
        return AclCreation(**values)

    response = exchange(
        broker.bootstrap,
        CreateAclsRequest(
            creations=(
                creation(operation=i8(model.Operation.ANY)),
                creation(resource_pattern_type=i8(model.PatternType.MATCH)),
                creation(resource_type=i8(model.ResourceType.CLUSTER), resource_name="x"),
                creation(principal="nobody"),
                creation(),
            )
        ),
    )
    codes = [result.error_code for result in response.results]
    assert codes == [ErrorCode.invalid_request] * 4 + [ErrorCode.none]
    described = exchange(broker.bootstrap, describe_everything(model.ResourceType.UNKNOWN))
    assert described.error_code == ErrorCode.invalid_request
    # The broker goes on serving: the valid creation is there.
    admin = _admin(broker)
    assert [str(acl) for acl in admin.describe_acls(every_topic_acl()).result(15)] == [
        str(confluent_binding("t", AclOperation.READ))
    ]


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def test_acl_changes_need_alter_and_describe_on_the_cluster(secured):
    broker = secured()  # CLUSTER_ACTION only: neither ALTER nor DESCRIBE
    assert exchange(broker.bootstrap, describe_everything()).error_code == (
        ErrorCode.cluster_authorization_failed
    )
    admin = _admin(broker)
    created = admin.create_acls([confluent_binding("t", AclOperation.READ)])
    with pytest.raises(KafkaException) as refused:
        list(created.values())[0].result(15)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    deleted = admin.delete_acls([every_topic_acl()])
    with pytest.raises(KafkaException) as refused:
        list(deleted.values())[0].result(15)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
