"""The hand-written Produce decoder reads what kio reads, as writable views of the frame."""

import datetime
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.produce.v11.request import PartitionProduceData
from kio.static.primitive import Records, i16, i32, i32Timedelta

from minibroker.apis.registry import APIS
from minibroker.protocol import codec
from minibroker.protocol.codec import DecodeError
from minibroker.protocol.framing import frame_request
from minibroker.protocol.produce_request import (
    ACKS_PEEK_BYTES,
    decode_produce_request,
    produce_acks,
)
from minibroker.protocol.schemas import ProduceRequestV13, TopicProduceDataV13
from minibroker.protocol.versions import ApiKey

st.register_type_strategy(Records, st.binary(max_size=80).map(Records))
LOW, HIGH = APIS[ApiKey.PRODUCE].versions


def as_plain(request) -> tuple:
    return (
        getattr(request, "transactional_id", None),  # from v3
        request.acks,
        request.timeout,
        [
            (
                getattr(topic, "name", None),  # before v13
                getattr(topic, "topic_id", None),  # v13+ (KIP-516)
                [
                    (p.index, None if p.records is None else bytes(p.records))
                    for p in topic.partition_data
                ],
            )
            for topic in request.topic_data
        ],
    )


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(version=st.integers(LOW, HIGH), data=st.data())
def test_same_fields_as_kio(version, data):
    request = data.draw(st.from_type(codec.request_class(ApiKey.PRODUCE, version)))
    frame = bytearray(b"HEAD" + codec.encode_entity(request))
    mine = decode_produce_request(version, frame, 4)
    assert as_plain(mine) == as_plain(codec.decode_request(ApiKey.PRODUCE, version, frame, 4))


def test_records_are_writable_views_of_the_frame():
    request = codec.build(
        codec.request_class(ApiKey.PRODUCE, 9),
        {
            "acks": 1,
            "timeout": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"abc"}]}],
        },
    )
    frame = bytearray(codec.encode_entity(request))
    records = decode_produce_request(9, frame, 0).topic_data[0].partition_data[0].records
    records[0] = ord("X")
    assert b"Xbc" in frame


@pytest.mark.parametrize("version", [3, 9])
def test_truncated_requests_are_decode_errors(version):
    request = codec.build(
        codec.request_class(ApiKey.PRODUCE, version),
        {
            "acks": 1,
            "timeout": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"abc"}]}],
        },
    )
    frame = bytearray(codec.encode_entity(request))
    for cut in range(len(frame) - 1):
        with pytest.raises(DecodeError):
            decode_produce_request(version, frame[:cut], 0)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    version=st.integers(LOW, HIGH),
    client_id=st.none() | st.text(max_size=40),
    data=st.data(),
)
def test_produce_acks_reads_the_acks_the_decoder_reads(version, client_id, data):
    """The server's look at the next request (whether its response may wait) finds the acks
    the full decode finds, from the frame's start, header included."""
    request = data.draw(st.from_type(codec.request_class(ApiKey.PRODUCE, version)))
    framed = frame_request(ApiKey.PRODUCE, version, 7, client_id, codec.encode_entity(request))
    frame = framed[4:]
    acks = produce_acks(frame[:ACKS_PEEK_BYTES])
    if acks is None:
        # Only when the transactional id or client id pushes acks past the bytes looked at.
        assert len(frame) > ACKS_PEEK_BYTES
    else:
        assert acks == request.acks


def test_produce_acks_is_none_for_other_requests_and_short_heads():
    body = codec.encode_entity(
        codec.build(
            codec.request_class(ApiKey.PRODUCE, 9),
            {"acks": -1, "timeout": 1000, "topic_data": []},
        )
    )
    frame = frame_request(ApiKey.PRODUCE, 9, 1, "client", body)[4:]
    assert produce_acks(frame) == -1
    for cut in range(len(frame)):
        head = frame[:cut]
        assert produce_acks(head) in (None, -1)
    fetch = frame_request(ApiKey.FETCH, 4, 1, "client", b"\x00" * 40)[4:]
    assert produce_acks(fetch) is None


def test_v13_names_topics_by_id():
    """Produce v13 (KIP-516): the topic id where the name was; the zero id reads as None."""
    topic_id = uuid.UUID("11111111-2222-3333-4444-555555555555")
    request = ProduceRequestV13(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=1)),
        topic_data=(
            TopicProduceDataV13(
                topic_id=topic_id,
                partition_data=(PartitionProduceData(index=i32(3), records=Records(b"xyz")),),
            ),
            TopicProduceDataV13(topic_id=None, partition_data=()),
        ),
    )
    frame = bytearray(codec.encode_entity(request))
    mine = decode_produce_request(13, frame, 0)
    assert [(t.name, t.topic_id) for t in mine.topic_data] == [(None, topic_id), (None, None)]
    assert as_plain(mine) == as_plain(codec.decode_request(ApiKey.PRODUCE, 13, frame, 0))
    assert bytes(mine.topic_data[0].partition_data[0].records) == b"xyz"
