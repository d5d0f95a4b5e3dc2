"""Iceberg topics with the warehouse in S3-compatible object storage (docs/iceberg-topics.md,
"Data files in object storage"): moto's S3 server, a real process on 127.0.0.1, and one real
broker whose SQL catalog's warehouse is ``s3://`` with the ``iceberg.catalog.s3.*`` file IO
properties. The table's data and metadata files land in the bucket (none on the broker's
disk), pyiceberg reads every record once through the same catalog, and ``minibroker
iceberg`` reads the table's files and offsets with the keys given on its command line."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from minibroker.tools.launcher import free_port
from tests.conftest import wait_for
from tests.integration.test_iceberg_cli import rows_of
from tests.integration.test_iceberg_topics import OVERRIDES, TIMEOUT

boto3 = pytest.importorskip("boto3", reason="pip install 'minibroker[test]' (moto[server])")

TOPIC = "clicks"
BUCKET = "lake"
KEYS = {"s3.access-key-id": "testing", "s3.secret-access-key": "testing"}
PARTITIONS = 2
RECORDS = 30


@pytest.fixture
def s3_endpoint(tmp_path: Path):
    """moto's S3 server on a free loopback port, stopped (SIGTERM, then waited for) after."""
    moto_server = Path(sys.executable).parent / "moto_server"
    if not moto_server.exists():
        pytest.skip("moto_server is not installed: pip install 'moto[server]'")
    port = free_port()
    log = (tmp_path / "moto.log").open("w")
    process = subprocess.Popen(
        [str(moto_server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                return True
        except OSError:
            return process.poll() is not None and pytest.fail("moto_server exited")

    try:
        wait_for(answers, 30, "moto's S3 server")
        yield endpoint
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def s3(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def test_tables_in_s3_compatible_storage(broker_factory, s3_endpoint):
    client = s3(s3_endpoint)
    client.create_bucket(Bucket=BUCKET)
    metrics_port = free_port()
    broker = broker_factory(
        {
            **OVERRIDES,
            "metrics.port": metrics_port,
            "iceberg.catalog.warehouse": f"s3://{BUCKET}/warehouse",
            "iceberg.catalog.s3.endpoint": s3_endpoint,
            "iceberg.catalog.s3.region": "us-east-1",
            **{f"iceberg.catalog.{key}": value for key, value in KEYS.items()},
        }
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "200"}
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=configs)])[TOPIC].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for number in range(RECORDS):
        producer.produce(TOPIC, value=b"v%d" % number, partition=number % PARTITIONS)
    assert producer.flush(TIMEOUT) == 0

    from pyiceberg.catalog.sql import SqlCatalog

    catalog_file = broker.log_dir / "iceberg" / "catalog.db"
    wait_for(catalog_file.exists, 20, "the broker to make its Iceberg catalog")
    catalog = SqlCatalog(
        "minibroker",
        uri=f"sqlite:///{catalog_file}",
        **{"s3.endpoint": s3_endpoint, "s3.region": "us-east-1", **KEYS},
    )

    def table_rows():
        try:
            scanned = catalog.load_table(("minibroker", TOPIC)).scan().to_arrow()
        except Exception:
            return None
        pairs = sorted(
            zip(scanned["partition"].to_pylist(), scanned["offset"].to_pylist(), strict=True)
        )
        return pairs if len(pairs) >= RECORDS else None

    pairs = wait_for(table_rows, 30, "the table to hold every record")
    assert pairs == sorted((p, o) for p in range(PARTITIONS) for o in range(RECORDS // PARTITIONS))
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix="warehouse/")
    keys = [item["Key"] for item in listed.get("Contents", [])]
    assert any(key.endswith(".parquet") and "/data/" in key for key in keys), keys
    assert any(key.endswith(".metadata.json") for key in keys), keys
    assert not list((broker.log_dir / "iceberg").rglob("*.parquet"))

    # The command finds the endpoint from the broker; the keys are secrets it is given.
    done = subprocess.run(
        [sys.executable, "-m", "minibroker", "iceberg", "--bootstrap", broker.bootstrap]
        + [f"--catalog-property={key}={value}" for key, value in KEYS.items()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    for index in range(PARTITIONS):
        row = rows_of(done.stdout)[(TOPIC, index)]
        assert row["TABLE-OFFSET"] == str(RECORDS // PARTITIONS) and row["LAG"] == "0", row
        assert int(row["FILES"]) >= 1, row
