"""The hand-written Fetch response encoder is byte-identical to kio's, at every version."""

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.apis.registry import APIS
from minibroker.protocol import codec
from minibroker.protocol.fetch_response import encode_fetch_response
from minibroker.protocol.versions import ApiKey

LOW, HIGH = APIS[ApiKey.FETCH].versions

partitions = st.fixed_dictionaries(
    {
        "partition_index": st.integers(0, 2**31 - 1),
        "error_code": st.sampled_from([0, 1, 3, 6, 74, 100]),
        "high_watermark": st.integers(-1, 2**63 - 1),
        "last_stable_offset": st.integers(-1, 2**63 - 1),
        "log_start_offset": st.integers(-1, 2**63 - 1),
        "aborted_transactions": st.one_of(
            st.none(),
            st.lists(
                st.fixed_dictionaries(
                    {
                        "producer_id": st.integers(0, 2**63 - 1),
                        "first_offset": st.integers(0, 2**63 - 1),
                    }
                ),
                max_size=3,
            ),
        ),
        "preferred_read_replica": st.integers(-1, 5),
        "records": st.one_of(st.none(), st.just(b""), st.binary(max_size=300)),
    }
)
topics = st.fixed_dictionaries(
    {
        "topic": st.text(st.sampled_from("abc-_.XYZ019"), min_size=1, max_size=20),
        "topic_id": st.uuids().filter(lambda u: u.int != 0),
        "partitions": st.lists(partitions, max_size=4),
    }
)
responses = st.fixed_dictionaries(
    {
        "error_code": st.sampled_from([0, 70]),
        "session_id": st.integers(0, 2**31 - 1),
        "responses": st.lists(topics, max_size=3),
    }
)


@settings(max_examples=300)
@given(st.integers(LOW, HIGH), responses)
def test_byte_identical_to_kio(version, data):
    chunks = encode_fetch_response(version, data)
    assert chunks is not None
    assert b"".join(bytes(chunk) for chunk in chunks) == codec.encode_response(
        ApiKey.FETCH, version, data
    )


def one_partition(**fields) -> dict:
    """A response with one partition of one topic; ``fields`` override the partition's."""
    partition = {
        "partition_index": 0,
        "error_code": 0,
        "high_watermark": 5,
        "last_stable_offset": 5,
        "log_start_offset": 0,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
        **fields,
    }
    return {"responses": [{"topic": "t", "topic_id": uuid.uuid4(), "partitions": [partition]}]}


def test_record_sets_are_passed_through_not_copied():
    records = b"r" * 1000
    chunks = encode_fetch_response(HIGH, one_partition(records=records))
    assert any(chunk is records for chunk in chunks)


def test_a_diverging_epoch_falls_back_to_kio():
    data = one_partition(diverging_epoch={"epoch": 3, "end_offset": 4})
    assert encode_fetch_response(12, data) is None


def test_an_empty_partition_in_one_pack_is_byte_identical_to_kio():
    # The whole-entry pack of an empty partition (v11+ flexible): aborted transactions null
    # (read_uncommitted) and empty (read_committed), beside a partition with records.
    for version in range(12, HIGH + 1):
        for aborted in (None, []):
            data = one_partition(aborted_transactions=aborted, preferred_read_replica=2)
            data.update(error_code=0, session_id=7)
            data["responses"][0]["partitions"].append(
                {**data["responses"][0]["partitions"][0], "partition_index": 1, "records": b"x"}
            )
            chunks = encode_fetch_response(version, data)
            assert b"".join(bytes(c) for c in chunks) == codec.encode_response(
                ApiKey.FETCH, version, data
            ), (version, aborted)


def test_a_current_leader_falls_back_to_kio_and_default_fields_do_not():
    assert encode_fetch_response(16, one_partition(current_leader={"leader_id": 1})) is None
    data = one_partition(diverging_epoch={"epoch": -1, "end_offset": -1}, current_leader=None)
    assert encode_fetch_response(16, data) is not None
