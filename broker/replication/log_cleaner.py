"""The log cleaner's trio shell: which compacted partition to clean, and when.

The cleaning itself is storage/cleaner.py. Like Kafka's one cleaner thread
(`log.cleaner.threads=1`), one task cleans one partition at a time: it picks the dirtiest
compacted partition due for cleaning (bounded by each partition's high watermark, so that
nothing a consumer cannot see yet, or that a new leader may truncate, is cleaned), cleans
it, and looks again at once; when none is due it sleeps `log.cleaner.backoff.ms`.

Off the request path, by threads: building the offset map and writing each group's cleaned
segment read and decompress whole segments, which takes seconds on a big log, so those steps
run in a worker thread (`trio.to_thread.run_sync`). They only read the files of segments
that are not active (with their own descriptors) and write `.cleaned` files, while the loop
keeps appending to the active segment and serving reads from the segment list it owns. The
swap of each group (`log_io.replace_segments`) fsyncs the directory and unlinks the old
segments in worker threads, and makes its renames and list splice on the loop thread in one
step, so a read sees either the old segments or the new one and never a half-made swap; a
reader never holds a segment across an await, since reads copy their bytes out
synchronously. If the log is truncated, closed or
deleted meanwhile, the worker stops with CleaningAborted at its next batch and removes its
files, and a swap whose old segments are gone (retention) is refused.

A partition whose cleaning fails with an unexpected error (an undecodable batch, say) is
marked uncleanable until the broker restarts, as Kafka does, so one bad log does not stop
the cleaning of the others.
"""

import logging
import time

import trio

from minibroker.common.config import BrokerConfig
from minibroker.common.metrics import BrokerMetrics
from minibroker.replication import log_io
from minibroker.storage.cleaner import (
    CleanerStats,
    Cleaning,
    CleaningAborted,
    LogToClean,
    compacted_logs,
    filthiest,
    map_capacity,
)
from minibroker.storage.errors import StorageError

log = logging.getLogger("log_cleaner")


class LogCleanerService:
    """One task that cleans compacted partitions for ever (see the module notes)."""

    def __init__(self, config: BrokerConfig, replicas, log_manager, metrics: BrokerMetrics, clock):
        self.config = config
        self.replicas = replicas
        self.log_manager = log_manager
        self.metrics = metrics
        self.clock = clock
        self.uncleanable: set[tuple[str, int]] = set()
        self.max_map_entries = map_capacity(config.log_cleaner_dedupe_buffer_size)
        self.longest_swap_ms = 0.0
        # How the swap's blocking steps run (log_io): tests under MockClock run them inline.
        self.run_blocking: log_io.RunSync = log_io.IN_THREAD

    async def run(self) -> None:
        backoff = self.config.log_cleaner_backoff_ms / 1000
        while True:
            try:
                cleaned = await self.clean_filthiest()
            except Exception:
                # Never take the broker down: log, wait, and look again.
                log.exception("the log cleaner failed; retrying after the backoff")
                cleaned = False
            if not cleaned:
                await trio.sleep(backoff)

    async def clean_filthiest(self) -> bool:
        """Clean the dirtiest partition due; False when none is."""
        now_ms = self.clock()
        hosted = {key for key in self.uncleanable if self.log_manager.get_log(*key) is not None}
        self.uncleanable = hosted
        candidates = [
            (partition.log, partition.last_stable_offset)
            for partition in self.replicas.partitions()
            if partition.log.config.compacts and partition.key not in self.uncleanable
        ]
        logs = compacted_logs(candidates, now_ms)
        self.metrics.cleaner_max_dirty_percent.set(
            100 * max((item.cleanable_ratio for item in logs), default=0.0)
        )
        to_clean = filthiest(logs)
        if to_clean is None:
            return False
        key = (to_clean.log.topic, to_clean.log.partition)
        try:
            stats = await self.clean(to_clean, now_ms)
        except CleaningAborted as aborted:
            log.info("cleaning of %s stopped: %s", to_clean.log.name, aborted)
        except OSError as error:
            # Writing the cleaned segment failed on its disk: as Kafka's LogCleaner reports
            # an IOException to the LogDirFailureChannel, the log dir goes offline.
            directory = to_clean.log.directory.parent
            self.log_manager.failures.maybe_add_offline_log_dir(
                directory, f"Error while cleaning {to_clean.log.name} in dir {directory}", error
            )
        except Exception:
            if to_clean.log.closed:
                return True
            log.exception("cleaning %s failed; marking it uncleanable", to_clean.log.name)
            self.uncleanable.add(key)
        else:
            self.metrics.cleaner_runs.inc()
            self.metrics.cleaner_bytes_reclaimed.inc(max(stats.bytes_reclaimed, 0))
            if stats.bytes_read:
                self.metrics.cleaner_recopy_percent.set(
                    100 * stats.bytes_written / stats.bytes_read
                )
            log.info(
                "cleaned %s from offset %d: %d of %d bytes and %d of %d records kept, "
                "%d segment(s) replaced (longest swap, its fsyncs in worker threads: %.1f ms)",
                to_clean.log.name,
                to_clean.first_dirty_offset,
                stats.bytes_written,
                stats.bytes_read,
                stats.records_written,
                stats.records_read,
                stats.segments_replaced,
                self.longest_swap_ms,
            )
        finally:
            self.metrics.uncleanable_partitions.set(len(self.uncleanable))
        return True

    async def clean(self, to_clean: LogToClean, now_ms: int) -> CleanerStats:
        self.longest_swap_ms = 0.0
        # The leader epoch entries the cleaning needs on disk first (Cleaning writes what is
        # left unsaved; nothing, once this ran), written in a worker thread.
        epochs = to_clean.log.leader_epoch_cache
        if (snapshot := epochs.unsaved_snapshot()) is not None:
            await self.run_blocking(epochs.write_snapshot, *snapshot)
        cleaning = Cleaning(to_clean, now_ms, max_map_entries=self.max_map_entries)
        await trio.to_thread.run_sync(cleaning.build_offset_map, abandon_on_cancel=True)
        for group in cleaning.groups():
            cleaned = await trio.to_thread.run_sync(
                cleaning.clean_group, group, abandon_on_cancel=True
            )
            swap_started = time.perf_counter()
            if not await log_io.replace_segments(to_clean.log, cleaned, group, self.run_blocking):
                raise CleaningAborted(f"{to_clean.log.name} changed during cleaning")
            self.longest_swap_ms = max(
                self.longest_swap_ms, (time.perf_counter() - swap_started) * 1000
            )
            cleaning.stats.segments_replaced += len(group)
        cleaning.finish()
        try:
            # Written in a worker thread (replication/log_io.py), as Kafka's cleaner thread
            # updates cleaner-offset-checkpoint.
            await log_io.write_checkpoints(self.log_manager)
        except StorageError as error:  # its log dir went offline
            log.warning("writing cleaner-offset-checkpoint failed: %s", error)
        return cleaning.stats
