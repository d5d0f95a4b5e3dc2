"""The blocking part of Iceberg topics: pyiceberg's catalog and tables, pyarrow's columns and
Parquet files. Everything here blocks (SQL, file writes, Parquet encoding) and runs only in a
worker thread of the service (``trio.to_thread.run_sync``), one call at a time per broker.

The catalog is pyiceberg's ``SqlCatalog`` (Iceberg's JDBC catalog layout, which Spark's
``JdbcCatalog`` reads), on SQLite in the broker's first log dir unless
``iceberg.catalog.uri`` names another database. A topic's table is
``<iceberg.catalog.namespace>.<topic>``, created on first use with the key_value schema
(``KEY_VALUE_SCHEMA``) and the topic's ``iceberg.partition.spec`` (by default the hour of the
record timestamp, Redpanda's default).

Columns, as Redpanda's key_value mode has them but flat (Redpanda nests partition, offset,
timestamp, headers and key in a ``redpanda`` struct, beside ``value``): partition (int),
offset (long), timestamp (timestamptz, microseconds, from Kafka's milliseconds), timestamp_type
(int: 0 CreateTime, 1 LogAppendTime, as Spark's Kafka source has it), key and value (binary,
null for a null key or value), headers (list of struct key string, value binary).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import (
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    YearTransform,
)
from pyiceberg.types import (
    BinaryType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from minibroker.iceberg.translation import (
    CommitOutcome,
    CommitPlan,
    ReadChunk,
    Rows,
    committed_offsets,
    conflicts,
    encode_summary,
    table_offsets,
    translate,
)

KEY_VALUE_SCHEMA = Schema(
    NestedField(1, "partition", IntegerType(), required=True),
    NestedField(2, "offset", LongType(), required=True),
    NestedField(3, "timestamp", TimestamptzType(), required=True),
    NestedField(4, "timestamp_type", IntegerType(), required=True),
    NestedField(5, "key", BinaryType(), required=False),
    NestedField(6, "value", BinaryType(), required=False),
    NestedField(
        7,
        "headers",
        ListType(
            8,
            StructType(
                NestedField(9, "key", StringType(), required=False),
                NestedField(10, "value", BinaryType(), required=False),
            ),
            element_required=True,
        ),
        required=False,
    ),
)
_SOURCE_IDS = {"partition": 1, "timestamp": 3, "timestamp_type": 4}
_TRANSFORMS: dict[str, Transform[Any, Any]] = {
    "identity": IdentityTransform(),
    "hour": HourTransform(),
    "day": DayTransform(),
    "month": MonthTransform(),
    "year": YearTransform(),
}
# A commit that loses the catalog's race (another broker committed another partition of the
# topic in between) is checked and tried again this many times before it is reported.
COMMIT_ATTEMPTS = 5
# pyiceberg (0.10 on) retries a commit that lost the race by rebasing it onto the new snapshot,
# keeping its snapshot properties: the offsets would no longer be checked against the table
# they are written to (an old leader's rows could land twice, another partition's offsets go
# back). The tables are made with no retries in pyiceberg: a lost race comes back here, where
# the offsets are checked again first (``TopicTable.commit``).
TABLE_PROPERTIES = {"commit.retry.num-retries": "0"}


def partition_spec(fields: tuple[tuple[str, str], ...]) -> PartitionSpec:
    """The Iceberg partition spec of ``iceberg.partition.spec``'s (transform, column) pairs,
    each field named as Spark names them (``timestamp_hour``; identity keeps the column's)."""
    return PartitionSpec(
        *(
            PartitionField(
                source_id=_SOURCE_IDS[column],
                field_id=1000 + position,
                transform=_TRANSFORMS[transform],
                name=column if transform == "identity" else f"{column}_{transform}",
            )
            for position, (transform, column) in enumerate(fields)
        )
    )


def open_catalog(name: str, uri: str, warehouse: str) -> SqlCatalog:
    """pyiceberg's SQL catalog; the default SQLite file's directory is made first."""
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    if warehouse.startswith("file://"):
        Path(warehouse[len("file://") :]).mkdir(parents=True, exist_ok=True)
    return SqlCatalog(name, uri=uri, warehouse=warehouse)


def to_arrow(rows: Rows) -> pa.Table:
    """The rows as an Arrow table of the key_value schema (its required columns not null)."""
    schema = KEY_VALUE_SCHEMA.as_arrow()
    micros = [milliseconds * 1000 for milliseconds in rows.timestamp_ms]
    headers = [[{"key": k, "value": v} for k, v in record] for record in rows.headers]
    return pa.Table.from_pydict(
        {
            "partition": rows.partition,
            "offset": rows.offset,
            "timestamp": micros,
            "timestamp_type": rows.timestamp_type,
            "key": rows.key,
            "value": rows.value,
            "headers": headers,
        },
        schema=schema,
    )


class TopicTable:
    """One topic's table, as this broker writes it."""

    def __init__(self, table: Table, topic_id: str) -> None:
        self.table = table
        self.topic_id = topic_id

    @classmethod
    def open(
        cls,
        catalog: SqlCatalog,
        namespace: str,
        topic: str,
        topic_id: str,
        spec: tuple[tuple[str, str], ...],
    ) -> TopicTable:
        """The topic's table, created on first use (by whichever broker gets there first)."""
        try:
            catalog.create_namespace_if_not_exists(namespace)
        except Exception:
            # Another broker made it at the same moment: the SQL catalog lets the database's
            # IntegrityError through (seen with minibroker dev's three brokers on one SQLite).
            if not catalog.namespace_exists(namespace):
                raise
        identifier = (namespace, topic)
        try:
            table = catalog.create_table_if_not_exists(
                identifier,
                schema=KEY_VALUE_SCHEMA,
                partition_spec=partition_spec(spec),
                properties=TABLE_PROPERTIES,
            )
        except Exception:
            if not catalog.table_exists(identifier):
                raise
            table = catalog.load_table(identifier)
        if any(table.properties.get(key) != value for key, value in TABLE_PROPERTIES.items()):
            # Made by an older minibroker, or changed by someone: set back, or no exactly once.
            with table.transaction() as transaction:
                transaction.set_properties(TABLE_PROPERTIES)
        return cls(table, topic_id)

    def _summaries(self) -> Iterator[Mapping[str, str]]:
        """The current snapshot's summary, then its ancestors', newest first."""
        snapshot = self.table.current_snapshot()
        while snapshot is not None:
            summary = snapshot.summary
            yield {} if summary is None else dict(summary.additional_properties)
            parent = snapshot.parent_snapshot_id
            snapshot = None if parent is None else self.table.snapshot_by_id(parent)

    def offsets(self) -> dict[int, int]:
        """Each partition's next offset as the table's current snapshot holds it."""
        self.table.refresh()
        return table_offsets(self._summaries(), self.topic_id)

    def commit(self, plan: CommitPlan, reads: Mapping[int, list[ReadChunk]]) -> CommitOutcome:
        """Translate the reads and append them in one snapshot, if the table still holds
        each partition's expected offset (else the conflicts, nothing written). The append
        requires the table's current snapshot to be the one checked (pyiceberg's fast append
        asserts the branch's snapshot id; the SQL catalog swaps the metadata location only
        if it is still the one read), so the check and the commit are one atomic step; a
        commit that loses that race is checked again."""
        rows = Rows()
        counts: dict[int, int] = {}
        for part in plan.partitions:
            translated = translate(
                part.index, reads.get(part.index, []), part.start, part.next_offset
            )
            counts[part.index] = len(translated)
            rows.extend(translated)
        data = to_arrow(rows) if len(rows) else None
        for _attempt in range(COMMIT_ATTEMPTS):
            offsets = self.offsets()
            found = conflicts(offsets, plan)
            if found:
                return CommitOutcome(conflicts=found)
            if data is None:
                return CommitOutcome(rows=counts)
            properties = encode_summary(self.topic_id, committed_offsets(offsets, plan))
            try:
                self.table.append(data, snapshot_properties=properties)
            except CommitFailedException:
                continue
            return CommitOutcome(rows=counts, snapshot=True)
        return CommitOutcome(error=f"lost the commit race {COMMIT_ATTEMPTS} times in a row")
