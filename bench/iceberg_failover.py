"""Iceberg topics after kill -9 of partition leaders mid-translation (issue 38):
`python -m bench.iceberg_failover --records 1000000`

A 3-broker cluster (minibroker.testing's Cluster, the schema registry on every broker, the
brokers sharing one pyiceberg SQL catalog on SQLite and one warehouse, as `minibroker dev`
shares them) and two topics of 3 partitions with 3 replicas each: one with
``iceberg.mode=key_value``, one with ``value_schema_id_prefix`` taking Avro values from
confluent-kafka's AvroSerializer. An idempotent acks=all confluent-kafka producer sends
``--records`` records to each topic, round robin over the partitions, from a thread; while it
sends and the tables are being written, the leader of the key_value topic's partition 0 is
killed (SIGKILL) and started again, then the leader of one of the Avro topic's partitions
(another broker). Once every record is acknowledged, the tables are read with pyiceberg until
their snapshots cover every partition's acknowledged offsets, and then compared with the
delivery reports: per partition the count of rows and a checksum (the sum) of their offsets
against the acknowledged ones, the offsets missing or written twice, and the values (raw for
key_value; the typed columns and the raw value for the Avro topic, whose dead-letter table must
not exist).

With ``--maintenance`` (``run``'s ``maintenance``) both topics are also compacted and their
snapshots expired while all this goes on: ``iceberg.compaction.interval.ms`` and
``iceberg.snapshot.expiry.interval.ms`` set on both topics (2000 and 3000 by default), and each
table's ``history.expire.max-snapshot-age-ms`` set to 0 as soon as the table exists (as an
operator sets it with any Iceberg engine), so every snapshot but the protected ones expires. A
thread watches the tables meanwhile and counts the compaction (``replace``) snapshots and the
snapshots that disappeared (expired), so a run says whether maintenance actually ran.

tests/cluster/test_schema_registry.py runs ``run`` with a few thousand records on its module's
cluster (CI); this command runs it with the issue's million on a cluster of its own and prints
the figures (docs/iceberg-topics.md has a run's). Kafka has no Iceberg topics: nothing to
compare with."""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from minibroker.protocol.record_batch import HEADER_SIZE, read_header
from minibroker.testing import Cluster

PARTITIONS = 3
REPLICATION = 3
NAMESPACE = "minibroker"
SUMMARY_KEY = "minibroker.translation"  # minibroker.iceberg.translation's, read as any reader
USER = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "number", "type": "long"},
    ],
}
# At most this many records queued or in flight in the producer (as tests/cluster's
# BackgroundProducer bounds it: unbounded, a loaded machine times records out in the queue).
MAX_QUEUED = 20_000
WAIT_S = 60.0
# The command's cluster: a dead broker fenced and its leaderships moved within about two
# seconds (tests/cluster/conftest.py's CLUSTER_OVERRIDES, which the CI run's cluster has).
FAILOVER_OVERRIDES = {
    "broker.heartbeat.interval.ms": 200,
    "broker.session.timeout.ms": 1500,
    "replica.lag.time.max.ms": 1500,
    "replica.fetch.wait.max.ms": 500,
}


def iceberg_properties(directory: Path) -> dict[str, str]:
    """Broker properties giving every broker one catalog and warehouse in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "iceberg.catalog.uri": f"sqlite:///{directory / 'catalog.db'}",
        "iceberg.catalog.warehouse": (directory / "warehouse").as_uri(),
    }


@dataclass
class PartitionCheck:
    """One partition of one table against the delivery reports."""

    acked: int
    rows: int
    acked_offset_sum: int
    rows_offset_sum: int
    missing: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    extra: list[int] = field(default_factory=list)
    wrong_values: int = 0
    # Rows at offsets not acknowledged whose value was acknowledged at another offset: the
    # record is in the partition's log twice (the table holds the log as it is).
    extra_acked_elsewhere: int = 0
    extra_count: int = 0
    # Of those, the offsets whose record the producer sent again under a newer epoch of its
    # producer id (the log's batch headers show both copies: see ``resent_after_epoch_bump``):
    # librdkafka's own duplicates, which no broker can tell from new records.
    resent: list[int] = field(default_factory=list)


@dataclass
class MaintenanceSeen:
    """What the table watcher saw of one table's maintenance."""

    replace_snapshots: set[int] = field(default_factory=set)
    snapshots_seen: set[int] = field(default_factory=set)
    expired: set[int] = field(default_factory=set)
    max_age_set: bool = False
    looks: int = 0
    lost_races: int = 0


class MaintenanceWatch:
    """Sets the tables' ``history.expire.max-snapshot-age-ms`` to 0 once they exist, then
    polls them (every ``period`` s, in a thread) for compaction snapshots and expired ones."""

    def __init__(self, catalog_uri: str, tables: list[str], period: float = 0.5) -> None:
        self.catalog_uri = catalog_uri
        self.seen = {name: MaintenanceSeen() for name in tables}
        self.period = period
        self.errors: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="iceberg-watch", daemon=True)

    def _run(self) -> None:
        catalog = None
        while not self.done.wait(self.period):
            if catalog is None:
                try:  # the brokers may be making the catalog's tables (SQLite: locked)
                    catalog = _catalog(self.catalog_uri)
                except Exception as error:
                    self.errors.append(f"the catalog: {type(error).__name__}: {error}")
                    continue
            for name, seen in self.seen.items():
                try:
                    self._look(catalog, name, seen)
                except Exception as error:
                    self.errors.append(f"{name}: {type(error).__name__}: {error}")

    def _look(self, catalog, name: str, seen: MaintenanceSeen) -> None:
        from pyiceberg.exceptions import CommitFailedException, NoSuchTableError

        seen.looks += 1
        try:
            table = catalog.load_table((NAMESPACE, name))
        except NoSuchTableError:
            return
        if not seen.max_age_set:
            try:
                with table.transaction() as transaction:
                    transaction.set_properties({"history.expire.max-snapshot-age-ms": "0"})
                seen.max_age_set = True
            except CommitFailedException:
                seen.lost_races += 1
                return  # a writer's commit came first: again at the next look
            table = catalog.load_table((NAMESPACE, name))
        present = set()
        for snapshot in table.snapshots():
            present.add(snapshot.snapshot_id)
            operation = snapshot.summary.operation.value if snapshot.summary else None
            if operation == "replace":
                seen.replace_snapshots.add(snapshot.snapshot_id)
        seen.expired |= seen.snapshots_seen - present
        seen.snapshots_seen |= present


@dataclass
class Outcome:
    records: int
    # topic -> partition -> the check
    checks: dict[str, dict[int, PartitionCheck]]
    killed: list[int]
    dead_letter_table: bool
    produce_s: float
    catch_up_s: float
    total_s: float
    notes: list[str] = field(default_factory=list)
    # Acknowledged records not found in their partition's log (see _place_unknown_offsets).
    lost: list[str] = field(default_factory=list)
    # With maintenance on: table -> what the watcher saw.
    maintenance: dict[str, MaintenanceSeen] | None = None


class Sender:
    """The idempotent acks=all producer, in a thread: ``records`` records to each topic."""

    def __init__(
        self, cluster: Cluster, kv: str, avro: str, records: int, pace: float | None = None
    ) -> None:
        self.kv, self.avro, self.records = kv, avro, records
        # Records per second per topic until ``unpace`` (None: as fast as acknowledged), so
        # that a short run is still producing while its brokers are killed and come back.
        self.pace = pace
        self.paced = threading.Event()
        if pace is not None:
            self.paced.set()
        self.acked: dict[str, dict[tuple[int, int], bytes]] = {kv: {}, avro: {}}
        # Delivery reports without an offset (partition, value): librdkafka acknowledges a
        # batch "implicitly" when a later batch of the same idempotent producer succeeded
        # while this one's own answer was an error or lost, and does not know its offset.
        self.unplaced: dict[str, list[tuple[int, bytes]]] = {kv: [], avro: []}
        self.errors: list[str] = []
        self.undelivered = -1
        registry = SchemaRegistryClient({"url": cluster.schema_registry_url})
        self.serialize = AvroSerializer(registry, json.dumps(USER))
        self.context = SerializationContext(avro, MessageField.VALUE)
        # Registered now, while every broker runs: the serializer keeps the id.
        self.serialize({"name": "first", "number": -1}, self.context)
        self.producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 180_000,
                "retry.backoff.ms": 100,
                "queue.buffering.max.messages": MAX_QUEUED * 2,
                "error_cb": self._on_error,
            }
        )
        self.thread = threading.Thread(target=self._run, name="iceberg-sender", daemon=True)

    def acked_count(self) -> int:
        return sum(len(found) for found in self.acked.values()) + sum(
            len(found) for found in self.unplaced.values()
        )

    def _on_error(self, error) -> None:
        """librdkafka's client errors: a fatal one (the idempotent producer's) ends the run."""
        if error.fatal():
            self.errors.append(f"fatal: {error}")

    def _on_delivery(self, error, message) -> None:
        if error is not None:
            self.errors.append(f"{message.topic()}: {error}")
            return
        offset = message.offset()
        if offset is None or offset < 0:
            self.unplaced[message.topic()].append((message.partition(), message.value()))
            return
        self.acked[message.topic()][(message.partition(), offset)] = message.value()

    def _run(self) -> None:
        try:
            self._send()
        except Exception as error:  # a fatal producer error: said, not hidden in the thread
            self.errors.append(f"{type(error).__name__}: {error}")

    def _send(self) -> None:
        producer = self.producer
        for number in range(self.records):
            partition = number % PARTITIONS
            producer.produce(
                self.kv,
                key=str(number).encode(),
                value=f"kv-{number:09d}".encode(),
                partition=partition,
                on_delivery=self._on_delivery,
            )
            value = self.serialize({"name": f"user-{number}", "number": number}, self.context)
            producer.produce(
                self.avro, value=value, partition=partition, on_delivery=self._on_delivery
            )
            if self.paced.is_set():
                assert self.pace is not None
                producer.poll(0)
                time.sleep(1 / self.pace)  # pacing: poll returns as soon as a report comes
            elif number % 200 == 0:
                producer.poll(0)
                while len(producer) > MAX_QUEUED:
                    producer.poll(0.05)
        self.undelivered = producer.flush(240)


def _wait(condition, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def _catalog(catalog_uri: str):
    from pyiceberg.catalog.sql import SqlCatalog

    # The brokers' catalog name (iceberg.catalog.name): the SQL catalog keeps it in each row.
    # Making one creates the catalog's tables when missing, which races the brokers doing the
    # same ("table iceberg_tables already exists"): tried again.
    for attempt in range(20):
        try:
            return SqlCatalog("minibroker", uri=catalog_uri)
        except Exception as error:
            if "already exists" not in str(error) or attempt == 19:
                raise
            time.sleep(0.1)
    raise AssertionError("unreachable")


def table_next_offsets(catalog, name: str) -> dict[int, int]:
    """Each partition's next offset as the table's current snapshot records it (the writer's
    snapshot summary property); {} while the table or its first snapshot does not exist."""
    try:
        table = catalog.load_table((NAMESPACE, name))
    except Exception:
        return {}
    snapshot = table.current_snapshot()
    while snapshot is not None:
        text = (snapshot.summary.additional_properties if snapshot.summary else {}).get(SUMMARY_KEY)
        if text is not None:
            offsets = json.loads(text)["next-offsets"]
            return {int(index): int(offset) for index, offset in offsets.items()}
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else table.snapshot_by_id(parent)
    return {}


def _place_unknown_offsets(
    bootstrap: str, topic: str, unplaced: list[tuple[int, bytes]], acked: dict
) -> list[str]:
    """Give the delivery reports that came without an offset their offsets, read from the
    partitions' logs (each record's value is unique), into ``acked``; the acknowledged
    records not in their partition's log, in words (a lost acknowledged record)."""
    if not unplaced:
        return []
    wanted: dict[int, set[bytes]] = {}
    for partition, value in unplaced:
        wanted.setdefault(partition, set()).add(value)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"placer-{uuid.uuid4().hex[:8]}"}
    )
    lost = []
    try:
        for partition, values in sorted(wanted.items()):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
            consumer.assign([TopicPartition(topic, partition, 0)])
            found: dict[bytes, int] = {}
            deadline = time.monotonic() + WAIT_S
            position = 0
            while position < high and time.monotonic() < deadline:
                for message in consumer.consume(10_000, 1.0):
                    if message.error() is not None:
                        continue
                    position = message.offset() + 1
                    if message.value() in values:
                        found[message.value()] = message.offset()
            for value in values:
                if value in found:
                    acked[(partition, found[value])] = value
                else:
                    lost.append(f"{topic}-{partition}: acknowledged {value[:40]!r} not in the log")
    finally:
        consumer.close()
    return lost


def batch_producers(cluster: Cluster, topic: str) -> dict[int, list[tuple[int, int, int, int]]]:
    """Each partition's batches as (base offset, last offset, producer id, producer epoch),
    read from the batch headers in a running replica's segment files (as kafka-dump-log.sh
    reads them; every replica holds the same once in sync, as ``run`` leaves them)."""
    found: dict[int, list[tuple[int, int, int, int]]] = {}
    for index in range(PARTITIONS):
        replicas = [node_id for node_id in cluster.broker_ids if cluster.node(node_id).running]
        directory = cluster.node(replicas[0]).log_dir / f"{topic}-{index}"
        batches = found[index] = []
        for segment in sorted(directory.glob("*.log")):
            data = segment.read_bytes()
            position = 0
            while position + HEADER_SIZE <= len(data):
                header = read_header(data, position)
                if header.batch_length <= 0 or position + header.size > len(data):
                    break  # the end of what is written (a file may be preallocated)
                batches.append(
                    (
                        header.base_offset,
                        header.last_offset,
                        header.producer_id,
                        header.producer_epoch,
                    )
                )
                position += header.size
    return found


def resent_after_epoch_bump(
    extra_values: dict[int, bytes],
    acked: dict[tuple[int, int], bytes],
    index: int,
    batches: list[tuple[int, int, int, int]],
) -> list[int]:
    """The extra offsets whose record the producer sent again under a newer epoch.

    librdkafka's idempotent producer bumps its epoch when a partition answers
    OUT_OF_ORDER_SEQUENCE_NUMBER for a batch behind one that failed (its "skipped sequence
    numbers" in rdkafka_request.c, seen here when a partition's new leader gets a batch before
    the retry of the one ahead of it), and then numbers every message not yet acknowledged
    again from sequence 0 under the new epoch (rd_kafka_toppar_pid_change), on every partition:
    a message that another partition's old leader wrote and answered with
    NOT_LEADER_OR_FOLLOWER (which librdkafka takes as "not persisted"; Kafka's DelayedProduce
    answers it the same way) is written a second time, and no broker can tell it from a new
    record, since its sequence and epoch are new. Such an extra row is one whose record is
    at an earlier offset, in a batch of the same producer id at an older epoch, than the copy
    that was acknowledged. Anything else (a second copy at the same epoch, or at a newer one)
    stays a failure of the broker."""
    where_acked = {value: offset for (p, offset), value in acked.items() if p == index}

    def batch_of(offset: int) -> tuple[int, int] | None:
        for base, last, producer_id, epoch in batches:
            if base <= offset <= last:
                return producer_id, epoch
        return None

    resent = []
    for offset, value in sorted(extra_values.items()):
        acked_at = where_acked.get(value)
        if acked_at is None or acked_at <= offset:
            continue
        first, second = batch_of(offset), batch_of(acked_at)
        if (
            first is not None
            and second is not None
            and first[0] == second[0] >= 0
            and first[1] < second[1]
        ):
            resent.append(offset)
    return resent


def _check(
    acked: dict[tuple[int, int], bytes],
    positions: list[tuple[int, int]],
    values: list[bytes],
    batches: dict[int, list[tuple[int, int, int, int]]] | None = None,
) -> dict[int, PartitionCheck]:
    stored = Counter(positions)
    checks: dict[int, PartitionCheck] = {}
    for index in range(PARTITIONS):
        sent = {offset for (p, offset) in acked if p == index}
        held = [offset for (p, offset) in positions if p == index]
        checks[index] = PartitionCheck(
            acked=len(sent),
            rows=len(held),
            acked_offset_sum=sum(sent),
            rows_offset_sum=sum(held),
            missing=sorted(sent - set(held))[:20],
            duplicated=sorted(o for o in set(held) if stored[(index, o)] > 1)[:20],
            extra=sorted(set(held) - sent)[:20],
        )
    acked_values = set(acked.values())
    extra_values: dict[int, dict[int, bytes]] = {index: {} for index in range(PARTITIONS)}
    for position, value in zip(positions, values, strict=True):
        if acked.get(position, value) != value:
            checks[position[0]].wrong_values += 1
        if position not in acked:
            checks[position[0]].extra_count += 1
            if value in acked_values:
                checks[position[0]].extra_acked_elsewhere += 1
                extra_values[position[0]][position[1]] = value
    for index, check in checks.items():
        if extra_values[index] and batches is not None:
            check.resent = resent_after_epoch_bump(
                extra_values[index], acked, index, batches[index]
            )
    return checks


def run(
    cluster: Cluster,
    catalog_uri: str,
    records: int,
    *,
    target_lag_ms: int = 500,
    kill_at: tuple[float, float] = (1 / 3, 2 / 3),
    pace: float | None = None,
    maintenance: tuple[int, int] | None = None,
    progress=lambda text: None,
) -> Outcome:
    """The workload on a running cluster whose brokers share ``catalog_uri``; see the module
    docstring. The kills come once ``kill_at``'s fractions of the records are acknowledged
    (and both tables written); ``pace`` (records per second per topic) slows the producer
    until the second broker is back. ``maintenance``: (compaction, expiry) intervals in ms,
    set on both topics, with every snapshot old enough to expire (module docstring). Leaves
    every broker running and in sync."""
    started = time.monotonic()
    suffix = uuid.uuid4().hex[:8]
    kv, avro = f"iceberg-kv-{suffix}", f"iceberg-avro-{suffix}"
    lag: dict[str, object] = {"iceberg.target.lag.ms": target_lag_ms}
    watch = None
    if maintenance is not None:
        lag["iceberg.compaction.interval.ms"] = maintenance[0]
        lag["iceberg.snapshot.expiry.interval.ms"] = maintenance[1]
        watch = MaintenanceWatch(catalog_uri, [kv, avro])
        watch.thread.start()
    cluster.create_topic(kv, PARTITIONS, REPLICATION, {"iceberg.mode": "key_value", **lag})
    cluster.create_topic(
        avro, PARTITIONS, REPLICATION, {"iceberg.mode": "value_schema_id_prefix", **lag}
    )
    catalog = _catalog(catalog_uri)
    sender = Sender(cluster, kv, avro, records, pace)
    sender.thread.start()
    killed: list[int] = []
    notes: list[str] = []
    # A broker without a replica of `_schemas` has no copy of the registry to look ids up in.
    schemas_replicas = cluster.replicas_of("_schemas") or []
    if len(schemas_replicas) < min(REPLICATION, len(cluster.broker_ids)):
        notes.append(f"_schemas has replicas {schemas_replicas} only")
    total = 2 * records

    def translating(fraction: float) -> bool:
        """Records acknowledged past ``fraction`` of the run and both tables written."""
        if sender.errors:
            raise AssertionError(sender.errors[:10])
        return (
            sender.acked_count() >= fraction * total
            and bool(table_next_offsets(catalog, kv))
            and bool(table_next_offsets(catalog, avro))
        ) or not sender.thread.is_alive()

    for fraction, topic, partition in ((kill_at[0], kv, 0), (kill_at[1], avro, None)):
        _wait(lambda f=fraction: translating(f), WAIT_S * 4, "records and both tables written")
        if not sender.thread.is_alive():
            notes.append("the producer finished before a kill: fewer kills mid-production")
        if partition is None:
            leaders = [cluster.leader_of(topic, index) for index in range(PARTITIONS)]
            others = [leader for leader in leaders if leader not in (None, -1, *killed)]
            victim = others[0] if others else leaders[0]
        else:
            victim = cluster.leader_of(topic, partition)
        assert victim is not None and victim != -1
        before = sender.acked_count()
        cluster.kill(victim)
        killed.append(victim)
        progress(f"killed broker {victim} (a leader of {topic}) at {before:,} acknowledged")
        # The writing goes on through the new leaders before the broker comes back.
        _wait(
            lambda b=before: (
                sender.acked_count() > b + min(500, total // 20) or not sender.thread.is_alive()
            ),
            WAIT_S * 2,
            "records acknowledged by the new leaders",
        )
        cluster.restart(victim)
        for name in (kv, avro):
            cluster.wait_until_in_sync(name, timeout=WAIT_S)
        progress(f"broker {victim} back and in sync at {sender.acked_count():,} acknowledged")
    sender.paced.clear()

    sender.thread.join(600)
    produced = time.monotonic()
    assert not sender.thread.is_alive(), "the producer did not finish"
    assert not sender.errors and sender.undelivered == 0, (sender.errors[:10], sender.undelivered)
    progress(f"{total:,} records acknowledged in {produced - started:.1f} s")
    lost = []
    for name in (kv, avro):
        unplaced = sender.unplaced[name]
        if unplaced:
            notes.append(
                f"{name}: {len(unplaced):,} acknowledged without an offset (placed from the log)"
            )
            lost += _place_unknown_offsets(
                cluster.bootstrap_servers, name, unplaced, sender.acked[name]
            )

    ends = {
        name: {
            index: max((o for (p, o) in acked if p == index), default=-1) + 1
            for index in range(PARTITIONS)
        }
        for name, acked in sender.acked.items()
    }

    def covered() -> bool:
        return all(
            table_next_offsets(catalog, name).get(index, 0) >= end
            for name, by_partition in ends.items()
            for index, end in by_partition.items()
        )

    try:
        _wait(covered, WAIT_S * 4, "the tables to cover every acknowledged offset")
    except TimeoutError as error:
        held = {name: table_next_offsets(catalog, name) for name in ends}
        raise TimeoutError(f"{error}: acknowledged ends {ends}, the tables' {held}") from None
    caught_up = time.monotonic()
    progress(f"tables caught up {caught_up - produced:.1f} s after the last acknowledgement")
    if watch is not None:
        # A few maintenance intervals more on the finished tables, watched, before the check.
        time.sleep(max(maintenance or (0,)) * 2 / 1000)
        watch.done.set()
        watch.thread.join(30)
        notes += [f"table watcher: {error}" for error in watch.errors[:5]]

    checks: dict[str, dict[int, PartitionCheck]] = {}
    rows = catalog.load_table((NAMESPACE, kv)).scan(
        selected_fields=("partition", "offset", "value")
    )
    scanned = rows.to_arrow()
    positions = list(
        zip(scanned["partition"].to_pylist(), scanned["offset"].to_pylist(), strict=True)
    )
    for name in ("_schemas", kv, avro):
        cluster.wait_until_in_sync(name, timeout=WAIT_S)
    checks[kv] = _check(
        sender.acked[kv], positions, scanned["value"].to_pylist(), batch_producers(cluster, kv)
    )

    scanned = catalog.load_table((NAMESPACE, avro)).scan().to_arrow()
    meta = scanned["kafka"].combine_chunks()
    positions = list(
        zip(meta.field("partition").to_pylist(), meta.field("offset").to_pylist(), strict=True)
    )
    avro_batches = batch_producers(cluster, avro)
    checks[avro] = _check(
        sender.acked[avro], positions, meta.field("value").to_pylist(), avro_batches
    )
    # The typed columns: each row's fields are those of the value it was written from.
    for position, name, number in zip(
        positions, scanned["name"].to_pylist(), scanned["number"].to_pylist(), strict=True
    ):
        if name != f"user-{number}" or position[0] != number % PARTITIONS:
            checks[avro][position[0]].wrong_values += 1
    dead_letters = catalog.table_exists((NAMESPACE, avro + "~dlq"))
    if watch is not None:
        # What the brokers say of their maintenance (service.py's log lines), all brokers.
        counts: Counter[str] = Counter()
        for node_id in cluster.broker_ids:
            text = cluster.log_path(node_id).read_text(errors="replace")
            for name in (kv, avro):
                made = [line for line in text.splitlines() if f"compacted {name}'s" in line]
                counts[f"{name} compacted"] += len(made)
                counts[f"{name} compacted on top of a commit"] += sum(
                    1 for line in made if "(made again on top of 0 " not in line
                )
                counts[f"{name} compaction lost to a commit"] += text.count(
                    f"{name}: a commit came first, compaction tried again later"
                )
                counts[f"{name} maintenance failed"] += sum(
                    1
                    for line in text.splitlines()
                    if "Iceberg table maintenance (" in line and f" of {name} failed" in line
                )
        notes.append("brokers' logs: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for name in ("_schemas", kv, avro):
        cluster.wait_until_in_sync(name, timeout=WAIT_S)
    return Outcome(
        records=records,
        checks=checks,
        killed=killed,
        dead_letter_table=dead_letters,
        produce_s=produced - started,
        catch_up_s=caught_up - produced,
        total_s=time.monotonic() - started,
        notes=notes,
        lost=lost,
        maintenance=None if watch is None else watch.seen,
    )


def problems(outcome: Outcome) -> list[str]:
    """What is not exactly once, in words ([] when every acknowledged record is in its table
    once, with its value, and every other row is a record librdkafka sent again under a newer
    producer epoch: ``resent_after_epoch_bump``)."""
    found = []
    for topic, by_partition in outcome.checks.items():
        for index, check in by_partition.items():
            if (
                check.rows != check.acked + len(check.resent)
                or check.rows_offset_sum != check.acked_offset_sum + sum(check.resent)
                or check.extra_count != len(check.resent)
                or check.missing
                or check.duplicated
                or check.wrong_values
            ):
                found.append(f"{topic}-{index}: {check}")
    if outcome.dead_letter_table:
        found.append("the Avro topic has a dead-letter table")
    found += outcome.lost[:20]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.iceberg_failover")
    parser.add_argument("--records", type=int, default=1_000_000, help="per topic")
    parser.add_argument("--target-lag-ms", type=int, default=1000)
    parser.add_argument(
        "--maintenance",
        nargs="?",
        const="2000,3000",
        default=None,
        metavar="COMPACTION_MS,EXPIRY_MS",
        help="compact and expire both tables meanwhile (default intervals 2000,3000 ms)",
    )
    args = parser.parse_args()
    maintenance = None
    if args.maintenance is not None:
        compaction_ms, expiry_ms = (int(part) for part in args.maintenance.split(","))
        maintenance = (compaction_ms, expiry_ms)
    with tempfile.TemporaryDirectory(prefix="iceberg-failover-") as directory:
        root = Path(directory)
        properties = {**FAILOVER_OVERRIDES, **iceberg_properties(root / "iceberg")}
        with Cluster(
            brokers=3,
            server_properties=properties,
            data_dir=root / "cluster",
            schema_registry=True,
        ) as cluster:
            try:
                outcome = run(
                    cluster,
                    properties["iceberg.catalog.uri"],
                    args.records,
                    target_lag_ms=args.target_lag_ms,
                    maintenance=maintenance,
                    progress=lambda text: print(text, flush=True),
                )
            except BaseException:
                # The nodes' logs go with the temporary directory: their tails, before.
                for name, tail in cluster.logs(60).items():
                    print(f"--- the last lines of {name}'s log\n{tail}", flush=True)
                raise
    total = 2 * outcome.records
    print(
        f"{total:,} records ({outcome.records:,} per topic, {PARTITIONS} partitions, RF"
        f" {REPLICATION}); killed brokers {outcome.killed} (SIGKILL, then restarted)"
    )
    print(
        f"produced and acknowledged in {outcome.produce_s:.1f} s"
        f" ({total / outcome.produce_s:,.0f} records/s, kills included)"
    )
    print(f"tables caught up {outcome.catch_up_s:.1f} s after the last acknowledgement")
    for topic, by_partition in outcome.checks.items():
        for index, check in by_partition.items():
            print(
                f"  {topic}-{index}: acked {check.acked:,}, rows {check.rows:,}, offset sums"
                f" {check.acked_offset_sum:,} / {check.rows_offset_sum:,}, missing"
                f" {len(check.missing)}, twice {len(check.duplicated)}, wrong values"
                f" {check.wrong_values}, not acknowledged {check.extra_count} (of them"
                f" acknowledged at another offset: {check.extra_acked_elsewhere}; sent again"
                f" by the producer under a newer epoch: {len(check.resent)})"
            )
    for topic, seen in (outcome.maintenance or {}).items():
        print(
            f"  {topic}: maintenance seen: {len(seen.replace_snapshots)} compaction snapshots,"
            f" {len(seen.expired)} of {len(seen.snapshots_seen)} snapshots seen expired"
            f" (max-snapshot-age-ms 0 set: {seen.max_age_set}; {seen.looks} looks,"
            f" {seen.lost_races} property commits lost to a writer)"
        )
    for note in outcome.notes:
        print("note:", note)
    found = problems(outcome)
    print("exactly once" if not found else "NOT exactly once:\n" + "\n".join(found))
    raise SystemExit(1 if found else 0)


if __name__ == "__main__":
    main()
