"""ShareFetch (78) and ShareAcknowledge (79): share groups' data path (KIP-932).

Kafka's KafkaApis.handleShareFetchRequest and handleShareAcknowledgeRequest. The handler
decides what a request may do (READ on the GROUP, then READ on each TOPIC: refused topics
answer TOPIC_AUTHORIZATION_FAILED; topic ids this cluster does not know UNKNOWN_TOPIC_ID; a
partition not led here NOT_LEADER_OR_FOLLOWER with its current leader and that leader's
endpoint), applies the share session rules (replication/share_session.py: the whole request
answered SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH or SHARE_SESSION_LIMIT_REACHED),
and hands each partition to the SharePartitionManager, which acquires, acknowledges and
persists. Acknowledgements ride on ShareFetch (applied before fetching, answered in
AcknowledgeErrorCode) and on ShareAcknowledge. A ShareFetch's acknowledgements of a partition
it reads are applied with that partition's first acquisition, and what both changed is
persisted in one state write (Kafka writes the acknowledgements and not the acquisitions;
minibroker writes the acquisitions' delivery counts too, in the same write); those of a
partition it does not read (session closing, the record budget spent) are applied on their
own.

A ShareFetch that acquires nothing waits up to MaxWaitMs (Kafka's DelayedShareFetch) for an
append to one of its partitions or records released there, then tries again. The records are
the stored batches as the log holds them (never decoded), trimmed to those that hold acquired
offsets, with the AcquiredRecords ranges; they are read as bytes (not sent with sendfile as
Fetch's large reads are: a share fetch's reads are bounded by MaxRecords).

Departures: a member the group coordinator says is not in the group (``is_member`` False) is
answered UNKNOWN_MEMBER_ID as a whole; until ShareGroupHeartbeat is served every member is
allowed. ``BatchSize`` is not used to split AcquiredRecords (one range per run of offsets
with one delivery count).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import group_allowed, topic_allowed
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.replication.share_partition import Acknowledgement, AcknowledgeType
from minibroker.replication.share_partition_manager import ShareFetchResult, share_watch_key
from minibroker.security.authorizer.acls import Operation

if TYPE_CHECKING:
    from minibroker.replication.share_partition_manager import SharePartitionManager

log = logging.getLogger("share")

_RECORD_LIMIT = 1  # ShareAcquireMode (v2): 0 batch_optimized, 1 record_limit


def _leader(ctx: RequestContext, topic: str | None, index: int) -> dict:
    known = ctx.replica_manager.metadata.topic(topic) if topic else None
    state = known.partitions.get(index) if known is not None else None
    if state is None:
        return {"leader_id": -1, "leader_epoch": -1}
    return {"leader_id": state.leader, "leader_epoch": state.leader_epoch}


def _node_endpoints(ctx: RequestContext, responses: list[dict]) -> list[dict]:
    leaders = {
        p["current_leader"]["leader_id"]
        for topic in responses
        for p in topic["partitions"]
        if p["error_code"] == Error.NOT_LEADER_OR_FOLLOWER and p["current_leader"]["leader_id"] >= 0
    }
    if not leaders:
        return []
    return [
        {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": None}
        for b in ctx.replica_manager.metadata.endpoints_for(ctx.listener_name)
        if b.node_id in leaders
    ]


def _acknowledgements(batches) -> list[Acknowledgement] | None:
    """The request's AcknowledgementBatches; None when malformed (INVALID_REQUEST)."""
    acks: list[Acknowledgement] = []
    for batch in batches:
        first, last, types = batch.first_offset, batch.last_offset, batch.acknowledge_types
        if first > last or not types or any(t < 0 or t > AcknowledgeType.RENEW for t in types):
            return None
        if len(types) == 1:
            acks.append(Acknowledgement(first, last, AcknowledgeType(types[0])))
        elif len(types) == last - first + 1:
            # One type per offset: runs of one type become one range (the share partition
            # works per range, not per record).
            run_first = first
            for offset in range(first + 1, last + 2):
                if offset > last or types[offset - first] != types[run_first - first]:
                    kind = AcknowledgeType(types[run_first - first])
                    acks.append(Acknowledgement(run_first, offset - 1, kind))
                    run_first = offset
        else:
            return None
    return acks


class _Resolver:
    """Topic ids to names, with the topic's READ check done once per topic."""

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self.names: dict[object, tuple[str | None, Error]] = {}

    def topic(self, topic_id) -> tuple[str | None, Error]:
        found = self.names.get(topic_id)
        if found is None:
            known = self.ctx.replica_manager.metadata.topic_by_id(topic_id) if topic_id else None
            if known is None:
                found = (None, Error.UNKNOWN_TOPIC_ID)
            elif self.ctx.authorizer is not None and not topic_allowed(
                self.ctx, Operation.READ, known.name
            ):
                found = (known.name, Error.TOPIC_AUTHORIZATION_FAILED)
            else:
                found = (known.name, Error.NONE)
            self.names[topic_id] = found
        return found

    def partition(self, topic_id, index: int):
        """(topic name, Partition led here or None, error)."""
        name, error = self.topic(topic_id)
        if error is not Error.NONE:
            return name, None, error
        partition, error = self.ctx.replica_manager.leader_partition(name, index)
        if error is not Error.NONE:
            return name, None, error
        return name, partition, Error.NONE


def _lock_ms(ctx: RequestContext, group_id: str) -> int:
    """The AcquisitionLockTimeoutMs answered: the group's share.record.lock.duration.ms, else
    the broker's (Kafka 4.4's KafkaApis, recordLockDurationMsOrDefault)."""
    default = ctx.config.group_share_record_lock_duration_ms
    value = ctx.replica_manager.group_configs.get(group_id, {}).get("share.record.lock.duration.ms")
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _top_level(ctx: RequestContext, error: Error, lock_ms: int) -> dict:
    return {
        "error_code": error,
        "acquisition_lock_timeout": lock_ms,
        "responses": [],
        "node_endpoints": [],
    }


def _share_fetch_error(request, error: Error) -> dict:
    return {"error_code": error, "responses": [], "node_endpoints": []}


def _group_check(ctx: RequestContext, request) -> Error:
    group_id, member_id = request.group_id, request.member_id
    if not group_id or not member_id:
        return Error.INVALID_REQUEST
    if ctx.authorizer is not None and not group_allowed(ctx, Operation.READ, group_id):
        return Error.GROUP_AUTHORIZATION_FAILED
    # A session's final request (epoch -1) is taken from a member that has just left: librdkafka
    # leaves the group (ShareGroupHeartbeat -1) before it closes its share session.
    if request.share_session_epoch != -1 and not ctx.share_partition_manager.member_allowed(
        group_id, member_id
    ):
        return Error.UNKNOWN_MEMBER_ID
    return Error.NONE


@api(ApiKey.SHARE_FETCH, versions=(1, 2), roles=Role.BROKER, error_response=_share_fetch_error)
async def handle_share_fetch(ctx: RequestContext, request) -> dict:
    manager: SharePartitionManager = ctx.share_partition_manager
    lock_ms = _lock_ms(ctx, request.group_id)
    error = _group_check(ctx, request)
    if error is not Error.NONE:
        return _top_level(ctx, error, lock_ms)
    group_id, member_id = request.group_id, request.member_id
    resolver = _Resolver(ctx)
    requested: list[tuple[object, int]] = []
    acks: dict[tuple[object, int], list] = {}
    for topic in request.topics:
        for p in topic.partitions:
            requested.append((topic.topic_id, p.partition_index))
            if p.acknowledgement_batches:
                acks[(topic.topic_id, p.partition_index)] = list(p.acknowledgement_batches)
    forgotten = [
        (topic.topic_id, index)
        for topic in request.forgotten_topics_data
        for index in topic.partitions
    ]
    outcome = manager.sessions.fetch(
        group_id,
        member_id,
        request.share_session_epoch,
        requested,
        forgotten,
        has_acknowledgements=bool(acks),
        connection=ctx.connection,
    )
    if outcome.error is not Error.NONE:
        log.debug("share session error %s for %s/%s", outcome.error.name, group_id, member_id)
        return _top_level(ctx, outcome.error, lock_ms)
    entries: dict[tuple[object, int], dict] = {}

    def entry(key: tuple[object, int], name) -> dict:
        if key not in entries:
            entries[key] = {
                "partition_index": key[1],
                "error_code": Error.NONE,
                "acknowledge_error_code": Error.NONE,
                "current_leader": _leader(ctx, name, key[1]),
                # Not null: Records is nullable in ShareFetch v0 only (ShareFetchResponse.json's
                # nullableVersions "0"); librdkafka 2.16 refuses a v1 answer with a null one.
                "records": b"",
                "acquired_records": [],
            }
        return entries[key]

    # Acknowledgements first (Kafka acknowledges, then fetches). Those of a partition the
    # fetch reads go with its first acquisition, in one state write (the manager's acquire);
    # the others are applied here, before or after the fetch as they come.
    pending: dict[tuple[object, int], list[Acknowledgement]] = {}
    for key, batches in acks.items():
        parsed = _acknowledgements(batches)
        if parsed is None:
            entry(key, resolver.partition(*key)[0])["acknowledge_error_code"] = (
                Error.INVALID_REQUEST
            )
        else:
            pending[key] = parsed
    if outcome.closed:
        await _acknowledge(manager, group_id, member_id, resolver, pending, entry)
        await manager.session_closed(group_id, member_id)
    else:
        if request.share_session_epoch == 0:
            # A full share session's answer names every partition it holds, records or not
            # (Kafka's ShareSessionContext); later ones only those with something to say.
            for key in outcome.partitions:
                entry(key, resolver.topic(key[0])[0])
        await _fetch(ctx, manager, request, resolver, outcome.partitions, entry, pending)
    by_topic: dict[object, list[dict]] = {}
    for (topic_id, _), data in entries.items():
        by_topic.setdefault(topic_id, []).append(data)
    responses = [{"topic_id": t, "partitions": parts} for t, parts in by_topic.items()]
    return {
        "error_code": Error.NONE,
        "acquisition_lock_timeout": lock_ms,
        "responses": responses,
        "node_endpoints": _node_endpoints(ctx, responses),
    }


async def _acknowledge(manager, group_id, member_id, resolver: _Resolver, pending, entry) -> None:
    """Apply (and persist) the acknowledgements of ``pending`` partitions, emptying it."""
    for key, parsed in list(pending.items()):
        name, partition, error = resolver.partition(*key)
        if error is Error.NONE:
            error = await manager.acknowledge(group_id, member_id, partition, parsed)
        entry(key, name)["acknowledge_error_code"] = error
    pending.clear()


async def _fetch(ctx, manager, request, resolver: _Resolver, partitions, entry, pending) -> None:
    """Acquire from the session's partitions; park while nothing could be acquired. The
    acknowledgements of ``pending`` go with their partition's first acquisition; those of
    partitions not read are applied on their own after the first pass."""
    group_id, member_id = request.group_id, request.member_id
    batch_optimized = getattr(request, "share_acquire_mode", 0) != _RECORD_LIMIT
    max_records = request.max_records if request.max_records > 0 else 500
    deadline = trio.current_time() + max(request.max_wait.total_seconds(), 0)
    while True:
        remaining_records = max_records
        remaining_bytes = min(request.max_bytes, ctx.config.fetch_max_bytes)
        watched: list = []
        acquired_any = False
        for key in partitions:
            name, partition, error = resolver.partition(*key)
            if error is not Error.NONE:
                entry(key, name)["error_code"] = error
                continue
            if remaining_records <= 0 or remaining_bytes <= 0:
                break
            carried = pending.pop(key, None)
            result: ShareFetchResult = await manager.acquire(
                group_id,
                member_id,
                partition,
                max_records=remaining_records,
                max_bytes=remaining_bytes,
                batch_optimized=batch_optimized,
                acknowledgements=carried,
            )
            if carried is not None:
                entry(key, name)["acknowledge_error_code"] = result.acknowledge_error
            if result.error is not Error.NONE:
                entry(key, name)["error_code"] = result.error
                continue
            watched.append(partition.key)
            watched.append(share_watch_key(group_id, partition.topic, partition.index))
            if not result.acquired:
                continue
            acquired_any = True
            data = entry(key, name)
            data["records"] = result.records
            data["acquired_records"] = [
                {
                    "first_offset": r.first_offset,
                    "last_offset": r.last_offset,
                    "delivery_count": r.delivery_count,
                }
                for r in result.acquired
            ]
            remaining_records -= sum(r.last_offset - r.first_offset + 1 for r in result.acquired)
            remaining_bytes -= len(result.records)
        if pending:
            await _acknowledge(manager, group_id, member_id, resolver, pending, entry)
        if acquired_any or not watched or trio.current_time() >= deadline:
            return
        await ctx.replica_manager.watchers.wait_any(watched, deadline, "ShareFetch")


def _share_ack_error(request, error: Error) -> dict:
    return {"error_code": error, "responses": [], "node_endpoints": []}


@api(ApiKey.SHARE_ACKNOWLEDGE, versions=(1, 2), roles=Role.BROKER, error_response=_share_ack_error)
async def handle_share_acknowledge(ctx: RequestContext, request) -> dict:
    manager: SharePartitionManager = ctx.share_partition_manager
    lock_ms = _lock_ms(ctx, request.group_id)
    error = _group_check(ctx, request)
    if error is not Error.NONE:
        return _top_level(ctx, error, lock_ms)
    group_id, member_id = request.group_id, request.member_id
    outcome = manager.sessions.acknowledge(group_id, member_id, request.share_session_epoch)
    if outcome.error is not Error.NONE:
        return _top_level(ctx, outcome.error, lock_ms)
    resolver = _Resolver(ctx)
    responses = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            name, partition, error = resolver.partition(topic.topic_id, p.partition_index)
            if error is Error.NONE:
                parsed = _acknowledgements(p.acknowledgement_batches)
                if parsed is None:
                    error = Error.INVALID_REQUEST
                else:
                    error = await manager.acknowledge(group_id, member_id, partition, parsed)
            parts.append(
                {
                    "partition_index": p.partition_index,
                    "error_code": error,
                    "current_leader": _leader(ctx, name, p.partition_index),
                }
            )
        responses.append({"topic_id": topic.topic_id, "partitions": parts})
    if outcome.closed:
        await manager.session_closed(group_id, member_id)
    return {
        "error_code": Error.NONE,
        "acquisition_lock_timeout": lock_ms,
        "responses": responses,
        "node_endpoints": _node_endpoints(ctx, responses),
    }
