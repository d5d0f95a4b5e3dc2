"""The schema registry on https with basic authentication across three brokers: a write sent
to a broker that is not the writer is forwarded to the writer's https listener (checked
against the brokers' trust store) with the client's credentials, which the writer checks
again. ~20 s, most of it the cluster's start: forwarding over TLS between brokers only shows
on a cluster, and the single-broker module (tests/integration/test_schema_registry_security.py)
never forwards."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from minibroker.common.names import SCHEMAS_TOPIC
from minibroker.tools.launcher import Cluster, free_port
from tests.cluster.conftest import CLUSTER_OVERRIDES, CONVERGENCE_TIMEOUT, _check_clean_stop
from tests.conftest import wait_for
from tests.security_setup import SCRAM_USERS, Certificates

USER, PASSWORD = next(iter(SCRAM_USERS.items()))


@pytest.fixture
def cluster(tmp_path) -> Iterator[tuple[Cluster, dict[int, str], Certificates]]:
    certificates = Certificates.make(tmp_path / "certs")
    ports = {node_id: free_port() for node_id in (1, 2, 3)}
    started = Cluster.start(
        tmp_path,
        brokers=3,
        overrides={
            **CLUSTER_OVERRIDES,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certificates.broker_path),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certificates.ca_path),
            "schema.registry.authentication.method": "BASIC",
            "minibroker.scram.users": f"SCRAM-SHA-256=[name={USER},password={PASSWORD}]",
        },
        node_overrides={
            node_id: {"schema.registry.listeners": f"https://127.0.0.1:{port}"}
            for node_id, port in ports.items()
        },
        all_at_once=True,
        fork=True,
    )
    urls = {node_id: f"https://127.0.0.1:{port}" for node_id, port in ports.items()}
    yield started, urls, certificates
    _check_clean_stop(started)


def test_writes_are_forwarded_to_the_writer_over_tls_with_the_clients_credentials(
    cluster,
) -> None:
    started, urls, certificates = cluster

    def client(url: str, password: str = PASSWORD) -> SchemaRegistryClient:
        return SchemaRegistryClient(
            {
                "url": url,
                "ssl.ca.location": str(certificates.ca_path),
                "basic.auth.user.info": f"{USER}:{password}",
                "max.retries": 0,
            }
        )

    schema = {"type": "record", "name": "Ping", "fields": [{"name": "n", "type": "int"}]}
    first = wait_for(
        lambda: _registered(client(urls[1]), "pings-value", schema),
        CONVERGENCE_TIMEOUT,
        "the first registration (which creates _schemas)",
    )
    admin = AdminClient({"bootstrap.servers": started.bootstrap})
    metadata = admin.list_topics(SCHEMAS_TOPIC, timeout=10)
    writer = metadata.topics[SCHEMAS_TOPIC].partitions[0].leader
    others = [node_id for node_id in urls if node_id != writer]
    # Each of the other brokers forwards a new version to the writer, over https.
    for number, node_id in enumerate(others, start=2):
        evolved = {**schema, "fields": [*schema["fields"], _field(number)]}
        registered = client(urls[node_id]).register_schema(
            "pings-value", Schema(json.dumps(evolved), "AVRO")
        )
        assert registered == first + number - 1
    for url in urls.values():
        assert client(url).get_versions("pings-value") == [1, 2, 3]
    # A wrong password is refused by the broker it reaches, writer or not.
    with pytest.raises(SchemaRegistryError) as refused:
        client(urls[others[0]], "wrong").register_schema(
            "pings-value", Schema(json.dumps(schema), "AVRO")
        )
    assert (refused.value.http_status_code, refused.value.error_code) == (401, 40101)


def _field(number: int) -> dict:
    return {"name": f"f{number}", "type": "string", "default": ""}


def _registered(client: SchemaRegistryClient, subject: str, schema: dict) -> int | None:
    try:
        return client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
    except SchemaRegistryError as error:
        if error.http_status_code >= 500:
            return None  # _schemas being created, its leader not known yet
        raise
