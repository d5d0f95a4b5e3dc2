"""ApiVersions: the table of what this node speaks, from the APIs' declarations and its roles.

What a listener advertises is ``ctx.advertised`` (see apis.registry.advertised_versions): a
client listener of a node with an inter-node listener leaves out the APIs only nodes send.
"""

from minibroker.apis import RequestContext, Role, api
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey


def api_keys(supported: dict[int, tuple[int, int]]) -> list[dict]:
    return [
        {"api_key": key, "min_version": low, "max_version": high}
        for key, (low, high) in sorted(supported.items())
    ]


def unsupported_version_response(supported: dict[int, tuple[int, int]]) -> dict:
    """The v0-layout answer to an ApiVersions version we do not know.

    Clients (kafka-python asks v4 first) read the error and the ranges, then retry with the
    highest ApiVersions version both sides support.
    """
    return {"error_code": Error.UNSUPPORTED_VERSION, "api_keys": api_keys(supported)}


def _error_response(request, error: Error) -> dict:
    return {"error_code": error, "api_keys": ()}


@api(
    ApiKey.API_VERSIONS,
    versions=(0, 3),
    roles=Role.BOTH,
    held_until_ready=False,
    error_response=_error_response,
)
async def handle(ctx: RequestContext, request) -> dict:
    return {"error_code": Error.NONE, "api_keys": api_keys(ctx.advertised)}
