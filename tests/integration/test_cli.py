"""The command line: a bad configuration stops the start with a message naming the key."""

import subprocess
import sys


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


def test_a_log_dir_in_use_is_refused(broker):
    finished = run_serve(
        broker.log_dir, "listeners=PLAINTEXT://127.0.0.1:0", f"node.id={broker.node_id}"
    )
    assert finished.returncode == 1
    assert "lock" in finished.stderr.lower()


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


def test_kafkas_stock_server_properties_start_a_broker(tmp_path):
    from minibroker.tools.launcher import free_port, request_metadata
    from tests.conftest import wait_for
    from tests.unit.test_config import KAFKA_KRAFT_PROPERTIES

    client_port, controller_port = free_port(), free_port()
    properties = (
        KAFKA_KRAFT_PROPERTIES.replace(":9092", f":{client_port}")
        .replace(":9093", f":{controller_port}")
        .replace("/tmp/kraft-combined-logs", str(tmp_path / "logs"))
    )
    path = tmp_path / "server.properties"
    path.write_text(properties)
    process = subprocess.Popen(
        [sys.executable, "-m", "minibroker", "serve", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        listed = wait_for(
            lambda: _brokers(request_metadata, client_port), 30, "the stock-configured broker"
        )
        assert listed == [("localhost", client_port)]
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0, process.stderr.read()


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
