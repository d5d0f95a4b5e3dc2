"""From a request frame to a response frame: version check, decode, handler, encode.

The handler table is built from the APIs' declarations (apis.registry) and covers every one;
what a node accepts is the table of its roles (``ctx.supported``, from
registry.served_versions: the same one ApiVersions advertises on inter-node listeners).
"""

import logging
import time

from minibroker.apis import (
    CloseConnection,
    Handler,
    RequestContext,
    Senders,
    api_versions,
    client_quotas,
    request_log,
)
from minibroker.apis.errors import error_response
from minibroker.apis.inter_node import inter_node_allowed
from minibroker.apis.registry import APIS, HELD_UNTIL_READY
from minibroker.common.quota_manager import PARKED
from minibroker.controller.zk_store import ControllerMoved
from minibroker.protocol import codec
from minibroker.protocol.errors import Error, error_name
from minibroker.protocol.fetch_response import encode_fetch_response
from minibroker.protocol.framing import RequestHeader, frame_response_header
from minibroker.protocol.metadata_response import encode_metadata_response
from minibroker.protocol.produce_request import decode_produce_request
from minibroker.protocol.produce_response import encode_produce_response
from minibroker.protocol.versions import ApiKey
from minibroker.storage.file_records import FileRecords, materialize

log = logging.getLogger("dispatch")


def _inter_node_only(handler):
    """The handler of an inter-node API, behind the inter-node rules (apis/inter_node.py):
    a connection that may not send it is answered CLUSTER_AUTHORIZATION_FAILED. Wrapping the
    handler keeps the check off every other request's path."""

    async def checked(ctx: RequestContext, request):
        if inter_node_allowed(ctx):
            return await handler(ctx, request)
        log.warning(
            "refused %s from %s on listener %s (%s): not an inter-node connection",
            ApiKey(ctx.header.api_key).name,
            ctx.connection.host,
            ctx.listener_name,
            ctx.connection.principal,
        )
        return error_response(ctx.header.api_key, request, Error.CLUSTER_AUTHORIZATION_FAILED)

    return checked


HANDLERS: dict[int, Handler] = {
    key: _inter_node_only(api.handler) if api.senders is Senders.NODES else api.handler
    for key, api in APIS.items()
}


# The inter-node APIs: exempt from request quotas, as Kafka exempts CLUSTER_ACTION requests.
_NODES_ONLY = frozenset(key for key, api in APIS.items() if api.senders is Senders.NODES)

# Kafka's request names, as its request metrics label them (Produce, ListOffsets, ...).
_REQUEST_NAMES: dict[int, str] = {
    key: "".join(word.capitalize() for word in key.name.split("_")) for key in ApiKey
}


class UnsupportedRequest(Exception):
    """An API key or version this node does not serve, the versions Kafka 4 removed (KIP-896)
    among them: the connection is closed, as Kafka 4.4's network processor closes it
    (Processor.parseRequestHeader throws InvalidRequestException or UnsupportedVersionException
    for a version its ApiVersionManager does not enable, before the body is read). ApiVersions
    is the exception (KIP-511, see api_versions.unsupported_version_response)."""


# The requests whose response bytes count against the client's consumer_byte_rate: Fetch,
# and ShareFetch as Kafka's KafkaApis.handleShareFetchRequest records it with the fetch quota
# (quotas.fetch), its throttle time the response body's first field in every version.
_FETCH_QUOTA = frozenset({ApiKey.FETCH, ApiKey.SHARE_FETCH})


def _encode(header: RequestHeader, api_version: int, data) -> list:
    """The response frame as a list of buffers, sent in order.

    Fetch, Produce and Metadata responses come from hand-written encoders (Fetch whenever it
    covers the response, with each record set as the very object read from the log; Metadata
    whenever the handler's description is plain data); everything else goes through kio.
    """
    flexible = codec.response_uses_flexible_header(header.api_key, api_version)
    chunks = None
    if header.api_key == ApiKey.FETCH and isinstance(data, dict):
        chunks = encode_fetch_response(api_version, data)
    elif header.api_key == ApiKey.PRODUCE and isinstance(data, dict):
        chunks = [encode_produce_response(api_version, data)]
    elif header.api_key == ApiKey.METADATA and isinstance(data, dict):
        body = encode_metadata_response(api_version, data)
        if body is not None:
            chunks = [body]
    if chunks is None:
        if isinstance(data, dict):
            if header.api_key == ApiKey.FETCH:
                _read_file_records(data)
            chunks = [codec.encode_response(header.api_key, api_version, data)]
        else:
            chunks = [codec.encode_entity(data)]
    size = sum(len(chunk) for chunk in chunks)
    return [frame_response_header(header.correlation_id, size, flexible_header=flexible), *chunks]


def _read_file_records(data: dict) -> None:
    """kio writes bytes: a Fetch response it encodes (a follower's diverging epoch beside
    other partitions' records) gets its file slices read."""
    for topic in data.get("responses", ()):
        for partition in topic["partitions"]:
            if isinstance(partition.get("records"), FileRecords):
                partition["records"] = materialize(partition["records"])


async def dispatch(
    header: RequestHeader, frame: bytearray, body_offset: int, make_context
) -> list | None:
    """Answer one request with the buffers of its response frame; None means no response
    is sent (acks=0).

    ``make_context`` builds the RequestContext for this header, so the connection layer stays
    ignorant of what handlers need.
    """
    ctx: RequestContext = make_context(header)
    key, version = header.api_key, header.api_version
    versions = ctx.supported.get(key)
    if versions is None or not versions[0] <= version <= versions[1]:
        if key == ApiKey.API_VERSIONS:
            return _encode(header, 0, api_versions.unsupported_version_response(ctx.advertised))
        name = ApiKey(key).name if key in ApiKey._value2member_map_ else f"api key {key}"
        raise UnsupportedRequest(f"unsupported request {name} v{version}")
    # time.monotonic (CLOCK_MONOTONIC, nanosecond resolution on Linux): the request-time
    # metric's clock and the request quota's, whose rates are kept in monotonic milliseconds.
    started = time.monotonic()
    if key == ApiKey.PRODUCE:
        request = decode_produce_request(version, frame, body_offset)
    else:
        request = codec.decode_request(key, version, frame, body_offset)
    name = _REQUEST_NAMES[key]
    quotas = ctx.quotas
    # request_percentage (KIP-124): the time this request's handling takes on this thread,
    # less the time it spent parked (apis/client_quotas.py); only while such a quota is set.
    parked = None
    if quotas is not None and quotas.request.enabled and key not in _NODES_ONLY:
        parked = [0.0]
        parked_token = PARKED.set(parked)
    if key in HELD_UNTIL_READY and ctx.replicas is not None and not ctx.replicas.ready.is_set():
        held = time.monotonic()
        await ctx.replicas.ready.wait()
        if parked is not None:
            parked[0] += time.monotonic() - held
    try:
        data = await HANDLERS[key](ctx, request)
    except CloseConnection:
        raise
    except Exception as failure:
        if key == ApiKey.PRODUCE and request.acks == 0:
            raise CloseConnection(f"produce with acks=0 failed: {failure!r}") from failure
        if isinstance(failure, ControllerMoved):
            # The controller's own APIs (AlterPartition, AllocateProducerIds, ...) on an
            # elected controller deposed meanwhile: the sender looks for the new one, as for
            # the NOT_CONTROLLER a broker that is not elected answers.
            log.info("%s v%d: %s; answering NOT_CONTROLLER", name, version, failure)
            data = error_response(key, request, Error.NOT_CONTROLLER)
        else:
            answer = (
                Error.KAFKA_STORAGE_ERROR
                if isinstance(failure, OSError)
                else Error.UNKNOWN_SERVER_ERROR
            )
            log.exception("%s v%d failed; answering %s", name, version, answer.name)
            data = error_response(key, request, answer)
    # Client quotas (KIP-219): the bytes and the handler time count, the response carries
    # the throttle time, and ctx.connection tells the read loop to mute the channel
    # (apis/client_quotas.py). Each only where a quota of its kind applies to someone, so
    # that a broker without quotas does no work per request.
    request_throttle_ms = 0
    if parked is not None:
        PARKED.reset(parked_token)
        finished = time.monotonic()
        request_throttle_ms = client_quotas.throttle_request(
            ctx, request, finished - started - parked[0], int(finished * 1000)
        )
        if request_throttle_ms and key != ApiKey.FETCH:
            data = client_quotas.with_throttle_time(data, request_throttle_ms)
    if quotas is not None and key == ApiKey.PRODUCE and quotas.produce.enabled:
        client_quotas.throttle_produce(ctx, quotas.produce, len(frame), data)
    response = None if data is None else _encode(header, version, data)
    if quotas is not None and key in _FETCH_QUOTA:
        fetch_throttle_ms = request_throttle_ms
        if quotas.fetch.enabled:
            fetch_throttle_ms = max(
                fetch_throttle_ms,
                client_quotas.throttle_fetch(ctx, quotas.fetch, request, response),
            )
        if fetch_throttle_ms:
            client_quotas.write_fetch_throttle_time(ctx, response, fetch_throttle_ms)
    metrics = ctx.metrics
    metrics.child(metrics.requests, name).inc()
    elapsed = time.monotonic() - started
    metrics.child(metrics.request_time, name).observe(elapsed)
    if request_log.enabled():
        connection = ctx.connection
        request_log.write(
            header,
            request,
            size=len(frame),
            connection=f"{connection.host.lstrip('/')}:{connection.port}",
            listener=ctx.listener_name,
            principal=connection.principal,
            total_ms=elapsed * 1000,
        )
    if isinstance(data, dict):
        if key == ApiKey.PRODUCE:
            codes = _produce_error_codes(data)
        elif key == ApiKey.FETCH:
            codes = _fetch_error_codes(data)
        elif key == ApiKey.METADATA:
            codes = _metadata_error_codes(data)
        else:
            codes = _error_codes(data)
        for error in codes:
            metrics.child(metrics.errors, name, error_name(error)).inc()
    return response


def _produce_error_codes(data: dict) -> list[int]:
    """_error_codes of a Produce response, where the only error codes are the partitions'
    (a record error has none), without walking every value of every entry."""
    return [
        code
        for topic in data["responses"]
        for partition in topic["partition_responses"]
        if (code := partition["error_code"])
    ]


def _fetch_error_codes(data: dict) -> list[int]:
    """_error_codes of a Fetch response, whose error codes are the response's and its
    partitions' (their other nested fields, a diverging epoch, a current leader, aborted
    transactions, hold none), without walking every value of every partition: a consumer of
    many partitions gets them all in every answer, most of them empty."""
    codes = [code] if (code := data.get("error_code")) else []
    codes.extend(
        code
        for topic in data["responses"]
        for partition in topic["partitions"]
        if (code := partition["error_code"])
    )
    return codes


def _metadata_error_codes(data: dict) -> list[int]:
    """_error_codes of a Metadata response: the response's (v13), the topics' and the
    partitions' (Kafka's MetadataResponse.errorCounts counts the latter two), without walking
    every replica list of every partition: an answer for all topics has every partition of
    the cluster, and the generic walk cost it more than encoding it (py-spy on a broker of a
    2,000-partition cluster answering Metadata for all topics)."""
    codes = [code] if (code := data.get("error_code")) else []
    for topic in data.get("topics", ()):
        if code := topic["error_code"]:
            codes.append(code)
        codes.extend(
            code for partition in topic.get("partitions", ()) if (code := partition["error_code"])
        )
    return codes


def _error_codes(data) -> list[int]:
    """Every non-zero error code in a response description, at any depth (a loop, not
    recursion: this runs on every response, Fetch and Produce included)."""
    codes = []
    pending = [data]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            if code := value.get("error_code"):
                codes.append(int(code))
            pending.extend(item for item in value.values() if isinstance(item, list | tuple))
        elif isinstance(value, list | tuple):
            pending.extend(value)
    return codes
