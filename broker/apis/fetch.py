"""Fetch: whole stored batches, as bytes; consumers up to the HW, followers up to the log end.

A fetch reads every partition it names, then, if fewer than min_bytes came back and max_wait
allows, parks until one of those partitions changes (an append, a high-watermark move, a
leadership change) or the deadline passes, and reads again. Reads start at the batch
containing the fetch offset (clients skip the leading records) and return whole batches; the
first partition with data may exceed max_bytes by one batch so a large batch always makes
progress, as Kafka does.

The handler decides (authorization, topic ids, when to wait); the replica manager's
read_records reads each partition (Kafka's readFromLog). A fetch from a follower
(replica_id >= 0) also tells the leader how far that follower got,
which is what moves the high watermark and grows the ISR; and from Fetch v12 it carries the
epoch of the follower's last batch, answered with a diverging epoch when the follower's log
has records the leader's history does not. A follower's fetch follows the inter-node rules
(apis/inter_node.py) and a consumer's needs READ on the topic when an authorizer is on; the
topics refused answer TOPIC_AUTHORIZATION_FAILED.

A parked fetch that read nothing and is woken reads again only the partitions whose
watchers were notified (``Watchers.wait_any``'s ``fired``); every other partition keeps the
entry of the read before, with its offsets (high watermark, last stable offset, log start)
taken again from the partition, and is not even looked up again (the partition object of the
read before is kept with its entry). Kafka's DelayedFetch.onComplete reads every partition again;
the answer is the same, since every change that makes an empty read non-empty or an error (an
append, a high-watermark or last-stable-offset move, a leadership or replica change) notifies
the partition's watchers, and the log start offset is taken again. This keeps the wake-up of
a consumer fetching many partitions, of which an append touches one, from reading them all
(with 64 partitions that was most of the wake's work, and it is on the end-to-end latency
path; the lookups and per-partition steps of the 63 kept ones were still 0.28 ms of a
wake's 0.35-0.42 ms in the latency row, issue 40). Left to the full read: a follower's
fetch while a leader replication throttle is set (a throttled partition's records are held
back without a notification when the throttle lifts) and a consumer's fetch that a replica
selector may redirect.

The same rule across the requests of an incremental fetch session (KIP-227): a consumer's
session remembers, per partition, its last read when that read found nothing (no records, no
error), with the partition it read and the partition's watcher generation then
(``Watchers.generation``, a count of the notifications under its key). The next incremental
fetch of that session answers such a partition from the note instead of reading it, when the
partition is the same object, nothing was notified under it since, the fetch offset is the
same (and the isolation level) and still at or past the log start offset (which moves
without a notification: a moved one past the fetch offset takes the full read, and its
OFFSET_OUT_OF_RANGE). Kafka's
IncrementalFetchContext reads every partition of the session at every fetch; a consumer of
1,000 idle partitions made each of its fetches read 1,000 partitions here too (about 15 us of
Python each), for an answer with none of them in it. A leader's read for a consumer (replica
id -1, no rack, no follower reads) is noted, and a follower's (no leader replication
throttle set). A follower's read also records its progress (its fetch time keeps it in the
ISR), so its note is used only while the follower is in the ISR, its fetch offset is the
leader's log end now, and its progress is what the fetch says (offset, log start, broker
epoch): its read would find nothing and only stamp its progress with this fetch's time, which
the note's use does, through the same ReplicaManager.record_follower_fetch, on the request's
first read. A follower behind the log end, or joining the ISR, is read in full. Why: at 2,000
partitions with 3 replicas on 3 brokers and no client, each broker spent about 13% of a core
reading its followers' 667 idle partitions every replica.fetch.wait.max.ms.

On a plaintext connection (``Connection.zero_copy``) a partition's read of 32 KiB or more
comes back as FileRecords, slices of the segment files, which the connection sends with
sendfile (Kafka's FileRecords and transferTo); the bytes on the wire are the same. A read
that is thrown away (a parked fetch reads again when woken) closes its slices at once.

A read_committed consumer (isolation_level 1) reads up to the last stable offset and gets the
aborted transactions of what it read; a parked fetch is woken by transaction markers as by
any append, since a marker is appended through the same log and notifies the same watchers.

Follower fetching (KIP-392), on a broker with ``replica.selector.class`` set, for a consumer's
fetch (replica id -1) of v11+, which carries the consumer's rack (``rack_id``, librdkafka's
``client.rack``): the leader of a partition asks the selector for a preferred read replica
(ReplicaManager.preferred_read_replica) and, when it names another broker, answers that
partition with ``preferred_read_replica`` and no records, at once (Kafka's fetchMessages
does not park such a fetch); and a follower serves the consumer's fetch of a partition it
replicates, up to its own high watermark (ReplicaManager.readable_partition, read_records).
Departure: Kafka's followers serve every v11+ consumer fetch whether or not a selector is
configured (FetchParams.fetchOnlyLeader); minibroker's do so only with a selector, so that a
cluster that did not opt in answers NOT_LEADER_OR_FOLLOWER from non-leaders exactly as
before. An older fetch version (no client metadata) is served by leaders only, as in Kafka.
"""

import logging

import trio

from minibroker.apis import RequestContext, Role, Senders, api
from minibroker.apis.authorization import topic_allowed
from minibroker.apis.inter_node import inter_node_allowed
from minibroker.protocol.errors import Error
from minibroker.protocol.fetch_response import FIRST_TOPIC_ID_VERSION
from minibroker.protocol.schemas import HIGH_WATERMARK_NOT_SUPPORTED as _UNSUPPORTED
from minibroker.protocol.versions import ApiKey
from minibroker.replication.fetch_session import PartitionKey, PartitionRequest
from minibroker.replication.partition import Partition
from minibroker.replication.replica_manager import fetch_result
from minibroker.security.authorizer.acls import Operation
from minibroker.storage.file_records import FileRecords

log = logging.getLogger("fetch")
_LEADER_MOVED = (Error.NOT_LEADER_OR_FOLLOWER, Error.FENCED_LEADER_EPOCH)
# What a follower hears about a partition whose LeaderAndIsr this broker is still applying.
# (UNKNOWN_TOPIC_ID: a follower fetching by topic id, v13+, of a topic this broker does not
# know yet.)
_NOT_YET_APPLIED = frozenset(
    {
        Error.UNKNOWN_TOPIC_OR_PARTITION,
        Error.UNKNOWN_TOPIC_ID,
        Error.NOT_LEADER_OR_FOLLOWER,
        Error.UNKNOWN_LEADER_EPOCH,
    }
)


class _Reader:
    """One pass over the fetch's partitions, tracking the response byte budget."""

    def __init__(self, ctx: RequestContext, request, *, record_progress: bool) -> None:
        self.ctx = ctx
        # Read once: the role accessor asserts, and the loops below run per partition.
        self.replicas = ctx.replica_manager
        self.request = request
        self.replica_id = _replica_id(request)
        # KIP-903: the follower's broker epoch (Fetch v15+), kept for AlterPartition v3.
        self.replica_epoch = _replica_epoch(request)
        # 1: read_committed (Fetch v4+), up to the last stable offset with the aborted
        # transactions of the range (ReplicaManager.read_records).
        self.isolation_level = request.isolation_level
        # Kafka's rules, refused with TOPIC_AUTHORIZATION_FAILED: a follower's fetch is judged
        # once by the inter-node rules (CLUSTER_ACTION, here also the listener), a consumer's
        # per topic (READ) when there is an authorizer.
        self.refuse_every_topic = self.replica_id >= 0 and not inter_node_allowed(ctx)
        self.check_topics = ctx.authorizer is not None and self.replica_id < 0
        # An unsecured consumer's fetch pays this one test per topic.
        self.check_access = self.refuse_every_topic or self.check_topics
        # Follower fetching (KIP-392): a consumer's fetch of v11+ (Kafka's clientMetadata)
        # on a broker with a replica selector may be served by a follower, and a leader may
        # send a consumer with a rack to a replica in its rack.
        self.follower_reads = (
            self.replica_id < 0 and ctx.version >= 11 and self.replicas.replica_selector is not None
        )
        self.client_rack = (getattr(request, "rack_id", "") or "") if self.follower_reads else ""
        # A consumer reading leaders: a partition read to its end is answered by
        # ReplicaManager.read_at_end (``read_partition``).
        self.consumer_of_leaders = self.replica_id < 0 and not self.follower_reads
        # A partition answered with a preferred read replica: Kafka answers such a fetch at
        # once, without waiting for min_bytes.
        self.redirected = False
        self.record_progress = record_progress
        # The broker's fetch.max.bytes caps what a client asks for (KIP-541).
        self.remaining = min(request.max_bytes, ctx.config.fetch_max_bytes)
        self.total_bytes = 0
        # The bytes of partitions under the leader's replication throttle (KIP-73).
        self.throttled_bytes = 0
        self.has_error = False
        # A partition whose high watermark the fetching replica does not know yet (Fetch
        # v18's HighWatermark, KIP-1166) is news: the fetch is answered without waiting.
        self.stale_high_watermark = False
        # Only the partitions this request names (not those a session remembers).
        self.known_high_watermarks: dict[PartitionKey, int] = {}
        self.not_yet_applied = False
        self.watched: list[tuple[str, int]] = []
        self.sent: list[tuple[str, int]] = []
        # Slices of segment files (plaintext connections only), sent with sendfile.
        self.zero_copy = ctx.connection.zero_copy
        self.files: list[FileRecords] = []
        # A woken fetch's partitions and entries of the read before (by request key) that
        # may be kept for the partitions not in ``fired`` (handle, _reusable).
        self.previous: dict[PartitionKey, tuple[Partition, dict]] | None = None
        self.fired: set = set()
        # An incremental session's partitions (CachedPartition.kept: the notes of the
        # module's notes), when this fetch may answer from them; and what each full read
        # here saw, to note when the session answers: key -> (partition, generation).
        self.session_partitions: dict | None = None
        self.generations: dict[PartitionKey, tuple] = {}
        self.watchers = self.replicas.watchers

    def read_topic(self, topic, uses_topic_ids: bool, partitions) -> list[tuple]:
        """Read one topic's run of (key, PartitionRequest): [(key, name, topic id, entry,
        partition)], the partition None for an error or a refusal (what _reusable keeps)."""
        if uses_topic_ids:  # v13+; the zero id reads as None, and is no topic's
            topic_id = topic
            known = self.replicas.metadata.topic_by_id(topic_id) if topic_id else None
            name = known.name if known is not None else None
            missing = Error.UNKNOWN_TOPIC_ID
        else:
            topic_id = None
            name = topic
            missing = Error.UNKNOWN_TOPIC_OR_PARTITION
        if (
            self.check_access
            and name is not None
            and (self.refuse_every_topic or not topic_allowed(self.ctx, Operation.READ, name))
        ):
            self.has_error = True
            return [
                (key, name, topic_id, fetch_result(key[1], Error.TOPIC_AUTHORIZATION_FAILED), None)
                for key, _ in partitions
            ]
        read: list[tuple] = []
        session_partitions = self.session_partitions
        previous, fired = self.previous, self.fired
        for key, fetch_partition in partitions:
            if session_partitions is not None and self._still_idle(
                session_partitions.get(key), fetch_partition
            ):
                continue
            if (
                previous is not None
                and (kept := previous.get(key)) is not None
                and kept[0].key not in fired
            ):
                # A woken fetch's partition not notified since its empty read: led (or
                # followed) here as it was, at the client's epoch (every change to that
                # notifies: the module's notes), so neither looked up nor read again.
                read.append((key, name, topic_id, self._kept(key, *kept), kept[0]))
                continue
            index = key[1]
            if self.follower_reads:
                partition, error = self.replicas.readable_partition(
                    name, index, fetch_partition.current_leader_epoch
                )
            else:
                partition, error = self.replicas.leader_partition(
                    name, index, fetch_partition.current_leader_epoch
                )
            if error == Error.UNKNOWN_TOPIC_OR_PARTITION:
                error = missing
            if error != Error.NONE:
                self.has_error = True
                self.not_yet_applied |= error in _NOT_YET_APPLIED
                entry = fetch_result(index, error, partition)
            else:
                entry = self.read_partition(key, partition, fetch_partition)
            read.append((key, name, topic_id, entry, partition if error == Error.NONE else None))
        return read

    def _still_idle(self, cached, fetch_partition: PartitionRequest) -> bool:
        """Whether an incremental session's partition is as its note says, and as the
        session last answered it, so that it has nothing to say in this response (the
        module's notes): it is then watched and not read, looked up or answered."""
        # (A request of the same session may have forgotten the partition while this one
        # was parked.)
        note = cached.kept if cached is not None else None
        if note is None:
            return False
        partition = note[0]
        if (
            note[1] != self.watchers.generation(partition.key)
            or note[2] != fetch_partition.fetch_offset
            or note[3] != self.isolation_level
            or note[4]["high_watermark"] != cached.high_watermark
            or self.replicas.log_start_offset(partition) != cached.local_log_start_offset
            or fetch_partition.fetch_offset < cached.local_log_start_offset
            or fetch_partition.high_watermark != _UNSUPPORTED
        ):
            return False
        if self.replica_id >= 0 and not self._follower_still_caught_up(partition, fetch_partition):
            return False
        self.watched.append(partition.key)
        return True

    def _follower_still_caught_up(self, partition, fetch_partition: PartitionRequest) -> bool:
        """For a follower's idle partition (the module's notes): whether the replica manager
        finds it caught up and in the ISR, as this fetch says, stamping its progress with
        this fetch's time on the request's first read."""
        return self.replicas.idle_follower_fetch(
            partition,
            self.replica_id,
            fetch_partition.fetch_offset,
            fetch_partition.log_start_offset,
            self.replica_epoch,
            record_progress=self.record_progress,
        )

    def read_partition(self, key, partition, fetch_partition: PartitionRequest) -> dict:
        session_partitions = self.session_partitions
        if (
            session_partitions is not None
            and self.replica_id < 0  # a follower's read records its progress
            and (cached := session_partitions.get(key)) is not None
            and (kept := cached.kept) is not None
            and kept[0] is partition
            and kept[1] == self.watchers.generation(partition.key)
            and kept[2] == fetch_partition.fetch_offset
            and kept[3] == self.isolation_level
            and fetch_partition.fetch_offset >= self.replicas.log_start_offset(partition)
        ):
            return self._kept(key, partition, dict(kept[4]))
        if session_partitions is not None:
            self.generations[key] = (partition, self.watchers.generation(partition.key))
        if self.client_rack and partition.is_leader:
            preferred = self.replicas.preferred_read_replica(
                partition, self.client_rack, fetch_partition.fetch_offset, self.ctx.listener_name
            )
            if preferred is not None:
                # Kafka's readFromLog skips the read and answers the leader's offsets.
                self.redirected = True
                redirect = fetch_result(key[1], Error.NONE, partition)
                redirect["preferred_read_replica"] = preferred
                return redirect
        if self.consumer_of_leaders and (
            entry := self.replicas.read_at_end(
                partition, fetch_partition.fetch_offset, self.isolation_level
            )
        ):
            # (read_records' own first step, without its call and this method's tail: an
            # empty entry sends nothing and counts no byte.)
            known = self.known_high_watermarks
            if known and known.get(key, _UNSUPPORTED) < entry["high_watermark"]:
                self.stale_high_watermark = True
            self.watched.append(partition.key)
            return entry
        entry = self.replicas.read_records(
            partition,
            fetch_partition.fetch_offset,
            replica_id=self.replica_id,
            replica_epoch=self.replica_epoch,
            last_fetched_epoch=fetch_partition.last_fetched_epoch,
            max_bytes=min(fetch_partition.max_bytes, max(self.remaining, 0)),
            min_one_batch=self.total_bytes == 0,
            record_progress=self.record_progress,
            isolation_level=self.isolation_level,
            zero_copy=self.zero_copy,
            log_start_offset=fetch_partition.log_start_offset,
        )
        if entry["error_code"] != Error.NONE or "diverging_epoch" in entry:
            self.has_error = True
            return entry
        if self.replica_id >= 0 and entry["records"] and self.replicas.leader_throttled(partition):
            # KIP-73: a throttled partition's bytes sent to any follower count against the
            # leader quota (read_records held them back if it was exceeded).
            self.throttled_bytes += len(entry["records"])
        known = self.known_high_watermarks  # (empty but for Fetch v18: no key hashed)
        if known and known.get(key, _UNSUPPORTED) < entry["high_watermark"]:
            self.stale_high_watermark = True
        self.watched.append(partition.key)
        records = entry["records"]
        if isinstance(records, FileRecords):
            self.files.append(records)
        size = len(records)
        self.total_bytes += size
        self.remaining -= size
        self.sent.append((partition.topic, size))
        return entry

    def _kept(self, key, partition, entry: dict) -> dict:
        """The read before's empty entry of a partition not notified since, with its offsets
        as they are now (read_records would give the same entry)."""
        entry["high_watermark"] = partition.high_watermark
        entry["last_stable_offset"] = partition.last_stable_offset
        entry["log_start_offset"] = self.replicas.log_start_offset(partition)
        known = self.known_high_watermarks
        if known and known.get(key, _UNSUPPORTED) < entry["high_watermark"]:
            self.stale_high_watermark = True
        self.watched.append(partition.key)
        return entry

    def release(self) -> None:
        """Close the file slices of a read that will not be sent (a parked fetch reads
        again when it wakes)."""
        for records in self.files:
            records.close()
        self.files.clear()


def _replica_id(request) -> int:
    """The fetching replica: Fetch v15+ carries it in ReplicaState (KIP-903)."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return state.replica_id
    return getattr(request, "replica_id", -1)


def _replica_epoch(request) -> int:
    """The fetching replica's broker epoch: Fetch v15+'s ReplicaState.ReplicaEpoch (KIP-903);
    -1 before v15 (the epoch check is then skipped for it, as Kafka skips it)."""
    state = getattr(request, "replica_state", None)
    return -1 if state is None else state.replica_epoch


def _fetch_data(request, uses_topic_ids: bool) -> list[tuple[PartitionKey, PartitionRequest]]:
    """The request's partitions as (key, PartitionRequest), in request order."""
    data = []
    for topic in request.topics:
        name = topic.topic_id if uses_topic_ids else topic.topic
        partitions = topic.partitions
        if not partitions:
            continue
        # Which fields this version has, looked up once per topic, not a getattr per field
        # and partition (current_leader_epoch v9+, last_fetched_epoch v12+, log_start_offset
        # v5+, high_watermark v18).
        first = partitions[0]
        epoch, last, start, hw = (
            hasattr(first, field)
            for field in (
                "current_leader_epoch",
                "last_fetched_epoch",
                "log_start_offset",
                "high_watermark",
            )
        )
        data += [
            (
                (name, p.partition),
                PartitionRequest(
                    p.fetch_offset,
                    p.partition_max_bytes,
                    p.current_leader_epoch if epoch else -1,
                    p.last_fetched_epoch if last else -1,
                    p.log_start_offset if start else -1,
                    p.high_watermark if hw else _UNSUPPORTED,
                ),
            )
            for p in partitions
        ]
    return data


def _to_forget(request, uses_topic_ids: bool) -> list[PartitionKey]:
    forgotten = getattr(request, "forgotten_topics_data", None) or ()
    return [
        (topic.topic_id if uses_topic_ids else topic.topic, index)
        for topic in forgotten
        for index in topic.partitions
    ]


def _runs(partitions):
    """Consecutive partitions of the same topic, as Kafka groups a response's topics."""
    run: list = []
    for item in partitions:
        # Identity first: a request's topic id is one UUID object for all its partitions,
        # and UUID's == is Python code.
        if run and (topic := run[-1][0][0]) is not item[0][0] and topic != item[0][0]:
            yield run[0][0][0], run
            run = []
        run.append(item)
    if run:
        yield run[0][0][0], run


def _read_all(
    ctx: RequestContext,
    request,
    partitions,
    uses_topic_ids: bool,
    known_hws,
    *,
    record_progress,
    previous: dict[PartitionKey, tuple[Partition, dict]] | None = None,
    fired: set | None = None,
    session_partitions: dict | None = None,
    generations: dict | None = None,
):
    reader = _Reader(ctx, request, record_progress=record_progress)
    reader.known_high_watermarks = known_hws
    if previous is not None and fired is not None:
        reader.previous, reader.fired = previous, fired
    if (
        session_partitions is not None
        and generations is not None
        and (
            (reader.replica_id < 0 and not reader.follower_reads)
            or (reader.replica_id >= 0 and not ctx.replica_manager.leader_quota.bounded)
        )
    ):
        reader.session_partitions, reader.generations = session_partitions, generations
    read = []
    for topic, run in _runs(partitions):
        read.extend(reader.read_topic(topic, uses_topic_ids, run))
    return read, reader


def _note_idle(
    session_partitions: dict, generations: dict, read: list[tuple], isolation_level: int
) -> None:
    """Note, in an incremental session, each partition this fetch read in full and found
    idle, for the session's next fetches (the module's notes); forget the note of any other
    read (records, an error)."""
    for key, _, _, entry, _ in read:
        cached = session_partitions.get(key)
        if cached is None:
            continue
        records = entry.get("records")
        if not (
            entry["error_code"] == Error.NONE
            and type(records) is bytes
            and not records
            and "diverging_epoch" not in entry
            and entry.get("preferred_read_replica", -1) == -1
        ):
            cached.kept = None
            continue
        seen = generations.get(key)
        if seen is not None:  # read in full (otherwise answered from its note, still true)
            cached.kept = (
                seen[0],
                seen[1],
                cached.request.fetch_offset,
                isolation_level,
                dict(entry),
            )


def _reusable(
    ctx: RequestContext, reader: _Reader, read: list[tuple]
) -> dict[PartitionKey, tuple[Partition, dict]] | None:
    """The entries a woken fetch may keep for its partitions not notified meanwhile (see the
    module's notes): those of a read that found nothing at all, unless a throttle or a
    replica selector could change a partition's answer without a notification."""
    if reader.total_bytes or reader.client_rack:
        return None
    if reader.replica_id >= 0 and ctx.replica_manager.leader_quota.bounded:
        return None
    return {
        key: (partition, entry) for key, _, _, entry, partition in read if partition is not None
    }


def _response(error: Error, session_id: int, read: list[tuple], selected) -> dict:
    """The response body: the selected partitions, grouped into consecutive topics."""
    # One name per topic, not per partition (a topic id key hashes in Python: UUID.__hash__);
    # identity first for the same reason (a request's topic id is one object).
    names: dict = {}
    last_key_topic: object = object()
    for key, name, topic_id, _, _ in read:
        if key[0] is not last_key_topic:
            names[key[0]] = (name, topic_id)
            last_key_topic = key[0]
    responses: list[dict] = []
    last_key_topic = object()
    partitions: list = []
    for key, entry in selected:
        if key[0] is not last_key_topic and key[0] != last_key_topic:
            name, topic_id = names[key[0]]
            partitions = []
            responses.append({"topic": name, "topic_id": topic_id, "partitions": partitions})
            last_key_topic = key[0]
        partitions.append(entry)
    return {"error_code": error, "session_id": session_id, "responses": responses}


def _add_current_leaders(ctx: RequestContext, response: dict) -> None:
    """Fetch v16+ (KIP-951): a partition answered NOT_LEADER_OR_FOLLOWER or
    FENCED_LEADER_EPOCH names its current leader and epoch, and the response carries that
    leader's endpoint on this listener, so that the client goes there without a Metadata
    round trip (Kafka's KafkaApis.handleFetchRequest)."""
    metadata = ctx.replica_manager.metadata
    leaders = set()
    for topic in response["responses"]:
        known = metadata.topic(topic["topic"]) if topic["topic"] else None
        for entry in topic["partitions"]:
            if entry["error_code"] not in _LEADER_MOVED or known is None:
                continue
            state = known.partitions.get(entry["partition_index"])
            if state is None:
                continue
            entry["current_leader"] = {
                "leader_id": state.leader,
                "leader_epoch": state.leader_epoch,
            }
            if state.leader >= 0:
                leaders.add(state.leader)
    if leaders:
        response["node_endpoints"] = [
            {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
            for b in metadata.endpoints_for(ctx.listener_name)
            if b.node_id in leaders
        ]


def _error_response(request, error: Error) -> dict:
    return {
        "error_code": error,
        "session_id": 0,
        "responses": [
            {
                "topic": getattr(topic, "topic", None),
                "topic_id": getattr(topic, "topic_id", None),
                "partitions": [
                    fetch_result(p.partition, error, records=None) for p in topic.partitions
                ],
            }
            for topic in request.topics
        ],
    }


# A follower's fetch (replica id >= 0) is the node form: _Reader refuses it every topic
# unless the inter-node rules allow it.
@api(
    ApiKey.FETCH,
    versions=(4, 18),
    roles=Role.BROKER,
    senders=Senders.CLIENTS_AND_NODES,
    error_response=_error_response,
)
async def handle(ctx: RequestContext, request) -> dict:
    uses_topic_ids = ctx.version >= FIRST_TOPIC_ID_VERSION
    replica_id = _replica_id(request)
    sessions = ctx.replica_manager.fetch_sessions
    fetch_data = _fetch_data(request, uses_topic_ids)
    known_hws = {key: p.high_watermark for key, p in fetch_data if p.high_watermark != _UNSUPPORTED}
    context = sessions.new_context(
        version=ctx.version,
        session_id=getattr(request, "session_id", 0),
        epoch=getattr(request, "session_epoch", -1),
        privileged=replica_id >= 0,
        fetch_data=fetch_data,
        to_forget=_to_forget(request, uses_topic_ids),
        now_ms=_now_ms(),
    )
    if context.kind == "error":
        log.debug("fetch session error %s for session %s", context.error.name, request.session_id)
        return {"error_code": context.error, "session_id": 0, "responses": ()}
    partitions = context.partitions()
    deadline = trio.current_time() + request.max_wait.total_seconds()
    first = True
    waited_for_controller = False
    previous: dict[PartitionKey, tuple[Partition, dict]] | None = None
    fired: set = set()
    # An incremental session's notes of its idle partitions (the module's notes).
    session = context.session if context.kind == "incremental" else None
    session_partitions = session.partitions if session is not None else None
    generations: dict[PartitionKey, tuple] = {}
    while True:
        read, reader = _read_all(
            ctx,
            request,
            partitions,
            uses_topic_ids,
            known_hws,
            record_progress=first,
            previous=previous,
            fired=fired,
            session_partitions=session_partitions,
            generations=generations,
        )
        if (
            reader.replica_id >= 0
            and reader.not_yet_applied
            and not waited_for_controller
            and ctx.replica_manager.applying_controller_request
        ):
            # The controller tells every replica at once, so a follower's fetch can overtake
            # this broker's LeaderAndIsr for the same partitions, which is applied partition
            # by partition. Answering an error would send those partitions into the
            # follower's replica.fetch.backoff.ms (a second by default): wait, within the
            # fetch's max_wait, and read again.
            waited_for_controller = True
            reader.release()
            # Notifications while waiting here are not collected: read everything again.
            previous = None
            with trio.move_on_at(deadline):
                await ctx.replica_manager.controller_requests_applied()
            continue
        first = False
        done = (
            reader.total_bytes >= request.min_bytes
            or reader.has_error
            or reader.redirected
            or reader.stale_high_watermark
            or not reader.watched
            or trio.current_time() >= deadline
        )
        if done:
            metrics = ctx.replica_manager.metrics
            counter = metrics.replication_bytes_out if reader.replica_id >= 0 else metrics.bytes_out
            for topic, size in reader.sent:
                if size:
                    metrics.child(counter, topic).inc(size)
            if reader.throttled_bytes:
                ctx.replica_manager.record_leader_throttled_bytes(reader.throttled_bytes)
            error, session_id, selected = context.respond(
                [(key, entry) for key, _, _, entry, _ in read], _now_ms()
            )
            if reader.session_partitions is not None and error == Error.NONE:
                _note_idle(reader.session_partitions, generations, read, reader.isolation_level)
            if context.kind != "sessionless":
                log.debug(
                    "%s fetch session %d: %d of %d partitions answered",
                    context.kind,
                    session_id,
                    len(selected),
                    len(read),
                )
            response = _response(error, session_id, read, selected)
            if ctx.version >= 16:
                _add_current_leaders(ctx, response)
            return response
        reader.release()
        previous = _reusable(ctx, reader, read)
        fired = set()
        await ctx.replica_manager.watchers.wait_any(reader.watched, deadline, "Fetch", fired)


def _now_ms() -> int:
    return int(trio.current_time() * 1000)
