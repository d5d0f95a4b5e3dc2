"""Every API at every version answers a failed request with an error response that carries
the error, encoded as dispatch encodes it (the hand-written encoders for Produce and Fetch)."""

import dataclasses

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.primitive import Records

from minibroker.apis.dispatch import _encode
from minibroker.apis.errors import error_response
from minibroker.apis.registry import served_versions
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.framing import RequestHeader, parse_response_header

st.register_type_strategy(Records, st.binary(max_size=50).map(Records))

EVERY_VERSION = [
    (key, version)
    for key, (low, high) in served_versions(broker=True, controller=True).items()
    for version in range(low, high + 1)
]


def error_codes(value):
    """Every ErrorCode field of a decoded response, at any depth."""
    if isinstance(value, ErrorCode):
        yield value
    elif dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            yield from error_codes(getattr(value, field.name))
    elif isinstance(value, tuple):
        for item in value:
            yield from error_codes(item)


@pytest.mark.parametrize(("api_key", "version"), EVERY_VERSION)
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_error_response_encodes_and_carries_the_error(api_key, version, data):
    drawn = data.draw(st.from_type(codec.request_class(api_key, version)))
    # As it would arrive: through the wire format (a topic id, for one, is never None there).
    try:
        request = codec.decode_request(api_key, version, codec.encode_entity(drawn), 0)
    except codec.DecodeError:
        # kio cannot read some extremes it writes (a retention time past timedelta's range):
        # such a request closes the connection before any handler runs.
        reject()
    header = RequestHeader(api_key, version, 7, None)
    chunks = _encode(header, version, error_response(api_key, request, Error.UNKNOWN_SERVER_ERROR))
    frame = b"".join(bytes(chunk) for chunk in chunks)[4:]
    flexible = codec.response_uses_flexible_header(api_key, version)
    correlation_id, offset = parse_response_header(frame, flexible_header=flexible)
    assert correlation_id == 7
    decoded = codec.decode_response(api_key, version, frame, offset)
    assert all(code == ErrorCode.unknown_server_error for code in error_codes(decoded))
