"""Spark reads Iceberg topics' tables (docs/iceberg-topics.md, "Reading the table with Spark").

One real broker serving the schema registry writes a `key_value` topic and a
`value_schema_id_prefix` topic (confluent-kafka's AvroSerializer) into its embedded SQL catalog
(SQLite); the shared Spark session reads both tables through Iceberg's Spark runtime and
Iceberg's JdbcCatalog on that SQLite file, opened read-only, while the broker keeps writing it.
Spark must see what pyiceberg sees, row for row: counts, the offsets of each partition, the
raw columns, the typed columns with their Spark types, and the offsets each snapshot's summary
records; and still after the broker's table maintenance (docs/iceberg-topics.md, "Table
maintenance"): after a compaction, whose ``replace`` snapshot is made by minibroker's own
subclass of pyiceberg's overwrite (iceberg/maintenance.py), and after the old snapshots
expired and their files were deleted, then with the writer's next append on top.

Spark 4.3 cannot load Iceberg's own SparkCatalog (no Iceberg runtime for Spark 4.3 yet), so the
catalog is java/iceberg-spark's IcebergTableCatalog, a read-only TableCatalog that hands out
the runtime's SparkTable (see that file); every read below is the runtime's.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from minibroker.tools.launcher import free_port
from tests.readme import blocks
from tests.spark.conftest import iceberg_spark_jars, wait_until

pytest.importorskip("pyiceberg", reason="pip install -e '.[iceberg]' installs pyiceberg")

TIMEOUT = 60.0
CLICKS, USERS = "clicks", "users"
# One broker: the internal topics with one replica each.
OVERRIDES = {
    "offsets.topic.replication.factor": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "transaction.state.log.num.partitions": 1,
}
USER = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "joined", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
JOINED_MS = 1_796_000_000_000
SUMMARY_KEY = "minibroker.translation"
CATALOG = "minibroker"
PAGE = "docs/iceberg-topics.md"


class Acked:
    """Delivery reports: (partition, offset) -> the record as produced."""

    def __init__(self) -> None:
        self.records: dict[tuple[int, int], dict] = {}
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def report(self, record: dict):
        def delivered(error, message) -> None:
            with self.lock:
                if error is not None:
                    self.errors.append(str(error))
                    return
                key = (message.partition(), message.offset())
                self.records[key] = {**record, "timestamp": message.timestamp()[1]}

        return delivered

    def next_offsets(self) -> dict[int, int]:
        ends: dict[int, int] = {}
        for partition, offset in self.records:
            ends[partition] = max(ends.get(partition, 0), offset + 1)
        return ends


def millis(timestamp) -> int:
    """Epoch milliseconds of pyiceberg's aware datetimes and Spark's naive UTC ones (the
    session's time zone is UTC)."""

    if timestamp.tzinfo is None:
        timestamp = timestamp.replace(tzinfo=UTC)
    return round(timestamp.timestamp() * 1000)


def summary_offsets(summary: dict) -> dict[int, int]:
    value = json.loads(summary[SUMMARY_KEY])
    return {int(p): int(o) for p, o in value["next-offsets"].items()}


def test_spark_reads_key_value_and_typed_tables_as_pyiceberg_does(spark, broker_factory):
    jars, reason = iceberg_spark_jars()
    if reason is not None:
        pytest.skip(f"Iceberg's Spark runtime: {reason}")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from pyiceberg.catalog.sql import SqlCatalog

    registry_port = free_port()
    broker = broker_factory(
        {**OVERRIDES, "schema.registry.listeners": f"http://127.0.0.1:{registry_port}"}
    )
    configs = {"iceberg.target.lag.ms": "300"}
    # No maintenance until the test turns it on (the broker's first would come a minute
    # after it took partition 0).
    no_maintenance = {
        "iceberg.compaction.interval.ms": "0",
        "iceberg.snapshot.expiry.interval.ms": "0",
    }
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    created = admin.create_topics(
        [
            NewTopic(
                CLICKS, 3, 1, config={**configs, **no_maintenance, "iceberg.mode": "key_value"}
            ),
            NewTopic(USERS, 2, 1, config={**configs, "iceberg.mode": "value_schema_id_prefix"}),
        ]
    )
    for future in created.values():
        future.result(TIMEOUT)
    catalog_file = broker.log_dir / "iceberg" / "catalog.db"
    warehouse = broker.log_dir / "iceberg" / "warehouse"

    clicks, users = Acked(), Acked()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})

    def produce_clicks(first: int, count: int) -> None:
        for number in range(first, first + count):
            record = {
                "key": b"k%d" % (number % 4) if number % 5 else None,
                "value": b"click-%d" % number if number % 7 else None,
                "headers": [("n", b"%d" % number)] if number % 2 else [],
            }
            producer.produce(
                CLICKS,
                value=record["value"],
                key=record["key"],
                headers=record["headers"] or None,
                partition=number % 3,
                on_delivery=clicks.report(record),
            )

    registry = SchemaRegistryClient({"url": f"http://127.0.0.1:{registry_port}"})
    serialize = AvroSerializer(registry, json.dumps(USER))
    context = SerializationContext(USERS, MessageField.VALUE)
    produce_clicks(0, 40)
    for number in range(20):
        user = {"name": f"user-{number}", "age": number, "joined": JOINED_MS + number}
        producer.produce(
            USERS,
            value=serialize(user, context),
            partition=number % 2,
            on_delivery=users.report(user),
        )
    assert producer.flush(TIMEOUT) == 0
    assert not clicks.errors and not users.errors, clicks.errors + users.errors

    def committed(table: str, acked: Acked):
        """The table (pyiceberg) once its last snapshot's summary holds every acked offset."""
        try:
            catalog = SqlCatalog("minibroker", uri=f"sqlite:///{catalog_file}")
            loaded = catalog.load_table(("minibroker", table))
        except Exception:
            return None
        snapshot = loaded.current_snapshot()
        if snapshot is None:
            return None
        offsets = summary_offsets(dict(snapshot.summary.additional_properties))
        return loaded if offsets == acked.next_offsets() else None

    # The Spark catalog on the broker's SQLite file, read-only, configured on the running
    # session (spark.sql.catalog.<name>.* may be set until the catalog is first used) by the
    # docs' snippet as written, its paths pointed at this broker's.
    wait_until(lambda: committed(CLICKS, clicks), TIMEOUT, "clicks committed")
    (snippet,) = [b.text for b in blocks("Reading the table with Spark", PAGE)]
    snippet = snippet.replace("jdbc:sqlite:data/iceberg/catalog.db", f"jdbc:sqlite:{catalog_file}")
    exec(snippet.replace('"data/iceberg/warehouse"', repr(warehouse.as_uri())), {"spark": spark})
    assert spark.conf.get(f"spark.sql.catalog.{CATALOG}.jdbc.open_mode") == "1"

    def check_clicks() -> None:
        table = wait_until(lambda: committed(CLICKS, clicks), TIMEOUT, "clicks committed")
        expected = sorted(
            (p, o, record["timestamp"], 0, record["key"], record["value"], record["headers"])
            for (p, o), record in clicks.records.items()
        )
        seen_by_pyiceberg = sorted(
            (
                row["partition"],
                row["offset"],
                millis(row["timestamp"]),
                row["timestamp_type"],
                row["key"],
                row["value"],
                [(h["key"], h["value"]) for h in row["headers"] or ()],
            )
            for row in table.scan().to_arrow().to_pylist()
        )
        assert seen_by_pyiceberg == expected
        rows = spark.sql(
            f"SELECT partition, offset, timestamp, timestamp_type, key, value, headers"
            f" FROM {CATALOG}.minibroker.{CLICKS}"
        ).collect()
        seen_by_spark = sorted(
            (
                row["partition"],
                row["offset"],
                millis(row["timestamp"]),
                row["timestamp_type"],
                None if row["key"] is None else bytes(row["key"]),
                None if row["value"] is None else bytes(row["value"]),
                [(h["key"], bytes(h["value"])) for h in row["headers"] or ()],
            )
            for row in rows
        )
        assert seen_by_spark == seen_by_pyiceberg
        per_partition = spark.sql(
            f"SELECT partition, count(*) AS n, min(offset) AS first, max(offset) AS last,"
            f" sum(offset) AS checksum"
            f" FROM {CATALOG}.minibroker.{CLICKS} GROUP BY partition ORDER BY partition"
        ).collect()
        assert [
            (r["partition"], r["n"], r["first"], r["last"] + 1, r["checksum"])
            for r in per_partition
        ] == [(p, end, 0, end, sum(range(end))) for p, end in sorted(clicks.next_offsets().items())]
        # The offsets the table holds, as each snapshot's summary records them (the broker's
        # exactly-once state), read through the runtime's metadata tables.
        last = spark.sql(
            f"SELECT snapshot_id, summary FROM {CATALOG}.minibroker.{CLICKS}.snapshots"
            " ORDER BY committed_at DESC, snapshot_id LIMIT 1"
        ).collect()[0]
        assert last["snapshot_id"] == table.current_snapshot().snapshot_id
        assert summary_offsets(last["summary"]) == clicks.next_offsets()
        return table

    check_clicks()

    users_table = wait_until(lambda: committed(USERS, users), TIMEOUT, "users committed")
    by_pyiceberg = sorted(
        (
            row["kafka"]["partition"],
            row["kafka"]["offset"],
            row["name"],
            row["age"],
            millis(row["joined"]),
        )
        for row in users_table.scan().to_arrow().to_pylist()
    )
    assert by_pyiceberg == sorted(
        (p, o, user["name"], user["age"], user["joined"]) for (p, o), user in users.records.items()
    )
    frame = spark.sql(
        f"SELECT kafka.partition AS partition, kafka.offset AS offset, name, age, joined"
        f" FROM {CATALOG}.minibroker.{USERS}"
    )
    types = {field.name: field.dataType.simpleString() for field in frame.schema.fields}
    assert types == {
        "partition": "int",
        "offset": "bigint",
        "name": "string",
        "age": "int",
        "joined": "timestamp",
    }
    by_spark = sorted(
        (r["partition"], r["offset"], r["name"], r["age"], millis(r["joined"]))
        for r in frame.collect()
    )
    assert by_spark == by_pyiceberg

    # The broker goes on writing the catalog the Spark catalog holds open: the next commit
    # is read as well (the catalog loads the table's current metadata at each query).
    produce_clicks(40, 17)
    assert producer.flush(TIMEOUT) == 0
    assert not clicks.errors, clicks.errors
    check_clicks()

    # Table maintenance (docs/iceberg-topics.md, "Table maintenance"), read by Spark. Small
    # commits until one partition of the table (its hour) has the 5 small files a
    # compaction needs.
    def data_files(table) -> dict[str, set[str]]:
        files: dict[str, set[str]] = {}
        for task in table.scan().plan_files():
            files.setdefault(repr(task.file.partition), set()).add(task.file.file_path)
        return files

    sent = 57
    table = wait_until(lambda: committed(CLICKS, clicks), TIMEOUT, "clicks committed")
    for _ in range(12):
        if max(len(paths) for paths in data_files(table).values()) >= 5:
            break
        produce_clicks(sent, 3)
        sent += 3
        assert producer.flush(TIMEOUT) == 0
        table = wait_until(lambda: committed(CLICKS, clicks), TIMEOUT, "clicks committed")
    small = data_files(table)
    assert max(len(paths) for paths in small.values()) >= 5, small
    snapshots_before = len(table.snapshots())
    with table.transaction() as transaction:  # every snapshot old enough to expire
        transaction.set_properties({"history.expire.max-snapshot-age-ms": "0"})

    def set_topic_configs(values: dict[str, str]) -> None:
        changes = [
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in values.items()
        ]
        resource = ConfigResource("TOPIC", CLICKS, incremental_configs=changes)
        admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)

    def current_operation(table) -> str:
        return table.current_snapshot().summary.operation.value

    set_topic_configs({"iceberg.compaction.interval.ms": "300"})
    wait_until(
        lambda: current_operation(committed(CLICKS, clicks) or table) == "replace",
        TIMEOUT,
        "a compaction",
    )
    set_topic_configs({"iceberg.compaction.interval.ms": "0"})
    table = check_clicks()  # rows, offsets and checksums as produced, Spark = pyiceberg
    compacted = data_files(table)
    assert sum(map(len, compacted.values())) < sum(map(len, small.values()))
    spark_files = {
        r["file_path"]
        for r in spark.sql(f"SELECT file_path FROM {CATALOG}.minibroker.{CLICKS}.files").collect()
    }
    assert spark_files == set().union(*compacted.values())
    (newest,) = spark.sql(
        f"SELECT snapshot_id, operation FROM {CATALOG}.minibroker.{CLICKS}.snapshots"
        " ORDER BY committed_at DESC, snapshot_id LIMIT 1"
    ).collect()
    assert (newest["snapshot_id"], newest["operation"]) == (
        table.current_snapshot().snapshot_id,
        "replace",
    )

    # Expiry: every snapshot but the compaction's goes, with the small files only they held.
    set_topic_configs({"iceberg.snapshot.expiry.interval.ms": "300"})
    table = wait_until(
        lambda: (t := committed(CLICKS, clicks)) is not None and len(t.snapshots()) == 1 and t,
        TIMEOUT,
        "the old snapshots expired",
    )
    set_topic_configs({"iceberg.snapshot.expiry.interval.ms": "0"})
    assert snapshots_before > 1 and current_operation(table) == "replace"
    replaced = set().union(*small.values()) - set().union(*compacted.values())
    assert replaced and not [p for p in replaced if Path(p.removeprefix("file://")).exists()]
    check_clicks()
    spark_snapshots = spark.sql(
        f"SELECT snapshot_id FROM {CATALOG}.minibroker.{CLICKS}.snapshots"
    ).collect()
    assert [r["snapshot_id"] for r in spark_snapshots] == [table.current_snapshot().snapshot_id]

    # The writer appends on top of the compaction; Spark reads every record once.
    produce_clicks(sent, 7)
    assert producer.flush(TIMEOUT) == 0
    assert not clicks.errors, clicks.errors
    check_clicks()

    # The catalog is read-only: Spark cannot write through it.
    with pytest.raises(Exception, match="read-only"):
        spark.sql(f"CREATE TABLE {CATALOG}.minibroker.other (id bigint)").collect()
