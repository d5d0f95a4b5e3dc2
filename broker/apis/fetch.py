"""Fetch: whole stored batches, as bytes, up to the high watermark.

A fetch reads every partition it names, then, if fewer than min_bytes came back and
max_wait allows, parks until an append to one of those partitions (or the deadline) and reads
again. Reads start at the batch containing the fetch offset (clients skip the leading records)
and return whole batches; the first partition with data may exceed max_bytes by one batch so
that a large batch can always make progress, as Kafka does.
"""

import trio

from protocol.errors import Error
from storage.errors import StorageError

from . import RequestContext

# No fetch sessions are created: session id 0 tells clients to send full requests.
_NO_SESSION = 0


def _check_leader_epoch(partition, requested_epoch: int) -> Error:
    if requested_epoch == -1 or requested_epoch == partition.leader_epoch:
        return Error.NONE
    if requested_epoch > partition.leader_epoch:
        return Error.UNKNOWN_LEADER_EPOCH
    return Error.FENCED_LEADER_EPOCH


def _partition_entry(index: int, error: Error, partition=None, records: bytes = b"") -> dict:
    entry = {
        "partition_index": index,
        "error_code": error,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": records,
    }
    if partition is not None:
        entry["high_watermark"] = partition.high_watermark
        entry["last_stable_offset"] = partition.last_stable_offset
        entry["log_start_offset"] = partition.log.log_start_offset
    return entry


class _Reader:
    """One pass over the request's partitions, tracking the response byte budget."""

    def __init__(self, ctx: RequestContext, request) -> None:
        self.ctx = ctx
        self.request = request
        self.remaining = request.max_bytes
        self.total_bytes = 0
        self.has_error = False
        self.watched: list[tuple[str, int]] = []

    def read_topic(self, topic) -> dict:
        topic_id = getattr(topic, "topic_id", None)
        if topic_id is not None:
            info = self.ctx.replicas.topic_by_id(topic_id)
            name = info.name if info is not None else None
            missing = Error.UNKNOWN_TOPIC_ID
        else:
            name = topic.topic
            missing = Error.UNKNOWN_TOPIC_OR_PARTITION
        partitions = []
        for fetch_partition in topic.partitions:
            partition = (
                self.ctx.replicas.partition(name, fetch_partition.partition) if name else None
            )
            if partition is None:
                self.has_error = True
                partitions.append(_partition_entry(fetch_partition.partition, missing))
            else:
                partitions.append(self.read_partition(partition, fetch_partition))
        return {"topic": name, "topic_id": topic_id, "partitions": partitions}

    def read_partition(self, partition, fetch_partition) -> dict:
        index = fetch_partition.partition
        error = _check_leader_epoch(partition, getattr(fetch_partition, "current_leader_epoch", -1))
        if error != Error.NONE:
            self.has_error = True
            return _partition_entry(index, error, partition)
        self.watched.append(partition.key)
        max_bytes = min(fetch_partition.partition_max_bytes, max(self.remaining, 0))
        try:
            records = partition.log.read(
                fetch_partition.fetch_offset,
                max_bytes=max_bytes,
                max_offset=partition.high_watermark,
                min_one_batch=self.total_bytes == 0,
            )
        except StorageError as failure:
            self.has_error = True
            return _partition_entry(index, Error(failure.error_code), partition)
        self.total_bytes += len(records)
        self.remaining -= len(records)
        return _partition_entry(index, Error.NONE, partition, records)


def _read_all(ctx: RequestContext, request) -> tuple[dict, _Reader]:
    reader = _Reader(ctx, request)
    responses = [reader.read_topic(topic) for topic in request.topics]
    return {"error_code": Error.NONE, "session_id": _NO_SESSION, "responses": responses}, reader


async def handle(ctx: RequestContext, request) -> dict:
    if getattr(request, "session_id", 0) != 0 and getattr(request, "session_epoch", -1) > 0:
        return {"error_code": Error.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": ()}
    deadline = trio.current_time() + request.max_wait.total_seconds()
    while True:
        response, reader = _read_all(ctx, request)
        done = (
            reader.total_bytes >= request.min_bytes
            or reader.has_error
            or not reader.watched
            or trio.current_time() >= deadline
        )
        if done:
            return response
        await ctx.replicas.appended.wait_any(reader.watched, deadline)
