"""Listener security built from Kafka's property names: what is accepted, and what is refused
with a message naming the property (before anything listens)."""

import ssl
from pathlib import Path

import pytest
import trustme

from minibroker.common.config import ConfigError, load_config
from minibroker.protocol import sasl
from minibroker.security.listeners import (
    bootstrap_scram_users,
    certificate_principal,
    client_security,
    listener_security,
)

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_bob="bob-pw";'
)


@pytest.fixture(scope="module")
def pem_files(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("pem")
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    files = {"ca": directory / "ca.pem", "keystore": directory / "broker.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    leaf.private_key_and_cert_chain_pem.write_to_path(str(files["keystore"]))
    files["chain"] = directory / "chain.pem"
    files["key"] = directory / "key.pem"
    files["chain"].write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(str(files["key"]))
    return files


def config(*overrides: str):
    return load_config(None, list(overrides))


def test_an_ssl_listener_with_a_pem_keystore_requiring_client_certificates(pem_files):
    security = listener_security(
        config(
            "listeners=SSL://127.0.0.1:9093",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={pem_files['keystore']}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={pem_files['ca']}",
            "ssl.client.auth=required",
        ),
        "SSL",
    )
    assert security.uses_tls and not security.uses_sasl
    assert security.ssl_context.verify_mode == ssl.CERT_REQUIRED


def test_pem_in_config_and_per_listener_overrides(pem_files):
    prefix = "listener.name.secure."
    security = listener_security(
        config(
            "listeners=SECURE://127.0.0.1:9093",
            "listener.security.protocol.map=SECURE:SSL",
            "ssl.client.auth=required",
            f"{prefix}ssl.client.auth=requested",
            f"{prefix}ssl.keystore.type=PEM",
            f"{prefix}ssl.keystore.certificate.chain={pem_files['chain'].read_text()}",
            f"{prefix}ssl.keystore.key={pem_files['key'].read_text()}",
            f"{prefix}ssl.truststore.type=PEM",
            f"{prefix}ssl.truststore.certificates={pem_files['ca'].read_text()}",
        ),
        "SECURE",
    )
    assert security.ssl_context.verify_mode == ssl.CERT_OPTIONAL


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "SSL uses SSL but has no key store"),
        (["ssl.keystore.type=JKS", "ssl.keystore.location=/x.jks"], "ssl.keystore.type=JKS"),
        (["ssl.keystore.type=PKCS12", "ssl.keystore.location=/x.p12"], "PKCS12"),
        (["ssl.keystore.type=PEM", "ssl.keystore.location=/nonexistent.pem"], "cannot load"),
        (["KEYSTORE", "ssl.client.auth=sometimes"], "ssl.client.auth"),
        (["KEYSTORE", "ssl.client.auth=required"], "needs a trust store"),
        (["KEYSTORE", "ssl.enabled.protocols=TLSv1.1,TLSv1.2"], "ssl.enabled.protocols=.*TLSv1.1"),
        (["KEYSTORE", "ssl.enabled.protocols=SSLv3"], "not SSLv3"),
        (["KEYSTORE", "ssl.protocol=SSLv3"], "ssl.protocol=SSLv3"),
        (["KEYSTORE", "ssl.cipher.suites=TLS_RSA_WITH_RC4_128_MD5"], "TLS_RSA_WITH_RC4_128_MD5"),
        (["KEYSTORE", "ssl.cipher.suites=ECDHE-RSA-AES256-GCM-SHA384"], "unsupported cipher"),
        (
            [
                "KEYSTORE",
                "ssl.enabled.protocols=TLSv1.3",
                "ssl.cipher.suites=TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            ],
            "has no suite for ssl.enabled.protocols=TLSv1.3",
        ),
        (["KEYSTORE", "ssl.principal.mapping.rules=RULE:^CN=(.*)$/$1/X"], "Invalid rule"),
        (
            ["KEYSTORE", "listener.name.ssl.ssl.principal.mapping.rules=default"],
            "listener.name.ssl.ssl.principal.mapping.rules",
        ),
    ],
)
def test_bad_tls_settings_are_refused_by_name(pem_files, overrides, message):
    overrides = [
        item
        for override in overrides
        for item in (
            ["ssl.keystore.type=PEM", f"ssl.keystore.location={pem_files['keystore']}"]
            if override == "KEYSTORE"
            else [override]
        )
    ]
    with pytest.raises(ConfigError, match=message):
        listener_security(config("listeners=SSL://127.0.0.1:9093", *overrides), "SSL")


def test_a_sasl_listener_reads_mechanisms_users_and_session_lifetime():
    security = listener_security(
        config(
            "listeners=SASL_PLAINTEXT://127.0.0.1:9093",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
            "connections.max.reauth.ms=60000",
        ),
        "SASL_PLAINTEXT",
    )
    assert security.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert security.plain_users == {"admin": "admin-secret", "bob": "bob-pw"}
    assert security.max_reauth_ms == 60000 and security.uses_sasl and not security.uses_tls


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "GSSAPI"),  # Kafka's default mechanism, which minibroker does not have
        (["sasl.enabled.mechanisms=PLAIN,OAUTHBEARER"], "OAUTHBEARER"),
        (["sasl.enabled.mechanisms=PLAIN"], "plain.sasl.jaas.config is not set"),
        (
            [
                "sasl.enabled.mechanisms=PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config=PlainLoginModule x",
            ],
            "invalid value for listener.name.sasl_plaintext.plain.sasl.jaas.config",
        ),
    ],
)
def test_bad_sasl_settings_are_refused_by_name(overrides, message):
    with pytest.raises(ConfigError, match=message):
        listener_security(
            config("listeners=SASL_PLAINTEXT://127.0.0.1:9093", *overrides), "SASL_PLAINTEXT"
        )


def test_inter_broker_login_and_bootstrap_scram_users(pem_files):
    scram_jaas = 'x.ScramLoginModule required username="broker" password="broker-pw";'
    settings = config(
        "listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093",
        "security.inter.broker.protocol=SASL_SSL",
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={scram_jaas}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={pem_files['keystore']}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={pem_files['ca']}",
        "minibroker.scram.users=SCRAM-SHA-256=[name=alice,password=a-pw]",
    )
    assert settings.inter_broker_listener.name == "SASL_SSL"
    login = client_security(settings, "SASL_SSL")
    assert (login.mechanism, login.username, login.password) == (
        "SCRAM-SHA-512",
        "broker",
        "broker-pw",
    )
    assert login.ssl_context.check_hostname  # Kafka's default: https identification
    assert sorted(bootstrap_scram_users(settings)) == [
        (sasl.SCRAM_SHA_256, "alice", "a-pw"),
        (sasl.SCRAM_SHA_512, "broker", "broker-pw"),
    ]


def test_a_malformed_bootstrap_scram_user_is_refused():
    with pytest.raises(ConfigError, match="minibroker.scram.users"):
        bootstrap_scram_users(config("minibroker.scram.users=alice:secret"))


def test_both_ways_of_naming_the_inter_broker_listener_are_refused_together():
    with pytest.raises(ConfigError, match="only one of"):
        config(
            "listeners=SSL://127.0.0.1:9093",
            "inter.broker.listener.name=SSL",
            "security.inter.broker.protocol=SSL",
        )


def test_certificate_principal_is_the_subject_as_rfc_2253_writes_it():
    subject = (
        (("countryName", "US"),),
        (("organizationName", "Example, Inc."),),
        (("organizationalUnitName", "eng"),),
        (("commonName", "alice"),),
    )
    assert (
        certificate_principal({"subject": subject}) == "User:CN=alice,OU=eng,O=Example\\, Inc.,C=US"
    )
    assert certificate_principal(None) == "User:ANONYMOUS"


async def test_the_principal_of_a_real_tls_client_certificate(pem_files):
    """getpeercert() after a real handshake, as the server sees it: Kafka's principal."""
    import trio
    import trio.testing

    ca = trustme.CA()
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    ca.configure_trust(server_context)
    server_context.verify_mode = ssl.CERT_REQUIRED
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    ca.issue_cert(
        common_name="alice", organization_name="Example", organization_unit_name="eng"
    ).configure_cert(client_context)
    client_raw, server_raw = trio.testing.memory_stream_pair()
    server = trio.SSLStream(server_raw, server_context, server_side=True)
    client = trio.SSLStream(client_raw, client_context, server_hostname="127.0.0.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.do_handshake)
        await server.do_handshake()
    assert certificate_principal(server.getpeercert()) == "User:CN=alice,OU=eng,O=Example"


def tls_listener(pem_files, *overrides: str) -> ssl.SSLContext:
    security = listener_security(
        config(
            "listeners=SSL://127.0.0.1:9093",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={pem_files['keystore']}",
            *overrides,
        ),
        "SSL",
    )
    assert security.ssl_context is not None
    return security.ssl_context


def tls13_suites(context: ssl.SSLContext) -> list[str]:
    return [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.3"]


def test_enabled_protocols_and_cipher_suites_shape_the_context(pem_files):
    default = tls_listener(pem_files)
    assert (default.minimum_version, default.maximum_version) == (
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_3,
    )
    only13 = tls_listener(pem_files, "listener.name.ssl.ssl.enabled.protocols=TLSv1.3")
    assert only13.minimum_version == ssl.TLSVersion.TLSv1_3
    only12 = tls_listener(pem_files, "ssl.enabled.protocols= TLSv1.2 ")
    assert only12.maximum_version == ssl.TLSVersion.TLSv1_2
    # Java names mapped to OpenSSL's; TLS 1.3 suites restricted too.
    suites = tls_listener(
        pem_files,
        "ssl.cipher.suites=TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256",
    )
    names = {c["name"] for c in suites.get_ciphers()}
    assert names == {"ECDHE-RSA-AES256-GCM-SHA384", "TLS_AES_128_GCM_SHA256"}
    assert tls13_suites(suites) == ["TLS_AES_128_GCM_SHA256"]
    # Only TLS 1.2 suites: TLS 1.3 has nothing to negotiate; only TLS 1.3 suites: the reverse.
    no13 = tls_listener(pem_files, "ssl.cipher.suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
    assert no13.maximum_version == ssl.TLSVersion.TLSv1_2
    no12 = tls_listener(pem_files, "ssl.cipher.suites=TLS_AES_256_GCM_SHA384")
    assert no12.minimum_version == ssl.TLSVersion.TLSv1_3
    assert tls13_suites(no12) == ["TLS_AES_256_GCM_SHA384"]


def test_ssl_protocol_caps_this_nodes_own_connections(pem_files):
    base = [
        "listeners=SSL://127.0.0.1:9093",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={pem_files['keystore']}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={pem_files['ca']}",
    ]
    capped = client_security(config(*base, "ssl.protocol=TLSv1.2"), "SSL").ssl_context
    assert capped is not None and capped.maximum_version == ssl.TLSVersion.TLSv1_2
    # The server side keeps what ssl.enabled.protocols says, as Java's server engine does.
    server = listener_security(config(*base, "ssl.protocol=TLSv1.2"), "SSL").ssl_context
    assert server is not None and server.maximum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(ConfigError, match="no protocol to use"):
        client_security(
            config(*base, "ssl.protocol=TLSv1.2", "ssl.enabled.protocols=TLSv1.3"), "SSL"
        )


def test_the_principal_through_mapping_rules():
    from minibroker.security.principal_mapping import NoMatchingRule, SslPrincipalMapper

    subject = ((("organizationalUnitName", "eng"),), (("commonName", "Alice"),))
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=eng$/$1/L")
    assert certificate_principal({"subject": subject}, mapper) == "User:alice"
    assert certificate_principal(None, mapper) == "User:ANONYMOUS"
    with pytest.raises(NoMatchingRule):
        certificate_principal({"subject": ((("commonName", "bob"),),)}, mapper)
