"""Parking for requests that wait on the log: delayed fetches now, acks=-1 produces later.

A waiting request registers one ``trio.Event`` under every key it cares about (a partition)
and sleeps on it with a deadline. Whoever changes a partition (an append, a high-watermark
move) calls ``notify(key)``, which sets the events parked there and forgets them. Nothing
polls and a parked request costs no CPU: it is a sleeping task and a set entry.
"""

import time
from collections import defaultdict
from collections.abc import Hashable, Iterable

import trio

from minibroker.common.quota_manager import PARKED


class Watchers:
    """Events parked under keys, woken all at once when their key changes."""

    def __init__(self) -> None:
        self._parked: defaultdict[Hashable, set[trio.Event]] = defaultdict(set)
        self._parked_by_kind: defaultdict[str, int] = defaultdict(int)

    def notify(self, key: Hashable) -> None:
        """Wake every request parked under ``key``."""
        events = self._parked.pop(key, None)
        if events:
            for event in events:
                event.set()

    async def wait_any(self, keys: Iterable[Hashable], deadline: float, kind: str = "") -> bool:
        """Sleep until any of ``keys`` is notified or trio's clock reaches ``deadline``.

        Returns True when woken by a notification, False at the deadline. ``kind`` names
        the waiting operation (Fetch, Produce) for the purgatory-size metric.
        """
        keys = list(keys)
        event = trio.Event()
        for key in keys:
            self._parked[key].add(event)
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
                    parked.discard(event)
                    if not parked:
                        del self._parked[key]
        return event.is_set()

    def parked_count(self) -> int:
        """How many (request, key) registrations are parked."""
        return sum(len(events) for events in self._parked.values())

    def parked_by_kind(self) -> dict[str, int]:
        """How many requests are parked, by kind: the purgatory sizes."""
        return dict(self._parked_by_kind)
