"""In-process brokers for the replication tests: real ReplicaManagers and real logs in a temp
dir, driven by trio's MockClock, with no sockets.

A broker's controller is a stub (the tests send LeaderAndIsr themselves, as the controller
would); a follower's fetcher reaches its leader through `LeaderConnection`, which answers
the fetcher's Fetch and ListOffsets from the leader's ReplicaManager the way the handlers do
(read_records, fetch_offset_for_timestamp), encoded and decoded with the real codecs.
"""

import uuid
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import trio

from minibroker.apis import RequestContext
from minibroker.apis import fetch as fetch_api
from minibroker.common.config import BrokerConfig
from minibroker.common.metrics import BrokerMetrics
from minibroker.node.server import log_config_from
from minibroker.protocol import codec
from minibroker.protocol.errors import Error
from minibroker.protocol.framing import RequestHeader
from minibroker.protocol.produce_request import PartitionProduceData
from minibroker.protocol.replica_fetch import HIGH_WATERMARK_UNKNOWN
from minibroker.protocol.versions import ApiKey
from minibroker.replication import log_io
from minibroker.replication.fetch_session import PartitionRequest
from minibroker.replication.replica_manager import AppendOrigin, ReplicaManager, fetch_result
from minibroker.storage.log_manager import LogManager
from tests.unit.batch_factory import make_batch

TOPIC = "t"
TOPIC_ID = uuid.UUID(int=7)


def trio_ms() -> int:
    """trio's clock in milliseconds: MockClock time for the replica manager's intervals."""
    return int(trio.current_time() * 1000)


class StubController:
    """The controller client a ReplicaManager holds; these tests never need an answer."""

    broker_epoch = 1

    async def request(self, request, timeout_s: float = 5.0):
        raise AssertionError(f"unexpected request to the controller: {request!r}")


def make_broker(
    tmp_path: Path,
    node_id: int,
    brokers: dict | None = None,
    *,
    threads: bool = False,
    properties: dict[str, str] | None = None,
) -> ReplicaManager:
    """A broker whose log manager's blocking steps run inline (the tests run under
    MockClock, whose autojump would fire every timer while a worker thread runs), or in
    worker threads as in the broker with ``threads`` (tests/unit/test_log_io.py);
    ``properties`` adds broker properties."""
    directory = tmp_path / f"broker-{node_id}"
    # Kafka's replica.fetch.wait.max.ms (500): an empty fetch parks at the leader, as it does
    # over the wire, so that MockClock time moves while a follower waits for records.
    config = BrokerConfig.from_properties(
        {"node.id": str(node_id), "log.dirs": str(directory), **(properties or {})}
    )
    log_manager = LogManager(
        [directory], log_config_from(config), node_id=node_id, cluster_id="test-cluster"
    )
    log_manager.open(0)

    opened: list[LeaderConnection] = []

    async def connect(host, port, client_id, security):
        # The host names the leader's node id (see leader_and_isr's live_leaders).
        opened.append(LeaderConnection(brokers[int(host)]))
        return opened[-1]

    replicas = ReplicaManager(
        config,
        log_manager,
        StubController(),
        BrokerMetrics(),
        clock_ms=trio_ms,
        elapsed_ms=trio_ms,
        connect=connect,
        run_blocking=log_io.IN_THREAD if threads else log_io.inline,
    )
    # Topic configs as the controller pushes them before the LeaderAndIsr creating replicas.
    replicas.announced_topic_configs[TOPIC] = {"min.insync.replicas": "2"}
    # The connections its fetchers opened, for the tests to read what they sent.
    replicas.harness_connections = opened  # type: ignore[attr-defined]
    return replicas


def leader_and_isr(
    leader: int,
    leader_epoch: int,
    isr: list[int],
    replicas: list[int],
    *,
    partition_epoch: int | None = None,
    partitions: tuple[int, ...] = (0,),
    topic: str = TOPIC,
    topic_id: uuid.UUID = TOPIC_ID,
):
    """A LeaderAndIsr request as the controller sends it, for `partitions` of `topic`."""
    states = [
        SimpleNamespace(
            partition_index=index,
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=leader_epoch if partition_epoch is None else partition_epoch,
            isr=isr,
            replicas=replicas,
        )
        for index in partitions
    ]
    return SimpleNamespace(
        live_leaders=[SimpleNamespace(broker_id=leader, host_name=str(leader), port=9092)],
        topic_states=[
            SimpleNamespace(topic_name=topic, topic_id=topic_id, partition_states=states)
        ],
    )


def records(index: int, count: int, topic: str = TOPIC) -> list:
    """append_records' entries: `count` records for one partition, in a writable view as
    the Produce decoder gives them."""
    batch = bytearray(make_batch([(None, b"v%d" % n) for n in range(count)]))
    return [(topic, [PartitionProduceData(index, memoryview(batch))])]


async def append(replicas: ReplicaManager, index: int, count: int, **options) -> dict:
    options.setdefault("acks", -1)
    options.setdefault("timeout_s", 30.0)
    options.setdefault("origin", AppendOrigin.CLIENT)
    ((result,),) = await replicas.append_records(records(index, count), **options)
    return result


class LeaderConnection:
    """A follower's connection to its leader, answered in process by the leader's
    ReplicaManager."""

    def __init__(self, leader: ReplicaManager) -> None:
        self.leader = leader
        # The kind of fetch context of each Fetch answered (full, incremental, ...).
        self.contexts: list[str] = []
        # Each Fetch's version and the follower's broker epoch it carried (KIP-903).
        self.fetches: list[tuple[int, int]] = []
        # The high watermarks the follower said it knew (Fetch v18, KIP-1166).
        self.known_high_watermarks: list[int] = []

    async def request_body(self, api_key: int, version: int, body: bytes):
        """A Fetch answered as the Fetch handler answers it: read every partition; while
        fewer than min_bytes came back, no partition answered an error and max_wait has not
        passed, park on the partitions read (the leader's watchers wake it on an append or a
        high-watermark move) and read again. A fetch answered at once would let the fetcher
        ask again without a pause, and MockClock time would never move."""
        assert api_key == ApiKey.FETCH
        request = codec.decode_request(api_key, version, body, 0)
        await trio.lowlevel.checkpoint()
        replica_id = fetch_api._replica_id(request)
        self.fetches.append((version, fetch_api._replica_epoch(request)))
        self.known_high_watermarks.extend(
            getattr(p, "high_watermark", HIGH_WATERMARK_UNKNOWN)
            for topic in request.topics
            for p in topic.partitions
        )
        # v13+ names topics by id: read them as the leader's names, answer by id.
        by_id = version >= 13
        names = {p.topic_id: p.topic for p in self.leader.partitions()} if by_id else {}
        ids = {name: topic_id for topic_id, name in names.items()}

        def topic_of(topic) -> str:
            return names.get(topic.topic_id, "?unknown") if by_id else topic.topic

        # The leader's fetch sessions (KIP-227), as the handler consults them.
        context = self.leader.fetch_sessions.new_context(
            version=version,
            session_id=request.session_id,
            epoch=request.session_epoch,
            privileged=replica_id >= 0,
            fetch_data=[
                (
                    (topic_of(topic), p.partition),
                    PartitionRequest(
                        fetch_offset=p.fetch_offset,
                        max_bytes=p.partition_max_bytes,
                        current_leader_epoch=p.current_leader_epoch,
                        last_fetched_epoch=p.last_fetched_epoch,
                        log_start_offset=p.log_start_offset,
                    ),
                )
                for topic in request.topics
                for p in topic.partitions
            ],
            to_forget=[
                (topic_of(topic), index)
                for topic in request.forgotten_topics_data
                for index in topic.partitions
            ],
            now_ms=trio_ms(),
        )
        self.contexts.append(context.kind)
        deadline = trio.current_time() + request.max_wait.total_seconds()
        known = {
            (topic_of(topic), p.partition): p.high_watermark
            for topic in request.topics
            for p in topic.partitions
            if getattr(p, "high_watermark", HIGH_WATERMARK_UNKNOWN) != HIGH_WATERMARK_UNKNOWN
        }
        record_progress = True
        while True:
            read, size, has_error, watched = self._read(
                context.partitions(), replica_id, record_progress, fetch_api._replica_epoch(request)
            )
            record_progress = False  # only the first read moves the follower's progress
            # KIP-1166, as the handler: a high watermark ahead of the one the request's
            # partition says it knows is news.
            stale = any(
                entry.get("high_watermark", -1) > known.get(key, HIGH_WATERMARK_UNKNOWN)
                for key, entry in read
            )
            if (
                size >= request.min_bytes
                or has_error
                or stale
                or not watched
                or trio.current_time() >= deadline
            ):
                break
            await self.leader.watchers.wait_any(watched, deadline, "Fetch")
        self._record_throttled(read)
        error, session_id, selected = context.respond(read, trio_ms())
        topics: list[dict] = []
        field = "topic_id" if by_id else "topic"
        for (topic, _), entry in selected:
            named = ids.get(topic) if by_id else topic
            if not topics or topics[-1][field] != named:
                topics.append({field: named, "partitions": []})
            topics[-1]["partitions"].append(entry)
        response = {
            "throttle_time_ms": 0,
            "error_code": error,
            "session_id": session_id,
            "responses": topics,
        }
        return bytearray(codec.encode_response(api_key, version, response)), 0

    def _read(self, partitions, replica_id: int, record_progress: bool, replica_epoch: int = -1):
        """([(key, response entry)], their bytes, whether any partition answered an error or
        a diverging epoch, the keys of the partitions read)."""
        read, size, has_error, watched = [], 0, False, []
        for key, wanted in partitions:
            topic, index = key
            partition, error = self.leader.leader_partition(
                topic, index, wanted.current_leader_epoch
            )
            if error != Error.NONE:
                has_error = True
                read.append((key, fetch_result(index, error)))
                continue
            entry = self.leader.read_records(
                partition,
                wanted.fetch_offset,
                replica_id=replica_id,
                replica_epoch=replica_epoch,
                last_fetched_epoch=wanted.last_fetched_epoch,
                max_bytes=wanted.max_bytes,
                min_one_batch=True,
                record_progress=record_progress,
                log_start_offset=wanted.log_start_offset,
            )
            if entry["error_code"] != Error.NONE or "diverging_epoch" in entry:
                has_error = True
            else:
                watched.append(partition.key)
                size += len(entry["records"])
            read.append((key, entry))
        return read, size, has_error, watched

    def _record_throttled(self, read) -> None:
        """The bytes of partitions under the leader's replication throttle (KIP-73), counted
        when the answer goes out, as the Fetch handler counts them."""
        for (topic, index), entry in read:
            records = entry.get("records")
            partition = self.leader.hosted_partition(topic, index)[0]
            if records and partition is not None and self.leader.leader_throttled(partition):
                self.leader.record_leader_throttled_bytes(len(records))

    async def request(self, request):
        assert request.__api_key__ == ApiKey.LIST_OFFSETS
        await trio.lowlevel.checkpoint()
        topics = []
        for topic in request.topics:
            partitions = []
            for wanted in topic.partitions:
                partition, error = self.leader.leader_partition(
                    topic.name, wanted.partition_index, wanted.current_leader_epoch
                )
                timestamp = offset = -1
                if error == Error.NONE:
                    timestamp, offset = self.leader.fetch_offset_for_timestamp(
                        partition, wanted.timestamp, 0, request.replica_id
                    )
                partitions.append(
                    {
                        "partition_index": wanted.partition_index,
                        "error_code": error,
                        "timestamp": timestamp,
                        "offset": offset,
                        "leader_epoch": -1,
                    }
                )
            topics.append({"name": topic.name, "partitions": partitions})
        encoded = codec.encode_response(
            ApiKey.LIST_OFFSETS, request.__version__, {"throttle_time_ms": 0, "topics": topics}
        )
        return codec.decode_response(ApiKey.LIST_OFFSETS, request.__version__, encoded, 0)

    async def aclose(self) -> None:
        pass


async def start_solo_leader(tmp_path: Path, nursery, broker_id: int, partitions) -> ReplicaManager:
    """A broker leading TOPIC's ``partitions`` alone (ISR [broker_id]), running in ``nursery``."""
    replicas = make_broker(tmp_path, broker_id)
    replicas.announced_topic_configs[TOPIC] = {"min.insync.replicas": "1"}
    await nursery.start(replicas.run)
    await replicas.apply_leader_and_isr(
        leader_and_isr(broker_id, 1, [broker_id], [broker_id], partitions=partitions)
    )
    return replicas


def fetch_context(replicas: ReplicaManager, version: int) -> RequestContext:
    """A consumer's Fetch request context on ``replicas``, for calling the handler in process."""
    return RequestContext(
        header=RequestHeader(ApiKey.FETCH, version, 1, "consumer"),
        listener_name="PLAINTEXT",
        config=replicas.config,
        cluster_id="test-cluster",
        supported={},
        replicas=replicas,
        controller=None,
        metrics=BrokerMetrics(),
    )


def fetch_by_name(
    offsets: dict[int, int],
    *,
    replica_id: int = -1,
    max_wait_ms: int = 0,
    session_id: int = 0,
    epoch: int = -1,
    isolation_level: int = 0,
    max_bytes: int = 50 << 20,
    leader_epoch: int = -1,
    last_fetched_epoch: int = -1,
    log_start_offset: int = -1,
):
    """A Fetch by topic name (v12) of TOPIC's partitions at ``offsets``, as the handler reads
    it (min_bytes 1): a consumer's by default, a follower's with ``replica_id``; in a session
    with ``session_id``/``epoch``. ``last_fetched_epoch`` is sent for a non-zero offset only."""
    return SimpleNamespace(
        replica_id=replica_id,
        max_wait=timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=session_id,
        session_epoch=epoch,
        forgotten_topics_data=(),
        rack_id="",
        topics=[
            SimpleNamespace(
                topic=TOPIC,
                partitions=[
                    SimpleNamespace(
                        partition=index,
                        current_leader_epoch=leader_epoch,
                        fetch_offset=offset,
                        last_fetched_epoch=last_fetched_epoch if offset else -1,
                        log_start_offset=log_start_offset,
                        partition_max_bytes=1 << 20,
                    )
                    for index, offset in offsets.items()
                ],
            )
        ]
        if offsets
        else [],
    )


def count_reads(replicas: ReplicaManager) -> list[int]:
    """The partition index of every read from now on: each read_records call, and each
    consumer's read that read_at_end answered (the handler asks it first, and read_records
    asks it first too: a partition is counted once per read)."""
    reads: list[int] = []
    read_records = replicas.read_records
    read_at_end = replicas.read_at_end
    inside = []

    def counted(partition, *args, **kwargs):
        reads.append(partition.index)
        inside.append(True)
        try:
            return read_records(partition, *args, **kwargs)
        finally:
            inside.pop()

    def counted_at_end(partition, *args, **kwargs):
        entry = read_at_end(partition, *args, **kwargs)
        if entry is not None and not inside:
            reads.append(partition.index)
        return entry

    replicas.read_records = counted  # type: ignore[method-assign]
    replicas.read_at_end = counted_at_end  # type: ignore[method-assign]
    return reads
