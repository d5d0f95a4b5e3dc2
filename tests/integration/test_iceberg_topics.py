"""Iceberg topics on one real broker process (docs/iceberg-topics.md): a confluent-kafka
producer writes records (with and without keys and headers, over 3 partitions, plus an
aborted transaction and a committed one) to a topic with ``iceberg.mode=key_value`` and a
short target lag; pyiceberg reads the table until it holds them, and its rows are the records
exactly (none missing, none twice, the aborted ones absent). Then the broker is stopped and
started again while records keep coming, and the table again holds every record once.
The page's pyiceberg snippet is run as written against the same table."""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyiceberg.catalog.sql import SqlCatalog

from minibroker.tools.launcher import free_port
from tests.conftest import scrape, wait_for
from tests.readme import blocks

TOPIC = "clicks"
PARTITIONS = 3
TIMEOUT = 30.0
PAGE = "docs/iceberg-topics.md"
# One broker: the internal topics with one replica each, and few partitions to create.
OVERRIDES = {
    "offsets.topic.replication.factor": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "transaction.state.log.num.partitions": 1,
}

Row = tuple[int, int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


class Acked:
    """Delivery reports, as rows of the table would show them (the timestamp is the one the
    producer set: the topic keeps CreateTime)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, int], Row] = {}
        self.errors: list[str] = []
        self.headers: dict[bytes, tuple[tuple[str, bytes | None], ...]] = {}
        self.lock = threading.Lock()

    def __call__(self, error, message) -> None:
        with self.lock:
            if error is not None:
                self.errors.append(str(error))
                return
            _, timestamp = message.timestamp()
            # librdkafka's delivery reports carry no headers: those sent, by value.
            headers = self.headers.get(message.value(), ())
            key = (message.partition(), message.offset())
            assert key not in self.rows, f"offset {key} acknowledged twice"
            self.rows[key] = (*key, timestamp, 0, message.key(), message.value(), headers)


def produce(producer: Producer, acked: Acked, first: int, count: int) -> None:
    """Records ``first`` .. ``first + count - 1``: every third without a key, every other
    with headers (one with a null value), round-robin over the partitions."""
    base = int(time.time() * 1000)
    for number in range(first, first + count):
        headers = [("n", str(number).encode()), ("empty", None)] if number % 2 else None
        with acked.lock:
            acked.headers[f"value-{number}".encode()] = tuple(headers or ())
        producer.produce(
            TOPIC,
            value=f"value-{number}".encode(),
            key=None if number % 3 == 0 else f"key-{number}".encode(),
            partition=number % PARTITIONS,
            headers=headers,
            timestamp=base + number,
            on_delivery=acked,
        )
        producer.poll(0)


@contextlib.contextmanager
def producing(
    producer: Producer, acked: Acked, per_batch: int, pause_s: float, join_s: float
) -> Iterator[None]:
    """``produce`` from number 1000 on, ``per_batch`` records at a time with ``pause_s``
    between, in a thread, for as long as the block runs."""
    stop = threading.Event()

    def keep_producing() -> None:
        number = 1000
        while not stop.is_set():
            produce(producer, acked, number, per_batch)
            number += per_batch
            stop.wait(pause_s)

    background = threading.Thread(target=keep_producing, daemon=True)
    background.start()
    try:
        yield
    finally:
        stop.set()
        background.join(join_s)


def table_rows(catalog: SqlCatalog) -> list[Row]:
    table = catalog.load_table(("minibroker", TOPIC))
    rows = []
    for row in table.scan().to_arrow().to_pylist():
        timestamp = row["timestamp"]
        assert timestamp.tzinfo is not None
        millis = round(timestamp.timestamp() * 1000)
        headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
        rows.append(
            (
                row["partition"],
                row["offset"],
                millis,
                row["timestamp_type"],
                row["key"],
                row["value"],
                headers,
            )
        )
    return sorted(rows)


def table_catalog(catalog_file: Path) -> SqlCatalog | None:
    """The broker's catalog once it holds the topic's table."""
    try:
        catalog = SqlCatalog("minibroker", uri=f"sqlite:///{catalog_file}")
        catalog.load_table(("minibroker", TOPIC))
    except Exception:
        return None
    return catalog


def holds(catalog: SqlCatalog, acked: Acked) -> list[Row] | None:
    """The table's rows once it holds at least as many as were acknowledged."""
    rows = table_rows(catalog)
    return rows if len(rows) >= len(acked.rows) else None


def aborted_transaction(bootstrap: str, committed: Acked) -> None:
    """Six records in a transaction that aborts, then three in one that commits."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"iceberg-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
        }
    )
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for number in range(6):
        producer.produce(TOPIC, value=f"aborted-{number}".encode(), partition=number % 3)
    producer.flush(TIMEOUT)
    producer.abort_transaction(TIMEOUT)
    producer.begin_transaction()
    base = int(time.time() * 1000)
    for number in range(3):
        producer.produce(
            TOPIC,
            value=f"committed-{number}".encode(),
            key=b"txn",
            partition=number,
            timestamp=base + number,
            on_delivery=committed,
        )
    producer.commit_transaction(TIMEOUT)


def test_records_land_in_the_table_exactly_once_across_a_restart(broker_factory):
    metrics_port = free_port()
    broker = broker_factory({**OVERRIDES, "metrics.port": metrics_port})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "300"}
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=configs)])[TOPIC].result(TIMEOUT)
    catalog_file = broker.log_dir / "iceberg" / "catalog.db"
    # The leader made the catalog and the table when it took the partitions (no sleep: the
    # writer starts on the LeaderAndIsr that makes this broker their leader).
    wait_for(catalog_file.exists, 20, "the broker to make its Iceberg catalog")
    catalog = wait_for(lambda: table_catalog(catalog_file), 20, "the topic's table")

    acked = Acked()
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    produce(producer, acked, 0, 60)
    assert producer.flush(TIMEOUT) == 0
    aborted_transaction(broker.bootstrap, acked)
    produce(producer, acked, 60, 30)
    assert producer.flush(TIMEOUT) == 0
    assert not acked.errors, acked.errors
    rows = wait_for(lambda: holds(catalog, acked), 20, "the table to hold every record")
    assert rows == sorted(acked.rows.values())
    assert not [row for row in rows if row[5] is not None and row[5].startswith(b"aborted")]

    def metrics_caught_up() -> bool:
        """The writer's counters once it has taken in its last commit's outcome."""
        samples = scrape(metrics_port)
        labels = [(("partition", str(p)), ("topic", TOPIC)) for p in range(PARTITIONS)]
        written = sum(samples.get(("minibroker_iceberg_rows_written_total", k), 0) for k in labels)
        lags = [samples.get(("minibroker_iceberg_lag_records", k)) for k in labels]
        commits = samples.get(("minibroker_iceberg_commits_total", (("topic", TOPIC),)), 0)
        return written == len(acked.rows) and lags == [0] * PARTITIONS and commits >= 1

    wait_for(metrics_caught_up, 10, "the metrics to count every row and no lag")

    # The page's snippet, as written, reads the same table.
    (snippet,) = [b.text for b in blocks("Reading the table with pyiceberg", PAGE)]
    namespace: dict = {}
    exec(snippet.replace("sqlite:///data/", f"sqlite:///{broker.log_dir}/"), namespace)
    assert namespace["rows"].num_rows == len(acked.rows)

    # Records keep coming while the broker stops and starts again: every one of them is
    # written once, whether its commit had happened, was in flight or was still due at the stop.
    with producing(producer, acked, 10, 0.05, 10):
        wait_for(lambda: len(acked.rows) >= 150, 20, "records before the stop")
        assert broker.stop() == 0
        broker.restart()
        broker.wait_ready()
        before = len(acked.rows)
        wait_for(lambda: len(acked.rows) >= before + 60, 20, "records after the restart")
    assert producer.flush(TIMEOUT) == 0
    assert not acked.errors, acked.errors
    rows = wait_for(lambda: holds(catalog, acked), 20, "the table to hold every record")
    assert rows == sorted(acked.rows.values())
    assert len({(row[0], row[1]) for row in rows}) == len(rows)
    # The restarted broker took each partition up where the table said, not from the start.
    restarted = broker.stderr_path.read_text().split("--- launcher:")[-1]
    resumed = dict(
        re.findall(rf"writing {TOPIC}-(\d) to its Iceberg table from offset (\d+)", restarted)
    )
    assert sorted(resumed) == ["0", "1", "2"], restarted[-3000:]
    assert all(int(offset) > 0 for offset in resumed.values()), resumed
