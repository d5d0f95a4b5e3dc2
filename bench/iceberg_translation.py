"""What does a typed Iceberg table cost the writer? `python -m bench.iceberg_translation`

In this process, no broker: one commit of N records (one partition, batches of 1,000) through
``TopicTable.commit`` into a fresh pyiceberg SQL catalog on SQLite in a temporary directory,
as the writer's worker thread makes it (records decoded from their batches, values decoded
and turned into Arrow columns, Parquet written, the snapshot committed), for
``iceberg.mode=key_value`` and for ``value_schema_id_prefix`` with Avro values (a record of a
string, an int, a timestamp-millis and an optional string, as confluent-kafka's
AvroSerializer frames it) and with JSON Schema values of the same fields. It prints records per
second of each. The registry is a dict here: looking schemas up costs once per schema id.
"""

from __future__ import annotations

import argparse
import io
import json
import struct
import tempfile
import time
from pathlib import Path

import fastavro

from minibroker.iceberg.table import TopicTable, open_catalog
from minibroker.iceberg.translation import CommitPlan, PartitionCommit, ReadChunk
from minibroker.protocol.records import Record, encode_batch

BASE_MS = 1_796_000_000_000
AVRO_SCHEMA = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "joined", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "email", "type": ["null", "string"], "default": None},
    ],
}
JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "joined": {"type": "integer"},
        "email": {"type": ["string", "null"]},
    },
}
SCHEMAS = {1: ("AVRO", json.dumps(AVRO_SCHEMA)), 2: ("JSON", json.dumps(JSON_SCHEMA))}


def _user(number: int) -> dict:
    email = None if number % 2 else f"user-{number}@example.com"
    joined = BASE_MS + number
    return {"name": f"user-{number}", "age": number % 100, "joined": joined, "email": email}


def _values(kind: str, count: int) -> list[bytes]:
    if kind == "json":
        prefix = b"\x00" + struct.pack(">i", 2)
        return [prefix + json.dumps(_user(n)).encode() for n in range(count)]
    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    prefix = b"\x00" + struct.pack(">i", 1)
    values = []
    for number in range(count):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, _user(number))
        values.append(prefix + out.getvalue())
    return values


def _chunks(values: list[bytes]) -> list[ReadChunk]:
    chunks = []
    for first in range(0, len(values), 1000):
        part = values[first : first + 1000]
        records = [Record(first + i, BASE_MS + first + i, None, v) for i, v in enumerate(part)]
        chunks.append(ReadChunk(encode_batch(records, base_offset=first)))
    return chunks


def measure(mode: str, kind: str, count: int) -> float:
    """Records per second of one commit of ``count`` records."""
    chunks = _chunks(_values(kind, count))
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        catalog = open_catalog("bench", f"sqlite:///{root}/catalog.db", (root / "w").as_uri())
        table = TopicTable.open(catalog, "bench", "t", "id", (("hour", "timestamp"),), mode)
        plan = CommitPlan("id", (PartitionCommit(0, 1, None, 0, count),))
        started = time.perf_counter()
        outcome = table.commit(plan, {0: chunks}, SCHEMAS.get)
        took = time.perf_counter() - started
    assert outcome.snapshot and outcome.rows == {0: count}, outcome
    return count / took


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.iceberg_translation")
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    for mode, kind in (
        ("key_value", "avro"),
        ("value_schema_id_prefix", "avro"),
        ("value_schema_id_prefix", "json"),
    ):
        rate = measure(mode, kind, args.records)
        label = mode if mode == "key_value" else f"{mode} ({kind})"
        print(f"{label:<34} {rate:>10,.0f} records/s ({args.records:,} records, one commit)")


if __name__ == "__main__":
    main()
