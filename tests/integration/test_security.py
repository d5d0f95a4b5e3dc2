"""TLS, mutual TLS and SASL listeners against kcat, confluent-kafka and kafka-python.

One broker process serves every kind of listener at once, with certificates made by the test:
PLAINTEXT (where the launcher checks readiness), SSL, MTLS (SSL requiring client
certificates), SASL_PLAINTEXT, SASL_SSL, and REAUTH (SASL_PLAINTEXT with a short
connections.max.reauth.ms). Refusals are judged by what the client is told and by the broker
still serving everyone else afterwards.
"""

from __future__ import annotations

import datetime
import re
import shutil
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from kafka import KafkaConsumer, KafkaProducer
from kio.index import load_request_schema
from kio.schema.metadata.v4.request import MetadataRequest as MetadataRequestV4
from kio.schema.metadata.v4.request import MetadataRequestTopic as MetadataRequestTopicV4

from minibroker.protocol import sasl
from minibroker.tools.launcher import BrokerProcess, free_port
from tests.conftest import (
    BROKER_READY_TIMEOUT,
    encode,
    raw_request,
    read_response,
    run_until_refused,
    wait_for,
)
from tests.security_setup import (
    PLAIN_JAAS,
    PLAIN_USERS,
    SCRAM_USERS,
    Certificates,
    broker_overrides,
)

CLIENT_TIMEOUT = 30
REAUTH_MS = 1500
MESSAGES = [f"message-{index}" for index in range(20)]
SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA, API_VERSIONS = 17, 36, 3, 18


class SecureBroker:
    """The broker and where each of its listeners is."""

    def __init__(self, process: BrokerProcess, ports: dict[str, int], certificates):
        self.process = process
        self.ports = ports
        self.certificates = certificates

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory) -> Iterator[SecureBroker]:
    directory = tmp_path_factory.mktemp("secure")
    certificates = Certificates.make(directory / "certs")
    plaintext_port = free_port()
    ports = {name: free_port() for name in ("SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL", "REAUTH")}
    overrides = broker_overrides(
        certificates,
        plaintext_port,
        ports,
        extra={
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,REAUTH:SASL_PLAINTEXT",
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.reauth.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.reauth.plain.sasl.jaas.config": broker_overrides(
                certificates, plaintext_port, {"SASL_PLAINTEXT": 0}
            )["listener.name.sasl_plaintext.plain.sasl.jaas.config"],
            "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
        },
    )
    process = BrokerProcess.start(
        node_id=1, log_dir=directory / "data", port=plaintext_port, overrides=overrides
    )
    try:
        process.wait_ready(BROKER_READY_TIMEOUT)
        yield SecureBroker(process, ports, certificates)
    finally:
        exit_code = process.stop() if process.running else process.exit_code
        assert exit_code == 0, f"unclean broker shutdown:\n{process.log_tail()}"


def client_settings(broker: SecureBroker, listener: str, mechanism: str | None = None) -> dict:
    """librdkafka settings (kcat -X, confluent-kafka) for one listener, as alice."""
    settings = {"bootstrap.servers": broker.bootstrap(listener)}
    protocol = {"MTLS": "SSL", "REAUTH": "SASL_PLAINTEXT"}.get(listener, listener)
    settings["security.protocol"] = protocol
    if "SSL" in protocol:
        settings["ssl.ca.location"] = str(broker.certificates.ca_path)
    if listener == "MTLS":
        cert, key = broker.certificates.client("alice")
        settings["ssl.certificate.location"] = str(cert)
        settings["ssl.key.location"] = str(key)
    if mechanism is not None:
        settings["sasl.mechanisms"] = mechanism
        settings["sasl.username"] = "alice"
        settings["sasl.password"] = (
            PLAIN_USERS["alice"] if mechanism == sasl.PLAIN else SCRAM_USERS["alice"]
        )
    return settings


def kcat_command(settings: dict, *args: str) -> list[str]:
    command = ["kcat", "-m", "15", "-b", settings["bootstrap.servers"]]
    for key, value in settings.items():
        if key != "bootstrap.servers":
            command += ["-X", f"{key}={value}"]
    return [*command, *args]


def run_kcat(settings: dict, *args: str, stdin: bytes | None = None):
    return subprocess.run(
        kcat_command(settings, *args),
        input=stdin,
        capture_output=True,
        timeout=CLIENT_TIMEOUT,
        check=False,
    )


def kcat_listing_refused(settings: dict, refusal: str) -> str:
    """``kcat -L`` with these settings, stopped once librdkafka logs ``refusal`` (a regular
    expression); it must not have listed any metadata. Returns its stderr."""
    listed, stderr = run_until_refused(kcat_command(settings, "-L"), refusal, CLIENT_TIMEOUT)
    assert listed == "", listed
    return stderr


def kcat_round_trip(settings: dict) -> list[str]:
    topic = f"kcat-{uuid.uuid4().hex[:8]}"
    produced = run_kcat(
        settings, "-P", "-t", topic, "-p", "0", stdin=("\n".join(MESSAGES) + "\n").encode()
    )
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = run_kcat(settings, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr.decode()
    return consumed.stdout.decode().splitlines()


CASES = [
    ("SSL", None),
    ("MTLS", None),
    ("SASL_PLAINTEXT", sasl.PLAIN),
    ("SASL_PLAINTEXT", sasl.SCRAM_SHA_512),
    ("SASL_SSL", sasl.PLAIN),
    ("SASL_SSL", sasl.SCRAM_SHA_512),
    ("SASL_SSL", sasl.SCRAM_SHA_256),
]
CASE_IDS = [f"{listener}-{mechanism or 'cert'}" for listener, mechanism in CASES]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize(("listener", "mechanism"), CASES, ids=CASE_IDS)
def test_kcat_produces_and_consumes(secure_broker, listener, mechanism):
    assert kcat_round_trip(client_settings(secure_broker, listener, mechanism)) == MESSAGES


@pytest.mark.parametrize(("listener", "mechanism"), CASES, ids=CASE_IDS)
def test_confluent_kafka_produces_and_consumes(secure_broker, listener, mechanism):
    settings = client_settings(secure_broker, listener, mechanism)
    topic = f"confluent-{uuid.uuid4().hex[:8]}"
    producer = Producer(settings)
    failures = []
    for message in MESSAGES:
        producer.produce(
            topic,
            message.encode(),
            on_delivery=lambda error, _: failures.append(error) if error else None,
        )
    assert producer.flush(CLIENT_TIMEOUT) == 0 and not failures
    consumer = Consumer({**settings, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    received = []
    deadline = time.monotonic() + CLIENT_TIMEOUT
    while len(received) < len(MESSAGES) and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            received.append(message.value().decode())
    consumer.close()
    assert received == MESSAGES


def kafka_python_settings(broker: SecureBroker, listener: str, mechanism: str | None) -> dict:
    settings = {"bootstrap_servers": broker.bootstrap(listener)}
    protocol = {"MTLS": "SSL"}.get(listener, listener)
    settings["security_protocol"] = protocol
    if "SSL" in protocol:
        settings["ssl_cafile"] = str(broker.certificates.ca_path)
    if listener == "MTLS":
        cert, key = broker.certificates.client("alice")
        settings["ssl_certfile"] = str(cert)
        settings["ssl_keyfile"] = str(key)
    if mechanism is not None:
        settings["sasl_mechanism"] = mechanism
        settings["sasl_plain_username"] = "alice"
        settings["sasl_plain_password"] = (
            PLAIN_USERS["alice"] if mechanism == sasl.PLAIN else SCRAM_USERS["alice"]
        )
    return settings


@pytest.mark.parametrize(("listener", "mechanism"), CASES, ids=CASE_IDS)
def test_kafka_python_produces_and_consumes(secure_broker, listener, mechanism):
    settings = kafka_python_settings(secure_broker, listener, mechanism)
    topic = f"kafka-python-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(**settings)
    for message in MESSAGES:
        producer.send(topic, message.encode()).get(timeout=CLIENT_TIMEOUT)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        auto_offset_reset="earliest",
        consumer_timeout_ms=CLIENT_TIMEOUT * 1000,
        **settings,
    )
    received = []
    for message in consumer:
        received.append(message.value.decode())
        if len(received) == len(MESSAGES):
            break
    consumer.close()
    assert received == MESSAGES


def assert_still_serving(broker: SecureBroker) -> None:
    """A refused client changed nothing for the others: kcat over SASL_SSL still works."""
    listed = run_kcat(client_settings(broker, "SASL_SSL", sasl.SCRAM_SHA_512), "-L")
    assert listed.returncode == 0, listed.stderr.decode()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize(
    ("mechanism", "username", "password", "message"),
    [
        (sasl.PLAIN, "alice", "wrong", sasl.PLAIN_FAILED),
        (sasl.PLAIN, "mallory", PLAIN_USERS["alice"], sasl.PLAIN_FAILED),
        (sasl.SCRAM_SHA_512, "alice", "wrong", sasl.scram_failed(sasl.SCRAM_SHA_512)),
        (sasl.SCRAM_SHA_512, "mallory", "x", sasl.scram_failed(sasl.SCRAM_SHA_512)),
    ],
    ids=["plain-password", "plain-user", "scram-password", "scram-user"],
)
def test_wrong_credentials_are_refused_with_a_message_that_leaks_nothing(
    secure_broker, mechanism, username, password, message
):
    settings = client_settings(secure_broker, "SASL_SSL", mechanism)
    settings.update({"sasl.username": username, "sasl.password": password})
    stderr = kcat_listing_refused(settings, "SASL authentication error: .* \\(after")
    assert f"SASL authentication error: {message}" in stderr
    # Nothing the server said names a user or a secret.
    server_said = stderr.split("SASL authentication error: ", 1)[1].split(" (after", 1)[0]
    assert server_said == message
    for secret in (*PLAIN_USERS.values(), *SCRAM_USERS.values(), "mallory"):
        assert secret not in server_said
    assert_still_serving(secure_broker)


def test_confluent_kafka_reports_an_authentication_error(secure_broker):
    settings = client_settings(secure_broker, "SASL_SSL", sasl.SCRAM_SHA_512)
    errors = []
    settings.update({"sasl.password": "wrong", "error_cb": errors.append})
    producer = Producer(settings)
    deadline = time.monotonic() + CLIENT_TIMEOUT
    while not errors and time.monotonic() < deadline:
        producer.poll(0.5)
    assert errors, "no error reported"
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert sasl.scram_failed(sasl.SCRAM_SHA_512) in errors[0].str()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize("problem", ["untrusted", "expired", "missing"])
def test_a_bad_client_certificate_is_refused_on_the_mtls_listener(secure_broker, problem):
    settings = client_settings(secure_broker, "MTLS")
    certificates = secure_broker.certificates
    if problem == "untrusted":
        from trustme import CA

        cert, key = certificates.client("eve", ca=CA())
    elif problem == "expired":
        cert, key = certificates.client(
            "old", not_after=datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
        )
    if problem == "missing":
        del settings["ssl.certificate.location"], settings["ssl.key.location"]
    else:
        settings["ssl.certificate.location"] = str(cert)
        settings["ssl.key.location"] = str(key)
    kcat_listing_refused(settings, "(?i)ssl")
    assert_still_serving(secure_broker)


def test_a_plaintext_client_on_a_tls_port_is_closed_and_others_are_served(secure_broker):
    with socket.create_connection(("127.0.0.1", secure_broker.ports["SSL"]), timeout=10) as sock:
        raw_request(sock, API_VERSIONS, 0, b"", 1)
        try:
            answer = sock.recv(4096)
        except ConnectionResetError:
            answer = b""
        # A TLS alert at most: never a Kafka response frame.
        assert answer == b"" or answer[:1] == b"\x15"
    assert_still_serving(secure_broker)


def sasl_connection(broker: SecureBroker, listener: str = "SASL_PLAINTEXT") -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.ports[listener]), timeout=10)


def request(sock: socket.socket, api_key: int, version: int, fields: dict, correlation_id=1):
    body = load_request_schema(api_key, version)(**fields)
    raw_request(sock, api_key, version, encode(body), correlation_id)
    answered, response = read_response(sock, api_key, version)
    assert answered == correlation_id
    return response


def metadata(sock: socket.socket, correlation_id: int = 9):
    return request(
        sock,
        METADATA,
        1,
        {"topics": ()},
        correlation_id,
    )


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_requests_before_authentication_close_the_connection(secure_broker):
    with sasl_connection(secure_broker) as sock:
        versions = request(sock, API_VERSIONS, 0, {})
        assert versions.error_code.value == 0
        assert {SASL_HANDSHAKE, SASL_AUTHENTICATE} <= {item.api_key for item in versions.api_keys}
        body = load_request_schema(METADATA, 1)(topics=())
        raw_request(sock, METADATA, 1, encode(body), 2)
        assert closed(sock)
    assert_still_serving(secure_broker)


def test_an_unsupported_mechanism_is_answered_with_the_enabled_ones(secure_broker):
    with sasl_connection(secure_broker) as sock:
        answer = request(sock, SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert answer.error_code.value == 33  # UNSUPPORTED_SASL_MECHANISM
        assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}


def test_sasl_handshake_v0_takes_bare_tokens(secure_broker):
    """v0: after the handshake the PLAIN token goes as a bare length-prefixed frame."""
    with sasl_connection(secure_broker) as sock:
        assert request(sock, SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code.value == 0
        token = sasl.plain_client_token("alice", PLAIN_USERS["alice"])
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert sock.recv(4) == b"\x00\x00\x00\x00"  # an empty server token: authenticated
        assert metadata(sock).brokers


def authenticate(sock: socket.socket, correlation_id: int = 1):
    handshake = request(sock, SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, correlation_id)
    assert handshake.error_code.value == 0
    token = sasl.plain_client_token("alice", PLAIN_USERS["alice"])
    return request(sock, SASL_AUTHENTICATE, 1, {"auth_bytes": token}, correlation_id + 1)


def sasl_logins(broker: SecureBroker, what: str) -> int:
    """How many `what` ("authenticated" or "re-authenticated") lines the broker logged for
    alice's PLAIN logins on the REAUTH listener (the broker logs each login at INFO)."""
    line = f"[sasl] {what} User:alice with PLAIN on listener REAUTH"
    return broker.process.stderr_path.read_text(errors="replace").count(line)


def test_a_session_expires_after_connections_max_reauth_ms_unless_renewed(secure_broker):
    logins = sasl_logins(secure_broker, "authenticated")
    renewals = sasl_logins(secure_broker, "re-authenticated")
    with (
        sasl_connection(secure_broker, "REAUTH") as renewed,
        sasl_connection(secure_broker, "REAUTH") as expiring,
    ):
        for sock in (renewed, expiring):
            answer = authenticate(sock)
            assert answer.error_code.value == 0
            assert answer.session_lifetime == datetime.timedelta(milliseconds=REAUTH_MS)
            assert metadata(sock).brokers
        # Wait out the session lifetime told to the client (a known deadline, not a guess).
        time.sleep(REAUTH_MS / 1000 + 0.2)
        assert authenticate(renewed, 20).error_code.value == 0  # KIP-368 re-authentication
        assert metadata(renewed, 30).brokers
        # Logged before the answers that followed them (the log handler flushes each line).
        assert sasl_logins(secure_broker, "authenticated") == logins + 2
        assert sasl_logins(secure_broker, "re-authenticated") == renewals + 1
        body = load_request_schema(METADATA, 1)(topics=())
        raw_request(expiring, METADATA, 1, encode(body), 40)
        assert closed(expiring)


def test_the_failed_connection_is_closed_after_the_answer(secure_broker):
    with sasl_connection(secure_broker) as sock:
        assert request(sock, SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code.value == 0
        token = sasl.plain_client_token("alice", "wrong")
        answer = request(sock, SASL_AUTHENTICATE, 1, {"auth_bytes": token}, 2)
        assert answer.error_code.value == 58  # SASL_AUTHENTICATION_FAILED
        assert answer.error_message == sasl.PLAIN_FAILED
        assert closed(sock)


def test_a_broker_with_a_missing_keystore_does_not_start(tmp_path: Path):
    port = free_port()
    process = BrokerProcess.start(
        node_id=1,
        log_dir=tmp_path / "data",
        port=port,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{free_port()}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tmp_path / "missing.pem"),
        },
    )
    deadline = time.monotonic() + BROKER_READY_TIMEOUT
    while process.running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert process.exit_code == 2
    assert "ssl.keystore.location" in process.log_tail()


def test_scram_users_managed_with_confluent_kafkas_admin_client(secure_broker):
    """AlterUserScramCredentials creates a user who can then log in with SCRAM;
    DescribeUserScramCredentials shows mechanisms and iterations but no secret; deleting the
    credential locks the user out again."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": secure_broker.process.bootstrap})
    user = f"user-{uuid.uuid4().hex[:6]}"
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    created = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, b"fresh-secret")]
    )
    created[user].result(timeout=CLIENT_TIMEOUT)

    described = admin.describe_user_scram_credentials([user])
    infos = described[user].result(timeout=CLIENT_TIMEOUT).scram_credential_infos
    assert [(item.mechanism, item.iterations) for item in infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)
    ]

    settings = client_settings(secure_broker, "SASL_SSL", sasl.SCRAM_SHA_512)
    settings.update({"sasl.username": user, "sasl.password": "fresh-secret"})
    assert kcat_round_trip(settings) == MESSAGES

    deleted = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)]
    )
    deleted[user].result(timeout=CLIENT_TIMEOUT)
    kcat_listing_refused(settings, re.escape(sasl.scram_failed(sasl.SCRAM_SHA_512)))

    missing = admin.describe_user_scram_credentials([user])
    with pytest.raises(Exception, match="nonexistent"):
        missing[user].result(timeout=CLIENT_TIMEOUT)


def test_unacceptable_scram_credentials_get_kafkas_errors(secure_broker):
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": secure_broker.process.bootstrap})
    few = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                "few", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw"
            )
        ]
    )
    with pytest.raises(Exception, match="Too few iterations"):
        few["few"].result(timeout=CLIENT_TIMEOUT)
    absent = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256)]
    )
    with pytest.raises(Exception, match="does not exist"):
        absent["nobody"].result(timeout=CLIENT_TIMEOUT)


def test_a_large_frame_before_authentication_closes_the_connection(secure_broker):
    """Kafka's sasl.server.max.receive.size (512 KiB): an unauthenticated client cannot make
    the broker buffer a large frame; after authenticating, large requests are fine."""
    with sasl_connection(secure_broker) as sock:
        sock.sendall(struct.pack(">i", 600_000) + b"\0" * 1024)
        assert closed(sock)
    with sasl_connection(secure_broker) as sock:
        assert authenticate(sock).error_code.value == 0
        # 1,200 topic names too long to be valid (nothing gets created): a 600 KB request.
        names = [f"{index:0>500}" for index in range(1200)]
        body = MetadataRequestV4(
            topics=tuple(MetadataRequestTopicV4(name=name) for name in names),
            allow_auto_topic_creation=False,
        )
        frame = encode(body)
        assert len(frame) > 524_288
        raw_request(sock, METADATA, 4, frame, 5)
        _, response = read_response(sock, METADATA, 4)
        assert len(response.topics) == len(names)
    assert_still_serving(secure_broker)


def test_scram_users_managed_with_kafka_pythons_admin_client(secure_broker):
    """kafka-python's KafkaAdminClient creates and describes a SCRAM user, who then produces
    with kafka-python over SASL_SSL."""
    from kafka.admin import (
        KafkaAdminClient,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = KafkaAdminClient(bootstrap_servers=secure_broker.process.bootstrap)
    user = f"kp-{uuid.uuid4().hex[:6]}"
    try:
        errors = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, "SCRAM-SHA-512", "kp-secret", iterations=4096)]
        )
        assert errors == {user: None}
        described = admin.describe_user_scram_credentials([user])[user]
        assert described["error"] is None
        assert [
            (info["mechanism"], info["iterations"]) for info in described["credential_infos"]
        ] == [(ScramMechanism.SCRAM_SHA_512, 4096)]
        settings = kafka_python_settings(secure_broker, "SASL_SSL", sasl.SCRAM_SHA_512)
        settings.update({"sasl_plain_username": user, "sasl_plain_password": "kp-secret"})
        producer = KafkaProducer(**settings)
        producer.send(f"kp-{user}", b"value").get(timeout=CLIENT_TIMEOUT)
        producer.close()
        errors = admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, "SCRAM-SHA-512")]
        )
        assert errors == {user: None}
    finally:
        admin.close()


def test_a_node_whose_own_controller_and_inter_broker_listener_is_sasl_ssl(tmp_path: Path):
    """A combined node reaches its controller (itself) and is reached by it on its first
    listener: SASL_SSL with SCRAM-SHA-512 here. It registers, so it serves clients on its
    PLAINTEXT listener; and the controller's connections are on the SASL_SSL one."""
    certificates = Certificates.make(tmp_path / "certs")
    plaintext_port, secure_port = free_port(), free_port()
    overrides = broker_overrides(certificates, plaintext_port, {"SASL_SSL": secure_port})
    listeners = f"SASL_SSL://127.0.0.1:{secure_port},PLAINTEXT://127.0.0.1:{plaintext_port}"
    overrides.update(
        {
            "listeners": listeners,
            "advertised.listeners": listeners,
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        }
    )
    process = BrokerProcess.start(
        node_id=1, log_dir=tmp_path / "data", port=plaintext_port, overrides=overrides
    )
    try:
        process.wait_ready(BROKER_READY_TIMEOUT)
        producer = Producer({"bootstrap.servers": process.bootstrap})
        producer.produce("through-itself", b"value")
        assert producer.flush(CLIENT_TIMEOUT) == 0, process.log_tail()
        log = process.stderr_path.read_text()
        assert "registered with the controller" in log
        assert "SASL authentication failed" not in log
    finally:
        assert process.stop() == 0, process.log_tail()


def test_a_sasl_ssl_node_without_a_trust_store_says_what_to_set(tmp_path: Path):
    """The common first try: one node, its only listener SASL_SSL, a key store and no trust
    store. It cannot trust its own (private CA's) certificate when it registers with itself,
    as Kafka's broker cannot without a trust store; it must say so and name the property,
    not wait silently."""
    certificates = Certificates.make(tmp_path / "certs")
    port = free_port()
    overrides = broker_overrides(certificates, port, {})
    listener = f"SASL_SSL://127.0.0.1:{port}"
    del overrides["ssl.truststore.location"], overrides["ssl.truststore.type"]
    overrides.update(
        {
            "listeners": listener,
            "advertised.listeners": listener,
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        }
    )
    process = BrokerProcess.start(
        node_id=1, log_dir=tmp_path / "data", port=port, overrides=overrides
    )
    try:
        wait_for(
            lambda: "waiting for the controller" in process.stderr_path.read_text(),
            BROKER_READY_TIMEOUT,
            "the node to say why it waits",
        )
        waiting = next(
            line
            for line in process.stderr_path.read_text().splitlines()
            if "waiting for the controller" in line
        )
        assert f"controller 127.0.0.1:{port}: the TLS handshake failed: " in waiting
        assert "certificate verify failed" in waiting or "self-signed" in waiting, waiting
        assert "ssl.truststore.location" in waiting, waiting
    finally:
        process.kill()


async def test_the_brokers_own_connection_re_authenticates_before_its_session_expires(
    secure_broker,
):
    """NodeConnection (fetchers, controller channels) logs in again on the same socket at
    85-95% of the session lifetime, as Kafka's SaslClientAuthenticator does; the same client
    that does not is closed once its session has passed."""
    import trio

    from minibroker.cluster.node_connection import CONNECTION_ERRORS, NodeConnection
    from minibroker.protocol.versions import ApiKey
    from minibroker.security.listeners import ClientSecurity

    security = ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", "alice", PLAIN_USERS["alice"])
    port = secure_broker.ports["REAUTH"]
    body = {"topics": (), "allow_auto_topic_creation": False}

    def metadata_request():
        from minibroker.protocol import codec

        return codec.build(codec.request_class(ApiKey.METADATA, 4), body)

    renewals = sasl_logins(secure_broker, "re-authenticated")
    # The session starts during connect: its re-authentication is due 85-95% of the lifetime
    # after it, so at least 85% after `before` and at most 95% after `connected` (measured
    # around the one connect: a busy CI machine may take long to make the second).
    before = trio.current_time()
    renewing = await NodeConnection.connect("127.0.0.1", port, "reauth-test", security)
    connected = trio.current_time()
    lapsing = await NodeConnection.connect("127.0.0.1", port, "reauth-test", security)
    try:
        started = trio.current_time()
        assert renewing.reauthenticate_at is not None
        assert renewing.reauthenticate_at - before >= 0.85 * REAUTH_MS / 1000
        assert renewing.reauthenticate_at - connected <= 0.95 * REAUTH_MS / 1000
        lapsing.reauthenticate_at = None  # a client without KIP-368
        # Requests for three session lifetimes: each past its re-authentication time.
        while trio.current_time() < started + 3 * REAUTH_MS / 1000:
            assert (await renewing.request(metadata_request())).brokers
            await trio.sleep(0.1)
        assert renewing.reauthentications >= 2
        assert sasl_logins(secure_broker, "re-authenticated") >= renewals + 2
        with pytest.raises(CONNECTION_ERRORS):
            await lapsing.request(metadata_request())
    finally:
        await renewing.aclose()
        await lapsing.aclose()


def test_librdkafka_re_authenticates_and_keeps_producing(secure_broker):
    """librdkafka (KIP-368 since 2.2.0) renews its session before it expires: a producer
    that goes on for several session lifetimes loses no message and no connection."""
    settings = client_settings(secure_broker, "REAUTH", sasl.PLAIN)
    renewals = sasl_logins(secure_broker, "re-authenticated")
    logins = sasl_logins(secure_broker, "authenticated")
    producer = Producer(settings)
    delivered: list[str] = []
    errors: list[str] = []

    def report(error, message):
        (errors if error else delivered).append(str(error or message.value()))

    topic = f"reauth-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    sent = 0
    while time.monotonic() < started + 3 * REAUTH_MS / 1000:
        producer.produce(topic, b"x", on_delivery=report)
        sent += 1
        producer.flush(CLIENT_TIMEOUT)
        time.sleep(0.1)
    assert not errors and len(delivered) == sent
    assert sasl_logins(secure_broker, "re-authenticated") > renewals
    # One login per broker connection librdkafka opened, none for a reconnection.
    assert sasl_logins(secure_broker, "authenticated") - logins <= 3


def test_re_authentication_follows_kafkas_rules(secure_broker):
    """KafkaChannel.maybeBeginServerReauthentication: a SaslHandshake after authentication is
    refused (ILLEGAL_SASL_STATE, the connection kept) on a listener without
    connections.max.reauth.ms, and within a second of the last re-authentication's start."""
    with sasl_connection(secure_broker, "SASL_PLAINTEXT") as sock:
        assert authenticate(sock).error_code.value == 0
        again = request(sock, SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, 3)
        assert again.error_code.value == 34  # ILLEGAL_SASL_STATE
        assert metadata(sock, 4).brokers  # still served
    with sasl_connection(secure_broker, "REAUTH") as sock:
        assert authenticate(sock).error_code.value == 0
        assert authenticate(sock, 3).error_code.value == 0  # the first: at any time
        again = request(sock, SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, 5)
        assert again.error_code.value == 34  # within a second of the last one's start
