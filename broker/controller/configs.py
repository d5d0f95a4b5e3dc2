"""The controller's config decisions: AlterConfigs and IncrementalAlterConfigs on its state.

Pure, like ``state.py``: a request's resources in, per-resource results and the changed
resources out. Topic configs live in each TopicState, dynamic broker configs in
``ControllerState.broker_configs`` ("" is the cluster default, else a broker id), group
configs (KIP-848) in ``ControllerState.group_configs`` by group id, validated against this
controller's group bounds as Kafka's ControllerConfigurationValidator does, client-metrics
subscriptions (KIP-714) in ``ControllerState.client_metrics_configs`` by name, validated as
Kafka's ClientMetricsConfigs.validate. The checks
that depend on which broker received the request (a broker resource must name that broker)
were made there; this validates the new configs as Kafka's controller does.
"""

from minibroker.common import client_metrics, config_model, group_configs
from minibroker.common.client_metrics import CLIENT_METRICS_RESOURCE
from minibroker.common.config_model import BROKER_RESOURCE, TOPIC_RESOURCE, ConfigChangeError
from minibroker.common.group_configs import GROUP_RESOURCE, GroupBounds
from minibroker.controller.state import MIN_INSYNC_REPLICAS_CONFIG, ControllerState, elr_enabled
from minibroker.protocol.errors import Error

Resource = tuple[int, str]


def alter_configs(
    state: ControllerState,
    resources,
    *,
    incremental: bool,
    validate_only: bool,
    group_bounds: GroupBounds | None = None,
) -> tuple[list[dict], list[Resource]]:
    """Apply (or with ``validate_only`` only check) each resource's change; returns the
    response entries, in the request's order, and the resources whose configs changed.
    Group configs are checked against ``group_bounds`` (Kafka's defaults when None)."""
    keys = [(resource.resource_type, resource.resource_name) for resource in resources]
    results = []
    changed: list[Resource] = []
    for resource, key in zip(resources, keys, strict=True):
        result = {
            "error_code": Error.NONE,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
        }
        try:
            if keys.count(key) > 1:
                raise ConfigChangeError(
                    Error.INVALID_REQUEST, "Each resource must appear at most once."
                )
            new_configs = _new_configs(state, resource, incremental, group_bounds or GroupBounds())
            if not validate_only and _store(state, key, new_configs):
                changed.append(key)
        except ConfigChangeError as refused:
            result.update(error_code=refused.error, error_message=refused.message)
        results.append(result)
    return results, changed


def _new_configs(
    state: ControllerState, resource, incremental: bool, group_bounds: GroupBounds
) -> dict[str, str]:
    current = _current(state, resource.resource_type, resource.resource_name)
    if incremental:
        operations = [(c.name, c.config_operation, c.value) for c in resource.configs]
        new_configs = config_model.incrementally_altered(
            current, operations, list_config=_list_config_test(resource.resource_type)
        )
    else:
        new_configs = config_model.replaced_configs([(c.name, c.value) for c in resource.configs])
    if resource.resource_type == BROKER_RESOURCE:
        implied = not incremental or any(
            c.name == MIN_INSYNC_REPLICAS_CONFIG for c in resource.configs
        )
        _check_min_isr_transition(state, resource.resource_name, current, new_configs, implied)
    if resource.resource_type == GROUP_RESOURCE:
        group_configs.validate(new_configs, group_bounds)
    elif resource.resource_type == CLIENT_METRICS_RESOURCE:
        client_metrics.validate(resource.resource_name, new_configs)
    elif resource.resource_type == TOPIC_RESOURCE:
        config_model.validate_topic_overrides(new_configs)
    else:
        config_model.validate_broker_overrides(
            new_configs, cluster_default=resource.resource_name == ""
        )
    return new_configs


def _check_min_isr_transition(
    state: ControllerState,
    name: str,
    current: dict[str, str],
    new: dict[str, str],
    touched: bool,
) -> None:
    """Kafka 4.4's ConfigurationControlManager.validateAlterConfig with eligible leader
    replicas on (isDisallowedBrokerMinIsrTransition, isDisallowedClusterMinIsrTransition),
    INVALID_CONFIG with Kafka's messages: one broker's own ``min.insync.replicas`` may not be
    set, changed or deleted, and the cluster-level one may not be deleted (the ELR rules need
    one value for every broker). As there, only a real change of a broker's value counts
    (Kafka writes no ConfigRecord for an unchanged one).

    Kafka stores the cluster-level value from the moment ELR is on (written when the cluster
    is formatted or the feature enabled); minibroker stores it only once someone sets it and
    reports the node's own value until then (config_model.CLUSTER_MIN_ISR). So a request
    that leaves the cluster default without it is refused when it ``touched`` it: deleted it
    (IncrementalAlterConfigs DELETE) or replaced the whole set (AlterConfigs), as Kafka
    refuses both; a request about other cluster configs is not."""
    if not elr_enabled(state):
        return
    before, after = current.get(MIN_INSYNC_REPLICAS_CONFIG), new.get(MIN_INSYNC_REPLICAS_CONFIG)
    if name:
        if before != after:
            raise ConfigChangeError(
                Error.INVALID_CONFIG,
                "Broker-level min.insync.replicas cannot be altered while ELR is enabled.",
            )
        return
    if after is None and (before is not None or touched):
        raise ConfigChangeError(
            Error.INVALID_CONFIG,
            "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.",
        )


def min_isr_settings(state: ControllerState, resources: list[Resource]) -> dict[Resource, object]:
    """The ``min.insync.replicas`` each topic or broker resource sets (None when unset), to
    tell which changes touch it (:func:`elr_cleared_topics`)."""
    settings: dict[Resource, object] = {}
    for resource_type, name in resources:
        if resource_type == TOPIC_RESOURCE and name in state.topics:
            settings[(resource_type, name)] = state.topics[name].configs.get(
                MIN_INSYNC_REPLICAS_CONFIG
            )
        elif resource_type == BROKER_RESOURCE:
            configs = state.broker_configs.get(name, {})
            settings[(resource_type, name)] = configs.get(MIN_INSYNC_REPLICAS_CONFIG)
    return settings


def elr_cleared_topics(
    state: ControllerState, before: dict[Resource, object], after: dict[Resource, object]
) -> set[str] | None:
    """Kafka 4.4's ConfigurationControlManager.createClearElrRecordsAsNeeded: with eligible
    leader replicas on, a changed topic ``min.insync.replicas`` clears the ELR (and the
    last-known ELR) of that topic's partitions, a changed broker-level one those of every
    topic (a ClearElrRecord without a topic name). Returns the topic names, None for every
    topic, or an empty set when nothing is to be cleared."""
    if not elr_enabled(state):
        return set()
    topics: set[str] = set()
    for (resource_type, name), value in after.items():
        if before.get((resource_type, name)) == value:
            continue
        if resource_type == BROKER_RESOURCE:
            return None
        topics.add(name)
    return topics


def _current(state: ControllerState, resource_type: int, name: str) -> dict[str, str]:
    if resource_type == TOPIC_RESOURCE:
        topic = state.topics.get(name)
        if topic is None:
            raise ConfigChangeError(
                Error.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
        return topic.configs
    if resource_type == BROKER_RESOURCE:
        if name and not name.isdigit():
            raise ConfigChangeError(
                Error.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}"
            )
        return state.broker_configs.get(name, {})
    if resource_type == GROUP_RESOURCE:
        group_configs.check_name(name)
        return state.group_configs.get(name, {})
    if resource_type == CLIENT_METRICS_RESOURCE:
        client_metrics.check_name(name)
        return state.client_metrics_configs.get(name, {})
    raise ConfigChangeError(Error.INVALID_REQUEST, f"Unknown resource type {resource_type}")


def _store(state: ControllerState, key: Resource, configs: dict[str, str]) -> bool:
    """Make ``configs`` the resource's; whether that changed anything."""
    resource_type, name = key
    if resource_type == TOPIC_RESOURCE:
        topic = state.topics[name]
        if topic.configs == configs:
            return False
        topic.configs = dict(configs)
        return True
    stored = _stored(state, resource_type)
    if stored.get(name, {}) == configs:
        return False
    if configs:
        stored[name] = dict(configs)
    else:
        stored.pop(name, None)
    return True


def _stored(state: ControllerState, resource_type: int) -> dict[str, dict[str, str]]:
    """The dynamic configs of a resource type other than topics, by resource name."""
    if resource_type == GROUP_RESOURCE:
        return state.group_configs
    if resource_type == CLIENT_METRICS_RESOURCE:
        return state.client_metrics_configs
    return state.broker_configs


def _list_config_test(resource_type: int):
    """Which configs APPEND and SUBTRACT may change: LIST ones. Kafka 4.4 refuses them on
    every group config, streams.rack.aware.assignment.tags (a LIST) included."""
    if resource_type == GROUP_RESOURCE:
        return lambda _name: False
    if resource_type == CLIENT_METRICS_RESOURCE:
        # ClientMetricsConfigs: metrics and match are LISTs, interval.ms an INT.
        return lambda name: name in (client_metrics.METRICS, client_metrics.MATCH)
    return config_model.is_list_config


def pushed_configs(state: ControllerState, resources: list[Resource]) -> list[dict]:
    """The AlterConfigs resources that tell brokers the current configs of ``resources``:
    each with its complete set, which replaces what the broker had (topics deleted since
    are left out)."""
    pushed = []
    for resource_type, name in resources:
        if resource_type == TOPIC_RESOURCE:
            if name not in state.topics:
                continue
            configs = state.topics[name].configs
        else:
            configs = _stored(state, resource_type).get(name, {})
        pushed.append(
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configs": [{"name": k, "value": v} for k, v in sorted(configs.items())],
            }
        )
    return pushed


def concerning(state: ControllerState, resources: list[Resource], node_id: int) -> list[Resource]:
    """The resources a broker must hear of: broker and group configs, and the topics it
    holds a replica of."""
    return [
        (resource_type, name)
        for resource_type, name in resources
        if resource_type != TOPIC_RESOURCE
        or (name in state.topics and _hosts(state.topics[name], node_id))
    ]


def _hosts(topic, node_id: int) -> bool:
    return any(node_id in partition.replicas for partition in topic.partitions)


def resources_of_broker(state: ControllerState, node_id: int) -> list[Resource]:
    """Every config resource a (re)starting broker must hear of: the dynamic broker configs,
    the group configs and each topic it holds a replica of (its cached configs may be
    stale)."""
    brokers = [(BROKER_RESOURCE, name) for name in sorted(state.broker_configs)]
    groups = [(GROUP_RESOURCE, name) for name in sorted(state.group_configs)]
    groups += [(CLIENT_METRICS_RESOURCE, name) for name in sorted(state.client_metrics_configs)]
    topics = [
        (TOPIC_RESOURCE, topic.name) for topic in state.topics.values() if _hosts(topic, node_id)
    ]
    return brokers + groups + topics
