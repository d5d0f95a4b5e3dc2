"""`minibroker dev --secure`: the local cluster with SASL_SSL listeners, in one command.

It writes a throwaway CA, a certificate for 127.0.0.1/localhost signed by it, and random
passwords for two users into ``<data>/secure`` (kept across runs, so clients configured once
keep working), and gives every broker a SASL_SSL listener at its port + 100, which is also the
inter-broker listener: replication runs over TLS with SCRAM-SHA-512. The PLAINTEXT listeners
stay for the readiness checks and tools like ``minibroker probe``; they are bound to 127.0.0.1.

The users: ``admin`` (the brokers' own login) and ``alice``, each with PLAIN and SCRAM-SHA-256/
512. The certificates are made with the ``cryptography`` package, imported only here.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

SECURE_LISTENER = "SASL_SSL"
SECURE_PORT_OFFSET = 100
CERTIFICATE_DAYS = 365
USERS = ("admin", "alice")


@dataclass(frozen=True)
class SecureDev:
    """Where the secure dev cluster's files are, and its users' passwords."""

    directory: Path
    passwords: dict[str, str]

    @property
    def ca_path(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def keystore_path(self) -> Path:
        return self.directory / "broker.pem"

    @property
    def client_properties_path(self) -> Path:
        return self.directory / "client.properties"

    def broker_properties(self) -> dict[str, str]:
        """Server properties for every node (Kafka's names)."""
        admin = self.passwords["admin"]
        plain_users = " ".join(f'user_{user}="{self.passwords[user]}"' for user in USERS)
        prefix = f"listener.name.{SECURE_LISTENER.lower()}"
        scram_login = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="admin" password="{admin}";'
        )
        return {
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
            f"{SECURE_LISTENER}:SASL_SSL",
            "inter.broker.listener.name": SECURE_LISTENER,
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            f"{prefix}.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="admin" password="{admin}" {plain_users};'
            ),
            f"{prefix}.scram-sha-256.sasl.jaas.config": scram_login,
            f"{prefix}.scram-sha-512.sasl.jaas.config": scram_login,
            "minibroker.scram.users": " ".join(
                f"{mechanism}=[name={user},password={self.passwords[user]}]"
                for user in USERS
                for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore_path),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_path),
        }

    def client_help(self, secure_bootstrap: str) -> str:
        """How to connect as alice, for kcat, confluent-kafka, kafka-python and Kafka's tools."""
        password = self.passwords["alice"]
        kcat = (
            f"kcat -b {secure_bootstrap} -X security.protocol=SASL_SSL "
            f"-X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=alice "
            f"-X sasl.password={password} -X ssl.ca.location={self.ca_path}"
        )
        return "\n".join(
            [
                f"  secure bootstrap servers (SASL_SSL): {secure_bootstrap}",
                f"  user alice, password {password} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)",
                f"  CA certificate: {self.ca_path}",
                "",
                f"  kcat:   echo hello | {kcat} -P -t demo",
                f"          {kcat} -C -t demo -e",
                "  confluent-kafka: {"
                f"'bootstrap.servers': '{secure_bootstrap}', 'security.protocol': 'SASL_SSL', "
                "'sasl.mechanisms': 'SCRAM-SHA-512', 'sasl.username': 'alice', "
                f"'sasl.password': '{password}', 'ssl.ca.location': '{self.ca_path}'}}",
                f"  kafka-python: bootstrap_servers='{secure_bootstrap}', "
                "security_protocol='SASL_SSL', sasl_mechanism='SCRAM-SHA-512', "
                f"sasl_plain_username='alice', sasl_plain_password='{password}', "
                f"ssl_cafile='{self.ca_path}'",
                f"  Kafka's tools: --command-config {self.client_properties_path}",
            ]
        )


def prepare(base_dir: Path) -> SecureDev:
    """Write (or reuse) the CA, the broker certificate, the passwords and a client.properties
    under ``base_dir/secure``."""
    directory = Path(base_dir) / "secure"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    passwords_path = directory / "passwords.properties"
    if passwords_path.exists():
        passwords = dict(
            line.split("=", 1) for line in passwords_path.read_text().splitlines() if "=" in line
        )
    else:
        passwords = {user: secrets.token_urlsafe(12) for user in USERS}
        _write_private(passwords_path, "".join(f"{u}={p}\n" for u, p in passwords.items()))
    dev = SecureDev(directory, passwords)
    if not (dev.ca_path.exists() and dev.keystore_path.exists()):
        ca_pem, keystore_pem = make_certificates()
        dev.ca_path.write_bytes(ca_pem)
        _write_private(dev.keystore_path, keystore_pem.decode())
    _write_private(
        dev.client_properties_path,
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{passwords["alice"]}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={dev.ca_path}\n",
    )
    return dev


def _write_private(path: Path, text: str) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(text)


def make_certificates() -> tuple[bytes, bytes]:
    """A CA certificate, and the broker's private key with its certificate chain (PEM), for
    localhost and 127.0.0.1."""
    ca_pem, keystores = make_node_certificates({"broker": ["localhost", "127.0.0.1"]})
    return ca_pem, keystores["broker"]


def make_node_certificates(nodes: dict[str, list[str]]) -> tuple[bytes, dict[str, bytes]]:
    """A throwaway CA certificate, and for each node its private key with its certificate
    chain (PEM), valid for the node's host names and IP addresses (``nodes``: name -> those)."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        raise SystemExit(
            "minibroker makes its throwaway certificates with the cryptography package: "
            "pip install cryptography"
        ) from None
    now = datetime.datetime.now(datetime.UTC)
    validity = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(CERTIFICATE_DAYS))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "minibroker dev CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity[0])
        .not_valid_after(validity[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_pem = ca_cert.public_bytes(pem)
    keystores = {}
    for node, identities in nodes.items():
        alternative_names: list[x509.GeneralName] = []
        for identity in identities:
            try:
                alternative_names.append(x509.IPAddress(ipaddress.ip_address(identity)))
            except ValueError:
                alternative_names.append(x509.DNSName(identity))
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identities[0])]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(validity[0])
            .not_valid_after(validity[1])
            .add_extension(x509.SubjectAlternativeName(alternative_names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        keystores[node] = key_pem + cert.public_bytes(pem) + ca_pem
    return ca_pem, keystores
