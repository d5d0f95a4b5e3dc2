"""Each API's facts are declared once, beside its handler (apis.Api), and what the node builds
from them is what it served before the declarations: the same advertised versions per role
and listener, the same inter-node APIs, the same error answers."""

import dataclasses

import pytest
import trio
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from minibroker.apis import Connection, Senders, api_versions, declarations_of
from minibroker.apis.dispatch import HANDLERS
from minibroker.apis.registry import APIS, HELD_UNTIL_READY, MODULES, NODE_APIS, served_versions
from minibroker.common.config import BrokerConfig
from minibroker.node.server import BrokerServer
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.framing import RequestHeader
from minibroker.protocol.versions import FIRST_FLEXIBLE_VERSION, ApiKey

st.register_type_strategy(Records, st.binary(max_size=50).map(Records))

# What ApiVersions advertised before the declarations (protocol/versions.py's tables at commit
# 9357ed9), by node roles; a client listener of a node with an inter-node listener left out
# INTER_NODE (apis/inter_node.py's INTER_NODE_APIS then).
BROKER = {
    0: (0, 12), 1: (4, 18), 2: (1, 7), 3: (1, 12), 4: (7, 7), 5: (4, 4), 6: (8, 8), 8: (2, 9),
    9: (1, 9), 10: (0, 5), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5),
    16: (0, 5), 17: (0, 1), 18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 4),
    23: (2, 4), 28: (0, 5), 29: (0, 3), 30: (0, 3), 31: (0, 3), 32: (0, 4), 33: (0, 2), 35: (0, 4),
    36: (0, 2), 37: (0, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0),
    47: (0, 0), 50: (0, 0), 51: (0, 0), 60: (0, 1),
}  # fmt: skip
# Served since: WriteTxnMarkers (inter-node; v2: KIP-1228) and DescribeProducers, for transactions.
BROKER |= {27: (0, 2), 61: (0, 0)}
# Added since by the transaction coordinator (issue 21): FindCoordinator v6, AddPartitionsToTxn,
# AddOffsetsToTxn, EndTxn (v5: TV2), DescribeTransactions, ListTransactions.
TRANSACTIONS = {10: (0, 6), 24: (0, 5), 25: (0, 4), 26: (0, 5), 65: (0, 0), 66: (0, 1)}
BROKER |= TRANSACTIONS
# Added since by the consumer group protocol (issue 23): ConsumerGroupHeartbeat v0-v1 (v1 from
# protocol/consumer_group_heartbeat_v1.py) and ConsumerGroupDescribe v0.
BROKER |= {68: (0, 1), 69: (0, 0)}
# Added since by share groups' membership (issue 35): ShareGroupHeartbeat v1 and
# ShareGroupDescribe v1 (Kafka 4.4's only versions, protocol/schemas.py).
BROKER |= {76: (1, 1), 77: (1, 1)}
# Added since by streams groups (issue 36): StreamsGroupHeartbeat v0-v1 and StreamsGroupDescribe
# v0-v1 (protocol/streams_group_schemas.py).
BROKER |= {88: (0, 1), 89: (0, 1)}
# ... and StreamsGroupTopologyDescriptionUpdate v0 (KIP-1331), Kafka 4.4's only version.
BROKER |= {93: (0, 0)}
# Added since by issue 34: DescribeTopicPartitions v0 (KIP-966), UpdateFeatures v0-v2 (both
# roles: the controller decides it).
ISSUE_34 = {75: (0, 0), 57: (0, 2)}
# Client telemetry (KIP-714, issue 34): GetTelemetrySubscriptions, PushTelemetry and
# ListConfigResources (v0 was ListClientMetricsResources), brokers only.
ISSUE_34 |= {71: (0, 0), 72: (0, 0), 74: (0, 1)}
CONTROLLER = {
    3: (1, 12), 17: (0, 1), 18: (0, 4), 19: (2, 7), 20: (1, 6), 29: (0, 3), 30: (0, 3),
    31: (0, 3), 32: (0, 4), 33: (0, 2), 36: (0, 2), 37: (0, 3), 43: (0, 2), 44: (0, 1),
    45: (0, 0), 46: (0, 0), 50: (0, 0), 51: (0, 0), 56: (2, 2), 62: (0, 0), 63: (0, 1),
    67: (0, 0),
}  # fmt: skip
# Added since by client quotas (issue 24): DescribeClientQuotas, AlterClientQuotas (both roles:
# the controller decides them).
QUOTAS = {48: (0, 1), 49: (0, 1)}
BROKER |= QUOTAS
CONTROLLER |= QUOTAS
BROKER |= ISSUE_34
# Added since by the share coordinator (issue 35): the share state APIs, inter-node, at Kafka
# 4.4's versions (Initialize, Read, Write v0-1, Delete, ReadSummary v0-1).
SHARE_STATE = {83: (0, 0), 84: (0, 0), 85: (0, 1), 86: (0, 0), 87: (0, 1)}
BROKER |= SHARE_STATE
CONTROLLER |= {57: (0, 2)}
# Added since by share groups' data path (issue 35): ShareFetch and ShareAcknowledge v1-v2
# (protocol/share_fetch_v1.py; kio has v0 only).
BROKER |= {78: (1, 2), 79: (1, 2)}
# Added since by issue 39: DescribeQuorum v0-v2 (KIP-853's v2), the controller decides it; not
# in ZooKeeper mode (kraft_only).
BROKER |= {55: (0, 2)}
CONTROLLER |= {55: (0, 2)}
# Added since by share groups' admin path (issue 35): DescribeShareGroupOffsets v0-v1,
# AlterShareGroupOffsets v0, DeleteShareGroupOffsets v0 (protocol/share_group_offsets_schemas.py).
BROKER |= {90: (0, 1), 91: (0, 0), 92: (0, 0)}
# Raised since by issue 34 to the versions Kafka 4.4 serves: Produce v13, ListOffsets v11,
# Metadata v13 (both roles), OffsetCommit and OffsetFetch v10, DescribeGroups v6,
# ApiVersions v5 (both roles), DeleteGroups v3 (protocol/schemas.py).
KAFKA_44 = {0: (0, 13), 2: (1, 11), 3: (1, 13), 8: (2, 10), 9: (1, 10), 15: (0, 6)}
KAFKA_44 |= {18: (0, 5), 42: (0, 3)}
# ... ListTransactions v2 (KIP-1152) and ConsumerGroupDescribe v1 (KIP-1099).
KAFKA_44 |= {66: (0, 2), 69: (0, 1)}
# ... DescribeLogDirs v5, DescribeCluster v2 (KIP-1073) and AlterPartitionReassignments v1
# (both roles: the controller decides it).
KAFKA_44 |= {35: (0, 5), 60: (0, 2), 45: (0, 1)}
# ... InitProducerId v5 (Kafka 4.4 advertises 0-5: v6 is unstable).
KAFKA_44 |= {22: (0, 5)}
# ... TxnOffsetCommit v6 (KIP-1319, topics by id).
KAFKA_44 |= {28: (0, 6)}
BROKER |= KAFKA_44
# Added since by issue 39: AlterReplicaLogDirs v1-v2 (Kafka 4.4's; v0 went with KIP-896), brokers
# only.
BROKER |= {34: (1, 2)}
CONTROLLER |= {3: (1, 13), 18: (0, 5), 45: (0, 1)}
# ... and DescribeCluster v0-v2 on the controller too (KIP-919: the tools' --bootstrap-controller
# asks the controller for the controllers, endpoint type CONTROLLER).
CONTROLLER |= {60: (0, 2)}
# ... BrokerRegistration v0-v4 (KIP-966's PreviousBrokerEpoch from v3), controller's.
CONTROLLER |= {62: (0, 4)}
# ... AlterPartition v2-v3 (KIP-903's broker epochs of the new ISR) and BrokerHeartbeat v0-v2
# (KIP-1066's CordonedLogDirs, read and not acted on), controller's.
CONTROLLER |= {56: (2, 3), 63: (0, 2)}
# KIP-896 (issue 34): the versions Kafka 4 removed are no longer served, as Kafka 4.4: Produce
# v0-v2, DescribeAcls, CreateAcls and DeleteAcls v0, DescribeConfigs v0, DescribeLogDirs v0,
# WriteTxnMarkers v0; Metadata v0, which Kafka 4.4 serves, is.
KIP_896 = {0: (3, 13), 29: (1, 3), 30: (1, 3), 31: (1, 3), 32: (1, 4), 35: (1, 5), 27: (1, 2)}
KIP_896 |= {3: (0, 13)}
BROKER |= KIP_896
CONTROLLER |= {key: KIP_896[key] for key in (3, 29, 30, 31, 32)}
# ... but ApiVersions still lists Produce from v0, as Kafka 4.4 (KAFKA-18659: librdkafka
# before 2.1 compresses only when the range starts at v0).
ADVERTISED_FROM = {0: 0}
COMBINED = BROKER | CONTROLLER
ZOOKEEPER = {key: versions for key, versions in COMBINED.items() if key != 55}
INTER_NODE = {4, 5, 6, 27, 56, 62, 63, 67} | set(SHARE_STATE)
# dispatch.CLIENT_APIS then: what a broker held until it had joined the cluster.
HELD = {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 19, 20, 21, 22, 23, 32, 35, 37, 42, 43, 44}
HELD |= {45, 46, 47, 60, 61}
HELD |= {24, 25, 26, 65, 66}
HELD |= {28}
HELD |= {68, 69}
HELD |= {75}
HELD |= {78, 79}
HELD |= {76, 77}
HELD |= {88, 89, 93}

HELD |= {90, 91, 92}
# Client telemetry: its subscriptions come with the controller's pushes.
HELD |= {71, 72, 74}
HELD |= {55}
HELD |= {34}


def test_every_known_api_key_has_exactly_one_declaration():
    declared = [api.key for module in MODULES for api in declarations_of(module)]
    assert sorted(declared) == sorted(ApiKey)
    assert set(APIS) == set(ApiKey) == set(FIRST_FLEXIBLE_VERSION)
    assert set(HANDLERS) == set(APIS)


def test_the_tables_built_from_the_declarations_are_the_old_ones():
    assert served_versions(broker=True, controller=False) == BROKER
    assert served_versions(broker=False, controller=True) == CONTROLLER
    assert served_versions(broker=True, controller=True) == COMBINED
    assert served_versions(broker=True, controller=True, zookeeper_mode=True) == ZOOKEEPER
    assert NODE_APIS == INTER_NODE
    assert HELD_UNTIL_READY == HELD
    # Every inter-node API's handler is behind the inter-node rules, and only those.
    assert {key for key, handler in HANDLERS.items() if handler.__name__ == "checked"} == (
        INTER_NODE
    )


def test_the_controller_decides_only_apis_both_roles_serve():
    decided = {key for key, api in APIS.items() if api.controller_decides}
    assert decided == {19, 20, 37, 43, 45, 46, 33, 44, 30, 31, 50, 51, 48, 49, 57, 55}
    assert all(key in BROKER and key in CONTROLLER for key in decided)
    assert all(APIS[key].senders is Senders.NODES for key in INTER_NODE)


TWO_LISTENERS = {
    "listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:19092",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}
CONTROLLER_NODE = {
    "process.roles": "controller",
    "node.id": "3",
    "controller.quorum.voters": "3@127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "listeners": "CONTROLLER://127.0.0.1:9093,CLIENT://127.0.0.1:19093",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,CLIENT:PLAINTEXT",
}


@pytest.mark.parametrize(
    ("properties", "listener", "expected"),
    [
        ({}, "PLAINTEXT", COMBINED),  # one listener carries everything
        ({**TWO_LISTENERS, "process.roles": "broker,controller"}, "INTERNAL", COMBINED),
        (
            {**TWO_LISTENERS, "process.roles": "broker,controller"},
            "EXTERNAL",
            {key: versions for key, versions in COMBINED.items() if key not in INTER_NODE},
        ),
        (
            {**TWO_LISTENERS, "process.roles": "broker", "controller.quorum.voters": "3@h:9093"},
            "INTERNAL",
            BROKER,
        ),
        (
            {**TWO_LISTENERS, "process.roles": "broker", "controller.quorum.voters": "3@h:9093"},
            "EXTERNAL",
            {key: versions for key, versions in BROKER.items() if key not in INTER_NODE},
        ),
        (CONTROLLER_NODE, "CONTROLLER", CONTROLLER),
        (
            CONTROLLER_NODE,
            "CLIENT",
            {key: versions for key, versions in CONTROLLER.items() if key not in INTER_NODE},
        ),
        # ZooKeeper mode: every broker serves the controller's APIs, but not the KRaft
        # quorum's (DescribeQuorum), as Kafka 3.x's ZooKeeper brokers.
        ({"zookeeper.connect": "127.0.0.1:2181"}, "PLAINTEXT", ZOOKEEPER),
    ],
)
def test_api_versions_advertises_what_it_did(tmp_path, properties, listener, expected):
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path), **properties})
    server = BrokerServer(config)
    header = RequestHeader(ApiKey.API_VERSIONS, 3, 1, "test")
    ctx = server._context(listener, Connection(), "cluster", header)
    response = trio.run(api_versions.handle, ctx, None)
    advertised = {
        entry["api_key"]: (entry["min_version"], entry["max_version"])
        for entry in response["api_keys"]
    }
    assert advertised == {
        key: (ADVERTISED_FROM.get(key, low), high) for key, (low, high) in expected.items()
    }
    # What the node accepts on any listener is its roles' whole table.
    assert ctx.supported == {k: v for k, v in COMBINED.items() if k in ctx.supported}
    assert set(expected) <= set(ctx.supported)


EVERY_DECLARED_VERSION = [
    (api.key, version)
    for api in APIS.values()
    for version in range(api.versions[0], api.versions[1] + 1)
]


@pytest.mark.parametrize(("api_key", "version"), EVERY_DECLARED_VERSION)
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_declared_error_response_builds_at_every_declared_version(api_key, version, data):
    drawn = data.draw(st.from_type(codec.request_class(api_key, version)))
    try:
        request = codec.decode_request(api_key, version, codec.encode_entity(drawn), 0)
    except codec.DecodeError:
        reject()
    response_class = codec.response_class(api_key, version)
    for error in (Error.UNKNOWN_SERVER_ERROR, Error.CLUSTER_AUTHORIZATION_FAILED):
        built = codec.build(response_class, APIS[api_key].error_response(request, error))
        assert dataclasses.is_dataclass(built) and type(built) is response_class
        codec.encode_entity(built)
