"""The features an ApiVersions answer lists (Kafka's ApiVersionsResponse.Builder): every
feature minibroker implements with its supported range (those whose minimum is 0 left out
before v4, KAFKA-17492), and the finalized levels with their epoch (a level 0 not listed); and
the controller's decisions on UpdateFeatures (Kafka's FeatureControlManager)."""

import pytest

from minibroker.apis.api_versions import features
from minibroker.common.config import BrokerConfig, ConfigError
from minibroker.common.features import FinalizedFeatures, initial_levels
from minibroker.controller import features as transitions
from minibroker.controller.state import ControllerState
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey

SUPPORTED_V4 = [
    ("eligible.leader.replicas.version", 0, 1),
    ("group.version", 0, 1),
    ("kraft.version", 0, 0),
    ("metadata.version", 7, 33),
    ("share.version", 0, 2),
    ("streams.version", 0, 1),
    ("transaction.version", 0, 2),
]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("level", [0, 1, 2])
def test_features_of_an_answer(version, level):
    answer = features(version, FinalizedFeatures(initial_levels(level), epoch=7))
    supported = [
        (f["name"], f["min_version"], f["max_version"]) for f in answer["supported_features"]
    ]
    # Before v4 only the features whose minimum is above 0 (as Kafka 4.4 answers v3).
    assert supported == (SUPPORTED_V4 if version >= 4 else [("metadata.version", 7, 33)])
    finalized = [
        (f["name"], f["min_version_level"], f["max_version_level"])
        for f in answer["finalized_features"]
    ]
    expected = [
        ("eligible.leader.replicas.version", 1, 1),
        ("group.version", 1, 1),
        ("metadata.version", 33, 33),
        ("share.version", 2, 2),
        ("streams.version", 1, 1),
    ]
    if level:
        expected.append(("transaction.version", level, level))
    assert finalized == expected
    assert answer["finalized_features_epoch"] == 7
    if version >= 3:  # the tagged fields encode (v0-v2 have none, the codec drops them)
        body = {"error_code": 0, "api_keys": [], **answer}
        decoded = codec.decode_response(
            ApiKey.API_VERSIONS,
            version,
            codec.encode_response(ApiKey.API_VERSIONS, version, body),
            0,
        )
        assert len(decoded.finalized_features) == len(finalized)


def test_transaction_version_setting():
    assert BrokerConfig().transaction_version == 2
    assert BrokerConfig.from_properties({"transaction.version": "1"}).transaction_version == 1
    with pytest.raises(ConfigError):
        BrokerConfig.from_properties({"transaction.version": "3"})


def _state() -> ControllerState:
    state = ControllerState()
    assert transitions.bootstrap(state, 2)
    assert not transitions.bootstrap(state, 1)  # only a new cluster's
    assert state.features_epoch == 1
    return state


def _update(state, *updates, validate_only=False):
    return transitions.update_features(
        state,
        [transitions.Update(*update) for update in updates],
        validate_only=validate_only,
        node_id=1,
    )


UP, SAFE, UNSAFE = transitions.UPGRADE, transitions.SAFE_DOWNGRADE, transitions.UNSAFE_DOWNGRADE


def test_upgrade_downgrade_and_disable_move_the_epoch():
    state = _state()
    assert _update(state, ("group.version", 0, SAFE)) == (Error.NONE, None, True)
    assert "group.version" not in state.finalized_features and state.features_epoch == 2
    assert _update(state, ("group.version", 1, UP)) == (Error.NONE, None, True)
    assert state.finalized_features["group.version"] == 1 and state.features_epoch == 3
    assert _update(state, ("transaction.version", 1, UNSAFE)) == (Error.NONE, None, True)
    # The same level again changes nothing, and the epoch stays.
    assert _update(state, ("transaction.version", 1, UP)) == (Error.NONE, None, False)
    assert state.features_epoch == 4
    # Validate only: the answer, no change.
    assert _update(state, ("transaction.version", 2, UP), validate_only=True) == (
        Error.NONE,
        None,
        False,
    )
    assert state.finalized_features["transaction.version"] == 1


@pytest.mark.parametrize(
    ("update", "message"),
    [
        (
            ("group.version", 5, UP),
            "Invalid update version 5 for feature group.version. Local controller 1 only "
            "supports versions 0-1",
        ),
        (
            ("nosuch.version", 1, UP),
            "Invalid update version 1 for feature nosuch.version. Local controller 1 does not "
            "support this feature.",
        ),
        (
            ("share.version", 3, UP),
            "Invalid update version 3 for feature share.version. Local controller 1 only "
            "supports versions 0-2",
        ),
        (
            ("streams.version", 2, UP),
            "Invalid update version 2 for feature streams.version. Local controller 1 only "
            "supports versions 0-1",
        ),
        (
            ("kraft.version", 1, UP),
            "Invalid update version 1 for feature kraft.version. Local controller 1 does not "
            "support this feature.",
        ),
        (
            ("transaction.version", 1, UP),
            "Invalid update version 1 for feature transaction.version. Can't downgrade the "
            "version of this feature without setting the upgrade type to either safe or unsafe "
            "downgrade.",
        ),
        (
            ("metadata.version", 20, SAFE),
            "Invalid metadata.version 20. Refusing to perform the requested downgrade because it "
            "might delete metadata information.",
        ),
        (
            ("metadata.version", 6, SAFE),
            "Invalid update version 6 for feature metadata.version. Local controller 1 only "
            "supports versions 7-33",
        ),
        (
            ("group.version", -1, SAFE),
            "Invalid update version -1 for feature group.version. A feature version cannot be "
            "less than 0.",
        ),
        (
            ("group.version", 1, 9),
            "Invalid update version 1 for feature group.version. The controller does not "
            "support the given upgrade type.",
        ),
    ],
)
def test_refusals_refuse_every_update_of_the_request(update, message):
    state = _state()
    before = dict(state.finalized_features)
    # A valid update before the refused one is not applied either.
    assert _update(state, ("group.version", 0, SAFE), update) == (
        Error.INVALID_UPDATE_VERSION,
        transitions.ALL_FAILED + message,
        False,
    )
    assert state.finalized_features == before and state.features_epoch == 1


def test_the_stores_keep_the_finalized_features(tmp_path):
    """Both controller stores keep the levels and the epoch (the JSON file across a restart is
    tested in tests/integration/test_features.py)."""
    from minibroker.controller.store import ControllerStore
    from minibroker.controller.zk_layout import state_from_znodes, state_znodes

    state = _state()
    assert _update(state, ("group.version", 0, SAFE))[2]
    store = ControllerStore(tmp_path / "state.json")
    store.save(state)
    loaded = store.load()
    assert (loaded.finalized_features, loaded.features_epoch) == (
        {
            "eligible.leader.replicas.version": 1,
            "metadata.version": 33,
            "share.version": 2,
            "streams.version": 1,
            "transaction.version": 2,
        },
        2,
    )
    from_zk = state_from_znodes(state_znodes(state), controller_epoch=1)
    assert (from_zk.finalized_features, from_zk.features_epoch) == (
        {
            "eligible.leader.replicas.version": 1,
            "metadata.version": 33,
            "share.version": 2,
            "streams.version": 1,
            "transaction.version": 2,
        },
        2,
    )
    # A state saved before features existed is a new cluster's, to be finalized once.
    assert state_from_znodes(state_znodes(ControllerState()), 1).finalized_features is None
