"""The controller's own APIs: broker registration and heartbeats, AlterPartition from
leaders, and blocks of producer ids. Served by the node with the controller role; in
ZooKeeper mode every broker serves them, and one not elected answers NOT_CONTROLLER, so the
sender looks up the controller again (as Kafka's brokers answer a misdirected controller
request)."""

from minibroker.apis import RequestContext, Role, Senders, api
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey


def _broker_registration_error(request, error: Error) -> dict:
    return {"error_code": error, "broker_epoch": -1}


@api(
    ApiKey.BROKER_REGISTRATION,
    versions=(0, 4),
    roles=Role.CONTROLLER,
    senders=Senders.NODES,
    error_response=_broker_registration_error,
)
async def handle_broker_registration(ctx: RequestContext, request) -> dict:
    """Kafka 4.4's versions 0-4. v1's IsMigratingZkBroker and v2's LogDirs are read and not
    acted on (no ZooKeeper migration; one directory id per broker is not tracked); v3's
    PreviousBrokerEpoch is the broker's last clean shutdown (KIP-966: the controller keeps a
    broker that shows one in the ELRs, controller/state.py register_broker); v4 only lists
    features whose minimum is 0, which minibroker's brokers do not list at all."""
    if ctx.controller is None:
        return _broker_registration_error(request, Error.NOT_CONTROLLER)
    ctx.connection.broker_id = request.broker_id
    return await ctx.controller.broker_registration(request)


def _broker_heartbeat_error(request, error: Error) -> dict:
    return {
        "error_code": error,
        "is_caught_up": False,
        "is_fenced": True,
        "should_shut_down": False,
    }


@api(
    ApiKey.BROKER_HEARTBEAT,
    versions=(0, 2),
    roles=Role.CONTROLLER,
    senders=Senders.NODES,
    error_response=_broker_heartbeat_error,
)
async def handle_broker_heartbeat(ctx: RequestContext, request) -> dict:
    """Kafka 4.4's versions 0-2: v1's OfflineLogDirs (KIP-858) are the broker's failed log
    dirs, whose replicas the controller then takes offline
    (controller/broker_lifecycle.py). v2's CordonedLogDirs (KIP-1066: log dirs that take no
    new replicas) is read and not acted on: minibroker's controller places replicas on
    brokers, not on log dirs, and its brokers cordon none (they send v1, which has no such
    field; Kafka's sends null before the broker's RECOVERY state too)."""
    if ctx.controller is None:
        return {
            "error_code": Error.NOT_CONTROLLER,
            "is_caught_up": False,
            "is_fenced": False,
            "should_shut_down": False,
        }
    ctx.connection.broker_id = request.broker_id
    return await ctx.controller.broker_heartbeat(request)


def _alter_partition_error(request, error: Error) -> dict:
    return {"error_code": error, "topics": ()}


@api(
    ApiKey.ALTER_PARTITION,
    versions=(2, 3),
    roles=Role.CONTROLLER,
    senders=Senders.NODES,
    error_response=_alter_partition_error,
)
async def handle_alter_partition(ctx: RequestContext, request) -> dict:
    """Kafka 4.4's versions 2-3. v3 (KIP-903) carries each new ISR member's broker epoch
    (NewIsrWithEpochs) in place of v2's NewIsr; the controller refuses a member whose epoch
    is not its registered one, i.e. that restarted since the leader saw it, with
    INELIGIBLE_REPLICA (controller/state.py alter_partition), as Kafka's
    ReplicationControlManager does; -1 skips the check for that member."""
    if ctx.controller is None:
        return _alter_partition_error(request, Error.NOT_CONTROLLER)
    return await ctx.controller.alter_partition(request)


def _allocate_producer_ids_error(request, error: Error) -> dict:
    return {"error_code": error, "producer_id_start": -1, "producer_id_len": 0}


@api(
    ApiKey.ALLOCATE_PRODUCER_IDS,
    versions=(0, 0),
    roles=Role.CONTROLLER,
    senders=Senders.NODES,
    error_response=_allocate_producer_ids_error,
)
async def handle_allocate_producer_ids(ctx: RequestContext, request) -> dict:
    if ctx.controller is None:
        return _allocate_producer_ids_error(request, Error.NOT_CONTROLLER)
    return await ctx.controller.allocate_producer_ids(request)
