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
  the epoch the brokers were told is written down.
- ``/config/topics/<t>`` and ``/config/brokers/<id>`` (``<default>`` for the cluster
  default): ``{"version":1,"config":{...}}``
- ``/controller``, ``/controller_epoch``, ``/brokers/ids/<id>``, ``/cluster/id``,
  ``/latest_producer_id_block``: written by the election and the session, not by a save.

One znode is minibroker's own: ``/minibroker/broker_registry``, the controller's registry of
brokers (broker epochs, incarnations, fenced or not). ZooKeeper-mode Kafka had no
registration request (a broker's epoch was its ``/brokers/ids`` znode's creation zxid); here
brokers register with the controller as in KRaft, and a new controller must know the epochs
the previous one handed out, or it would refuse every broker's AlterPartition.
"""

import base64
import json
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from .state import BrokerInfo, ControllerState, PartitionState, TopicState

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
TOPIC_CONFIGS = "/config/topics"
BROKER_CONFIGS = "/config/brokers"
CLUSTER_ID = "/cluster/id"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
MINIBROKER = "/minibroker"
BROKER_REGISTRY = f"{MINIBROKER}/broker_registry"

# Created once at start-up: the parents every save's znodes live under.
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, TOPIC_CONFIGS, BROKER_CONFIGS, "/cluster", MINIBROKER)

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


def state_znodes(
    state: ControllerState, previous: Mapping[str, bytes] | None = None
) -> dict[str, bytes]:
    """Every znode a save owns, path -> data. A partition state whose content did not change
    keeps its ``previous`` bytes (and so the epoch of the controller that last wrote it), so
    that a new controller's first save rewrites only what it changed."""
    previous = previous or {}
    znodes: dict[str, bytes] = {}
    for topic in state.topics.values():
        partitions = topic.partitions
        znodes[f"{TOPICS}/{topic.name}"] = _json(
            {
                "version": 3,
                "topic_id": kafka_uuid(topic.topic_id),
                "partitions": {str(i): p.replicas for i, p in enumerate(partitions)},
                "adding_replicas": {
                    str(i): p.adding_replicas for i, p in enumerate(partitions) if p.adding_replicas
                },
                "removing_replicas": {
                    str(i): p.removing_replicas
                    for i, p in enumerate(partitions)
                    if p.removing_replicas
                },
            }
        )
        znodes[f"{TOPICS}/{topic.name}/partitions"] = b""
        for index, partition in enumerate(partitions):
            znodes[f"{TOPICS}/{topic.name}/partitions/{index}"] = b""
            path = partition_state_path(topic.name, index)
            znodes[path] = _partition_state(partition, state.controller_epoch, previous.get(path))
        znodes[f"{TOPIC_CONFIGS}/{topic.name}"] = _json({"version": 1, "config": topic.configs})
    for name, configs in state.broker_configs.items():
        znodes[f"{BROKER_CONFIGS}/{_config_entity(name)}"] = _json(
            {"version": 1, "config": configs}
        )
    znodes[BROKER_REGISTRY] = _json(
        {
            "version": 1,
            "next_broker_epoch": state.next_broker_epoch,
            # The last heartbeat is the running controller's business, not saved state.
            "brokers": [
                {**asdict(broker), "last_heartbeat_ms": 0} for broker in state.brokers.values()
            ],
        }
    )
    return znodes


def _partition_fields(partition: PartitionState) -> dict:
    return {
        "leader": partition.leader,
        "leader_epoch": partition.leader_epoch,
        "isr": partition.isr,
        "partition_epoch": partition.partition_epoch,
    }


def _partition_state(partition: PartitionState, controller_epoch: int, previous: bytes | None):
    fields = _partition_fields(partition)
    if previous is not None:
        old = json.loads(previous)
        if {key: old.get(key) for key in fields} == fields:
            return previous
    return _json({"version": 1, "controller_epoch": controller_epoch, **fields})


def state_from_znodes(znodes: Mapping[str, bytes], controller_epoch: int) -> ControllerState:
    """The state a save wrote (``znodes`` as ``state_znodes`` lays them out), under this
    controller's epoch. Unreadable data raises ValueError: a controller must not start from a
    state it half understood."""
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
                    )
                )
            config_data = znodes.get(f"{TOPIC_CONFIGS}/{name}")
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
        return ControllerState(
            controller_epoch=controller_epoch,
            brokers=brokers,
            topics=topics,
            next_broker_epoch=registry.get("next_broker_epoch", 1),
            broker_configs=broker_configs,
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
    listeners: list[tuple[str, str, int]], protocols: dict[str, str], timestamp_ms: int
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
