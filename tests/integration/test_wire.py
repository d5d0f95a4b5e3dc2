"""The blocking wire client against a real broker process (one for the whole module)."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys

import pytest
from kio.schema.metadata.v12.request import MetadataRequest

from minibroker.apis.registry import advertised_versions, served_versions
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.tools import wire
from minibroker.tools.launcher import BrokerProcess, free_port, request_metadata
from tests.conftest import BROKER_READY_TIMEOUT, create_topic

TOPIC = "wired"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    broker = BrokerProcess.start(node_id=1, log_dir=tmp_path_factory.mktemp("wire") / "data")
    try:
        broker.wait_ready(BROKER_READY_TIMEOUT)
        create_topic(broker.bootstrap, TOPIC, 2)
        yield broker
    finally:
        assert broker.stop() == 0, broker.log_tail()


def metadata_fields(topics):
    return {
        "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }


def test_api_versions_lists_what_the_broker_serves(node):
    with wire.connect(node.bootstrap, 10) as client:
        offered = client.api_versions()
    # A single broker is its own controller: it serves both roles' APIs.
    served = served_versions(broker=True, controller=True)
    assert offered == advertised_versions(served, inter_node_listener=True)


@pytest.mark.parametrize("version", [1, 9, 12])
def test_requests_at_flexible_and_older_versions(node, version):
    with wire.connect(node.bootstrap, 10, exact=True) as client:
        response = client.request(ApiKey.METADATA, version, metadata_fields([TOPIC]))
    (topic,) = response.topics
    assert topic.name == TOPIC
    assert sorted(p.partition_index for p in topic.partitions) == [0, 1]
    assert [b.node_id for b in response.brokers] == [1]


def test_many_requests_on_one_connection_keep_their_order(node):
    with wire.connect(node.bootstrap, 10, exact=True) as client:
        client.api_versions()
        for _ in range(20):
            response = client.request(ApiKey.METADATA, 12, metadata_fields(None))
            assert TOPIC in {t.name for t in response.topics}
        # Entities go as they are, with the caller's correlation id.
        request = MetadataRequest(
            topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        assert client.call(request, correlation_id=-7).topics == ()
        client.send_request(ApiKey.METADATA, 12, b"", correlation_id=5)  # a body cut short
        with pytest.raises(wire.WireError, match="closed the connection"):
            client.receive_frame()


def test_an_error_code_comes_back_decoded(node):
    with wire.connect(node.bootstrap, 10) as client:
        response = client.request(
            ApiKey.FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": ["share"]}
        )
    (coordinator,) = response.coordinators
    # A share coordinator key (KIP-932) must be "group:topicId:partition": refused with a
    # message that says why.
    assert Error(int(coordinator.error_code.value)) == Error.INVALID_REQUEST
    assert "key type 2" in coordinator.error_message


def test_a_negative_frame_size_closes_the_connection(node):
    with wire.connect(node.bootstrap, 10) as client:
        client.send_raw(struct.pack(">i", -1))
        with pytest.raises(wire.WireError, match="after 0 of the 4 bytes"):
            client.receive_frame()


def test_readiness_and_request_metadata(node):
    assert wire.answers_api_versions(node.bootstrap, 5)
    assert not wire.answers_api_versions(("127.0.0.1", free_port()), 1)
    assert [b.node_id for b in request_metadata(node.port, [TOPIC]).brokers] == [1]
    with pytest.raises(OSError):
        request_metadata(free_port(), timeout=1)


def run_probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "minibroker", "probe", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_minibroker_probe_on_the_wire_client(node):
    """`minibroker probe`: one `ok:` line and status 0 for a node that serves, one `error:`
    line and status 1 for an address where nothing listens or nothing answers."""
    healthy = run_probe("--bootstrap", node.bootstrap)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert healthy.stdout.startswith(f"ok: {node.bootstrap} answers for cluster ")
    assert f"1 brokers (1 at 127.0.0.1:{node.port})" in healthy.stdout

    nobody = f"127.0.0.1:{free_port()}"
    refused = run_probe("--bootstrap", nobody, "--timeout", "2")
    assert refused.returncode == 1
    assert refused.stdout.startswith(f"error: {nobody}: ")

    with socket.create_server(("127.0.0.1", 0)) as silent:  # listens, never answers
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        quiet = run_probe("--bootstrap", address, "--timeout", "1")
    assert quiet.returncode == 1
    assert quiet.stdout.strip() == f"error: {address}: no answer within 1.0s"
