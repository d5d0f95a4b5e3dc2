"""The ACL rules, without sockets: cases after Kafka's StandardAuthorizerTest."""

import pytest

from minibroker.common.config import BrokerConfig, ConfigError
from minibroker.security.authorizer import authorizer_from_config
from minibroker.security.authorizer.acls import (
    AclBinding,
    AclFilter,
    Authorizer,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"
HOST = "192.0.2.1"


def acl(
    name="foo",
    operation=Operation.READ,
    permission=ALLOW,
    principal=ALICE,
    *,
    resource_type=TOPIC,
    pattern=LITERAL,
    host="*",
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def authorizer(*acls, super_users=(), allow_if_no_acl=False) -> Authorizer:
    result = Authorizer(super_users, allow_if_no_acl)
    result.replace_acls(acls)
    return result


def allowed(
    auth: Authorizer, operation, name="foo", principal=ALICE, resource_type=TOPIC, host=HOST
):
    return auth.authorize(principal, host, operation, resource_type, name)


def test_an_allow_for_the_principal_allows_only_that_operation_and_resource():
    auth = authorizer(acl("foo", Operation.READ))
    assert allowed(auth, Operation.READ)
    assert not allowed(auth, Operation.WRITE)
    assert not allowed(auth, Operation.READ, principal=BOB)
    assert not allowed(auth, Operation.READ, name="foobar")
    assert not allowed(auth, Operation.READ, resource_type=GROUP)


def test_nothing_is_allowed_without_acls_unless_allow_everyone_if_no_acl_found():
    assert not allowed(authorizer(), Operation.READ)
    assert allowed(authorizer(allow_if_no_acl=True), Operation.READ)


def test_allow_everyone_if_no_acl_found_stops_at_the_first_acl_on_the_resource():
    auth = authorizer(acl("foo", Operation.READ, principal=BOB), allow_if_no_acl=True)
    assert not allowed(auth, Operation.READ)  # an ACL names foo: the rule no longer applies
    assert allowed(auth, Operation.READ, name="bar")  # nothing names bar


def test_deny_wins_over_allow():
    auth = authorizer(acl("foo", Operation.ALL), acl("foo", Operation.WRITE, DENY))
    assert allowed(auth, Operation.READ)
    assert not allowed(auth, Operation.WRITE)


def test_deny_all_denies_every_operation_even_with_an_allow():
    auth = authorizer(acl("foo", Operation.READ), acl("foo", Operation.ALL, DENY))
    assert not allowed(auth, Operation.READ)
    assert not allowed(auth, Operation.DESCRIBE)


def test_a_wildcard_deny_wins_over_a_literal_allow():
    auth = authorizer(acl("foo", Operation.READ), acl("*", Operation.READ, DENY))
    assert not allowed(auth, Operation.READ)


def test_read_write_delete_alter_imply_describe_and_alter_configs_implies_describe_configs():
    for operation in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER):
        assert allowed(authorizer(acl("foo", operation)), Operation.DESCRIBE), operation
    assert not allowed(authorizer(acl("foo", Operation.CREATE)), Operation.DESCRIBE)
    assert allowed(authorizer(acl("foo", Operation.ALTER_CONFIGS)), Operation.DESCRIBE_CONFIGS)
    assert not allowed(authorizer(acl("foo", Operation.DESCRIBE)), Operation.READ)


def test_a_deny_does_not_imply():
    auth = authorizer(acl("foo", Operation.DESCRIBE), acl("foo", Operation.READ, DENY))
    assert allowed(auth, Operation.DESCRIBE)
    assert not allowed(auth, Operation.READ)


def test_prefixed_patterns_cover_names_that_start_with_the_prefix():
    auth = authorizer(acl("fo", Operation.WRITE, pattern=PREFIXED))
    assert allowed(auth, Operation.WRITE, name="foo")
    assert allowed(auth, Operation.WRITE, name="fo")
    assert not allowed(auth, Operation.WRITE, name="f")
    assert not allowed(auth, Operation.WRITE, name="bar")


def test_a_prefixed_deny_wins_over_a_literal_allow():
    auth = authorizer(
        acl("foo", Operation.WRITE), acl("f", Operation.WRITE, DENY, pattern=PREFIXED)
    )
    assert not allowed(auth, Operation.WRITE)


def test_literal_wildcard_resource_covers_every_name():
    auth = authorizer(acl("*", Operation.READ))
    assert allowed(auth, Operation.READ, name="anything")


def test_wildcard_principal_matches_everyone():
    auth = authorizer(acl("foo", Operation.READ, principal="User:*"))
    assert allowed(auth, Operation.READ, principal=BOB)
    assert allowed(auth, Operation.READ, principal="User:ANONYMOUS")


def test_host_must_match_exactly_or_be_the_wildcard():
    auth = authorizer(acl("foo", Operation.READ, host=HOST))
    assert allowed(auth, Operation.READ, host=HOST)
    assert not allowed(auth, Operation.READ, host="192.0.2.2")


def test_super_users_may_do_everything_even_when_denied():
    auth = authorizer(acl("foo", Operation.ALL, DENY, principal=ALICE), super_users={ALICE})
    assert allowed(auth, Operation.DELETE)
    assert allowed(auth, Operation.CLUSTER_ACTION, name="kafka-cluster", resource_type=CLUSTER)
    assert not allowed(auth, Operation.DELETE, principal=BOB)


def test_replace_acls_forgets_the_previous_ones():
    auth = authorizer(acl("foo", Operation.READ))
    auth.replace_acls([acl("bar", Operation.READ)])
    assert not allowed(auth, Operation.READ, name="foo")
    assert allowed(auth, Operation.READ, name="bar")


def test_authorize_any_needs_an_allow_that_no_deny_covers():
    assert authorizer(acl("foo", Operation.WRITE)).authorize_any(
        ALICE, HOST, Operation.WRITE, TOPIC
    )
    assert not authorizer(acl("foo", Operation.READ)).authorize_any(
        ALICE, HOST, Operation.WRITE, TOPIC
    )
    covered = authorizer(acl("foo", Operation.WRITE), acl("*", Operation.WRITE, DENY))
    assert not covered.authorize_any(ALICE, HOST, Operation.WRITE, TOPIC)
    prefixed_deny = authorizer(
        acl("foo", Operation.WRITE), acl("f", Operation.WRITE, DENY, pattern=PREFIXED)
    )
    assert not prefixed_deny.authorize_any(ALICE, HOST, Operation.WRITE, TOPIC)
    partly = authorizer(
        acl("f", Operation.WRITE, pattern=PREFIXED), acl("foo", Operation.WRITE, DENY)
    )
    assert partly.authorize_any(ALICE, HOST, Operation.WRITE, TOPIC)


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        (acl(resource_type=ResourceType.ANY), "resourceType"),
        (acl(resource_type=ResourceType.USER), "resourceType"),
        (acl(pattern=PatternType.MATCH), "patternType"),
        (acl(operation=Operation.ANY), "operation"),
        (acl(operation=99), "operation"),
        (acl(permission=Permission.ANY), "permissionType"),
        (acl(name=""), "empty resource name"),
        (acl(name="cluster", resource_type=CLUSTER), "kafka-cluster"),
        (acl(principal="alice"), "principal"),
        (acl(host=""), "host"),
    ],
)
def test_bindings_kafka_refuses(binding, message):
    with pytest.raises(InvalidAcl, match=message):
        binding.validate()


def test_valid_bindings_pass():
    acl().validate()
    acl("kafka-cluster", Operation.CLUSTER_ACTION, resource_type=CLUSTER).validate()
    acl(
        "tx", Operation.WRITE, resource_type=ResourceType.TRANSACTIONAL_ID, pattern=PREFIXED
    ).validate()


def any_filter(**changes) -> AclFilter:
    values = dict(
        resource_type=ResourceType.ANY,
        resource_name=None,
        pattern_type=PatternType.ANY,
        principal=None,
        host=None,
        operation=Operation.ANY,
        permission=Permission.ANY,
    )
    values.update(changes)
    return AclFilter(**values)


def test_filters_select_by_each_field():
    literal, prefixed = acl("foo"), acl("fo", pattern=PREFIXED, principal=BOB)
    group = acl("g", resource_type=GROUP, operation=Operation.DESCRIBE, permission=DENY)
    bindings = [literal, prefixed, group]

    def selected(**changes):
        return [b for b in bindings if any_filter(**changes).matches(b)]

    assert selected() == bindings
    assert selected(resource_type=TOPIC) == [literal, prefixed]
    assert selected(resource_name="foo") == [literal]
    assert selected(pattern_type=PREFIXED) == [prefixed]
    assert selected(principal=BOB) == [prefixed]
    assert selected(host="*") == bindings
    assert selected(host=HOST) == []
    assert selected(operation=Operation.DESCRIBE) == [group]
    assert selected(permission=DENY) == [group]


def test_match_filters_select_what_applies_to_a_resource():
    literal, wildcard, prefixed, other = (
        acl("foo"),
        acl("*"),
        acl("fo", pattern=PREFIXED),
        acl("bar"),
    )
    bindings = [literal, wildcard, prefixed, other]
    match = any_filter(resource_type=TOPIC, resource_name="foo", pattern_type=PatternType.MATCH)
    assert [b for b in bindings if match.matches(b)] == [literal, wildcard, prefixed]


@pytest.mark.parametrize(
    "changes",
    [
        {"resource_type": ResourceType.UNKNOWN},
        {"pattern_type": PatternType.UNKNOWN},
        {"operation": Operation.UNKNOWN},
        {"permission": Permission.UNKNOWN},
        {"operation": 77},
    ],
)
def test_filters_with_unknown_values_are_refused(changes):
    with pytest.raises(InvalidAcl):
        any_filter(**changes).validate()


def test_authorizer_is_off_by_default_and_on_with_kafkas_class_names():
    assert authorizer_from_config(BrokerConfig.from_properties({})) is None
    for name in (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
    ):
        config = BrokerConfig.from_properties(
            {
                "authorizer.class.name": name,
                "super.users": "User:admin; User:ops",
                "allow.everyone.if.no.acl.found": "true",
            }
        )
        auth = authorizer_from_config(config)
        assert auth.super_users == {"User:admin", "User:ops"}
        assert auth.allow_if_no_acl


def test_unknown_authorizer_and_bad_super_users_are_refused_by_name():
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        BrokerConfig.from_properties({"authorizer.class.name": "com.example.MyAuthorizer"})
    with pytest.raises(ConfigError, match="super.users"):
        BrokerConfig.from_properties({"super.users": "admin"})
