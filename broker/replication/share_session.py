"""Share sessions (KIP-932): which partitions a share consumer fetches, kept between requests.

Kafka's ``ShareSessionCache`` and the session rules of ``SharePartitionManager.newContext``
and ``acknowledgeSessionUpdate`` (server, package ``kafka.server.share``), pure: no I/O, no
clock (Kafka 4.4's cache evicts nothing by time: a session ends when its member closes it,
its connection closes or its member leaves the group).

A session is keyed by (group id, member id) and carries an epoch:

- ShareFetch with epoch 0 opens a session (replacing the member's previous one) holding the
  request's partitions; acknowledgements in it are INVALID_REQUEST; a full cache (more than
  ``group.share.max.share.sessions``) is SHARE_SESSION_LIMIT_REACHED. The next request
  carries epoch 1.
- ShareFetch with a positive epoch updates the session: its partitions are added, its
  forgotten ones removed; no session is SHARE_SESSION_NOT_FOUND, another epoch than the
  session's INVALID_SHARE_SESSION_EPOCH. The epoch then increments (after 2^31-1 comes 1).
- ShareFetch with epoch -1 closes the session after its acknowledgements; it may not fetch
  (partitions in it are INVALID_REQUEST); no session is SHARE_SESSION_NOT_FOUND.
- ShareAcknowledge never opens a session: epoch 0 is INVALID_SHARE_SESSION_EPOCH; -1 closes
  it; a positive epoch must be the session's and increments it.

Closing a session (or its member leaving) releases the records the member holds; the caller
does that (SharePartitionManager).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from minibroker.protocol.errors import Error

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
# (topic id, partition index), as the requests name them
SharePartitionKey = tuple[object, int]


def next_epoch(epoch: int) -> int:
    """ShareRequestMetadata.nextEpoch."""
    if epoch < 0:
        return epoch
    return 1 if epoch == 2**31 - 1 else epoch + 1


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int
    partitions: dict[SharePartitionKey, None] = field(default_factory=dict)
    connection: object = None


@dataclass(frozen=True)
class SessionOutcome:
    """What a request's session rules decided: an error (the whole request's), or the
    partitions to fetch (ShareFetch) and whether the session is now closed."""

    error: Error = Error.NONE
    partitions: tuple[SharePartitionKey, ...] = ()
    closed: bool = False


@dataclass
class ShareSessionCache:
    """Kafka's ShareSessionCache with ``group.share.max.share.sessions`` slots."""

    max_sessions: int = 2000
    sessions: dict[tuple[str, str], ShareSession] = field(default_factory=dict)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def fetch(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        partitions: Iterable[SharePartitionKey],
        forgotten: Iterable[SharePartitionKey],
        *,
        has_acknowledgements: bool,
        connection: object = None,
    ) -> SessionOutcome:
        """The rules of a ShareFetch (Kafka's newContext)."""
        key = (group_id, member_id)
        partitions = list(partitions)
        if epoch == FINAL_EPOCH:
            if partitions:
                return SessionOutcome(Error.INVALID_REQUEST)
            if key not in self.sessions:
                return SessionOutcome(Error.SHARE_SESSION_NOT_FOUND)
            del self.sessions[key]
            return SessionOutcome(closed=True)
        if epoch == INITIAL_EPOCH:
            if has_acknowledgements:
                return SessionOutcome(Error.INVALID_REQUEST)
            self.sessions.pop(key, None)
            if len(self.sessions) >= self.max_sessions:
                return SessionOutcome(Error.SHARE_SESSION_LIMIT_REACHED)
            session = ShareSession(
                group_id, member_id, next_epoch(epoch), dict.fromkeys(partitions), connection
            )
            self.sessions[key] = session
            return SessionOutcome(partitions=tuple(session.partitions))
        if epoch < FINAL_EPOCH:
            return SessionOutcome(Error.INVALID_SHARE_SESSION_EPOCH)
        current = self.sessions.get(key)
        if current is None:
            return SessionOutcome(Error.SHARE_SESSION_NOT_FOUND)
        if current.epoch != epoch:
            return SessionOutcome(Error.INVALID_SHARE_SESSION_EPOCH)
        session = current
        for partition in partitions:
            session.partitions[partition] = None
        for partition in forgotten:
            session.partitions.pop(partition, None)
        session.epoch = next_epoch(session.epoch)
        return SessionOutcome(partitions=tuple(session.partitions))

    def acknowledge(self, group_id: str, member_id: str, epoch: int) -> SessionOutcome:
        """The rules of a ShareAcknowledge (Kafka's acknowledgeSessionUpdate)."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH or epoch < FINAL_EPOCH:
            return SessionOutcome(Error.INVALID_SHARE_SESSION_EPOCH)
        session = self.sessions.get(key)
        if session is None:
            return SessionOutcome(Error.SHARE_SESSION_NOT_FOUND)
        if epoch == FINAL_EPOCH:
            del self.sessions[key]
            return SessionOutcome(closed=True)
        if session.epoch != epoch:
            return SessionOutcome(Error.INVALID_SHARE_SESSION_EPOCH)
        session.epoch = next_epoch(session.epoch)
        return SessionOutcome()

    def remove(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)

    def remove_connection(self, connection: object) -> list[ShareSession]:
        """The sessions opened on a connection that closed (Kafka's
        ShareSessionCache.connectionDisconnectListener)."""
        gone = [s for s in self.sessions.values() if s.connection is connection]
        for session in gone:
            del self.sessions[(session.group_id, session.member_id)]
        return gone
