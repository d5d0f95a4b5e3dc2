"""iceberg.mode=value_schema_id_prefix's blocking part (minibroker.iceberg.table) on a real
pyiceberg SQL catalog in a temporary directory, in process: typed rows beside the ``kafka``
struct, the dead-letter table ``<topic>~dlq`` written exactly once when a commit is made again,
a schema version with a new optional field evolving the table (old rows read it as null), and
a version whose field changed type sent to the dead-letter table with the reason. Values are
framed as confluent-kafka's AvroSerializer frames them (fastavro's bytes after 0 and the id)."""

from __future__ import annotations

import decimal
import io
import json
import struct
from pathlib import Path

import fastavro
import pytest
from pyiceberg.types import IntegerType, StringType

from minibroker.iceberg.table import TopicTable, drop_topic_tables, open_catalog
from minibroker.iceberg.translation import CommitPlan, PartitionCommit, ReadChunk
from minibroker.protocol.records import Record, encode_batch

TOPIC_ID = "5c1b2a3e-0000-4000-8000-000000000003"
NOW_MS = 1_796_000_000_000
V1 = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "email", "type": ["null", "string"]}]}
# "age" as a string: Iceberg cannot promote int to string.
V3 = {**V1, "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "string"}]}
SCHEMAS = {1: V1, 2: V2, 3: V3}


def framed(schema_id: int, value: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMAS[schema_id]), value)
    return b"\x00" + struct.pack(">i", schema_id) + out.getvalue()


def lookup(schema_id: int) -> tuple[str, str] | None:
    schema = SCHEMAS.get(schema_id)
    return None if schema is None else ("AVRO", json.dumps(schema))


def reads(partition: int, first: int, values: list[bytes]) -> dict[int, list[ReadChunk]]:
    records = [
        Record(first + n, NOW_MS + first + n, b"key", value) for n, value in enumerate(values)
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
    return TopicTable.open(
        catalog,
        "minibroker",
        "users",
        TOPIC_ID,
        (("hour", "timestamp"), ("identity", "partition")),
        "value_schema_id_prefix",
    )


def scan(catalog, name: str = "users") -> list[dict]:
    table = catalog.load_table(("minibroker", name))
    return table.scan().to_arrow().to_pylist()


def test_typed_rows_dead_letters_once_and_an_evolution(catalog, autojump_clock):
    table = writer(catalog)
    first = [framed(1, {"name": f"u{n}", "age": n}) for n in range(4)]
    first[2] = b"not framed"
    outcome = table.commit(plan(0, None, 0, 4), reads(0, 0, first), lookup)
    assert outcome.snapshot and outcome.rows == {0: 3} and outcome.dead_letters == {0: 1}
    rows = sorted(scan(catalog), key=lambda row: row["kafka"]["offset"])
    assert [(r["name"], r["age"], r["kafka"]["offset"]) for r in rows] == [
        ("u0", 0, 0),
        ("u1", 1, 1),
        ("u3", 3, 3),
    ]
    meta = rows[0]["kafka"]
    assert meta["partition"] == 0 and meta["key"] == b"key" and meta["schema_id"] == 1
    assert meta["value"] == first[0] and round(meta["timestamp"].timestamp() * 1000) == NOW_MS
    table.table.refresh()
    assert [f.name for f in table.table.spec().fields] == [
        "kafka_timestamp_hour",
        "kafka_partition",
    ]
    (dead,) = scan(catalog, "users~dlq")
    assert (dead["partition"], dead["offset"], dead["value"]) == (0, 2, b"not framed")
    assert "magic byte 0" in dead["reason"]

    # The same range committed again (a retry after an unknown outcome, a new leader): the
    # main table refuses it and the dead-letter table adds nothing.
    again = table.commit(plan(0, None, 0, 4), reads(0, 0, first), lookup)
    assert again.conflicts == {0: 4} and not again.dead_letters
    assert len(scan(catalog, "users~dlq")) == 1
    # A writer that never saw the dead-letter commit's outcome (another broker) filters by the
    # offsets the dead-letter table records.
    other = writer(catalog)
    assert not other._write_dead_letters(plan(0, None, 0, 4), _dead_of(other, first))

    # Version 2 adds an optional field: the table gains the column, older rows read null.
    second = [framed(2, {"name": "v2", "age": 20, "email": "v2@example.com"})]
    assert table.commit(plan(0, 4, 4, 5), reads(0, 4, second), lookup).rows == {0: 1}
    email = table.table.schema().find_field("email")
    assert email.field_type == StringType() and not email.required
    by_offset = {row["kafka"]["offset"]: row for row in scan(catalog)}
    assert by_offset[4]["email"] == "v2@example.com" and by_offset[0]["email"] is None

    # Version 3 changes age's type: its records are dead letters, with the reason; the table's
    # schema keeps age as an int; version 1 records in the same commit are written.
    third = [framed(3, {"name": "v3", "age": "old"}), framed(1, {"name": "v1", "age": 1})]
    outcome = table.commit(plan(0, 5, 5, 7), reads(0, 5, third), lookup)
    assert outcome.rows == {0: 1} and outcome.dead_letters == {0: 1}
    assert table.table.schema().find_field("age").field_type == IntegerType()
    dead = {row["offset"]: row["reason"] for row in scan(catalog, "users~dlq")}
    assert sorted(dead) == [2, 5]
    assert "schema id 3's columns cannot be merged into the table's" in dead[5]
    assert sorted(row["kafka"]["offset"] for row in scan(catalog)) == [0, 1, 3, 4, 6]
    assert table.offsets() == {0: 7}


def _dead_of(table: TopicTable, values: list[bytes]):
    from minibroker.iceberg.translation import translate
    from minibroker.iceberg.values import split

    raw = translate(0, reads(0, 0, values)[0], 0, len(values))
    return split(raw, lambda schema_id: table._decoder(schema_id, lookup))


def test_a_value_its_column_cannot_hold_is_a_dead_letter_not_a_stuck_topic(catalog, autojump_clock):
    """Avro's decimal is any-length bytes: a value wider than the schema's precision decodes,
    but no decimal(4, 2) column holds it. Its record becomes a dead letter; the others land."""
    schema = {
        "type": "record",
        "name": "Price",
        "fields": [
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2},
            }
        ],
    }
    SCHEMAS[10] = schema
    try:
        table = TopicTable.open(
            catalog, "minibroker", "prices", TOPIC_ID, (), "value_schema_id_prefix"
        )
        unscaled = (1234567).to_bytes(3, "big")  # 12345.67: seven digits
        wide = b"\x00" + struct.pack(">i", 10) + bytes([len(unscaled) * 2]) + unscaled
        values = [framed(10, {"amount": decimal.Decimal("12.34")}), wide]
        outcome = table.commit(plan(0, None, 0, 2), reads(0, 0, values), lookup)
        assert outcome.rows == {0: 1} and outcome.dead_letters == {0: 1}
        (row,) = scan(catalog, "prices")
        assert row["amount"] == decimal.Decimal("12.34")
        (dead,) = scan(catalog, "prices~dlq")
        assert dead["offset"] == 1 and "does not fit the table's columns" in dead["reason"]
    finally:
        del SCHEMAS[10]


def test_a_deleted_topics_tables_are_dropped_unless_another_topic_wrote_them(
    catalog, tmp_path, autojump_clock
):
    table = writer(catalog)
    values = [framed(1, {"name": "a", "age": 1}), b"not framed"]
    assert table.commit(plan(0, None, 0, 2), reads(0, 0, values), lookup).snapshot
    names = {name for _, name in catalog.list_tables("minibroker")}
    assert names == {"users", "users~dlq"}
    assert any((tmp_path / "warehouse").rglob("*.parquet"))
    # A topic made again under the name, whose writer has committed since: left alone.
    other_id = "5c1b2a3e-0000-4000-8000-000000000099"
    assert drop_topic_tables(catalog, "minibroker", "users", other_id) == []
    assert drop_topic_tables(catalog, "minibroker", "users", TOPIC_ID) == ["users", "users~dlq"]
    assert catalog.list_tables("minibroker") == []
    assert not any((tmp_path / "warehouse").rglob("*.parquet"))
    # Another broker that tries too finds nothing to drop.
    assert drop_topic_tables(catalog, "minibroker", "users", TOPIC_ID) == []


def test_a_commit_of_dead_letters_only_moves_the_main_tables_offsets(catalog, autojump_clock):
    """Found by bench/iceberg_failover.py: a commit whose records all went to the dead-letter
    table left the main table's offsets where they were, so the partition's next leader (one
    that knew the schema) wrote the same offsets typed: records in both tables."""
    table = writer(catalog)
    letters = [b"not framed", b"nor this"]
    outcome = table.commit(plan(0, None, 0, 2), reads(0, 0, letters), lookup)
    assert outcome.dead_letters == {0: 2} and outcome.rows == {0: 0}
    assert outcome.snapshot and table.offsets() == {0: 2}
    assert scan(catalog) == []
    # The next leader starts from the table's offsets: the same range is refused.
    again = writer(catalog).commit(plan(0, None, 0, 2), reads(0, 0, letters), lookup)
    assert again.conflicts == {0: 2} and not again.dead_letters
