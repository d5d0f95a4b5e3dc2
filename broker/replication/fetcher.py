"""Follower fetchers: one task per (leader, fetcher index), looping truncate then fetch.

Kafka's ReplicaFetcherThread, reduced to its rules:
- a fetch carries this broker as replica_id, the leader epoch it believes current, and the
  epoch of its last fetched batch (Fetch v12); the leader answers a diverging epoch when the
  follower's log has records the leader's history does not, and the follower truncates to
  min(leader's end of that epoch, its own end of it) before fetching again;
- fetched batches are appended with the leader's offsets and epochs; the follower's high
  watermark becomes min(leader's HW, its own log end offset), and its log start offset
  follows the leader's;
- OFFSET_OUT_OF_RANGE: ask the leader for its log end and start (ListOffsets as a replica),
  then truncate to its end or restart at its start;
- FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER and the like: back off
  that partition for replica.fetch.backoff.ms and wait for the controller's next word;
- a local storage error (an append or truncation here failed, its log dir is offline): the
  partition is no longer fetched (Kafka's markPartitionFailed); its log refuses everything
  until a restart recovers it, and the broker halts meanwhile (BrokerServer._log_dir_failed);
- partitions are rotated after every fetch so a busy one cannot starve the others;
- replication throttles (KIP-73, replication_quota.py): a partition that is not in sync,
  throttled on this follower while its quota is exceeded, is left out of the fetch; when
  that leaves nothing to fetch, the fetcher waits replica.fetch.backoff.ms (Kafka's
  fetcher thread does, on an empty fetch); every throttled partition's fetched bytes count
  against the quota;
- fetches run in an incremental fetch session (KIP-227, replication/fetch_session.py's
  FetchSessionHandler): after the first full fetch, a request carries only the partitions whose
  position changed and the leader answers only those with news; a session error, or a lost
  answer, starts over with a full fetch;
- a fetch is Fetch v18 by topic id (v12 by name when a partition has no topic id), carrying
  this broker's epoch (KIP-903, which the leader passes on in AlterPartition) and, on a broker
  that serves consumers as a follower (``replica.selector.class`` set), each partition's known
  high watermark (KIP-1166), so that the leader answers at once when its own is ahead.

Departure from Kafka 4.4, whose followers always send the high watermark they know: here only
a broker with a replica selector does. The answer at once costs a round trip per move of the
high watermark: on 3 brokers with RF 3, 300,000 acks=all records of 1 KiB from confluent-kafka
made 2.4-2.9 Fetch requests per 1,000 records without it and 5.3-7.1 with it, and the brokers'
CPU per record grew from 11-14 to 16-17 us (2026-12-03, /work/notes scratch script, load 4).
Without it a follower learns a new high watermark with its next fetch, which it sends as soon
as it has appended what the last one brought (or after replica.fetch.wait.max.ms when idle):
what only a consumer reading from the follower would see.
"""

import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import trio

from minibroker.cluster.controller_client import build_request
from minibroker.cluster.node_connection import CONNECTION_ERRORS, NodeConnection
from minibroker.common.config import BrokerConfig
from minibroker.common.metrics import BrokerMetrics
from minibroker.protocol.errors import Error, error_name
from minibroker.protocol.offsets import EARLIEST, LATEST
from minibroker.protocol.replica_fetch import (
    HIGH_WATERMARK_UNKNOWN,
    REPLICA_FETCH_VERSION,
    REPLICA_FETCH_VERSION_BY_NAME,
    FetchedPartition,
    ReplicaFetchPartition,
    decode_replica_fetch_response,
    encode_replica_fetch_request,
)
from minibroker.protocol.versions import ApiKey
from minibroker.replication import log_io
from minibroker.replication.fetch_session import FetchSessionHandler, PartitionKey
from minibroker.replication.metadata_cache import MetadataCache
from minibroker.security.listeners import client_security
from minibroker.storage.errors import StorageError

if TYPE_CHECKING:
    from minibroker.replication.partition import Partition


class ReplicaAccess(Protocol):
    """What a fetcher uses of the replica manager that owns it (its config, the cluster's
    addresses, its clock and metrics, how to reach a leader, and the purgatory's wake-up),
    typed here so that the fetcher does not import the replica manager that imports it."""

    config: BrokerConfig
    metadata: MetadataCache
    metrics: BrokerMetrics
    clock_ms: Callable[[], int]
    connect: Callable[..., Awaitable[NodeConnection]]
    run_blocking: log_io.RunSync
    replica_selector: object | None

    @property
    def broker_epoch(self) -> int: ...

    def notify(self, partition: "Partition") -> None: ...

    def should_follower_throttle(self, partition: "Partition") -> bool: ...

    def record_follower_throttled_bytes(self, partition: "Partition", size: int) -> None: ...


log = logging.getLogger("fetcher")

RESPONSE_MAX_BYTES = 10 * 1024 * 1024
_SESSION_ERRORS = (
    Error.FETCH_SESSION_ID_NOT_FOUND,
    Error.INVALID_FETCH_SESSION_EPOCH,
    Error.FETCH_SESSION_TOPIC_ID_ERROR,
)
REQUEST_TIMEOUT_S = 30.0
_ZERO_ID = uuid.UUID(int=0)


def _high_watermark(partition: "Partition") -> int:
    return partition.high_watermark


def _unknown_high_watermark(partition: "Partition") -> int:
    return HIGH_WATERMARK_UNKNOWN


class Fetcher:
    """Fetches a set of partitions from one leader."""

    def __init__(self, replicas: ReplicaAccess, leader_id: int) -> None:
        self._replicas = replicas
        self.leader_id = leader_id
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._delayed_until: dict[tuple[str, int], float] = {}
        self._work = trio.Event()
        self._connection: NodeConnection | None = None
        self._session = FetchSessionHandler()
        # The version of the session's requests: v18 by topic id, v12 by name (_version_for).
        self._session_version = REPLICA_FETCH_VERSION
        # Per partition (its session key): what its last request said, and that request.
        self._built: dict[PartitionKey, tuple[tuple, ReplicaFetchPartition]] = {}
        config = replicas.config
        self._security = client_security(config, config.inter_broker_listener.name)
        # The partitions of the fetch being processed that drew an error, for one log line.
        self._refused: list[tuple[tuple[str, int], int]] = []

    def add(self, partition: "Partition") -> None:
        self._partitions[partition.key] = partition
        self._delayed_until.pop(partition.key, None)
        self._work.set()

    def remove(self, key: tuple[str, int]) -> None:
        self._partitions.pop(key, None)
        self._delayed_until.pop(key, None)

    @property
    def _config(self):
        return self._replicas.config

    async def run(self) -> None:
        backoff = self._config.replica_fetch_backoff_ms / 1000
        while True:
            ready = self._ready_partitions()
            if not ready:
                await self._wait_for_work()
                continue
            ready = [p for p in ready if not self._replicas.should_follower_throttle(p)]
            if not ready:  # every partition held back by the replication throttle
                await self._wait_for_work(trio.current_time() + backoff)
                continue
            try:
                await self._fetch_once(ready)
            except CONNECTION_ERRORS as error:
                log.info("fetch from broker %d failed: %r; retrying", self.leader_id, error)
                await self._disconnect()
                await trio.sleep(backoff)
            except Exception:
                # One bad answer must not stop replication of every other partition.
                log.exception("fetcher for broker %d failed; retrying", self.leader_id)
                await self._disconnect()
                await trio.sleep(backoff)

    async def _wait_for_work(self, deadline: float = float("inf")) -> None:
        """Sleep until a partition is added, the earliest backed-off one is due, or
        ``deadline``."""
        self._work = trio.Event()
        deadline = min([deadline, *self._delayed_until.values()])
        with trio.move_on_at(deadline):
            await self._work.wait()

    def _ready_partitions(self) -> list["Partition"]:
        now = trio.current_time()
        return [
            partition
            for key, partition in self._partitions.items()
            if self._delayed_until.get(key, 0) <= now
        ]

    async def _connect(self) -> NodeConnection:
        if self._connection is None:
            endpoint = self._replicas.metadata.brokers.get(self.leader_id)
            if endpoint is None:
                raise OSError(f"no address known for broker {self.leader_id}")
            self._connection = await self._replicas.connect(
                endpoint.host,
                endpoint.port,
                f"replica-fetcher-{self._config.node_id}",
                self._security,
            )
        return self._connection

    async def _disconnect(self) -> None:
        # The answer to the last request may be lost: the leader's session epoch is unknown.
        self._session.reset()
        if self._connection is not None:
            await self._connection.aclose()
            self._connection = None

    @staticmethod
    def _version_for(partitions: list["Partition"]) -> int:
        """Fetch v18 (by topic id) when every partition has a topic id, else v12 by name, as
        Kafka's AbstractFetcherThread falls back to 12 when a partition has none."""
        for partition in partitions:
            if partition.topic_id is None or partition.topic_id == _ZERO_ID:
                return REPLICA_FETCH_VERSION_BY_NAME
        return REPLICA_FETCH_VERSION

    def _fetch_request(self, partitions: list["Partition"], version: int) -> bytes:
        by_id = version >= 13
        if version != self._session_version:
            # A session holds partitions by name or by id, never both (the leader answers
            # FETCH_SESSION_TOPIC_ID_ERROR to a switch): start a new one.
            self._session.reset()
            self._session_version = version
        wanted: dict[PartitionKey, ReplicaFetchPartition] = {}
        # KIP-1166 (Fetch v18's HighWatermark): a follower that says which high watermark it
        # knows is answered at once when the leader's is ahead. Only where this broker serves
        # consumers as a follower (a replica selector, KIP-392) does that buy anything: else
        # "not known", and the high watermark comes with the next fetch (see the module).
        if self._replicas.replica_selector is not None:
            known_high_watermark = _high_watermark
        else:
            known_high_watermark = _unknown_high_watermark
        # Each partition's request is built again only when what it says changed (a follower
        # of thousands of idle partitions asks for them all at every fetch, and the session
        # compares them: the same object compares at once).
        built = self._built
        max_bytes = self._config.replica_fetch_max_bytes
        for partition in partitions:
            log = partition.log
            latest_epoch = log.leader_epoch_cache.latest_epoch
            state = (
                partition.leader_epoch,
                log.log_end_offset,
                latest_epoch,
                log.log_start_offset,
                known_high_watermark(partition),
                max_bytes,
                by_id,
            )
            key = partition.request_key if by_id else partition.key
            previous = built.get(key)
            if previous is not None and previous[0] == state:
                wanted[key] = previous[1]
                continue
            request = ReplicaFetchPartition(
                partition=partition.index,
                current_leader_epoch=state[0],
                fetch_offset=state[1],
                last_fetched_epoch=latest_epoch if latest_epoch is not None else -1,
                log_start_offset=state[3],
                partition_max_bytes=max_bytes,
                high_watermark=state[4],
            )
            built[key] = (state, request)
            wanted[key] = request
        if len(built) > 2 * len(wanted):  # partitions no longer fetched from here
            self._built = {key: built[key] for key in wanted if key in built}
        # In a fetch session (KIP-227, as Kafka's ReplicaFetcherThread): only what changed.
        session_id, epoch, send, forget = self._session.build(wanted)
        by_topic: dict[object, list[ReplicaFetchPartition]] = {}
        for (topic, _), fetch_partition in send:
            by_topic.setdefault(topic if by_id else str(topic), []).append(fetch_partition)
        forgotten: dict[object, list[int]] = {}
        for topic, index in forget:
            forgotten.setdefault(topic if by_id else str(topic), []).append(index)
        return encode_replica_fetch_request(
            replica_id=self._config.node_id,
            max_wait_ms=self._config.replica_fetch_wait_max_ms,
            min_bytes=self._config.replica_fetch_min_bytes,
            max_bytes=RESPONSE_MAX_BYTES,
            topics=by_topic,
            session_id=session_id,
            session_epoch=epoch,
            forgotten=forgotten,
            version=version,
            # KIP-903: the leader passes it on in AlterPartition v3, so that the controller
            # refuses this broker into an ISR once it has restarted (a new broker epoch).
            replica_epoch=self._replicas.broker_epoch,
        )

    async def _fetch_once(self, partitions: list["Partition"]) -> None:
        connection = await self._connect()
        # What each partition was when asked for: an answer is applied only if the partition
        # is still fetched here from this leader at the same epoch (Kafka drops it otherwise).
        sent = {partition.key: (partition, partition.leader_epoch) for partition in partitions}
        version = self._version_for(partitions)
        request = self._fetch_request(partitions, version)
        with trio.fail_after(REQUEST_TIMEOUT_S):
            frame, offset = await connection.request_body(ApiKey.FETCH, version, request)
        # The answer names topics by id at v18: read them as the names they are here.
        names = {p.topic_id: p.topic for p in partitions} if version >= 13 else None
        response = decode_replica_fetch_response(frame, offset, version, names)
        self._session.handle_response(response.error_code, response.session_id)
        if response.error_code in _SESSION_ERRORS:
            # The next fetch is a full one that opens a new session; nothing to back off.
            log.info(
                "fetch session with %d: %s; starting a new one",
                self.leader_id,
                error_name(response.error_code),
            )
            return
        if response.error_code != Error.NONE:
            error = error_name(response.error_code)
            log.warning("fetch from %d failed: %s", self.leader_id, error)
            self._back_off(sent)
            return
        self._refused = []
        for data in response.partitions:
            key = (data.topic, data.partition_index)
            if key not in sent or not self._still_fetching(*sent[key]):
                continue
            partition, _epoch = sent[key]
            try:
                await self._process_partition(connection, partition, data)
            except StorageError as failure:  # a truncation or a log start offset's move
                log.error("cannot update %s-%d: %s", *partition.key, failure)
                self._fail_or_back_off(partition, failure)
            # Rotate: fetched partitions go to the back of the queue.
            if key in self._partitions:
                self._partitions[key] = self._partitions.pop(key)
        if self._refused:
            self._log_refused()

    def _log_refused(self) -> None:
        """One line for the partitions of a fetch that drew an error (each is at DEBUG): a
        leadership change moves hundreds of partitions at once."""
        errors = Counter(error_name(error) for _, error in self._refused)
        shown = ", ".join(f"{topic}-{index}" for (topic, index), _ in self._refused[:3])
        more = len(self._refused) - 3
        log.info(
            "fetching from %d: %s (%s%s); backing off",
            self.leader_id,
            ", ".join(f"{count} x {name}" for name, count in errors.most_common()),
            shown,
            f" and {more} more" if more > 0 else "",
        )

    def _still_fetching(self, partition: "Partition", epoch: int) -> bool:
        """Whether this fetcher still follows ``partition`` from its leader at ``epoch``;
        leadership may have moved during any await."""
        return (
            self._partitions.get(partition.key) is partition
            and partition.leader == self.leader_id
            and partition.leader_epoch == epoch
        )

    async def _process_partition(
        self, connection, partition: "Partition", data: FetchedPartition
    ) -> None:
        error = data.error_code
        epoch = partition.leader_epoch
        if error == Error.NONE:
            if data.diverging_epoch >= 0 or data.diverging_end_offset >= 0:
                # A truncation waits for a roll of the log in flight.
                if await log_io.settled(partition.log) and not self._still_fetching(
                    partition, epoch
                ):
                    return
                self._truncate_diverging(partition, data.diverging_epoch, data.diverging_end_offset)
                await self._finish_truncation(partition)
                return
            changed = bool(data.records)
            if data.records:
                self._replicas.metrics.fetcher_bytes.inc(len(data.records))
                self._replicas.record_follower_throttled_bytes(partition, len(data.records))
                try:
                    now_ms = self._replicas.clock_ms()
                    size = len(data.records)
                    if log_io.must_wait(partition.log, size, now_ms):
                        # The roll's files made in a worker thread, before the append.
                        await log_io.ready_to_append(
                            partition.log, size, now_ms, self._replicas.run_blocking
                        )
                        if not self._still_fetching(partition, epoch):
                            return
                    partition.append_as_follower(data.records, now_ms)
                except StorageError as failure:
                    log.error("cannot append to %s-%d: %s", *partition.key, failure)
                    self._fail_or_back_off(partition, failure)
                    return
            partition.log.maybe_increment_log_start_offset(data.log_start_offset)
            changed |= partition.update_follower_high_watermark(data.high_watermark)
            if changed:
                self._replicas.notify(partition)
            partition.fetch_lag = max(data.high_watermark - partition.log.log_end_offset, 0)
        elif error == Error.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range(connection, partition)
        else:
            log.debug(
                "fetching %s-%d from %d: %s; backing off",
                *partition.key,
                self.leader_id,
                error_name(error),
            )
            self._refused.append((partition.key, error))
            self._back_off({partition.key: partition})

    def _truncate_diverging(self, partition: "Partition", epoch: int, leader_end: int) -> None:
        """Cut the records the leader's history does not have (KIP-101, KIP-595 style)."""
        own_epoch, own_end = partition.log.end_offset_for_epoch(epoch)
        if own_epoch < 0:
            offset = min(leader_end, partition.log.log_end_offset)
        else:
            offset = min(leader_end, own_end)
        removed = partition.log.truncate_to(offset)
        # Nothing removed is the common case (a former leader's epoch entry at the log end
        # that the new leader never saw), for every partition a restart moved: not a warning.
        log.log(
            logging.WARNING if removed else logging.DEBUG,
            "truncated %s-%d to %d: diverging from leader epoch %d ending at %d",
            *partition.key,
            offset,
            epoch,
            leader_end,
        )
        partition.clamp_high_watermark()

    async def _handle_out_of_range(self, connection, partition: "Partition") -> None:
        """Kafka's rule: past the leader's end, truncate to it; before the leader's start,
        start over there; in between (the leader's log start moved meanwhile) just refetch."""
        epoch = partition.leader_epoch
        leader_end = await self._leader_offset(connection, partition, LATEST)
        leader_start = await self._leader_offset(connection, partition, EARLIEST)
        await log_io.settled(partition.log)  # a truncation waits for a roll
        if not self._still_fetching(partition, epoch):
            return
        if leader_end is None or leader_start is None:
            self._back_off({partition.key: partition})
            return
        if partition.log.log_end_offset > leader_end:
            log.warning("truncating %s-%d to the leader's end %d", *partition.key, leader_end)
            partition.log.truncate_to(leader_end)
        elif partition.log.log_end_offset < leader_start:
            log.warning(
                "%s-%d is behind the leader's log start %d: restarting there",
                *partition.key,
                leader_start,
            )
            partition.log.truncate_fully_and_start_at(leader_start)
        partition.clamp_high_watermark()
        await self._finish_truncation(partition)

    async def _finish_truncation(self, partition: "Partition") -> None:
        """A truncation's epoch checkpoint and unlinks, in a worker thread, before the next
        fetch (log_io.finish_truncation); a failure backs the partition off as a failed
        append does."""
        try:
            await log_io.finish_truncation(partition.log, self._replicas.run_blocking)
        except StorageError as failure:
            log.error("cannot truncate %s-%d: %s", *partition.key, failure)
            self._fail_or_back_off(partition, failure)

    async def _leader_offset(self, connection, partition: "Partition", timestamp: int):
        request = build_request(
            ApiKey.LIST_OFFSETS,
            {
                "replica_id": self._config.node_id,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": partition.topic,
                        "partitions": [
                            {
                                "partition_index": partition.index,
                                "current_leader_epoch": partition.leader_epoch,
                                "timestamp": timestamp,
                            }
                        ],
                    }
                ],
            },
        )
        with trio.fail_after(REQUEST_TIMEOUT_S):
            response = await connection.request(request)
        (topic,) = response.topics
        (answer,) = topic.partitions
        if answer.error_code.value != Error.NONE:
            return None
        return answer.offset

    def _fail_or_back_off(self, partition: "Partition", failure: StorageError) -> None:
        """Stop fetching a partition whose log failed on its disk (KAFKA_STORAGE_ERROR), as
        Kafka's fetcher marks it failed; back off after any other refusal."""
        if failure.error == Error.KAFKA_STORAGE_ERROR:
            log.error("stopped fetching %s-%d: its log dir failed", *partition.key)
            self.remove(partition.key)
        else:
            self._back_off({partition.key: partition})

    def _back_off(self, partitions: dict) -> None:
        until = trio.current_time() + self._config.replica_fetch_backoff_ms / 1000
        for key in partitions:
            if key in self._partitions:
                self._delayed_until[key] = until


class FetcherManager:
    """Assigns follower partitions to fetchers: num.replica.fetchers per leader."""

    def __init__(self, replicas: ReplicaAccess) -> None:
        self._replicas = replicas
        self._fetchers: dict[tuple[int, int], Fetcher] = {}
        self._assigned: dict[tuple[str, int], Fetcher] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await trio.sleep_forever()

    def add(self, partition: "Partition") -> None:
        """(Re)assign a follower partition to a fetcher for its current leader."""
        self.remove(partition.key)
        index = hash(partition.key) % self._replicas.config.num_replica_fetchers
        fetcher_key = (partition.leader, index)
        fetcher = self._fetchers.get(fetcher_key)
        if fetcher is None:
            fetcher = self._fetchers[fetcher_key] = Fetcher(self._replicas, partition.leader)
            assert self._nursery is not None, "a follower assigned before FetcherManager.run"
            self._nursery.start_soon(fetcher.run)
        fetcher.add(partition)
        self._assigned[partition.key] = fetcher

    def remove(self, key: tuple[str, int]) -> None:
        fetcher = self._assigned.pop(key, None)
        if fetcher is not None:
            fetcher.remove(key)
