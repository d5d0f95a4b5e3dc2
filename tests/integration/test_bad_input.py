"""Bad input over raw sockets: the right error code or a closed connection, and nothing else.

Every case runs beside a second, well-behaved connection that was opened before the bad input
and keeps producing and fetching afterwards, and checks that what was stored before is intact.

The cases share one broker (`guarded_broker`, started once for the module), each on a topic of
its own; the one that needs other settings has a broker of its own.
"""

import datetime
import itertools
import socket
import struct
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v7.request import PartitionProduceData, ProduceRequest, TopicProduceData

from minibroker.tools import wire
from minibroker.tools.launcher import BrokerProcess
from tests.conftest import (
    BROKER_READY_TIMEOUT,
    TEST_CLIENT_ID,
    encode,
    raw_request,
    read_response,
)
from tests.unit.batch_factory import make_batch

TOPIC = "guarded"
GUARDED_SETTINGS = {"message.max.bytes": 2000, "socket.request.max.bytes": 100_000}
_topics = itertools.count(1)


def connect(broker) -> socket.socket:
    host, port = broker.bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def produce_request(records: bytes, *, topic=TOPIC, partition=0, acks=1) -> ProduceRequest:
    return ProduceRequest(
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(PartitionProduceData(index=partition, records=records),),
            ),
        ),
    )


def fetch_request(offset: int, *, topic=TOPIC, partition=0) -> FetchRequest:
    return FetchRequest(
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=0,
        max_bytes=1 << 20,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(
                    FetchPartition(
                        partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


class Client:
    """A raw connection that sends one request at a time and reads its answer."""

    def __init__(self, broker, topic: str = TOPIC) -> None:
        self.client = wire.connect(broker.bootstrap, 10, client_id=TEST_CLIENT_ID, exact=True)
        self.topic = topic

    def call(self, request):
        return self.client.call(request)

    def produce(self, records: bytes, **kwargs):
        response = self.call(produce_request(records, **{"topic": self.topic, **kwargs}))
        return response.responses[0].partition_responses[0]

    def fetch(self, offset: int, **kwargs):
        response = self.call(fetch_request(offset, **{"topic": self.topic, **kwargs}))
        return response.responses[0].partitions[0]

    def close(self) -> None:
        self.client.close()


@pytest.fixture(scope="module")
def guarded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The module's broker, with a small max.message.bytes and socket.request.max.bytes; it
    must still run and stop cleanly after every case."""
    broker = BrokerProcess.start(
        node_id=1, log_dir=tmp_path_factory.mktemp("bad-input") / "data", overrides=GUARDED_SETTINGS
    )
    try:
        broker.wait_ready(BROKER_READY_TIMEOUT)
        yield broker
    finally:
        exit_code = broker.stop() if broker.running else broker.exit_code
        assert exit_code == 0, f"unclean broker shutdown:\n{broker.log_tail()}"


@pytest.fixture
def guarded(guarded_broker: BrokerProcess):
    """The module's broker, a topic of this test's own holding one known batch, and a healthy
    client connected before anything bad happens."""
    broker = guarded_broker
    assert broker.running, f"the broker died in an earlier case:\n{broker.log_tail()}"
    healthy = Client(broker, f"{TOPIC}-{next(_topics)}")
    first = make_batch([(b"k", b"before")])
    answer = healthy.produce(first)
    assert answer.error_code == ErrorCode.none
    assert answer.base_offset == 0
    yield broker, healthy, first
    # The healthy connection still works, and the batch stored first is intact.
    answer = healthy.produce(make_batch([(b"k", b"after")]))
    assert answer.error_code == ErrorCode.none, answer
    fetched = healthy.fetch(0)
    assert fetched.error_code == ErrorCode.none
    stored_first = fetched.records[: len(first)]
    # Bytes from magic onwards are the producer's; offset and leader epoch are the broker's.
    assert stored_first[16:] == first[16:], "the first batch's bytes changed"
    assert fetched.high_watermark == answer.base_offset + 1
    healthy.close()


def assert_closed(sock: socket.socket) -> None:
    """The broker closed this connection: a read sees EOF or a reset, never a response."""
    sock.settimeout(10)
    try:
        data = sock.recv(100)
    except ConnectionResetError:
        return
    assert data == b"", f"expected the connection to be closed, got {data!r}"


def test_frame_larger_than_socket_request_max_bytes_closes(guarded):
    broker, _, _ = guarded
    with connect(broker) as sock:
        sock.sendall(struct.pack(">i", 100_001) + b"\x00" * 64)
        assert_closed(sock)


def test_negative_frame_size_closes(guarded):
    broker, _, _ = guarded
    with connect(broker) as sock:
        sock.sendall(struct.pack(">i", -1))
        assert_closed(sock)


def test_frame_that_does_not_parse_closes(guarded):
    broker, _, _ = guarded
    with connect(broker) as sock:
        # Produce v7 header, then a body that ends in the middle of the topic array.
        raw_request(sock, 0, 7, b"\xff\xff\x00\x01\x00\x00\x13\x88\x00\x00\x00\x05", 1)
        assert_closed(sock)


def test_unknown_api_key_closes(guarded):
    broker, _, _ = guarded
    with connect(broker) as sock:
        sock.sendall(struct.pack(">ihhih", 10, 999, 0, 1, 0))
        assert_closed(sock)


def test_unsupported_api_versions_version_gets_v0_answer(guarded):
    broker, _, _ = guarded
    from kio.schema.api_versions.v0.response import ApiVersionsResponse
    from kio.serial import entity_reader

    with connect(broker) as sock:
        sock.sendall(struct.pack(">ihhih", 10, 18, 99, 7, 0))
        frame = wire.WireClient(sock).receive_frame()
        (correlation_id,) = struct.unpack_from(">i", frame)
        body, _ = entity_reader(ApiVersionsResponse)(frame, 4)
    assert correlation_id == 7
    assert body.error_code == ErrorCode.unsupported_version
    assert any(k.api_key == 18 and k.max_version == 5 for k in body.api_keys)


def corrupt_crc(batch: bytes) -> bytes:
    damaged = bytearray(batch)
    damaged[-1] ^= 0xFF
    return bytes(damaged)


def bad_magic(batch: bytes) -> bytes:
    damaged = bytearray(batch)
    damaged[16] = 1
    return bytes(damaged)


def bad_length(batch: bytes) -> bytes:
    damaged = bytearray(batch)
    struct.pack_into(">i", damaged, 8, len(batch))  # claims 12 bytes more than it has
    return bytes(damaged)


@pytest.mark.parametrize("damage", [corrupt_crc, bad_magic, bad_length])
def test_corrupt_batch_gets_corrupt_message_and_appends_nothing(guarded, damage):
    _, healthy, _ = guarded
    good = make_batch([(b"k", b"good")])
    answer = healthy.produce(good + damage(make_batch([(b"k", b"bad")])))
    assert answer.error_code == ErrorCode.corrupt_message
    assert healthy.fetch(0).high_watermark == 1, "part of a refused request was appended"


def test_unknown_topic_and_partition(broker_factory):
    broker = broker_factory({"auto.create.topics.enable": "false"})
    client = Client(broker)
    try:
        assert client.produce(make_batch(1), topic="nope").error_code == (
            ErrorCode.unknown_topic_or_partition
        )
        assert client.fetch(0, topic="nope").error_code == ErrorCode.unknown_topic_or_partition
    finally:
        client.close()


def test_unknown_partition_of_existing_topic(guarded):
    _, healthy, _ = guarded
    assert healthy.produce(make_batch(1), partition=7).error_code == (
        ErrorCode.unknown_topic_or_partition
    )
    assert healthy.fetch(0, partition=7).error_code == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize("offset", [-1, 2, 1000])
def test_fetch_outside_the_log_is_offset_out_of_range(guarded, offset):
    _, healthy, _ = guarded
    answer = healthy.fetch(offset)
    assert answer.error_code == ErrorCode.offset_out_of_range
    assert answer.high_watermark == 1


def test_fetch_at_log_end_is_empty_not_an_error(guarded):
    _, healthy, _ = guarded
    answer = healthy.fetch(1)
    assert answer.error_code == ErrorCode.none
    assert not answer.records


@pytest.mark.parametrize("acks", [2, -2, 5])
def test_invalid_acks(guarded, acks):
    _, healthy, _ = guarded
    assert healthy.produce(make_batch(1), acks=acks).error_code == ErrorCode.invalid_required_acks
    assert healthy.fetch(0).high_watermark == 1


def test_batch_over_max_message_bytes(guarded):
    _, healthy, _ = guarded
    big = make_batch([(b"k", b"x" * 3000)])
    assert healthy.produce(big).error_code == ErrorCode.message_too_large
    assert healthy.fetch(0).high_watermark == 1


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        (3, 9, b"\xff\xff\xff\xff\x0f"),  # Metadata: a compact array of 2^32 - 2 topics
        (3, 1, struct.pack(">i", 2**31 - 1)),  # Metadata: 2^31 - 1 topics
        (42, 0, b"\xff\xff\xff\xff"),  # DeleteGroups: a null list of groups
    ],
)
def test_impossible_array_closes_only_that_connection(guarded, api_key, version, body):
    """Found by the frame fuzzer: kio reserved memory for the whole claimed array and the
    failed allocation aborted the broker; a null non-nullable array reached a handler as
    None. Both are frames that cannot be parsed: that connection closes, nothing else."""
    broker, _, _ = guarded
    with connect(broker) as sock:
        raw_request(sock, api_key, version, body, 1)
        assert_closed(sock)
    assert broker.running


def test_metadata_v10_with_a_null_topic_name_is_invalid_request(guarded):
    """Found by the frame fuzzer: Metadata v10/v11 can carry a topic id with a null name but
    their response cannot hold a null name; encoding the answer raised and the connection
    closed with a traceback. Kafka answers INVALID_REQUEST for each topic, the name as ""."""
    import uuid

    from kio.schema.metadata.v10.request import MetadataRequest, MetadataRequestTopic

    _, healthy, _ = guarded
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=uuid.uuid4(), name=None),),
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    (topic,) = healthy.call(request).topics
    assert topic.error_code == ErrorCode.invalid_request
    assert topic.name == ""


def test_create_and_delete_topics_with_a_negative_timeout_do_not_wait(guarded):
    """Found by the frame fuzzer: a negative timeout_ms reached trio.move_on_after, whose
    ValueError became UNKNOWN_SERVER_ERROR and a traceback. Kafka does not wait then."""
    from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState

    _, healthy, _ = guarded
    created = healthy.call(
        CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name="no-wait",
                    num_partitions=1,
                    replication_factor=1,
                    assignments=(),
                    configs=(),
                ),
            ),
            timeout=datetime.timedelta(milliseconds=-1),
            validate_only=False,
        )
    )
    assert created.topics[0].error_code == ErrorCode.none, created
    deleted = healthy.call(
        DeleteTopicsRequest(
            topics=(DeleteTopicState(name="no-wait", topic_id=__import__("uuid").UUID(int=0)),),
            timeout=datetime.timedelta(milliseconds=-5),
        )
    )
    assert deleted.responses[0].error_code in (ErrorCode.none, ErrorCode.request_timed_out)


def test_unknown_tagged_fields_are_ignored_not_refused(guarded):
    """A newer client may send a tag this broker's schema lacks (KIP-482); Kafka skips it.
    Found by the frame fuzzer: kio refused such a request and the connection closed."""
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    broker, healthy, _ = guarded
    body = encode(
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=healthy.topic),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    # The request's own tag buffer (its last byte) now holds tag 99, two bytes long.
    with connect(broker) as sock:
        raw_request(sock, 3, 12, body[:-1] + b"\x01\x63\x02\xab\xcd", 1)
        answered, response = read_response(sock, 3, 12)
    assert answered == 1
    (topic,) = response.topics
    assert (topic.name, topic.error_code) == (healthy.topic, ErrorCode.none)
