"""`minibroker probe`: is the node at this address serving Kafka? For health checks.

A listening socket proves little (a broker binds before it has joined the cluster), so the
probe speaks the protocol as a client's first two steps do: ApiVersions, then Metadata v12 on
the same connection. A broker answers Metadata only once it has joined the cluster (it holds
client requests until the controller's first UpdateMetadata), so a healthy answer means the
node is ready for clients; a controller-only node answers Metadata too, with the brokers it
knows and the cluster id, so one probe serves every node of a cluster.

It is synchronous, no trio, on the blocking wire client of minibroker.tools.wire: a health
check runs it as a short-lived process every few seconds.
"""

from __future__ import annotations

import time

from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse

from minibroker.tools.wire import connect, parse_address

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
# The client id the probe has always sent (it used the launcher's requests before).
CLIENT_ID = "minibroker-launcher"

__all__ = ["ProbeError", "fetch_metadata", "parse_address", "probe"]


class ProbeError(Exception):
    """The node answered, but not as a healthy Kafka node does."""


def _describe(bootstrap: str, response: MetadataResponse) -> str:
    brokers = sorted(response.brokers, key=lambda broker: broker.node_id)
    listed = ", ".join(f"{broker.node_id} at {broker.host}:{broker.port}" for broker in brokers)
    return (
        f"ok: {bootstrap} answers for cluster {response.cluster_id},"
        f" {len(brokers)} brokers ({listed or 'none yet'}), controller {response.controller_id}"
    )


def fetch_metadata(bootstrap: str, timeout: float) -> MetadataResponse:
    """ApiVersions, then Metadata v12 for no topics, on one connection to `bootstrap`
    (host:port), within `timeout` seconds in all; returns the Metadata response.

    Raises TimeoutError when the node stays silent, ValueError for a malformed address, and
    another OSError when it cannot be reached or gives an answer no healthy node gives
    (wire.WireError: a failed ApiVersions, a wrong correlation id, bytes that do not decode).
    """
    deadline = time.monotonic() + timeout
    with connect(
        bootstrap,
        timeout,
        deadline=deadline,
        client_id=CLIENT_ID,
        max_response_bytes=MAX_RESPONSE_BYTES,
    ) as client:
        client.api_versions()
        return client.call(
            MetadataRequest(
                topics=(),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )


def probe(bootstrap: str, timeout: float) -> int:
    """Probe the node at `bootstrap` (host:port) within `timeout` seconds in all.

    Prints one line, `ok: ...` with the cluster id and the brokers, or `error: ...` saying
    what failed, and returns the exit status: 0 healthy, 1 not.
    """
    try:
        response = fetch_metadata(bootstrap, timeout)
    except TimeoutError:
        print(f"error: {bootstrap}: no answer within {timeout}s")
        return 1
    except (OSError, ValueError, ProbeError) as error:
        print(f"error: {bootstrap}: {error}")
        return 1
    print(_describe(bootstrap, response))
    return 0
