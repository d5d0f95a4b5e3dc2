"""ApiVersions: the table of what this broker speaks, straight from protocol.versions."""

from protocol.errors import Error
from protocol.versions import SUPPORTED_VERSIONS

from . import RequestContext


def supported_api_keys() -> list[dict]:
    return [
        {"api_key": key, "min_version": low, "max_version": high}
        for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
    ]


def unsupported_version_response() -> dict:
    """The v0-layout answer to an ApiVersions version we do not know.

    Clients (kafka-python asks v4 first) read the error and the ranges, then retry with the
    highest ApiVersions version both sides support.
    """
    return {"error_code": Error.UNSUPPORTED_VERSION, "api_keys": supported_api_keys()}


async def handle(ctx: RequestContext, request) -> dict:
    return {"error_code": Error.NONE, "api_keys": supported_api_keys()}
