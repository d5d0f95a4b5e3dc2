"""Incremental fetch sessions (KIP-227): Kafka's FetchSession, FetchSessionCache and
FetchManager as a pure core, with time passed in and no I/O.

A fetcher (a consumer, or a follower) that sends a full fetch with session epoch 0 may get a
session id back; its next fetches name that id and the next epoch and carry only the
partitions whose fetch parameters changed (added or updated) and those to drop
(``forgotten_topics_data``). The broker remembers each session's partitions and answers an
incremental fetch with only the partitions that have something to say: records, a new high
watermark or log start offset, a preferred read replica, a diverging epoch or an error
(Kafka's ``CachedPartition.maybeUpdateResponseData``). A partition that returned records
moves to the end of the session, so the next fetches start with the others.

A full fetch with epoch -1 (FINAL) closes a session and is served without one; a full fetch
with epoch 0 replaces the one it names. An incremental fetch naming an unknown session is
answered FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH, a switch
between topic names (Fetch v7-12) and topic ids (v13+) FETCH_SESSION_TOPIC_ID_ERROR; each
with session id 0, no partitions, and nothing read.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (1000). When it is
full, a new session may take the place of the least recently used one if that one has been
idle longer than the eviction time (120 s, Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS),
or else of the smallest evictable session no bigger than itself, followers' (privileged)
sessions younger than the eviction time being evictable only by other followers, as Kafka's
EvictableKey ordering decides. Kafka shards the cache across request handler threads; one
event loop needs one shard.

The handler (apis/fetch.py) turns a request into a :class:`FetchContext` with
:meth:`FetchManager.new_context`, reads the partitions the context lists, and hands the
read entries (the Fetch response partition dicts) back to :meth:`FetchContext.respond`,
which says what goes into the response.
"""

import random
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from minibroker.protocol.errors import Error

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INVALID_SESSION_ID = 0
# Kafka's KafkaBroker.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS.
MIN_EVICTION_MS = 120_000
DEFAULT_CACHE_SLOTS = 1000
_MAX_INT32 = 2**31 - 1

# (topic name or topic id, partition index)
PartitionKey = tuple[Hashable, int]


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == _MAX_INT32:
        return 1
    return epoch + 1


@dataclass(slots=True)
class PartitionRequest:
    """What a fetch request asks of one partition (Kafka's FetchRequest.PartitionData)."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1
    # Fetch v18 (KIP-1166): the high watermark the fetching replica knows; the largest int64
    # when it does not say. Used for the request it came in, not kept for the next ones.
    high_watermark: int = 2**63 - 1


class CachedPartition:
    """A partition of a session: its last request and what its last response said."""

    __slots__ = ("high_watermark", "kept", "local_log_start_offset", "request")

    def __init__(self, request: PartitionRequest) -> None:
        self.request = request
        self.high_watermark = -1
        self.local_log_start_offset = -1
        # The handler's own note of this partition's last read (apis/fetch.py: an empty read
        # it may answer again without reading while nothing was notified); opaque here.
        self.kept: Any = None

    def must_respond(self, entry: Mapping[str, Any], update: bool) -> bool:
        """Kafka's maybeUpdateResponseData: whether this read of the partition goes into an
        incremental response; with ``update``, remember what it said."""
        respond = False
        records = entry.get("records")
        if records is not None and len(records) > 0:
            respond = True
        high_watermark = entry.get("high_watermark", -1)
        if self.high_watermark != high_watermark:
            respond = True
            if update:
                self.high_watermark = high_watermark
        log_start_offset = entry.get("log_start_offset", -1)
        if self.local_log_start_offset != log_start_offset:
            respond = True
            if update:
                self.local_log_start_offset = log_start_offset
        if entry.get("preferred_read_replica", -1) != -1:
            respond = True
        if int(entry.get("error_code", 0)) != 0:
            if update:
                self.high_watermark = -1
            respond = True
        diverging = entry.get("diverging_epoch")
        if diverging is not None and (
            diverging.get("epoch", -1) != -1 or diverging.get("end_offset", -1) != -1
        ):
            respond = True
        return respond


class FetchSession:
    """One session: its partitions in fetch order (a dict keeps insertion order)."""

    def __init__(
        self,
        session_id: int,
        *,
        privileged: bool,
        partitions: dict[PartitionKey, CachedPartition],
        uses_topic_ids: bool,
        now_ms: int,
    ) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        # The size the cache last accounted for (-1: never), as Kafka's cachedSize.
        self.cached_size = -1
        # Membership of Kafka's evictableByAll / evictableByPrivileged, decided at touch.
        self.evictable_by_all = False
        self.evictable_by_privileged = False

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)

    def update(
        self,
        fetch_data: Iterable[tuple[PartitionKey, PartitionRequest]],
        to_forget: Iterable[PartitionKey],
    ) -> tuple[list[PartitionKey], list[PartitionKey], list[PartitionKey]]:
        """Apply an incremental request: (added, updated, removed)."""
        added: list[PartitionKey] = []
        updated: list[PartitionKey] = []
        removed: list[PartitionKey] = []
        for key, request in fetch_data:
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(request)
                added.append(key)
            else:
                cached.request = request
                updated.append(key)
        for key in to_forget:
            if self.partitions.pop(key, None) is not None:
                removed.append(key)
        return added, updated, removed


class FetchSessionCache:
    """Kafka's FetchSessionCacheShard: the sessions, their eviction order and counts."""

    def __init__(
        self,
        max_entries: int = DEFAULT_CACHE_SLOTS,
        eviction_ms: int = MIN_EVICTION_MS,
        rng: random.Random | None = None,
    ) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._rng = rng or random.Random()
        self.sessions: dict[int, FetchSession] = {}
        self.total_partitions = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def _new_session_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, _MAX_INT32 - 1)
            if session_id not in self.sessions:
                return session_id

    def maybe_create_session(
        self,
        now_ms: int,
        *,
        privileged: bool,
        size: int,
        uses_topic_ids: bool,
        partitions: Callable[[], dict[PartitionKey, CachedPartition]],
    ) -> int:
        """A new session's id, or INVALID_SESSION_ID when there is no room for it."""
        if len(self.sessions) >= self.max_entries and not self._try_evict(
            privileged, (privileged, size, 0), now_ms
        ):
            return INVALID_SESSION_ID
        session = FetchSession(
            self._new_session_id(),
            privileged=privileged,
            partitions=partitions(),
            uses_topic_ids=uses_topic_ids,
            now_ms=now_ms,
        )
        self.sessions[session.id] = session
        self.touch(session, now_ms)
        return session.id

    def _try_evict(self, privileged: bool, key: tuple[bool, int, int], now_ms: int) -> bool:
        if not self.sessions:
            return False
        least_recent = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - least_recent.last_used_ms > self.eviction_ms:
            self.remove(least_recent)
            self.evictions += 1
            return True
        candidates = [
            s
            for s in self.sessions.values()
            if (s.evictable_by_privileged if privileged else s.evictable_by_all)
        ]
        if not candidates:
            return False
        smallest = min(candidates, key=FetchSession.evictable_key)
        if key < smallest.evictable_key():
            return False
        self.remove(smallest)
        self.evictions += 1
        return True

    def remove(self, session: FetchSession) -> FetchSession | None:
        removed = self.sessions.pop(session.id, None)
        if removed is not None and removed.cached_size > 0:
            self.total_partitions -= removed.cached_size
        return removed

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """A use of the session: its recency, size and evictability as of now."""
        session.last_used_ms = now_ms
        if session.cached_size != -1:
            self.total_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        old_enough = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = (not session.privileged) or old_enough
        session.evictable_by_all = old_enough
        self.total_partitions += session.cached_size


class FetchContext:
    """What one fetch request is, for the session cache (Kafka's FetchContext kinds): a
    session error, sessionless, full (may create a session) or incremental."""

    def __init__(
        self,
        kind: str,
        *,
        error: Error = Error.NONE,
        fetch_data: Sequence[tuple[PartitionKey, PartitionRequest]] = (),
        session: FetchSession | None = None,
        request_epoch: int = 0,
        cache: FetchSessionCache | None = None,
        privileged: bool = False,
        uses_topic_ids: bool = False,
    ) -> None:
        self.kind = kind
        self.error = error
        self._fetch_data = fetch_data
        self.session = session
        self._request_epoch = request_epoch
        self._cache = cache
        self._privileged = privileged
        self._uses_topic_ids = uses_topic_ids

    def partitions(self) -> list[tuple[PartitionKey, PartitionRequest]]:
        """The partitions to read, in order: the request's, or the whole session's."""
        if self.kind == "incremental":
            assert self.session is not None
            return [(key, cached.request) for key, cached in self.session.partitions.items()]
        if self.kind == "error":
            return []
        return list(self._fetch_data)

    def respond(
        self, entries: Sequence[tuple[PartitionKey, dict[str, Any]]], now_ms: int
    ) -> tuple[Error, int, list[tuple[PartitionKey, dict[str, Any]]]]:
        """The response's (error, session id, partitions) from the final read of
        :meth:`partitions`."""
        if self.kind == "error":
            return self.error, INVALID_SESSION_ID, []
        if self.kind == "sessionless":
            return Error.NONE, INVALID_SESSION_ID, list(entries)
        if self.kind == "full":
            assert self._cache is not None
            requests = dict(self._fetch_data)

            def cached_partitions() -> dict[PartitionKey, CachedPartition]:
                cached: dict[PartitionKey, CachedPartition] = {}
                for key, entry in entries:
                    partition = CachedPartition(requests[key])
                    partition.high_watermark = entry.get("high_watermark", -1)
                    partition.local_log_start_offset = entry.get("log_start_offset", -1)
                    cached[key] = partition
                return cached

            session_id = self._cache.maybe_create_session(
                now_ms,
                privileged=self._privileged,
                size=len(entries),
                uses_topic_ids=self._uses_topic_ids,
                partitions=cached_partitions,
            )
            return Error.NONE, session_id, list(entries)
        session = self.session
        assert session is not None
        if session.epoch != next_epoch(self._request_epoch):
            # Another request of the same session got in between (a duplicate request).
            return Error.INVALID_FETCH_SESSION_EPOCH, session.id, []
        selected = []
        for key, entry in entries:
            cached = session.partitions.get(key)
            if cached is None:
                continue
            if cached.must_respond(entry, update=True):
                selected.append((key, entry))
                records = entry.get("records")
                if records is not None and len(records) > 0:
                    # Rotate to the end: the next fetches start with the other partitions.
                    session.partitions[key] = session.partitions.pop(key)
        return Error.NONE, session.id, selected


class FetchManager:
    """Kafka's FetchManager.newContext over one cache."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache

    def new_context(
        self,
        *,
        version: int,
        session_id: int,
        epoch: int,
        privileged: bool,
        fetch_data: Sequence[tuple[PartitionKey, PartitionRequest]],
        to_forget: Sequence[PartitionKey],
        now_ms: int,
    ) -> FetchContext:
        uses_topic_ids = version >= 13
        if version < 7:
            # Before Fetch v7 there are no sessions at all.
            return FetchContext("sessionless", fetch_data=fetch_data)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                existing = self.cache.get(session_id)
                if existing is not None:
                    self.cache.remove(existing)
            if epoch == FINAL_EPOCH:
                return FetchContext("sessionless", fetch_data=fetch_data)
            return FetchContext(
                "full",
                fetch_data=fetch_data,
                cache=self.cache,
                privileged=privileged,
                uses_topic_ids=uses_topic_ids,
            )
        session = self.cache.get(session_id)
        if session is None:
            return FetchContext("error", error=Error.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext("error", error=Error.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext("error", error=Error.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(fetch_data, to_forget)
        if not session.partitions:
            self.cache.remove(session)
            return FetchContext("sessionless", fetch_data=fetch_data)
        self.cache.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return FetchContext("incremental", session=session, request_epoch=epoch)


class FetchSessionHandler:
    """The fetching side of a session (Kafka's clients FetchSessionHandler), as the follower
    fetchers use it: what the next request carries, and what its answer does to the session.

    The first request is full (epoch 0: every partition); once the leader answers with a
    session id, each request carries only the partitions whose fetch parameters changed since
    the session last saw them, and forgets those no longer fetched. A session error
    (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, ...) or a lost answer starts
    over with a full request. ``V`` is whatever the fetcher sends per partition; equal values
    are not sent again.
    """

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        # The partitions as the leader's session holds them.
        self._session: dict[PartitionKey, Any] = {}
        self._pending: dict[PartitionKey, Any] | None = None

    def build(
        self, wanted: Mapping[PartitionKey, Any]
    ) -> tuple[int, int, list[tuple[PartitionKey, Any]], list[PartitionKey]]:
        """(session id, epoch, partitions to send, partitions to forget) for the next
        request fetching ``wanted``."""
        self._pending = dict(wanted)
        if self.session_id == INVALID_SESSION_ID or self.epoch == INITIAL_EPOCH:
            return self.session_id, INITIAL_EPOCH, list(wanted.items()), []
        send = [(key, value) for key, value in wanted.items() if self._session.get(key) != value]
        forget = [key for key in self._session if key not in wanted]
        return self.session_id, self.epoch, send, forget

    def handle_response(self, error: int, session_id: int) -> None:
        """The answer to the request :meth:`build` made."""
        pending, self._pending = self._pending, None
        if error != 0 or pending is None:
            self.reset()
            return
        if self.epoch == INITIAL_EPOCH or self.session_id == INVALID_SESSION_ID:
            # A full request: a session begins if the leader made one.
            self.session_id = session_id
            self.epoch = next_epoch(INITIAL_EPOCH) if session_id else INITIAL_EPOCH
        elif session_id != self.session_id:
            # The leader closed the session (every partition forgotten): start over.
            self.session_id = INVALID_SESSION_ID
            self.reset()
            return
        else:
            self.epoch = next_epoch(self.epoch)
        self._session = pending if self.session_id else {}

    def reset(self) -> None:
        """Start over with a full request (a session error, a lost answer, a reconnection).
        The leader's session, if any, is replaced by the next full request's."""
        self.epoch = INITIAL_EPOCH
        self._session = {}
        self._pending = None
