"""TLS as operators configure it, with real clients against one broker process:
``ssl.enabled.protocols`` (a TLS 1.2 client refused where only TLS 1.3 is enabled, served
where it is), ``ssl.cipher.suites`` (kcat offering a suite not in the list refused, one in it
served; TLS 1.3 suites too, with openssl s_client), and ``ssl.principal.mapping.rules``
(mutual TLS where the certificate's subject is mapped to the name an ACL grants)."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from minibroker.tools.launcher import BrokerProcess, free_port
from tests.conftest import BROKER_READY_TIMEOUT, run_until_refused, wait_for
from tests.integration.authz import STANDARD_AUTHORIZER
from tests.security_setup import Certificates

CLIENT_TIMEOUT = 30
# The client certificates' subject is CN=<name>,OU=eng,O=minibroker-tests.
MAPPING_RULES = "RULE:^CN=([^,]+),OU=eng,.*$/$1/L,DEFAULT"
LISTENERS = ("SSL", "TLS13", "CIPHER12", "CIPHER13", "MAPPED", "MTLS")


@dataclass
class TlsBroker:
    process: BrokerProcess
    ports: dict[str, int]
    certificates: Certificates

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory) -> Iterator[TlsBroker]:
    directory: Path = tmp_path_factory.mktemp("tls-settings")
    certificates = Certificates.make(directory / "certs")
    plaintext = free_port()
    ports = {name: free_port() for name in LISTENERS}
    listeners = ",".join(
        f"{name}://127.0.0.1:{port}" for name, port in {"PLAINTEXT": plaintext, **ports}.items()
    )
    overrides = {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,"
        + ",".join(f"{name}:SSL" for name in LISTENERS),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certificates.broker_path),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certificates.ca_path),
        "listener.name.tls13.ssl.enabled.protocols": "TLSv1.3",
        "listener.name.cipher12.ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        "listener.name.cipher13.ssl.cipher.suites": "TLS_AES_256_GCM_SHA384",
        "listener.name.mapped.ssl.client.auth": "required",
        "listener.name.mapped.ssl.principal.mapping.rules": MAPPING_RULES,
        "listener.name.mtls.ssl.client.auth": "required",
        # The admin client and the node's own connections come in on PLAINTEXT (ANONYMOUS).
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:ANONYMOUS",
    }
    process = BrokerProcess.start(
        node_id=1, log_dir=directory / "data", port=plaintext, overrides=overrides
    )
    try:
        process.wait_ready(BROKER_READY_TIMEOUT)
        yield TlsBroker(process, ports, certificates)
    finally:
        exit_code = process.stop() if process.running else process.exit_code
        assert exit_code == 0, f"unclean broker shutdown:\n{process.log_tail()}"


def tls_client(broker: TlsBroker, listener: str, highest: ssl.TLSVersion) -> ssl.SSLSocket:
    """A TLS connection from Python's ssl module (OpenSSL), offering TLS 1.2 up to ``highest``."""
    context = ssl.create_default_context(cafile=str(broker.certificates.ca_path))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.maximum_version = highest
    sock = socket.create_connection(("127.0.0.1", broker.ports[listener]), timeout=10)
    try:
        return context.wrap_socket(sock, server_hostname="127.0.0.1")
    except BaseException:
        sock.close()
        raise


def api_versions_answered(sock: ssl.SSLSocket) -> bool:
    """A Kafka ApiVersions v0 over the connection is answered (the broker serves it)."""
    body = b""
    header = (18).to_bytes(2, "big") + (0).to_bytes(2, "big") + (7).to_bytes(4, "big")
    header += (4).to_bytes(2, "big") + b"test"
    frame = header + body
    sock.sendall(len(frame).to_bytes(4, "big") + frame)
    size = int.from_bytes(sock.recv(4), "big")
    answer = b""
    while len(answer) < size:
        chunk = sock.recv(size - len(answer))
        if not chunk:
            return False
        answer += chunk
    return answer[:4] == (7).to_bytes(4, "big") and answer[4:6] == b"\x00\x00"


def test_a_tls_1_2_client_is_refused_where_only_tls_1_3_is_enabled(tls_broker):
    with pytest.raises(ssl.SSLError, match="(?i)protocol version|alert"):
        tls_client(tls_broker, "TLS13", ssl.TLSVersion.TLSv1_2).close()
    with tls_client(tls_broker, "TLS13", ssl.TLSVersion.TLSv1_3) as sock:
        assert sock.version() == "TLSv1.3"
        assert api_versions_answered(sock)
    # Kafka's default, TLSv1.2,TLSv1.3: the same TLS 1.2 client is served.
    with tls_client(tls_broker, "SSL", ssl.TLSVersion.TLSv1_2) as sock:
        assert sock.version() == "TLSv1.2"
        assert api_versions_answered(sock)
    # The broker goes on serving the TLS 1.3 listener after the refusal.
    with tls_client(tls_broker, "TLS13", ssl.TLSVersion.TLSv1_3) as sock:
        assert api_versions_answered(sock)


kcat = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")


def kcat_settings(broker: TlsBroker, listener: str, ciphers: str) -> list[str]:
    return [
        *("kcat", "-L", "-m", "15", "-b", broker.address(listener)),
        *("-X", "security.protocol=SSL", "-X", f"ssl.ca.location={broker.certificates.ca_path}"),
        *("-X", f"ssl.cipher.suites={ciphers}"),
    ]


@kcat
def test_a_cipher_suite_not_in_the_list_is_refused(tls_broker):
    # Only TLS 1.2 suites in the list, so TLS 1.3 (where kcat's list does not apply) is off.
    # (trustme's certificates have ECDSA keys.)
    listed, _ = run_until_refused(
        kcat_settings(tls_broker, "CIPHER12", "ECDHE-ECDSA-AES128-GCM-SHA256"),
        "(?i)ssl handshake failed|handshake failure",
        CLIENT_TIMEOUT,
    )
    assert listed == ""
    served = subprocess.run(
        kcat_settings(tls_broker, "CIPHER12", "ECDHE-ECDSA-AES256-GCM-SHA384"),
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
        check=False,
    )
    assert served.returncode == 0, served.stderr
    assert "1 brokers:" in served.stdout


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_tls_1_3_cipher_suites_are_restricted_too(tls_broker):
    def s_client(suite: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                *("openssl", "s_client", "-connect", tls_broker.address("CIPHER13")),
                *("-tls1_3", "-ciphersuites", suite, "-CAfile"),
                str(tls_broker.certificates.ca_path),
            ],
            input="",
            capture_output=True,
            text=True,
            timeout=CLIENT_TIMEOUT,
            check=False,
        )

    refused = s_client("TLS_AES_128_GCM_SHA256")
    assert refused.returncode != 0
    assert "handshake failure" in refused.stdout + refused.stderr
    served = s_client("TLS_AES_256_GCM_SHA384")
    assert served.returncode == 0, served.stdout + served.stderr
    assert "Cipher is TLS_AES_256_GCM_SHA384" in served.stdout


def produce_as(broker: TlsBroker, listener: str, topic: str, user: str) -> KafkaError | None:
    cert, key = broker.certificates.client(user)
    producer = Producer(
        {
            "bootstrap.servers": broker.address(listener),
            "security.protocol": "SSL",
            "ssl.ca.location": str(broker.certificates.ca_path),
            "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key),
            "message.timeout.ms": 10_000,
        }
    )
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"mapped", on_delivery=lambda error, _: outcome.append(error))
    producer.flush(CLIENT_TIMEOUT)
    assert outcome, "no delivery report"
    return outcome[0]


def test_mapped_principal_is_what_acls_see(tls_broker):
    topic = f"mapped-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{tls_broker.process.port}"})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(CLIENT_TIMEOUT)
    grants = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:alice",  # the mapped name of CN=alice,OU=eng,O=minibroker-tests
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)
    ]
    for future in admin.create_acls(grants).values():
        future.result(CLIENT_TIMEOUT)
    assert produce_as(tls_broker, "MAPPED", topic, "alice") is None
    # Without the rules the principal is the whole subject, which the ACL does not name.
    error = produce_as(tls_broker, "MTLS", topic, "alice")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # A certificate no rule maps falls through to DEFAULT: the subject, not granted either.
    error = produce_as(tls_broker, "MAPPED", topic, "bob")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("listener.name.ssl.ssl.enabled.protocols", "TLSv1.1"),
        ("ssl.cipher.suites", "TLS_NOT_A_SUITE"),
        ("ssl.principal.mapping.rules", "RULE:^CN=(.*)$/$1"),
    ],
)
def test_a_bad_value_stops_the_start_naming_it(tmp_path: Path, key: str, value: str):
    certificates = Certificates.make(tmp_path / "certs")
    port = free_port()
    process = BrokerProcess.start(
        node_id=1,
        log_dir=tmp_path / "data",
        port=port,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{free_port()}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certificates.broker_path),
            key: value,
        },
    )
    wait_for(lambda: not process.running, BROKER_READY_TIMEOUT, "the broker to refuse to start")
    assert process.exit_code == 2
    assert key in process.log_tail()
