"""The broker's log directories: locking, meta.properties, loading and recovering the
partition logs this broker hosts, the topic table, checkpoints, retention and flushing,
producer id expiration, and clean shutdown.

On disk this follows Kafka: each log dir holds a `.lock` (held with an exclusive flock while
the broker runs), `meta.properties`, `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint`, `.kafka_cleanshutdown` after a clean stop, and one
`<topic>-<partition>` directory per partition with its `partition.metadata`.

A broker hosts a subset of each topic's partitions: the controller decides which and says
so with LeaderAndIsr (`ensure_log` creates or reopens the partition's log) and StopReplica
(`remove_log`). A partition is hosted here exactly when its directory is: at startup every
directory of a known topic is reopened, and nothing is created.

Where this departs from Kafka: the topic table, `<first log dir>/minibroker-topics.json`
(replaced atomically on every change), is the broker's cache of the controller's topic ids
and configs for the partitions it hosts. It lets a restarted broker reopen its logs with the
right configs before the controller has talked to it, which a Kafka broker does by replaying
the metadata log. It is the authority on which topic a directory belongs to: a partition
directory whose topic is not in it is left alone and not loaded, and one whose
partition.metadata names another topic id (a deleted topic's leftover) is deleted.
meta.properties is created on first start rather than by a separate format step.
"""

import errno
import fcntl
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from minibroker.storage.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    fsync_directory,
    read_offset_checkpoint,
    read_partition_metadata,
    topic_id_from_str,
    topic_id_to_str,
    write_file_atomically,
    write_offset_checkpoint,
    write_partition_metadata,
)
from minibroker.storage.errors import (
    CorruptCheckpointError,
    InconsistentMetaPropertiesError,
    LogDirLockedError,
    StorageError,
)
from minibroker.storage.log import FlushJob, LogConfig, PartitionLog, parse_partition_dir_name
from minibroker.storage.log_dir_failure import LogDirFailureChannel
from minibroker.storage.replica_move import (
    delete_dir_name,
    discard_future,
    finish_swap,
    is_future,
    mark_future,
    settle_moves,
)

log = logging.getLogger("storage.log_manager")

LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


def _clean_shutdown_broker_epoch(log_dirs: list[Path]) -> int:
    """Kafka's LogManager.readBrokerEpochFromCleanShutdownFiles: the broker epoch every log
    dir's clean-shutdown marker holds (CleanShutdownFileHandler's JSON,
    ``{"version":0,"brokerEpoch":N}``); -1 when a dir has none, an unreadable one (an older
    minibroker's empty marker) or another epoch."""
    epochs = set()
    for directory in log_dirs:
        try:
            content = json.loads((directory / CLEAN_SHUTDOWN_FILE).read_text(encoding="utf-8"))
            epochs.add(int(content["brokerEpoch"]))
        except (OSError, ValueError, TypeError, KeyError):
            return -1
    return epochs.pop() if len(epochs) == 1 else -1


TOPICS_FILE = "minibroker-topics.json"
META_PROPERTIES_VERSION = "1"
TOPICS_FILE_VERSION = 2
# Version 1 also held partition counts, from when a broker hosted every partition of every
# topic; it is still read (the counts ignored) so that log dirs written then still open.
_READABLE_TOPICS_FILE_VERSIONS = (1, TOPICS_FILE_VERSION)

# Kafka's legal topic names; checked here because the name becomes a directory name.
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
# Kafka reserves these two ids (Uuid.ZERO_UUID and Uuid.METADATA_TOPIC_ID).
_RESERVED_TOPIC_IDS = (uuid.UUID(int=0), uuid.UUID(int=1))


@dataclass(frozen=True)
class TopicInfo:
    """A topic as the controller last described it. No partition count: this broker hosts
    only the partitions the controller assigns it, and `hosted` lists those."""

    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]


class _LogPosition(NamedTuple):
    """What the checkpoints record of a partition log.

    Kept for a log stopped without deletion: its directory stays, so its checkpoint entries
    must too, for it to reopen where it was, whether later in this run or after a restart.
    """

    directory: Path
    recovery_point: int
    # None when the log starts at its first segment; the checkpoint then leaves it out.
    log_start_offset: int | None
    # The log cleaner's first dirty offset (cleaner-offset-checkpoint); None if never cleaned.
    first_dirty_offset: int | None = None


class LogRequest(NamedTuple):
    """One partition the controller assigned to this broker (see LogManager.begin_logs)."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    configs: dict[str, str]


@dataclass
class _PlannedLog:
    request: LogRequest
    config: LogConfig
    # The log dir for the partition; None when its log is open already (or earlier in the
    # same batch): nothing to make.
    home: Path | None
    stopped: "_LogPosition | None"
    log: PartitionLog | None = None
    created: bool = False
    error: BaseException | None = None

    @property
    def key(self) -> tuple[str, int]:
        return self.request.topic, self.request.partition


class LogCreation:
    """Partition logs being opened or made together (LogManager.begin_logs): `run` in any
    thread, then `finish` on the manager's owner."""

    def __init__(self, manager: "LogManager", now_ms: int) -> None:
        self._manager = manager
        self._now_ms = now_ms
        self.planned: list[_PlannedLog] = []
        # Why planning stopped early (raised by `finish` after the logs planned before it).
        self.error: Exception | None = None
        # What `finish` handed out (also when it then raised).
        self.logs: list[PartitionLog] = []
        # New topics and changed configs, for `run` to write to the topic table first and
        # `finish` to apply to the open logs.
        self.topics: dict[str, TopicInfo] = {}
        self.configs: dict[str, LogConfig] = {}
        self.topics_error: OSError | None = None
        # Configs the controller pushed for those topics while `run` was writing them
        # (LogManager.update_topic_configs), applied by `finish`.
        self.late_configs: dict[str, dict[str, str]] = {}
        self._ran = False

    def run(self) -> None:
        """Open or make every planned log, stopping at the first failure, then fsync once
        each log dir that got a new partition directory: the new directories' names are
        durable before `finish` hands out their logs (and the broker answers the
        controller). Touches only the planned partitions' directories."""
        manager = self._manager
        created_in: dict[Path, list[_PlannedLog]] = {}
        try:
            if self.topics:
                # The topic table first: a restart must know the configs of every
                # directory it finds.
                topics = self.topics
                try:
                    manager._update_topics(lambda current: {**current, **topics})
                except OSError as error:
                    self.topics_error = error
                    return
            for item in self.planned:
                if item.home is None:
                    continue
                try:
                    item.log, item.created = manager._open_partition_log(item, self._now_ms)
                except Exception as error:
                    item.error = error
                    break
                if item.created:
                    created_in.setdefault(item.home, []).append(item)
        finally:
            for home, items in created_in.items():
                try:
                    fsync_directory(home)
                except OSError as error:
                    for item in items:
                        item.error = error
            self._ran = True

    def finish(self) -> list[PartitionLog]:
        """The logs, in the requests' order, now the manager's; raises the first failure
        (after taking the ones before it): StorageError with the log dir taken offline for
        an OSError, else the error itself."""
        if not self._ran:
            raise RuntimeError("LogCreation.finish before run")
        manager = self._manager
        if manager._creating is self:
            manager._creating = None
        if self.topics_error is not None:
            what, directory = f"writing {TOPICS_FILE}", manager.log_dirs[0]
            manager.failures.maybe_add_offline_log_dir(
                directory, f"Error while {what}", self.topics_error
            )
            raise StorageError(
                f"{what} failed ({self.topics_error}); log dir {directory} is offline"
            ) from self.topics_error
        for topic, config in self.configs.items():
            manager._apply_config(topic, config)
        logs = self.logs
        # Configs as they are now: the defaults may have changed while `run` ran.
        configs: dict[str, LogConfig] = {}
        failure: BaseException | None = None
        for item in self.planned:
            if failure is None and item.home is None:
                existing = manager._logs.get(item.key)
                if existing is not None:
                    logs.append(existing)
                    continue
                failure = RuntimeError(f"{item.key} is neither open nor planned")
            if failure is None and item.error is None and item.log is not None:
                home = item.log.directory.parent
                reason = manager.failures.offline_reason(home)
                if reason is None:
                    topic = item.request.topic
                    if topic not in configs:
                        configs[topic] = LogConfig.from_topic_configs(
                            manager.default_config, item.request.configs
                        )
                    item.log.config = configs[topic]
                    manager._stopped.pop(item.key, None)
                    manager._logs[item.key] = item.log
                    manager._expire_producers(item.log, self._now_ms)
                    logs.append(item.log)
                    continue
                item.error = StorageError(
                    f"creating the log of {item.key[0]}-{item.key[1]}: log dir {home} went"
                    f" offline ({reason})"
                )
            if failure is None:
                failure = item.error or self.error
            if item.log is not None:
                # Made after the first failure (or its log dir failed): closed and left to
                # the next request, which adopts the directory.
                item.log.close()
                item.log = None
        failure = failure or self.error
        for topic, late in self.late_configs.items():
            manager.update_topic_configs(topic, late)
        if isinstance(failure, OSError):
            item = next(i for i in self.planned if i.error is failure)
            assert item.home is not None
            what = f"creating the log of {item.key[0]}-{item.key[1]}"
            manager.failures.maybe_add_offline_log_dir(item.home, f"Error while {what}", failure)
            raise StorageError(
                f"{what} failed ({failure}); log dir {item.home} is offline"
            ) from failure
        if failure is not None:
            raise failure
        return logs


def _current_dir(path: Path) -> bool:
    """A partition directory that is not a future replica being filled (a move to another
    log dir, storage/replica_move.py, still under way or being discarded)."""
    return path.is_dir() and not is_future(path)


def _position_of(partition_log: PartitionLog) -> _LogPosition:
    # As Kafka does, only logs whose start moved past their first segment are listed.
    moved = partition_log.log_start_offset > partition_log.segments[0].base_offset
    return _LogPosition(
        partition_log.directory,
        partition_log.recovery_point,
        partition_log.log_start_offset if moved else None,
        partition_log.first_dirty_offset,
    )


def delete_directories(directories: list[Path]) -> None:
    """Remove partition directories durably: each one's tree, then each log dir that held
    one fsynced once (a directory back from the dead after a crash would be hosted again,
    or clash with its replacement in another log dir). Safe in any thread for directories
    no log uses any more (LogManager.detach_logs). Raises the first OSError after trying
    every directory (a missing one is not an error)."""
    first: OSError | None = None
    parents: dict[Path, None] = {}
    for directory in directories:
        for attempt in range(2):
            try:
                shutil.rmtree(directory)
                break
            except FileNotFoundError:
                break
            except OSError as error:
                # Once more: the log cleaner's thread may have made a file in it meanwhile
                # (ENOTEMPTY); it never makes one in a directory that is gone.
                if attempt:
                    first = first or error
        parents[directory.parent] = None
    for parent in parents:
        try:
            fsync_directory(parent)
        except OSError as error:
            first = first or error
    if first is not None:
        raise first


def unlink_files(paths: list[Path]) -> None:
    """Unlink files nothing uses any more (retention's `.deleted` files); in any thread.
    A failure is logged, not raised: a file left behind is removed at the next start."""
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError as error:
            log.warning("cannot delete %s: %s", path, error)


def run_flush_jobs(
    jobs: list[tuple[PartitionLog, FlushJob]],
) -> list[tuple[PartitionLog, FlushJob]]:
    """Run the blocking half of each flush (LogManager.begin_flushes); in any thread."""
    for _, job in jobs:
        job.run()
    return jobs


def _directory_id(text: str | None, directory: Path) -> uuid.UUID:
    """A log dir's directory.id (Kafka's base64 form); a meta.properties written without
    one (or with one that does not parse) gets an id derived from the dir's path, stable
    across restarts."""
    if text:
        try:
            return topic_id_from_str(text)
        except ValueError:
            pass
    return uuid.uuid5(uuid.NAMESPACE_URL, f"minibroker-log-dir:{directory.resolve()}")


def new_topic_id() -> uuid.UUID:
    """A random topic id as Kafka makes them: never reserved, never printed starting '-'."""
    while True:
        topic_id = uuid.uuid4()
        if topic_id not in _RESERVED_TOPIC_IDS and not topic_id_to_str(topic_id).startswith("-"):
            return topic_id


def read_properties(path: Path) -> dict[str, str]:
    """A Java-style properties file of `key=value` lines ('#' and '!' start comments)."""
    properties = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        key, separator, value = stripped.partition("=")
        if not separator:
            raise InconsistentMetaPropertiesError(f"{path}: malformed line {line!r}")
        properties[key.strip()] = value.strip()
    return properties


class _LoadProgress:
    """What the broker says while it opens its logs at start-up: after an unclean stop, that
    it is recovering them and, every few seconds, how far it got (partitions and bytes done);
    at the end one line with the count and the time it took. A broker re-reading gigabytes
    after a kill -9 must not look hung."""

    REPORT_EVERY_S = 5.0

    def __init__(
        self, total: int, *, recovering: bool, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._total = total
        self._recovering = recovering
        self._clock = clock
        self._started = clock()
        self._last_report = self._started
        self._done = 0
        if recovering and total:
            log.info(
                "recovering %d partition log(s) after an unclean shutdown: segments past each"
                " recovery point are re-read and checked",
                total,
            )

    def next_partition(self, logs: dict[tuple[str, int], PartitionLog]) -> None:
        """Called before each partition: reports progress when the interval has passed."""
        now = self._clock()
        if self._done and now - self._last_report >= self.REPORT_EVERY_S:
            self._last_report = now
            log.info(
                "%s logs: %d/%d partitions done, %s, %.0f s so far",
                "recovering" if self._recovering else "loading",
                self._done,
                self._total,
                _megabytes(logs),
                now - self._started,
            )
        self._done += 1

    def done(self, logs: dict[tuple[str, int], PartitionLog]) -> None:
        if not self._total:
            return
        log.info(
            "%s %d partition log(s) (%s) in %.1f s",
            "recovered" if self._recovering else "loaded",
            len(logs),
            _megabytes(logs),
            self._clock() - self._started,
        )


def _megabytes(logs: dict[tuple[str, int], PartitionLog]) -> str:
    return f"{sum(partition_log.size_bytes for partition_log in logs.values()) / 1e6:,.1f} MB"


class LogManager:
    """The partition logs this broker hosts, across its log directories."""

    def __init__(
        self,
        log_dirs: list[Path],
        default_config: LogConfig,
        *,
        node_id: int,
        cluster_id: str,
        producer_id_expiration_ms: int | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is needed")
        self.log_dirs = [Path(directory) for directory in log_dirs]
        self.default_config = default_config
        self.node_id = node_id
        self.cluster_id = cluster_id
        # Kafka's producer.id.expiration.ms (ProducerStateManagerConfig, which a dynamic
        # broker config changes in place); None: producers never expire.
        self.producer_id_expiration_ms = producer_id_expiration_ms
        # True when every log dir held a clean-shutdown marker at open (no recovery needed).
        self.had_clean_shutdown = False
        # The broker epoch the markers of the last clean shutdown held (-1: none, or not the
        # same in every log dir): the registration's PreviousBrokerEpoch (KIP-966).
        self.previous_broker_epoch = -1
        # This process's broker epoch, which the next clean shutdown writes in the markers
        # (-1 until the broker registered).
        self.broker_epoch = -1
        self._lock_fds: dict[Path, int] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        # Partitions stopped without deletion: closed, but their directories remain.
        self._stopped: dict[tuple[str, int], _LogPosition] = {}
        # Held while the offset checkpoint files are written, from whichever thread.
        self._checkpoint_lock = threading.Lock()
        # Held while the topic table is written (see _update_topics).
        self._topics_lock = threading.Lock()
        # The creation between begin_logs and its finish, if any.
        self._creating: LogCreation | None = None
        # Kafka's LogManager.preferredLogDirs: where AlterReplicaLogDirs asked a partition
        # not hosted here yet to be placed, used (and forgotten) when its log is made.
        self.preferred_log_dirs: dict[tuple[str, int], Path] = {}
        # Future replicas whose copy a stop interrupted, by partition (open): their moves
        # resume once the partition is hosted again.
        self.unfinished_moves: dict[tuple[str, int], Path] = {}
        # KIP-1066's cordoned.log.dirs: dirs that take no new replica (set_cordoned).
        self.cordoned_log_dirs: frozenset[Path] = frozenset()
        # Kafka's LogDirFailureChannel: every log here reports its I/O errors to it, and the
        # broker listens (see storage/log_dir_failure.py).
        self.failures = LogDirFailureChannel()
        # Each log dir's directory.id from its meta.properties (KIP-858), what a failed dir
        # is named by in the broker's heartbeats.
        self.directory_ids: dict[Path, uuid.UUID] = {}

    @property
    def _topics_path(self) -> Path:
        return self.log_dirs[0] / TOPICS_FILE

    @contextmanager
    def directory_io(self, directory: Path, what: str) -> Iterator[None]:
        """An OSError inside takes ``directory`` offline (Kafka's maybeHandleIOException
        around LogManager's own writes) and becomes a StorageError; an offline directory
        is refused before anything is touched."""
        reason = self.failures.offline_reason(directory)
        if reason is not None:
            raise StorageError(f"{what}: log dir {directory} is offline ({reason})")
        try:
            yield
        except OSError as error:
            self.failures.maybe_add_offline_log_dir(directory, f"Error while {what}", error)
            raise StorageError(
                f"{what} failed ({error}); log dir {directory} is offline"
            ) from error

    def _live_logs(self) -> list[PartitionLog]:
        """The logs in the dirs that have not failed (Kafka drops an offline dir's logs from
        LogManager.currentLogs: the periodic tasks pass them by)."""
        return [
            partition_log
            for partition_log in self._logs.values()
            if not self.failures.is_offline(partition_log.directory.parent)
        ]

    def online_log_dirs(self) -> list[Path]:
        """The log dirs that have not failed."""
        return [d for d in self.log_dirs if not self.failures.is_offline(d)]

    # -- startup ---------------------------------------------------------------------------

    def open(self, now_ms: int) -> None:
        """Lock and load every log dir; LogDirLockedError if another process holds one."""
        try:
            for directory in self.log_dirs:
                directory.mkdir(parents=True, exist_ok=True)
                self._lock(directory)
                self._check_meta_properties(directory)
            # Replica moves between log dirs a stop interrupted (storage/replica_move.py):
            # those whose copy had not finished resume (log_dir_mover.py).
            self.unfinished_moves = settle_moves(self.log_dirs)
            self._topics = self._read_topics()
            clean = {
                directory: (directory / CLEAN_SHUTDOWN_FILE).exists() for directory in self.log_dirs
            }
            self.had_clean_shutdown = all(clean.values())
            self.previous_broker_epoch = _clean_shutdown_broker_epoch(self.log_dirs)
            self._load_logs(now_ms, clean)
            for directory in self.log_dirs:
                # From here on an unclean stop must lead to recovery.
                (directory / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
                fsync_directory(directory)
        except BaseException:
            for partition_log in self._logs.values():
                partition_log.close()
            self._logs.clear()
            self._release_locks()
            raise

    def _lock(self, directory: Path) -> None:
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LogDirLockedError(
                    f"Failed to acquire lock on file {LOCK_FILE} in {directory}. Another broker "
                    "process is using this log directory."
                ) from None
            raise
        self._lock_fds[directory] = fd

    def _release_locks(self) -> None:
        for fd in self._lock_fds.values():
            os.close(fd)  # closing the descriptor releases its flock
        self._lock_fds.clear()

    def _check_meta_properties(self, directory: Path) -> None:
        """Create meta.properties on first use; afterwards it must name this node and cluster."""
        path = directory / META_PROPERTIES
        if not path.exists():
            directory_id = new_topic_id()
            self.directory_ids[directory] = directory_id
            text = (
                "#\n"
                "#Written by minibroker\n"
                f"cluster.id={self.cluster_id}\n"
                f"directory.id={topic_id_to_str(directory_id)}\n"
                f"node.id={self.node_id}\n"
                f"version={META_PROPERTIES_VERSION}\n"
            )
            write_file_atomically(path, text.encode())
            return
        properties = read_properties(path)
        if properties.get("version") != META_PROPERTIES_VERSION:
            raise InconsistentMetaPropertiesError(
                f"{path}: expected version={META_PROPERTIES_VERSION}, found "
                f"{properties.get('version')!r}"
            )
        if properties.get("node.id") != str(self.node_id):
            raise InconsistentMetaPropertiesError(
                f"{path} belongs to node.id {properties.get('node.id')}, but this broker is "
                f"node.id {self.node_id}: the log directory was written by another broker"
            )
        if properties.get("cluster.id") != self.cluster_id:
            raise InconsistentMetaPropertiesError(
                f"{path}: the cluster id {self.cluster_id} doesn't match the stored cluster id "
                f"{properties.get('cluster.id')}; the broker is trying to join the wrong cluster"
            )
        self.directory_ids[directory] = _directory_id(properties.get("directory.id"), directory)

    def _read_topics(self) -> dict[str, TopicInfo]:
        try:
            document = json.loads(self._topics_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except ValueError as error:
            raise CorruptCheckpointError(
                f"{self._topics_path} is not valid JSON: {error}"
            ) from None
        try:
            if document["version"] not in _READABLE_TOPICS_FILE_VERSIONS:
                raise ValueError(f"unknown version {document['version']!r}")
            return {
                entry["name"]: TopicInfo(
                    entry["name"], topic_id_from_str(entry["topic_id"]), dict(entry["configs"])
                )
                for entry in document["topics"]
            }
        except (KeyError, TypeError, ValueError) as error:
            raise CorruptCheckpointError(f"{self._topics_path} is malformed: {error!r}") from None

    def _update_topics(
        self, change: Callable[[dict[str, TopicInfo]], dict[str, TopicInfo]]
    ) -> None:
        """Make ``change(table)`` the topic table, on disk first so that a failed write
        changes nothing; safe in any thread. One
        writer at a time (a lock), each applying its change to the table as the previous
        writer left it, so that a worker thread's change (a LeaderAndIsr's new topics) and
        the owner's (AlterConfigs) never undo each other. The table is replaced, never
        changed in place, so the owner may read it meanwhile."""
        with self._topics_lock:
            self._write_topics(change(self._topics))

    def _write_topics(self, topics: dict[str, TopicInfo]) -> None:
        document = {
            "version": TOPICS_FILE_VERSION,
            "topics": [
                {
                    "name": info.name,
                    "topic_id": topic_id_to_str(info.topic_id),
                    "configs": info.configs,
                }
                for info in sorted(topics.values(), key=lambda info: info.name)
            ],
        }
        write_file_atomically(self._topics_path, (json.dumps(document, indent=2) + "\n").encode())
        self._topics = topics

    def _partition_dirs(self) -> dict[tuple[str, int], Path]:
        """Every `<topic>-<partition>` directory in the log dirs, future replicas left out
        (their moves resume: storage/replica_move.py); two copies is an error."""
        found: dict[tuple[str, int], Path] = {}
        for directory in self.log_dirs:
            for path in directory.iterdir():
                if not _current_dir(path):
                    continue
                try:
                    key = parse_partition_dir_name(path.name)
                except ValueError:
                    continue
                if key in found:
                    raise InconsistentMetaPropertiesError(
                        f"duplicate log directories for {path.name}: {found[key]} and {path}"
                    )
                found[key] = path
        return found

    def _load_logs(self, now_ms: int, clean: dict[Path, bool]) -> None:
        recovery_points = {
            directory: read_offset_checkpoint(directory / RECOVERY_POINT_CHECKPOINT)
            for directory in self.log_dirs
        }
        start_offsets = {
            directory: read_offset_checkpoint(directory / LOG_START_OFFSET_CHECKPOINT)
            for directory in self.log_dirs
        }
        cleaned_to = {
            directory: read_offset_checkpoint(directory / CLEANER_OFFSET_CHECKPOINT)
            for directory in self.log_dirs
        }
        configs = {
            name: LogConfig.from_topic_configs(self.default_config, info.configs)
            for name, info in self._topics.items()
        }
        partition_dirs = sorted(self._partition_dirs().items())
        progress = _LoadProgress(len(partition_dirs), recovering=not all(clean.values()))
        for key, path in partition_dirs:
            progress.next_partition(self._logs)
            info = self._topics.get(key[0])
            if info is None:
                log.warning("ignoring %s: topic %s is not known", path, key[0])
                continue
            if read_partition_metadata(path) not in (None, info.topic_id):
                log.warning("deleting %s: it belongs to an older topic of that name", path)
                shutil.rmtree(path)
                continue
            directory = path.parent
            self._logs[key] = PartitionLog.open(
                path,
                configs[info.name],
                now_ms=now_ms,
                recovery_point=recovery_points[directory].get(key, 0),
                log_start_offset=start_offsets[directory].get(key, 0),
                needs_recovery=not clean[directory],
                failures=self.failures,
            )
            self._logs[key].first_dirty_offset = cleaned_to[directory].get(key)
            self._expire_producers(self._logs[key], now_ms)
            if read_partition_metadata(path) is None:
                write_partition_metadata(path, info.topic_id)
        progress.done(self._logs)

    # -- topics and partitions -------------------------------------------------------------

    def topics(self) -> dict[str, TopicInfo]:
        return dict(self._topics)

    def topic_overrides(self, topic: str) -> dict[str, str]:
        """A hosted topic's own configs (empty for a topic not hosted here), without a copy
        of the table: the hot paths (replication throttles) ask per partition and fetch."""
        info = self._topics.get(topic)
        return info.configs if info is not None else {}

    def hosted(self, topic: str) -> list[int]:
        """The partitions of `topic` whose logs are open here, in order."""
        return sorted(partition for name, partition in self._logs if name == topic)

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def ensure_log(
        self,
        topic: str,
        topic_id: uuid.UUID,
        partition: int,
        configs: dict[str, str],
        *,
        now_ms: int,
    ) -> PartitionLog:
        """The log of a partition the controller assigned to this broker, opened or created
        if need be; calling it again with the same arguments changes nothing.

        The topic is recorded, or its configs updated, durably before its partition
        directory is made, so that a restart knows the configs of every directory. A known
        topic under another id means the controller deleted it and made a new one of that
        name: every partition of the old one here is deleted first. ValueError (naming the
        key) for a bad config, or for a name or index that cannot make a partition
        directory, before anything changes.

        The three steps of `begin_logs` in a row, on the caller's thread.
        """
        creation = self.begin_logs([LogRequest(topic, topic_id, partition, configs)], now_ms)
        creation.run()
        return creation.finish()[0]

    def begin_logs(self, requests: list["LogRequest"], now_ms: int) -> "LogCreation":
        """Many `ensure_log`s at once, in three steps, so that the broker can make the files
        in a worker thread (issue 40; Kafka's LogManager.getOrCreateLog runs on a request
        handler thread, never on a network thread, and one event loop here is both):

        - this call, on the owner of the log manager (the event loop): checks each request
          in order, deletes the partitions of a topic recreated under a new id, and picks
          each new partition's log dir;
        - `LogCreation.run`, in any thread: records new topics and changed configs durably
          in the topic table (one write for them all, before any directory is made), opens
          or makes each partition's directory and files, then fsyncs each log dir that got
          a new directory, once for them all (Kafka fsyncs the parent once per created
          log);
        - `LogCreation.finish`, on the owner again: the logs become the manager's, in the
          requests' order up to the first failure, which is then raised (ValueError for a
          bad request, StorageError for an I/O error, whose log dir goes offline), as a
          loop of `ensure_log` calls would have left them.

        Between `begin_logs` and `finish` the caller must not create or remove logs in
        another way (the broker holds its state-change lock); the new logs are in no
        list the manager's periodic work reads until `finish`, so nothing else touches
        their files meanwhile.
        """
        creation = LogCreation(self, now_ms)
        topics = dict(self._topics)
        changed: dict[str, LogConfig] = {}
        # Linear in the requests (a LeaderAndIsr may name thousands of partitions): each
        # topic's configs parsed once, the log dirs' partition counts taken once.
        parsed: dict[str, tuple[dict[str, str], LogConfig]] = {}
        planned: set[tuple[str, int]] = set()
        counts = {directory: 0 for directory in self.log_dirs}
        for held in [log_.directory for log_ in self._logs.values()] + [
            position.directory for position in self._stopped.values()
        ]:
            counts[held.parent] += 1
        try:
            for request in requests:
                topic, partition = request.topic, request.partition
                if not _LEGAL_TOPIC_NAME.fullmatch(topic):
                    raise ValueError(
                        f"topic name {topic!r} is illegal: it must be 1 to 249 characters of"
                        " ASCII alphanumerics, '.', '_' and '-'"
                    )
                if partition < 0:
                    raise ValueError(f"partition index {partition} of {topic} is negative")
                cached = parsed.get(topic)
                if cached is not None and cached[0] == request.configs:
                    config = cached[1]
                else:
                    config = LogConfig.from_topic_configs(self.default_config, request.configs)
                    parsed[topic] = (request.configs, config)
                info = topics.get(topic)
                if info is not None and info.topic_id != request.topic_id:
                    log.warning(
                        "topic %s was recreated as id %s: deleting the partitions of id %s",
                        topic,
                        topic_id_to_str(request.topic_id),
                        topic_id_to_str(info.topic_id),
                    )
                    # Rare (the controller deletes a topic's replicas first), so on the
                    # owner's thread, durably, before the table names the new id.
                    self._delete_partitions(topic)
                if (
                    info is None
                    or info.topic_id != request.topic_id
                    or info.configs != request.configs
                ):
                    topics[topic] = TopicInfo(topic, request.topic_id, dict(request.configs))
                    changed[topic] = config
                key = (topic, partition)
                if key in self._logs or key in planned:
                    creation.planned.append(_PlannedLog(request, config, None, None))
                    continue
                planned.add(key)
                stopped = self._stopped.get(key)
                if stopped is not None:
                    home = stopped.directory.parent
                else:
                    name = f"{topic}-{partition}"
                    home = (
                        next((d for d in self.log_dirs if _current_dir(d / name)), None)
                        or self.preferred_log_dirs.pop(key, None)
                        or self._next_log_dir(counts)
                    )
                    counts[home] += 1  # the log dir with the fewest partitions, as placed
                reason = self.failures.offline_reason(home)
                if reason is not None:
                    raise StorageError(
                        f"creating the log of {topic}-{partition}: log dir {home} is offline"
                        f" ({reason})"
                    )
                creation.planned.append(_PlannedLog(request, config, home, stopped))
        except (ValueError, StorageError) as error:
            creation.error = error
        if changed:
            reason = self.failures.offline_reason(self.log_dirs[0])
            if reason is not None:
                raise StorageError(
                    f"writing {TOPICS_FILE}: log dir {self.log_dirs[0]} is offline ({reason})"
                )
            creation.topics = {topic: topics[topic] for topic in changed}
            creation.configs = changed
        self._creating = creation
        return creation

    def _open_partition_log(self, item: "_PlannedLog", now_ms: int) -> tuple[PartitionLog, bool]:
        """Reopen the partition's directory if it holds this topic's data, else make one
        (in `item.home`); True with a new directory, whose log dir the caller fsyncs. Runs
        in `LogCreation.run`'s thread: it reads nothing of the manager that the owner
        changes meanwhile."""
        request, config, stopped = item.request, item.config, item.stopped
        if stopped is not None:
            # It was flushed when it stopped, so its files can be trusted.
            reopened = PartitionLog.open(
                stopped.directory,
                config,
                now_ms=now_ms,
                recovery_point=stopped.recovery_point,
                log_start_offset=stopped.log_start_offset or 0,
                needs_recovery=False,
                failures=self.failures,
            )
            reopened.first_dirty_offset = stopped.first_dirty_offset
            return reopened, False
        name = f"{request.topic}-{request.partition}"
        path = next(
            (directory / name for directory in self.log_dirs if _current_dir(directory / name)),
            None,
        )
        if path is not None and read_partition_metadata(path) not in (None, request.topic_id):
            log.warning("deleting %s: it belongs to an older topic of that name", path)
            self._remove_directory(path)
            path = None
        created = path is None
        if path is None:
            assert item.home is not None
            path = item.home / name
            partition_log = PartitionLog.open(
                path, config, now_ms=now_ms, needs_recovery=False, failures=self.failures
            )
        else:
            # Its topic was unknown when the broker started, so the directory was neither
            # recovered then nor checkpointed since: nothing says how much of it is sound.
            log.warning("adopting %s, recovering all of it", path)
            partition_log = PartitionLog.open(
                path, config, now_ms=now_ms, needs_recovery=True, failures=self.failures
            )
        try:
            if read_partition_metadata(path) is None:
                # The file's fsync, its rename and the partition directory's fsync (which
                # also makes the segment files' names durable).
                write_partition_metadata(path, request.topic_id)
        except BaseException:
            partition_log.close()
            raise
        return partition_log, created

    def _next_log_dir(self, counts: dict[Path, int]) -> Path:
        """Kafka's LogManager.nextLogDirs: the live log dir holding the fewest partitions,
        leaving out the cordoned ones (KIP-1066) unless every one is (then the first)."""
        live = self.online_log_dirs() or self.log_dirs
        if len(live) == 1:
            return live[0]
        open_dirs = [d for d in live if d not in self.cordoned_log_dirs]
        if not open_dirs:
            return live[0]
        return min(open_dirs, key=lambda candidate: counts[candidate])

    def set_cordoned(self, entries: tuple[str, ...]) -> None:
        """cordoned.log.dirs' value (checked against log.dirs by the caller): `*` cordons
        every log dir; an entry not among them is ignored."""
        if "*" in entries:
            self.cordoned_log_dirs = frozenset(self.log_dirs)
        else:
            named = set(entries)
            self.cordoned_log_dirs = frozenset(d for d in self.log_dirs if str(d) in named)

    # -- moving a replica between log dirs (AlterReplicaLogDirs) ---------------------------

    def log_dir_named(self, path: str) -> Path | None:
        """The configured log dir whose absolute path is `path`, else None (Kafka's
        LogManager.isLogDirOnline throws LogDirNotFoundException for a path that is not
        the absolute path of a configured log dir)."""
        if not os.path.isabs(path):
            return None
        for directory in self.log_dirs:
            if str(directory.absolute()) == path or str(directory.resolve()) == path:
                return directory
        return None

    def open_future_log(self, current: PartitionLog, target: Path, now_ms: int) -> PartitionLog:
        """Make the future replica of a hosted partition in log dir `target` (any thread:
        it touches only the new directory): marked as a future replica, with the current
        log's config and its topic's id. Kafka's LogManager.getOrCreateLog(isFuture=true).
        OSError takes nothing offline here: the caller reports it against `target`."""
        directory = target / current.directory.name
        mark_future(directory)
        future = PartitionLog.open(
            directory, current.config, now_ms=now_ms, needs_recovery=False, failures=self.failures
        )
        try:
            info = self._topics.get(current.topic)
            if info is not None:
                write_partition_metadata(directory, info.topic_id)
        except BaseException:
            future.close()
            raise
        return future

    def reopen_future_log(
        self, current: PartitionLog, directory: Path, now_ms: int
    ) -> PartitionLog:
        """Open the future replica a stop left in `directory` (any thread), recovered from
        its files as an unclean shutdown's log is (nothing says it was flushed), with the
        current log's config. Kafka's LogManager loads it at start (isFuture)."""
        return PartitionLog.open(
            directory, current.config, now_ms=now_ms, needs_recovery=True, failures=self.failures
        )

    def swap_in_future(self, future: PartitionLog) -> Path:
        """Kafka's LogManager.replaceCurrentWithFutureLog, on the owner, with no pause
        between the caller's last copy and this: the current log's directory is renamed
        `<topic>-<partition>.<id>-delete` (the old files stay readable to reads in flight,
        through descriptors of their own), the current log closed without writing, and
        the future log becomes the partition's log. Returns the renamed directory for
        `finish_future_swap` (any thread). StorageError (its log dir offline) if the rename
        fails: the current log stays."""
        key = (future.topic, future.partition)
        current = self._logs[key]
        deleted = current.directory.with_name(delete_dir_name(current.directory))
        with self.directory_io(current.directory.parent, f"renaming {current.directory}"):
            os.rename(current.directory, deleted)
        current.detach()
        future.config = current.config
        self._logs[key] = future
        return deleted

    @staticmethod
    def finish_future_swap(deleted: Path, future_dir: Path) -> None:
        """The swap's durable steps and the old files' removal (any thread)."""
        finish_swap(deleted, future_dir)

    @staticmethod
    def discard_future_log(future: PartitionLog) -> Path:
        """Close an abandoned future log; its directory is returned for
        `replica_move.discard_future` (any thread)."""
        future.detach()
        return future.directory

    @staticmethod
    def remove_future_dir(directory: Path) -> None:
        discard_future(directory)

    def remove_log(self, topic: str, partition: int, *, delete: bool) -> None:
        """Stop hosting a partition, as Kafka's StopReplica does: close its log and, with
        `delete`, remove its directory. Without, the directory stays for `ensure_log` or a
        restart to reopen. Removing a partition not hosted here does nothing.

        Once `delete` leaves this broker no partition of a topic, open or stopped, the topic
        leaves the table too: the table only caches the configs of partitions held here.
        """
        key = (topic, partition)
        if not delete:
            partition_log = self._logs.pop(key, None)
            if partition_log is not None:
                partition_log.flush()
                partition_log.close()
                self._stopped[key] = _position_of(partition_log)
            return
        delete_directories(self.detach_logs([key]))
        self.forget_topics_without_logs([topic])

    def detach_logs(self, keys: list[tuple[str, int]]) -> list[Path]:
        """The first step of deleting partitions (StopReplica with delete), on the owner:
        each one hosted here, open or stopped, stops being hosted and its log is closed
        without writing; returns their directories for `delete_directories` (in any
        thread: nothing of the manager touches them again), after which
        `forget_topics_without_logs` drops the topics left with no partition here. Kafka's
        asyncDelete renames the directory `-delete` and removes it from a scheduler thread;
        here the caller waits for the removal (it is durable before StopReplica is
        answered), and the same name can be made again only after that."""
        directories = []
        for key in keys:
            partition_log = self._logs.pop(key, None)
            stopped = self._stopped.pop(key, None)
            if partition_log is not None:
                partition_log.detach()
                directories.append(partition_log.directory)
            elif stopped is not None:
                directories.append(stopped.directory)
        return directories

    def forget_topics_without_logs(self, topics: list[str]) -> None:
        """Drop from the topic table the given topics that have no partition here, open or
        stopped (after `delete_directories` removed their last ones)."""
        self.forget_topics(self.topics_without_logs(topics))

    def topics_without_logs(self, topics: list[str]) -> set[str]:
        """Those of `topics` in the table that have no partition here, open or stopped."""
        hosted = {name for name, _ in (*self._logs, *self._stopped)}
        return {topic for topic in topics if topic in self._topics and topic not in hosted}

    def forget_topics(self, gone: set[str]) -> None:
        """Drop topics from the topic table (safe in any thread, see `_update_topics`)."""
        if gone:
            self._update_topics(
                lambda current: {name: info for name, info in current.items() if name not in gone}
            )

    def update_topic_configs(self, topic: str, configs: dict[str, str]) -> bool:
        """A known topic's new overrides, recorded durably and applied to its open logs at
        once (retention, segment size, max.message.bytes, ... take effect on the next
        append or retention pass). False for a topic not hosted here, which the controller
        describes when a replica of it is created. ValueError (naming the key) for a bad
        config, before anything changes.

        A topic that a LogCreation is writing to the table right now (in a worker thread)
        gets the configs when the creation finishes: written now, they could be overwritten
        by the creation's older ones."""
        creating = self._creating
        if creating is not None and topic in creating.topics:
            LogConfig.from_topic_configs(self.default_config, configs)  # ValueError if bad
            creating.late_configs[topic] = dict(configs)
            return True
        info = self._topics.get(topic)
        if info is None:
            return False
        if info.configs == configs:
            return True  # a broker hears every topic's configs at each registration
        config = LogConfig.from_topic_configs(self.default_config, configs)
        changed = TopicInfo(topic, info.topic_id, dict(configs))
        self._update_topics(lambda current: {**current, topic: changed})
        self._apply_config(topic, config)
        return True

    def set_default_config(self, default_config: LogConfig) -> None:
        """New topic defaults (dynamic broker configs): every log without its own override
        of a setting takes the new value at once."""
        self.default_config = default_config
        configs = {
            info.name: LogConfig.from_topic_configs(default_config, info.configs)
            for info in self._topics.values()
        }
        for (name, _), partition_log in self._logs.items():
            partition_log.config = configs[name]

    def _apply_config(self, topic: str, config: LogConfig) -> None:
        for (name, _), partition_log in self._logs.items():
            if name == topic:
                partition_log.config = config

    def _delete_partitions(self, topic: str) -> None:
        for key in [key for key in (*self._logs, *self._stopped) if key[0] == topic]:
            self._delete_partition(key)

    def _delete_partition(self, key: tuple[str, int]) -> None:
        """Close a partition's log and delete its directory, if it is here, open or stopped."""
        delete_directories(self.detach_logs([key]))

    @staticmethod
    def _remove_directory(path: Path) -> None:
        """Delete a partition directory durably: one back from the dead after a crash would
        be hosted again, or clash with its replacement in another log dir."""
        delete_directories([path])

    # -- periodic work ---------------------------------------------------------------------

    def flush_due(self, now_ms: int) -> None:
        """Flush logs per flush.messages/flush.ms and fsync segments rolled since last time."""
        self.finish_flushes(run_flush_jobs(self.begin_flushes(now_ms)))

    def begin_flushes(self, now_ms: int) -> list[tuple[PartitionLog, FlushJob]]:
        """`flush_due` in three steps, for the broker to fsync in a worker thread: this one
        on the owner (PartitionLog.begin_flush_if_due of every live log), then
        `run_flush_jobs` in any thread, then `finish_flushes` on the owner. A log whose
        first step fails (its dir goes offline) is left out."""
        jobs = []
        for partition_log in self._live_logs():
            try:
                job = partition_log.begin_flush_if_due(now_ms)
            except StorageError as error:
                log.error("%s", error)
                continue
            if job is not None:
                jobs.append((partition_log, job))
        return jobs

    def finish_flushes(self, jobs: list[tuple[PartitionLog, FlushJob]]) -> None:
        """Move each flushed log's recovery point (a failed job takes its dir offline)."""
        for partition_log, job in jobs:
            try:
                partition_log.finish_flush(job)
            except StorageError as error:
                log.error("%s", error)

    def checkpoint(self, now_ms: int) -> None:
        """Write the recovery-point and log-start-offset checkpoints of every log dir.

        Due flushes (rolled segments included) run first, so that the recovery points
        written are as far along as they can be.
        """
        self.flush_due(now_ms)
        self._write_checkpoints()

    def _write_checkpoints(self) -> None:
        self.finish_checkpoints(self.write_checkpoint_files(self.checkpoint_positions()))

    def checkpoint_positions(self) -> dict[Path, dict[tuple[str, int], "_LogPosition"]]:
        """What the offset checkpoints of each online log dir will say, taken now on the
        owner (each log's recovery point counts only what a finished flush fsynced), for
        `write_checkpoint_files` in any thread."""
        positions = {key: _position_of(partition_log) for key, partition_log in self._logs.items()}
        positions.update(self._stopped)
        return {
            directory: {
                key: position
                for key, position in positions.items()
                if position.directory.parent == directory
            }
            for directory in self.online_log_dirs()
        }

    def write_checkpoint_files(
        self, positions: dict[Path, dict[tuple[str, int], "_LogPosition"]]
    ) -> dict[Path, OSError]:
        """Write the offset checkpoint files of each log dir; safe in any thread (one
        writer at a time: a lock). Returns the log dirs whose write failed, for
        `finish_checkpoints` on the owner. Kafka writes them from its scheduler thread
        (LogManager.checkpointLogRecoveryOffsets)."""
        failed: dict[Path, OSError] = {}
        with self._checkpoint_lock:
            for directory, here in positions.items():
                try:
                    self._write_dir_checkpoints(directory, here)
                except OSError as error:
                    failed[directory] = error
        return failed

    def finish_checkpoints(self, failed: dict[Path, OSError]) -> None:
        """Take offline the log dirs whose checkpoints could not be written; StorageError
        for the first, as `directory_io` raises it."""
        first: StorageError | None = None
        for directory, error in failed.items():
            what = "writing the offset checkpoints"
            self.failures.maybe_add_offline_log_dir(directory, f"Error while {what}", error)
            first = first or StorageError(
                f"{what} failed ({error}); log dir {directory} is offline"
            )
        if first is not None:
            raise first

    @staticmethod
    def _write_dir_checkpoints(
        directory: Path, here: dict[tuple[str, int], "_LogPosition"]
    ) -> None:
        write_offset_checkpoint(
            directory / RECOVERY_POINT_CHECKPOINT,
            {key: position.recovery_point for key, position in here.items()},
        )
        write_offset_checkpoint(
            directory / CLEANER_OFFSET_CHECKPOINT,
            {
                key: position.first_dirty_offset
                for key, position in here.items()
                if position.first_dirty_offset is not None
            },
        )
        write_offset_checkpoint(
            directory / LOG_START_OFFSET_CHECKPOINT,
            {
                key: position.log_start_offset
                for key, position in here.items()
                if position.log_start_offset is not None
            },
        )

    def write_cleaner_checkpoints(self) -> None:
        """Write every checkpoint file now (the log cleaner calls this after each cleaning,
        as Kafka updates cleaner-offset-checkpoint then)."""
        self._write_checkpoints()

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget the expired producers of every log (Kafka's UnifiedLog
        .removeExpiredProducers, run every producer.id.expiration.check.interval.ms; the rule
        is ProducerStateManager.remove_expired's); returns how many were forgotten."""
        return sum(
            self._expire_producers(partition_log, now_ms) for partition_log in self._live_logs()
        )

    def _expire_producers(self, partition_log: PartitionLog, now_ms: int) -> int:
        """Also run on every log as it is loaded, so that producers a snapshot or the replayed
        batches bring back are gone at once if already expired (Kafka filters a snapshot's
        entries as it loads them, and the batches replayed after it at the next check)."""
        if self.producer_id_expiration_ms is None:
            return 0
        expired = partition_log.producer_state.remove_expired(
            now_ms, self.producer_id_expiration_ms
        )
        if expired:
            log.debug("%s: producer ids %s expired", partition_log.name, expired)
        return len(expired)

    def run_retention(
        self,
        now_ms: int,
        high_watermarks: dict[tuple[str, int], int] | None = None,
        *,
        defer_unlink: bool = False,
    ) -> int:
        """Apply retention to every log; returns how many segments were deleted.

        With replication only what is below a partition's high watermark may go, as in Kafka:
        the broker passes its high watermarks (a log without one is bounded by its end).
        With `defer_unlink` the deleted segments' files are renamed `.deleted` and left for
        `take_deleted_files` (PartitionLog.delete_segments_by_retention).
        """
        high_watermarks = high_watermarks or {}
        return sum(
            partition_log.delete_segments_by_retention(
                now_ms, high_watermark=high_watermarks.get(key), defer_unlink=defer_unlink
            )
            for key, partition_log in self._logs.items()
            if not self.failures.is_offline(partition_log.directory.parent)
        )

    def take_deleted_files(self) -> list[Path]:
        """The `.deleted` files that `run_retention(..., defer_unlink=True)` left, for
        `unlink_files` (in any thread)."""
        return [path for log_ in self._logs.values() for path in log_.take_deleted_files()]

    # -- shutdown --------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and close every log, write the checkpoints and the clean-shutdown marker,
        and release the locks. Safe to call twice.

        A log dir that failed gets none of that: its files are neither flushed nor marked
        clean, so the next start recovers them (Kafka closes only the live dirs' logs)."""
        if not self._lock_fds:
            return
        for partition_log in self._logs.values():
            if self.failures.is_offline(partition_log.directory.parent):
                continue
            partition_log.flush()
            partition_log.close()
        self._write_checkpoints()
        marker = json.dumps(
            {"version": 0, "brokerEpoch": self.broker_epoch}, separators=(",", ":")
        ).encode()
        for directory in self.online_log_dirs():
            write_file_atomically(directory / CLEAN_SHUTDOWN_FILE, marker)
        self._logs.clear()
        self._stopped.clear()
        self._release_locks()
