"""Listener security from Kafka's properties: TLS contexts, SASL mechanisms and users.

Every ``ssl.*``/``sasl.*`` property may be given per listener as
``listener.name.<listener in lower case>.<property>``, which wins over the plain one, as in
Kafka; the JAAS configs exist only per listener and mechanism
(``listener.name.<l>.<mechanism in lower case>.sasl.jaas.config``), as Kafka requires of
brokers. Only PEM key and trust stores are read; JKS and PKCS12 are refused by name.

The server side (``ListenerSecurity``) is built once at start, so a missing file or a bad
password stops the start with the property's name. The client side (``ClientSecurity``) is
what this node presents when it connects to another node's listener: the same listener's
trust store, key store and JAAS login (username/password), as Kafka's inter-broker clients do.
"""

import ctypes
import os
import re
import ssl
import tempfile
from dataclasses import dataclass, field

from minibroker.common.config import BrokerConfig, ConfigError
from minibroker.protocol import sasl
from minibroker.security.principal_mapping import SslPrincipalMapper
from minibroker.security.scram import ScramCredentials

CLIENT_AUTH_MODES = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def listener_property(config: BrokerConfig, listener_name: str, key: str) -> str | None:
    """``listener.name.<l>.<key>`` if given, else ``<key>``: Kafka's per-listener override."""
    properties = config.properties
    prefixed = f"listener.name.{listener_name.lower()}.{key}"
    if prefixed in properties:
        return properties[prefixed]
    return properties.get(key)


def _prefixed_name(config: BrokerConfig, listener_name: str, key: str) -> str:
    """The property name a message should point at: the one actually given."""
    prefixed = f"listener.name.{listener_name.lower()}.{key}"
    return prefixed if prefixed in config.properties else key


def jaas_config(config: BrokerConfig, listener_name: str, mechanism: str) -> sasl.JaasConfig:
    """The listener's JAAS login module for a mechanism; ConfigError when missing or bad."""
    key = f"listener.name.{listener_name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.properties.get(key)
    if text is None:
        raise ConfigError(
            f"listener {listener_name} enables SASL mechanism {mechanism} but {key} is not set"
        )
    try:
        return sasl.parse_jaas_config(text)
    except sasl.JaasError as error:
        raise ConfigError(f"invalid value for {key}: {error}") from None


def enabled_mechanisms(config: BrokerConfig, listener_name: str) -> tuple[str, ...]:
    """``sasl.enabled.mechanisms`` for a listener; Kafka's default (GSSAPI) is refused with
    the mechanisms minibroker has, rather than leaving a listener nobody can log in to."""
    key = "sasl.enabled.mechanisms"
    text = listener_property(config, listener_name, key) or "GSSAPI"
    mechanisms = tuple(part.strip().upper() for part in text.split(",") if part.strip())
    unsupported = [mechanism for mechanism in mechanisms if mechanism not in sasl.MECHANISMS]
    if unsupported or not mechanisms:
        raise ConfigError(
            f"{_prefixed_name(config, listener_name, key)}={text}: minibroker supports "
            f"{', '.join(sasl.MECHANISMS)} (not {', '.join(unsupported) or 'an empty list'})"
        )
    return mechanisms


def _store_type(config: BrokerConfig, listener_name: str, key: str) -> None:
    value = (listener_property(config, listener_name, key) or "JKS").strip().upper()
    if value != "PEM":
        raise ConfigError(
            f"{_prefixed_name(config, listener_name, key)}={value}: minibroker reads PEM key "
            "and trust stores only (JKS and PKCS12 are not supported); set it to PEM"
        )


def _load_keystore(context: ssl.SSLContext, config: BrokerConfig, listener_name: str) -> bool:
    """Load the certificate chain and private key, from ``ssl.keystore.location`` or the
    PEM-in-config pair; False when the listener configures neither."""
    location = listener_property(config, listener_name, "ssl.keystore.location")
    chain = listener_property(config, listener_name, "ssl.keystore.certificate.chain")
    key = listener_property(config, listener_name, "ssl.keystore.key")
    if not (location or chain or key):
        return False
    _store_type(config, listener_name, "ssl.keystore.type")
    password = listener_property(config, listener_name, "ssl.key.password")
    if location:
        name = _prefixed_name(config, listener_name, "ssl.keystore.location")
        try:
            context.load_cert_chain(location, password=password)
        except (OSError, ssl.SSLError) as error:
            raise ConfigError(f"cannot load {name}={location}: {error}") from None
        return True
    if not (chain and key):
        raise ConfigError(
            "ssl.keystore.certificate.chain and ssl.keystore.key must be given together"
        )
    # The ssl module loads keys from files only: a private temporary file, removed at once.
    with tempfile.TemporaryDirectory(prefix="minibroker-keystore-") as directory:
        path = os.path.join(directory, "keystore.pem")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as file:
            file.write(key.strip() + "\n" + chain.strip() + "\n")
        try:
            context.load_cert_chain(path, password=password)
        except ssl.SSLError as error:
            raise ConfigError(
                f"cannot load ssl.keystore.certificate.chain/ssl.keystore.key: {error}"
            ) from None
    return True


def _load_truststore(context: ssl.SSLContext, config: BrokerConfig, listener_name: str) -> bool:
    location = listener_property(config, listener_name, "ssl.truststore.location")
    certificates = listener_property(config, listener_name, "ssl.truststore.certificates")
    if not (location or certificates):
        return False
    _store_type(config, listener_name, "ssl.truststore.type")
    try:
        if location:
            context.load_verify_locations(cafile=location)
        else:
            context.load_verify_locations(cadata=certificates)
    except (OSError, ssl.SSLError) as error:
        key = "ssl.truststore.location" if location else "ssl.truststore.certificates"
        name = _prefixed_name(config, listener_name, key)
        raise ConfigError(f"cannot load {name}: {error}") from None
    return True


# ssl.enabled.protocols values minibroker serves, as ssl.TLSVersion (TLSv1 and TLSv1.1 are
# disabled in every current JDK's java.security, and refused here).
TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# ssl.protocol: the SSLContext algorithm Java is given. Kafka's default is TLSv1.3.
SSL_PROTOCOLS = ("TLSv1.3", "TLSv1.2", "TLS")
# TLS 1.3 cipher suites: the same names in Java and OpenSSL.
TLS13_CIPHER_SUITES = (
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_GCM_SHA256",
)
# Java's (IANA's) names of the TLS 1.2 suites both Java and OpenSSL have -> OpenSSL's names
# (`openssl ciphers -stdname`; no anonymous, PSK, ARIA, CAMELLIA, CCM or obsolete suites).
JAVA_TO_OPENSSL_CIPHERS = {
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_DSS_WITH_AES_256_GCM_SHA384": "DHE-DSS-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_DSS_WITH_AES_128_GCM_SHA256": "DHE-DSS-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_DHE_DSS_WITH_AES_256_CBC_SHA256": "DHE-DSS-AES256-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_DHE_DSS_WITH_AES_128_CBC_SHA256": "DHE-DSS-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_DHE_DSS_WITH_AES_256_CBC_SHA": "DHE-DSS-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_DHE_DSS_WITH_AES_128_CBC_SHA": "DHE-DSS-AES128-SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
}
# A pseudo cipher suite Java lists (RFC 5746 renegotiation); OpenSSL always sends it.
JAVA_SCSV = "TLS_EMPTY_RENEGOTIATION_INFO_SCSV"


def _property_list(config: BrokerConfig, listener_name: str, key: str) -> list[str] | None:
    """A comma-separated list property; None when not given or empty (Kafka then keeps
    the JVM's defaults, as DefaultSslEngineFactory does)."""
    text = listener_property(config, listener_name, key)
    if text is None:
        return None
    items = [item.strip() for item in text.split(",") if item.strip()]
    return items or None


def _set_tls13_cipher_suites(context: ssl.SSLContext, suites: list[str]) -> bool:
    """OpenSSL's SSL_CTX_set_ciphersuites, which Python's ssl module does not expose: called
    through ctypes on the context's SSL_CTX (the first field after the object header of
    CPython's PySSLContext). Checked by reading the suites back; False if it did not take."""
    try:
        library = ctypes.CDLL(ssl._ssl.__file__)  # type: ignore[attr-defined]
        function = library.SSL_CTX_set_ciphersuites
    except (OSError, AttributeError):
        return False
    function.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    function.restype = ctypes.c_int
    pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    if not pointer or function(pointer, ":".join(suites).encode()) != 1:
        return False
    active = [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.3"]
    return sorted(active) == sorted(suites)


def configure_tls(
    context: ssl.SSLContext, config: BrokerConfig, listener_name: str, server: bool
) -> None:
    """``ssl.enabled.protocols``, ``ssl.protocol`` and ``ssl.cipher.suites`` on a context, as
    Kafka's DefaultSslEngineFactory sets them on its SSLEngine; ConfigError names a bad value.

    A suite list without TLS 1.3 suites leaves TLS 1.3 nothing to negotiate, and one without
    TLS 1.2 suites the same for TLS 1.2, as in Java; here the context's version range says so
    (OpenSSL cannot be given an empty TLS 1.2 list), and a list that leaves no enabled
    protocol a suite stops the start, as Kafka's SslFactory's trial handshake does.
    ``ssl.protocol=TLSv1.2`` caps this node's own client connections at TLS 1.2 (Kafka's doc:
    such a client does not use TLS 1.3 even if enabled); on the server side, as in Java, the
    enabled protocols decide."""
    key = "ssl.enabled.protocols"
    name = _prefixed_name(config, listener_name, key)
    protocols = _property_list(config, listener_name, key) or ["TLSv1.2", "TLSv1.3"]
    unknown = [protocol for protocol in protocols if protocol not in TLS_VERSIONS]
    if unknown:
        raise ConfigError(
            f"{name}={','.join(protocols)}: minibroker serves TLSv1.2 and TLSv1.3 (not "
            f"{', '.join(unknown)}; TLSv1 and TLSv1.1 are disabled in current JDKs too)"
        )
    versions = sorted(TLS_VERSIONS[protocol] for protocol in protocols)
    low, high = versions[0], versions[-1]
    key = "ssl.protocol"
    protocol = (listener_property(config, listener_name, key) or "TLSv1.3").strip()
    if protocol not in SSL_PROTOCOLS:
        raise ConfigError(
            f"{_prefixed_name(config, listener_name, key)}={protocol}: expected one of "
            f"{', '.join(SSL_PROTOCOLS)}"
        )
    if not server and protocol == "TLSv1.2":
        high = min(high, ssl.TLSVersion.TLSv1_2)
        if low > high:
            raise ConfigError(
                f"ssl.protocol=TLSv1.2 with {name}={','.join(protocols)}: this node's "
                "connections to other nodes would have no protocol to use"
            )
    key = "ssl.cipher.suites"
    suites = _property_list(config, listener_name, key)
    if suites is not None:
        cipher_name = _prefixed_name(config, listener_name, key)
        unknown = [
            suite
            for suite in suites
            if suite not in JAVA_TO_OPENSSL_CIPHERS
            and suite not in TLS13_CIPHER_SUITES
            and suite != JAVA_SCSV
        ]
        if unknown:
            raise ConfigError(
                f"{cipher_name}: unsupported cipher suite(s) {', '.join(unknown)}; give Java's "
                "names of suites OpenSSL has, e.g. TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, "
                "TLS_AES_128_GCM_SHA256"
            )
        tls12 = [JAVA_TO_OPENSSL_CIPHERS[s] for s in suites if s in JAVA_TO_OPENSSL_CIPHERS]
        tls13 = [suite for suite in suites if suite in TLS13_CIPHER_SUITES]
        if tls12:
            try:
                context.set_ciphers(":".join(tls12))
            except ssl.SSLError as error:
                raise ConfigError(f"{cipher_name}: {error}") from None
        else:
            low = max(low, ssl.TLSVersion.TLSv1_3)
        if tls13:
            if not _set_tls13_cipher_suites(context, tls13):
                raise ConfigError(
                    f"{cipher_name}: this Python's ssl module could not restrict the TLS 1.3 "
                    "cipher suites; leave them out of the list"
                )
        else:
            high = min(high, ssl.TLSVersion.TLSv1_2)
        if low > high:
            raise ConfigError(
                f"{cipher_name}={','.join(suites)} has no suite for {name}="
                f"{','.join(protocols)}: no TLS handshake could succeed"
            )
    context.minimum_version = low
    context.maximum_version = high


def principal_mapper(config: BrokerConfig, listener_name: str) -> SslPrincipalMapper:
    """``ssl.principal.mapping.rules`` (Kafka's default: DEFAULT); ConfigError when bad."""
    key = "ssl.principal.mapping.rules"
    text = listener_property(config, listener_name, key)
    try:
        return SslPrincipalMapper(text)
    except ValueError as error:
        raise ConfigError(
            f"invalid value for {_prefixed_name(config, listener_name, key)}: {error}"
        ) from None


@dataclass(frozen=True)
class ListenerSecurity:
    """How one listener authenticates its clients."""

    name: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict)
    # connections.max.reauth.ms: a SASL session's lifetime; 0 means sessions never expire.
    max_reauth_ms: int = 0
    # ssl.principal.mapping.rules, on SSL listeners (the principal of a client certificate).
    principal_mapper: SslPrincipalMapper | None = None

    @property
    def uses_tls(self) -> bool:
        return self.ssl_context is not None

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS


def server_ssl_context(config: BrokerConfig, listener_name: str, protocol: str) -> ssl.SSLContext:
    """A TLS listener's server context from the ``ssl.*`` properties (each overridable as
    ``listener.name.<listener>.ssl.*``); ConfigError names what is wrong."""
    ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    configure_tls(ssl_context, config, listener_name, server=True)
    if not _load_keystore(ssl_context, config, listener_name):
        raise ConfigError(
            f"listener {listener_name} uses {protocol} but has no key store: set "
            "ssl.keystore.location (PEM) or ssl.keystore.certificate.chain and "
            "ssl.keystore.key"
        )
    key = "ssl.client.auth"
    client_auth = (listener_property(config, listener_name, key) or "none").strip().lower()
    if client_auth not in CLIENT_AUTH_MODES:
        raise ConfigError(
            f"invalid value {client_auth!r} for {_prefixed_name(config, listener_name, key)}"
            ": expected none, requested or required"
        )
    has_truststore = _load_truststore(ssl_context, config, listener_name)
    if client_auth != "none" and not has_truststore:
        raise ConfigError(
            f"{key}={client_auth} on listener {listener_name} needs a trust store "
            "(ssl.truststore.location or ssl.truststore.certificates) to check client "
            "certificates against"
        )
    ssl_context.verify_mode = CLIENT_AUTH_MODES[client_auth]
    return ssl_context


def client_ssl_context(config: BrokerConfig, listener_name: str) -> ssl.SSLContext:
    """A context to connect to a TLS listener of another node: its trust store, else the
    system's certificate authorities; its key store, when it has one, as the client's
    certificate (for listeners that ask for one)."""
    context = ssl.create_default_context()
    _load_truststore(context, config, listener_name)
    _load_keystore(context, config, listener_name)
    return context


def listener_security(config: BrokerConfig, listener_name: str) -> ListenerSecurity:
    """Build a listener's security from the configuration; ConfigError names what is wrong."""
    protocol = config.security_protocol(listener_name)
    ssl_context = None
    if protocol in TLS_PROTOCOLS:
        ssl_context = server_ssl_context(config, listener_name, protocol)
    mapper = principal_mapper(config, listener_name) if protocol == "SSL" else None
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = {}
    max_reauth_ms = 0
    if protocol in SASL_PROTOCOLS:
        mechanisms = enabled_mechanisms(config, listener_name)
        if sasl.PLAIN in mechanisms:
            plain_users = jaas_config(config, listener_name, sasl.PLAIN).plain_users()
        text = listener_property(config, listener_name, "connections.max.reauth.ms") or "0"
        try:
            max_reauth_ms = int(text)
            if max_reauth_ms < 0:
                raise ValueError
        except ValueError:
            raise ConfigError(f"invalid value {text!r} for connections.max.reauth.ms") from None
    return ListenerSecurity(
        listener_name, protocol, ssl_context, mechanisms, plain_users, max_reauth_ms, mapper
    )


@dataclass(frozen=True)
class ClientSecurity:
    """What this node presents when it connects to a listener of another node."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""
    # On TLS without a trust store: what to set, said when a certificate is not trusted.
    missing_trust_store: str = ""


def client_security(config: BrokerConfig, listener_name: str) -> ClientSecurity:
    """How to connect to ``listener_name`` of another node (the inter-broker or controller
    listener): trust its certificate with this node's trust store for that listener, present
    the key store for mutual TLS, and log in with the listener's JAAS username and password
    using ``sasl.mechanism.inter.broker.protocol`` (Kafka's default: GSSAPI, refused)."""
    protocol = config.security_protocol(listener_name)
    ssl_context = None
    missing_trust_store = ""
    if protocol in TLS_PROTOCOLS:
        ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        configure_tls(ssl_context, config, listener_name, server=False)
        if not _load_truststore(ssl_context, config, listener_name):
            # As Kafka's JVM falls back to its default trust store (cacerts): a certificate
            # from a public CA is trusted, a self-signed or private CA's is not, and the
            # handshake failure then names what to set (see NodeConnection's errors).
            ssl_context.load_default_certs()
            missing_trust_store = (
                f"listener {listener_name} has no trust store, so this node trusts only the "
                "system's CAs: set "
                f"{_prefixed_name(config, listener_name, 'ssl.truststore.location')} (PEM) to "
                "the CA certificate that signed the nodes' certificates (a self-signed "
                "certificate trusts itself)"
            )
        _load_keystore(ssl_context, config, listener_name)
        # ssl.endpoint.identification.algorithm: Kafka's default "https" checks the host name.
        key = "ssl.endpoint.identification.algorithm"
        algorithm = listener_property(config, listener_name, key)
        ssl_context.check_hostname = (algorithm if algorithm is not None else "https") != ""
    if protocol not in SASL_PROTOCOLS:
        return ClientSecurity(protocol, ssl_context, missing_trust_store=missing_trust_store)
    mechanism = (config.properties.get("sasl.mechanism.inter.broker.protocol") or "GSSAPI").upper()
    if mechanism not in sasl.MECHANISMS:
        raise ConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism}: minibroker supports "
            f"{', '.join(sasl.MECHANISMS)}"
        )
    login = jaas_config(config, listener_name, mechanism)
    if login.username is None or login.password is None:
        raise ConfigError(
            f"listener.name.{listener_name.lower()}.{mechanism.lower()}.sasl.jaas.config needs "
            "username and password: this node logs in with them to other nodes"
        )
    return ClientSecurity(
        protocol, ssl_context, mechanism, login.username, login.password, missing_trust_store
    )


# X.500 attribute names as Python's ssl module spells them -> the keyword Java's
# X500Principal.getName() (RFC 2253) prints, which is what Kafka's principal shows.
_RDN_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape_rdn_value(value: str) -> str:
    escaped = "".join("\\" + char if char in ',+"\\<>;' else char for char in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return escaped


def certificate_principal(
    peer_certificate: dict | None, mapper: SslPrincipalMapper | None = None
) -> str:
    """Kafka's DefaultKafkaPrincipalBuilder for a TLS client: ``User:`` and the subject's
    distinguished name as RFC 2253 writes it (most specific first:
    "CN=alice,OU=eng,O=example"), through ``ssl.principal.mapping.rules`` when given; the
    anonymous user when the client sent no certificate. A name no rule maps raises
    principal_mapping.NoMatchingRule (Kafka fails the connection's authentication)."""
    if not peer_certificate or not peer_certificate.get("subject"):
        return "User:ANONYMOUS"
    rdns = []
    for rdn in reversed(peer_certificate["subject"]):
        rdns.append(
            "+".join(
                f"{_RDN_KEYWORDS.get(name, name)}={_escape_rdn_value(value)}" for name, value in rdn
            )
        )
    name = ",".join(rdns)
    return "User:" + (mapper.name(name) if mapper is not None else name)


# Users given in configuration, in the syntax of kafka-storage's --add-scram:
# SCRAM-SHA-512=[name=alice,password=alice-secret] (several separated by spaces or ";").
BOOTSTRAP_SCRAM_PROPERTY = "minibroker.scram.users"
_BOOTSTRAP_ENTRY = re.compile(r"(SCRAM-SHA-256|SCRAM-SHA-512)=\[([^\]]*)\]")


def bootstrap_scram_users(config: BrokerConfig) -> list[tuple[str, str, str]]:
    """(mechanism, user, password) of every SCRAM user this node knows from configuration:
    the ``minibroker.scram.users`` entries, and the login of each SCRAM JAAS config of a SASL
    listener (the inter-broker user, which must exist before any controller could store it,
    as ``kafka-storage format --add-scram`` ensures in Kafka)."""
    users = []
    text = config.properties.get(BOOTSTRAP_SCRAM_PROPERTY, "")
    leftover = _BOOTSTRAP_ENTRY.sub("", text).replace(";", "").strip()
    if leftover:
        raise ConfigError(
            f"invalid value for {BOOTSTRAP_SCRAM_PROPERTY}: expected entries like "
            f"SCRAM-SHA-512=[name=alice,password=alice-secret], found {len(leftover)}"
            " characters outside such entries (not shown: they may hold a password)"
        )
    for mechanism, body in _BOOTSTRAP_ENTRY.findall(text):
        fields = dict(part.split("=", 1) for part in body.split(",") if "=" in part)
        if not fields.get("name") or not fields.get("password"):
            raise ConfigError(
                f"invalid value for {BOOTSTRAP_SCRAM_PROPERTY}: {mechanism} needs name=... "
                "and password=..."
            )
        users.append((mechanism, fields["name"], fields["password"]))
    for listener in config.listeners:
        if config.security_protocol(listener.name) not in SASL_PROTOCOLS:
            continue
        for mechanism in enabled_mechanisms(config, listener.name):
            key = f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
            if mechanism in sasl.SCRAM_MECHANISMS and key in config.properties:
                login = jaas_config(config, listener.name, mechanism)
                if login.username and login.password:
                    users.append((mechanism, login.username, login.password))
    return users


def bootstrap_scram_credentials(config: BrokerConfig) -> ScramCredentials:
    """The SCRAM credential table a node starts with (see bootstrap_scram_users)."""
    credentials = ScramCredentials()
    for mechanism, user, password in bootstrap_scram_users(config):
        credentials.configure(mechanism, user, sasl.new_credential(mechanism, password))
    return credentials
