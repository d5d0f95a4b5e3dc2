"""SaslHandshake and SaslAuthenticate: SASL authentication on SASL_PLAINTEXT/SASL_SSL
listeners, as Kafka's SaslServerAuthenticator runs it.

A connection on a SASL listener carries a ``SaslSession``. Until it authenticates, the server
lets through only ApiVersions, SaslHandshake and SaslAuthenticate and closes the connection on
anything else (``SaslSession.allows``). A failed authentication is answered with
SASL_AUTHENTICATION_FAILED and a message that names no user or secret, then the connection is
closed. With ``connections.max.reauth.ms`` (KIP-368) the session has a lifetime, told to the
client in SaslAuthenticate v1+; once it has passed, only a re-authentication is accepted.

A v0 SaslHandshake means the client sends the SASL tokens next as bare length-prefixed frames
without Kafka headers (``raw_token_pending``); the server loop hands those to ``raw_step``.
"""

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from minibroker.apis import CloseConnection, RequestContext, Role, api
from minibroker.protocol import sasl
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.scram import ScramCredentials

if TYPE_CHECKING:
    from minibroker.security.listeners import ListenerSecurity

# What a client may send before it has authenticated (and ApiVersions only then).
AUTHENTICATION_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass
class SaslSession:
    """The SASL state of one connection on a SASL listener."""

    # The security of the listener the connection came in on.
    security: "ListenerSecurity"
    credentials: ScramCredentials
    mechanism: str | None = None
    raw_token_pending: bool = False
    authenticated: bool = False
    # Monotonic ms after which only a re-authentication is accepted; None: never.
    expires_at_ms: int | None = None
    # Set when the last attempt failed: the server closes the connection after answering.
    failed: bool = False
    _plain_done: bool = False
    _scram: sasl.ScramServer | None = field(default=None, repr=False)

    def allows(self, api_key: int) -> bool:
        """Whether a request of this key may be served now."""
        if api_key in AUTHENTICATION_APIS:
            return True
        if not self.authenticated:
            return api_key == ApiKey.API_VERSIONS
        return self.expires_at_ms is None or _now_ms() < self.expires_at_ms

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
            # The handlers step a session only after its SaslHandshake has begun it.
            assert mechanism is not None, "a SASL token before the handshake"
            self._scram = sasl.ScramServer(
                mechanism, lambda user: self.credentials.get(mechanism, user)
            )
        reply = self._scram.step(token)
        return reply, self._scram.username if self._scram.complete else None

    def raw_step(self, token: bytes, connection) -> bytes:
        """A bare token after a v0 SaslHandshake; failures close the connection, as Kafka
        does (v0 has no way to carry an error)."""
        try:
            reply, user = self.step(token)
        except sasl.SaslAuthenticationError as error:
            raise CloseConnection(f"SASL authentication failed: {error}") from None
        if user is not None:
            self.finish(user, connection)
        return reply

    def finish(self, user: str, connection) -> None:
        principal = f"User:{user}"
        if self.authenticated and principal != connection.principal:
            # KIP-368: a re-authentication may not switch identities.
            raise sasl.SaslAuthenticationError("Cannot change principals during re-authentication")
        connection.principal = principal
        self.authenticated = True
        self.raw_token_pending = False
        self.mechanism = None
        lifetime = self.security.max_reauth_ms
        self.expires_at_ms = _now_ms() + lifetime if lifetime else None


def _handshake_error(request, error: Error) -> dict:
    return {"error_code": error, "mechanisms": ()}


# Not held until ready: every connection to a SASL listener authenticates first, the
# controller's and the brokers' own included.
@api(
    ApiKey.SASL_HANDSHAKE,
    versions=(0, 1),
    roles=Role.BOTH,
    held_until_ready=False,
    error_response=_handshake_error,
)
async def handle_handshake(ctx: RequestContext, request) -> dict:
    session: SaslSession | None = ctx.connection.sasl
    mechanisms = list(session.security.mechanisms) if session is not None else []
    if session is None:
        return {"error_code": Error.ILLEGAL_SASL_STATE, "mechanisms": mechanisms}
    mechanism = request.mechanism
    if mechanism not in mechanisms:
        session.failed = True  # the client cannot go on; Kafka closes the connection
        return {"error_code": Error.UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms}
    session.begin(mechanism)
    session.raw_token_pending = ctx.version == 0
    return {"error_code": Error.NONE, "mechanisms": mechanisms}


def _authenticate_error(request, error: Error) -> dict:
    return {"error_code": error, "auth_bytes": b"", "session_lifetime": 0}


@api(
    ApiKey.SASL_AUTHENTICATE,
    versions=(0, 2),
    roles=Role.BOTH,
    held_until_ready=False,
    error_response=_authenticate_error,
)
async def handle_authenticate(ctx: RequestContext, request) -> dict:
    session: SaslSession | None = ctx.connection.sasl
    if session is None or session.mechanism is None:
        if session is not None:
            session.failed = True
        return {
            "error_code": Error.ILLEGAL_SASL_STATE,
            "error_message": "Unexpected SaslAuthenticate request: no SaslHandshake before it",
            "auth_bytes": b"",
            "session_lifetime": 0,
        }
    try:
        reply, user = session.step(bytes(request.auth_bytes))
        if user is not None:
            session.finish(user, ctx.connection)
    except sasl.SaslAuthenticationError as error:
        session.failed = True
        return {
            "error_code": Error.SASL_AUTHENTICATION_FAILED,
            "error_message": str(error),
            "auth_bytes": b"",
            "session_lifetime": 0,
        }
    lifetime = session.security.max_reauth_ms if user is not None else 0
    return {
        "error_code": Error.NONE,
        "error_message": None,
        "auth_bytes": reply,
        "session_lifetime": lifetime,
    }
