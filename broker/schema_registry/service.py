"""The schema registry's trio shell: `_schemas` read by every broker, written by one.

Storage is the compacted topic `_schemas` (one partition, replication factor
min(3, live brokers), created on the first write), in Confluent's record layout
(``log_format``). Every broker holding a replica of it, leader or follower, applies its
records up to the high watermark to its own ``state.Registry`` as they arrive (woken by the
replica manager's watchers on every append, high-watermark change and role change), and
answers reads from it.

The writer, which allocates ids and versions, is the leader of `_schemas` partition 0: the
controller's partition leadership is the election (Confluent elects its writer with a group
of its own; here the broker already has one). The writer runs commands one at a time, each
against a state that has applied its whole log first (a new leader's log end included), and
appends their records through the replica manager's append path with acks=-1, as a
coordinator writes its topic; its answer waits until the records are applied. Other brokers
forward writes to the writer's HTTP address, which each broker registers with the controller
beside its Kafka listeners (``SCHEMA_REGISTRY_ENDPOINT``, or ``SCHEMA_REGISTRY_TLS_ENDPOINT``
for an https one, reached with the registry's trust store), then wait until their own copy
has the written offset before answering, so a client reads its own writes from any broker.

After a kill -9 of the writer, the controller elects another leader among the in-sync
replicas, which has every acknowledged record: its state's highest id is the old writer's
last, so ids continue above it and are never reused.

A copy that is up to its own high watermark is not necessarily up to date: a follower's high
watermark comes from its last fetch response (a broker that has just started, or just
become a follower, may not have fetched yet), and a leader elected a moment ago has one that
lags its log end until its followers fetch again. So a schema id this copy does not hold is
only "not registered" once the copy has applied `_schemas` up to its end as its leader knows
it (``caught_up_to_end``: the leader's log end offset, asked with a ListOffsets as a follower
asks it, or the log end here on the leader), as Confluent's KafkaStore catches its reader up
to the topic's end offset (waitUntilKafkaReaderReachesLastOffset, getLatestOffset) before it
decides. The Iceberg writer asks that before it sends a record to the dead-letter table for
an unknown schema id (broker/iceberg/service.py), schema validation on produce before it
refuses a record's id (apis/produce.py: a retriable NOT_ENOUGH_REPLICAS when it cannot be
known), and the HTTP reads by id before they answer 40403 (rest.py); an id the copy holds is
answered from it without asking.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from minibroker.cluster.controller_client import build_request
from minibroker.common.config import BrokerConfig
from minibroker.common.names import (
    SCHEMA_REGISTRY_ENDPOINT,
    SCHEMA_REGISTRY_TLS_ENDPOINT,
    SCHEMAS_TOPIC,
)
from minibroker.protocol.errors import Error
from minibroker.protocol.produce_request import PartitionProduceData
from minibroker.protocol.record_batch import scan_valid_batches
from minibroker.protocol.records import Record, RecordError, decode_records, encode_batch
from minibroker.protocol.versions import ApiKey
from minibroker.replication.partition import Partition
from minibroker.replication.replica_manager import AppendOrigin, ReplicaManager
from minibroker.schema_registry import log_format as lf
from minibroker.schema_registry.auth import BasicAuthenticator
from minibroker.schema_registry.state import Record as StateRecord
from minibroker.schema_registry.state import Registry, RegistryError, context_of
from minibroker.security.authorizer.acls import Authorizer
from minibroker.security.scram import ScramCredentials
from minibroker.storage.errors import StorageError

log = logging.getLogger("schema_registry")

T = TypeVar("T")

PARTITION = 0
READ_BYTES = 1024 * 1024
# Confluent's kafkastore.timeout.ms is 500 ms; a cluster electing a new leader takes longer.
WRITE_TIMEOUT_S = 10.0
# How long a read waits for this broker's copy to reach what it must show.
READ_TIMEOUT_S = 5.0
# A wake-up of the tail now and then, in case a change came without a notification.
TAIL_RECHECK_S = 1.0
MAX_REPLICATION_FACTOR = 3

# Sends a CreateTopics request to the controller (or decides it on a controller node) and
# returns the topic's error.
CreateTopics = Callable[[Any], Awaitable[Error]]
# The log end offset of a partition on its leader, None when the leader cannot say (the
# node wires replication/partition_metadata_client.py's PartitionMetadataClient.log_end_offset).
LogEndOffset = Callable[[str, int], Awaitable[int | None]]


class NotWriter(Exception):
    """This broker is not the writer; ``url`` is the writer's, when known."""

    def __init__(self, url: str | None) -> None:
        super().__init__(url)
        self.url = url


def store_error() -> RegistryError:
    return RegistryError(500, 50001, "Error in the backend data store")


def timed_out() -> RegistryError:
    return RegistryError(500, 50002, "Operation timed out")


class SchemaRegistryService:
    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        create_topics: CreateTopics,
        scram_credentials: ScramCredentials | None = None,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.config = config
        # The broker's authorizer: with basic authentication, requests are checked against
        # the Kafka ACLs (``access``).
        self.authorizer = authorizer
        # schema.registry.authentication.method=BASIC: logins checked against the broker's
        # SCRAM users.
        self.authenticator: BasicAuthenticator | None = None
        if config.schema_registry_authentication_method == "BASIC":
            credentials = scram_credentials or ScramCredentials()
            self.authenticator = BasicAuthenticator(credentials.get)
        self.replicas = replicas
        self.create_topics = create_topics
        # How far `_schemas` goes, as its leader knows it (caught_up_to_end); set by the node.
        self.leader_log_end: LogEndOffset | None = None
        self.registry = Registry()
        # The next offset of `_schemas` to apply.
        self.position = 0
        self._advanced = trio.Event()
        self._write_lock = trio.Lock()
        self._topic_creation = trio.Lock()
        self.writes = 0
        # (method and path template, HTTP status) -> answers given (the metrics' source).
        self.requests: Counter[tuple[str, int]] = Counter()

    # -- reading `_schemas` ----------------------------------------------------------------

    def local_partition(self) -> Partition | None:
        partition, _ = self.replicas.hosted_partition(SCHEMAS_TOPIC, PARTITION)
        return partition

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        key = (SCHEMAS_TOPIC, PARTITION)
        while True:
            partition = self.local_partition()
            if partition is not None:
                self._apply_up_to(partition, partition.high_watermark)
            await self.replicas.watchers.wait_any(
                [key], trio.current_time() + TAIL_RECHECK_S, "SchemaRegistry"
            )
            await trio.lowlevel.checkpoint()

    def _reset(self) -> None:
        self.registry = Registry()
        self.position = 0

    def _apply_up_to(self, partition: Partition, end: int) -> None:
        partition_log = partition.log
        if self.position > partition_log.log_end_offset:
            # The local log was truncated below what was applied (an unclean election):
            # start again from what the log now holds.
            log.warning("%s was truncated below offset %d: reloading", SCHEMAS_TOPIC, end)
            self._reset()
        self.position = max(self.position, partition_log.log_start_offset)
        before = self.position
        try:
            while self.position < end:
                data = partition_log.read(self.position, max_bytes=READ_BYTES, max_offset=end)
                reached = self.position
                if not data:
                    break
                for start, header in scan_valid_batches(data):
                    if header.base_offset >= end:
                        break
                    batch = memoryview(data)[start : start + header.size]
                    for record in decode_records(batch):
                        if self.position <= record.offset < end:
                            self._apply(record)
                    self.position = max(self.position, min(header.last_offset + 1, end))
                if self.position == reached:
                    break  # nothing valid to read there (yet)
        except (StorageError, RecordError) as error:
            log.error("cannot read %s past offset %d: %s", SCHEMAS_TOPIC, self.position, error)
        if self.position != before:
            self._advanced.set()
            self._advanced = trio.Event()

    def _apply(self, record: Record) -> None:
        try:
            key = lf.decode_key(record.key)
            value = lf.decode_value(record.value)
        except lf.RecordFormatError as error:
            log.warning("skipping offset %d of %s: %s", record.offset, SCHEMAS_TOPIC, error)
            return
        self.registry.apply(key, value)

    async def caught_up(self, offset: int | None = None, timeout_s: float = READ_TIMEOUT_S) -> None:
        """Wait until this broker's copy has applied up to ``offset`` (by default its high
        watermark now); 50002 after ``timeout_s``."""
        partition = self.local_partition()
        if offset is None:
            if partition is None:
                return
            offset = partition.high_watermark
        with trio.move_on_after(timeout_s):
            while self.position < offset:
                partition = self.local_partition()
                if partition is not None:
                    self._apply_up_to(partition, partition.high_watermark)
                    if self.position >= offset:
                        break
                await self._advanced.wait()
            return
        raise timed_out()

    async def caught_up_to_end(self, timeout_s: float = READ_TIMEOUT_S) -> None:
        """Wait until this broker's copy has applied `_schemas` up to its end as its leader
        knows it: the leader's log end offset when the leader is another broker (a
        ListOffsets as a follower sends it), this log's end when this broker leads. Then a
        schema id the copy does not hold was not registered when this was called (every
        acknowledged write is below a leader's log end). RegistryError when that cannot be
        known: 50002 after ``timeout_s`` (the high watermark did not reach the end), 50001
        when the leader does not answer or this broker holds no replica of `_schemas` (its
        copy is empty). With no `_schemas` topic at all nothing was ever registered.

        Confluent's KafkaStore.waitUntilKafkaReaderReachesLastOffset (the end offset from the
        topic's leader, then the reader waits for it); Confluent asks the consumer's end
        offset, the high watermark: here the log end, because minibroker's ListOffsets does
        not answer OFFSET_NOT_AVAILABLE while a new leader's high watermark lags its log end
        (Kafka's Partition.fetchOffsetForTimestamp does), and that high watermark may be below
        records already acknowledged."""
        partition = self.local_partition()
        if partition is None:
            if self.replicas.metadata.topic(SCHEMAS_TOPIC) is None:
                return
            raise RegistryError(
                500, 50001, f"this broker holds no replica of {SCHEMAS_TOPIC}: its copy is empty"
            )
        if partition.is_leader:
            end: int | None = partition.log.log_end_offset
        elif self.leader_log_end is None:
            end = None
        else:
            end = await self.leader_log_end(SCHEMAS_TOPIC, PARTITION)
        if end is None:
            raise RegistryError(
                500, 50001, f"the leader of {SCHEMAS_TOPIC} did not say where its log ends"
            )
        if self.position >= end:
            return
        # This copy was behind what the leader holds: said, as that is what once sent records
        # to the dead-letter table (an operator sees how far behind, and for how long).
        before, high_watermark = self.position, partition.high_watermark
        started = trio.current_time()
        try:
            await self.caught_up(end, timeout_s)
        finally:
            log.info(
                "this copy of %s was at offset %d (high watermark %d, %s) below its end %d:"
                " at %d after %.3f s",
                SCHEMAS_TOPIC,
                before,
                high_watermark,
                "leader" if partition.is_leader else "follower",
                end,
                self.position,
                trio.current_time() - started,
            )

    def schema(self, schema_id: int) -> tuple[str, str, dict[str, str]] | None:
        """(schema type, schema text, the texts of its references by name) of ``schema_id``
        in this broker's copy, None when it holds none (Iceberg topics' typed values:
        broker/iceberg/service.py's SchemaSource)."""
        try:
            version = self.registry.by_id(schema_id)
            references = version.references
            dependencies = self.registry.dependencies(references) if references else {}
        except RegistryError:
            return None
        return version.schema_type, version.schema, dependencies

    @staticmethod
    def protobuf_file(text: str, dependencies: dict[str, str]) -> Any:
        """A PROTOBUF schema built into a ``FileDescriptor`` of a pool of its own (pure: the
        Iceberg writer calls it in its worker thread); ProtobufError when it does not build."""
        from minibroker.schema_registry.protobuf_schema import parse

        return parse(text, dependencies).file

    # -- who writes ------------------------------------------------------------------------

    def writer_url(self) -> str | None:
        """The HTTP address of the writer (the leader of `_schemas` partition 0), if known."""
        topic = self.replicas.metadata.topic(SCHEMAS_TOPIC)
        if topic is None or PARTITION not in topic.partitions:
            return None
        leader = topic.partitions[PARTITION].leader
        endpoints = self.replicas.metadata.listeners.get(leader, {})
        for name, scheme in (
            (SCHEMA_REGISTRY_ENDPOINT, "http"),
            (SCHEMA_REGISTRY_TLS_ENDPOINT, "https"),
        ):
            endpoint = endpoints.get(name)
            if endpoint is not None:
                host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
                return f"{scheme}://{host}:{endpoint.port}"
        return None

    async def writer_moved(self, previous: str | None, deadline: float) -> bool:
        """Wait until this broker is the writer or another writer than ``previous`` is
        known (the controller elected a new leader of `_schemas`); False at ``deadline``."""
        while trio.current_time() < deadline:
            if self.is_writer() or self.writer_url() not in (None, previous):
                return True
            await self.replicas.watchers.wait_any(
                [(SCHEMAS_TOPIC, PARTITION)],
                min(deadline, trio.current_time() + 0.1),
                "SchemaRegistry",
            )
        return False

    def is_writer(self) -> bool:
        partition = self.local_partition()
        return partition is not None and partition.is_leader

    async def ensure_topic(self) -> None:
        """Create `_schemas` on the first write, then wait for its leader to be known.

        Its replication factor is min(3, live brokers) as Confluent's KafkaStore chooses it
        (``kafkastore.topic.replication.factor`` 3, fewer on a smaller cluster), with the live
        brokers counted by the controller, which refuses a factor above them
        (INVALID_REPLICATION_FACTOR): 3 is asked first, then less. Counted from this
        broker's metadata cache, `_schemas` was once made with 2 replicas on a 3-broker
        cluster whose first schema was registered right after it started (why the cache
        listed 2 then was not found: not yet updated, or a broker fenced for a moment), and
        the broker without one could not look schemas up (its Iceberg writer had sent whole
        partitions to the dead-letter table as "schema id 1 is not in the schema
        registry"). A broker the controller has fenced at that moment still gets none."""
        async with self._topic_creation:
            if self.replicas.metadata.topic(SCHEMAS_TOPIC) is None:
                for factor in range(MAX_REPLICATION_FACTOR, 0, -1):
                    error = await self._create_topic(factor)
                    if error != Error.INVALID_REPLICATION_FACTOR:
                        break
                if error not in (Error.NONE, Error.TOPIC_ALREADY_EXISTS):
                    log.warning("cannot create %s: %s", SCHEMAS_TOPIC, error.name)
                    raise store_error()
        with trio.move_on_after(WRITE_TIMEOUT_S):
            while not self.is_writer() and self.writer_url() is None:
                await self.replicas.watchers.wait_any(
                    [(SCHEMAS_TOPIC, PARTITION)],
                    trio.current_time() + 0.1,
                    "SchemaRegistry",
                )
            return
        raise timed_out()

    async def _create_topic(self, replication_factor: int) -> Error:
        request = build_request(
            ApiKey.CREATE_TOPICS,
            {
                "topics": [
                    {
                        "name": SCHEMAS_TOPIC,
                        "num_partitions": 1,
                        "replication_factor": replication_factor,
                        "assignments": (),
                        "configs": [{"name": "cleanup.policy", "value": "compact"}],
                    }
                ],
                "timeout": 30_000,
                "validate_only": False,
            },
        )
        try:
            return await self.create_topics(request)
        except Exception as failure:  # the controller unreachable, deposed
            log.warning("cannot create %s: %s", SCHEMAS_TOPIC, failure)
            raise store_error() from None

    # -- writing ---------------------------------------------------------------------------

    async def write(self, command: Callable[[Registry], tuple[T, list[StateRecord]]]) -> T:
        """Run ``command`` as the writer and append its records; NotWriter elsewhere."""
        await self.ensure_topic()
        async with self._write_lock:
            partition, error = self.replicas.leader_partition(SCHEMAS_TOPIC, PARTITION)
            if partition is None or error != Error.NONE:
                raise NotWriter(self.writer_url())
            # Everything in the leader's log, its end included, before deciding.
            await self.caught_up(partition.log.log_end_offset, WRITE_TIMEOUT_S)
            answer, records = command(self.registry)
            if not records:
                return answer
            now = self.replicas.clock_ms()
            batch = encode_batch(
                [
                    Record(offset, now, lf.encode(key), lf.encode(value))
                    for offset, (key, value) in enumerate(records)
                ]
            )
            ((result,),) = await self.replicas.append_records(
                [(SCHEMAS_TOPIC, (PartitionProduceData(PARTITION, memoryview(batch)),))],
                acks=-1,
                timeout_s=WRITE_TIMEOUT_S,
                origin=AppendOrigin.COORDINATOR,
            )
            error = Error(result["error_code"])
            if error == Error.REQUEST_TIMED_OUT:
                raise timed_out()
            if error in (Error.NOT_LEADER_OR_FOLLOWER, Error.FENCED_LEADER_EPOCH):
                raise NotWriter(self.writer_url())
            if error != Error.NONE:
                log.warning("cannot write to %s: %s", SCHEMAS_TOPIC, error.name)
                raise store_error()
            self.writes += 1
            await self.caught_up(result["base_offset"] + len(records), WRITE_TIMEOUT_S)
            return answer


class SchemaRegistryCollector:
    """The registry's metrics, read at scrape time: requests by endpoint and status, live
    subjects and schemas in this broker's copy, writes appended here, whether it writes."""

    def __init__(self, service: SchemaRegistryService) -> None:
        self.service = service

    def describe(self) -> list:
        return []

    def collect(self):
        service = self.service
        requests = CounterMetricFamily(
            "minibroker_schema_registry_requests",
            "Schema registry HTTP requests answered, by endpoint and status.",
            labels=["endpoint", "status"],
        )
        for (endpoint, status), count in sorted(service.requests.items()):
            requests.add_metric([endpoint, str(status)], count)
        yield requests
        registry = service.registry
        yield GaugeMetricFamily(
            "minibroker_schema_registry_subjects",
            "Subjects with a live version, in this broker's copy of _schemas.",
            value=len(registry.subject_names()),
        )
        yield GaugeMetricFamily(
            "minibroker_schema_registry_schemas",
            "Distinct schema ids registered (an id counted in each context that has it), in"
            " this broker's copy of _schemas.",
            value=len(
                {
                    (context_of(name), v.schema_id)
                    for name, versions in registry.subjects.items()
                    for v in versions.values()
                }
            ),
        )
        yield CounterMetricFamily(
            "minibroker_schema_registry_writes",
            "Writes this broker appended to _schemas as the registry's writer.",
            value=service.writes,
        )
        yield GaugeMetricFamily(
            "minibroker_schema_registry_writer",
            "1 when this broker is the registry's writer (leader of _schemas partition 0).",
            value=1 if service.is_writer() else 0,
        )
