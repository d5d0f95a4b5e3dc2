"""The broker's log directories: locking, meta.properties, loading and recovering every
partition log, the topic table, checkpoints, retention and flushing, and clean shutdown.

On disk this follows Kafka: each log dir holds a `.lock` (held with an exclusive flock while
the broker runs), `meta.properties`, `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint`, `.kafka_cleanshutdown` after a clean stop, and one
`<topic>-<partition>` directory per partition with its `partition.metadata`.

Where this departs from Kafka: a Kafka broker learns its topics (ids, partition counts,
configs) from the controller's metadata log; until replication arrives there is no
controller here, so the topic table is kept in `<first log dir>/minibroker-topics.json`,
replaced atomically on every change. It is the authority on which topics exist: a partition
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
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .checkpoint import (
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
from .errors import (
    CorruptCheckpointError,
    InconsistentMetaPropertiesError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogDirLockedError,
    TopicExistsError,
    UnknownTopicError,
)
from .log import LogConfig, PartitionLog, parse_partition_dir_name

log = logging.getLogger("storage.log_manager")

LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
TOPICS_FILE = "minibroker-topics.json"
META_PROPERTIES_VERSION = "1"
TOPICS_FILE_VERSION = 1

_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
# Kafka reserves these two ids (Uuid.ZERO_UUID and Uuid.METADATA_TOPIC_ID).
_RESERVED_TOPIC_IDS = (uuid.UUID(int=0), uuid.UUID(int=1))


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)


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


class LogManager:
    """All partition logs of this broker, across its log directories."""

    def __init__(
        self,
        log_dirs: list[Path],
        default_config: LogConfig,
        *,
        node_id: int,
        cluster_id: str,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is needed")
        self.log_dirs = [Path(directory) for directory in log_dirs]
        self.default_config = default_config
        self.node_id = node_id
        self.cluster_id = cluster_id
        # True when every log dir held a clean-shutdown marker at open (no recovery needed).
        self.had_clean_shutdown = False
        self._lock_fds: dict[Path, int] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}

    @property
    def _topics_path(self) -> Path:
        return self.log_dirs[0] / TOPICS_FILE

    # -- startup ---------------------------------------------------------------------------

    def open(self, now_ms: int) -> None:
        """Lock and load every log dir; LogDirLockedError if another process holds one."""
        try:
            for directory in self.log_dirs:
                directory.mkdir(parents=True, exist_ok=True)
                self._lock(directory)
                self._check_meta_properties(directory)
            self._topics = self._read_topics()
            clean = {
                directory: (directory / CLEAN_SHUTDOWN_FILE).exists() for directory in self.log_dirs
            }
            self.had_clean_shutdown = all(clean.values())
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
            text = (
                "#\n"
                "#Written by minibroker\n"
                f"cluster.id={self.cluster_id}\n"
                f"directory.id={topic_id_to_str(new_topic_id())}\n"
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
            if document["version"] != TOPICS_FILE_VERSION:
                raise ValueError(f"unknown version {document['version']!r}")
            return {
                entry["name"]: TopicInfo(
                    entry["name"],
                    topic_id_from_str(entry["topic_id"]),
                    int(entry["num_partitions"]),
                    dict(entry["configs"]),
                )
                for entry in document["topics"]
            }
        except (KeyError, TypeError, ValueError) as error:
            raise CorruptCheckpointError(f"{self._topics_path} is malformed: {error!r}") from None

    def _write_topics(self) -> None:
        document = {
            "version": TOPICS_FILE_VERSION,
            "topics": [
                {
                    "name": info.name,
                    "topic_id": topic_id_to_str(info.topic_id),
                    "num_partitions": info.num_partitions,
                    "configs": info.configs,
                }
                for info in sorted(self._topics.values(), key=lambda info: info.name)
            ],
        }
        write_file_atomically(self._topics_path, (json.dumps(document, indent=2) + "\n").encode())

    def _partition_dirs(self) -> dict[tuple[str, int], Path]:
        """Every `<topic>-<partition>` directory in the log dirs; two copies is an error."""
        found: dict[tuple[str, int], Path] = {}
        for directory in self.log_dirs:
            for path in directory.iterdir():
                if not path.is_dir():
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

    def _place_partition(self, topic: str, partition: int) -> Path:
        """Where a new partition goes: the log dir with the fewest partitions."""
        counts = {directory: 0 for directory in self.log_dirs}
        for partition_log in self._logs.values():
            counts[partition_log.directory.parent] += 1
        directory = min(self.log_dirs, key=lambda candidate: counts[candidate])
        return directory / f"{topic}-{partition}"

    def _load_logs(self, now_ms: int, clean: dict[Path, bool]) -> None:
        recovery_points = {
            directory: read_offset_checkpoint(directory / RECOVERY_POINT_CHECKPOINT)
            for directory in self.log_dirs
        }
        start_offsets = {
            directory: read_offset_checkpoint(directory / LOG_START_OFFSET_CHECKPOINT)
            for directory in self.log_dirs
        }
        existing = self._partition_dirs()
        for info in self._topics.values():
            config = LogConfig.from_topic_configs(self.default_config, info.configs)
            for partition in range(info.num_partitions):
                key = (info.name, partition)
                path = existing.get(key)
                if path is not None and read_partition_metadata(path) not in (None, info.topic_id):
                    log.warning("deleting %s: it belongs to an older topic of that name", path)
                    shutil.rmtree(path)
                    path = None
                if path is None:
                    log.warning("creating the missing directory of partition %s-%d", *key)
                    self._logs[key] = self._create_partition_log(info, partition, config, now_ms)
                    continue
                directory = path.parent
                self._logs[key] = PartitionLog.open(
                    path,
                    config,
                    now_ms=now_ms,
                    recovery_point=recovery_points[directory].get(key, 0),
                    log_start_offset=start_offsets[directory].get(key, 0),
                    needs_recovery=not clean[directory],
                )
                if read_partition_metadata(path) is None:
                    write_partition_metadata(path, info.topic_id)
        for key, path in existing.items():
            if key[0] not in self._topics:
                log.warning("ignoring %s: topic %s is not known", path, key[0])

    def _create_partition_log(
        self, info: TopicInfo, partition: int, config: LogConfig, now_ms: int
    ) -> PartitionLog:
        path = self._place_partition(info.name, partition)
        partition_log = PartitionLog.open(path, config, now_ms=now_ms, needs_recovery=False)
        write_partition_metadata(path, info.topic_id)
        return partition_log

    # -- topics ----------------------------------------------------------------------------

    def topics(self) -> dict[str, TopicInfo]:
        return dict(self._topics)

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        configs: dict[str, str],
        topic_id: uuid.UUID | None = None,
        *,
        now_ms: int,
    ) -> TopicInfo:
        """Record the topic durably, then create its partition logs.

        ValueError (naming the key) for a bad config; InvalidTopicError, TopicExistsError
        and InvalidPartitionsError carry their Kafka error codes.
        """
        if name in (".", "..") or not _LEGAL_TOPIC_NAME.fullmatch(name):
            raise InvalidTopicError(
                f"Topic name {name!r} is illegal: it must be 1 to 249 characters of ASCII "
                "alphanumerics, '.', '_' and '-', and not '.' or '..'"
            )
        if name in self._topics:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        if num_partitions < 1:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        config = LogConfig.from_topic_configs(self.default_config, configs)
        info = TopicInfo(name, topic_id or new_topic_id(), num_partitions, dict(configs))
        self._topics[name] = info
        try:
            self._write_topics()
        except BaseException:
            del self._topics[name]
            raise
        leftovers = self._partition_dirs()
        for partition in range(num_partitions):
            if (name, partition) in leftovers:
                shutil.rmtree(leftovers[name, partition])
            self._logs[name, partition] = self._create_partition_log(
                info, partition, config, now_ms
            )
        return info

    def update_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        """Replace a topic's configs (validated first) and apply them to its open logs."""
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        config = LogConfig.from_topic_configs(self.default_config, configs)
        updated = TopicInfo(info.name, info.topic_id, info.num_partitions, dict(configs))
        self._topics[name] = updated
        self._write_topics()
        for partition in range(info.num_partitions):
            self._logs[name, partition].config = config
        return updated

    def delete_topic(self, name: str) -> None:
        """Forget the topic durably, then delete its partition directories."""
        info = self._topics.pop(name, None)
        if info is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        self._write_topics()
        for partition in range(info.num_partitions):
            partition_log = self._logs.pop((name, partition), None)
            if partition_log is not None:
                partition_log.delete()

    # -- periodic work ---------------------------------------------------------------------

    def flush_due(self, now_ms: int) -> None:
        """Flush logs per flush.messages/flush.ms and fsync segments rolled since last time."""
        for partition_log in self._logs.values():
            partition_log.flush_if_due(now_ms)

    def checkpoint(self, now_ms: int) -> None:
        """Write the recovery-point and log-start-offset checkpoints of every log dir.

        Due flushes (rolled segments included) run first, so that the recovery points
        written are as far along as they can be.
        """
        self.flush_due(now_ms)
        self._write_checkpoints()

    def _write_checkpoints(self) -> None:
        for directory in self.log_dirs:
            logs = {
                key: partition_log
                for key, partition_log in self._logs.items()
                if partition_log.directory.parent == directory
            }
            write_offset_checkpoint(
                directory / RECOVERY_POINT_CHECKPOINT,
                {key: partition_log.recovery_point for key, partition_log in logs.items()},
            )
            # As Kafka does, only logs whose start moved past their first segment are listed.
            write_offset_checkpoint(
                directory / LOG_START_OFFSET_CHECKPOINT,
                {
                    key: partition_log.log_start_offset
                    for key, partition_log in logs.items()
                    if partition_log.log_start_offset > partition_log.segments[0].base_offset
                },
            )

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log; returns how many segments were deleted."""
        return sum(
            partition_log.delete_segments_by_retention(now_ms)
            for partition_log in self._logs.values()
        )

    # -- shutdown --------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and close every log, write the checkpoints and the clean-shutdown marker,
        and release the locks. Safe to call twice."""
        if not self._lock_fds:
            return
        for partition_log in self._logs.values():
            partition_log.flush()
            partition_log.close()
        self._write_checkpoints()
        for directory in self.log_dirs:
            write_file_atomically(directory / CLEAN_SHUTDOWN_FILE, b"")
        self._logs.clear()
        self._release_locks()
