"""Admin requests a broker cannot decide: sent on to the controller, its answer relayed.

Kafka wraps these in an Envelope; here the broker re-sends the client's request as it is (the
same version) and returns the controller's response entity unchanged.
"""

import logging

from minibroker.apis import RequestContext
from minibroker.cluster.controller_client import REQUEST_TIMEOUT_S, ControllerUnavailable
from minibroker.protocol.errors import Error

log = logging.getLogger("forwarding")


class ForwardingFailed(Exception):
    """The controller could not be reached; the caller answers with a retriable error."""

    error = Error.REQUEST_TIMED_OUT


# Beyond the client's own timeout, what the controller may take to answer it.
FORWARDING_MARGIN_S = 5.0


async def forward_to_controller(ctx: RequestContext, request):
    """The controller's answer to ``request``, waited for as long as the client's timeout
    (CreateTopics, DeleteTopics carry one) allows, and a little more."""
    timeout = getattr(request, "timeout", None)
    timeout_s = REQUEST_TIMEOUT_S if timeout is None else timeout.total_seconds()
    try:
        return await ctx.replicas.controller.forward(request, timeout_s + FORWARDING_MARGIN_S)
    except ControllerUnavailable as error:
        log.warning("cannot forward %s: %s", type(request).__name__, error)
        raise ForwardingFailed(str(error)) from None


async def decided_by_controller(ctx: RequestContext, request, method: str, refused):
    """The controller's answer: its ``method`` on the controller node, the forwarded
    request's answer on a broker, ``refused(failure)`` when the controller is unreachable."""
    if ctx.controller is not None:
        return await getattr(ctx.controller, method)(request)
    try:
        return await forward_to_controller(ctx, request)
    except ForwardingFailed as failure:
        return refused(failure)
