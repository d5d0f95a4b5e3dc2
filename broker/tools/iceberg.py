"""`minibroker iceberg`: the Iceberg topics of a cluster (docs/iceberg-topics.md), per topic
and partition: the table, the next offset the table holds, the partition's last stable
offset, the lag in offsets and in seconds, the table's data files and snapshots, and the last
error of the partition leader's writer.

There is no Kafka tool to copy (Redpanda's ``rpk topic describe`` prints a topic's Iceberg
settings, not its progress); this is built as ``kafka-consumer-groups.sh --describe`` is, with
the table in the place of the group. It needs only bootstrap servers, as the other tools:

- Metadata: every topic with its id (the table's snapshots record offsets per topic id) and
  its partitions' leaders; DescribeConfigs of the topics: those with ``iceberg.mode``
  ``key_value`` or ``value_schema_id_prefix``.
- DescribeConfigs of each leader broker: the catalog it writes to (``iceberg.catalog.*``,
  ``iceberg.rest.catalog.uri``/``warehouse``/``prefix``; the REST credential and token are
  secrets and not described: ``--catalog-property credential=...``) and its ``metrics.port``.
  The embedded catalog's default (``iceberg.catalog.uri`` empty) is SQLite in the broker's
  first log dir, a file only a shell on the broker's machine can open (a relative log dir is
  taken from this shell's working directory); ``--catalog-uri`` names another.
- The table's offsets as the writer reads them (table.table_offsets over the snapshots'
  summaries, newest first), its snapshots, and ``total-data-files`` of the current one.
- ListOffsets with read_committed to each leader: the last stable offset, as far as the writer
  may write; the lag in offsets is the difference (markers and aborted records count, as the
  broker's ``minibroker_iceberg_lag_records`` counts them).
- The lag in seconds: the age of the oldest record not yet in the table, by its timestamp (a
  read_committed Fetch of the leader from the table's offset, decoded as the writer decodes
  it). Not the broker's ``minibroker_iceberg_lag_seconds``, which is per topic and counts
  from when the record became committed: a record's timestamp is what a consumer of the
  table compares with the clock. A producer's CreateTime in the past makes it larger.
- The last error: the leader's ``minibroker_iceberg_last_error`` metric, from its
  ``metrics.port`` on the host Metadata gives (none when the broker has no metrics port).

Plaintext only, as ``minibroker groups`` and ``transactions`` (the tools' wire client has no
TLS or SASL yet). Exit status 0 when every partition was described, 1 when a broker, the
catalog or a table could not be read (what could be read is printed).
"""

from __future__ import annotations

import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from minibroker.protocol.errors import Error
from minibroker.protocol.offsets import LATEST
from minibroker.protocol.versions import ApiKey
from minibroker.tools import groups
from minibroker.tools.groups import Broker, Connection, GroupsError

VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.METADATA: (10, 12),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.LIST_OFFSETS: (2, 7),
    ApiKey.FETCH: (4, 12),
}
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
WRITTEN_MODES = ("key_value", "value_schema_id_prefix")
BROKER_KEYS = [
    "iceberg.catalog.type",
    "iceberg.catalog.name",
    "iceberg.catalog.uri",
    "iceberg.catalog.warehouse",
    "iceberg.catalog.namespace",
    "iceberg.rest.catalog.uri",
    "iceberg.rest.catalog.warehouse",
    "iceberg.rest.catalog.prefix",
    "iceberg.catalog.s3.endpoint",
    "iceberg.catalog.s3.region",
    "log.dirs",
    "metrics.port",
]
FETCH_BYTES = 256 * 1024


class IcebergConnection(Connection):
    """groups.Connection speaking this tool's APIs."""

    spoken = VERSIONS

    def __enter__(self) -> IcebergConnection:
        return self


def _connect_any(bootstrap: str, deadline: float) -> IcebergConnection:
    problems = []
    for address in (part.strip() for part in bootstrap.split(",") if part.strip()):
        try:
            return IcebergConnection(address, deadline)
        except GroupsError as error:
            problems.append(str(error))
    raise GroupsError("; ".join(problems) or f"no address in {bootstrap!r}")


@dataclass
class PartitionView:
    topic: str
    partition: int
    leader: int
    table_offset: int | None = None
    log_end: int | None = None
    lag_seconds: float | None = None
    last_error: str | None = None

    @property
    def lag(self) -> int | None:
        if self.log_end is None:
            return None
        return max(0, self.log_end - (self.table_offset or 0))


@dataclass
class TopicView:
    name: str
    topic_id: str
    mode: str
    table: str = ""
    files: int | None = None
    snapshots: int | None = None
    partitions: list[PartitionView] = field(default_factory=list)


@dataclass
class Report:
    topics: list[TopicView]
    problems: list[str]


def _cluster(conn: IcebergConnection) -> tuple[dict[int, Broker], dict[str, tuple[str, dict]]]:
    """Metadata of every topic: the brokers, and per topic its id and partitions' leaders."""
    response = conn.request(
        ApiKey.METADATA,
        {
            "topics": None,
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    brokers = {
        int(b.node_id): Broker(int(b.node_id), b.host, int(b.port)) for b in response.brokers
    }
    topics = {}
    for topic in response.topics:
        if groups._error(topic.error_code) != Error.NONE or topic.is_internal:
            continue
        leaders = {int(p.partition_index): int(p.leader_id) for p in topic.partitions}
        topics[str(topic.name)] = (str(topic.topic_id), leaders)
    return brokers, topics


def _configs(conn: IcebergConnection, resource_type: int, names: list[str], keys) -> dict:
    """DescribeConfigs: {resource name: {config: value}}; a resource answered with an error
    is left out."""
    if not names:
        return {}
    response = conn.request(
        ApiKey.DESCRIBE_CONFIGS,
        {
            "resources": [
                {"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}
                for name in names
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    found = {}
    for result in response.results:
        if groups._error(result.error_code) == Error.NONE:
            found[str(result.resource_name)] = {c.name: c.value for c in result.configs}
    return found


def _last_stable_offsets(
    conn: IcebergConnection, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    topics: dict[str, list[int]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    response = conn.request(
        ApiKey.LIST_OFFSETS,
        {
            "replica_id": -1,
            "isolation_level": 1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": i, "current_leader_epoch": -1, "timestamp": LATEST}
                        for i in indexes
                    ],
                }
                for topic, indexes in topics.items()
            ],
        },
    )
    ends = {}
    for topic in response.topics:
        for partition in topic.partitions:
            if groups._error(partition.error_code) == Error.NONE:
                ends[(str(topic.name), int(partition.partition_index))] = int(partition.offset)
    return ends


def _oldest_timestamp_ms(conn: IcebergConnection, view: PartitionView) -> int | None:
    """The timestamp of the first committed record at or after the table's offset, read as
    the writer reads it (read_committed, control batches and aborted records left out)."""
    from minibroker.iceberg.translation import ReadChunk, translate

    assert view.log_end is not None
    start = view.table_offset or 0
    response = conn.request(
        ApiKey.FETCH,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": FETCH_BYTES,
            "isolation_level": 1,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": view.topic,
                    "partitions": [
                        {
                            "partition": view.partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": start,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": FETCH_BYTES,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    for topic in response.responses:
        for partition in topic.partitions:
            if groups._error(partition.error_code) != Error.NONE or not partition.records:
                return None
            aborted = tuple(
                (int(a.producer_id), int(a.first_offset))
                for a in partition.aborted_transactions or ()
            )
            rows = translate(
                view.partition, [ReadChunk(bytes(partition.records), aborted)], 0, view.log_end
            )
            # A table with no offset yet starts at the log start, wherever that is.
            for offset, timestamp in zip(rows.offset, rows.timestamp_ms, strict=True):
                if offset >= start:
                    return timestamp
    return None


def _last_errors(host: str, port: int, timeout: float) -> dict[str, str]:
    """{topic: error} of a broker's ``minibroker_iceberg_last_error`` samples."""
    from prometheus_client.parser import text_string_to_metric_families

    url = f"http://{host}:{port}/metrics"
    with urllib.request.urlopen(url, timeout=timeout) as response:
        text = response.read().decode()
    errors = {}
    for family in text_string_to_metric_families(text):
        if family.name == "minibroker_iceberg_last_error":
            for sample in family.samples:
                if sample.value:
                    errors[sample.labels["topic"]] = sample.labels["error"]
    return errors


def open_catalog(settings: Mapping[str, str | None], overrides: Mapping[str, str]) -> Any:
    """The catalog a broker writes to, from its described settings (module docstring)."""
    from minibroker.iceberg.table import SqlCatalog, open_rest_catalog

    name = settings.get("iceberg.catalog.name") or "minibroker"
    # The S3 file IO's endpoint and region as the brokers describe them; its keys are
    # secrets (--catalog-property s3.access-key-id=... s3.secret-access-key=...).
    file_io = {
        f"s3.{key}": str(settings[f"iceberg.catalog.s3.{key}"])
        for key in ("endpoint", "region")
        if settings.get(f"iceberg.catalog.s3.{key}")
    }
    if (settings.get("iceberg.catalog.type") or "sql") == "rest":
        properties = {
            key: str(settings[f"iceberg.rest.catalog.{key}"])
            for key in ("uri", "warehouse", "prefix")
            if settings.get(f"iceberg.rest.catalog.{key}")
        }
        return open_rest_catalog(name, {**file_io, **properties, **overrides})
    uri = overrides.get("uri") or settings.get("iceberg.catalog.uri") or ""
    if not uri:
        log_dirs = (settings.get("log.dirs") or "").split(",")
        if not log_dirs[0].strip():
            raise GroupsError("the broker does not say its log.dirs: give --catalog-uri")
        catalog_file = Path(log_dirs[0].strip()) / "iceberg" / "catalog.db"
        if not catalog_file.exists():
            raise GroupsError(
                f"the broker's embedded catalog {catalog_file} is not on this machine (or the"
                " relative log dir is not relative to this directory): give --catalog-uri"
            )
        uri = f"sqlite:///{catalog_file.resolve()}"
    extra = {key: value for key, value in overrides.items() if key != "uri"}
    return SqlCatalog(name, uri=uri, **{**file_io, **extra})


def describe(
    bootstrap: str,
    timeout: float,
    topic_filter: str | None = None,
    catalog_uri: str | None = None,
    catalog_properties: Mapping[str, str] | None = None,
) -> Report:
    deadline = time.monotonic() + timeout
    problems: list[str] = []
    with _connect_any(bootstrap, deadline) as conn:
        brokers, topics = _cluster(conn)
        if topic_filter is not None:
            if topic_filter not in topics:
                raise GroupsError(f"topic {topic_filter} does not exist")
            topics = {topic_filter: topics[topic_filter]}
        configs = _configs(conn, TOPIC_RESOURCE, sorted(topics), ["iceberg.mode"])
    views = [
        TopicView(name, topics[name][0], str(configs[name].get("iceberg.mode")))
        for name in sorted(configs)
        if configs[name].get("iceberg.mode") in WRITTEN_MODES
    ]
    if not views:
        return Report([], problems)
    by_leader: dict[int, list[PartitionView]] = {}
    for view in views:
        for index, leader in sorted(topics[view.name][1].items()):
            partition = PartitionView(view.name, index, leader)
            view.partitions.append(partition)
            by_leader.setdefault(leader, []).append(partition)
    settings: dict[int, dict[str, Any]] = {}
    for leader, partitions in sorted(by_leader.items()):
        broker = brokers.get(leader)
        if broker is None:
            problems.append(f"{partitions[0].topic}: no leader for some partitions")
            continue
        try:
            with IcebergConnection(broker.address, deadline) as conn:
                settings[leader] = _configs(conn, BROKER_RESOURCE, [str(leader)], BROKER_KEYS).get(
                    str(leader), {}
                )
                ends = _last_stable_offsets(conn, [(p.topic, p.partition) for p in partitions])
                for p in partitions:
                    p.log_end = ends.get((p.topic, p.partition))
        except GroupsError as error:
            problems.append(str(error))
    overrides = dict(catalog_properties or {})
    if catalog_uri:
        overrides["uri"] = catalog_uri
    # The brokers of a cluster write to one catalog: the first leader's settings say which.
    first = next(iter(settings.values()), None)
    if first is None:
        return Report(views, problems or ["no leader broker answered"])
    try:
        catalog = open_catalog(first, overrides)
    except Exception as error:
        problems.append(f"cannot open the Iceberg catalog: {_text(error)}")
        return Report(views, problems)
    namespace = first.get("iceberg.catalog.namespace") or "minibroker"
    _read_tables(catalog, namespace, views, problems)
    for leader, partitions in sorted(by_leader.items()):
        broker = brokers.get(leader)
        if broker is None or leader not in settings:
            continue
        lagging = [p for p in partitions if p.lag]
        if lagging:
            try:
                with IcebergConnection(broker.address, deadline) as conn:
                    now_ms = time.time() * 1000
                    for p in lagging:
                        oldest = _oldest_timestamp_ms(conn, p)
                        if oldest is not None:
                            p.lag_seconds = max(0.0, (now_ms - oldest) / 1000)
            except GroupsError as error:
                problems.append(str(error))
        port = settings[leader].get("metrics.port")
        if port:
            try:
                errors = _last_errors(broker.host, int(port), max(1.0, deadline - time.monotonic()))
            except OSError as error:
                problems.append(f"cannot read the metrics of broker {leader}: {error}")
                continue
            for p in partitions:
                p.last_error = errors.get(p.topic)
    return Report(views, problems)


def _read_tables(catalog: Any, namespace: str, views: list[TopicView], problems: list[str]):
    from minibroker.iceberg.table import _summaries
    from minibroker.iceberg.translation import table_offsets

    for view in views:
        view.table = f"{namespace}.{view.name}"
        try:
            table = catalog.load_table((namespace, view.name))
        except Exception as error:
            # Not made yet (the leader makes it when it takes the partition) or unreachable.
            problems.append(f"{view.table}: {_text(error)}")
            continue
        offsets = table_offsets(_summaries(table), view.topic_id)
        view.snapshots = len(table.snapshots())
        current = table.current_snapshot()
        summary = {} if current is None or current.summary is None else current.summary
        view.files = int(summary.get("total-data-files", 0) or 0)
        for p in view.partitions:
            p.table_offset = offsets.get(p.partition)


def _text(error: BaseException) -> str:
    if isinstance(error, ImportError):
        return f"pyiceberg is not installed ({error}): pip install 'minibroker[iceberg]'"
    return f"{type(error).__name__}: {error}"


def _dash(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def print_report(report: Report, out: TextIO) -> None:
    if not report.topics:
        print("no Iceberg topics", file=out)
        return
    rows = [
        [
            "TOPIC",
            "PARTITION",
            "TABLE",
            "TABLE-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "LAG-SECONDS",
            "FILES",
            "SNAPSHOTS",
            "LAST-ERROR",
        ]
    ]
    for view in report.topics:
        for p in view.partitions:
            seconds = None if p.lag_seconds is None else f"{p.lag_seconds:.1f}"
            rows.append(
                [
                    view.name,
                    str(p.partition),
                    _dash(view.table),
                    _dash(p.table_offset),
                    _dash(p.log_end),
                    _dash(p.lag),
                    "0" if p.lag == 0 else _dash(seconds),
                    _dash(view.files),
                    _dash(view.snapshots),
                    _dash(p.last_error),
                ]
            )
    groups._table(rows, out)


def run(
    bootstrap: str,
    timeout: float,
    topic: str | None = None,
    catalog_uri: str | None = None,
    catalog_properties: Mapping[str, str] | None = None,
    out: TextIO = sys.stdout,
) -> int:
    try:
        report = describe(bootstrap, timeout, topic, catalog_uri, catalog_properties)
    except (GroupsError, ValueError) as error:
        print(f"minibroker iceberg: {error}", file=sys.stderr)
        return 1
    print_report(report, out)
    for problem in report.problems:
        print(f"minibroker iceberg: {problem}", file=sys.stderr)
    return 1 if report.problems else 0
