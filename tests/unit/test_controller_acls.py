"""The controller's ACL decisions and their persistence, without sockets."""

from types import SimpleNamespace

from minibroker.controller import acls as decisions
from minibroker.controller.state import ControllerState
from minibroker.controller.store import ControllerStore
from minibroker.protocol.errors import Error
from minibroker.security.authorizer.acls import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)


def creation(name="t", operation=Operation.READ, **changes):
    values = dict(
        resource_type=ResourceType.TOPIC,
        resource_name=name,
        resource_pattern_type=PatternType.LITERAL,
        principal="User:alice",
        host="*",
        operation=operation,
        permission_type=Permission.ALLOW,
    )
    values.update(changes)
    return SimpleNamespace(**values)


def request_filter(**changes):
    values = dict(
        resource_type_filter=ResourceType.ANY,
        resource_name_filter=None,
        pattern_type_filter=PatternType.ANY,
        principal_filter=None,
        host_filter=None,
        operation=Operation.ANY,
        permission_type=Permission.ANY,
    )
    values.update(changes)
    return SimpleNamespace(**values)


def test_creating_an_existing_acl_succeeds_without_a_second_copy():
    state = ControllerState()
    results, changed = decisions.create_acls(state, [creation(), creation()])
    assert [r["error_code"] for r in results] == [Error.NONE, Error.NONE] and changed
    assert len(state.acls) == 1
    _, changed = decisions.create_acls(state, [creation()])
    assert not changed


def test_an_invalid_creation_is_refused_alone():
    state = ControllerState()
    results, _ = decisions.create_acls(state, [creation(operation=Operation.ANY), creation("kept")])
    assert [r["error_code"] for r in results] == [Error.INVALID_REQUEST, Error.NONE]
    assert "operation" in results[0]["error_message"]
    assert [b.resource_name for b in state.acls] == ["kept"]


def test_v0_creations_are_literal():
    v0 = creation()
    del v0.resource_pattern_type
    assert decisions.binding_of(v0).pattern_type == PatternType.LITERAL


def test_each_binding_is_deleted_and_reported_once_by_the_first_filter_matching_it():
    state = ControllerState()
    decisions.create_acls(state, [creation("a"), creation("b"), creation("c", Operation.WRITE)])
    results, changed = decisions.delete_acls(
        state,
        [
            request_filter(resource_name_filter="a"),
            request_filter(operation=Operation.READ),
            request_filter(resource_type_filter=ResourceType.UNKNOWN),
        ],
    )
    assert changed
    assert [[m["resource_name"] for m in r["matching_acls"]] for r in results] == [
        ["a"],
        ["b"],
        [],
    ]
    assert results[2]["error_code"] == Error.INVALID_REQUEST
    assert [b.resource_name for b in state.acls] == ["c"]


def test_described_resources_group_bindings_by_pattern():
    bindings = [
        AclBinding(2, "t", 3, "User:a", "*", 3, 3),
        AclBinding(2, "t", 4, "User:a", "*", 3, 3),
        AclBinding(2, "t", 3, "User:b", "*", 4, 2),
    ]
    described = decisions.described_resources(bindings)
    assert [(r["resource_name"], r["pattern_type"], len(r["acls"])) for r in described] == [
        ("t", 3, 2),
        ("t", 4, 1),
    ]


def test_acls_survive_the_store(tmp_path):
    store = ControllerStore(tmp_path / "state.json")
    state = ControllerState()
    decisions.create_acls(
        state, [creation("a"), creation("p", resource_pattern_type=PatternType.PREFIXED)]
    )
    store.save(state)
    assert store.load().acls == state.acls
