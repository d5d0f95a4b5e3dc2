"""DescribeAcls, CreateAcls and DeleteAcls.

The controller decides and saves ACL changes (brokers forward CreateAcls and DeleteAcls). A
broker loads the whole ACL set from the controller (DescribeAcls) before it registers (see
controller_client.py); after each change, and when a broker registers again, the controller
pushes the whole set as a CreateAcls on its own connection, which the broker takes as the
replacement of its set (the inter-node rules apply to it: CLUSTER_ACTION, and the inter-node
listener). Each node then authorizes, and answers DescribeAcls, from its own copy, as Kafka's
brokers do from their authorizer's cache.

As Kafka's AclApis: CLUSTER_AUTHORIZATION_FAILED unless the principal may DESCRIBE (for
DescribeAcls) or ALTER (for the others) the cluster, SECURITY_DISABLED when no authorizer is
configured, INVALID_REQUEST for a binding or filter with unknown or ANY values.
"""

import logging

from minibroker.apis import RequestContext, Role, Senders, api
from minibroker.apis.authorization import cluster_allowed, wait_for_cluster_acls
from minibroker.apis.forwarding import ForwardingFailed, decided_by_controller
from minibroker.apis.inter_node import inter_node_allowed, is_controller_push
from minibroker.controller import acls as acl_transitions
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import InvalidAcl, Operation

log = logging.getLogger("acls")

_NO_AUTHORIZER = "No Authorizer is configured."


def _describe_error(request, error: Error) -> dict:
    return {"error_code": error}


# Every node answers from its own copy of the ACLs. None of the ACL APIs is held until the
# broker is ready: a joining broker loads the set with DescribeAcls, and the controller
# pushes it with CreateAcls; wait_for_cluster_acls holds clients' requests instead.
@api(
    ApiKey.DESCRIBE_ACLS,
    versions=(1, 3),
    roles=Role.BOTH,
    held_until_ready=False,
    error_response=_describe_error,
)
async def handle_describe(ctx: RequestContext, request) -> dict:
    def refused(error: Error, message: str) -> dict:
        return {"error_code": error, "error_message": message, "resources": []}

    await wait_for_cluster_acls(ctx)
    if not cluster_allowed(ctx, Operation.DESCRIBE):
        return refused(Error.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if ctx.authorizer is None:
        return refused(Error.SECURITY_DISABLED, _NO_AUTHORIZER)
    acl_filter = acl_transitions.filter_of(request)
    try:
        acl_filter.validate()
    except InvalidAcl as invalid:
        return refused(invalid.error, invalid.message)
    matching = [binding for binding in ctx.authorizer.acls if acl_filter.matches(binding)]
    return {
        "error_code": Error.NONE,
        "error_message": None,
        "resources": acl_transitions.described_resources(matching),
    }


def _create_error(request, error: Error) -> dict:
    return {"results": [{"error_code": error} for _ in request.creations]}


@api(
    ApiKey.CREATE_ACLS,
    versions=(1, 3),
    roles=Role.BOTH,
    senders=Senders.CLIENTS_AND_NODES,
    controller_decides=True,
    held_until_ready=False,
    error_response=_create_error,
)
async def handle_create(ctx: RequestContext, request):
    def refused(error: Error, message: str) -> dict:
        return {
            "results": [{"error_code": error, "error_message": message} for _ in request.creations]
        }

    if is_controller_push(ctx) and ctx.controller is None:
        return _apply_pushed(ctx, request, refused)
    await wait_for_cluster_acls(ctx)
    if not cluster_allowed(ctx, Operation.ALTER):
        return refused(Error.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if ctx.authorizer is None:
        return refused(Error.SECURITY_DISABLED, _NO_AUTHORIZER)

    def unreachable(failure: ForwardingFailed) -> dict:
        return refused(failure.error, str(failure))

    return await decided_by_controller(ctx, request, "create_acls", unreachable)


def _delete_error(request, error: Error) -> dict:
    return {"filter_results": [{"error_code": error} for _ in request.filters]}


@api(
    ApiKey.DELETE_ACLS,
    versions=(1, 3),
    roles=Role.BOTH,
    controller_decides=True,
    held_until_ready=False,
    error_response=_delete_error,
)
async def handle_delete(ctx: RequestContext, request):
    def refused(error: Error, message: str) -> dict:
        return {
            "filter_results": [
                {"error_code": error, "error_message": message, "matching_acls": []}
                for _ in request.filters
            ]
        }

    await wait_for_cluster_acls(ctx)
    if not cluster_allowed(ctx, Operation.ALTER):
        return refused(Error.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if ctx.authorizer is None:
        return refused(Error.SECURITY_DISABLED, _NO_AUTHORIZER)

    def unreachable(failure: ForwardingFailed) -> dict:
        return refused(failure.error, str(failure))

    return await decided_by_controller(ctx, request, "delete_acls", unreachable)


def _apply_pushed(ctx: RequestContext, request, refused) -> dict:
    """The controller telling this broker the cluster's whole ACL set."""
    if not inter_node_allowed(ctx):
        return refused(Error.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if ctx.authorizer is None:
        log.warning("the controller sent ACLs, but this broker has no authorizer configured")
        return refused(Error.SECURITY_DISABLED, _NO_AUTHORIZER)
    bindings = [acl_transitions.binding_of(creation) for creation in request.creations]
    ctx.authorizer.replace_acls(bindings)
    log.info("ACLs from the controller: %d binding(s)", len(bindings))
    return {"results": [{"error_code": Error.NONE, "error_message": None} for _ in bindings]}
