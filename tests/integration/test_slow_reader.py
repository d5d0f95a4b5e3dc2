"""A client that does not read its Fetch response holds only its own connection.

The response is larger than the broker's socket send buffer can take (12 MB against Linux's
4 MB maximum), so the broker must stop mid-response and wait until the reader makes room;
meanwhile other clients are served. Once the slow client reads, the whole response arrives
intact.
"""

import datetime
import socket

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic

from tests.conftest import encode, raw_request, read_response
from tests.integration.test_bad_input import Client
from tests.unit.batch_factory import make_batch

TOPIC = "bulk"
BATCHES = 14
VALUE_BYTES = 900_000  # one record per batch, under the default message.max.bytes of 1 MB
FETCH_MAX_BYTES = 16 * 1024 * 1024


def whole_partition_fetch() -> FetchRequest:
    return FetchRequest(
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=0,
        max_bytes=FETCH_MAX_BYTES,
        topics=(
            FetchTopic(
                topic=TOPIC,
                partitions=(
                    FetchPartition(
                        partition=0, fetch_offset=0, partition_max_bytes=FETCH_MAX_BYTES
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def test_a_stalled_fetch_response_blocks_no_other_client(broker_factory):
    broker = broker_factory({"fetch.max.bytes": FETCH_MAX_BYTES})
    producer = Client(broker)
    batches = [make_batch([(b"k", bytes([n]) * VALUE_BYTES)]) for n in range(BATCHES)]
    for batch in batches:
        assert producer.produce(batch, topic=TOPIC).error_code == ErrorCode.none

    # Ask for all 12 MB and read nothing yet.
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, port = broker.bootstrap.rsplit(":", 1)
    slow.settimeout(10)
    slow.connect((host, int(port)))
    request = whole_partition_fetch()
    raw_request(slow, request.__api_key__, request.__version__, encode(request), 1)

    # Meanwhile the others are served: a produce, and a fetch of what it wrote.
    answer = producer.produce(make_batch([(b"k", b"meanwhile")]), topic=TOPIC)
    assert answer.error_code == ErrorCode.none
    assert answer.base_offset == BATCHES
    reader = Client(broker)
    fetched = reader.fetch(BATCHES, topic=TOPIC)
    assert fetched.error_code == ErrorCode.none
    assert b"meanwhile" in bytes(fetched.records)

    answered, response = read_response(slow, request.__api_key__, request.__version__)
    assert answered == 1
    partition = response.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    records = bytes(partition.records)
    # Every batch whole and in order; from magic on, the bytes are the producer's.
    position = 0
    for batch in batches:
        assert records[position + 16 : position + len(batch)] == batch[16:]
        position += len(batch)
    for connection in (producer, reader):
        connection.close()
    slow.close()
