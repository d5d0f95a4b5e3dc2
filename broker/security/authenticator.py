"""The SASL state of one connection on a SASL listener, as Kafka's SaslServerAuthenticator
keeps it: which mechanism, whether it has authenticated, and until when (KIP-368).

Until it authenticates, the server lets through only ApiVersions, SaslHandshake and
SaslAuthenticate (``SaslSession.allows``); the handlers of those two are in apis/sasl.py.

Each completed authentication is logged at INFO with the principal, mechanism and listener
(Kafka's SaslServerAuthenticator logs it at DEBUG; minibroker runs at INFO and has no per-logger
levels in its launcher, and one line per connection lets an operator see who came in how).
"""

import logging
import time
from dataclasses import dataclass, field

from minibroker.protocol import sasl
from minibroker.protocol.versions import ApiKey
from minibroker.security.listeners import ListenerSecurity
from minibroker.security.scram import ScramCredentials

# What a client may send before it has authenticated (and ApiVersions only then).
AUTHENTICATION_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS: re-authentications start at most this often.
MIN_REAUTH_INTERVAL_MS = 1000

log = logging.getLogger("sasl")


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass
class SaslSession:
    """The SASL state of one connection on a SASL listener."""

    # security.listeners.ListenerSecurity of the listener the connection came in on.
    security: ListenerSecurity
    credentials: ScramCredentials
    mechanism: str | None = None
    raw_token_pending: bool = False
    authenticated: bool = False
    # Monotonic ms after which only a re-authentication is accepted; None: never.
    expires_at_ms: int | None = None
    # Set when the last attempt failed: the server closes the connection after answering.
    failed: bool = False
    # Monotonic ms at which the last re-authentication began (KafkaChannel's
    # lastReauthenticationStartNanos); None before the first.
    reauth_started_ms: int | None = None
    _plain_done: bool = False
    _scram: sasl.ScramServer | None = field(default=None, repr=False)

    def allows(self, api_key: int) -> bool:
        """Whether a request of this key may be served now."""
        if api_key in AUTHENTICATION_APIS:
            return True
        if not self.authenticated:
            return api_key == ApiKey.API_VERSIONS
        return self.expires_at_ms is None or _now_ms() < self.expires_at_ms

    def may_reauthenticate(self) -> bool:
        """Kafka's KafkaChannel.maybeBeginServerReauthentication, for a SaslHandshake on an
        authenticated connection: only when the session has an expiry (the listener sets
        connections.max.reauth.ms), and not within a second of the last re-authentication's
        start. Otherwise Kafka answers the handshake ILLEGAL_SASL_STATE and keeps the
        connection, as its KafkaApis does for a handshake after authentication."""
        if self.expires_at_ms is None:
            return False
        now = _now_ms()
        if (
            self.reauth_started_ms is not None
            and now - self.reauth_started_ms < MIN_REAUTH_INTERVAL_MS
        ):
            return False
        self.reauth_started_ms = now
        return True

    def begin(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self._scram = None
        self._plain_done = False

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        """Feed one client token; return the reply and, when the exchange completed, the
        authenticated user. Raises sasl.SaslAuthenticationError."""
        if self.mechanism == sasl.PLAIN:
            if self._plain_done:
                raise sasl.SaslAuthenticationError("SASL/PLAIN exchange already complete")
            self._plain_done = True
            return b"", sasl.plain_server_authenticate(token, self.security.plain_users)
        if self._scram is None:
            mechanism = self.mechanism
            if mechanism is None:
                raise sasl.SaslAuthenticationError("SaslAuthenticate before SaslHandshake")
            self._scram = sasl.ScramServer(
                mechanism, lambda user: self.credentials.get(mechanism, user)
            )
        reply = self._scram.step(token)
        return reply, self._scram.username if self._scram.complete else None

    def finish(self, user: str, connection) -> None:
        principal = f"User:{user}"
        if self.authenticated and principal != connection.principal:
            # KIP-368: a re-authentication may not switch identities.
            raise sasl.SaslAuthenticationError("Cannot change principals during re-authentication")
        log.info(
            "%s %s with %s on listener %s",
            "re-authenticated" if self.authenticated else "authenticated",
            principal,
            self.mechanism,
            self.security.name,
        )
        connection.principal = principal
        self.authenticated = True
        self.raw_token_pending = False
        self.mechanism = None
        lifetime = self.security.max_reauth_ms
        self.expires_at_ms = _now_ms() + lifetime if lifetime else None
