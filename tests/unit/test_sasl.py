"""The SASL state machines without I/O: JAAS parsing, PLAIN, and SCRAM against RFC 7677's
published exchange and against each other."""

import base64
import hashlib
import hmac

import pytest

from minibroker.protocol import sasl

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret";'
)


def test_jaas_config_gives_the_login_and_the_plain_users():
    jaas = sasl.parse_jaas_config(PLAIN_JAAS)
    assert jaas.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert (jaas.username, jaas.password) == ("admin", "admin-secret")
    assert jaas.plain_users() == {"admin": "admin-secret", "alice": "alice-secret"}


def test_jaas_values_may_be_unquoted_or_hold_escaped_quotes():
    jaas = sasl.parse_jaas_config('x.ScramLoginModule required username=bob password="a\\"b;c" ;')
    assert jaas.options == {"username": "bob", "password": 'a"b;c'}


@pytest.mark.parametrize(
    "text",
    [
        "",
        'PlainLoginModule username="a";',  # no control flag
        'PlainLoginModule required username="a"',  # no closing semicolon
        'PlainLoginModule required username="a"; trailing',
    ],
)
def test_a_malformed_jaas_config_is_refused(text):
    with pytest.raises(sasl.JaasError):
        sasl.parse_jaas_config(text)


def test_plain_accepts_a_configured_user_and_refuses_the_rest_with_one_message():
    users = {"alice": "alice-secret"}
    assert sasl.plain_server_authenticate(b"\x00alice\x00alice-secret", users) == "alice"
    assert sasl.plain_server_authenticate(b"alice\x00alice\x00alice-secret", users) == "alice"
    for token in (b"\x00alice\x00wrong", b"\x00mallory\x00alice-secret"):
        with pytest.raises(sasl.SaslAuthenticationError) as refused:
            sasl.plain_server_authenticate(token, users)
        assert str(refused.value) == sasl.PLAIN_FAILED
    with pytest.raises(sasl.SaslAuthenticationError, match="authorization id"):
        sasl.plain_server_authenticate(b"admin\x00alice\x00alice-secret", users)
    with pytest.raises(sasl.SaslAuthenticationError, match="3 tokens"):
        sasl.plain_server_authenticate(b"alice-secret", users)


def rfc7677_credential() -> sasl.ScramCredential:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = sasl.salted_password(sasl.SCRAM_SHA_256, "pencil", salt, 4096)
    return sasl.credential_from_salted_password(sasl.SCRAM_SHA_256, salted, salt, 4096)


def test_scram_sha_256_server_replays_the_rfc_7677_example():
    server = sasl.ScramServer(
        sasl.SCRAM_SHA_256,
        {"user": rfc7677_credential()}.get,
        server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )
    server_first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    server_final = server.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.username == "user"


def test_scram_client_replays_the_rfc_7677_example():
    client = sasl.ScramClient(sasl.SCRAM_SHA_256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.final(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert final.endswith(b",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(sasl.SaslAuthenticationError):
        client.verify(b"v=" + base64.b64encode(b"\x00" * 32))


@pytest.mark.parametrize("iterations", [1, 4095, 16385, 10**9])
def test_the_scram_client_refuses_iteration_counts_outside_kafkas_bounds(iterations):
    """Fewer than 4096 make an eavesdropped exchange cheap to brute-force (Kafka's client
    refuses them too); a huge count would stall the broker hashing it."""
    client = sasl.ScramClient(sasl.SCRAM_SHA_256, "user", "pencil", nonce="abc")
    with pytest.raises(sasl.SaslAuthenticationError, match="iterations"):
        client.final(f"r=abcdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i={iterations}".encode())


@pytest.mark.parametrize("mechanism", sasl.SCRAM_MECHANISMS)
def test_scram_server_and_client_agree_and_names_are_escaped(mechanism):
    user = "a,b=c"
    credentials = {user: sasl.new_credential(mechanism, "secret")}
    server = sasl.ScramServer(mechanism, credentials.get)
    client = sasl.ScramClient(mechanism, user, "secret")
    client.verify(server.step(client.final(server.step(client.first()))))
    assert server.username == user


def test_scram_accepts_librdkafkas_echo_of_its_nonce_before_the_server_nonce():
    """librdkafka echoes its own nonce followed by the whole server nonce (so "C" + "CS");
    Kafka checks only that the echo ends with the server nonce, and so does minibroker."""
    credentials = {"user": rfc7677_credential()}
    server = sasl.ScramServer(sasl.SCRAM_SHA_256, credentials.get, server_nonce="S")
    server_first = server.step(b"n,,n=user,r=C").decode()
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = sasl.salted_password(sasl.SCRAM_SHA_256, "pencil", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    without_proof = "c=biws,r=CCS"
    auth_message = f"n=user,r=C,{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    assert server.step(final).startswith(b"v=")
    assert server.username == "user"


@pytest.mark.parametrize(
    ("user", "password"), [("alice", "wrong"), ("mallory", "secret")], ids=["password", "user"]
)
def test_scram_refuses_wrong_credentials_with_kafkas_message(user, password):
    credentials = {"alice": sasl.new_credential(sasl.SCRAM_SHA_512, "secret")}
    server = sasl.ScramServer(sasl.SCRAM_SHA_512, credentials.get)
    client = sasl.ScramClient(sasl.SCRAM_SHA_512, user, password)
    with pytest.raises(sasl.SaslAuthenticationError) as refused:
        server.step(client.final(server.step(client.first())))
    assert str(refused.value) == sasl.scram_failed(sasl.SCRAM_SHA_512)
    assert "alice" not in str(refused.value) and "mallory" not in str(refused.value)


@pytest.mark.parametrize(
    "first",
    [b"p=tls-unique,,n=alice,r=x", b"n,,n=alice", b"n,a=bob,n=alice,r=x", b"\xff", b"garbage"],
)
def test_scram_refuses_malformed_or_unsupported_first_messages(first):
    credentials = {"alice": sasl.new_credential(sasl.SCRAM_SHA_512, "secret")}
    with pytest.raises(sasl.SaslAuthenticationError):
        sasl.ScramServer(sasl.SCRAM_SHA_512, credentials.get).step(first)
