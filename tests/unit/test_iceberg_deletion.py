"""A deleted Iceberg topic's writer is stopped before its tables are dropped (broker/iceberg/
service.py, "Deletion"), in process: a real ReplicaManager with a real log in a temporary
directory (tests/unit/replication_harness.py), the real IcebergService and a real pyiceberg SQL
catalog on SQLite, on the real clock (the writer's commits run in a worker thread).

The writer's commit is held, in its worker thread, just after it checked the table's offsets
and before it appends: the moment a commit is "under way" when the topic is deleted. Another
broker that hosted a replica drops the topic's tables first (as every replica host does); then
this broker's StopReplica deletes the partition; then the commit goes on. A writer that is not
stopped appends to the dropped table: pyarrow writes the Parquet file, the catalog commit
fails (the table is gone), and the file stays in the warehouse for ever (this broker's own drop
finds no table to purge) - as the flaky `users~dlq` Parquet file of
tests/integration/test_iceberg_typed_topics.py stayed. Stopped, the commit writes nothing."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import trio

from minibroker.iceberg.service import IcebergService
from minibroker.iceberg.table import TopicTable, drop_topic_tables, open_catalog
from tests.unit.replication_harness import TOPIC, TOPIC_ID, append, leader_and_isr, make_broker

TIMEOUT_S = 30.0


class Hold:
    """Holds the writer's next offsets check, once armed, in its worker thread."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def install(self, monkeypatch) -> None:
        real = TopicTable.offsets

        def offsets(table: TopicTable) -> dict[int, int]:
            found = real(table)
            if self.armed and not self.entered.is_set():
                self.entered.set()
                assert self.release.wait(TIMEOUT_S), "the test never released the commit"
            return found

        monkeypatch.setattr(TopicTable, "offsets", offsets)


def stop_replica(*indexes: int) -> SimpleNamespace:
    """The controller's StopReplica with delete_partition: the topic was deleted."""
    return SimpleNamespace(
        topic_states=[
            SimpleNamespace(
                topic_name=TOPIC,
                partition_states=[
                    SimpleNamespace(partition_index=index, delete_partition=True)
                    for index in indexes
                ],
            )
        ]
    )


async def until(condition, what: str) -> None:
    """Wait (on the real clock, bounded) until ``condition()`` holds."""
    with trio.fail_after(TIMEOUT_S):
        while not condition():
            await trio.sleep(0.02)


async def test_a_commit_under_way_when_the_topic_is_deleted_writes_nothing_more(
    tmp_path, monkeypatch
):
    replicas = make_broker(tmp_path, 1)
    replicas.announced_topic_configs[TOPIC] = {
        "iceberg.mode": "key_value",
        "iceberg.target.lag.ms": "1",
    }
    config = replicas.config
    service = IcebergService(config, replicas)
    hold = Hold()
    hold.install(monkeypatch)
    warehouse = config.iceberg_directory / "warehouse"
    # What another broker sees: the same catalog and warehouse.
    catalog = open_catalog("minibroker", config.iceberg_uri, config.iceberg_warehouse)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            await replicas.apply_leader_and_isr(leader_and_isr(1, 1, [1], [1]))
            await append(replicas, 0, 5)
            await until(lambda: service.rows_written[(TOPIC, 0)] == 5, "the first commit")
            assert len(list(warehouse.rglob("*.parquet"))) == 1

            hold.armed = True
            await append(replicas, 0, 5)
            # The writer's second commit checked the table's offsets and is about to append.
            assert await trio.to_thread.run_sync(hold.entered.wait, TIMEOUT_S)
            # Another replica host's drop comes first ...
            dropped = await trio.to_thread.run_sync(
                drop_topic_tables, catalog, "minibroker", TOPIC, str(TOPIC_ID)
            )
            assert dropped == [TOPIC] and not list(warehouse.rglob("*.parquet"))
            # ... then this broker's StopReplica, then the commit goes on.
            await replicas.apply_stop_replica(stop_replica(0))
            hold.release.set()
            await until(
                lambda: not service._dropping and TOPIC not in service._writers,
                "the writer to end and this broker's drop to finish",
            )
            nursery.cancel_scope.cancel()
    finally:
        hold.release.set()
        replicas.log_manager.close()

    # Nothing of the topic was written after its deletion: no orphan Parquet file, no table.
    assert not list(warehouse.rglob("*.parquet"))
    assert catalog.list_tables("minibroker") == []
    assert service.rows_written[(TOPIC, 0)] == 5 and service.commits[TOPIC] == 1
