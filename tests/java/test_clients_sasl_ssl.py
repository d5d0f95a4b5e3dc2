"""The Java client (kafka-clients 4.x) over SASL_SSL with SCRAM-SHA-512 against a 3-broker
minibroker cluster: the same program (programs/ClientChecks.java) and the same checks as
test_clients.py's PLAINTEXT run, plus proof that the clients really authenticated.

Each broker has a CLIENT listener (SASL_SSL, SCRAM-SHA-512 only, a PEM key store from a
throwaway CA) beside the PLAINTEXT one the launcher's readiness checks and the replication use.
The client user is bootstrapped with ``minibroker.scram.users``, as ``kafka-storage format
--add-scram`` would in Kafka; the Java client trusts the CA through a PEM trust store
(ssl.truststore.type=PEM) and verifies the host name (127.0.0.1 is in the certificate).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from minibroker.tools.launcher import Cluster
from tests.java.conftest import JavaRunner, minibroker_cluster
from tests.java.test_clients import (
    REPLICATION,
    check_admin_client,
    check_consumer_group,
    check_producer,
)
from tests.security_setup import Certificates

USER, PASSWORD = "java-client", "java-client-scram-secret"
MECHANISM = "SCRAM-SHA-512"
AUTHENTICATED = re.compile(
    rf"\bauthenticated User:{re.escape(USER)} with {MECHANISM} on listener CLIENT\b"
)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> Certificates:
    return Certificates.make(tmp_path_factory.mktemp("java-sasl-certs"))


@pytest.fixture(scope="module")
def sasl_ssl_cluster(tmp_path_factory, certificates: Certificates) -> Iterator[Cluster]:
    """Three brokers whose client listener is SASL_SSL with SCRAM-SHA-512; on leaving, a clean
    stop and no UNKNOWN_SERVER_ERROR in any node's log (minibroker_cluster)."""
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
        "CLIENT:SASL_SSL",
        "listener.name.client.sasl.enabled.mechanisms": MECHANISM,
        "listener.name.client.ssl.keystore.type": "PEM",
        "listener.name.client.ssl.keystore.location": str(certificates.broker_path),
        "minibroker.scram.users": f"{MECHANISM}=[name={USER},password={PASSWORD}]",
    }
    with minibroker_cluster(
        tmp_path_factory.mktemp("java-sasl-cluster"), overrides, broker_listeners={"CLIENT": None}
    ) as started:
        yield started


def client_bootstrap(cluster: Cluster) -> str:
    return ",".join(
        f"127.0.0.1:{broker.extra_listeners['CLIENT']}" for broker in cluster.brokers.values()
    )


@pytest.fixture(scope="module")
def sasl_run(
    java: JavaRunner, sasl_ssl_cluster: Cluster, certificates: Certificates, tmp_path_factory
) -> dict:
    """ClientChecks' answers over SASL_SSL."""
    properties = tmp_path_factory.mktemp("java-sasl-client") / "client.properties"
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";'
    )
    properties.write_text(
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={MECHANISM}\n"
        f"sasl.jaas.config={jaas}\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={certificates.ca_path}\n"
    )
    return java.json(
        "ClientChecks",
        client_bootstrap(sasl_ssl_cluster),
        "mbsasl",
        str(REPLICATION),
        str(properties),
    )


def test_producer_defaults_every_codec(sasl_run):
    check_producer(sasl_run)


def test_consumer_group(sasl_run):
    check_consumer_group(sasl_run)


def test_admin_client(sasl_run):
    check_admin_client(sasl_run)


def test_clients_authenticated_with_scram(sasl_run, sasl_ssl_cluster: Cluster):
    """Every broker logged the client's SCRAM-SHA-512 logins on the CLIENT listener (the
    only listener the client was given), with no failed authentication and no
    UNKNOWN_SERVER_ERROR. (The JVM's request log does not show SaslHandshake and
    SaslAuthenticate: its authenticator sends them itself, not through NetworkClient.)"""
    for broker in sasl_ssl_cluster.brokers.values():
        log = broker.stderr_path.read_text(errors="replace")
        assert AUTHENTICATED.search(log), f"broker {broker.node_id}: no SCRAM login logged"
        assert "SASL authentication failed" not in log
        assert "UNKNOWN_SERVER_ERROR" not in log
