"""AlterUserScramCredentials and DescribeUserScramCredentials: SCRAM users managed as
Kafka's admin clients do it, decided and stored by the controller (a broker forwards them),
and pushed by the controller to every broker, which authenticates with them
(broker.controller.scram_credentials describes the push)."""

from protocol import sasl

from ..controller.scram_credentials import MECHANISM_BY_TYPE, SNAPSHOT_MARKER
from ..controller.service import CONTROLLER_CLIENT_ID
from . import RequestContext
from .forwarding import ForwardingFailed, forward_to_controller


def _is_controller_push(ctx: RequestContext) -> bool:
    """The controller's channel: its client id, on the listener it reaches brokers on."""
    return (
        ctx.header.client_id == CONTROLLER_CLIENT_ID
        and ctx.listener_name == ctx.config.inter_broker_listener.name
        and ctx.replicas is not None
    )


def _apply_push(ctx: RequestContext, request) -> dict:
    credentials = ctx.scram_credentials
    deletions = list(request.deletions)
    if deletions and deletions[0].name == SNAPSHOT_MARKER["name"]:
        credentials.forget_stored()
        deletions = deletions[1:]
    for deletion in deletions:
        credentials.forget(MECHANISM_BY_TYPE[deletion.mechanism], deletion.name)
    for upsertion in request.upsertions:
        keys = bytes(upsertion.salted_password)
        half = len(keys) // 2
        credentials.store(
            MECHANISM_BY_TYPE[upsertion.mechanism],
            upsertion.name,
            sasl.ScramCredential(
                salt=bytes(upsertion.salt),
                stored_key=keys[:half],
                server_key=keys[half:],
                iterations=upsertion.iterations,
            ),
        )
    return {"results": ()}


async def handle_alter(ctx: RequestContext, request):
    if _is_controller_push(ctx):
        return _apply_push(ctx, request)
    if ctx.controller is not None:
        return await ctx.controller.alter_user_scram_credentials(request)
    try:
        return await forward_to_controller(ctx, request)
    except ForwardingFailed as failure:
        users = dict.fromkeys(item.name for item in (*request.deletions, *request.upsertions))
        return {
            "results": [
                {"user": user, "error_code": failure.error, "error_message": str(failure)}
                for user in users
            ]
        }


async def handle_describe(ctx: RequestContext, request):
    if ctx.controller is not None:
        return await ctx.controller.describe_user_scram_credentials(request)
    try:
        return await forward_to_controller(ctx, request)
    except ForwardingFailed as failure:
        return {"error_code": failure.error, "error_message": str(failure), "results": ()}
