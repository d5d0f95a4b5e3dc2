"""AlterUserScramCredentials and DescribeUserScramCredentials: SCRAM users managed as
Kafka's admin clients do it, decided and stored by the controller (a broker forwards them),
and pushed by the controller to every broker, which authenticates with them
(broker.controller.scram_credentials describes the push)."""

from minibroker.apis import RequestContext, Role, Senders, api
from minibroker.apis.forwarding import cluster_store_request
from minibroker.controller.scram_credentials import MECHANISM_BY_TYPE, SNAPSHOT_MARKER
from minibroker.protocol import sasl
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation


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


def _alter_error(request, error: Error) -> dict:
    """As Kafka's generic error answer: no results (the error names no user)."""
    return {"results": ()}


# The controller pushes credentials to brokers with AlterUserScramCredentials (the node
# form); not held until ready, like the ACL APIs (wait_for_cluster_acls holds clients').
@api(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    versions=(0, 0),
    roles=Role.BOTH,
    senders=Senders.CLIENTS_AND_NODES,
    controller_decides=True,
    held_until_ready=False,
    error_response=_alter_error,
)
async def handle_alter(ctx: RequestContext, request):
    """Kafka asks for ALTER on the cluster; the controller's push, for the cluster's own
    rules (an inter-node listener, CLUSTER_ACTION), so that no client can plant a user."""

    def refused(error: Error, message: str) -> dict:
        users = dict.fromkeys(item.name for item in (*request.deletions, *request.upsertions))
        return {
            "results": [
                {"user": user, "error_code": error, "error_message": message} for user in users
            ]
        }

    return await cluster_store_request(
        ctx, request, "alter_user_scram_credentials", Operation.ALTER, refused, _apply_push
    )


def _describe_error(request, error: Error) -> dict:
    return {"error_code": error}


@api(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
    versions=(0, 0),
    roles=Role.BOTH,
    controller_decides=True,
    held_until_ready=False,
    error_response=_describe_error,
)
async def handle_describe(ctx: RequestContext, request):
    def refused(error: Error, message: str) -> dict:
        return {"error_code": error, "error_message": message, "results": ()}

    return await cluster_store_request(
        ctx, request, "describe_user_scram_credentials", Operation.DESCRIBE, refused
    )
