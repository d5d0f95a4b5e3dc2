"""A full disk: produce answers KAFKA_STORAGE_ERROR, reads go on, the broker keeps running,
and writes resume once space is freed. The log dir is a small tmpfs (needs root)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from faults.chaos import fill_disk
from tests.cluster.conftest import produce_raw
from tests.conftest import confluent_read_all, create_topic

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("mount") is None, reason="needs root to mount a tmpfs"
)

TOPIC = "full"


@pytest.fixture
def small_disk(tmp_path: Path):
    """Set up before the broker and so torn down after it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], check=True)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_refuses_writes_serves_reads_and_recovers(small_disk, broker_factory):
    broker = broker_factory({"log.dirs": str(small_disk / "data")})
    create_topic(broker.bootstrap, TOPIC, 1)
    before = [b"before-%d" % i for i in range(50)]
    assert produce_raw(broker, TOPIC, 0, before, acks=1).error_code == ErrorCode.none

    ballast = fill_disk(small_disk)
    answer = produce_raw(broker, TOPIC, 0, [b"x" * 1000] * 200, acks=1)
    assert answer.error_code == ErrorCode.kafka_storage_error
    read = confluent_read_all(broker.bootstrap, TOPIC, {0: 0}, len(before))
    assert [message.value() for message in read] == before
    assert broker.running

    ballast.unlink()
    after = [b"after-%d" % i for i in range(50)]
    answer = produce_raw(broker, TOPIC, 0, after, acks=1)
    assert answer.error_code == ErrorCode.none
    assert answer.base_offset == len(before), "the refused batch left nothing behind"
    read = confluent_read_all(broker.bootstrap, TOPIC, {0: 0}, len(before) + len(after))
    assert [message.value() for message in read] == before + after
