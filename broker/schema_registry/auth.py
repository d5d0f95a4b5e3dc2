"""HTTP basic authentication of the registry's clients against the broker's SCRAM users, with
no I/O.

Follows RFC 7617 (``Authorization: Basic base64(user:password)``), as Confluent Schema
Registry's ``authentication.method=BASIC`` takes it and as confluent-kafka's
``basic.auth.user.info`` sends it. Where Confluent checks the password against a JAAS login
module's property file, this checks it against the SCRAM credentials the broker already keeps
for its SASL/SCRAM listeners (``minibroker.scram.users`` and those set with
AlterUserScramCredentials / kafka-configs.sh): the password is salted and hashed with the
credential's salt and iteration count, and its StoredKey compared with the one kept (RFC 5802
section 3), for SCRAM-SHA-512 first, then SCRAM-SHA-256. The server never holds a password.

That check costs a PBKDF2 of thousands of iterations, so the service runs it off the event
loop; a password that passed is remembered (as a SHA-256 of user and password, with the
credential it matched), so a client's next requests cost a hash, until that user's credential
changes. Failures are not remembered.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable

from minibroker.protocol import sasl

MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
# How many passed logins are remembered before the memory starts again.
MAX_REMEMBERED = 4096

Lookup = Callable[[str, str], "sasl.ScramCredential | None"]


def credentials(header: str | None) -> tuple[str, str] | None:
    """The user and password of an ``Authorization: Basic`` header; None when the header is
    missing or is not a well-formed basic one."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or not token.strip():
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    if not colon or not user:
        return None
    return user, password


def verify(credential: sasl.ScramCredential, mechanism: str, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (slow: PBKDF2)."""
    salted = sasl.salted_password(mechanism, password, credential.salt, credential.iterations)
    made = sasl.credential_from_salted_password(
        mechanism, salted, credential.salt, credential.iterations
    )
    return hmac.compare_digest(made.stored_key, credential.stored_key)


class BasicAuthenticator:
    """Checks users and passwords against SCRAM credentials (``lookup(mechanism, user)``)."""

    def __init__(self, lookup: Lookup) -> None:
        self.lookup = lookup
        # sha256(user, password) -> the credential the password matched.
        self._passed: dict[bytes, sasl.ScramCredential] = {}

    def _key(self, user: str, password: str) -> bytes:
        return hashlib.sha256(f"{len(user)}:{user}:{password}".encode()).digest()

    def remembered(self, user: str, password: str) -> bool | None:
        """True when this password passed before and the user's credential is unchanged;
        False when the user has no SCRAM credential at all; None when it must be checked."""
        found = [c for c in (self.lookup(m, user) for m in MECHANISMS) if c is not None]
        if not found:
            return False
        passed = self._passed.get(self._key(user, password))
        if passed is not None and any(passed is credential for credential in found):
            return True
        return None

    def check(self, user: str, password: str) -> sasl.ScramCredential | None:
        """The credential ``password`` matches, if any (slow: run it off the event loop; it
        changes nothing, so it may run in a thread)."""
        for mechanism in MECHANISMS:
            credential = self.lookup(mechanism, user)
            if credential is not None and verify(credential, mechanism, password):
                return credential
        return None

    def remember(self, user: str, password: str, credential: sasl.ScramCredential) -> None:
        """A pass of ``check``, for the next requests."""
        if len(self._passed) >= MAX_REMEMBERED:
            self._passed.clear()
        self._passed[self._key(user, password)] = credential
