"""The replicas this broker holds, and the operations handlers run on them.

Until replication arrives every partition has one replica, this broker, which leads it at
leader epoch 0; its high watermark is therefore its log end offset. Handlers never touch
storage directly: they ask the replica manager, which owns the log manager, wakes parked
fetches on append and keeps the topic table.
"""

import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from protocol.errors import Error
from storage.log import LogConfig, PartitionLog
from storage.log_manager import LogManager, TopicInfo
from storage.producer_ids import ProducerIdAllocator

from .config import BrokerConfig
from .purgatory import Watchers

log = logging.getLogger("replicas")

_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def topic_name_error(name: str | None) -> str | None:
    """Why Kafka would refuse this topic name, or None when it is legal."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return "topic name cannot be '.' or '..'"
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        return (
            f"topic name {name!r} is illegal: it must be 1 to 249 characters of "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


class TopicError(Exception):
    """A topic operation failed with a Kafka error code and a message for the client."""

    def __init__(self, error: Error, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass
class Partition:
    """One replica of one partition, as this broker sees it."""

    topic: TopicInfo
    index: int
    log: PartitionLog
    leader_epoch: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic.name, self.index)

    @property
    def high_watermark(self) -> int:
        """With a single replica, everything appended is replicated: HW = LEO."""
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """No transactions are supported, so nothing is ever unstable: LSO = HW."""
        return self.high_watermark


class ReplicaManager:
    """Topics, partitions and their logs on this broker."""

    def __init__(
        self,
        config: BrokerConfig,
        log_manager: LogManager,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self.log_manager = log_manager
        self.clock_ms = clock_ms
        self.appended = Watchers()
        self.producer_ids = ProducerIdAllocator(config.log_dirs[0])
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._topics_by_id: dict[uuid.UUID, TopicInfo] = {}
        for info in log_manager.topics().values():
            self._add_topic(info)

    def _add_topic(self, info: TopicInfo) -> None:
        self._topics_by_id[info.topic_id] = info
        for index in range(info.num_partitions):
            partition_log = self.log_manager.get_log(info.name, index)
            assert partition_log is not None, f"{info.name}-{index} has no log"
            self._partitions[(info.name, index)] = Partition(info, index, partition_log)

    def topics(self) -> dict[str, TopicInfo]:
        return self.log_manager.topics()

    def topic(self, name: str) -> TopicInfo | None:
        return self.log_manager.topics().get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._topics_by_id.get(topic_id)

    def partition(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        validate_only: bool = False,
    ) -> TopicInfo | None:
        """Create a topic as CreateTopics does; raises TopicError with Kafka's code."""
        if (problem := topic_name_error(name)) is not None:
            raise TopicError(Error.INVALID_TOPIC_EXCEPTION, problem)
        if self.topic(name) is not None:
            raise TopicError(Error.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if num_partitions == -1:
            num_partitions = self.config.num_partitions
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
        if num_partitions <= 0:
            raise TopicError(
                Error.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            )
        if replication_factor <= 0:
            raise TopicError(
                Error.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
            )
        if replication_factor > 1:
            raise TopicError(
                Error.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {replication_factor} larger than available brokers: 1.",
            )
        try:
            LogConfig.from_topic_configs(self.default_log_config(), configs)
        except ValueError as error:
            raise TopicError(Error.INVALID_CONFIG, str(error)) from None
        if validate_only:
            return None
        info = self.log_manager.create_topic(name, num_partitions, configs, now_ms=self.clock_ms())
        self._add_topic(info)
        log.info("created topic %s with %d partition(s) %s", name, num_partitions, configs or "")
        return info

    def auto_create_topic(self, name: str) -> TopicInfo | None:
        """Create a topic with the broker defaults if auto.create.topics.enable allows it."""
        if not self.config.auto_create_topics_enable:
            return None
        try:
            return self.create_topic(name, -1, -1, {})
        except TopicError as error:
            if error.error == Error.TOPIC_ALREADY_EXISTS:
                return self.topic(name)
            raise

    def delete_topic(self, name: str) -> None:
        info = self.topic(name)
        if info is None:
            raise TopicError(
                Error.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
            )
        for index in range(info.num_partitions):
            partition = self._partitions.pop((name, index), None)
            if partition is not None:
                self.appended.notify(partition.key)
        self._topics_by_id.pop(info.topic_id, None)
        self.log_manager.delete_topic(name)
        log.info("deleted topic %s", name)

    def default_log_config(self) -> LogConfig:
        """The topic-level defaults that the broker's log.* properties set."""
        return self.log_manager.default_config

    def append(self, partition: Partition, records: bytes):
        """Append a producer's batches as leader and wake the fetches parked on it.

        Raises StorageError (with its Kafka error code) when the batches are refused; nothing
        of a refused request is appended.
        """
        result = partition.log.append_as_leader(
            records, leader_epoch=partition.leader_epoch, now_ms=self.clock_ms()
        )
        if not result.duplicate:
            self.appended.notify(partition.key)
        return result
