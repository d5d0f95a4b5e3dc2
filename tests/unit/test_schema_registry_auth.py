"""The registry's basic authentication against SCRAM credentials, its listener settings, and
what each request needs of the Kafka ACLs."""

import base64
import ssl

import pytest

from minibroker.common.config import BrokerConfig, ConfigError, HttpListener
from minibroker.protocol import sasl
from minibroker.schema_registry import access
from minibroker.schema_registry.auth import BasicAuthenticator, credentials
from minibroker.schema_registry.rest import qualified_path, registry_config
from minibroker.security.scram import ScramCredentials
from tests.security_setup import Certificates


def basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


def test_basic_headers_are_parsed_as_rfc_7617_has_them(autojump_clock):
    assert credentials(basic("alice:s3:cr:et")) == ("alice", "s3:cr:et")
    assert credentials("basic " + basic("bob:")[6:]) == ("bob", "")
    for bad in (None, "", "Basic", "Bearer abc", "Basic !!!", basic("no-colon"), basic(":pw")):
        assert credentials(bad) is None, bad
    assert credentials("Basic " + base64.b64encode(b"\xff:x").decode()) is None


def test_passwords_are_checked_against_scram_credentials(autojump_clock):
    table = ScramCredentials()
    table.configure("SCRAM-SHA-256", "alice", sasl.new_credential("SCRAM-SHA-256", "secret", 4096))
    authenticator = BasicAuthenticator(table.get)
    assert authenticator.remembered("nobody", "secret") is False
    assert authenticator.remembered("alice", "secret") is None  # must be checked
    assert authenticator.check("alice", "wrong") is None
    credential = authenticator.check("alice", "secret")
    assert credential is not None
    authenticator.remember("alice", "secret", credential)
    assert authenticator.remembered("alice", "secret") is True
    assert authenticator.remembered("alice", "wrong") is None
    # A credential stored later (AlterUserScramCredentials) wins over the configured one: the
    # remembered pass is forgotten, and the old password no longer passes.
    table.store("SCRAM-SHA-256", "alice", sasl.new_credential("SCRAM-SHA-256", "new", 4096))
    assert authenticator.remembered("alice", "secret") is None
    assert authenticator.check("alice", "secret") is None
    assert authenticator.check("alice", "new") is not None
    # Each mechanism is tried: a SCRAM-SHA-512 credential of another password passes too.
    table.store("SCRAM-SHA-512", "alice", sasl.new_credential("SCRAM-SHA-512", "other", 4096))
    assert authenticator.check("alice", "other") is not None
    assert authenticator.check("alice", "new") is not None
    table.forget("SCRAM-SHA-256", "alice")
    table.forget("SCRAM-SHA-512", "alice")
    assert authenticator.check("alice", "new") is None
    assert authenticator.check("alice", "secret") is not None  # the configured one again


def test_https_listeners_and_the_authentication_method_are_configured(autojump_clock):
    config = BrokerConfig.from_properties(
        {
            "schema.registry.listeners": "http://0.0.0.0:8081, HTTPS://[::1]:8082",
            "schema.registry.authentication.method": "basic",
        }
    )
    assert config.schema_registry_listeners == (
        HttpListener("0.0.0.0", 8081, False),
        HttpListener("::1", 8082, True),
    )
    assert config.schema_registry_authentication_method == "BASIC"
    assert BrokerConfig.from_properties({}).schema_registry_authentication_method == "NONE"
    with pytest.raises(ConfigError, match="schema.registry.listeners"):
        BrokerConfig.from_properties({"schema.registry.listeners": "ftp://h:1"})
    with pytest.raises(ConfigError, match="schema.registry.authentication.method"):
        BrokerConfig.from_properties({"schema.registry.authentication.method": "DIGEST"})


def test_https_listeners_take_the_brokers_ssl_properties_and_their_overrides(
    tmp_path, autojump_clock
):
    certificates = Certificates.make(tmp_path)
    both = {
        "schema.registry.listeners": "https://127.0.0.1:0,http://127.0.0.1:1",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certificates.broker_path),
    }
    served = registry_config(BrokerConfig.from_properties(both))
    assert (served.bind, served.insecure_bind) == (["127.0.0.1:0"], ["127.0.0.1:1"])
    context = served.create_ssl_context()
    assert context is not None and context.verify_mode == ssl.CERT_NONE
    # listener.name.schema_registry.ssl.* wins over the broker's ssl.*.
    asking = {
        **both,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certificates.ca_path),
        "listener.name.schema_registry.ssl.client.auth": "required",
    }
    context = registry_config(BrokerConfig.from_properties(asking)).create_ssl_context()
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    # https without a key store names what to set; http alone needs no TLS at all.
    with pytest.raises(ConfigError, match="SCHEMA_REGISTRY.*ssl.keystore.location"):
        registry_config(
            BrokerConfig.from_properties({"schema.registry.listeners": "https://127.0.0.1:0"})
        )
    plain = registry_config(
        BrokerConfig.from_properties({"schema.registry.listeners": "http://127.0.0.1:2"})
    )
    assert (plain.ssl_enabled, plain.bind, plain.insecure_bind) == (False, ["127.0.0.1:2"], [])


def test_every_request_maps_to_a_kafka_acl_need(autojump_clock):
    register = access.needs("POST", "/subjects/{subject:path}/versions", "orders-value")
    assert (register.operation, register.resource_type, register.name) == (
        access.Operation.WRITE,
        access.ResourceType.TOPIC,
        "subject:orders-value",
    )
    delete = access.needs("DELETE", "/subjects/{subject:path}", "a/b")
    assert (delete.operation, delete.name) == (access.Operation.DELETE, "subject:a/b")
    global_level = access.needs("PUT", "/config", None)
    assert (global_level.operation, global_level.resource_type, global_level.name) == (
        access.Operation.ALTER_CONFIGS,
        access.ResourceType.CLUSTER,
        access.CLUSTER_NAME,
    )
    assert access.needs("GET", "/schemas/ids/{id}/versions", None).by_id
    assert access.needs("GET", "/subjects", None).listing
    assert access.needs("GET", "/schemas/types", None).operation is None
    # A route nobody classified is refused at build time rather than served open.
    with pytest.raises(access.Unclassified):
        access.needs("GET", "/exporters", None)
    status, code, message = access.denied(access.Operation.WRITE, register)
    assert (status, code) == (403, 40301) and "'orders-value'" in message


def test_context_urls_are_routed_as_qualified_subjects():
    """Confluent's context URL form (/contexts/{context}/...) names the same resources as
    its qualified subjects (:.name:subject); the default context "." the unqualified ones."""
    assert qualified_path("/contexts/.c/subjects/s/versions/1", "") == (
        "/subjects/:.c:s/versions/1",
        "",
    )
    assert qualified_path("/contexts/.c/subjects/a/b/versions", "normalize=true") == (
        "/subjects/:.c:a/b/versions",
        "normalize=true",
    )
    assert qualified_path("/contexts/.c/compatibility/subjects/s/versions/latest", "") == (
        "/compatibility/subjects/:.c:s/versions/latest",
        "",
    )
    assert qualified_path("/contexts/.c/config", "") == ("/config/:.c:", "")
    assert qualified_path("/contexts/.c/mode/s", "") == ("/mode/:.c:s", "")
    assert qualified_path("/contexts/.c/subjects", "deleted=true") == (
        "/subjects",
        "deleted=true&subjectPrefix=%3A.c%3A",
    )
    assert qualified_path("/contexts/.c/schemas/ids/3", "") == (
        "/schemas/ids/3",
        "subject=%3A.c%3A",
    )
    assert qualified_path("/contexts/.c/schemas/ids/3", "subject=%3A.c%3Ax") == (
        "/schemas/ids/3",
        "subject=%3A.c%3Ax",
    )
    assert qualified_path("/contexts/./subjects/s/versions", "") == ("/subjects/s/versions", "")
    assert qualified_path("/contexts/./config", "") == ("/config", "")
    assert qualified_path("/contexts/./subjects", "") == ("/subjects", "subjectPrefix=")
    assert qualified_path("/contexts/./schemas/ids/1", "") == ("/schemas/ids/1", "")
    for other in ("/contexts", "/contexts/.c", "/contexts/.c/exporters", "/subjects/s"):
        assert qualified_path(other, "") is None, other
