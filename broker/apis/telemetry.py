"""Client telemetry (KIP-714): GetTelemetrySubscriptions (71), PushTelemetry (72), and
ListConfigResources (74, KIP-1142; v0 was ListClientMetricsResources).

The rules are Kafka's ClientMetricsManager, in the pure core ``common/client_metrics.py``
(time passed in); the payload is decoded by ``common/otlp_metrics.py`` and the decoded series
are kept on the client's instance, which node/metrics.py serves on ``/metrics`` (Kafka hands
the payload to a ClientTelemetryReceiver plugin and has none by default; a Kafka broker
without one does not advertise these APIs, minibroker serves them always).

As Kafka's KafkaApis: the telemetry APIs need no authorization; ListConfigResources needs
DESCRIBE_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED). v0 lists the client-metrics
subscriptions; v1 the resources of the types asked (none: every type Kafka 4.4 lists:
topics, brokers, groups with configs, client-metrics subscriptions); another type is
INVALID_REQUEST.
"""

import time
import uuid

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import cluster_allowed
from minibroker.common import otlp_metrics
from minibroker.common.client_metrics import CLIENT_METRICS_RESOURCE, ClientMetadata
from minibroker.common.config_model import BROKER_RESOURCE, TOPIC_RESOURCE
from minibroker.common.group_configs import GROUP_RESOURCE
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation

# The types v1 lists when the request names none.
_LISTED_TYPES = (TOPIC_RESOURCE, BROKER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE)


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _metadata(ctx: RequestContext) -> ClientMetadata:
    """ClientMetricsInstanceMetadata: what the request's context says of the client."""
    connection = ctx.connection
    return ClientMetadata(
        client_id=ctx.header.client_id,
        software_name=connection.software_name,
        software_version=connection.software_version,
        source_address=connection.host.lstrip("/") or None,
        source_port=connection.port,
    )


def _get_error(request, error: Error) -> dict:
    return {
        "throttle_time": 0,
        "error_code": error,
        "client_instance_id": uuid.UUID(int=0),
        "subscription_id": 0,
        "accepted_compression_types": (),
        "push_interval": 0,
        "telemetry_max_bytes": 0,
        "delta_temporality": False,
        "requested_metrics": (),
    }


@api(
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS,
    versions=(0, 0),
    roles=Role.BROKER,
    error_response=_get_error,
)
async def handle_get_subscriptions(ctx: RequestContext, request) -> dict:
    manager = ctx.replica_manager.client_metrics
    return manager.get_subscriptions(request.client_instance_id, _metadata(ctx), _now_ms())


def _push_error(request, error: Error) -> dict:
    return {"throttle_time": 0, "error_code": error}


@api(
    ApiKey.PUSH_TELEMETRY,
    versions=(0, 0),
    roles=Role.BROKER,
    error_response=_push_error,
)
async def handle_push(ctx: RequestContext, request) -> dict:
    manager = ctx.replica_manager.client_metrics
    error, _message = manager.push(
        request.client_instance_id,
        request.subscription_id,
        request.terminating,
        request.compression_type,
        bytes(request.metrics or b""),
        _metadata(ctx),
        _now_ms(),
        otlp_metrics.decode,
    )
    return _push_error(request, error)


def _list_error(request, error: Error) -> dict:
    answer = {"throttle_time": 0, "error_code": error}
    if request.__version__ == 0:
        return answer | {"client_metrics_resources": ()}
    return answer | {"config_resources": ()}


@api(
    ApiKey.LIST_CONFIG_RESOURCES,
    versions=(0, 1),
    roles=Role.BROKER,
    error_response=_list_error,
)
async def handle_list_config_resources(ctx: RequestContext, request) -> dict:
    if ctx.authorizer is not None and not cluster_allowed(ctx, Operation.DESCRIBE_CONFIGS):
        return _list_error(request, Error.CLUSTER_AUTHORIZATION_FAILED)
    replicas = ctx.replica_manager
    if ctx.version == 0:
        names = sorted(replicas.client_metrics_configs)
        return {
            "throttle_time": 0,
            "error_code": Error.NONE,
            "client_metrics_resources": [{"name": name} for name in names],
        }
    types = list(dict.fromkeys(request.resource_types)) or list(_LISTED_TYPES)
    if any(t not in _LISTED_TYPES for t in types):
        return _list_error(request, Error.INVALID_REQUEST)
    listed: list[dict] = []
    for resource_type in types:
        if resource_type == TOPIC_RESOURCE:
            names = sorted(replicas.metadata.topics)
        elif resource_type == BROKER_RESOURCE:
            names = [str(node_id) for node_id in sorted(replicas.metadata.brokers)]
        elif resource_type == GROUP_RESOURCE:
            names = sorted(replicas.group_configs)
        else:
            names = sorted(replicas.client_metrics_configs)
        listed += [{"resource_name": name, "resource_type": resource_type} for name in names]
    return {"throttle_time": 0, "error_code": Error.NONE, "config_resources": listed}
