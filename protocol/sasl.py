"""SASL without I/O: JAAS option parsing, PLAIN (RFC 4616) and SCRAM (RFC 5802/7677).

The broker's connection layer feeds these state machines the tokens a client sends in
SaslAuthenticate (or raw after a v0 SaslHandshake) and sends back what they return; the
broker's own client side (inter-broker and controller connections) uses the client halves.
Nothing here knows about sockets or trio, so the exchanges are tested byte for byte.

Failures raise ``SaslAuthenticationError`` whose message is what the client is told: the same
for an unknown user and a wrong password, as Kafka words them, so nothing secret leaks.
"""

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)

# Kafka's ScramMechanism bounds on iterations; 4096 is what its tools use by default.
SCRAM_MIN_ITERATIONS = 4096
SCRAM_MAX_ITERATIONS = 16384
_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
# The wire type of each SCRAM mechanism in Describe/AlterUserScramCredentials.
SCRAM_MECHANISM_TYPES = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}

PLAIN_FAILED = "Authentication failed: Invalid username or password"


def scram_failed(mechanism: str) -> str:
    """Kafka's answer to any SCRAM failure, whichever part of the credentials was wrong."""
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


class SaslAuthenticationError(Exception):
    """Authentication failed; the message is safe to send to the client."""


class JaasError(ValueError):
    """A sasl.jaas.config value that does not parse."""


@dataclass(frozen=True)
class JaasConfig:
    """One login module entry: ``<class> required key="value" ...;``."""

    login_module: str
    options: dict[str, str]

    @property
    def username(self) -> str | None:
        return self.options.get("username")

    @property
    def password(self) -> str | None:
        return self.options.get("password")

    def plain_users(self) -> dict[str, str]:
        """PlainLoginModule's ``user_<name>="<password>"`` options: the users it accepts."""
        return {
            key.removeprefix("user_"): value
            for key, value in self.options.items()
            if key.startswith("user_")
        }


_JAAS_ENTRY = re.compile(r"\s*([A-Za-z_$][\w.$]*)\s+(required|requisite|sufficient|optional)\b")
_JAAS_OPTION = re.compile(r'\s*([^\s=;]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


def parse_jaas_config(text: str) -> JaasConfig:
    """Parse the one login module a ``sasl.jaas.config`` property holds, as Kafka's JaasConfig
    reads it: a class name, a control flag, options as key=value (quoted or not), then ``;``."""
    entry = _JAAS_ENTRY.match(text)
    if entry is None:
        raise JaasError("expected '<LoginModule class> required key=\"value\" ...;'")
    options: dict[str, str] = {}
    position = entry.end()
    while True:
        option = _JAAS_OPTION.match(text, position)
        if option is None:
            break
        quoted = option.group(2)
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else option.group(3)
        options[option.group(1)] = value
        position = option.end()
    rest = text[position:].strip()
    if rest != ";":
        # Where, not what: the text may be a password.
        raise JaasError(
            f"expected ';' after the options at character {len(text) - len(rest)} of {len(text)}"
        )
    return JaasConfig(entry.group(1), options)


# --- PLAIN -----------------------------------------------------------------------------------


def plain_server_authenticate(token: bytes, users: dict[str, str]) -> str:
    """Check a PLAIN token (``authzid NUL authcid NUL password``) against the configured
    users; return the authenticated user name. An authorization id other than the user is
    refused, as Kafka's PlainSaslServer does."""
    parts = token.split(b"\x00")
    if len(parts) != 3:
        raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens")
    try:
        authzid, username, password = (part.decode() for part in parts)
    except UnicodeDecodeError:
        raise SaslAuthenticationError(PLAIN_FAILED) from None
    if not username:
        raise SaslAuthenticationError("Authentication failed: username not specified")
    if not password:
        raise SaslAuthenticationError("Authentication failed: password not specified")
    expected = users.get(username)
    if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
        raise SaslAuthenticationError(PLAIN_FAILED)
    if authzid and authzid != username:
        raise SaslAuthenticationError(
            "Authentication failed: Client requested an authorization id that is different "
            "from username"
        )
    return username


def plain_client_token(username: str, password: str) -> bytes:
    return b"\x00" + username.encode() + b"\x00" + password.encode()


# --- SCRAM -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScramCredential:
    """What a server keeps of a SCRAM password (RFC 5802 section 3): never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, _HASHES[mechanism]).digest()


def _hash(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(_HASHES[mechanism], data).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(): PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode(), salt, iterations)


def credential_from_salted_password(
    mechanism: str, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The stored and server keys of a salted password (what AlterUserScramCredentials
    carries: Kafka's admin clients salt the password themselves)."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(
        salt=salt,
        stored_key=_hash(mechanism, client_key),
        server_key=_hmac(mechanism, salted, b"Server Key"),
        iterations=iterations,
    )


def new_credential(
    mechanism: str, password: str, iterations: int = SCRAM_MIN_ITERATIONS
) -> ScramCredential:
    """A credential with a fresh random salt, for users given in configuration."""
    salt = secrets.token_bytes(32)
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted_password(mechanism, salted, salt, iterations)


def _attributes(message: str) -> dict[str, str]:
    """The ``k=value`` attributes of a SCRAM message; a malformed one is an auth failure."""
    attributes = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ValueError(f"invalid SCRAM attribute {part[:20]!r}")
        attributes[key] = value
    return attributes


def _decode_saslname(name: str) -> str:
    """RFC 5802's saslname: ``=2C`` is a comma and ``=3D`` an equals sign."""
    if re.search(r"=(?!2C|3D)", name):
        raise ValueError("invalid escape in user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def _encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramServer:
    """The server side of one SCRAM exchange: client-first, then client-final.

    ``lookup(user)`` returns the user's credential for this mechanism, or None. After
    ``step`` returns the server-final message, ``username`` is the authenticated user.
    """

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        server_nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        # Random unless a test replays a published exchange (RFC 7677's example).
        self._server_nonce = server_nonce or secrets.token_urlsafe(24)
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2_header = ""
        self.username: str | None = None
        self.complete = False

    def _fail(self) -> SaslAuthenticationError:
        return SaslAuthenticationError(scram_failed(self.mechanism))

    def step(self, token: bytes) -> bytes:
        """Consume one client message and return the server's reply."""
        if self.complete:
            raise SaslAuthenticationError("SCRAM exchange already complete")
        try:
            message = token.decode()
        except UnicodeDecodeError:
            raise self._fail() from None
        try:
            credential = self._credential
            if credential is None:
                return self._client_first(message).encode()
            return self._client_final(message, credential).encode()
        except ValueError:
            raise self._fail() from None

    def _client_first(self, message: str) -> str:
        # gs2-header: "n" (no channel binding; "y" = client could but thinks we cannot),
        # an optional "a=authzid", then the bare message.
        flag, comma, rest = message.partition(",")
        authzid_part, comma2, bare = rest.partition(",")
        if not comma or not comma2 or flag not in ("n", "y"):
            raise ValueError("unsupported channel binding or malformed gs2 header")
        attributes = _attributes(bare)
        if "m" in attributes:
            raise ValueError("unsupported mandatory extension")
        username = _decode_saslname(attributes.get("n", ""))
        client_nonce = attributes.get("r", "")
        if not username or not client_nonce:
            raise ValueError("missing user name or nonce")
        if authzid_part and authzid_part != f"a={_encode_saslname(username)}":
            raise ValueError("authorization id differs from the user name")
        credential = self._lookup(username)
        if credential is None:
            raise ValueError("unknown user")
        self._credential = credential
        self.username = username
        self._gs2_header = f"{flag},{authzid_part},"
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first

    def _client_final(self, message: str, credential: ScramCredential) -> str:
        without_proof, sep, proof_part = message.rpartition(",p=")
        if not sep:
            raise ValueError("missing proof")
        attributes = _attributes(without_proof)
        expected_binding = base64.b64encode(self._gs2_header.encode()).decode()
        # Kafka's ScramSaslServer only checks that the echoed nonce ends with ours, and
        # librdkafka relies on it: it echoes its own nonce followed by the whole server nonce.
        if attributes.get("c") != expected_binding or not attributes.get("r", "").endswith(
            self._nonce
        ):
            raise ValueError("channel binding or nonce mismatch")
        proof = base64.b64decode(proof_part, validate=True)
        auth_message = ",".join((self._client_first_bare, self._server_first, without_proof))
        signature = _hmac(self.mechanism, credential.stored_key, auth_message.encode())
        if len(proof) != len(signature):
            raise ValueError("wrong proof length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(_hash(self.mechanism, client_key), credential.stored_key):
            raise ValueError("invalid proof")
        self.complete = True
        server_signature = _hmac(self.mechanism, credential.server_key, auth_message.encode())
        return "v=" + base64.b64encode(server_signature).decode()


class ScramClient:
    """The client side of SCRAM, for the broker's own connections: ``first()``, then
    ``final(server_first)``, then ``verify(server_final)``."""

    def __init__(
        self, mechanism: str, username: str, password: str, nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_encode_saslname(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self._client_first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        message = server_first.decode()
        attributes = _attributes(message)
        nonce = attributes["r"]
        if not nonce.startswith(self._nonce):
            raise SaslAuthenticationError("the server's nonce does not extend ours")
        salt = base64.b64decode(attributes["s"])
        iterations = int(attributes["i"])
        if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
            # Kafka's client refuses fewer (a man in the middle asking for i=1 makes guessing
            # the password cheap); more would stall the node hashing them.
            raise SaslAuthenticationError(
                f"the server asks for {iterations} iterations, outside"
                f" {SCRAM_MIN_ITERATIONS}-{SCRAM_MAX_ITERATIONS}"
            )
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        stored_key = _hash(self.mechanism, client_key)
        without_proof = f"c=biws,r={nonce}"
        auth_message = ",".join((self._client_first_bare, message, without_proof)).encode()
        signature = _hmac(self.mechanism, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = _hmac(self.mechanism, salted, b"Server Key")
        self._server_signature = _hmac(self.mechanism, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """Check the server proved it knows the credential too (mutual authentication)."""
        attributes = _attributes(server_final.decode())
        if "e" in attributes:
            raise SaslAuthenticationError(f"the server refused: {attributes['e']}")
        if not hmac.compare_digest(base64.b64decode(attributes["v"]), self._server_signature):
            raise SaslAuthenticationError("the server's signature is wrong")
