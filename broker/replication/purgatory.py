"""Parking for requests that wait on the log: delayed fetches now, acks=-1 produces later.

A waiting request registers one ``trio.Event`` under every key it cares about (a partition)
and sleeps on it with a deadline. Whoever changes a partition (an append, a high-watermark
move) calls ``notify(key)``, which sets the events parked there and forgets them. Nothing
polls and a parked request costs no CPU: it is a sleeping task and a set entry.

A waiter may ask which of its keys were notified (``fired``): a woken fetch then reads again
only the partitions that changed (Kafka's DelayedFetch reads them all again on completion;
see apis/fetch.py for why that is the same answer).
"""

import time
from collections import defaultdict
from collections.abc import Hashable, Iterable

import trio

from minibroker.common.quota_manager import PARKED


class _Waiter:
    """One parked request: its event, and (when asked for) the keys notified so far."""

    __slots__ = ("event", "fired")

    def __init__(self, fired: set | None) -> None:
        self.event = trio.Event()
        self.fired = fired


class Watchers:
    """Events parked under keys, woken all at once when their key changes."""

    def __init__(self) -> None:
        self._parked: defaultdict[Hashable, set[_Waiter]] = defaultdict(set)
        self._parked_by_kind: defaultdict[str, int] = defaultdict(int)
        # How many times each key was notified: a reader that remembers a key's generation
        # knows, by comparing, whether anything was notified under it since (an incremental
        # fetch session's idle partitions, apis/fetch.py). Entries are never removed, so a
        # generation never repeats for a key.
        self._generations: dict[Hashable, int] = {}
        # How many parked requests ``notify`` has woken so far: an appender compares it
        # before and after its appends to know whether it woke a reader
        # (ReplicaManager.append_records lets woken fetches answer before its own response).
        self.woken = 0

    def generation(self, key: Hashable) -> int:
        """How many times ``key`` has been notified so far."""
        return self._generations.get(key, 0)

    def notify(self, key: Hashable) -> None:
        """Wake every request parked under ``key``."""
        generations = self._generations
        generations[key] = generations.get(key, 0) + 1
        waiters = self._parked.pop(key, None)
        if waiters:
            self.woken += len(waiters)
            for waiter in waiters:
                if waiter.fired is not None:
                    waiter.fired.add(key)
                waiter.event.set()

    async def wait_any(
        self, keys: Iterable[Hashable], deadline: float, kind: str = "", fired: set | None = None
    ) -> bool:
        """Sleep until any of ``keys`` is notified or trio's clock reaches ``deadline``.

        Returns True when woken by a notification, False at the deadline. ``kind`` names
        the waiting operation (Fetch, Produce) for the purgatory-size metric. ``fired``, when
        given, receives every one of ``keys`` notified before the wait ended (the woken task
        runs after the notifier yields, so a key notified meanwhile is in it too, until the
        registration is gone).
        """
        keys = list(keys)
        waiter = _Waiter(fired)
        event = waiter.event
        for key in keys:
            self._parked[key].add(waiter)
        self._parked_by_kind[kind] += 1
        # Time parked is not a request_percentage client's thread time (quota_manager.PARKED).
        request_parked = PARKED.get()
        started = time.monotonic() if request_parked is not None else 0.0
        try:
            with trio.move_on_at(deadline):
                await event.wait()
        finally:
            if request_parked is not None:
                request_parked[0] += time.monotonic() - started
            self._parked_by_kind[kind] -= 1
            for key in keys:
                parked = self._parked.get(key)
                if parked is not None:
                    parked.discard(waiter)
                    if not parked:
                        del self._parked[key]
        return event.is_set()

    def parked_count(self) -> int:
        """How many (request, key) registrations are parked."""
        return sum(len(events) for events in self._parked.values())

    def parked_by_kind(self) -> dict[str, int]:
        """How many requests are parked, by kind: the purgatory sizes."""
        return dict(self._parked_by_kind)


async def readers_first() -> None:
    """Let the requests an append just woke answer before the appender's own response.

    A Produce with acks 0 or 1 that wakes a parked Fetch (a consumer waiting at the end of the
    log, a follower) would otherwise encode and write its answer first: the records reach the
    consumer a response-write later (about 0.1 ms of this one thread, most of it the
    loopback send). Kafka completes the DelayedFetch in the produce's handler thread and sends
    both responses from network threads in parallel; on one thread one of them must go
    first, and the producer is not waiting on this answer to send more (it keeps requests in
    flight), so the records' reader goes first. Two turns of trio's scheduler: the woken
    tasks were queued during this step, and trio runs a batch in either order, so after the
    second turn each woken task has taken its step (its read, encode and write), whichever
    order trio picked. Issue 40.
    """
    await trio.lowlevel.cancel_shielded_checkpoint()
    await trio.lowlevel.cancel_shielded_checkpoint()
