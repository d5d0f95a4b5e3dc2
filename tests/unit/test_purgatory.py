"""The purgatory's watchers, driven by trio's MockClock: no real waiting."""

import pytest
import trio
import trio.testing

from minibroker.replication.purgatory import Watchers


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


async def test_notify_wakes_a_parked_wait(autojump_clock):
    watchers = Watchers()
    results = []

    async def park():
        results.append(await watchers.wait_any([("t", 0), ("t", 1)], trio.current_time() + 10))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(park)
        await trio.testing.wait_all_tasks_blocked()
        assert watchers.parked_count() == 2
        watchers.notify(("t", 1))
    assert results == [True]
    assert watchers.parked_count() == 0
    assert trio.current_time() < 10


async def test_deadline_without_notification(autojump_clock):
    watchers = Watchers()
    start = trio.current_time()
    woken = await watchers.wait_any([("t", 0)], start + 0.5)
    assert woken is False
    assert trio.current_time() - start == pytest.approx(0.5)
    assert watchers.parked_count() == 0


async def test_notify_of_another_key_does_not_wake(autojump_clock):
    watchers = Watchers()
    start = trio.current_time()

    async def notify_other():
        await trio.sleep(0.1)
        watchers.notify(("other", 0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(notify_other)
        woken = await watchers.wait_any([("t", 0)], start + 1)
    assert woken is False
    assert trio.current_time() - start == pytest.approx(1)


async def test_fired_collects_the_keys_notified_before_the_waiter_runs(autojump_clock):
    watchers = Watchers()
    fired: set = set()
    results = []

    async def park():
        keys = [("t", 0), ("t", 1), ("t", 2)]
        results.append(await watchers.wait_any(keys, trio.current_time() + 10, fired=fired))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(park)
        await trio.testing.wait_all_tasks_blocked()
        # Both before the woken task runs: the second is collected too.
        watchers.notify(("t", 2))
        watchers.notify(("t", 0))
        watchers.notify(("other", 0))
    assert results == [True]
    assert fired == {("t", 0), ("t", 2)}
    assert watchers.parked_count() == 0
