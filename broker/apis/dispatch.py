"""From a request frame to a response frame: version check, decode, handler, encode.

The handler table is keyed by API key and covers every key in protocol.versions; what a node
accepts is the table of its roles (the same one ApiVersions advertises).
"""

import logging
import time

from minibroker.apis import (
    CloseConnection,
    RequestContext,
    acls,
    admin,
    api_versions,
    configs,
    controller_apis,
    elections,
    fetch,
    groups,
    inter_broker,
    list_offsets,
    log_dirs,
    metadata,
    offset_for_leader_epoch,
    offsets,
    produce,
    producer_ids,
    reassignments,
    sasl,
    scram_credentials,
    topics,
)
from minibroker.apis.errors import error_response
from minibroker.apis.inter_node import INTER_NODE_APIS, advertised_versions, inter_node_allowed
from minibroker.protocol import codec
from minibroker.protocol.errors import Error, error_name
from minibroker.protocol.fetch_response import encode_fetch_response
from minibroker.protocol.framing import RequestHeader, frame_response_header
from minibroker.protocol.produce_request import decode_produce_request
from minibroker.protocol.produce_response import encode_produce_response
from minibroker.protocol.versions import ApiKey, supported_versions

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


HANDLERS = {
    ApiKey.PRODUCE: produce.handle,
    ApiKey.FETCH: fetch.handle,
    ApiKey.LIST_OFFSETS: list_offsets.handle,
    ApiKey.METADATA: metadata.handle,
    ApiKey.LEADER_AND_ISR: _inter_node_only(inter_broker.handle_leader_and_isr),
    ApiKey.STOP_REPLICA: _inter_node_only(inter_broker.handle_stop_replica),
    ApiKey.UPDATE_METADATA: _inter_node_only(inter_broker.handle_update_metadata),
    ApiKey.API_VERSIONS: api_versions.handle,
    ApiKey.CREATE_TOPICS: topics.handle_create,
    ApiKey.DELETE_TOPICS: topics.handle_delete,
    ApiKey.CREATE_PARTITIONS: topics.handle_create_partitions,
    ApiKey.INIT_PRODUCER_ID: producer_ids.handle,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch.handle,
    ApiKey.DESCRIBE_CONFIGS: configs.handle_describe,
    ApiKey.ALTER_PARTITION: _inter_node_only(controller_apis.handle_alter_partition),
    ApiKey.BROKER_REGISTRATION: _inter_node_only(controller_apis.handle_broker_registration),
    ApiKey.BROKER_HEARTBEAT: _inter_node_only(controller_apis.handle_broker_heartbeat),
    ApiKey.ALLOCATE_PRODUCER_IDS: _inter_node_only(controller_apis.handle_allocate_producer_ids),
    ApiKey.OFFSET_COMMIT: offsets.handle_offset_commit,
    ApiKey.OFFSET_FETCH: offsets.handle_offset_fetch,
    ApiKey.OFFSET_DELETE: offsets.handle_offset_delete,
    ApiKey.FIND_COORDINATOR: groups.handle_find_coordinator,
    ApiKey.JOIN_GROUP: groups.handle_join_group,
    ApiKey.HEARTBEAT: groups.handle_heartbeat,
    ApiKey.LEAVE_GROUP: groups.handle_leave_group,
    ApiKey.SYNC_GROUP: groups.handle_sync_group,
    ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
    ApiKey.LIST_GROUPS: groups.handle_list_groups,
    ApiKey.DELETE_GROUPS: groups.handle_delete_groups,
    ApiKey.DELETE_RECORDS: admin.handle_delete_records,
    ApiKey.DESCRIBE_CLUSTER: admin.handle_describe_cluster,
    ApiKey.ELECT_LEADERS: elections.handle_elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: reassignments.handle_alter,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: reassignments.handle_list,
    ApiKey.ALTER_CONFIGS: configs.handle_alter,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.handle_incremental_alter,
    ApiKey.DESCRIBE_LOG_DIRS: log_dirs.handle_describe,
    ApiKey.DESCRIBE_ACLS: acls.handle_describe,
    ApiKey.CREATE_ACLS: acls.handle_create,
    ApiKey.DELETE_ACLS: acls.handle_delete,
    ApiKey.SASL_HANDSHAKE: sasl.handle_handshake,
    ApiKey.SASL_AUTHENTICATE: sasl.handle_authenticate,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: scram_credentials.handle_alter,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: scram_credentials.handle_describe,
}
assert set(HANDLERS) == set(supported_versions(broker=True, controller=True)), (
    "every API of protocol.versions needs a handler"
)
assert all(HANDLERS[key].__name__ == "checked" for key in INTER_NODE_APIS), (
    "every inter-node API is behind the inter-node rules"
)


# Requests from clients, which wait until the broker has joined the cluster.
CLIENT_APIS = frozenset(
    {
        ApiKey.PRODUCE,
        ApiKey.FETCH,
        ApiKey.LIST_OFFSETS,
        ApiKey.METADATA,
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.INIT_PRODUCER_ID,
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        ApiKey.DESCRIBE_CONFIGS,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.OFFSET_DELETE,
        ApiKey.FIND_COORDINATOR,
        ApiKey.JOIN_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.LIST_GROUPS,
        ApiKey.DELETE_GROUPS,
        ApiKey.DELETE_RECORDS,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        ApiKey.DESCRIBE_LOG_DIRS,
        # Not AlterConfigs: the controller pushes config changes with it, which a broker
        # must apply before it is ready (its handler makes clients wait instead). Nor the ACL
        # and SCRAM credential APIs: see apis.authorization.wait_for_cluster_acls.
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
    }
)


# Kafka's request names, as its request metrics label them (Produce, ListOffsets, ...).
_REQUEST_NAMES = {key: "".join(word.capitalize() for word in key.name.split("_")) for key in ApiKey}


class UnsupportedRequest(Exception):
    """An API key or version we do not serve; Kafka closes the connection for these."""


def _encode(header: RequestHeader, api_version: int, data) -> list:
    """The response frame as a list of buffers, sent in order.

    Fetch and Produce responses come from hand-written encoders (Fetch whenever it covers the
    response, with each record set as the very object read from the log); everything else
    goes through kio.
    """
    flexible = codec.response_uses_flexible_header(header.api_key, api_version)
    chunks = None
    if header.api_key == ApiKey.FETCH and isinstance(data, dict):
        chunks = encode_fetch_response(api_version, data)
    elif header.api_key == ApiKey.PRODUCE and isinstance(data, dict):
        chunks = [encode_produce_response(api_version, data)]
    if chunks is None:
        if isinstance(data, dict):
            chunks = [codec.encode_response(header.api_key, api_version, data)]
        else:
            chunks = [codec.encode_entity(data)]
    size = sum(len(chunk) for chunk in chunks)
    return [frame_response_header(header.correlation_id, size, flexible_header=flexible), *chunks]


async def dispatch(
    header: RequestHeader, frame: bytes, body_offset: int, make_context
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
            return _encode(
                header, 0, api_versions.unsupported_version_response(advertised_versions(ctx))
            )
        name = ApiKey(key).name if key in ApiKey._value2member_map_ else f"api key {key}"
        raise UnsupportedRequest(f"unsupported request {name} v{version}")
    started = time.perf_counter()
    if key == ApiKey.PRODUCE:
        request = decode_produce_request(version, frame, body_offset)
    else:
        request = codec.decode_request(key, version, frame, body_offset)
    if key in CLIENT_APIS and ctx.replicas is not None and not ctx.replicas.ready.is_set():
        await ctx.replicas.ready.wait()
    name = _REQUEST_NAMES[key]
    try:
        data = await HANDLERS[key](ctx, request)
    except CloseConnection:
        raise
    except Exception as failure:
        if key == ApiKey.PRODUCE and request.acks == 0:
            raise CloseConnection(f"produce with acks=0 failed: {failure!r}") from failure
        error = (
            Error.KAFKA_STORAGE_ERROR
            if isinstance(failure, OSError)
            else Error.UNKNOWN_SERVER_ERROR
        )
        log.exception("%s v%d failed; answering %s", name, version, error.name)
        data = error_response(key, request, error)
    response = None if data is None else _encode(header, version, data)
    ctx.metrics.requests.labels(name).inc()
    ctx.metrics.request_time.labels(name).observe(time.perf_counter() - started)
    if isinstance(data, dict):
        for error in _error_codes(data):
            ctx.metrics.errors.labels(name, error_name(error)).inc()
    return response


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
