"""The schema registry over TLS with HTTP basic authentication against the broker's SCRAM
users, and Kafka ACLs on subjects: one broker for the module, served on
``schema.registry.listeners=https://...`` with ``schema.registry.authentication.method=BASIC``
and an authorizer (open where no ACL names a resource), and confluent-kafka's
SchemaRegistryClient, Avro serializers and AdminClient.create_acls as the clients
(``ssl.ca.location``, ``basic.auth.user.info``)."""

from __future__ import annotations

import json
import ssl
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.schema_registry import (
    Metadata,
    MetadataProperties,
    Rule,
    RuleKind,
    RuleMode,
    RuleSet,
    Schema,
    SchemaRegistryClient,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from minibroker.tools.launcher import BrokerProcess, free_port
from tests.conftest import BROKER_READY_TIMEOUT, wait_for
from tests.integration.authz import STANDARD_AUTHORIZER
from tests.security_setup import SCRAM_USERS, Certificates, broker_overrides

USER, PASSWORD = next(iter(SCRAM_USERS.items()))
# A second SCRAM user, who owns the "secret" subjects through ACLs.
OWNER, OWNER_PASSWORD = "bob", "bob-scram-secret"
RECORD = {
    "type": "record",
    "name": "Reading",
    "fields": [{"name": "sensor", "type": "string"}, {"name": "value", "type": "double"}],
}


@dataclass
class RegistryBroker:
    process: BrokerProcess
    bootstrap: str
    url: str
    certificates: Certificates

    def client(self, **extra: object) -> SchemaRegistryClient:
        return SchemaRegistryClient(
            {"url": self.url, "ssl.ca.location": str(self.certificates.ca_path), **extra}
        )

    def logged_in(self, user: str = USER, password: str = PASSWORD) -> SchemaRegistryClient:
        return self.client(**{"basic.auth.user.info": f"{user}:{password}"})


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[RegistryBroker]:
    directory = tmp_path_factory.mktemp("registry-tls")
    certificates = Certificates.make(directory / "certs")
    kafka_port, registry_port = free_port(), free_port()
    overrides = broker_overrides(
        certificates,
        kafka_port,
        {},
        extra={
            "schema.registry.listeners": f"https://127.0.0.1:{registry_port}",
            "schema.registry.authentication.method": "BASIC",
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "allow.everyone.if.no.acl.found": "true",
            "minibroker.scram.users": " ".join(
                f"SCRAM-SHA-512=[name={user},password={password}]"
                for user, password in {**SCRAM_USERS, OWNER: OWNER_PASSWORD}.items()
            ),
        },
    )
    process = BrokerProcess.start(
        node_id=1, log_dir=directory / "data", port=kafka_port, overrides=overrides
    )
    try:
        process.wait_ready(BROKER_READY_TIMEOUT)
        started = RegistryBroker(
            process, f"127.0.0.1:{kafka_port}", f"https://127.0.0.1:{registry_port}", certificates
        )
        context = ssl.create_default_context(cafile=str(certificates.ca_path))

        def answers() -> bool:
            try:
                return httpx.get(started.url + "/", verify=context, timeout=2).status_code == 401
            except httpx.HTTPError:
                return False

        wait_for(answers, 30, "the registry's https listener to answer")
        yield started
    finally:
        exit_code = process.stop() if process.running else process.exit_code
        assert exit_code == 0, f"unclean broker shutdown:\n{process.log_tail()}"


def refusal(call, *args) -> SchemaRegistryError:
    with pytest.raises(SchemaRegistryError) as caught:
        call(*args)
    return caught.value


def test_avro_round_trip_over_tls_with_a_scram_login(broker: RegistryBroker) -> None:
    topic = f"readings-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    registry = broker.logged_in()
    serializer = AvroSerializer(registry, json.dumps(RECORD))
    context = SerializationContext(topic, MessageField.VALUE)
    readings = [{"sensor": f"s{n}", "value": n / 2} for n in range(3)]
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for reading in readings:
        producer.produce(topic, value=serializer(reading, context))
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic})
    consumer.assign([TopicPartition(topic, 0, 0)])
    deserializer = AvroDeserializer(broker.logged_in())
    received = []
    while len(received) < len(readings):
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        received.append(deserializer(message.value(), context))
    consumer.close()
    assert received == readings
    assert registry.get_latest_version(f"{topic}-value").schema.schema_str == json.dumps(
        RECORD, separators=(",", ":")
    )


def test_no_or_wrong_credentials_get_401_40101_and_others_are_served(broker) -> None:
    schema = Schema(json.dumps(RECORD), "AVRO")
    for client in (
        broker.client(),
        broker.client(**{"basic.auth.user.info": f"{USER}:wrong-password"}),
        broker.client(**{"basic.auth.user.info": f"nobody:{PASSWORD}"}),
    ):
        error = refusal(client.register_schema, "refused-value", schema)
        assert (error.http_status_code, error.error_code) == (401, 40101)
        error = refusal(client.get_subjects)
        assert (error.http_status_code, error.error_code) == (401, 40101)
    # A malformed Authorization header: the same answer, and a challenge as RFC 7617 has it.
    context = ssl.create_default_context(cafile=str(broker.certificates.ca_path))
    answer = httpx.get(
        broker.url + "/subjects", headers={"authorization": "Basic !!!"}, verify=context
    )
    assert answer.status_code == 401
    assert answer.json() == {"error_code": 40101, "message": "Unauthorized"}
    assert answer.headers["www-authenticate"].startswith("Basic realm=")
    # Meanwhile the registry serves the logged-in client, and the broker its Kafka clients.
    assert "refused-value" not in broker.logged_in().get_subjects()
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert metadata.brokers


def test_clients_that_do_not_trust_the_ca_or_speak_http_are_refused(broker) -> None:
    untrusting = SchemaRegistryClient(
        {"url": broker.url, "basic.auth.user.info": f"{USER}:{PASSWORD}", "max.retries": 0}
    )
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        untrusting.get_subjects()
    plain = broker.url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):
        httpx.get(plain + "/subjects", timeout=5)
    # ... and the listener still serves a client that does it right.
    assert isinstance(broker.logged_in().get_subjects(), list)


def test_acls_on_subjects_refuse_with_403_40301(broker: RegistryBroker) -> None:
    """The owner may do everything on subjects starting with "secret"; alice may only read
    "secret-shared"; subjects no ACL names stay open (allow.everyone.if.no.acl.found)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            "subject:secret",
            ResourcePatternType.PREFIXED,
            f"User:{OWNER}",
            "*",
            AclOperation.ALL,
            AclPermissionType.ALLOW,
        ),
        AclBinding(
            ResourceType.TOPIC,
            "subject:secret-shared",
            ResourcePatternType.LITERAL,
            f"User:{USER}",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        ),
    ]
    for future in admin.create_acls(bindings).values():
        future.result(30)
    owner, alice = broker.logged_in(OWNER, OWNER_PASSWORD), broker.logged_in()
    schema = Schema(json.dumps(RECORD), "AVRO")

    def refused_to_alice() -> bool:
        try:
            alice.register_schema("secret-mine", schema)
        except SchemaRegistryError as error:
            return (error.http_status_code, error.error_code) == (403, 40301)
        return False

    wait_for(refused_to_alice, 30, "the ACLs to reach the registry")
    shared_id = owner.register_schema("secret-shared", schema)
    hidden = Schema(json.dumps({**RECORD, "name": "Hidden"}), "AVRO")
    hidden_id = owner.register_schema("secret-hidden", hidden)
    open_id = alice.register_schema("open-value", schema)
    assert open_id == shared_id  # the same schema, the same id
    # Alice reads what READ is granted on, and sees only the subjects she may describe.
    assert alice.get_latest_version("secret-shared").schema_id == shared_id
    subjects = alice.get_subjects()
    assert "secret-shared" in subjects and "open-value" in subjects
    assert "secret-hidden" not in subjects
    assert "secret-hidden" in owner.get_subjects()
    for call, args in (
        (alice.get_latest_version, ("secret-hidden",)),
        (alice.register_schema, ("secret-shared", hidden)),
        (alice.delete_subject, ("secret-shared",)),
        (alice.set_compatibility, ("secret-shared", "NONE")),
        (alice.get_schema, (hidden_id,)),
    ):
        error = refusal(call, *args)
        assert (error.http_status_code, error.error_code) == (403, 40301), call
    # A schema by id is readable through any subject holding it that READ is granted on.
    fresh = broker.logged_in()  # no cached answers
    assert fresh.get_schema(shared_id).schema_str == json.dumps(RECORD, separators=(",", ":"))
    assert owner.get_schema(hidden_id).schema_str is not None


def test_contexts_keep_ids_of_their_own_and_are_listed(broker: RegistryBroker) -> None:
    """Confluent's contexts through its SchemaRegistryClient: subjects qualified
    ``:.name:subject`` get ids from their context's own sequence (1 first), a schema by id is
    looked up in the context of ``?subject=`` (``get_schema(id, subject_name)``),
    ``get_contexts()`` lists them, a context's compatibility level (on ``:.name:``) governs
    its subjects only, the URL form ``/contexts/{context}/...`` names the same resources, and
    lists page with ``offset``/``limit``."""
    registry = broker.logged_in()
    context = f".ctx{uuid.uuid4().hex[:8]}"
    other = Schema(json.dumps({**RECORD, "name": "InContext"}), "AVRO")
    plain = Schema(json.dumps(RECORD), "AVRO")
    default_id = registry.register_schema(f"plain-{context[1:]}-value", plain)
    assert registry.register_schema(f":{context}:readings-value", other) == 1
    assert registry.register_schema(f":{context}:more-value", plain) == 2
    assert registry.register_schema(f":{context}:again-value", plain) == 2
    assert context in registry.get_contexts() and "." in registry.get_contexts()
    fresh = broker.logged_in()  # no cached answers
    assert fresh.get_schema(1, subject_name=f":{context}:").schema_str == json.dumps(
        {**RECORD, "name": "InContext"}, separators=(",", ":")
    )
    assert fresh.get_schema(default_id).schema_str == json.dumps(RECORD, separators=(",", ":"))
    assert fresh.get_subjects_by_schema_id(2, subject_name=f":{context}:") == [
        f":{context}:again-value",
        f":{context}:more-value",
    ]
    error = refusal(fresh.get_schema, 3, f":{context}:")
    assert (error.http_status_code, error.error_code) == (404, 40403)
    # A context's level: NONE there lets an incompatible change in, not in another context.
    registry.set_compatibility(f":{context}:", "NONE")
    changed = Schema(json.dumps({**RECORD, "fields": [{"name": "n", "type": "int"}]}), "AVRO")
    assert registry.register_schema(f":{context}:more-value", changed) == 3
    error = refusal(registry.register_schema, f"plain-{context[1:]}-value", changed)
    assert (error.http_status_code, error.error_code) == (409, 409)
    # The context URL form names the same subjects and ids.
    tls = ssl.create_default_context(cafile=str(broker.certificates.ca_path))
    auth = (USER, PASSWORD)
    in_context = f"{broker.url}/contexts/{context}"
    answer = httpx.get(f"{in_context}/subjects/more-value/versions", auth=auth, verify=tls)
    assert (answer.status_code, answer.json()) == (200, [1, 2])
    answer = httpx.get(f"{in_context}/schemas/ids/1", auth=auth, verify=tls)
    assert json.loads(answer.json()["schema"])["name"] == "InContext"
    answer = httpx.get(f"{in_context}/subjects", auth=auth, verify=tls)
    assert answer.json() == sorted(
        f":{context}:{name}" for name in ("again-value", "more-value", "readings-value")
    )
    # An unqualified prefix lists the default context's subjects only.
    assert registry.get_subjects(subject_prefix="plain-") == [f"plain-{context[1:]}-value"]
    # The context wildcard (the default prefix of Confluent's CLI) spans every context.
    spanning = registry.get_subjects(subject_prefix=":*:")
    assert f":{context}:more-value" in spanning and f"plain-{context[1:]}-value" in spanning
    assert registry.get_subjects(subject_prefix=":*:more-value") == sorted(
        name for name in spanning if name.endswith("more-value")
    )
    # Pages of a list, as the client asks for them.
    everything = registry.get_subjects()
    assert registry.get_subjects(offset=1, limit=2) == everything[1:3]
    assert registry.get_versions(f":{context}:more-value", offset=1) == [2]


def test_metadata_and_rule_sets_come_back_to_a_client_that_did_not_register_them(
    broker: RegistryBroker,
) -> None:
    """Confluent's data contracts: the "metadata" and "ruleSet" registered with a schema are
    served with it, by version and by id, to a client with nothing cached (a deserializer in
    another process runs the rules it gets from there), and another rule set is another id."""
    subject = f"contract-{uuid.uuid4().hex[:8]}-value"
    rule = Rule("no-hi", "", RuleKind.CONDITION, RuleMode.READ, "CEL", None, None,
                "message.sensor != 'hi'", None, "DLQ", False)  # fmt: skip
    metadata = Metadata(None, MetadataProperties({"owner": "team-a"}), None)
    text = json.dumps(RECORD)
    with_rules = Schema(text, "AVRO", [], metadata, RuleSet(None, [rule]))
    schema_id = broker.logged_in().register_schema(subject, with_rules)
    fresh = broker.logged_in()
    latest = fresh.get_latest_version(subject)
    # (the rules compared, not the RuleSets: the client reads absent rule lists as [])
    assert latest.schema.rule_set.domain_rules == [rule]
    assert latest.schema.rule_set.migration_rules in (None, [])
    assert latest.schema.metadata.properties == MetadataProperties({"owner": "team-a"})
    assert fresh.get_schema(schema_id).rule_set.domain_rules == [rule]
    # The same text again, without them: the latest version's are kept (the same id).
    assert broker.logged_in().register_schema(subject, Schema(text, "AVRO")) == schema_id
    other = Schema(text, "AVRO", [], metadata, RuleSet(None, []))
    assert broker.logged_in().register_schema(subject, other) != schema_id
    assert broker.logged_in().get_versions(subject) == [1, 2]


@pytest.fixture(scope="module")
def mtls_registry(tmp_path_factory) -> Iterator[RegistryBroker]:
    """A second broker whose registry asks clients for certificates
    (``listener.name.schema_registry.ssl.client.auth=required``) while its Kafka listener
    does not, and has no basic authentication."""
    directory = tmp_path_factory.mktemp("registry-mtls")
    certificates = Certificates.make(directory / "certs")
    kafka_port, registry_port = free_port(), free_port()
    overrides = broker_overrides(
        certificates,
        kafka_port,
        {},
        extra={
            "schema.registry.listeners": f"https://127.0.0.1:{registry_port}",
            "listener.name.schema_registry.ssl.client.auth": "required",
        },
    )
    process = BrokerProcess.start(
        node_id=1, log_dir=directory / "data", port=kafka_port, overrides=overrides
    )
    try:
        process.wait_ready(BROKER_READY_TIMEOUT)
        yield RegistryBroker(
            process, f"127.0.0.1:{kafka_port}", f"https://127.0.0.1:{registry_port}", certificates
        )
    finally:
        exit_code = process.stop() if process.running else process.exit_code
        assert exit_code == 0, f"unclean broker shutdown:\n{process.log_tail()}"


def test_a_registry_that_requires_client_certificates(mtls_registry: RegistryBroker) -> None:
    cert, key = mtls_registry.certificates.client("registry-client")
    with_certificate = mtls_registry.client(
        **{"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    )
    schema = Schema(json.dumps(RECORD), "AVRO")
    registered = wait_for(
        lambda: _registered_or_none(with_certificate, schema),
        30,
        "the registry to take a client with a certificate",
    )
    assert with_certificate.get_latest_version("mtls-value").schema_id == registered
    without = mtls_registry.client(**{"max.retries": 0})
    with pytest.raises(Exception) as refused:
        without.get_subjects()
    assert not isinstance(refused.value, SchemaRegistryError)  # refused in the handshake
    # The Kafka listener asks for nothing: a plain client is served meanwhile.
    metadata = AdminClient({"bootstrap.servers": mtls_registry.bootstrap}).list_topics(timeout=10)
    assert metadata.brokers


def _registered_or_none(client: SchemaRegistryClient, schema: Schema) -> int | None:
    try:
        return client.register_schema("mtls-value", schema)
    except (SchemaRegistryError, httpx.HTTPError):
        return None
