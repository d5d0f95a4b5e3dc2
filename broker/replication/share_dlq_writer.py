"""The dead-letter queue writer of share groups (KIP-1191): the thin trio part.

Kafka's ``ShareGroupDLQStateManager`` (kafka-server, ``org.apache.kafka.server.share.dlq``):
a partition leader hands it the records a share partition archived (REJECTed, or at
``share.delivery.count.limit``) and it writes them to the group's DLQ topic, off the
request's path. The rules (which topic, its checks, the headers, the partition, the retries)
are the pure replication/share_dlq.py; this module queues, creates, reads and appends:

- ``enqueue`` never waits: the share partition manager calls it once the archive decision
  is persisted, and the acknowledgement is answered without waiting for the DLQ;
- each queued job (one share partition's dead letters of one change) runs in its own task:
  it checks the DLQ topic, creates it through the controller if it is missing and the
  broker allows it, reads the original records when the group copies them (the only time a
  record is decoded here, because the group asked), and appends one batch to the DLQ
  partition: through the replica manager's one append path (``append_records``, acks=-1)
  when this broker leads it, else as a Produce (acks=-1) to its leader over the
  inter-broker listener, as Kafka's sender thread does;
- a failed attempt (not the leader, no metadata yet, a connection lost, a timeout, a refused
  append) is retried with Kafka's backoff up to 5 attempts; a DLQ that cannot be used (the
  checks of ``validate_dlq_topic``) is not retried. Either way the failure is logged at
  ERROR and counted (``kafka_server_sharegroupmetrics_deadletterqueuefailedproducerequests``),
  and the records go to ARCHIVED all the same: a DLQ write never undoes the archive and never
  holds the share partition's lock while it runs.

Departures, and why: none in what happens to the records: the share partition persists them
ARCHIVING before the job is queued and the job's ``done`` moves them to ARCHIVED once the write
succeeded or was given up, so a leader that dies in between leaves ARCHIVING for the next one
to write again (at least once, as Kafka 4.4). One batch per
job (Kafka splits a round at the DLQ topic's max.message.bytes): a job larger than that fails
as a whole. The DLQ topic's configs are this broker's when it hosts a replica (or the controller
announced them), else asked of the controller at each write (a DescribeConfigs; Kafka's
brokers have every topic's configs in their metadata image).
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from minibroker.cluster.controller_client import ControllerUnavailable, build_request
from minibroker.cluster.node_connection import CONNECTION_ERRORS, BrokerConnections
from minibroker.common.features import SHARE_VERSION
from minibroker.protocol.errors import Error
from minibroker.protocol.produce_request import PartitionProduceData
from minibroker.protocol.record_batch import HEADER_SIZE, read_header
from minibroker.protocol.records import Record, RecordError, decode_records, encode_batch
from minibroker.protocol.versions import ApiKey
from minibroker.replication.share_dlq import (
    MAX_ATTEMPTS,
    backoff_ms,
    created_topic_configs,
    dlq_partition,
    dlq_records,
    group_dlq,
    topic_enabled,
    validate_dlq_topic,
)
from minibroker.replication.share_partition import DeadLetter
from minibroker.security.listeners import client_security

if TYPE_CHECKING:
    from minibroker.common.config import BrokerConfig
    from minibroker.replication.replica_manager import ReplicaManager

log = logging.getLogger("share-dlq")

# create_topics(request) -> the topic's error (the node wires it to the controller).
CreateTopics = Callable[[object], Awaitable[Error]]
# topic_configs(name) -> the topic's overrides as the controller has them, None for no topic.
TopicConfigs = Callable[[str], Awaitable["dict[str, str] | None"]]

REQUEST_TIMEOUT_S = 30.0
READ_BYTES = 1024 * 1024  # Kafka's DLQ_MAX_FETCH_BYTES
METADATA_WAIT_S = 5.0


@dataclass(frozen=True)
class DlqJob:
    """One share partition's dead letters from one change."""

    group: str
    topic: str
    topic_id: uuid.UUID | None
    partition: int
    letters: tuple[DeadLetter, ...]
    # Called once the write is done or given up for good (not when cancelled): the share
    # partition moves the records from ARCHIVING to ARCHIVED.
    done: Callable[[], Awaitable[None]] | None = None


@dataclass(frozen=True)
class _Failed:
    message: str
    retriable: bool


class ShareDlqWriter:
    """Writes share groups' dead letters to their DLQ topics (see the module)."""

    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        *,
        create_topics: CreateTopics | None = None,
        topic_configs: TopicConfigs | None = None,
    ) -> None:
        self.config = config
        self.replicas = replicas
        self.create_topics = create_topics
        self.topic_configs = topic_configs
        self._send, self._receive = trio.open_memory_channel[DlqJob](math.inf)
        # Produce requests to DLQ partitions led by other brokers, on the inter-broker
        # listener (Kafka's DLQ sender thread's NetworkClient).
        listener = config.inter_broker_listener.name if config.is_broker else None
        self._connections = BrokerConnections(
            lambda broker_id: replicas.metadata.brokers.get(broker_id),
            f"share-dlq-{config.node_id}",
            client_security(config, listener) if listener is not None else None,
            connect=replicas.connect,
            timeout_s=REQUEST_TIMEOUT_S + 5,
        )
        # Counters, also on /metrics (by group) through the broker's metrics.
        self.records_written = 0
        self.requests = 0
        self.failed_requests = 0
        self.pending = 0

    # -- the share partition manager's side ---------------------------------------------

    def enabled_for(self, group: str) -> bool:
        """Whether ``group`` has a DLQ (share.version >= 2 and a DLQ topic name)."""
        return self._group_dlq(group) is not None

    def enqueue(
        self,
        group: str,
        topic: str,
        topic_id: uuid.UUID | None,
        partition: int,
        letters: Sequence[DeadLetter],
        done: Callable[[], Awaitable[None]] | None = None,
    ) -> bool:
        """Queue ``letters`` for ``group``'s DLQ, without waiting; False (nothing queued)
        when the group has no DLQ or there is nothing to write. ``done`` is awaited once the
        write succeeded or was given up."""
        if not letters or not self.enabled_for(group):
            return False
        self.pending += 1
        self._send.send_nowait(DlqJob(group, topic, topic_id, partition, tuple(letters), done))
        return True

    # -- lifecycle ----------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as jobs:
                task_status.started()
                async for job in self._receive:
                    jobs.start_soon(self._deliver, job)
        finally:
            with trio.CancelScope(shield=True):
                await self._connections.aclose()

    async def _deliver(self, job: DlqJob) -> None:
        """The job's write, then its ``done`` (Kafka's whenComplete of the DLQ future: the
        records go to ARCHIVED whether the write succeeded or failed for good)."""
        try:
            await self._write(job)
            if job.done is not None:
                try:
                    await job.done()
                except Exception:
                    log.exception("share group %s: ARCHIVED after the DLQ write", job.group)
        finally:
            self.pending -= 1

    async def _write(self, job: DlqJob) -> None:
        """Attempts with Kafka's backoff; the outcome is logged and counted, never raised."""
        metrics = self.replicas.metrics
        failure: _Failed | None = None
        for attempt in range(1, MAX_ATTEMPTS + 1):
            self.requests += 1
            metrics.child(metrics.dlq_produce_requests, job.group).inc()
            try:
                failure = await self._attempt(job)
            except (*CONNECTION_ERRORS, trio.TooSlowError, ControllerUnavailable) as problem:
                failure = _Failed(f"{type(problem).__name__}: {problem}", True)
            if failure is None:
                self.records_written += len(job.letters)
                metrics.child(metrics.dlq_records, job.group).inc(len(job.letters))
                log.info(
                    "share group %s: %d records of %s-%d written to its DLQ",
                    job.group,
                    len(job.letters),
                    job.topic,
                    job.partition,
                )
                return
            self.failed_requests += 1
            metrics.child(metrics.dlq_failed_produce_requests, job.group).inc()
            if not failure.retriable or attempt == MAX_ATTEMPTS:
                break
            log.info(
                "share group %s: DLQ write attempt %d failed (%s), retrying",
                job.group,
                attempt,
                failure.message,
            )
            await trio.sleep(backoff_ms(attempt) / 1000)
        assert failure is not None
        log.error(
            "share group %s: failed to write offsets %s of %s-%d to DLQ, proceeding to "
            "ARCHIVED regardless: %s",
            job.group,
            [letter.offset for letter in job.letters],
            job.topic,
            job.partition,
            failure.message,
        )

    # -- one attempt --------------------------------------------------------------------

    def _group_dlq(self, group: str):
        level = self.replicas.finalized_features.levels.get(SHARE_VERSION, 0)
        return group_dlq(self.replicas.group_configs.get(group, {}), level)

    async def _topic_configs(self, topic: str) -> dict[str, str] | None:
        """The DLQ topic's overrides: this broker's own (it hosts a replica, or the
        controller announced them), else the controller's (as DescribeConfigs asks it)."""
        info = self.replicas.log_manager.topics().get(topic)
        if info is not None:
            return dict(info.configs)
        announced = self.replicas.announced_topic_configs.get(topic)
        if announced is not None or self.topic_configs is None:
            return announced
        return await self.topic_configs(topic)

    async def _attempt(self, job: DlqJob) -> _Failed | None:
        dlq = self._group_dlq(job.group)
        if dlq is None:
            return _Failed(f"DLQ topic is not configured for share group {job.group}.", False)
        metadata = self.replicas.metadata.topic(dlq.topic)
        configs = await self._topic_configs(dlq.topic) if metadata is not None else None
        problem = validate_dlq_topic(
            job.group,
            dlq.topic,
            exists=metadata is not None,
            enabled_on_topic=topic_enabled(configs),
            auto_create=self.config.errors_deadletterqueue_auto_create_topics_enable,
            prefix=self.config.errors_deadletterqueue_topic_name_prefix,
        )
        if problem is not None:
            return _Failed(problem, False)
        if metadata is None:
            failed = await self._create(dlq.topic)
            if failed is not None:
                return failed
            metadata = self.replicas.metadata.topic(dlq.topic)
            if metadata is None:
                return _Failed(f"DLQ topic {dlq.topic} created, no metadata yet", True)
        if not metadata.partitions:
            return _Failed(f"DLQ topic {dlq.topic} has no partitions known yet", True)
        index = dlq_partition(job.partition, len(metadata.partitions))
        state = metadata.partitions.get(index)
        if state is None or state.leader < 0:
            return _Failed(f"DLQ partition {dlq.topic}-{index} has no leader", True)
        originals = self._originals(job) if dlq.copy_record else {}
        records = dlq_records(
            job.group, job.topic, job.partition, job.letters, originals, self.replicas.clock_ms()
        )
        batch = encode_batch(records)
        if state.leader == self.config.node_id:
            error = await self._append_here(dlq.topic, index, batch)
        else:
            error = await self._produce_to(state.leader, dlq.topic, index, batch)
        if error is Error.NONE:
            return None
        retriable = error in _RETRIABLE
        return _Failed(f"append to {dlq.topic}-{index}: {error.name}", retriable)

    async def _create(self, topic: str) -> _Failed | None:
        """Create the DLQ topic as Kafka's createTopicBuilder does, then wait briefly for
        its metadata."""
        if self.create_topics is None:
            return _Failed(f"cannot create DLQ topic {topic} here", False)
        request = build_request(
            ApiKey.CREATE_TOPICS,
            {
                "topics": [
                    {
                        "name": topic,
                        "num_partitions": -1,
                        "replication_factor": -1,
                        "assignments": (),
                        "configs": [
                            {"name": k, "value": v} for k, v in created_topic_configs().items()
                        ],
                    }
                ],
                "timeout": 30_000,
                "validate_only": False,
            },
        )
        error = await self.create_topics(request)
        if error not in (Error.NONE, Error.TOPIC_ALREADY_EXISTS):
            return _Failed(f"create DLQ topic {topic}: {error.name}", error in _RETRIABLE)
        log.info("created DLQ topic %s", topic)
        with trio.move_on_after(METADATA_WAIT_S):
            while self.replicas.metadata.topic(topic) is None:
                await trio.sleep(0.05)
        return None

    def _originals(self, job: DlqJob) -> dict[int, Record]:
        """The original records of the dead letters, decoded (the group copies them); those
        no longer readable here (retention, leadership moved) are left out, and written
        with the headers only, as Kafka does."""
        partition, error = self.replicas.leader_partition(job.topic, job.partition)
        if partition is None or error is not Error.NONE:
            return {}
        wanted = {letter.offset for letter in job.letters}
        found: dict[int, Record] = {}
        offset = min(wanted)
        last = max(wanted)
        while offset <= last:
            entry = self.replicas.read_records(
                partition,
                offset,
                replica_id=-1,
                last_fetched_epoch=-1,
                max_bytes=READ_BYTES,
                min_one_batch=True,
                record_progress=False,
            )
            data = bytes(entry["records"] or b"") if entry["error_code"] == Error.NONE else b""
            if not data:
                break
            position = 0
            next_offset = offset
            view = memoryview(data)
            while position + HEADER_SIZE <= len(data):
                header = read_header(view, position)
                if position + header.size > len(data):
                    break
                next_offset = header.last_offset + 1
                if not header.is_control and header.last_offset >= offset:
                    try:
                        for record in decode_records(view[position : position + header.size]):
                            if record.offset in wanted:
                                found[record.offset] = record
                    except RecordError as problem:
                        log.warning("cannot decode %s-%d: %s", job.topic, job.partition, problem)
                position += header.size
            if next_offset <= offset:
                break
            offset = next_offset
        return found

    async def _append_here(self, topic: str, index: int, batch: bytes) -> Error:
        from minibroker.replication.replica_manager import AppendOrigin

        ((result,),) = await self.replicas.append_records(
            [(topic, (PartitionProduceData(index, memoryview(bytearray(batch))),))],
            acks=-1,
            timeout_s=REQUEST_TIMEOUT_S,
            origin=AppendOrigin.CLIENT,
        )
        return Error(result["error_code"])

    async def _produce_to(self, leader: int, topic: str, index: int, batch: bytes) -> Error:
        """A Produce (acks=-1) of ``batch`` to ``leader`` over the inter-broker listener."""
        request = build_request(
            ApiKey.PRODUCE,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": int(REQUEST_TIMEOUT_S * 1000),
                "topic_data": [
                    {
                        "name": topic,
                        "partition_data": [{"index": index, "records": batch}],
                    }
                ],
            },
        )
        answer = await self._connections.request(leader, request)
        partition = answer.responses[0].partition_responses[0]
        return Error(partition.error_code.value)


# Kafka's retriable produce and create-topic errors (RetriableException subclasses).
_RETRIABLE = frozenset(
    {
        Error.NOT_LEADER_OR_FOLLOWER,
        Error.UNKNOWN_TOPIC_OR_PARTITION,
        Error.LEADER_NOT_AVAILABLE,
        Error.NOT_ENOUGH_REPLICAS,
        Error.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        Error.REQUEST_TIMED_OUT,
        Error.FENCED_LEADER_EPOCH,
        Error.KAFKA_STORAGE_ERROR,
        Error.NOT_CONTROLLER,
        Error.COORDINATOR_NOT_AVAILABLE,
    }
)
