"""The features an ApiVersions answer lists (Kafka's ApiVersionsResponse.Builder): the
transaction.version feature supported from 0 to 2 (left out before v4, KAFKA-17492, since its
minimum is 0) and finalized at the broker's ``transaction.version`` (not listed at 0)."""

import pytest

from minibroker.apis.api_versions import features
from minibroker.common.config import BrokerConfig, ConfigError
from minibroker.protocol import codec
from minibroker.protocol.versions import ApiKey


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("level", [0, 1, 2])
def test_transaction_version_feature(version, level):
    answer = features(version, level)
    supported = [
        (f["name"], f["min_version"], f["max_version"]) for f in answer["supported_features"]
    ]
    assert supported == ([("transaction.version", 0, 2)] if version >= 4 else [])
    finalized = [
        (f["name"], f["min_version_level"], f["max_version_level"])
        for f in answer["finalized_features"]
    ]
    assert finalized == ([("transaction.version", level, level)] if level else [])
    assert answer["finalized_features_epoch"] >= 0
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
