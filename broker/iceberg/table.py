"""The blocking part of Iceberg topics: pyiceberg's catalog and tables, pyarrow's columns and
Parquet files. Everything here blocks (SQL, file writes, Parquet encoding) and runs only in the
service's writer (writer.py: a process of its own per node, or a worker thread in in-process
tests), one call at a time per broker.

The catalog is pyiceberg's ``SqlCatalog`` (Iceberg's JDBC catalog layout, which Spark's
``JdbcCatalog`` reads), on SQLite in the broker's first log dir unless
``iceberg.catalog.uri`` names another database; or, with ``iceberg.catalog.type=rest``,
pyiceberg's ``RestCatalog`` (Iceberg's REST catalog protocol: Polaris, Nessie, Lakekeeper,
Unity, Iceberg's own REST server), given the ``iceberg.rest.catalog.*`` properties by their
Iceberg names, with HTTP timeouts pyiceberg does not set (``TimedRestCatalog``). Nothing
below depends on which: both commit a table's new metadata only if the commit's requirements
(the branch's snapshot id, ``AssertRefSnapshotId``) still hold, the SQL catalog by a
conditional UPDATE of the metadata location, a REST server by checking them against the
table's current metadata in the same step as its swap. A topic's table is
``<iceberg.catalog.namespace>.<topic>``, created on first use with the key_value schema
(``KEY_VALUE_SCHEMA``) and the topic's ``iceberg.partition.spec`` (by default the hour of the
record timestamp, Redpanda's default).

Columns, as Redpanda's key_value mode has them but flat (Redpanda nests partition, offset,
timestamp, headers and key in a ``redpanda`` struct, beside ``value``): partition (int),
offset (long), timestamp (timestamptz, microseconds, from Kafka's milliseconds), timestamp_type
(int: 0 CreateTime, 1 LogAppendTime, as Spark's Kafka source has it), key and value (binary,
null for a null key or value), headers (list of struct key string, value binary).

``iceberg.mode=value_schema_id_prefix`` (values.py maps the schemas): the table's columns are
the value schema's fields, with the record's metadata beside them in one struct column,
``kafka`` (Redpanda's ``redpanda`` struct under a vendor-neutral name): partition, offset,
timestamp, timestamp_type, key, value (the raw bytes, wire-format prefix included), headers and
schema_id. A table is created with the ``kafka`` column alone and takes the columns of each
schema id the first time one of its records is written (pyiceberg's ``update_schema().
union_by_name``: new optional columns, the type promotions Iceberg allows); rows written before
read a new column as null. Records that cannot be written typed (no schema id, an id the
registry does not hold, a schema not mapped, a value that does not decode, a schema whose
columns cannot be merged into the table's) go to the dead-letter table ``<topic>~dlq``
(Redpanda's name), made on first use: the key_value columns plus ``reason``.

Exactly once with two tables: the dead-letter table's snapshots record, as the main table's
do, the next offset per partition they cover; a commit first writes to it only the dead
letters at or past that offset (so a commit retried, or made again by a new leader, adds none
twice), then appends the typed rows to the main table under its conditional commit.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, ValidationError
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
from requests import Session
from requests.adapters import HTTPAdapter

from minibroker.iceberg.translation import (
    SUMMARY_KEY,
    CommitOutcome,
    CommitPlan,
    ReadChunk,
    Rows,
    TableStopped,
    committed_offsets,
    conflicts,
    encode_summary,
    table_offsets,
    translate,
)
from minibroker.iceberg.values import META_COLUMN, Decoder, TypedRows, decoder, split

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
# value_schema_id_prefix: the metadata struct; value columns are added beside it.
VALUE_BASE_SCHEMA = Schema(
    NestedField(
        1,
        META_COLUMN,
        StructType(
            NestedField(2, "partition", IntegerType(), required=True),
            NestedField(3, "offset", LongType(), required=True),
            NestedField(4, "timestamp", TimestamptzType(), required=True),
            NestedField(5, "timestamp_type", IntegerType(), required=True),
            NestedField(6, "key", BinaryType(), required=False),
            NestedField(7, "value", BinaryType(), required=False),
            NestedField(
                8,
                "headers",
                ListType(
                    9,
                    StructType(
                        NestedField(10, "key", StringType(), required=False),
                        NestedField(11, "value", BinaryType(), required=False),
                    ),
                    element_required=True,
                ),
                required=False,
            ),
            NestedField(12, "schema_id", IntegerType(), required=False),
        ),
        required=True,
    ),
)
_VALUE_SOURCE_IDS = {"partition": 2, "timestamp": 4, "timestamp_type": 5}
# The dead-letter table: the key_value columns and why the record is there.
DLQ_SCHEMA = Schema(
    *KEY_VALUE_SCHEMA.fields, NestedField(11, "reason", StringType(), required=True)
)
DLQ_SUFFIX = "~dlq"
# What pyarrow raises for a value its column cannot hold.
_UNFIT = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError)
KEY_VALUE = "key_value"
VALUE_SCHEMA_ID_PREFIX = "value_schema_id_prefix"
# (schema type, schema text, for PROTOBUF the FileDescriptor built or the error) of a schema
# id from the registry; None: no such id.
Lookup = Callable[[int], tuple[str, str, Any] | None]
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


def partition_spec(fields: tuple[tuple[str, str], ...], typed: bool = False) -> PartitionSpec:
    """The Iceberg partition spec of ``iceberg.partition.spec``'s (transform, column) pairs,
    each field named as Spark names them (``timestamp_hour``; identity keeps the column's).
    ``typed``: the value_schema_id_prefix layout, whose columns are in the ``kafka`` struct
    (fields named ``kafka_timestamp_hour``, ``kafka_partition``: value columns may be called
    ``partition``)."""
    sources = _VALUE_SOURCE_IDS if typed else _SOURCE_IDS
    prefix = f"{META_COLUMN}_" if typed else ""
    return PartitionSpec(
        *(
            PartitionField(
                source_id=sources[column],
                field_id=1000 + position,
                transform=_TRANSFORMS[transform],
                name=prefix + (column if transform == "identity" else f"{column}_{transform}"),
            )
            for position, (transform, column) in enumerate(fields)
        )
    )


def open_catalog(
    name: str, uri: str, warehouse: str, file_io: Mapping[str, str] | None = None
) -> SqlCatalog:
    """pyiceberg's SQL catalog; the default SQLite file's directory is made first.
    ``file_io``: pyiceberg's FileIO properties (``s3.endpoint``, ``s3.access-key-id``, ...,
    from ``iceberg.catalog.s3.*``) for a warehouse in object storage (``s3://bucket/path``:
    pyiceberg's PyArrowFileIO, pyarrow's S3 file system)."""
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    if warehouse.startswith("file://"):
        Path(warehouse[len("file://") :]).mkdir(parents=True, exist_ok=True)
    return SqlCatalog(name, uri=uri, warehouse=warehouse, **dict(file_io or {}))


# The REST catalog's HTTP timeouts, by Iceberg's Java client's property names (pyiceberg sets
# none, and requests then waits forever on a server that accepts and never answers: the
# writer's thread with it, every Iceberg topic of the broker behind it, and its shutdown).
CONNECT_TIMEOUT_PROPERTY = "rest.client.connection-timeout-ms"
READ_TIMEOUT_PROPERTY = "rest.client.socket-timeout-ms"
CONNECT_TIMEOUT_MS = 10_000
READ_TIMEOUT_MS = 60_000


class _TimeoutAdapter(HTTPAdapter):
    """requests' adapter, with a timeout for the requests that give none."""

    def __init__(self, timeout: tuple[float, float]) -> None:
        super().__init__()
        self.timeout = timeout

    def send(self, request, **kwargs):  # type: ignore[no-untyped-def, override]
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self.timeout
        return super().send(request, **kwargs)


class TimedRestCatalog(RestCatalog):
    """pyiceberg's ``RestCatalog``, whose HTTP requests time out: connecting after
    ``rest.client.connection-timeout-ms`` (10 s), waiting for an answer after
    ``rest.client.socket-timeout-ms`` (60 s), as Iceberg's Java ``HTTPClient`` names them.
    Everything else is pyiceberg's: the session it builds (headers, TLS, SigV4, whose own
    adapter on the catalog's URL is left as it is) gets the timeout adapter for http and https.
    A commit whose answer timed out may have been made: the writer reads the table's offsets
    again before anything else (``TopicTable.commit``), so it is not made twice."""

    def _create_session(self) -> Session:
        session = super()._create_session()
        timeout = (
            int(self.properties.get(CONNECT_TIMEOUT_PROPERTY, CONNECT_TIMEOUT_MS)) / 1000,
            int(self.properties.get(READ_TIMEOUT_PROPERTY, READ_TIMEOUT_MS)) / 1000,
        )
        adapter = _TimeoutAdapter(timeout)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session


def open_rest_catalog(name: str, properties: Mapping[str, str]) -> Catalog:
    """pyiceberg's REST catalog (``TimedRestCatalog``, through ``load_catalog``'s
    ``py-catalog-impl``), given the ``iceberg.rest.catalog.*`` properties by their Iceberg
    names (``uri``, ``warehouse``, ``credential`` or ``token``, ``prefix``, ...) and nothing
    else (pyiceberg's own configuration files and variables are not read on this path).
    pyiceberg asks the server's ``/v1/config`` here, so a server that cannot be reached fails
    this call (the service retries it)."""
    return load_catalog(
        name, **{**properties, "py-catalog-impl": f"{__name__}.{TimedRestCatalog.__name__}"}
    )


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


def _summaries(table: Table) -> Iterator[Mapping[str, str]]:
    """A table's current snapshot's summary, then its ancestors', newest first."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary
        yield {} if summary is None else dict(summary.additional_properties)
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else table.snapshot_by_id(parent)


def _create(catalog: Catalog, identifier: tuple[str, str], schema: Schema, spec) -> Table:
    """The table, created on first use (by whichever broker gets there first)."""
    try:
        table = catalog.create_table_if_not_exists(
            identifier, schema=schema, partition_spec=spec, properties=TABLE_PROPERTIES
        )
    except Exception:
        if not catalog.table_exists(identifier):
            raise
        table = catalog.load_table(identifier)
    if any(table.properties.get(key) != value for key, value in TABLE_PROPERTIES.items()):
        # Made by an older minibroker, or changed by someone: set back, or no exactly once.
        with table.transaction() as transaction:
            transaction.set_properties(TABLE_PROPERTIES)
    return table


def _holds_topic(table: Table, topic_id: str) -> bool:
    """Whether the table's newest translated offsets are ``topic_id``'s (or it has none):
    not a table a topic made again under the same name has written to since."""
    for summary in _summaries(table):
        text = summary.get(SUMMARY_KEY)
        if text is None:
            continue
        try:
            return bool(json.loads(text).get("topic-id") == topic_id)
        except (ValueError, AttributeError):
            continue
    return True


def drop_topic_tables(catalog: Catalog, namespace: str, topic: str, topic_id: str) -> list[str]:
    """A deleted topic's table and dead-letter table purged (pyiceberg's ``purge_table``: the
    catalog entry, then the data and metadata files), as Redpanda drops them with
    ``redpanda.iceberg.delete``; a table that another topic of the same name has written to
    since is left. Several brokers may try at once: a table already gone is passed over.
    Returns the names dropped."""
    dropped = []
    for name in (topic, topic + DLQ_SUFFIX):
        identifier = (namespace, name)
        try:
            table = catalog.load_table(identifier)
            if not _holds_topic(table, topic_id):
                continue
            catalog.purge_table(identifier)
        except NoSuchTableError:
            continue
        dropped.append(name)
    return dropped


class TopicTable:
    """One topic's table, as this broker writes it."""

    def __init__(
        self,
        table: Table,
        topic_id: str,
        mode: str = KEY_VALUE,
        catalog: Catalog | None = None,
        spec: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.table = table
        self.topic_id = topic_id
        self.mode = mode
        self.catalog = catalog
        self.spec = spec
        self.dlq: Table | None = None
        self._decoders: dict[int, Decoder] = {}
        # Schema ids whose columns this writer merged into the table's schema.
        self._merged: set[int] = set()
        # Set (from the event loop) when the topic is deleted: a commit running in the
        # worker thread checks it before each write and stops (TableStopped).
        self._stopped = threading.Event()

    def stop(self) -> None:
        """The topic was deleted: write nothing more (a commit in the worker thread stops at
        its next check, before its next write)."""
        self._stopped.set()

    def _check_not_stopped(self) -> None:
        if self._stopped.is_set():
            raise TableStopped(f"{self.table.name()[-1]}: the topic was deleted")

    @classmethod
    def open(
        cls,
        catalog: Catalog,
        namespace: str,
        topic: str,
        topic_id: str,
        spec: tuple[tuple[str, str], ...],
        mode: str = KEY_VALUE,
    ) -> TopicTable:
        """The topic's table, created on first use (by whichever broker gets there first)."""
        try:
            catalog.create_namespace_if_not_exists(namespace)
        except Exception:
            # Another broker made it at the same moment: the SQL catalog lets the database's
            # IntegrityError through (seen with minibroker dev's three brokers on one SQLite);
            # a REST catalog may answer 409 rather than say it exists.
            if not catalog.namespace_exists(namespace):
                raise
        typed = mode == VALUE_SCHEMA_ID_PREFIX
        table = _create(
            catalog,
            (namespace, topic),
            VALUE_BASE_SCHEMA if typed else KEY_VALUE_SCHEMA,
            partition_spec(spec, typed),
        )
        return cls(table, topic_id, mode, catalog, spec)

    def _summaries(self) -> Iterator[Mapping[str, str]]:
        return _summaries(self.table)

    def offsets(self) -> dict[int, int]:
        """Each partition's next offset as the table's current snapshot holds it."""
        self.table.refresh()
        return table_offsets(self._summaries(), self.topic_id)

    def commit(
        self,
        plan: CommitPlan,
        reads: Mapping[int, list[ReadChunk]],
        lookup: Lookup | None = None,
    ) -> CommitOutcome:
        """Translate the reads and append them in one snapshot, if the table still holds
        each partition's expected offset (else the conflicts, nothing written). The append
        requires the table's current snapshot to be the one checked (pyiceberg's fast append
        asserts the branch's snapshot id; the SQL catalog swaps the metadata location only
        if it is still the one read, a REST catalog checks the assertion against the table's
        current metadata as it swaps it and answers 409 otherwise), so the check and the
        commit are one atomic step; a commit that loses that race is checked again.
        value_schema_id_prefix: the values decoded with ``lookup``'s schemas first, the
        table's schema evolved, the dead letters written (module docstring). TableStopped,
        with nothing more written, once ``stop`` was called (checked before each write: a
        write under way when it is called finishes)."""
        self._check_not_stopped()
        rows = Rows()
        counts: dict[int, int] = {}
        for part in plan.partitions:
            translated = translate(
                part.index, reads.get(part.index, []), part.start, part.next_offset
            )
            counts[part.index] = len(translated)
            rows.extend(translated)
        if self.mode != VALUE_SCHEMA_ID_PREFIX:
            data = to_arrow(rows) if len(rows) else None
            return self._append(plan, data, counts)
        if lookup is None:
            raise RuntimeError("value_schema_id_prefix needs the schema registry")
        typed = split(rows, lambda schema_id: self._decoder(schema_id, lookup))
        self._evolve(typed, rows)
        data = self._arrow(typed, rows)
        found = conflicts(self.offsets(), plan)
        if found:
            return CommitOutcome(conflicts=found)
        dead = self._write_dead_letters(plan, typed)
        if data is None and len(typed.dead):
            # Every record of the range was a dead letter: the main table's snapshot must
            # still record the offsets, or the partition's next writer would read the range
            # again and, knowing a schema this one did not, write its records typed as well.
            data = pa.Table.from_pylist([], schema=self.table.schema().as_arrow())
        counts = {index: 0 for index in counts}
        for row in typed.rows:
            counts[row[META_COLUMN]["partition"]] += 1
        outcome = self._append(plan, data, counts)
        return CommitOutcome(
            rows=outcome.rows,
            snapshot=outcome.snapshot,
            conflicts=outcome.conflicts,
            error=outcome.error,
            dead_letters=dead,
        )

    def _append(
        self, plan: CommitPlan, data: pa.Table | None, counts: dict[int, int]
    ) -> CommitOutcome:
        for _attempt in range(COMMIT_ATTEMPTS):
            offsets = self.offsets()
            found = conflicts(offsets, plan)
            if found:
                return CommitOutcome(conflicts=found)
            if data is None:
                return CommitOutcome(rows=counts)
            self._check_not_stopped()
            properties = encode_summary(self.topic_id, committed_offsets(offsets, plan))
            try:
                self.table.append(data, snapshot_properties=properties)
            except CommitFailedException:
                continue
            return CommitOutcome(rows=counts, snapshot=True)
        return CommitOutcome(error=f"lost the commit race {COMMIT_ATTEMPTS} times in a row")

    # -- maintenance (maintenance.py) --------------------------------------------------------

    def compact(self) -> Any:
        """The table's small files compacted (maintenance.compact: one ``replace`` snapshot
        carrying the offsets forward, lost to any commit in between). TableStopped first once
        ``stop`` was called."""
        from minibroker.iceberg.maintenance import compact

        self._check_not_stopped()
        return compact(self.table, self.topic_id, stopped=self._check_not_stopped)

    def expire(self) -> Any:
        """The table's old snapshots expired (maintenance.expire), never the ones back to the
        offsets. TableStopped first once ``stop`` was called."""
        from minibroker.iceberg.maintenance import expire

        self._check_not_stopped()
        return expire(self.table)

    # -- value_schema_id_prefix --------------------------------------------------------------

    def _decoder(self, schema_id: int, lookup: Lookup) -> Decoder:
        known = self._decoders.get(schema_id)
        if known is None:
            found = lookup(schema_id)
            known = decoder(schema_id, found)
            if found is not None:  # an id not (yet) registered is asked again next time
                self._decoders[schema_id] = known
        return known

    def _evolve(self, typed: TypedRows, raw: Rows) -> None:
        """Merge the columns of each schema id of the rows into the table's schema; the rows
        of a schema whose columns cannot be merged (a type Iceberg cannot promote to) become
        dead letters with the reason."""
        for schema_id in sorted({s for s in typed.schema_ids if s is not None} - self._merged):
            mapping = self._decoders[schema_id].mapping
            assert mapping is not None
            for _attempt in range(COMMIT_ATTEMPTS):
                self._check_not_stopped()
                try:
                    with self.table.update_schema() as update:
                        update.union_by_name(mapping.schema())
                except CommitFailedException:
                    self.table.refresh()  # another broker evolved it first: merge again
                    continue
                except (ValidationError, ValueError, TypeError) as error:
                    typed.drop_schema(
                        schema_id,
                        f"schema id {schema_id}'s columns cannot be merged into the table's:"
                        f" {error}",
                        raw,
                    )
                else:
                    self._merged.add(schema_id)
                break
            else:
                raise CommitFailedException(
                    f"lost the schema update race {COMMIT_ATTEMPTS} times in a row"
                )

    def _arrow(self, typed: TypedRows, raw: Rows) -> pa.Table | None:
        """The typed rows as an Arrow table of the table's schema. A value the columns cannot
        hold (a decimal wider than its precision, a date out of range) must not stop the
        topic: when the whole does not convert, each row is tried alone, and those that fail
        become dead letters with pyarrow's reason."""
        if not typed.rows:
            return None
        schema = self.table.schema().as_arrow()
        try:
            return pa.Table.from_pylist(typed.rows, schema=schema)
        except _UNFIT:
            pass
        unfit = {}
        for position, row in enumerate(typed.rows):
            try:
                pa.Table.from_pylist([row], schema=schema)
            except _UNFIT as error:
                unfit[position] = (
                    f"the value does not fit the table's columns: {type(error).__name__}: {error}"
                )
        typed.drop(unfit, raw)
        return pa.Table.from_pylist(typed.rows, schema=schema) if typed.rows else None

    def _dead_letter_table(self) -> Table:
        if self.dlq is None:
            assert self.catalog is not None
            namespace, name = self.table.name()[-2:]
            self.dlq = _create(
                self.catalog, (namespace, name + DLQ_SUFFIX), DLQ_SCHEMA, partition_spec(self.spec)
            )
        return self.dlq

    def _write_dead_letters(self, plan: CommitPlan, typed: TypedRows) -> dict[int, int]:
        """The dead letters at or past the offsets the dead-letter table already covers,
        appended in one snapshot that records the plan's ends as covered; per partition, how
        many were written."""
        if not len(typed.dead):
            return {}
        self._check_not_stopped()
        table = self._dead_letter_table()
        dead = typed.dead
        for _attempt in range(COMMIT_ATTEMPTS):
            table.refresh()
            covered = table_offsets(_summaries(table), self.topic_id)
            keep = [
                i for i in range(len(dead)) if dead.offset[i] >= covered.get(dead.partition[i], -1)
            ]
            if not keep:
                return {}
            written: dict[int, int] = {}
            for i in keep:
                written[dead.partition[i]] = written.get(dead.partition[i], 0) + 1
            data = pa.Table.from_pydict(
                {
                    "partition": [dead.partition[i] for i in keep],
                    "offset": [dead.offset[i] for i in keep],
                    "timestamp": [dead.timestamp_ms[i] * 1000 for i in keep],
                    "timestamp_type": [dead.timestamp_type[i] for i in keep],
                    "key": [dead.key[i] for i in keep],
                    "value": [dead.value[i] for i in keep],
                    "headers": [[{"key": k, "value": v} for k, v in dead.headers[i]] for i in keep],
                    "reason": [typed.reasons[i] for i in keep],
                },
                schema=table.schema().as_arrow(),
            )
            ends = dict(covered)
            for part in plan.partitions:
                ends[part.index] = max(ends.get(part.index, 0), part.next_offset)
            self._check_not_stopped()
            try:
                table.append(data, snapshot_properties=encode_summary(self.topic_id, ends))
            except CommitFailedException:
                continue
            return written
        raise CommitFailedException(
            f"lost the dead-letter table's commit race {COMMIT_ATTEMPTS} times in a row"
        )
