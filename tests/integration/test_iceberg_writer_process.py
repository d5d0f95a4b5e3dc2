"""The Iceberg writer process (broker/iceberg/writer.py) on one real broker process: the
broker starts it (a child of its own, multiprocessing's 'spawn') when its first Iceberg topic
appears; killed with SIGKILL while records keep coming, it is started again and the table
goes on from its own offsets: every acknowledged record in it exactly once, none missing,
none twice (a commit that landed just before the kill is found by the next commit's
conditional check). The broker keeps serving meanwhile: producing never stops."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

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
    producing,
    table_catalog,
)

STARTS = ("minibroker_iceberg_writer_starts_total", ())


def writer_pids(broker_pid: int) -> list[int]:
    """The broker's children that multiprocessing's 'spawn' started as its Iceberg writer
    (not its resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == broker_pid and b"spawn_main" in command:
            found.append(int(entry.name))
    return found


def test_a_killed_writer_process_is_started_again_and_the_table_goes_on(broker_factory):
    metrics_port = free_port()
    broker = broker_factory({**OVERRIDES, "metrics.port": metrics_port})
    # No writer process before an Iceberg topic is led here.
    assert writer_pids(broker.pid) == []
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "100"}
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=configs)])[TOPIC].result(TIMEOUT)
    catalog_file = broker.log_dir / "iceberg" / "catalog.db"
    catalog = wait_for(lambda: table_catalog(catalog_file), 30, "the topic's table")
    (first,) = wait_for(lambda: writer_pids(broker.pid) or None, 10, "the writer process")
    assert scrape(metrics_port)[STARTS] == 1

    acked = Acked()
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    produce(producer, acked, 0, 300)
    assert producer.flush(TIMEOUT) == 0
    wait_for(lambda: holds(catalog, acked), 30, "the table to hold the first records")

    # Records keep coming while the writer is killed: commits are due every 100 ms, so the
    # kill may land in one.
    with producing(producer, acked, 20, 0.01, TIMEOUT):
        wait_for(
            lambda: len(acked.rows) >= 2000 or None, 30, "records to keep coming before the kill"
        )
        os.kill(first, signal.SIGKILL)
        (second,) = wait_for(
            lambda: [pid for pid in writer_pids(broker.pid) if pid != first] or None,
            30,
            "another writer process",
        )
        wait_for(lambda: scrape(metrics_port)[STARTS] == 2 or None, 30, "the second start counted")
        killed_at = len(acked.rows)
        wait_for(
            lambda: len(acked.rows) >= killed_at + 2000 or None,
            30,
            "records to keep coming after the kill",
        )
    assert producer.flush(TIMEOUT) == 0
    assert not acked.errors, acked.errors
    rows = wait_for(lambda: holds(catalog, acked), 60, "the table to hold every record")
    assert rows == sorted(acked.rows.values())
    # The first writer is gone (reaped by the broker), the second one writes.
    assert not Path(f"/proc/{first}").exists()
    assert writer_pids(broker.pid) == [second]


def test_a_writer_without_pyiceberg_says_so_and_the_topic_takes_writes(broker_factory, tmp_path):
    """pyiceberg missing where the writer process runs (hidden from the broker's interpreters
    by a package of that name that fails to import, first on PYTHONPATH): the writer's error is
    the one a broker without the ``iceberg`` extra gives, on ``minibroker_iceberg_last_error``,
    and the topic takes writes as usual."""
    shim = tmp_path / "shim" / "pyiceberg"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pyiceberg'\", name='pyiceberg')\n"
    )
    metrics_port = free_port()
    broker = broker_factory({**OVERRIDES, "metrics.port": metrics_port})
    broker.stop()
    broker.extra_env = {"PYTHONPATH": str(shim.parent)}
    broker.restart()
    broker.wait_ready(60)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "100"}
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=configs)])[TOPIC].result(TIMEOUT)

    def last_error() -> str | None:
        for (name, labels), value in scrape(metrics_port).items():
            if name == "minibroker_iceberg_last_error" and value == 1:
                return dict(labels)["error"]
        return None

    error = wait_for(last_error, 30, "the writer's error")
    assert "pyiceberg is not installed" in error and "pip install 'minibroker[iceberg]'" in error
    assert scrape(metrics_port)[STARTS] == 1
    acked = Acked()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    produce(producer, acked, 0, 30)
    assert producer.flush(TIMEOUT) == 0
    assert not acked.errors and len(acked.rows) == 30
    assert not (broker.log_dir / "iceberg" / "catalog.db").exists()


def test_the_writer_process_ends_with_its_broker(broker_factory):
    """A broker killed with SIGKILL takes its idle writer process with it (the writer's end of
    the channel reads end-of-file, and it exits): no writer outlives its broker."""
    broker = broker_factory(OVERRIDES)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {"iceberg.mode": "key_value"}
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=configs)])[TOPIC].result(TIMEOUT)
    (writer,) = wait_for(lambda: writer_pids(broker.pid) or None, 30, "the writer process")
    # Idle: it has answered the table's opening and offsets for every partition (a writer
    # killed in a call would also end, on its answer's failed send).
    wait_for(
        lambda: broker.stderr_path.read_text().count(f"writing {TOPIC}-") == PARTITIONS,
        30,
        "the writer to have read the table's offsets",
    )
    os.kill(broker.pid, signal.SIGKILL)

    def gone() -> bool:
        # Once its broker is gone the writer is another process's child: reaped there, or a
        # zombie until then.
        try:
            state = Path(f"/proc/{writer}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        return state == "Z"

    wait_for(gone, 10, "the writer process to end with its broker")
