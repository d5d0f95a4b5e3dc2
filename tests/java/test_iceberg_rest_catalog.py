"""Iceberg topics through a REST catalog (docs/iceberg-topics.md, "A REST catalog"): Apache
Iceberg's own REST catalog server (``org.apache.iceberg.rest.RESTCatalogServer``, the server of
the apache/iceberg-rest-fixture image, from java/iceberg-rest/pom.xml) on a loopback port, its
catalog on SQLite and its warehouse in a temporary directory; one broker with the page's
properties (``iceberg.catalog.type=rest``) pointed at it. The broker starts before the server:
confluent-kafka's records are acknowledged while the catalog cannot be reached, the metrics
count the failed attempts and the log says why; then the server starts, and pyiceberg reads
the table back through it (a catalog of its own, with the page's snippet): the rows are the
acknowledged records exactly. Then the broker is killed (SIGKILL) while records keep coming
and started again, and the table again holds every record once: the writer resumed from the
offsets the table's snapshots record. Deleting the topic drops the table through the server.

The writer's races (tests/unit/test_iceberg_table.py, run there on the SQL catalog) run again
through the REST server: a commit that lost the race to another partition's is checked and
made again, and an old leader's late commit makes the new leader's refused, so that the
server's check of the commit's requirement (the branch still at the snapshot read) is what
keeps a row from landing twice. So do the table maintenance's (tests/unit/
test_iceberg_maintenance_rules.py): the compaction's ``replace`` snapshot and its requirement, and
the expiry's snapshot removal, as the server checks and applies them.

One server per module (its JVM takes seconds to start), started when a test asks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.kafka_ref import classpath, java_executable, missing_reason
from minibroker.iceberg.table import open_rest_catalog
from minibroker.tools.launcher import free_port
from tests.conftest import scrape, wait_for
from tests.integration.test_iceberg_topics import (
    OVERRIDES,
    PARTITIONS,
    TIMEOUT,
    TOPIC,
    Acked,
    holds,
    produce,
)
from tests.readme import blocks
from tests.unit import test_iceberg_maintenance_rules as maintenance
from tests.unit import test_iceberg_table as races

SERVER = "org.apache.iceberg.rest.RESTCatalogServer"
SERVER_START_TIMEOUT = 90.0


PAGE = "docs/iceberg-topics.md"
SECTION = "A REST catalog"


@dataclass
class RestServer:
    """Iceberg's REST catalog server on a port chosen up front, started by ``start``."""

    uri: str
    warehouse: Path
    command: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen | None = None

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                self.command, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                cwd=self.log.parent,
            )  # fmt: skip
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while _answers(self.uri) is None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the REST catalog server did not start:\n{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self) -> str:
        return self.log.read_text()[-3000:]

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.process = None


def _answers(uri: str) -> dict | None:
    try:
        with urllib.request.urlopen(uri + "v1/config", timeout=2) as response:
            return json.load(response)
    except OSError:
        return None


@pytest.fixture(scope="module")
def rest_server(tmp_path_factory) -> Iterator[RestServer]:
    """Iceberg's REST catalog server, as the apache/iceberg-rest-fixture image runs it (its
    CATALOG_* environment variables: Iceberg's JDBC catalog on a SQLite file, a local
    warehouse), not started yet. It will listen on every interface of its port (the fixture
    has no host setting); only loopback is used."""
    if (reason := missing_reason("iceberg-rest")) is not None:
        pytest.skip(f"Iceberg's REST catalog server: {reason}")
    java = java_executable()
    assert java is not None  # missing_reason says so otherwise
    root = tmp_path_factory.mktemp("iceberg-rest")
    warehouse = root / "warehouse"
    warehouse.mkdir()
    port = free_port()
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("CATALOG_")},
        "CATALOG_REST_PORT": str(port),
        "CATALOG_WAREHOUSE": str(warehouse),
        "CATALOG_URI": f"jdbc:sqlite:file:{root / 'catalog.db'}",
    }
    server = RestServer(
        uri=f"http://127.0.0.1:{port}/",
        warehouse=warehouse,
        # A short-lived server: C1 only and the serial collector start it faster.
        command=[
            java,
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
            classpath("iceberg-rest"),
            SERVER,
        ],  # fmt: skip
        env=env,
        log=root / "server.log",
    )
    try:
        yield server
    finally:
        server.stop()


def rest_catalog(uri: str):
    """A pyiceberg REST catalog of the reader's own, on the same server."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("reader", type="rest", uri=uri)


def table_catalog(uri: str):
    """The reader's catalog once the server holds the topic's table."""
    try:
        catalog = rest_catalog(uri)
        catalog.load_table(("minibroker", TOPIC))
    except Exception:
        return None
    return catalog


def page_properties() -> dict[str, str]:
    """The page's properties block, as key=value lines."""
    (block,) = [b.text for b in blocks(SECTION, PAGE) if b.lang == "properties"]
    lines = [line for line in block.splitlines() if line.strip()]
    return dict(line.split("=", 1) for line in lines)


def test_records_land_exactly_once_through_the_rest_catalog_across_a_kill(
    rest_server, broker_factory
):
    rest_server.stop()  # not started yet, unless another test of the module ran first
    metrics_port = free_port()
    properties = page_properties()
    assert properties["iceberg.catalog.type"] == "rest"
    properties["iceberg.rest.catalog.uri"] = rest_server.uri
    broker = broker_factory({**OVERRIDES, **properties, "metrics.port": metrics_port})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "300"}
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=configs)])[TOPIC].result(TIMEOUT)

    # The catalog cannot be reached yet: the topic takes writes, and the metrics say so.
    acked = Acked()
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    produce(producer, acked, 0, 60)
    assert producer.flush(TIMEOUT) == 0
    assert not acked.errors, acked.errors
    labels = (("topic", TOPIC),)

    def failing() -> bool:
        samples = scrape(metrics_port)
        return samples.get(("minibroker_iceberg_commit_failures", labels), 0) >= 1

    wait_for(failing, 20, "the metrics to count the failed attempts")
    assert "cannot open the Iceberg table of clicks" in broker.stderr_path.read_text()

    rest_server.start()
    catalog = wait_for(lambda: table_catalog(rest_server.uri), 60, "the topic's table")
    table = catalog.load_table(("minibroker", TOPIC))
    # The server placed the table in its warehouse, where the broker wrote its files.
    assert Path(table.location().removeprefix("file:")).is_relative_to(rest_server.warehouse)
    # Not the SQL catalog: the broker made no catalog of its own.
    assert not (broker.log_dir / "iceberg").exists()
    rows = wait_for(lambda: holds(catalog, acked), 30, "the table to hold every record")
    assert rows == sorted(acked.rows.values())

    def committed() -> bool:
        samples = scrape(metrics_port)
        return (
            samples.get(("minibroker_iceberg_commits_total", labels), 0) >= 1
            and samples.get(("minibroker_iceberg_commit_failures", labels)) == 0
        )

    wait_for(committed, 10, "the metrics to count a commit and no failure")
    # The offsets the last snapshot records are those of the last acknowledged records.
    snapshot = catalog.load_table(("minibroker", TOPIC)).current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    summary = json.loads(snapshot.summary.additional_properties["minibroker.translation"])
    assert {int(p): o for p, o in summary["next-offsets"].items()} == {
        p: 1 + max(o for q, o in acked.rows if q == p) for p in range(PARTITIONS)
    }
    # The page's reading snippet, as written but for the server's address.
    (snippet,) = [b.text for b in blocks(SECTION, PAGE) if b.lang == "python"]
    namespace: dict = {}
    exec(snippet.replace("http://127.0.0.1:8181/", rest_server.uri), namespace)
    assert namespace["rows"].num_rows == len(acked.rows)

    # Records keep coming while the broker is killed and started again: each is written once,
    # whether its commit had happened, was in flight or was still due at the kill.
    stop = threading.Event()

    def keep_producing() -> None:
        number = 1000
        while not stop.is_set():
            produce(producer, acked, number, 10)
            number += 10
            time.sleep(0.05)

    background = threading.Thread(target=keep_producing, daemon=True)
    background.start()
    try:
        wait_for(lambda: len(acked.rows) >= 150, 30, "records before the kill")
        broker.kill()
        broker.restart()
        broker.wait_ready()
        before = len(acked.rows)
        wait_for(lambda: len(acked.rows) >= before + 60, 30, "records after the restart")
    finally:
        stop.set()
        background.join(10)
    assert producer.flush(TIMEOUT) == 0
    # Records in flight at the kill may fail; only acknowledged ones must land.
    rows = wait_for(lambda: holds(catalog, acked), 30, "the table to hold every record")
    assert rows == sorted(acked.rows.values())
    assert len({(row[0], row[1]) for row in rows}) == len(rows)
    restarted = broker.stderr_path.read_text().split("--- launcher:")[-1]
    resumed = dict(
        re.findall(rf"writing {TOPIC}-(\d) to its Iceberg table from offset (\d+)", restarted)
    )
    assert sorted(resumed) == ["0", "1", "2"], restarted[-3000:]
    assert all(int(offset) > 0 for offset in resumed.values()), resumed

    # Deleting the topic drops its table through the server, and the data files it holds
    # (iceberg.delete; a file the killed broker wrote and never committed is no table's and
    # stays, as Iceberg leaves orphan files to orphan-file removal).
    files = catalog.load_table(("minibroker", TOPIC)).inspect.files()["file_path"].to_pylist()
    held = [Path(path.removeprefix("file:")) for path in files]
    assert held and all(path.exists() for path in held)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([TOPIC])[TOPIC].result(TIMEOUT)
    wait_for(lambda: not catalog.table_exists(("minibroker", TOPIC)), 20, "the table to be dropped")
    # The server drops the catalog entry first, then deletes the files.
    wait_for(lambda: not any(path.exists() for path in held), 20, "the table's files to go")


@pytest.fixture
def fresh_catalog(rest_server):
    """The broker's REST catalog on the server, without the race tests' table."""
    rest_server.start()
    catalog = open_rest_catalog("minibroker", {"uri": rest_server.uri})
    catalog.create_namespace_if_not_exists("minibroker")
    if catalog.table_exists(("minibroker", "clicks")):
        catalog.purge_table(("minibroker", "clicks"))
    return catalog


def test_a_lost_race_with_another_partition_is_committed_again_through_rest(fresh_catalog):
    races.test_a_lost_race_with_another_partition_is_checked_and_committed_again(fresh_catalog)


def test_an_old_leaders_late_commit_refuses_the_new_ones_through_rest(fresh_catalog):
    races.test_an_old_leaders_commit_in_the_window_of_the_new_ones_is_refused(fresh_catalog)


def test_tables_are_made_without_pyicebergs_own_retries_through_rest(fresh_catalog):
    races.test_tables_are_made_without_pyicebergs_own_retries(fresh_catalog)


# Table maintenance (tests/unit/test_iceberg_maintenance_rules.py) through the REST server: the
# compaction's replace snapshot and its requirement, and the expiry's removal, as the server
# checks and applies them.


def test_compaction_carries_the_offsets_through_rest(fresh_catalog):
    maintenance.test_compaction_replaces_small_files_and_carries_the_offsets(fresh_catalog)


def test_a_compaction_made_again_on_top_of_a_writers_append_through_rest(
    fresh_catalog, monkeypatch
):
    maintenance.test_a_compaction_is_made_again_on_top_of_a_writers_append_in_its_window(
        fresh_catalog, monkeypatch
    )


def test_a_compaction_loses_to_another_compaction_through_rest(fresh_catalog, monkeypatch):
    maintenance.test_a_compaction_loses_to_another_compaction_in_its_window(
        fresh_catalog, monkeypatch
    )


def test_a_writers_append_made_on_top_of_a_compaction_through_rest(fresh_catalog):
    maintenance.test_a_writers_append_that_loses_to_a_compaction_is_made_on_top(fresh_catalog)


def test_expiry_keeps_the_offsets_through_rest(fresh_catalog):
    maintenance.test_expiry_keeps_the_offsets_and_deletes_what_only_expired_snapshots_reached(
        fresh_catalog
    )
