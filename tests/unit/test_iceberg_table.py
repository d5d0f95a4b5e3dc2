"""Iceberg topics' blocking part (minibroker.iceberg.table) on a real pyiceberg SQL catalog in
a temporary directory, in process: the conditional commit when two writers (two brokers, or
an old and a new leader) commit the same table at the same moment. The second writer's commit
is made in the window between the first one's offset check and its append, which is where a
lost race would let rows land twice if pyiceberg retried the append on its own."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
import requests

from minibroker.iceberg.table import (
    TABLE_PROPERTIES,
    TopicTable,
    open_catalog,
    open_rest_catalog,
)
from minibroker.iceberg.translation import CommitPlan, PartitionCommit, ReadChunk
from minibroker.protocol.records import Record, encode_batch

TOPIC_ID = "5c1b2a3e-0000-4000-8000-000000000002"
NOW_MS = 1_796_000_000_000


def reads(partition: int, first: int, count: int) -> dict[int, list[ReadChunk]]:
    records = [
        Record(o, NOW_MS + o, None, f"{partition}-{o}".encode())
        for o in range(first, first + count)
    ]
    return {partition: [ReadChunk(encode_batch(records, base_offset=first))]}


def plan(partition: int, expected: int | None, start: int, end: int) -> CommitPlan:
    return CommitPlan(TOPIC_ID, (PartitionCommit(partition, 1, expected, start, end),))


@pytest.fixture
def catalog(tmp_path: Path):
    return open_catalog(
        "minibroker", f"sqlite:///{tmp_path}/catalog.db", (tmp_path / "warehouse").as_uri()
    )


def writer(catalog) -> TopicTable:
    return TopicTable.open(catalog, "minibroker", "clicks", TOPIC_ID, (("hour", "timestamp"),))


def rows(table: TopicTable) -> list[tuple[int, int]]:
    table.table.refresh()
    scanned = table.table.scan().to_arrow()
    return sorted(zip(scanned["partition"].to_pylist(), scanned["offset"].to_pylist(), strict=True))


def commit_in_the_window(first: TopicTable, second_commit) -> list:
    """Make ``second_commit`` run just before ``first``'s next append reaches the catalog."""
    outcomes = []
    append = first.table.append

    def hooked(*args, **kwargs):
        if not outcomes:
            outcomes.append(second_commit())
        return append(*args, **kwargs)

    first.table.append = hooked  # type: ignore[method-assign]
    return outcomes


def test_a_lost_race_with_another_partition_is_checked_and_committed_again(catalog):
    a, b = writer(catalog), writer(catalog)
    other = commit_in_the_window(a, lambda: b.commit(plan(1, None, 0, 2), reads(1, 0, 2)))
    outcome = a.commit(plan(0, None, 0, 5), reads(0, 0, 5))
    assert other[0].snapshot and outcome.snapshot and not outcome.conflicts
    # The second commit carries the first one's offsets forward: both partitions are held.
    assert a.offsets() == {0: 5, 1: 2}
    assert rows(a) == [(0, o) for o in range(5)] + [(1, 0), (1, 1)]


def test_an_old_leaders_commit_in_the_window_of_the_new_ones_is_refused(catalog):
    old, new = writer(catalog), writer(catalog)
    # The new leader checks the table (nothing of partition 0 yet), then the old leader's
    # late commit of offsets 0-4 lands before the new leader's append of 0-7.
    late = commit_in_the_window(new, lambda: old.commit(plan(0, None, 0, 5), reads(0, 0, 5)))
    outcome = new.commit(plan(0, None, 0, 8), reads(0, 0, 8))
    assert late[0].snapshot
    assert outcome.conflicts == {0: 5} and not outcome.snapshot
    assert rows(new) == [(0, o) for o in range(5)]
    # The new leader starts again from the table: 5-7 are written once.
    assert new.commit(plan(0, 5, 5, 8), reads(0, 5, 3)).snapshot
    assert rows(new) == [(0, o) for o in range(8)]


def test_tables_are_made_without_pyicebergs_own_retries(catalog):
    table = writer(catalog)
    assert {k: table.table.properties.get(k) for k in TABLE_PROPERTIES} == TABLE_PROPERTIES
    with table.table.transaction() as transaction:
        transaction.set_properties({"commit.retry.num-retries": "4"})
    reopened = writer(catalog)
    assert reopened.table.properties["commit.retry.num-retries"] == "0"


def test_a_rest_catalog_that_never_answers_times_out():
    """pyiceberg's REST client sets no timeout: a server that accepts the connection and
    never answers would hold the writer's thread for ever. open_rest_catalog's requests time
    out after rest.client.socket-timeout-ms (a real socket on loopback that never answers;
    the call runs in a thread of its own so that a missing timeout fails the test, not hangs
    it)."""
    raised: list[BaseException] = []

    def open_it(port: int) -> None:
        properties = {
            "uri": f"http://127.0.0.1:{port}/",
            "rest.client.socket-timeout-ms": "300",
        }
        try:
            open_rest_catalog("minibroker", properties)
        except BaseException as error:
            raised.append(error)

    with socket.create_server(("127.0.0.1", 0)) as server:
        started = time.monotonic()
        thread = threading.Thread(target=open_it, args=(server.getsockname()[1],), daemon=True)
        thread.start()
        thread.join(10)
        elapsed = time.monotonic() - started
    assert not thread.is_alive(), "the request did not time out"
    assert len(raised) == 1 and isinstance(raised[0], requests.exceptions.ReadTimeout), raised
    assert elapsed >= 0.3, elapsed
