"""The replica fetcher's hand-written Fetch requests and responses (v18 by topic id, v12 by
name) agree with the codec's (kio's for v12, protocol/schemas.py's v18)."""

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.protocol import codec
from minibroker.protocol.framing import FrameError
from minibroker.protocol.replica_fetch import (
    HIGH_WATERMARK_UNKNOWN,
    REPLICA_FETCH_VERSION,
    REPLICA_FETCH_VERSION_BY_NAME,
    ReplicaFetchPartition,
    decode_replica_fetch_response,
    encode_replica_fetch_request,
)
from minibroker.protocol.versions import ApiKey

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TOPIC_NAMES = st.text(st.sampled_from("abc-_.XYZ019é"), min_size=1, max_size=20)


TOPIC_IDS = st.uuids().filter(lambda topic_id: topic_id.int != 0)


def test_written_for_the_versions_the_fetcher_sends():
    # Kafka 4.1-IV1+'s follower version (MetadataVersion.fetchRequestVersion), and its
    # fallback for partitions without a topic id.
    assert (REPLICA_FETCH_VERSION, REPLICA_FETCH_VERSION_BY_NAME) == (18, 12)


request_partitions = st.builds(ReplicaFetchPartition, INT32, INT32, INT64, INT32, INT64, INT32)
request_partitions_v18 = st.builds(
    ReplicaFetchPartition,
    INT32,
    INT32,
    INT64,
    INT32,
    INT64,
    INT32,
    st.one_of(st.just(HIGH_WATERMARK_UNKNOWN), INT64),
)


@settings(max_examples=200)
@given(
    INT32,
    INT32,
    INT32,
    INT32,
    st.dictionaries(TOPIC_NAMES, st.lists(request_partitions, max_size=4), max_size=3),
    INT32,
    INT32,
    st.dictionaries(TOPIC_NAMES, st.lists(INT32, max_size=4), max_size=3),
)
def test_request_is_byte_identical_to_kio(
    replica_id, max_wait, min_bytes, max_bytes, topics, session_id, session_epoch, forgotten
):
    ours = encode_replica_fetch_request(
        replica_id=replica_id,
        max_wait_ms=max_wait,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        topics=topics,
        session_id=session_id,
        session_epoch=session_epoch,
        forgotten=forgotten,
    )
    described = {
        "cluster_id": None,
        "replica_id": replica_id,
        "max_wait": max_wait,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": session_epoch,
        "topics": [
            {"topic": topic, "partitions": [p._asdict() for p in partitions]}
            for topic, partitions in topics.items()
        ],
        "forgotten_topics_data": [
            {"topic": topic, "partitions": indexes} for topic, indexes in forgotten.items()
        ],
        "rack_id": "",
    }
    request = codec.build(
        codec.request_class(ApiKey.FETCH, REPLICA_FETCH_VERSION_BY_NAME), described
    )
    assert ours == codec.encode_entity(request)


@settings(max_examples=200)
@given(
    INT32,
    INT64,
    INT32,
    st.dictionaries(TOPIC_IDS, st.lists(request_partitions_v18, max_size=4), max_size=3),
    INT32,
    INT32,
    st.dictionaries(TOPIC_IDS, st.lists(INT32, max_size=4), max_size=3),
)
def test_v18_request_is_byte_identical_to_the_codecs(
    replica_id, replica_epoch, max_wait, topics, session_id, session_epoch, forgotten
):
    ours = encode_replica_fetch_request(
        replica_id=replica_id,
        replica_epoch=replica_epoch,
        max_wait_ms=max_wait,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=topics,
        session_id=session_id,
        session_epoch=session_epoch,
        forgotten=forgotten,
        version=18,
    )
    described = {
        "cluster_id": None,
        "replica_state": {"replica_id": replica_id, "replica_epoch": replica_epoch},
        "max_wait": max_wait,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": session_epoch,
        "topics": [
            {"topic_id": topic_id, "partitions": [p._asdict() for p in partitions]}
            for topic_id, partitions in topics.items()
        ],
        "forgotten_topics_data": [
            {"topic_id": topic_id, "partitions": indexes} for topic_id, indexes in forgotten.items()
        ],
        "rack_id": "",
    }
    request = codec.build(codec.request_class(ApiKey.FETCH, 18), described)
    assert ours == codec.encode_entity(request)
    # And the leader reads back what the follower meant.
    decoded = codec.decode_request(ApiKey.FETCH, 18, ours, 0)
    assert (decoded.replica_state.replica_id, decoded.replica_state.replica_epoch) == (
        replica_id,
        replica_epoch,
    )
    assert [p.high_watermark for t in decoded.topics for p in t.partitions] == [
        p.high_watermark for partitions in topics.values() for p in partitions
    ]


response_partitions = st.fixed_dictionaries(
    {
        "partition_index": INT32,
        "error_code": st.sampled_from([0, 1, 3, 6, 74, 100]),
        "high_watermark": INT64,
        "last_stable_offset": INT64,
        "log_start_offset": INT64,
        "aborted_transactions": st.one_of(
            st.none(),
            st.lists(
                st.fixed_dictionaries({"producer_id": INT64, "first_offset": INT64}),
                max_size=3,
            ),
        ),
        "preferred_read_replica": INT32,
        "records": st.one_of(st.none(), st.binary(max_size=300)),
    },
    optional={  # tagged fields: left out, kio writes nothing for them
        "diverging_epoch": st.fixed_dictionaries({"epoch": INT32, "end_offset": INT64}),
        "current_leader": st.fixed_dictionaries({"leader_id": INT32, "leader_epoch": INT32}),
    },
)
responses = st.fixed_dictionaries(
    {
        "throttle_time_ms": INT32,
        "error_code": st.sampled_from([0, 70]),
        "session_id": INT32,
        "responses": st.lists(
            st.fixed_dictionaries(
                {"topic": TOPIC_NAMES, "partitions": st.lists(response_partitions, max_size=4)}
            ),
            max_size=3,
        ),
    }
)


def read_as(response, topic_of=None) -> list[tuple]:
    """A response's partitions as comparable tuples: ours (FetchedPartition) as they are, the
    codec's with each topic named by ``topic_of``; records as bytes."""
    if topic_of is None:
        return [
            (*p[:-1], None if p.records is None else bytes(p.records)) for p in response.partitions
        ]
    return [
        (
            topic_of(topic),
            p.partition_index,
            p.error_code.value,
            p.high_watermark,
            p.log_start_offset,
            p.diverging_epoch.epoch,
            p.diverging_epoch.end_offset,
            None if p.records is None else bytes(p.records),
        )
        for topic in response.responses
        for p in topic.partitions
    ]


@settings(max_examples=300)
@given(responses, st.binary(max_size=8))
def test_response_reads_as_kio_reads_it(data, prefix):
    version = REPLICA_FETCH_VERSION_BY_NAME
    body = codec.encode_response(ApiKey.FETCH, version, data)
    ours = decode_replica_fetch_response(prefix + body, len(prefix), version)
    theirs = codec.decode_response(ApiKey.FETCH, version, body, 0)
    assert ours.error_code == theirs.error_code.value
    assert read_as(ours) == read_as(theirs, lambda topic: topic.topic)


responses_v18 = st.fixed_dictionaries(
    {
        "throttle_time_ms": INT32,
        "error_code": st.sampled_from([0, 70]),
        "session_id": INT32,
        "responses": st.lists(
            st.fixed_dictionaries(
                {"topic_id": TOPIC_IDS, "partitions": st.lists(response_partitions, max_size=4)}
            ),
            max_size=3,
        ),
    },
    optional={  # v16's tagged NodeEndpoints, which the fetcher skips
        "node_endpoints": st.lists(
            st.fixed_dictionaries(
                {"node_id": INT32, "host": TOPIC_NAMES, "port": INT32, "rack": st.none()}
            ),
            max_size=2,
        )
    },
)


@settings(max_examples=300)
@given(responses_v18, st.binary(max_size=8), st.data())
def test_v18_response_reads_as_the_codec_reads_it_with_ids_as_names(data, prefix, draw):
    body = codec.encode_response(ApiKey.FETCH, 18, data)
    theirs = codec.decode_response(ApiKey.FETCH, 18, body, 0)
    ids = [topic.topic_id for topic in theirs.responses]
    # The fetcher knows some of the ids (those it asked for); the others stay ids.
    names = {topic_id: f"name-{topic_id}" for topic_id in ids if draw.draw(st.booleans())}
    ours = decode_replica_fetch_response(prefix + body, len(prefix), 18, names)
    assert ours.error_code == theirs.error_code.value
    assert ours.session_id == theirs.session_id
    assert read_as(ours) == read_as(theirs, lambda topic: names.get(topic.topic_id, topic.topic_id))


def test_a_v18_answer_names_the_topic_by_its_id():
    topic_id = uuid.uuid4()
    data = one_partition_response(b"batch")
    data["responses"] = [{"topic_id": topic_id, "partitions": data["responses"][0]["partitions"]}]
    body = codec.encode_response(ApiKey.FETCH, 18, data)
    (partition,) = decode_replica_fetch_response(body, 0, 18, {topic_id: "orders"}).partitions
    assert (partition.topic, bytes(partition.records)) == ("orders", b"batch")


def one_partition_response(records: bytes) -> dict:
    partition = {
        "partition_index": 0,
        "error_code": 0,
        "high_watermark": 1,
        "last_stable_offset": 1,
        "log_start_offset": 0,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": records,
    }
    return {
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "t", "partitions": [partition]}],
    }


def test_records_are_a_view_into_the_frame():
    data = one_partition_response(b"batch-bytes")
    frame = bytearray(codec.encode_response(ApiKey.FETCH, REPLICA_FETCH_VERSION_BY_NAME, data))
    (partition,) = decode_replica_fetch_response(frame, 0).partitions
    assert isinstance(partition.records, memoryview)
    assert partition.records.obj is frame
    assert bytes(partition.records) == b"batch-bytes"


def test_a_truncated_response_is_a_frame_error():
    data = one_partition_response(b"x" * 40)
    body = codec.encode_response(ApiKey.FETCH, REPLICA_FETCH_VERSION_BY_NAME, data)
    for cut in (3, 12, len(body) - 20):
        with pytest.raises(FrameError):
            decode_replica_fetch_response(body[:cut], 0)
