"""Every API's declaration, gathered from the handler modules, and the tables built from them.

Each handler module states its APIs' facts beside the handlers (``@api``, see apis.Api), as
Kafka keeps them in one message definition per API. From them come what a node serves for its
roles (:func:`served_versions`, which dispatch accepts), what each listener advertises
(:func:`advertised_versions`), the APIs only nodes send, those held until a broker is ready,
and each API's error answer (apis/errors.py). A new API is a handler module with its ``@api``
declarations, listed in :data:`MODULES`.

protocol/versions.py keeps the wire facts the codec needs whatever the node serves: the API
keys, flexible versions, and the versions this node's own clients send.
"""

from collections.abc import Mapping
from types import MappingProxyType

from minibroker.apis import (
    Api,
    Role,
    Senders,
    acls,
    admin,
    api_versions,
    client_quotas,
    configs,
    consumer_groups,
    controller_apis,
    declarations_of,
    describe_topic_partitions,
    elections,
    features,
    fetch,
    groups,
    inter_broker,
    list_offsets,
    log_dirs,
    metadata,
    offset_for_leader_epoch,
    offsets,
    produce,
    producer_ids,
    producers,
    quorum,
    reassignments,
    sasl,
    scram_credentials,
    share_fetch,
    share_groups,
    share_state,
    streams_groups,
    telemetry,
    topics,
    transactions,
    txn_markers,
    txn_offsets,
)
from minibroker.protocol import codec
from minibroker.protocol.versions import ApiKey

# The handler modules; their @api declarations are every API minibroker serves.
MODULES = (
    produce,
    fetch,
    list_offsets,
    metadata,
    describe_topic_partitions,
    inter_broker,
    api_versions,
    features,
    quorum,
    topics,
    producer_ids,
    offset_for_leader_epoch,
    configs,
    telemetry,
    controller_apis,
    offsets,
    groups,
    consumer_groups,
    share_groups,
    streams_groups,
    admin,
    elections,
    reassignments,
    log_dirs,
    acls,
    sasl,
    scram_credentials,
    client_quotas,
    txn_markers,
    producers,
    transactions,
    txn_offsets,
    share_state,
    share_fetch,
)


def _gather() -> dict[int, Api]:
    declared: dict[int, Api] = {}
    for module in MODULES:
        for declaration in declarations_of(module):
            key = declaration.key
            if key in declared:
                raise AssertionError(
                    f"{key.name} is declared twice: by {declared[key].handler.__qualname__} "
                    f"and {declaration.handler.__qualname__}"
                )
            declared[key] = declaration
    return dict(sorted(declared.items()))


# Keyed by API key (an ApiKey, which a request header's plain int finds).
APIS: Mapping[int, Api] = MappingProxyType(_gather())

# Only the cluster's own nodes send these (Kafka's clusterAction APIs): behind the inter-node
# rules in dispatch, and left out of ApiVersions on client listeners.
NODE_APIS = frozenset(key for key, api in APIS.items() if api.senders is Senders.NODES)

# A broker holds these until it has joined the cluster (see Api.held_until_ready).
HELD_UNTIL_READY = frozenset(key for key, api in APIS.items() if api.held_until_ready)


def served_versions(
    *, broker: bool, controller: bool, zookeeper_mode: bool = False
) -> dict[int, tuple[int, int]]:
    """The table a node with these roles serves (and advertises on inter-node listeners); in
    ZooKeeper mode without the APIs of the KRaft metadata quorum (Api.kraft_only)."""
    roles = (Role.BROKER if broker else Role(0)) | (Role.CONTROLLER if controller else Role(0))
    return {
        key: api.versions
        for key, api in APIS.items()
        if api.roles & roles and not (zookeeper_mode and api.kraft_only)
    }


def advertised_versions(
    served: dict[int, tuple[int, int]], *, inter_node_listener: bool
) -> dict[int, tuple[int, int]]:
    """What ApiVersions lists on a listener: the served ranges, each from its API's
    ``advertised_from`` where it has one (Produce from v0, as Kafka 4: see Api); a client
    listener of a node that has an inter-node listener leaves out the APIs only nodes send
    (apis/inter_node.py)."""
    return {
        key: (low if (lowest := APIS[key].advertised_from) is None else lowest, high)
        for key, (low, high) in served.items()
        if inter_node_listener or key not in NODE_APIS
    }


# The APIs on a client's data path, whose newest versions a node loads before it serves
# (``warm_client_schemas``): what librdkafka, the Java client and kafka-python send in their
# first seconds and then all the time (CLIENTS.md).
_WARM_APIS = (
    ApiKey.API_VERSIONS,
    ApiKey.METADATA,
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.LIST_OFFSETS,
    ApiKey.FIND_COORDINATOR,
    ApiKey.INIT_PRODUCER_ID,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.JOIN_GROUP,
    ApiKey.SYNC_GROUP,
    ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP,
    ApiKey.CONSUMER_GROUP_HEARTBEAT,
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS,
    ApiKey.PUSH_TELEMETRY,
    ApiKey.CREATE_TOPICS,
    ApiKey.DESCRIBE_CLUSTER,
    ApiKey.OFFSET_FOR_LEADER_EPOCH,
)
# How many of each one's newest versions (clients send their newest the broker advertises).
_WARM_VERSIONS = 3


def warm_client_schemas() -> None:
    """codec.warm for the newest versions of the client data path's APIs: about 50 pairs,
    0.27 s on the reference machine, paid before the node listens (or once in the fork
    server, before it forks nodes) instead of as 5-25 ms stalls in a client's first
    seconds (issue 40's cold latency run). The other APIs and versions load on first use."""
    pairs = []
    for api_key in _WARM_APIS:
        api = APIS.get(api_key)
        if api is None:
            continue
        low, high = api.versions
        pairs += [
            (api_key, version) for version in range(max(low, high - _WARM_VERSIONS + 1), high + 1)
        ]
    codec.warm(pairs)
