"""The hand-written Produce response encoder is byte-identical to kio's, at every version."""

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.apis.registry import APIS
from minibroker.protocol import codec
from minibroker.protocol.produce_response import encode_produce_response
from minibroker.protocol.versions import ApiKey

LOW, HIGH = APIS[ApiKey.PRODUCE].versions

partitions = st.fixed_dictionaries(
    {
        "index": st.integers(0, 2**31 - 1),
        "error_code": st.sampled_from([0, 2, 3, 6, 10, 19, 20, 45, 47]),
        "base_offset": st.integers(-1, 2**63 - 1),
        "log_append_time": st.sampled_from([-1, 0, 1_700_000_000_000, 1_795_000_000_123]),
        "log_start_offset": st.integers(-1, 2**62),
        "error_message": st.none() | st.text(max_size=40),
    }
)
responses = st.fixed_dictionaries(
    {
        "responses": st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.text(st.sampled_from("abc-_.XYZ019"), min_size=1, max_size=20),
                    "topic_id": st.none() | st.uuids(),  # v13+ (KIP-516)
                    "partition_responses": st.lists(partitions, max_size=5),
                }
            ),
            max_size=3,
        )
    }
)


@settings(max_examples=300)
@given(st.integers(LOW, HIGH), responses)
def test_byte_identical_to_kio(version, data):
    assert encode_produce_response(version, data) == codec.encode_response(
        ApiKey.PRODUCE, version, data
    )
