"""Admin requests a broker cannot decide: sent on to the controller, its answer relayed.

Kafka wraps these in an Envelope; here the broker re-sends the client's request as it is (the
same version) and returns the controller's response entity unchanged.
"""

import logging

from protocol.errors import Error

from ..controller_client import ControllerUnavailable
from . import RequestContext

log = logging.getLogger("forwarding")


class ForwardingFailed(Exception):
    """The controller could not be reached; the caller answers with a retriable error."""

    error = Error.REQUEST_TIMED_OUT


async def forward_to_controller(ctx: RequestContext, request):
    try:
        return await ctx.replicas.controller.forward(request)
    except ControllerUnavailable as error:
        log.warning("cannot forward %s: %s", type(request).__name__, error)
        raise ForwardingFailed(str(error)) from None
