"""The metadata quorum: `controller.quorum.bootstrap.servers` (Kafka 4's way of naming the
controllers) and DescribeQuorum's answer built from the controller's state (apis/quorum.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from minibroker.apis import Connection, admin, quorum
from minibroker.common.config import (
    UNKNOWN_CONTROLLER_ID,
    BrokerConfig,
    ConfigError,
    Voter,
    load_config,
)
from minibroker.controller.state import BrokerInfo, ControllerState
from minibroker.node.server import BrokerServer
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.framing import RequestHeader
from minibroker.protocol.versions import ApiKey

BROKER = {
    "process.roles": "broker",
    "node.id": "2",
    "listeners": "PLAINTEXT://localhost:9092",
}


def test_a_broker_named_its_controller_by_bootstrap_servers_learns_its_id():
    config = BrokerConfig.from_properties(
        {**BROKER, "controller.quorum.bootstrap.servers": "localhost:9093"}
    )
    assert config.controller == Voter(UNKNOWN_CONTROLLER_ID, "localhost", 9093)


def test_a_controller_named_by_bootstrap_servers_is_this_node():
    config = BrokerConfig.from_properties(
        {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": "localhost:9093",
            "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
            "controller.listener.names": "CONTROLLER",
        }
    )
    assert config.controller == Voter(1, "localhost", 9093)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, "needs controller.quorum.voters or controller.quorum.bootstrap.servers"),
        (
            {
                "controller.quorum.bootstrap.servers": "a:9093",
                "controller.quorum.voters": "1@a:9093",
            },
            "not both",
        ),
        ({"controller.quorum.bootstrap.servers": "a:9093,b:9093"}, "exactly one controller"),
        ({"controller.quorum.bootstrap.servers": "1@a:9093"}, "is not host:port"),
    ],
)
def test_bootstrap_servers_refused(extra, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties({**BROKER, **extra})


def _broker(node_id: int, fenced: bool, heartbeat_ms: int) -> BrokerInfo:
    return BrokerInfo(node_id, "h", 9092, 1, "x", fenced, heartbeat_ms)


def test_describe_quorum_one_voter_and_the_brokers_as_observers():
    state = ControllerState(controller_epoch=3, metadata_offset=17)
    state.brokers = {
        1: _broker(1, False, 1_000),  # a combined node: the voter, not an observer
        2: _broker(2, False, 900),
        3: _broker(3, True, 400),
    }
    config = BrokerConfig.from_properties(
        {"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:9092"}
    )
    controller = SimpleNamespace(state=state, config=config, node_id=1)
    answer = quorum.describe(controller, now_ms=1_000, wall_now_ms=50_000)
    (partition,) = answer["topics"][0]["partitions"]
    assert answer["topics"][0]["topic_name"] == "__cluster_metadata"
    assert (partition["leader_id"], partition["leader_epoch"]) == (1, 3)
    assert partition["high_watermark"] == 17
    assert [v["replica_id"] for v in partition["current_voters"]] == [1]
    assert partition["current_voters"][0]["log_end_offset"] == 17
    caught_up, fenced = partition["observers"]
    assert (caught_up["replica_id"], caught_up["log_end_offset"]) == (2, 17)
    # Heartbeat times move from the controller's monotonic clock to wall-clock milliseconds.
    assert caught_up["last_fetch_timestamp"] == caught_up["last_caught_up_timestamp"] == 49_900
    assert (fenced["replica_id"], fenced["log_end_offset"]) == (3, -1)
    assert fenced["last_fetch_timestamp"] == 49_400 and fenced["last_caught_up_timestamp"] == -1
    assert answer["nodes"][0]["listeners"][0]["port"] == 9092


STOCK_CONFIGS = Path(__file__).parents[1] / "fixtures" / "kafka_config"


@pytest.mark.parametrize(
    ("name", "roles", "node_id", "controller"),
    [
        ("server.properties", {"broker", "controller"}, 1, Voter(1, "localhost", 9093)),
        ("controller.properties", {"controller"}, 1, Voter(1, "localhost", 9093)),
        (
            "broker.properties",
            {"broker"},
            2,
            Voter(UNKNOWN_CONTROLLER_ID, "localhost", 9093),
        ),
    ],
)
def test_kafkas_stock_config_files_load_unchanged(name, roles, node_id, controller):
    """Kafka 4's config/*.properties as shipped (tests/fixtures/kafka_config), not one line
    changed: each loads, with its roles, its node id and the controller it names by
    controller.quorum.bootstrap.servers."""
    config = load_config(STOCK_CONFIGS / name, [])
    assert (config.process_roles, config.node_id) == (roles, node_id)
    assert config.controller == controller
    assert str(config.log_dirs[0]).startswith("/tmp/kraft-")


# DescribeCluster's endpoint types (KIP-919), as `kafka-metadata-quorum --bootstrap-controller`
# needs them: the controller answers for the controllers, a broker for the brokers.
SPLIT_CONTROLLER = {
    "process.roles": "controller",
    "node.id": "1",
    "controller.quorum.bootstrap.servers": "localhost:9093",
    "listeners": "CONTROLLER://:9093",
    "advertised.listeners": "CONTROLLER://localhost:9093",
    "controller.listener.names": "CONTROLLER",
}
SPLIT_BROKER = {**BROKER, "controller.quorum.bootstrap.servers": "localhost:9093"}
COMBINED = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.bootstrap.servers": "localhost:9093",
    "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
    "advertised.listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
    "controller.listener.names": "CONTROLLER",
}
ONE_LISTENER = {"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:9092"}


@pytest.mark.parametrize(
    ("properties", "listener", "served"),
    [
        (SPLIT_CONTROLLER, "CONTROLLER", {admin.CONTROLLER_ENDPOINT}),
        (SPLIT_BROKER, "PLAINTEXT", {admin.BROKER_ENDPOINT}),
        (COMBINED, "CONTROLLER", {admin.CONTROLLER_ENDPOINT}),
        (COMBINED, "PLAINTEXT", {admin.BROKER_ENDPOINT}),
        # minibroker's default, one listener for everything (Kafka has no such node).
        (ONE_LISTENER, "PLAINTEXT", {admin.BROKER_ENDPOINT, admin.CONTROLLER_ENDPOINT}),
        ({"zookeeper.connect": "127.0.0.1:2181"}, "PLAINTEXT", {admin.BROKER_ENDPOINT}),
    ],
)
def test_which_endpoint_type_a_listener_serves(properties, listener, served):
    assert admin.endpoint_types(BrokerConfig.from_properties(properties), listener) == served


def _describe_cluster(tmp_path, properties: dict, listener: str, endpoint_type: int) -> dict:
    server = BrokerServer(BrokerConfig.from_properties({"log.dirs": str(tmp_path), **properties}))
    header = RequestHeader(ApiKey.DESCRIBE_CLUSTER, 1, 1, "test")
    ctx = server._context(listener, Connection(), "cluster-x", header)
    request = SimpleNamespace(
        endpoint_type=endpoint_type, include_cluster_authorized_operations=False
    )
    answer = trio.run(admin.handle_describe_cluster, ctx, request)
    # The answer builds as Kafka's DescribeCluster v1 response.
    codec.encode_response(ApiKey.DESCRIBE_CLUSTER, 1, answer)
    return answer


def test_the_controller_describes_the_controllers(tmp_path):
    answer = _describe_cluster(tmp_path, SPLIT_CONTROLLER, "CONTROLLER", admin.CONTROLLER_ENDPOINT)
    assert answer["error_code"] == Error.NONE and answer["endpoint_type"] == 2
    assert answer["controller_id"] == 1 and answer["cluster_id"] == "cluster-x"
    assert [(b["broker_id"], b["host"], b["port"]) for b in answer["brokers"]] == [
        (1, "localhost", 9093)
    ]


@pytest.mark.parametrize(
    ("properties", "listener", "endpoint_type", "error"),
    [
        # A broker's DescribeCluster sent to the controller, and the controllers' to a broker.
        (SPLIT_CONTROLLER, "CONTROLLER", 1, Error.MISMATCHED_ENDPOINT_TYPE),
        (SPLIT_BROKER, "PLAINTEXT", 2, Error.MISMATCHED_ENDPOINT_TYPE),
        (SPLIT_CONTROLLER, "CONTROLLER", 3, Error.UNSUPPORTED_ENDPOINT_TYPE),
    ],
)
def test_describe_cluster_at_the_wrong_endpoint(
    tmp_path, properties, listener, endpoint_type, error
):
    answer = _describe_cluster(tmp_path, properties, listener, endpoint_type)
    assert answer["error_code"] == error and answer["brokers"] == ()
    assert answer["error_message"]
