"""ApiVersions: the table of what this node speaks, from protocol.versions and its roles."""

from minibroker.apis import RequestContext
from minibroker.apis.inter_node import advertised_versions
from minibroker.protocol.errors import Error


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


async def handle(ctx: RequestContext, request) -> dict:
    return {"error_code": Error.NONE, "api_keys": api_keys(advertised_versions(ctx))}
