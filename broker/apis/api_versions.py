"""ApiVersions: the table of what this node speaks, from the APIs' declarations and its roles.

What a listener advertises is ``ctx.advertised`` (see apis.registry.advertised_versions): a
client listener of a node with an inter-node listener leaves out the APIs only nodes send.

Features (KIP-584; Kafka's ApiVersionsResponse.Builder with the broker's ApiVersionManager):
the supported ranges of every feature minibroker implements (common/features.py) and the
cluster's finalized levels with their epoch, as the controller finalized them (apis/features.py,
``kafka-features.sh``). As Kafka (KAFKA-17492), a supported feature whose minimum is 0 is left
out of answers before v4 (older clients cannot read it), and a finalized level 0 is never
listed. Kafka 4's Java client runs the transaction protocol v2 (KIP-890 part 2) when the
finalized ``transaction.version`` is 2 or more, and takes a newer epoch's levels only.

v5 (KIP-1242): the client may name the cluster and the node it means to reach; a cluster id
that is not this cluster's, or a node id that is not this node's, is REBOOTSTRAP_REQUIRED (the
address now belongs to another cluster or node: the client bootstraps again). Null and -1
check nothing.
"""

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.features import finalized
from minibroker.common.features import SUPPORTED, FinalizedFeatures
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey


def api_keys(supported: dict[int, tuple[int, int]]) -> list[dict]:
    return [
        {"api_key": key, "min_version": low, "max_version": high}
        for key, (low, high) in sorted(supported.items())
    ]


def features(version: int, finalized: FinalizedFeatures) -> dict:
    """The supported and finalized features of an ApiVersions answer at ``version``."""
    supported = [
        {"name": name, "min_version": low, "max_version": high}
        for name, (low, high) in sorted(SUPPORTED.items())
        if version >= 4 or low > 0
    ]
    levels = [
        {"name": name, "min_version_level": level, "max_version_level": level}
        for name, level in sorted(finalized.levels.items())
        if level != 0
    ]
    return {
        "supported_features": supported,
        "finalized_features_epoch": finalized.epoch,
        "finalized_features": levels,
    }


def unsupported_version_response(supported: dict[int, tuple[int, int]]) -> dict:
    """The answer to an ApiVersions version this node does not serve, as Kafka 4.4's
    (ApiVersionsRequest.getErrorResponse, KIP-511): the v0 layout (any client reads it),
    UNSUPPORTED_VERSION, and ApiVersions' own range alone, from which the client picks the
    version it asks again with (kafka-python asks v5 first, librdkafka v3 or v4). The other
    APIs' ranges come with that second answer.
    """
    own: dict[int, tuple[int, int]] = {ApiKey.API_VERSIONS: supported[ApiKey.API_VERSIONS]}
    return {"error_code": Error.UNSUPPORTED_VERSION, "api_keys": api_keys(own)}


def _error_response(request, error: Error) -> dict:
    return {"error_code": error, "api_keys": ()}


@api(
    ApiKey.API_VERSIONS,
    versions=(0, 5),
    roles=Role.BOTH,
    held_until_ready=False,
    error_response=_error_response,
)
async def handle(ctx: RequestContext, request) -> dict:
    if ctx.version >= 3 and request is not None:
        ctx.connection.software_name = request.client_software_name
        ctx.connection.software_version = request.client_software_version
    if ctx.version >= 5 and request is not None:
        cluster_id, node_id = request.cluster_id, request.node_id
        if (cluster_id is not None and cluster_id != ctx.cluster_id) or (
            node_id >= 0 and node_id != ctx.config.node_id
        ):
            return {"error_code": Error.REBOOTSTRAP_REQUIRED, "api_keys": ()}
    return {
        "error_code": Error.NONE,
        "api_keys": api_keys(ctx.advertised),
        **features(ctx.version, finalized(ctx)),
    }
