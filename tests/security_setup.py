"""Certificates and broker properties for the security tests, made fresh in each test.

trustme makes a throwaway CA and leaf certificates (with 127.0.0.1 as an IP identity, so
host-name verification works as clients do it by default); the properties are the ones an
operator would write in server.properties, under Kafka's names.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

import trustme

from minibroker.tools.launcher import free_port

PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
SCRAM_USERS = {"alice": "alice-scram-secret"}
BROKER_LOGIN = ("admin", "admin-secret")
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="{BROKER_LOGIN[0]}" password="{BROKER_LOGIN[1]}" '
    + " ".join(f'user_{user}="{password}"' for user, password in PLAIN_USERS.items())
    + ";"
)
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="{BROKER_LOGIN[0]}" password="{BROKER_LOGIN[1]}";'
)


@dataclass
class Certificates:
    """A CA and the PEM files made from it, in a test's temporary directory."""

    directory: Path
    ca: trustme.CA

    @classmethod
    def make(cls, directory: Path) -> Certificates:
        directory.mkdir(parents=True, exist_ok=True)
        certificates = cls(directory, trustme.CA())
        certificates.ca.cert_pem.write_to_path(str(certificates.ca_path))
        broker = certificates.ca.issue_cert("127.0.0.1", "localhost")
        broker.private_key_and_cert_chain_pem.write_to_path(str(certificates.broker_path))
        return certificates

    @property
    def ca_path(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def broker_path(self) -> Path:
        return self.directory / "broker.pem"

    def client(
        self,
        name: str,
        *,
        organization_unit: str | None = "eng",
        not_after: datetime.datetime | None = None,
        ca: trustme.CA | None = None,
    ) -> tuple[Path, Path]:
        """A client certificate for CN=name (and key), issued by this CA or another one;
        returns the certificate chain and the private key paths."""
        issuer = ca or self.ca
        leaf = issuer.issue_cert(
            common_name=name,
            organization_name="minibroker-tests",
            organization_unit_name=organization_unit,
            not_after=not_after,
        )
        cert_path = self.directory / f"{name}.crt"
        key_path = self.directory / f"{name}.key"
        cert_path.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        leaf.private_key_pem.write_to_path(str(key_path))
        return cert_path, key_path


def secure_listeners(protocols: list[str]) -> dict[str, int]:
    """A free port for each security protocol, listener named after the protocol."""
    return {protocol: free_port() for protocol in protocols}


def broker_overrides(
    certificates: Certificates,
    plaintext_port: int,
    ports: dict[str, int],
    *,
    client_auth: str = "none",
    mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """Properties for a broker that keeps its PLAINTEXT listener first (where the launcher
    checks it is ready) and adds one listener per protocol in ``ports``."""
    listeners = ",".join(
        f"{protocol}://127.0.0.1:{port}"
        for protocol, port in {"PLAINTEXT": plaintext_port, **ports}.items()
    )
    overrides = {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certificates.broker_path),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certificates.ca_path),
        "ssl.client.auth": client_auth,
        "sasl.enabled.mechanisms": mechanisms,
        "minibroker.scram.users": " ".join(
            f"SCRAM-SHA-512=[name={user},password={password}] "
            f"SCRAM-SHA-256=[name={user},password={password}]"
            for user, password in SCRAM_USERS.items()
        ),
    }
    for protocol in ports:
        if protocol.startswith("SASL"):
            prefix = f"listener.name.{protocol.lower()}"
            overrides[f"{prefix}.plain.sasl.jaas.config"] = PLAIN_JAAS
            overrides[f"{prefix}.scram-sha-256.sasl.jaas.config"] = SCRAM_JAAS
            overrides[f"{prefix}.scram-sha-512.sasl.jaas.config"] = SCRAM_JAAS
    overrides.update(extra or {})
    return overrides
