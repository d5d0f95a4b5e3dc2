"""docker-compose.secure.yml, proven without a Docker engine as test_deploy.py proves
docker-compose.yml: the one-shot `secrets` service makes the CA, certificates, users and the
nodes' properties, then the controller and brokers run from them, each in its own network
namespace, and confluent-kafka produces and consumes over SASL_SSL from the kcat service's
place in the network, with the client settings the secrets service wrote.

Needs root (namespaces, mounts), `ip` and the cryptography package; skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.deploy.test_deploy import ComposeCluster

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.secure.yml"
TOOLS_SERVICE = "kcat"
MESSAGES = 100

# Run in the kcat service's namespace, in the directory of the generated client settings
# (librdkafka's names, paths relative to it): create a replicated topic, produce with
# acks=all, consume it back, and print what came back and the partitions' ISR sizes.
CLIENT_SCRIPT = """
import json, os, sys
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic, count, settings_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
os.chdir(os.path.dirname(settings_path))  # the kcat service's working_dir
settings = dict(
    line.split("=", 1) for line in open(settings_path).read().splitlines() if "=" in line
)
settings["bootstrap.servers"] = bootstrap
admin = AdminClient(settings)
admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
producer = Producer({**settings, "acks": "all"})
for number in range(count):
    producer.produce(topic, b"message-%d" % number)
assert producer.flush(30) == 0, "undelivered messages"
consumer = Consumer(
    {**settings, "group.id": "secure-check", "auto.offset.reset": "earliest"}
)
consumer.subscribe([topic])
values = []
while len(values) < count:
    message = consumer.poll(30)
    assert message is not None, f"only {len(values)} of {count} messages came back"
    assert message.error() is None, message.error()
    values.append(message.value().decode())
consumer.close()
partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions.values()
print(json.dumps({"values": sorted(values), "isr": [len(p.isrs) for p in partitions]}))
"""

# Metadata is asked for until librdkafka reports the refusal to the error callback (or 10 s
# pass), one second at a time: a single 10 s request was waited out to the end.
WRONG_PASSWORD_SCRIPT = """
import os, sys, time
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

bootstrap, settings_path = sys.argv[1], sys.argv[2]
os.chdir(os.path.dirname(settings_path))  # the kcat service's working_dir
settings = dict(
    line.split("=", 1) for line in open(settings_path).read().splitlines() if "=" in line
)
settings.update({"bootstrap.servers": bootstrap, "sasl.password": "not-the-password"})
errors = []
admin = AdminClient({**settings, "error_cb": errors.append})
deadline = time.monotonic() + 10
while time.monotonic() < deadline and not any(
    isinstance(error, KafkaError) and error.code() == KafkaError._AUTHENTICATION
    for error in errors
):
    try:
        admin.list_topics(timeout=1)
        errors.append("metadata was listed")
    except Exception as error:
        errors.append(error)
    admin.poll(0.1)  # serves error_cb
print(" | ".join(str(error) for error in errors))
"""


def test_secure_compose_file_is_valid():
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose)")
    for profile in ([], ["--profile", "tools"]):
        result = subprocess.run(
            [compose, "-f", str(COMPOSE_FILE), *profile, "config", "-q"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeCluster]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces and mounts need root")
    if shutil.which("ip") is None:
        pytest.skip("ip is not installed (apt-get install iproute2)")
    pytest.importorskip("cryptography")
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    cluster = ComposeCluster(compose, tmp_path_factory.mktemp("secure-compose"))
    problems: list[str] = []
    try:
        cluster.network.build()
        cluster.up()
        for name in cluster.running:
            cluster.wait_healthy(name)
        yield cluster
    finally:
        # The tests' clients are closed by now; one still connected fails the module
        # (the network guard, tests/conftest.py) instead of dialling a deleted network.
        cluster.network.check_clients()
        problems = cluster.down()
        cluster.network.close()
    if problems:
        pytest.fail("unclean shutdown\n" + "\n".join(problems))


def _client_settings(cluster: ComposeCluster) -> tuple[str, str]:
    """The kcat service's bootstrap and its client settings file, as a host path."""
    command = cluster.services[TOOLS_SERVICE]["command"]
    bootstrap = command[command.index("-b") + 1]
    settings = command[command.index("-F") + 1]
    workdir = cluster.services[TOOLS_SERVICE]["working_dir"]
    return bootstrap, cluster._host_path(TOOLS_SERVICE, f"{workdir}/{settings}")


def test_clients_produce_and_consume_over_sasl_ssl(secure_cluster: ComposeCluster):
    bootstrap, settings = _client_settings(secure_cluster)
    result = secure_cluster.run_in(
        TOOLS_SERVICE,
        [sys.executable, "-c", CLIENT_SCRIPT, bootstrap, "secure-check", str(MESSAGES), settings],
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures = yaml.safe_load(result.stdout.strip().splitlines()[-1])
    assert figures["values"] == sorted(f"message-{number}" for number in range(MESSAGES))
    # Every replica in sync: the brokers replicate to each other over SASL_SSL too.
    assert figures["isr"] == [3, 3, 3]


def test_a_wrong_password_is_refused(secure_cluster: ComposeCluster):
    bootstrap, settings = _client_settings(secure_cluster)
    result = secure_cluster.run_in(
        TOOLS_SERVICE, [sys.executable, "-c", WRONG_PASSWORD_SCRIPT, bootstrap, settings], 60
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # librdkafka logs the broker's SASL_AUTHENTICATION_FAILED answer and never connects.
    assert "Authentication failed" in result.stderr, result.stdout + result.stderr[-3000:]
    assert "Broker transport failure" in result.stdout, result.stdout
    assert "metadata was listed" not in result.stdout, result.stdout


def test_only_the_health_listener_is_plaintext_and_only_on_loopback():
    """Every listener a container's neighbours or the host reach is SASL_SSL."""
    for path in sorted((REPO / "config" / "secure").glob("*.properties")):
        properties = dict(
            line.split("=", 1) for line in path.read_text().splitlines() if "=" in line
        )
        protocols = dict(
            entry.split(":", 1) for entry in properties["listener.security.protocol.map"].split(",")
        )
        for listener in properties["listeners"].split(","):
            name, address = listener.split("://")
            if protocols[name] != "SASL_SSL":
                assert (protocols[name], address.rpartition(":")[0]) == ("PLAINTEXT", "127.0.0.1")
