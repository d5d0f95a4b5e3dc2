"""Finalized features (KIP-584) on the wire: ApiVersions lists them with an epoch, UpdateFeatures
(57) changes them through the controller with Kafka's rules, and a change survives a restart.
(Kafka 4.4's own `kafka-features` runs in tests/java/test_tools.py.)"""

import datetime

from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsV4
from kio.schema.errors import ErrorCode
from kio.schema.update_features.v0.request import FeatureUpdateKey as UpdateV0
from kio.schema.update_features.v0.request import UpdateFeaturesRequest as UpdateFeaturesV0
from kio.schema.update_features.v1.request import FeatureUpdateKey, UpdateFeaturesRequest
from kio.static.primitive import i32

from minibroker.protocol import codec
from minibroker.protocol.kafka44_schemas import UpdateFeaturesRequestV2
from minibroker.protocol.schemas import ShareGroupHeartbeatRequestV1
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation
from tests.conftest import exchange, wait_for
from tests.integration.authz import on_cluster

UPGRADE, SAFE_DOWNGRADE = 1, 2
ELR = "eligible.leader.replicas.version"
# A new Kafka 4.4 cluster's levels (share.version 2: dead-letter queues, KIP-1191).
NEW_CLUSTER = {
    "eligible.leader.replicas.version": 1,
    "group.version": 1,
    "metadata.version": 33,
    "share.version": 2,
    "streams.version": 1,
    "transaction.version": 2,
}


def api_versions(broker, request=None):
    request = request or ApiVersionsV4(client_software_name="t", client_software_version="1")
    answer = exchange(broker.bootstrap, request)
    assert answer.error_code == ErrorCode.none
    finalized = {}
    for feature in answer.finalized_features:
        assert feature.min_version_level == feature.max_version_level
        finalized[feature.name] = feature.max_version_level
    supported = {f.name: (f.min_version, f.max_version) for f in answer.supported_features}
    return supported, finalized, answer.finalized_features_epoch


def update(broker, *updates, validate_only=False):
    request = UpdateFeaturesRequest(
        timeout=datetime.timedelta(seconds=30),
        feature_updates=tuple(
            FeatureUpdateKey(feature=name, max_version_level=level, upgrade_type=kind)
            for name, level, kind in updates
        ),
        validate_only=validate_only,
    )
    answer = exchange(broker.bootstrap, request)
    # The outcome is at the top; after a success v1 lists each feature with NONE, after a
    # failure none (as Kafka answers).
    listed = [(name, ErrorCode.none) for name, _, _ in updates]
    expected = listed if answer.error_code == ErrorCode.none else []
    assert [(r.feature, r.error_code) for r in answer.results] == expected
    return answer.error_code, answer.error_message


def heartbeat(broker) -> ErrorCode:
    """A new member's first ConsumerGroupHeartbeat (KIP-848)."""
    request = codec.build(
        codec.request_class(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0),
        {
            "group_id": "features-group",
            "member_id": "",
            "member_epoch": 0,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout": datetime.timedelta(seconds=30),
            "subscribed_topic_names": ["features-topic"],
            "server_assignor": None,
            "topic_partitions": [],
        },
    )
    return exchange(broker.bootstrap, request).error_code


def share_heartbeat(broker) -> ErrorCode:
    """A new member's first ShareGroupHeartbeat (KIP-932)."""
    request = ShareGroupHeartbeatRequestV1(
        group_id="features-share-group",
        member_id="m",
        member_epoch=i32(0),
        subscribed_topic_names=("features-topic",),
    )
    return exchange(broker.bootstrap, request).error_code


def test_update_features_upgrades_downgrades_and_survives_a_restart(broker):
    # A broker answers a new cluster's levels at epoch 0 until the controller's word comes
    # (it is pushed when the broker registers).
    wait_for(lambda: api_versions(broker)[2] >= 1, 30, "the controller's features pushed")
    supported, finalized, epoch = api_versions(broker)
    assert supported == {
        "eligible.leader.replicas.version": (0, 1),
        "group.version": (0, 1),
        "kraft.version": (0, 0),
        "metadata.version": (7, 33),
        "share.version": (0, 2),
        "streams.version": (0, 1),
        "transaction.version": (0, 2),
    }
    # A new Kafka 4.4 cluster's levels, eligible leader replicas (KIP-966) on.
    assert finalized == NEW_CLUSTER and epoch >= 1
    # Before v4 only the features whose minimum is above 0 are supported (KAFKA-17492).
    supported_v3, finalized_v3, _ = api_versions(
        broker, ApiVersionsV3(client_software_name="t", client_software_version="1")
    )
    assert supported_v3 == {"metadata.version": (7, 33)} and finalized_v3 == NEW_CLUSTER

    # Validate only: accepted, nothing changes.
    assert update(broker, ("group.version", 0, SAFE_DOWNGRADE), validate_only=True) == (
        ErrorCode.none,
        None,
    )
    assert api_versions(broker)[1:] == (NEW_CLUSTER, epoch)

    # Out of range, an unknown feature, a downgrade asked as an upgrade: refused whole.
    error, message = update(broker, ("group.version", 0, SAFE_DOWNGRADE), ("group.version", 5, 1))
    assert error == ErrorCode.invalid_update_version
    assert message == (
        "The update failed for all features since the following feature had an error: "
        "Invalid update version 5 for feature group.version. Local controller 1 only supports "
        "versions 0-1"
    )
    error, message = update(broker, ("share.version", 3, UPGRADE))
    assert (error, message) == (
        ErrorCode.invalid_update_version,
        "The update failed for all features since the following feature had an error: "
        "Invalid update version 3 for feature share.version. Local controller 1 only supports "
        "versions 0-2",
    )
    error, message = update(broker, ("streams.version", 2, UPGRADE))
    assert (error, message) == (
        ErrorCode.invalid_update_version,
        "The update failed for all features since the following feature had an error: "
        "Invalid update version 2 for feature streams.version. Local controller 1 only supports "
        "versions 0-1",
    )
    error, _ = update(broker, ("transaction.version", 1, UPGRADE))
    assert error == ErrorCode.invalid_update_version
    # v2 (what Kafka 4.4's AdminClient sends): the outcome alone, no per-feature results.
    answer = exchange(
        broker.bootstrap,
        UpdateFeaturesRequestV2(
            timeout=datetime.timedelta(seconds=30),
            feature_updates=(FeatureUpdateKey(feature="kraft.version", max_version_level=1),),
            validate_only=False,
        ),
    )
    assert not hasattr(answer, "results")
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.invalid_update_version,
        "The update failed for all features since the following feature had an error: "
        "Invalid update version 1 for feature kraft.version. Local controller 1 does not "
        "support this feature.",
    )
    assert api_versions(broker)[1:] == (NEW_CLUSTER, epoch)

    # A safe downgrade (disable) and a downgrade by v0's allow_downgrade: the epoch grows.
    disable = (("group.version", 0, SAFE_DOWNGRADE), ("share.version", 0, SAFE_DOWNGRADE))
    assert update(broker, *disable) == (ErrorCode.none, None)
    _, finalized, downgraded_epoch = api_versions(broker)
    assert finalized == {
        ELR: 1,
        "metadata.version": 33,
        "streams.version": 1,
        "transaction.version": 2,
    }
    assert downgraded_epoch > epoch
    # group.version 0: the consumer group protocol is off (Kafka: UNSUPPORTED_VERSION).
    assert heartbeat(broker) == ErrorCode.unsupported_version
    # share.version 0: share groups are off (Kafka's isShareGroupProtocolEnabled).
    assert share_heartbeat(broker) == ErrorCode.unsupported_version
    answer = exchange(
        broker.bootstrap,
        UpdateFeaturesV0(
            timeout=datetime.timedelta(seconds=30),
            feature_updates=(
                UpdateV0(feature="transaction.version", max_version_level=1, allow_downgrade=True),
            ),
        ),
    )
    assert answer.error_code == ErrorCode.none
    _, finalized, epoch = api_versions(broker)
    assert finalized == {
        ELR: 1,
        "metadata.version": 33,
        "streams.version": 1,
        "transaction.version": 1,
    }
    assert epoch > downgraded_epoch

    # The controller kept the levels: after a restart the broker answers them again, at the
    # same epoch (not a new cluster's levels at its first epoch).
    broker.restart()
    broker.wait_ready(30)
    wait_for(lambda: api_versions(broker)[2] >= epoch, 30, "the controller's features pushed")
    assert api_versions(broker)[1:] == (
        {ELR: 1, "metadata.version": 33, "streams.version": 1, "transaction.version": 1},
        epoch,
    )
    upgrade = (
        ("group.version", 1, UPGRADE),
        ("share.version", 2, UPGRADE),
        ("transaction.version", 2, UPGRADE),
    )
    assert update(broker, *upgrade) == (ErrorCode.none, None)
    assert api_versions(broker)[1:] == (NEW_CLUSTER, epoch + 1)
    # On again: the heartbeat reaches the group coordinator (which, with __consumer_offsets
    # only now being created, may first answer that it is not ready).
    assert heartbeat(broker) in (
        ErrorCode.none,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
    )


def test_update_features_needs_alter_on_the_cluster(secured):
    broker = secured([on_cluster(Operation.DESCRIBE)])
    error, message = update(broker, ("group.version", 0, SAFE_DOWNGRADE))
    assert error == ErrorCode.cluster_authorization_failed
    assert api_versions(broker)[1] == NEW_CLUSTER
