"""The log cleaner's trio shell (broker/log_cleaner.py): worker threads, swaps on the loop."""

from dataclasses import dataclass, replace
from itertools import pairwise

import crc32c
import trio

from minibroker.common.config import BrokerConfig
from minibroker.common.metrics import BrokerMetrics
from minibroker.protocol.record_batch import read_header, validate_batches
from minibroker.protocol.records import Record, decode_records, encode_batch
from minibroker.replication.log_cleaner import LogCleanerService
from minibroker.storage.log import LogConfig, PartitionLog

T0 = 1_700_000_000_000


@dataclass
class FakePartition:
    log: PartitionLog
    high_watermark: int

    @property
    def key(self):
        return (self.log.topic, self.log.partition)

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark  # no transactions here


class FakeReplicas:
    def __init__(self, partitions):
        self._partitions = partitions

    def partitions(self):
        return list(self._partitions)


class FakeLogManager:
    def __init__(self, logs):
        self.logs = {(log.topic, log.partition): log for log in logs}
        self.checkpoints_written = 0

    def get_log(self, topic, partition):
        return self.logs.get((topic, partition))

    # The cleaner writes the checkpoints in three steps (replication/log_io.py).
    def checkpoint_positions(self):
        return {}

    def write_checkpoint_files(self, positions):
        self.checkpoints_written += 1
        return {}

    def finish_checkpoints(self, failed):
        assert not failed


def compacted_log(tmp_path, name="compacted-0"):
    batch_size = len(encode_batch([Record(0, T0, b"key-0", b"key-0-0000")]))
    return PartitionLog.open(
        tmp_path / name,
        LogConfig(
            cleanup_policy="compact",
            min_cleanable_dirty_ratio=0.01,
            segment_bytes=batch_size * 20,
        ),
        now_ms=T0,
        needs_recovery=False,
    )


def append(partition_log, key, value):
    batch = encode_batch([Record(0, T0, key, value)])
    partition_log.append_as_leader(batch, leader_epoch=0, now_ms=T0)


def service_for(partition_logs):
    partitions = [FakePartition(log, log.log_end_offset) for log in partition_logs]
    manager = FakeLogManager(partition_logs)
    metrics = BrokerMetrics()
    service = LogCleanerService(
        BrokerConfig(), FakeReplicas(partitions), manager, metrics, lambda: T0
    )
    return service, partitions, manager, metrics


def all_records(partition_log):
    data = partition_log.read(partition_log.log_start_offset, max_bytes=1 << 30)
    records, position = [], 0
    while position < len(data):
        header = read_header(data, position)
        records += decode_records(data[position : position + header.size])
        position += header.size
    return [(record.offset, record.key, record.value) for record in records]


def batch_ranges(partition_log):
    """(first offset, last offset) of each batch a read from the start returns, every batch
    checked whole and intact (its framing, magic and CRC, as a produced batch is checked)."""
    data = partition_log.read(partition_log.log_start_offset, max_bytes=1 << 30)
    return [
        (header.base_offset, header.base_offset + header.last_offset_delta)
        for header in validate_batches(data)
    ]


async def test_appends_and_reads_go_on_while_a_worker_thread_cleans(tmp_path):
    partition_log = compacted_log(tmp_path)
    for number in range(2000):
        append(partition_log, b"key-%d" % (number % 10), b"key-%d-%04d" % (number % 10, number))
    service, _, manager, metrics = service_for([partition_log])
    cleaned_below = partition_log.segments[-1].base_offset
    appended = []
    reads = 0

    async def keep_appending_and_reading():
        nonlocal reads
        for number in range(300):
            append(partition_log, b"new-%d" % number, b"v")
            appended.append(partition_log.log_end_offset - 1)
            # A read from the start always sees whole, intact batches in offset order (the
            # batch headers and CRCs: decoding every record of every read took seconds).
            ranges = batch_ranges(partition_log)
            offsets = [offset for batch in ranges for offset in batch]
            assert offsets == sorted(offsets)
            assert all(earlier[1] < later[0] for earlier, later in pairwise(ranges))
            reads += 1
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_appending_and_reading)
        assert await service.clean_filthiest()

    records = all_records(partition_log)
    assert [offset for offset, _, _ in records] == sorted({offset for offset, _, _ in records})
    below = [record for record in records if record[0] < cleaned_below]
    assert len(below) == len({key for _, key, _ in below}) == 10
    assert [offset for offset, _, _ in records if offset >= 2000] == appended
    assert partition_log.first_dirty_offset == cleaned_below
    assert manager.checkpoints_written == 1
    assert metrics.cleaner_runs._value.get() == 1
    assert metrics.cleaner_bytes_reclaimed._value.get() > 0
    assert metrics.cleaner_max_dirty_percent._value.get() == 100.0  # nothing was clean
    assert reads == 300


async def test_nothing_past_the_high_watermark_is_cleaned(tmp_path):
    partition_log = compacted_log(tmp_path)
    for number in range(200):
        append(partition_log, b"key-%d" % (number % 10), b"v%d" % number)
    service, (partition,), _, _ = service_for([partition_log])
    bases = [segment.base_offset for segment in partition_log.segments]
    partition.high_watermark = bases[2] + 1  # inside the third segment
    assert await service.clean_filthiest()
    assert partition_log.first_dirty_offset == bases[2]
    offsets = [offset for offset, _, _ in all_records(partition_log)]
    # Below the third segment only the latest of each key is left; from it on, everything.
    assert offsets == [offset for offset in range(200) if offset >= bases[2] - 10]


async def test_a_log_that_fails_to_clean_is_left_alone_afterwards(tmp_path):
    partition_log = compacted_log(tmp_path)
    for number in range(100):
        append(partition_log, b"key-%d" % (number % 10), b"v%d" % number)
    # The first batch claims lz4 but its records are not lz4: the cleaner cannot decode it.
    first = partition_log.segments[0]
    data = bytearray(first.read_at(0, first.size))
    data[22] |= 3  # the low byte of the attributes: codec 3, lz4
    header = read_header(data)
    data[17:21] = crc32c.crc32c(bytes(data[21 : header.size])).to_bytes(4, "big")
    with open(first.log_path, "r+b") as file:
        file.write(data)
    service, _, _, metrics = service_for([partition_log])
    assert await service.clean_filthiest()  # tried, failed, logged
    assert service.uncleanable == {("compacted", 0)}
    assert metrics.uncleanable_partitions._value.get() == 1
    assert not await service.clean_filthiest()  # not picked again
    assert not [p for p in partition_log.directory.iterdir() if ".cleaned" in p.name]


async def test_a_closed_log_stops_the_cleaning_quietly(tmp_path):
    partition_log = compacted_log(tmp_path)
    for number in range(2000):
        append(partition_log, b"key-%d" % (number % 10), b"v%d" % number)
    service, _, manager, _ = service_for([partition_log])

    async def close_soon():
        await trio.sleep(0)
        partition_log.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(close_soon)
        assert await service.clean_filthiest()
    assert service.uncleanable == set()
    assert manager.checkpoints_written == 0
    assert not [p for p in partition_log.directory.iterdir() if ".cleaned" in p.name]
    # The files left are the old ones, complete.
    reopened = PartitionLog.open(
        partition_log.directory,
        replace(partition_log.config),
        now_ms=T0,
        needs_recovery=True,
    )
    assert reopened.log_end_offset == 2000
