"""Pipelined Produce requests on one connection: a response may wait for the next request's
and go out with it in one write (node/server.py, _answered_at_once), and still every request
is answered, in order, and none that was served loses its answer when the connection closes.

The tests run on the worker's shared broker (tests/conftest.py's SHARED_BROKER, the pytest
plugin's `kafka_broker`), each on a topic of its own: its offsets start at 0.
"""

import datetime
import socket

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v7.request import PartitionProduceData, ProduceRequest, TopicProduceData

from minibroker.protocol.framing import frame_request
from minibroker.protocol.versions import ApiKey
from minibroker.testing import Cluster
from tests.conftest import SHARED_BROKER, TEST_CLIENT_ID, create_topic, encode, read_response
from tests.unit.batch_factory import make_batch

pytestmark = SHARED_BROKER

RECORDS_PER_BATCH = 3


@pytest.fixture
def broker(kafka_broker: Cluster) -> Cluster:
    """The worker's shared broker, under the name the tests take."""
    return kafka_broker


def produce_frame(topic: str, correlation_id: int, partition: int, acks: int) -> bytes:
    request = ProduceRequest(
        acks=acks,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(
                    PartitionProduceData(index=partition, records=make_batch(RECORDS_PER_BATCH)),
                ),
            ),
        ),
    )
    return frame_request(ApiKey.PRODUCE, 7, correlation_id, TEST_CLIENT_ID, encode(request))


def connect(broker: Cluster) -> socket.socket:
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def test_every_pipelined_request_is_answered_in_order(broker):
    topic = "piped-in-order"
    create_topic(broker.bootstrap_servers, topic, 2)
    # acks=1 mostly, one acks=-1 (answered by its own write) and one acks=0 (no answer).
    acks = {correlation_id: 1 for correlation_id in range(30)}
    acks[10], acks[20] = -1, 0
    with connect(broker) as sock:
        sock.sendall(
            b"".join(produce_frame(topic, c, c % 2, acks[c]) for c in range(30))  # all at once
        )
        answers = [read_response(sock, ApiKey.PRODUCE, 7) for _ in range(29)]
    assert [correlation_id for correlation_id, _ in answers] == [c for c in acks if acks[c]]
    expected_offsets: dict[int, list[int]] = {0: [], 1: []}
    position = [0, 0]
    for correlation_id in range(30):
        partition = correlation_id % 2
        if acks[correlation_id]:
            expected_offsets[partition].append(position[partition])
        position[partition] += RECORDS_PER_BATCH
    offsets: dict[int, list[int]] = {0: [], 1: []}
    for _, response in answers:
        (partition,) = response.responses[0].partition_responses
        assert partition.error_code == ErrorCode.none
        offsets[partition.index].append(partition.base_offset)
    assert offsets == expected_offsets


def test_answers_held_for_a_failing_acks0_request_still_go_out(broker):
    """Kafka closes the connection when an acks=0 Produce fails; the requests before it were
    appended, and their answers must reach the client before the close."""
    topic = "piped-failing-acks0"
    create_topic(broker.bootstrap_servers, topic, 1)
    with connect(broker) as sock:
        frames = [produce_frame(topic, c, 0, 1) for c in range(5)]
        frames.append(produce_frame(topic, 5, 99, 0))  # no such partition: the connection closes
        sock.sendall(b"".join(frames))
        answers = [read_response(sock, ApiKey.PRODUCE, 7) for _ in range(5)]
        assert sock.recv(1) == b""  # then closed
    assert [correlation_id for correlation_id, _ in answers] == list(range(5))
    assert [
        response.responses[0].partition_responses[0].base_offset for _, response in answers
    ] == [c * RECORDS_PER_BATCH for c in range(5)]
