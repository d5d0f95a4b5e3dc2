"""The command line: a bad configuration stops the start with a message naming the key.

The two tests that need a running broker (its log directory, its port) take the worker's
shared broker (tests/conftest.py's SHARED_BROKER, the pytest plugin's `kafka_broker`); the
others start `minibroker serve` themselves: that start is what they test."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from minibroker.testing import Cluster
from minibroker.tools.launcher import BrokerProcess
from tests.conftest import SHARED_BROKER


@pytest.fixture
def broker(kafka_broker: Cluster) -> BrokerProcess:
    """The shared broker's node (its log directory, node id and own port)."""
    return kafka_broker.node(1)


def run_serve(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    arguments = [sys.executable, "-m", "minibroker", "serve", "--override", f"log.dirs={tmp_path}"]
    for override in overrides:
        arguments += ["--override", override]
    return subprocess.run(arguments, capture_output=True, text=True, timeout=30, check=False)


def test_invalid_value_names_the_key_and_stops(tmp_path):
    finished = run_serve(tmp_path, "num.partitions=many")
    assert finished.returncode == 2
    assert finished.stderr == (
        "minibroker: Invalid value many for configuration num.partitions: "
        "Not a number of type INT\n"
    )
    assert not (tmp_path / "meta.properties").exists(), "nothing may start on a bad config"


def test_properties_file_that_cannot_be_read(tmp_path):
    finished = subprocess.run(
        [sys.executable, "-m", "minibroker", "serve", str(tmp_path / "missing.properties")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert finished.returncode == 2
    assert "missing.properties" in finished.stderr


@SHARED_BROKER
def test_a_log_dir_in_use_is_refused(broker):
    finished = run_serve(
        broker.log_dir, "listeners=PLAINTEXT://127.0.0.1:0", f"node.id={broker.node_id}"
    )
    assert finished.returncode == 1
    assert "lock" in finished.stderr.lower()


@SHARED_BROKER
def test_a_port_in_use_is_named(broker, tmp_path):
    finished = run_serve(tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{broker.port}")
    assert finished.returncode == 1
    assert f"127.0.0.1:{broker.port}" in finished.stderr


def test_version():
    finished = subprocess.run(
        [sys.executable, "-m", "minibroker", "--version"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert finished.returncode == 0 and finished.stdout.startswith("minibroker ")


# Kafka 4's own config/server.properties, broker.properties and controller.properties, byte
# for byte (tests/fixtures/kafka_config/README.md says where they come from).
STOCK_CONFIGS = Path(__file__).parents[1] / "fixtures" / "kafka_config"

# What those files set that has no meaning here (Kafka's thread pools and socket buffers,
# and the recovery threads): accepted, and logged once each as a config minibroker ignores.
STOCK_IGNORED = {
    "num.network.threads",
    "num.io.threads",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "num.recovery.threads.per.data.dir",
}


def _stock_config(tmp_path: Path, name: str, ports: dict[int, int]) -> Path:
    """Kafka's stock file ``name`` with only what a test on a shared machine must change:
    the ports (9092, 9093 to free ones) and log.dirs (under tmp_path)."""
    stock = (STOCK_CONFIGS / name).read_text(encoding="iso-8859-1").splitlines()
    lines = []
    for line in stock:
        key = line.split("=", 1)[0]
        if key == "log.dirs":
            line = f"log.dirs={tmp_path / name}-logs"
        elif key in ("listeners", "advertised.listeners", "controller.quorum.bootstrap.servers"):
            line = re.sub(r":(\d+)\b", lambda m: f":{ports[int(m.group(1))]}", line)
        lines.append(line)
    assert sum(a != b for a, b in zip(stock, lines, strict=True)) >= 3
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="iso-8859-1")
    return path


def _serve(path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "minibroker", "serve", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _produce_and_consume(port: int, topic: str) -> list[bytes]:
    """Ten records through confluent-kafka's producer (the topic auto-created, as the stock
    num.partitions=1 makes it) and read back by its consumer."""
    from tests.conftest import confluent_read_all

    bootstrap = f"localhost:{port}"
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    for number in range(10):
        producer.produce(topic, value=b"stock %d" % number)
    assert producer.flush(30) == 0
    return [m.value() for m in confluent_read_all(bootstrap, topic, {0: 0}, 10)]


def _stop(*processes: subprocess.Popen) -> list[str]:
    """Stop each node (SIGTERM, as kafka-server-stop.sh), check it exited cleanly, and return
    the configs each logged as ignored."""
    ignored = []
    for process in processes:
        process.terminate()
        stderr = process.communicate(timeout=30)[1]
        assert process.returncode == 0, stderr[-3000:]
        ignored.append(sorted(set(re.findall(r"configuration '([^']+)' was supplied", stderr))))
    return ignored


def test_kafkas_stock_server_properties_start_a_combined_node(tmp_path):
    """Kafka 4's config/server.properties (process.roles=broker,controller, the controller
    named by controller.quorum.bootstrap.servers) starts a node that clients use."""
    from minibroker.tools.launcher import free_port, request_metadata
    from tests.conftest import wait_for

    client_port, controller_port = free_port(), free_port()
    path = _stock_config(tmp_path, "server.properties", {9092: client_port, 9093: controller_port})
    process = _serve(path)
    try:
        listed = wait_for(
            lambda: _brokers(request_metadata, client_port), 30, "the stock-configured node"
        )
        assert listed == [("localhost", client_port)]
        expected = [b"stock %d" % n for n in range(10)]
        assert _produce_and_consume(client_port, "stock-combined") == expected
    finally:
        (ignored,) = _stop(process)
    assert ignored == sorted(STOCK_IGNORED)


def test_kafkas_stock_controller_and_broker_properties_start_a_cluster(tmp_path):
    """Kafka 4's config/controller.properties (node 1, CONTROLLER://:9093) and
    config/broker.properties (node 2, which finds its controller by
    controller.quorum.bootstrap.servers=localhost:9093, its node id unsaid) start a cluster
    of two processes that clients use: the broker registers and leads the topic it creates;
    confluent-kafka produces and consumes, and kcat reads the same records."""
    from minibroker.tools.launcher import free_port, request_metadata
    from tests.conftest import wait_for

    client_port, controller_port = free_port(), free_port()
    ports = {9092: client_port, 9093: controller_port}
    controller = _serve(_stock_config(tmp_path, "controller.properties", ports))
    broker = None
    try:
        broker = _serve(_stock_config(tmp_path, "broker.properties", ports))
        listed = wait_for(
            lambda: _brokers(request_metadata, client_port), 30, "the stock-configured broker"
        )
        assert listed == [("localhost", client_port)]
        expected = [b"stock %d" % n for n in range(10)]
        assert _produce_and_consume(client_port, "stock-split") == expected
        (topic,) = [t for t in request_metadata(client_port).topics if t.name == "stock-split"]
        assert [p.leader_id for p in topic.partitions] == [2]
        if shutil.which("kcat"):  # CI installs it; librdkafka 2.0's kcat reads them too
            read = subprocess.run(
                ["kcat", "-b", f"localhost:{client_port}", "-m", "10", "-C", "-t", "stock-split",
                 "-o", "beginning", "-e", "-q"],
                capture_output=True, timeout=60, check=True,
            )  # fmt: skip
            assert read.stdout.splitlines() == expected, read.stderr
    finally:
        ignored = _stop(*filter(None, (broker, controller)))
    assert all(set(keys) <= STOCK_IGNORED for keys in ignored), ignored
    assert set(ignored[0]) == STOCK_IGNORED, ignored


def _brokers(request_metadata, port):
    try:
        return [(b.host, b.port) for b in request_metadata(port).brokers]
    except OSError:
        return None


def test_a_listener_without_a_security_protocol_is_refused(tmp_path):
    finished = run_serve(tmp_path, "listeners=FOO://127.0.0.1:9300")
    assert finished.returncode == 2
    assert "no security protocol defined for listener FOO" in finished.stderr
    assert "listener.security.protocol.map" in finished.stderr
