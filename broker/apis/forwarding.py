"""Requests the controller decides: on the controller node it decides them, a broker sends
them on to the controller and relays its answer.

Kafka's brokers wrap such requests (``forwardable`` in ApiKeys) in an Envelope; here the
broker re-sends the client's request as it is (the same version) and returns the
controller's response entity unchanged. Every handler that does this goes through
:func:`decided_by_controller`; the APIs it serves say so in their declaration
(``controller_decides``).
"""

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from minibroker.apis import RequestContext
from minibroker.apis.authorization import cluster_allowed, wait_for_cluster_acls
from minibroker.apis.inter_node import inter_node_allowed, is_controller_push
from minibroker.cluster.controller_client import (
    REQUEST_TIMEOUT_S,
    ControllerUnavailable,
    is_broker_channel,
)
from minibroker.common.quota_manager import PARKED
from minibroker.controller.zk_store import ControllerMoved
from minibroker.protocol.errors import Error
from minibroker.security.authorizer.acls import Operation

if TYPE_CHECKING:
    from minibroker.controller.service import ControllerService

log = logging.getLogger("forwarding")


class ForwardingFailed(Exception):
    """The controller could not be reached; the caller answers with a retriable error."""

    error = Error.REQUEST_TIMED_OUT


class NotController(ForwardingFailed):
    """This node's controller was deposed while it decided the request (ZooKeeper mode: its
    session expired or another broker won an election, so its save failed and changed
    nothing). Kafka answers NOT_CONTROLLER then (retriable: the client looks up the
    controller again and resends), never UNKNOWN_SERVER_ERROR."""

    error = Error.NOT_CONTROLLER


# Beyond the client's own timeout, what the controller may take to answer it.
FORWARDING_MARGIN_S = 5.0

# How the controller node decides a request: the name of its ControllerService method that
# takes the request, or a function of the service and the request.
Decide = str | Callable[["ControllerService", Any], Awaitable[Any]]


async def forward_to_controller(ctx: RequestContext, request):
    """The controller's answer to ``request``, waited for as long as the client's timeout
    (CreateTopics, DeleteTopics carry one) allows, and a little more."""
    timeout = getattr(request, "timeout", None)
    timeout_s = REQUEST_TIMEOUT_S if timeout is None else timeout.total_seconds()
    # The wait for the controller is not a request_percentage client's thread time (Kafka
    # hands a forwarded request to its forwarding manager's thread).
    parked = PARKED.get()
    started = time.monotonic() if parked is not None else 0.0
    try:
        return await ctx.replica_manager.controller.forward(
            request, timeout_s + FORWARDING_MARGIN_S
        )
    except ControllerUnavailable as error:
        log.warning("cannot forward %s: %s", type(request).__name__, error)
        raise ForwardingFailed(str(error)) from None
    finally:
        if parked is not None:
            parked[0] += time.monotonic() - started


async def decided_by_controller(
    ctx: RequestContext, request, decide: Decide, refused: Callable[[ForwardingFailed], Any]
):
    """The controller's answer to ``request``: ``decide`` on a node with the controller role
    (usually a version-neutral dict), the forwarded request's answer on a broker (a kio
    response entity of the request's version), ``refused(failure)`` when the controller
    cannot be reached or this node's controller was deposed meanwhile."""
    controller = ctx.controller
    if controller is not None:
        try:
            if isinstance(decide, str):
                return await getattr(controller, decide)(request)
            return await decide(controller, request)
        except ControllerMoved as moved:
            log.info("%s not decided: %s", type(request).__name__, moved)
            return refused(NotController(str(moved)))
    if is_broker_channel(ctx.header.client_id):
        # A broker forwarded this here, taking this node for the active controller; it is
        # not (ZooKeeper mode: not elected, deposed, or elected and still loading its state,
        # when it would forward to itself and wait on its own channel until the timeout).
        # Kafka forwards a request once, never again: the sender hears NOT_CONTROLLER and
        # looks the controller up again.
        return refused(NotController("this node is not the active controller"))
    try:
        return await forward_to_controller(ctx, request)
    except ForwardingFailed as failure:
        return refused(failure)


CLUSTER_REFUSED = "Cluster authorization failed."


async def cluster_store_request(
    ctx: RequestContext,
    request,
    decide: Decide,
    operation: Operation,
    refused: Callable[[Error, str], Any],
    apply_push: Callable[[RequestContext, Any], Any] | None = None,
):
    """The shape shared by the controller's cluster-wide stores (SCRAM credentials, client
    quotas): the controller's push of the store to this broker is applied (``apply_push``,
    for the altering API; only from a node on the inter-node listener), a client's request
    needs ``operation`` on the cluster and is decided by the controller (forwarded from a
    broker); ``refused(error, message)`` builds the answer to any refusal."""
    if apply_push is not None and is_controller_push(ctx):
        if not inter_node_allowed(ctx):
            return refused(Error.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_REFUSED)
        return apply_push(ctx, request)
    await wait_for_cluster_acls(ctx)
    if not cluster_allowed(ctx, operation):
        return refused(Error.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_REFUSED)
    return await decided_by_controller(
        ctx, request, decide, lambda failure: refused(failure.error, str(failure))
    )
