"""`minibroker probe`: is the node at this address serving Kafka? For health checks.

A listening socket proves little (a broker binds before it has joined the cluster), so the
probe speaks the protocol as a client's first two steps do: ApiVersions, then Metadata v12 on
the same connection. A broker answers Metadata only once it has joined the cluster (it holds
client requests until the controller's first UpdateMetadata), so a healthy answer means the
node is ready for clients; a controller-only node answers Metadata too, with the brokers it
knows and the cluster id, so one probe serves every node of a cluster.

It is synchronous, plain sockets and no trio, and reuses the launcher's request framing: a
health check runs it as a short-lived process every few seconds.
"""

from __future__ import annotations

import socket
import struct
import time

from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse
from kio.serial import entity_reader

from minibroker.tools.launcher import (
    _is_api_versions_v0_response,
    _metadata_frame,
    api_versions_v0_frame,
    read_exactly,
)

MAX_RESPONSE_BYTES = 16 * 1024 * 1024


class ProbeError(Exception):
    """The node answered, but not as a healthy Kafka node does."""


def parse_address(bootstrap: str) -> tuple[str, int]:
    """`host:port` or `[v6-address]:port` -> (host, port); raises ValueError otherwise."""
    host, sep, port = bootstrap.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{bootstrap!r} is not host:port")
    return host.removeprefix("[").removesuffix("]"), int(port)


def _exchange(sock: socket.socket, frame: bytes, deadline: float) -> bytes:
    """Send one framed request and return the response frame (without its size)."""
    sock.settimeout(max(0.001, deadline - time.monotonic()))
    sock.sendall(frame)
    (size,) = struct.unpack(">i", read_exactly(sock, 4))
    if not 0 < size <= MAX_RESPONSE_BYTES:
        raise ProbeError(f"response of {size} bytes is not a Kafka response")
    return read_exactly(sock, size)


def _metadata(sock: socket.socket, deadline: float) -> MetadataResponse:
    """All-topics Metadata v12 that never creates a topic."""
    correlation_id = 2
    request = MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    frame = _exchange(sock, _metadata_frame(request, correlation_id), deadline)
    header, offset = entity_reader(MetadataResponse.__header_schema__)(frame, 0)
    if header.correlation_id != correlation_id:
        raise ProbeError(f"Metadata answered with correlation id {header.correlation_id}")
    response, _ = entity_reader(MetadataResponse)(frame, offset)
    return response


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

    Raises TimeoutError when the node stays silent, OSError when it cannot be reached,
    ValueError for a malformed address, ProbeError for an answer no healthy node gives.
    """
    deadline = time.monotonic() + timeout
    host, port = parse_address(bootstrap)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        answer = _exchange(sock, api_versions_v0_frame(correlation_id=1), deadline)
        if not _is_api_versions_v0_response(answer, correlation_id=1):
            (error_code,) = struct.unpack_from(">h", answer, 4) if len(answer) >= 6 else (-1,)
            raise ProbeError(f"ApiVersions failed (error code {error_code})")
        return _metadata(sock, deadline)


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
    except (OSError, ValueError, struct.error, ProbeError) as error:
        print(f"error: {bootstrap}: {error}")
        return 1
    print(_describe(bootstrap, response))
    return 0
