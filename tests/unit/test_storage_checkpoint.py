import uuid

import pytest

from minibroker.storage.checkpoint import (
    LeaderEpochCache,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
    topic_id_from_str,
    topic_id_to_str,
    write_leader_epoch_checkpoint,
    write_offset_checkpoint,
    write_partition_metadata,
)
from minibroker.storage.errors import CorruptCheckpointError


def test_offset_checkpoint_text_is_kafkas(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_offset_checkpoint(path, {("orders", 1): 500, ("a-b.c", 0): 7, ("orders", 0): 12})
    assert path.read_text() == "0\n3\na-b.c 0 7\norders 0 12\norders 1 500\n"
    assert read_offset_checkpoint(path) == {("a-b.c", 0): 7, ("orders", 0): 12, ("orders", 1): 500}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_empty_and_missing_offset_checkpoints(tmp_path):
    path = tmp_path / "log-start-offset-checkpoint"
    assert read_offset_checkpoint(path) == {}
    write_offset_checkpoint(path, {})
    assert path.read_text() == "0\n0\n"
    assert read_offset_checkpoint(path) == {}


@pytest.mark.parametrize(
    "text, complaint",
    [
        ("", "version and a count"),
        ("1\n0\n", "unrecognized version"),
        ("0\nx\n", "entry count"),
        ("0\n2\nt 0 1\n", "expected 2 entries"),
        ("0\n1\nt 0\n", "malformed line 3"),
        ("0\n1\nt zero 1\n", "not a number"),
    ],
)
def test_malformed_offset_checkpoints_are_reported(tmp_path, text, complaint):
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError, match=complaint):
        read_offset_checkpoint(path)


def test_leader_epoch_checkpoint_text(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    write_leader_epoch_checkpoint(path, [(0, 0), (2, 150)])
    assert path.read_text() == "0\n2\n0 0\n2 150\n"
    assert read_leader_epoch_checkpoint(path) == [(0, 0), (2, 150)]
    assert read_leader_epoch_checkpoint(tmp_path / "missing") == []


def test_leader_epoch_cache_assign_and_persist(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    assert cache.latest_epoch is None
    cache.assign(0, 0)
    cache.assign(0, 5)  # same epoch: no change
    cache.assign(1, 10)
    cache.assign(3, 20)
    assert cache.entries() == [(0, 0), (1, 10), (3, 20)]
    assert LeaderEpochCache(path).entries() == cache.entries()
    cache.assign(2, 15)  # a new leader rewrote history: later entries go
    assert cache.entries() == [(0, 0), (1, 10), (2, 15)]
    with pytest.raises(ValueError):
        cache.assign(-1, 0)


def test_end_offset_for_epoch_follows_offset_for_leader_epoch(tmp_path):
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    assert cache.end_offset_for(0, 100) == (-1, -1)
    for epoch, start in [(1, 10), (3, 20), (5, 40)]:
        cache.assign(epoch, start)
    assert cache.end_offset_for(5, 100) == (5, 100)  # the current epoch ends at the log end
    assert cache.end_offset_for(3, 100) == (3, 40)
    assert cache.end_offset_for(4, 100) == (3, 40)  # unknown: the largest epoch below it
    assert cache.end_offset_for(0, 100) == (0, 10)  # older than everything
    assert cache.end_offset_for(9, 100) == (-1, -1)
    assert cache.end_offset_for(-1, 100) == (-1, -1)


def test_leader_epoch_cache_truncation(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    for epoch, start in [(1, 10), (3, 20), (5, 40)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(40)
    assert cache.entries() == [(1, 10), (3, 20)]
    cache.truncate_from_end(100)
    assert cache.entries() == [(1, 10), (3, 20)]
    cache.truncate_from_start(25)
    assert cache.entries() == [(3, 25)]
    cache.truncate_from_start(5)
    assert cache.entries() == [(3, 25)]
    assert path.read_text() == "0\n1\n3 25\n"
    cache.clear()
    assert path.read_text() == "0\n0\n"


def test_partition_metadata_format(tmp_path):
    topic_id = uuid.UUID("1c9c7a4e-5b0f-4a53-8d3c-f2e0c4c1a9b7")
    write_partition_metadata(tmp_path, topic_id)
    text = (tmp_path / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}"
    assert read_partition_metadata(tmp_path) == topic_id
    assert read_partition_metadata(tmp_path / "nowhere") is None
    (tmp_path / "partition.metadata").write_text("version: 1\ntopic_id: x\n")
    with pytest.raises(CorruptCheckpointError):
        read_partition_metadata(tmp_path)


def test_topic_ids_print_as_kafka_prints_uuids():
    topic_id = uuid.UUID(int=0x0123456789ABCDEF_FEDCBA9876543210)
    text = topic_id_to_str(topic_id)
    assert text == "ASNFZ4mrze_-3LqYdlQyEA"
    assert len(text) == 22 and "=" not in text
    assert topic_id_from_str(text) == topic_id
    with pytest.raises(ValueError):
        topic_id_from_str("short")
