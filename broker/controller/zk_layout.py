"""The controller's state as znodes, in ZooKeeper-mode Kafka's layout and JSON (sans I/O).

``state_znodes`` turns a :class:`ControllerState` into the znodes that hold it (path -> data),
``state_from_znodes`` reads them back, and ``plan_writes`` lists the creates, sets and deletes
that turn one set of znodes into another. The ZooKeeper store (``zk_store.py``) does the I/O:
it commits a plan as one ZooKeeper transaction, guarded by the controller epoch's version.

The layout is Kafka's (``kafka.zk.ZkData``), so a Kafka tool reading ZooKeeper sees the topics:

- ``/brokers/topics/<t>``: ``{"version":3,"topic_id":...,"partitions":{"0":[1,2]},
  "adding_replicas":{},"removing_replicas":{}}``
- ``/brokers/topics/<t>/partitions/<p>/state``: ``{"controller_epoch":E,"leader":L,
  "version":1,"leader_epoch":N,"isr":[...]}``, plus ``partition_epoch``: Kafka used the
  znode's version for it, but here one save may carry several transitions of a partition, so
  the epoch the brokers were told is written down, and KIP-966's ``eligible_leader_replicas``
  and ``last_known_elr`` when not empty (ZooKeeper-mode Kafka had no ELR; KRaft keeps them in
  its partition records).
- ``/config/topics/<t>`` and ``/config/brokers/<id>`` (``<default>`` for the cluster
  default): ``{"version":1,"config":{...}}``
- ``/config/groups/<group>`` (the group id URL-encoded, as user names are): a group's configs
  (KIP-848's GROUP resources), ``{"version":1,"config":{...}}``. ZooKeeper-mode Kafka had no
  group configs (KRaft only); the path follows the other config entities'.
- ``/kafka-acl/<ResourceType>/<name>`` (LITERAL patterns) and
  ``/kafka-acl-extended/prefixed/<ResourceType>/<name>`` (PREFIXED): ``{"version":1,
  "acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read",
  "host":"*"}]}``, one znode per resource pattern, names in Kafka's PascalCase.
- ``/config/users/<user>`` (the user name URL-encoded, as Kafka's ``Sanitizer``):
  ``{"version":1,"config":{"SCRAM-SHA-512":"salt=...,stored_key=...,server_key=...,
  iterations=4096"}}``, Kafka's ``ScramCredentialUtils`` string, base64 as Kafka writes it.
  The same znode holds the user's client quotas (``"producer_byte_rate":"1048576"``), as in
  Kafka; ``/config/users/<user>/clients/<client-id>``, ``/config/clients/<client-id>`` and
  ``/config/ips/<ip>`` hold the other entities' quotas, ``<default>`` naming a default
  (client ids URL-encoded as user names are). A parent that only holds children is written
  with an empty config (``/config/users/<user>``) or no data (``.../clients``).
- ``/controller``, ``/controller_epoch``, ``/brokers/ids/<id>``, ``/cluster/id``,
  ``/latest_producer_id_block``: written by the election and the session, not by a save.

Kafka's ``/kafka-acl-changes`` and ``/config/changes`` notifications are not written: brokers
learn ACLs and credentials from the controller's pushes, as in the other mode. Kafka's ACLs
are a set per resource, so a load gives the ACLs grouped by resource pattern rather than in
the order they were created; nothing depends on that order.

One znode is minibroker's own: ``/minibroker/broker_registry``, the controller's registry of
brokers (broker epochs, incarnations, fenced or not). ZooKeeper-mode Kafka had no
registration request (a broker's epoch was its ``/brokers/ids`` znode's creation zxid); here
brokers register with the controller as in KRaft, and a new controller must know the epochs
the previous one handed out, or it would refuse every broker's AlterPartition.
"""

import base64
import json
import re
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from minibroker.common.quota_manager import CLIENT_ID, IP, USER, QuotaEntity, entity_key
from minibroker.controller.state import (
    BrokerInfo,
    ControllerState,
    PartitionState,
    ScramRecord,
    TopicState,
)
from minibroker.protocol import sasl
from minibroker.security.authorizer.acls import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
TOPIC_CONFIGS = "/config/topics"
BROKER_CONFIGS = "/config/brokers"
GROUP_CONFIGS = "/config/groups"
# Client-metrics subscriptions (KIP-714; Kafka keeps them in KRaft only).
CLIENT_METRICS_CONFIGS = "/config/client-metrics"
CLUSTER_ID = "/cluster/id"
USER_CONFIGS = "/config/users"
CLIENT_CONFIGS = "/config/clients"
IP_CONFIGS = "/config/ips"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
MINIBROKER = "/minibroker"
BROKER_REGISTRY = f"{MINIBROKER}/broker_registry"
# Where each pattern type's ACLs live (Kafka's LiteralAclStore and ExtendedAclStore).
ACL_ROOTS = {
    PatternType.LITERAL: "/kafka-acl",
    PatternType.PREFIXED: "/kafka-acl-extended/prefixed",
}
# Kafka's resource type names (SecurityUtils.resourceTypeName: PascalCase).
ACL_RESOURCE_TYPES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
# Every ``/kafka-acl[-extended/prefixed]/<ResourceType>`` parent, as Kafka creates them all.
ACL_TYPE_PATHS = tuple(
    f"{root}/{type_name}"
    for root in ACL_ROOTS.values()
    for type_name in ACL_RESOURCE_TYPES.values()
)

# Created once at start-up: the parents every save's znodes live under.
PERSISTENT_PATHS = (
    BROKER_IDS,
    TOPICS,
    TOPIC_CONFIGS,
    BROKER_CONFIGS,
    GROUP_CONFIGS,
    CLIENT_METRICS_CONFIGS,
    USER_CONFIGS,
    CLIENT_CONFIGS,
    IP_CONFIGS,
    *ACL_TYPE_PATHS,
    "/cluster",
    MINIBROKER,
)

# Kafka's name of the cluster-wide dynamic broker config entity.
DEFAULT_BROKER_ENTITY = "<default>"


@dataclass(frozen=True)
class ZnodeWrite:
    """One operation of a save: ``create``, ``set`` or ``delete`` of ``path``."""

    kind: str
    path: str
    data: bytes = b""


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def uuid_from_kafka(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _json(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def _config_entity(name: str) -> str:
    return DEFAULT_BROKER_ENTITY if name == "" else name


def _pascal_case(name: str) -> str:
    """Kafka's SecurityUtils.toPascalCase of an enum name: DESCRIBE_CONFIGS -> DescribeConfigs."""
    return "".join(word.capitalize() for word in name.split("_"))


_OPERATION_NAMES = {operation: _pascal_case(operation.name) for operation in Operation}
_PERMISSION_NAMES = {permission: _pascal_case(permission.name) for permission in Permission}
_OPERATIONS_BY_NAME = {name: operation for operation, name in _OPERATION_NAMES.items()}
_PERMISSIONS_BY_NAME = {name: permission for permission, name in _PERMISSION_NAMES.items()}
_RESOURCE_TYPES_BY_NAME = {name: code for code, name in ACL_RESOURCE_TYPES.items()}

# Characters a ZooKeeper path segment cannot hold ("/", controls, the ranges ZooKeeper's
# PathUtils refuses) and "%", escaped so that escaping can be undone.
_UNSAFE_IN_ZNODE_NAME = re.compile("[%/\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff]")


def acl_resource_znode_name(name: str) -> str:
    """A resource name as one path segment. Kafka wrote it as it is; names ZooKeeper cannot
    hold (a group named ``a/b``, ``.``, ``..``) it failed to store, so here those characters
    (and ``%``) are percent-encoded instead. Every other name is exactly Kafka's."""
    if name in (".", ".."):
        return name.replace(".", "%2E")
    return _UNSAFE_IN_ZNODE_NAME.sub(lambda match: urllib.parse.quote(match.group(), safe=""), name)


def user_znode_name(user: str) -> str:
    """Kafka's Sanitizer.sanitize: the user name URL-encoded, only ``A-Za-z0-9._-~`` kept."""
    return urllib.parse.quote(user, safe="")


def acl_resource_path(pattern_type: int, resource_type: int, name: str) -> str:
    root = ACL_ROOTS[PatternType(pattern_type)]
    type_name = ACL_RESOURCE_TYPES[ResourceType(resource_type)]
    return f"{root}/{type_name}/{acl_resource_znode_name(name)}"


def _acl_znodes(acls: list[AclBinding]) -> dict[str, bytes]:
    """One znode per resource pattern, its entries in creation order."""
    entries_by_path: dict[str, list[dict]] = {}
    for binding in acls:
        path = acl_resource_path(binding.pattern_type, binding.resource_type, binding.resource_name)
        entries_by_path.setdefault(path, []).append(
            {
                "principal": binding.principal,
                "permissionType": _PERMISSION_NAMES[Permission(binding.permission)],
                "operation": _OPERATION_NAMES[Operation(binding.operation)],
                "host": binding.host,
            }
        )
    return {
        path: _json({"version": 1, "acls": entries}) for path, entries in entries_by_path.items()
    }


def _acls_from_znodes(znodes: Mapping[str, bytes]) -> list[AclBinding]:
    acls = []
    for pattern_type, root in ACL_ROOTS.items():
        prefix = f"{root}/"
        for path in sorted(znodes):
            type_name, separator, name = path[len(prefix) :].partition("/")
            if not path.startswith(prefix) or not separator or not name:
                continue
            saved = json.loads(znodes[path])
            if saved["version"] != 1:
                raise ValueError(f"{path}: ACL znode version {saved['version']}")
            for entry in saved["acls"]:
                acls.append(
                    AclBinding(
                        resource_type=_RESOURCE_TYPES_BY_NAME[type_name],
                        resource_name=urllib.parse.unquote(name),
                        pattern_type=pattern_type,
                        principal=entry["principal"],
                        host=entry["host"],
                        operation=_OPERATIONS_BY_NAME[entry["operation"]],
                        permission=_PERMISSIONS_BY_NAME[entry["permissionType"]],
                    )
                )
    return acls


def scram_credential_string(record: ScramRecord) -> str:
    """Kafka's ScramCredentialUtils.credentialToString of a saved credential (its salt and
    keys are already base64, as Kafka encodes them)."""
    return (
        f"salt={record['salt']},stored_key={record['stored_key']},"
        f"server_key={record['server_key']},iterations={record['iterations']}"
    )


def scram_credential_from_string(text: str) -> ScramRecord:
    """Kafka's ScramCredentialUtils.credentialFromString: exactly the four fields."""
    fields = dict(token.partition("=")[::2] for token in text.split(","))
    if sorted(fields) != ["iterations", "salt", "server_key", "stored_key"]:
        raise ValueError(f"SCRAM credential not valid: {text!r}")
    for key in ("salt", "stored_key", "server_key"):
        base64.b64decode(fields[key], validate=True)
    return ScramRecord(
        salt=fields["salt"],
        stored_key=fields["stored_key"],
        server_key=fields["server_key"],
        iterations=int(fields["iterations"]),
    )


def _quota_entity_name(name: str | None) -> str:
    return DEFAULT_BROKER_ENTITY if name is None else user_znode_name(name)


def _quota_entity_from_name(name: str) -> str | None:
    return None if name == DEFAULT_BROKER_ENTITY else urllib.parse.unquote(name)


def _quota_value_string(value: float) -> str:
    """As kafka-configs writes a value: a whole number without a fraction."""
    return str(int(value)) if value.is_integer() else repr(value)


def _quota_path(entity: QuotaEntity) -> str:
    names = dict(entity)
    if IP in names:
        return f"{IP_CONFIGS}/{_quota_entity_name(names[IP])}"
    if USER in names and CLIENT_ID in names:
        user, client = _quota_entity_name(names[USER]), _quota_entity_name(names[CLIENT_ID])
        return f"{USER_CONFIGS}/{user}/clients/{client}"
    if USER in names:
        return f"{USER_CONFIGS}/{_quota_entity_name(names[USER])}"
    return f"{CLIENT_CONFIGS}/{_quota_entity_name(names[CLIENT_ID])}"


def _config_znodes(
    scram_credentials: Mapping[str, Mapping[str, ScramRecord]],
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]],
) -> dict[str, bytes]:
    """The ``/config/users``, ``/config/clients`` and ``/config/ips`` znodes: SCRAM
    credentials and quotas, a user's both in its one znode."""
    configs: dict[str, dict[str, str]] = {}
    for user, credentials in scram_credentials.items():
        if credentials:
            configs.setdefault(f"{USER_CONFIGS}/{user_znode_name(user)}", {}).update(
                {
                    mechanism: scram_credential_string(record)
                    for mechanism, record in credentials.items()
                }
            )
    parents: set[str] = set()
    for entity, values in client_quotas.items():
        if not values:
            continue
        path = _quota_path(entity)
        configs.setdefault(path, {}).update(
            {key: _quota_value_string(value) for key, value in values.items()}
        )
        if len(entity) == 2:  # /config/users/<user>/clients/<client-id>
            parents.add(path.rsplit("/", 2)[0])
    znodes = {path: _json({"version": 1, "config": config}) for path, config in configs.items()}
    for parent in parents:
        znodes.setdefault(parent, _json({"version": 1, "config": {}}))
        znodes[f"{parent}/clients"] = b""
    return znodes


def _user_configs(znodes: Mapping[str, bytes]) -> dict[str, dict[str, str]]:
    """Every ``/config/users/<user>`` znode's config, by user (a znode without data, as
    Kafka creates a parent, has none)."""
    prefix = f"{USER_CONFIGS}/"
    configs = {}
    for path, data in znodes.items():
        name = path[len(prefix) :]
        if path.startswith(prefix) and "/" not in name:
            configs[name] = json.loads(data)["config"] if data else {}
    return configs


def _scram_credentials_from_znodes(
    znodes: Mapping[str, bytes],
) -> dict[str, dict[str, ScramRecord]]:
    """Every user's SCRAM credentials (a user's znode may also hold its quotas)."""
    credentials: dict[str, dict[str, ScramRecord]] = {}
    for name, config in _user_configs(znodes).items():
        mechanisms = {
            mechanism: scram_credential_from_string(config[mechanism])
            for mechanism in sasl.SCRAM_MECHANISM_TYPES
            if mechanism in config
        }
        if mechanisms:
            credentials[urllib.parse.unquote(name)] = mechanisms
    return credentials


def _client_quotas_from_znodes(
    znodes: Mapping[str, bytes],
) -> dict[QuotaEntity, dict[str, float]]:
    """Every entity's quotas: the numeric keys of the quota znodes (a user's SCRAM
    credentials are not quotas)."""
    quotas: dict[QuotaEntity, dict[str, float]] = {}
    for path, data in znodes.items():
        parts = path.split("/")[2:]  # "", "config", then the entity's parts
        if path.startswith(f"{USER_CONFIGS}/") and len(parts) == 2:
            pairs = [(USER, _quota_entity_from_name(parts[1]))]
        elif path.startswith(f"{USER_CONFIGS}/") and len(parts) == 4 and parts[2] == "clients":
            pairs = [
                (USER, _quota_entity_from_name(parts[1])),
                (CLIENT_ID, _quota_entity_from_name(parts[3])),
            ]
        elif path.startswith(f"{CLIENT_CONFIGS}/") and len(parts) == 2:
            pairs = [(CLIENT_ID, _quota_entity_from_name(parts[1]))]
        elif path.startswith(f"{IP_CONFIGS}/") and len(parts) == 2:
            pairs = [(IP, _quota_entity_from_name(parts[1]))]
        else:
            continue
        config = json.loads(data)["config"] if data else {}
        values = {
            key: float(value)
            for key, value in config.items()
            if key not in sasl.SCRAM_MECHANISM_TYPES
        }
        if values:
            quotas[entity_key(pairs)] = values
    return quotas


class EncodedTopics:
    """What each topic's znodes were last encoded from (sans I/O; the store keeps one per
    controller, :func:`state_from_znodes` fills it on a load and :func:`state_znodes` on each
    save): per topic, its id, the PartitionState objects of its partitions and the bytes of
    its assignment znode and partition state znodes.

    Transitions never change a PartitionState in place (state.py puts a new object in the
    topic's list), so a partition whose object is the one encoded last has the same bytes,
    and a save encodes only the partitions a decision replaced. Issue 39: a save encoded
    every partition of the cluster, and parsed each one's previous znode to keep the epoch of
    the controller that wrote it, however few partitions the decision changed; a burst of
    decisions (a failover's fence and the ISR changes after it, thousands of partitions in
    AlterPartitions) then cost decisions x partitions. Kafka's ZooKeeper-mode controller
    writes only the znodes of the partitions it changes (``KafkaZkClient.updateLeaderAndIsr``
    for the partitions the PartitionStateMachine or the ISR change touched)."""

    def __init__(self) -> None:
        # topic name -> (topic id, partitions encoded, assignment bytes, state bytes each)
        self._topics: dict[str, tuple[uuid.UUID, list[PartitionState], bytes, list[bytes]]] = {}

    def remember(
        self, name: str, topic_id: uuid.UUID, partitions: list[PartitionState], data, states
    ) -> None:
        self._topics[name] = (topic_id, list(partitions), data, list(states))

    def get(self, name: str):
        return self._topics.get(name)

    def forget_others(self, names) -> None:
        for name in [name for name in self._topics if name not in names]:
            del self._topics[name]


def _assignment_znode(topic: TopicState) -> bytes:
    partitions = topic.partitions
    return _json(
        {
            "version": 3,
            "topic_id": kafka_uuid(topic.topic_id),
            "partitions": {str(i): p.replicas for i, p in enumerate(partitions)},
            "adding_replicas": {
                str(i): p.adding_replicas for i, p in enumerate(partitions) if p.adding_replicas
            },
            "removing_replicas": {
                str(i): p.removing_replicas for i, p in enumerate(partitions) if p.removing_replicas
            },
        }
    )


def _topic_znodes(
    znodes: dict[str, bytes],
    topic: TopicState,
    controller_epoch: int,
    previous: Mapping[str, bytes],
    encoded: EncodedTopics | None,
) -> None:
    """The znodes of one topic into ``znodes``: the partitions whose PartitionState object is
    the one ``encoded`` last keep their bytes, the others are encoded (keeping the
    ``previous`` bytes when the content is the same)."""
    partitions = topic.partitions
    base = f"{TOPICS}/{topic.name}"
    known = encoded.get(topic.name) if encoded is not None else None
    if known is not None and known[0] != topic.topic_id:
        known = None
    known_partitions: list[PartitionState] = known[1] if known is not None else []
    same = len(known_partitions) == len(partitions)
    states: list[bytes] = []
    for index, partition in enumerate(partitions):
        if index < len(known_partitions) and known_partitions[index] is partition:
            data = known[3][index]  # type: ignore[index]
        else:
            same = False
            path = f"{base}/partitions/{index}/state"
            data = _partition_state(partition, controller_epoch, previous.get(path))
        states.append(data)
    assignment = known[2] if known is not None and same else _assignment_znode(topic)
    if encoded is not None and not same:
        encoded.remember(topic.name, topic.topic_id, partitions, assignment, states)
    znodes[base] = assignment
    znodes[f"{base}/partitions"] = b""
    for index, data in enumerate(states):
        znodes[f"{base}/partitions/{index}"] = b""
        znodes[f"{base}/partitions/{index}/state"] = data
    znodes[f"{TOPIC_CONFIGS}/{topic.name}"] = _json({"version": 1, "config": topic.configs})


def state_znodes(
    state: ControllerState,
    previous: Mapping[str, bytes] | None = None,
    encoded: EncodedTopics | None = None,
) -> dict[str, bytes]:
    """Every znode a save owns, path -> data. A partition state whose content did not change
    keeps its ``previous`` bytes (and so the epoch of the controller that last wrote it), so
    that a new controller's first save rewrites only what it changed. With ``encoded`` (the
    store's :class:`EncodedTopics`), only the partitions replaced since the last save are
    encoded; ``previous`` must then be what that last save wrote (or the load read)."""
    previous = previous or {}
    znodes: dict[str, bytes] = {}
    for topic in state.topics.values():
        _topic_znodes(znodes, topic, state.controller_epoch, previous, encoded)
    if encoded is not None:
        encoded.forget_others(state.topics)
    for name, configs in state.broker_configs.items():
        znodes[f"{BROKER_CONFIGS}/{_config_entity(name)}"] = _json(
            {"version": 1, "config": configs}
        )
    for name, configs in state.group_configs.items():
        znodes[f"{GROUP_CONFIGS}/{user_znode_name(name)}"] = _json(
            {"version": 1, "config": configs}
        )
    for name, configs in state.client_metrics_configs.items():
        znodes[f"{CLIENT_METRICS_CONFIGS}/{user_znode_name(name)}"] = _json(
            {"version": 1, "config": configs}
        )
    znodes.update(_acl_znodes(state.acls))
    znodes.update(_config_znodes(state.scram_credentials, state.client_quotas))
    znodes[BROKER_REGISTRY] = _json(
        {
            "version": 1,
            "next_broker_epoch": state.next_broker_epoch,
            # The finalized features (Kafka keeps them in /feature, with the znode's version
            # as the epoch; minibroker's own registry znode keeps both).
            "finalized_features": state.finalized_features,
            "features_epoch": state.features_epoch,
            # The last heartbeat is the running controller's business, not saved state.
            "brokers": [
                {**asdict(broker), "last_heartbeat_ms": 0} for broker in state.brokers.values()
            ],
        }
    )
    return znodes


def _partition_fields(partition: PartitionState) -> dict:
    fields = {
        "leader": partition.leader,
        "leader_epoch": partition.leader_epoch,
        "isr": partition.isr,
        "partition_epoch": partition.partition_epoch,
    }
    # KIP-966's lists only when not empty, so that a partition without them is Kafka's layout.
    if partition.eligible_leader_replicas:
        fields["eligible_leader_replicas"] = partition.eligible_leader_replicas
    if partition.last_known_elr:
        fields["last_known_elr"] = partition.last_known_elr
    return fields


# The partition state znode's fields that are not the partition's own.
_STAMPS = ("version", "controller_epoch")


def _partition_state(partition: PartitionState, controller_epoch: int, previous: bytes | None):
    fields = _partition_fields(partition)
    if previous is not None:
        old = json.loads(previous)
        kept = {key: value for key, value in old.items() if key not in _STAMPS}
        if kept == fields:
            return previous
    return _json({"version": 1, "controller_epoch": controller_epoch, **fields})


def state_from_znodes(
    znodes: Mapping[str, bytes], controller_epoch: int, encoded: EncodedTopics | None = None
) -> ControllerState:
    """The state a save wrote (``znodes`` as ``state_znodes`` lays them out), under this
    controller's epoch. Unreadable data raises ValueError: a controller must not start from a
    state it half understood. ``encoded`` learns each topic's loaded partitions and their
    bytes, so that the first save encodes only what changed since."""
    try:
        registry = json.loads(znodes[BROKER_REGISTRY]) if BROKER_REGISTRY in znodes else {}
        brokers = {}
        for entry in registry.get("brokers", []):
            listeners = {name: tuple(ep) for name, ep in entry.get("listeners", {}).items()}
            broker = BrokerInfo(**{**entry, "listeners": listeners})
            brokers[broker.node_id] = broker
        topics = {}
        prefix = f"{TOPICS}/"
        for path, data in znodes.items():
            name = path[len(prefix) :]
            if not path.startswith(prefix) or "/" in name:
                continue
            assignment = json.loads(data)
            adding = assignment.get("adding_replicas", {})
            removing = assignment.get("removing_replicas", {})
            partitions = []
            for index in range(len(assignment["partitions"])):
                saved = json.loads(znodes[partition_state_path(name, index)])
                partitions.append(
                    PartitionState(
                        replicas=list(assignment["partitions"][str(index)]),
                        isr=list(saved["isr"]),
                        leader=saved["leader"],
                        leader_epoch=saved["leader_epoch"],
                        partition_epoch=saved["partition_epoch"],
                        adding_replicas=list(adding.get(str(index), [])),
                        removing_replicas=list(removing.get(str(index), [])),
                        eligible_leader_replicas=list(saved.get("eligible_leader_replicas", [])),
                        last_known_elr=list(saved.get("last_known_elr", [])),
                    )
                )
            config_data = znodes.get(f"{TOPIC_CONFIGS}/{name}")
            if encoded is not None:
                encoded.remember(
                    name,
                    uuid_from_kafka(assignment["topic_id"]),
                    partitions,
                    data,
                    [znodes[partition_state_path(name, i)] for i in range(len(partitions))],
                )
            topics[name] = TopicState(
                name=name,
                topic_id=uuid_from_kafka(assignment["topic_id"]),
                partitions=partitions,
                configs=json.loads(config_data)["config"] if config_data else {},
            )
        broker_configs = {}
        prefix = f"{BROKER_CONFIGS}/"
        for path, data in znodes.items():
            if path.startswith(prefix):
                entity = path[len(prefix) :]
                name = "" if entity == DEFAULT_BROKER_ENTITY else entity
                broker_configs[name] = json.loads(data)["config"]
        group_configs = {}
        prefix = f"{GROUP_CONFIGS}/"
        for path, data in znodes.items():
            if path.startswith(prefix):
                group_configs[urllib.parse.unquote(path[len(prefix) :])] = json.loads(data)[
                    "config"
                ]
        client_metrics_configs = {}
        prefix = f"{CLIENT_METRICS_CONFIGS}/"
        for path, data in znodes.items():
            if path.startswith(prefix):
                name = urllib.parse.unquote(path[len(prefix) :])
                client_metrics_configs[name] = json.loads(data)["config"]
        return ControllerState(
            controller_epoch=controller_epoch,
            brokers=brokers,
            topics=topics,
            next_broker_epoch=registry.get("next_broker_epoch", 1),
            broker_configs=broker_configs,
            group_configs=group_configs,
            client_metrics_configs=client_metrics_configs,
            acls=_acls_from_znodes(znodes),
            scram_credentials=_scram_credentials_from_znodes(znodes),
            client_quotas=_client_quotas_from_znodes(znodes),
            finalized_features=registry.get("finalized_features"),
            features_epoch=registry.get("features_epoch", 0),
        )
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"the controller state in ZooKeeper is not readable: {error!r}") from None


def plan_writes(before: Mapping[str, bytes], after: Mapping[str, bytes]) -> list[ZnodeWrite]:
    """The writes that turn the znodes ``before`` into ``after``: deletes first, children
    before their parents (ZooKeeper refuses to delete a znode with children), then creates,
    parents first, then sets of changed data."""
    deleted = sorted((path for path in before if path not in after), key=_depth, reverse=True)
    created = sorted((path for path in after if path not in before), key=_depth)
    changed = sorted(path for path in after if path in before and before[path] != after[path])
    return [
        *(ZnodeWrite("delete", path) for path in deleted),
        *(ZnodeWrite("create", path, after[path]) for path in created),
        *(ZnodeWrite("set", path, after[path]) for path in changed),
    ]


def _depth(path: str) -> tuple[int, str]:
    return path.count("/"), path


def controller_znode(broker_id: int, timestamp_ms: int) -> bytes:
    """``/controller``'s data: who won the election, and when."""
    return _json({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def controller_id_from(data: bytes) -> int:
    return int(json.loads(data)["brokerid"])


def broker_znode(
    listeners: list[tuple[str, str, int]],
    protocols: dict[str, str],
    timestamp_ms: int,
    rack: str | None = None,
) -> bytes:
    """``/brokers/ids/<id>``'s data, Kafka's version 5: every listener as an endpoint with
    its security protocol, the first (the inter-broker one) also as host and port."""
    name, host, port = listeners[0]
    return _json(
        {
            "version": 5,
            "host": host,
            "port": port,
            "jmx_port": -1,
            "timestamp": str(timestamp_ms),
            "endpoints": [f"{n}://{h}:{p}" for n, h, p in listeners],
            "listener_security_protocol_map": {n: protocols[n] for n, _, _ in listeners},
            "features": {},
            # Kafka writes the rack only when the broker has one.
            **({"rack": rack} if rack is not None else {}),
        }
    )


def broker_endpoint(data: bytes) -> tuple[str, int]:
    """Where other nodes reach a registered broker: its inter-broker (first) endpoint."""
    registration = json.loads(data)
    return registration["host"], int(registration["port"])


def cluster_id_znode(cluster_id: str) -> bytes:
    return _json({"version": "1", "id": cluster_id})


def cluster_id_from(data: bytes) -> str:
    return json.loads(data)["id"]


def producer_id_block_znode(broker_id: int, start: int, length: int) -> bytes:
    """Kafka's ``/latest_producer_id_block``: the last block handed out (inclusive end)."""
    return _json(
        {
            "version": 1,
            "broker": broker_id,
            "block_start": str(start),
            "block_end": str(start + length - 1),
        }
    )


def next_producer_id(data: bytes | None) -> int:
    """The first producer id after the last block handed out."""
    if not data:
        return 0
    return int(json.loads(data)["block_end"]) + 1
