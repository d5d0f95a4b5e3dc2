"""From a request frame to a response frame: version check, decode, handler, encode.

The handler table is keyed by API key and must cover exactly the keys that ApiVersions
advertises (protocol.versions.SUPPORTED_VERSIONS), which is checked at import.
"""

from protocol import codec
from protocol.framing import RequestHeader, frame_response
from protocol.versions import SUPPORTED_VERSIONS, ApiKey, is_supported

from .apis import (
    RequestContext,
    api_versions,
    fetch,
    list_offsets,
    metadata,
    produce,
    producer_ids,
    topics,
)

HANDLERS = {
    ApiKey.PRODUCE: produce.handle,
    ApiKey.FETCH: fetch.handle,
    ApiKey.LIST_OFFSETS: list_offsets.handle,
    ApiKey.METADATA: metadata.handle,
    ApiKey.API_VERSIONS: api_versions.handle,
    ApiKey.CREATE_TOPICS: topics.handle_create,
    ApiKey.DELETE_TOPICS: topics.handle_delete,
    ApiKey.INIT_PRODUCER_ID: producer_ids.handle,
}
assert set(HANDLERS) == set(SUPPORTED_VERSIONS), "every advertised API needs a handler"


class UnsupportedRequest(Exception):
    """An API key or version we do not serve; Kafka closes the connection for these."""


def _encode(header: RequestHeader, api_version: int, data: dict) -> bytes:
    body = codec.encode_response(header.api_key, api_version, data)
    flexible = codec.response_uses_flexible_header(header.api_key, api_version)
    return frame_response(header.correlation_id, body, flexible_header=flexible)


async def dispatch(
    header: RequestHeader, frame: bytes, body_offset: int, make_context
) -> bytes | None:
    """Answer one request; None means no response is sent (acks=0).

    ``make_context`` builds the RequestContext for this header, so the connection layer stays
    ignorant of what handlers need.
    """
    key, version = header.api_key, header.api_version
    if not is_supported(key, version):
        if key == ApiKey.API_VERSIONS:
            return _encode(header, 0, api_versions.unsupported_version_response())
        name = ApiKey(key).name if key in ApiKey._value2member_map_ else f"api key {key}"
        raise UnsupportedRequest(f"unsupported request {name} v{version}")
    request = codec.decode_request(key, version, frame, body_offset)
    ctx: RequestContext = make_context(header)
    data = await HANDLERS[key](ctx, request)
    if data is None:
        return None
    return _encode(header, version, data)
