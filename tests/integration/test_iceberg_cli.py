"""`minibroker iceberg` against one real broker process, given only its bootstrap address:
three Iceberg topics, one whose table has caught up (its offsets are the log's, no lag),
one whose records wait (a long target lag: the lag in offsets, and in seconds by the records'
timestamps, set by the producer 100 s in the past), and one whose writer fails (typed mode on
a broker without the schema registry: the error its metrics carry is printed)."""

from __future__ import annotations

import subprocess
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from minibroker.tools.launcher import free_port
from tests.conftest import scrape, wait_for
from tests.integration.test_iceberg_topics import OVERRIDES, TIMEOUT

CAUGHT_UP, WAITING, FAILING = "written", "waiting", "failing"
PARTITIONS = 2
PER_PARTITION = 5


def iceberg_cli(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "minibroker", "iceberg", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
    )


def rows_of(output: str) -> dict[tuple[str, int], dict[str, str]]:
    lines = output.splitlines()
    header = lines[0].split()
    rows = {}
    for line in lines[1:]:
        cells = line.split(None, len(header) - 1)
        row = dict(zip(header, cells, strict=False))
        rows[(row["TOPIC"], int(row["PARTITION"]))] = row
    return rows


def test_the_command_shows_offsets_lag_files_and_errors(broker_factory):
    metrics_port = free_port()
    broker = broker_factory({**OVERRIDES, "metrics.port": metrics_port})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    modes = {
        CAUGHT_UP: {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "200"},
        WAITING: {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "3600000"},
        FAILING: {"iceberg.mode": "value_schema_id_prefix", "iceberg.target.lag.ms": "200"},
        "plain": {},
    }
    futures = admin.create_topics(
        [NewTopic(name, PARTITIONS, 1, config=configs) for name, configs in modes.items()]
    )
    for future in futures.values():
        future.result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    past = int(time.time() * 1000) - 100_000
    for name in modes:
        for number in range(PARTITIONS * PER_PARTITION):
            producer.produce(
                name, value=b"v%d" % number, partition=number % PARTITIONS, timestamp=past
            )
    assert producer.flush(TIMEOUT) == 0

    def caught_up() -> bool:
        samples = scrape(metrics_port)
        written = sum(
            samples.get(
                ("minibroker_iceberg_rows_written_total", (("partition", str(p)), ("topic", name))),
                0,
            )
            for p in range(PARTITIONS)
            for name in (CAUGHT_UP,)
        )
        failing = samples.get(("minibroker_iceberg_commit_failures", (("topic", FAILING),)), 0)
        return written == PARTITIONS * PER_PARTITION and failing >= 1

    wait_for(caught_up, 20, "the first topic written and the typed one failing")

    done = iceberg_cli("--bootstrap", broker.bootstrap)
    assert done.returncode == 0, done.stderr
    rows = rows_of(done.stdout)
    assert {topic for topic, _ in rows} == {CAUGHT_UP, WAITING, FAILING}, done.stdout
    for index in range(PARTITIONS):
        written = rows[(CAUGHT_UP, index)]
        assert written["TABLE"] == f"minibroker.{CAUGHT_UP}"
        assert written["TABLE-OFFSET"] == written["LOG-END-OFFSET"] == str(PER_PARTITION)
        assert written["LAG"] == "0" and written["LAG-SECONDS"] == "0"
        assert int(written["FILES"]) >= 1 and int(written["SNAPSHOTS"]) >= 1
        assert written["LAST-ERROR"] == "-"
        waiting = rows[(WAITING, index)]
        # The table exists (made when the leader took the partition) and holds nothing yet.
        assert waiting["TABLE-OFFSET"] == "-" and waiting["LOG-END-OFFSET"] == str(PER_PARTITION)
        assert waiting["LAG"] == str(PER_PARTITION)
        assert 100 <= float(waiting["LAG-SECONDS"]) < 200, waiting
        assert waiting["FILES"] == "0" and waiting["LAST-ERROR"] == "-"
        failing = rows[(FAILING, index)]
        assert failing["LAG"] == str(PER_PARTITION)
        assert "schema registry" in failing["LAST-ERROR"], failing

    one = iceberg_cli("--bootstrap", broker.bootstrap, "--topic", CAUGHT_UP)
    assert one.returncode == 0, one.stderr
    assert {topic for topic, _ in rows_of(one.stdout)} == {CAUGHT_UP}
    missing = iceberg_cli("--bootstrap", broker.bootstrap, "--topic", "nope")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
