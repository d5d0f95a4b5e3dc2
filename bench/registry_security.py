"""What do TLS, basic authentication and ACLs cost the schema registry?
`python -m bench.registry_security`

Two single brokers with the registry: one on `http://` without authentication, one on
`https://` with `schema.registry.authentication.method=BASIC` (a SCRAM-SHA-512 user) and
StandardAuthorizer (an ACL granting the user everything on PREFIXED `subject:bench`). From
one client (httpx, one kept-alive connection) it times, on each: registrations of distinct
schemas (each a write through `_schemas` with acks=-1), then cached look-ups of a schema by
id (GET /schemas/ids/{id}), and prints the rates side by side. The first request of the
client pays the PBKDF2 of its password (4096 iterations of HMAC-SHA-512); later ones hit the
remembered pass.
"""

from __future__ import annotations

import argparse
import json
import ssl
import tempfile
import time
from pathlib import Path

import httpx
import trustme

from minibroker.tools.launcher import BrokerProcess, free_port

USER, PASSWORD = "bench", "bench-secret"
MEDIA = "application/vnd.schemaregistry.v1+json"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class Certificates:
    """A throwaway CA and the broker's PEM key store (trustme), in ``directory``."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        self.ca_path = directory / "ca.pem"
        self.broker_path = directory / "broker.pem"
        ca.cert_pem.write_to_path(str(self.ca_path))
        leaf = ca.issue_cert("127.0.0.1")
        leaf.private_key_and_cert_chain_pem.write_to_path(str(self.broker_path))


def _schema(index: int) -> str:
    return json.dumps(
        {"type": "record", "name": f"R{index}", "fields": [{"name": "f", "type": "string"}]}
    )


def _start(directory: Path, secure: bool, certificates: Certificates) -> tuple[BrokerProcess, str]:
    kafka_port, registry_port = free_port(), free_port()
    scheme = "https" if secure else "http"
    overrides = {"schema.registry.listeners": f"{scheme}://127.0.0.1:{registry_port}"}
    if secure:
        overrides.update(
            {
                "schema.registry.authentication.method": "BASIC",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(certificates.broker_path),
                "minibroker.scram.users": f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]",
                "authorizer.class.name": STANDARD_AUTHORIZER,
                "allow.everyone.if.no.acl.found": "true",
            }
        )
    process = BrokerProcess.start(
        node_id=1, log_dir=directory / scheme, port=kafka_port, overrides=overrides
    )
    process.wait_ready(30)
    return process, f"{scheme}://127.0.0.1:{registry_port}"


def _client(url: str, certificates: Certificates) -> httpx.Client:
    if url.startswith("https"):
        context = ssl.create_default_context(cafile=str(certificates.ca_path))
        return httpx.Client(base_url=url, verify=context, auth=(USER, PASSWORD), timeout=30)
    return httpx.Client(base_url=url, timeout=30)


def _grant(bootstrap: str) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    binding = AclBinding(
        ResourceType.TOPIC,
        "subject:bench",
        ResourcePatternType.PREFIXED,
        f"User:{USER}",
        "*",
        AclOperation.ALL,
        AclPermissionType.ALLOW,
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer
    for future in admin.create_acls([binding]).values():
        future.result(30)


def _measure(client: httpx.Client, registrations: int, lookups: int) -> tuple[float, float]:
    deadline = time.monotonic() + 60
    while True:  # the registry answers once the broker has registered with the controller
        try:
            if client.get("/subjects").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the registry did not answer")
        time.sleep(0.2)
    started = time.perf_counter()
    ids = []
    for index in range(registrations):
        answer = client.post(
            f"/subjects/bench-{index}/versions",
            content=json.dumps({"schema": _schema(index)}),
            headers={"content-type": MEDIA},
        )
        answer.raise_for_status()
        ids.append(answer.json()["id"])
    registering = registrations / (time.perf_counter() - started)
    started = time.perf_counter()
    for index in range(lookups):
        client.get(f"/schemas/ids/{ids[index % len(ids)]}").raise_for_status()
    looking_up = lookups / (time.perf_counter() - started)
    return registering, looking_up


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.registry_security")
    parser.add_argument("--registrations", type=int, default=200)
    parser.add_argument("--lookups", type=int, default=2000)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="registry-security-"))
    certificates = Certificates(directory / "certs")
    rows = []
    for secure in (False, True):
        process, url = _start(directory, secure, certificates)
        try:
            if secure:
                _grant(f"127.0.0.1:{process.port}")
            with _client(url, certificates) as client:
                rows.append(
                    (url.split(":")[0], *_measure(client, args.registrations, args.lookups))
                )
        finally:
            process.stop()
    print(f"{'listener':<28} {'registrations/s':>16} {'look-ups by id/s':>18}")
    for name, registering, looking_up in rows:
        label = "https + BASIC + ACLs" if name == "https" else "http, no authentication"
        print(f"{label:<28} {registering:>16.0f} {looking_up:>18.0f}")


if __name__ == "__main__":
    main()
