"""DescribeConfigs for topics: the controller holds topic configs; brokers forward."""

from . import RequestContext
from .forwarding import ForwardingFailed, forward_to_controller


async def handle_describe(ctx: RequestContext, request):
    if ctx.controller is not None:
        return await ctx.controller.describe_configs(request)
    try:
        return await forward_to_controller(ctx, request)
    except ForwardingFailed as failure:
        return {
            "results": [
                {
                    "error_code": failure.error,
                    "error_message": str(failure),
                    "resource_type": resource.resource_type,
                    "resource_name": resource.resource_name,
                    "configs": (),
                }
                for resource in request.resources
            ]
        }
