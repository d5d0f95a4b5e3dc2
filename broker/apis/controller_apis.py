"""The controller's own APIs: broker registration and heartbeats, AlterPartition from
leaders, and blocks of producer ids. Served only by the node with the controller role."""

from . import RequestContext


async def handle_broker_registration(ctx: RequestContext, request) -> dict:
    ctx.connection.broker_id = request.broker_id
    return await ctx.controller.broker_registration(request)


async def handle_broker_heartbeat(ctx: RequestContext, request) -> dict:
    ctx.connection.broker_id = request.broker_id
    return await ctx.controller.broker_heartbeat(request)


async def handle_alter_partition(ctx: RequestContext, request) -> dict:
    return await ctx.controller.alter_partition(request)


async def handle_allocate_producer_ids(ctx: RequestContext, request) -> dict:
    return await ctx.controller.allocate_producer_ids(request)
