"""Zero-copy reads on a real broker: a consumer on the PLAINTEXT listener gets its records by
sendfile (minibroker_fetch_sendfile_bytes_total moves), one on the SSL listener gets the same
records through Python (the counter stays put), and both read exactly what was produced."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from minibroker.tools.launcher import BrokerProcess, free_port
from tests.conftest import BROKER_READY_TIMEOUT, confluent_read_all, create_topic, scrape
from tests.security_setup import Certificates, broker_overrides

TOPIC = "zero-copy"
RECORDS = 300
VALUE_SIZE = 4000  # 1.2 MB in all: reads far above the 32 KiB where sendfile starts
SENDFILE = ("minibroker_fetch_sendfile_bytes_total", ())
BYTES_OUT = ("kafka_server_brokertopicmetrics_bytesout_total", (("topic", TOPIC),))


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[tuple[BrokerProcess, dict, int]]:
    directory = tmp_path_factory.mktemp("zero-copy")
    certificates = Certificates.make(directory / "certs")
    plaintext_port, ssl_port, metrics_port = free_port(), free_port(), free_port()
    overrides = broker_overrides(
        certificates,
        plaintext_port,
        {"SSL": ssl_port},
        extra={"metrics.port": str(metrics_port)},
    )
    process = BrokerProcess.start(
        node_id=1, log_dir=directory / "data", port=plaintext_port, overrides=overrides
    )
    try:
        process.wait_ready(BROKER_READY_TIMEOUT)
        ssl_settings = {
            "bootstrap.servers": f"127.0.0.1:{ssl_port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(certificates.ca_path),
        }
        yield process, ssl_settings, metrics_port
    finally:
        exit_code = process.stop() if process.running else process.exit_code
        assert exit_code == 0, f"unclean broker shutdown:\n{process.log_tail()}"


def _consume(bootstrap: str, settings: dict | None = None) -> list[bytes]:
    messages = confluent_read_all(bootstrap, TOPIC, {0: 0}, RECORDS, settings=settings)
    return [message.value() for message in messages]


def test_plaintext_consumers_get_records_by_sendfile_and_tls_consumers_do_not(broker):
    process, ssl_settings, metrics_port = broker
    create_topic(process.bootstrap, TOPIC, 1)
    values = [os.urandom(VALUE_SIZE // 2).hex().encode() for _ in range(RECORDS)]
    producer = Producer({"bootstrap.servers": process.bootstrap, "linger.ms": 20})
    for value in values:
        producer.produce(TOPIC, value, partition=0)
    assert producer.flush(30) == 0

    assert _consume(ssl_settings["bootstrap.servers"], ssl_settings) == values
    after_tls = scrape(metrics_port)
    assert after_tls[BYTES_OUT] >= RECORDS * VALUE_SIZE  # the TLS consumer did fetch
    assert after_tls.get(SENDFILE, 0) == 0

    assert _consume(process.bootstrap) == values
    after_plaintext = scrape(metrics_port)
    sent_by_sendfile = after_plaintext[SENDFILE]
    fetched = after_plaintext[BYTES_OUT] - after_tls[BYTES_OUT]
    # Every large read went by sendfile: all but the small reads at the log's end.
    assert RECORDS * VALUE_SIZE * 0.9 <= sent_by_sendfile <= fetched
