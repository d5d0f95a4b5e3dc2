"""Every API at every version can answer a failed request with an error response."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from broker.apis.errors import error_response
from protocol import codec
from protocol.errors import Error
from protocol.versions import supported_versions

st.register_type_strategy(Records, st.binary(max_size=50).map(Records))

EVERY_VERSION = [
    (key, version)
    for key, (low, high) in supported_versions(broker=True, controller=True).items()
    for version in range(low, high + 1)
]


@pytest.mark.parametrize(("api_key", "version"), EVERY_VERSION)
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_error_response_encodes(api_key, version, data):
    request = data.draw(st.from_type(codec.request_class(api_key, version)))
    body = codec.encode_response(
        api_key, version, error_response(api_key, request, Error.UNKNOWN_SERVER_ERROR)
    )
    decoded, _ = codec._reader(codec.response_class(api_key, version))(body, 0)
    assert decoded is not None
