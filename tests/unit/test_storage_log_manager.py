import json
import shutil
import uuid

import pytest

from minibroker.protocol.record_batch import validate_batches
from minibroker.storage.checkpoint import (
    read_partition_metadata,
    topic_id_to_str,
    write_partition_metadata,
)
from minibroker.storage.errors import InconsistentMetaPropertiesError, LogDirLockedError
from minibroker.storage.log import LogConfig
from minibroker.storage.log_manager import LogManager, read_properties
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
    for partition in (0, 2):
        logs.ensure_log("orders.v1-eu", topic_id, partition, {"retention.ms": "1000"}, now_ms=0)
    produce(logs, "orders.v1-eu", 2, records=4)
    info = logs.topics()["orders.v1-eu"]
    assert info.topic_id == topic_id and info.configs == {"retention.ms": "1000"}
    logs.close()
    again = opened([log_dir])
    assert again.topics() == {"orders.v1-eu": info}
    assert again.hosted("orders.v1-eu") == [0, 2]
    log = again.get_log("orders.v1-eu", 2)
    assert log.log_end_offset == 4
    assert log.config.retention_ms == 1000
    assert read_partition_metadata(log.directory) == topic_id
    assert again.get_log("orders.v1-eu", 1) is None
    document = json.loads((log_dir / "minibroker-topics.json").read_text())
    assert document == {
        "version": 2,
        "topics": [
            {
                "name": "orders.v1-eu",
                "topic_id": topic_id_to_str(topic_id),
                "configs": {"retention.ms": "1000"},
            }
        ],
    }
    again.close()


def test_a_version_1_topic_table_still_opens(log_dir):
    topic_id = uuid.uuid4()
    logs = opened([log_dir])
    logs.ensure_log("t", topic_id, 0, {"retention.ms": "5"}, now_ms=0)
    logs.close()
    (log_dir / "minibroker-topics.json").write_text(
        json.dumps(
            {
                "version": 1,
                "topics": [
                    {
                        "name": "t",
                        "topic_id": topic_id_to_str(topic_id),
                        "num_partitions": 3,
                        "configs": {"retention.ms": "5"},
                    }
                ],
            }
        )
    )
    again = opened([log_dir])
    assert again.hosted("t") == [0]
    assert again.get_log("t", 0).config.retention_ms == 5
    again.close()


def test_ensure_log_is_idempotent(log_dir):
    logs = opened([log_dir])
    topic_id = uuid.uuid4()
    log = logs.ensure_log("t", topic_id, 0, {"retention.ms": "1000"}, now_ms=0)
    produce(logs, "t", 0, records=3)
    table = (log_dir / "minibroker-topics.json").stat()
    assert logs.ensure_log("t", topic_id, 0, {"retention.ms": "1000"}, now_ms=0) is log
    assert log.log_end_offset == 3
    again = (log_dir / "minibroker-topics.json").stat()
    assert (again.st_ino, again.st_mtime_ns) == (table.st_ino, table.st_mtime_ns)
    assert logs.hosted("t") == [0]
    logs.close()


def test_ensure_log_applies_changed_configs_to_the_open_logs(log_dir):
    logs = opened([log_dir])
    topic_id = uuid.uuid4()
    logs.ensure_log("t", topic_id, 0, {}, now_ms=0)
    changed = {"message.timestamp.type": "LogAppendTime"}
    logs.ensure_log("t", topic_id, 1, changed, now_ms=0)
    assert produce(logs, "t", 0).log_append_time_ms == 0
    assert logs.topics()["t"].configs == changed
    logs.close()
    assert opened([log_dir]).get_log("t", 0).config.uses_log_append_time


def test_ensure_log_refuses_before_changing_anything(log_dir):
    logs = opened([log_dir])
    with pytest.raises(ValueError, match="segment.bytes"):
        logs.ensure_log("t", uuid.uuid4(), 0, {"segment.bytes": "tiny"}, now_ms=0)
    with pytest.raises(ValueError, match="illegal"):
        logs.ensure_log("../escape", uuid.uuid4(), 0, {}, now_ms=0)
    with pytest.raises(ValueError, match="negative"):
        logs.ensure_log("t", uuid.uuid4(), -1, {}, now_ms=0)
    assert logs.topics() == {} and logs.logs() == []
    assert not (log_dir / "minibroker-topics.json").exists()
    assert not list(log_dir.glob("t-*"))
    topic_id = uuid.uuid4()
    logs.ensure_log("t", topic_id, 0, {}, now_ms=0)
    with pytest.raises(ValueError, match="retention.ms"):
        logs.ensure_log("t", topic_id, 1, {"retention.ms": "soon"}, now_ms=0)
    assert logs.topics()["t"].configs == {} and logs.hosted("t") == [0]
    logs.close()


def test_a_topic_recreated_under_a_new_id_replaces_the_old_partitions(log_dir):
    logs = opened([log_dir])
    old_id, new_id = uuid.uuid4(), uuid.uuid4()
    for partition in range(3):
        logs.ensure_log("t", old_id, partition, {"retention.ms": "1"}, now_ms=0)
        produce(logs, "t", partition, records=2)
    logs.remove_log("t", 2, delete=False)
    log = logs.ensure_log("t", new_id, 1, {}, now_ms=0)
    assert log.log_end_offset == 0
    assert read_partition_metadata(log.directory) == new_id
    assert logs.hosted("t") == [1]
    assert not (log_dir / "t-0").exists() and not (log_dir / "t-2").exists()
    assert logs.topics()["t"].topic_id == new_id and logs.topics()["t"].configs == {}
    logs.close()
    again = opened([log_dir])
    assert again.hosted("t") == [1] and again.topics()["t"].topic_id == new_id
    again.close()


def test_a_leftover_directory_of_another_topic_id_is_replaced(log_dir):
    leftover = log_dir / "t-0"
    leftover.mkdir(parents=True)
    (leftover / "00000000000000000000.log").write_bytes(make_batch(2))
    write_partition_metadata(leftover, uuid.uuid4())
    logs = opened([log_dir])
    assert logs.get_log("t", 0) is None and leftover.exists()  # unknown topic: left alone
    topic_id = uuid.uuid4()
    log = logs.ensure_log("t", topic_id, 0, {}, now_ms=0)
    assert log.log_end_offset == 0
    assert read_partition_metadata(leftover) == topic_id
    logs.close()


def test_a_directory_of_an_unknown_topic_with_the_same_id_is_adopted(log_dir):
    topic_id = uuid.uuid4()
    logs = opened([log_dir])
    logs.ensure_log("t", topic_id, 0, {}, now_ms=0)
    produce(logs, "t", 0, records=3)
    logs.close()
    (log_dir / "minibroker-topics.json").write_text('{"version": 2, "topics": []}')
    active = log_dir / "t-0" / "00000000000000000000.log"
    sound_size = active.stat().st_size
    with open(active, "ab") as file:
        file.write(make_batch(1)[:-5])  # torn: it must be recovered before it is trusted
    again = opened([log_dir])
    assert again.get_log("t", 0) is None
    log = again.ensure_log("t", topic_id, 0, {}, now_ms=0)
    assert log.log_end_offset == 3
    assert active.stat().st_size == sound_size
    assert len(validate_batches(log.read(0, max_bytes=10**6))) == 1
    again.close()


def test_remove_log_without_delete_keeps_the_directory_and_its_offsets(log_dir):
    logs = opened([log_dir], config=LogConfig(segment_bytes=200))
    topic_id = uuid.uuid4()
    logs.ensure_log("t", topic_id, 0, {}, now_ms=0)
    logs.ensure_log("t", topic_id, 1, {}, now_ms=0)
    for _ in range(4):
        produce(logs, "t", 0, records=2)
    logs.get_log("t", 0).maybe_increment_log_start_offset(3)
    logs.remove_log("t", 0, delete=False)
    logs.remove_log("t", 0, delete=False)  # a repeated StopReplica changes nothing
    assert logs.get_log("t", 0) is None and logs.hosted("t") == [1]
    assert (log_dir / "t-0").is_dir() and "t" in logs.topics()
    logs.checkpoint(now_ms=0)
    assert "t 0 8" in (log_dir / "recovery-point-offset-checkpoint").read_text()
    assert "t 0 3" in (log_dir / "log-start-offset-checkpoint").read_text()
    log = logs.ensure_log("t", topic_id, 0, {}, now_ms=0)
    assert (log.log_start_offset, log.log_end_offset) == (3, 8)
    logs.remove_log("t", 0, delete=False)
    logs.close()
    again = opened([log_dir])
    assert again.hosted("t") == [0, 1]  # on disk, so hosted after a restart
    log = again.get_log("t", 0)
    assert (log.log_start_offset, log.log_end_offset) == (3, 8)
    again.close()


def test_remove_log_with_delete_drops_the_topic_with_its_last_partition(log_dir):
    logs = opened([log_dir])
    topic_id = uuid.uuid4()
    for partition in range(3):
        logs.ensure_log("t", topic_id, partition, {}, now_ms=0)
    produce(logs, "t", 0)
    logs.remove_log("t", 0, delete=True)
    assert not (log_dir / "t-0").exists() and logs.hosted("t") == [1, 2]
    logs.remove_log("t", 0, delete=True)  # not hosted: nothing to do
    logs.remove_log("t", 1, delete=False)
    logs.remove_log("t", 2, delete=True)
    assert "t" in logs.topics()  # t-1 is still on disk and needs the topic's configs
    logs.remove_log("t", 1, delete=True)
    assert not (log_dir / "t-1").exists()
    assert logs.topics() == {} and logs.logs() == []
    logs.close()
    again = opened([log_dir])
    assert again.topics() == {} and again.logs() == []
    again.close()


def test_partitions_spread_over_log_dirs(tmp_path):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    logs = opened(dirs)
    topic_id = uuid.uuid4()
    for partition in range(4):
        logs.ensure_log("spread", topic_id, partition, {}, now_ms=0)
        produce(logs, "spread", partition, records=partition + 1)
    placement = {log.partition: log.directory.parent for log in logs.logs()}
    assert sorted(placement.values()).count(dirs[0]) == 2
    logs.close()
    again = opened(dirs)
    assert [again.get_log("spread", p).log_end_offset for p in range(4)] == [1, 2, 3, 4]
    assert all(again.get_log("spread", p).directory.parent == placement[p] for p in range(4))
    again.close()


def test_open_creates_no_missing_partition(log_dir):
    logs = opened([log_dir])
    topic_id = uuid.uuid4()
    logs.ensure_log("t", topic_id, 0, {}, now_ms=0)
    logs.ensure_log("t", topic_id, 1, {}, now_ms=0)
    logs.close()
    shutil.rmtree(log_dir / "t-1")
    again = opened([log_dir])
    assert again.hosted("t") == [0] and not (log_dir / "t-1").exists()
    again.close()


def test_open_deletes_a_partition_of_an_older_topic_id(log_dir):
    logs = opened([log_dir])
    topic_id = uuid.uuid4()
    logs.ensure_log("t", topic_id, 0, {}, now_ms=0)
    logs.ensure_log("t", topic_id, 1, {}, now_ms=0)
    logs.close()
    write_partition_metadata(log_dir / "t-1", uuid.uuid4())
    again = opened([log_dir])
    assert again.hosted("t") == [0] and not (log_dir / "t-1").exists()
    again.close()


def test_clean_shutdown_writes_checkpoints_and_the_marker(log_dir):
    logs = opened([log_dir])
    topic_id = uuid.uuid4()
    logs.ensure_log("t", topic_id, 0, {}, now_ms=0)
    logs.ensure_log("t", topic_id, 1, {}, now_ms=0)
    produce(logs, "t", 0, records=5)
    logs.get_log("t", 0).maybe_increment_log_start_offset(2)
    assert not (log_dir / ".kafka_cleanshutdown").exists()
    assert logs.previous_broker_epoch == -1  # a new log dir: no clean shutdown before
    logs.broker_epoch = 7  # as the registration answered
    logs.close()
    # Kafka's CleanShutdownFileHandler content: the broker epoch, for the next registration.
    assert (log_dir / ".kafka_cleanshutdown").read_text() == '{"version":0,"brokerEpoch":7}'
    assert (log_dir / "recovery-point-offset-checkpoint").read_text() == "0\n2\nt 0 5\nt 1 0\n"
    assert (log_dir / "log-start-offset-checkpoint").read_text() == "0\n1\nt 0 2\n"
    again = opened([log_dir])
    assert again.had_clean_shutdown
    assert again.previous_broker_epoch == 7
    assert not (log_dir / ".kafka_cleanshutdown").exists()  # a crash from now on must recover
    assert again.get_log("t", 0).log_start_offset == 2
    again.close()


def test_an_unclean_stop_is_recovered(log_dir):
    logs = opened([log_dir])
    logs.ensure_log("t", uuid.uuid4(), 0, {}, now_ms=0)
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
    logs.ensure_log("a", uuid.uuid4(), 0, {}, now_ms=0)
    logs.ensure_log("b", uuid.uuid4(), 0, {"flush.messages": "1"}, now_ms=0)
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


def test_topic_configs_and_defaults_change_live_and_the_table_keeps_them(log_dir):
    logs = opened([log_dir], config=LogConfig(retention_ms=1000))
    topic_id = uuid.uuid4()
    first = logs.ensure_log("live", topic_id, 0, {"segment.ms": "5"}, now_ms=0)
    second = logs.ensure_log("live", topic_id, 1, {"segment.ms": "5"}, now_ms=0)
    assert logs.update_topic_configs("live", {"max.message.bytes": "100"})
    assert [log.config.max_message_bytes for log in (first, second)] == [100, 100]
    assert first.config.segment_ms == LogConfig().segment_ms  # the override was removed
    assert not logs.update_topic_configs("elsewhere", {"retention.ms": "1"})

    logs.set_default_config(LogConfig(retention_ms=7, max_message_bytes=5))
    assert (first.config.retention_ms, first.config.max_message_bytes) == (7, 100)
    logs.close()

    reopened = opened([log_dir])
    assert reopened.topics()["live"].configs == {"max.message.bytes": "100"}
    assert reopened.get_log("live", 0).config.max_message_bytes == 100
    reopened.close()


def test_an_io_error_takes_its_log_dir_offline_and_only_that_one(tmp_path, monkeypatch):
    """Kafka's LogDirFailureChannel: a checkpoint that cannot be written takes its log dir
    offline; every log there then refuses appends and reads with KAFKA_STORAGE_ERROR
    without touching a file, the other dir goes on, the listener hears of the failure once,
    and close() marks only the live dir clean, so the failed one is recovered at the next
    open with everything it held."""
    import minibroker.storage.log_manager as log_manager_module
    from minibroker.protocol.errors import Error
    from minibroker.storage.errors import StorageError

    dirs = [tmp_path / "d1", tmp_path / "d2"]
    logs = opened(dirs)
    heard = []
    logs.failures.add_listener(lambda directory, reason: heard.append((directory, reason)))
    topic_id = uuid.uuid4()
    for partition in range(2):
        logs.ensure_log("t", topic_id, partition, {}, now_ms=0)
        produce(logs, "t", partition, records=3)
    failing = next(log.directory.parent for log in logs.logs())
    healthy = next(d for d in dirs if d != failing)
    write = log_manager_module.write_offset_checkpoint

    def disk_full_in_failing(path, offsets):
        if path.parent == failing:
            raise OSError(28, "No space left on device")
        write(path, offsets)

    monkeypatch.setattr(log_manager_module, "write_offset_checkpoint", disk_full_in_failing)
    with pytest.raises(StorageError) as failed:
        logs.checkpoint(now_ms=0)
    assert failed.value.error == Error.KAFKA_STORAGE_ERROR
    monkeypatch.setattr(log_manager_module, "write_offset_checkpoint", write)
    assert [directory for directory, _ in heard] == [failing]
    assert "No space left on device" in heard[0][1]
    assert logs.online_log_dirs() == [healthy]
    on_failed = next(log for log in logs.logs() if log.directory.parent == failing)
    on_healthy = next(log for log in logs.logs() if log.directory.parent == healthy)
    size_before = sum(path.stat().st_size for path in on_failed.directory.glob("*.log"))
    for refused in (
        lambda: on_failed.append_as_leader(make_batch(1), leader_epoch=0, now_ms=0),
        lambda: on_failed.read(0, max_bytes=1000),
        lambda: on_failed.truncate_to(0),
    ):
        with pytest.raises(StorageError) as offline:
            refused()
        assert offline.value.error == Error.KAFKA_STORAGE_ERROR
        assert "offline" in str(offline.value)
    assert sum(path.stat().st_size for path in on_failed.directory.glob("*.log")) == size_before
    on_healthy.append_as_leader(make_batch(1), leader_epoch=0, now_ms=0)
    logs.checkpoint(now_ms=0)  # the live dir's checkpoints are still written
    logs.close()
    assert (healthy / ".kafka_cleanshutdown").exists()
    assert not (failing / ".kafka_cleanshutdown").exists()
    again = opened(dirs)
    ends = {log.directory.parent: log.log_end_offset for log in again.logs()}
    assert ends == {failing: 3, healthy: 4}
    again.close()
