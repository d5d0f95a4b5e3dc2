"""The answer to a request whose handler failed: every part of it carries the error.

Kafka answers a request that raised in its handler with the API's error response
(UNKNOWN_SERVER_ERROR, or KAFKA_STORAGE_ERROR for a disk failure) instead of closing the
connection, so the client retries and, for the controller's channels, the next command is not
held behind a request that can never succeed. Each API builds that response from the request
beside its handler (the ``error_response`` of its declaration, see apis.Api); dispatch also
answers with it the cluster's own requests that the inter-node rules refuse.
"""

from typing import Any

from minibroker.apis.registry import APIS
from minibroker.protocol.errors import Error


def error_response(api_key: int, request, error: Error) -> dict[str, Any]:
    """A version-neutral response to ``request`` with ``error`` everywhere it fits."""
    return APIS[api_key].error_response(request, error)
