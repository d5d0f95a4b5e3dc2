"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

The controller holds topic configs and dynamic broker configs; every node resolves what it
describes itself, with its own properties and the dynamic configs the controller pushed to
it, as each Kafka broker does (clients send a broker resource to that broker). A broker asks
the controller for a topic's overrides; changes are forwarded to the controller, which saves
them and pushes them to every broker (an AlterConfigs on its own connection, which the
broker applies to its logs at once).

Group resources (type 32, KIP-848) are stored and pushed as topic configs are; every broker
keeps the pushed ones (``ReplicaManager.group_configs``), describes from them and its group
coordinator applies them (see ``common/group_configs.py``). Client-metrics resources
(type 16, KIP-714) likewise: every broker's ClientMetricsManager takes the pushed
subscriptions (``common/client_metrics.py``), and DescribeConfigs lists the configs set, as
Kafka's ConfigHelper does.

With an authorizer, Kafka's rules: DESCRIBE_CONFIGS (to describe) or ALTER_CONFIGS (to change)
on the topic for a topic resource (TOPIC_AUTHORIZATION_FAILED), on the group for a group
resource (GROUP_AUTHORIZATION_FAILED), on the cluster for broker and logger resources
(CLUSTER_AUTHORIZATION_FAILED), and on the cluster for client-metrics resources.
"""

import logging

from minibroker.apis import RequestContext, Role, Senders, api, wait_until_ready
from minibroker.apis.authorization import cluster_allowed, group_allowed, topic_allowed
from minibroker.apis.forwarding import ForwardingFailed, decided_by_controller
from minibroker.apis.inter_node import inter_node_allowed, is_controller_push
from minibroker.cluster.controller_client import build_request, is_broker_channel
from minibroker.common import client_metrics, group_configs
from minibroker.common.client_metrics import CLIENT_METRICS_RESOURCE
from minibroker.common.config_model import (
    BROKER_LOGGER_RESOURCE,
    BROKER_RESOURCE,
    DYNAMIC_BROKER_LOGGER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STRING,
    TOPIC_RESOURCE,
    BrokerLayers,
    check_cordoned_log_dirs,
    describe_broker,
    describe_topic,
    parse_cordoned_log_dirs,
)
from minibroker.common.group_configs import GROUP_RESOURCE
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation

log = logging.getLogger("configs")

# Python's level names as log4j spells them (Kafka's BROKER_LOGGER resources).
_LOG4J_LEVELS = {"WARNING": "WARN", "CRITICAL": "FATAL", "NOTSET": "INFO"}
_PYTHON_LEVELS = {"TRACE": "DEBUG", "DEBUG": "DEBUG", "INFO": "INFO", "WARN": "WARNING"}
_PYTHON_LEVELS |= {"ERROR": "ERROR", "FATAL": "CRITICAL", "OFF": "CRITICAL"}


def _result(resource, error: Error = Error.NONE, message: str | None = None, configs=()) -> dict:
    return {
        "error_code": error,
        "error_message": message,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
        "configs": list(configs),
    }


def _layers(ctx: RequestContext) -> BrokerLayers:
    if ctx.replicas is not None:
        return ctx.replicas.dynamic_configs.layers(ctx.config.properties)
    state = ctx.controller_service.state
    return BrokerLayers(
        ctx.config.properties,
        state.broker_configs.get("", {}),
        state.broker_configs.get(str(ctx.config.node_id), {}),
    )


def _broker_name_error(ctx: RequestContext, name: str, *, empty_allowed: bool) -> str | None:
    """Kafka's refusal of a broker resource this node does not answer for, or None."""
    if not name.isdigit():
        return f"Broker id must be an integer, but it is: {name}"
    if int(name) != ctx.config.node_id:
        expected = f"{ctx.config.node_id} or empty string" if empty_allowed else ctx.config.node_id
        return f"Unexpected broker id, expected {expected}, but received {name}"
    return None


def _cordon_error(ctx: RequestContext, resource) -> str | None:
    """Kafka's DynamicLogConfig check of cordoned.log.dirs, which only the broker named can
    make (the controller does not know its log.dirs): every entry given is one of them, or
    `*`; Kafka's message, or None."""
    for config in resource.configs:
        if config.name != "cordoned.log.dirs" or config.value is None:
            continue
        try:
            check_cordoned_log_dirs(parse_cordoned_log_dirs(config.value), ctx.config.log_dirs)
        except ValueError as error:
            return str(error)
    return None


def _forwarded(ctx: RequestContext) -> bool:
    """A client's change forwarded to this controller by the broker that received it, which
    checked the broker resource's name against its own id already (Kafka's ControllerApis
    does not check it again: the controller is not the broker named)."""
    return ctx.controller is not None and is_broker_channel(ctx.header.client_id)


# Each topic's overrides, or the Error that answers for the topic.
_Overrides = dict[str, dict[str, str] | Error]


async def _topic_overrides(ctx: RequestContext, names: list[str]) -> _Overrides:
    """Each topic's overrides from the controller, or the Error that answers for it."""
    if not names:
        return {}

    async def from_state(controller, _request) -> _Overrides:
        topics = controller.state.topics
        return {
            name: dict(topics[name].configs) if name in topics else Error.UNKNOWN_TOPIC_OR_PARTITION
            for name in names
        }

    def unreachable(failure: ForwardingFailed) -> _Overrides:
        return dict.fromkeys(names, failure.error)

    request = build_request(
        ApiKey.DESCRIBE_CONFIGS,
        {
            "resources": [
                {"resource_type": TOPIC_RESOURCE, "resource_name": name, "configuration_keys": None}
                for name in dict.fromkeys(names)
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    response = await decided_by_controller(ctx, request, from_state, unreachable)
    if isinstance(response, dict):
        return response
    found: _Overrides = {}
    for result in response.results:
        if result.error_code.value != Error.NONE:
            found[result.resource_name] = Error(result.error_code.value)
        else:
            found[result.resource_name] = {
                c.name: c.value for c in result.configs if c.config_source == DYNAMIC_TOPIC_CONFIG
            }
    return found


def _loggers(keys) -> list[dict]:
    """Kafka's BROKER_LOGGER answer: every logger and its effective level, in log4j's names."""
    names = ["root", *sorted(logging.root.manager.loggerDict)]
    entries = []
    for name in names:
        if keys and name not in keys:
            continue
        logger = logging.getLogger() if name == "root" else logging.getLogger(name)
        level = logging.getLevelName(logger.getEffectiveLevel())
        entries.append(
            {
                "name": name,
                "value": _LOG4J_LEVELS.get(level, level),
                "read_only": False,
                "config_source": DYNAMIC_BROKER_LOGGER_CONFIG,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": STRING,
                "documentation": None,
            }
        )
    return entries


def _refusal(ctx: RequestContext, resource, operation: Operation) -> Error | None:
    """The authorization error for a config resource, or None when it may be handled."""
    if ctx.authorizer is None:
        return None
    if resource.resource_type == TOPIC_RESOURCE:
        allowed = topic_allowed(ctx, operation, resource.resource_name)
        return None if allowed else Error.TOPIC_AUTHORIZATION_FAILED
    if resource.resource_type == GROUP_RESOURCE:
        allowed = group_allowed(ctx, operation, resource.resource_name)
        return None if allowed else Error.GROUP_AUTHORIZATION_FAILED
    if resource.resource_type in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE):
        allowed = cluster_allowed(ctx, operation)
        return None if allowed else Error.CLUSTER_AUTHORIZATION_FAILED
    return None


def _group_overrides(ctx: RequestContext, group: str) -> dict[str, str]:
    """A group's configs as this node knows them: pushed to a broker, the state itself on a
    controller-only node."""
    if ctx.replicas is not None:
        return ctx.replicas.group_configs.get(group, {})
    return ctx.controller_service.state.group_configs.get(group, {})


def _client_metrics_configs(ctx: RequestContext, name: str) -> dict[str, str]:
    """A client-metrics subscription's configs as this node knows them."""
    if ctx.replicas is not None:
        return ctx.replicas.client_metrics_configs.get(name, {})
    return ctx.controller_service.state.client_metrics_configs.get(name, {})


def _describe_error(request, error: Error) -> dict:
    return {
        "results": [
            {
                "error_code": error,
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
                "configs": (),
            }
            for r in request.resources
        ]
    }


# Each node describes from its own properties and what the controller pushed to it; a
# broker asks the controller only for topics' overrides (_topic_overrides).
@api(
    ApiKey.DESCRIBE_CONFIGS,
    versions=(1, 4),
    roles=Role.BOTH,
    error_response=_describe_error,
)
async def handle_describe(ctx: RequestContext, request):
    include_synonyms = getattr(request, "include_synonyms", False)
    refusals = {
        index: refusal
        for index, resource in enumerate(request.resources)
        if (refusal := _refusal(ctx, resource, Operation.DESCRIBE_CONFIGS)) is not None
    }
    topics = [
        r.resource_name
        for index, r in enumerate(request.resources)
        if r.resource_type == TOPIC_RESOURCE and index not in refusals
    ]
    overrides = await _topic_overrides(ctx, topics)
    layers = _layers(ctx)
    results = []
    for index, resource in enumerate(request.resources):
        if index in refusals:
            results.append(_result(resource, refusals[index]))
            continue
        keys = resource.configuration_keys
        name = resource.resource_name
        if resource.resource_type == TOPIC_RESOURCE:
            found = overrides[name]
            if isinstance(found, Error):
                results.append(_result(resource, found))
            else:
                entries = describe_topic(
                    found, layers, include_synonyms=include_synonyms, keys=keys
                )
                results.append(_result(resource, configs=entries))
        elif resource.resource_type == BROKER_RESOURCE:
            message = name and _broker_name_error(ctx, name, empty_allowed=True)
            if message:
                results.append(_result(resource, Error.INVALID_REQUEST, message))
                continue
            entries = describe_broker(
                layers, include_synonyms=include_synonyms, keys=keys, cluster_default=not name
            )
            results.append(_result(resource, configs=entries))
        elif resource.resource_type == GROUP_RESOURCE:
            if not name:
                results.append(
                    _result(resource, Error.INVALID_REQUEST, "Group name must not be empty")
                )
                continue
            entries = group_configs.describe(
                _group_overrides(ctx, name),
                ctx.config.properties,
                include_synonyms=include_synonyms,
                keys=keys,
            )
            results.append(_result(resource, configs=entries))
        elif resource.resource_type == CLIENT_METRICS_RESOURCE:
            if not name:
                message = "Client metrics subscription name must not be empty"
                results.append(_result(resource, Error.INVALID_REQUEST, message))
                continue
            entries = client_metrics.describe(_client_metrics_configs(ctx, name), keys)
            results.append(_result(resource, configs=entries))
        elif resource.resource_type == BROKER_LOGGER_RESOURCE:
            message = (
                "Broker id must not be empty"
                if not name
                else _broker_name_error(ctx, name, empty_allowed=False)
            )
            if message:
                results.append(_result(resource, Error.INVALID_REQUEST, message))
            else:
                results.append(_result(resource, configs=_loggers(keys)))
        else:
            message = f"Unsupported resource type: {resource.resource_type}"
            results.append(_result(resource, Error.INVALID_REQUEST, message))
    return {"results": results}


# -- changes ---------------------------------------------------------------------------------


def _change_result(resource, error: Error = Error.NONE, message: str | None = None) -> dict:
    return {
        "error_code": error,
        "error_message": message,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
    }


def _change_error(request, error: Error) -> dict:
    return {"responses": [_change_result(resource, error) for resource in request.resources]}


# The controller pushes configs to brokers with AlterConfigs (the node form): not held until
# ready, since a broker applies them before it is; clients' changes wait in _alter.
@api(
    ApiKey.ALTER_CONFIGS,
    versions=(0, 2),
    roles=Role.BOTH,
    senders=Senders.CLIENTS_AND_NODES,
    controller_decides=True,
    held_until_ready=False,
    error_response=_change_error,
)
async def handle_alter(ctx: RequestContext, request):
    if is_controller_push(ctx):
        if not inter_node_allowed(ctx):
            return _change_error(request, Error.CLUSTER_AUTHORIZATION_FAILED)
        return _apply_pushed(ctx, request)
    return await _alter(ctx, request, ApiKey.ALTER_CONFIGS, incremental=False)


@api(
    ApiKey.INCREMENTAL_ALTER_CONFIGS,
    versions=(0, 1),
    roles=Role.BOTH,
    controller_decides=True,
    error_response=_change_error,
)
async def handle_incremental_alter(ctx: RequestContext, request):
    return await _alter(ctx, request, ApiKey.INCREMENTAL_ALTER_CONFIGS, incremental=True)


async def _alter(ctx: RequestContext, request, api_key: ApiKey, *, incremental: bool):
    """Refuse here what only this broker can judge (a broker resource naming another
    broker, as Kafka's ConfigAdminManager does; loggers, which are this process's), and let
    the controller decide the rest."""
    await wait_until_ready(ctx)
    answered: dict[int, dict] = {}
    for index, resource in enumerate(request.resources):
        name = resource.resource_name
        if (refusal := _refusal(ctx, resource, Operation.ALTER_CONFIGS)) is not None:
            answered[index] = _change_result(resource, refusal)
        elif resource.resource_type == BROKER_RESOURCE and name and not _forwarded(ctx):
            message = _broker_name_error(ctx, name, empty_allowed=False) or _cordon_error(
                ctx, resource
            )
            if message:
                answered[index] = _change_result(resource, Error.INVALID_REQUEST, message)
        elif resource.resource_type == BROKER_LOGGER_RESOURCE:
            answered[index] = _alter_loggers(ctx, resource, incremental, request.validate_only)
        elif resource.resource_type not in (
            TOPIC_RESOURCE,
            BROKER_RESOURCE,
            GROUP_RESOURCE,
            CLIENT_METRICS_RESOURCE,
        ):
            message = f"Unknown resource type {resource.resource_type}"
            answered[index] = _change_result(resource, Error.INVALID_REQUEST, message)
    rest = [r for index, r in enumerate(request.resources) if index not in answered]
    decided = iter(await _decide(ctx, request, rest, api_key, incremental) if rest else ())
    return {
        "responses": [
            answered[index] if index in answered else next(decided)
            for index in range(len(request.resources))
        ]
    }


async def _decide(ctx: RequestContext, request, resources, api_key: ApiKey, incremental: bool):
    """The controller's answers for ``resources`` (the same request, narrowed to them)."""
    if len(resources) == len(request.resources):
        narrowed = request
    else:
        narrowed = codec.build(
            type(request),
            {
                "resources": [
                    {
                        "resource_type": r.resource_type,
                        "resource_name": r.resource_name,
                        "configs": [
                            {
                                "name": c.name,
                                "value": c.value,
                                "config_operation": getattr(c, "config_operation", 0),
                            }
                            for c in r.configs
                        ],
                    }
                    for r in resources
                ],
                "validate_only": request.validate_only,
            },
        )

    async def decide(controller, request) -> dict:
        return await controller.alter_configs(request, incremental=incremental)

    def unreachable(failure: ForwardingFailed) -> list[dict]:
        return [_change_result(r, failure.error, str(failure)) for r in resources]

    response = await decided_by_controller(ctx, narrowed, decide, unreachable)
    if isinstance(response, list):
        return response
    if isinstance(response, dict):
        return response["responses"]
    return [
        {
            "error_code": entry.error_code.value,
            "error_message": entry.error_message,
            "resource_type": entry.resource_type,
            "resource_name": entry.resource_name,
        }
        for entry in response.responses
    ]


def _alter_loggers(ctx: RequestContext, resource, incremental: bool, validate_only: bool) -> dict:
    """Set (or with DELETE, reset) this process's log levels, by log4j level names."""
    name = resource.resource_name
    refusal = (
        "Broker id must not be empty"
        if not name
        else _broker_name_error(ctx, name, empty_allowed=False)
    )
    if not incremental:
        refusal = f"Unknown resource type {resource.resource_type}"
    if refusal:
        return _change_result(resource, Error.INVALID_REQUEST, refusal)
    changes: list[tuple[str, int]] = []
    for config in resource.configs:
        if config.config_operation == 1:  # DELETE: back to the parent's level
            changes.append((config.name, logging.NOTSET))
            continue
        level = _PYTHON_LEVELS.get((config.value or "").upper())
        if config.config_operation != 0 or level is None:
            message = (
                f"Cannot {config.config_operation} logger {config.name}: only SET to one of "
                f"{', '.join(_PYTHON_LEVELS)} and DELETE are allowed"
            )
            return _change_result(resource, Error.INVALID_CONFIG, message)
        changes.append((config.name, logging.getLevelName(level)))
    if not validate_only:
        for logger_name, new_level in changes:
            logger = (
                logging.getLogger() if logger_name == "root" else logging.getLogger(logger_name)
            )
            if logger_name == "root" and new_level == logging.NOTSET:
                new_level = logging.INFO
            logger.setLevel(new_level)
    return _change_result(resource)


def _apply_pushed(ctx: RequestContext, request) -> dict:
    """The controller telling this broker the complete configs of some resources."""
    # Only a broker takes the controller's pushes (inter_node.is_controller_push).
    dynamic = ctx.replica_manager.dynamic_configs
    log_manager = ctx.replica_manager.log_manager
    for resource in request.resources:
        configs = {c.name: c.value for c in resource.configs}
        if resource.resource_type == TOPIC_RESOURCE:
            if not log_manager.update_topic_configs(resource.resource_name, configs):
                ctx.replica_manager.announced_topic_configs[resource.resource_name] = configs
        elif resource.resource_type == BROKER_RESOURCE and dynamic.concerns_this_broker(
            resource.resource_name
        ):
            log_manager.set_default_config(dynamic.replace(resource.resource_name, configs))
            log_manager.producer_id_expiration_ms = dynamic.broker_value(
                "producer.id.expiration.ms", ctx.config.producer_id_expiration_ms
            )
            cordoned = dynamic.by_resource.get(str(ctx.config.node_id), {}).get("cordoned.log.dirs")
            log_manager.set_cordoned(
                ctx.config.cordoned_log_dirs
                if cordoned is None
                else parse_cordoned_log_dirs(cordoned)
            )
            ctx.replica_manager.update_replication_throttle_rates()
            log.info("dynamic broker configs %r now %s", resource.resource_name, configs)
        elif resource.resource_type == GROUP_RESOURCE:
            if configs:
                ctx.replica_manager.group_configs[resource.resource_name] = configs
            else:
                ctx.replica_manager.group_configs.pop(resource.resource_name, None)
            log.info("group configs of %r now %s", resource.resource_name, configs)
        elif resource.resource_type == CLIENT_METRICS_RESOURCE:
            stored = ctx.replica_manager.client_metrics_configs
            if configs:
                stored[resource.resource_name] = configs
            else:
                stored.pop(resource.resource_name, None)
            ctx.replica_manager.client_metrics.update_subscriptions(resource.resource_name, configs)
            log.info("client metrics subscription %r now %s", resource.resource_name, configs)
    return {"responses": [_change_result(resource) for resource in request.resources]}
