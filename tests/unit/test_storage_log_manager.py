import json
import shutil
import uuid

import pytest

from protocol.record_batch import validate_batches
from storage.checkpoint import read_partition_metadata, topic_id_to_str
from storage.errors import (
    InconsistentMetaPropertiesError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogDirLockedError,
    TopicExistsError,
    UnknownTopicError,
)
from storage.log import LogConfig
from storage.log_manager import LogManager, read_properties
from tests.unit.batch_factory import make_batch

CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"


def manager(dirs, node_id=1, cluster_id=CLUSTER, config=None):
    return LogManager(
        list(dirs), config or LogConfig(segment_bytes=400), node_id=node_id, cluster_id=cluster_id
    )


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "kafka-logs"


def opened(dirs, **kwargs):
    logs = manager(dirs, **kwargs)
    logs.open(now_ms=0)
    return logs


def produce(logs, topic, partition, records=1):
    log = logs.get_log(topic, partition)
    return log.append_as_leader(make_batch(records), leader_epoch=0, now_ms=0)


def test_meta_properties_are_written_then_checked(log_dir):
    opened([log_dir], node_id=3).close()
    text = (log_dir / "meta.properties").read_text()
    lines = text.splitlines()
    assert lines[0].startswith("#")
    properties = read_properties(log_dir / "meta.properties")
    assert properties["cluster.id"] == CLUSTER
    assert properties["node.id"] == "3"
    assert properties["version"] == "1"
    assert len(properties["directory.id"]) == 22
    opened([log_dir], node_id=3).close()
    with pytest.raises(InconsistentMetaPropertiesError, match="node.id 3"):
        opened([log_dir], node_id=4)
    with pytest.raises(InconsistentMetaPropertiesError, match="wrong cluster"):
        opened([log_dir], node_id=3, cluster_id="another")


def test_a_second_manager_on_the_same_dir_is_locked_out(log_dir):
    first = opened([log_dir])
    with pytest.raises(LogDirLockedError, match=str(log_dir)):
        opened([log_dir])
    first.close()
    opened([log_dir]).close()  # released on close


def test_a_failed_open_releases_its_locks(tmp_path):
    good, bad = tmp_path / "a", tmp_path / "b"
    opened([bad], node_id=9).close()
    with pytest.raises(InconsistentMetaPropertiesError):
        opened([good, bad], node_id=1)
    opened([good], node_id=1).close()


def test_topics_survive_a_restart(log_dir):
    logs = opened([log_dir])
    topic_id = uuid.uuid4()
    info = logs.create_topic(
        "orders.v1-eu", 3, {"retention.ms": "1000"}, topic_id=topic_id, now_ms=0
    )
    assert info.topic_id == topic_id and info.num_partitions == 3
    produce(logs, "orders.v1-eu", 2, records=4)
    logs.close()
    again = opened([log_dir])
    assert again.topics() == {"orders.v1-eu": info}
    log = again.get_log("orders.v1-eu", 2)
    assert log.log_end_offset == 4
    assert log.config.retention_ms == 1000
    assert read_partition_metadata(log.directory) == topic_id
    assert again.get_log("orders.v1-eu", 3) is None
    document = json.loads((log_dir / "minibroker-topics.json").read_text())
    assert document["topics"][0]["topic_id"] == topic_id_to_str(topic_id)
    again.close()


def test_create_topic_refusals(log_dir):
    logs = opened([log_dir])
    logs.create_topic("t", 1, {}, now_ms=0)
    with pytest.raises(TopicExistsError):
        logs.create_topic("t", 1, {}, now_ms=0)
    with pytest.raises(InvalidPartitionsError):
        logs.create_topic("u", 0, {}, now_ms=0)
    with pytest.raises(InvalidTopicError):
        logs.create_topic("../escape", 1, {}, now_ms=0)
    with pytest.raises(ValueError, match="segment.bytes"):
        logs.create_topic("u", 1, {"segment.bytes": "tiny"}, now_ms=0)
    assert list(logs.topics()) == ["t"]
    logs.close()


def test_delete_topic_removes_dirs_and_entry(log_dir):
    logs = opened([log_dir])
    logs.create_topic("gone", 2, {}, now_ms=0)
    produce(logs, "gone", 0)
    logs.delete_topic("gone")
    assert logs.topics() == {} and logs.get_log("gone", 0) is None
    assert not (log_dir / "gone-0").exists()
    with pytest.raises(UnknownTopicError):
        logs.delete_topic("gone")
    info = logs.create_topic("gone", 1, {}, now_ms=0)
    assert logs.get_log("gone", 0).log_end_offset == 0
    logs.close()
    assert opened([log_dir]).topics() == {"gone": info}


def test_update_topic_configs(log_dir):
    logs = opened([log_dir])
    logs.create_topic("t", 1, {}, now_ms=0)
    logs.update_topic_configs("t", {"message.timestamp.type": "LogAppendTime"})
    assert produce(logs, "t", 0).log_append_time_ms == 0
    logs.close()
    assert opened([log_dir]).get_log("t", 0).config.uses_log_append_time


def test_partitions_spread_over_log_dirs(tmp_path):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    logs = opened(dirs)
    logs.create_topic("spread", 4, {}, now_ms=0)
    for partition in range(4):
        produce(logs, "spread", partition, records=partition + 1)
    placement = {log.partition: log.directory.parent for log in logs.logs()}
    assert sorted(placement.values()).count(dirs[0]) == 2
    logs.close()
    again = opened(dirs)
    assert [again.get_log("spread", p).log_end_offset for p in range(4)] == [1, 2, 3, 4]
    again.close()


def test_clean_shutdown_writes_checkpoints_and_the_marker(log_dir):
    logs = opened([log_dir])
    logs.create_topic("t", 2, {}, now_ms=0)
    produce(logs, "t", 0, records=5)
    logs.get_log("t", 0).maybe_increment_log_start_offset(2)
    assert not (log_dir / ".kafka_cleanshutdown").exists()
    logs.close()
    assert (log_dir / ".kafka_cleanshutdown").exists()
    assert (log_dir / "recovery-point-offset-checkpoint").read_text() == "0\n2\nt 0 5\nt 1 0\n"
    assert (log_dir / "log-start-offset-checkpoint").read_text() == "0\n1\nt 0 2\n"
    again = opened([log_dir])
    assert again.had_clean_shutdown
    assert not (log_dir / ".kafka_cleanshutdown").exists()  # a crash from now on must recover
    assert again.get_log("t", 0).log_start_offset == 2
    again.close()


def test_an_unclean_stop_is_recovered(log_dir):
    logs = opened([log_dir])
    logs.create_topic("t", 1, {}, now_ms=0)
    for _ in range(10):
        produce(logs, "t", 0, records=2)
    logs.checkpoint(now_ms=0)  # flushes rolled segments, records the recovery point
    recovery_point = logs.get_log("t", 0).recovery_point
    assert 0 < recovery_point < 20
    assert f"t 0 {recovery_point}" in (log_dir / "recovery-point-offset-checkpoint").read_text()
    # a crash: the files as they are now, without close(), plus a torn write at the end
    crashed = log_dir.parent / "crashed"
    shutil.copytree(log_dir, crashed)
    logs.close()
    active = sorted((crashed / "t-0").glob("*.log"))[-1]
    with open(active, "ab") as file:
        file.write(make_batch(3)[:-7])
    again = opened([crashed])
    assert not again.had_clean_shutdown
    log = again.get_log("t", 0)
    assert log.log_end_offset == 20
    assert len(validate_batches(log.read(0, max_bytes=10**6))) == 10
    again.close()


def test_retention_and_flush_run_over_all_logs(log_dir):
    logs = opened([log_dir], config=LogConfig(segment_bytes=200, retention_bytes=0))
    logs.create_topic("a", 1, {}, now_ms=0)
    logs.create_topic("b", 1, {"flush.messages": "1"}, now_ms=0)
    for _ in range(4):
        produce(logs, "a", 0)
    produce(logs, "b", 0)
    assert logs.get_log("b", 0).recovery_point == 1
    assert logs.run_retention(now_ms=0) >= 2
    assert logs.get_log("a", 0).log_start_offset == 4
    logs.flush_due(now_ms=0)
    logs.close()


def test_unknown_partition_dirs_are_left_alone(log_dir):
    (log_dir / "stranger-0").mkdir(parents=True)
    (log_dir / "stranger-0" / "keep").write_text("x")
    logs = opened([log_dir])
    assert logs.topics() == {} and logs.logs() == []
    logs.close()
    assert (log_dir / "stranger-0" / "keep").exists()
