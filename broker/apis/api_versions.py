"""ApiVersions: the table of what this node speaks, from the APIs' declarations and its roles.

What a listener advertises is ``ctx.advertised`` (see apis.registry.advertised_versions): a
client listener of a node with an inter-node listener leaves out the APIs only nodes send.

Features (Kafka's ApiVersionsResponse.Builder with the broker's ApiVersionManager): the one
feature a client acts on, ``transaction.version`` (Kafka's TransactionVersion), is answered as
supported from 0 to 2 and finalized at the broker's ``transaction.version`` (default 2, as a
Kafka 4 cluster formatted at its latest metadata version); Kafka 4's Java client runs the
transaction protocol v2 (KIP-890 part 2) when the finalized level is 2 or more. As Kafka
(KAFKA-17492), a supported feature whose minimum is 0 is left out of answers before v4 (older
clients cannot read it), and a finalized level 0 is never listed. Departure: Kafka finalizes
features cluster-wide through the controller (kafka-features.sh) with the metadata offset as
the epoch; here each broker answers its own static setting with epoch 0, so every broker of a
cluster must be given the same ``transaction.version``.
"""

from minibroker.apis import RequestContext, Role, api
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey


def api_keys(supported: dict[int, tuple[int, int]]) -> list[dict]:
    return [
        {"api_key": key, "min_version": low, "max_version": high}
        for key, (low, high) in sorted(supported.items())
    ]


TRANSACTION_VERSION_FEATURE = "transaction.version"
SUPPORTED_TRANSACTION_VERSIONS = (0, 2)
# The finalized features' epoch (Kafka: the offset of the metadata record that set them). A
# client reads the features of an answer whose epoch is newer than the last it read, from -1.
FINALIZED_FEATURES_EPOCH = 0


def features(version: int, transaction_version: int) -> dict:
    """The supported and finalized features of an ApiVersions answer at ``version``."""
    low, high = SUPPORTED_TRANSACTION_VERSIONS
    supported = []
    if version >= 4 or low > 0:
        supported.append(
            {"name": TRANSACTION_VERSION_FEATURE, "min_version": low, "max_version": high}
        )
    finalized = []
    if transaction_version != 0:
        finalized.append(
            {
                "name": TRANSACTION_VERSION_FEATURE,
                "min_version_level": transaction_version,
                "max_version_level": transaction_version,
            }
        )
    return {
        "supported_features": supported,
        "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
        "finalized_features": finalized,
    }


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
    versions=(0, 4),
    roles=Role.BOTH,
    held_until_ready=False,
    error_response=_error_response,
)
async def handle(ctx: RequestContext, request) -> dict:
    return {
        "error_code": Error.NONE,
        "api_keys": api_keys(ctx.advertised),
        **features(ctx.version, ctx.config.transaction_version),
    }
