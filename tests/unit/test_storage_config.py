import pytest

from minibroker.storage.log import LONG_MAX, LogConfig


def test_defaults_are_kafkas():
    config = LogConfig()
    assert config.segment_bytes == 1073741824
    assert config.segment_ms == 604800000
    assert config.segment_index_bytes == 10485760
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 604800000
    assert config.retention_bytes == -1
    assert config.max_message_bytes == 1048588
    assert config.message_timestamp_type == "CreateTime"
    assert config.flush_messages == config.flush_ms == LONG_MAX
    assert config.cleanup_policy == "delete" and config.deletes_old_segments
    assert LogConfig(flush_ms=None).flush_ms == LONG_MAX


def test_topic_configs_override_the_base():
    base = LogConfig(retention_ms=1000)
    config = LogConfig.from_topic_configs(
        base,
        {
            "segment.bytes": "2048",
            "segment.ms": " 60000 ",
            "segment.index.bytes": "4096",
            "index.interval.bytes": "0",
            "retention.bytes": "-1",
            "max.message.bytes": "5000",
            "message.timestamp.type": "LogAppendTime",
            "flush.messages": "1",
            "flush.ms": "0",
            "cleanup.policy": "compact, delete",
            "min.insync.replicas": "2",
        },
    )
    assert config.segment_bytes == 2048 and config.segment_ms == 60000
    assert config.retention_ms == 1000  # not overridden
    assert config.uses_log_append_time
    assert config.cleanup_policy == "compact,delete" and config.deletes_old_segments
    assert config.min_insync_replicas == 2
    assert (
        LogConfig.from_topic_configs(base, {"cleanup.policy": "compact"}).deletes_old_segments
        is False
    )
    assert LogConfig.from_topic_configs(base, {}) == base


@pytest.mark.parametrize(
    "key, value, complaint",
    [
        ("segment.bytes", "13", "at least 14"),
        ("segment.bytes", "1e9", "Not a number of type INT"),
        ("segment.bytes", "3000000000", "Not a number of type INT"),
        ("segment.bytes", "1_000", "Not a number"),
        ("segment.ms", "0", "at least 1"),
        ("retention.ms", "-2", "at least -1"),
        ("retention.bytes", "x", "Not a number of type LONG"),
        ("message.timestamp.type", "WallClock", "CreateTime, LogAppendTime"),
        ("cleanup.policy", "delete,shred", "compact, delete"),
        ("min.insync.replicas", "0", "at least 1"),
        ("unclean.leader.election.enabled", "true", "Unknown topic config name"),
    ],
)
def test_bad_topic_configs_name_the_key(key, value, complaint):
    with pytest.raises(ValueError, match=complaint) as raised:
        LogConfig.from_topic_configs(LogConfig(), {key: value})
    assert key in str(raised.value)
