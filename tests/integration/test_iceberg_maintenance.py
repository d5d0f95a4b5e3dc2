"""Iceberg table maintenance on one real broker process (docs/iceberg-topics.md, "Table
maintenance"): a topic written in six commits has six small files; once
``iceberg.compaction.interval.ms`` and ``iceberg.snapshot.expiry.interval.ms`` are set (and
the table's ``history.expire.max-snapshot-age-ms`` is 0, as an operator sets it with any
Iceberg engine), the broker rewrites them as one and expires the old snapshots: the same rows
(count and an offset checksum per partition), the same offsets in the current snapshot's
summary, and the writer carries on from them, every record once."""

from __future__ import annotations

from collections import Counter

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from minibroker.iceberg.translation import SUMMARY_KEY
from minibroker.tools.launcher import free_port
from tests.conftest import scrape, wait_for
from tests.integration.test_iceberg_topics import OVERRIDES, TIMEOUT, table_catalog

TOPIC = "clicks"
PARTITIONS = 2
ROUNDS = 6


def snapshot_state(catalog):
    table = catalog.load_table(("minibroker", TOPIC))
    scanned = table.scan().to_arrow()
    pairs = list(zip(scanned["partition"].to_pylist(), scanned["offset"].to_pylist(), strict=True))
    current = table.current_snapshot()
    summary = {} if current is None or current.summary is None else current.summary
    return table, pairs, summary


def checksums(pairs) -> dict[int, tuple[int, int]]:
    """Per partition: (rows, sum of offsets)."""
    counts: Counter[int] = Counter()
    sums: Counter[int] = Counter()
    for partition, offset in pairs:
        counts[partition] += 1
        sums[partition] += offset
    return {p: (counts[p], sums[p]) for p in sorted(counts)}


def test_compaction_and_expiry_keep_every_row_once(broker_factory):
    metrics_port = free_port()
    broker = broker_factory({**OVERRIDES, "metrics.port": metrics_port})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {
        "iceberg.mode": "key_value",
        "iceberg.target.lag.ms": "100",
        "iceberg.partition.spec": "()",
        "iceberg.compaction.interval.ms": "0",
        "iceberg.snapshot.expiry.interval.ms": "0",
    }
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=configs)])[TOPIC].result(TIMEOUT)
    catalog_file = broker.log_dir / "iceberg" / "catalog.db"
    catalog = wait_for(lambda: table_catalog(catalog_file), 20, "the topic's table")
    table = catalog.load_table(("minibroker", TOPIC))
    with table.transaction() as transaction:
        transaction.set_properties({"history.expire.max-snapshot-age-ms": "0"})

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    sent = 0

    def produce_round() -> None:
        nonlocal sent
        for number in range(PARTITIONS * 2):
            producer.produce(TOPIC, value=b"v%d" % sent, partition=number % PARTITIONS)
            sent += 1
        assert producer.flush(TIMEOUT) == 0
        wait_for(lambda: len(snapshot_state(catalog)[1]) == sent, 20, "the round in the table")

    for _ in range(ROUNDS):
        produce_round()
    table, pairs, summary = snapshot_state(catalog)
    files_before = int(summary["total-data-files"])
    snapshots_before = len(table.snapshots())
    assert files_before >= ROUNDS and snapshots_before >= ROUNDS
    offsets_before = summary[SUMMARY_KEY]
    rows_before = checksums(pairs)

    changes = [
        ConfigEntry(name, "300", incremental_operation=AlterConfigOpType.SET)
        for name in ("iceberg.compaction.interval.ms", "iceberg.snapshot.expiry.interval.ms")
    ]
    resource = ConfigResource("TOPIC", TOPIC, incremental_configs=changes)
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)

    def maintained() -> bool:
        samples = scrape(metrics_port)
        labels = (("topic", TOPIC),)
        return (
            samples.get(("minibroker_iceberg_compactions_total", labels), 0) >= 1
            and samples.get(("minibroker_iceberg_expired_snapshots_total", labels), 0) >= 1
        )

    wait_for(maintained, 20, "a compaction and an expiry")
    table, pairs, summary = snapshot_state(catalog)
    assert int(summary["total-data-files"]) < files_before
    assert len(table.snapshots()) < snapshots_before
    assert checksums(pairs) == rows_before and len(set(pairs)) == len(pairs)
    assert summary[SUMMARY_KEY] == offsets_before
    # The files of the expired snapshots are gone from the warehouse.
    on_disk = {p.name for p in (broker.log_dir / "iceberg" / "warehouse").rglob("*.parquet")}
    assert on_disk == {task.file.file_path.rsplit("/", 1)[-1] for task in table.scan().plan_files()}

    # The writer carries on from the carried offsets: every record once.
    produce_round()
    _, pairs, _ = snapshot_state(catalog)
    assert len(set(pairs)) == len(pairs) == sent
    assert checksums(pairs) == {
        p: (sent // PARTITIONS, sum(range(sent // PARTITIONS))) for p in range(PARTITIONS)
    }
