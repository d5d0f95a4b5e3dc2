"""Replication throttles (KIP-73), the pure parts: the rates' and replica lists' validation
and precedence, and Kafka's ReplicationQuotaManager rules with time passed in
(replication/replication_quota.py). The cluster test is tests/java/test_replication_throttle.py."""

import pytest

from minibroker.common import config_model
from minibroker.common.config_model import (
    DYNAMIC_BROKER_CONFIG,
    LONG,
    BrokerLayers,
    ConfigChangeError,
)
from minibroker.protocol.errors import Error
from minibroker.replication.replication_quota import (
    ALL,
    ALTER_LOG_DIRS_RATE,
    FOLLOWER_RATE,
    LEADER_RATE,
    UNBOUNDED,
    ReplicationQuotaManager,
    rate_of,
    throttled_partitions,
)

MB = 1024 * 1024


def test_a_throttle_rate_is_a_long_of_at_least_zero_else_invalid_request(autojump_clock):
    """Kafka 4.4's answers: INVALID_REQUEST and these messages (compared with Apache Kafka
    by tests/java/test_clients.py's
    test_malformed_replication_throttles_are_refused_as_kafka_refuses_them)."""
    for good in ("0", "1048576", " 500 ", str(2**63 - 1)):
        config_model.validate_broker_overrides(
            {LEADER_RATE: good, FOLLOWER_RATE: good, ALTER_LOG_DIRS_RATE: good}
        )
        # At the cluster default too (Kafka's BrokerConfigHandler falls back to it).
        config_model.validate_broker_overrides({LEADER_RATE: good}, cluster_default=True)
    for bad, message in (
        ("fast", "Not a number of type LONG"),
        ("1.5", "Not a number of type LONG"),
        ("", "Not a number of type LONG"),
        (str(2**63), "Not a number of type LONG"),
        ("-1", "Value must be at least 0"),
    ):
        for name in (LEADER_RATE, FOLLOWER_RATE, ALTER_LOG_DIRS_RATE):
            with pytest.raises(ConfigChangeError) as refused:
                config_model.validate_broker_overrides({name: bad})
            assert refused.value.error == Error.INVALID_REQUEST, bad
            assert f"for configuration {name}: {message}" in str(refused.value), bad


def test_a_replica_list_is_the_wildcard_or_partition_broker_pairs_else_invalid_config(
    autojump_clock,
):
    for name in (
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    ):
        for good in ("", "*", "0:1", "0:1,1:2, 2:3"):
            config_model.validate_topic_overrides({name: good})
        for bad in ("0", "0:x", "a:1", "*,0:1", "0-1", "0:1;1:2"):
            with pytest.raises(ConfigChangeError) as refused:
                config_model.validate_topic_overrides({name: bad})
            assert refused.value.error == Error.INVALID_CONFIG, bad
    # Kafka 4.4's message, measured.
    with pytest.raises(ConfigChangeError) as refused:
        config_model.validate_topic_overrides({name: "*, 0:1"})
    assert str(refused.value) == (
        f"Invalid value [*, 0:1] for configuration {name}: {name} must be the literal '*' or "
        "a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


def test_a_set_rate_is_described_as_a_dynamic_long(autojump_clock):
    layers = BrokerLayers({}, {}, {LEADER_RATE: "1048576"})
    (entry,) = config_model.describe_broker(layers, include_synonyms=False, keys=[LEADER_RATE])
    assert (entry["value"], entry["config_source"], entry["config_type"]) == (
        "1048576",
        DYNAMIC_BROKER_CONFIG,
        LONG,
    )
    assert entry["read_only"] is False
    # Unset, it is not listed (a dynamic-only config, as in Kafka).
    unset = config_model.describe_broker(BrokerLayers({}, {}, {}), include_synonyms=False)
    assert LEADER_RATE not in {e["name"] for e in unset}


def test_the_broker_value_wins_over_the_cluster_default_and_unset_is_unbounded(autojump_clock):
    assert rate_of(LEADER_RATE, {LEADER_RATE: "10"}, {LEADER_RATE: "20"}) == 10
    assert rate_of(LEADER_RATE, {}, {LEADER_RATE: "20"}) == 20
    assert rate_of(LEADER_RATE, {FOLLOWER_RATE: "10"}, {}) == UNBOUNDED
    # A value stored before it was validated counts as unset, not as a crash.
    assert rate_of(LEADER_RATE, {LEADER_RATE: "fast"}, {LEADER_RATE: "20"}) == 20


def test_a_broker_keeps_the_partitions_its_id_is_named_for(autojump_clock):
    assert throttled_partitions("*", 1) is ALL
    assert throttled_partitions("0:1,1:2,2:1", 1) == {0, 2}
    assert throttled_partitions("0:1,1:2,2:1", 2) == {1}
    assert throttled_partitions("0:1,1:2", 3) == frozenset()
    quota = ReplicationQuotaManager("FollowerReplication", 3)
    assert quota.is_throttled(0, "0:3")
    assert quota.is_throttled(7, "*")
    assert not quota.is_throttled(1, "0:3")
    assert not quota.is_throttled(0, "")


def test_only_an_out_of_sync_throttled_replica_over_the_quota_is_held_back(autojump_clock):
    quota = ReplicationQuotaManager("LeaderReplication", 1, window_num=2, window_size_s=1)
    now = 1_000_000
    # Unbounded (no rate set): nothing is held back, however much went through.
    quota.record(100 * MB, now)
    assert not quota.should_throttle(False, 0, "*", now)
    quota = ReplicationQuotaManager("LeaderReplication", 1, window_num=2, window_size_s=1)
    quota.update_quota(MB)
    quota.record(MB // 2, now)
    assert not quota.should_throttle(False, 0, "0:1", now)  # under the quota
    quota.record(2 * MB, now)
    assert quota.is_quota_exceeded(now)
    assert quota.should_throttle(False, 0, "0:1", now)
    assert not quota.should_throttle(True, 0, "0:1", now)  # in sync: never
    assert not quota.should_throttle(False, 1, "0:1", now)  # not throttled here
    assert not quota.should_throttle(False, 0, "0:2", now)  # another broker's replica
    assert quota.throttled_count == 1
    # Once the samples age out of the window (2 x 1 s), the replica fetches again.
    assert not quota.should_throttle(False, 0, "0:1", now + 2_000)


def test_a_catch_up_under_the_quota_runs_at_the_quota(autojump_clock):
    """A follower catching up 200 MB, fetching up to 1 MB whenever it is not held back
    (ReplicaFetcherThread's loop, every 50 ms), under a 2 MB/s quota over Kafka's 11 windows
    of 1 s: the copy takes as long as the quota says, within 15%, the first windows' burst
    included; and the measured rate never strays far above the quota."""
    quota = ReplicationQuotaManager("FollowerReplication", 3, window_num=11, window_size_s=1)
    quota.update_quota(2 * MB)
    left, now, last, highest = 200 * MB, 0, 0, 0.0
    while left > 0:
        if not quota.should_throttle(False, 0, "0:3", now):
            size = min(MB, left)
            quota.record(size, now)
            left -= size
            last = now
        if now >= 11_000:  # past the first burst (Kafka's Rate counts 10 windows at least)
            highest = max(highest, quota.measure(now))
        now += 50
    seconds = last / 1000
    assert 0.85 * 100 <= seconds <= 1.15 * 100, seconds
    assert highest <= 1.5 * 2 * MB, highest / MB


def test_the_copy_throttle_falls_back_to_its_static_property_then_unbounded():
    """replica.alter.log.dirs.io.max.bytes.per.second: the broker's dynamic value, else the
    cluster default's, else the static property (Kafka's default: Long.MAX_VALUE)."""
    assert (
        rate_of(ALTER_LOG_DIRS_RATE, {ALTER_LOG_DIRS_RATE: "10"}, {ALTER_LOG_DIRS_RATE: "20"}, 30)
        == 10
    )
    assert rate_of(ALTER_LOG_DIRS_RATE, {}, {ALTER_LOG_DIRS_RATE: "20"}, 30) == 20
    assert rate_of(ALTER_LOG_DIRS_RATE, {}, {}, 30) == 30
    assert rate_of(ALTER_LOG_DIRS_RATE, {}, {}) == UNBOUNDED
    assert config_model.BROKER_CONFIG_DEFS[ALTER_LOG_DIRS_RATE] == (LONG, str(2**63 - 1))
