"""DescribeClientQuotas and AlterClientQuotas: client quotas managed as Kafka's admin
clients and ``kafka-configs.sh`` do it, decided and stored by the controller (a broker
forwards them) and pushed by the controller to every broker, whose quota managers throttle
with them (controller/client_quotas.py describes the push, common/quota_manager.py the
throttling). The throttling of Produce and Fetch bytes and of request handler time is here,
called by dispatch; that of controller mutations is in apis/topics.py.

Kafka asks for ALTER_CONFIGS on the cluster to alter quotas and DESCRIBE_CONFIGS to describe
them; the controller's push, for the cluster's own rules (an inter-node listener,
CLUSTER_ACTION), so that no client can lift its own quota. Kafka answers DescribeClientQuotas
from each broker's metadata image; here the controller answers it (brokers forward), which
gives the same answer, since an alteration is answered once the live brokers have it.
"""

import dataclasses
import datetime
import struct
import time

from minibroker.apis import RequestContext, Role, Senders, api
from minibroker.apis.forwarding import cluster_store_request
from minibroker.cluster.controller_client import is_broker_channel
from minibroker.common.names import CONTROLLER_CLIENT_ID
from minibroker.common.quota_manager import (
    SECONDS_TO_PERCENTAGE,
    ClientQuotaManager,
    entity_key,
    principal_user,
)
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation

_INT32 = struct.Struct(">i")


# -- throttling (KIP-219): called by dispatch around a Produce's or a Fetch's response ------


def _replica_id(request) -> int:
    state = getattr(request, "replica_state", None)
    if state is not None and state.replica_id >= 0:
        return state.replica_id
    return getattr(request, "replica_id", -1)


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def exempt_from_request_quota(ctx: RequestContext, request) -> bool:
    """Kafka exempts the cluster's own requests from request quotas (those that need
    CLUSTER_ACTION, ClientRequestQuotaManager.maybeRecordExempt): here (beside the
    inter-node APIs, which dispatch leaves out) a follower's fetch (and its ListOffsets,
    OffsetForLeaderEpoch), and whatever a node sends on its channels to the controller or the
    controller on its own."""
    client_id = ctx.header.client_id
    if client_id == CONTROLLER_CLIENT_ID or is_broker_channel(client_id):
        return True
    return _replica_id(request) >= 0


def throttle_request(ctx: RequestContext, request, seconds: float, now_ms: int) -> int:
    """Kafka's request quota (``ClientRequestQuotaManager``, KIP-124): the time the request
    took on this broker's thread counts against the client's ``request_percentage`` (a
    percentage of one thread's time); the throttle time in milliseconds, capped at one quota
    window as in Kafka, 0 when within the quota. The channel is muted as for a byte-rate
    throttle."""
    quotas = ctx.quotas
    if quotas is None or exempt_from_request_quota(ctx, request):
        return 0
    user = principal_user(ctx.connection.principal)
    throttle_ms = quotas.request.record(
        user,
        ctx.header.client_id or "",
        max(seconds, 0.0) * SECONDS_TO_PERCENTAGE,
        now_ms,
    )
    if throttle_ms:
        ctx.connection.throttle_ms = max(ctx.connection.throttle_ms, throttle_ms)
    return throttle_ms


def _ms(value) -> float:
    if isinstance(value, datetime.timedelta):
        return value.total_seconds() * 1000
    return value or 0


def with_throttle_time(data, throttle_ms: int):
    """The response description with its throttle time at least ``throttle_ms``: a dict
    takes kio's ``throttle_time`` (dropped for a version without the field) and the
    hand-written Produce encoder's ``throttle_time_ms``; a kio entity (a forwarded request's
    answer) is copied with it when it has the field."""
    if isinstance(data, dict):
        if _ms(data.get("throttle_time")) < throttle_ms:
            data["throttle_time"] = throttle_ms
        if _ms(data.get("throttle_time_ms")) < throttle_ms:
            data["throttle_time_ms"] = throttle_ms
        return data
    if (
        dataclasses.is_dataclass(data)
        and not isinstance(data, type)
        and hasattr(data, "throttle_time")
        and _ms(data.throttle_time) < throttle_ms
    ):
        throttle = datetime.timedelta(milliseconds=throttle_ms)
        return dataclasses.replace(data, throttle_time=throttle)  # type: ignore[call-arg]
    return data


def throttle_produce(
    ctx: RequestContext, manager: ClientQuotaManager, request_size: int, data
) -> None:
    """Kafka's produce quota: the request's bytes count against the client's
    ``producer_byte_rate``; the records are appended all the same, and the response carries
    the throttle time, after which the connection's channel is unmuted (ctx.connection)."""
    if ctx.header.client_id == CONTROLLER_CLIENT_ID:
        return
    user = principal_user(ctx.connection.principal)
    throttle_ms = manager.record(user, ctx.header.client_id or "", request_size, _now_ms())
    if throttle_ms:
        ctx.connection.throttle_ms = max(ctx.connection.throttle_ms, throttle_ms)
        with_throttle_time(data, throttle_ms)


def throttle_fetch(
    ctx: RequestContext, manager: ClientQuotaManager, request, response: list | None
) -> int:
    """Kafka's fetch quota: the response's bytes count against the client's
    ``consumer_byte_rate``; a throttled response carries the throttle time (written into the
    encoded response, where it is the body's first field from v1 on) and mutes the channel.

    Kafka sends a throttled consumer an empty response instead of the records it read (and
    takes their bytes off the rate again); here the records read are sent, and the muted
    channel holds the next fetch back for the throttle time, which brings the rate to the
    quota over the window all the same. A follower's fetch is not a client's: not counted."""
    if response is None or _replica_id(request) >= 0:
        return 0
    size = _INT32.unpack_from(response[0])[0] + 4
    user = principal_user(ctx.connection.principal)
    throttle_ms = manager.record(user, ctx.header.client_id or "", size, _now_ms())
    if throttle_ms:
        ctx.connection.throttle_ms = max(ctx.connection.throttle_ms, throttle_ms)
    return throttle_ms


def write_fetch_throttle_time(ctx: RequestContext, response: list | None, throttle_ms: int):
    """A Fetch response's throttle time, written into the encoded response (the body's first
    field from v1 on)."""
    if response is not None and ctx.header.api_version >= 1 and len(response) > 1:
        # The body's first field replaced without copying the rest of the chunk (on kio's
        # path that chunk is the whole response, records included).
        response[1:2] = [_INT32.pack(throttle_ms), memoryview(response[1]).cast("B")[4:]]


def _apply_push(ctx: RequestContext, request) -> dict:
    """The controller's word: each entry is one entity's whole quota set; an entry without
    an entity first means every quota follows (forget the others)."""
    quotas = ctx.quotas
    entries = list(request.entries)
    if quotas is None:
        return {"entries": ()}
    snapshot = bool(entries) and not entries[0].entity
    if snapshot:
        entries = entries[1:]
    received = {
        entity_key((item.entity_type, item.entity_name) for item in entry.entity): {
            op.key: float(op.value) for op in entry.ops if not op.remove
        }
        for entry in entries
    }
    if snapshot:
        quotas.replace(received)
    else:
        for entity, values in received.items():
            quotas.alter(entity, values)
    return {"entries": ()}


def _alter_error(request, error: Error) -> dict:
    return {
        "entries": [
            {
                "error_code": error,
                "error_message": None,
                "entity": [
                    {"entity_type": item.entity_type, "entity_name": item.entity_name}
                    for item in entry.entity
                ],
            }
            for entry in request.entries
        ]
    }


@api(
    ApiKey.ALTER_CLIENT_QUOTAS,
    versions=(0, 1),
    roles=Role.BOTH,
    senders=Senders.CLIENTS_AND_NODES,
    controller_decides=True,
    held_until_ready=False,
    error_response=_alter_error,
)
async def handle_alter(ctx: RequestContext, request):
    def refused(error: Error, message: str) -> dict:
        answer = _alter_error(request, error)
        for entry in answer["entries"]:
            entry["error_message"] = message
        return answer

    return await cluster_store_request(
        ctx, request, "alter_client_quotas", Operation.ALTER_CONFIGS, refused, _apply_push
    )


def _describe_error(request, error: Error) -> dict:
    return {"error_code": error, "entries": None}


@api(
    ApiKey.DESCRIBE_CLIENT_QUOTAS,
    versions=(0, 1),
    roles=Role.BOTH,
    controller_decides=True,
    held_until_ready=False,
    error_response=_describe_error,
)
async def handle_describe(ctx: RequestContext, request):
    def refused(error: Error, message: str) -> dict:
        return {"error_code": error, "error_message": message, "entries": None}

    return await cluster_store_request(
        ctx, request, "describe_client_quotas", Operation.DESCRIBE_CONFIGS, refused
    )
