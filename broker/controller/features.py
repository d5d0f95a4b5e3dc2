"""The controller's feature decisions: UpdateFeatures on its state (Kafka's
FeatureControlManager.updateFeatures).

Pure, like ``state.py``: the requested updates in, an error (or none) out, the state's
finalized levels and epoch changed unless the request only validates. As Kafka: the updates
are checked one by one in the request's order and the first refusal refuses them all
(INVALID_UPDATE_VERSION, with Kafka's message); a level outside what this node supports, a
downgrade asked as an upgrade, an upgrade asked as a downgrade, an unknown upgrade type. A
level of 0 removes the feature from the finalized set (``kafka-features.sh disable``).

Departures: every node of a minibroker cluster runs the same code, so the controller checks
its own ranges only (Kafka asks every registered broker's as well). ``metadata.version`` is
never downgraded (Kafka allows a downgrade between two levels with the same metadata records;
minibroker keeps no metadata records to tell), and the dependencies between features
(Kafka's Features.validateVersion) always hold, since the finalized metadata.version cannot go
below the 4.4 level that every other level here needs.
"""

from dataclasses import dataclass

from minibroker.common.features import METADATA_VERSION, SUPPORTED, initial_levels
from minibroker.controller.state import ControllerState
from minibroker.protocol.errors import Error

# FeatureUpdate.UpgradeType's codes (UpdateFeatures v1+).
UPGRADE = 1
SAFE_DOWNGRADE = 2
UNSAFE_DOWNGRADE = 3

# How Kafka 4.4's controller prefixes the refusal of one feature, which refuses them all.
ALL_FAILED = "The update failed for all features since the following feature had an error: "


@dataclass(frozen=True)
class Update:
    feature: str
    level: int
    upgrade_type: int


def updates_of(request, version: int) -> list[Update]:
    """The request's updates; v0's ``allow_downgrade`` is a safe downgrade (Kafka's
    UpdateFeaturesRequest.upgradeType)."""
    updates = []
    for item in request.feature_updates:
        if version == 0:
            kind = SAFE_DOWNGRADE if getattr(item, "allow_downgrade", False) else UPGRADE
        else:
            kind = item.upgrade_type
        updates.append(Update(item.feature, item.max_version_level, kind))
    return updates


def bootstrap(state: ControllerState, transaction_version: int) -> bool:
    """Finalize a new cluster's levels (a state saved before features existed counts as new);
    True when the state changed and must be saved."""
    if state.finalized_features is not None:
        return False
    state.finalized_features = initial_levels(transaction_version)
    state.features_epoch += 1
    return True


def update_features(
    state: ControllerState, updates: list[Update], *, validate_only: bool, node_id: int
) -> tuple[Error, str | None, bool]:
    """(error, message, changed): Kafka's answer to the updates, and whether the finalized
    levels changed (never with ``validate_only`` or an error)."""
    current = dict(state.finalized_features or {})
    for update in updates:
        message = _refusal(current, update, node_id)
        if message is not None:
            return Error.INVALID_UPDATE_VERSION, ALL_FAILED + message, False
    proposed = dict(current)
    for update in updates:
        if update.level == 0:
            proposed.pop(update.feature, None)
        else:
            proposed[update.feature] = update.level
    if validate_only or proposed == current:
        return Error.NONE, None, False
    state.finalized_features = proposed
    state.features_epoch += 1
    return Error.NONE, None, True


def _refusal(current: dict[str, int], update: Update, node_id: int) -> str | None:
    feature, level = update.feature, update.level

    def invalid(reason: str) -> str:
        return f"Invalid update version {level} for feature {feature}. {reason}"

    if update.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return invalid("The controller does not support the given upgrade type.")
    if level < 0:
        return invalid("A feature version cannot be less than 0.")
    low, high = SUPPORTED.get(feature, (0, 0))
    if not low <= level <= high:
        if high == 0:
            return invalid(f"Local controller {node_id} does not support this feature.")
        return invalid(f"Local controller {node_id} only supports versions {low}-{high}")
    now = current.get(feature, 0)
    if level < now and update.upgrade_type == UPGRADE:
        return invalid(
            "Can't downgrade the version of this feature without setting the upgrade type to "
            "either safe or unsafe downgrade."
        )
    if level > now and update.upgrade_type != UPGRADE:
        return invalid("Can't downgrade to a newer version.")
    if feature == METADATA_VERSION and level < now:
        if update.upgrade_type == UNSAFE_DOWNGRADE:
            reason = "Unsafe metadata downgrade is not supported in this version."
        else:
            reason = (
                "Refusing to perform the requested downgrade because it might delete metadata "
                "information."
            )
        return f"Invalid metadata.version {level}. {reason}"
    return None
