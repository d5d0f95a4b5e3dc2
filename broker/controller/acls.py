"""The controller's ACL decisions: CreateAcls and DeleteAcls on its state.

Pure, like ``state.py``: the request's creations or filters in, per-entry results and whether
the ACL set changed out. As Kafka's AclControlManager: an invalid binding or filter gets
INVALID_REQUEST with the reason and leaves the others alone; creating an ACL that exists
already succeeds without a second copy; a binding that several filters of one DeleteAcls
match is deleted (and reported) once, by the first.
"""

from minibroker.controller.state import ControllerState
from minibroker.protocol.errors import Error
from minibroker.security.authorizer.acls import AclBinding, AclFilter, InvalidAcl, PatternType


def binding_of(creation) -> AclBinding:
    """A CreateAcls creation (v0 has no pattern type: LITERAL) as a binding."""
    return AclBinding(
        creation.resource_type,
        creation.resource_name,
        getattr(creation, "resource_pattern_type", PatternType.LITERAL),
        creation.principal,
        creation.host,
        creation.operation,
        creation.permission_type,
    )


def filter_of(request_filter) -> AclFilter:
    """A DescribeAcls request or a DeleteAcls filter (v0: LITERAL patterns only) as a filter."""
    return AclFilter(
        request_filter.resource_type_filter,
        request_filter.resource_name_filter,
        getattr(request_filter, "pattern_type_filter", PatternType.LITERAL),
        request_filter.principal_filter,
        request_filter.host_filter,
        request_filter.operation,
        request_filter.permission_type,
    )


def create_acls(state: ControllerState, creations) -> tuple[list[dict], bool]:
    """Add each valid binding; the results in the request's order, and whether any was new."""
    results = []
    changed = False
    present = set(state.acls)
    for creation in creations:
        binding = binding_of(creation)
        try:
            binding.validate()
        except InvalidAcl as invalid:
            results.append({"error_code": invalid.error, "error_message": invalid.message})
            continue
        if binding not in present:
            present.add(binding)
            state.acls.append(binding)
            changed = True
        results.append({"error_code": Error.NONE, "error_message": None})
    return results, changed


def delete_acls(state: ControllerState, filters) -> tuple[list[dict], bool]:
    """Remove what each valid filter matches; the filter results (each with the bindings it
    deleted) in the request's order, and whether anything was deleted."""
    results = []
    changed = False
    for request_filter in filters:
        acl_filter = filter_of(request_filter)
        try:
            acl_filter.validate()
        except InvalidAcl as invalid:
            results.append(
                {
                    "error_code": invalid.error,
                    "error_message": invalid.message,
                    "matching_acls": [],
                }
            )
            continue
        deleted = [binding for binding in state.acls if acl_filter.matches(binding)]
        if deleted:
            state.acls[:] = [binding for binding in state.acls if binding not in deleted]
            changed = True
        results.append(
            {
                "error_code": Error.NONE,
                "error_message": None,
                "matching_acls": [matching_acl(binding) for binding in deleted],
            }
        )
    return results, changed


def matching_acl(binding: AclBinding) -> dict:
    """A binding as DeleteAcls reports it."""
    return {
        "error_code": Error.NONE,
        "error_message": None,
        "resource_type": binding.resource_type,
        "resource_name": binding.resource_name,
        "pattern_type": binding.pattern_type,
        "principal": binding.principal,
        "host": binding.host,
        "operation": binding.operation,
        "permission_type": binding.permission,
    }


def described_resources(bindings) -> list[dict]:
    """DescribeAcls' answer: the bindings grouped by resource pattern, in first-seen order."""
    resources: dict[tuple[int, str, int], list[dict]] = {}
    for binding in bindings:
        key = (binding.resource_type, binding.resource_name, binding.pattern_type)
        resources.setdefault(key, []).append(
            {
                "principal": binding.principal,
                "host": binding.host,
                "operation": binding.operation,
                "permission_type": binding.permission,
            }
        )
    return [
        {"resource_type": kind, "resource_name": name, "pattern_type": pattern, "acls": acls}
        for (kind, name, pattern), acls in resources.items()
    ]


def pushed_acls(state: ControllerState) -> list[dict]:
    """The CreateAcls creations that tell a broker the cluster's whole ACL set (a broker
    replaces its set with them: see apis/acls.py)."""
    return [
        {
            "resource_type": binding.resource_type,
            "resource_name": binding.resource_name,
            "resource_pattern_type": binding.pattern_type,
            "principal": binding.principal,
            "host": binding.host,
            "operation": binding.operation,
            "permission_type": binding.permission,
        }
        for binding in state.acls
    ]
