"""Kafka's ACL model and authorization rules, sans I/O.

An :class:`AclBinding` is what CreateAcls creates: a resource pattern (type, name, LITERAL or
PREFIXED) and an entry (principal, host, operation, ALLOW or DENY). An :class:`AclFilter` is
what DescribeAcls and DeleteAcls select with. :class:`Authorizer` decides a request as Apache
Kafka 3.x's StandardAuthorizer does:

* a super user (``super.users``) may do everything;
* the ACLs that apply are those whose pattern matches the resource (a LITERAL of the same
  name, the LITERAL wildcard ``*``, a PREFIXED whose name starts the resource's) and whose
  principal (exact or ``User:*``) and host (exact or ``*``) match the requester;
* a DENY for the operation (or ALL) wins over any ALLOW;
* an ALLOW for the operation (or ALL) allows it, and so does an ALLOW for an operation that
  implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
  DESCRIBE_CONFIGS (a DENY never implies: denying READ leaves DESCRIBE as it was);
* when no ACL at all names the resource, ``allow.everyone.if.no.acl.found`` decides
  (default false: denied).

Codes are Kafka's (``ResourceType``, ``PatternType``, ``AclOperation``,
``AclPermissionType``), so they go on the wire unchanged.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from minibroker.protocol.errors import Error, KafkaError


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The one name a CLUSTER resource has (Kafka's Resource.CLUSTER_NAME).
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

# The resource types minibroker authorizes; ACLs on the others are refused at creation.
_AUTHORIZED_TYPES = frozenset(
    {ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID}
)

# An ALLOW of the key also allows these (Kafka's AclOperation implication).
_IMPLIED_BY_ALLOW: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}


class InvalidAcl(KafkaError, ValueError):
    """A binding or filter Kafka refuses with INVALID_REQUEST; the message says why."""

    error = Error.INVALID_REQUEST


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def validate(self) -> None:
        """Refuse what Kafka's controller refuses (AclControlManager, AclApis)."""
        if self.resource_type not in _AUTHORIZED_TYPES:
            raise InvalidAcl(f"Invalid resourceType {_name(ResourceType, self.resource_type)}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAcl(f"Invalid patternType {_name(PatternType, self.pattern_type)}")
        if self.operation in (Operation.ANY, Operation.UNKNOWN) or self.operation not in set(
            Operation
        ):
            raise InvalidAcl(f"Invalid operation {_name(Operation, self.operation)}")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidAcl(f"Invalid permissionType {_name(Permission, self.permission)}")
        if not self.resource_name:
            raise InvalidAcl("Invalid empty resource name specified")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        principal_type, separator, principal_name = self.principal.partition(":")
        if not separator or not principal_type or not principal_name:
            raise InvalidAcl(f"Could not parse principal from `{self.principal}`")
        if not self.host:
            raise InvalidAcl("Invalid empty host")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls' and DeleteAcls' selection: ANY codes and None strings match anything.

    The pattern type MATCH selects the bindings that would apply to the named resource:
    the literal of that name, the literal wildcard and the prefixes of the name.
    """

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def validate(self) -> None:
        for enum, value, what in (
            (ResourceType, self.resource_type, "resourceType"),
            (PatternType, self.pattern_type, "patternType"),
            (Operation, self.operation, "operation"),
            (Permission, self.permission, "permissionType"),
        ):
            if value == 0 or value not in set(enum):
                raise InvalidAcl(f"Invalid {what} {_name(enum, value)} in the filter")

    def matches(self, binding: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, binding.resource_type):
            return False
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation not in (Operation.ANY, binding.operation):
            return False
        if self.permission not in (Permission.ANY, binding.permission):
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is None:
                return True
            return _pattern_applies(binding, self.resource_name)
        if self.pattern_type not in (PatternType.ANY, binding.pattern_type):
            return False
        return self.resource_name is None or self.resource_name == binding.resource_name


def _name(enum: type[IntEnum], value: int) -> str:
    return enum(value).name if value in set(enum) else str(value)


def _pattern_applies(binding: AclBinding, resource_name: str) -> bool:
    """Whether the binding's pattern covers a resource of this name (same type assumed)."""
    if binding.pattern_type == PatternType.PREFIXED:
        return resource_name.startswith(binding.resource_name)
    return binding.resource_name in (resource_name, WILDCARD)


class Authorizer:
    """One node's authorizer: its ``super.users``, ``allow.everyone.if.no.acl.found`` and the
    cluster's ACLs, which the controller decides and every node receives whole
    (:meth:`replace_acls`)."""

    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acl: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: tuple[AclBinding, ...] = ()
        # By resource type: literal bindings by name, and the prefixed ones.
        self._literal: dict[int, dict[str, list[AclBinding]]] = {}
        self._prefixed: dict[int, list[AclBinding]] = {}

    @property
    def acls(self) -> tuple[AclBinding, ...]:
        return self._acls

    def replace_acls(self, acls: Iterable[AclBinding]) -> None:
        self._acls = tuple(acls)
        self._literal = {}
        self._prefixed = {}
        for binding in self._acls:
            if binding.pattern_type == PatternType.PREFIXED:
                self._prefixed.setdefault(binding.resource_type, []).append(binding)
            else:
                by_name = self._literal.setdefault(binding.resource_type, {})
                by_name.setdefault(binding.resource_name, []).append(binding)

    def _applicable(self, resource_type: int, name: str) -> list[AclBinding]:
        literal = self._literal.get(resource_type, {})
        found = list(literal.get(name, ()))
        if name != WILDCARD:
            found += literal.get(WILDCARD, ())
        found += [
            b for b in self._prefixed.get(resource_type, ()) if name.startswith(b.resource_name)
        ]
        return found

    def authorize(
        self, principal: str, host: str, operation: Operation, resource_type: int, name: str
    ) -> bool:
        """Whether ``principal`` connecting from ``host`` may do ``operation`` on the
        resource (see the module's rules)."""
        if principal in self.super_users:
            return True
        acls = self._applicable(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        allowed = False
        for binding in acls:
            if not _entry_matches(binding, principal, host):
                continue
            if binding.permission == Permission.DENY:
                if binding.operation in (Operation.ALL, operation):
                    return False
            elif _allow_covers(binding.operation, operation):
                allowed = True
        return allowed

    def authorize_any(
        self, principal: str, host: str, operation: Operation, resource_type: int
    ) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of the type
        (Kafka's authorizeByResourceType, used for the idempotent producer's WRITE on any
        topic): some ALLOW applies to the principal and no DENY for the same operation covers
        it (a wildcard DENY covers everything; a PREFIXED DENY covers the names it starts)."""
        if principal in self.super_users:
            return True
        denies = []
        allows = []
        for binding in self._acls:
            if binding.resource_type != resource_type or not _entry_matches(
                binding, principal, host
            ):
                continue
            if binding.permission == Permission.DENY:
                if binding.operation in (Operation.ALL, operation):
                    denies.append(binding)
            elif _allow_covers(binding.operation, operation):
                allows.append(binding)
        for allow in allows:
            if not any(_deny_covers(deny, allow) for deny in denies):
                return True
        if self.allow_if_no_acl:
            return not any(b.resource_type == resource_type for b in self._acls)
        return False


def _entry_matches(binding: AclBinding, principal: str, host: str) -> bool:
    return binding.principal in (principal, WILDCARD_PRINCIPAL) and binding.host in (
        host,
        WILDCARD,
    )


def _allow_covers(granted: int, wanted: Operation) -> bool:
    return granted in (Operation.ALL, wanted) or granted in _IMPLIED_BY_ALLOW.get(wanted, ())


def _deny_covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Whether a DENY leaves nothing of an ALLOW's resources."""
    if deny.pattern_type == PatternType.LITERAL:
        return deny.resource_name in (WILDCARD, allow.resource_name) and (
            deny.resource_name == WILDCARD or allow.pattern_type == PatternType.LITERAL
        )
    return allow.resource_name.startswith(deny.resource_name)
